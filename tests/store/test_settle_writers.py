"""A settle by one store while another writes the same agent: the writer's cached
snapshot base may be the row the settle removes (its next tails then name a base that
is gone: passed over by a load, tests/store/test_settle.py's "no false alarm" test).

What must hold, on SQLite and PostgreSQL with two stores on one database: every state
loads, ``verify`` is clean, nothing is logged as unusable, and no load replays more —
in events, in bytes or in the policy's replay cost — than the writer's snapshot
policy bounds it by (``SnapshotPolicy.due``: under 100 events, under 256 KiB, and
replay bytes + a cost per event under the starting row's bytes + 256 KiB). Why it
holds without the writer noticing: the writer's next whole snapshot falls due by its
count from the base it holds, which lies *below* the settled row; a load falling back
to the settled row replays a suffix of the events the policy bounds from that base.

Settled two ways: by an explicit ``settle`` with the writer's cache still valid (no
event written: the orphaned-tail case), and by the idle trigger of a store that saved
one event itself (the writer's next save then conflicts and reads the settled head)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.store.reads import ReadPath

from ..backends._services import fresh_url

_SIZE = 3000  # (a message: large enough that the policy's byte bound decides)
_LAST = 170


def _doc(n: int) -> dict[str, Any]:
    return {"messages": [{"c": f"m{i} " + "x" * _SIZE} for i in range(n)]}


async def _chat(store: StateStore, start: int, stop: int) -> None:
    for n in range(start + 1, stop + 1):
        await store.save("a", _doc(n))


async def _replays(url: str, monkeypatch: pytest.MonkeyPatch) -> dict[int, tuple[int, int, int]]:
    """Every state of ``a`` loaded cold: seq -> (events, bytes) its load replayed, and
    the stored bytes of the row it started from."""
    seen: dict[int, tuple[int, int, int]] = {}
    real = ReadPath.fold_from

    async def spy(self: ReadPath, record: Any, agent_id: str, *args: Any) -> Any:
        target = args[1]
        start = record.seq if record is not None else 0
        events = await self.backend.read(agent_id, start, target)
        row = await self.backend.latest_snapshot(agent_id, start) if start else None
        size = len(row.payload) if row is not None and row.seq == start else 0
        seen[target] = (target - start, sum(len(e.payload) for e in events), size)
        return await real(self, record, agent_id, *args)

    monkeypatch.setattr(ReadPath, "fold_from", spy)
    async with StateStore(url, cache_size=0) as fresh:
        for seq in range(1, _LAST + 1):
            assert (await fresh.load("a", at_seq=seq)).data == _doc(seq)
        assert (await fresh.verify()).problems == []
    monkeypatch.undo()
    return seen


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
@pytest.mark.parametrize("how", ["explicit", "idle"])
async def test_a_settle_by_another_store_never_makes_a_load_replay_more_than_the_policy(
    tmp_path: Path,
    engine: str,
    how: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    policy = StateStore("memory://")._snapshots  # (the default: "bounded")

    def beyond(replays: dict[int, tuple[int, int, int]]) -> dict[int, tuple[int, int, int]]:
        return {
            seq: (events, replayed, size)
            for seq, (events, replayed, size) in replays.items()
            if events >= policy.every
            or replayed >= (policy.max_replay_bytes or 0)
            or replayed + policy.event_cost * events
            >= max(size + policy.cost_base, policy.min_cost)
        }

    # the writer needs the chain it builds: no idle settle of its own
    with fresh_url(engine, tmp_path, "ref.db") as url:
        async with StateStore(url, settle_after=None) as writer:
            await _chat(writer, 0, _LAST)
        assert beyond(await _replays(url, monkeypatch)) == {}  # (the rule, as measured)
    for at in (55, 92, 130):  # past a tail, a whole row, a cumulative tail
        caplog.clear()
        with (
            caplog.at_level(logging.WARNING),
            fresh_url(engine, tmp_path / str(at), "s.db") as url,
        ):
            async with (
                StateStore(url, settle_after=None) as writer,
                StateStore(url, settle_after=0) as other,
            ):
                await _chat(writer, 0, at)
                if how == "explicit":
                    assert await other.settle("a") == at
                else:
                    await other.save("a", _doc(at + 1))
                    await other.idle_settled()
                    assert other.stats().idle_settles.settled == 1  # type: ignore[union-attr]
                await _chat(writer, at + (how == "idle"), _LAST)
            replays = await _replays(url, monkeypatch)
            assert [r.getMessage() for r in caplog.records if "unusable" in r.getMessage()] == []
        assert beyond(replays) == {}, at
