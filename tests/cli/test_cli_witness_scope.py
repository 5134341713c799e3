"""``witness check --as P`` of a whole-store witness checks what P may read and counts
the rest as out of scope: it does not report every other tenant's stream as an "access
denied" problem (naming their ids, failing the check, one audit refusal each)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from typer.testing import CliRunner

from statekeeper import Keyring, StateStore, SyncStateStore
from statekeeper.cli import app
from statekeeper.governance import AuditLog

POLICY = '[principals.tenant]\nread = ["tb/**"]\n'
OTHERS = ["ta/secret-1", "ta/secret-2", "tc/x"]


def test_a_tenant_checks_its_own_streams_and_others_are_counted_not_named(
    runner: CliRunner, tmp_path: Path
) -> None:
    keys = tmp_path / "keys.json"
    assert runner.invoke(app, ["keys", "generate", "--key-file", str(keys)]).exit_code == 0
    url = f"sqlite:///{tmp_path / 'tenants.db'}"
    with SyncStateStore(url, keyring=Keyring.from_file(keys)) as store:
        for agent_id in [*OTHERS, "tb/mine"]:
            store.save(agent_id, {"n": 1})
    witness = str(tmp_path / "witness.json")
    common = ["--db", url, "--key-file", str(keys)]
    exported = runner.invoke(app, ["witness", "export", witness, *common])
    assert exported.exit_code == 0, exported.output
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY, encoding="utf-8")
    as_tenant = ["--as", "tenant", "--policy", str(policy)]

    checked = runner.invoke(app, [*as_tenant, "witness", "check", witness, *common, "--json"])
    assert checked.exit_code == 0, checked.output
    report = json.loads(checked.stdout)
    assert report["ok"] and report["problems"] == []
    assert report["checked"] == 1 and report["out_of_scope"] == len(OTHERS)
    text = runner.invoke(app, [*as_tenant, "witness", "check", witness, *common])
    assert text.exit_code == 0, text.output
    assert f"{len(OTHERS)} out of scope (not checked)" in text.stdout
    assert not any(other in text.output for other in OTHERS)
    assert "access denied" not in text.output

    async def denied() -> list[str | None]:
        keyring = Keyring.from_file(keys)
        async with StateStore(url, keyring=keyring) as store:
            log = AuditLog(store.backend, keyring)
            return [e.agent_id async for e in log.entries() if e.outcome == "denied"]

    assert asyncio.run(denied()) == []  # no refusal recorded per other tenant's stream

    # a stream of its own rolled back is still found
    with SyncStateStore(url, keyring=Keyring.from_file(keys)) as store:
        store.delete("tb/mine")
        store.save("tb/mine", {"n": 2})
    again = runner.invoke(app, [*as_tenant, "witness", "check", witness, *common, "--json"])
    assert again.exit_code == 1
    assert [p["agent_id"] for p in json.loads(again.stdout)["problems"]] == ["tb/mine"]
