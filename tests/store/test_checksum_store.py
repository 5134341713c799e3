"""A store's record checksum algorithm (``StateStore(checksum=...)``): a file written by
main (every record SHA-256) opens and verifies unchanged, BLAKE3 records appended to its
streams verify with them, and a changed BLAKE3 record is refused."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.errors import ConfigurationError, IntegrityError

# written by main (a3899b0, before the checksum choice): "chat" (5 events, a snapshot at
# 3), "packed" (compression="zstd": 4 events, a snapshot at 3), "msgpack" (2 events)
MAIN_STORE = Path(__file__).parents[1] / "data" / "sqlite-sha256-store-by-main.sql"
EXPECTED: dict[str, dict[str, Any]] = {
    "chat": {"messages": [f"m{j}" for j in range(5)]},
    "packed": {"text": "x" * 1500 + "3"},
    "msgpack": {"n": 1},
}
BIG = ["y" * 300] * 30  # a state whose snapshot is over 4 KiB: BLAKE3 with "auto"


def _restore(path: Path) -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(MAIN_STORE.read_text(encoding="utf-8"))


def _dump(path: Path) -> list[str]:
    """The file as SQL, but for what opening a schema-4 file migrates (the schema
    version, each idempotency record's time: compared without it, and the change
    feed's id a writable open gives a file that has none: docs/feed.md)."""
    with closing(sqlite3.connect(path)) as conn:
        lines = [
            line
            for line in conn.iterdump()
            if "sk_idempotency" not in line
            and "schema_version" not in line
            and not line.startswith("""INSERT INTO "sk_meta" VALUES('feed_id',""")
        ]
        keys = conn.execute(
            "SELECT agent_id, key, first_seq, last_seq FROM sk_idempotency ORDER BY 1, 2"
        )
        return lines + [repr(row) for row in keys]


def _headers(path: Path, agent: str) -> list[int]:
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            "SELECT payload FROM sk_events WHERE agent_id = ? UNION ALL "
            "SELECT payload FROM sk_snapshots WHERE agent_id = ?",
            (agent, agent),
        ).fetchall()
    return [bytes(r[0])[1] for r in rows]


@pytest.mark.parametrize("checksum", [None, "sha256", "blake3", "auto"])
async def test_a_store_written_by_main_opens_and_verifies_unchanged(
    tmp_path: Path, checksum: str | None
) -> None:
    path = tmp_path / "main.db"
    _restore(path)
    before = _dump(path)
    url = f"sqlite:///{path}"
    async with StateStore(url, witness=False, cache_size=0, checksum=checksum) as store:
        report = await store.verify()
        assert report.ok and report.agents == 3 and report.snapshots == 2, report.problems
        for agent, data in EXPECTED.items():
            assert (await store.load(agent)).data == data
    assert _dump(path) == before


async def test_blake3_records_appended_to_a_sha256_stream_verify_with_it(tmp_path: Path) -> None:
    path = tmp_path / "main.db"
    _restore(path)
    url = f"sqlite:///{path}"
    async with StateStore(url, witness=False, snapshot_every=2, checksum="blake3") as store:
        for n in range(3):
            await store.save("chat", {"messages": [*EXPECTED["chat"]["messages"], *BIG[:n]]})
        await store.save("packed", {"text": "z"})
    assert {h & 0x40 for h in _headers(path, "chat")} == {0, 0x40}  # both in one stream
    for checksum in ("sha256", "auto"):
        async with StateStore(url, witness=False, cache_size=0, checksum=checksum) as store:
            report = await store.verify()
            assert report.ok, report.problems
            assert (await store.load("chat")).data["messages"][-1] == BIG[1]
            assert (await store.load("packed")).data == {"text": "z"}
            # the state at a SHA-256 seq, replayed from seq 1 (no snapshot at or before 5
            # is used past it), and the head: BLAKE3 events after SHA-256 ones
            assert (await store.load("chat", at_seq=5)).data == EXPECTED["chat"]
            assert (await store.load("chat", at_seq=7)).data["messages"][-1] == BIG[0]


async def test_a_changed_blake3_record_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "b3.db"
    url = f"sqlite:///{path}"
    async with StateStore(url, witness=False, checksum="blake3") as store:
        for n in range(1, 4):
            await store.save("a", {"messages": BIG[:n]})
    with closing(sqlite3.connect(path)) as conn:
        (payload,) = conn.execute("SELECT payload FROM sk_events WHERE seq = 3").fetchone()
        assert payload[1] == 0x40
        changed = bytearray(payload)
        changed[-10] ^= 0x01
        conn.execute("UPDATE sk_events SET payload = ? WHERE seq = 3", (bytes(changed),))
        conn.commit()
    async with StateStore(url, witness=False, cache_size=0) as store:
        with pytest.raises(IntegrityError, match="seq 3"):
            await store.load("a")
        report = await store.verify()
        assert not report.ok and "checksum mismatch" in str(report.problems[0])


async def test_an_unknown_checksum_option_is_refused_before_opening(tmp_path: Path) -> None:
    path = tmp_path / "never.db"
    with pytest.raises(ConfigurationError, match="checksum must be one of"):
        StateStore(f"sqlite:///{path}", checksum="md5")
    assert not path.exists()
