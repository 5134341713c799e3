"""A TTL purge is decided by the agent's authenticated last write, not by the head row.

The listing's last-write time (``sk_agents.updated_at``, Redis' ``u`` field) is not
authenticated. Someone with write access to the database (no key) set it a year back,
and the next ``retention apply`` with ``ttl=30d`` deleted the live agent — with a key,
the automatic witness on — and recorded it as a normal purge: afterwards ``verify`` was
ok and nothing showed that it had been written a minute before. Now the purge first
verifies the record at the head and holds its own time to the TTL: the agent is kept
and the action is ``failed``, naming the altered time; a genuinely idle agent in the
same run is still purged.
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import closing
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from statekeeper import StateStore
from statekeeper.governance.retention import RetentionPolicy, apply_retention
from statekeeper.security import Keyring, generate_key

from ..backends._services import POSTGRES_DSN, REDIS_URL, fresh_url

YEAR = 365 * 86400.0


def _age_the_head_row(engine: str, url: str, agent_id: str, by: float = YEAR) -> None:
    if engine == "sqlite":
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn, conn:
            conn.execute(
                "UPDATE sk_agents SET updated_at = updated_at - ? WHERE agent_id = ?",
                (by, agent_id),
            )
    elif engine == "postgresql":
        import psycopg

        schema = parse_qs(urlsplit(url).query)["schema"][0]
        with psycopg.connect(POSTGRES_DSN) as pg:
            pg.execute(
                f"UPDATE {schema}.sk_agents SET updated_at = updated_at - %s WHERE agent_id = %s",
                (by, agent_id),
            )
    else:
        import redis

        prefix = parse_qs(urlsplit(url).query)["prefix"][0]
        with closing(redis.Redis.from_url(REDIS_URL)) as client:
            key = f"{prefix}a:{agent_id}"
            client.hset(key, "u", float(client.hget(key, "u") or 0) - by)


@pytest.mark.parametrize("keyed", [True, False], ids=["with-key", "without-key"])
@pytest.mark.parametrize("engine", ["sqlite", "postgresql", "redis"])
async def test_an_aged_head_row_does_not_make_retention_purge_a_live_agent(
    tmp_path: Path, engine: str, keyed: bool
) -> None:
    keyring = Keyring({"k1": generate_key()}) if keyed else None
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url, keyring=keyring, clock=lambda: time.time() - YEAR) as store:
            await store.save("idle", {"n": 1})  # really written a year ago
        async with StateStore(url, keyring=keyring) as store:
            await store.save("live", {"n": 1})
        _age_the_head_row(engine, url, "live")
        async with StateStore(url, keyring=keyring) as store:
            listed = {a.agent_id: a.updated_at for a in await store.list_agents()}
            assert time.time() - listed["live"] > YEAR - 60  # the listing says: idle
            report = await apply_retention(store, RetentionPolicy.parse("* ttl=30d\n"))
            outcomes = {a.agent_id: (a.kind, a.outcome) for a in report.actions}
            assert outcomes == {"idle": ("purge", "done"), "live": ("purge", "failed")}
            failed = next(a for a in report.actions if a.agent_id == "live")
            assert "last-write time was altered; not purged" in failed.reason
            assert [a.agent_id for a in await store.list_agents()] == ["live"]
            assert (await store.load("live")).data == {"n": 1}
