"""A history read that reaches the end of the stream checks the head, as a load does.

The newest events deleted and the head moved back — the truncation the head tag exists
to catch: ``load`` raised, but ``history()`` (and so ``statekeeper history``/``tail``,
and the LangGraph saver's ``list``, LangGraph's ``get_state_history``) served the
shorter stream as the whole one, with a key too. Now a history read that finds no event
after its last one checks the head: a tag that does not match, or a head past the last
stored event, is an ``IntegrityError``; a range that ends before the head reads nothing
more.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from statekeeper import IntegrityError, StateStore
from statekeeper.security import Keyring, generate_key

from ..backends._services import POSTGRES_DSN, fresh_url

KEY = generate_key()
MODES = [pytest.param(True, id="with-key"), pytest.param(False, id="without-key")]


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


TRUNCATE = (
    "DELETE FROM sk_events WHERE agent_id = 'alpha' AND seq > 8",
    "UPDATE sk_agents SET head_seq = 8 WHERE agent_id = 'alpha'",
)
EDITS = {
    "truncated": TRUNCATE,  # the head tag no longer matches
    "events-gone": ("DELETE FROM sk_events WHERE agent_id = 'alpha' AND seq > 8",),
    "head-moved-back": ("UPDATE sk_agents SET head_seq = 8 WHERE agent_id = 'alpha'",),
}


async def _history(store: StateStore, **args: Any) -> list[int]:
    return [e.seq async for e in store.history("alpha", **args)]


@pytest.mark.parametrize("keyed", MODES)
@pytest.mark.parametrize("edit", sorted(EDITS))
@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_history_to_the_end_checks_the_head(
    tmp_path: Path, engine: str, edit: str, keyed: bool
) -> None:
    keyring = Keyring({"k1": KEY}) if keyed else None
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url, keyring=keyring, witness=False) as store:
            for agent in ("alpha", "beta"):
                for i in range(1, 11):
                    await store.save(agent, {"n": i})
        _sql(url, *EDITS[edit])
        async with StateStore(url, keyring=keyring, witness=False, cache_size=0) as store:
            for args in ({}, {"after_seq": 5}, {"to_seq": 12}):
                with pytest.raises(IntegrityError) as caught:
                    await _history(store, **args)
                assert caught.value.agent_id == "alpha"
            # a range that ends before the head is read as it is stored
            assert await _history(store, to_seq=5) == [1, 2, 3, 4, 5]
            assert await _history(store, after_seq=2, to_seq=4) == [3, 4]
            if edit != "head-moved-back":
                with pytest.raises(IntegrityError):
                    await _history(store, after_seq=7, to_seq=9)
            assert [e.seq async for e in store.history("beta")] == list(range(1, 11))
            assert [e.seq async for e in store.history("beta", after_seq=9)] == [10]
