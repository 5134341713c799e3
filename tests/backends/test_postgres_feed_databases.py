"""Two stores of the same schema name in two databases of one server (every store in
``public`` shares its name): an append in flight in one database does not hold the
other's change feed back.

Advisory locks are a database's own, but ``pg_locks`` lists every database's: the
feed's frontier counted the other database's appends in flight as its own and waited
for them (was: the feed's head stayed at 0 while an append of the other database was
open, for as long as it was — a writer frozen there stalled this store's subscribers
for ``idle_transaction_timeout``, or for good with it off).
"""

from __future__ import annotations

import psycopg
import pytest

from statekeeper import StateStore

from ._services import private_postgres

pytestmark = pytest.mark.slow


async def test_an_append_in_flight_in_another_database_does_not_hold_the_feed() -> None:
    with private_postgres() as server:
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute("CREATE DATABASE other")
        other = server.dsn.rsplit("/", 1)[0] + "/other"
        async with StateStore(f"{other}?schema=app") as store:
            await store.save("b", {"v": 0})
        with psycopg.connect(other) as held:  # an append of the other store, open
            held.execute(
                "INSERT INTO app.sk_events (agent_id, seq, kind, ts, payload, checksum)"
                " VALUES ('b', 2, 'patch', 0, '\\x00', '\\x00')"
            )
            async with StateStore(f"{server.dsn}?schema=app") as store:
                await store.save("a", {"v": 1})
                for _ in range(2):  # (a holder seen once is checked again by the next)
                    _, head = await store.feed_bounds()
                assert head == 1
                changes = [c async for c in store.subscribe(stop_at_head=True)]
                assert [(c.agent_id, c.seq) for c in changes] == [("a", 1)]
            held.rollback()
