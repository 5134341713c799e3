"""``rekey`` re-wraps the data keys of the agents it does not walk.

With a key vault, each agent's data key is wrapped by a master key; ``rekey`` re-wrapped
it under the active key only for the agents the store lists. The keys of agents no
longer listed stay in the vault on purpose — a deleted agent's (a backup taken before
the delete needs it), a LangGraph thread's pruned generation's — and they stayed
wrapped under the old master key: ``keys status`` said no record used the old key any
more, the operator retired it believing nothing was under it, and whoever held it (a
leaked key is why one rotates) with the vault still unwrapped those keys. A whole-store
``rekey`` (or a store admin's)
now re-wraps every live key of the store's key family (and the families it continues)
under the active key. And a store opened in a namespace is refused (the CLI refuses
``--namespace``): rekey walked the relative ids it lists, found no stream under them,
re-encrypted nothing and reported the agents done."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.codec import Codec
from statekeeper.codec.datakeys import SqliteKeyVault
from statekeeper.codec.keys import Keyring
from statekeeper.errors import ConfigurationError
from statekeeper.security import rekey
from statekeeper.security.rekey import rekey_agent
from statekeeper.store.keyguard import key_family

K1, K2 = bytes(range(32)), bytes(range(1, 33))


def _ring(folder: Path, *ids: str, active: str) -> Keyring:
    keys = {"k1": K1, "k2": K2}
    vault = SqliteKeyVault(folder / "vault.db")
    return Keyring({i: keys[i] for i in ids}, active=active, data_keys=vault)


async def test_a_deleted_agents_key_is_rewrapped_under_the_active_key(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    async with StateStore(url, keyring=_ring(tmp_path, "k1", active="k1")) as store:
        await store.save("u1", {"n": 1})
        await store.save("u2", {"n": 2})
        assert await store.delete("u2")  # (its key stays: a backup taken before needs it)
    rotated = _ring(tmp_path, "k1", "k2", active="k2")
    async with StateStore(url, keyring=rotated) as store:
        stats = await rekey(store)
        assert (stats.agents, stats.data_keys) == (1, 1)  # u2's key, not walked
        family = await key_family(store.backend, store.codec)
        assert (await store.load("u1")).data == {"n": 1}
    vault = rotated.data_keys
    assert isinstance(vault, SqliteKeyVault)
    # was: u2's data key still wrapped under k1, the key the operator then retires:
    # whoever holds k1 (a leaked key is why one rotates) and the vault opens it
    assert {(e.agent_id, e.master_id) for e in vault.live_in(family)} == {
        ("u1", "k2"),
        ("u2", "k2"),
        ("\x01sk-feed/deleted", "k2"),  # (the feed's tombstones: rekey walks them)
    }
    alone = Keyring({"k1": K1}, data_keys=vault)
    assert not any(alone.get(e.master_id or "") for e in vault.live_in(family))


async def test_a_store_opened_in_a_namespace_is_refused_nothing_changed(tmp_path: Path) -> None:
    # rekey walked the ids the view lists (relative: "a"), found no stream under them and
    # re-encrypted nothing, its data key left under k1 too: reported 1 agent, no error
    url = f"sqlite:///{tmp_path / 's.db'}"
    async with StateStore(url, keyring=_ring(tmp_path, "k1", active="k1")) as store:
        await store.save("acme/a", {"n": 1})
    rotated = _ring(tmp_path, "k1", "k2", active="k2")
    async with StateStore(url, keyring=rotated, namespace="acme") as acme:
        with pytest.raises(ConfigurationError, match="without a namespace"):
            await rekey(acme)
        with pytest.raises(ConfigurationError, match="without a namespace"):
            await rekey_agent(acme, "a")
    async with StateStore(url, keyring=rotated) as store:
        (raw,) = await store.backend.read("acme/a", 0, None)
        header = Codec.header(raw.payload)
        assert header is not None and header.key_id == "k1"  # nothing changed
        stats = await rekey(store)  # the whole store: re-encrypted, its key wrapped again
        assert (stats.agents, stats.events, stats.data_keys) == (1, 1, 0)
        (raw,) = await store.backend.read("acme/a", 0, None)
        header = Codec.header(raw.payload)
        assert header is not None and header.key_id == "k2"
        assert (await store.load("acme/a")).data == {"n": 1}
    vault = rotated.data_keys
    assert isinstance(vault, SqliteKeyVault)
    assert [e.master_id for e in vault.entries("acme/a")] == ["k2"]


async def test_a_second_run_rewraps_nothing_and_a_custom_vault_is_left_alone(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    async with StateStore(url, keyring=_ring(tmp_path, "k1", active="k1")) as store:
        await store.save("u1", {"n": 1})
        await store.delete("u1")
    rotated = _ring(tmp_path, "k1", "k2", active="k2")
    async with StateStore(url, keyring=rotated) as store:
        assert (await rekey(store)).data_keys == 1  # u1's (the feed's stream is walked)
        assert (await rekey(store)).data_keys == 0


def test_keys_status_counts_the_stores_data_keys_per_wrapping_key(tmp_path: Path) -> None:
    # it counted records only: after a rotation it showed nothing under k1 while the
    # vault still held data keys wrapped under it (a deleted agent's)
    import asyncio
    import json

    from statekeeper.codec.keys import Keyring as Ring

    from ..cli._subprocess import cli_env, cli_in_process

    key_file = tmp_path / "keys.json"
    Ring.write_file(key_file, {"k1": _b64(K1), "k2": _b64(K2)}, "k1", data_keys="vault.db")
    db = tmp_path / "s.db"

    async def write() -> None:
        async with StateStore(f"sqlite:///{db}", keyring=Ring.from_file(key_file)) as store:
            await store.save("u1", {"n": 1})
            await store.save("u2", {"n": 2})
            await store.delete("u2")

    asyncio.run(write())
    common = ("--key-file", str(key_file), "--db", str(db))
    env = cli_env(STATEKEEPER_ACTIVE_KEY="k2")
    before = cli_in_process("keys", "status", *common, "--json", env=env)
    assert before.code == 0, before
    assert json.loads(before.stdout)["data_keys"] == {"k1": 3}  # u1, u2, the feed's stream
    shown = cli_in_process("keys", "status", *common, env=env)
    assert "3 data key(s) in the key vault wrapped under key 'k1'" in shown.stdout, shown
    assert cli_in_process("rekey", *common, env=env).code == 0
    after = cli_in_process("keys", "status", *common, "--json", env=env)
    assert json.loads(after.stdout)["data_keys"] == {"k2": 3}
    assert "data key(s)" not in cli_in_process("keys", "status", *common, env=env).stdout


def _b64(key: bytes) -> str:
    import base64

    return base64.b64encode(key).decode()
