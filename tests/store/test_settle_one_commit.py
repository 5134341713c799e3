"""A settle in one commit where the engine can (``Backend.replace_snapshot``, SQLite):
the whole row and the removal of the row it replaces committed together, at the head's
identity. Was: two commits (``save_snapshot``, then ``prune``: ~60 % of a settle's time,
docs/benchmarks.md "settle11"); the engines without it commit one ``append_together``
change instead (:mod:`statekeeper.backends.settle_row`; their races:
tests/store/test_settle*.py with ``replaces_snapshots = False``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from .test_settle import _chat, _doc, _remade_at, _snapshots, _url


async def test_a_settle_is_one_commit_on_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with StateStore(_url(path), snapshot_every=100, settle_after=None) as store:
        await _chat(store, "a", 0, 120)
        assert await store.settle("a") == 120
        await _chat(store, "a", 120, 122)
        writes = 0
        real = store.backend._write  # type: ignore[attr-defined]

        async def counted(*args: Any, **kwargs: Any) -> Any:
            nonlocal writes
            writes += 1
            return await real(*args, **kwargs)

        store.backend._write = counted  # type: ignore[attr-defined]
        assert await store.settle("a") == 122
        assert writes == 1  # (two before: the row, then the removal)
        assert 120 not in _snapshots(path) and _snapshots(path)[-1] == 122  # replaced
        for seq in (101, 120, 121, 122):
            assert (await store.load("a", at_seq=seq)).data == _doc(seq)
        assert (await store.verify()).problems == []


async def test_a_failure_inside_the_commit_leaves_the_chain_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with StateStore(_url(path), snapshot_every=100, settle_after=None) as store:
        await _chat(store, "a", 0, 120)
        assert await store.settle("a") == 120
        await _chat(store, "a", 120, 122)
        before = _snapshots(path)
        real = store.backend._put_snapshot  # type: ignore[attr-defined]

        def dies(*args: Any) -> None:
            real(*args)
            raise OSError("the process died here")

        store.backend._put_snapshot = dies  # type: ignore[attr-defined]
        with pytest.raises(OSError):
            await store.settle("a")
        del store.backend._put_snapshot  # type: ignore[attr-defined]
        assert _snapshots(path) == before  # neither the new row nor the removal
    async with StateStore(_url(path), cache_size=0) as store:
        assert (await store.load("a")).data == _doc(122)
        assert (await store.verify()).problems == []


async def test_a_head_moved_since_the_last_look_gets_nothing(tmp_path: Path) -> None:
    """Another process writes after the settle's last look at the head and before its
    commit: the commit checks the head and stores nothing (None). With two commits the
    row was stored at the old head (a late row, kept as bytes)."""
    path = tmp_path / "s.db"
    async with (
        StateStore(_url(path), snapshot_every=100, settle_after=None) as store,
        StateStore(_url(path), snapshot_every=100, settle_after=None) as other,
    ):
        await _chat(store, "a", 0, 120)
        policy = store._writes.snapshots
        prepare = policy.prepare

        async def meanwhile(record: Any) -> None:
            await other.save("a", _doc(121))
            await prepare(record)

        policy.prepare = meanwhile  # type: ignore[method-assign]
        before = _snapshots(path)
        assert await store.settle("a") is None
        policy.prepare = prepare  # type: ignore[method-assign]
        assert _snapshots(path) == before
        assert (await store.load("a")).data == _doc(121)
        assert await store.settle("a") == 121


async def test_a_stream_remade_since_the_last_look_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with (
        StateStore(_url(path), snapshot_every=10) as store,
        StateStore(_url(path)) as other,
    ):
        await _chat(store, "a", 0, 14)
        assert await store.settle("a") == 14
        await _chat(store, "a", 14, 16)
        _remade_at(store, other, 1, "head_tag")  # (the one look: settle's)
        assert await store.settle("a") is None  # same head seq, another stream
        del store.backend.head_tag
    async with StateStore(_url(path), cache_size=0) as fresh:
        assert await fresh.backend.stream_bases(["a"]) == [14]
        assert (await fresh.load("a")).data == {"new": 16}
        assert (await fresh.verify()).problems == []


async def test_the_replaced_row_compacted_to_meanwhile_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with (
        StateStore(_url(path), snapshot_every=10) as store,
        StateStore(_url(path)) as other,
    ):
        await _chat(store, "a", 0, 14)
        assert await store.settle("a") == 14
        await _chat(store, "a", 14, 16)
        policy = store._writes.snapshots
        prepare = policy.prepare

        async def meanwhile(record: Any) -> None:
            await apply_retention(other, RetentionPolicy.parse("* keep_last=2\n"))
            assert await other.backend.stream_bases(["a"]) == [14]
            await prepare(record)

        policy.prepare = meanwhile  # type: ignore[method-assign]
        assert await store.settle("a") == 16
        policy.prepare = prepare  # type: ignore[method-assign]
    assert _snapshots(path) == [14, 16]
    async with StateStore(_url(path), cache_size=0) as fresh:
        for seq in (14, 15, 16):
            assert (await fresh.load("a", at_seq=seq)).data == _doc(seq)
        assert (await fresh.verify()).problems == []


def _snapshot_rows(path: Path) -> list[tuple[int, bytes]]:
    import sqlite3

    with sqlite3.connect(path) as conn:
        return [
            (s, bytes(c))
            for s, c in conn.execute(
                "SELECT seq, checksum FROM sk_snapshots WHERE agent_id = 'a' ORDER BY seq"
            )
        ]


async def test_a_stream_remade_before_the_commit_is_left_alone_from_a_tail_at_the_head(
    tmp_path: Path,
) -> None:
    """The settle's record folded from a tail snapshot at the head (a cold store: no
    event read after it, so no head event checksum known), and another process deletes
    the agent and makes it again up to the same seq after the settle's last look and
    before its commit. Was: the commit checked the head's seq alone (its checksum None)
    and stored the old stream's state as a whole row at 108 of the new stream (verify:
    "snapshot does not belong to this stream's chain"). Now the head event's checksum
    is read before that last look, and the commit refuses the new stream."""
    path = tmp_path / "s.db"
    async with StateStore(_url(path), snapshot_every=100, settle_after=None) as first:
        await _chat(first, "a", 0, 108)
    assert _snapshots(path) == [100, 108]  # (108: a tail, stored with its event)
    async with (
        StateStore(_url(path), snapshot_every=100, settle_after=None) as store,
        StateStore(_url(path), settle_after=None) as other,
    ):
        policy = store._writes.snapshots
        prepare = policy.prepare
        seen: list[bytes | None] = []
        left: list[list[tuple[int, bytes]]] = []

        async def meanwhile(record: Any) -> None:
            seen.append(record.checksum)
            assert await other.delete("a")
            for n in range(1, 109):
                await other.save("a", {"new": n})
            left.append(_snapshot_rows(path))  # (the remade stream's own rows)
            await prepare(record)

        policy.prepare = meanwhile  # type: ignore[method-assign]
        assert await store.settle("a") is None
        policy.prepare = prepare  # type: ignore[method-assign]
        assert seen == [None]  # (the case: no head checksum known to the record)
        assert _snapshot_rows(path) == left[0]  # nothing written into the new stream
    async with StateStore(_url(path), cache_size=0) as fresh:
        assert (await fresh.load("a")).data == {"new": 108}
        assert (await fresh.verify()).problems == []
