"""``rekey`` re-wraps the legacy data keys (written before key families) it does not walk.

A vault written before key families keys each data key by the agent id alone (a
*legacy* key: any store of the vault may have used it). ``rekey`` re-wrapped the keys
of the store's family of the agents it did not walk (a deleted agent's, kept for the
backups taken before) — but not the legacy ones: a deleted agent's legacy key stayed
wrapped under the master key being retired, and ``keys status`` did not count it, so
the operator retired the key believing nothing was under it while whoever held it (a
leaked key is why one rotates) and the vault still opened the deleted agent's backups.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from statekeeper import StateStore
from statekeeper.codec.datakeys import SqliteKeyVault
from statekeeper.codec.keys import Keyring
from statekeeper.security import rekey
from statekeeper.security.keyusage import data_key_usage

KEY, K2 = bytes(range(32)), bytes(range(1, 33))
DATA = Path(__file__).parents[1] / "data"


def _from_sql(path: Path, sql: Path) -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(sql.read_text(encoding="utf-8"))


def _legacy(vault: SqliteKeyVault) -> dict[str, str | None]:
    rows = vault._db.execute(
        "SELECT agent_id, master_id FROM data_keys WHERE wrapped IS NOT NULL"
    ).fetchall()
    return {str(a): m for a, m in rows}


async def test_a_deleted_agents_legacy_key_is_rewrapped_and_counted(tmp_path: Path) -> None:
    # written by main's code with one vault (legacy keys): billing and support each saved
    # "user-1" under one data key keyed by the id alone
    for name in ("billing", "support", "vault"):
        _from_sql(tmp_path / f"{name}.db", DATA / f"shared-vault-by-main.{name}.sql")
    url = f"sqlite:///{tmp_path / 'billing.db'}"
    old = Keyring({"k1": KEY}, data_keys=tmp_path / "vault.db")
    async with StateStore(url, keyring=old) as billing:
        assert await billing.delete("user-1")  # (its legacy key stays: older backups)
    support = f"sqlite:///{tmp_path / 'support.db'}"
    async with StateStore(support, keyring=old) as store:
        assert await store.delete("user-1")
    rotated = Keyring({"k1": KEY, "k2": K2}, active="k2", data_keys=tmp_path / "vault.db")
    vault = rotated.data_keys
    assert isinstance(vault, SqliteKeyVault)
    async with StateStore(url, keyring=rotated) as billing:
        # keys status counts the legacy keys under k1 ("user-1", the old feed stream's)
        # besides the family's own (was {"k1": 1}: the two legacy ones not counted)
        assert await data_key_usage(billing) == {"k1": 3}
        stats = await rekey(billing)
        assert stats.data_keys == 1  # user-1's (the feed stream's: walked, wrapped with it)
        assert await data_key_usage(billing) == {"k2": 3}
    # was: {'user-1': 'k1', ...} — the deleted agent's key still opened by k1 alone
    assert "k1" not in _legacy(vault).values()
    assert _legacy(vault)  # (the keys stay: a backup taken before the delete needs them)
    alone = Keyring({"k1": KEY}, data_keys=vault)
    assert not any(alone.get(m or "") for m in _legacy(vault).values())
    async with StateStore(support, keyring=rotated) as store:
        assert (await rekey(store)).data_keys == 0  # (its feed stream's key: walked)
        assert await data_key_usage(store) == {"k2": 3}
