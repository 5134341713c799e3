"""A tier copy of a stream compacted inside a keyed append (the prune's base falls
between its first and last seq) keeps that append's idempotency record whole: after a
demotion to the cold tier and a rehydration back, a retry of the append gets its
original seqs and nothing is written (the copy used to record only the part after the
base, so the retry got other seqs)."""

from __future__ import annotations

from pathlib import Path

from statekeeper.backends import MemoryBackend, SQLiteBackend
from statekeeper.backends.tiered import TieredBackend
from statekeeper.records import AppendResult
from statekeeper.testing import request, snapshot, tagged


async def test_a_demoted_and_rehydrated_stream_keeps_the_record_of_an_append_cut_in_two(
    tmp_path: Path,
) -> None:
    backend = TieredBackend(SQLiteBackend(tmp_path / "durable.db"), cold=MemoryBackend())
    try:
        await backend.append(request("a", 0, key="k1"))
        await backend.append(request("a", 1, 3, key="cut"))  # seqs 2..4
        await backend.append(tagged(request("a", 4), b"t5"))
        await backend.save_snapshot("a", snapshot(3))
        await backend.prune("a", 3)  # the base inside the keyed append 2..4
        keys = [("k1", 1, 1), ("cut", 2, 4)]
        assert await backend.idempotency_keys("a") == keys
        assert await backend.demote("a")
        assert await backend.cold.idempotency_keys("a") == keys  # type: ignore[union-attr]
        again = await backend.append(request("a", 1, 3, key="cut"))  # rehydrates first
        assert again == AppendResult("a", 2, 4, True)
        assert await backend.idempotency_keys("a") == keys
        assert await backend.head_tag("a") == (5, b"t5")
        assert [e.seq for e in await backend.read("a")] == [4, 5]
    finally:
        await backend.close()
