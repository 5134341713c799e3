"""PostgreSQL's store-level "encrypted" marker (``sk_markers``, migration 9): a schema
written before it migrates forward, and under row-level security (one database role
per principal) every role reads the marker, a writer role sets it and none clears it.

A principal restricted to one namespace sees only that namespace's records, so the
newest heads it can sample are all its own: without the marker, its store opened
without a key wrote cleartext into an encrypted store. Real server (127.0.0.1:5432,
db ``test``); every test has its own schema and roles, dropped afterwards."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.base import Backend
from statekeeper.backends.postgres import PostgresBackend
from statekeeper.backends.postgres import row_security as _row_security
from statekeeper.backends.postgres import schema as _schema
from statekeeper.backends.scripts import named_blocks
from statekeeper.errors import KeyRequired, NotAStore, StatekeeperError
from statekeeper.governance import parse_policy
from statekeeper.governance.policy_postgres import enforce_in_postgres
from statekeeper.security import Keyring, generate_key
from statekeeper.store.keyguard import ENCRYPTED, SAMPLE

from ..backends._services import POSTGRES_DSN, drop_schema, namespace, require_postgres

KEY = generate_key()
POLICY = parse_policy(
    """\
[principals.alice]
read = ["acme/**"]
write = ["acme/support/**"]

[principals.bob]
write = ["globex/*"]

[principals.carol]
read = ["globex/*"]
"""
)


def _as(role: str) -> str:
    scheme, rest = POSTGRES_DSN.split("://", 1)
    return f"{scheme}://{role}@{rest.split('@', 1)[-1]}"


def _pg(*statements: str) -> list[Any]:
    import psycopg

    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        rows: list[Any] = []
        for statement in statements:
            cur = conn.execute(statement)  # type: ignore[arg-type]
            rows = cur.fetchall() if cur.description else []
        return rows


@pytest.fixture
def schema(tmp_path: Path) -> Iterator[str]:
    require_postgres()
    name = namespace(tmp_path, "sk_mark_")
    try:
        yield name
    finally:
        drop_schema(name)


@pytest.fixture
def roles(schema: str) -> Iterator[dict[str, str]]:
    suffix = uuid.uuid4().hex[:8]
    made = {p: f"sk_mark_{p}_{suffix}" for p in ("alice", "bob", "carol")}
    _pg(*(f'CREATE ROLE "{r}" LOGIN' for r in made.values()))
    try:
        yield made
    finally:
        drop_schema(schema)  # (before the roles: their privileges go with it)
        quoted = ", ".join(f'"{r}"' for r in made.values())
        _pg(f"DROP OWNED BY {quoted}", *(f'DROP ROLE "{r}"' for r in made.values()))


def _store(url: str, schema: str, principal: str | None = None, key: bool = False) -> StateStore:
    options: dict[str, Any] = {"witness": False}
    if key:
        options["keyring"] = Keyring({"k1": KEY})
    if principal is not None:
        options.update(principal=principal, policy=POLICY)
    return StateStore(f"{url}?schema={schema}", **options)


@pytest.fixture
def at_migration_8(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This statekeeper as it was before migration 9: schemas created at 8, no markers
    (read_marker None, set_marker nothing), row-level security without sk_markers."""
    monkeypatch.setattr(_schema, "MIGRATIONS", [m for m in _schema.MIGRATIONS if m[0] < 9])
    monkeypatch.setattr(_schema, "SCHEMA_VERSION", 8)
    monkeypatch.setattr(PostgresBackend, "read_marker", Backend.read_marker)
    monkeypatch.setattr(PostgresBackend, "set_marker", Backend.set_marker)

    def without_markers(text: str) -> dict[str, str]:
        blocks = named_blocks(text)
        return {**blocks, "markers": "SELECT 1", "marker_role": "SELECT 1"}

    monkeypatch.setattr(_row_security, "named_blocks", without_markers)
    yield
    monkeypatch.undo()


async def test_a_principal_without_a_key_is_refused_by_the_marker_it_reads(
    schema: str, roles: dict[str, str]
) -> None:
    async with _store(POSTGRES_DSN, schema) as owner:
        await owner.save("acme/support/t0", {"n": 0})
        await owner.save("globex/eu/g0", {"n": 0})
    await enforce_in_postgres(POSTGRES_DSN, schema, POLICY, roles)
    async with _store(_as(roles["alice"]), schema, "alice", key=True) as alice:
        assert await alice.backend.read_marker(ENCRYPTED) is False
        await alice.save("acme/support/secret", {"card": "4111"})  # alice's role marks it
        assert await alice.backend.read_marker(ENCRYPTED) is True
    # bob may read and write globex only: every head he can see is in the clear
    async with _store(_as(roles["bob"]), schema, "bob") as bob:
        assert [a.agent_id for a in await bob.list_agents()] == ["globex/eu/g0"]
        assert await bob.backend.read_marker(ENCRYPTED) is True
        with pytest.raises(KeyRequired):
            await bob.save("globex/eu/leak", {"password": "hunter2"})
        with pytest.raises(KeyRequired):
            await bob.save("globex/eu/g0", {"n": 1})
        assert await bob.head("globex/eu/leak") == 0
        assert (await bob.load("globex/eu/g0")).data == {"n": 0}  # reads go on
    # no role clears it: not bob (a writer), not carol (a reader); carol cannot set one
    for who in ("bob", "carol"):
        with pytest.raises(Exception, match="permission denied"):
            _as_role(roles[who], f'DELETE FROM "{schema}".sk_markers')
    carol = PostgresBackend(_as(roles["carol"]), schema=schema, max_size=1, retry_timeout=1)
    try:
        assert await carol.read_marker(ENCRYPTED) is True
        with pytest.raises(StatekeeperError, match="row-level security"):
            await carol.set_marker("other")
    finally:
        await carol.close()
    assert _pg(f'SELECT name FROM "{schema}".sk_markers') == [(ENCRYPTED,)]


def _as_role(role: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(_as(role), autocommit=True) as conn:
        conn.execute(statement)  # type: ignore[arg-type]


async def test_a_schema_at_migration_8_migrates_to_the_marker(
    schema: str, at_migration_8: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a process without a key that started (and wrote) before the store was encrypted
    async with _store(POSTGRES_DSN, schema) as old:
        await old.save("plain-0", {"n": 0})
        async with _store(POSTGRES_DSN, schema, key=True) as keyed:  # before markers
            await keyed.save("secret-0", {"card": "4111"})
        assert _pg(f'SELECT max(version) FROM "{schema}".sk_migrations') == [(8,)]
        monkeypatch.undo()  # this statekeeper: migration 9 on open

        async with _store(POSTGRES_DSN, schema) as keyless:
            # not marked yet: the newest heads decide (an encrypted one: refused)
            assert await keyless.backend.read_marker(ENCRYPTED) is False
            assert await keyless.backend.schema_version() == _schema.SCHEMA_VERSION >= 9
            with pytest.raises(KeyRequired):
                await keyless.save("leak", {"password": "hunter2"})
        async with _store(POSTGRES_DSN, schema, key=True) as keyed:
            await keyed.save("secret-1", {"card": "5500"})  # the next keyed write marks
        for i in range(1, SAMPLE + 2):  # then the newest heads all in the clear
            await old.save(f"plain-{i}", {"n": i})
    async with _store(POSTGRES_DSN, schema) as keyless:
        assert await keyless.backend.read_marker(ENCRYPTED) is True
        with pytest.raises(KeyRequired):
            await keyless.save("leak", {"password": "hunter2"})
        assert await keyless.head("leak") == 0


async def test_row_security_installed_at_migration_8_covers_the_marker_after_it(
    schema: str, roles: dict[str, str], at_migration_8: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _store(POSTGRES_DSN, schema) as owner:
        await owner.save("acme/support/t0", {"n": 0})
        await owner.save("globex/eu/g0", {"n": 0})
    await enforce_in_postgres(POSTGRES_DSN, schema, POLICY, roles)  # as it was at 8
    async with _store(_as(roles["alice"]), schema, "alice", key=True) as alice:
        await alice.save("acme/support/secret-0", {"card": "4111"})
    monkeypatch.undo()

    async with _store(POSTGRES_DSN, schema) as owner:  # migration 9, by the owner
        assert await owner.backend.schema_version() == _schema.SCHEMA_VERSION
    # the roles were given the marker by the migration (no new enforce_in_postgres)
    async with _store(_as(roles["alice"]), schema, "alice", key=True) as alice:
        await alice.save("acme/support/secret-1", {"card": "5500"})
        assert await alice.backend.read_marker(ENCRYPTED) is True
    async with _store(_as(roles["bob"]), schema, "bob") as bob:
        with pytest.raises(KeyRequired):
            await bob.save("globex/eu/leak", {"password": "hunter2"})
    with pytest.raises(Exception, match="permission denied"):
        _as_role(roles["bob"], f'DELETE FROM "{schema}".sk_markers')
    carol = PostgresBackend(_as(roles["carol"]), schema=schema, max_size=1, retry_timeout=1)
    try:
        assert await carol.read_marker(ENCRYPTED) is True
        with pytest.raises(StatekeeperError, match="row-level security"):
            await carol.set_marker("other")
    finally:
        await carol.close()


async def test_row_security_installed_on_a_schema_at_migration_8_brings_it_up_to_date(
    schema: str, roles: dict[str, str], at_migration_8: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store an older statekeeper made, then this one's enforce_in_postgres first:
    the schema is migrated (its policies name sk_markers), not a raw UndefinedTable."""
    async with _store(POSTGRES_DSN, schema) as owner:
        await owner.save("acme/support/t0", {"n": 0})
    monkeypatch.undo()
    await enforce_in_postgres(POSTGRES_DSN, schema, POLICY, roles)
    assert _pg(f'SELECT max(version) FROM "{schema}".sk_migrations') == [(_schema.SCHEMA_VERSION,)]
    async with _store(_as(roles["alice"]), schema, "alice", key=True) as alice:
        await alice.save("acme/support/secret", {"card": "4111"})
        assert await alice.backend.read_marker(ENCRYPTED) is True
        assert [a.agent_id for a in await alice.list_agents()] == [
            "acme/support/secret",
            "acme/support/t0",
        ]


async def test_row_security_on_a_schema_without_a_store_is_refused(
    schema: str, roles: dict[str, str]
) -> None:
    with pytest.raises(NotAStore):
        await enforce_in_postgres(POSTGRES_DSN, schema, POLICY, roles)
    assert _pg(f"SELECT count(*) FROM pg_namespace WHERE nspname = '{schema}'") == [(0,)]
