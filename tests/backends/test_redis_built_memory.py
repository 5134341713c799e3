"""Building a RedisBackend made its Lua scripts' text again each time (~220 KB: every
script repeats the shared helpers it includes), freed when the backend was closed but
kept by the C allocator: a process opening and closing a store 2,000 times grew by
~6-7 MB of RSS, a plateau that ``malloc_trim`` gave back (nothing of ours kept:
tracemalloc's heap grew ~100 KB, the lazy imports). The text is built once per process."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

pytest.importorskip("redis")

from statekeeper.backends.redis import RedisBackend


async def test_a_second_backend_does_not_build_the_scripts_again() -> None:
    first = RedisBackend("redis://127.0.0.1:1/0", prefix="built:")  # (never connects)
    await first.close()
    gc.collect()
    tracemalloc.start()
    try:
        second = RedisBackend("redis://127.0.0.1:1/0", prefix="built:")
        _, peak = tracemalloc.get_traced_memory()
        await second.close()
    finally:
        tracemalloc.stop()
    assert peak < 150 * 1024, f"building a backend allocated {peak / 1024:.0f} KB at its peak"
