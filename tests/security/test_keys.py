"""Keyrings: sources, rules, and that key material never leaks."""

from __future__ import annotations

import base64
import json
import logging
import os
import pickle
import stat
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import ConfigurationError, KeyNotFound
from statekeeper.security import Keyring, generate_key

K1, K2, K3 = generate_key(), generate_key(), generate_key()


def test_generate_key_is_32_random_bytes() -> None:
    raw = base64.b64decode(generate_key())
    assert len(raw) == 32 and generate_key() != generate_key()


def test_keyring_from_mapping() -> None:
    ring = Keyring({"k1": K1, "k2": base64.b64decode(K2)}, active="k2")
    assert ring.active_id == "k2" and ring.ids == ["k1", "k2"]
    assert "k1" in ring and "k3" not in ring
    assert ring.get("k3") is None
    assert Keyring({"only": K1}).active_id == "only"
    assert Keyring({"a": K1, "b": K2}).active_id == "a"  # the first one given


@pytest.mark.parametrize(
    ("keys", "active"),
    [
        ({}, None),
        ({"k1": K1}, "k2"),
        ({"k1": "not base64 !!"}, None),
        ({"k1": base64.b64encode(b"short").decode()}, None),
        ({"bad id!": K1}, None),
        ({"": K1}, None),
        ({"k1": 123}, None),
    ],
)
def test_bad_keyrings_are_refused(keys: dict[str, object], active: str | None) -> None:
    with pytest.raises(ConfigurationError) as info:
        Keyring(keys, active=active)  # type: ignore[arg-type]
    for material in (K1,):
        assert material not in str(info.value)


def test_keyring_from_file(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    Keyring.write_file(path, {"k1": K1, "k2": K2}, "k2")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    ring = Keyring.from_file(path)
    assert ring.active_id == "k2" and ring.ids == ["k1", "k2"]
    assert Keyring.from_file(path, active="k1").active_id == "k1"
    path.write_text("{not json")
    with pytest.raises(ConfigurationError):
        Keyring.from_file(path)
    path.write_text(json.dumps({"keys": []}))
    with pytest.raises(ConfigurationError):
        Keyring.from_file(path)
    with pytest.raises(ConfigurationError):
        Keyring.from_file(tmp_path / "missing.json")


def test_keyring_from_env() -> None:
    env = {"STATEKEEPER_KEYS": f"k2={K2}, k1={K1}"}
    ring = Keyring.from_env(environ=env)
    assert ring.active_id == "k2"  # the first pair: rotating means prepending
    assert Keyring.from_env(environ={**env, "STATEKEEPER_ACTIVE_KEY": "k1"}).active_id == "k1"
    # URL-safe base64 without padding is accepted too
    urlsafe = base64.urlsafe_b64encode(base64.b64decode(K3)).decode().rstrip("=")
    assert Keyring.from_env(environ={"STATEKEEPER_KEYS": f"k3={urlsafe}"}).ids == ["k3"]
    with pytest.raises(ConfigurationError):
        Keyring.from_env(environ={})
    with pytest.raises(ConfigurationError):
        Keyring.from_env(environ={"STATEKEEPER_KEYS": "no-separator"})


def test_keyring_from_environment_prefers_the_key_file(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    Keyring.write_file(path, {"f1": K1}, "f1")
    assert Keyring.from_environment({}) is None
    both = {"STATEKEEPER_KEY_FILE": str(path), "STATEKEEPER_KEYS": f"e1={K2}"}
    assert Keyring.from_environment(both).ids == ["f1"]  # type: ignore[union-attr]
    assert Keyring.from_environment({"STATEKEEPER_KEYS": f"e1={K2}"}).ids == ["e1"]  # type: ignore[union-attr]


def test_keyring_from_a_callable_fetches_each_key_once() -> None:
    calls: list[str] = []
    vault = {"k1": K1, "k2": K2}

    def fetch(key_id: str) -> str:
        calls.append(key_id)
        return vault[key_id]  # KeyError for an unknown id

    ring = Keyring.from_callable(fetch, active="k2")
    assert calls == ["k2"]  # the active key is loaded (and checked) up front
    assert ring.get("k1") is not None and ring.get("k1") is ring.get("k1")
    assert ring.get("nope") is None
    assert calls == ["k2", "k1", "nope"]
    with pytest.raises(ConfigurationError):
        Keyring.from_callable(lambda _id: b"short", active="k1")


def test_keys_are_redacted_and_cannot_be_pickled() -> None:
    ring = Keyring({"k1": K1})
    for text in (repr(ring), str(ring), repr(ring.active), f"{ring.active!r}"):
        assert K1 not in text and "k1" in text
    with pytest.raises(TypeError):
        pickle.dumps(ring.active)


def test_without_removes_keys_but_not_the_active_one() -> None:
    ring = Keyring({"k2": K2, "k1": K1}, active="k2")
    assert ring.without("k1").ids == ["k2"]
    with pytest.raises(ConfigurationError):
        ring.without("k2")


def _all_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.iterdir() if p.is_file())


async def test_keys_are_never_logged_nor_stored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    ring = Keyring({"k1": K1})
    db = tmp_path / "s.db"
    async with StateStore(f"sqlite:///{db}", keyring=ring) as store:
        await store.save("a", {"n": 1})
        await store.load("a")
        repr(store.codec)
    raw = _all_bytes(tmp_path)
    assert base64.b64decode(K1) not in raw and K1.encode() not in raw
    assert K1 not in caplog.text
    async with StateStore(f"sqlite:///{db}", keyring=Keyring({"k9": K2})) as store:
        with pytest.raises(KeyNotFound) as info:
            await store.load("a")
        assert info.value.key_id == "k1"
        assert K1 not in str(info.value) and K2 not in str(info.value)
    assert os.fspath(db)  # the file is still there: nothing was written by the failed load


@pytest.mark.parametrize("vault", [False, True], ids=["master-key", "data-keys"])
async def test_an_encrypted_store_opened_without_a_key_says_no_key_was_given(
    tmp_path: Path, vault: bool
) -> None:
    """Before, it blamed the key ("the key does not open this store: wrong key file or
    keyring?") when none was given at all."""
    from statekeeper.codec.datakeys import SqliteKeyVault

    db = tmp_path / "s.db"
    vaults = {"data_keys": SqliteKeyVault(tmp_path / "vault.db")} if vault else {}
    async with StateStore(f"sqlite:///{db}", keyring=Keyring({"k1": K1}, **vaults)) as store:
        await store.save("a", {"n": 1})
    async with StateStore(f"sqlite:///{db}") as store:
        with pytest.raises(KeyNotFound) as info:
            await store.load("a")
    message = str(info.value)
    assert message.startswith("this store is encrypted and no key was given"), message
    assert "--key-file" in message and "$STATEKEEPER_KEY_FILE" in message
    assert "keyring=" in message and "wrong key" not in message
    assert "agent 'a' seq 1" in message and K1 not in message
