"""``SyncStateStore``: the same store, blocking, for scripts and threaded code."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from statekeeper import ConflictError, StoreClosed, SyncStateStore


def test_sync_store_round_trip(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sync.db'}"
    with SyncStateStore(url, snapshot_every=3) as store:
        assert store.create("a1", {"messages": []}, fsm_state="idle").last_seq == 1
        for i in range(5):
            store.save("a1", {"messages": [f"m{j}" for j in range(i + 1)]})
        store.append("a1", "note", {"text": "hello"})
        assert store.head("a1") == 7
        snap = store.load("a1")
        assert (snap.seq, snap.data["messages"][-1], snap.fsm_state) == (7, "m4", "idle")
        assert store.load("a1", at_seq=2).data == {"messages": ["m0"]}
        assert [e.seq for e in store.history("a1")] == list(range(1, 8))
        assert store.get("nobody") is None
        assert store.snapshot("a1") == 7
        store.save("a2", {})
        assert [i.agent_id for i in store.list_agents()] == ["a1", "a2"]
        assert [i.agent_id for i in store.iter_agents()] == ["a1", "a2"]
        assert store.count_agents() == 2
        assert store.verify().ok
        assert store.health().ok
        assert store.stats().appends == 8
        assert store.delete("a2") is True
        store.flush()
    with SyncStateStore(url) as again:
        assert again.load("a1").seq == 7


def test_errors_cross_the_facade_typed() -> None:
    with SyncStateStore("memory://") as store:
        store.save("a1", {"n": 1})
        with pytest.raises(ConflictError) as info:
            store.save("a1", {"n": 2}, expected_seq=0)
        assert info.value.current_seq == 1


def test_closed_facade_refuses_calls() -> None:
    store = SyncStateStore("memory://")
    store.save("a1", {"n": 1})
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreClosed):
        store.load("a1")


def test_async_durability_through_the_facade(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'async.db'}"
    with SyncStateStore(url, durability="async", flush_interval=3600) as store:
        store.save("a1", {"n": 1})
        with SyncStateStore(url) as other:
            assert other.get("a1") is None
            store.flush()
            assert other.load("a1").data == {"n": 1}


def test_usable_from_several_threads(tmp_path: Path) -> None:
    with SyncStateStore(f"sqlite:///{tmp_path / 'threads.db'}") as store:
        errors: list[BaseException] = []

        def work(n: int) -> None:
            try:
                for i in range(10):
                    store.save(f"agent-{n}", {"i": i})
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert [store.load(f"agent-{n}").data for n in range(4)] == [{"i": 9}] * 4
