"""``statekeeper repair --apply`` and an agent deleted and written again by another
process while it ran: the snapshot rebuilt from the old stream is left unwritten and
the row says to run repair again. The CLI titled that row "Not repairable (restore
from a backup)", counted it among the problems "repair cannot fix" and exited 3 —
sending the user to a backup for a healthy agent. It has its own heading and exit 1
(repairs still to make: run again), as a dry run's pending repairs do."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from statekeeper.store import repair as repair_module
from tests.store._raw import raw_env

from ._proc import run_in_process


def _cli(*args: str) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEKEEPER_")}
    env["COLUMNS"] = "200"
    code, stdout, _ = run_in_process(args, env)
    return code, stdout


@pytest.mark.parametrize("damage_other", [False, True])
@pytest.mark.parametrize("json_out", [False, True])
def test_a_snapshot_left_unwritten_says_run_again_not_restore(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, json_out: bool, damage_other: bool
) -> None:
    with raw_env("sqlite", tmp_path) as env:

        async def populate() -> None:
            async with env.open(snapshot_every=3) as store:
                for n in range(1, 7):
                    await store.save("a-1", {"who": "old", "n": n})
                    await store.save("a-2", {"n": n})

        asyncio.run(populate())
        env.raw.damage_snapshot("a-1", 3)
        if damage_other:  # a damaged event too: that one is for a backup (exit 3)
            env.raw._run(  # type: ignore[attr-defined]
                "UPDATE sk_events SET payload = CAST('x' AS BLOB) WHERE agent_id='a-2' AND seq=5"
            )
        url = env.url_or_backend()
        assert isinstance(url, str)
        replay = repair_module._rebuilt

        async def replayed_then_remade(store: object, agent_id: str, seqs: object) -> object:
            out = await replay(store, agent_id, seqs)  # type: ignore[arg-type]
            async with env.open(snapshot_every=3) as other:  # "another process"
                await other.delete(agent_id)
                for n in range(1, 5):
                    await other.save(agent_id, {"who": "new", "n": n})
            return out

        monkeypatch.setattr(repair_module, "_rebuilt", replayed_then_remade)
        code, out = _cli("repair", "a-1", "a-2", "--apply", "--db", url, *(["--json"] * json_out))
        monkeypatch.undo()

    assert code == (3 if damage_other else 1), out
    if json_out:
        report = json.loads(out)
        assert [(p["agent_id"], p["seq"]) for p in report["run_again"]] == [("a-1", 3)]
        assert [(p["agent_id"], p["kind"]) for p in report["unrepairable"]] == (
            [("a-2", "event")] if damage_other else []
        )
        return
    assert "Not written: the agent changed while repair ran (run repair again)" in out
    assert "1 snapshot(s) not written: their agent changed while repair ran" in out
    if damage_other:
        assert "Not repairable (restore from a backup)" in out
        assert "✗ 1 problem(s) repair cannot fix" in out
    else:
        assert "restore from a backup" not in out and "cannot fix" not in out


@pytest.mark.parametrize("json_out", [False, True])
def test_when_nothing_was_written_the_summary_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, json_out: bool
) -> None:
    """Every snapshot to rebuild left unwritten (its agent changed meanwhile): the
    summary read "✓ rebuilt 0 snapshot(s)" in green above the line that said they were
    not written. It now says nothing was rebuilt and why; exit 1, and ``--json``
    counts the same (``rebuilt`` 0, ``not_written`` 2, ``ok`` false)."""
    with raw_env("sqlite", tmp_path) as env:

        async def populate() -> None:
            async with env.open(snapshot_every=2) as store:
                for n in range(1, 6):
                    await store.save("a-1", {"who": "old", "n": n})

        asyncio.run(populate())
        env.raw.damage_snapshot("a-1", 2)
        env.raw.damage_snapshot("a-1", 4)
        url = env.url_or_backend()
        assert isinstance(url, str)
        replay = repair_module._rebuilt

        async def replayed_then_remade(store: object, agent_id: str, seqs: object) -> object:
            out = await replay(store, agent_id, seqs)  # type: ignore[arg-type]
            async with env.open(snapshot_every=2) as other:  # "another process"
                await other.delete(agent_id)
                for n in range(1, 6):
                    await other.save(agent_id, {"who": "new", "n": n})
            return out

        monkeypatch.setattr(repair_module, "_rebuilt", replayed_then_remade)
        code, out = _cli("repair", "--apply", "--db", url, *(["--json"] * json_out))
        monkeypatch.undo()

    assert code == 1, out
    if json_out:
        report = json.loads(out)
        assert (report["applied"], report["ok"], report["changes"]) == (True, False, [])
        assert (report["rebuilt"], report["not_written"]) == (0, 2)
        assert [(p["agent_id"], p["seq"]) for p in report["run_again"]] == [("a-1", 2), ("a-1", 4)]
        return
    assert "✓" not in out and "rebuilt 0" not in out, out
    assert "nothing rebuilt — 1 agent(s), 5 event(s), 2 snapshot(s) checked" in out
    assert "2 snapshot(s) not written: their agent changed while repair ran; run repair" in out
