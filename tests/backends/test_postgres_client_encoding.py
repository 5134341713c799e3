"""A server, database or role whose ``client_encoding`` is not UTF-8 (``ALTER ROLE app
SET client_encoding = 'LATIN1'``, or the server's default): statekeeper's sessions
still talk UTF-8, so agent ids and text outside that encoding are stored and read back.

Before, the pool took the encoding the server gave it: opening a new store raised an
untyped ``UnicodeEncodeError`` (the migrations' text), and on an existing store an
agent id outside LATIN1 could be neither written nor listed (``BackendRejected``
"has no equivalent in encoding LATIN1") — the store unusable for such a role.
"""

from __future__ import annotations

import pytest

from statekeeper import StateStore

from ._services import private_postgres

pytestmark = pytest.mark.slow


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
