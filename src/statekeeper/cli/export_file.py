"""The first and last lines of a ``statekeeper export`` file (see :mod:`.transfer`).

The header names the format and its version. Version 2 ends the file with a
completion line, ``{"complete": {"agents": N, "events": E}}``, written once every
agent is out: a file cut short (an export to stdout interrupted, or failing after
some agents, its partial output kept by the shell) ends at some agent's end line
and would otherwise read as a whole export of fewer agents. ``import`` refuses a
version-2 file without it, or whose counts differ from what it read. Version 1
files (written before the completion line) are still read, as they always were.

The completion line also carries ``"sha256"``: the SHA-256 of every line between the
header and it (each line's bytes without its line break, then ``\n``; the header, which
holds the time of the export, is left out, so two exports of the same agents digest
the same). The file is a plain copy of
the records, decrypted, outside the store's chains: a byte changed in transit (a
step's recorded result, a message) would otherwise be imported, verified against
itself and stored as if it were the source's. ``import`` refuses a file whose lines do
not digest to it, before anything is written. It detects damage, not a forger (who
can digest an edited file again: keep an export where only you can write it). A
completion line without it (an export written before it existed) is read as before.

Version 3 end lines may carry ``"lease_token"``: the agent's newest fencing token at
the source (see :mod:`.transfer`). An older reader would import the file dropping
them, the target handing out tokens the source already granted, with nothing said:
the version tells it the file is not one it reads. Versions 1 and 2 (no tokens) are
read as before: the target's tokens then start as they do for a new agent.
"""

from __future__ import annotations

import hashlib
from typing import IO, TYPE_CHECKING, Any

from ..errors import ConfigurationError

if TYPE_CHECKING:
    from ..store import StateStore

__all__ = [
    "FORMAT",
    "VERSION",
    "Ending",
    "Sealed",
    "completion_line",
    "header_line",
    "store_header",
]

FORMAT = "statekeeper-export"
VERSION = 3
_READABLE = (1, 2, 3)


def header_line(
    exported_at: str, *, encrypted: bool = False, key_family: str | None = None
) -> dict[str, Any]:
    """The first line; ``"encrypted": true`` when the source store is encrypted (its
    records are in the file decrypted: ``import`` warns when it stores them in a store
    that is not); ``"key_family"``: the source store's key family (its data keys in the
    key vault, :mod:`statekeeper.codec.keyscope`: ``import`` passes over an agent the
    source's ``forget`` shredded since). A reader that does not know a key ignores it:
    the version is unchanged."""
    line: dict[str, Any] = {"format": FORMAT, "version": VERSION, "exported_at": exported_at}
    if encrypted:
        line["encrypted"] = True
    if key_family is not None:
        line["key_family"] = key_family
    return line


async def store_header(store: StateStore, exported_at: str) -> dict[str, Any]:
    """:func:`header_line` of an export of ``store``: whether it is encrypted, its key
    family (import honours the forgets made in it since)."""
    from ..store.keyguard import key_family

    family = await key_family(store.backend, store.codec)
    return header_line(exported_at, encrypted=store.codec.encrypted, key_family=family)


def completion_line(agents: int, events: int, sha256: str) -> dict[str, Any]:
    return {"complete": {"agents": agents, "events": events, "sha256": sha256}}


def _line_bytes(raw: bytes) -> bytes:
    """What the digest covers of one line: its bytes without the line break (a file
    whose line breaks became CRLF in transit holds the same lines)."""
    return raw.rstrip(b"\r\n") + b"\n"


class Sealed:
    """The output of an export: every line written is digested for the completion
    line (``digest``)."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self._hash = hashlib.sha256()

    def write(self, line: bytes) -> None:
        self._hash.update(_line_bytes(line))
        self._out.write(line)

    def digest(self) -> str:
        return self._hash.hexdigest()


class Ending:
    """Checks the header and the completion line while a file is parsed."""

    def __init__(self) -> None:
        self.version = 0  # no header yet
        #: the header says the source store was encrypted
        self.encrypted = False
        #: the source store's key family (None: not named)
        self.key_family: str | None = None
        self.complete: dict[str, Any] | None = None
        self._hash = hashlib.sha256()
        #: the completion line's number when the lines before it do not digest to its sha256
        self._altered = 0

    def seen(self, raw: bytes) -> None:
        """``raw``, a line between the header and the completion line, digested."""
        self._hash.update(_line_bytes(raw))

    def header(self, number: int, line: dict[str, Any]) -> None:
        if line.get("format") != FORMAT or line.get("version") not in _READABLE:
            raise ConfigurationError(
                f"line {number}: not a statekeeper export (format {FORMAT!r} "
                f"version {' or '.join(map(str, _READABLE))} expected)"
            )
        self.version = line["version"]
        self.encrypted = line.get("encrypted") is True
        family = line.get("key_family")
        self.key_family = family if isinstance(family, str) and family else None

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
        sealed = counts.get("sha256")
        if sealed is not None and sealed != self._hash.hexdigest():
            self._altered = number  # (said by finish, after what names the damage better)
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
        if self._altered:
            raise ConfigurationError(
                f"line {self._altered}: the lines before it do not digest to the SHA-256 its"
                " export wrote in this completion line: the file was altered or damaged after"
                " the export; nothing was imported (export it again)"
            )
