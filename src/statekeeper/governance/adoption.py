"""``statekeeper retention adopt-compactions``: the streams an earlier version compacted,
marked as compactions.

Since the base snapshot of a compaction is marked inside its authenticated body
(:mod:`statekeeper.store.compaction`), a stream that starts after an unmarked snapshot
reads as history deleted by hand (``IntegrityError``; ``verify`` reports it). Every
stream ``keep_last`` compacted before the mark has that shape. An operator holding the
store key adopts them: each one's base is checked for what can still be checked, and
written again marked, sealed with the active key, as retention writes a base now.

What is checked (an agent failing one is refused, named with the reason, left as it is):

* the snapshot at the base authenticates (with a key: nobody without it wrote it) and
  is a whole one (retention never left a delta at a base);
* the first event kept links to it (its chain's previous link is the snapshot's);
* no snapshot below the base is stored (retention's prune removed them with the
  events; rows deleted by hand, events only, leave them);
* on a store that keeps an audit log: the log has retention's ``compact`` entry of that
  agent to that seq (an old retention run recorded each compaction there).

What cannot be told apart: on a store without an audit log, events deleted by hand
together with every snapshot below a whole snapshot (a careful hand edit) look exactly
like an old ``keep_last`` — no record of an old compaction exists to tell them by.
Adopting vouches for what is listed above and, past it, for the operator's word: the
entry (``adopt-compaction``) names who adopted what. ``unrecorded=True`` adopts
streams a governed store's log does not record (a log started after the compaction).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import ConfigurationError, IntegrityError, SerializationError, StatekeeperError
from ..store.compaction import COMPACTED
from ..store.namespaced import stored_id
from .hooks import GovernanceEvent, announce, emit, require, store_log, store_sink
from .retention import _full_snapshot_at

if TYPE_CHECKING:
    from ..store import StateStore

__all__ = ["ADOPT_OP", "Adoption", "AdoptionReport", "adopt_compactions"]

#: the audit log's operation of an adoption
ADOPT_OP = "adopt-compaction"
_PAGE = 500


@dataclass(frozen=True, slots=True)
class Adoption:
    """One agent whose stream starts after an unmarked snapshot: ``outcome`` is
    ``"adopted"``, ``"dry-run"`` (would be) or ``"refused"`` (``reason`` says why)."""

    agent_id: str
    base_seq: int
    outcome: str
    reason: str = ""


@dataclass
class AdoptionReport:
    scanned: int = 0
    marked_already: int = 0  # compacted streams whose base is marked (nothing to do)
    adoptions: list[Adoption] = field(default_factory=list)

    @property
    def refused(self) -> list[Adoption]:
        return [a for a in self.adoptions if a.outcome == "refused"]


async def _recorded(store: StateStore) -> dict[str, set[int]] | None:
    """The compactions the store's audit log records (agent -> base seqs), or None when
    the store keeps no audit log."""
    found = await store_log(store)
    if found is None:
        return None
    log = found[0]
    seen: dict[str, set[int]] = {}
    async for entry in log.entries(operation="compact"):
        if entry.outcome == "done" and entry.agent_id and entry.last_seq:
            seen.setdefault(entry.agent_id, set()).add(entry.last_seq)
    return seen


async def _check(
    store: StateStore, agent_id: str, base: int, recorded: dict[str, set[int]] | None
) -> str | None:
    """Why the stream of ``agent_id``, starting after ``base``, is not an old
    compaction's shape; None when it is (or "" when its base is marked already)."""
    reads = store._reads
    raw = await store.backend.latest_snapshot(agent_id, base)
    if raw is None or raw.seq != base:
        return f"no snapshot is stored at seq {base}: events 1..{base} were deleted"
    try:
        body, opened = reads.open_snapshot(agent_id, raw)
    except (IntegrityError, SerializationError) as exc:
        return f"the snapshot at seq {base} does not authenticate: {exc}"
    if body.get(COMPACTED) is True:
        return ""
    if "base" in body:
        return f"the snapshot at seq {base} is a delta (retention left a whole one)"
    nxt = await store.backend.read(agent_id, base, base + 1, limit=1)
    if nxt:
        try:
            _, first = reads.open_event(agent_id, nxt[0])
        except (IntegrityError, SerializationError) as exc:
            return f"the event at seq {base + 1} does not authenticate: {exc}"
        if first.prev is not None and opened.prev is not None and first.prev != opened.prev:
            return f"the event at seq {base + 1} does not follow the snapshot at seq {base}"
    below = await store.backend.latest_snapshot(agent_id, base - 1) if base > 1 else None
    if below is not None:
        return (
            f"the snapshot at seq {below.seq} below the base is still stored (retention"
            " removed them with the events): the events were deleted by hand"
        )
    if recorded is not None and base not in recorded.get(agent_id, set()):
        return (
            f"the audit log records no compaction of it to seq {base} (pass unrecorded"
            " to adopt it on your word: a log started after the compaction)"
        )
    return None


async def adopt_compactions(
    store: StateStore,
    agents: Sequence[str] = (),
    *,
    dry_run: bool = False,
    unrecorded: bool = False,
    keyless: bool = False,
    progress: Callable[[str, int], None] | None = None,
) -> AdoptionReport:
    """Mark as compactions the bases of the streams an earlier version's retention
    compacted (every agent, or ``agents``), each checked first (module docstring).
    Idempotent and resumable: a base marked already is passed over, each agent is one
    write of its snapshot. Needs the store's key (the mark is authenticated with the
    active one): ``keyless`` allows a store whose records have none."""
    if store.codec.keyring is None and not keyless and not dry_run:  # (a dry run writes no mark)
        raise ConfigurationError(
            "adopting compactions needs the store key (--key-file): the mark is"
            " authenticated with it; a store without keys: pass --keyless"
        )
    report = AdoptionReport()
    recorded = await _recorded(store)
    if unrecorded:
        recorded = None
    audit = await store_sink(store, None)
    for listed in await _targets(store, agents):
        report.scanned += 1
        try:
            adoption = await _adopt_one(store, stored_id(store, listed), recorded, dry_run, audit)
        except StatekeeperError as exc:
            adoption = Adoption(listed, 0, "refused", str(exc))
        if adoption is None:
            pass
        elif adoption.outcome == "marked":
            report.marked_already += 1
        else:  # (named as the store lists it: relative in a namespace)
            report.adoptions.append(dataclasses.replace(adoption, agent_id=listed))
        if progress is not None:
            progress(listed, report.scanned)
    return report


async def _targets(store: StateStore, agents: Iterable[str]) -> list[str]:
    """The agents named, else every one the store lists (as it lists them)."""
    named = list(agents)
    if named:
        return named
    out: list[str] = []
    after: str | None = None
    while True:
        page = await store.list_agents(after=after, limit=_PAGE)
        out.extend(info.agent_id for info in page)
        if len(page) < _PAGE:
            return out
        after = page[-1].agent_id


async def _adopt_one(
    store: StateStore,
    agent_id: str,
    recorded: dict[str, set[int]] | None,
    dry_run: bool,
    audit: object,
) -> Adoption | None:
    first = await store.backend.read(agent_id, 0, None, limit=1)
    if not first or first[0].seq == 1:
        return None  # (not compacted)
    base = first[0].seq - 1
    # (as retention: admin on the agent's namespace under a principal; a dry run reads)
    await require(store, agent_id, "read" if dry_run else "admin", "retention")
    why = await _check(store, agent_id, base, recorded)
    if why == "":
        return Adoption(agent_id, base, "marked")
    if why is not None:
        return Adoption(agent_id, base, "refused", why)
    if dry_run:
        return Adoption(agent_id, base, "dry-run")
    head = await store.backend.head(agent_id)
    full = await _full_snapshot_at(store, agent_id, head, base)
    if full is None:  # (marked meanwhile)
        return Adoption(agent_id, base, "marked")
    detail = {"recorded": recorded is not None}
    event = GovernanceEvent(ADOPT_OP, agent_id, "done", base, base, detail)
    made = await announce(store, None, event)  # a principal's store: the entry first
    try:
        await store.backend.save_snapshot(agent_id, full)
    except BaseException as exc:
        if made is not None:
            await made.failed(exc)
        raise
    store._reads.forget(agent_id)
    if made is None:
        await emit(audit, event)  # type: ignore[arg-type]
    return Adoption(agent_id, base, "adopted")
