"""PostgreSQL backend (extra ``postgres``): :class:`PostgresBackend` (``backend.py``),
its SQL in ``sql/`` — ``schema.sql`` (the tables and the append functions, applied as
a numbered migration) and ``queries.sql`` (every statement, by name)."""

from .backend import MIGRATIONS, SCHEMA_VERSION, PostgresBackend, parse_postgres_url

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "PostgresBackend", "parse_postgres_url"]
