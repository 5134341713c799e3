"""A backup refuses the store's own key as its backup key even when the store was
opened without its keys (docs/retention-and-backup.md: "the store's own key is
refused").

A backup copies records as stored, so it needs no store key, and a nightly job often
runs without one. Before, the refusal looked only at the keyring the store was opened
with: `statekeeper backup --backup-key keys.json` (the store's key file by mistake)
without `--key-file` wrote a backup sealed with the store's master key and exited 0 —
whoever holds the store key opens every backup. The records' headers carry the
fingerprint of the key that sealed them: the backup compares its key with those of
the newest records."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.codec.keys import Keyring
from statekeeper.errors import BackupKeyMismatch
from statekeeper.governance.backup import BackupKey, backup, restore


async def _store(url: str, old: bytes, new: bytes) -> None:
    async with StateStore(url, keyring=Keyring({"k1": old})) as store:
        await store.save("acme/old", {"n": 1})
    async with StateStore(url, keyring=Keyring({"k1": old, "k2": new}, active="k2")) as store:
        for n in range(3):
            await store.save(f"acme/a{n}", {"n": n})


@pytest.mark.parametrize("which", ["active", "older"])
async def test_the_store_key_is_refused_without_the_keyring(tmp_path: Path, which: str) -> None:
    old, new = os.urandom(32), os.urandom(32)
    url = f"sqlite:///{tmp_path / 'live.db'}"
    await _store(url, old, new)
    async with StateStore(url) as store:  # no keys: a backup needs none
        material = new if which == "active" else old
        with pytest.raises(BackupKeyMismatch, match="the store's key"):
            await backup(store, tmp_path / "b.skb", BackupKey(material))
        assert not (tmp_path / "b.skb").exists()
        made = await backup(store, tmp_path / "ok.skb", BackupKey(b"\x07" * 32))
        assert made.agents == 4
    async with StateStore(
        f"sqlite:///{tmp_path / 'to.db'}", keyring=Keyring({"k1": old, "k2": new}, active="k2")
    ) as target:
        assert (await restore(target, [tmp_path / "ok.skb"], BackupKey(b"\x07" * 32))).agents == 4
