"""A sync store's call runs on the calling thread when no other call runs the store's
loop (issue 11: "no thread hop when the writer is idle"). It crossed to a private loop
thread and back (``Portal``), ~80-130 µs of CPU a cold load over the async API's;
a SQLite write now commits on the caller's thread, as LangGraph's ``SqliteSaver``
does. Calls from many threads at once still share the one loop (and its commits)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from statekeeper import SyncStateStore
from statekeeper.backends.memory import MemoryBackend
from statekeeper.records import AppendRequest, AppendResult


class Where(MemoryBackend):
    """A memory backend noting the thread each write and read runs on."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[int] = []

    async def append(self, request: AppendRequest) -> AppendResult:
        self.threads.append(threading.get_ident())
        return await super().append(request)

    async def read_latest(self, agent_id: str) -> Any:
        self.threads.append(threading.get_ident())
        return await super().read_latest(agent_id)


def test_a_save_and_a_cold_load_run_on_the_calling_thread() -> None:
    backend = Where()
    with SyncStateStore(backend, cache_size=0) as store:
        store.save("a-1", {"n": 1})
        assert store.load("a-1").data == {"n": 1}
        assert set(backend.threads) == {threading.get_ident()}
        backend.threads.clear()
        seen: list[int] = []

        def elsewhere() -> None:
            store.save("a-2", {"n": 2})
            store.load("a-2")
            seen.append(threading.get_ident())

        other = threading.Thread(target=elsewhere)
        other.start()
        other.join()
        assert set(backend.threads) == set(seen)


def test_sixteen_threads_saving_at_once_all_land_on_one_loop(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with SyncStateStore(url, durability="group") as store:
        start = threading.Barrier(16)
        errors: list[BaseException] = []

        def work(n: int) -> None:
            start.wait()
            try:
                for i in range(1, 6):
                    store.save(f"a-{n}", {"i": i})
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
    with SyncStateStore(url) as again:
        assert [again.load(f"a-{n}").data for n in range(16)] == [{"i": 5}] * 16
