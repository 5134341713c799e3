"""A demotion's claim (its marker) against rehydrations and other demotions in other
processes, at the points where they interleave (hooked, no timing).

Each "process" is a TieredBackend of its own over one durable store (SQLite file, or a
PostgreSQL schema) and one cold SQLite file (test_tiered_demote_concurrent's)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper.backends.base import Backend
from statekeeper.backends.tiered import COLD_MARKER, TieredBackend

from ._services import namespace, require_redis
from .test_tiered_demote_concurrent import (
    _HEAD,
    Durable,
    _drop,
    _postgres,
    _process,
    _setup,
    _sqlite,
    _whole,
)


def _redis(tmp_path: Path) -> Durable:
    """A Redis durable tier (not a cluster: it commits several streams at once with
    head tags, so a demotion's last step is fenced there too)."""
    from statekeeper.backends.redis import RedisBackend

    from ._services import REDIS_URL

    return lambda: RedisBackend(REDIS_URL, prefix=namespace(tmp_path) + ":")


_MAKERS = pytest.mark.parametrize(
    "make", [_sqlite, _postgres, _redis], ids=["sqlite", "postgres", "redis"]
)


class _Pause:
    """Holds a call of ``obj.name`` (the ``nth`` whose arguments ``when`` accepts)
    until :attr:`go` is set; :attr:`reached` says it is held."""

    def __init__(
        self, obj: Any, name: str, nth: int = 1, when: Callable[..., bool] = lambda *a: True
    ) -> None:
        self.reached, self.go, self.seen = asyncio.Event(), asyncio.Event(), 0
        call = getattr(obj, name)

        async def hooked(*args: Any, **kwargs: Any) -> Any:
            if when(*args):
                self.seen += 1
                if self.seen == nth:
                    self.reached.set()
                    await self.go.wait()
            return await call(*args, **kwargs)

        setattr(obj, name, hooked)


async def _until(event: asyncio.Event, task: asyncio.Future[Any]) -> None:
    """Wait until ``event`` is set, or ``task`` ended (then fail with its outcome)."""
    waiter = asyncio.ensure_future(event.wait())
    await asyncio.wait([waiter, task], return_when=asyncio.FIRST_COMPLETED)
    if not event.is_set():
        waiter.cancel()
        raise AssertionError(f"never reached the hooked point: {task.result()!r}")


def _final_step(b: TieredBackend) -> _Pause:
    """Holds ``b``'s demotion of "a" before its last step (the delete of the stream)."""
    durable: Backend = b.durable
    fenced = getattr(b, "_fenced", lambda: False)()  # (main's: a conditional delete)
    name = "append_together" if fenced else "delete_agent_at"
    return _Pause(durable, name)


@_MAKERS
async def test_a_rehydration_that_did_not_copy_leaves_its_end_to_the_one_that_did(
    tmp_path: Path, make: Callable[[Path], Durable]
) -> None:
    """R2 finds the part R1 is copying back, and is held before dropping it; R1
    finishes (the cold copy and the marker deleted); D3 demotes the agent again and is
    held before deleting the stream; R2 goes on. Before: R2, finding the stream whole,
    ended the rehydration it took for its own — deleting D3's cold copy and marker —
    and D3's delete of the stream went through: the agent in no tier, D3's demote True,
    R2's head 5, no error. Now R2 leaves the end to the rehydration that copied."""
    if make is _postgres:
        from ._services import require_postgres

        require_postgres()
    if make is _redis:
        require_redis()
    durable = make(tmp_path)
    setup = _process(tmp_path, durable)
    r1, r2, d3 = (_process(tmp_path, durable) for _ in range(3))
    try:
        await _setup(setup, demoted=True)
        copying = _Pause(  # (its first page copied back; its claim on the marker before)
            r1.durable, "append", nth=2, when=lambda req: req.agent_id == "a"
        )
        dropping = _Pause(r2, "_drop_partial")
        t1 = asyncio.ensure_future(r1.head("a"))
        await _until(copying.reached, t1)
        t2 = asyncio.ensure_future(r2.head("a"))
        await _until(dropping.reached, t2)
        copying.go.set()
        assert await t1 == _HEAD
        last = _final_step(d3)
        t3 = asyncio.ensure_future(d3.demote("a"))
        await _until(last.reached, t3)
        dropping.go.set()
        assert await t2 == _HEAD
        last.go.set()
        assert await t3 is True
        assert await setup.durable.head(COLD_MARKER + "a") > 0  # (before: 0, deleted by R2)
    finally:
        for t in (setup, r1, r2, d3):
            await t.close()
    await _whole(tmp_path, durable)  # (before: head 0, the agent in no tier)
    await _drop(tmp_path, durable)


_CLAIMER = """
import asyncio, sys
from statekeeper.backends import SQLiteBackend
from statekeeper.backends.tiered import TieredBackend

async def main() -> None:
    kind, where, schema, cold_path = sys.argv[1:5]
    if kind == "sqlite":
        durable = SQLiteBackend(where)
    elif kind == "redis":
        from statekeeper.backends.redis import RedisBackend
        durable = RedisBackend(where, prefix=schema + ":")
    else:
        from statekeeper.backends.postgres import PostgresBackend
        durable = PostgresBackend(where, schema=schema, max_size=2)
    cold = SQLiteBackend(cold_path)

    async def claimed(*args, **kwargs):  # (the demotion's first cold write: right after its claim)
        print("claimed", flush=True)
        await asyncio.Event().wait()  # (killed here)

    cold.delete_agent = claimed
    await TieredBackend(durable, cold=cold, idle_after=1).demote("a")

asyncio.run(main())
"""


async def _claimer(tmp_path: Path, make: Callable[[Path], Durable]) -> asyncio.subprocess.Process:
    """A child process whose demotion of "a" is held right after its claim."""
    import os
    import sys

    from ._services import POSTGRES_DSN, namespace

    if make is _sqlite:
        args = ["sqlite", str(tmp_path / "durable.db"), "-"]
    elif make is _redis:
        from ._services import REDIS_URL

        args = ["redis", REDIS_URL, namespace(tmp_path)]
    else:
        args = ["postgres", POSTGRES_DSN, namespace(tmp_path)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _CLAIMER,
        *args,
        str(tmp_path / "cold.db"),
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )
    assert child.stdout is not None
    line = await asyncio.wait_for(child.stdout.readline(), 120)  # (a bound, not a pause)
    assert line == b"claimed\n", line
    return child


@_MAKERS
async def test_a_claim_whose_process_was_killed_is_taken_over(
    tmp_path: Path, make: Callable[[Path], Durable]
) -> None:
    """A demotion killed (SIGKILL) right after its claim left the marker beside the whole
    stream, and the agent could never be demoted again (until deleted). Now a demotion
    takes over a claim older than the bound whose process is gone: the agent is
    demoted, whole. A claim whose process still runs is never taken over, however old;
    nor a dead one younger than the bound."""
    import signal
    import time

    if make is _postgres:
        from ._services import require_postgres

        require_postgres()
    if make is _redis:
        require_redis()
    durable = make(tmp_path)
    setup = _process(tmp_path, durable)
    try:
        await _setup(setup)
    finally:
        await setup.close()
    child = await _claimer(tmp_path, make)
    later = time.time() + 3600  # (the claim an hour old)
    try:
        live = _process(tmp_path, durable)
        live.clock = lambda: later
        try:
            assert await live.durable.head(COLD_MARKER + "a") == 1  # (the child's claim)
            assert await live.demote("a") is False  # its process runs: never taken over
            assert await live.durable.head(COLD_MARKER + "a") == 1
        finally:
            await live.close()
    finally:
        child.send_signal(signal.SIGKILL)
        await child.wait()
    young = _process(tmp_path, durable)
    try:
        assert await young.demote("a") is False  # gone, but the claim younger than the bound
    finally:
        await young.close()
    taker = _process(tmp_path, durable)
    taker.clock = lambda: later
    try:
        assert await taker.demote("a") is True  # (before: False, for ever)
        assert await taker.durable.head("a") == 0
    finally:
        await taker.close()
    await _whole(tmp_path, durable)  # brought back whole, keys and snapshot too
    await _drop(tmp_path, durable)


@_MAKERS
async def test_a_claim_taken_over_from_a_live_demotion_cannot_lose_the_agent(
    tmp_path: Path, make: Callable[[Path], Durable], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Were a live demotion's claim ever taken over (its owner wrongly thought gone),
    its last step — the stream's delete, in one commit with its marker's second record
    on the condition that the claim is its own — fails: D1, held before that step while
    D2 takes over and demotes, deletes nothing; the agent is D2's demotion, whole."""
    import statekeeper.backends.tiered_claims as tiered_claims

    if make is _postgres:
        from ._services import require_postgres

        require_postgres()
    if make is _redis:
        require_redis()
    durable = make(tmp_path)
    monkeypatch.setattr(tiered_claims, "owner_gone", lambda owner, token: True)
    d1, d2 = _process(tmp_path, durable), _process(tmp_path, durable)
    d2.clock = lambda: d1.clock() + 3600
    try:
        await _setup(d1)
        last = _final_step(d1)
        t1 = asyncio.ensure_future(d1.demote("a"))
        await _until(last.reached, t1)
        assert await d2.demote("a") is True
        last.go.set()
        assert await t1 is False
    finally:
        await d1.close()
        await d2.close()
    await _whole(tmp_path, durable)
    await _drop(tmp_path, durable)


async def test_a_failed_demotion_never_drops_another_stores_copy_sharing_a_first_record(
    tmp_path: Path,
) -> None:
    """Store B is a copy of store A (restored from its backup) written on since, with a
    cold tier shared with A. A's demotion of "a" is held after its first record is
    copied; A deletes "a" meanwhile (the part copied with it) and B demotes its "a".
    A's demotion fails (the cold copy moved under it) and drops what it took for its
    own orphan: before, any cold copy of at most its head whose first record was this
    stream's — B's only copy (B's load then: IntegrityError, its cold copy missing).
    Now only a copy whose head record is one this demotion wrote."""
    import dataclasses

    from statekeeper.backends import SQLiteBackend
    from statekeeper.records import AppendRequest
    from statekeeper.testing import request

    def store(name: str) -> TieredBackend:
        durable = SQLiteBackend(tmp_path / f"{name}.db")
        return TieredBackend(durable, cold=SQLiteBackend(tmp_path / "cold.db"), idle_after=1)

    a, d1, b = store("a"), store("a"), store("b")
    try:
        for seq in range(_HEAD):
            await a.append(request("a", seq, key=f"k{seq}"))
        shared = await a.durable.read("a", 0, 3)  # (B: A's first three records, then its own)
        await b.durable.append(AppendRequest("a", 0, tuple(shared)))
        mine = dataclasses.replace(shared[-1], seq=4, payload=b"b's own", checksum=b"b" * 32)
        await b.durable.append(AppendRequest("a", 3, (mine,)))
        assert d1.cold is not None
        copying = _Pause(d1.cold, "append", nth=2)  # (its first record copied)
        t1 = asyncio.ensure_future(d1.demote("a"))
        await _until(copying.reached, t1)
        assert await a.delete_agent("a") is True
        assert await b.demote("a") is True
        copying.go.set()
        assert await t1 is False  # (deleted meanwhile: nothing to demote)
        assert [e.payload for e in await b.read("a")][-1] == b"b's own"  # (before: IntegrityError)
        assert await b.head("a") == 4
    finally:
        for t in (a, d1, b):
            await t.close()


@_MAKERS
async def test_a_conditional_delete_during_a_demotion_is_not_undone(
    tmp_path: Path, make: Callable[[Path], Durable]
) -> None:
    """D's demotion is held before its last step (its cold copy whole); B deletes the
    agent at its head (statekeeper delete, a retention purge, forget --purge); C loads
    it. Before: B deleted the stream, then the cold copy and the marker — C, between
    the two, found the claim's marker with no stream beside it, took the agent for
    demoted and brought the whole cold copy back: the deleted agent served again, and
    kept. Now B ends the claim first (its marker, conditional on its token: D's last
    step then deletes nothing), then deletes the stream."""
    if make is _postgres:
        from ._services import require_postgres

        require_postgres()
    if make is _redis:
        require_redis()
    durable = make(tmp_path)
    b, c, d = (_process(tmp_path, durable) for _ in range(3))
    try:
        await _setup(b)
        last = _final_step(d)
        td = asyncio.ensure_future(d.demote("a"))
        await _until(last.reached, td)
        head = (await b.read("a"))[-1]
        assert b.cold is not None
        cold_delete = _Pause(b.cold, "delete_agent")  # (B's stream deleted by then)
        tb = asyncio.ensure_future(b.delete_agent_at("a", _HEAD, head.checksum))
        await _until(cold_delete.reached, tb)
        assert await c.head("a") == 0  # (before: 5, brought back from the claim's copy)
        cold_delete.go.set()
        assert await tb is True
        last.go.set()
        assert await td is False
        assert await c.head("a") == 0
        assert await c.durable.head(COLD_MARKER + "a") == 0
    finally:
        for t in (b, c, d):
            await t.close()
    await _drop(tmp_path, durable)


async def test_a_claim_of_a_demotion_under_way_in_this_process_is_not_taken_over(
    tmp_path: Path,
) -> None:
    """Two stores of one process: D1 is held right after its claim; D2, an hour later
    by its clock, finds D1's claim — this process's, its demotion under way — and
    leaves it (a guard: the owner check of this process is its claims in flight)."""
    durable = _sqlite(tmp_path)
    d1, d2 = _process(tmp_path, durable), _process(tmp_path, durable)
    d2.clock = lambda: d1.clock() + 3600
    try:
        await _setup(d1)
        assert d1.cold is not None
        claimed = _Pause(d1.cold, "delete_agent")  # (its first cold write, after its claim)
        t1 = asyncio.ensure_future(d1.demote("a"))
        await _until(claimed.reached, t1)
        assert await d2.demote("a") is False
        claimed.go.set()
        assert await t1 is True
    finally:
        await d1.close()
        await d2.close()
    await _whole(tmp_path, durable)


@_MAKERS
async def test_a_demotion_claimed_after_a_conditional_delete_read_is_not_undone(
    tmp_path: Path, make: Callable[[Path], Durable]
) -> None:
    """B deletes the agent at its head and is held right before the stream's delete
    (it found no marker: nothing to end); D then claims, copies the agent whole and is
    held before its last step; B's delete goes through, then D's last step (a conflict:
    the stream gone). Before: D left its claim and its whole cold copy beside no
    stream — C's load took the agent for demoted and brought the deleted agent back
    (head 5, and kept). Now a demotion whose stream was deleted under it ends its claim
    (its own copy, then its marker), and a claim alone is never taken for a demotion."""
    if make is _postgres:
        from ._services import require_postgres

        require_postgres()
    if make is _redis:
        require_redis()
    durable = make(tmp_path)
    b, c, d = (_process(tmp_path, durable) for _ in range(3))
    try:
        await _setup(b)
        head = (await b.read("a"))[-1]
        deleting = _Pause(b.durable, "delete_agent_at", when=lambda agent_id, *a: agent_id == "a")
        tb = asyncio.ensure_future(b.delete_agent_at("a", _HEAD, head.checksum))
        await _until(deleting.reached, tb)
        last = _final_step(d)
        td = asyncio.ensure_future(d.demote("a"))
        await _until(last.reached, td)
        deleting.go.set()
        assert await tb is True
        last.go.set()
        assert await td is False
        assert await c.head("a") == 0  # (before: 5, the deleted agent brought back)
        assert await c.durable.head(COLD_MARKER + "a") == 0
        assert c.cold is not None and await c.cold.head("a") == 0
    finally:
        for t in (b, c, d):
            await t.close()
    await _drop(tmp_path, durable)


@_MAKERS
async def test_a_claim_beside_no_stream_is_not_a_demoted_agent(
    tmp_path: Path, make: Callable[[Path], Durable]
) -> None:
    """As above, D held once its last step conflicted (the stream deleted under its
    claim), before it ends its claim; C loads the agent then. Before: C found the
    claim's marker with no stream and the claim's whole cold copy, took the agent for
    demoted and brought the deleted agent back. Now a claim (a fenced demotion's marker
    of one record: its stream never deleted by it) is never taken for a demotion, nor
    counted as an agent by count_agents / count_prefix (they agree with list_agents)."""
    if make is _postgres:
        from ._services import require_postgres

        require_postgres()
    if make is _redis:
        require_redis()
    durable = make(tmp_path)
    b, c, d = (_process(tmp_path, durable) for _ in range(3))
    try:
        await _setup(b)
        head = (await b.read("a"))[-1]
        deleting = _Pause(b.durable, "delete_agent_at", when=lambda agent_id, *a: agent_id == "a")
        tb = asyncio.ensure_future(b.delete_agent_at("a", _HEAD, head.checksum))
        await _until(deleting.reached, tb)
        last = _final_step(d)
        ending = _Pause(d, "_release")
        td = asyncio.ensure_future(d.demote("a"))
        await _until(last.reached, td)
        deleting.go.set()
        assert await tb is True
        last.go.set()
        await _until(ending.reached, td)
        assert await c.head("a") == 0  # (before: 5, the deleted agent brought back)
        assert await c.read("a") == []
        assert [i.agent_id for i in await c.list_agents()] == []
        # counted as listed (before: 1 each, the claim's marker taken for an agent)
        assert await c.count_agents() == 0
        assert await c.count_prefix("") == 0
        assert await c.count_prefix("a") == 0
        ending.go.set()
        assert await td is False
        assert await c.durable.head(COLD_MARKER + "a") == 0
        assert c.cold is not None and await c.cold.head("a") == 0
    finally:
        for t in (b, c, d):
            await t.close()
    await _drop(tmp_path, durable)


@_MAKERS
async def test_a_delete_that_ended_a_claim_leaves_no_copy_of_the_deleted_agent(
    tmp_path: Path, make: Callable[[Path], Durable]
) -> None:
    """D claims and is held before its first cold write; B deletes the agent at its
    head — D's claim found, its cold copy empty (not B's to delete), the claim ended —
    and is held before the stream's delete; D copies the agent whole and reaches its
    last step (a conflict: its claim ended); B's delete goes through. Before: D's whole
    copy of the deleted agent stayed in the cold tier, no marker or stream beside it
    (data a purge deleted, kept; a demotion of a new agent of that id refused). Now
    a demotion whose last step failed with the stream and the marker gone drops its
    own copy (conditional on its head record)."""
    if make is _postgres:
        from ._services import require_postgres

        require_postgres()
    if make is _redis:
        require_redis()
    durable = make(tmp_path)
    b, c, d = (_process(tmp_path, durable) for _ in range(3))
    try:
        await _setup(b)
        head = (await b.read("a"))[-1]
        assert d.cold is not None and c.cold is not None
        claimed = _Pause(d.cold, "delete_agent")  # (its first cold write, after its claim)
        td = asyncio.ensure_future(d.demote("a"))
        await _until(claimed.reached, td)
        deleting = _Pause(b.durable, "delete_agent_at", when=lambda agent_id, *a: agent_id == "a")
        tb = asyncio.ensure_future(b.delete_agent_at("a", _HEAD, head.checksum))
        await _until(deleting.reached, tb)
        last = _final_step(d)
        claimed.go.set()
        await _until(last.reached, td)
        deleting.go.set()
        assert await tb is True
        last.go.set()
        assert await td is False
        assert await c.head("a") == 0
        assert await c.durable.head(COLD_MARKER + "a") == 0
        assert await c.cold.head("a") == 0  # (before: 5, the deleted agent's copy)
    finally:
        for t in (b, c, d):
            await t.close()
    await _drop(tmp_path, durable)
