"""A new agent's id is *normal*: ``/``-separated segments, none empty, ``.`` or ``..``
(the rule a namespace follows). ``tb/../ta/x``, ``tb//x``, ``tb/x/``, ``/x``, ``./x``
were created through a whole-store (or governed) store and then read as something they
are not: ``tb/../ta/x`` reads as ta's ``ta/x`` while the policy puts it in ``tb``, a
store opened in ``tb`` listed ``../ta/x`` and ``/x``, ids it then refused to load. Now
creating one is refused everywhere ids enter (the store, ``import``, the LangGraph
saver's prefix) with :class:`NonNormalAgentId` naming it; agents stored under such ids
before stay readable, writable, exportable and deletable."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import statekeeper.store.write_build as write_build
from statekeeper import StateStore
from statekeeper.errors import ConfigurationError, InvalidAgentId, NonNormalAgentId
from statekeeper.governance import parse_policy
from tests.cli._subprocess import cli, cli_env

BAD = ["tb/../ta/x", "tb//x", "tb/x/", "/x", "./x", "tb/./x", "..", "."]
POLICY = '[principals.tenant]\nread = ["tb/**"]\nwrite = ["tb/**"]\n'

Write = Callable[[StateStore, str], Awaitable[Any]]
WAYS: dict[str, Write] = {
    "save": lambda s, a: s.save(a, {"n": 1}),
    "save-state": lambda s, a: s.save(a, {"n": 1}, fsm_state="new"),
    "save-expected-0": lambda s, a: s.save(a, {"n": 1}, expected_seq=0),
    "create": lambda s, a: s.create(a, {"n": 1}),
    "keyed-save": lambda s, a: s.save(a, {"n": 1}, idempotency_key="k-1"),
}


@pytest.mark.parametrize("way", sorted(WAYS))
@pytest.mark.parametrize("bad", BAD)
async def test_no_agent_is_created_under_a_non_normal_id(
    tmp_path: Path, bad: str, way: str
) -> None:
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}") as store:
        with pytest.raises(NonNormalAgentId) as caught:
            await WAYS[way](store, bad)
        assert caught.value.agent_id == bad and repr(bad) in str(caught.value)
        assert isinstance(caught.value, InvalidAgentId)
        assert "none empty, '.' or '..'" in str(caught.value)
        assert await store.list_agents() == [] and await store.head(bad) == 0
        await store.save("tb/x", {"n": 1})  # a normal id, in the same store, still works
        assert [a.agent_id for a in await store.list_agents()] == ["tb/x"]


async def test_a_tenant_cannot_plant_an_id_that_reads_as_another_tenants(
    tmp_path: Path,
) -> None:
    """Allowed on ``tb/**``, the tenant wrote ``tb/../ta/x``: an agent that reads as
    ta's, that a store opened in ``tb`` lists as ``../ta/x`` and then refuses to load."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    policy = parse_policy(POLICY)
    async with StateStore(url, principal="tenant", policy=policy) as tenant:
        for bad in ("tb/../ta/x", "tb//x", "tb/x/"):
            with pytest.raises(NonNormalAgentId, match="is not a normal agent id"):
                await tenant.save(bad, {"planted": True})
        await tenant.save("tb/y", {"n": 1})
    async with StateStore(url, namespace="tb") as view:
        listed = [a.agent_id for a in await view.list_agents()]
        assert listed == ["y"]
        for agent_id in listed:  # every id a view lists, it can load
            await view.load(agent_id)


@pytest.fixture
def stored_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A store in which an earlier version created agents under non-normal ids."""
    url = f"sqlite:///{tmp_path / 'old.db'}"

    async def build() -> None:
        async with StateStore(url) as store:
            for agent_id in ("tb//x", "tb/../ta/x"):
                await store.save(agent_id, {"n": 1})
                await store.save(agent_id, {"n": 2})

    with monkeypatch.context() as m:  # (as the code before this rule did)
        m.setattr(write_build, "check_new_agent_id", lambda agent_id: agent_id)
        import asyncio

        asyncio.run(build())
    return url


async def test_agents_stored_under_such_ids_before_are_not_lost(stored_before: str) -> None:
    async with StateStore(stored_before) as store:
        assert [a.agent_id for a in await store.list_agents()] == ["tb/../ta/x", "tb//x"]
        for agent_id in ("tb//x", "tb/../ta/x"):
            assert (await store.load(agent_id)).data == {"n": 2}
            assert [e.seq async for e in store.history(agent_id)] == [1, 2]
            await store.save(agent_id, {"n": 3})  # an existing agent: written as before
            assert (await store.load(agent_id)).data == {"n": 3}
        report = await store.verify()
        assert report.ok and report.non_normal == ["tb/../ta/x", "tb//x"]  # named
        assert await store.delete("tb//x")
        assert [a.agent_id for a in await store.list_agents()] == ["tb/../ta/x"]


async def test_a_view_of_the_namespace_lists_only_ids_it_can_load(stored_before: str) -> None:
    """A store opened in ``tb`` listed ``../ta/x`` and ``/x`` and then refused them
    (``statekeeper --namespace tb agents`` failed outright): no relative id names them,
    so the view passes them over; the whole store reaches them."""
    async with StateStore(stored_before) as store:
        await store.save("tb/ok", {"n": 1})
    async with StateStore(stored_before, namespace="tb") as view:
        listed = [a.agent_id for a in await view.list_agents()]
        assert listed == ["ok"] and [a.agent_id async for a in view.iter_agents()] == listed
        for agent_id in listed:
            await view.load(agent_id)
        assert (await view.verify()).ok
    shown = cli("--namespace", "tb", "agents", "--json", "--db", stored_before)
    assert shown.code == 0, shown
    assert [a["agent_id"] for a in json.loads(shown.stdout)["agents"]] == ["ok"]
    checked = cli("verify", "--json", "--db", stored_before)
    assert checked.code == 0, checked
    assert json.loads(checked.stdout)["non_normal_ids"] == ["tb/../ta/x", "tb//x"]


def test_export_keeps_them_and_import_refuses_to_create_them(
    stored_before: str, tmp_path: Path
) -> None:
    exported = tmp_path / "out.jsonl"
    done = cli("export", "--db", stored_before, "-o", str(exported), env=cli_env())
    assert done.code == 0, done
    ids = {json.loads(line).get("agent_id") for line in exported.read_text().splitlines()}
    assert {"tb//x", "tb/../ta/x"} <= ids
    target = f"sqlite:///{tmp_path / 'new.db'}"
    assert cli("init", target).code == 0
    refused = cli("import", str(exported), "--db", target)
    assert refused.code == 2, refused
    assert "is not a normal agent id" in refused.stderr and "nothing was imported" in refused.stderr
    assert "'tb/../ta/x'" in refused.stderr or "'tb//x'" in refused.stderr
    listed = cli("agents", "--db", target, "--json")
    assert listed.code == 0 and json.loads(listed.stdout)["agents"] == [], listed


@pytest.mark.parametrize("prefix", ["lg//", "../lg/", "/lg/", "lg/./"])
def test_a_langgraph_prefix_that_makes_non_normal_ids_is_refused(prefix: str) -> None:
    pytest.importorskip("langgraph")
    from statekeeper.integrations.langgraph import StatekeeperSaver

    store = StateStore("memory://")
    with pytest.raises(ConfigurationError, match=r"prefix .* is not a normal agent id"):
        StatekeeperSaver(store, prefix=prefix)


async def test_a_backup_of_them_restores(stored_before: str, tmp_path: Path) -> None:
    """A restore copies records as they are stored: no agent is created through the
    write pipeline, so the legacy ids come back whole."""
    import os

    from statekeeper.governance.backup import BackupKey, backup, restore

    key = BackupKey(os.urandom(32))
    async with StateStore(stored_before) as store:
        assert (await backup(store, tmp_path / "b.skb", key)).agents == 2
    async with StateStore(f"sqlite:///{tmp_path / 'restored.db'}") as target:
        assert (await restore(target, [tmp_path / "b.skb"], key)).agents == 2
        for agent_id in ("tb//x", "tb/../ta/x"):
            assert (await target.load(agent_id)).data == {"n": 2}
