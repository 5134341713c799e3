"""``statekeeper --namespace NS``: every command either works inside the namespace
(relative ids in and out, nothing outside it seen or touched) or refuses the option
with one line saying why: none ignores it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer

from statekeeper import SyncStateStore
from statekeeper.cli._help import load_all
from statekeeper.cli.app import app
from statekeeper.cli.namespacing import COMMANDS
from statekeeper.codec.keys import Keyring, generate_key
from statekeeper.governance import Audit, parse_policy
from tests.keyfiles import write_key_file

from ._subprocess import Run, cli, cli_env, cli_in_process, one_error_line

IDS = ["acme/a-1", "acme/eu/b-2", "acmex/c", "globex/g"]


def _tree() -> list[tuple[str, Any]]:
    root = load_all(typer.main.get_command(app))
    out: list[tuple[str, Any]] = []

    def walk(command: Any, path: list[str]) -> None:
        if path:
            out.append((" ".join(path), command))
        for name, sub in (getattr(command, "commands", None) or {}).items():
            walk(sub, [*path, name])

    walk(root, [])
    return out


def test_every_command_honours_or_refuses_the_namespace() -> None:
    """A new command must be listed in cli/namespacing.py, honouring --namespace
    (it opens its store through open_store) or refusing it with a reason."""
    tree = _tree()
    paths = {path for path, _ in tree}
    assert sorted(paths - set(COMMANDS)) == [], "commands missing from namespacing.COMMANDS"
    assert sorted(set(COMMANDS) - paths) == [], "namespacing.COMMANDS names unknown commands"
    for path, command in tree:
        if command.callback is not None:
            assert getattr(command.callback, "__sk_namespace_gate__", False), path


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    path = tmp_path / "keys.json"
    write_key_file(path, {"active": "k1", "keys": {"k1": generate_key()}, "data_keys": "vault.db"})
    return path


@pytest.fixture
def db(tmp_path: Path, keys: Path) -> Path:
    path = tmp_path / "store.db"
    with SyncStateStore(f"sqlite:///{path}", keyring=Keyring.from_file(keys)) as store:
        for agent_id in IDS:
            store.save(agent_id, {"id": agent_id, "n": 1})
            store.save(agent_id, {"id": agent_id, "n": 2})
    return path


def _stored(db: Path, keys: Path) -> dict[str, int]:
    with SyncStateStore(f"sqlite:///{db}", keyring=Keyring.from_file(keys)) as store:
        return {i.agent_id: i.head_seq for i in store.list_agents(limit=100)}


def sk(db: Path, keys: Path, *args: str, namespace: str = "acme") -> Run:
    run = cli_in_process(
        "--namespace", namespace, *args, env=cli_env(STATEKEEPER_URL=str(db),
                                                     STATEKEEPER_KEY_FILE=str(keys)),
    )  # fmt: skip
    return run


def test_reading_commands_see_the_namespace_with_relative_ids(db: Path, keys: Path) -> None:
    listed = sk(db, keys, "agents", "--json")
    assert listed.code == 0, str(listed)
    assert [a["agent_id"] for a in json.loads(listed.stdout)["agents"]] == ["a-1", "eu/b-2"]
    shown = sk(db, keys, "show", "eu/b-2", "--json")
    assert shown.code == 0 and json.loads(shown.stdout)["data"]["id"] == "acme/eu/b-2"
    # an agent of another namespace is not there, and the error names the caller's id
    missing = sk(db, keys, "show", "g")
    assert missing.code == 1 and one_error_line(missing) == "error: agent 'g' not found"
    history = sk(db, keys, "history", "a-1", "--json")
    assert history.code == 0, str(history)
    assert {e["agent_id"] for e in map(json.loads, history.stdout.splitlines())} == {"a-1"}
    assert sk(db, keys, "diff", "a-1", "eu/b-2").code == 0
    tail = sk(db, keys, "tail", "--json")
    assert tail.code == 0, str(tail)
    assert {json.loads(line)["agent_id"] for line in tail.stdout.splitlines()} == {"a-1", "eu/b-2"}
    stats = sk(db, keys, "stats", "--json")
    assert stats.code == 0 and json.loads(stats.stdout)["agents"] == 2, str(stats)
    verify = sk(db, keys, "verify", "--json")
    assert verify.code == 0 and json.loads(verify.stdout)["agents"] == 2, str(verify)
    escape = sk(db, keys, "show", "../globex/g")
    assert escape.code == 2 and "namespace 'acme'" in one_error_line(escape)
    bad = sk(db, keys, "agents", namespace="acme//x")
    assert bad.code == 2 and "namespace" in one_error_line(bad)


def test_writing_commands_touch_only_the_namespace(db: Path, keys: Path, tmp_path: Path) -> None:
    before = _stored(db, keys)
    export = tmp_path / "acme.jsonl"
    made = sk(db, keys, "export", "--output", str(export))
    assert made.code == 0, str(made)
    lines = [json.loads(line) for line in export.read_text().splitlines()]
    assert sorted({line["agent_id"] for line in lines if "agent_id" in line}) == ["a-1", "eu/b-2"]
    # import into another namespace: the relative ids land below it
    imported = sk(db, keys, "import", str(export), namespace="copy")
    assert imported.code == 0, str(imported)
    assert sk(db, keys, "delete", "a-1", "--yes").code == 0
    kept = sk(db, keys, "retention", "apply", "--rule", "* keep_last=1", "--json")
    assert kept.code == 0, str(kept)
    assert {a["agent_id"] for a in json.loads(kept.stdout)["actions"]} == {"eu/b-2"}
    forgot = sk(db, keys, "forget", "eu/b-2", "--yes", "--json")
    assert forgot.code == 0 and json.loads(forgot.stdout)["agent_id"] == "eu/b-2", str(forgot)
    after = _stored(db, keys)
    assert "acme/a-1" not in after and after["acme/eu/b-2"] == before["acme/eu/b-2"]
    for other in ["acmex/c", "globex/g"]:
        assert after[other] == before[other]  # outside the namespace: untouched
    assert after["copy/a-1"] == after["copy/eu/b-2"] == 2


def test_backup_and_restore_in_a_namespace(db: Path, keys: Path, tmp_path: Path) -> None:
    file = tmp_path / "acme.skb"
    bkey = ["--backup-key", str(tmp_path / "backup.key")]
    made = sk(db, keys, "backup", "--to", str(file), *bkey, "--create-backup-key", "--json")
    assert made.code == 0 and json.loads(made.stdout)["agents"] == 2, str(made)
    target = tmp_path / "target.db"
    assert cli_in_process("init", f"sqlite:///{target}").code == 0
    wrong = sk(db, keys, "restore", str(file), "--to", str(target), *bkey, namespace="globex")
    assert wrong.code == 2 and "outside namespace 'globex'" in one_error_line(wrong)
    restored = sk(db, keys, "restore", str(file), "--to", str(target), *bkey, "--json")
    assert restored.code == 0 and json.loads(restored.stdout)["agents"] == 2, str(restored)
    assert sorted(_stored(target, keys)) == ["acme/a-1", "acme/eu/b-2"]


REFUSED = [
    ["init", "sqlite:///{tmp}/new.db"],
    ["repair"],
    ["schema", "show", "--app", "nowhere:app"],
    ["audit", "verify"],
    ["keys", "status"],
    ["rekey"],
    ["serve"],
    ["langgraph", "prune", "--keep-last", "1"],
    ["projections", "status", "--read-model", "{tmp}/rm.db"],
    ["metrics", "plot", "--out", "{tmp}/m.svg"],
]


@pytest.mark.parametrize("args", REFUSED, ids=lambda a: " ".join(a[:2]))
def test_commands_on_the_whole_store_refuse_the_namespace(
    db: Path, keys: Path, tmp_path: Path, args: list[str]
) -> None:
    before = _stored(db, keys)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    run = sk(db, keys, *argv)
    line = one_error_line(run)
    assert run.code == 2, str(run)
    assert "cannot run in namespace 'acme'" in line, line
    assert len(line) > len("error: statekeeper x cannot run in namespace 'acme': "), line
    assert _stored(db, keys) == before
    assert not (tmp_path / "new.db").exists()


def test_a_real_process_honours_the_namespace(db: Path, keys: Path) -> None:
    env = cli_env(STATEKEEPER_KEY_FILE=str(keys), STATEKEEPER_NAMESPACE="acme/eu")
    listed = cli("agents", "--db", str(db), "--json", env=env)
    assert listed.code == 0, str(listed)
    assert [a["agent_id"] for a in json.loads(listed.stdout)["agents"]] == ["b-2"]
    refused = cli("rekey", "--db", str(db), env=env)
    assert refused.code == 2 and "cannot run in namespace 'acme/eu'" in one_error_line(refused)


def test_a_retention_run_resumes_only_in_its_namespace(
    db: Path, keys: Path, tmp_path: Path
) -> None:
    # what an interrupted run in namespace acme left behind (a-1 done)
    progress = tmp_path / "progress.json"
    progress.write_text(
        json.dumps({"statekeeper_retention": {"after": "a-1", "namespace": "acme"}})
    )
    rule = ["retention", "apply", "--rule", "* keep_last=1", "--progress-file", str(progress)]
    rule += ["--json"]
    other = sk(db, keys, *rule, namespace="globex")
    assert other.code == 2 and "resume with the same --namespace" in one_error_line(other)
    assert _stored(db, keys)["globex/g"] == 2 and progress.exists()  # nothing done
    resumed = sk(db, keys, *rule)
    assert resumed.code == 0, str(resumed)
    assert [a["agent_id"] for a in json.loads(resumed.stdout)["actions"]] == ["eu/b-2"]
    assert not progress.exists()


def test_audit_verify_in_a_namespace_says_what_to_run_instead(db: Path, keys: Path) -> None:
    run = sk(db, keys, "audit", "verify")
    assert run.code == 2, str(run)
    line = one_error_line(run)
    assert "one hash chain for the whole store" in line and "--namespace NS audit" in line


def test_health_and_analyze_report_the_namespace_only(db: Path, keys: Path) -> None:
    health = sk(db, keys, "health", "--json")
    assert health.code == 0, str(health)
    report = json.loads(health.stdout)
    assert report["agents"] == 2 and report["by_state"] == {"": 2}
    largest = {s["agent_id"]: s for s in report["largest"]}
    assert sorted(largest) == ["a-1", "eu/b-2"]  # relative ids, nothing of acmex/globex
    # sizes and growth read under the stored ids (not the relative ones: 0 bytes)
    assert all(s["state_bytes"] > 0 and s["head_seq"] == 2 for s in largest.values())
    assert {g["agent_id"] for g in report["fastest_growing"]} == {"a-1", "eu/b-2"}
    analyzed = sk(db, keys, "analyze", "--json")
    assert analyzed.code == 0, str(analyzed)
    assert json.loads(analyzed.stdout)["states"]["agents"] == {"": 2}
    whole = cli_in_process(
        "analyze", "--json", env=cli_env(STATEKEEPER_URL=str(db), STATEKEEPER_KEY_FILE=str(keys))
    )
    assert json.loads(whole.stdout)["states"]["agents"] == {"": 4}
    recovery = sk(db, keys, "analyze", "--rto", "60", "--json")
    assert recovery.code == 0, str(recovery)
    predicted = json.loads(recovery.stdout)["recovery"]
    assert sorted(s["agent_id"] for s in predicted["samples"]) == ["a-1", "eu/b-2"]


def test_a_witness_of_a_namespace(db: Path, keys: Path, tmp_path: Path) -> None:
    file = tmp_path / "acme.witness.json"
    made = sk(db, keys, "witness", "export", str(file), "--json")
    assert made.code == 0 and json.loads(made.stdout)["agents"] == 2, str(made)
    doc = json.loads(file.read_text())
    assert doc["namespace"] == "acme"
    assert [s["agent_id"] for s in doc["streams"]] == ["acme/a-1", "acme/eu/b-2"]  # stored ids
    with SyncStateStore(f"sqlite:///{db}", keyring=Keyring.from_file(keys)) as store:
        store.save("acme/a-1", {"n": 3})  # grows
        store.save("globex/g", {"n": 3})  # outside: neither checked nor new
        store.save("acme/new", {"n": 1})
    checked = sk(db, keys, "witness", "check", str(file), "--json")
    assert checked.code == 0, str(checked)
    result = json.loads(checked.stdout)
    assert (result["checked"], result["grown"], result["new_agents"]) == (2, 1, 1)
    # a whole-store witness is checked one namespace at a time
    whole = tmp_path / "whole.witness.json"
    env = cli_env(STATEKEEPER_URL=str(db), STATEKEEPER_KEY_FILE=str(keys))
    assert cli_in_process("witness", "export", str(whole), env=env).code == 0
    part = sk(db, keys, "witness", "check", str(whole), "--json", namespace="acme/eu")
    assert part.code == 0 and json.loads(part.stdout)["checked"] == 1, str(part)
    # a rolled-back stream of the namespace is found and named relative to it
    with SyncStateStore(f"sqlite:///{db}", keyring=Keyring.from_file(keys)) as store:
        store.delete("acme/eu/b-2")
    lost = sk(db, keys, "witness", "check", str(file), "--json")
    assert lost.code == 1, str(lost)
    assert [p["agent_id"] for p in json.loads(lost.stdout)["problems"]] == ["eu/b-2"]


POLICY = """\
[principals.acme-admin]
admin = ["acme/**"]

[principals.globex-admin]
admin = ["globex/**"]

[principals.ops]
admin = ["**"]
"""


def test_a_tenant_admin_works_on_its_namespace_as_a_principal(keys: Path, tmp_path: Path) -> None:
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text(POLICY)
    policy = parse_policy(POLICY)
    db = tmp_path / "governed.db"
    ring = Keyring.from_file(keys)
    with SyncStateStore(
        f"sqlite:///{db}", keyring=ring, principal="ops", policy=policy, audit=Audit()
    ) as ops:
        for agent_id in IDS:
            ops.save(agent_id, {"id": agent_id})

    def as_(principal: str, *args: str, namespace: str = "acme") -> Run:
        env = cli_env(STATEKEEPER_URL=str(db), STATEKEEPER_KEY_FILE=str(keys))
        return cli_in_process("--namespace", namespace, "--as", principal, "--policy",
                              str(policy_file), *args, env=env)  # fmt: skip

    listed = as_("acme-admin", "audit", "--json")
    assert listed.code == 0, str(listed)
    entries = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(e["operation"], e["agent_id"]) for e in entries] == [("save", "a-1"),
                                                                  ("save", "eu/b-2")]  # fmt: skip
    one = as_("acme-admin", "audit", "--agent", "eu/", "--json")
    assert [json.loads(line)["agent_id"] for line in one.stdout.splitlines()] == ["eu/b-2"]
    bk = ["--backup-key", str(tmp_path / "backup.key"), "--create-backup-key"]
    made = as_("acme-admin", "backup", "--to", str(tmp_path / "acme.skb"), *bk, "--json")
    assert made.code == 0 and json.loads(made.stdout)["agents"] == 2, str(made)
    health = as_("acme-admin", "health", "--json")
    assert health.code == 0 and json.loads(health.stdout)["agents"] == 2, str(health)
    exported = as_("acme-admin", "export", "--output", str(tmp_path / "acme.jsonl"))
    assert exported.code == 0, str(exported)
    imported = as_("acme-admin", "import", str(tmp_path / "acme.jsonl"), namespace="acme/copy")
    assert imported.code == 0, str(imported)
    # an import writes history as others wrote it: admin on each agent's namespace
    refused = as_("globex-admin", "import", str(tmp_path / "acme.jsonl"), namespace="acme/x")
    assert refused.code == 4, str(refused)
    assert "may not import on agent 'a-1'" in one_error_line(refused)  # relative id
    assert not any(a.startswith("acme/x/") for a in _stored(db, keys))
    # globex's admin: refused in acme, every time, before anything is read or written
    for args in (["audit"], ["agents"], ["health"], ["export", "--output", "-"],
                 ["backup", "--to", str(tmp_path / "no.skb"), *bk]):  # fmt: skip
        refused = as_("globex-admin", *args)
        assert refused.code == 4, str(refused)
        assert "namespace 'acme'" in one_error_line(refused), str(refused)
    assert not (tmp_path / "no.skb").exists()
    # the refusals are listed in the namespace's audit entries (and acme's backup)
    listed = as_("acme-admin", "audit", "--principal", "globex-admin", "--json")
    ops_seen = [json.loads(line) for line in listed.stdout.splitlines()]
    assert {(e["operation"], e["outcome"]) for e in ops_seen} >= {
        ("audit", "denied"),
        ("list", "denied"),
        ("backup", "denied"),
    }
    assert all(e["detail"].get("namespace") == "acme" for e in ops_seen if e["agent_id"] is None)


@pytest.mark.parametrize("namespace", ["../globex", "..", ".", "acme/.", "acme/../globex"])
def test_a_namespace_with_a_dot_segment_is_refused_naming_the_rule(
    db: Path, keys: Path, namespace: str
) -> None:
    """``--namespace ../globex`` read as a plain id prefix ('../globex/'): it listed "no
    agents" and would have written agents under '../globex/...' (neither globex nor
    acme). A namespace is an id prefix, not a path: '.' and '..' segments are refused
    before anything is read or written, the message naming the rule."""
    before = _stored(db, keys)
    for args in (["agents"], ["delete", "g", "--yes"]):
        run = sk(db, keys, *args, namespace=namespace)
        line = one_error_line(run)
        assert run.code == 2, str(run)
        assert f"namespace {namespace!r} is not a namespace" in line, line
        assert "'.' or '..' segment" in line and "none empty, '.' or '..'" in line, line
    assert _stored(db, keys) == before
