"""Raw access to a store's storage, engine by engine, for the integrity tests: the way
someone with write access to the database (not to the library) edits it.

:func:`raw_env` gives, per engine, a factory of :class:`StateStore` instances over the
same storage plus a :class:`Raw` that edits idempotency records and snapshot bytes
directly (SQL for SQLite and PostgreSQL, hash fields for Redis, the dicts for memory),
and dumps the whole storage for byte-for-byte comparisons.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends import tiered_url
from statekeeper.backends.memory import MemoryBackend

from ..backends._services import (
    POSTGRES_DSN,
    REDIS_URL,
    delete_prefix,
    drop_schema,
    namespace,
    require_postgres,
    require_redis,
)

ENGINES = ["memory", "sqlite", "postgres", "redis", "tiered"]


class Raw:
    """Direct edits of one engine's storage."""

    def keys(self, agent_id: str) -> list[tuple[str, int, int]]:
        """Every idempotency record of the agent: (stored key, first, last)."""
        raise NotImplementedError

    def put_key(self, agent_id: str, key: str, first: int, last: int) -> None:
        """Insert (or overwrite) an idempotency record."""
        raise NotImplementedError

    def snapshot_payload(self, agent_id: str, seq: int) -> bytes:
        raise NotImplementedError

    def set_snapshot_payload(self, agent_id: str, seq: int, payload: bytes) -> None:
        raise NotImplementedError

    def dump(self) -> Any:
        """Everything stored, comparable byte for byte."""
        raise NotImplementedError

    def damage_snapshot(self, agent_id: str, seq: int) -> None:
        """Flip one bit near the end of a stored snapshot's payload."""
        payload = bytearray(self.snapshot_payload(agent_id, seq))
        payload[-2] ^= 0x01
        self.set_snapshot_payload(agent_id, seq, bytes(payload))

    def truncate_snapshot(self, agent_id: str, seq: int, keep: int = 3) -> None:
        """Cut a stored snapshot down to its first ``keep`` bytes (a torn write)."""
        self.set_snapshot_payload(agent_id, seq, self.snapshot_payload(agent_id, seq)[:keep])


class _SharedMemory(MemoryBackend):
    """A memory backend that outlives the stores opened over it (as a file would)."""

    async def close(self) -> None:
        pass


class MemoryRaw(Raw):
    def __init__(self, backend: MemoryBackend) -> None:
        self.backend = backend

    def keys(self, agent_id: str) -> list[tuple[str, int, int]]:
        stream = self.backend._streams[agent_id]
        return [(k, f, la) for k, (f, la, _) in stream.keys.items()]

    def put_key(self, agent_id: str, key: str, first: int, last: int) -> None:
        self.backend._streams[agent_id].keys[key] = (first, last, time.time())

    def snapshot_payload(self, agent_id: str, seq: int) -> bytes:
        return self.backend._streams[agent_id].snapshots[seq].payload

    def set_snapshot_payload(self, agent_id: str, seq: int, payload: bytes) -> None:
        import dataclasses

        snaps = self.backend._streams[agent_id].snapshots
        snaps[seq] = dataclasses.replace(snaps[seq], payload=payload)

    def dump(self) -> Any:
        return repr(sorted((a, repr(s)) for a, s in self.backend._streams.items()))


class SQLiteRaw(Raw):
    def __init__(self, path: Path) -> None:
        self.path = path

    def _run(self, sql: str, *args: Any) -> list[Any]:
        with closing(sqlite3.connect(self.path)) as conn, conn:
            return conn.execute(sql, args).fetchall()

    def keys(self, agent_id: str) -> list[tuple[str, int, int]]:
        return self._run(
            "SELECT key, first_seq, last_seq FROM sk_idempotency WHERE agent_id=?", agent_id
        )

    def put_key(self, agent_id: str, key: str, first: int, last: int) -> None:
        self._run(
            "INSERT OR REPLACE INTO sk_idempotency(agent_id, key, first_seq, last_seq,"
            " created_at) VALUES (?, ?, ?, ?, ?)",
            agent_id,
            key,
            first,
            last,
            time.time(),
        )

    def snapshot_payload(self, agent_id: str, seq: int) -> bytes:
        ((payload,),) = self._run(
            "SELECT payload FROM sk_snapshots WHERE agent_id=? AND seq=?", agent_id, seq
        )
        return bytes(payload)

    def set_snapshot_payload(self, agent_id: str, seq: int, payload: bytes) -> None:
        self._run(
            "UPDATE sk_snapshots SET payload=? WHERE agent_id=? AND seq=?", payload, agent_id, seq
        )

    def dump(self) -> Any:
        with closing(sqlite3.connect(self.path)) as conn:
            return list(conn.iterdump())


class PostgresRaw(Raw):
    def __init__(self, schema: str) -> None:
        self.schema = schema

    def _run(self, sql: str, *args: Any) -> list[Any]:
        import psycopg

        with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
            cur = conn.execute(sql.replace("{s}", self.schema), args)
            return cur.fetchall() if cur.description else []

    def keys(self, agent_id: str) -> list[tuple[str, int, int]]:
        rows = self._run(
            "SELECT key, first_seq, last_seq FROM {s}.sk_idempotency WHERE agent_id=%s", agent_id
        )
        return [(r[0], int(r[1]), int(r[2])) for r in rows]

    def put_key(self, agent_id: str, key: str, first: int, last: int) -> None:
        self._run(
            "INSERT INTO {s}.sk_idempotency(agent_id, key, first_seq, last_seq)"
            " VALUES (%s, %s, %s, %s) ON CONFLICT (agent_id, key) DO UPDATE"
            " SET first_seq = EXCLUDED.first_seq, last_seq = EXCLUDED.last_seq",
            agent_id,
            key,
            first,
            last,
        )

    def snapshot_payload(self, agent_id: str, seq: int) -> bytes:
        ((payload,),) = self._run(
            "SELECT payload FROM {s}.sk_snapshots WHERE agent_id=%s AND seq=%s", agent_id, seq
        )
        return bytes(payload)

    def set_snapshot_payload(self, agent_id: str, seq: int, payload: bytes) -> None:
        self._run(
            "UPDATE {s}.sk_snapshots SET payload=%s WHERE agent_id=%s AND seq=%s",
            payload,
            agent_id,
            seq,
        )

    def dump(self) -> Any:
        out = []
        for table in ("sk_agents", "sk_events", "sk_snapshots", "sk_idempotency"):
            rows = self._run(f"SELECT * FROM {{s}}.{table}")
            out.append(
                sorted(
                    repr(tuple(bytes(v) if isinstance(v, memoryview) else v for v in r))
                    for r in rows
                )
            )
        return out


class RedisRaw(Raw):
    def __init__(self, prefix: str) -> None:
        import redis

        self.prefix = prefix.encode()
        self.client = redis.Redis.from_url(REDIS_URL)

    def _hash(self, agent_id: str) -> bytes:
        return self.prefix + b"a:" + agent_id.encode()

    def keys(self, agent_id: str) -> list[tuple[str, int, int]]:
        out = []
        for field, value in self.client.hgetall(self._hash(agent_id)).items():
            if field.startswith(b"k:"):
                first, last = value.split(b":")
                out.append((field[2:].decode(), int(first), int(last)))  # type: ignore[union-attr]
        return out

    def put_key(self, agent_id: str, key: str, first: int, last: int) -> None:
        self.client.hset(self._hash(agent_id), b"k:" + key.encode(), b"%d:%d" % (first, last))

    def snapshot_payload(self, agent_id: str, seq: int) -> bytes:
        value = self.client.hget(self._hash(agent_id), b"s:%d" % seq)
        assert value is not None
        return bytes(value)

    def set_snapshot_payload(self, agent_id: str, seq: int, payload: bytes) -> None:
        self.client.hset(self._hash(agent_id), b"s:%d" % seq, payload)

    def dump(self) -> Any:
        out = []
        for key in sorted(self.client.scan_iter(match=self.prefix + b"*", count=1000)):
            out.append((key, self.client.dump(key)))
        return out


@dataclass
class Env:
    """One engine: ``open(**options)`` a store over its storage; ``raw`` edits it."""

    engine: str
    url_or_backend: Callable[[], Any]
    raw: Raw

    def open(self, **options: Any) -> StateStore:
        return StateStore(self.url_or_backend(), **options)


@contextmanager
def raw_env(engine: str, tmp_path: Path) -> Iterator[Env]:
    """The storage of one engine, fresh for the test, dropped after it."""
    name = namespace(tmp_path)
    if engine == "memory":
        backend = _SharedMemory()
        yield Env(engine, lambda: backend, MemoryRaw(backend))
    elif engine == "sqlite":
        path = tmp_path / "raw.db"
        yield Env(engine, lambda: f"sqlite:///{path}", SQLiteRaw(path))
    elif engine == "tiered":
        path = tmp_path / "durable.db"
        url = tiered_url(hot="memory://", durable=f"sqlite:///{path}")
        yield Env(engine, lambda: url, SQLiteRaw(path))
    elif engine == "postgres":
        pytest.importorskip("psycopg")
        require_postgres()
        try:
            yield Env(engine, lambda: f"{POSTGRES_DSN}?schema={name}", PostgresRaw(name))
        finally:
            drop_schema(name)
    elif engine == "redis":
        pytest.importorskip("redis")
        require_redis()
        raw = RedisRaw(name + ":")
        try:
            yield Env(engine, lambda: f"{REDIS_URL}?prefix={name}:", raw)
        finally:
            raw.client.close()
            delete_prefix(name + ":")
    else:  # pragma: no cover
        raise AssertionError(engine)
