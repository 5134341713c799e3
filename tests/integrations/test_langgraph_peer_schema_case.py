"""``langgraph import`` / ``export`` with ``?schema=`` naming a PostgreSQL schema whose
name needs quoting: upper case (``Prod`` beside another application's ``prod``) or a
space. The schema became the session's ``search_path`` unquoted, which the server folds
to lower case: an import from ``?schema=Prod`` read ``prod``'s threads, and an export
into it created ``"Prod"`` empty and wrote PostgresSaver's tables into ``prod``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper.integrations.langgraph.peers import NotALangGraphDatabase, open_peer

from ..backends._services import POSTGRES_DSN, drop_schema, namespace, require_postgres


@pytest.fixture
def lower(tmp_path: Path) -> Iterator[str]:
    require_postgres()
    name = namespace(tmp_path, "sk_nbr_")
    yield name
    for schema in (name, name.upper(), name + " b"):
        drop_schema(schema)


def _tables(schema: str) -> list[str]:
    import psycopg

    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1",
            (schema,),
        ).fetchall()
    return [str(r[0]) for r in rows]


def _saver_thread(schema: str, thread: str) -> None:
    """A PostgresSaver database in ``schema`` holding one checkpoint of ``thread``."""
    from langgraph.checkpoint.base import empty_checkpoint

    peer = open_peer(f"{POSTGRES_DSN}?schema={schema}", readonly=False)
    try:
        config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        peer.saver.put(config, empty_checkpoint(), {"source": "input", "step": 0}, {})
    finally:
        peer.close()


def test_an_export_into_an_upper_case_schema_writes_there(lower: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:  # another application's
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(lower)))
    peer = open_peer(f"{POSTGRES_DSN}?schema={lower.upper()}", readonly=False)
    peer.close()
    assert _tables(lower) == []  # (before: PostgresSaver's four tables were here)
    assert "checkpoints" in _tables(lower.upper())


def test_an_import_from_an_upper_case_schema_does_not_read_the_lower_case_one(
    lower: str,
) -> None:
    _saver_thread(lower, "the-other-applications-thread")
    with pytest.raises(NotALangGraphDatabase, match="has no PostgresSaver tables"):
        open_peer(f"{POSTGRES_DSN}?schema={lower.upper()}", readonly=True)
    _saver_thread(lower.upper(), "mine")
    peer = open_peer(f"{POSTGRES_DSN}?schema={lower.upper()}", readonly=True)
    try:
        assert peer.threads() == ["mine"]
    finally:
        peer.close()


def test_a_schema_with_a_space(lower: str) -> None:
    _saver_thread(lower + " b", "spaced")
    peer = open_peer(f"{POSTGRES_DSN}?schema={lower}%20b", readonly=True)
    try:
        assert peer.threads() == ["spaced"]
    finally:
        peer.close()
    assert _tables(lower) == []
