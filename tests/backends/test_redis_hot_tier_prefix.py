"""A backend of copies (a tiered store's hot tier, an ``?evictable=1`` cache) is refused
on a Redis prefix that holds a store of record: it checks no identity marker and no
presence, and its writes replaced the store's agents — a tiered store whose hot tier
took the default prefix of a Redis store on the same server turned that store's agent
at seq 5 into the tiered store's at seq 2, without an error anywhere."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("redis")

from statekeeper import StateStore
from statekeeper.backends.redis import RedisBackend
from statekeeper.backends.url import tiered_url
from statekeeper.errors import ConfigurationError

from ._services import REDIS_URL


async def test_a_hot_tier_on_a_store_of_records_prefix_leaves_its_agents(
    prefix: str, tmp_path: Path
) -> None:
    record = f"{REDIS_URL}?prefix={prefix}"
    async with StateStore(record, witness=False) as store:
        for n in range(1, 6):
            await store.save("a", {"record": n})
    hot = f"{REDIS_URL}?prefix={prefix}"
    url = tiered_url(hot=hot, durable=f"sqlite:///{tmp_path / 'durable.db'}")
    async with StateStore(url, witness=False) as tiered:
        for n in (1, 2):  # (refused each time: not a down hot tier, passed over)
            with pytest.raises(ConfigurationError, match="holds a store of record"):
                await tiered.save("a", {"tiered": n})
    async with StateStore(record, witness=False) as store:
        state = await store.load("a")
        assert (state.seq, state.data) == (5, {"record": 5})
    async with StateStore(f"sqlite:///{tmp_path / 'durable.db'}", witness=False) as durable:
        assert await durable.list_agents() == []  # (refused before the durable write)


async def test_a_misconfigured_hot_tier_fails_the_first_write_not_a_warning_each_time(
    prefix: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A hot tier refusing its configuration used to show only as a repeated "hot tier
    failed ... using the durable tier" warning, the store running without it for ever."""
    async with StateStore(f"{REDIS_URL}?prefix={prefix}", witness=False) as store:
        await store.save("a", {"n": 1})
    url = tiered_url(hot=f"{REDIS_URL}?prefix={prefix}", durable=f"sqlite:///{tmp_path / 'd.db'}")
    async with StateStore(url, witness=False) as tiered:
        for agent_id in ("b", "c"):
            with pytest.raises(ConfigurationError, match="hot tier refused"):
                await tiered.save(agent_id, {"n": 1})
    assert "hot tier failed" not in caplog.text


async def test_an_evictable_cache_is_refused_on_a_store_of_record(prefix: str) -> None:
    async with StateStore(f"{REDIS_URL}?prefix={prefix}", witness=False) as store:
        await store.save("a", {"n": 1})
    cache = RedisBackend(REDIS_URL, prefix=prefix, evictable=True)
    try:
        with pytest.raises(ConfigurationError, match="holds a store of record"):
            await cache.open()
    finally:
        await cache.close()
    own = RedisBackend(REDIS_URL, prefix=prefix + "cache:", evictable=True)
    try:
        await own.open()  # (a prefix of its own)
    finally:
        await own.close()


OPERATIONS = [
    "delete_agent", "delete_agent_at", "rewrite", "prune", "rename_keys", "from_base", "demote"
]  # fmt: skip


@pytest.mark.parametrize("operation", OPERATIONS)
async def test_a_misconfigured_hot_tier_refuses_every_write_before_the_durable_tier(
    prefix: str, tmp_path: Path, operation: str
) -> None:
    """Only appends and snapshots asked the hot tier before their durable write: a
    delete, a rewrite (``migrate``, ``rekey``, ``rollback``), a compaction, a key
    rename or a compacted create as the first write of a process committed in the
    durable tier, THEN raised the hot tier's ConfigurationError (a demotion too):
    reported failed though applied (a rekey's audit entry voided over re-encrypted
    records, a delete's feed tombstone and audit entry never written, a retry "not
    found")."""
    from statekeeper.backends.tiered import TieredBackend
    from statekeeper.records import AppendRequest, RawEvent, RewriteRequest

    durable_url = f"sqlite:///{tmp_path / 'durable.db'}"
    async with StateStore(durable_url, witness=False) as durable:
        for n in range(3):
            await durable.save("a", {"n": n}, idempotency_key=f"k{n}")
        await durable.snapshot("a")
        await durable.save("a", {"n": 3})
        before = await _everything(durable.backend)
        assert before[3] is not None
    async with StateStore(f"{REDIS_URL}?prefix={prefix}", witness=False) as record:
        await record.save("x", {"record": 1})
    cold = f"sqlite:///{tmp_path / 'cold.db'}" if operation == "demote" else None
    hot = f"{REDIS_URL}?prefix={prefix}"
    tiered = TieredBackend.from_url(tiered_url(hot=hot, durable=durable_url, cold=cold))
    try:
        head, tag = await tiered.head_tag("a")  # (the durable tier's: no hot call)
        snap = before[3]
        event = RawEvent(1, "patch", 1.0, b"rewritten", b"sum")
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "delete_agent": lambda: tiered.delete_agent("a"),
            "delete_agent_at": lambda: tiered.delete_agent_at("a", head),
            "rewrite": lambda: tiered.rewrite(RewriteRequest("a", head, tag, (event,))),
            "prune": lambda: tiered.prune("a", snap.seq),
            "rename_keys": lambda: tiered.rename_keys("a", [(before[2][0][0], "renamed")]),
            "from_base": lambda: tiered.append_from_base(
                AppendRequest("b", snap.seq, [dataclasses.replace(event, seq=snap.seq + 1)]),
                dataclasses.replace(snap),
            ),
            "demote": lambda: tiered.demote("a"),
        }
        with pytest.raises(ConfigurationError, match="holds a store of record"):
            await calls[operation]()
    finally:
        await tiered.close()
    async with StateStore(durable_url, witness=False) as durable:
        assert await _everything(durable.backend) == before  # nothing of it written


async def _everything(backend: Any) -> tuple[Any, ...]:
    agents = [info.agent_id for info in await backend.list_agents()]
    return (
        agents,
        [await backend.read(agent_id) for agent_id in agents],
        await backend.idempotency_keys("a"),
        await backend.latest_snapshot("a"),
    )
