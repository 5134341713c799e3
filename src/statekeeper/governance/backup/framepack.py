"""A backup frame's content packed (:func:`packb`, some of its pairs packed ahead:
:func:`ahead`) and a frame named (:func:`named_by`, :func:`last`): what
:mod:`.fileformat`'s writer and reader share with nothing else."""

from __future__ import annotations

import hashlib
import struct
from typing import Any, NamedTuple

import msgpack  # type: ignore[import-untyped]

from ...store.change import fast_packer

__all__ = ["TAG", "Ahead", "ahead", "last", "named_by", "packb", "spliced"]

#: bytes of an AES-GCM tag (a frame's last bytes)
TAG = 16


class Ahead(NamedTuple):
    """Pairs of a map packed ahead of the map (:func:`ahead`): their values, and their
    msgpack without a map's header; ``blocks``, if made: those bytes as a zstd frame's
    raw and RLE blocks, its last block flagged last (a zero-run frame without its
    header: :meth:`.fileformat.FrameWriter.finish` seals the manifest's frame around
    them, the map's other pairs in raw blocks before them)."""

    values: dict[str, Any]
    pairs: memoryview
    blocks: memoryview | None = None


def ahead(pairs: dict[str, Any]) -> Ahead:
    """``pairs`` packed now, for :func:`packb` to splice into the map that will hold
    them: a 100,000-agent page backup's heads (6.1 MB of its 7.6 MB manifest) are
    packed by the heads' thread while the pages are shipped, not after them
    (docs/benchmarks.md, "backup3")."""
    packed = _packed(pairs)
    return Ahead(dict(pairs), memoryview(packed)[_header_length(packed) :])


def packb(content: Any, packed: Ahead | None = None) -> bytes:
    """``content`` as msgpack (``use_bin_type``). With ``packed`` (:func:`ahead`) and
    ``content`` a map holding those very values (the same objects) under those keys,
    they are spliced in, packed already: the map's other pairs first, then those (the
    same map to a reader; keys in another order); otherwise all packed now."""
    front = spliced(content, packed)
    if front is not None and packed is not None:
        return b"".join((front, packed.pairs))  # one copy
    return _packed(content)


def spliced(content: Any, packed: Ahead | None) -> bytes | None:
    """What comes before ``packed``'s pairs in :func:`packb`'s splice of ``content``
    (the map's header and its other pairs), or None where :func:`packb` packs it all
    now (``content`` not a map holding those very values)."""
    if (
        packed is not None
        and isinstance(content, dict)
        and all(content.get(key, _ABSENT) is value for key, value in packed.values.items())
    ):
        rest = _packed({k: v for k, v in content.items() if k not in packed.values})
        with memoryview(rest) as pairs:
            return _map_header(len(content)) + pairs[_header_length(rest) :]
    return None


_ABSENT = object()


def _map_header(size: int) -> bytes:
    """msgpack's header of a map of ``size`` pairs (fixmap, map 16, map 32)."""
    if size < 16:
        return bytes((0x80 | size,))
    if size < 1 << 16:
        return b"\xde" + struct.pack(">H", size)
    return b"\xdf" + struct.pack(">I", size)


def _header_length(packed: bytes) -> int:
    """The length of the map header ``packed`` (a packed map) starts with."""
    return {0xDE: 3, 0xDF: 5}.get(packed[0], 1)


def _packed(content: Any) -> bytes:
    """``content`` as msgpack (``use_bin_type``): by ``ormsgpack`` where it takes it
    (the same bytes, half the time: the manifest of a 100,000-agent page backup, 7.6 MB,
    0.015 against 0.008 CPU-s, docs/benchmarks.md "backupsix"), else by ``msgpack``
    (what the strict packer refuses: a tuple, an integer beyond 64 bits, a subclass)."""
    fast = fast_packer()
    if fast is not None:
        try:
            packed: bytes = fast[0](content, None, fast[1])
            return packed
        except TypeError:
            pass
    out: bytes = msgpack.packb(content, use_bin_type=True)
    return out


def last(checksum: bytes | None) -> str:
    """A row manifest's ``last``: the SHA-256 of a head record's checksum, or empty."""
    return hashlib.sha256(checksum).hexdigest() if checksum else ""


def named_by(entry: dict[str, Any], frame: bytes) -> bool:
    """Whether ``frame`` is the one the manifest's chunk ``entry`` names: by its GCM
    tag (``"tag"``: what a file backup writes since the fourth pass) or by the
    SHA-256 of the whole frame (``"sha256"``: the row path, and every earlier
    backup); an entry with neither names nothing."""
    tag = entry.get("tag")
    if tag is not None:
        return isinstance(tag, str) and frame[-TAG:].hex() == tag
    return hashlib.sha256(frame).hexdigest() == entry.get("sha256")
