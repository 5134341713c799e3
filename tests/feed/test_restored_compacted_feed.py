"""A stream compacted by retention, restored or imported into another store, enters
the target's change feed at its first event after the base. The target's feed was not
trimmed, so a projection rebuilt there from position 0 folded those events onto
nothing and counted none of the history before them, without an error (trial of commit
0143e545: ``transitions`` rebuilt on the restored store counted 4 moves of each kind
where the source's live read model had 12, and ``agent_activity`` gave the compacted
agent 10 events and a first activity 68 minutes late). The source's retention had
trimmed its own feed over those events, so the same rebuild there raises
``FeedPositionCompacted``. A restore and an import now raise the target's floor over
each compacted stream's first event: the rebuild says so too, and a rebuild from the
states gives the live read model's states. Every engine a restore targets."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.cli.transfer import export_agents, import_agents
from statekeeper.errors import FeedPositionCompacted
from statekeeper.feed import ProjectionRunner
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from ..backends._services import fresh_url

MOVES = ["start_processing", "call_tool", "receive_result", "complete", "reset"]
PATH = ["idle", "processing", "tool_call", "processing", "completed", "idle"]


async def _fill(store: StateStore) -> None:
    """``keep/x``: 1 + 6 rounds of 5 moves (31 events), ``t/y``: 1 + 1 round."""
    for agent, rounds in (("keep/x", 6), ("t/y", 1)):
        await store.save(agent, {"n": 0}, fsm_state="idle")
        for r in range(rounds):
            for i, move in enumerate(MOVES):
                await store.save(
                    agent, {"n": r * 5 + i + 1}, fsm_state=PATH[i + 1],
                    info={"event": move, "from": PATH[i], "to": PATH[i + 1]},
                )  # fmt: skip


async def _models(runner: ProjectionRunner) -> dict[str, list[tuple[object, ...]]]:
    return {
        "agent_states": await runner.query("SELECT agent_id, state, seq FROM agent_states"),
        "transitions": await runner.query("SELECT * FROM transitions ORDER BY 1, 2"),
    }


async def _source(tmp_path: Path) -> tuple[dict[str, list[tuple[object, ...]]], Path, bytes]:
    """The live read models, then keep/x compacted to its last 10; a backup and an
    export of the compacted store."""
    key = BackupKey(b"k" * 32)
    with fresh_url("sqlite", tmp_path) as url:
        async with StateStore(url) as store:
            await _fill(store)
            async with ProjectionRunner(store, tmp_path / "live.db") as runner:
                await runner.catch_up()
                live = await _models(runner)
            report = await apply_retention(store, RetentionPolicy.parse("keep keep_last=10"))
            assert [(a.agent_id, a.events_removed) for a in report.actions] == [("keep/x", 21)]
            await backup(store, tmp_path / "full.skb", key)
            out = io.BytesIO()
            await export_agents(store, None, out)
    return live, tmp_path / "full.skb", out.getvalue()


Models = dict[str, list[tuple[object, ...]]]


async def _check_target(store: StateStore, live: Models, rm: Path) -> None:
    floor, _ = await store.feed_bounds()
    assert floor >= 1  # the compacted stream's history is not offered from position 0
    with pytest.raises(FeedPositionCompacted):
        async for _ in store.subscribe(0, stop_at_head=True):
            pass
    async with ProjectionRunner(store, rm) as runner:
        with pytest.raises(FeedPositionCompacted):  # was: 3 of each move where live had 7
            await runner.catch_up()
        await runner.rebuild("agent_states", from_states=True)
        assert (await _models(runner))["agent_states"] == live["agent_states"]
    # the kept history itself is all there, per agent, as on the source
    assert [e.seq async for e in store.history("keep/x", after_seq=21)] == list(range(22, 32))


@pytest.mark.parametrize("target", ["sqlite", "postgresql", "redis"])
async def test_a_restored_compacted_stream_raises_the_targets_feed_floor(
    tmp_path: Path, target: str
) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "dst").mkdir()
    live, made, _ = await _source(tmp_path / "src")
    assert live["transitions"][0] == ("completed", "idle", 7)
    with fresh_url(target, tmp_path / "dst") as url:
        async with StateStore(url) as store:
            await restore(store, [made], BackupKey(b"k" * 32))
            await _check_target(store, live, tmp_path / "dst" / "rm.db")


@pytest.mark.parametrize("target", ["sqlite", "postgresql", "redis"])
async def test_an_imported_compacted_stream_raises_the_targets_feed_floor(
    tmp_path: Path, target: str
) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "dst").mkdir()
    live, _, exported = await _source(tmp_path / "src")
    with fresh_url(target, tmp_path / "dst") as url:
        async with StateStore(url) as store:  # import never creates a store
            await store.save("made/by-init", {})
            await store.delete("made/by-init")
        await import_agents(url, io.BytesIO(exported))
        async with StateStore(url) as store:
            await _check_target(store, live, tmp_path / "dst" / "rm.db")


async def test_a_restore_of_whole_streams_leaves_the_feed_whole(tmp_path: Path) -> None:
    """Nothing compacted: the restored feed starts at 0 and a rebuild gives the live
    read model (the floor is raised only over a compacted stream)."""
    key = BackupKey(os.urandom(32))
    with fresh_url("sqlite", tmp_path, "src.db") as url:
        async with StateStore(url) as store:
            await _fill(store)
            async with ProjectionRunner(store, tmp_path / "live.db") as runner:
                await runner.catch_up()
                live = await _models(runner)
            await backup(store, tmp_path / "full.skb", key)
    with fresh_url("sqlite", tmp_path, "dst.db") as url:
        async with StateStore(url) as store:
            await restore(store, [tmp_path / "full.skb"], key)
            assert (await store.feed_bounds())[0] == 0
            async with ProjectionRunner(store, tmp_path / "rm.db") as runner:
                await runner.catch_up()
                assert await _models(runner) == live


@pytest.mark.parametrize("how", ["restore", "import"])
async def test_a_run_again_with_skip_existing_raises_the_floor_a_stopped_run_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """A restore or an import stopped after its writes and before the floor (killed
    there; or run by a version that did not raise it) is run again with
    ``skip_existing``: it finds every agent there and writes nothing. It raised nothing
    either, so the compacted stream's gap stayed in the feed for good (a rebuild from 0
    counted 3 of each move where the live read model had 7, silently)."""
    import importlib

    restore_module = importlib.import_module("statekeeper.governance.backup.restore")
    restoretarget = importlib.import_module("statekeeper.governance.backup.restoretarget")
    imagewrite = importlib.import_module("statekeeper.governance.backup.imagewrite")
    feed_retention = importlib.import_module("statekeeper.store.feed_retention")

    (tmp_path / "src").mkdir()
    (tmp_path / "dst").mkdir()
    live, made, exported = await _source(tmp_path / "src")
    key = BackupKey(b"k" * 32)

    async def stopped(store: StateStore, bases: dict[str, int], skipped: object = None) -> None:
        return None  # the run ends (killed) before it raises the floor

    with fresh_url("sqlite", tmp_path / "dst") as url:
        async with StateStore(url) as store:
            await store.save("made/by-init", {})
            await store.delete("made/by-init")
            with monkeypatch.context() as m:
                m.setattr(restore_module, "_floor_over_bases", stopped)
                m.setattr(restoretarget, "floor_over_bases", stopped)
                # ...and its writes raised none either (a version before the floor went
                # up with each compacted stream's write: test_floor_with_the_write.py)
                m.setattr(feed_retention, "_takes_floor", lambda engine: False)
                m.setattr(imagewrite, "is_store_admin", lambda store: False)
                if how == "restore":
                    await restore(store, [made], key)
                else:
                    await import_agents(url, io.BytesIO(exported))
            assert (await store.feed_bounds())[0] == 0  # the stopped run's gap
            if how == "restore":
                await restore(store, [made], key, skip_existing=True)
            else:
                _, _, skipped = await import_agents(url, io.BytesIO(exported), skip_existing=True)
                assert sorted(skipped) == ["keep/x", "t/y"]
        async with StateStore(url) as store:
            await _check_target(store, live, tmp_path / "dst" / "rm.db")


async def test_a_skipped_whole_stream_of_the_same_id_keeps_the_feed_whole(
    tmp_path: Path,
) -> None:
    """``skip_existing`` over an agent the target holds whole (its own history, at
    another base than the file's): its feed is not trimmed for it."""
    (tmp_path / "src").mkdir()
    (tmp_path / "dst").mkdir()
    _, _, exported = await _source(tmp_path / "src")
    with fresh_url("sqlite", tmp_path / "dst") as url:
        async with StateStore(url) as store:
            await _fill(store)  # keep/x whole: 31 events, the file's head too
        _, _, skipped = await import_agents(url, io.BytesIO(exported), skip_existing=True)
        assert sorted(skipped) == ["keep/x", "t/y"]
        async with StateStore(url) as store:
            assert (await store.feed_bounds())[0] == 0
