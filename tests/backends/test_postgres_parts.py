"""backends/postgres/backend.py split into mixins of one job each (issue 11): each method
comes from the part named for its job, the names imported from backend.py still are
there, and what tests patch in backend.py is still what the connections read."""

from __future__ import annotations

import inspect

import pytest

pytest.importorskip("psycopg")

from statekeeper.backends.base import Backend
from statekeeper.backends.postgres import backend
from statekeeper.backends.postgres.backend import PostgresBackend

#: the part that defines each method moved out of backend.py
WHERE = {
    "open": "lifecycle",
    "_dial": "lifecycle",
    "_ensure_open": "lifecycle",
    "_open_schema": "lifecycle",
    "ensure_store": "lifecycle",
    "initialize": "lifecycle",
    "_check_writable": "lifecycle",
    "_check_open": "lifecycle",
    "migrations": "lifecycle",
    "schema_version": "lifecycle",
    "drop_all": "lifecycle",
    "close": "lifecycle",
    "health": "lifecycle",
    "read_feed": "feed_api",
    "read_feed_page": "feed_api",
    "feed_bounds": "feed_api",
    "trim_feed": "feed_api",
    "feed_id": "feed_api",
    "renew_feed_id": "feed_api",
    "feed_position": "feed_api",
    "wait_feed": "feed_api",
    "prune": "removals",
    "delete_agent": "removals",
    "delete_agent_at": "removals",
    "read_marker": "markers",
    "set_marker": "markers",
    # (what stays in backend.py: the settings, the pool, connections, retries)
    "__init__": "backend",
    "from_url": "backend",
    "_reason": "backend",
    "_failure": "backend",
    "_retrying": "backend",
    "_connection": "backend",
    "_query": "backend",
    "_primary_query": "backend",
    "_wrote": "backend",
}


def test_each_method_comes_from_the_part_named_for_its_job() -> None:
    for method, part in WHERE.items():
        owner = next(k for k in PostgresBackend.__mro__ if method in vars(k))
        assert owner.__module__ == f"statekeeper.backends.postgres.{part}", method
    assert PostgresBackend.__module__ == "statekeeper.backends.postgres.backend"


def test_the_moved_methods_are_checked_once_for_agent_ids() -> None:
    """Backend.__init_subclass__ wraps them in the mixin that defines them now (as it
    did in PostgresBackend's body): wrapped once, not twice."""
    for method in ("delete_agent", "delete_agent_at"):
        fn = getattr(PostgresBackend, method)
        assert getattr(fn, "__statekeeper_checked__", False), method
        assert not getattr(fn.__wrapped__, "__statekeeper_checked__", False), method
        assert fn is not getattr(Backend, method)


def test_the_names_of_backend_py_are_still_there() -> None:
    for name in (
        "PostgresBackend",
        "MIGRATIONS",
        "SCHEMA_VERSION",
        "parse_postgres_url",
        "BATCHES_IN_FLIGHT",
        "_QUERIES",
        "logger",
    ):
        assert hasattr(backend, name), name
    # (test_postgres_session_timeouts patches it there: the connections must read it there)
    connection = inspect.unwrap(PostgresBackend._connection)
    assert connection.__globals__ is vars(backend)
    assert "check_connection" in connection.__code__.co_names
