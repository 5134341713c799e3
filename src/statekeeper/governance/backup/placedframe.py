"""A local page backup's manifest sealed into its place (format versions 5 and 2: no
format change).

A whole page backup's manifest (7.6 MB for 100,000 agents, 6.1 MB of it their heads)
was made after the last page was shipped, on the backup's serial end: packed (the
heads packed ahead by the heads' thread spliced in: a joined copy), made a zero-run
frame (a copy), encrypted (a new buffer), put behind its nonce and its frame's head
(two copies) and staged for ``O_DIRECT`` (a copy). Each new 7.6 MB buffer is faulted
in page by page (~1,850 faults, ~0.4 ms a MB on this VM): ~11,000 faults and ~30 ms
CPU of a fresh process's backup after its last page (docs/benchmarks.md, "backup6").

Here (:func:`finish_placed`), where the file is written with ``O_DIRECT``
(:class:`.directfile.DirectFile`) and the heads' thread made its pairs a zero-run
frame's blocks already (:attr:`.framepack.Ahead.blocks`, while the pages were
shipped): the manifest's other pairs (its map header, the chunks, the page digests,
the totals) are put in raw blocks behind the zstd frame's head, and the two pieces are
encrypted one after the other (one AES-GCM message: :func:`seal_parts_into`) straight
into the buffer the frame is written from (:meth:`.directfile.DirectFile.write_placed`).
The frame reads as before: one zstd frame of raw and RLE blocks, its content size in
its header, the map's pairs as :func:`.framepack.packb` splices them.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from ...errors import BackupError
from .directfile import DirectFile
from .fileformat import _NONCE, MANIFEST, TRAILER, BackupKey, FrameWriter, _aad, _u64
from .framepack import TAG, Ahead, spliced

if TYPE_CHECKING:
    from .sealer import Buffer

__all__ = ["HEAD_BYTES", "finish_manifest", "finish_placed", "seal_parts_into", "zstd_head"]

#: the head of a zero-run frame (``native/pagepass.c``): zstd's magic, a descriptor
#: (its content size in 8 bytes, a window descriptor, no checksum), a window of 128
#: KiB: no block refers to another; the content size (little-endian) follows
_ZSTD_HEAD = b"\x28\xb5\x2f\xfd\xc0\x38"
_u64le = struct.Struct("<Q")
#: a zstd block's largest content (the window)
BLOCK_MAX = 128 * 1024
#: the bytes of a zero-run frame before its first block
HEAD_BYTES = len(_ZSTD_HEAD) + 8


def zstd_head(size: int, data: Buffer) -> bytearray:
    """A zero-run frame of ``size`` bytes' head, then ``data`` (its first bytes) in
    raw blocks, none of them the last: the frame's other blocks follow."""
    out = bytearray(_ZSTD_HEAD + _u64le.pack(size))
    with memoryview(data) as view:
        for at in range(0, len(view), BLOCK_MAX):
            piece = view[at : at + BLOCK_MAX]
            out += (len(piece) << 3).to_bytes(3, "little")  # a raw block, not the last
            out += piece
    return out


def seal_parts_into(
    key: BackupKey, aad: bytes, parts: tuple[Buffer, ...], out: memoryview
) -> tuple[bytes, int]:
    """:meth:`.fileformat.BackupKey.seal_into` of the concatenation of ``parts``, never
    joined: one AES-GCM message encrypted piece after piece (the same ciphertext and
    tag as :meth:`~.fileformat.BackupKey.seal_apart` of the joined bytes) into ``out``
    (their length + 16 bytes at least); ``(nonce, bytes written)``."""
    import os

    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    nonce = os.urandom(_NONCE)
    cipher = Cipher(algorithms.AES(key._encryption), modes.GCM(nonce))
    encryptor = cipher.encryptor()
    encryptor.authenticate_additional_data(aad)
    at = 0
    for part in parts:
        # (a block cipher's update asks for 15 bytes of room more: the tag's, at the end)
        at += encryptor.update_into(part, out[at : at + len(part) + 15])
    rest = encryptor.finalize()  # (GCM holds nothing back: empty)
    out[at : at + len(rest)] = rest
    at += len(rest)
    out[at : at + TAG] = encryptor.tag
    return nonce, at + TAG


def finish_manifest(writer: FrameWriter, manifest: dict[str, Any], packed: Ahead | None) -> None:
    """The backup's end: its manifest by :func:`finish_placed` where it applies, else
    by :meth:`.fileformat.FrameWriter.finish`."""
    if not finish_placed(writer, manifest, packed):
        writer.finish(manifest, packed)


def finish_placed(writer: FrameWriter, manifest: dict[str, Any], packed: Ahead | None) -> bool:
    """:meth:`.fileformat.FrameWriter.finish` of a local page backup, its manifest's
    frame sealed into its place (see the module's documentation); False, nothing
    written, where it does not apply (the file not ``O_DIRECT``, its manifest not a
    zero-run frame, no blocks made ahead, or a manifest not holding the values packed
    ahead): then ``finish``."""
    out = writer.out
    if writer.stopped:  # (cancelled: nothing more written, ``finish`` raises it)
        return False
    if (
        packed is None
        or packed.blocks is None
        or writer.manifest_frames is None
        or not isinstance(out, DirectFile)
    ):
        return False
    manifest["chunks"] = writer.chunks
    front = spliced(manifest, packed)
    if front is None:
        return False
    size = len(front) + len(packed.pairs)
    head = zstd_head(size, front)
    offset = writer.offset
    prefix = len(MANIFEST) + 8 + _NONCE
    length = prefix + len(head) + len(packed.blocks) + TAG
    buf = out.placed_buffer(length, keep=False)
    at = out.place(offset)
    with memoryview(buf) as view:
        with view[at + prefix : at + length] as body:
            aad = _aad(writer.header, MANIFEST, 0)
            nonce, sealed = seal_parts_into(writer.key, aad, (head, packed.blocks), body)
        if sealed != length - prefix:  # never: GCM writes what it is given
            raise BackupError("the backup's manifest was not sealed whole")
        view[at : at + prefix] = MANIFEST + _u64.pack(length - len(MANIFEST) - 8) + nonce
    try:
        out.write_placed(buf, length, _written)
    except OSError as exc:  # the disk is full, the device failed: a typed error
        raise BackupError(f"cannot write the backup: {exc}") from None
    writer.plain_bytes += size
    writer.offset += length
    writer._write(TRAILER + _u64.pack(offset))
    out.flush()
    return True


def _written(buf: Any) -> None:
    """A placed manifest's buffer, written: not kept for another backup (freed with it)."""
