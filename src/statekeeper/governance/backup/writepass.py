"""The writing pass of a restore (:mod:`.restore`): the files read again chunk by
chunk, each agent's parts appended in file order, the agents of a chunk in batches
committed together (:func:`_write_batch`: one engine batch per round of writes)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ...backends.base import Backend, KeptKeys
from ...errors import BackupCorrupt
from ...records import AppendRequest, RawEvent, RawSnapshot
from ...store.feed_retention import from_base_floored
from ..hooks import is_store_admin
from .entries import read_entries
from .fileformat import BackupKey, FrameReader
from .joined import released_after, run_stoppable

if TYPE_CHECKING:
    from ...store import StateStore
    from .restore import _Part, _Plan

__all__ = ["WRITE_BATCH_BYTES", "write_all"]

#: one step of writing an agent's part: ``(agent, request, None)`` an append,
#: ``(agent, request, base)`` the append of a compacted stream's first events onto its
#: base snapshot (with the idempotency records its compaction kept, also of an append
#: it cut in two: last element),
#: ``(agent, None, snapshot)`` a snapshot taken before the part (saved after its appends)
_Step = tuple[str, "AppendRequest | None", "RawSnapshot | None", KeptKeys]


def _steps(agent_id: str, item: Any, snapshot_here: bool, tag: bytes | None) -> list[_Step]:
    """The writes of one part (its base the stream's head then), in order: appends in
    pieces cut at idempotency keys, ``tag`` (the head tag) on the last piece of the
    stream's last part."""
    _, base, head, _, raw_events, snap, key_rows = item[:7]
    events = [RawEvent(s, k, t, p, c) for s, k, t, p, c in raw_events]
    from_base = RawSnapshot(*item[7]) if len(item) > 7 else None
    floor = from_base.seq if from_base is not None else 0
    # (a record of an append the compaction removed, or cut in two, is written with
    # the base: the latter's events after the base are the first piece's)
    kept = [(name, first, last) for name, first, last in key_rows if first <= floor]
    keyed = {first: (name, last) for name, first, last in key_rows if first > floor}
    if from_base is not None:
        base = from_base.seq  # compacted: the events start after the base snapshot
        if snap is not None and snap[0] == base:
            snap = None  # the latest snapshot is the base itself: written with it
    steps: list[_Step] = []
    seq = base
    while seq < head:
        key: str | None = None
        if seq + 1 in keyed:
            key, end = keyed[seq + 1]
        else:
            end = min([s - 1 for s in keyed if s > seq + 1] + [head])
        part = events[seq - base : end - base]
        snapshot = None
        if snapshot_here and snap is not None and seq < snap[0] <= end:
            snapshot = RawSnapshot(snap[0], snap[1], snap[2], snap[3])
        request = AppendRequest(
            agent_id, seq, part, snapshot, key, head_tag=tag if end == head else None
        )
        onto = from_base if from_base is not None and seq == from_base.seq else None
        steps.append((agent_id, request, onto, kept if onto is not None else ()))
        seq = end
    if snapshot_here and snap is not None and snap[0] <= base:  # taken before this part
        steps.append((agent_id, None, RawSnapshot(snap[0], snap[1], snap[2], snap[3]), ()))
    return steps


async def _write_batch(
    store: StateStore,
    batch: Sequence[tuple[str, Any, bool, bytes | None]],
    concurrency: int,
    wrote: dict[str, tuple[int, bytes]],
) -> None:
    """Write the parts of one batch (``(agent, entry, its snapshot here, tag)``, each
    agent once) in rounds: round *r* is every agent's *r*-th write (an agent's writes
    stay in order, one round after the other), and a round's plain appends go to the
    engine's :meth:`~statekeeper.backends.base.Backend.append_batch` in one call (on
    SQLite: one transaction and one commit for the whole batch instead of one per
    agent, each through the event loop and the writer thread: ~2/3 of a restore's
    CPU, docs/benchmarks.md "backup16"). Each append succeeds or fails on its own
    there as it did alone; the first failure is raised. An engine without a batch of
    its own (the default runs them one by one) gets them ``concurrency`` at a time,
    as before. ``wrote``: each agent's last event appended, ``(seq, checksum)``."""
    backend = store.backend
    steps = [_steps(*one) for one in batch]
    batched = type(backend).append_batch is not Backend.append_batch
    floored = is_store_admin(store)
    gate = asyncio.Semaphore(max(1, concurrency))

    async def alone(step: _Step) -> None:
        agent_id, request, extra, kept = step
        async with gate:
            if request is None:
                assert extra is not None
                await backend.save_snapshot(agent_id, extra)
            elif extra is not None:  # the floor over it in the same write (a store admin)
                await from_base_floored(backend, request, extra, kept, raise_floor=floored)
            else:
                await backend.append(request)
            if request is not None:
                wrote[agent_id] = (request.events[-1].seq, request.events[-1].checksum)

    for r in range(max(map(len, steps), default=0)):
        round_ = [s[r] for s in steps if r < len(s)]
        plain = [req for _, req, extra, _ in round_ if req is not None and extra is None]
        others = [s for s in round_ if not batched or s[1] is None or s[2] is not None]
        if batched and plain:
            results = await backend.append_batch(plain)
            for request, result in zip(plain, results, strict=True):
                if not isinstance(result, BaseException):
                    wrote[request.agent_id] = (request.events[-1].seq, request.events[-1].checksum)
            for result in results:
                if isinstance(result, BaseException):
                    raise result
        # every write of the round settled before a failure is raised: the unwinding
        # (write_all) must see what they left
        for settled in await asyncio.gather(
            *(alone(step) for step in others), return_exceptions=True
        ):
            if isinstance(settled, BaseException):
                raise settled


#: the most record bytes the writing pass holds in one batch of concurrent appends: a
#: group of a file backup (:data:`.filecopy.GROUP_BYTES`, 1 MiB) is written in
#: batches of this much, so a restore holds ~2 chunks of records, not a group
#: (a 4.8 MB backup of 64 KiB records: traced peak 0.21-0.29 of its size -> 0.140-0.144,
#: 20 runs each, docs/benchmarks.md "flaky15")
WRITE_BATCH_BYTES = 256 << 10


def _record_bytes(item: Any) -> int:
    """The payload bytes of one entry (its events, its snapshot, its base snapshot)."""
    snapshot, base = item[5], item[7] if len(item) > 7 else None
    return (
        sum(len(e[3]) for e in item[4])
        + (len(snapshot[2]) if snapshot is not None else 0)
        + (len(base[2]) if base is not None else 0)
    )


def _batches(
    entries: Iterator[tuple[int, Any]], keep: Callable[[str], bool]
) -> Iterator[list[Any]]:
    """The entries to write (``keep``: by agent id) in batches: those of one chunk, at
    most :data:`WRITE_BATCH_BYTES` of records each (one entry alone may hold more)."""
    batch: list[tuple[int, Any]] = []
    held = 0
    for got in entries:
        if not keep(got[1][0]):
            continue
        size = _record_bytes(got[1])
        if batch and (got[0] != batch[-1][0] or held + size > WRITE_BATCH_BYTES):
            yield batch
            batch, held = [], 0
        batch.append(got)
        held += size
    if batch:
        yield batch


async def _unwind(
    store: StateStore,
    wrote: dict[str, tuple[int, bytes]],
    plans: dict[str, _Plan],
    failed: Exception,
) -> None:
    """After a failed batch: delete the agents of it the restore left short of the
    backup's head. An agent is written in pieces (cut at idempotency keys, each an
    append of its own) and the agents of a batch in rounds, so a write the target
    refused (a record over the engine's size limit: Redis ``proto-max-bulk-len``,
    SQLite's length limit, PostgreSQL's 1 GB) or a server lost part-way left streams
    cut inside the backup's chain — agents that list, load and verify as whole, older
    than the backup, which ``skip_existing`` then kept as the target's own (only the
    ends of a backup's parts are known to :mod:`.partway`, which refuses an agent left
    at one). ``wrote`` is each agent's last event the batch appended: a stream whose
    head is still that event (seq and checksum) is the restore's own, and is deleted
    (:meth:`~statekeeper.backends.base.Backend.delete_agent_at`, conditional on both:
    another writer's stream, or a write since, is never deleted). What became of each
    is noted on ``failed`` (``add_note``: the CLI prints it); it is raised either
    way. A process killed there leaves such a stream (not detected: see
    ``docs/retention-and-backup.md``)."""
    backend = store.backend
    for agent_id, (head, checksum) in wrote.items():
        plan = plans[agent_id]
        # (at the end of one of the backup's parts: found and refused by .partway)
        if head >= plan.head or head in plan.ends:
            continue
        try:
            if await backend.delete_agent_at(agent_id, head, checksum):
                failed.add_note(
                    f"agent {agent_id!r}, written up to seq {head} of the backup's"
                    f" {plan.head}, was deleted again"
                )
        except Exception as exc:
            failed.add_note(
                f"agent {agent_id!r} is left short of the backup ({exc}): delete it before"
                " restoring again"
            )


async def write_all(
    store: StateStore,
    parts: Sequence[_Part],
    key: BackupKey,
    plans: dict[str, _Plan],
    tags: dict[str, bytes],
    concurrency: int,
    progress: Callable[[str, int, int], None] | None,
) -> int:
    """The writing pass: the files again, chunk by chunk (each re-authenticated and
    checked against its manifest as it is read), each agent's parts in file order,
    the agents of one chunk in batches (:func:`_write_batch`), at most
    :data:`WRITE_BATCH_BYTES` of records at a time. Returns how many agents were finished."""
    finished = 0

    async def flush(number: int, batch: list[tuple[int, Any]]) -> None:
        nonlocal finished
        writes = []
        last = 0
        for index, item in batch:
            agent_id, head = item[0], item[2]
            plan = plans[agent_id]
            here = plan.snapshot is not None and plan.snapshot[1:] == (number, index)
            tag = tags[agent_id] if head == plan.head else None
            last += head == plan.head
            writes.append((agent_id, item, here, tag))
        wrote: dict[str, tuple[int, bytes]] = {}
        try:
            await _write_batch(store, writes, concurrency, wrote)
        except Exception as exc:
            await _unwind(store, wrote, plans, exc)
            raise
        for _ in range(last):
            finished += 1
            if progress is not None and finished % 256 == 0:
                progress("write", finished, len(tags))

    for number, (path, image, backup_id) in enumerate(parts):
        reader = await run_stoppable(FrameReader, path, key, release=FrameReader.close)
        with released_after(reader.close):  # (by a thread a second cancel left running)
            if reader.header.backup_id != backup_id:
                raise BackupCorrupt(path, "header", "changed while it was being restored")
            entries = read_entries(reader, reader.streams, image)

            def keep(agent_id: str, number: int = number) -> bool:
                return agent_id in tags and number >= plans[agent_id].start

            batches = _batches(entries, keep)
            while True:
                # a batch read in one hop to a thread, not an entry: ~100,000 hops
                batch = await run_stoppable(next, batches, None)
                if batch is None:
                    break
                await flush(number, batch)
    if progress is not None:
        progress("write", len(tags), len(tags))
    return finished
