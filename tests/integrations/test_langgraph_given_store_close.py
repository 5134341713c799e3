"""A store given to ``StatekeeperSaver(store)`` (the saver does not close it) is driven
on the saver's own event loop, which ``saver.close()`` closes. Closing the store after
that, on another loop, raised an untyped ``RuntimeError: Event loop is closed`` on
PostgreSQL (closing its pool) and Redis (closing its client), and on PostgreSQL each of
the pool's tasks printed the error again when collected ("Task was destroyed but it is
pending!"). Seen by a reviewer as a tenant role under row security, but any role and
any store so given did it; ``from_url`` / ``afrom_url`` savers closed as documented
were clean, as a tenant too (the second test). Now such a close is clean: the backend
closed, its idle connections ended, its dead loop's tasks closed quietly."""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.errors import StoreClosed
from statekeeper.integrations.langgraph import StatekeeperSaver

from ..backends._services import POSTGRES_DSN, fresh_url

_CONFIG = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}


def _checkpoint(i: int) -> dict[str, Any]:
    return {
        "v": 4,
        "id": f"1ef4f797-8335-6428-800{i}-8a1503f9b875",
        "ts": "2024-05-04T06:32:42.235444+00:00",
        "channel_values": {"n": i},
        "channel_versions": {"n": i},
        "versions_seen": {},
        "updated_channels": ["n"],
    }


def _work(saver: StatekeeperSaver) -> None:
    """put, put_writes, get, prune: the reviewer's order."""
    config: Any = _CONFIG
    for i in (1, 2, 3):
        config = saver.put(config, _checkpoint(i), {"source": "input", "step": i}, {"n": i})  # type: ignore[arg-type]
        saver.put_writes(config, [("n", i)], task_id=f"task-{i}")
    got = saver.get_tuple({"configurable": {"thread_id": "t1"}})
    assert got is not None and got.checkpoint["channel_values"] == {"n": 3}
    saver.prune(["t1"], strategy="keep_latest")
    assert len(list(saver.list({"configurable": {"thread_id": "t1"}}))) == 1


def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    """Nothing printed as the dead loop's tasks are collected: each printed "Event loop
    is closed" (an unraisable error) and asyncio's "Task was destroyed"."""
    seen: list[str] = []
    before = sys.unraisablehook
    sys.unraisablehook = lambda raised: seen.append(repr(raised.exc_value))
    try:
        gc.collect()
    finally:
        sys.unraisablehook = before
    noisy = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert (seen, noisy) == ([], [])


@pytest.mark.parametrize("engine", ["postgresql", "redis", "sqlite"])
def test_a_given_store_closes_after_the_saver(
    engine: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="asyncio")
    with fresh_url(engine, tmp_path) as url:
        store = StateStore(url)
        with StatekeeperSaver(store) as saver:  # (your store stays open)
            _work(saver)
        asyncio.run(store.close())  # was: RuntimeError: Event loop is closed
        asyncio.run(store.close())  # (idempotent)
        with pytest.raises(StoreClosed):
            asyncio.run(store.load("t1"))
        del store, saver
        _quiet(caplog)

        async def kept() -> int:
            async with StateStore(url) as again:
                return await again.count_agents()

        assert asyncio.run(kept()) >= 1  # (what the saver wrote is there)


def test_a_tenant_roles_saver_closes_cleanly_under_row_security(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As a tenant's database role (row security installed), a saver opened by
    ``from_url`` closed with ``with``, one of ``afrom_url`` with ``async with`` on its
    loop, and a given store closed after its saver: no error, nothing logged."""
    from statekeeper.governance import Audit, parse_policy
    from statekeeper.governance.policy_postgres import enforce_in_postgres

    from ..governance._keyring import KEYRING
    from ..governance.test_postgres_row_security import _as, tenant_roles

    caplog.set_level(logging.ERROR, logger="asyncio")
    policy = parse_policy(
        '[principals.alice]\nwrite = ["acme/**"]\n[principals.ops]\nadmin = ["**"]\n'
    )
    with tenant_roles(tmp_path, "sk_lgc_", ["alice"]) as (schema, roles):

        async def install() -> None:
            async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
                await owner.save("acme/x", {"n": 1})
            await enforce_in_postgres(POSTGRES_DSN, schema, policy, roles=roles)

        asyncio.run(install())
        url = f"{_as(roles['alice'])}?schema={schema}"
        opts: dict[str, Any] = {"keyring": KEYRING, "principal": "alice", "policy": policy}
        with StatekeeperSaver.from_url(url, audit=Audit(), prefix="acme/a/", **opts) as saver:
            _work(saver)

        async def bound() -> None:
            async with await StatekeeperSaver.afrom_url(
                url, audit=Audit(), prefix="acme/b/", **opts
            ) as saver:
                config: Any = _CONFIG
                config = await saver.aput(config, _checkpoint(1), {"step": 1}, {"n": 1})
                await saver.aput_writes(config, [("n", 1)], task_id="task-1")
                assert await saver.aget_tuple(config) is not None

        asyncio.run(bound())
        store = StateStore(url, audit=Audit(), **opts)
        with StatekeeperSaver(store, prefix="acme/c/") as saver:
            _work(saver)
        asyncio.run(store.close())  # was: RuntimeError: Event loop is closed
        del store, saver
        _quiet(caplog)
