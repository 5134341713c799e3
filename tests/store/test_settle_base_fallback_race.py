"""A settle whose one ``append_together`` change (PostgreSQL, memory, SQLite without its
``replace_snapshot``: :func:`statekeeper.backends.settle_row.store_at_head`) is refused
because the row it replaces became the stream's base (another process compacted the
stream to it after settle's last look), raced again in the moment between that refusal
and the fallback's look at the base, by another process that

- deletes the agent (the settle finds no stream: nothing to store),
- deletes it and makes it again (another stream: nothing may be stored in it),
- or compacts the stream further, past that row (the same stream, its head the one
  settled: the row is stored).

Was: the fallback stored the row alone only when the base it read was still the row it
had meant to remove, and else re-raised the first commit's ``ConfigurationError``
("cannot drop the snapshot at seq 14 ...") out of ``settle`` — a refusal naming a drop
the caller never asked for, for what is a stream moved meanwhile (None) or a settle
that could be stored; an idle settle logged it as failed. The fallback's own commit is
checked at the head, so it needs no look at the base: it is made, or refused whole.
The hooks make the other process act at the named points; no timing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.memory import MemoryBackend
from statekeeper.errors import ConfigurationError, HistoryCompacted
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from ..backends._services import fresh_url
from .test_settle import _chat, _doc


async def _raced(store: StateStore, other: StateStore, window: str) -> int | None:
    """``store`` settles agent ``a`` at 16: ``other`` compacts it to 14 (the row the
    settle replaces) after the settle's last look, then acts as ``window`` says right
    after the settle's commit was refused for it (before the fallback goes on)."""
    backend = store.backend
    policy = store._writes.snapshots
    real_prepare, real_commit = policy.prepare, backend.append_together
    ran: list[str] = []
    acting: list[bool] = []  # (the other process's calls, on a shared memory engine)

    async def prepare(record: Any) -> None:
        # (after settle's last look at the head and its choice of the row to remove)
        acting.append(True)
        await apply_retention(other, RetentionPolicy.parse("* keep_last=2\n"))
        assert await other.backend.stream_bases(["a"]) == [14]
        acting.clear()
        await real_prepare(record)

    async def commit(*args: Any, **kwargs: Any) -> Any:
        try:
            return await real_commit(*args, **kwargs)
        except ConfigurationError:
            if acting or ran:
                raise
            ran.append(window)  # (refused: the other process acts right after)
            acting.append(True)
            if window in ("deleted", "remade"):
                assert await other.delete("a")
            if window == "remade":
                for n in range(1, 19):
                    await other.save("a", {"new": n})
            if window == "compacted_on":
                await apply_retention(other, RetentionPolicy.parse("* keep_last=1\n"))
                assert await other.backend.stream_bases(["a"]) == [15]
            acting.clear()
            raise

    backend.replaces_snapshots = False  # (SQLite: through append_together too)
    policy.prepare = prepare  # type: ignore[method-assign]
    backend.append_together = commit  # type: ignore[method-assign]
    try:
        return await store.settle("a")
    finally:
        policy.prepare = real_prepare  # type: ignore[method-assign]
        del backend.append_together
        assert ran == [window]


async def _check(store: StateStore, window: str) -> None:
    """What the race left loads as the other process wrote it, and verifies."""
    if window == "deleted":
        assert await store.backend.head("a") == 0
        return
    if window == "remade":
        assert (await store.load("a")).data == {"new": 18}
        assert (await store.load("a", at_seq=16)).data == {"new": 16}
    else:
        with pytest.raises(HistoryCompacted):
            await store.load("a", at_seq=14)
        for seq in (15, 16):
            assert (await store.load("a", at_seq=seq)).data == _doc(seq)
        snapshot = await store.backend.latest_snapshot("a", 16)
        assert snapshot is not None and snapshot.seq == 16  # the settle's row
    assert (await store.verify()).problems == []


_SETTLED = {"deleted": None, "remade": None, "compacted_on": 16}


@pytest.mark.parametrize("window", list(_SETTLED))
@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_a_fallback_raced_again_answers_what_the_stream_became(
    tmp_path: Path, engine: str, window: str
) -> None:
    with fresh_url(engine, tmp_path) as url:
        async with (
            StateStore(url, snapshot_every=10, settle_after=None) as store,
            StateStore(url, settle_after=None) as other,
        ):
            await _chat(store, "a", 0, 14)
            assert await store.settle("a") == 14
            await _chat(store, "a", 14, 16)
            assert await _raced(store, other, window) == _SETTLED[window]
        async with StateStore(url, cache_size=0) as fresh:
            await _check(fresh, window)


@pytest.mark.parametrize("window", list(_SETTLED))
async def test_a_fallback_raced_again_on_memory(window: str) -> None:
    shared = MemoryBackend()
    async with (
        StateStore(shared, snapshot_every=10, settle_after=None) as store,
        StateStore(shared, settle_after=None, cache_size=0) as other,
    ):
        await _chat(store, "a", 0, 14)
        assert await store.settle("a") == 14
        await _chat(store, "a", 14, 16)
        assert await _raced(store, other, window) == _SETTLED[window]
        store._cache.clear()
        await _check(store, window)
