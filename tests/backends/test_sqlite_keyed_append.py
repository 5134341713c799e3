"""A keyed append on SQLite claims its idempotency key first (issue 12).

Every LangGraph checkpoint is a keyed append. The key is inserted first (``ON CONFLICT
DO NOTHING``) and read back only when it is already there: one statement per keyed
append instead of a ``SELECT`` of the key and its ``INSERT``. What a user relies on
stays: an append sent again is a duplicate with its first range and writes nothing;
an append the head refuses (a stale ``expected_seq``, a lost lease), alone or beside
others in one commit, leaves its key unclaimed, so its retry on the right head lands.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from statekeeper import ConflictError
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.errors import LeaseLost
from statekeeper.records import AppendRequest, RawEvent


def _event(seq: int) -> RawEvent:
    payload = f"event {seq}".encode()
    return RawEvent(seq, "patch", float(seq), payload, hashlib.sha256(payload).digest())


def _keyed(agent: str, expected: int, key: str, **kw: object) -> AppendRequest:
    return AppendRequest(agent, expected, (_event(expected + 1),), idempotency_key=key, **kw)  # type: ignore[arg-type]


def _keys(path: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT agent_id, key, first_seq, last_seq FROM sk_idempotency")
        return sorted(rows.fetchall())  # type: ignore[type-var]


async def test_a_keyed_append_touches_its_key_with_one_statement(tmp_path: Path) -> None:
    backend = SQLiteBackend(tmp_path / "k.db", synchronous="OFF")
    try:
        await backend.initialize()
        await backend.append(_keyed("a", 0, "k1"))
        assert backend._writer is not None
        seen: list[str] = []
        backend._writer.set_trace_callback(seen.append)
        await backend.append(_keyed("a", 1, "k2"))
        backend._writer.set_trace_callback(None)
        on_keys = [s for s in seen if "sk_idempotency" in s]
        assert len(on_keys) == 1 and on_keys[0].startswith("INSERT"), seen
    finally:
        await backend.close()


async def test_a_keyed_append_sent_again_is_a_duplicate_and_writes_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "k.db"
    backend = SQLiteBackend(path, synchronous="OFF")
    try:
        await backend.initialize()
        first = await backend.append(_keyed("a", 0, "k1"))
        await backend.append(_keyed("a", 1, "k2"))
        again = await backend.append(_keyed("a", 0, "k1"))  # a retry of a landed append
        assert again.duplicate and (again.first_seq, again.last_seq) == (1, 1)
        assert not first.duplicate
        assert (await backend.head("a")) == 2
        assert [e.seq for e in await backend.read("a", 0, None)] == [1, 2]
    finally:
        await backend.close()
    assert _keys(path) == [("a", "k1", 1, 1), ("a", "k2", 2, 2)]


async def test_a_refused_keyed_append_leaves_its_key_unclaimed(tmp_path: Path) -> None:
    path = tmp_path / "k.db"
    backend = SQLiteBackend(path, synchronous="OFF")
    try:
        await backend.initialize()
        await backend.append(_keyed("a", 0, "k1"))
        await backend.append(_keyed("a", 1, "k2"))
        with pytest.raises(ConflictError):  # a stale head
            await backend.append(_keyed("a", 1, "k3"))
        with pytest.raises(ConflictError):  # a stream that exists already
            await backend.append(_keyed("a", 0, "k4"))
        # beside another append in one commit: refused alone, the other lands
        results = await backend.append_batch([_keyed("a", 5, "k5"), _keyed("b", 0, "k6")])
        assert isinstance(results[0], ConflictError) and not isinstance(results[1], Exception)
        # a fenced append whose lease was lost
        lease = await backend.acquire_lease("c", "me", 60.0)
        await backend.append(_keyed("c", 0, "k7", fence=lease.fence))
        await backend.release_lease("c", "me", lease.token)
        with pytest.raises(LeaseLost):
            await backend.append(_keyed("c", 1, "k8", fence=lease.fence))
        assert _keys(path) == [
            ("a", "k1", 1, 1),
            ("a", "k2", 2, 2),
            ("b", "k6", 1, 1),
            ("c", "k7", 1, 1),
        ]
        # the refused appends retried on the right heads land (not taken as duplicates)
        for request in (_keyed("a", 2, "k3"), _keyed("a", 3, "k4"), _keyed("a", 4, "k5")):
            assert not (await backend.append(request)).duplicate
        assert not (await backend.append(_keyed("c", 1, "k8"))).duplicate
        assert (await backend.head("a"), await backend.head("c")) == (5, 2)
    finally:
        await backend.close()
