"""The legal holds of ``statekeeper export`` / ``import`` (see :mod:`.transfer`).

The holds are a stream of the store's own, not an agent: an export that carried only
the agents delivered a held agent unheld, and the target's next retention run,
``delete`` or ``forget`` could destroy what a court asked to keep. An export now writes,
after its agents, one line per hold covering what it exports,
``{"hold": PATTERN, "reason", "placed_by", "placed_at"}``, and ``import`` places each
one the target lacks before it writes any agent (as a restore places a backup's:
its reason, who placed it and when are the export's, and the hold names the file,
``restored_from``; audited as any hold). Holds the target has are kept as they are.

Patterns are in the file's ids, as its agents are: relative to ``--namespace`` when
the export ran in one, placed below the target's namespace by the import. A hold
that cannot be named there (one on the namespace itself, ``acme/*`` for an export in
``acme``, or on a wider one) is written once per exported agent it covers, so every
agent held in the source arrives held. An export of the whole store carries every
hold (one on a namespace holding no agent yet too); an export of named agents, the
holds covering them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError, InvalidArgument
from ..store.holds import Hold, check_pattern
from ..store.namespaced import NamespacedStateStore

if TYPE_CHECKING:
    from ..store import StateStore

__all__ = ["HeldLines", "hold_of", "place_holds"]


def _prefix(store: StateStore) -> str:
    if isinstance(store, NamespacedStateStore) and store.namespace:
        return store.namespace + "/"
    return ""


def _file_pattern(pattern: str, prefix: str) -> str | None:
    """``pattern`` (full ids) in the file's ids, None when it cannot be named there."""
    if not prefix:
        return pattern
    if not pattern.startswith(prefix):
        return None
    rest = pattern[len(prefix) :]
    return rest if rest != "*" else None  # (the namespace itself: no relative name)


class HeldLines:
    """The hold lines of one export: ``agent`` for each agent written, then ``lines``."""

    def __init__(self, store: StateStore, holds: tuple[Hold, ...], *, whole: bool) -> None:
        self._prefix = _prefix(store)
        self._store = store
        self._named: list[tuple[Hold, str | None]] = [
            (h, _file_pattern(h.pattern, self._prefix)) for h in holds
        ]
        self._lines: dict[str, dict[str, Any]] = {}
        if whole:  # every hold that can be named, held agents or not
            for hold, pattern in self._named:
                if pattern is not None:
                    self._lines.setdefault(pattern, _line(hold, pattern))

    def agent(self, agent_id: str) -> None:
        """``agent_id`` (as the file names it) was exported."""
        if not self._named:
            return
        full = self._prefix + agent_id
        for hold, pattern in self._named:
            if hold.covers(full):
                name = pattern if pattern is not None else agent_id
                self._lines.setdefault(name, _line(hold, name))

    def lines(self) -> list[dict[str, Any]]:
        return list(self._lines.values())


def _line(hold: Hold, pattern: str) -> dict[str, Any]:
    return {
        "hold": pattern,
        "reason": hold.reason,
        "placed_by": hold.principal,
        "placed_at": hold.at,
    }


def hold_of(number: int, line: dict[str, Any]) -> Hold:
    """The hold line at ``number``, checked; ConfigurationError naming the line."""
    pattern, reason = line.get("hold"), line.get("reason")
    placed_by, placed_at = line.get("placed_by"), line.get("placed_at")
    try:
        check_pattern(pattern)
    except InvalidArgument as exc:
        raise ConfigurationError(f"line {number}: {exc}") from None
    if (
        not isinstance(reason, str)
        or not reason.strip()
        or not (placed_by is None or isinstance(placed_by, str))
        or not isinstance(placed_at, int | float)
        or isinstance(placed_at, bool)
        or not math.isfinite(placed_at)
    ):
        raise ConfigurationError(
            f"line {number}: a hold line needs hold (a pattern), reason, placed_by and placed_at"
        )
    assert isinstance(pattern, str)
    return Hold(pattern, reason, placed_by, float(placed_at))


async def place_holds(store: StateStore, holds: list[Hold], source: str) -> list[str]:
    """Place in ``store`` each of ``holds`` (the file's) it does not hold; the patterns
    placed, as the file names them."""
    from ..governance.holds import carry_hold, list_holds

    if not holds:
        return []
    prefix = _prefix(store)
    have = {h.pattern for h in await list_holds(store)}
    placed = []
    for hold in holds:
        full = prefix + hold.pattern
        if full in have:
            continue
        carried = Hold(full, hold.reason, hold.principal, hold.at)
        if await carry_hold(store, carried, source):
            placed.append(hold.pattern)
    return placed
