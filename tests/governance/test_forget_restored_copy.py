"""A restored copy is shredded whole by its source's ``forget`` (issue 15 item 4).

Restore a backup of store A into store B, write on in B, then ``forget`` the agent in
A. B's copied records were sealed with A's key (gone), but B wrote the agent on under
a key of its own family: its newest snapshot (the agent's whole state) still loaded in
B — ``load`` and ``show`` answered, exit 0, while ``history`` raised
``AgentForgotten`` and ``export`` of B failed whole ("agent 'u1' was forgotten", exit
2). And an export of B taken before the forget, imported into a new store C, brought
every forgotten agent back readable: ``import`` checks the tombstones of the family the
file names (B's), and A's forget left none there.

The restore now gives B's family the key of each agent it copied (same key, wrapped
for B: :func:`statekeeper.codec.keyscope.adopt`), so B's writes of it use that key and
a forget in either store destroys both entries."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.codec.datakeys import SqliteKeyVault
from statekeeper.codec.keys import Keyring, generate_key
from statekeeper.errors import AgentForgotten, AgentNotFound
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.shredding import forget
from tests.keyfiles import write_key_file

from ..backends._services import fresh_url
from ..cli._subprocess import cli_in_process

SECRET = "078-05-1120"


def _key_file(folder: Path) -> Path:
    path = folder / "keys.json"
    write_key_file(path, {"active": "k1", "keys": {"k1": generate_key()}, "data_keys": "vault.db"})
    return path


async def _two_turns(store: StateStore, agent: str) -> None:
    await store.create(agent, {"ssn": SECRET, "n": 0}, fsm_state="idle")
    await store.append(
        agent,
        "transition",
        {"event": "go", "from": "idle", "to": "busy"},
        ops=[{"op": "replace", "path": "/n", "value": 1}],
        fsm_state="busy",
    )


async def _written_on(store: StateStore, agent: str) -> None:
    await store.append(
        agent,
        "transition",
        {"event": "back", "from": "busy", "to": "idle"},
        ops=[{"op": "replace", "path": "/n", "value": 2}],
        fsm_state="idle",
    )
    await store.snapshot(agent)  # the whole state, in a record sealed by the copy


async def test_a_copy_written_on_after_its_restore_is_shredded_by_the_source(
    tmp_path: Path,
) -> None:
    keys = _key_file(tmp_path)
    bkey = BackupKey(os.urandom(32))
    a_url, b_url = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    async with StateStore(a_url, keyring=Keyring.from_file(keys)) as a:
        for agent in ("u1", "u2"):
            await _two_turns(a, agent)
        await backup(a, tmp_path / "a.skb", bkey)
    async with StateStore(b_url, keyring=Keyring.from_file(keys)) as b:
        await b.save("own", {"x": 1})  # the target has a family (and an agent) of its own
        assert (await restore(b, [tmp_path / "a.skb"], bkey)).agents == 2
        await _written_on(b, "u1")
        assert (await b.load("u1")).data == {"ssn": SECRET, "n": 2}
    common = ["--db", str(tmp_path / "b.db"), "--key-file", str(keys)]
    before = tmp_path / "b-before.jsonl"
    assert cli_in_process("export", "-o", str(before), *common).code == 0
    async with StateStore(a_url, keyring=Keyring.from_file(keys)) as a:
        for agent in ("u1", "u2"):
            assert (await forget(a, agent)).destroyed
    async with StateStore(b_url, keyring=Keyring.from_file(keys)) as b:
        for agent in ("u1", "u2"):
            with pytest.raises(AgentForgotten):  # was: u1 loaded {'ssn': ..., 'n': 2}
                await b.load(agent)
            with pytest.raises(AgentForgotten):
                [e async for e in b.history(agent)]
            with pytest.raises(AgentForgotten):  # and stays refused for writes there
                await b.save(agent, {"ssn": SECRET})
        assert (await b.load("own")).data == {"x": 1}
        assert (await b.verify()).forgotten == ["u1", "u2"]
    for command in ("show", "history"):
        shown = cli_in_process(command, "u1", *common)
        assert shown.code == 2 and "forgotten" in shown.stderr, str(shown)  # was: exit 0
        assert SECRET not in shown.stdout
    exported = cli_in_process("export", "-o", str(tmp_path / "b-after.jsonl"), *common)
    assert exported.code == 0, str(exported)  # was: exit 2, "agent 'u1' was forgotten"
    assert "left out 2 forgotten agent(s)" in exported.stdout
    assert SECRET not in (tmp_path / "b-after.jsonl").read_text()
    # the export taken before the forget brings neither back, anywhere
    target = tmp_path / "c.db"
    assert cli_in_process("init", f"sqlite:///{target}").code == 0
    imported = cli_in_process(
        "import", str(before), "--json", "--db", str(target), "--key-file", str(keys)
    )
    assert imported.code == 0, str(imported)
    assert '"u1"' in imported.stdout and '"u2"' in imported.stdout  # named as forgotten
    async with StateStore(f"sqlite:///{target}", keyring=Keyring.from_file(keys)) as c:
        for agent in ("u1", "u2"):  # was: both loaded, the SSN readable
            with pytest.raises(AgentNotFound):
                await c.load(agent)
        assert (await c.load("own")).data == {"x": 1}
    # nor does the backup taken before the forget, restored anywhere
    async with StateStore(f"sqlite:///{tmp_path / 'd.db'}", keyring=Keyring.from_file(keys)) as d:
        assert (await restore(d, [tmp_path / "a.skb"], bkey)).forgotten == ["u1", "u2"]


@pytest.mark.parametrize("engine", ["sqlite", "postgresql", "redis"])
async def test_a_forget_of_the_copy_shreds_the_source_and_the_copy_keeps_its_own_keys(
    tmp_path: Path, engine: str
) -> None:
    keys = Keyring({"k1": generate_key()}, data_keys=SqliteKeyVault(tmp_path / "vault.db"))
    bkey = BackupKey(os.urandom(32))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with fresh_url(engine, tmp_path / "a") as a_url, fresh_url(engine, tmp_path / "b") as b_url:
        async with StateStore(a_url, keyring=keys) as a, StateStore(b_url, keyring=keys) as b:
            await _two_turns(a, "u1")
            await _two_turns(a, "u3")
            await b.save("u2", {"mine": True})  # B's own agent, not in the backup
            await backup(a, tmp_path / "a.skb", bkey)
            await restore(b, [tmp_path / "a.skb"], bkey)
            await _written_on(b, "u1")
            await a.save("u2", {"other": "person"})  # A's own u2: another person
            result = await forget(b, "u1")  # the copy forgets: the source goes with it
            assert len(result.scopes) == 2 and await a.backend.feed_id() in result.scopes
            await forget(a, "u2")  # A's own u2: B's own u2 stays
        async with StateStore(a_url, keyring=keys) as a, StateStore(b_url, keyring=keys) as b:
            with pytest.raises(AgentForgotten):
                await a.load("u1")
            with pytest.raises(AgentForgotten):
                await b.load("u1")
            assert (await b.load("u2")).data == {"mine": True}
            await b.save("u2", {"mine": True, "n": 2})
            assert (await b.load("u3")).data == {"ssn": SECRET, "n": 1}
            await _written_on(b, "u3")  # B writes on its copy of u3: A keeps its u3
            assert (await a.load("u3")).data == {"ssn": SECRET, "n": 1}


def test_the_inspector_shows_the_copy_forgotten(tmp_path: Path) -> None:
    pytest.importorskip("starlette")
    import asyncio

    from starlette.testclient import TestClient

    from statekeeper.inspector import InspectorSettings, create_app

    token = "test-token-0123456789abcdef"
    keys = Keyring({"k1": generate_key()}, data_keys=SqliteKeyVault(tmp_path / "vault.db"))
    bkey = BackupKey(os.urandom(32))
    a_url, b_url = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"

    async def seed() -> None:
        async with StateStore(a_url, keyring=keys) as a, StateStore(b_url, keyring=keys) as b:
            await _two_turns(a, "u1")
            await backup(a, tmp_path / "a.skb", bkey)
            await restore(b, [tmp_path / "a.skb"], bkey)
            await _written_on(b, "u1")
            await forget(a, "u1")

    asyncio.run(seed())
    app = create_app(
        InspectorSettings(url=b_url, token=token), store=StateStore(b_url, keyring=keys)
    )
    with TestClient(app, base_url="http://127.0.0.1") as client:
        client.headers["Authorization"] = f"Bearer {token}"
        for path in ("/agent", "/agent/state.json", "/agent/events"):
            page = client.get(f"{path}?id=u1")
            assert page.status_code == 410, (path, page.text[:300])  # state.json was 200
            assert SECRET not in page.text
