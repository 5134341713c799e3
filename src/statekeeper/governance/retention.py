"""Retention for every agent: TTL, keep the last N events, thin snapshots, legal hold.

A policy has one rule per **namespace** (the part of the agent id before its last
``/``; ``*`` is every namespace without a rule of its own) and a list of **legal
holds** (agents or whole namespaces exempt from every purge). A policy file has one
rule or hold per line (``#`` starts a comment)::

    *      ttl=365d
    acme   ttl=30d keep_last=100 snapshot_every=50
    hold   acme/alice          # one agent
    hold   legal/*             # a namespace

* ``ttl=DURATION`` (``90s``, ``15m``, ``12h``, ``30d`` or seconds): an agent not written
  for that long is deleted.
* ``keep_last=N``: only the last N events are kept; the state before them becomes a
  snapshot at the new **base** and the history before it is gone (``load(at_seq=...)``
  below it raises :class:`~statekeeper.errors.HistoryCompacted`; ``verify`` checks the
  stream from its base). A durable step's record (:mod:`statekeeper.concurrency.steps`)
  is never compacted away — it is what makes the step run once — so history from the
  first step record on is kept even past ``N`` (the action's ``reason`` says so).
* ``snapshot_every=K``: snapshots are kept at seqs that are multiples of K (plus the
  base and the latest); the others are deleted.
* ``keys_ttl=DURATION``: idempotency records made longer ago than that are forgotten (a
  retry of such an append is stored again), a durable step's excepted; without it they
  stay as long as their agent (:mod:`statekeeper.governance.keyexpiry`).

Legal holds are one rule, kept in one place: the store's own holds
(:mod:`statekeeper.governance.holds`), which every purge reads (``forget``, ``delete``,
expiry, the LangGraph saver, Redis key expiry), and which no caller can forget to pass.
A policy's ``hold`` lines are therefore *placed in the store* when the policy is
applied: before any agent is scanned, :func:`apply_retention` places each hold line the
store lacks as a legal hold (audited as ``hold``, its reason naming the policy file;
``admin`` on its namespace, else the run is refused before anything is touched; a dry
run lists them in ``holds_placed`` without placing them). From then on the hold stands
whether or not the file is passed again; deleting the line does not release it (that
is ``statekeeper hold remove``, an act of its own).

:func:`apply_retention` plans each agent from what is stored now and acts agent by
agent, each action atomic (a delete, or one ``prune`` of the backend), so a run
interrupted anywhere is resumed by running it again (``after=`` skips the agents done).
Removing history needs the engine's ``PRUNE`` capability (memory, SQLite, PostgreSQL,
Redis, S3, tiered); elsewhere those actions are reported ``unsupported`` (TTL applies).

Through a store opened in a namespace (``StateStore(url, namespace="acme")``) only
the agents of that namespace (and below it) are touched. The policy's rules and holds
still name **full** namespaces and ids (one policy file serves the whole store and
every view of it); the report, ``progress`` and ``after=`` use the view's relative ids.
Opened as a principal too, the run needs ``admin`` (a dry run: ``read``) on that
namespace and every namespace below it (``tenant-a/**``), else it is refused with
:class:`~statekeeper.errors.AccessDenied` (audited) before any agent is scanned; on the
whole store each agent is checked on its own (refused ones are reported ``refused``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._durations import duration_text
from ..backends.base import Capability
from ..errors import (
    AccessDenied,
    AgentForgotten,
    AgentLost,
    AgentNotFound,
    AgentOnHold,
    ConflictError,
    StatekeeperError,
)
from ..namespaces import namespace_of
from ..records import RawSnapshot, StreamChange
from ..store.body import SNAPSHOT_TYPE, snapshot_body
from ..store.compaction import COMPACTED, marked
from ..store.conditional import delete_only_at
from ..store.feed_cursor import FeedCursor
from ..store.feed_retention import LookedAhead, raised, trim_removed
from ..store.governed import entries_before_delete
from ..store.holds import list_holds, refuse_if_held
from ..store.incarnation import snapshot_in_stream
from ..store.keyguard import key_family
from ..store.namespaced import NamespacedStateStore, stored_id
from .hooks import (
    Announced,
    AuditSink,
    ChangeSink,
    GovernanceEvent,
    announce,
    change_sink,
    emit,
    require,
    require_namespace,
    store_namespace,
    store_sink,
)
from .keyexpiry import apply_key_expiry, expires_keys_after
from .retention_ahead import floor_through
from .retention_ahead import idle as _idle
from .retention_ahead import look_ahead as _look_ahead
from .retention_ahead import pages as _pages
from .retention_idle import (
    ahead_or_idle,
    check_idle,
    check_unchanged,
    dated,
    head_seen,
    together_planned,
)
from .retention_idle import prune_planned as _prune_planned
from .retention_lock import run_locked, still_locked
from .retention_policy import RetentionPolicy, Rule, RuleUse
from .retention_raced import Raced, base_unchanged, floor_raised, planned_again
from .retention_snapshots import delta_bases as _delta_bases
from .retention_snapshots import first_step as _first_step
from .retention_snapshots import snapshot_seqs as _snapshot_seqs
from .retention_snapshots import tail_chains as _tail_chains
from .retention_unlisted import every_agent

if TYPE_CHECKING:
    from ..store import StateStore

__all__ = [
    "RetentionAction",
    "RetentionPolicy",
    "RetentionReport",
    "Rule",
    "apply_retention",
    "namespace_of",
]

_PAGE = 500


@dataclass(frozen=True, slots=True)
class RetentionAction:
    """What retention does (or, in a dry run, would do) to one agent.

    ``kind``: ``"purge"`` (the agent is deleted: TTL), ``"compact"`` (history up to
    ``base_seq`` removed, maybe snapshots thinned too), ``"thin"`` (snapshots only) or
    ``"expire-keys"`` (``keys_expired`` idempotency records forgotten: ``keys_ttl``).
    ``outcome``: ``"done"``, ``"dry-run"``, ``"unsupported"`` (the engine cannot
    prune), ``"forgotten"`` (crypto-shredded: nothing to compact), ``"refused"`` (the
    store's principal lacks admin on the agent; the refusal is in the audit log),
    ``"skipped"`` (a purge whose agent was written after the run listed it: no longer
    idle, not deleted; a compaction that lost its race to a writer or another run
    twice, :mod:`.retention_raced`: left to the next run) or ``"failed"``.
    """

    agent_id: str
    kind: str
    outcome: str
    events_removed: int = 0
    snapshots_removed: int = 0
    base_seq: int = 0
    reason: str = ""
    keys_expired: int = 0
    #: the feed position (in the agent's shard's feed) of the last event removed: the
    #: feed is trimmed through it first, so a subscriber behind it gets
    #: ``FeedPositionCompacted`` instead of passing over the removed events (0: none)
    feed_position: int = 0


@dataclass(slots=True)
class RetentionReport:
    """What a run of :func:`apply_retention` saw and did."""

    scanned: int = 0
    held: int = 0
    actions: list[RetentionAction] = field(default_factory=list)
    #: the policy's ``hold`` lines the store lacked, placed in it as legal holds before
    #: any agent was scanned (a dry run: those it would place)
    holds_placed: list[str] = field(default_factory=list)
    #: the last agent id handled (resume a run with ``after=`` this)
    last_agent: str | None = None
    #: agents whose stored data is lost (:class:`~statekeeper.errors.AgentLost`: on
    #: Redis, evicted or deleted behind the store's back), passed over: id -> what was
    #: found. ``statekeeper delete AGENT --yes`` acknowledges a loss.
    lost: dict[str, str] = field(default_factory=dict)
    #: the feed's floor as the run left it where it raised it (a dry run: would raise
    #: it), per shard: events up to it were removed, and a subscriber (a projection)
    #: that has not read that far gets ``FeedPositionCompacted`` when it resumes; None
    #: when no event with a feed position was removed
    feed_through: FeedCursor | None = None
    #: each rule but ``*`` that governed no agent of the store (a typo, or an agent id
    #: where a namespace belongs) -> the full id of the agent it names, "" for none;
    #: left empty by a run resumed ``after=`` an agent (it saw only part of the store)
    unmatched_rules: dict[str, str] = field(default_factory=dict)
    #: "" when the run held the store's run lock (one run at a time), else why not
    #: (:mod:`.retention_lock`: "dry run", an engine without leases...)
    unlocked: str = ""

    @property
    def purged(self) -> int:
        return sum(a.kind == "purge" and a.outcome == "done" for a in self.actions)

    @property
    def events_removed(self) -> int:
        return sum(a.events_removed for a in self.actions if a.outcome in ("done", "dry-run"))


async def _full_snapshot_at(
    store: StateStore, agent_id: str, head: int, seq: int
) -> RawSnapshot | None:
    """The whole snapshot to store at ``seq``, the new base, marked as a compaction's
    (store/compaction.py); None when one is there (this stream's, marked already)."""
    raw = await store.backend.latest_snapshot(agent_id, seq)
    if raw is not None and raw.seq == seq:
        body, opened = store._reads.open_snapshot(agent_id, raw)
        if body.get(COMPACTED) is True and await snapshot_in_stream(
            store.backend, store.codec, agent_id, seq, opened.prev
        ):
            return None
    record = await store._reads.fold(agent_id, head, seq)
    codec = store.codec
    assert record.link is not None
    plaintext = codec.serialize(marked(snapshot_body(record, None)), "state")
    sealed = codec.seal(
        agent_id, record.seq, SNAPSHOT_TYPE, record.updated_at, plaintext, record.link
    )
    return RawSnapshot(record.seq, record.updated_at, sealed.payload, sealed.checksum)


def _event(action: RetentionAction, dropped: Sequence[int] = ()) -> GovernanceEvent:
    """How ``action`` is recorded in the audit log (``dropped``: the seqs of the
    snapshots it removes, named so ``audit verify`` can check they are gone)."""
    details: dict[str, Any] = {
        "events_removed": action.events_removed,
        "snapshots_removed": action.snapshots_removed,
        "reason": action.reason,
    }
    if action.kind != "purge" and action.outcome == "done":
        details["dropped"] = sorted(dropped)
    return GovernanceEvent(
        "purge" if action.kind == "purge" else action.kind,
        action.agent_id,
        action.outcome,
        1 if action.events_removed else None,
        action.base_seq or (action.events_removed or None),
        details,
    )


async def _plan_and_apply(
    store: StateStore,
    rule: Rule,
    agent_id: str,
    head: int,
    updated_at: float,
    now: float,
    dry_run: bool,
    can_prune: bool,
    before: Callable[[RetentionAction, Sequence[int]], Awaitable[None]],
    together: ChangeSink | None = None,
    ahead: LookedAhead | None = None,
) -> RetentionAction | None:
    """Plan what ``rule`` removes of the agent and (unless ``dry_run``) remove it,
    calling ``before(action, dropped)`` just before the first change; with
    ``together`` (a governed store's audit log on an engine with one commit for two
    streams) a compaction or thinning is made in ONE commit with its entry
    instead. ``ahead``: feed positions looked up for the page of agents this one is
    in (:func:`~statekeeper.governance.retention_ahead.look_ahead`)."""
    done = "dry-run" if dry_run else "done"
    updated_at = await dated(store, rule, agent_id, head, updated_at, now)  # (not ahead)
    if _idle(rule, updated_at, now):
        assert rule.ttl is not None
        seen = await check_idle(store, rule, agent_id, head, updated_at, now)  # (authenticated)
        through, why = await floor_through(store, agent_id, head, ahead)
        purge = RetentionAction(
            agent_id, "purge", done, head, 0, 0,
            "; ".join(r for r in (f"not written for {duration_text(rule.ttl)}", why) if r),
            feed_position=max(through.positions) if through is not None else 0,
        )  # fmt: skip
        if not dry_run:
            await refuse_if_held(store, agent_id, "purge")  # (one placed since the listing)
            if through is not None and not await _raise_floor(store, through):
                purge = dataclasses.replace(
                    purge, feed_position=0, reason=f"{purge.reason}; {_NO_FLOOR}"
                )
            # only the stream as listed: a write since made the agent no longer idle
            # (ConflictError, nothing deleted; reported "skipped" by apply_retention)
            if together is not None:  # the purge's entry in the delete's commit
                event = _event(purge)
                entry = {
                    "op": event.op, "outcome": event.outcome, "detail": event.details,
                    "first_seq": event.first_seq, "last_seq": event.last_seq,
                }  # fmt: skip
                await check_unchanged(store, agent_id, head, seen)  # (not made again)
                with entries_before_delete([entry]), delete_only_at(head, seen[2]):
                    await store.delete(_relative(store, agent_id))  # (policy, audit, caches)
            else:
                await before(purge, ())
                await check_unchanged(store, agent_id, head, seen)
                with delete_only_at(head, seen[2]):  # (that record: one made again since
                    # the look above is another stream, not deleted; same atomic step)
                    await store.delete(_relative(store, agent_id))
        return purge
    if rule.keep_last is None and rule.snapshot_every is None:
        return None
    # the stream as planned on: checked again just before the change (below)
    seen = await head_seen(store, agent_id, head)
    (base,) = await store.backend.stream_bases([agent_id])
    target = base
    kept_for = ""
    if rule.keep_last is not None and head - rule.keep_last > base:
        target = head - rule.keep_last
        step = await _first_step(store, agent_id, base, target)
        if step is not None:  # a durable step's record is what makes it run once
            target = step - 1
            kept_for = f"kept from seq {step}: the record of a durable step (run once)"
    snaps = [s for s in await _snapshot_seqs(store, agent_id) if s != target]
    drop: set[int] = {s for s in snaps if s < target}  # removed with the history
    if rule.snapshot_every is not None:
        latest = max([target, *snaps]) if snaps else target
        keep = {s for s in snaps if s >= target and (s % rule.snapshot_every == 0 or s == latest)}
        thin = {s for s in snaps if s > target} - keep
        if thin:
            thin -= set((await _delta_bases(store, agent_id, keep)).values())
        drop |= thin
    if drop and target > base:
        # a delta snapshot kept above the new base whose full base goes with the history
        # is unusable: dropped too (verify reported it, every load of it warned)
        kept = {s for s in snaps if s > target} - drop
        bases = await _delta_bases(store, agent_id, kept) if kept else {}
        drop |= {s for s, full in bases.items() if full in drop}
    if store._snapshots.tails and snaps:  # (tail snapshots: store/tails.py)
        drop = await _tail_chains(store, agent_id, snaps, target, drop)
    if target == base and not drop:
        if kept_for:  # keep_last not honoured: say why
            return RetentionAction(agent_id, "compact", done, 0, 0, base, kept_for)
        return None
    kind = "compact" if target > base else "thin"
    if not can_prune:
        return RetentionAction(agent_id, kind, "unsupported", 0, 0, base, "the engine cannot prune")
    through = None
    if target > base:  # (a tenant's admin's run says it leaves the shared floor alone)
        through, why = await floor_through(store, agent_id, target, ahead)
        kept_for = "; ".join(r for r in (kept_for, why) if r)
    action = RetentionAction(
        agent_id, kind, done, target - base, len(drop), target, kept_for,
        feed_position=max(through.positions) if through is not None else 0,
    )  # fmt: skip
    if dry_run:
        return action
    # the holds as they are now, not as the page's listing found them: a hold placed
    # since (by another process) stops this (AgentOnHold: reported "held")
    await refuse_if_held(store, agent_id, kind)
    if through is not None and not await _raise_floor(store, through):
        action = dataclasses.replace(
            action, feed_position=0, reason="; ".join(r for r in (kept_for, _NO_FLOOR) if r)
        )
    dropped = sorted(drop)
    full = await _full_snapshot_at(store, agent_id, head, target) if target > base else None
    # still the stream planned on (ConflictError, nothing changed): one deleted and
    # written again by another process up to (or past) the same head meanwhile is
    # another stream — before, its history up to the target was removed and the old
    # stream's state stored as its base (its acknowledged writes lost, its chain broken)
    await check_unchanged(store, agent_id, head, seen)
    await base_unchanged(store, agent_id, base)  # (not compacted by another run since)
    named = sorted(s for s in drop if s >= target)
    if together is not None:
        change = StreamChange(agent_id, snapshot=full, prune_to=target, drop_snapshots=(*named,))
        event = _event(action, dropped)
        await together_planned(store, together, change, event, head, seen, base)
    else:
        await before(action, dropped)
        await _prune_planned(store, agent_id, target, named, head, seen, full, base)
    store._reads.forget(agent_id)  # its cached record may point at removed snapshots
    return action


_WRITTEN_SINCE = "written since it was listed: no longer idle, not deleted"
_DELETED_SINCE = "deleted since it was listed (by another process): nothing to do"
_REMADE_SINCE = "deleted and written again since it was listed (by another process): unchanged"
_NO_FLOOR = (
    "the change feed's floor not raised (the database role may not trim the feed, shared"
    " by every tenant): a subscriber behind passes over the events removed"
)


async def _raise_floor(store: StateStore, through: FeedCursor) -> bool:
    """Trim the feed through ``through`` before the events go (store/feed_retention.py);
    False when the engine refuses the role (PostgreSQL row security: only a role of an
    admin of every namespace may trim the feed all tenants share). The removal goes on
    then, as before the feed followed retention, and the action says so."""
    try:
        await trim_removed(store, through)
    except AccessDenied:
        return False
    floor_raised(max(through.positions))  # (reported by a compaction that then lost a race)
    return True


def _relative(store: StateStore, full_id: str) -> str:
    return store.relative(full_id) if isinstance(store, NamespacedStateStore) else full_id


def _caller_error(store: StateStore, exc: StatekeeperError) -> BaseException:
    if isinstance(store, NamespacedStateStore):
        return store.relative_error(exc)
    return exc


async def _place_holds(
    store: StateStore, policy: RetentionPolicy, dry_run: bool, audit: AuditSink | None
) -> list[str]:
    """Place each ``hold`` line of ``policy`` the store does not hold yet as a legal hold
    of the store (:func:`~statekeeper.governance.holds.add_hold`: audited, ``admin``
    on its namespace); the patterns placed (a dry run: those it would place)."""
    wanted = policy.hold_patterns()
    if not wanted:
        return []
    have = {h.pattern for h in await list_holds(store)}
    missing = [p for p in wanted if p not in have]
    if dry_run:
        return missing
    from .holds import add_hold

    reason = f"retention policy {policy.source}"
    return [p for p in missing if await add_hold(store, p, reason, audit=audit)]


async def apply_retention(
    store: StateStore,
    policy: RetentionPolicy,
    *,
    dry_run: bool = False,
    after: str | None = None,
    now: float | None = None,
    progress: Callable[[str, int], None] | None = None,
    audit: AuditSink | None = None,
    report: RetentionReport | None = None,
) -> RetentionReport:
    """Apply ``policy`` to every agent of ``store`` (ordered by id, after ``after``).

    ``dry_run`` plans without changing anything. ``progress(agent_id, scanned)`` is
    called after each agent (record the id to resume with ``after=``). Every action
    is reported to ``audit``. ``report``: the report to fill as the run goes (and
    return); after an interruption (Ctrl-C, a cancellation) it says what was done.
    """
    if store_namespace(store):
        # a run over a whole namespace: the principal needs the permission on all of
        # it (a dry run only reads), else nothing is scanned
        await require_namespace(store, "read" if dry_run else "admin", "retention")
    report = RetentionReport() if report is None else report
    async with run_locked(store, dry_run) as report.unlocked:  # (else RetentionRunning)
        return await _applied(store, policy, dry_run, after, now, progress, audit, report)


async def _applied(
    store: StateStore, policy: RetentionPolicy, dry_run: bool, after: str | None,
    now: float | None, progress: Callable[[str, int], None] | None, audit: AuditSink | None,
    report: RetentionReport | None,
) -> RetentionReport:  # fmt: skip
    await store.flush()
    # a compaction's base snapshot is sealed with the store family's data key (this may
    # be the store's first use: its reads below pass its gate by)
    await key_family(store.backend, store.codec)
    given = audit
    report = RetentionReport() if report is None else report
    # the policy's holds become the store's own (one rule: every purge reads the store's
    # holds), placed before any agent is touched; a refusal stops the run here
    report.holds_placed = await _place_holds(store, policy, dry_run, given)
    audit = await store_sink(store, audit)  # a governed store's own audit log by default
    clock = time.time() if now is None else now
    can_prune = store.backend.supports(Capability.PRUNE)
    together = change_sink(store, given)
    # the store's listing: never its own streams (the audit log), only agents; an agent
    # whose stored data is lost (AgentLost: Redis evicted it) is reported, the rest go on
    stored_holds = await list_holds(store)  # (the store's own: statekeeper hold)
    listing = every_agent(store, after, _PAGE)  # (the unlisted agents too: Redis's)
    use = RuleUse(policy, store_namespace(store)) if after is None else None
    async with contextlib.aclosing(listing):
        async for page in _pages(listing, _PAGE):
            if report.scanned:  # read again as the listing was, page by page
                stored_holds = await list_holds(store)
            # the feed positions of the page's purges and compactions, in one pass (SQLite
            # and Redis have no index by agent: one lookup each reads back to the event)
            ahead = await _look_ahead(store, policy, page, stored_holds, clock)
            for info in page:
                await still_locked()  # (LeaseLost: another run took the lock this one lost)
                if isinstance(info, AgentLost):
                    report.scanned += 1
                    report.lost[info.agent_id] = info.reason
                    if use is not None:
                        lost_id = stored_id(store, info.agent_id)
                        use.saw(lost_id, policy.rule_for(lost_id))
                    report.last_agent = info.agent_id
                    if progress is not None:
                        progress(info.agent_id, report.scanned)
                    continue
                # below the store's public calls everything works on the stored id; the
                # report names the id as the store lists it (relative in a namespace)
                listed = info.agent_id
                agent_id = stored_id(store, listed)
                report.scanned += 1
                rule = policy.rule_for(agent_id)
                if use is not None:
                    use.saw(agent_id, rule)
                if policy.held(agent_id) or any(h.covers(agent_id) for h in stored_holds):
                    report.held += 1
                elif rule is not None and info.head_seq > 0:
                    recorded = held_now = False
                    # what the rule does to this agent: a failure is reported as that action
                    idle = ahead_or_idle(rule, info.updated_at, clock)
                    kind = "purge" if idle else "compact"
                    try:
                        # a purge needs admin on the agent's namespace when the store is
                        # opened as a principal (a dry run only reads: read suffices)
                        await require(store, agent_id, "read" if dry_run else "admin", "retention")
                        announced: list[Announced] = []

                        async def before(
                            action: RetentionAction,
                            dropped: Sequence[int],
                            announced: list[Announced] = announced,
                        ) -> None:
                            # on a governed store the entry goes first (_event: the same)
                            made = await announce(store, given, _event(action, dropped))
                            if made is not None:
                                announced.append(made)

                        call = (
                            store, rule, agent_id, info.head_seq, info.updated_at, clock,
                            dry_run, can_prune, before, together, ahead,
                        )  # fmt: skip
                        try:  # a compaction that lost a race to a writer: planned again
                            action = await (
                                _plan_and_apply(*call)
                                if idle
                                else planned_again(_plan_and_apply, announced, *call)
                            )
                        except BaseException as exc:
                            for made in announced:
                                await made.failed(exc)
                            raise
                        recorded = bool(announced) or (
                            together is not None and action is not None and action.outcome == "done"
                        )
                    except AgentOnHold:  # a hold placed after the page was listed
                        report.held += 1
                        action, held_now = None, True  # (an announced entry voided)
                    except AccessDenied as exc:
                        reason = str(_caller_error(store, exc))
                        action = RetentionAction(agent_id, kind, "refused", reason=reason)
                    except Raced as exc:  # lost twice: left to the next run (nothing removed)
                        action = RetentionAction(agent_id, kind, "skipped", reason=exc.reason)
                        action = dataclasses.replace(action, feed_position=exc.feed_position)
                        recorded = True  # nothing changed: no entry (an announced one voided)
                    except ConflictError as exc:  # (another stream's, the audit log's: failed)
                        ours = exc.agent_id == agent_id
                        if ours and not idle and exc.expected_seq >= exc.current_seq:  # (remade)
                            why = _REMADE_SINCE if exc.current_seq else _DELETED_SINCE
                            action = RetentionAction(agent_id, kind, "skipped", reason=why)
                            recorded = True  # nothing changed: no entry (an announced one voided)
                        elif not ours or not idle:
                            reason = str(_caller_error(store, exc))
                            action = RetentionAction(agent_id, kind, "failed", reason=reason)
                        else:  # the purge's delete found the agent written since it was listed
                            action = RetentionAction(
                                agent_id, "purge", "skipped", reason=_WRITTEN_SINCE
                            )
                            recorded = True  # nothing changed: no entry (an announced one voided)
                    except AgentForgotten:
                        action = RetentionAction(agent_id, kind, "forgotten", reason="shredded")
                    except AgentNotFound:  # another process deleted it since the listing
                        action = RetentionAction(agent_id, kind, "skipped", reason=_DELETED_SINCE)
                        recorded = True  # nothing changed: no entry (an announced one voided)
                    except StatekeeperError as exc:  # (a purge's too: not called a compaction)
                        reason = str(_caller_error(store, exc))
                        action = RetentionAction(agent_id, kind, "failed", reason=reason)
                    if action is not None:
                        report.actions.append(dataclasses.replace(action, agent_id=listed))
                        report.feed_through = raised(
                            report.feed_through, store.backend, agent_id, action.feed_position
                        )
                        # (refusals: audited by require; announced ones: before they were made)
                        if action.outcome != "refused" and not recorded:
                            await emit(audit, _event(action))
                    if rule.keys_ttl is not None and not held_now and expires_keys_after(action):
                        expired = await apply_key_expiry(
                            store, audit, rule, agent_id, listed, clock, dry_run
                        )
                        if expired is not None:
                            report.actions.append(expired)
                report.last_agent = listed
                if progress is not None:
                    progress(listed, report.scanned)
    if use is not None:
        report.unmatched_rules = use.unmatched()
    return report
