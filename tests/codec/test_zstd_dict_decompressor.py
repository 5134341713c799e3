"""The zstd dictionary's decompressor: one per thread, shared by the thread's codecs."""

from __future__ import annotations

import threading
from typing import Any

import orjson
import pytest

pytest.importorskip("zstandard")

from statekeeper.codec import Codec
from statekeeper.codec.zstd_dict import compressor, decompressor


def test_one_thread_reuses_one_decompressor() -> None:
    assert decompressor() is decompressor()


def test_two_threads_get_separate_decompressors() -> None:
    seen: list[Any] = []

    def grab() -> None:
        seen.append((decompressor(), decompressor()))

    threads = [threading.Thread(target=grab) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (a1, a2), (b1, b2) = seen
    assert a1 is a2 and b1 is b2
    assert a1 is not b1
    assert decompressor() is not a1 and decompressor() is not b1


def test_the_shared_decompressor_reads_what_the_dictionary_compressed() -> None:
    bodies = [b'{"ops":[{"op":"add","path":"/messages/-","value":"%d"}]}' % i for i in range(5)]
    for body in bodies:
        frame = compressor(3).compress(body * 20)
        assert decompressor().decompress(frame, max_output_size=1 << 20) == body * 20


def test_two_codecs_of_one_thread_open_zstd_dict_records_with_one_decompressor() -> None:
    writer = Codec(compression="zstd-dict", compress_min_bytes=0)
    body = {"messages": [{"role": "user", "content": "hello " * 50}] * 4}
    raw = orjson.dumps(body)
    sealed = [writer.seal("a", seq, "patch", float(seq), raw) for seq in (1, 2)]
    assert all(len(s.payload) < len(raw) for s in sealed)  # (compressed)
    readers = [Codec(compression="zstd-dict"), Codec(compression="zstd-dict")]
    for reader, (seq, s) in zip(readers, enumerate(sealed, 1), strict=True):
        doc, _ = reader.decode("a", seq, "patch", float(seq), s.payload, s.checksum)
        assert doc == body
    assert readers[0]._local.dict_decompressor is readers[1]._local.dict_decompressor
