"""A server, database or role whose ``client_encoding`` is not UTF-8 (``ALTER ROLE app
SET client_encoding = 'LATIN1'``, or the server's default): statekeeper's sessions
still talk UTF-8, so agent ids and text outside that encoding are stored and read back.

Before, the pool took the encoding the server gave it: opening a new store raised an
untyped ``UnicodeEncodeError`` (the migrations' text), and on an existing store an
agent id outside LATIN1 could be neither written nor listed (``BackendRejected``
"has no equivalent in encoding LATIN1") — the store unusable for such a role.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

import statekeeper.backends.postgres
from statekeeper import StateStore
from statekeeper.errors import BackendRejected

from ._services import private_postgres

SQL = Path(statekeeper.backends.postgres.__file__).parent / "sql"


@pytest.mark.parametrize("script", sorted(p.name for p in SQL.glob("*.sql")))
def test_the_sql_statekeeper_sends_is_ascii(script: str) -> None:
    """Migrations are sent whole, comments too: a character a database's encoding
    cannot hold (an em dash in LATIN1) fails the store's creation there."""
    text = (SQL / script).read_text(encoding="utf-8")
    assert text.isascii(), [line for line in text.splitlines() if not line.isascii()]


@pytest.mark.slow
async def test_a_latin1_client_encoding_on_the_server_keeps_text_whole() -> None:
    with private_postgres({"client_encoding": "LATIN1"}) as server:
        url = f"{server.dsn}?schema=enc"
        async with StateStore(url) as store:
            agent = await store.agent("agent-☃-𝄞")
            agent.data["text"] = "snow ☃, clef 𝄞, é"
            await agent.save()
        async with StateStore(url) as store:
            assert [a.agent_id async for a in store.iter_agents()] == ["agent-☃-𝄞"]
            loaded = await store.load("agent-☃-𝄞")
            assert loaded.data["text"] == "snow ☃, clef 𝄞, é"


@pytest.mark.slow
async def test_a_store_in_a_latin1_database_is_created_and_keeps_its_text() -> None:
    """A database whose own encoding is LATIN1 (``CREATE DATABASE … ENCODING
    'LATIN1'``) takes a store: ids and text LATIN1 can hold round-trip, and an id it
    cannot hold is refused, typed, with nothing stored. Before, the store could not be
    created there at all: the migrations' comments held characters LATIN1 has not
    (``BackendRejected`` 22P05 from opening the store, for every operation)."""
    with private_postgres() as server:
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute(
                "CREATE DATABASE latin ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C'"
                " TEMPLATE template0"
            )
        url = server.dsn.rsplit("/", 1)[0] + "/latin?schema=enc"
        async with StateStore(url) as store:
            await store.save("agent-é", {"text": "snow ☃, é"})
            with pytest.raises(BackendRejected) as refused:
                await store.save("agent-☃", {"text": "x"})
            assert refused.value.sqlstate == "22P05"  # untranslatable character
        async with StateStore(url) as store:
            assert [a.agent_id async for a in store.iter_agents()] == ["agent-é"]
            assert (await store.load("agent-é")).data == {"text": "snow ☃, é"}
            assert [c.agent_id async for c in store.subscribe(stop_at_head=True)] == ["agent-é"]
