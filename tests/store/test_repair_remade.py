"""``repair --apply`` and an agent deleted and written again by another process after
repair replayed it: the snapshot rebuilt from the old stream is not written into the
new one. Written, it replaced the new stream's own snapshot at that seq: verify then
failed on a healthy agent ("snapshot does not belong to this stream's chain", repair's
exit 3), every load at or past that seq warned and fell back to a full replay — and a
new stream shorter than the snapshot's seq stopped the whole repair run with a
ConflictError. The hook stands where the other process's writes land: after repair's
verify and replay, before its write."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper.store import repair as repair_module
from statekeeper.store.repair import repair

from ._raw import Env, raw_env


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    with raw_env(request.param, tmp_path) as e:
        yield e


@pytest.mark.parametrize("new_head", [2, 4, 6, 9])
def test_a_snapshot_of_the_old_stream_is_not_written_into_the_new_one(
    env: Env, new_head: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def go() -> None:
        async with env.open(snapshot_every=3) as store:
            for n in range(1, 7):
                await store.save("a-1", {"who": "old", "n": n})
        env.raw.damage_snapshot("a-1", 3)

        async with env.open(snapshot_every=3) as other:  # "another process"
            replay = repair_module._rebuilt

            async def replayed_then_remade(*args: object) -> object:
                out = await replay(*args)  # type: ignore[arg-type]
                await other.delete("a-1")
                for n in range(1, new_head + 1):
                    await other.save("a-1", {"who": "new", "n": n})
                return out

            monkeypatch.setattr(repair_module, "_rebuilt", replayed_then_remade)
            async with env.open(snapshot_every=3) as store:
                report = await repair(store, ["a-1"], apply=True)
            monkeypatch.undo()

        # not written, and said so: run again
        assert [(p.seq, p.kind) for p in report.unrepairable] == [(3, "snapshot")]
        assert "run repair again" in report.unrepairable[0].reason
        assert report.changes == []  # (none rebuilt)
        async with env.open(snapshot_every=3) as fresh:
            assert (await fresh.verify(["a-1"])).ok
            assert (await fresh.load("a-1")).data == {"who": "new", "n": new_head}
            for n in range(1, new_head + 1):
                assert (await fresh.load("a-1", at_seq=n)).data == {"who": "new", "n": n}
            again = await repair(fresh, ["a-1"], apply=True)
            assert again.ok and again.changes == []

    asyncio.run(go())
