"""An incremental backup of a SQLite store as the pages that changed (format version 4).

A full backup of a whole SQLite store (format version 2, :func:`.filecopy.write_pages`)
lists in its manifest a digest of every page of its image (``page_digests``: 16 bytes
a page, in page order; ``page_size``, ``pages``). What they are is ``page_hash``:
:data:`PAGE_HASH` (XXH3-128 seeded by the backup key's
:attr:`~.fileformat.BackupKey.page_seed`, what is written since backup15) or
:data:`SHA256_16` (the first 16 bytes of the page's SHA-256: backups written before,
still read and followed). An incremental one whose parent lists them (a full page backup, or another
incremental of this kind) takes the same kind of point-in-time page image of the live store
(:mod:`~statekeeper.backends.sqlite.pages`: one read snapshot, its heads read in it),
digests every page, and ships only the pages whose digest differs from the parent's
(or that the parent did not have), compressed and encrypted as a full backup's chunks.
Its manifest lists them (``changed``: page numbers, 4 bytes each, big-endian), the new
page count, every page's digest (the next incremental's parent) and, as a full backup,
every stream's head and the totals.

A restore (:mod:`.pagechain`) rebuilds the image from the chain (the full backup's
image, then each incremental's pages laid over it, the file cut to its page count),
checks the result against the last manifest's page digests, and restores it as a
full backup.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import xxhash

from ...arguments import INTERNAL_PREFIX
from ...errors import BackupCorrupt

if TYPE_CHECKING:
    from ...backends.sqlite.pages import PageSnapshot
    from .fileformat import BackupKey, FrameReader, FrameWriter

__all__ = [
    "DIGEST",
    "PAGE_HASH",
    "SHA256_16",
    "Digester",
    "changed_pages",
    "page_digester",
    "page_digests",
    "page_layout",
    "sha256_page_digests",
    "since_parent",
    "write_page_delta",
]

#: bytes of one page's digest
DIGEST = 16
#: what a manifest's ``page_digests`` are (``page_hash``), as written since backup15:
#: XXH3-128 of each page, seeded by the backup key's ``page_seed``
PAGE_HASH = "xxh3-128/seeded"
#: what the code before wrote: the first 16 bytes of each page's SHA-256. Read (a
#: restore checks an image against them, an incremental compares its pages with them)
SHA256_16 = "sha256/16"
_KINDS = frozenset({PAGE_HASH, SHA256_16})
_PAGENO = struct.Struct(">I")

#: every whole page's digest of a buffer, concatenated: ``(buf, page_size)``
Digester = Callable[[bytes | bytearray | memoryview, int], bytes]


def page_digests(buf: bytes | bytearray | memoryview, page_size: int, seed: int) -> bytes:
    """The digest of every whole page of ``buf`` (:data:`PAGE_HASH`: XXH3-128 under
    ``seed``), concatenated. Why not SHA-256 any more: a page backup digests every
    page of the store, and XXH3 costs ~0.3 us a 4 KiB page against ~3.5-5 us
    (docs/benchmarks.md, backup15). Why that is safe: these digests are not what
    refuses an edited backup (each chunk is an AES-256-GCM frame under the backup
    key, named in the manifest by its tag; the manifest is such a frame); they tell
    an incremental which pages changed and check the image a restore rebuilds from a
    chain. Being seeded by a secret of the backup key, whoever writes into the store
    cannot craft a page whose new content has its old digest (which would leave the
    page out of the next incremental: a restore would then refuse the chain, its
    streams no longer the manifest's heads); and they are inside the encrypted
    manifest, never seen without the key. XXH3 holds the GIL per page (~0.3 us)."""
    view = memoryview(buf)
    digest = xxhash.xxh3_128_digest
    return b"".join(
        digest(view[at : at + page_size], seed)
        for at in range(0, len(view) - page_size + 1, page_size)
    )


def sha256_page_digests(buf: bytes | bytearray | memoryview, page_size: int) -> bytes:
    """:data:`SHA256_16` digests of every whole page of ``buf``: what backups written
    before backup15 list (hashlib releases the GIL per page)."""
    view = memoryview(buf)
    sha256 = hashlib.sha256
    return b"".join(
        sha256(view[at : at + page_size]).digest()[:DIGEST]
        for at in range(0, len(view) - page_size + 1, page_size)
    )


def page_digester(kind: str, key: BackupKey) -> Digester:
    """The digests of ``kind`` (a manifest's ``page_hash``) under ``key``."""
    if kind == SHA256_16:
        return sha256_page_digests
    seed = key.page_seed
    return lambda buf, page_size: page_digests(buf, page_size, seed)


def page_layout(reader: FrameReader) -> tuple[int, int, bytes, str] | None:
    """``(page size, page count, page digests, their kind)`` of a page backup's
    manifest, or None: the backup does not list its pages (a namespace's copy,
    PostgreSQL, the row path, or a page backup written before they were listed)."""
    manifest = reader.manifest
    digests = manifest.get("page_digests")
    kind = manifest.get("page_hash")
    if digests is None or kind not in _KINDS:
        return None
    try:
        size, pages = int(manifest["page_size"]), int(manifest["pages"])
    except (KeyError, TypeError, ValueError):
        raise BackupCorrupt(reader.path, "manifest", "its page layout is malformed") from None
    if not isinstance(digests, bytes) or len(digests) != pages * DIGEST or size < 512:
        raise BackupCorrupt(reader.path, "manifest", "its page digests are malformed")
    return size, pages, digests, str(kind)


def changed_pages(reader: FrameReader) -> list[int]:
    """The page numbers a version-4 manifest lists as shipped (strictly increasing,
    each within its page count), else :class:`~statekeeper.errors.BackupCorrupt`."""
    raw = reader.manifest.get("changed")
    pages = reader.manifest.get("pages")
    if not isinstance(raw, bytes) or len(raw) % _PAGENO.size or not isinstance(pages, int):
        raise BackupCorrupt(reader.path, "manifest", "its list of changed pages is malformed")
    out = [n for (n,) in _PAGENO.iter_unpack(raw)]
    ordered = all(0 <= a < b for a, b in zip([0, *out], out, strict=False))
    if not ordered or (out and out[-1] > pages):
        raise BackupCorrupt(reader.path, "manifest", "its list of changed pages is out of order")
    return out


def write_page_delta(
    writer: FrameWriter,
    snapshot: PageSnapshot,
    parent: bytes,
    chunk_bytes: int,
    progress: Callable[[int, int], None] | None = None,
    parent_hash: str = PAGE_HASH,
) -> dict[str, Any]:
    """The pages of ``snapshot`` whose digest is not the one at their place in
    ``parent`` (the parent backup's page digests, of kind ``parent_hash``), in chunks
    into ``writer``; returns the manifest's body (heads and totals of the same
    snapshot, the page list, every page's :data:`PAGE_HASH` digest whatever the
    parent's kind: the chain moves to it). Runs in a thread."""
    from .filecopy import LEVEL, THREADS, shipped

    size = snapshot.page_size
    digests = bytearray()
    changed = bytearray()
    seed = writer.key.page_seed
    # after a parent of the code before (SHA-256), each page is compared by that kind
    # and listed by the new one: one incremental digests twice, the next ones once
    compare = None if parent_hash == PAGE_HASH else page_digester(parent_hash, writer.key)

    # the image is read into one buffer, again and again (the changed pages are copied
    # out of it): no new 8 MiB buffer zeroed and faulted in per piece (0.059-0.064
    # against 0.065-0.090 CPU-s for the 170 MB bench image, 4 runs)
    held: list[bytearray] = []

    def spare(n: int) -> bytearray | None:
        return held.pop() if held and len(held[-1]) == n else None

    def ship() -> int:
        snapshot.plan()
        pageno = 1
        with writer.sealer(chunk_bytes, THREADS, LEVEL) as sealer:
            at = 0  # where this piece starts in every kind (16 bytes a page)
            # each piece's digests taken in the pass that reads it (in C where built)
            for piece in snapshot.chunks(chunk_bytes, spare, seed):
                listed = snapshot.digests
                found = listed[at:] if compare is None else compare(piece, size)
                view = memoryview(piece)
                for i in range(0, len(found), DIGEST):
                    if found[i : i + DIGEST] != parent[at + i : at + i + DIGEST]:
                        changed.extend(_PAGENO.pack(pageno))
                        page = (i // DIGEST) * size
                        sealer.feed(view[page : page + size])
                    pageno += 1
                view.release()
                held[:] = [piece]
                at = len(listed)
            digests.extend(snapshot.digests)
            return sealer.close()

    from .fileformat import HEAD_TAGS

    tags = writer.header.version in HEAD_TAGS
    snapshot.will_plan()  # (ship() plans: see filecopy.write_pages)
    body = shipped(writer, snapshot.conn, progress, ship, tags, None, snapshot.heads)
    body["layout"] = "sqlite-page-delta"
    body.update(
        page_size=size,
        pages=snapshot.pages,
        page_hash=PAGE_HASH,
        page_digests=bytes(digests),
        changed=bytes(changed),
    )
    return body


def since_parent(body: dict[str, Any], parent: list[tuple[str, int, bytes]]) -> tuple[int, int]:
    """An incremental's totals, as the row path counts them: the streams whose head
    (seq, and its tag or checksum) is not the parent's (``parent``: its
    :meth:`~.fileformat.FrameReader.head_marks`; an incremental lists its heads as its
    parent does), the events after the parent's head (all of them for a stream new, or
    re-created below it), the streams deleted since (named). The snapshots stay the
    image's. Returns the part of the store's own streams (audit log, holds) in those
    totals: (streams, events)."""
    before = {agent: (head, mark) for agent, head, mark in parent}
    heads = body["heads"]
    if "tag" in heads:  # versions 5 and 6: a stream without a tag by its checksum
        untagged = dict(zip(body["untagged"]["agent"], body["untagged"]["checksum"], strict=True))
        marks = [
            t if t is not None else untagged[a]
            for a, t in zip(heads["agent"], heads["tag"], strict=True)
        ]
    else:
        marks = heads["checksum"]
    copied = events = own_copied = own_events = 0
    for agent, head, mark in zip(heads["agent"], heads["head"], marks, strict=True):
        was = before.pop(agent, None)
        if was == (head, mark):
            continue
        added = head - was[0] if was is not None and was[0] < head else head
        copied += 1
        events += added
        if agent.startswith(INTERNAL_PREFIX):
            own_copied += 1
            own_events += added
    body.update(copied=copied, events=events, deleted=sorted(before))
    return own_copied, own_events
