"""The first and last lines of a ``statekeeper export`` file (see :mod:`.transfer`).

The header names the format and its version. Version 2 ends the file with a
completion line, ``{"complete": {"agents": N, "events": E}}``, written once every
agent is out: a file cut short (an export to stdout interrupted, or failing after
some agents, its partial output kept by the shell) ends at some agent's end line
and would otherwise read as a whole export of fewer agents. ``import`` refuses a
version-2 file without it, or whose counts differ from what it read. Version 1
files (written before the completion line) are still read, as they always were.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigurationError

__all__ = ["FORMAT", "VERSION", "Ending", "completion_line", "header_line"]

FORMAT = "statekeeper-export"
VERSION = 2
_READABLE = (1, 2)


def header_line(exported_at: str, *, encrypted: bool = False) -> dict[str, Any]:
    """The first line; ``"encrypted": true`` when the source store is encrypted (its
    records are in the file decrypted: ``import`` warns when it stores them in a store
    that is not). A reader that does not know the key ignores it: the version is
    unchanged."""
    line: dict[str, Any] = {"format": FORMAT, "version": VERSION, "exported_at": exported_at}
    if encrypted:
        line["encrypted"] = True
    return line


def completion_line(agents: int, events: int) -> dict[str, Any]:
    return {"complete": {"agents": agents, "events": events}}


class Ending:
    """Checks the header and the completion line while a file is parsed."""

    def __init__(self) -> None:
        self.version = 0  # no header yet
        #: the header says the source store was encrypted
        self.encrypted = False
        self.complete: dict[str, Any] | None = None

    def header(self, number: int, line: dict[str, Any]) -> None:
        if line.get("format") != FORMAT or line.get("version") not in _READABLE:
            raise ConfigurationError(
                f"line {number}: not a statekeeper export (format {FORMAT!r} "
                f"version {' or '.join(map(str, _READABLE))} expected)"
            )
        self.version = line["version"]
        self.encrypted = line.get("encrypted") is True

    def line(self, number: int, line: dict[str, Any], open_agent: str | None) -> bool:
        """Whether ``line`` is the completion line (checked); any line after it is
        refused."""
        if self.complete is not None:
            raise ConfigurationError(f"line {number}: a line after the completion line")
        if "complete" not in line or self.version < 2:
            return False
        counts = line["complete"]
        if not isinstance(counts, dict) or not all(
            type(counts.get(k)) is int for k in ("agents", "events")
        ):
            raise ConfigurationError(f"line {number}: a completion line needs agents and events")
        if open_agent is not None:
            raise ConfigurationError(f"line {number}: agent {open_agent!r} has no end line")
        self.complete = counts
        return True

    def finish(self, agents: int, events: int) -> None:
        """At the end of the file: a version-2 file must have ended complete, with the
        counts it read."""
        if self.version < 2:
            return
        if self.complete is None:
            raise ConfigurationError(
                f"the file ends after {agents} agent(s) without its completion line: "
                "a truncated export (re-export it)"
            )
        if (self.complete["agents"], self.complete["events"]) != (agents, events):
            raise ConfigurationError(
                f"the completion line counts {self.complete['agents']} agent(s) and "
                f"{self.complete['events']} event(s), the file holds {agents} and {events}"
            )
