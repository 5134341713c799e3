"""The tamper suite: edit the raw SQLite file the way an attacker would, and check that
every edit is detected — on load when the damaged record is read, by ``history``, and
always by ``verify``, as a typed ``IntegrityError`` naming the agent (and seq).

Each attack runs with a key (AES-256-GCM + HMAC head: an attacker without the key can
forge nothing) and without one (SHA-256 chain: every *naive* edit below is detected
too; an attacker who recomputes SHA-256 is not — see the last tests, and
``docs/security.md``). A rollback of the whole file is detected by a witness only (the
store keeps one by default: tests/store/test_rollback.py; this suite opens the store
without it).
"""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import orjson
import pytest

from statekeeper import IntegrityError, StateStore
from statekeeper.codec import Codec
from statekeeper.security import Keyring, check_witness, export_witness, generate_key

KEY = generate_key()
MODES = [pytest.param(True, id="with-key"), pytest.param(False, id="without-key")]
AGENTS = ("alpha", "beta")
N = 10  # events per agent; snapshots at 4 and 8, so 9 and 10 are read on every load


def _store(db: Path, keyed: bool, **options: Any) -> StateStore:
    keyring = Keyring({"k1": KEY}) if keyed else None
    # the checks inside the store alone: what the automatic witness (kept outside the
    # store) adds is tested in tests/store/test_rollback.py
    options.setdefault("witness", False)
    return StateStore(f"sqlite:///{db}", keyring=keyring, snapshot_every=4, **options)


async def _populate(db: Path, keyed: bool) -> None:
    clock = iter(range(1000, 2000))
    async with _store(db, keyed, clock=lambda: float(next(clock))) as store:
        for agent in AGENTS:
            for i in range(1, N + 1):
                await store.save(
                    agent,
                    {"owner": agent, "n": i, "note": f"SECRET-{agent}-{i}"},
                    fsm_state="working" if i % 2 else "idle",
                    actor=f"worker-{i}",
                )


def _sql(db: Path, *statements: tuple[str, tuple[Any, ...]]) -> None:
    with closing(sqlite3.connect(db)) as conn, conn:
        for sql, args in statements:
            conn.execute(sql, args)


def _row(db: Path, sql: str, *args: Any) -> Any:
    with closing(sqlite3.connect(db)) as conn:
        return conn.execute(sql, args).fetchone()


async def _problems(db: Path, keyed: bool, agent: str = "alpha") -> list[tuple[str, int | None]]:
    async with _store(db, keyed) as store:
        report = await store.verify()
        assert report.agents == len(AGENTS)
        return [(p.agent_id, p.seq) for p in report.problems if p.agent_id == agent]


async def _load_fails(db: Path, keyed: bool, agent: str = "alpha") -> IntegrityError:
    async with _store(db, keyed, cache_size=0) as store:
        with pytest.raises(IntegrityError) as info:
            await store.load(agent)
        assert info.value.agent_id == agent
        # the other agent is unaffected
        other = next(a for a in AGENTS if a != agent)
        assert (await store.load(other)).data["n"] == N
        return info.value


async def _history_fails(db: Path, keyed: bool, agent: str = "alpha") -> None:
    async with _store(db, keyed) as store:
        with pytest.raises(IntegrityError):
            [e async for e in store.history(agent)]


def _files(db: Path) -> bytes:
    """The database file and its WAL, as an attacker who copies them would see them."""
    wal = Path(f"{db}-wal")
    return db.read_bytes() + (wal.read_bytes() if wal.exists() else b"")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "victim.db"


# -- the attacks ------------------------------------------------------------------------------


@pytest.mark.parametrize("keyed", MODES)
@pytest.mark.parametrize("seq", [pytest.param(9, id="read-on-load"), pytest.param(6, id="old")])
async def test_change_a_payload(db: Path, keyed: bool, seq: int) -> None:
    await _populate(db, keyed)
    (payload,) = _row(db, "SELECT payload FROM sk_events WHERE agent_id='alpha' AND seq=?", seq)
    changed = bytearray(payload)
    changed[len(changed) // 2] ^= 0x20
    _sql(
        db,
        ("UPDATE sk_events SET payload=? WHERE agent_id='alpha' AND seq=?", (bytes(changed), seq)),
    )
    assert await _problems(db, keyed) == [("alpha", seq)]
    await _history_fails(db, keyed)
    if seq > 8:
        assert (await _load_fails(db, keyed)).seq == seq


@pytest.mark.parametrize("keyed", MODES)
async def test_change_a_snapshot(db: Path, keyed: bool) -> None:
    await _populate(db, keyed)
    (payload,) = _row(db, "SELECT payload FROM sk_snapshots WHERE agent_id='alpha' AND seq=8")
    changed = bytearray(payload)
    changed[-3] ^= 0x01
    _sql(
        db,
        ("UPDATE sk_snapshots SET payload=? WHERE agent_id='alpha' AND seq=8", (bytes(changed),)),
    )
    assert ("alpha", 8) in await _problems(db, keyed)
    # a snapshot is only a cache of the fold: the load falls back to the one at seq 4
    async with _store(db, keyed, cache_size=0) as store:
        assert (await store.load("alpha")).data["n"] == N


@pytest.mark.parametrize("keyed", MODES)
@pytest.mark.parametrize("seq", [9, 6])
async def test_delete_a_middle_record(db: Path, keyed: bool, seq: int) -> None:
    await _populate(db, keyed)
    _sql(db, ("DELETE FROM sk_events WHERE agent_id='alpha' AND seq=?", (seq,)))
    assert await _problems(db, keyed) == [("alpha", seq)]
    await _history_fails(db, keyed)
    if seq > 8:
        assert "gap" in (await _load_fails(db, keyed)).reason


@pytest.mark.parametrize("keyed", MODES)
@pytest.mark.parametrize("move_head", [True, False], ids=["head-moved-back", "head-kept"])
async def test_drop_the_newest_two(db: Path, keyed: bool, move_head: bool) -> None:
    await _populate(db, keyed)
    statements = [("DELETE FROM sk_events WHERE agent_id='alpha' AND seq > ?", (N - 2,))]
    if move_head:  # make the head row agree with the shorter stream
        statements.append(("UPDATE sk_agents SET head_seq=? WHERE agent_id='alpha'", (N - 2,)))
    _sql(db, *statements)
    assert await _problems(db, keyed) != []
    error = await _load_fails(db, keyed)
    assert ("head" in error.reason) if move_head else ("stream ends" in error.reason)


@pytest.mark.parametrize("keyed", MODES)
@pytest.mark.parametrize("pair", [(9, 10), (5, 6)])
async def test_swap_two_records(db: Path, keyed: bool, pair: tuple[int, int]) -> None:
    await _populate(db, keyed)
    a, b = pair
    ra = _row(db, "SELECT payload, checksum FROM sk_events WHERE agent_id='alpha' AND seq=?", a)
    rb = _row(db, "SELECT payload, checksum FROM sk_events WHERE agent_id='alpha' AND seq=?", b)
    _sql(
        db,
        ("UPDATE sk_events SET payload=?, checksum=? WHERE agent_id='alpha' AND seq=?", (*rb, a)),
        ("UPDATE sk_events SET payload=?, checksum=? WHERE agent_id='alpha' AND seq=?", (*ra, b)),
    )
    assert await _problems(db, keyed) == [("alpha", a), ("alpha", b)]  # every one reported
    await _history_fails(db, keyed)
    if a > 8:
        assert (await _load_fails(db, keyed)).seq == a


@pytest.mark.parametrize("keyed", MODES)
async def test_append_a_forged_record(db: Path, keyed: bool) -> None:
    await _populate(db, keyed)
    # a record of the attacker's making at seq 11: a copy of a genuine one with the
    # attacker's content spliced in, and the head moved to it
    payload, checksum, ts = _row(
        db, "SELECT payload, checksum, ts FROM sk_events WHERE agent_id='alpha' AND seq=10"
    )
    forged = payload.replace(b'"n":10', b'"n":99') if not keyed else payload[:-8] + b"\x00" * 8
    _sql(
        db,
        (
            "INSERT INTO sk_events(agent_id, seq, kind, ts, payload, checksum)"
            " VALUES ('alpha', 11, 'patch', ?, ?, ?)",
            (ts + 1, forged, checksum),
        ),
        ("UPDATE sk_agents SET head_seq=11 WHERE agent_id='alpha'", ()),
    )
    assert await _problems(db, keyed) == [("alpha", 11)]
    assert (await _load_fails(db, keyed)).seq == 11


@pytest.mark.parametrize("keyed", MODES)
async def test_copy_a_record_from_another_agent(db: Path, keyed: bool) -> None:
    await _populate(db, keyed)
    _sql(
        db,
        (
            "UPDATE sk_events SET (payload, checksum, ts) = (SELECT payload, checksum, ts"
            " FROM sk_events WHERE agent_id='beta' AND seq=9) WHERE agent_id='alpha' AND seq=9",
            (),
        ),
    )
    assert await _problems(db, keyed) == [("alpha", 9)]
    assert (await _load_fails(db, keyed)).seq == 9


@pytest.mark.parametrize("keyed", MODES)
async def test_copy_an_old_record_over_the_newest(db: Path, keyed: bool) -> None:
    await _populate(db, keyed)
    _sql(
        db,
        (
            "UPDATE sk_events SET (payload, checksum, ts, kind) = (SELECT payload, checksum,"
            " ts, kind FROM sk_events WHERE agent_id='alpha' AND seq=3)"
            " WHERE agent_id='alpha' AND seq=10",
            (),
        ),
    )
    assert await _problems(db, keyed) == [("alpha", 10)]
    assert (await _load_fails(db, keyed)).seq == 10


@pytest.mark.parametrize("keyed", MODES)
@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(
            "UPDATE sk_events SET ts = ts + 3600 WHERE agent_id='alpha' AND seq=9", id="event-time"
        ),
        pytest.param(
            "UPDATE sk_events SET kind='transition' WHERE agent_id='alpha' AND seq=9",
            id="event-kind",
        ),
        pytest.param(
            "UPDATE sk_snapshots SET ts = ts - 1 WHERE agent_id='alpha' AND seq=8",
            id="snapshot-time",
        ),
    ],
)
async def test_change_metadata_only(db: Path, keyed: bool, edit: str) -> None:
    await _populate(db, keyed)
    _sql(db, (edit, ()))
    problems = await _problems(db, keyed)
    assert problems and problems[0][1] in (8, 9)
    if "sk_snapshots" in edit:  # only a cache of the fold: the load replays instead
        async with _store(db, keyed, cache_size=0) as store:
            assert (await store.load("alpha")).data["n"] == N
    else:
        await _load_fails(db, keyed)


@pytest.mark.parametrize("keyed", MODES)
async def test_splice_a_record_from_a_deleted_incarnation(db: Path, keyed: bool) -> None:
    """A record that authenticates (same agent, seq, kind and time — its whole row was
    kept from before the agent was deleted and created again) but does not belong to
    the current chain."""
    await _populate(db, keyed)
    old = _row(
        db, "SELECT kind, ts, payload, checksum FROM sk_events WHERE agent_id='alpha' AND seq=9"
    )
    async with _store(db, keyed) as store:
        await store.delete("alpha")
        for i in range(1, N + 1):
            await store.save("alpha", {"reborn": i})
    _sql(
        db,
        (
            "UPDATE sk_events SET kind=?, ts=?, payload=?, checksum=?"
            " WHERE agent_id='alpha' AND seq=9",
            old,
        ),
    )
    problems = await _problems(db, keyed)
    assert problems and problems[0][1] in (9, 10)
    error = await _load_fails(db, keyed)
    assert "chain" in error.reason or "head" in error.reason


@pytest.mark.parametrize("keyed", MODES)
async def test_restore_an_older_copy_of_the_whole_file(
    db: Path, keyed: bool, tmp_path: Path
) -> None:
    """An older copy is consistent in itself: only a witness kept elsewhere detects it."""
    await _populate(db, keyed)
    backup = tmp_path / "backup.db"
    shutil.copy(db, backup)
    async with _store(db, keyed) as store:
        await store.save("alpha", {"n": 11})
        await store.save("gamma", {"new": True})
        witness = await export_witness(store)
    shutil.copy(backup, db)  # the rollback
    async with _store(db, keyed) as store:
        assert (await store.verify()).ok  # internally consistent…
        report = await check_witness(store, witness)  # …but not what the witness saw
    assert not report.ok
    assert {p.agent_id for p in report.problems} == {"alpha", "gamma"}
    assert "rolled back" in " ".join(p.reason for p in report.problems)


# -- what a key adds ------------------------------------------------------------------------


async def test_with_a_key_nothing_is_readable_in_the_file(db: Path) -> None:
    await _populate(db, True)
    raw = _files(db)
    for marker in (b"SECRET-", b"worker-", b"owner", b"working", b"idle"):
        assert marker not in raw


@pytest.mark.parametrize("keyed", MODES)
async def test_a_plaintext_record_slipped_in(db: Path, keyed: bool) -> None:
    """A version-0 record (bare JSON with its SHA-256) in place of a genuine one."""
    await _populate(db, keyed)
    body = orjson.dumps({"ops": [{"op": "replace", "path": "/n", "value": 1000}]})
    checksum = Codec().tag("alpha", 10, "patch", body)
    _sql(
        db,
        (
            "UPDATE sk_events SET payload=?, checksum=? WHERE agent_id='alpha' AND seq=10",
            (body, checksum),
        ),
    )
    if keyed:  # refused outright: an encrypted store accepts no plaintext
        error = await _load_fails(db, keyed)
        assert "not encrypted" in error.reason
    else:  # accepted as a record, but it carries no link: the head no longer matches
        await _load_fails(db, keyed)
    assert await _problems(db, keyed) != []


async def test_without_a_key_a_forger_who_recomputes_sha256_is_not_detected(db: Path) -> None:
    """The documented limit: without a key, integrity is against accidents only."""
    await _populate(db, False)
    codec = Codec()
    ts, prev = _row(
        db,
        "SELECT e.ts, p.checksum FROM sk_events e JOIN sk_events p ON p.agent_id = e.agent_id"
        " AND p.seq = e.seq - 1 WHERE e.agent_id='alpha' AND e.seq=10",
    )
    body = orjson.dumps({"ops": [{"op": "replace", "path": "/n", "value": 1000}]})
    sealed = codec.seal("alpha", 10, "patch", ts, body, prev)
    head = codec.head_tag("alpha", 10, sealed.link)
    _sql(
        db,
        (
            "UPDATE sk_events SET payload=?, checksum=? WHERE agent_id='alpha' AND seq=10",
            (sealed.payload, sealed.checksum),
        ),
        ("UPDATE sk_agents SET head_tag=? WHERE agent_id='alpha'", (head,)),
    )
    assert await _problems(db, False) == []  # undetectable without a key…
    async with _store(db, False) as store:
        assert (await store.load("alpha")).data["n"] == 1000


async def test_with_a_key_the_same_forgery_is_detected(db: Path) -> None:
    await _populate(db, True)
    codec = Codec(keyring=Keyring({"k1": generate_key()}))  # the attacker's own key
    (ts,) = _row(db, "SELECT ts FROM sk_events WHERE agent_id='alpha' AND seq=10")
    body = orjson.dumps({"ops": [{"op": "replace", "path": "/n", "value": 1000}]})
    sealed = codec.seal("alpha", 10, "patch", ts, body)
    head = codec.head_tag("alpha", 10, sealed.link)
    _sql(
        db,
        (
            "UPDATE sk_events SET payload=?, checksum=? WHERE agent_id='alpha' AND seq=10",
            (sealed.payload, sealed.checksum),
        ),
        ("UPDATE sk_agents SET head_tag=? WHERE agent_id='alpha'", (head,)),
    )
    assert await _problems(db, True) == [("alpha", 10)]
    await _load_fails(db, True)


async def test_without_a_key_a_recomputed_snapshot_is_served_but_verify_reports_it(
    db: Path,
) -> None:
    """A snapshot is not checked against the replay on load (that is its point): without
    a key, a forger who recomputes its checksum is served by loads — verify reports it,
    and repair rebuilds it from the events."""
    from statekeeper.store.repair import repair

    await _populate(db, False)
    codec = Codec()
    ts, link = _row(db, "SELECT ts, checksum FROM sk_events WHERE agent_id='alpha' AND seq=8")
    body = {"fsm": "idle", "v": 1, "created_at": 1000.0, "updated_at": ts, "entered": ts}
    body["data"] = {"owner": "alpha", "n": 999, "note": "forged"}
    sealed = codec.seal("alpha", 8, "snapshot", ts, orjson.dumps(body), link)
    _sql(
        db,
        (
            "UPDATE sk_snapshots SET payload=?, checksum=? WHERE agent_id='alpha' AND seq=8",
            (sealed.payload, sealed.checksum),
        ),
    )
    async with _store(db, False, cache_size=0) as store:
        assert (await store.load("alpha", at_seq=8)).data["n"] == 999  # served…
        problems = (await store.verify()).problems
        assert [(p.agent_id, p.seq, p.kind) for p in problems] == [("alpha", 8, "snapshot")]
        assert "differs from the replay" in problems[0].reason  # …but reported
        assert (await repair(store, apply=True)).changes
        assert (await store.load("alpha", at_seq=8)).data["n"] == 8
        assert (await store.verify()).ok
