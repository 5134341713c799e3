"""A rollback (and finalize's release) retrying an agent pauses between its tries with
migrate's bounded backoff (:func:`statekeeper.schema.report.pause`).

An agent whose rollback write is refused -- a live process wrote it first (its head
moved), or a rewrite refused as planned before a retention prune -- is read, planned
and written again up to :data:`RETRIES` times. Migrate pauses between those tries
(0.5 ms more each time, at most 20 ms); rollback and finalize did not: an agent a live
process kept writing for a tenth of a second spent all 50 tries in a few milliseconds
of it and was reported failed (the run left unfinished). Here the pauses are counted,
not slept: the injected sleep advances a clock of the test's own, and the live writer
stays hot for :data:`HOT` seconds of that clock. No wall-clock timing.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.schema import TypedStates
from statekeeper.schema.migrate import ROLLBACK_EVENT, finalize, migrate, rollback
from statekeeper.schema.report import RETRIES

from . import apps
from ._stores import store_url
from .test_migrate_planned_before_prune import _populate, _refuse, _versions

#: the module (``statekeeper.schema.report``): its ``_sleep`` is what ``pause`` waits with
REPORT = importlib.import_module("statekeeper.schema.report")
#: how long (seconds of the pauses' clock) the live writer keeps writing ``a1``
HOT = 0.1


class _Clock:
    """The time the pauses stand for: each injected sleep adds its delay, nothing else."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []

    async def sleep(self, delay: float) -> None:
        self.waits.append(delay)
        self.now += delay

    def hot(self) -> bool:
        return self.now < HOT


def _backoff(pauses: int) -> list[float]:
    """The delays of migrate's backoff for that many pauses (tries 1, 2, ...)."""
    return [min(0.0005 * attempt, 0.02) for attempt in range(1, pauses + 1)]


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async with store_url(request.param, tmp_path) as found:
        yield found


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    clock = _Clock()
    monkeypatch.setattr(REPORT, "_sleep", clock.sleep)
    return clock


async def test_an_agent_written_by_a_live_process_for_a_while_is_rolled_back(
    url: str, tmp_path: Path, clock: _Clock
) -> None:
    journal = tmp_path / "journal.json"
    async with StateStore(url, snapshot_every=2) as store:
        await _populate(store)
        report = await migrate(store, apps.support_v2, journal=journal)
        assert report.changed == 3 and report.ok, report.failed
        live = TypedStates(store, apps.support_v2)  # a process still on v2
        writes: list[int] = []

        async def write_live() -> None:
            state = await live.load("a1")
            state.tags.append(f"live-{len(writes)}")
            await live.save("a1", state)
            writes.append(len(writes))

        await write_live()  # (a1 written since its migration: rolled back by an event)
        append = store.append

        async def racing(agent_id: str, event_type: str, *args: Any, **kwargs: Any) -> Any:
            if agent_id == "a1" and event_type == ROLLBACK_EVENT and clock.hot():
                await write_live()  # its write lands first: the rollback's is refused
            return await append(agent_id, event_type, *args, **kwargs)

        store.append = racing  # type: ignore[method-assign]
        try:
            back = await rollback(store, apps.support_v2, journal=journal)
        finally:
            del store.append
        assert back.ok and back.changed == 3, back.failed
        refused = len(writes) - 1  # (the first: before the rollback)
        assert 1 < refused < RETRIES and back.retries == refused
        assert clock.waits == _backoff(refused)  # one pause before each retry
        assert await _versions(store) == {"a0": 1, "a1": 1, "a2": 1}
        tags = (await store.load("a1")).data["tags"]
        assert tags[-refused - 1 :] == [f"live-{i}" for i in range(refused + 1)]


async def test_a_release_refused_for_a_while_is_released(tmp_path: Path, clock: _Clock) -> None:
    """finalize's release of a1 (its head event's pre-migration bytes dropped) refused
    while a retention prune keeps landing first, for :data:`HOT` seconds."""
    url, journal = f"sqlite:///{tmp_path / 'f.db'}", tmp_path / "journal.json"
    async with StateStore(url, snapshot_every=2) as store:
        await _populate(store)
        report = await migrate(store, apps.support_v2, journal=journal)
        assert report.changed == 3 and report.ok, report.failed
        log = _refuse(store, None, hot=clock.hot)
        done = await finalize(store, apps.support_v2, journal=journal)
        assert done.ok and done.released == 3, done.failed
        refused = len(log) - 1  # (the page's try, then a1's own)
        assert 1 < refused < RETRIES and not clock.hot()
        assert clock.waits == _backoff(refused)
