"""Repair: rebuild damaged snapshots from the verified events (``statekeeper repair``).

A snapshot is a cache of the fold of an agent's events: when one is damaged, loads
fall back to an older snapshot or a full replay (and log a warning), and
:meth:`~statekeeper.store.StateStore.verify` reports it. :func:`repair` puts the cache
right: for every agent it runs ``verify``; when the agent's events, chain and head all
verify, every snapshot that failed — damaged bytes, a delta whose base is damaged, a
snapshot that does not belong to the chain or differs from the replay — is rebuilt,
whole, from a full replay of the verified events, and stored in place of the old one
(same seq). It is a dry run unless ``apply=True``: nothing is written, and the report
lists what would change.

What repair never does: change an event, a head or an idempotency record, or rebuild
anything of an agent whose events do not verify (the replay would not be trustworthy).
Those problems are reported as :attr:`RepairReport.unrepairable`; restoring from a
backup is the way out for them.

>>> import asyncio
>>> from statekeeper import StateStore
>>> async def demo():
...     async with StateStore("memory://", snapshot_every=2) as store:
...         for n in range(1, 5):
...             await store.save("a-1", {"n": n})
...         return await repair(store)
>>> report = asyncio.run(demo())
>>> report.ok, report.changes, report.snapshots
(True, [], 2)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..arguments import check_agent_id
from ..codec import ZERO_LINK
from ..errors import (
    AgentNotFound,
    ConflictError,
    DecryptionError,
    IntegrityError,
    InvalidArgument,
    SerializationError,
)
from ..records import RawSnapshot, StreamChange
from .governed import governance_of
from .state import AgentRecord
from .verification import Problem

if TYPE_CHECKING:
    from .store import StateStore

__all__ = ["Change", "RepairReport", "changed_meanwhile", "repair", "repair_agent", "vanished"]

_PAST_THE_END = "past the stream's end"


@dataclass(frozen=True, slots=True)
class Change:
    """One snapshot that repair rebuilt (or, in a dry run, would rebuild)."""

    agent_id: str
    seq: int
    #: what was wrong with the stored snapshot (from verify)
    reason: str
    action: str = "rebuild snapshot from the verified events"


@dataclass(slots=True)
class RepairReport:
    """What :func:`repair` looked at, changed (or would change), and could not fix."""

    applied: bool = False
    agents: int = 0
    events: int = 0
    snapshots: int = 0
    changes: list[Change] = field(default_factory=list)
    #: problems repair does not fix (damaged events, heads, idempotency records, or
    #: snapshots of an agent whose events do not verify); after an applied repair, also
    #: anything verify still finds
    unrepairable: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing is left that repair cannot fix."""
        return not self.unrepairable

    @property
    def run_again(self) -> list[Problem]:
        """The :attr:`unrepairable` rows that are snapshots left unwritten because their
        agent changed while repair ran: not damage a backup must cure, but repairs a
        new run makes (or finds no longer needed)."""
        return [p for p in self.unrepairable if changed_meanwhile(p)]

    def add(self, other: RepairReport) -> None:
        """Add another report's counts and findings to this one."""
        self.agents += other.agents
        self.events += other.events
        self.snapshots += other.snapshots
        self.changes.extend(other.changes)
        self.unrepairable.extend(other.unrepairable)


async def repair(
    store: StateStore,
    agent_ids: Iterable[str] | None = None,
    *,
    apply: bool = False,
    progress: Callable[[str, RepairReport], None] | None = None,
) -> RepairReport:
    """Check every agent (or ``agent_ids``) and rebuild its damaged snapshots from its
    verified events — only with ``apply=True``; by default a dry run that writes nothing.

    ``progress(agent_id, report_of_that_agent)`` is called after each agent.
    """
    if agent_ids is not None:  # every id checked before anything is rebuilt
        if isinstance(agent_ids, str) or not isinstance(agent_ids, Iterable):
            raise InvalidArgument(
                "agent_ids", f"agent_ids must be a list of agent ids or None, not {agent_ids!r:.40}"
            )
        agent_ids = [check_agent_id(a, "agent_ids[]") for a in agent_ids]
    if progress is not None and not callable(progress):
        raise InvalidArgument("progress", "progress must be callable or None")
    total = RepairReport(applied=apply)
    whole = agent_ids is None
    if agent_ids is None:
        agent_ids = [info.agent_id async for info in store.iter_agents()]
    for agent_id in agent_ids:
        one = await repair_agent(store, agent_id, apply=apply)
        total.add(one)
        if progress is not None:
            progress(agent_id, one)
    if whole:
        total.unrepairable.extend(await vanished(store, set(agent_ids)))
    return total


async def head_or_none(store: StateStore, agent_id: str) -> int | None:
    """The agent's head; None when reading it is an :class:`IntegrityError` (on S3, its
    newest commits deleted by something else): ``verify`` names that as the agent's
    problem, one repair cannot fix — not a failure of the whole run. A record that does
    not decrypt (a wrong key: ``DecryptionError``) is raised."""
    try:
        return await store.head(agent_id)
    except IntegrityError as exc:
        if isinstance(exc, DecryptionError):
            raise
        return None


async def vanished(store: StateStore, listed: set[str]) -> list[Problem]:
    """The streams the store's witness saw that are not among ``listed`` (every agent
    a whole-store run looked at): gone back in time, which no rebuilt snapshot cures."""
    return [p for p in await store.witness_problems() if p.agent_id not in listed]


async def repair_agent(store: StateStore, agent_id: str, *, apply: bool = False) -> RepairReport:
    """:func:`repair` for one agent (raises :class:`AgentNotFound` when it has no stream)."""
    report = RepairReport(applied=apply, agents=1)
    governance = governance_of(store)
    if governance is not None and apply:  # rewriting snapshots: admin of the namespace
        await governance.require(agent_id, "admin", "repair")
    if await head_or_none(store, agent_id) == 0:
        raise AgentNotFound(agent_id)
    found = await store.verify([agent_id])
    report.events, report.snapshots = found.events, found.snapshots
    snapshot_problems = [
        p
        for p in found.problems
        if p.kind == "snapshot" and p.seq is not None and _PAST_THE_END not in p.reason
    ]
    others = [p for p in found.problems if p not in snapshot_problems]
    report.unrepairable.extend(others)
    if any(p.kind != "idempotency" for p in others):
        # events, chain or head are damaged: a replay of them is not to be trusted
        report.unrepairable.extend(snapshot_problems)
        return report
    reasons: dict[int, str] = {}
    for p in snapshot_problems:
        assert p.seq is not None
        reasons.setdefault(p.seq, p.reason)
    if not reasons:
        return report
    report.changes.extend(Change(agent_id, seq, reasons[seq]) for seq in sorted(reasons))
    if not apply:
        return report
    async with store._writes.lock(agent_id):  # (this process's writers only)
        skipped = await _write_rebuilt(store, agent_id, sorted(reasons))
        store._reads.forget(agent_id)
    report.unrepairable.extend(skipped)
    unwritten = {p.seq for p in skipped}
    report.changes = [c for c in report.changes if c.seq not in unwritten]
    after = await store.verify([agent_id])
    report.unrepairable.extend(p for p in after.problems if p not in others)
    return report


async def _write_rebuilt(store: StateStore, agent_id: str, seqs: list[int]) -> list[Problem]:
    """Rebuild and write the snapshots at ``seqs``; those not written, as problems.

    Each is written only while the event at its seq is the one the replay folded: an
    agent deleted and written again by another process since verify is another
    stream, and a snapshot of the old one, written into it, would replace the new
    stream's own snapshot (verify failing on a healthy agent, its loads warning and
    falling back to a full replay). Such a snapshot is left unwritten and named
    ("run repair again"), as is every one when the replay no longer verifies."""
    try:
        rebuilt = await _rebuilt(store, agent_id, seqs)
    except IntegrityError as exc:
        if isinstance(exc, DecryptionError):
            raise
        return [Problem(agent_id, seq, _changed(exc.reason), "snapshot") for seq in seqs]
    skipped: list[Problem] = []
    for raw, link in rebuilt:
        try:
            if await _event_has_link(store, agent_id, raw.seq, link):
                await _store_rebuilt(store, agent_id, raw)
                continue
        except ConflictError:  # (the engine's own check: no event at the seq)
            pass
        reason = _changed("the event at this seq is gone or another stream's")
        skipped.append(Problem(agent_id, raw.seq, reason, "snapshot"))
    return skipped


async def _store_rebuilt(store: StateStore, agent_id: str, raw: RawSnapshot) -> None:
    """Store a rebuilt snapshot in place of the damaged one. On a store with an audit
    log it is a mutation like any other: recorded as a ``repair`` entry naming the
    record it stored (seq and checksum, as a ``snapshot`` entry does, so that
    ``audit verify`` checks it and takes it as the replacement of the snapshot an
    earlier entry named), in one commit with it where the engine has one, else the
    entry first (voided when the write fails)."""
    gov = governance_of(store)
    sink = getattr(gov, "audit", None)
    if gov is None or sink is None:
        await store.backend.save_snapshot(agent_id, raw)
        return
    named = [raw.seq, raw.checksum.hex()]
    if getattr(sink, "records_with_writes", False) and callable(
        getattr(sink, "record_with_change", None)
    ):
        await sink.record_with_change(
            StreamChange(agent_id, snapshot=raw), "repair", principal=gov.principal,
            first_seq=raw.seq, last_seq=raw.seq, detail={"snapshot": named},
        )  # fmt: skip
        return
    entry = await gov.ahead("repair", agent_id, mark={"snapshot": named})
    if entry is None:  # a sink that cannot record ahead: after the write
        await store.backend.save_snapshot(agent_id, raw)
        await gov.record("repair", agent_id, detail={"snapshot": named})
        return
    try:
        await store.backend.save_snapshot(agent_id, raw)
    except BaseException as exc:
        await gov.voided(entry, "repair", agent_id, exc)
        raise


#: how the reason of a snapshot left unwritten because its agent changed starts
_CHANGED = "the agent changed while repair ran ("


def _changed(what: str) -> str:
    return f"{_CHANGED}{what}): this snapshot was not written; run repair again"


def changed_meanwhile(problem: Problem) -> bool:
    """Whether ``problem`` is a snapshot repair left unwritten because its agent
    changed while it ran (a new run repairs it), not damage it cannot fix."""
    return problem.kind == "snapshot" and problem.reason.startswith(_CHANGED)


async def _event_has_link(store: StateStore, agent_id: str, seq: int, link: bytes) -> bool:
    """Whether the event stored at ``seq`` is the one the replay folded: its chain link
    (which covers every event up to it) is ``link``. Read just before the snapshot is
    written; the engines' ``save_snapshot`` cannot compare it in the same statement,
    so a delete and rewrite in the moment between the two is not caught."""
    try:
        raws = await store.backend.read(agent_id, seq - 1, seq, limit=1)
        if not raws or raws[0].seq != seq:
            return False
        raw = raws[0]
        _, opened = store.codec.decode(
            agent_id, seq, raw.type, raw.timestamp, raw.payload, raw.checksum
        )
    except (IntegrityError, SerializationError) as exc:
        if isinstance(exc, DecryptionError):
            raise
        return False
    return opened.link == link


async def _rebuilt(
    store: StateStore, agent_id: str, seqs: list[int]
) -> list[tuple[RawSnapshot, bytes]]:
    """Whole snapshots at ``seqs`` (ascending), from one verified replay of the events
    (never from a stored snapshot), each with the chain link of the event at its seq."""
    record = AgentRecord(agent_id, 0, None, {}, 1, 0.0, 0.0, link=ZERO_LINK)
    out: list[tuple[RawSnapshot, bytes]] = []
    for seq in seqs:
        await store._reads.catch_up(record, seq)
        raw, _ = store._snapshots.encode(record)  # full_data is None: stored whole
        assert record.link is not None
        out.append((raw, record.link))
    return out
