"""The restore of a chain of page backups: a full page backup (format version 2 or 5 that
lists its page digests) and the incremental ones by pages after it (format version 4 or 6,
:mod:`.pagedelta`) become one store image, restored as a full backup's.

:func:`page_runs` says which files of a restore's chain form such runs;
:func:`chain_image` rebuilds a run's image into a temporary file (``$TMPDIR``): the full
backup's image (every chunk authenticated and checked against its manifest, its size
too), then each incremental's pages written at their place (its chunks likewise
checked, as many bytes as the pages it lists) and the file cut to its page count; the
image must then digest, page by page, to the last manifest's ``page_digests``: an
incremental laid over another parent than its own, or a page missing, is refused
(:class:`~statekeeper.errors.BackupCorrupt`) before anything is restored. The order
of the files (each one's parent the one before it) is checked by the restore's chain
check first.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence

from ...backends.sqlite.files import require_store_file
from ...errors import BackupCorrupt, NotAStore
from .fileformat import FILE_IMAGES, PAGE_DELTAS, BackupKey, FrameReader
from .pagedelta import DIGEST, Digester, changed_pages, page_digester, page_layout

__all__ = ["chain_image", "page_runs"]

_READ = 8 << 20


def page_runs(versions: Sequence[int]) -> list[tuple[int, int]]:
    """``(first, last)`` of every run of the chain's files (their format versions, in
    order): a page incremental (version 4 or 6) joins the run of the file before it; every
    other file is a run of its own."""
    runs: list[tuple[int, int]] = []
    for number, version in enumerate(versions):
        if version in PAGE_DELTAS and runs:
            runs[-1] = (runs[-1][0], number)
        else:
            runs.append((number, number))
    return runs


@contextlib.contextmanager
def chain_image(paths: Sequence[str], key: BackupKey, folder: str) -> Iterator[str]:
    """The store image of a run of page backups (``paths``: a full one, then its
    incrementals in order) rebuilt in ``folder`` (see the module documentation);
    removed on exit."""
    image = os.path.join(folder, "chain.db")
    try:
        _rebuild(paths, key, image)
        yield image
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(image)


def _rebuild(paths: Sequence[str], key: BackupKey, image: str) -> None:
    readers = []
    try:
        for path in paths:
            readers.append(FrameReader(path, key))
        first = readers[0]
        layout = page_layout(first) if first.header.version in FILE_IMAGES else None
        if layout is None:
            raise BackupCorrupt(
                first.path,
                "chain",
                "an incremental backup by pages follows it, but it is not a full backup"
                " that lists its pages",
            )
        page_size = layout[0]
        with open(image, "wb+") as out:
            size = 0
            for piece in first.file_chunks():
                out.write(piece)
                size += len(piece)
            if size != first.manifest.get("file_bytes") or size != layout[1] * page_size:
                raise BackupCorrupt(first.path, "chunks", "they do not hold the manifest's pages")
            for reader in readers[1:]:
                _lay_over(reader, out.fileno(), page_size)
            out.flush()
            last = readers[-1]
            expected = page_layout(last)
            assert expected is not None  # _lay_over checked it
            digester = page_digester(expected[3], key)  # the last manifest's kind
            if _digests_of(out.fileno(), page_size, digester) != expected[2]:
                raise BackupCorrupt(
                    last.path,
                    "page image",
                    "the image rebuilt from the chain differs from the manifest's page digests",
                )
        try:
            require_store_file(image)
        except NotAStore as exc:  # authenticated yet not a store: a writer bug, refused
            raise BackupCorrupt(last.path, "page image", str(exc)) from None
    finally:
        for reader in readers:
            reader.close()


def _lay_over(reader: FrameReader, fd: int, page_size: int) -> None:
    """Write an incremental's pages into the image (open at ``fd``), cut it to the
    incremental's page count."""
    layout = page_layout(reader) if reader.header.version in PAGE_DELTAS else None
    if layout is None or layout[0] != page_size:
        raise BackupCorrupt(reader.path, "manifest", "not an incremental backup by pages")
    changed = changed_pages(reader)
    pending = bytearray()
    at = 0
    for piece in reader.file_chunks():
        pending += piece
        whole = len(pending) - len(pending) % page_size
        for start in range(0, whole, page_size):
            if at >= len(changed):
                raise BackupCorrupt(reader.path, "chunks", "they hold more pages than listed")
            os.pwrite(fd, pending[start : start + page_size], (changed[at] - 1) * page_size)
            at += 1
        del pending[:whole]
    if pending or at != len(changed):
        raise BackupCorrupt(reader.path, "chunks", "they hold fewer pages than listed")
    os.ftruncate(fd, layout[1] * page_size)


def _digests_of(fd: int, page_size: int, digester: Digester) -> bytes:
    """Every page's digest of the file at ``fd``."""
    out = bytearray()
    step = max(page_size, _READ - _READ % page_size)
    offset = 0
    while True:
        piece = os.pread(fd, step, offset)
        if not piece:
            break
        if len(piece) % page_size:  # a torn last page: it digests as nothing listed
            out += bytes(DIGEST)
        out += digester(piece, page_size)
        offset += len(piece)
    return bytes(out)
