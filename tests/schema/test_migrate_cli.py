"""``statekeeper migrate`` and ``statekeeper schema`` as a user runs them, and a
migration killed with SIGKILL at an arbitrary point, then resumed."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from statekeeper import StateStore
from statekeeper.schema import TypedStates
from statekeeper.schema.rewrite import original

from . import apps

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEKEEPER_")}
    # this checkout's statekeeper (src/), not whichever one the environment installed
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    env.update({"COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb", "PYTHONPATH": path})
    return env


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "statekeeper.cli", *args],
        capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=300,
    )  # fmt: skip


def _populate(url: str, n: int, *, bad: bool = False) -> None:
    async def go() -> None:
        async with StateStore(url, durability="group") as store:
            states = TypedStates(store, apps.support_v1)
            for start in range(0, n, 500):
                await asyncio.gather(
                    *(
                        states.create(f"a{i:05d}", apps.SupportV1(customer_name=f"c{i}"))
                        for i in range(start, min(n, start + 500))
                    )
                )
            if bad:
                await store.save("bad", {"$model": "support"})

    asyncio.run(go())


Stored = dict[tuple[str, int], tuple[bytes, bytes]]


def _stored(db: Path) -> Stored:
    """Every stored event's payload and checksum, as the file holds them."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as conn:
        rows = conn.execute(
            "SELECT agent_id, seq, CAST(payload AS BLOB), CAST(checksum AS BLOB) FROM sk_events"
        ).fetchall()
    return {(a, seq): (bytes(p), bytes(c)) for a, seq, p, c in rows}


def _migrated(db: Path, before: Stored) -> int:
    """Events rewritten since ``before`` (a migration rewrites each agent's head event)."""
    now = _stored(db)
    return sum(1 for key, value in now.items() if before.get(key) != value)


def test_schema_show_and_a_dry_run_then_the_migration_and_its_rollback(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    url = f"sqlite:///{db}"
    _populate(url, 20, bad=True)
    before = _stored(db)
    journal = tmp_path / "j.json"
    shown = _cli("schema", "show", "--app", "tests.schema.apps:v2", "--json")
    assert shown.returncode == 0, shown.stderr
    (row,) = json.loads(shown.stdout)
    assert (row["model"], row["version"], row["upcasters"], row["downcasters"]) == (
        "support", 2, ["1->2"], ["2->1"]
    )  # fmt: skip
    dry = _cli("--db", url, "migrate", "--app", "tests.schema.apps:v2", "--dry-run", "--json",
               "--journal", str(journal))  # fmt: skip
    assert dry.returncode == 1, dry.stderr  # an agent would fail: reported, exit 1
    out = json.loads(dry.stdout)
    assert out["dry_run"] and out["changed"] == 20 and out["versions"] == {"1": 21}
    assert [f["agent_id"] for f in out["failed"]] == ["bad"] and "1" in out["samples"]
    assert _stored(db) == before and not journal.exists()
    text = _cli("--db", url, "migrate", "--app", "tests.schema.apps:v2", "--journal", str(journal))
    assert text.returncode == 1  # 'bad' cannot be migrated
    assert "migrated: 20" in text.stdout and "'bad': UpcasterFailed" in text.stdout
    assert _migrated(db, before) == 20 and _stored(db).keys() == before.keys()
    back = _cli("--db", url, "migrate", "--app", "tests.schema.apps:v2", "--rollback",
                "--journal", str(journal), "--json")  # fmt: skip
    assert back.returncode == 0, back.stderr
    assert json.loads(back.stdout)["changed"] == 20
    assert _stored(db) == before  # the pre-migration records, byte for byte
    status = _cli("--db", url, "schema", "status", "--app", "tests.schema.apps:v2", "--json")
    assert json.loads(status.stdout)["versions"] == {"1": 21}
    missing = _cli("--db", url, "migrate", "--app", "no.such.module")
    assert missing.returncode != 0 and "cannot import" in missing.stderr


def test_a_migration_killed_with_sigkill_resumes_and_migrates_each_agent_once(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    url = f"sqlite:///{db}"
    n = 3000
    _populate(url, n)
    before = _stored(db)
    journal = tmp_path / "j.json"
    args = [sys.executable, "-m", "statekeeper.cli", "--db", url, "migrate", "--app",
            "tests.schema.apps:v2", "--journal", str(journal), "--concurrency", "16"]  # fmt: skip
    gate = tmp_path / "gate"  # the upcast of agent 1500 creates it and stops there
    proc = subprocess.Popen(
        args,
        cwd=ROOT,
        env={**_env(), apps.GATE: str(gate)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 240
        while not gate.exists():  # wait for the condition: the run at agent 1500
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the migration never reached agent 1500"
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    done_before = _migrated(db, before)
    assert 200 <= done_before < n, done_before  # killed in the middle
    rerun = _cli(
        "--db", url, "migrate", "--app", "tests.schema.apps:v2", "--journal", str(journal), "--json"
    )
    assert rerun.returncode == 0, rerun.stderr + rerun.stdout
    out = json.loads(rerun.stdout)
    assert out["problems"] == [] and out["verified"] == n
    assert _migrated(db, before) == n and _stored(db).keys() == before.keys()

    async def check() -> None:
        async with StateStore(url) as store:
            states = TypedStates(store, apps.support_v2)
            for i in (0, 1234, n - 1):
                assert await states.load(f"a{i:05d}") == apps.SupportV2(customer=f"c{i}")
            assert (await store.verify()).ok
            # every agent exactly once: the original each head event keeps is the
            # pre-migration record (a second rewrite would keep the first one's bytes)
            for i in range(n):
                kept = await original(store, f"a{i:05d}")
                assert kept is not None and kept.version == 1
                assert (kept.event.payload, kept.event.checksum) == before[(f"a{i:05d}", 1)]

    asyncio.run(check())


def test_a_migration_as_a_principal_needs_admin_on_every_namespace(tmp_path: Path) -> None:
    """``--as`` reaches the migration's writable store too (it was opened without it)."""
    db = tmp_path / "s.db"
    url = f"sqlite:///{db}"
    _populate(url, 3)
    before = _stored(db)
    policy = tmp_path / "policy.toml"
    policy.write_text('[principals.tenant]\nadmin = ["a/**"]\n\n[principals.ops]\nadmin = ["**"]\n')
    common = ["--policy", str(policy), "--db", url, "migrate", "--app", "tests.schema.apps:v2",
              "--journal", str(tmp_path / "j.json")]  # fmt: skip
    refused = _cli("--as", "tenant", *common)
    assert refused.returncode == 4, refused.stderr
    assert "may not migrate" in refused.stderr and "every namespace" in refused.stderr
    assert _stored(db) == before
    done = _cli("--as", "ops", *common, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["changed"] == 3
