"""``load(at_time=...)`` of a stream whose history retention compacted (``keep_last``):
a time before the first kept event answered ``AgentNotFound`` — "the agent did not exist
then" — also for a time at which it existed: one whose state is the retention base
itself (kept, as a snapshot), and one whose history is gone. Now the first gets the
base's state, the second ``HistoryCompacted``; only a time before the agent was created
is ``AgentNotFound``."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import AgentNotFound, HistoryCompacted
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from ..backends._services import fresh_url


@pytest.mark.parametrize("engine", ["memory", "sqlite", "postgresql"])
async def test_a_time_before_the_kept_events_is_the_base_or_history_compacted(
    tmp_path: Path, engine: str
) -> None:
    now = [1000.0]
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url, clock=lambda: now[0]) as store:
            for i in range(10):  # seq i + 1 written at 1010, 1020, ... 1100
                now[0] = 1010.0 + 10 * i
                await store.save("a", {"i": i})
            report = await apply_retention(store, RetentionPolicy.parse("* keep_last=3\n"))
            assert [(a.kind, a.outcome) for a in report.actions] == [("compact", "done")]
            # the base: seq 7 (written at 1070), kept as a snapshot; events 8..10 kept
            for at in (1070.0, 1075.0):
                assert (await store.load("a", at_time=at)).data == {"i": 6}
            assert (await store.load("a", at_time=1085.0)).data == {"i": 7}
            for at in (1010.0, 1065.0):  # it existed, its state there is compacted away
                with pytest.raises(HistoryCompacted) as caught:
                    await store.load("a", at_time=at)
                assert caught.value.base_seq == 7
            with pytest.raises(AgentNotFound):  # before it was created
                await store.load("a", at_time=1005.0)
