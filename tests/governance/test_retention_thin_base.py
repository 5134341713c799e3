"""A retention thinning never removes a stream's base, also one another process's
compaction made meanwhile. ``snapshot_every`` thins the snapshots above the base that
fall off its grid; planned on a whole stream (base 0), its prune names them with
``base_seq`` 0. Compacted by another process to one of them after the plan's last look,
before the prune's commit: that snapshot is the stream's base (its events up to it
gone), the only record of the state there. Was: the prune removed it — every load at or
below the next snapshot raised (state and history gone). Now the engine refuses the
prune in its own atomic step (ConfigurationError naming the agent and the seq),
nothing removed, and the run reports the action "failed" with that reason; the next
run plans on the new base."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.governance import Audit, parse_policy
from statekeeper.governance import retention as r
from statekeeper.governance.retention import RetentionPolicy, apply_retention
from statekeeper.governance.retention_raced import base_unchanged

from ..backends._services import fresh_url
from ._keyring import KEYRING

ADMIN = parse_policy('[principals.ops]\nadmin = ["**"]\n')


@pytest.mark.parametrize("engine", ["sqlite", "postgresql", "redis"])
@pytest.mark.parametrize("governed", [False, True], ids=["plain", "governed"])
async def test_a_thinning_never_removes_a_base_made_meanwhile(
    tmp_path: Path, engine: str, governed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    options: dict[str, Any] = (
        {"keyring": KEYRING, "principal": "ops", "policy": ADMIN, "audit": Audit()}
        if governed
        else {}
    )
    policy = RetentionPolicy.parse("acme snapshot_every=20\n")
    with fresh_url(engine, tmp_path) as url:
        async with (
            StateStore(url, snapshot_every=10, **options) as store,
            StateStore(url, **options) as other,
        ):
            for i in range(1, 36):
                await store.save("acme/b", {"n": i})
            assert await store.backend.latest_snapshot("acme/b", 19) is not None  # (at 10)
            compacted: list[int] = []

            async def then_compacted(*args: Any) -> None:
                await base_unchanged(*args)  # (the plan's last look)
                if not compacted:  # another process's keep_last, right after the last look
                    compacted.append(1)
                    keep = RetentionPolicy.parse("acme keep_last=25\n")
                    assert [a.outcome for a in (await apply_retention(other, keep)).actions] == [
                        "done"
                    ]
                    assert await other.backend.stream_bases(["acme/b"]) == [10]

            monkeypatch.setattr(r, "base_unchanged", then_compacted)
            report = await apply_retention(store, policy)
            monkeypatch.undo()
            assert compacted
            [action] = report.actions
            assert (action.agent_id, action.outcome) == ("acme/b", "failed")
            assert "'acme/b'" in action.reason and "seq 10" in action.reason
        async with StateStore(url, **options) as fresh:  # (nothing cached)
            assert await fresh.backend.stream_bases(["acme/b"]) == [10]
            for seq in (10, 11, 19, 35):
                assert (await fresh.load("acme/b", at_seq=seq)).data == {"n": seq}
            assert (await fresh.verify()).problems == []
            # the next run plans on the new base: nothing left to thin (20 on the grid,
            # 30 the latest, 10 the base), nothing failed
            assert (await apply_retention(fresh, policy)).actions == []
            assert (await fresh.load("acme/b", at_seq=11)).data == {"n": 11}
