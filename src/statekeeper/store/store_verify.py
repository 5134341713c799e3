"""The store's checks of what it holds: the witness's marks, orphaned events,
:meth:`StateStore.verify`, and the digests that commit to a stream (what each
checks is in :mod:`.verification`, :mod:`.digests` and :mod:`.witnessing`).

Methods of :class:`~.store.StateStore`, written here as functions and bound in its class
body (as :func:`.copies.public_copy` is in :class:`~.reads.ReadPath`; a subclass
overrides them as any method). They take ``self: StateStore``: they hand the store to
the tools typed for it. A function here never shares its name with a global it calls
(``tests/store/test_store_parts.py``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

from ..arguments import check_agent_id, check_seq
from ..errors import InvalidArgument
from . import digests, verification
from .digests import StreamDigest
from .verification import Problem, VerifyReport

if TYPE_CHECKING:
    from .store import StateStore

__all__ = ["check_digest", "digest", "orphan_problems", "verify", "witness_problems"]


async def witness_problems(self: StateStore, agent_ids: list[str] | None = None) -> list[Problem]:
    """Check every mark of the store's witness (only those of ``agent_ids`` when
    given) without raising: one :class:`Problem` per stream that went back in time
    (or for a witness file that cannot be used). Empty without a witness."""
    self._check_open()
    return await self._gate.problems(self, agent_ids)


async def orphan_problems(self: StateStore, verified: Collection[str] = ()) -> list[Problem]:
    """One :class:`Problem` (kind ``"orphan"``) per agent whose events are stored
    without a head row (a hand edit, a damaged copy): no read, listing or export
    sees them. ``verified``: agents checked already (their events above the head
    are their own check's finding). Empty on an engine that cannot tell (SQLite
    and PostgreSQL can). :meth:`verify` of the whole store includes them."""
    self._check_open()
    from .verification import orphans

    return await orphans(self, set(verified))


async def verify(self: StateStore, agent_ids: list[str] | None = None) -> VerifyReport:
    """Check every stored record: its authentication (checksum or AEAD tag), the
    chain from seq 1 to the head, gap-free seqs, the authenticated head, and that
    every snapshot belongs to the chain and equals the fold of the events before it.
    Every mark of the store's witness (of ``agent_ids``, or all) is checked too:
    a stream that went back in time is a problem.
    """
    self._check_open()
    if agent_ids is not None:
        if isinstance(agent_ids, str) or not isinstance(agent_ids, Iterable):
            raise InvalidArgument(
                "agent_ids",
                f"agent_ids must be a list of agent ids or None, not {type(agent_ids).__name__}",
            )
        agent_ids = [check_agent_id(a, "agent_ids[]") for a in agent_ids]
    await self.flush()
    with self.backend.in_place():  # (a tiered store's demoted agents stay cold)
        return await verification.verify_store(self, agent_ids)


async def digest(self: StateStore, agent_id: str, at_seq: int | None = None) -> StreamDigest:
    """A commitment to the agent's stream up to ``at_seq`` (default: the head),
    verified on the way (every record from the nearest snapshot, and the head tag
    when at the head). Two digests at the same seq are equal if and only if the
    records up to it are the same: kept outside the store (a *witness*, see
    :mod:`statekeeper.security.witness`), it detects a rollback or rewrite later.
    """
    self._check_open()
    check_agent_id(agent_id)
    check_seq(at_seq, "at_seq", optional=True)
    await self._ready()
    await self._flush_agent(agent_id)
    return await digests.digest(self, agent_id, at_seq)


async def check_digest(self: StateStore, expected: StreamDigest) -> str | None:
    """None when the stream still holds what ``expected`` committed to (it may have
    grown since); else what is wrong (shorter now, or different records)."""
    self._check_open()
    if not isinstance(expected, StreamDigest):
        raise InvalidArgument(
            "expected",
            f"expected must be a StreamDigest (from digest()), not {type(expected).__name__}",
        )
    check_agent_id(expected.agent_id, "expected.agent_id")
    check_seq(expected.seq, "expected.seq", minimum=1)
    await self._flush_agent(expected.agent_id)
    return await digests.check_digest(self, expected)
