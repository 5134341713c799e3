"""Retention never compacts away a durable step's record: a recorded step stays done.

Before the fix, ``keep_last`` pruned the step's event and idempotency key, so a rerun
(a new ``Steps``) found no record and ran the step's side effect again, silently.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.concurrency.steps import Steps
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from ..backends._services import fresh_url

POLICY = RetentionPolicy.parse("* keep_last=2\n")


@pytest.mark.parametrize("engine", ["memory", "sqlite", "postgresql", "redis"])
async def test_a_recorded_step_is_not_run_again_after_compaction(
    engine: str, tmp_path: Path
) -> None:
    calls: list[int] = []

    def pay() -> dict[str, int]:
        calls.append(1)
        return {"paid": 42}

    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url) as store:
            await store.create("o", {"n": 0})
            assert await Steps(store, "o").run("pay", pay) == {"paid": 42}
            for n in range(1, 11):
                await store.save("o", {"n": n})
            report = await apply_retention(store, POLICY)
            (action,) = report.actions
            assert action.kind == "compact"
            assert "durable step" in action.reason
            # a rerun (a new Steps, as after a restart) finds the step done
            assert await Steps(store, "o").run("pay", pay) == {"paid": 42}
            assert calls == [1]
            assert await Steps(store, "o").results() == {"pay": {"paid": 42}}
            assert (await store.load("o")).data == {"n": 10}


async def test_history_before_the_first_step_is_still_compacted(tmp_path: Path) -> None:
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}") as store:
        await store.create("o", {"n": 0})
        for n in range(1, 6):
            await store.save("o", {"n": n})
        step_seq = (await store.load("o")).seq + 1
        await Steps(store, "o").run("send", lambda: "sent")
        for n in range(6, 12):
            await store.save("o", {"n": n})
        report = await apply_retention(store, POLICY)
        (action,) = report.actions
        assert action.outcome == "done"
        assert action.base_seq == step_seq - 1  # everything before the step record: gone
        assert action.events_removed == step_seq - 1
        assert await Steps(store, "o").run("send", lambda: "again") == "sent"
        assert (await store.load("o")).data == {"n": 11}
