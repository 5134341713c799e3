"""PostgreSQL enforces the policy itself: two real database roles, one per principal,
against the shared server (unique roles and schema, dropped afterwards). A process
connected as a role cannot read or change another namespace's rows even through the raw
backend, below every check of the store."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends.postgres import PostgresBackend
from statekeeper.errors import AccessDenied, StatekeeperError
from statekeeper.governance import Audit, AuditLog
from statekeeper.governance.policy import compile_pattern, posix_pattern
from statekeeper.governance.policy_postgres import (
    enforce_in_postgres,
    stop_enforcing_in_postgres,
)
from statekeeper.records import AppendRequest

from ..backends._services import POSTGRES_DSN, drop_schema, namespace, require_postgres
from .conftest import KEYRING, POLICY_TEXT


def _as(role: str) -> str:
    scheme, rest = POSTGRES_DSN.split("://", 1)
    return f"{scheme}://{role}@{rest.split('@', 1)[-1]}"


def _pg(*statements: str) -> None:
    import psycopg

    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)  # type: ignore[arg-type]


@contextlib.contextmanager
def tenant_roles(
    tmp_path: Path, prefix: str, principals: Sequence[str]
) -> Iterator[tuple[str, dict[str, str]]]:
    """A private schema and one new login role per principal (principal -> role name),
    dropped with everything they own afterwards."""
    require_postgres()
    schema = namespace(tmp_path, prefix)
    suffix = uuid.uuid4().hex[:8]
    roles = {p: f"{prefix}{p.replace('-', '_')}_{suffix}" for p in principals}
    _pg(*(f'CREATE ROLE "{r}" LOGIN' for r in roles.values()))
    try:
        yield schema, roles
    finally:
        drop_schema(schema)
        _pg(*(f'DROP OWNED BY "{r}"' for r in roles.values()))
        _pg(*(f'DROP ROLE "{r}"' for r in roles.values()))


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    require_postgres()
    schema = namespace(tmp_path, "sk_rls_")
    suffix = uuid.uuid4().hex[:8]
    alice, bob = f"sk_rls_alice_{suffix}", f"sk_rls_bob_{suffix}"
    _pg(f'CREATE ROLE "{alice}" LOGIN', f'CREATE ROLE "{bob}" LOGIN')
    try:
        yield schema, alice, bob
    finally:
        drop_schema(schema)
        _pg(f'DROP OWNED BY "{alice}", "{bob}"', f'DROP ROLE "{alice}"', f'DROP ROLE "{bob}"')


@pytest.mark.parametrize(
    "pattern",
    ["", "**", "acme", "acme/*", "acme/**", "**/eu", "acme/**/eu", "team-?", "a.b", "x+y/*"],
)
def test_posix_patterns_match_what_python_matches(pattern: str) -> None:
    import re

    samples = ["", "acme", "acme/eu", "acme/a/b/eu", "eu", "team-a", "team-ab", "a.b", "aXb",
               "x+y/z", "xy/z", "acmeX", "acme/support"]  # fmt: skip
    python = compile_pattern(pattern)
    posix = re.compile(posix_pattern(pattern))  # the subset used is the same in both
    for sample in samples:
        assert (python.fullmatch(sample) is not None) == (posix.search(sample) is not None), sample


async def test_the_database_enforces_the_policy(setup: tuple[str, str, str]) -> None:
    from statekeeper.governance import parse_policy

    schema, alice_role, bob_role = setup
    policy = parse_policy(POLICY_TEXT)
    owner_url = f"{POSTGRES_DSN}?schema={schema}"
    async with StateStore(owner_url, keyring=KEYRING) as owner:
        await owner.save("acme/support/t1", {"n": 1})
        await owner.save("acme/billing/b1", {"n": 1})
        await owner.save("globex/eu/g1", {"n": 1})
    await enforce_in_postgres(
        POSTGRES_DSN, schema, policy, roles={"alice": alice_role, "bob": bob_role}
    )

    # a compromised process as alice: the raw backend, no store, no policy in Python
    raw = PostgresBackend(_as(alice_role), schema=schema, max_size=2)
    try:
        assert [a.agent_id for a in await raw.list_agents()] == [
            "acme/billing/b1", "acme/support/t1",
        ]  # fmt: skip
        assert await raw.read("globex/eu/g1") == []
        assert await raw.head("globex/eu/g1") == 0
        with pytest.raises(AccessDenied, match="row-level security"):
            await raw.delete_agent("globex/eu/g1")
        with pytest.raises(AccessDenied, match="row-level security"):
            await raw.delete_agent("acme/billing/b1")  # read-only for alice
        stolen = (await raw.read("acme/support/t1"))[0]
        with pytest.raises(StatekeeperError, match="row-level security"):
            await raw.append(AppendRequest("globex/eu/new", 0, [stolen]))
        with pytest.raises(StatekeeperError, match="row-level security"):
            await raw.append(AppendRequest("acme/billing/new", 0, [stolen]))
    finally:
        await raw.close()

    # bob writes globex/<team>, sees nothing of acme
    async with StateStore(
        f"{_as(bob_role)}?schema={schema}",
        keyring=KEYRING, principal="bob", policy=policy, audit=Audit(),
    ) as bob:  # fmt: skip
        assert [a.agent_id for a in await bob.list_agents()] == ["globex/eu/g1"]
        await bob.save("globex/eu/g1", {"n": 2})
        with pytest.raises(AccessDenied):
            await bob.load("acme/support/t1")  # the store refuses first ...
        assert await bob.backend.read("acme/support/t1") == []  # ... and so does the server

    # alice, through the store as usual: writes her namespace, audited
    async with StateStore(
        f"{_as(alice_role)}?schema={schema}",
        keyring=KEYRING, principal="alice", policy=policy, audit=Audit(),
    ) as alice:  # fmt: skip
        await alice.save("acme/support/t1", {"n": 2})
        assert (await alice.load("acme/support/t1")).data == {"n": 2}

    # the owner still sees everything, untouched, and a verifiable audit log
    async with StateStore(owner_url, keyring=KEYRING) as owner:
        assert [a.agent_id for a in await owner.list_agents()] == [
            "acme/billing/b1", "acme/support/t1", "globex/eu/g1",
        ]  # fmt: skip
        assert (await owner.load("globex/eu/g1")).data == {"n": 2}
        assert (await owner.load("acme/billing/b1")).data == {"n": 1}
        assert (await owner.verify()).ok
        log = AuditLog(owner.backend, KEYRING)
        assert [(e.principal, e.operation, e.outcome) async for e in log.entries()] == [
            ("bob", "save", "ok"),
            ("bob", "load", "denied"),
            ("alice", "save", "ok"),
        ]
        assert (await log.verify()).ok

    await stop_enforcing_in_postgres(POSTGRES_DSN, schema, [alice_role, bob_role])
    raw = PostgresBackend(_as(alice_role), schema=schema, max_size=1, retry_timeout=1)
    try:
        with pytest.raises(StatekeeperError, match="permission denied"):
            await raw.list_agents()  # no privileges left
    finally:
        await raw.close()
