"""A store that went back in time is detected by its automatic witness (issue 9 item 6).

Every case below is internally consistent inside the database: the chain, the head
tags and ``verify`` of the store alone find nothing (checked with ``witness=False``).
Only the high-water marks kept outside the file, by default, without the user
exporting anything, can tell that acknowledged writes are gone.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from statekeeper import StateStore, SyncStateStore
from statekeeper.errors import IntegrityError, NotAStore, RollbackDetected
from statekeeper.security import Keyring, check_witness, generate_key, load_witness

from ..backends._services import (
    POSTGRES_DSN,
    REDIS_URL,
    delete_prefix,
    drop_schema,
    namespace,
    require_postgres,
    require_redis,
)

KEYS = [pytest.param(None, id="without-key"), pytest.param("k1", id="with-key")]
KEY = generate_key()


def _keyring(kid: str | None) -> Keyring | None:
    return Keyring({kid: KEY}) if kid else None


def _url(db: Path) -> str:
    return f"sqlite:///{db}"


async def _write(db: Path, agent: str, first: int, last: int, **options: object) -> None:
    async with StateStore(_url(db), **options) as store:  # type: ignore[arg-type]
        for n in range(first, last + 1):
            await store.save(agent, {"n": n})


def _mark(witness: Path, agent: str) -> int:
    if not witness.exists():
        return 0
    try:
        doc = json.loads(witness.read_text())
    except ValueError:
        return 0
    return next((int(e["seq"]) for e in doc["streams"] if e["agent_id"] == agent), 0)


def _wait_for(condition: object, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


# -- the witness is there by default ------------------------------------------------------


async def test_the_witness_is_kept_next_to_the_file_by_default(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    await _write(db, "a", 1, 3)
    witness = Path(f"{db}.sk-witness")
    assert _mark(witness, "a") == 3
    doc = load_witness(witness)  # the format of an exported witness...
    assert doc["automatic"] is True
    async with StateStore(_url(db)) as store:
        assert store.witness is not None and store.witness.path == str(witness)
        assert (await check_witness(store, doc)).ok  # ...so the manual check reads it
        assert (await store.verify()).ok
    async with StateStore(_url(db), witness=False) as store:
        assert store.witness is None


async def test_a_mark_is_written_within_the_interval_without_closing(tmp_path: Path) -> None:
    db = tmp_path / "lag.db"
    witness = Path(f"{db}.sk-witness")
    store = StateStore(_url(db), witness_interval=0.05)
    try:
        for n in range(1, 6):
            await store.save("a", {"n": n})
        deadline = time.monotonic() + 60
        while _mark(witness, "a") < 5:  # the background flush, not close(), writes it
            assert time.monotonic() < deadline, "the mark was never written"
            await asyncio.sleep(0.01)
    finally:
        await store.close()


def test_marks_follow_a_store_used_from_one_event_loop_after_another(tmp_path: Path) -> None:
    db = tmp_path / "loops.db"
    witness = Path(f"{db}.sk-witness")
    store = StateStore(_url(db), witness_interval=0.05)

    async def save(n: int) -> None:
        await store.save("a", {"n": n})

    asyncio.run(save(1))  # its loop ends before the mark's timer fires
    asyncio.run(save(2))

    async def until_marked() -> None:
        await save(3)
        deadline = time.monotonic() + 60
        while _mark(witness, "a") < 3:
            assert time.monotonic() < deadline, "the mark was never written"
            await asyncio.sleep(0.01)
        await store.close()

    asyncio.run(until_marked())


# -- the three ways a SQLite store goes back in time --------------------------------------

CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from statekeeper import StateStore

    async def main(url, n):
        store = StateStore(url)
        for i in range(1, n + 1):
            await store.save("a", {"n": i, "pad": "x" * 2000})
        print("acked", n, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)

    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
    """
)


@pytest.mark.slow
def test_a_flipped_bit_in_a_wal_frame_loses_tail_writes_and_is_detected(tmp_path: Path) -> None:
    db = tmp_path / "wal.db"
    witness = Path(f"{db}.sk-witness")
    n = 30
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, _url(db), str(n)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().split() == ["acked", str(n)]
        # the mark reaches the witness with bounded lag, with no help from the user
        _wait_for(lambda: _mark(witness, "a") == n, "the witness to hold seq 30")
    finally:
        child.kill()  # SIGKILL: the WAL is left as it is, not checkpointed
        child.wait()
    wal = Path(f"{db}-wal")
    data = bytearray(wal.read_bytes())
    assert len(data) > 32
    page_size = int.from_bytes(data[8:12], "big")
    # the frames written: those carrying the WAL header's salt (at FULL the file is
    # grown ahead with zeros past them, backends/sqlite/wal.py)
    salt, frames = bytes(data[16:24]), 0
    while data[32 + frames * (24 + page_size) + 8 :][:8] == salt:
        frames += 1
    frame = frames * 2 // 3  # a frame of a late commit
    data[32 + frame * (24 + page_size) + 24 + page_size // 2] ^= 0x01
    wal.write_bytes(bytes(data))

    # what SQLite does with it: the log ends before that frame, consistently
    with SyncStateStore(_url(db), witness=False) as blind:
        found = blind.head("a")
        assert 0 < found < n
        assert blind.load("a").data["n"] == found
        assert blind.store.backend.name == "sqlite"
    # the store's witness knows better
    with pytest.raises(RollbackDetected) as info, SyncStateStore(_url(db)) as store:
        store.load("a")
    error = info.value
    assert (error.agent_id, error.seq, error.found) == ("a", n, found)
    assert f"seq {n} was acknowledged" in str(error) and str(witness) in str(error)
    with SyncStateStore(_url(db)) as store:  # verify still runs, and reports it
        assert [(p.agent_id, p.seq) for p in store.verify().problems] == [("a", n)]


@pytest.mark.parametrize("kid", KEYS)
async def test_a_file_truncated_to_zero_bytes_is_a_rollback_not_an_empty_store(
    tmp_path: Path, kid: str | None
) -> None:
    db = tmp_path / "cut.db"
    await _write(db, "a", 1, 4, keyring=_keyring(kid))
    await _write(db, "b", 1, 2, keyring=_keyring(kid))
    os.truncate(db, 0)
    with pytest.raises(RollbackDetected) as info:
        StateStore(_url(db), keyring=_keyring(kid))
    assert (info.value.agent_id, info.value.seq, info.value.found) == ("b", 2, 0)
    assert "2 agent(s) were acknowledged" in str(info.value)
    assert isinstance(info.value.__cause__, NotAStore)
    with pytest.raises(RollbackDetected):
        SyncStateStore(_url(db), keyring=_keyring(kid))
    with pytest.raises(NotAStore, match="empty"):  # without a witness: still refused
        StateStore(_url(db), witness=False)
    assert db.stat().st_size == 0  # and left as it was


@pytest.mark.parametrize("kid", KEYS)
async def test_an_old_copy_of_the_file_restored_is_detected(
    tmp_path: Path, kid: str | None
) -> None:
    db = tmp_path / "app.db"
    ring = _keyring(kid)
    await _write(db, "a", 1, 3, keyring=ring)
    shutil.copy(db, tmp_path / "backup.db")
    await _write(db, "a", 4, 6, keyring=ring)
    await _write(db, "new", 1, 1, keyring=ring)
    shutil.copy(tmp_path / "backup.db", db)  # the rollback
    async with StateStore(_url(db), keyring=ring, witness=False) as blind:
        assert (await blind.verify()).ok  # consistent in itself
    async with StateStore(_url(db), keyring=ring) as store:
        with pytest.raises(RollbackDetected) as info:
            await store.save("a", {"n": 99})  # refused: nothing written on top
        with pytest.raises(RollbackDetected):
            await store.get("a")
        report = await store.verify()
    assert info.value.seq in (6, 1) and info.value.found in (3, 0)
    assert sorted((p.agent_id, p.seq) for p in report.problems) == [("a", 6), ("new", 1)]
    async with StateStore(_url(db), keyring=ring, witness=False) as blind:
        assert await blind.head("a") == 3  # the refused save wrote nothing


async def test_rolled_back_and_written_again_past_the_mark_is_detected(tmp_path: Path) -> None:
    db = tmp_path / "again.db"
    await _write(db, "a", 1, 2)
    shutil.copy(db, tmp_path / "backup.db")
    await _write(db, "a", 3, 4)
    shutil.copy(tmp_path / "backup.db", db)
    await _write(db, "a", 3, 6, witness=False)  # a writer that keeps no witness
    async with StateStore(_url(db)) as store:
        with pytest.raises(RollbackDetected, match="not the one acknowledged") as info:
            await store.load("a")
    assert (info.value.seq, info.value.found) == (4, 6)


async def test_marks_of_async_durability_are_taken_when_the_buffer_is_stored(
    tmp_path: Path,
) -> None:
    db = tmp_path / "behind.db"
    await _write(db, "a", 1, 2, durability="async")
    shutil.copy(db, tmp_path / "backup.db")
    await _write(db, "a", 3, 5, durability="async")
    assert _mark(Path(f"{db}.sk-witness"), "a") == 5
    shutil.copy(tmp_path / "backup.db", db)
    async with StateStore(_url(db), durability="group") as store:
        with pytest.raises(RollbackDetected):
            await store.load("a")


# -- what is not a rollback ----------------------------------------------------------------


async def test_deleting_an_agent_is_not_a_rollback(tmp_path: Path) -> None:
    db = tmp_path / "del.db"
    await _write(db, "a", 1, 3)
    await _write(db, "b", 1, 3)
    async with StateStore(_url(db)) as one, StateStore(_url(db)) as two:
        await one.get("a")
        await two.delete("a")  # another store (process) deletes what one saw
        assert _mark(Path(f"{db}.sk-witness"), "a") == 0  # marked deleted before it went
        async with StateStore(_url(db)) as three:  # opens meanwhile: no false alarm
            assert await three.get("a") is None
        await one.save("a", {"n": 1})  # re-created
    async with StateStore(_url(db)) as store:
        assert (await store.load("a")).seq == 1
        assert (await store.verify()).ok


async def test_two_stores_sharing_a_file_merge_their_marks(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    async with StateStore(_url(db)) as one, StateStore(_url(db)) as two:
        for n in range(1, 4):
            await one.save("a", {"n": n})
            await two.save("b", {"n": n})
    witness = Path(f"{db}.sk-witness")
    assert (_mark(witness, "a"), _mark(witness, "b")) == (3, 3)
    async with StateStore(_url(db)) as store:
        assert (await store.verify()).ok


async def test_an_edited_witness_file_is_refused_not_trusted(tmp_path: Path) -> None:
    db = tmp_path / "edit.db"
    await _write(db, "a", 1, 3)
    _hide_writes(Path(f"{db}.sk-witness"))
    async with StateStore(_url(db)) as store:
        with pytest.raises(IntegrityError, match=r"witness file .* is unusable: it was altered"):
            await store.load("a")


def _hide_writes(witness: Path) -> None:
    doc = json.loads(witness.read_text())
    doc["streams"][0]["seq"] = 1  # hide two writes from the witness
    witness.write_text(json.dumps(doc))


# -- other engines: a witness file when one is given ----------------------------------------


async def test_redis_with_a_witness_file_detects_a_store_that_lost_its_data(
    tmp_path: Path,
) -> None:
    require_redis()
    prefix = namespace(tmp_path) + ":"
    url = f"{REDIS_URL}?prefix={prefix}"
    witness = tmp_path / "redis.sk-witness"
    try:
        async with StateStore(url) as plain:
            assert plain.witness is None  # no file of its own: none by default
        async with StateStore(url, witness=witness) as store:
            for n in range(1, 4):
                await store.save("a", {"n": n})
        delete_prefix(prefix)  # the server restarted empty (or from an old dump)
        async with StateStore(url, witness=witness) as store:
            with pytest.raises(RollbackDetected) as info:
                await store.get("a")
        assert (info.value.agent_id, info.value.seq, info.value.found) == ("a", 3, 0)
    finally:
        delete_prefix(prefix)


async def test_postgresql_with_a_witness_file_detects_a_store_that_lost_its_data(
    tmp_path: Path,
) -> None:
    require_postgres()
    schema = namespace(tmp_path)
    url = f"{POSTGRES_DSN}?schema={schema}"
    witness = tmp_path / "pg.sk-witness"
    try:
        async with StateStore(url) as plain:
            assert plain.witness is None
        async with StateStore(url, witness=witness) as store:
            for n in range(1, 4):
                await store.save("a", {"n": n})
            await store.save("b", {"n": 1})
        drop_schema(schema)  # the database was restored without them
        async with StateStore(url, witness=witness) as store:
            with pytest.raises(RollbackDetected) as info:
                await store.load("a")
            report = await store.verify()
        assert info.value.found == 0 and info.value.agent_id in ("a", "b")
        assert sorted((p.agent_id, p.seq) for p in report.problems) == [("a", 3), ("b", 1)]
    finally:
        drop_schema(schema)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "STATEKEEPER_URL"}
    env["COLUMNS"] = "120"
    return subprocess.run(
        [sys.executable, "-m", "statekeeper.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_the_cli_reports_a_rollback_including_agents_the_store_lost(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    asyncio.run(_write(db, "a", 1, 3))
    shutil.copy(db, tmp_path / "backup.db")
    asyncio.run(_write(db, "a", 4, 6))
    asyncio.run(_write(db, "new", 1, 2))
    shutil.copy(tmp_path / "backup.db", db)
    verified = _cli("verify", "--db", str(db), "--json")
    assert verified.returncode == 1, verified.stderr
    problems = json.loads(verified.stdout)["problems"]
    assert sorted((p["agent_id"], p["seq"]) for p in problems) == [("a", 6), ("new", 2)]
    assert all("rollback detected" in p["reason"] for p in problems)
    shown = _cli("show", "a", "--db", str(db))
    assert shown.returncode == 2 and "rollback detected" in shown.stderr
    assert "Traceback" not in shown.stderr
