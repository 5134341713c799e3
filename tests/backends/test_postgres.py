"""The PostgreSQL backend: the shared contract, plus what only a database server can do.

Needs a server: ``$STATEKEEPER_TEST_POSTGRES_DSN`` (default
``postgresql://postgres@127.0.0.1:5432/test``). Every test uses its own schema.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

pytest.importorskip("psycopg")

import psycopg

from statekeeper.backends import open_backend
from statekeeper.backends.base import KeptKeys
from statekeeper.backends.postgres import (
    MIGRATIONS,
    PostgresBackend,
    parse_postgres_url,
)
from statekeeper.errors import (
    BackendError,
    BackendUnavailable,
    ConfigurationError,
    ConflictError,
)
from statekeeper.records import AppendRequest, AppendResult, RawEvent, RawSnapshot, StreamChange
from statekeeper.testing import BackendConformance, request, snapshot

from ._services import (
    POSTGRES_DSN,
    ReusedPostgresSchema,
    private_postgres,
)


class TestPostgresConformance(ReusedPostgresSchema, BackendConformance):
    """Every test of the contract, on one schema emptied before each test (dropped
    first for a test about a missing schema; see ReusedPostgresSchema)."""

    async def make_backend(self, tmp_path: Path) -> PostgresBackend:
        return PostgresBackend(POSTGRES_DSN, schema=self.schema, max_size=4)

    async def open_peer(self, tmp_path: Path) -> PostgresBackend:
        return PostgresBackend(POSTGRES_DSN, schema=self.schema, max_size=4)

    async def open_readonly(self, tmp_path: Path) -> PostgresBackend:
        return PostgresBackend(POSTGRES_DSN, schema=self.schema, max_size=4, readonly=True)


# -- PostgreSQL only ---------------------------------------------------------------------


def _admin(sql: str, *params: object) -> list[tuple[object, ...]]:
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        cur = conn.execute(sql, params or None)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description else []


async def test_migrations_are_numbered_and_recorded(schema: str) -> None:
    backends = [PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2) for _ in range(4)]
    try:
        # four processes' worth of starters race on an empty schema: one migrates
        await asyncio.gather(*(b.open() for b in backends))
        versions = [version for version, _, _ in MIGRATIONS]
        assert await backends[0].migrations() == versions
        rows = _admin(f'SELECT version, name FROM "{schema}".sk_migrations ORDER BY version')
        assert [r[0] for r in rows] == versions
        assert all(isinstance(r[1], str) and r[1] for r in rows)
    finally:
        for b in backends:
            await b.close()
    again = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2)
    try:
        await again.append(request("a", 0))
        assert len(_admin(f'SELECT * FROM "{schema}".sk_migrations')) == len(MIGRATIONS)
    finally:
        await again.close()


async def test_a_newer_schema_is_refused(schema: str) -> None:
    first = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2)
    await first.open()
    await first.close()
    _admin(f"INSERT INTO \"{schema}\".sk_migrations (version, name) VALUES (999, 'future')")
    newer = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2, retry_timeout=1)
    try:
        with pytest.raises(ConfigurationError, match="upgrade statekeeper"):
            await newer.head("a")
    finally:
        await newer.close()


async def test_agent_ids_sort_in_code_point_order_whatever_the_collation(schema: str) -> None:
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2)
    try:
        ids = ["b", "B", "a", "_x", "Z", "é", "e", "ä", "a b", "a-b"]
        for agent_id in ids:
            await backend.append(request(agent_id, 0))
        assert [i.agent_id for i in await backend.list_agents()] == sorted(ids)
    finally:
        await backend.close()


def test_url_options_are_split_from_the_dsn() -> None:
    dsn, kwargs = parse_postgres_url(
        "postgres://u:p@db.example:6432/app?sslmode=verify-full&schema=tenant_1"
        "&pool_max_size=20&pool_min_size=2&application_name=worker&retry_timeout=5"
    )
    assert dsn == (
        "postgresql://u:p@db.example:6432/app?sslmode=verify-full&application_name=worker"
    )
    assert kwargs == {"schema": "tenant_1", "max_size": 20, "min_size": 2, "retry_timeout": 5.0}
    with pytest.raises(ConfigurationError):
        parse_postgres_url("postgresql://h/db?pool_max_size=many")
    with pytest.raises(ConfigurationError):
        PostgresBackend("postgresql://h/db", schema="bad; drop")


async def test_connection_options_reach_the_server(schema: str) -> None:
    backend = open_backend(f"{POSTGRES_DSN}?schema={schema}&application_name=sk-opt-test")
    assert isinstance(backend, PostgresBackend)
    try:
        await backend.append(request("a", 0))
        names = _admin(
            "SELECT application_name FROM pg_stat_activity WHERE application_name = %s",
            "sk-opt-test",
        )
        assert names, "the DSN's application_name did not reach the server"
    finally:
        await backend.close()


async def test_tls_options_go_to_libpq(schema: str) -> None:
    ssl = _admin("SHOW ssl")[0][0]
    backend = PostgresBackend(
        f"{POSTGRES_DSN}?sslmode=require",
        schema=schema,
        max_size=1,
        retry_timeout=0.5,
        pool_timeout=2,
    )
    try:
        if ssl == "on":
            await backend.append(request("a", 0))
            async with backend._pool.connection() as conn:
                cur = await conn.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
                assert (await cur.fetchone()) == (True,)
        else:  # the server has no TLS: sslmode=require must refuse to connect
            with pytest.raises(BackendUnavailable, match="SSL"):
                await backend.head("a")
    finally:
        await backend.close()


async def test_writers_of_different_agents_do_not_wait_for_each_other(schema: str) -> None:
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=4)
    try:
        await backend.append(request("slow", 0))
        await backend.append(request("fast", 0))
        async with await psycopg.AsyncConnection.connect(POSTGRES_DSN) as blocker:
            # hold the row lock of agent "slow" in an open transaction
            await blocker.execute(
                f'SELECT 1 FROM "{schema}".sk_agents WHERE agent_id = %s FOR UPDATE', ("slow",)
            )
            stuck = asyncio.create_task(backend.append(request("slow", 1)))
            await asyncio.sleep(0.2)
            assert not stuck.done()
            # another agent commits while "slow" waits: no process-wide lock
            for seq in range(1, 6):
                # the bound only detects a process-wide lock (which would block here
                # until the rollback below): a loaded machine stays far below it
                await asyncio.wait_for(backend.append(request("fast", seq)), timeout=60)
            await blocker.rollback()
        assert await asyncio.wait_for(stuck, timeout=60) == AppendResult("slow", 2, 2)
    finally:
        await backend.close()


async def test_batch_is_one_transaction(schema: str) -> None:
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2)
    try:
        await backend.open()
        results = await backend.append_batch([request(f"g{i}", 0) for i in range(50)])
        assert all(isinstance(r, AppendResult) for r in results)
        # 50 appends, one transaction: every row they wrote carries its id (xmin); a
        # count of the database's commits would also count other sessions' work
        xmins = _admin(f"SELECT count(DISTINCT xmin::text), count(*) FROM {schema}.sk_events")
        assert xmins[0] == (1, 50)
    finally:
        await backend.close()


async def test_a_batch_of_existing_streams_settles_each_request(schema: str) -> None:
    """The common group-commit batch (every stream existing, none named twice, no key,
    fence or snapshot: written set-based) still settles each request on its own: a
    stale expected seq and a stream that does not exist conflict with the stored head,
    the others land with every event, in the change feed."""
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2)
    try:
        await backend.open()
        await backend.append_batch([request(x, 0) for x in "abc"])
        results = await backend.append_batch(
            [request("a", 1, 2), request("b", 5), request("c", 1), request("zz", 3)]
        )
        assert results[0] == AppendResult("a", 2, 3)
        assert isinstance(results[1], ConflictError) and results[1].current_seq == 1
        assert results[2] == AppendResult("c", 2, 2)
        assert isinstance(results[3], ConflictError) and results[3].current_seq == 0
        assert [await backend.head(x) for x in ("a", "b", "c", "zz")] == [3, 1, 2, 0]
        assert [e.seq for e in await backend.read("a")] == [1, 2, 3]
        assert [e.seq for e in await backend.read("zz")] == []
        positions = _admin(
            f"SELECT count(*), count(position) FROM {schema}.sk_events WHERE agent_id = 'a'"
        )[0]
        assert positions == (3, 3)
    finally:
        await backend.close()


async def _kill_connections(application_name: str) -> int:
    rows = await asyncio.to_thread(
        _admin,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE application_name = %s AND pid <> pg_backend_pid()",
        application_name,
    )
    return len(rows)


@pytest.mark.slow
async def test_killed_connections_lose_no_acknowledged_write(schema: str) -> None:
    """pg_terminate_backend on every pooled connection, repeatedly, during a write load.

    Every append is acknowledged or fails; no acknowledged write is lost, none is
    doubled, and — because an interrupted append is settled by looking at what is
    stored — none of them fails.
    """
    app = f"sk-fault-{schema[-8:]}"
    backend = PostgresBackend(
        f"{POSTGRES_DSN}?application_name={app}", schema=schema, max_size=4, retry_timeout=20
    )
    acked: dict[str, list[int]] = {}
    failures: list[BaseException] = []
    writers, rounds = 8, 150
    injected = asyncio.Event()  # set once connections were killed more than 5 times

    async def writer(w: int) -> None:
        agent = f"w{w}"
        acked[agent] = []
        seq = 0
        for i in range(rounds):
            if i == rounds // 2:
                await injected.wait()  # half of the load before the kills, half after
            key = f"{agent}-{i}" if w % 2 else None  # half of them without a key
            body = f"{agent}:{i}".encode()
            req = AppendRequest(
                agent, seq, (RawEvent(seq + 1, "patch", float(i), body, b"c"),), None, key
            )
            try:
                if i % 10 == 9:
                    result = (await backend.append_batch([req]))[0]
                    if isinstance(result, BaseException):
                        raise result
                else:
                    result = await backend.append(req)
            except (BackendError, ConflictError) as exc:
                failures.append(exc)
                seq = await backend.head(agent)
                continue
            acked[agent].append(result.last_seq)
            seq = result.last_seq
            await asyncio.sleep(random.random() * 0.004)

    async def killer(stop: asyncio.Event) -> int:
        kills = 0
        while not stop.is_set():
            await asyncio.sleep(0.05 + random.random() * 0.05)
            kills += await _kill_connections(app)
            if kills > 5:
                injected.set()
        return kills

    try:
        await backend.open()
        stop = asyncio.Event()
        kill_task = asyncio.create_task(killer(stop))
        await asyncio.gather(*(writer(w) for w in range(writers)))
        stop.set()
        kills = await kill_task
        assert kills > 5, "the fault was not injected"
        assert failures == []
        for agent, seqs in acked.items():
            stored = await backend.read(agent)
            assert [e.seq for e in stored] == list(range(1, len(stored) + 1))
            assert seqs == list(range(1, rounds + 1))
            assert [e.payload for e in stored] == [f"{agent}:{i}".encode() for i in range(rounds)]
    finally:
        await backend.close()


async def test_reads_survive_killed_connections(schema: str) -> None:
    app = f"sk-read-{schema[-8:]}"
    backend = PostgresBackend(f"{POSTGRES_DSN}?application_name={app}", schema=schema, max_size=2)
    try:
        await backend.append(request("a", 0, 5, snap_at=3))
        for _ in range(5):
            await _kill_connections(app)
            assert await backend.head("a") == 5
            assert len(await backend.read("a")) == 5
            assert (await backend.latest_snapshot("a")) is not None
        assert (await backend.health()).ok
    finally:
        await backend.close()


async def test_unreachable_server_is_a_typed_error(tmp_path: Path) -> None:
    backend = PostgresBackend(
        "postgresql://postgres@127.0.0.1:1/none?connect_timeout=1",
        pool_timeout=0.5,
        retry_timeout=0.5,
    )
    try:
        with pytest.raises(BackendUnavailable, match="Connection refused"):
            await backend.head("a")
        with pytest.raises(BackendUnavailable):  # never sent: nothing to settle
            await backend.append(request("a", 0))
        health = await backend.health()
        assert health.ok is False and "error" in health.detail
    finally:
        await backend.close()


@pytest.mark.parametrize("landed", [True, False], ids=["commit-landed", "never-sent"])
@pytest.mark.parametrize("keyed", [True, False], ids=["with-key", "without-key"])
async def test_an_append_whose_reply_is_lost_is_settled_exactly_once(
    schema: str, monkeypatch: pytest.MonkeyPatch, landed: bool, keyed: bool
) -> None:
    """The connection dies around the commit: the append is neither lost nor doubled."""
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2, retry_timeout=5)
    try:
        await backend.append(request("a", 0))
        real = backend._append_once
        calls = 0

        async def flaky(req: AppendRequest) -> tuple[object, ...]:
            nonlocal calls
            calls += 1
            if calls == 1:
                if landed:
                    await real(req)  # the commit happens...
                raise psycopg.OperationalError("server closed the connection unexpectedly")
            return await real(req)

        monkeypatch.setattr(backend, "_append_once", flaky)
        result = await backend.append(request("a", 1, 2, key="k" if keyed else None))
        assert result == AppendResult("a", 2, 3)
        assert calls == (1 if landed else 2)  # landed: found by looking, not re-sent
        assert [e.seq for e in await backend.read("a")] == [1, 2, 3]
        if keyed:
            assert await backend.lookup_key("a", "k") == AppendResult("a", 2, 3, True)
    finally:
        await backend.close()


@pytest.mark.parametrize("landed", [True, False], ids=["commit-landed", "never-sent"])
async def test_a_compacted_stream_whose_reply_is_lost_is_settled_exactly_once(
    schema: str, monkeypatch: pytest.MonkeyPatch, landed: bool
) -> None:
    """A restore's ``append_from_base`` whose connection dies around the commit: the
    stream is written once, and the retry does not meet its own stream as a conflict."""
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2, retry_timeout=5)
    try:
        real = backend._from_base_once
        calls = 0

        async def flaky(
            created: AppendRequest,
            base: RawSnapshot,
            kept: KeptKeys,
            floor: bool,
            guard: StreamChange | None,
        ) -> AppendResult:
            nonlocal calls
            calls += 1
            if calls == 1:
                if landed:
                    await real(created, base, kept, floor, guard)  # the commit happens...
                raise psycopg.OperationalError("server closed the connection unexpectedly")
            return await real(created, base, kept, floor, guard)

        monkeypatch.setattr(backend, "_from_base_once", flaky)
        made = await backend.append_from_base(request("a", 3, 2, key="k"), snapshot(3))
        assert (made.first_seq, made.last_seq) == (4, 5)
        assert calls == (1 if landed else 2)  # landed: found by looking, not re-sent
        assert [e.seq for e in await backend.read("a")] == [4, 5]
        assert await backend.latest_snapshot("a") == snapshot(3)
        assert await backend.lookup_key("a", "k") == AppendResult("a", 4, 5, True)
    finally:
        await backend.close()


async def test_a_lost_reply_when_another_writer_won_is_a_conflict(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2, retry_timeout=5)
    try:
        await backend.append(request("a", 0))

        async def other_wins(req: AppendRequest) -> tuple[object, ...]:
            monkeypatch.undo()
            other = AppendRequest("a", 1, (RawEvent(2, "patch", 2.0, b"other", b"x"),))
            await backend.append(other)
            raise psycopg.OperationalError("server closed the connection unexpectedly")

        monkeypatch.setattr(backend, "_append_once", other_wins)
        with pytest.raises(ConflictError) as info:
            await backend.append(request("a", 1))
        assert info.value.current_seq == 2
        assert (await backend.read("a"))[1].payload == b"other"
    finally:
        await backend.close()


@pytest.mark.parametrize("applied", [3, 5])
async def test_a_pre_release_schema_is_upgraded_in_place(schema: str, applied: int) -> None:
    """A schema written before the migrations were squashed (pre-release migrations
    1-3: no head tags, no leases; 1-5: the older append functions) gets the squashed
    migration on open; its data stays readable and writable."""
    from psycopg import sql as pgsql

    ident = pgsql.Identifier(schema)
    text = (Path(__file__).parent / "data" / f"postgres_pre_release_{applied}.sql").read_text()
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn, conn.transaction():
        conn.execute(pgsql.SQL("CREATE SCHEMA {s}").format(s=ident))
        conn.execute(
            pgsql.SQL(
                "CREATE TABLE {s}.sk_migrations (version integer PRIMARY KEY,"
                " name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
            ).format(s=ident)
        )
        conn.execute(pgsql.SQL(text).format(s=ident))  # type: ignore[arg-type]
        for version in range(1, applied + 1):
            conn.execute(
                pgsql.SQL("INSERT INTO {s}.sk_migrations VALUES (%s, 'pre-release')").format(
                    s=ident
                ),
                (version,),
            )
    # what the older version wrote: 3 events, a key and a snapshot (its sk_append's own
    # arguments: without a head tag before migration 4)
    tag_arg = ", NULL::bytea" if applied >= 4 else ""
    _admin(
        f'SELECT * FROM "{schema}".sk_append(%s, 0, ARRAY[1, 2, 3]::bigint[],'
        " ARRAY['patch', 'patch', 'patch'], ARRAY[1.0, 2.0, 3.0]::float8[],"
        " ARRAY['\\x01', '\\x02', '\\x03']::bytea[], ARRAY['\\x00', '\\x00', '\\x00']::bytea[],"
        f" 'k', 2, 2.0, '\\x02'::bytea, '\\x00'::bytea{tag_arg})",
        "a",
    )
    new = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2)
    try:
        assert await new.head_tag("a") == (3, None)  # written before tags existed
        # the squashed migration 6, then every later one (7: feed, 8: last-write index)
        assert await new.migrations() == [*range(1, applied + 1), *(v for v, _, _ in MIGRATIONS)]
        assert [e.seq for e in await new.read("a")] == [1, 2, 3]
        # events stored before the feed existed got positions, in the feed's order
        assert [(r.agent_id, r.event.seq) for r in await new.read_feed()] == [
            ("a", 1),
            ("a", 2),
            ("a", 3),
        ]
        assert await new.lookup_key("a", "k") == AppendResult("a", 1, 3, True)
        await new.append(
            AppendRequest("a", 3, (RawEvent(4, "patch", 4.0, b"p", b"c"),), head_tag=b"tag")
        )
        assert await new.head_tag("a") == (4, b"tag")
        lease = await new.acquire_lease("a", "me", 30)
        assert lease.token == 1
    finally:
        await new.close()


@pytest.mark.slow
async def test_an_append_waiting_when_the_pool_gives_up_reconnecting_goes_on_once_back() -> None:
    """The server stays down past ``reconnect_timeout``: the pool gives up reconnecting
    while an append waits for a connection. Once the server is back the append goes
    through, instead of sitting out its whole wait (``pool_timeout``): psycopg's pool
    grows again only when a client starts to wait, so nobody reconnected. (A restart
    slower than the 5 s default at load 26 failed the restart test below that way.)"""
    import logging

    with private_postgres() as server:
        backend = PostgresBackend(
            server.dsn, max_size=2, pool_timeout=600, retry_timeout=600, reconnect_timeout=0.5
        )
        loop = asyncio.get_running_loop()
        gave_up = asyncio.Event()

        class GaveUp(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                # the pool gave up while the append waited for a connection
                waiting = backend._pool.get_stats().get("requests_waiting", 0)
                if "reconnection attempt" in record.getMessage() and waiting:
                    loop.call_soon_threadsafe(gave_up.set)

        pool_log = logging.getLogger("psycopg.pool")
        handler = GaveUp(logging.WARNING)
        pool_log.addHandler(handler)
        try:
            await backend.open()
            await backend.append(request("a", 0))
            await asyncio.to_thread(server.stop, "fast")
            append = asyncio.ensure_future(backend.append(request("a", 1)))
            await gave_up.wait()
            await asyncio.to_thread(server.start)
            # Without the fix the append waits out its 600 s; with it, it goes within
            # the pool's backoff (a second or two) once the server answers: 150 s is
            # only a bound for a loaded machine, far from either.
            assert await asyncio.wait_for(append, 150) == AppendResult("a", 2, 2)
        finally:
            pool_log.removeHandler(handler)
            await backend.close()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fast", "immediate"], ids=["restart", "crash-restart"])
async def test_a_server_restart_mid_run_loses_nothing(mode: str) -> None:
    """Stop a private PostgreSQL in the middle of a write load (cleanly, or as a crash)
    and start it again: every append is acknowledged once, none fails, none is lost or
    doubled — the pool's dead connections are replaced and interrupted appends settled."""
    with private_postgres() as server:
        backend = PostgresBackend(server.dsn, max_size=4, retry_timeout=30)
        acked: dict[str, list[int]] = {}
        failures: list[BaseException] = []
        rounds = 40
        half = asyncio.Event()

        async def writer(w: int) -> None:
            agent = f"w{w}"
            acked[agent] = []
            for i in range(rounds):
                if i == rounds // 2:
                    half.set()
                key = f"{agent}-{i}" if w % 2 else None
                body = f"{agent}:{i}".encode()
                event = RawEvent(i + 1, "patch", float(i), body, b"c")
                try:
                    result = await backend.append(AppendRequest(agent, i, (event,), None, key))
                except Exception as exc:
                    failures.append(exc)
                    return
                acked[agent].append(result.last_seq)
                await asyncio.sleep(0.005)

        async def restart() -> None:
            await half.wait()
            await asyncio.to_thread(server.stop, mode)
            await asyncio.sleep(0.5)  # writers keep trying against a dead server
            await asyncio.to_thread(server.start)

        try:
            await backend.open()
            await asyncio.gather(restart(), *(writer(w) for w in range(6)))
            assert failures == []
            for agent, seqs in acked.items():
                assert seqs == list(range(1, rounds + 1))
                stored = await backend.read(agent)
                assert [e.payload for e in stored] == [
                    f"{agent}:{i}".encode() for i in range(rounds)
                ]
            assert (await backend.health()).ok
        finally:
            await backend.close()
