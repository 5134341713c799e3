"""A stream begun (an append at seq 1) is a reset the witness file records (``r``,
:mod:`statekeeper.security.incarnation`); when another process's newer mark of that
stream reached the file first, the beginning process's flush skipped its mark — and the
reset with it: under a clock that stands still, the process holding the mark of the
stream that expired took the new stream for a rollback."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore

from ..backends._services import REDIS_URL, delete_prefix, namespace, require_redis
from .test_witness_ttl_expiry import _expire


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    require_redis()
    prefix = namespace(tmp_path, "sk_wbeg_")
    yield f"{REDIS_URL}?prefix={prefix}&ttl=3600"
    delete_prefix(prefix)


async def test_a_stream_begun_whose_next_mark_elsewhere_was_written_first_is_no_rollback(
    url: str, tmp_path: Path
) -> None:
    frozen = time.time() - 600  # (every stream of the agent: the same first-record time)
    witness = tmp_path / "w"

    def one() -> StateStore:
        return StateStore(
            url, witness=witness, cache_size=0, witness_interval=3600, clock=lambda: frozen
        )

    async with one() as mine, one() as beginner, one() as third:
        assert mine.witness and beginner.witness and third.witness
        for store in (beginner, third):  # (opened: their first use checks the file)
            await store.save("b", {"n": 1})
        for n in range(1, 4):
            await mine.save("a", {"n": n})
        await mine.witness.flush()
        await _expire(mine, "a")
        await beginner.save("a", {"other": 1})  # made again: its seq 1 (not written yet)
        await third.save("a", {"other": 2})
        await third.witness.flush()  # (its mark first: newer than the beginner's)
        await beginner.witness.flush()
        assert (await mine.load("a")).data == {"other": 2}  # was: RollbackDetected
        assert not (await mine.verify()).problems


async def test_a_stream_begun_by_buffered_appends_written_together_is_no_rollback(
    url: str, tmp_path: Path
) -> None:
    # durability="async": the buffered appends at seq 1 and 2 reach the store in one
    # flush, acknowledged to the witness as seq 2 — the begin was not noted
    frozen = time.time() - 600
    witness = tmp_path / "w"

    def one(**options: object) -> StateStore:
        return StateStore(
            url,
            witness=witness,
            cache_size=0,
            witness_interval=3600,
            clock=lambda: frozen,
            **options,  # type: ignore[arg-type]
        )

    async with one() as mine, one(durability="async", flush_interval=3600) as beginner:
        assert mine.witness and beginner.witness
        await beginner.save("b", {"n": 1})  # (opened: its first use checks the file)
        await beginner.flush()
        for n in range(1, 4):
            await mine.save("a", {"n": n})
        await mine.witness.flush()
        await _expire(mine, "a")
        await beginner.save("a", {"other": 1})  # made again: buffered
        await beginner.save("a", {"other": 2})
        await beginner.flush()
        await beginner.witness.flush()
        assert (await mine.load("a")).data == {"other": 2}  # was: RollbackDetected
