"""A restored store verifies clean and cold-loads from its snapshots without a warning
when a stream's latest snapshot in the backup is a delta: a tail snapshot (the default
policy, SQLite) or a delta of ``full_snapshot_every`` (every engine), whose base the
backup does not carry. The restore rebuilds it whole at the same seq from the restored
events (governance/backup/wholesnaps.py) — for a full backup, a chain of incrementals,
a namespace's backup and a stream compacted by retention, from and into every engine,
with and without keys.

Before that fix, every case here failed: ``verify`` reported "the base snapshot (seq
N) is missing" and each cold load logged it and replayed the whole stream.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.codec.keys import Keyring
from statekeeper.errors import HistoryCompacted
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from ..backends._services import fresh_url

#: the default policy: whole snapshots and tail snapshots between them (SQLite only)
TAILS: dict[str, Any] = {"snapshot_every": "bounded"}
#: a delta snapshot every snapshot but each third (every engine writes those)
DELTAS: dict[str, Any] = {"snapshot_every": 8, "full_snapshot_every": 3}
#: heads whose latest snapshot is a delta under both (tails: whole at 61, a tail at 69;
#: deltas: whole at 48, deltas at 56 and 64) and one at a whole snapshot
HEADS = {"a": 70, "b": 66, "c": 48}


def chat(n: int) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": f"m{i} " + "x" * 120} for i in range(n)]}


def keys() -> Keyring:
    return Keyring({"k1": bytes(range(32))})


@contextmanager
def stores(tmp_path: Path, source: str, target: str) -> Iterator[tuple[str, str]]:
    (tmp_path / "src").mkdir()
    (tmp_path / "dst").mkdir()
    with (
        fresh_url(source, tmp_path / "src") as src_url,
        fresh_url(target, tmp_path / "dst") as dst_url,
    ):
        yield src_url, dst_url


async def fill(store: StateStore, heads: dict[str, int], start: int = 1) -> None:
    for agent, head in heads.items():
        for n in range(start, head + 1):
            await store.save(agent, chat(n))


async def latest_snapshots(store: StateStore, heads: dict[str, int]) -> dict[str, int | None]:
    found = {}
    for agent, head in heads.items():
        raw = await store.backend.latest_snapshot(agent, head)
        found[agent] = raw.seq if raw is not None else None
    return found


async def check_restored(
    dst: StateStore, heads: dict[str, int], snapshots: dict[str, int | None], caplog: Any
) -> None:
    """``dst`` verifies clean, keeps each stream's snapshot at the backed-up seq, and
    loads each agent cold (no cache) at its head without a warning."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="statekeeper"):
        report = await dst.verify()
        assert report.ok, [p.reason for p in report.problems]
        assert await latest_snapshots(dst, heads) == snapshots
        for agent, head in heads.items():
            state = await dst.load(agent)
            assert state.seq == head and state.data == chat(head), agent
    assert [r.getMessage() for r in caplog.records if r.name.startswith("statekeeper")] == []


FULL = [
    ("sqlite", "sqlite", TAILS),
    ("sqlite", "memory", TAILS),
    ("sqlite", "postgresql", TAILS),
    ("sqlite", "redis", TAILS),
    ("memory", "memory", DELTAS),
    ("memory", "sqlite", DELTAS),
    ("sqlite", "sqlite", DELTAS),
    ("postgresql", "postgresql", DELTAS),
    ("postgresql", "sqlite", DELTAS),
    ("redis", "redis", DELTAS),
    ("redis", "memory", DELTAS),
]


@pytest.mark.parametrize(("source", "target", "policy"), FULL)
async def test_a_full_backup_restores_clean(
    tmp_path: Path, source: str, target: str, policy: dict[str, Any], caplog: Any
) -> None:
    key = BackupKey(os.urandom(32))
    with stores(tmp_path, source, target) as (src_url, dst_url):
        async with StateStore(src_url, **policy) as src:
            await fill(src, HEADS)
            snapshots = await latest_snapshots(src, HEADS)
            await backup(src, tmp_path / "full.skb", key)
        async with StateStore(dst_url, cache_size=0) as dst:
            await restore(dst, [tmp_path / "full.skb"], key)
            await check_restored(dst, HEADS, snapshots, caplog)


@pytest.mark.parametrize(("engine", "policy"), [("sqlite", TAILS), ("postgresql", DELTAS)])
async def test_a_keyed_store_restores_clean(
    tmp_path: Path, engine: str, policy: dict[str, Any], caplog: Any
) -> None:
    key = BackupKey(os.urandom(32))
    with stores(tmp_path, engine, engine) as (src_url, dst_url):
        async with StateStore(src_url, keyring=keys(), **policy) as src:
            await fill(src, HEADS)
            snapshots = await latest_snapshots(src, HEADS)
            await backup(src, tmp_path / "full.skb", key)
        async with StateStore(dst_url, keyring=keys(), cache_size=0) as dst:
            await restore(dst, [tmp_path / "full.skb"], key)
            await check_restored(dst, HEADS, snapshots, caplog)


INCREMENTAL = [
    ("sqlite", "sqlite", TAILS),
    ("sqlite", "postgresql", TAILS),
    ("postgresql", "memory", DELTAS),
    ("redis", "sqlite", DELTAS),
]


@pytest.mark.parametrize(("source", "target", "policy"), INCREMENTAL)
async def test_a_chain_of_incrementals_restores_clean(
    tmp_path: Path, source: str, target: str, policy: dict[str, Any], caplog: Any
) -> None:
    """The full backup at seq 30 of each stream, the incremental carrying the rest
    (the latest snapshot, a delta, among it)."""
    key = BackupKey(os.urandom(32))
    full, inc = tmp_path / "full.skb", tmp_path / "inc.skb"
    with stores(tmp_path, source, target) as (src_url, dst_url):
        async with StateStore(src_url, **policy) as src:
            await fill(src, dict.fromkeys(HEADS, 30))
            await backup(src, full, key)
            await fill(src, HEADS, start=31)
            snapshots = await latest_snapshots(src, HEADS)
            await backup(src, inc, key, since=full)
        async with StateStore(dst_url, cache_size=0) as dst:
            await restore(dst, [full, inc], key)
            await check_restored(dst, HEADS, snapshots, caplog)


@pytest.mark.parametrize(
    ("source", "target", "policy"), [("sqlite", "sqlite", TAILS), ("postgresql", "sqlite", DELTAS)]
)
async def test_a_namespace_backup_restores_clean(
    tmp_path: Path, source: str, target: str, policy: dict[str, Any], caplog: Any
) -> None:
    key = BackupKey(os.urandom(32))
    inside = {f"acme/{a}": head for a, head in HEADS.items()}
    with stores(tmp_path, source, target) as (src_url, dst_url):
        async with StateStore(src_url, **policy) as src:
            await fill(src, {**inside, "other/a": 70})
            snapshots = await latest_snapshots(src, inside)
            async with StateStore(src_url, namespace="acme", **policy) as tenant:
                await backup(tenant, tmp_path / "acme.skb", key)
        async with StateStore(dst_url, cache_size=0) as dst:
            await restore(dst, [tmp_path / "acme.skb"], key)
            assert await dst.count_agents() == len(inside)
            await check_restored(dst, inside, snapshots, caplog)


@pytest.mark.parametrize(
    ("source", "target", "policy", "keep"),
    [
        ("sqlite", "sqlite", TAILS, 20),
        ("sqlite", "sqlite", DELTAS, 20),
        ("postgresql", "memory", DELTAS, 20),
    ],
)
async def test_a_stream_compacted_by_retention_restores_clean(
    tmp_path: Path, source: str, target: str, policy: dict[str, Any], keep: int, caplog: Any
) -> None:
    """Retention keeps a base snapshot and the delta chain after it; the delta the
    backup carries is rebuilt from the base and the events after it."""
    key = BackupKey(os.urandom(32))
    heads = {"t0/a": 70}
    with stores(tmp_path, source, target) as (src_url, dst_url):
        async with StateStore(src_url, **policy) as src:
            await fill(src, heads)
            await apply_retention(src, RetentionPolicy.parse(f"t0 keep_last={keep}\n"))
            assert (await src.verify()).ok
            snapshots = await latest_snapshots(src, heads)
            await backup(src, tmp_path / "full.skb", key)
        async with StateStore(dst_url, cache_size=0) as dst:
            await restore(dst, [tmp_path / "full.skb"], key)
            await check_restored(dst, heads, snapshots, caplog)
            with pytest.raises(HistoryCompacted):  # compacted in the target too
                await dst.load("t0/a", at_seq=1)


async def test_an_audited_restore_records_the_rebuild_and_its_log_verifies(
    tmp_path: Path, caplog: Any
) -> None:
    """On a target with an audit log the rebuilt snapshot is a ``repair`` entry naming
    it (as ``statekeeper repair`` records one), and ``audit verify`` finds nothing."""
    key = BackupKey(os.urandom(32))
    policy = parse_policy('[principals.ops]\nadmin = ["**"]\n')
    async with StateStore(f"sqlite:///{tmp_path / 'src.db'}", keyring=keys(), **TAILS) as src:
        await fill(src, HEADS)
        snapshots = await latest_snapshots(src, HEADS)
        await backup(src, tmp_path / "full.skb", key)
    target = f"sqlite:///{tmp_path / 'dst.db'}"
    async with StateStore(
        target, keyring=keys(), principal="ops", policy=policy, audit=Audit(), cache_size=0
    ) as dst:
        await restore(dst, [tmp_path / "full.skb"], key)
        await check_restored(dst, HEADS, snapshots, caplog)
        log = AuditLog(dst.backend, keys())
        entries = [(e.operation, e.agent_id) async for e in log.entries()]
        assert ("repair", "a") in entries and ("restore", None) in entries
        report = await log.verify()
        assert report.problems == [] and report.unchecked == {}
