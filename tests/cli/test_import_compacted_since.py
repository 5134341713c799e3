"""An import stopped part-way through an agent (a SIGKILL, Ctrl-C), then a retention
run on the target compacting what it left (``keep_last``), then the same import run
again with ``--skip-existing``, as the docs say to: the agent is completed. Before, the
rerun found the start of the agent compacted away, took it for the target's own agent
and skipped it — exit 0, "verified", the agent left at the seq the stopped import
reached (older than the file, its later events never written), with no error.

The stopped import is the import of the file cut after the agent's seq ``upto`` (what a
process killed there leaves: the events up to it, each committed): no timing."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import HistoryCompacted
from statekeeper.governance.retention import RetentionPolicy, apply_retention
from statekeeper.records import Snapshot

from ..backends._services import fresh_url
from ._proc import ENGINES, sk_in_process

#: agent -> the seq the stopped import reached
STOPPED_AT = {"whole": 8, "kept": 11}


async def _fill(url: str) -> dict[str, Snapshot]:
    """``whole`` (12 events) and ``kept`` (12 events, compacted to base 9 in the
    source); every state a load of them returns, by ``agent@seq``."""
    async with StateStore(url, snapshot_every=4) as store:
        for i in range(12):
            for agent_id in ("whole", "kept"):
                await store.save(agent_id, {"i": i, "of": agent_id}, fsm_state=f"s{i % 3}")
        report = await apply_retention(store, RetentionPolicy.parse("* keep_last=3\nhold whole"))
        assert [(a.agent_id, a.base_seq) for a in report.actions] == [("kept", 9)]
        return {
            f"{agent_id}@{seq}": await store.load(agent_id, at_seq=seq)
            for agent_id, first in (("whole", 1), ("kept", 9))
            for seq in range(first, 13)
        }


def _cut(file: Path, out: Path) -> None:
    """``file`` as an import stopped at :data:`STOPPED_AT` wrote it."""
    lines = [json.loads(line) for line in file.read_text().splitlines()]
    kept: list[dict[str, object]] = [lines[0]]
    for line in lines[1:]:
        agent_id = line.get("agent_id") or line.get("base") or line.get("end")
        if agent_id not in STOPPED_AT:
            continue
        upto = STOPPED_AT[str(agent_id)]
        if "end" in line:
            last = next(x for x in reversed(kept) if x.get("agent_id") == agent_id)
            line = {**line, "seq": upto, "state": last["fsm"]}
        elif "agent_id" in line and int(str(line["seq"])) > upto:
            continue
        kept.append(line)
    events = sum("agent_id" in x for x in kept)
    kept.append({"complete": {"agents": len(STOPPED_AT), "events": events}})
    out.write_text("\n".join(json.dumps(x) for x in kept) + "\n")


async def _compact(url: str) -> dict[str, int]:
    """A retention run on the target (``keep_last=1``): the bases it made."""
    async with StateStore(url) as store:
        report = await apply_retention(store, RetentionPolicy.parse("* keep_last=1"))
        assert {a.outcome for a in report.actions} == {"done"}, report.actions
        return {a.agent_id: a.base_seq for a in report.actions}


async def _loaded(url: str, want: dict[str, Snapshot], bases: dict[str, int]) -> None:
    async with StateStore(url) as store:
        for at, snap in want.items():
            agent_id, seq = at.split("@")
            if int(seq) < bases[agent_id]:
                with pytest.raises(HistoryCompacted):  # (the target's retention run)
                    await store.load(agent_id, at_seq=int(seq))
                continue
            assert await store.load(agent_id, at_seq=int(seq)) == snap, at
        assert (await store.verify()).ok


@pytest.mark.parametrize("engine", ENGINES)
def test_an_import_stopped_then_compacted_on_the_target_is_completed_by_the_rerun(
    engine: str, tmp_path: Path
) -> None:
    with (
        fresh_url(engine, tmp_path, "source.db") as source,
        fresh_url(engine, tmp_path / "t", "target.db") as target,
    ):
        (tmp_path / "t").mkdir(exist_ok=True)
        want = asyncio.run(_fill(source))
        file, stopped = tmp_path / "agents.jsonl", tmp_path / "stopped.jsonl"
        assert sk_in_process("export", "--db", source, "-o", str(file)).returncode == 0
        _cut(file, stopped)
        assert sk_in_process("init", target).returncode == 0
        first = sk_in_process("import", str(stopped), "--db", target)
        assert first.returncode == 0, first.stderr
        bases = asyncio.run(_compact(target))
        assert bases == {"whole": 7, "kept": 10}
        again = sk_in_process("import", str(file), "--db", target, "--skip-existing", "--json")
        assert again.returncode == 0, again.stderr
        said = json.loads(again.stdout)
        assert said["skipped"] == []  # (before: both, each left at the seq it reached)
        assert said["events"] == (12 - 8) + (12 - 11)
        asyncio.run(_loaded(target, want, bases))
