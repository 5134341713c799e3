"""Listing the legal holds as a principal shows only the holds on what it may read.

A hold names an agent or a namespace and the matter it is for ("Smith v. Globex"):
another tenant's business. Before, ``list_holds`` (and ``statekeeper --as P hold list``)
showed every hold of the store to any principal, one with read on its own tenant only
included, and to a principal the policy does not name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.codec.keys import Keyring, generate_key
from statekeeper.errors import AccessDenied, AgentOnHold
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.governance.holds import add_hold, list_holds
from tests.keyfiles import write_key_file

from ..cli._subprocess import cli_in_process

POLICY_TEXT = """\
[principals.alice]
read = ["acme/**"]

[principals.ops]
admin = ["**"]
"""
POLICY = parse_policy(POLICY_TEXT)
KEYS = Keyring({"k1": bytes(range(32))})


async def test_a_principal_lists_only_the_holds_it_may_read_and_a_stranger_none() -> None:
    async with StateStore("memory://", keyring=KEYS) as plain:
        backend = plain.backend
        ops = StateStore(backend, keyring=KEYS, principal="ops", policy=POLICY, audit=Audit())
        for agent in ("acme/t1", "globex/eu/g1"):
            await ops.save(agent, {"n": 1})
        await add_hold(ops, "acme/t1", "Jones v. Acme")
        await add_hold(ops, "globex/eu/g1", "Smith v. Globex")
        await add_hold(ops, "globex/eu/*", "Globex EU inquiry")
        await add_hold(ops, "acme/*", "Acme audit")
        alice = StateStore(backend, keyring=KEYS, principal="alice", policy=POLICY, audit=Audit())
        assert [(h.pattern, h.reason) for h in await list_holds(alice)] == [
            ("acme/t1", "Jones v. Acme"),
            ("acme/*", "Acme audit"),
        ]
        assert len(await list_holds(ops)) == 4  # an admin on ** sees every hold
        assert len(await list_holds(plain)) == 4  # so does a store opened as no one
        mallory = StateStore(backend, keyring=KEYS, principal="mallory", policy=POLICY)
        with pytest.raises(AccessDenied, match="does not name it"):
            await list_holds(mallory)
        stranger = StateStore(
            backend, keyring=KEYS, principal="mallory", policy=POLICY, audit=Audit()
        )
        with pytest.raises(AccessDenied):
            await list_holds(stranger)
        # every purge still sees every hold, whoever asks
        with pytest.raises(AgentOnHold):
            await ops.delete("globex/eu/g1")
        log = AuditLog(backend, KEYS)
        entries = [(e.principal, e.operation, e.outcome) async for e in log.entries()]
        assert ("mallory", "list-holds", "denied") in entries


def test_hold_list_as_a_principal_leaves_out_other_tenants_holds(tmp_path: Path) -> None:
    keys = write_key_file(tmp_path / "keys.json", {"active": "k1", "keys": {"k1": generate_key()}})
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY_TEXT)
    db = tmp_path / "s.db"
    common = ["--db", str(db), "--key-file", str(keys)]
    store = StateStore(f"sqlite:///{db}", keyring=Keyring.from_file(keys))
    import asyncio

    async def seed() -> None:
        async with store:
            await store.save("acme/t1", {"n": 1})
            await store.save("globex/eu/g1", {"n": 1})

    asyncio.run(seed())
    for pattern, reason in (("acme/t1", "Jones v. Acme"), ("globex/eu/g1", "Smith v. Globex")):
        placed = cli_in_process("hold", "add", pattern, "--reason", reason, *common)
        assert placed.code == 0, str(placed)
    as_alice = ["--as", "alice", "--policy", str(policy)]
    listed = cli_in_process(*as_alice, "hold", "list", "--json", *common)
    assert listed.code == 0, str(listed)
    assert [h["pattern"] for h in json.loads(listed.stdout)] == ["acme/t1"]
    shown = cli_in_process(*as_alice, "hold", "list", *common)
    assert "globex" not in shown.stdout and "Smith" not in shown.stdout
    as_ops = ["--as", "ops", "--policy", str(policy)]
    everything = cli_in_process(*as_ops, "hold", "list", "--json", *common)
    assert len(json.loads(everything.stdout)) == 2
    as_stranger = ["--as", "mallory", "--policy", str(policy)]
    refused = cli_in_process(*as_stranger, "hold", "list", *common)
    assert refused.code == 4 and "Smith" not in refused.stdout + refused.stderr
