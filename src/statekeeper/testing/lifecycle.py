"""The backend contract, part: deleting, the newest records (read_latest), health and
close, agent ids, and a peer on the same storage. Run through
:class:`~statekeeper.testing.BackendConformance`."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper.arguments import MAX_ID_BYTES
from statekeeper.backends.base import Backend, Health
from statekeeper.errors import (
    ConflictError,
    InvalidAgentId,
    StoreClosed,
)
from statekeeper.records import (
    AppendRequest,
    AppendResult,
    RawEvent,
    StreamChange,
    event_rows,
)

from ._contract import Contract, event, request, snapshot

__all__ = ["LifecycleConformance"]


class LifecycleConformance(Contract):
    """Conformance tests: deleting, read_latest, health and close, agent ids, a peer."""

    # -- delete ----------------------------------------------------------------------

    async def test_delete_removes_everything(self, backend: Backend) -> None:
        await backend.append(request("a", 0, 3, key="k", snap_at=2))
        await backend.append(request("keep", 0, 2, key="k", snap_at=1))
        assert await backend.delete_agent("a") is True
        assert await backend.head("a") == 0
        assert await backend.read("a") == []
        assert await backend.latest_snapshot("a") is None
        assert await backend.lookup_key("a", "k") is None
        assert await backend.seq_at("a", 1e12) == 0
        assert [i.agent_id for i in await backend.list_agents()] == ["keep"]
        assert await backend.delete_agent("a") is False
        # the id and the key are free again: a new stream starts at 1
        assert await backend.append(request("a", 0, key="k")) == AppendResult("a", 1, 1)
        # the other agent is untouched
        assert await backend.head("keep") == 2
        assert await backend.lookup_key("keep", "k") == AppendResult("keep", 1, 2, True)
        assert await backend.latest_snapshot("keep") == snapshot(1)

    async def test_delete_at_is_conditional_on_the_head_record(self, backend: Backend) -> None:
        """``delete_agent_at(id, head, checksum)``: the head event's stored checksum is the
        head record's identity. An agent deleted and written again up to the same head
        (another process's new stream, its writes acknowledged) has another one: a
        delete naming the old one deletes nothing (ConflictError, in the engine's
        atomic step); naming the right one deletes it."""
        await backend.append(request("a", 0, 2))
        old = (await backend.read("a", 1, 2))[0].checksum
        assert await backend.delete_agent("a") is True
        remade = [RawEvent(s, "patch", 100.0 + s, b"new-%d" % s, b"new-sum-%d" % s) for s in (1, 2)]
        await backend.append(AppendRequest("a", 0, remade))
        with pytest.raises(ConflictError) as caught:
            await backend.delete_agent_at("a", 2, old)
        assert (caught.value.expected_seq, caught.value.current_seq) == (2, 2)
        assert await backend.read("a") == remade  # the new stream, whole
        if backend.appends_together:  # the change in a commit with an append: the same
            stale = StreamChange("a", delete_at=2, delete_checksum=old)
            with pytest.raises(ConflictError):
                await backend.append_together([request("other", 0)], [stale])
            assert await backend.head("other") == 0  # nothing of the commit written
            assert await backend.read("a") == remade
        assert await backend.delete_agent_at("a", 2, b"new-sum-2") is True
        assert await backend.head("a") == 0
        await backend.append(request("b", 0, 1))
        assert await backend.delete_agent_at("b", 1) is True  # (without one: the head alone)

    async def test_delete_at_takes_a_checksum(self, backend: Backend) -> None:
        """``delete_agent_at`` takes the head event's checksum as its third argument,
        by position or by name: an override written before it was added
        (``delete_agent_at(self, agent_id, head)``) fails every delete made at a head
        record's identity (``statekeeper delete``, the inspector, retention, the
        LangGraph saver) with ``CapabilityUnsupported`` naming the engine."""
        method = type(backend).delete_agent_at
        try:
            inspect.signature(method).bind(backend, "a", 1, b"sum")
            inspect.signature(method).bind(backend, "a", 1, checksum=b"sum")
        except TypeError as exc:
            pytest.fail(
                f"{type(backend).__qualname__}.delete_agent_at must take"
                f" (agent_id, head, checksum: bytes | None = None): {exc}"
            )
        await backend.append(request("a", 0, 1))
        checksum = (await backend.read("a"))[0].checksum
        assert await backend.delete_agent_at("a", 1, checksum=checksum) is True
        assert await backend.head("a") == 0

    # -- read_latest: the latest snapshot and the events after it, in one read -------

    async def _check_read_latest(
        self, backend: Backend, agent_id: str, snap_seq: int | None, tail: list[int]
    ) -> None:
        """The engine's read_latest equals the composed default, and both equal what
        was written: the snapshot at ``snap_seq`` and the events ``tail``."""
        native = await backend.read_latest(agent_id)
        composed = await Backend.read_latest(backend, agent_id)
        assert native == composed
        snap, events = native
        assert (snap.seq if snap is not None else None) == snap_seq
        if snap is not None:
            assert snap == snapshot(snap.seq)
        assert events == [event(s) for s in tail]
        # read_state: the same, with the head and its tag, in one call
        state = await backend.read_state(agent_id)
        assert state == await Backend.read_state(backend, agent_id)
        # read_state_rows: the same, the events as the rows a fold replays
        rows = await backend.read_state_rows(agent_id)
        assert rows == (*state[:3], event_rows(state[3]))
        head, tag = await backend.head_tag(agent_id)
        if head == 0:
            assert state == (0, None, None, [])
        else:
            assert state == (head, tag, snap, events)

    @pytest.mark.parametrize("tail", [0, 1, 5])
    async def test_read_latest_without_a_snapshot(self, backend: Backend, tail: int) -> None:
        await backend.append(request("other", 0, 3, snap_at=3))
        if tail:
            await backend.append(request("a", 0, tail))
        await self._check_read_latest(backend, "a", None, list(range(1, tail + 1)))

    @pytest.mark.parametrize("tail", [0, 1, 7])
    async def test_read_latest_after_the_newest_snapshot(self, backend: Backend, tail: int) -> None:
        await backend.append(request("a", 0, 3, snap_at=2))
        await backend.append(request("a", 3, 2, snap_at=5))  # the newer snapshot wins
        await backend.append(request("other", 0, 9, snap_at=9))
        if tail:
            await backend.append(request("a", 5, tail))
        await self._check_read_latest(backend, "a", 5, list(range(6, 6 + tail)))
        # a snapshot saved afterwards moves the split point
        await backend.save_snapshot("a", snapshot(5 + tail))
        await self._check_read_latest(backend, "a", 5 + tail, [])

    async def test_read_latest_of_unknown_and_deleted_agents(self, backend: Backend) -> None:
        assert await backend.read_latest("nobody") == (None, [])
        assert await backend.read_state("nobody") == (0, None, None, [])
        await backend.append(request("a", 0, 4, snap_at=3))
        await backend.append(request("b", 0, 2))
        assert await backend.delete_agent("a") is True
        assert await backend.read_latest("a") == (None, [])
        await self._check_read_latest(backend, "b", None, [1, 2])
        await backend.append(request("a", 0, 2))  # re-created: no trace of the old stream
        await self._check_read_latest(backend, "a", None, [1, 2])

    async def test_read_latest_many_equals_one_read_per_agent(self, backend: Backend) -> None:
        """Many agents' latest states in one call: for each agent (in the order asked,
        repeats and unknown agents included) its head, head tag, newest snapshot and
        the events after it, as the per-agent reads give them."""
        await backend.append(request("a", 0, 3, snap_at=2))
        await backend.append(request("b", 0, 2))
        await backend.append(request("c", 0, 4, snap_at=4))
        await backend.append(request("gone", 0, 1))
        assert await backend.delete_agent("gone") is True
        ids = ["c", "nobody", "a", "gone", "b", "a"]
        many = await backend.read_latest_many(ids)
        assert len(many) == len(ids)
        for agent_id, got in zip(ids, many, strict=True):
            head, tag = await backend.head_tag(agent_id)
            if head == 0:
                assert got is None, agent_id
                continue
            assert got is not None, agent_id
            snap, events = await backend.read_latest(agent_id)
            assert (got.head, got.tag, got.snapshot, got.events) == (head, tag, snap, events)
        a = many[2]
        assert a is not None and a.snapshot == snapshot(2) and a.events == [event(3)]
        assert await backend.read_latest_many([]) == []

    # -- health and close ------------------------------------------------------------

    async def test_health(self, backend: Backend) -> None:
        health = await backend.health()
        assert isinstance(health, Health)
        assert health.ok is True
        assert health.backend == backend.name

    async def test_closed_backend_refuses_every_call(self, tmp_path: Path) -> None:
        backend = await self.make_backend(tmp_path)
        await backend.append(request("a", 0))
        await backend.close()
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "append": lambda: backend.append(request("a", 1)),
            "append_batch": lambda: backend.append_batch([request("a", 1)]),
            "lookup_key": lambda: backend.lookup_key("a", "k"),
            "head": lambda: backend.head("a"),
            "read": lambda: backend.read("a"),
            "seq_at": lambda: backend.seq_at("a", 1.0),
            "save_snapshot": lambda: backend.save_snapshot("a", snapshot(1)),
            "latest_snapshot": lambda: backend.latest_snapshot("a"),
            "list_agents": lambda: backend.list_agents(),
            "count_agents": lambda: backend.count_agents(),
            "delete_agent": lambda: backend.delete_agent("a"),
        }
        for name, call in calls.items():
            with pytest.raises(StoreClosed):
                await call()
                raise AssertionError(f"{name} worked on a closed backend")
        health = await backend.health()
        assert health.ok is False
        await backend.close()  # idempotent

    # -- agent ids: one rule on every engine (statekeeper.arguments.check_agent_id) ------

    @pytest.mark.parametrize(
        "bad",
        [
            pytest.param("", id="empty"),
            pytest.param("a\x00b", id="nul"),
            pytest.param("a\ud800b", id="lone-surrogate"),
            pytest.param("\u00e9" * 512 + "x", id="1025-bytes"),
            pytest.param("x" * (1 << 20), id="1-MiB"),
            pytest.param(b"agent", id="bytes"),
            pytest.param(None, id="none"),
            pytest.param(7, id="int"),
        ],
    )
    async def test_bad_agent_ids_are_refused_before_anything_is_written(
        self, backend: Backend, bad: object
    ) -> None:
        with pytest.raises(InvalidAgentId, match="agent_id"):
            await backend.append(request(bad, 0))  # type: ignore[arg-type]
        results = await backend.append_batch([request(bad, 0), request("ok", 0)])  # type: ignore[arg-type]
        assert isinstance(results[0], InvalidAgentId)
        assert results[1] == AppendResult("ok", 1, 1)
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "head": lambda: backend.head(bad),  # type: ignore[arg-type]
            "head_tag": lambda: backend.head_tag(bad),  # type: ignore[arg-type]
            "read": lambda: backend.read(bad),  # type: ignore[arg-type]
            "seq_at": lambda: backend.seq_at(bad, 1.0),  # type: ignore[arg-type]
            "latest_snapshot": lambda: backend.latest_snapshot(bad),  # type: ignore[arg-type]
            "read_latest": lambda: backend.read_latest(bad),  # type: ignore[arg-type]
            "read_state": lambda: backend.read_state(bad),  # type: ignore[arg-type]
            "save_snapshot": lambda: backend.save_snapshot(bad, snapshot(1)),  # type: ignore[arg-type]
            # (a settle's one commit: SQLite's read the head of the bad id and raised
            # ConflictError, "stored head is 0", naming no bad id)
            "replace_snapshot": lambda: backend.replace_snapshot(bad, snapshot(1), None, 1, None),  # type: ignore[arg-type]
            "lookup_key": lambda: backend.lookup_key(bad, "k"),  # type: ignore[arg-type]
            "delete_agent": lambda: backend.delete_agent(bad),  # type: ignore[arg-type]
        }
        if backend.supports_leases:
            calls["acquire_lease"] = lambda: backend.acquire_lease(bad, "w", 5.0)  # type: ignore[arg-type]
            calls["get_lease"] = lambda: backend.get_lease(bad)  # type: ignore[arg-type]
        for name, call in calls.items():
            with pytest.raises(InvalidAgentId):
                await call()
                raise AssertionError(f"{name} accepted agent id {bad!r:.40}")
        assert [info.agent_id for info in await backend.list_agents()] == ["ok"]

    @pytest.mark.parametrize(
        "good",
        [
            pytest.param("x", id="longest-ascii"),
            pytest.param("\u00e9", id="longest-latin"),
            pytest.param("\U0001f642", id="longest-emoji"),
            pytest.param("a b/c:d*?[]{}%\\\n\t'\"#", id="punctuation"),
            pytest.param("\u65e5\u672c-\u00fc", id="non-ascii"),
        ],
    )
    async def test_every_valid_agent_id_works_the_same(self, backend: Backend, good: str) -> None:
        if len(good) == 1:  # the longest id of that character this engine holds
            good *= backend.max_id_bytes // len(good.encode())
        assert await backend.append(request(good, 0, 2, key="k", snap_at=2)) == AppendResult(
            good, 1, 2
        )
        assert await backend.head(good) == 2
        assert [e.seq for e in await backend.read(good)] == [1, 2]
        found = await backend.latest_snapshot(good)
        assert found is not None and found.seq == 2
        assert await backend.read_latest(good) == (found, [])
        assert await backend.read_state(good) == (2, None, found, [])
        assert await backend.lookup_key(good, "k") == AppendResult(good, 1, 2, duplicate=True)
        assert [info.agent_id for info in await backend.list_agents()] == [good]
        if backend.supports_leases:
            lease = await backend.acquire_lease(good, "w", 5.0)
            assert (await backend.get_lease(good)) == lease
        assert await backend.delete_agent(good) is True
        assert await backend.head(good) == 0

    async def test_an_id_over_the_engines_limit_is_refused_before_anything_is_written(
        self, backend: Backend
    ) -> None:
        """An engine holding shorter ids than every engine's rule (``max_id_bytes``:
        S3's object keys) refuses a longer one, naming its length and the limit."""
        limit = backend.max_id_bytes
        assert 0 < limit <= MAX_ID_BYTES
        if limit == MAX_ID_BYTES:
            pytest.skip("the engine holds every valid id")
        over = "x" * (limit + 1)
        with pytest.raises(InvalidAgentId, match=f"{limit + 1:,} bytes.*limit of {limit:,}"):
            await backend.append(request(over, 0, 2, key="k", snap_at=2))
        results = await backend.append_batch([request(over, 0), request("ok", 0)])
        assert isinstance(results[0], InvalidAgentId)
        assert results[1] == AppendResult("ok", 1, 1)
        assert [info.agent_id for info in await backend.list_agents()] == ["ok"]

    # -- shared storage (engines with a peer) ------------------------------------------

    async def test_peer_sees_committed_appends(self, backend: Backend, peer: Backend) -> None:
        await backend.append(request("a", 0, 3, key="k", snap_at=2))
        assert await peer.head("a") == 3
        assert await peer.read("a") == await backend.read("a")
        assert await peer.lookup_key("a", "k") == AppendResult("a", 1, 3, True)
        assert await peer.latest_snapshot("a") == snapshot(2)

    async def test_data_survives_close_and_reopen(self, tmp_path: Path) -> None:
        first = await self.make_backend(tmp_path)
        try:
            await first.append(request("a", 0, 5, key="k", snap_at=4))
        finally:
            await first.close()
        again = await self.open_peer(tmp_path)
        if again is None:
            pytest.skip("the engine keeps nothing after close")
        try:
            assert [e.seq for e in await again.read("a")] == [1, 2, 3, 4, 5]
            assert await again.latest_snapshot("a") == snapshot(4)
            assert await again.lookup_key("a", "k") == AppendResult("a", 1, 5, True)
            assert await again.append(request("a", 5)) == AppendResult("a", 6, 6)
        finally:
            await again.close()

    async def test_two_instances_race_one_winner_per_seq(
        self, backend: Backend, peer: Backend
    ) -> None:
        rounds = 30

        async def writer(b: Backend, name: bytes) -> list[int]:
            won = []
            for seq in range(1, rounds + 1):
                req = AppendRequest("a", seq - 1, (event(seq, body=name + b"-%d" % seq),))
                try:
                    await b.append(req)
                    won.append(seq)
                except ConflictError as exc:
                    assert exc.current_seq >= seq
            return won

        wins_a, wins_b = await asyncio.gather(writer(backend, b"A"), writer(peer, b"B"))
        assert sorted(wins_a + wins_b) == list(range(1, rounds + 1))
        stored = await backend.read("a")
        assert [e.seq for e in stored] == list(range(1, rounds + 1))
        for e in stored:
            owner = b"A" if e.seq in wins_a else b"B"
            assert e.payload == owner + b"-%d" % e.seq
