"""A tenant's database role cannot lock the store's tables (row-level security).

PostgreSQL allows ``LOCK TABLE`` in every mode but ``ACCESS SHARE`` and ``ROW
EXCLUSIVE`` to a role holding TABLE-level ``UPDATE``, ``DELETE`` or ``TRUNCATE``; a
tenant role given those locked ``sk_agents`` ``IN ACCESS EXCLUSIVE MODE`` and held every
other tenant's reads and writes for as long as it liked. Under row security a tenant
role now holds ``UPDATE`` on the columns its writes update and deletes through
``SECURITY DEFINER`` functions that apply the delete policies for the calling role
(``sql/row_security_deletes.sql``). This module builds that SQL: the functions (with
``sk_allowed_by``, ``sk_allowed``'s text read for a named role), migration 25
(``sql/table_locks.sql``: existing stores under row security get them and lose their
table-level privileges), and the statements a backend bound by row security sends for
its deletes instead of ``DELETE`` (:func:`bind_deletes`: same parameters, one row a
row deleted, so ``rowcount`` reads as before; stores without row security keep
theirs).
"""

from __future__ import annotations

import re
from functools import cache

from ..scripts import named_blocks, read_script

__all__ = [
    "RLS_DELETES",
    "audit_entries_sql",
    "bind_deletes",
    "bind_lock_bounds",
    "deletes_sql",
    "migration_sql",
    "role_sql",
]

_PACKAGE = "statekeeper.backends.postgres"

#: queries.sql's DELETE statements and what a role bound by row security sends
#: instead (the same parameters in the same order)
RLS_DELETES: dict[str, str] = {
    "del_agent": "SELECT 1 FROM {s}.sk_del_agents(current_user, ARRAY[%s]::text[], NULL, NULL)",
    "del_agent_at": "SELECT 1 FROM {s}.sk_del_agents(current_user, ARRAY[%s]::text[], %s, NULL)",
    "del_agent_at_sum": (
        "SELECT 1 FROM {s}.sk_del_agents(current_user, ARRAY[%s]::text[], %s, %s::bytea)"
    ),
    "absent_release": "SELECT 1 FROM {s}.sk_del_agents(current_user, %s::text[], 0, NULL)",
    "del_events": "SELECT 1 FROM {s}.sk_del_events(current_user, %s, NULL)",
    "prune_events": "SELECT 1 FROM {s}.sk_del_events(current_user, %s, %s)",
    "del_snaps": "SELECT 1 FROM {s}.sk_del_snaps(current_user, %s, NULL, NULL)",
    "prune_snaps_below": "SELECT 1 FROM {s}.sk_del_snaps(current_user, %s, %s, NULL)",
    "prune_snaps": "SELECT 1 FROM {s}.sk_del_snaps(current_user, %s, NULL, %s::bigint[])",
    "del_keys": "SELECT 1 FROM {s}.sk_del_keys(current_user, %s, NULL, NULL)",
    "expire_keys": "SELECT 1 FROM {s}.sk_del_keys(current_user, NULL, %s, NULL)",
    "expire_agent_keys": "SELECT 1 FROM {s}.sk_del_keys(current_user, %s, %s, NULL)",
    "key_drop": "SELECT 1 FROM {s}.sk_del_keys(current_user, %s, NULL, %s)",
}

#: the tables whose table-level UPDATE, DELETE, TRUNCATE migration 25 revokes (not
#: sk_feed_floor: its trimmers, the admins of every namespace, keep UPDATE on it)
_MIGRATED_TABLES = ("sk_agents", "sk_events", "sk_snapshots", "sk_idempotency", "sk_leases",
                    "sk_markers", "sk_grants", "sk_migrations")  # fmt: skip


def bind_deletes(queries: dict[str, bytes], schema_sql: str) -> None:
    """Replace the DELETE statements of ``queries`` (a backend's ``_sql``) by the
    delete functions' calls; ``schema_sql`` is the schema as an SQL identifier."""
    for name, text in RLS_DELETES.items():
        queries[name] = text.replace("{s}", schema_sql).encode()


#: the statements whose function locks the audit log's head or inserts events (the
#: feed's lock): under row security each sets the bound itself (:func:`bind_lock_bounds`)
_BOUNDED = ("append", "append1", "append_batch", "rw_many_lock")
_FIRST_ARGUMENT = re.compile(
    rb"(sk_append1?|sk_append_batch|sk_lock_heads)\((%[sb]|%\(\w+\)s)(::[\w\[\]]+)?"
)


def bind_lock_bounds(queries: dict[str, bytes], milliseconds: int) -> None:
    """Make the statements of ``queries`` that wait on a lock any role may hold (the
    audit log's head row, the feed's advisory lock) set ``statekeeper.audit_lock_timeout``
    for their own transaction (``set_config(..., true)``, evaluated in their first
    argument, before the function runs) rather than trust the session's: behind a
    transaction pooler (PgBouncer) a session's ``SET`` reaches one server connection,
    and the next transaction may run on another, with no setting or another client's."""
    bound = (
        b"pg_catalog.set_config('statekeeper.audit_lock_timeout', '%d', true) IS NOT NULL"
        % milliseconds
    )
    for name in _BOUNDED:
        if b"statekeeper.audit_lock_timeout" in queries[name]:
            continue  # (bound already: opened again)

        def wrap(found: re.Match[bytes]) -> bytes:
            cast = found.group(3) or b"::text"
            return b"%s((SELECT %s%s WHERE %s)" % (found.group(1), found.group(2), cast, bound)

        text, count = _FIRST_ARGUMENT.subn(wrap, queries[name], count=1)
        if count != 1:  # (an edit of queries.sql must keep this readable)
            raise RuntimeError(f"queries.sql: {name} has no first argument to bound")
        queries[name] = text


def _allowed_by() -> str:
    """``sk_allowed`` of row_security.sql read for a named role (``p_role``, not
    ``current_user``); ``sk_log_admin`` likewise."""
    setup = named_blocks(read_script(_PACKAGE, "sql/row_security.sql"))["setup"]
    found = re.search(
        r"CREATE OR REPLACE FUNCTION \{s\}\.sk_allowed\(p_agent text, p_need integer\)"
        r".*?\$fn\$.*?\$fn\$;",
        setup,
    )
    if found is None:  # (an edit of row_security.sql must keep this readable)
        raise RuntimeError("row_security.sql: sk_allowed not found")
    text = found.group(0)
    for old, new, count in (
        ("sk_allowed(p_agent text,", "sk_allowed_by(p_role name, p_agent text,", 1),
        ("current_user", "p_role", 2),
        ("{s}.sk_log_admin()", "{s}.sk_log_admin_by(p_role)", 2),
    ):
        if text.count(old) != count:
            raise RuntimeError(f"row_security.sql: sk_allowed changed ({old!r})")
        text = text.replace(old, new)
    return text


@cache
def deletes_sql() -> str:
    """The delete functions (``sql/row_security_deletes.sql``, block "functions")."""
    block = named_blocks(read_script(_PACKAGE, "sql/row_security_deletes.sql"))["functions"]
    return block.replace("@sk_allowed_by@", _allowed_by())


def role_sql() -> str:
    """A role's privileges (block "role": ``{tables}``, ``{r}``, ``{s}``)."""
    return named_blocks(read_script(_PACKAGE, "sql/row_security_deletes.sql"))["role"]


def feed_mark_sql() -> str:
    """The feed's bounded trigger function (``sql/row_security_feed.sql``, "mark")."""
    return named_blocks(read_script(_PACKAGE, "sql/row_security_feed.sql"))["mark"]


@cache
def appends_sql() -> str:
    """The append functions of migration 24 (``sql/audit_head_lock.sql``) releasing the
    claims they made through ``sk_del_agents`` (a role bound by row security has no
    DELETE on ``sk_agents``): installed where row security is, never elsewhere (a
    store without it keeps its plain DELETE, the cheaper)."""
    appends = read_script(_PACKAGE, "sql/audit_head_lock.sql")
    appends = appends[: appends.index("-- the claims left before migration 22")]
    for old, new, count in (
        (
            "DELETE FROM {s}.sk_agents WHERE agent_id = p_agent AND head_seq = 0;",
            "PERFORM {s}.sk_del_agents(current_user, ARRAY[p_agent], 0, NULL);",
            2,
        ),
        (
            "DELETE FROM {s}.sk_agents t WHERE t.agent_id = ANY (claimed) AND t.head_seq = 0;",
            "PERFORM {s}.sk_del_agents(current_user, claimed, 0, NULL);",
            1,
        ),
    ):
        if appends.count(old) != count:
            raise RuntimeError(f"audit_head_lock.sql changed: {old!r}")
        appends = appends.replace(old, new)
    return appends


#: a grant of the block "role" of some columns' UPDATE on one table
_COLUMNS_GRANT = re.compile(r"GRANT UPDATE \([\w, ]+\) ON \{s\}\.(\w+) TO")


@cache
def migration_sql() -> str:
    """Migration 25 (``sql/table_locks.sql``), its placeholders filled: where row
    security is installed, the delete functions, the append functions releasing their
    claims through them, the feed's bounded trigger and every tenant role's new
    privileges (of what it held: a table's columns where it could update the table,
    the delete functions where it could delete)."""
    tables = ", ".join(f"{{s}}.{t}" for t in _MIGRATED_TABLES)
    grants = []
    for statement in role_sql().split(";"):
        if statement.strip():
            text = statement.strip().replace("{tables}", tables).replace("{r}", "%1$I")
            run = f"EXECUTE format('{text}', r);"
            if (columns := _COLUMNS_GRANT.match(text)) is not None:
                run = f"IF '{columns.group(1)}' = ANY (updated) THEN {run} END IF;"
            elif text.startswith("GRANT EXECUTE"):
                run = f"IF deletes THEN {run} END IF;"
            elif not text.startswith("REVOKE"):  # (an edit of the block must say which)
                raise RuntimeError(f"row_security_deletes.sql: role: {text[:40]!r}")
            grants.append(f"        {run}")
    updated = "ARRAY[" + ", ".join(f"'{t}'" for t in _MIGRATED_TABLES) + "]"
    return (
        read_script(_PACKAGE, "sql/table_locks.sql")
        .replace("@sk_deletes@", deletes_sql())
        .replace("@sk_appends@", appends_sql())
        .replace("@sk_feed_mark@", feed_mark_sql())
        .replace("@sk_updated@", updated)
        .replace("@sk_grants@", "\n".join(grants))
    )


def audit_entries_sql() -> str:
    """Migration 26: a store under row security gets ``sql/row_security.sql``'s block
    "audit_entries" (the log's entries inserted only at or below the head the
    inserting transaction moved: a tenant could hold the next one, and every governed
    write waited on it, unbounded). A store without row security is left as it is."""
    block = named_blocks(read_script(_PACKAGE, "sql/row_security.sql"))["audit_entries"]
    return (
        "DO $do$\nBEGIN\n    IF to_regclass('{s}.sk_grants') IS NULL THEN\n        RETURN;\n"
        f"    END IF;\n{block}\nEND\n$do$;\n"
    )
