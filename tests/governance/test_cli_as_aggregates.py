"""What a principal that may read one tenant learns from the store-wide commands.

Two tenants share one store (``acme``: one agent; ``globex``: three, with a LangGraph
thread under ``lg/``); ``bot`` may read ``acme/**`` only, ``ops`` is admin on ``**``.
Every aggregate ``bot`` is shown covers only what it may read, or the command is
refused (exit 4, audited) when it works on the whole store; ``ops`` sees what a
plain run shows. The commands are run in this process (``cli_in_process``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from statekeeper import StateStore, SyncStateStore
from statekeeper.codec.keys import Keyring, generate_key
from statekeeper.governance import Audit, AuditLog, load_policy
from tests.keyfiles import write_key_file

from ..cli._subprocess import Run, add_langgraph_thread, cli_in_process, one_error_line

POLICY = '[principals.bot]\nread = ["acme/**"]\n\n[principals.ops]\nadmin = ["**"]\n'


class Tenants:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.keys = folder / "keys.json"
        write_key_file(self.keys, {"active": "k1", "keys": {"k1": generate_key()}})
        self.policy = folder / "policy.toml"
        self.policy.write_text(POLICY)
        self.db = folder / "tenants.db"
        self.url = f"sqlite:///{self.db}"
        self.ring = Keyring.from_file(self.keys)

    def run(self, principal: str | None, *args: str) -> Run:
        who = ("--as", principal, "--policy", str(self.policy)) if principal else ()
        return cli_in_process(*who, *args, "--db", str(self.db), "--key-file", str(self.keys))

    def json(self, principal: str | None, *args: str) -> object:
        done = self.run(principal, *args, "--json")
        assert done.code == 0, str(done)
        return json.loads(done.stdout)

    def denied(self, *args: str) -> None:
        refused = self.run("bot", *args)
        assert refused.code == 4, str(refused)
        assert "admin on every namespace" in one_error_line(refused), str(refused)

    def audit(self) -> list[tuple[str | None, str, str]]:
        async def listed() -> list[tuple[str | None, str, str]]:
            async with StateStore(self.url, keyring=self.ring) as store:
                log = AuditLog(store.backend, self.ring)
                return [(e.principal, e.operation, e.outcome) async for e in log.entries()]

        return asyncio.run(listed())


@pytest.fixture
def tenants(tmp_path: Path) -> Tenants:
    t = Tenants(tmp_path)
    store = SyncStateStore(t.url, keyring=t.ring)
    store.save("acme/a1", {"n": 1})
    store.close()
    # globex's agents written by ops through the audited store: the audit log holds
    # entries about globex (and more records than acme's one agent)
    ops = SyncStateStore(
        t.url, keyring=t.ring, principal="ops", policy=load_policy(t.policy), audit=Audit()
    )
    for i in range(3):
        for n in range(4):
            ops.save(f"globex/g{i}", {"n": n, "pad": "x" * 300})
    ops.close()
    add_langgraph_thread(t.url, t.ring)  # lg/t1: a namespace bot may not read
    return t


def test_stats_shows_the_store_size_to_a_store_admin_only(tenants: Tenants) -> None:
    plain, ops = tenants.json(None, "stats"), tenants.json("ops", "stats")
    bot = tenants.json("bot", "stats")
    assert isinstance(plain, dict) and isinstance(ops, dict) and isinstance(bot, dict)
    # (the file's size moves as SQLite checkpoints: compared apart)
    assert plain["bytes"] > 0 and ops["bytes"] > 0
    assert {**ops, "bytes": 0} == {**plain, "bytes": 0}
    assert bot["agents"] == 1 and bot["events"] == 1
    assert [a["agent_id"] for a in bot["largest"]] == ["acme/a1"]
    assert bot["bytes"] is None  # the file holds globex's agents too
    text = tenants.run("bot", "stats")
    assert text.code == 0, str(text)
    assert not [line for line in text.stdout.splitlines() if line.startswith("size")]


def test_keys_status_counts_the_audit_log_for_a_store_admin_only(tenants: Tenants) -> None:
    plain, ops = tenants.json(None, "keys", "status"), tenants.json("ops", "keys", "status")
    assert isinstance(plain, dict) and isinstance(ops, dict)
    assert ops["usage"] == plain["usage"]
    bot = tenants.json("bot", "keys", "status")
    assert isinstance(bot, dict)
    # acme/a1: one event and its head; nothing of globex, nor of the audit log
    assert bot["usage"] == {"k1": 2}


def test_projections_need_a_store_admin(tenants: Tenants) -> None:
    read_model = tenants.folder / "tenants.projections.db"
    for command in (("status",), ("run",), ("rebuild", "agent_activity")):
        tenants.denied("projections", *command)
    assert not read_model.exists()  # refused before the read model was opened
    plain = tenants.json(None, "projections", "status")
    assert tenants.json("ops", "projections", "status") == plain
    assert tenants.run("ops", "projections", "run").code == 0
    refusals = [e for e in tenants.audit() if e[2] == "denied"]
    assert refusals == [("bot", "projections", "denied")] * 3


def test_analyze_measures_the_recovery_of_readable_agents_only(tenants: Tenants) -> None:
    bot = tenants.json("bot", "analyze", "--rto", "60")
    assert isinstance(bot, dict)
    sampled = {s["agent_id"] for s in bot["recovery"]["samples"]}
    slowest = {s["agent_id"] for s in bot["recovery"]["slowest_predicted"]}
    assert sampled == slowest == {"acme/a1"}
    ops = tenants.json("ops", "analyze", "--rto", "60")
    assert isinstance(ops, dict)
    assert {s["agent_id"] for s in ops["recovery"]["samples"]} > {"acme/a1", "globex/g0"}


def test_langgraph_commands_need_a_store_admin(tenants: Tenants) -> None:
    tenants.denied("langgraph", "prune", "--keep-last", "1")
    tenants.denied("langgraph", "prune", "--keep-last", "1", "--dry-run")
    would = tenants.json("ops", "langgraph", "prune", "--keep-last", "1", "--dry-run")
    assert isinstance(would, dict) and would["checkpoints_deleted"] == 2  # nothing pruned
    target = tenants.folder / "lg-copy.db"
    refused = cli_in_process(
        "--as", "bot", "--policy", str(tenants.policy),
        "langgraph", "export", tenants.url, str(target), "--key-file", str(tenants.keys),
    )  # fmt: skip
    assert refused.code == 4 and "admin on every namespace" in one_error_line(refused)
    assert not target.exists()
    pruned = tenants.json("ops", "langgraph", "prune", "--keep-last", "1")
    assert isinstance(pruned, dict) and pruned["checkpoints_deleted"] == 2


def test_a_prune_by_a_store_admin_is_in_the_audit_log(tenants: Tenants) -> None:
    """The prune rewrites the thread (a new generation, the old one deleted): every
    one of those mutations is recorded with the principal that ran it."""
    before = len(tenants.audit())
    pruned = tenants.json("ops", "langgraph", "prune", "--keep-last", "1")
    assert isinstance(pruned, dict) and pruned["threads_compacted"] == 1
    added = tenants.audit()[before:]
    assert {(who, outcome) for who, _, outcome in added} == {("ops", "ok")}, added
    assert {"create", "delete"} <= {op for _, op, _ in added}, added


@pytest.mark.parametrize("engine", ["memory", "sqlite"])
async def test_health_detail_is_a_store_admins(engine: str, tmp_path: Path) -> None:
    """``store.health()``: the engine's figures (the memory engine's agent count, the
    SQLite file's size) span every tenant; a principal that is not admin on ``**`` gets
    ``ok`` and the engine's name only."""
    (tmp_path / "policy.toml").write_text(POLICY)
    policy = load_policy(tmp_path / "policy.toml")
    url = "memory://" if engine == "memory" else f"sqlite:///{tmp_path}/h.db"
    async with StateStore(url) as plain:
        for i in range(3):
            await plain.save(f"globex/g{i}", {"n": i})
        await plain.save("acme/a1", {"n": 1})
        expected = await plain.health()
        assert expected.detail  # the memory engine's agents, the SQLite file's bytes
        bot = StateStore(plain.backend, principal="bot", policy=policy)
        ops = StateStore(plain.backend, principal="ops", policy=policy)
        seen = await bot.health()
        assert (seen.ok, seen.backend, seen.detail) == (True, expected.backend, {})
        assert (await ops.health()).detail.keys() == expected.detail.keys()
        assert await bot.count_agents() == 1


def test_an_import_by_a_store_admin_is_in_the_target_audit_log(tenants: Tenants) -> None:
    """`langgraph import --as ops` writes the threads as ops: audited in the target."""
    peer = tenants.folder / "peer.db"
    exported = cli_in_process(
        "langgraph", "export", tenants.url, str(peer), "--key-file", str(tenants.keys),
    )  # fmt: skip
    assert exported.code == 0, str(exported)
    target = tenants.folder / "target.db"
    made = SyncStateStore(f"sqlite:///{target}", keyring=tenants.ring)
    made.save("acme/a1", {"n": 1})
    made.close()
    done = cli_in_process(
        "--as", "ops", "--policy", str(tenants.policy), "langgraph", "import",
        str(peer), f"sqlite:///{target}", "--key-file", str(tenants.keys), "--json",
    )  # fmt: skip
    assert done.code == 0, str(done)

    async def listed() -> list[tuple[str | None, str, str]]:
        async with StateStore(f"sqlite:///{target}", keyring=tenants.ring) as store:
            log = AuditLog(store.backend, tenants.ring)
            return [(e.principal, e.operation, e.outcome) async for e in log.entries()]

    entries = asyncio.run(listed())
    assert entries and {who for who, _, _ in entries} == {"ops"}, entries
    assert "create" in {op for _, op, _ in entries}, entries
