"""``keys status`` names the idempotency records left under an old key.

``rekey`` moves every idempotency record under the active key but one whose events a
compaction removed (its key is stored nowhere else): it stays under the old key,
counted in rekey's ``idempotency_records_left``. ``keys status`` counted records and
heads only, so it said nothing of that key once its records were re-encrypted: the
operator removed it, and a retry of that append was stored a second time. It now
counts them (``"idempotency_records"`` in ``--json``) and warns in its table.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from statekeeper import StateStore
from statekeeper.cli import app
from statekeeper.governance.retention import apply_retention
from statekeeper.governance.retention_policy import RetentionPolicy
from statekeeper.security import Keyring, generate_key, key_usage, rekey
from tests.keyfiles import write_key_file

K1, K2 = generate_key(), generate_key()


async def test_keys_status_counts_the_records_rekey_left_under_the_old_key(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    url = f"sqlite:///{db}"
    async with StateStore(url, keyring=Keyring({"k1": K1}), snapshot_every=3) as store:
        await store.save("t0/pay", {"n": 0}, idempotency_key="charge-1")
        for n in range(1, 8):
            await store.save("t0/pay", {"n": n})
        await apply_retention(store, RetentionPolicy.parse("t0 keep_last=3\n"))
    both = Keyring({"k2": K2, "k1": K1}, active="k2")
    async with StateStore(url, keyring=both, snapshot_every=3) as store:
        stats = await rekey(store)
        assert stats.keys_left == 1
        assert "k1" not in await key_usage(store)  # its records all re-encrypted

    keys = write_key_file(tmp_path / "keys.json", {"active": "k2", "keys": {"k1": K1, "k2": K2}})
    base = ["keys", "status", "--db", str(db), "--key-file", str(keys)]
    result = CliRunner().invoke(app, [*base, "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    assert "k1" not in info["usage"]
    assert info["idempotency_records"] == {"k1": 1}, info
    result = CliRunner().invoke(app, base, terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "1 idempotency record(s) under key 'k1'" in " ".join(result.output.split())
