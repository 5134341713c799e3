"""A codec's zstd compressors are kept in a pool shared by every thread, not one per
thread: LangGraph runs each ``invoke``'s saver calls on threads of its own, and each
new thread made a compressor (its context on the digested dictionary, ~25 us) for the
one or two records it sealed (docs/benchmarks.md, "lgturn"). A compressor still serves
one ``compress`` at a time: two threads compressing at once never share one."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, ClassVar

import pytest

from statekeeper.codec import zstd_dict
from statekeeper.codec.pipeline import Codec

_JSON = b'{"ops":[{"op":"add","path":"/ns//cp/1","value":"' + b"abcdefgh" * 40 + b'"}]}'


def _seal_general(codec: Codec) -> Callable[[], Any]:
    return lambda: codec.seal("a", 2, "lg.cp", 1.0, _JSON, bytes(32))


def _seal_bound(codec: Codec) -> Callable[[], Any]:
    sealer = codec.compressed_sealer()
    assert sealer is not None
    return lambda: sealer("a", 2, "lg.cp", 1.0, _JSON, bytes(32))


def _on_thread(fn: Callable[[], Any]) -> Any:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join()
    return out[0]


@pytest.mark.parametrize("path", [_seal_general, _seal_bound], ids=["seal", "sealer"])
def test_a_new_thread_reuses_an_idle_compressor(
    monkeypatch: pytest.MonkeyPatch, path: Callable[[Codec], Callable[[], Any]]
) -> None:
    made: list[Any] = []
    real = zstd_dict.compressor

    def counted(level: int) -> Any:
        made.append(level)
        return real(level)

    monkeypatch.setattr(zstd_dict, "compressor", counted)
    codec = Codec(compression="zstd-dict", compress_min_bytes=64)
    seal = path(codec)
    first = _on_thread(seal)
    again = [_on_thread(seal) for _ in range(4)]
    assert made == [3]  # one compressor for five threads, one after the other
    assert all(record == first for record in again)
    assert first == tuple(
        Codec(compression="zstd-dict", compress_min_bytes=64).seal(
            "a", 2, "lg.cp", 1.0, _JSON, bytes(32)
        )
    )


class _Exclusive:
    """A compressor that records being used by two threads at once, and holds each
    ``compress`` until both threads are inside one."""

    both_inside = threading.Barrier(2)
    shared: ClassVar[list[str]] = []

    def __init__(self, real: Any) -> None:
        self.real = real
        self.busy = False

    def compress(self, data: bytes) -> bytes:
        if self.busy:
            _Exclusive.shared.append(threading.current_thread().name)
        self.busy = True
        try:
            _Exclusive.both_inside.wait(timeout=30)
            return bytes(self.real.compress(data))
        finally:
            self.busy = False


@pytest.mark.parametrize("path", [_seal_general, _seal_bound], ids=["seal", "sealer"])
def test_two_threads_compressing_at_once_never_share_a_compressor(
    monkeypatch: pytest.MonkeyPatch, path: Callable[[Codec], Callable[[], Any]]
) -> None:
    real = zstd_dict.compressor
    monkeypatch.setattr(zstd_dict, "compressor", lambda level: _Exclusive(real(level)))
    _Exclusive.both_inside = threading.Barrier(2)
    _Exclusive.shared = []
    codec = Codec(compression="zstd-dict", compress_min_bytes=64)
    seal = path(codec)
    _Exclusive.both_inside = threading.Barrier(1)  # (a compressor made idle first)
    expected = seal()
    _Exclusive.both_inside = threading.Barrier(2)
    out: list[Any] = []
    threads = [threading.Thread(target=lambda: out.append(seal())) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert _Exclusive.shared == []
    assert out == [expected, expected]
