"""The lines of an export file (:mod:`.transfer`) read back for ``statekeeper import``:
every agent checked before anything is written (well-formed lines, seqs from 1 or its
base without gaps, an end line per agent, a creation first), each fault a
:class:`~statekeeper.errors.ConfigurationError` naming the file's line."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError, NonNormalAgentId, StatekeeperError
from .export_base import base_of
from .export_file import Ending
from .export_holds import hold_of

if TYPE_CHECKING:
    from ..records import Snapshot
    from ..store import StateStore
    from ..store.holds import Hold

__all__ = ["ImportedAgent", "creatable", "parse_lines"]


@dataclass
class ImportedAgent:
    agent_id: str
    events: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] | None = None
    #: the state at its retention base (its base line), None when it starts at seq 1
    base: Snapshot | None = None

    @property
    def data_key(self) -> bool:
        """False when the export says the source sealed the agent with no data key (under
        the master key alone: another store's ``forget`` of the id is not its)."""
        return (self.end or {}).get("data_key") is not False

    @property
    def lease_token(self) -> int:
        """The newest fencing token the source granted the agent (0: none said)."""
        token = (self.end or {}).get("lease_token", 0)
        return token if type(token) is int else 0

    @property
    def base_seq(self) -> int:
        return self.base.seq if self.base is not None else 0


def _why(exc: Exception, raw: bytes) -> str:
    """What the JSON parser found wrong with one line of the file, placed by its column
    in that line (the parser's own "line 1 column 8" counts lines of the one line it was
    given, and would stand next to the file's line number)."""
    reason, pos = getattr(exc, "msg", None), getattr(exc, "pos", None)
    if not isinstance(reason, str) or not isinstance(pos, int):
        return str(exc)
    if pos >= len(raw.decode("utf-8", "replace").rstrip()):
        return "the line ends before the object does"
    return f"{reason} at column {pos + 1}"


def parse_lines(
    store: StateStore,
    lines: Iterator[tuple[int, bytes]],
    ending: Ending | None = None,
    holds: list[Hold] | None = None,
) -> list[ImportedAgent]:
    """Every agent in the file, checked; ConfigurationError naming the line otherwise.
    ``ending``: what the header and completion line said (read after the call);
    ``holds``: where the file's legal holds go (:mod:`.export_holds`)."""
    agents: list[ImportedAgent] = []
    seen: set[str] = set()
    current: ImportedAgent | None = None
    ending = ending if ending is not None else Ending()
    for number, raw in lines:
        if not raw.strip():
            continue
        try:
            line = store.codec.copy_loads(raw)
        except Exception as exc:
            raise ConfigurationError(
                f"line {number}: not a JSON object: {_why(exc, raw)}"
            ) from None
        if not isinstance(line, dict):
            raise ConfigurationError(f"line {number}: not a JSON object")
        if not ending.version:
            ending.header(number, line)
            continue
        if ending.line(number, line, current.agent_id if current is not None else None):
            continue
        ending.seen(raw)
        if "end" in line:
            if current is None or line["end"] != current.agent_id:
                raise ConfigurationError(f"line {number}: end line for an agent not started")
            if current.base is not None and not current.events:
                raise ConfigurationError(
                    f"line {number}: agent {current.agent_id!r} has a base but no event after it"
                )
            if line.get("seq") != current.base_seq + len(current.events):
                raise ConfigurationError(
                    f"line {number}: agent {current.agent_id!r} ends at seq {line.get('seq')!r}"
                    f" but has {len(current.events)} event(s)"
                    + (f" after its base at seq {current.base_seq}" if current.base else "")
                )
            token = line.get("lease_token", 1)
            if type(token) is not int or token < 1:
                raise ConfigurationError(
                    f"line {number}: agent {current.agent_id!r}: lease_token {token!r}"
                    " is not a fencing token (an int >= 1)"
                )
            current.end = line
            current = None
            continue
        if "hold" in line:
            if current is not None:
                raise ConfigurationError(
                    f"line {number}: agent {current.agent_id!r} has no end line"
                )
            if holds is not None:
                holds.append(hold_of(number, line))
            continue
        if "base" in line:
            base = base_of(number, line)
            if current is not None:
                raise ConfigurationError(
                    f"line {number}: agent {current.agent_id!r} has no end line"
                    if current.agent_id != base.agent_id
                    else f"line {number}: a base line after events of {base.agent_id!r}"
                )
            if base.agent_id in seen:
                raise ConfigurationError(f"line {number}: agent {base.agent_id!r} appears twice")
            seen.add(base.agent_id)
            current = ImportedAgent(base.agent_id, base=base)
            agents.append(current)
            continue
        agent_id, seq = line.get("agent_id"), line.get("seq")
        if (
            not isinstance(agent_id, str)
            or type(seq) is not int
            or not isinstance(line.get("type"), str)
            or not isinstance(line.get("ts"), int | float)
            or not isinstance(line.get("info"), dict)
            or not isinstance(line.get("ops"), list)
        ):
            raise ConfigurationError(
                f"line {number}: an event needs agent_id, seq, type, ts, info and ops"
            )
        if current is None or current.agent_id != agent_id:
            if current is not None:
                raise ConfigurationError(
                    f"line {number}: agent {current.agent_id!r} has no end line"
                )
            if agent_id in seen:
                raise ConfigurationError(f"line {number}: agent {agent_id!r} appears twice")
            seen.add(agent_id)
            current = ImportedAgent(agent_id)
            agents.append(current)
        if seq != current.base_seq + len(current.events) + 1:
            raise ConfigurationError(
                f"line {number}: agent {agent_id!r} seq {seq} "
                f"(expected {current.base_seq + len(current.events) + 1})"
            )
        if seq == 1:
            line = _creation(number, line)
        current.events.append(line)
    if not ending.version:
        raise ConfigurationError("empty, not a statekeeper export (no header line)")
    if current is not None:
        raise ConfigurationError(f"agent {current.agent_id!r} has no end line (truncated file?)")
    ending.finish(len(agents), sum(len(a.events) for a in agents))
    return agents


def _creation(number: int, line: dict[str, Any]) -> dict[str, Any]:
    """The first event of an agent, as the import writes it: a creation, whose JSON Patch
    replaces the whole document. One that a schema migration rewrote carries the upcast
    after that replace: it is folded into it (the same state, one replace)."""
    ops = line["ops"]
    if not (
        not line["info"]
        and ops
        and all(isinstance(op, dict) for op in ops)
        and ops[0].get("op") == "replace"
        and ops[0].get("path") == ""
        and isinstance(ops[0].get("value"), dict)
    ):
        raise ConfigurationError(
            f"line {number}: the first event of {line['agent_id']!r} is not a creation"
        )
    if len(ops) == 1:
        return line
    from .. import patch

    try:
        value = patch.apply(copy.deepcopy(ops[0]["value"]), copy.deepcopy(ops[1:]))
    except StatekeeperError as exc:
        raise ConfigurationError(
            f"line {number}: the first event of {line['agent_id']!r}, after its replace: {exc}"
        ) from None
    if not isinstance(value, dict):
        raise ConfigurationError(
            f"line {number}: the first event of {line['agent_id']!r} is not a creation"
        )
    return {**line, "ops": [{"op": "replace", "path": "", "value": value}]}


def creatable(store: StateStore, agent_id: str) -> None:
    """Refuse, before anything is imported, an agent the file would create under an id
    that is not normal (:func:`statekeeper.arguments.check_new_agent_id`)."""
    from ..arguments import check_new_agent_id
    from ..store.namespaced import stored_id

    try:
        check_new_agent_id(stored_id(store, agent_id))
    except NonNormalAgentId as exc:
        raise NonNormalAgentId(f"{exc}; nothing was imported", agent_id) from None
