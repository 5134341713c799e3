"""The saver estimates a record's stored size with a plain zstd compressor
(``commits._estimate``) to pick its snapshots. It was one compressor for the whole
process, while savers on different loops — and a sync saver's call run on its caller's
thread — estimate at the same time; a ``zstandard.ZstdCompressor`` must not be used by
two threads at once (h/lgwrite2's finding). Then one a thread, a new one on each of
the threads LangGraph makes per ``invoke``; now idle compressors are kept for any
thread, one ``compress`` at a time each (docs/benchmarks.md, "lgturn")."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
import zstandard

from statekeeper.integrations.langgraph import commits

_BLOB = b'{"ops":[{"op":"add","path":"/ns//cp/1","value":"' + b"abcdefgh" * 40 + b'"}]}'


class _Exclusive:
    """A compressor recording use by two threads at once; each ``compress`` waits
    until the barrier lets it go."""

    shared: ClassVar[list[str]] = []
    made = 0

    def __init__(self, level: int) -> None:
        _Exclusive.made += 1
        self.real = zstandard.ZstdCompressor(level=level)
        self.busy = False

    def compress(self, data: bytes) -> bytes:
        if self.busy:
            _Exclusive.shared.append(threading.current_thread().name)
        self.busy = True
        try:
            _Exclusive.barrier.wait(timeout=30)
            return bytes(self.real.compress(data))
        finally:
            self.busy = False

    barrier = threading.Barrier(1)


@pytest.fixture
def exclusive(monkeypatch: pytest.MonkeyPatch) -> type[_Exclusive]:
    monkeypatch.setattr(commits, "zstandard", SimpleNamespace(ZstdCompressor=_Exclusive))
    monkeypatch.setattr(commits, "_ESTIMATORS", [])
    _Exclusive.shared, _Exclusive.made = [], 0
    _Exclusive.barrier = threading.Barrier(1)
    return _Exclusive


def _on_threads(count: int) -> list[Any]:
    out: list[Any] = []
    threads = [
        threading.Thread(target=lambda: out.append(commits._estimate(_BLOB))) for _ in range(count)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return out


def test_threads_estimating_at_once_never_share_a_compressor(exclusive: type[_Exclusive]) -> None:
    expected = len(zstandard.ZstdCompressor(level=1).compress(_BLOB))
    assert commits._estimate(_BLOB) == expected  # (one made, idle now)
    exclusive.barrier = threading.Barrier(2)
    assert _on_threads(2) == [expected, expected]
    assert exclusive.shared == []
    assert exclusive.made == 2


def test_a_new_thread_estimates_with_an_idle_compressor(exclusive: type[_Exclusive]) -> None:
    for _ in range(5):
        _on_threads(1)
    assert exclusive.made == 1
