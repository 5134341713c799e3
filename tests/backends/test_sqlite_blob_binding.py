"""The SQLite engine binds the BLOBs of its writes as ``bytearray`` (issue 11).

CPython's ``sqlite3`` binds ``int``, ``float``, ``str`` and ``bytearray`` as they are
and looks every other value — ``bytes`` included — up in its adapters first; each
lookup cost a save ~1.5 us (``SQLiteBackend._append_row``). Every write statement of
an append and of a snapshot binds its BLOBs without that lookup, and what is stored —
and read back — is the same bytes as before: BLOBs, equal byte for byte, compared
(head tags) as they were.

The lookup is observed through an adapter registered for ``bytes`` (any program may
register one: ``sqlite3.register_adapter``): a value bound without the lookup never
reaches it.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from statekeeper import ConflictError, StateStore
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.records import AppendRequest, RawEvent, RawSnapshot


def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _event(seq: int) -> RawEvent:
    # (a NUL and high bytes: a BLOB, never text)
    payload = bytes([0, 255, seq % 256]) + f"event {seq}".encode()
    return RawEvent(seq, "patch", float(seq), payload, _digest(payload))


def _snapshot(seq: int) -> RawSnapshot:
    payload = b"\x00snapshot\xff" + seq.to_bytes(4, "big")
    return RawSnapshot(seq, float(seq), payload, _digest(payload))


def _tag(seq: int) -> bytes:
    return _digest(f"tag {seq}".encode())[:16]


@pytest.fixture
def adapted() -> Iterator[list[bytes]]:
    """The ``bytes`` values ``sqlite3`` looked up in its adapters while the test ran
    (each bound as it is: the adapter returns it unchanged)."""
    seen: list[bytes] = []

    def adapt(value: bytes) -> bytes:
        seen.append(value)
        return value

    sqlite3.register_adapter(bytes, adapt)
    try:
        yield seen
    finally:
        del sqlite3.adapters[(bytes, sqlite3.PrepareProtocol)]


def _keyed_fourth() -> AppendRequest:
    """Agent a's fourth event, with an idempotency key and a head-tag check (sent twice:
    the second is a duplicate)."""
    return AppendRequest(
        "a",
        3,
        (_event(4),),
        idempotency_key="k",
        head_tag=_tag(4),
        expected_tag=_tag(3),
        check_tag=True,
    )


def _rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        return list(conn.execute(sql).fetchall())


async def test_appends_and_snapshots_bind_their_blobs_without_an_adapter_lookup(
    tmp_path: Path, adapted: list[bytes]
) -> None:
    path = tmp_path / "blobs.db"
    backend = SQLiteBackend(path, synchronous="OFF")
    try:
        await backend.initialize()
        lease = await backend.acquire_lease("b", "me", 60.0)
        assert adapted == []  # (nothing of the set-up binds a bytes value)
        # a new stream with its snapshot; a claim of its tagged head with several
        # events; a keyed append; a fenced stream and a fenced, tagged claim; a snapshot
        requests = [
            AppendRequest("a", 0, (_event(1),), _snapshot(1), head_tag=_tag(1)),
            AppendRequest(
                "a",
                1,
                (_event(2), _event(3)),
                head_tag=_tag(3),
                expected_tag=_tag(1),
                check_tag=True,
            ),
            _keyed_fourth(),
            AppendRequest("b", 0, (_event(1),), fence=lease.fence, head_tag=_tag(1)),
            AppendRequest(
                "b",
                1,
                (_event(2),),
                fence=lease.fence,
                head_tag=_tag(2),
                expected_tag=_tag(1),
                check_tag=True,
            ),
        ]
        for request in requests:
            await backend.append(request)
        await backend.save_snapshot("a", _snapshot(4))
        assert adapted == []
    finally:
        await backend.close()

    # stored as BLOBs, byte for byte
    events = _rows(path, "SELECT agent_id, seq, typeof(payload), payload, checksum FROM sk_events")
    want = [("a", s) for s in (1, 2, 3, 4)] + [("b", s) for s in (1, 2)]
    assert sorted((a, s, t, bytes(p), bytes(c)) for a, s, t, p, c in events) == [  # type: ignore[arg-type]
        (a, s, "blob", _event(s).payload, _event(s).checksum) for a, s in want
    ]
    snaps = _rows(path, "SELECT seq, typeof(payload), payload, checksum FROM sk_snapshots")
    assert sorted(snaps) == [  # type: ignore[type-var]
        (s, "blob", _snapshot(s).payload, _snapshot(s).checksum) for s in (1, 4)
    ]
    heads = _rows(path, "SELECT agent_id, head_seq, typeof(head_tag), head_tag FROM sk_agents")
    assert sorted(heads) == [("a", 4, "blob", _tag(4)), ("b", 2, "blob", _tag(2))]  # type: ignore[type-var]

    # read back as they were written, and compared as before
    again = SQLiteBackend(path, synchronous="OFF")
    try:
        assert await again.read("a", 0, None) == [_event(s) for s in (1, 2, 3, 4)]
        assert await again.latest_snapshot("a", None) == _snapshot(4)
        assert await again.head_tag("a") == (4, _tag(4))
        duplicate = await again.append(_keyed_fourth())  # the same request again
        assert duplicate.duplicate and (duplicate.first_seq, duplicate.last_seq) == (4, 4)
        with pytest.raises(ConflictError):  # the stored tag is compared as a BLOB
            await again.append(
                AppendRequest(
                    "a", 4, (_event(5),), head_tag=_tag(5), expected_tag=_tag(3), check_tag=True
                )
            )
        await again.append(
            AppendRequest(
                "a", 4, (_event(5),), head_tag=_tag(5), expected_tag=_tag(4), check_tag=True
            )
        )
        assert await again.head_tag("a") == (5, _tag(5))
    finally:
        await again.close()


async def test_a_store_reads_and_verifies_what_it_wrote_with_blobs_bound_as_bytearray(
    tmp_path: Path, adapted: list[bytes]
) -> None:
    url = f"sqlite:///{tmp_path}/store.db"
    docs = [{"messages": ["m"] * n, "n": n} for n in range(1, 8)]
    async with StateStore(url, snapshot_every=3) as store:
        for doc in docs:
            await store.save("a", doc)
        await store.snapshot("a")
    assert adapted == []
    async with StateStore(url) as store:  # a cold load: every record verified
        assert (await store.load("a")).data == docs[-1]
        assert (await store.verify()).ok
        await store.save("a", {"messages": ["m"] * 8, "n": 8})  # on the state read
    async with StateStore(url) as store:
        assert (await store.load("a")).data == {"messages": ["m"] * 8, "n": 8}
        assert (await store.verify()).ok
