"""``statekeeper feed-intents``: list the feed intents no delete settles, and settle
them (``--settle``), as an operator would (``tests/feed/test_intent_settle.py`` covers
the store's calls). The intents are crafted as another host's delete writes them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from statekeeper import SyncStateStore
from statekeeper.backends.tiered_owner import _started, claim_owner
from statekeeper.cli import app
from statekeeper.store import feed_intents as fi

from ._proc import sk_in_process

ELSEWHERE = {"host": "worker-2", "boot": "b", "pidns": "p", "pid": 4242, "start": 7}
POLICY = '[principals.ops]\nadmin = ["**"]\n\n[principals.tenant]\nadmin = ["acme/**"]\n'


def stuck(db: Path, owners: dict[str, Any], deleted: tuple[str, ...] = ()) -> None:
    """Agents ``owners`` names (two events each), an intent of a delete of each written
    by its owner; those ``deleted`` deleted after it, the tombstone never written."""
    with SyncStateStore(f"sqlite:///{db}", witness=False) as store:
        for n in range(2):
            for agent_id in owners:
                store.save(agent_id, {"n": n})
        backend, codec = store.store.backend, store.store.codec
        with pytest.MonkeyPatch.context() as patch:
            for agent_id, owner in owners.items():
                patch.setattr(fi, "claim_owner", lambda owner=owner: owner)
                at = store._portal.call(backend.read(agent_id, 1, 2))[-1]
                stream = fi.intent_stream(backend, agent_id)
                store._portal.call(fi._write_intent(backend, codec, stream, agent_id, 2, at, False))
        for agent_id in deleted:
            store._portal.call(backend.delete_agent(agent_id))


def tombstones(db: Path) -> list[tuple[str, int]]:
    with SyncStateStore(f"sqlite:///{db}", witness=False) as store:
        sub = store.subscribe(stop_at_head=True)
        return [(c.agent_id, c.seq) for c in sub if c.deleted]


def test_another_hosts_intent_is_listed_and_settled_once(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    stuck(db, {"acme/gone": ELSEWHERE, "acme/kept": ELSEWHERE}, deleted=("acme/gone",))
    listed = sk_in_process("feed-intents", "--db", str(db), "--json")
    assert listed.returncode == 0, listed.stderr
    found = {i["agent_id"]: i for i in json.loads(listed.stdout)}
    assert found["acme/gone"]["state"] == "done" and found["acme/kept"]["state"] == "intact"
    assert found["acme/kept"]["owner"] == ELSEWHERE
    assert "another host" in found["acme/kept"]["why"]
    verify = sk_in_process("verify", "--db", str(db), "--json")
    reasons = [p["reason"] for p in json.loads(verify.stdout)["problems"]]
    # (the store it was run on named: was without --db, the default store's file)
    command = f"'statekeeper feed-intents --db {db} --settle --older-than 1h acme/kept'"
    assert any(command in r for r in reasons), reasons

    declined = sk_in_process("feed-intents", "--db", str(db), "--settle", "acme/gone", input="n\n")
    assert declined.returncode == 1 and tombstones(db) == []
    settled = sk_in_process("feed-intents", "--db", str(db), "--settle", "acme/gone", "--yes")
    assert settled.returncode == 0, settled.stderr
    assert "acme/gone (seq 2): tombstone written" in settled.stdout
    again = sk_in_process("feed-intents", "--db", str(db), "--settle", "acme/gone", "--yes")
    assert again.returncode == 1 and "nothing settled" in again.stdout
    assert tombstones(db) == [("acme/gone", 2)]

    # written a moment ago by a process of another host: its delete may be under way
    young = sk_in_process("feed-intents", "--db", str(db), "--settle", "acme/kept", "--yes")
    assert young.returncode == 1 and "refused" in young.stdout, young.stdout
    assert "--older-than" in young.stdout and "--force" in young.stdout
    kept = sk_in_process(
        "feed-intents", "--db", str(db), "--settle", "acme/kept", "--yes", "--json", "--force"
    )
    assert kept.returncode == 0, kept.stderr
    assert [(s["agent_id"], s["outcome"]) for s in json.loads(kept.stdout)] == [
        ("acme/kept", "dropped")
    ]
    assert tombstones(db) == [("acme/gone", 2)]
    assert sk_in_process("verify", "--db", str(db)).returncode == 0
    with SyncStateStore(f"sqlite:///{db}", witness=False) as store:
        assert store.load("acme/kept").data == {"n": 1}


def test_a_running_owners_intent_is_refused_unless_forced(tmp_path: Path) -> None:
    if None in claim_owner().values():
        pytest.skip("no /proc: no owner is provably running")
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)  # fmt: skip
    try:
        owner = {**claim_owner(), "pid": child.pid, "start": _started(child.pid)}
        db = tmp_path / "s.db"
        stuck(db, {"acme/kept": owner})
        refused = sk_in_process("feed-intents", "--db", str(db), "--settle", "acme/kept", "-y")
        assert refused.returncode == 1
        assert "refused" in refused.stdout and "running on this host" in refused.stdout
        assert len(json.loads(sk_in_process("feed-intents", "--db", str(db), "--json").stdout)) == 1
        forced = sk_in_process(
            "feed-intents", "--db", str(db), "--settle", "acme/kept", "-y", "--force"
        )
        assert forced.returncode == 0 and "intent dropped" in forced.stdout
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait()


def test_a_tenant_principal_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    stuck(db, {"acme/gone": ELSEWHERE}, deleted=("acme/gone",))
    (tmp_path / "policy.toml").write_text(POLICY, encoding="utf-8")
    as_tenant = ("--as", "tenant", "--policy", str(tmp_path / "policy.toml"))
    for args in (("feed-intents",), ("feed-intents", "--settle", "acme/gone", "--yes")):
        refused = sk_in_process(*as_tenant, *args, "--db", str(db))
        assert refused.returncode == 4 and "access denied" in refused.stderr
    assert tombstones(db) == []
    as_ops = ("--as", "ops", "--policy", str(tmp_path / "policy.toml"))
    done = sk_in_process(*as_ops, "feed-intents", "--settle", "acme/gone", "--yes", "--db", str(db))
    assert done.returncode == 0, done.stderr
    assert tombstones(db) == [("acme/gone", 2)]


def test_the_force_help_names_both_refusals_it_overrides() -> None:
    """``--force`` overrides the refusal of a fresh intact intent too (docs/cli.md): its
    help said only "owner runs on this host"."""
    result = CliRunner().invoke(app, ["feed-intents", "--help"], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.replace("│", " ").split())  # (its lines wrapped)
    force = text[text.index("--force") :].split(" --", 1)[0]
    assert "owner runs on this host" in force
    assert "less than an hour ago" in force


@pytest.mark.parametrize("bad", ["xyz", "-5m", "nan", "0"])
def test_a_bad_older_than_is_refused_naming_the_option(tmp_path: Path, bad: str) -> None:
    """``--older-than`` that is not a duration: a usage error naming the option and
    the value, nothing settled. Was: "Invalid value: 'xyz' is not a positive
    duration ..." — no option named (the command has agent ids and three options)."""
    db = tmp_path / "s.db"
    stuck(db, {"acme/gone": ELSEWHERE}, deleted=("acme/gone",))
    run = sk_in_process("feed-intents", "--db", str(db), "--settle", "--older-than", bad, "-y")
    assert run.returncode == 2, run.stderr
    assert "'--older-than'" in run.stderr and repr(bad) in run.stderr, run.stderr
    assert tombstones(db) == []


def test_the_suggested_command_never_prints_a_secret_and_can_run() -> None:
    """``verify`` on a store whose URL has a password: the ``feed-intents`` command it
    suggests names the store as ``"$STATEKEEPER_URL"`` (said to be that store's URL),
    never the password. Was: the URL with its password masked (``***``): a command
    that could not be run as printed. A URL with no secret is named as it is."""
    import shlex

    from statekeeper.cli.intents import naming_the_store
    from statekeeper.store.verification import Problem

    reason = "settle it with 'statekeeper feed-intents --settle --older-than 1h acme/kept'"
    problem = Problem("acme/kept", 2, reason, "feed")
    (named,) = naming_the_store([problem], "postgresql://ops:s3cret@db.example/app")
    assert "s3cret" not in named.reason and "***" not in named.reason, named.reason
    command = named.reason.split("'")[1]
    assert shlex.split(command)[:4] == ["statekeeper", "feed-intents", "--db", "$STATEKEEPER_URL"]
    assert "$STATEKEEPER_URL: this store's URL" in named.reason
    (plain,) = naming_the_store([problem], "sqlite:///tmp/s.db")
    assert "'statekeeper feed-intents --db sqlite:///tmp/s.db --settle" in plain.reason
    assert "$STATEKEEPER_URL" not in plain.reason
