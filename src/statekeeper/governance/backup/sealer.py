"""The sealing of a file backup's raw chunks (format versions 2 to 6 but 1, see
:mod:`.fileformat`): bytes fed in any pieces are cut into chunks, compressed,
encrypted and named by a few threads, and written in order by one more: a bounded
pipeline (:class:`ChunkSealer`)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from ...errors import BackupError
from .directfile import ALIGN, DirectFile
from .fileformat import _NONCE, CHUNK, _aad, _u64
from .framepack import TAG as _TAG
from .joined import BackupStopped
from .pagedelta import page_digests

if TYPE_CHECKING:
    from .fileformat import FrameWriter

#: what a chunk's frame is made of
Buffer = bytes | bytearray | memoryview
#: zstd's level, or its fast strategy's parameters, or what makes a sealing thread's
#: maker of chunks' zstd frames (its ``compress(chunk)``: the frame, valid until its
#: next call)
Level = int | dict[str, int] | Callable[[], Any]

__all__ = ["ChunkSealer", "Level", "seal_file"]


class _Placed:
    """A frame sealed in its place in a :meth:`.directfile.DirectFile.placed_buffer`:
    its offset in the file and its length (``len``)."""

    __slots__ = ("length", "offset")

    def __init__(self, offset: int, length: int) -> None:
        self.offset, self.length = offset, length

    def __len__(self) -> int:
        return self.length


#: a sealed chunk: its frame's head, its ciphertext (a view of the reused buffer), its
#: tag, the buffer and the plain piece (both handed back once written), its pages'
#: digests (empty unless asked for)
_Sealed = tuple[bytes, "memoryview | _Placed", str, Any, "bytes | bytearray | memoryview", bytes]


class ChunkSealer:
    """Bytes fed in any pieces become consecutive raw chunks of ``chunk_bytes``,
    compressed (zstd ``level``, or the fast strategy's parameters), encrypted and
    named by ``threads`` threads (zstd, AES-GCM and hashlib release the GIL) and
    written in order by a thread of their own (a file backup: version 2 or 5 from a
    file, version 3 from PostgreSQL's ``COPY`` as it streams).

    **The pipeline.** The feeding thread reads chunk *n+1* while the sealing threads
    compress and encrypt chunk *n* and the writing thread writes chunk *n-1*: no
    stage waits for another's work but for a chunk to be ready. It is bounded: at most
    ``threads + 2`` chunks are fed and not yet written (:meth:`feed` waits for the
    oldest one to be written past that), so the memory it holds is a few chunks
    whatever the store's size. Before, the feeding thread wrote each sealed chunk
    itself, so the page reader stood still while the kernel copied the chunk.

    **Failures.** The first failure of any stage (a chunk that cannot be sealed, a
    write that fails: :class:`~statekeeper.errors.BackupError`) stops the writing: no
    chunk is written after it, and :meth:`feed` or :meth:`close` raise it. The
    feeding side's own failure (the store cannot be read) is the caller's: leave the
    ``with`` block (:meth:`abort`): the threads are stopped and joined, nothing more
    is written, and the backup's file is removed by its
    :meth:`~.location.Location.writing` (no manifest, no trailer: never a file that
    reads as complete)."""

    def __init__(
        self,
        writer: FrameWriter,
        chunk_bytes: int,
        threads: int,
        level: Level,
        page_size: int = 0,
    ) -> None:
        self._writer = writer
        #: ``page_size``: every chunk is whole pages, each digested by the sealing
        #: threads (:func:`.pagedelta.page_digests`) into :attr:`digests`, in order
        #: (where the page pass is Python's: the C pass digests them as it reads)
        self._page_size = page_size
        self.digests = bytearray()
        self._chunk = max(1, chunk_bytes)
        self._threads = max(1, threads)
        self._level = level
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="sk-backup-seal")
        self._writing = ThreadPoolExecutor(1, thread_name_prefix="sk-backup-write")
        self._pending = bytearray()
        #: each chunk fed and not yet known written: its sealing and its writing
        self._in_flight: deque[tuple[Future[_Sealed], Future[None]]] = deque()
        self._index = len(writer.chunks)
        #: the first failure of the sealing or the writing: nothing is written after it
        self._failed: BaseException | None = None
        self._closed = False
        # buffers handed back once their chunk is written, taken again for the next:
        # the image's pieces (:meth:`spare`) and the ciphertexts. A new 8 MiB buffer
        # per chunk is zeroed twice (by the allocator's fresh pages and by bytearray /
        # cryptography) and faulted in: measured in docs/benchmarks.md, bk15
        self._plains: list[bytearray] = []
        self._outs: list[Any] = []
        self.size = 0
        #: a local file written with ``O_DIRECT`` (:class:`.directfile.DirectFile`):
        #: each frame sealed into its place in the buffer it is written from, at its
        #: offset in the file, given out in order as each chunk is framed (before its
        #: encryption: the threads still encrypt side by side)
        self._direct = writer.out if isinstance(writer.out, DirectFile) else None
        self._turn = threading.Condition()
        self._next = self._index  # the chunk whose offset is given out next
        self._end = writer.offset  # where it goes

    def __enter__(self) -> ChunkSealer:
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        if not self._closed:
            self.abort()

    def spare(self, size: int) -> bytearray | None:
        """A buffer of ``size`` bytes whose chunk is written already (its old bytes
        still in it: the caller overwrites all of it), or None."""
        plains = self._plains
        while plains:
            try:
                buf = plains.pop()  # atomic: the writing thread appends meanwhile
            except IndexError:
                return None
            if len(buf) == size:
                return buf
        return None

    def _seal(self, index: int, plain: bytes | bytearray | memoryview) -> _Sealed:
        import zstandard

        zstd = getattr(self._local, "zstd", None)
        if zstd is None:
            level = self._level
            if callable(level):  # frames of their own (filecopy.write_pages)
                zstd = level()
            elif isinstance(level, int):
                zstd = zstandard.ZstdCompressor(level=level)
            else:  # the fast strategy's tables (:data:`.filecopy.LEVEL`)
                params = zstandard.ZstdCompressionParameters(
                    strategy=zstandard.STRATEGY_FAST, **level
                )
                zstd = zstandard.ZstdCompressor(compression_params=params)
            self._local.zstd = zstd
        writer = self._writer
        try:
            packed = zstd.compress(plain)
            digests = (
                page_digests(plain, self._page_size, writer.key.page_seed)
                if self._page_size
                else b""
            )
        except BaseException as exc:
            self._skip(exc)
            raise
        if self._direct is not None:
            return self._seal_placed(self._direct, index, plain, packed, digests)
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
        return head, sealed, sealed[-_TAG:].hex(), out, plain, digests

    def _offset(self, index: int, length: int) -> int:
        """Chunk ``index``'s offset in the file, once the chunk before has taken its
        own (``length``: its frame's bytes); raises the pipeline's failure instead."""
        with self._turn:
            self._turn.wait_for(lambda: self._next == index or self._failed is not None)
            if self._failed is not None:
                raise self._failed
            offset, self._next, self._end = self._end, index + 1, self._end + length
            self._turn.notify_all()
            return offset

    def _skip(self, exc: BaseException) -> None:
        """A chunk failed before its offset (``exc``): the chunks after it are stopped."""
        with self._turn:
            if self._failed is None:
                self._failed = exc
            self._turn.notify_all()

    def _seal_placed(
        self, direct: DirectFile, index: int, plain: Buffer, packed: Buffer, digests: bytes
    ) -> _Sealed:
        """:meth:`_seal`'s encryption into the frame's place in ``direct``'s buffer."""
        writer = self._writer
        head_bytes = len(CHUNK) + 8 + _NONCE
        length = head_bytes + len(packed) + _TAG
        offset = self._offset(index, length)
        try:
            out = self._outs.pop()  # atomic: threads take their own
        except IndexError:
            out = None
        if out is None or len(out) < length + ALIGN:
            out = direct.placed_buffer(max(length, self._chunk + (self._chunk >> 6)))
        at = direct.place(offset)
        with memoryview(out) as view:
            body = view[at + head_bytes : at + length]
            nonce, sealed = writer.key.seal_into(_aad(writer.header, CHUNK, index), packed, body)
            sealed.release()  # (``body`` itself: the frame's place)
            view[at : at + head_bytes] = CHUNK + _u64.pack(length - len(CHUNK) - 8) + nonce
            tag = body[-_TAG:].hex()
            body.release()
        return b"", _Placed(offset, length), tag, out, plain, digests

    def _submit(self, plain: bytes | bytearray | memoryview) -> None:
        self._check()
        writer = self._writer
        self.size += len(plain)
        writer.plain_bytes += len(plain)
        index = self._index
        self._index += 1
        sealing = self._pool.submit(self._seal, index, plain)
        # one writing thread: the chunks are written in the order they were fed
        self._in_flight.append((sealing, self._writing.submit(self._put, index, sealing)))
        while len(self._in_flight) > self._threads + 1:
            self._in_flight.popleft()[1].result()  # the oldest written (or its failure)

    def _put(self, index: int, sealing: Future[_Sealed]) -> None:
        """Write chunk ``index`` once sealed (the writing thread, in order); after a
        failure of any chunk, nothing."""
        if self._failed is not None:
            raise self._failed
        try:
            head, sealed, tag, out, plain, digests = sealing.result()
            if self._failed is not None:  # stopped while this chunk was sealed
                raise self._failed
            if self._writer.stopped:  # (a placed frame is not written by ``_write``)
                raise BackupStopped("the backup was cancelled")
            writer = self._writer
            self.digests += digests
            writer.chunks.append(
                {
                    "index": index,
                    "offset": writer.offset,
                    "length": len(head) + len(sealed),  # (_Placed: its frame's length)
                    "tag": tag,
                }
            )
            if isinstance(sealed, _Placed):
                self._put_placed(sealed, out)
            else:
                writer._write(head)
                writer._write(sealed)
        except BaseException as exc:
            self._failed = exc
            raise
        if isinstance(sealed, memoryview):
            sealed.release()
            self._outs.append(out)
        # only a piece fed as ``owned`` is sealed as the caller's bytearray (the rest
        # are copies): it comes back through :meth:`spare`, a few at most
        if type(plain) is bytearray and len(self._plains) <= self._threads + 1:
            self._plains.append(plain)

    def _put_placed(self, placed: _Placed, out: Any) -> None:
        """:meth:`_put`'s write of a frame sealed in its place (the writing thread)."""
        writer, direct = self._writer, self._direct
        if direct is None or placed.offset != writer.offset:  # never: nothing else writes
            raise BackupError("a backup chunk's frame is not at its offset")
        try:
            direct.write_placed(out, len(placed), self._outs.append)
        except OSError as exc:  # the disk is full, the device failed: a typed error
            raise BackupError(f"cannot write the backup: {exc}") from None
        writer.offset += len(placed)

    def _check(self) -> None:
        if self._writer.stopped:  # (the backup cancelled: the feeding thread stops here)
            raise BackupStopped("the backup was cancelled")
        if self._closed:
            raise BackupError("the backup's chunks are closed already")
        if self._failed is not None:
            raise self._failed

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
        """Seal what is left, wait for every chunk to be written; the bytes fed in all.
        On a failure the pipeline is stopped (:meth:`abort`) and the failure raised."""
        try:
            if self._pending:
                self._submit(bytes(self._pending))
                self._pending.clear()
            while self._in_flight:
                self._in_flight.popleft()[1].result()
            if self._direct is not None:  # the last frames written while the manifest is made
                self._direct.write_batch()
        except BaseException:
            self.abort()
            raise
        self._closed = True
        self._pool.shutdown(wait=True)
        self._writing.shutdown(wait=True)
        return self.size

    def abort(self) -> None:
        """Stop the pipeline after a failure (the caller's, or a stage's): no chunk is
        written from now on, the chunks not yet sealed are dropped, and every thread
        is joined before this returns."""
        self._skip(BackupError("the backup was stopped"))  # (sealing threads waiting: woken)
        self._closed = True
        self._pending.clear()
        self._in_flight.clear()
        # the sealing first: a chunk's writing waits for its sealing (done or dropped)
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._writing.shutdown(wait=True, cancel_futures=True)


def seal_file(
    writer: FrameWriter, path: str, chunk_bytes: int, threads: int, level: Level = -1
) -> int:
    """Write the file at ``path`` into ``writer`` as consecutive raw chunks of
    ``chunk_bytes``, compressed (zstd ``level``) and encrypted by ``threads`` threads
    (zstd and AES-GCM release the GIL), written in order. Returns the file's size.
    :meth:`~.fileformat.FrameWriter.stop` ends it at the next chunk (its threads
    joined: :meth:`ChunkSealer.abort`)."""
    with writer.sealer(chunk_bytes, threads, level) as sealer, open(path, "rb") as source:
        while True:
            plain = source.read(chunk_bytes)
            if not plain:
                break
            sealer.feed(plain)
        return sealer.close()
