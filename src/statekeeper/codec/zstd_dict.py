"""The built-in zstd dictionary of ``compression="zstd-dict"`` (record flag value 2).

A small record compressed alone pays for every string it holds once: a LangGraph
checkpoint event (~0.9 KB of JSON Patch: ``"op"``, ``"path"``, ``"/ns//cp"``,
``"__start__"``, ``"branch:to:"``, ISO timestamps, UUIDs …) compressed with plain zstd
keeps ~410 bytes, most of it that vocabulary. A dictionary holds the vocabulary once, in
the code, instead of in every record: measured on the 30-step graph of
``benchmarks/bench_langgraph_goals.py`` (702 records, none of them in the training set),
the checkpoint events 413 -> 204 bytes at level 3, all bodies 270,377 -> 131,138 bytes.

``zstd_dict1.bin`` (4 KiB) was trained with ``zstandard.train_dictionary(4096, samples,
level=19)`` on the record bodies of the saver's events on three graphs that are *not*
the benchmark's (``benchmarks/train_zstd_dict.py``). It is part of the stored format:
records written with it can only be read with these exact bytes, so the file never
changes (its SHA-256 is checked on load; a better dictionary would be a new flag value).
The dictionary's id is not written in the frames (the record's flag names it): 4 bytes
less a record.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from importlib import resources
from typing import Any

from ..errors import ConfigurationError

__all__ = ["SHA256", "compressor", "data", "decompressor"]

#: SHA-256 of ``zstd_dict1.bin``: records written with it are unreadable with other bytes
SHA256 = "20872ff63f035ff91b9a9fb1e11ec80ac7c6a5c7c7f79266c533efac4a8ccdc4"


@functools.cache
def data() -> Any:
    """The dictionary (a ``zstandard.ZstdCompressionDict``), verified."""
    from .pipeline import _zstd

    zstd = _zstd()
    raw = resources.files(__package__).joinpath("zstd_dict1.bin").read_bytes()
    if hashlib.sha256(raw).hexdigest() != SHA256:  # pragma: no cover - a broken install
        raise ConfigurationError("statekeeper's zstd dictionary 1 is damaged: reinstall")
    return zstd.ZstdCompressionDict(raw)


def compressor(level: int) -> Any:
    """A compressor with the dictionary (not thread-safe: one per thread), on the
    dictionary digested once for ``level`` in this process (:func:`_digested`)."""
    from .pipeline import _zstd

    return _zstd().ZstdCompressor(
        level=level, dict_data=_digested(level), write_content_size=True, write_dict_id=False
    )


@functools.cache
def _digested(level: int) -> Any:
    """The dictionary with its compression tables built once for ``level``
    (``precompute_compress``: zstd's ``CDict``, read-only, shared by the compressors of
    every thread). Given the raw dictionary instead, each new compressor built those
    tables again at its first ``compress`` (``ZSTD_createCDict``, ~0.4 M instructions
    with its context's set-up): once per thread, and LangGraph runs each graph
    invocation's writes on threads of its own — about once per run
    (docs/benchmarks.md, "lgwrite2"). The frames are the same bytes either way."""
    from .pipeline import _zstd

    raw = data().as_bytes()
    digested = _zstd().ZstdCompressionDict(raw)
    digested.precompute_compress(level=level)
    return digested


class _PerThread(threading.local):
    decompressor: Any = None


#: this thread's decompressor, shared by every codec of the thread
_per_thread = _PerThread()


def decompressor() -> Any:
    """This thread's decompressor with the dictionary (one per thread: a zstandard
    decompressor is not thread-safe). Built once per thread, not once per codec: each
    build digests the 4 KiB dictionary again (``ZSTD_createDDict``), and a LangGraph
    saver opened for a cold ``get_tuple`` makes a new codec (~2 % of that read's
    instructions, docs/benchmarks.md "cold11"). A one-shot ``decompress`` keeps no
    state between calls, so sharing it within the thread is safe."""
    dec = _per_thread.decompressor
    if dec is None:
        from .pipeline import _zstd

        dec = _per_thread.decompressor = _zstd().ZstdDecompressor(dict_data=data())
    return dec
