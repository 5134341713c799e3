"""Under row-level security a batch's statements are never JIT-compiled.

``sk_append_batch`` runs with ``enable_seqscan = off`` (migration 15), which also
reaches the checks row-level security adds to its statements: each reads
``sk_grants`` (no index: a seq scan, costed with the 1e10 penalty of a disabled plan
type), so with ``jit`` on (PostgreSQL's default where LLVM is installed) every such
statement was compiled with inlining and optimization, 100-400 ms of server CPU each:
a governed save as a tenant's role took 1.0-1.7 s alone, and 4 tenant writers x 12
saves (test_postgres_row_security_audit_reads.py) 114-166 s. Migration 19 sets
``jit = off`` on the function. The plans are read with the function's own settings
applied, as the tenant's role, on a server with JIT on."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from statekeeper import StateStore
from statekeeper.governance.policy_postgres import (
    enforce_in_postgres,
    stop_enforcing_in_postgres,
)

from ..backends._services import POSTGRES_DSN, drop_schema, namespace, require_postgres
from .conftest import KEYRING
from .test_postgres_row_security import _as, _pg
from .test_postgres_row_security_audit_reads import POLICY


@pytest.fixture
def tenant(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    require_postgres()
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        row = conn.execute("SELECT pg_jit_available()").fetchone()
    if not (row and row[0]):
        pytest.skip("this PostgreSQL server has no JIT (no LLVM): nothing to compile")
    schema = namespace(tmp_path, "sk_rljit_")
    suffix = uuid.uuid4().hex[:8]
    roles = {p: f"sk_rljit_{p}_{suffix}" for p in ("a", "b", "ops")}
    _pg(*(f'CREATE ROLE "{r}" LOGIN' for r in roles.values()))
    try:
        yield schema, roles
    finally:
        drop_schema(schema)
        names = ", ".join(f'"{r}"' for r in roles.values())
        _pg(f"DROP OWNED BY {names}", *(f'DROP ROLE "{r}"' for r in roles.values()))


def _jit_in(plan: Any) -> bool:
    (top,) = plan[0] if isinstance(plan[0], list) else plan
    return "JIT" in top


async def test_a_batchs_statements_under_row_security_are_not_jit_compiled(
    tenant: tuple[str, dict[str, str]],
) -> None:
    schema, role_of = tenant
    owner_url = f"{POSTGRES_DSN}?schema={schema}"
    async with StateStore(owner_url, keyring=KEYRING) as owner:
        await owner.backend.initialize()
        await owner.save("tenant-a/bot", {"n": 1})
    await enforce_in_postgres(POSTGRES_DSN, schema, POLICY, roles=role_of)
    s = sql.Identifier(schema)
    try:
        with psycopg.connect(_as(role_of["a"])) as conn:  # a transaction: SET LOCAL
            settings = conn.execute(
                "SELECT coalesce(p.proconfig, '{}') FROM pg_proc p"
                " JOIN pg_namespace n ON n.oid = p.pronamespace"
                " WHERE n.nspname = %s AND p.proname = 'sk_append_batch'",
                (schema,),
            ).fetchall()
            assert len(settings) == 1, settings
            conn.execute("SET LOCAL jit = on")  # the server's default, whatever it is here
            for setting in settings[0][0]:
                name, value = str(setting).split("=", 1)
                conn.execute("SELECT set_config(%s, %s, true)", (name, value))
            assert conn.execute("SHOW enable_seqscan").fetchone() == ("off",)
            # what row security runs for a statement of the batch on a tenant's rows:
            # the statement, and the body of sk_allowed that checks each row (a SQL
            # function run on its own, its plan not part of the statement's)
            statements = [
                "UPDATE {s}.sk_agents SET head_seq = head_seq + 1 WHERE agent_id = %s",
                "SELECT FROM {s}.sk_agents t WHERE t.agent_id = ANY (ARRAY[%s])"
                " ORDER BY t.agent_id FOR NO KEY UPDATE",
                "SELECT EXISTS (SELECT 1 FROM {s}.sk_grants g"
                " WHERE g.db_role = current_user AND g.perm >= 2"
                " AND {s}.sk_namespace(%s) ~ g.pattern)",
            ]
            for statement in statements:
                query = sql.SQL("EXPLAIN (FORMAT JSON) " + statement).format(s=s)
                row = conn.execute(query, ("tenant-a/bot",)).fetchone()
                assert row is not None
                plan = row[0] if not isinstance(row[0], str) else json.loads(row[0])
                assert not _jit_in(plan), (statement, plan)
            conn.rollback()
    finally:
        await stop_enforcing_in_postgres(POSTGRES_DSN, schema, role_of.values())
