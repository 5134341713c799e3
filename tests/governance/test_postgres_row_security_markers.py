"""The store-level markers under row-level security: a tenant's role sets only the
markers its own work sets.

Before, ``sk_markers``' insert policy let any role that may write some namespace set
any marker, and a marker is the whole store's. One statement of ``acme``'s role (its
application, holding ``write`` on ``acme/**`` only) then:

* ``INSERT INTO sk_markers VALUES ('legal-holds')`` on a store without holds: every
  purge of every tenant refused from then on ("the legal holds are missing":
  ``globex`` could no longer delete its own agents), and no role but the owner can clear
  a marker;
* ``INSERT INTO sk_markers VALUES ('feed-id:9999999999:…')``: a new generation of the
  store's id, so every subscriber's cursor, ``globex``'s too, is refused with
  ``FeedChanged`` (rebuild every read model).

Now "audit-log" is every role's, "encrypted" and the first feed id a writer's (its
first write with a key, the store's first use), and a new feed id generation (a store
administrator's restore renews it; a tenant admin's leaves it) and every other name
(the legal holds') only the roles of admins of every namespace, who alone write the
holds.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from statekeeper import StateStore
from statekeeper.errors import AccessDenied
from statekeeper.governance import parse_policy
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.holds import add_hold
from statekeeper.governance.policy_postgres import enforce_in_postgres

from ..backends._services import POSTGRES_DSN
from .conftest import KEYRING
from .test_postgres_row_security import _as, _pg, tenant_roles

POLICY = parse_policy(
    """\
[principals.acme-app]
write = ["acme/**"]

[principals.acme-admin]
admin = ["acme/**"]

[principals.globex-app]
write = ["globex/**"]

[principals.ops]
admin = ["**"]
"""
)
PRINCIPALS = ("acme-app", "acme-admin", "globex-app", "ops")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    with tenant_roles(tmp_path, "sk_rlm_", PRINCIPALS) as made:
        yield made


def _open(schema: str, roles: dict[str, str], principal: str) -> StateStore:
    return StateStore(
        f"{_as(roles[principal])}?schema={schema}", keyring=KEYRING,
        principal=principal, policy=POLICY,
    )  # fmt: skip


def _insert_marker(schema: str, role: str, name: str) -> None:
    with psycopg.connect(f"{_as(role)}", autocommit=True) as conn:
        conn.execute(f"INSERT INTO {schema}.sk_markers (name) VALUES (%s)", (name,))


def _markers(schema: str) -> set[str]:
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        return {str(r[0]) for r in conn.execute(f"SELECT name FROM {schema}.sk_markers")}


async def test_a_tenant_role_cannot_mark_the_store_as_keeping_legal_holds(
    store: tuple[str, dict[str, str]],
) -> None:
    schema, roles = store
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        await owner.save("globex/g1", {"n": 1})
    await enforce_in_postgres(POSTGRES_DSN, schema, POLICY, roles=roles)
    for tenant in ("acme-app", "acme-admin"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            _insert_marker(schema, roles[tenant], "legal-holds")
        async with _open(schema, roles, tenant) as acme:
            with pytest.raises(AccessDenied):
                await acme.backend.set_marker("legal-holds")
    assert "legal-holds" not in _markers(schema)
    # so globex still deletes its own agents
    async with _open(schema, roles, "globex-app") as globex:
        assert await globex.delete("globex/g1")
    # the admin of every namespace places the holds, and their marker with them
    async with _open(schema, roles, "ops") as ops:
        await add_hold(ops, "globex/*", "audit")
    assert "legal-holds" in _markers(schema)


async def test_a_tenant_role_cannot_renew_the_store_id_under_everyones_cursors(
    store: tuple[str, dict[str, str]],
) -> None:
    schema, roles = store
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        await owner.save("globex/g1", {"n": 1})
    await enforce_in_postgres(POSTGRES_DSN, schema, POLICY, roles=roles)
    async with _open(schema, roles, "globex-app") as globex:
        sub = globex.subscribe(stop_at_head=True)
        assert [c.agent_id async for c in sub] == ["globex/g1"]
        cursor = sub.cursor
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        _insert_marker(schema, roles["acme-app"], "feed-id:9999999999:0123456789abcdef")
    async with _open(schema, roles, "acme-app") as acme:
        with pytest.raises(AccessDenied):
            await acme.backend.renew_feed_id()
    async with _open(schema, roles, "globex-app") as globex:
        await globex.save("globex/g1", {"n": 2})
        resumed = [c.event.seq async for c in globex.subscribe(cursor, stop_at_head=True)]
        assert resumed == [2]
    # a restore's renewal is a store administrator's (the admins of every namespace):
    # acme's admin may not renew the id globex's cursor names either (was: allowed,
    # though its restore no longer renews it: one INSERT refused every tenant's cursor)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        _insert_marker(schema, roles["acme-admin"], "feed-id:9999999999:0123456789abcdef")
    async with _open(schema, roles, "acme-admin") as acme_admin:
        with pytest.raises(AccessDenied):
            await acme_admin.backend.renew_feed_id()
    async with _open(schema, roles, "globex-app") as globex:
        resumed = [c.event.seq async for c in globex.subscribe(cursor, stop_at_head=True)]
        assert resumed == [2]
    async with _open(schema, roles, "ops") as ops:
        assert await ops.backend.renew_feed_id()


async def test_a_tenant_admins_restore_under_row_security_leaves_the_id(
    store: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    """acme's admin role restores acme's agents (its restore renews nothing: a store
    administrator's does), and globex's cursor resumes after it."""
    schema, roles = store
    key = BackupKey(os.urandom(32))
    async with StateStore(f"sqlite:///{tmp_path / 'src.db'}", keyring=KEYRING) as source:
        await source.save("acme/a1", {"n": 1})
        await backup(source, tmp_path / "acme.skb", key)
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        await owner.save("globex/g1", {"n": 1})
        feed = await owner.backend.feed_id()
    await enforce_in_postgres(POSTGRES_DSN, schema, POLICY, roles=roles)
    async with _open(schema, roles, "globex-app") as globex:
        sub = globex.subscribe(stop_at_head=True)
        assert [c.agent_id async for c in sub] == ["globex/g1"]
        cursor = sub.cursor
    async with _open(schema, roles, "acme-admin") as acme_admin:
        assert (await restore(acme_admin, [tmp_path / "acme.skb"], key)).agents == 1
        assert await acme_admin.backend.feed_id() == feed
    async with _open(schema, roles, "globex-app") as globex:
        await globex.save("globex/g1", {"n": 2})
        resumed = [c.event.seq async for c in globex.subscribe(cursor, stop_at_head=True)]
        assert resumed == [2]


async def test_a_writer_still_sets_the_markers_its_own_first_writes_set(
    store: tuple[str, dict[str, str]],
) -> None:
    schema, roles = store
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}") as owner:  # made, nothing set
        await owner.count_agents()
    _pg(f"DELETE FROM {schema}.sk_markers")
    await enforce_in_postgres(POSTGRES_DSN, schema, POLICY, roles=roles)
    async with _open(schema, roles, "acme-app") as acme:
        assert await acme.backend.feed_id()  # the store's first use: its id made
        await acme.save("acme/a1", {"n": 1})  # its first write with a key
        await acme.backend.set_marker("audit-log")
    found = _markers(schema)
    assert "encrypted" in found and "audit-log" in found
    assert len([m for m in found if m.startswith("feed-id:")]) == 1
