"""A tiered store (and an instrumented one) reads every flag its engine sets as it
opens from the engine as it is then (``backends.base.OPENED_FLAGS``).

Before, ``TieredBackend`` forwarded ``audit_links`` and ``reads_audit_log`` only: over
PostgreSQL under row-level security ``tombstones_by_namespace`` stayed the class default
(False), so the store took the engine for one without a feed it may write
(``feed_deletes.has_feed``): every delete and forget through it wrote no tombstone, and
every read model kept the deleted agents. The flags an engine sets at open are
enumerated here by opening one and comparing its attributes, so a new one is not
forgotten again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from statekeeper import StateStore
from statekeeper.backends.base import OPENED_FLAGS, Backend
from statekeeper.backends.memory import MemoryBackend
from statekeeper.backends.postgres import PostgresBackend
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.backends.tiered import TieredBackend
from statekeeper.backends.url import open_backend
from statekeeper.codec.datakeys import SqliteKeyVault
from statekeeper.codec.keys import Keyring
from statekeeper.governance import Audit, parse_policy
from statekeeper.governance.policy_postgres import enforce_in_postgres
from statekeeper.governance.shredding import forget
from statekeeper.observability.observed import ObservedBackend
from statekeeper.store.feed_deletes import stream_of

from ..backends._services import (
    POSTGRES_DSN,
    REDIS_URL,
    delete_prefix,
    namespace,
    require_redis,
)
from ..feed.test_verify_tombstones import _append
from .conftest import KEYRING
from .test_postgres_row_security import _as, tenant_roles

POLICY = parse_policy(
    """\
[principals.acme-app]
admin = ["acme/**"]

[principals.ops]
admin = ["**"]
"""
)

#: flags a tiered store keeps its own value of, and why
NOT_FORWARDED_BY_TIERED = {
    # a hint (a store the engine created at open: creates skip the head's read): its
    # default, False, is correct on every engine; the tiers' new files are not one store
    "opened_new",
}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    with tenant_roles(tmp_path, "sk_rltt_", ["acme-app", "ops"]) as made:
        yield made


async def _seeded(schema: str, roles: dict[str, str], keyring: Keyring = KEYRING) -> None:
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=keyring) as owner:
        for agent_id in ("acme/a1", "acme/a2", "acme/a3", "globex/g1"):
            await owner.save(agent_id, {"n": 1})
    await enforce_in_postgres(POSTGRES_DSN, schema, POLICY, roles)


def _public(backend: Backend) -> dict[str, Any]:
    """Every public attribute of ``backend`` that is not a method."""
    found: dict[str, Any] = {}
    for name in dir(backend):
        if name.startswith("_"):
            continue
        try:
            value = getattr(backend, name)
        except Exception:  # (one that cannot be read yet)
            continue
        if not callable(value):
            found[name] = value
    return found


def _wrappers(engine: Backend) -> list[tuple[Backend, set[str]]]:
    """The wrappers of ``engine`` made before it opens, each with the flags it keeps."""
    tiered = TieredBackend(engine, hot=MemoryBackend())
    observed = ObservedBackend(engine, cast(Any, None))  # (no call is made through it)
    return [(tiered, NOT_FORWARDED_BY_TIERED), (observed, set())]


async def test_every_flag_an_engine_sets_as_it_opens_is_the_engines_through_a_wrapper(
    store: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    schema, roles = store
    await _seeded(schema, roles)
    engines: list[Backend] = [
        PostgresBackend(_as(roles["acme-app"]), schema=schema),  # row-level security on
        PostgresBackend(_as(roles["ops"]), schema=schema),
        SQLiteBackend(str(tmp_path / "new.db")),
        MemoryBackend(),
    ]
    require_redis()
    prefix = namespace(tmp_path, "sk_rltt_r_") + ":"
    engines.append(open_backend(f"{REDIS_URL}?prefix={prefix}"))
    set_at_open: set[str] = set()
    for engine in engines:
        before = _public(engine)
        wrappers = _wrappers(engine)
        await engine.head("acme/a1")  # it opens
        after = _public(engine)
        changed = {n for n in before.keys() | after.keys() if before.get(n) != after.get(n)}
        changed = {n for n in changed if isinstance(after.get(n), bool)}
        assert changed <= set(OPENED_FLAGS), "a flag set at open, not in OPENED_FLAGS"
        set_at_open |= changed
        for wrapper, kept in wrappers:
            for flag in set(OPENED_FLAGS) - kept:
                assert getattr(wrapper, flag) == getattr(engine, flag), (wrapper, flag)
        await engine.close()
    delete_prefix(prefix)
    # (the row-level security engine did set them: the comparison above is not empty)
    assert set_at_open >= {"audit_links", "reads_audit_log", "tombstones_by_namespace"}


async def test_a_tenants_delete_and_forget_through_a_tiered_store_leave_their_tombstones(
    store: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    schema, roles = store
    vault = SqliteKeyVault(str(tmp_path / "vault.db"))
    keyring = Keyring({"k1": bytes(range(32))}, data_keys=vault)
    await _seeded(schema, roles, keyring)
    tier = TieredBackend(open_backend(f"{_as(roles['acme-app'])}?schema={schema}"))
    async with StateStore(tier, keyring=keyring) as acme:
        assert await acme.delete("acme/a1")
        await forget(acme, "acme/a2")
    async with StateStore(f"{_as(roles['ops'])}?schema={schema}", keyring=keyring) as ops:
        tombs = [
            (c.agent_id, c.seq, bool(c.event.info.get("forgotten")))
            async for c in ops.subscribe(stop_at_head=True)
            if c.deleted
        ]
        assert tombs == [("acme/a1", 1, False), ("acme/a2", 1, True)]  # ([] before)
        assert (await ops.verify()).ok


async def test_verify_names_a_namespaces_tombstone_record_that_does_not_open(
    store: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    """Under row-level security too: a tenant's role may append a record that does not
    open to its namespace's tombstone stream; the store admin's verify names it."""
    schema, roles = store
    await _seeded(schema, roles)
    async with StateStore(f"{_as(roles['acme-app'])}?schema={schema}", keyring=KEYRING) as acme:
        assert await acme.delete("acme/a1")
        stream = stream_of(acme.backend, "acme/a1")
        assert stream != stream_of(MemoryBackend(), "acme/a1")  # (the namespace's own)
        damaged = await _append(acme, stream, {"agent_id": "acme/a3", "head": 1}, damaged=True)
    url = f"{_as(roles['ops'])}?schema={schema}"
    governed = {"principal": "ops", "policy": POLICY, "audit": Audit()}
    async with StateStore(url, keyring=KEYRING, **governed) as ops:  # type: ignore[arg-type]
        problems = [(p.agent_id, p.seq, p.kind) for p in (await ops.verify()).problems]
        assert problems == [(stream, damaged, "feed")]  # ([] before)
