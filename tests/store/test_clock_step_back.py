"""A stream's event times never go back, whatever the writer's wall clock does
(trialtime): a clock stepped back (NTP, a resumed VM, a second writer whose clock is
behind) stamped the next event before its head's, so ``load(at_time=...)`` showed a
state after an event stamped later than the time asked for, the agent's last write
time went back, and a TTL purge deleted an agent written just now as one idle since."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper import StateStore, StateTransition
from statekeeper.governance.retention import apply_retention
from statekeeper.governance.retention_policy import RetentionPolicy, Rule

HOUR = 3600.0


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _url(engine: str, tmp_path: Path) -> str:
    return "memory://" if engine == "memory" else f"sqlite:///{tmp_path / 'c.db'}"


async def _times(store: StateStore, agent_id: str) -> list[float]:
    return [e.timestamp async for e in store.history(agent_id)]


@pytest.mark.parametrize("engine", ["memory", "sqlite"])
@pytest.mark.parametrize("durability", ["sync", "async"])
async def test_time_travel_after_the_clock_stepped_back(
    tmp_path: Path, engine: str, durability: str
) -> None:
    clock = Clock(1000.0)
    async with StateStore(_url(engine, tmp_path), clock=clock, durability=durability) as store:
        await store.save("a", {"v": 1})
        clock.now = 2000.0
        await store.save("a", {"v": 2})
        clock.now = 1500.0  # stepped back
        await store.save("a", {"v": 3})
        await store.append("a", "note", {"n": 1})  # (an event with info: another path)
        await store.flush()
        assert await _times(store, "a") == [1000.0, 2000.0, 2000.0, 2000.0]
        # at 1800 the stream says v=2 was not written yet, nor v=3 after it
        assert (await store.load("a", at_time=1800.0)).data == {"v": 1}
        assert (await store.load("a")).updated_at == 2000.0
        listed = [i async for i in store.iter_agents()]
        assert [i.updated_at for i in listed] == [2000.0]


async def test_a_second_writer_whose_clock_is_behind(tmp_path: Path) -> None:
    url = _url("sqlite", tmp_path)
    async with StateStore(url, clock=Clock(5000.0)) as ahead:
        await ahead.save("a", {"v": 1})
    # another process, its clock an hour behind, writes the agent it loads cold
    async with StateStore(url, clock=Clock(5000.0 - HOUR)) as behind:
        agent = await behind.agent("a")
        agent.data["v"] = 2
        await agent.save()
        await agent.transition(StateTransition.START_PROCESSING)
    async with StateStore(url) as store:
        assert await _times(store, "a") == [5000.0, 5000.0, 5000.0]


async def test_a_ttl_purge_keeps_an_agent_written_after_the_clock_stepped_back(
    tmp_path: Path,
) -> None:
    clock = Clock(100 * HOUR)
    async with StateStore(_url("sqlite", tmp_path), clock=clock) as store:
        await store.save("a", {"v": 1})
        clock.now -= 24 * HOUR  # the clock stepped back a day
        await store.save("a", {"v": 2})  # written just now
        clock.now += 24 * HOUR  # and forward again (NTP)
        policy = RetentionPolicy(rules=(Rule("*", ttl=HOUR),))
        report = await apply_retention(store, policy, now=clock.now + 60)
        assert [a.kind for a in report.actions if a.outcome == "done"] == []
        assert (await store.load("a")).data == {"v": 2}
