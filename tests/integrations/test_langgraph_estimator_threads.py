"""The saver estimates a record's stored size with a plain zstd compressor
(``commits._estimator``) to pick its snapshots. It was one compressor for the whole
process, while savers on different loops — and a sync saver's call run on its caller's
thread — estimate at the same time; a ``zstandard.ZstdCompressor`` must not be used by
two threads at once (h/lgwrite2's finding). Each thread now has its own."""

from __future__ import annotations

import threading

from statekeeper.integrations.langgraph import commits


def test_each_thread_estimates_with_its_own_compressor() -> None:
    seen: dict[str, object] = {}
    both = threading.Barrier(2)

    def estimate(name: str) -> None:
        both.wait()
        seen[name] = commits._estimator()
        assert commits._estimator() is seen[name]  # (kept for the thread)

    threads = [threading.Thread(target=estimate, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen["a"] is not seen["b"]
    assert seen["a"] is not commits._estimator()
