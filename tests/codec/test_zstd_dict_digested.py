"""The built-in zstd dictionary digested once per level for every thread's compressor
(h/lgwrite2): each new compressor built the dictionary's tables again at its first
``compress`` (``ZSTD_createCDict``), once per thread — and LangGraph runs each
invocation's writes on new threads. The frames stay the very bytes the raw dictionary
gives (the stored format does not move), read back by the dictionary's decompressor."""

from __future__ import annotations

import os
import threading

import pytest
import zstandard

from statekeeper.codec import Codec, zstd_dict

_BODY = (
    b'{"ops":[{"op":"replace","path":"/ns//cp","value":{"h":["1f1f11d5-f20f-6afe",'
    b'"2026-12-06T02:33:07.753842+00:00",null],"v":2,"cv":{"n":2,"__start__":1}}}]}'
)


@pytest.mark.parametrize("level", [1, 3, 19])
def test_the_frames_are_the_bytes_the_raw_dictionary_gives(level: int) -> None:
    raw = zstandard.ZstdCompressor(
        level=level, dict_data=zstd_dict.data(), write_content_size=True, write_dict_id=False
    )
    ours = zstd_dict.compressor(level)
    for body in (b"{}", _BODY, _BODY * 30, os.urandom(700), _BODY * 2000):
        frame = ours.compress(body)
        assert frame == raw.compress(body)
        assert zstd_dict.decompressor().decompress(frame) == body


def test_every_threads_compressor_shares_one_digested_dictionary() -> None:
    dicts: list[object] = []

    def make() -> None:
        dicts.append(zstd_dict._digested(3))
        zstd_dict.compressor(3).compress(_BODY)

    threads = [threading.Thread(target=make) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(dicts) == 3 and all(d is dicts[0] for d in dicts)
    assert zstd_dict._digested(1) is not dicts[0]  # (one per level)


def test_a_saver_codec_seals_the_same_records_on_new_threads() -> None:
    codec = Codec(compression="zstd-dict", compress_min_bytes=64)
    made: list[tuple[bytes, ...]] = []

    def seal() -> None:
        made.append(tuple(codec.seal("a", 2, "lg.cp", 1.0, _BODY * 3, bytes(32))))

    for _ in range(3):
        thread = threading.Thread(target=seal)
        thread.start()
        thread.join()
    assert len(set(made)) == 1
    opened = codec.open("a", 2, "lg.cp", 1.0, made[0][0], made[0][1])
    assert opened.body == _BODY * 3
