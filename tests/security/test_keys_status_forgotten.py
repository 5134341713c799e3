"""``keys status`` counts a crypto-shredded agent's records apart, not under the master
key they name.

Before: after ``forget`` of an agent (without ``--purge``) on a store with a key vault,
its records and head went on counting under the master key of their headers. ``rekey``
leaves a forgotten agent as it is (nothing of it opens), so after a rotation ``keys
status`` said "k1 ... old key: run 'statekeeper rekey'" for ever: rekey changed nothing,
and the user could not tell that k1 was no longer needed (it is not: nothing opens the
agent's records with or without it)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from statekeeper import StateStore
from statekeeper.cli import app
from statekeeper.codec.keys import Keyring, generate_key
from statekeeper.governance.shredding import forget
from statekeeper.security import key_usage, rekey
from tests.keyfiles import write_key_file

K1, K2 = generate_key(), generate_key()


async def test_a_forgotten_agent_does_not_hold_the_old_key(tmp_path: Path) -> None:
    vault, url = tmp_path / "vault.db", f"sqlite:///{tmp_path / 's.db'}"
    async with StateStore(url, keyring=Keyring({"k1": K1}, data_keys=vault)) as store:
        for agent in ("a", "b"):
            await store.save(agent, {"v": 1})
            await store.save(agent, {"v": 2})
        assert (await forget(store, "b")).destroyed
    both = Keyring({"k2": K2, "k1": K1}, active="k2", data_keys=vault)
    async with StateStore(url, keyring=both) as store:
        await rekey(store)
        usage = await key_usage(store)
    assert "k1" not in usage, usage  # was {"k1": 3, ...}: b's 2 events and its head
    assert usage["(forgotten)"] == 3

    keys = write_key_file(
        tmp_path / "keys.json",
        {"active": "k2", "keys": {"k1": K1, "k2": K2}, "data_keys": "vault.db"},
    )
    result = CliRunner().invoke(
        app, ["keys", "status", "--db", str(tmp_path / "s.db"), "--key-file", str(keys)]
    )
    assert result.exit_code == 0, result.output
    assert "old key" not in result.output and "crypto-shredded" in result.output

    # and k1 may indeed go: the store reads and verifies without it
    async with StateStore(url, keyring=Keyring({"k2": K2}, data_keys=vault)) as store:
        assert (await store.load("a")).data == {"v": 2}
        report = await store.verify()
        assert report.ok and report.forgotten == ["b"]
