"""History deleted by hand is not a compaction.

Someone with write access to the storage (and no key) deletes an agent's oldest events
up to one of its snapshots — the shape retention's ``keep_last`` leaves, with Redis's
base field or S3's base object set as a prune sets them. Before, nothing told the two
apart: ``verify`` said ok (with a key too), ``history`` and time travel raised
``HistoryCompacted`` ("compacted by retention"). Now the base snapshot a compaction
writes is marked inside its authenticated body (store/compaction.py): history removed
without one is an ``IntegrityError`` on every read that reaches it and a problem in
``verify``; a real compaction still verifies and reads as ``HistoryCompacted``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from statekeeper import IntegrityError, StateStore
from statekeeper.errors import HistoryCompacted
from statekeeper.governance.retention import RetentionPolicy, apply_retention
from statekeeper.security import Keyring, generate_key

from ..backends._services import POSTGRES_DSN, REDIS_URL, fresh_url, s3_credentials

KEY = generate_key()
ENGINES = ["sqlite", "postgresql", "redis", "s3"]
MODES = [pytest.param(True, id="with-key"), pytest.param(False, id="without-key")]
BASE = 8  # snapshots at 4 and 8; events 1..8 deleted, 9 and 10 kept


def _sql(url: str, *statements: str) -> None:
    if url.startswith("sqlite"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn, conn:
            for sql in statements:
                conn.execute(sql)
        return
    import psycopg

    schema = parse_qs(urlsplit(url).query)["schema"][0]
    with psycopg.connect(POSTGRES_DSN) as pg:
        for sql in statements:
            pg.execute(sql.replace("sk_", f"{schema}.sk_"))


def _delete_history(engine: str, url: str) -> None:
    """Delete alpha's events 1..BASE as an attacker would, leaving the shape of a
    compaction at BASE."""
    if engine in ("sqlite", "postgresql"):
        _sql(url, f"DELETE FROM sk_events WHERE agent_id = 'alpha' AND seq <= {BASE}")
    elif engine == "redis":
        import redis

        prefix = parse_qs(urlsplit(url).query)["prefix"][0].encode()
        with closing(redis.Redis.from_url(REDIS_URL)) as client:
            fields = [b"e:%d" % seq for seq in range(1, BASE + 1)]
            client.hdel(prefix + b"a:alpha", *fields)
            client.hset(prefix + b"a:alpha", b"b", BASE)  # the base field a prune sets
    else:  # s3: the base object a prune writes; reads ignore every commit below it
        import boto3  # type: ignore[import-untyped]

        parts = urlsplit(url)
        endpoint = parse_qs(parts.query)["endpoint_url"][0]
        s3 = boto3.client("s3", endpoint_url=endpoint, **s3_credentials())
        key = f"{parts.path.strip('/')}/a/{b'alpha'.hex()}/e/b{BASE:020d}"
        s3.put_object(Bucket=parts.netloc, Key=key, Body=b"")


@contextmanager
def _stores(
    engine: str, tmp_path: Path, keyed: bool
) -> Iterator[tuple[str, Callable[..., StateStore]]]:
    """The store's URL, and a factory of stores over it."""
    keyring = Keyring({"k1": KEY}) if keyed else None

    def opened(**options: Any) -> StateStore:
        return StateStore(url, keyring=keyring, snapshot_every=4, witness=False, **options)

    with fresh_url(engine, tmp_path) as url:
        yield url, opened


async def _populate(store: StateStore) -> None:
    for agent in ("alpha", "beta"):
        for i in range(1, 11):
            await store.save(agent, {"owner": agent, "n": i})


@pytest.mark.parametrize("keyed", MODES)
@pytest.mark.parametrize("engine", ENGINES)
async def test_history_deleted_up_to_a_snapshot_is_not_a_compaction(
    tmp_path: Path, engine: str, keyed: bool
) -> None:
    with _stores(engine, tmp_path, keyed) as (url, opened):
        async with opened() as store:
            await _populate(store)
        _delete_history(engine, url)
        async with opened(cache_size=0) as store:
            report = await store.verify()
            assert [(p.agent_id, p.seq, p.kind) for p in report.problems] == [("alpha", 1, "event")]
            assert "history was deleted" in report.problems[0].reason
            with pytest.raises(IntegrityError) as caught:
                [e async for e in store.history("alpha")]
            assert not isinstance(caught.value, HistoryCompacted)
            assert caught.value.agent_id == "alpha"
            with pytest.raises(IntegrityError) as caught:
                await store.load("alpha", at_seq=2)  # (before the first snapshot)
            assert not isinstance(caught.value, HistoryCompacted)
            # the state itself is the stream's own (the snapshot and events 9, 10)
            assert (await store.load("alpha")).data == {"owner": "alpha", "n": 10}
            assert [e.seq async for e in store.history("beta")] == list(range(1, 11))


@pytest.mark.parametrize("keyed", MODES)
@pytest.mark.parametrize("engine", ENGINES)
async def test_a_compaction_over_an_existing_snapshot_still_verifies(
    tmp_path: Path, engine: str, keyed: bool
) -> None:
    """keep_last=2 puts the base at seq 8, where a snapshot is stored already: the
    compaction writes it again, marked, and the stream verifies and reads as before."""
    with _stores(engine, tmp_path, keyed) as (_, opened):
        async with opened() as store:
            await _populate(store)
            done = await apply_retention(store, RetentionPolicy.parse("* keep_last=2\n"))
            assert {(a.agent_id, a.kind, a.outcome, a.base_seq) for a in done.actions} == {
                ("alpha", "compact", "done", BASE),
                ("beta", "compact", "done", BASE),
            }
        async with opened(cache_size=0) as store:
            assert (await store.verify()).problems == []
            with pytest.raises(HistoryCompacted) as caught:
                [e async for e in store.history("alpha")]
            assert caught.value.base_seq == BASE
            with pytest.raises(HistoryCompacted):
                await store.load("alpha", at_seq=BASE - 1)
            assert [e.seq async for e in store.history("alpha", after_seq=BASE)] == [9, 10]
