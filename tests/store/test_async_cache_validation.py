"""A write-behind store (``durability="async"``) served its cached states unchecked,
although ``validate_cache`` (on by default) promises a cached state is checked against
the stored head: the state another process wrote since — even a new incarnation of
the agent, deleted and re-created — was never seen, and ``load`` returned a state
older than the ``head`` it reported, without an error. Its loads now validate the
cache as the other modes do (states with buffered appends are still its own, and its
saves still build on the cached state: the flush checks them)."""

from __future__ import annotations

from pathlib import Path

from statekeeper import StateStore


async def test_a_write_behind_store_sees_what_another_process_wrote(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    async with StateStore(url) as other, StateStore(url, durability="async") as mine:
        await other.save("a", {"n": 1})
        assert (await mine.load("a")).data == {"n": 1}  # cached now
        await other.save("a", {"n": 2})
        assert await mine.head("a") == 2
        assert (await mine.load("a")).data == {"n": 2}  # (was: {"n": 1})
        assert (await mine.get("a")).data == {"n": 2}  # type: ignore[union-attr]
        # another incarnation, up to the same seq
        await other.delete("a")
        await other.save("a", {"n": "new"})
        await other.save("a", {"n": "new", "m": 2})
        assert (await mine.load("a")).data == {"n": "new", "m": 2}
        await other.delete("a")
        assert await mine.get("a") is None
        # its own buffered state is still served before the flush, then stored
        await mine.save("a", {"mine": 1})
        assert (await mine.load("a")).data == {"mine": 1}
        await mine.flush()
        assert (await other.load("a")).data == {"mine": 1}


async def test_a_single_writer_may_still_turn_validation_off(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    async with (
        StateStore(url) as other,
        StateStore(url, durability="async", validate_cache=False) as mine,
    ):
        await other.save("a", {"n": 1})
        assert (await mine.load("a")).data == {"n": 1}
        await other.save("a", {"n": 2})
        assert (await mine.load("a")).data == {"n": 1}  # served as cached, as asked
