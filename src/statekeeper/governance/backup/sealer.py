"""The sealing of a file backup's raw chunks (format versions 2 and 3, see
:mod:`.fileformat`): bytes fed in any pieces are cut into chunks, compressed,
encrypted and named by a few threads, and written in order."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from .fileformat import _TAG, CHUNK, _aad, _u64
from .pagedelta import page_digests

if TYPE_CHECKING:
    from .fileformat import FrameWriter

__all__ = ["ChunkSealer"]

#: a sealed chunk: its frame's head, its ciphertext (a view of the reused buffer), its
#: tag, the buffer and the plain piece (both handed back once written), its pages'
#: digests (empty unless asked for)
_Sealed = tuple[bytes, memoryview, str, bytearray, "bytes | bytearray | memoryview", bytes]


class ChunkSealer:
    """Bytes fed in any pieces become consecutive raw chunks of ``chunk_bytes``,
    compressed (zstd ``level``), encrypted and named by ``threads`` threads (zstd and
    AES-GCM release the GIL) and written in order by the feeding thread (a file backup:
    version 2 from a file, version 3 from PostgreSQL's ``COPY`` as it streams)."""

    def __init__(
        self, writer: FrameWriter, chunk_bytes: int, threads: int, level: int, page_size: int = 0
    ) -> None:
        self._writer = writer
        #: ``page_size``: every chunk is whole pages, each digested by the sealing
        #: threads (:func:`.pagedelta.page_digests`) into :attr:`digests`, in order
        self._page_size = page_size
        self.digests = bytearray()
        self._chunk = max(1, chunk_bytes)
        self._threads = max(1, threads)
        self._level = level
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(self._threads)
        self._pending = bytearray()
        self._in_flight: list[tuple[int, Future[_Sealed]]] = []
        # buffers handed back once their chunk is written, taken again for the next:
        # the image's pieces (:meth:`spare`) and the ciphertexts. A new 8 MiB buffer
        # per chunk is zeroed twice (by the allocator's fresh pages and by bytearray /
        # cryptography) and faulted in: measured in docs/benchmarks.md, bk15
        self._plains: list[bytearray] = []
        self._outs: list[bytearray] = []
        self.size = 0

    def spare(self, size: int) -> bytearray | None:
        """A buffer of ``size`` bytes whose chunk is written already (its old bytes
        still in it: the caller overwrites all of it), or None."""
        plains = self._plains
        while plains:
            buf = plains.pop()
            if len(buf) == size:
                return buf
        return None

    def _seal(self, index: int, plain: bytes | bytearray | memoryview) -> _Sealed:
        import zstandard

        zstd = getattr(self._local, "zstd", None)
        if zstd is None:
            zstd = self._local.zstd = zstandard.ZstdCompressor(level=self._level)
        writer = self._writer
        packed = zstd.compress(plain)
        need = len(packed) + _TAG
        try:
            out: bytearray | None = self._outs.pop()  # atomic: threads take their own
        except IndexError:
            out = None
        if out is None or len(out) < need:
            out = bytearray(max(need, self._chunk + (self._chunk >> 6)))
        nonce, sealed = writer.key.seal_into(_aad(writer.header, CHUNK, index), packed, out)
        # the frame is written as its head (kind, length, nonce) and its ciphertext:
        # no copy of the ciphertext into one frame (two copies of every byte shipped)
        head = CHUNK + _u64.pack(len(nonce) + len(sealed)) + nonce
        # the manifest names the frame by its GCM tag, not a SHA-256 of it: the tag
        # already authenticates the frame's bytes (nonce and ciphertext, under the
        # backup key, bound to the header and the index), so a frame swapped for
        # another one fails the same way, and the SHA-256 pass cost 0.12 of ~0.85
        # CPU-s for a 155 MB copy (docs/benchmarks.md, fourth pass)
        digests = page_digests(plain, self._page_size) if self._page_size else b""
        return head, sealed, sealed[-_TAG:].hex(), out, plain, digests

    def _submit(self, plain: bytes | bytearray | memoryview) -> None:
        writer = self._writer
        self.size += len(plain)
        writer.plain_bytes += len(plain)
        index = len(writer.chunks) + len(self._in_flight)
        self._in_flight.append((index, self._pool.submit(self._seal, index, plain)))
        while len(self._in_flight) > self._threads:
            self._land()

    def _land(self) -> None:
        writer = self._writer
        index, future = self._in_flight.pop(0)
        head, sealed, tag, out, plain, digests = future.result()
        self.digests += digests
        writer.chunks.append(
            {"index": index, "offset": writer.offset, "length": len(head) + len(sealed), "tag": tag}
        )
        writer._write(head)
        writer._write(sealed)
        sealed.release()
        self._outs.append(out)
        # only a piece fed as ``owned`` is sealed as the caller's bytearray (the rest
        # are copies): it comes back through :meth:`spare`, a few at most
        if type(plain) is bytearray and len(self._plains) <= self._threads:
            self._plains.append(plain)

    def feed(self, data: bytes | bytearray | memoryview, owned: bool = False) -> None:
        """Take ``data`` (any size); full chunks go to the threads (``owned``: the
        caller hands ``data`` over and never changes it again, so a full chunk is
        sealed as it is, not copied)."""
        if not self._pending and len(data) == self._chunk:
            self._submit(data if owned else bytes(data))
            return
        self._pending += data
        while len(self._pending) >= self._chunk:
            self._submit(bytes(self._pending[: self._chunk]))
            del self._pending[: self._chunk]

    def close(self) -> int:
        """Seal what is left, wait for every chunk; the bytes fed in all."""
        try:
            if self._pending:
                self._submit(bytes(self._pending))
                self._pending.clear()
            while self._in_flight:
                self._land()
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)
        return self.size
