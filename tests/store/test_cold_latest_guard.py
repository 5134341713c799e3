"""A cold load of the latest state never serves a state older than the stream's head,
wherever the head sits relative to the snapshots and whatever moved it.

The guards a faster cold load must keep (issue 11: "the latest state readable in one
query", "the head state kept materialised"; docs/benchmarks.md, "cold1q"): a reader
with no cache — another store on the same file, as another process has — loads the
writer's latest state after every save past a whole snapshot and past each tail, after
a delete and re-creation with a shorter stream (an incarnation whose head is below the
old one's snapshots), after a restore from a backup, and not at all after ``forget``.
Time travel around the snapshots answers each save's own state.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.codec.datakeys import SqliteKeyVault
from statekeeper.codec.keys import Keyring
from statekeeper.errors import AgentForgotten, AgentNotFound
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.shredding import forget

#: the default policy (whole snapshots and tails between them) and a fixed interval
POLICIES: tuple[Any, ...] = ("bounded", 8)


def chat(n: int) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": f"m{i} " + "x" * 120} for i in range(n)]}


def url(path: Path) -> str:
    return f"sqlite:///{path}"


@pytest.mark.parametrize("policy", POLICIES)
async def test_a_cold_reader_loads_the_head_after_every_save(tmp_path: Path, policy: Any) -> None:
    path = tmp_path / "s.db"
    async with (
        StateStore(url(path), snapshot_every=policy) as writer,
        StateStore(url(path), cache_size=0) as reader,
    ):
        for n in range(1, 75):
            await writer.save("a", chat(n))
            state = await reader.load("a")
            assert state.seq == n and state.data == chat(n), n
        backend = writer.backend
        assert isinstance(backend, SQLiteBackend)
        snapshots = [s.seq for s in backend.snapshots_now("a", 0, 75)]
        # the head sat at, one past and many past a snapshot along the way
        assert len(snapshots) >= 2 and snapshots[-1] < 74
        for n in (1, *sorted(snapshots), 74):  # time travel at and around each of them
            for seq in {n - 1, n, n + 1} & set(range(1, 75)):
                assert (await reader.load("a", at_seq=seq)).data == chat(seq), seq


@pytest.mark.parametrize("policy", POLICIES)
async def test_a_re_created_agent_below_its_old_snapshots_loads_the_new_stream(
    tmp_path: Path, policy: Any
) -> None:
    path = tmp_path / "s.db"
    async with (
        StateStore(url(path), snapshot_every=policy) as writer,
        StateStore(url(path), cache_size=0) as reader,
    ):
        for n in range(1, 40):
            await writer.save("a", chat(n))
        assert (await reader.load("a")).data == chat(39)
        assert await writer.delete("a")
        with pytest.raises(AgentNotFound):
            await reader.load("a")
        for n in (1, 2, 3):  # the next incarnation: a head below every old snapshot
            await writer.save("a", {"new": n})
            state = await reader.load("a")
            assert state.seq == n and state.data == {"new": n}
        async with StateStore(url(path), cache_size=0) as fresh:  # a fresh process's read
            assert (await fresh.load("a")).data == {"new": 3}


HEADS = {"k0": 24, "k1": 25, "k9": 33, "k40": 64, "k70": 70}
#: policies whose latest snapshot at some of :data:`HEADS` is a tail (``"bounded"``:
#: whole at 61, a tail at 69; 24: whole at 24 and 48, tails between and after)
RESTORED = ("bounded", 24)


async def _restored(tmp_path: Path, policy: Any) -> StateStore:
    """A store restored from a backup of agents saved up to :data:`HEADS` (one more
    save of ``k0`` after the backup, not restored), on a target that held ``k0`` once."""
    key = BackupKey(os.urandom(32))
    async with StateStore(url(tmp_path / "src.db"), snapshot_every=policy) as src:
        for agent, head in HEADS.items():
            for n in range(1, head + 1):
                await src.save(agent, chat(n))
        assert (await src.verify()).ok
        await backup(src, tmp_path / "full.skb", key)
        await src.save("k0", chat(99))
    dst = StateStore(url(tmp_path / "dst.db"), cache_size=0)
    await dst.save("k0", {"before": "the restore"})
    await dst.delete("k0")
    await restore(dst, [tmp_path / "full.skb"], key)
    return dst


@pytest.mark.parametrize("policy", RESTORED)
async def test_a_restored_store_loads_each_agent_at_its_backed_up_head(
    tmp_path: Path, policy: Any
) -> None:
    async with await _restored(tmp_path, policy) as dst:
        for agent, head in HEADS.items():
            state = await dst.load(agent)
            assert state.seq == head and state.data == chat(head), agent


@pytest.mark.parametrize("policy", RESTORED)
async def test_a_restored_store_verifies_and_loads_from_its_snapshots(
    tmp_path: Path, policy: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A tail snapshot restored without its base is rebuilt whole by the restore
    (governance/backup/wholesnaps.py): ``verify`` finds nothing, no load warns."""
    with caplog.at_level(logging.WARNING, logger="statekeeper"):
        async with await _restored(tmp_path, policy) as dst:
            assert (await dst.verify()).ok
            for agent, head in HEADS.items():  # cold (no cache), from the snapshots
                assert (await dst.load(agent)).data == chat(head), agent
    assert [r.getMessage() for r in caplog.records if r.name.startswith("statekeeper")] == []


async def test_a_forgotten_agent_is_unreadable_to_a_cold_reader(tmp_path: Path) -> None:
    vault = tmp_path / "vault.db"

    def keys() -> Keyring:
        return Keyring({"k1": bytes(range(32))}, data_keys=SqliteKeyVault(vault))

    path = tmp_path / "s.db"
    async with StateStore(url(path), keyring=keys(), snapshot_every=8) as writer:
        for n in range(1, 20):  # the head 3 past a whole snapshot
            await writer.save("a", chat(n))
            await writer.save("b", chat(n))
        # (a reader that opened "a" before keeps its data key until it reopens:
        # governance/shredding.py; this one has read only "b")
        async with StateStore(url(path), keyring=keys(), cache_size=0) as reader:
            assert (await reader.load("b")).data == chat(19)
            await forget(writer, "a")
            with pytest.raises(AgentForgotten):
                await reader.load("a")
            assert (await reader.load("b")).data == chat(19)
    async with StateStore(url(path), keyring=keys(), cache_size=0) as fresh:
        with pytest.raises(AgentForgotten):
            await fresh.load("a")
