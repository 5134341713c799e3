"""What ``audit verify`` checks of the legal holds: no purge passed a hold in force.

A hold is placed and released with an entry each (``hold``, ``release-hold``, written
first, the pattern in ``detail``) and kept in the store's holds stream, which every
purge reads: ``delete`` (and so a retention ``purge``, ``forget --purge``, a LangGraph
thread's deletion, schema expiry), ``forget``, retention's ``compact`` and ``thin`` all
refuse or pass over an agent a hold covers. So an entry of one of them for an agent that
a hold the log placed (and did not release) covers is a purge no hold check saw: the
store's holds no longer held it — its stream deleted or rolled back without the audit
log (the log recorded none of that), or its record never written (a process stopped
between the hold's entry and its record) — and the held agent's history is gone all
the same. Each is a problem, named once per agent and hold; entries voided afterwards
(``detail.voids``: the change failed) count for nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..store.holds import Hold

if TYPE_CHECKING:
    from .audit import AuditEntry

__all__ = ["HoldChecks"]

#: the entries of a change no held agent may undergo
_PURGES = frozenset({"delete", "purge", "compact", "thin", "forget"})


class HoldChecks:
    """Gathers the hold entries and the purges after the first (:meth:`see`, in log
    order), then names the purges of held agents (:meth:`problems`)."""

    __slots__ = ("events",)

    def __init__(self) -> None:
        #: (entry seq, operation, pattern for a hold or its release, agent for a purge)
        self.events: list[tuple[int, str, str]] = []

    def see(self, entry: AuditEntry) -> None:
        if not entry.outcome.startswith(("ok", "done")):
            return  # refused, failed, a dry run: nothing changed
        operation = entry.operation
        if operation in ("hold", "release-hold"):
            pattern = entry.detail.get("pattern")
            if isinstance(pattern, str):
                self.events.append((entry.seq, operation, pattern))
        elif operation in _PURGES and entry.agent_id is not None and self.events:
            self.events.append((entry.seq, operation, entry.agent_id))

    def problems(self, voided: set[int]) -> list[str]:
        in_force: dict[str, int] = {}  # pattern -> the entry that placed it
        named: set[tuple[str, int]] = set()
        found: list[str] = []
        for seq, operation, name in self.events:
            if seq in voided:
                continue
            if operation == "hold":
                in_force.setdefault(name, seq)
            elif operation == "release-hold":
                in_force.pop(name, None)
            else:
                for pattern, placed in in_force.items():
                    if (name, placed) in named or not Hold(pattern, "").covers(name):
                        continue
                    named.add((name, placed))
                    found.append(
                        f"{name!r}: {operation} (entry {seq}) while the legal hold "
                        f"{pattern!r} (entry {placed}) was in force: no purge passes a "
                        "hold, so the store's holds lacked it (deleted or rolled back "
                        "without the audit log, or its record never written)"
                    )
        return found
