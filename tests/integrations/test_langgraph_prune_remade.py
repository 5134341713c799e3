"""A compaction's cut-over never moves or deletes a thread made again to the same seq.

``prune``, ``prune_retention`` and ``delete_for_runs`` rewrite a thread into a new
generation (``_SaverPruning._rewrite``): the kept checkpoints are copied, the old
generation is fenced (an event naming the new one, appended at the seq the compaction
read) and then deleted. If another process deletes the thread and writes it again up to
that same seq meanwhile, a seq alone cannot tell the two streams apart: the fence landed
on the other process's stream (the store read its head again after the cached head's
conflict) and the old generation's delete then deleted it, its acknowledged checkpoints
lost without an error (and the thread served the compacted copy of the deleted one).
The hooks make the other process act at the two moments it can: just before the fence
(``at_fence``), and after the fence and the new generation's seal, just before the old
generation's delete (``at_delete``) — there the thread made again is at the base id,
at any seq; ``at_delete_same_seq``: up to the fence's own seq (which a delete at the
seq alone took: on a store with ``cache_size=0`` the fence's checksum was not known).
``at_fence_settled``: at the fence, and this process then settles the thread explicitly
— its read caches the stream made again in place of the one the fence was planned on
(docs/benchmarks.md "settleauto": an idle settle's read did that, and the fence landed
on the new stream); the fence carries the planned stream's head tag and is refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from langgraph.checkpoint.base.id import uuid6

from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.integrations.langgraph import mapping as m

from .conftest import bare_checkpoint, config, new_thread, off_context


async def _write(saver: StatekeeperSaver, thread: str, run_id: str, n: int) -> list[str]:
    ids = []
    for step in range(n):
        done = await saver.aput(
            config(thread),
            bare_checkpoint(),
            {"source": "loop", "step": step, "run_id": run_id},
            {},
        )
        ids.append(done["configurable"]["checkpoint_id"])
    return ids


OPS: dict[str, Callable[[StatekeeperSaver, str], Awaitable[Any]]] = {
    "prune": lambda s, t: s.aprune([t]),
    "prune_retention": lambda s, t: s.aprune_retention([t], keep_last=1),
    "delete_for_runs": lambda s, t: s.adelete_for_runs(["run-old"]),
}


@pytest.mark.parametrize(
    "moment",
    ["at_fence", "at_fence_evicted", "at_fence_settled", "at_delete", "at_delete_same_seq"],
)
@pytest.mark.parametrize("op", sorted(OPS))
async def test_a_compaction_spares_a_thread_made_again(fs_url: str, op: str, moment: str) -> None:
    saver = await StatekeeperSaver.afrom_url(fs_url)
    other = StatekeeperSaver.from_url(fs_url)  # another process
    thread = new_thread()
    base = m.agent_id(saver.prefix, thread)
    acked: list[str] = []
    writes: list[int] = []
    try:
        await _write(saver, thread, "run-old", 2)
        await _write(saver, thread, "run-new", 1)
        head = await saver.store.head(base)

        # (at the delete: the fence's seq, one past the head the compaction read)
        target = head + 1 if moment == "at_delete_same_seq" else head

        def remake() -> None:
            if moment.startswith("at_delete"):
                other.delete_thread(thread)
            else:
                # its delete_thread listed the thread's generations before this
                # compaction made its new one: it deletes the stream it found
                other._portal.call(other.store.delete(base))
            # one checkpoint and writes of it (what no compaction here removes) up to
            # the head read (at the fence: the same seq again, which a seq alone passes)
            cfg = other.put(config(thread), bare_checkpoint(), {"source": "input", "step": -1}, {})
            acked.append(cfg["configurable"]["checkpoint_id"])
            while other._portal.call(other.store.head(base)) < target:
                other.put_writes(cfg, [("messages", len(writes))], f"task-{len(writes)}")
                writes.append(len(writes))
            assert other._portal.call(other.store.head(base)) == target

        store = saver.store
        held_tag = store._tag_at(base, head)  # (None with the store's cache off)
        settled: list[int | None] = []
        if not moment.startswith("at_delete"):
            append = store.append

            async def hooked_append(agent_id: str, event_type: str, *a: Any, **kw: Any) -> Any:
                if agent_id == base and event_type == m.EV_MOVED and not acked:
                    await off_context(remake)
                    if moment == "at_fence_evicted":  # the store's cache let it go
                        store._cache._data.pop(base, None)
                    if moment == "at_fence_settled":
                        # this process settles the thread explicitly: its read puts the
                        # stream made again in the store's cache, in place of the one
                        # the compaction planned its fence on (the settle stores that
                        # stream's head: it is the one stored now)
                        settled.append(await store.settle(base))
                        assert held_tag is not None
                        assert store._tag_at(base, head) not in (held_tag, None)
                return await append(agent_id, event_type, *a, **kw)

            store.append = hooked_append  # type: ignore[method-assign]
        else:
            delete = store.delete

            async def hooked_delete(agent_id: str) -> bool:
                if agent_id == base and not acked:
                    await off_context(remake)
                return await delete(agent_id)

            store.delete = hooked_delete  # type: ignore[method-assign]
        try:
            await OPS[op](saver, thread)
        except Exception as exc:  # a typed refusal is fine: nothing of the other lost
            assert type(exc).__module__.startswith("statekeeper"), exc
        assert acked, "the hook never ran: the compaction did not cut over"
        assert settled == ([head] if moment == "at_fence_settled" else [])
        # the other process's acknowledged checkpoints are there, all of them
        found = await asyncio.to_thread(lambda: list(other.list(config(thread))))
        assert [t.checkpoint["id"] for t in found] == acked, (
            "the thread made again was moved or deleted: its checkpoint lost"
        )
        assert sorted(w[2] for w in found[0].pending_writes or []) == writes
        # and it is the live stream, as the other process left it: not fenced over
        snap = await saver.store.get(base)
        assert snap is not None and snap.data.get("moved") is None, (
            "the thread made again was fenced over"
        )
        assert await saver.store.head(base) == other._portal.call(other.store.head(base))
    finally:
        other.close()
        await saver.aclose()


@pytest.mark.parametrize("op", sorted(OPS))
async def test_a_compaction_still_compacts_an_untouched_thread(fs_url: str, op: str) -> None:
    """Control: nobody else writes; the thread keeps only what the compaction keeps."""
    saver = await StatekeeperSaver.afrom_url(fs_url)
    try:
        thread = new_thread()
        await _write(saver, thread, "run-old", 2)
        kept = await _write(saver, thread, "run-new", 1)
        await OPS[op](saver, thread)
        found = [t.checkpoint["id"] async for t in saver.alist(config(thread))]
        assert found == kept
        assert len(await saver._generations(thread)) == 1
    finally:
        await saver.aclose()


@pytest.mark.parametrize("evicted", [False, True])
async def test_an_expired_thread_is_deleted_only_as_read(fs_url: str, evicted: bool) -> None:
    """``prune_retention(ttl=...)`` deletes a thread whose newest checkpoint expired:
    every generation listed was deleted, whatever it held by then — one deleted and
    written again by another process meanwhile (fresh checkpoints, not expired) lost
    them. Deleted at the head identity read, the thread made again is spared.
    ``evicted``: the store's cache no longer holds the record read."""
    saver = await StatekeeperSaver.afrom_url(fs_url)
    other = StatekeeperSaver.from_url(fs_url)  # another process
    thread = new_thread()
    base = m.agent_id(saver.prefix, thread)
    acked: list[str] = []
    try:
        mine = await _write(saver, thread, "run-old", 2)
        last = m.checkpoint_time(mine[-1])
        assert last is not None
        while (cutoff := m.checkpoint_time(str(uuid6()))) is not None and cutoff <= last:
            pass  # (until the clock passed the newest of these: every later one is newer)
        assert cutoff is not None

        def remake() -> None:
            other.delete_thread(thread)
            for _ in range(3):
                cfg = other.put(
                    config(thread), bare_checkpoint(), {"source": "input", "step": -1}, {}
                )
                acked.append(cfg["configurable"]["checkpoint_id"])

        store = saver.store
        delete = store.delete

        async def hooked_delete(agent_id: str) -> bool:
            if agent_id == base and not acked:
                await off_context(remake)
            return await delete(agent_id)

        store.delete = hooked_delete  # type: ignore[method-assign]
        if evicted:
            drop = saver._delete_read

            async def evicting(st: Any) -> bool:
                store._cache._data.pop(base, None)
                return await drop(st)

            saver._delete_read = evicting  # type: ignore[method-assign]
        report = await saver.aprune_retention([thread], ttl=60.0, now=cutoff + 60.0)
        assert acked, "the hook never ran: the thread was not deleted"
        assert report.threads_deleted == 0
        found = await asyncio.to_thread(lambda: list(other.list(config(thread))))
        assert sorted(t.checkpoint["id"] for t in found) == sorted(acked), (
            "the thread made again was deleted: its checkpoints lost"
        )
    finally:
        other.close()
        await saver.aclose()


async def test_an_expired_thread_untouched_is_deleted(fs_url: str) -> None:
    """Control: nobody else writes; the expired thread is deleted, every generation."""
    saver = await StatekeeperSaver.afrom_url(fs_url)
    try:
        thread = new_thread()
        await _write(saver, thread, "run-old", 3)
        await saver.aprune_retention([thread], keep_last=1)  # a second generation
        report = await saver.aprune_retention([thread], ttl=60.0, now=2e10)
        assert report.threads_deleted == 1
        assert await saver._generations(thread) == []
    finally:
        await saver.aclose()


def test_the_prune_command_spares_a_thread_made_again(
    fs_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``statekeeper langgraph prune``: the same cut-over, from the command line (its own
    saver); the other process makes the thread again while the kept checkpoints are
    copied, before the fence."""
    from typer.testing import CliRunner

    from statekeeper.cli import app

    other = StatekeeperSaver.from_url(fs_url)  # another process
    thread = new_thread()
    base = m.agent_id(other.prefix, thread)
    acked: list[str] = []
    writes: list[int] = []
    try:
        with StatekeeperSaver.from_url(fs_url) as first:
            for step in range(3):
                first.put(config(thread), bare_checkpoint(), {"source": "loop", "step": step}, {})
        head = other._portal.call(other.store.head(base))
        replay = StatekeeperSaver._replay_plans

        def hooked(self: StatekeeperSaver, src: Any, parts: Any) -> Any:
            if src.agent_id == base and not acked:  # (the CLI's saver, on its loop)
                other._portal.call(other.store.delete(base))
                cfg = other.put(
                    config(thread), bare_checkpoint(), {"source": "input", "step": -1}, {}
                )
                acked.append(cfg["configurable"]["checkpoint_id"])
                while other._portal.call(other.store.head(base)) < head:
                    other.put_writes(cfg, [("messages", len(writes))], f"task-{len(writes)}")
                    writes.append(len(writes))
            return replay(self, src, parts)

        monkeypatch.setattr(StatekeeperSaver, "_replay_plans", hooked)
        monkeypatch.delenv("STATEKEEPER_URL", raising=False)
        runner = CliRunner(env={"COLUMNS": "160", "NO_COLOR": "1", "TERM": "dumb"})
        out = runner.invoke(
            app, ["langgraph", "prune", "--db", fs_url, "--thread", thread, "--keep-last", "1"]
        )
        assert out.exit_code == 0, out.output
        assert acked, "the hook never ran: the command did not compact the thread"
        found = list(other.list(config(thread)))
        assert [t.checkpoint["id"] for t in found] == acked, (
            "the thread made again was moved or deleted: its checkpoint lost"
        )
        assert sorted(w[2] for w in found[0].pending_writes or []) == writes
        snap = other._portal.call(other.store.get(base))
        assert snap is not None and snap.data.get("moved") is None
    finally:
        other.close()


@pytest.mark.parametrize("same_seq", [False, True], ids=["any_seq", "same_seq"])
async def test_finishing_a_cut_over_spares_a_thread_made_again(fs_url: str, same_seq: bool) -> None:
    """A compaction that stopped between its fence and its seal leaves the old
    generation fenced and the new one unsealed; the next saver to resolve the thread
    seals it and deletes the old generation (``_finish_cutover``). That delete was
    unconditional: a thread deleted and written again by another process meanwhile (at
    the base id) was deleted, its acknowledged checkpoint lost. ``same_seq``: made again
    up to the fence's seq (on a store with ``cache_size=0`` the delete was made at that
    seq alone: test_langgraph_write_remade_uncached)."""
    thread = new_thread()
    first = await StatekeeperSaver.afrom_url(fs_url)
    try:
        await _write(first, thread, "run-old", 3)
        append = first.store.append

        async def stopped(agent_id: str, event_type: str, *a: Any, **kw: Any) -> Any:
            if event_type == m.EV_SEALED:
                raise RuntimeError("stopped before the seal")
            return await append(agent_id, event_type, *a, **kw)

        first.store.append = stopped  # type: ignore[method-assign]
        with pytest.raises(RuntimeError):
            await first.aprune([thread])
    finally:
        await first.aclose()
    saver = await StatekeeperSaver.afrom_url(fs_url)
    other = StatekeeperSaver.from_url(fs_url)  # another process
    base = m.agent_id(saver.prefix, thread)
    acked: list[str] = []
    try:
        assert len(await saver._generations(thread)) == 2  # fenced, and not sealed
        fenced = await saver.store.head(base)

        def remake() -> None:
            other.delete_thread(thread)
            cfg = other.put(config(thread), bare_checkpoint(), {"source": "input", "step": -1}, {})
            acked.append(cfg["configurable"]["checkpoint_id"])
            n = 0
            while same_seq and other._portal.call(other.store.head(base)) < fenced:
                other.put_writes(cfg, [("messages", n)], f"task-{n}")
                n += 1
            assert not same_seq or other._portal.call(other.store.head(base)) == fenced

        store = saver.store
        delete = store.delete

        async def hooked_delete(agent_id: str) -> bool:
            if agent_id == base and not acked:
                await off_context(remake)
            return await delete(agent_id)

        store.delete = hooked_delete  # type: ignore[method-assign]
        await saver.aget_tuple(config(thread))  # resolves it: finishes the cut-over
        assert acked, "the hook never ran: the cut-over was not finished"
        found = await asyncio.to_thread(lambda: list(other.list(config(thread))))
        assert [t.checkpoint["id"] for t in found] == acked, (
            "the thread made again was deleted: its checkpoint lost"
        )
    finally:
        other.close()
        await saver.aclose()
