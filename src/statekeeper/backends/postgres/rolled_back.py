"""An ``append_together`` the server rolled back whole (a deadlock, a serialization
failure) runs again: nothing of it committed, so that is safe.

Before, it failed with :class:`~statekeeper.errors.BackendError` ("atomic append
failed: deadlock detected"): an import's absence check (claiming its agents' head rows
in id order) deadlocked with a writer creating the same agents in another order (a
group commit of several new agents), and the import failed saying nothing of the
agents created; run again, it sees them (the ConflictError naming one).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

import psycopg

from ...errors import StatekeeperError

__all__ = ["ROLLED_BACK", "RolledBack", "Undo", "run_again"]

T = TypeVar("T")

#: failures that roll a transaction back whole
ROLLED_BACK = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)
#: tries in all
TRIES = 5


class RolledBack(StatekeeperError):
    """Raised by a try given ``again=True`` for a ``ROLLED_BACK`` failure: try again.
    Internal; never reaches a caller."""


async def run_again(attempt: Callable[[bool], Awaitable[T]]) -> T:
    """``attempt(again)`` until it does not raise :class:`RolledBack`; its last try is
    given ``again=False`` (and fails as it would have)."""
    for _ in range(TRIES - 1):
        with contextlib.suppress(RolledBack):
            return await attempt(True)
    return await attempt(False)


class Undo(StatekeeperError):
    """Rolls :meth:`.appends.Appends.append_together`'s transaction back (a duplicate).

    Internal control flow: raised and caught inside one ``async with
    conn.transaction()``; it never reaches a caller.
    """
