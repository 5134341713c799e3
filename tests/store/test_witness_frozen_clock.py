"""A clock that stands still (``clock=``, or freezegun's frozen ``time.time`` in users'
tests) stamps every stream of an agent with the same first-record time: the mark's
incarnation (``c``, :mod:`statekeeper.security.incarnation`) no longer tells a stream
made again from the same stream gone back. A stream begun (an append at seq 1) is then
a reset the file records (``r``), so a stream that expired on a ``ttl=`` store (no
deletion mark: the server deletes it) and was made again by a process sharing the
witness file is no rollback for the process holding the old mark.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends import MemoryBackend

from ..backends._services import REDIS_URL, delete_prefix, namespace, require_redis
from .test_witness_ttl_expiry import _expire


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    require_redis()
    prefix = namespace(tmp_path, "sk_wfrz_")
    yield f"{REDIS_URL}?prefix={prefix}&ttl=3600"
    delete_prefix(prefix)


@pytest.mark.parametrize("frozen_wall_clock", [False, True], ids=["clock=", "time.time"])
async def test_an_expired_agent_made_again_at_a_frozen_time_elsewhere_is_no_rollback(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, frozen_wall_clock: bool
) -> None:
    frozen = time.time() - 600  # (a test's clock, frozen in the past)
    if frozen_wall_clock:  # (freezegun's way: the marks' times stand still too)
        monkeypatch.setattr(time, "time", lambda: frozen)
    witness = tmp_path / "w"

    def one() -> StateStore:
        return StateStore(
            url, witness=witness, cache_size=0, witness_interval=3600, clock=lambda: frozen
        )

    async with one() as mine, one() as theirs:
        assert mine.witness is not None and theirs.witness is not None
        for n in range(1, 4):
            await mine.save("a", {"n": n})
        await mine.witness.flush()
        await _expire(mine, "a")
        await theirs.save("a", {"other": 1})  # made again, at the very same time
        await theirs.save("a", {"other": 2})
        await theirs.witness.flush()
        assert (await mine.load("a")).data == {"other": 2}  # was: RollbackDetected
        assert not (await mine.verify()).problems


async def test_a_delete_and_a_new_stream_elsewhere_under_a_frozen_time_time_is_no_rollback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # freezegun's way: time.time itself stands still, the marks' times and the
    # deletion's are all the same instant
    frozen = time.time() - 600
    monkeypatch.setattr(time, "time", lambda: frozen)
    backend, witness = MemoryBackend(), tmp_path / "w"

    def one() -> StateStore:
        return StateStore(backend, witness=witness, cache_size=0, witness_interval=3600)

    mine, theirs = one(), one()
    assert mine.witness is not None and theirs.witness is not None
    for n in range(1, 5):
        await mine.save("a", {"n": n})
    await mine.witness.flush()
    await theirs.delete("a")
    for n in range(1, 3):
        await theirs.save("a", {"other": n})
    await theirs.witness.flush()
    assert (await mine.load("a")).data == {"other": 2}
    await theirs.save("a", {"other": 3})  # (its next marks keep the reset)
    await theirs.witness.flush()
    assert (await mine.load("a")).data == {"other": 3}
