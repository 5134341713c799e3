"""Events left without a head row (a hand edit deleted the agent's row in ``sk_agents``,
a damaged copy) are invisible to every read and listing, and were invisible to
``verify`` too: it walks the listed agents, so a store holding such events verified
"OK". Verify of the whole store now names each such agent, with its seqs (SQLite and
PostgreSQL, one scan); events above a head are named by the agent's own check."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.store.verification import Problem

from ..cli._subprocess import cli_in_process
from ._raw import Env, raw_env


@pytest.fixture(params=["sqlite", "postgres"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    with raw_env(request.param, tmp_path) as e:
        yield e


def _agents_table(env: Env) -> str:
    return "{s}.sk_agents" if env.engine == "postgres" else "sk_agents"


async def _orphan(env: Env, *ids: str) -> None:
    """Save three events for each of ``ids`` and acme/kept, then delete the head rows
    of ``ids`` by hand."""
    async with env.open(witness=False) as store:
        for agent_id in (*ids, "acme/kept"):
            for n in range(3):
                await store.save(agent_id, {"n": n})
    mark = "%s" if env.engine == "postgres" else "?"
    for agent_id in ids:
        env.raw._run(f"DELETE FROM {_agents_table(env)} WHERE agent_id = {mark}", agent_id)  # type: ignore[attr-defined]


async def test_events_without_a_head_row_are_named_by_verify(env: Env) -> None:
    await _orphan(env, "acme/gone", "globex/gone")
    async with env.open(witness=False) as store:
        assert [a.agent_id for a in await store.list_agents()] == ["acme/kept"]
        report = await store.verify()
        assert not report.ok
        assert report.problems == [
            Problem(
                agent_id,
                1,
                "3 event(s), seq 1..3, stored without a head row: orphaned (no read,"
                " listing or export sees them; left by a hand edit or a damaged copy)",
                "orphan",
            )
            for agent_id in ("acme/gone", "globex/gone")
        ]
        # verifying named agents checks those agents only
        assert (await store.verify(["acme/kept"])).ok
    # a view of one namespace names its own orphans only, by their relative ids
    async with StateStore(env.url_or_backend(), namespace="acme", witness=False) as acme:
        assert [p.agent_id for p in (await acme.verify()).problems] == []
        assert [p.agent_id for p in await acme.orphan_problems()] == ["gone"]
    async with StateStore(env.url_or_backend(), namespace="globex", witness=False) as globex:
        assert [p.agent_id for p in await globex.orphan_problems()] == ["gone"]


async def test_events_above_the_head_are_the_agent_s_own_finding(env: Env) -> None:
    await _orphan(env)
    mark = "%s" if env.engine == "postgres" else "?"
    env.raw._run(  # type: ignore[attr-defined]
        f"UPDATE {_agents_table(env)} SET head_seq = 1 WHERE agent_id = {mark}", "acme/kept"
    )
    async with env.open(witness=False) as store:
        problems = (await store.verify()).problems
    assert [(p.agent_id, p.kind) for p in problems] == [("acme/kept", "head")], problems
    assert "stream ends at seq 3, head is 1" in problems[0].reason


def test_the_cli_names_them(tmp_path: Path) -> None:
    import asyncio

    with raw_env("sqlite", tmp_path) as env:
        asyncio.run(_orphan(env, "acme/gone"))
        db = tmp_path / "raw.db"
        before = db.read_bytes()
        run = cli_in_process("verify", "--db", str(db), "--json")
        assert run.code == 1, str(run)
        report = json.loads(run.stdout)
        assert [(p["agent_id"], p["seq"], p["kind"]) for p in report["problems"]] == [
            ("acme/gone", 1, "orphan")
        ]
        assert "without a head row" in report["problems"][0]["reason"]
        assert db.read_bytes() == before  # verify changes nothing
