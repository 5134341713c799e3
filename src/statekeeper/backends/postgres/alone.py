"""PostgreSQL's ``append_together`` of changes alone (``changes_alone_together``: a
tiered store's prune or rewrite committed with the check of the agent's demoted-agent
marker), settled exactly after a lost connection.

Changes leave nothing an append's read-back could find (a prune's events gone, a
rewrite's bytes, a check that wrote nothing). So each try learns its transaction id
(``txid_current()``) before its COMMIT is sent, and a try after a lost connection first
asks the server what became of the earlier ones (``txid_status``, as
:mod:`.deletes` does): one committed is the changes made — nothing sent again —, none
committed (the connection died before the COMMIT reached the server) and the changes
are sent again, within the backend's ``retry_timeout``. Before, any lost connection
there raised ``BackendError(maybe_applied=True)`` at once, where a plain ``prune`` or
``rewrite`` (the tiered store's path before) was retried and answered.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...records import AppendResult, StreamChange
from .deletes import committed
from .refusals import together_what
from .rolled_back import run_again

if TYPE_CHECKING:
    from .appends import Appends

__all__ = ["changes_alone", "txid"]


async def changes_alone(
    part: Appends, changes: Sequence[StreamChange]
) -> list[AppendResult | None]:
    """``changes`` in one transaction (:meth:`.appends.Appends._together`, given the
    list its tries' transaction ids go to), retried on a lost connection: a retry
    whose earlier try committed answers ``[]`` at once."""
    what = together_what((), changes)
    tries: list[int] = []

    async def op() -> list[AppendResult | None]:
        for done in tries:
            if await committed(part, what, done):
                part._wrote()
                part._feed.poke()
                return []  # an earlier try landed: its reply was lost
        return await run_again(lambda again: part._together((), changes, again, tries))

    return await part._retrying(what, op)


async def txid(conn: Any) -> int:
    """The id of ``conn``'s transaction (one assigned now: ``txid_current()``)."""
    cur = await conn.execute("SELECT txid_current()")
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])
