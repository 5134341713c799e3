"""The backup file: encrypted, compressed chunks and an authenticated manifest.

Layout (integers big-endian)::

    b"SKBACKUP" + version (1 byte)           magic and format version (1 to 6)
    header length (u32) + header (JSON)      backup id, parent id, key id + fingerprint
    frame*                                   kind (1 byte: C chunk, M manifest)
                                             + length (u64) + nonce (12) + ciphertext
    b"SKEND" + manifest frame offset (u64)   trailer

Every frame is ``AES-256-GCM(backup key, zstd(msgpack(content)))`` with associated
data binding it to the header bytes, its kind and its index, so an edited header, a
frame moved, dropped, swapped or copied from another backup fails authentication. The
manifest (the last frame) lists every chunk (offset, length, SHA-256 of the stored
frame, its agents) and every stream (first and head seq, record counts, SHA-256 digest
of its records): being authenticated with the backup key, it is the backup's
signature. A truncated file has no trailer; a removed chunk leaves a hole the
manifest names.

**Version 2** (header ``"layout": "sqlite-file"``): the chunks are not msgpack stream
entries but the consecutive pieces of a point-in-time image of a SQLite store file
(the pages of one read snapshot, or for a namespace a copy by ``INSERT ... SELECT``
into a new file, see :mod:`.filecopy`), each compressed and
encrypted as above; the manifest lists the chunks (digests as above), the copy's
size and every stream's head (seq, the head event's checksum, its record counts),
read from the copy with one SQL query, and the streams compacted by retention
(``compacted``: agent, base seq, base snapshot checksum). Since the fourth pass a
version-2 manifest names each chunk by its GCM tag (``"tag"``, the frame's last 16
bytes: it authenticates the frame already) instead of a SHA-256 of it (``"sha256"``,
what earlier ones hold: both are read).

**Version 3** (``"layout": "postgres-copy"``): the chunks are the consecutive pieces of
a PostgreSQL store's stream tables as its ``COPY ... TO STDOUT (FORMAT binary)`` sent
them (:mod:`.pgcopy`); the manifest as version 2's, plus each section's size.

**Version 4** (``"layout": "sqlite-page-delta"``): an incremental backup of a whole
SQLite store whose parent is a page backup: the chunks are the pages whose digest
changed since the parent, in page order; the manifest as version 2's, plus the page
numbers shipped (``changed``), the page count and every page's digest (a full page
backup of version 2 lists them too: ``page_digests``, ``page_size``, ``pages``). See
:mod:`.pagedelta` and :mod:`.pagechain`.

**Versions 5 and 6** (the layouts of versions 2 and 4, ``"sqlite-file"`` and
``"sqlite-page-delta"``): a whole SQLite store's pages, whose manifest lists each stream's
head by its **head tag** (``heads``: ``agent``, ``head``, ``tag``: the store's
``0x01 ‖ L ‖ key id ‖ HMAC(head key, agent, seq, link)``, see
:mod:`statekeeper.codec.pipeline`) as the heads table holds it, read in one scan of
that table, instead of the head record's checksum (a probe of the events per stream:
the largest step of a page backup's CPU, docs/benchmarks.md "backuphead"). A stream
whose head has no tag (written before tags) is listed with ``None`` there and its head
checksum in ``untagged`` (agent, checksum). A restore checks each stream's tag against
the chain it follows with the target's keys (:mod:`.restore`); an incremental by pages
keeps its parent's kind of heads (after a version-2 parent: version 4, the heads'
checksums read as before). Every version 2, 5, 4 and 6 file restores.

Version 1 (``"layout": "streams"``) is what the row path writes (incremental backups
of any other parent, every engine but SQLite and PostgreSQL) and what every earlier
statekeeper wrote; all six are read.

The backup key is not a store key: its subkeys are derived with HKDF under their own
labels, and :func:`BackupKey.check_not_store_key` refuses a key the store uses.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import msgpack  # type: ignore[import-untyped]

from ..._files import warn_if_open_to_others
from ...errors import BackupCorrupt, BackupError, BackupKeyMismatch, ConfigurationError
from .framepack import TAG as _TAG
from .framepack import Ahead, last, named_by, packb
from .joined import BackupStopped, check_stopped

if TYPE_CHECKING:
    from ...codec.keys import Keyring
    from .sealer import ChunkSealer, Level

__all__ = [
    "ENV_BACKUP_KEY",
    "FILE_IMAGES",
    "HEAD_TAGS",
    "PAGE_DELTAS",
    "BackupKey",
    "FrameReader",
    "FrameWriter",
    "Header",
]

MAGIC = b"SKBACKUP\x01"
TRAILER = b"SKEND"
FORMAT = "statekeeper-backup"
VERSION = 1
#: the format of a backup whose chunks are a SQLite file copy (see the module doc)
VERSION_FILE = 2
#: the format of a backup whose chunks are PostgreSQL ``COPY`` sections (:mod:`.pgcopy`)
VERSION_COPY = 3
#: the format of an incremental backup of a SQLite store as its changed pages (:mod:`.pagedelta`)
VERSION_PAGES = 4
#: versions 2 and 4 whose manifest lists each stream's head by its head tag (``heads``:
#: agent, seq, ``tag``), read in one scan of the heads table, not the head record's
#: checksum (a probe of the events per stream): a whole SQLite store's page image, and
#: the incremental by pages after one
VERSION_FILE_TAGS = 5
VERSION_PAGES_TAGS = 6
VERSIONS = {
    VERSION: "streams",
    VERSION_FILE: "sqlite-file",
    VERSION_COPY: "postgres-copy",
    VERSION_PAGES: "sqlite-page-delta",
    VERSION_FILE_TAGS: "sqlite-file",
    VERSION_PAGES_TAGS: "sqlite-page-delta",
}
#: a store file's image (a full backup's), of either kind of heads
FILE_IMAGES = frozenset({VERSION_FILE, VERSION_FILE_TAGS})
#: the pages changed since the parent (an incremental by pages), of either kind of heads
PAGE_DELTAS = frozenset({VERSION_PAGES, VERSION_PAGES_TAGS})
#: the versions whose manifest's heads are head tags (:meth:`FrameReader.heads`)
HEAD_TAGS = frozenset({VERSION_FILE_TAGS, VERSION_PAGES_TAGS})
ENV_BACKUP_KEY = "STATEKEEPER_BACKUP_KEY"
_u32 = struct.Struct(">I")
_u64 = struct.Struct(">Q")
_NONCE = 12
CHUNK = b"C"
MANIFEST = b"M"


def _hkdf(material: bytes, label: bytes, length: int = 32) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(
        algorithm=hashes.SHA256(), length=length, salt=None, info=b"statekeeper-backup/1 " + label
    ).derive(material)


class BackupKey:
    """The key a backup is encrypted and signed with (32 bytes; ``page_seed``: the secret
    seed of page digests, :mod:`.pagedelta`). Its ``repr`` holds no key material."""

    __slots__ = ("_aead", "_encryption", "_material", "fingerprint", "id", "page_seed")

    def __init__(self, material: bytes, key_id: str = "backup") -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        if len(material) != 32:
            raise ConfigurationError(f"a backup key must be 32 bytes, not {len(material)}")
        self.id = key_id
        self._material = material
        self._encryption = _hkdf(material, b"encryption")  # (also :mod:`.placedframe`'s)
        self._aead = AESGCM(self._encryption)
        self.fingerprint = _hkdf(material, b"fingerprint", 8).hex()
        self.page_seed = int.from_bytes(_hkdf(material, b"page digest seed", 8), "big")

    def __repr__(self) -> str:
        return f"BackupKey(id={self.id!r}, material=<redacted>)"

    def __reduce__(self) -> Any:
        raise TypeError("keys cannot be pickled")

    @classmethod
    def from_text(cls, text: str, key_id: str = "backup") -> BackupKey:
        """A key from base64 text (what ``statekeeper keys new`` prints)."""
        try:
            raw = base64.b64decode(text.strip() + "=" * (-len(text.strip()) % 4), validate=True)
        except (binascii.Error, ValueError):
            raise ConfigurationError("the backup key is not valid base64") from None
        return cls(raw, key_id)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> BackupKey:
        """A key file: a key file of the store's format (its active key) or one base64 line."""
        name = os.fspath(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(f"cannot read backup key file {name}: {exc}") from None
        except UnicodeDecodeError:  # (its message showed a byte of the file: of a raw key)
            raise ConfigurationError(f"backup key file {name} is not text") from None
        warn_if_open_to_others(path)
        stripped = text.strip()
        try:  # a key file of the store's format, or one base64 line
            doc = json.loads(stripped) if stripped.startswith("{") else None
            if doc is None:
                return cls.from_text(stripped)
            active = doc.get("active") or next(iter(doc["keys"]))
            return cls.from_text(doc["keys"][active], str(active))
        except ConfigurationError as exc:  # a short or bad key: which file says so
            raise ConfigurationError(f"backup key file {name}: {exc}") from None
        except (ValueError, KeyError, TypeError, AttributeError, StopIteration):
            shape = '{"active": ID, "keys": {ID: BASE64}}'
            raise ConfigurationError(f"backup key file {name} must hold {shape}") from None

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> BackupKey | None:
        """``$STATEKEEPER_BACKUP_KEY`` (base64), or None."""
        env = os.environ if environ is None else environ
        text = env.get(ENV_BACKUP_KEY, "").strip()
        return cls.from_text(text) if text else None

    def check_not_store_key(self, keyring: Keyring | None, sealed: Any = ()) -> None:
        """Refuse a backup key that is one of the store's master keys: a backup must be
        encrypted with a key of its own (a stolen store key must not open the backups);
        ``sealed``: (key id, fingerprint) of keys that sealed records (:mod:`.storekey`)."""
        from ...codec.keys import DerivedKey

        probe = DerivedKey("probe", self._material).fingerprint
        keys = [(i, k.fingerprint) for i in keyring.ids if (k := keyring.get(i))] if keyring else []
        for key_id, fingerprint in [*keys, *sealed]:
            if hmac.compare_digest(fingerprint, probe):
                raise BackupKeyMismatch(
                    f"the backup key is the store's key {key_id!r}: use a separate backup key"
                    " (statekeeper keys new)"
                )

    def seal(self, aad: bytes, plain: bytes) -> bytes:
        nonce, sealed = self.seal_apart(aad, plain)
        return nonce + sealed

    def seal_apart(self, aad: bytes, plain: bytes | bytearray | memoryview) -> tuple[bytes, bytes]:
        """``(nonce, ciphertext + tag)``: a frame written in two pieces, its
        ciphertext never copied behind its nonce."""
        nonce = os.urandom(_NONCE)
        return nonce, bytes(self._aead.encrypt(nonce, plain, aad))

    def seal_into(
        self, aad: bytes, plain: bytes | bytearray | memoryview, out: bytearray | memoryview
    ) -> tuple[bytes, memoryview]:
        """:meth:`seal_apart` into ``out`` (at least ``len(plain) + 16`` bytes, reused
        from chunk to chunk: no new zeroed buffer per chunk, docs/benchmarks.md, bk15):
        ``(nonce, the view of out holding ciphertext + tag)``."""
        nonce = os.urandom(_NONCE)
        view = memoryview(out)[: len(plain) + _TAG]
        self._aead.encrypt_into(nonce, plain, aad, view)
        return nonce, view

    def open(self, aad: bytes, sealed: bytes) -> bytes | None:
        from cryptography.exceptions import InvalidTag

        try:
            return bytes(self._aead.decrypt(sealed[:_NONCE], sealed[_NONCE:], aad))
        except (InvalidTag, ValueError):
            return None


@dataclass(frozen=True, slots=True)
class Header:
    """The clear-text header of a backup."""

    backup_id: str
    parent: str | None
    key_id: str
    key_fingerprint: str
    created_at: float
    raw: bytes
    version: int = VERSION

    @property
    def layout(self) -> str:
        """The layout its version names (:data:`VERSIONS`, the module documentation)."""
        return VERSIONS[self.version]

    @classmethod
    def new(
        cls,
        backup_id: str,
        parent: str | None,
        key: BackupKey,
        created_at: float,
        version: int = VERSION,
    ) -> Header:
        doc: dict[str, Any] = {
            "format": FORMAT,
            "version": version,
            "backup_id": backup_id,
            "parent": parent,
            "key_id": key.id,
            "key_fingerprint": key.fingerprint,
            "created_at": created_at,
            "compression": "zstd",
            "cipher": "AES-256-GCM",
        }
        if version != VERSION:  # a version-1 header stays byte for byte what it was
            doc["layout"] = VERSIONS[version]
        raw = json.dumps(doc, sort_keys=True).encode()
        return cls(backup_id, parent, key.id, key.fingerprint, created_at, raw, version)


def _aad(header: Header, kind: bytes, index: int) -> bytes:
    return b"sk-backup/1" + kind + _u64.pack(index) + hashlib.sha256(header.raw).digest()


class FrameWriter:
    """Writes a backup file frame by frame (see the module documentation)."""

    def __init__(self, out: IO[bytes], header: Header, key: BackupKey, level: int = 1) -> None:
        import zstandard

        self.out, self.header, self.key = out, header, key
        self._zstd, self._fast = (zstandard.ZstdCompressor(level=n) for n in (level, -20))
        self.manifest_frames: Any = None  # its frame's maker, if not zstd -20 (see finish)
        self.offset = 0
        self.chunks: list[dict[str, Any]] = []
        self.plain_bytes = 0
        self.stopped = False  # (:meth:`stop`)
        magic = MAGIC[:-1] + bytes([header.version])
        self._write(magic + _u32.pack(len(header.raw)) + header.raw)

    def stop(self) -> None:
        """Every write from now on raises :class:`.joined.BackupStopped` (a backup
        cancelled: its thread stops, the file is removed once it has). Any thread."""
        self.stopped = True

    def _write(self, data: bytes | memoryview) -> None:
        if self.stopped:
            raise BackupStopped("the backup was cancelled")
        try:
            self.out.write(data)
        except OSError as exc:  # the disk is full, the device failed: a typed error
            raise BackupError(f"cannot write the backup: {exc}") from None
        self.offset += len(data)

    def _frame(
        self, kind: bytes, index: int, content: Any, named: bool = True
    ) -> tuple[int, int, str]:
        return self._sealed(kind, index, packb(content), named)

    def _sealed(
        self, kind: bytes, index: int, plain: bytes, named: bool = True
    ) -> tuple[int, int, str]:
        """Write one frame; ``(offset, length, its SHA-256 if named)`` (a row chunk's
        name; the manifest's, never read, is skipped: 0.007 CPU-s of its 7.6 MB for
        100,000 agents, docs/benchmarks.md "backupsix")."""
        self.plain_bytes += len(plain)
        sealed = self.key.seal(_aad(self.header, kind, index), self._zstd.compress(plain))
        frame = kind + _u64.pack(len(sealed)) + sealed
        start = self.offset
        self._write(frame)
        return start, len(frame), hashlib.sha256(frame).hexdigest() if named else ""

    def chunk_packed(self, items: list[bytes]) -> int:
        """Write one chunk made of entries packed already (a msgpack array of them)."""
        header: bytes = msgpack.Packer().pack_array_header(len(items))
        index = len(self.chunks)
        offset, length, digest = self._sealed(CHUNK, index, header + b"".join(items))
        self.chunks.append(
            {
                "index": index,
                "offset": offset,
                "length": length,
                "sha256": digest,
                "agents": len(items),
            }
        )
        return index

    def sealer(
        self, chunk_bytes: int, threads: int, level: Level = -1, page_size: int = 0
    ) -> ChunkSealer:
        """A :class:`~.sealer.ChunkSealer` writing raw chunks into this file (``level``:
        zstd's, or what makes each chunk's zstd frame; its pages digested, if
        ``page_size``)."""
        from .sealer import ChunkSealer

        return ChunkSealer(self, chunk_bytes, threads, level, page_size)

    def chunk(self, content: Any, agents: int) -> int:
        """Write one chunk; returns its index."""
        index = len(self.chunks)
        offset, length, digest = self._frame(CHUNK, index, content)
        self.chunks.append(
            {"index": index, "offset": offset, "length": length, "sha256": digest, "agents": agents}
        )
        return index

    def finish(self, manifest: dict[str, Any], packed: Ahead | None = None) -> None:
        manifest["chunks"] = self.chunks
        # zstd -20 (7.6 MB for 100,000 heads: 9 against 21 ms at 1, "backup2"), or a local page
        # backup's zero-run frame (60 M instructions less, "backup4"); ``packed``: framepack
        self._zstd = self.manifest_frames or self._fast
        offset, _, _ = self._sealed(MANIFEST, 0, packb(manifest, packed), named=False)
        self._write(TRAILER + _u64.pack(offset))
        self.out.flush()


class FrameReader:
    """Reads and authenticates a backup file; every failure is a typed error."""

    def __init__(self, path: str | os.PathLike[str], key: BackupKey) -> None:
        import zstandard

        self.path = os.fspath(path)
        self.key = key
        self._zstd = zstandard.ZstdDecompressor()
        try:
            self._fh = open(self.path, "rb")  # noqa: SIM115 - closed by close()
        except OSError as exc:
            raise BackupCorrupt(self.path, "file", f"cannot be read: {exc}") from None
        self.size = os.fstat(self._fh.fileno()).st_size
        self.header = self._read_header()
        if self.header.key_fingerprint != key.fingerprint:
            self.close()
            raise BackupKeyMismatch(
                f"backup {self.path} was written with another backup key"
                f" (key id {self.header.key_id!r}): wrong --backup-key"
            )
        self.manifest = self._read_manifest()

    def close(self) -> None:
        self._fh.close()

    def _corrupt(self, what: str, reason: str) -> BackupCorrupt:
        return BackupCorrupt(self.path, what, reason)

    def _read_header(self) -> Header:
        head = self._fh.read(len(MAGIC) + 4)
        if len(head) < len(MAGIC) + 4 or not head.startswith(MAGIC[:-1]):
            raise self._corrupt("header", "not a statekeeper backup")
        version = head[len(MAGIC) - 1]
        if version not in VERSIONS:
            raise self._corrupt(
                "header",
                f"unknown backup format version {version} (this statekeeper reads"
                f" {', '.join(map(str, sorted(VERSIONS)))})",
            )
        (length,) = _u32.unpack(head[len(MAGIC) :])
        raw = self._fh.read(length)
        try:
            doc = json.loads(raw)
            if doc.get("version", VERSION) != version:
                raise ValueError("the header's version is not the file's")
            return Header(
                str(doc["backup_id"]),
                doc["parent"] if isinstance(doc["parent"], str) else None,
                str(doc["key_id"]),
                str(doc["key_fingerprint"]),
                float(doc["created_at"]),
                raw,
                version,
            )
        except (ValueError, KeyError, TypeError):
            raise self._corrupt("header", "unreadable (truncated or edited)") from None

    def _frame_at(
        self, offset: int, kind: bytes, index: int, what: str, raw: bool = False
    ) -> tuple[Any, bytes]:
        if offset + 9 > self.size:
            raise self._corrupt(what, "missing (the file is truncated)")
        check_stopped()  # (a cancelled restore's thread: stopped here)
        self._fh.seek(offset)
        prefix = self._fh.read(9)
        if prefix[:1] != kind:
            raise self._corrupt(what, "not where the manifest says (a chunk was removed or moved)")
        (length,) = _u64.unpack(prefix[1:])
        if length > self.size - offset - 9:  # an edited length: never read() past the end
            raise self._corrupt(what, "truncated")
        sealed = self._fh.read(length)
        if len(sealed) != length:
            raise self._corrupt(what, "truncated")
        compressed = self.key.open(_aad(self.header, kind, index), sealed)
        if compressed is None:
            raise self._corrupt(
                what, "fails authentication (edited, reordered or from another backup)"
            )
        try:
            plain = self._zstd.decompress(compressed)
            content = plain if raw else msgpack.unpackb(plain, raw=False)
        except Exception as exc:  # authenticated yet unreadable: a writer bug, still refused
            raise self._corrupt(what, f"unreadable: {exc}") from None
        return content, prefix + sealed

    def _read_manifest(self) -> dict[str, Any]:
        if self.size < len(TRAILER) + 8:
            raise self._corrupt("trailer", "missing (the file is truncated)")
        self._fh.seek(self.size - len(TRAILER) - 8)
        tail = self._fh.read(len(TRAILER) + 8)
        if not tail.startswith(TRAILER):
            raise self._corrupt("trailer", "missing (the file is truncated or was appended to)")
        (offset,) = _u64.unpack(tail[len(TRAILER) :])
        manifest, frame = self._frame_at(offset, MANIFEST, 0, "manifest")
        if offset + len(frame) != self.size - len(TRAILER) - 8:
            raise self._corrupt("manifest", "bytes were added after it")
        if not isinstance(manifest, dict) or manifest.get("backup_id") != self.header.backup_id:
            raise self._corrupt("manifest", "does not belong to this backup")
        return manifest

    @property
    def streams(self) -> dict[str, Any]:
        """The manifest's streams, ``{agent: {"base", "head", "events", "last", "chunk",
        ...}}``, whatever the version (version 2 keeps them as columns, see
        :meth:`heads`; converted here for incremental parents and the chain checks)."""
        if self.header.version == VERSION:
            streams: dict[str, Any] = self.manifest["streams"]
            return streams
        # the head record's checksum, as a row incremental after this one compares it with
        # the record at the parent's head; a head tag names no record (versions 5 and 6):
        # a row incremental after such a parent knows an unchanged stream by its tag and
        # copies a changed one whole
        if self.header.version in HEAD_TAGS:
            checksums = self.untagged()
            streams = {
                agent: {"base": 0, "head": head, "events": head, "last": "", "chunk": None}
                | ({"tag": tag} if tag is not None else {"last": last(checksums.get(agent))})
                for agent, head, tag in self.heads()
            }
        else:
            streams = {
                agent: {
                    "base": 0,
                    "head": head,
                    "events": head,
                    "last": last(checksum),
                    "chunk": None,
                }
                for agent, head, checksum in self.heads()
            }
        for agent, (base, checksum) in self.compacted().items():
            stream = streams.get(agent)
            if stream is None:
                raise self._corrupt("manifest", f"compacted stream {agent!r} has no head")
            stream["events"] -= base
            stream["compacted"] = base
            stream["base_digest"] = hashlib.sha256(checksum).hexdigest()
        return streams

    def compacted(self) -> dict[str, tuple[int, bytes]]:
        """Version 2: the streams compacted by retention, ``{agent: (base seq, base
        snapshot checksum)}`` (none in a manifest written before they were backed up)."""
        columns = self.manifest.get("compacted")
        if columns is None:
            return {}
        try:
            rows = zip(columns["agent"], columns["base"], columns["checksum"], strict=True)
            out = {str(a): (int(b), bytes(c)) for a, b, c in rows}
        except (KeyError, TypeError, ValueError):
            raise self._corrupt("manifest", "its list of compacted streams is malformed") from None
        return out

    def heads(self) -> list[tuple[str, int, Any]]:
        """Versions 2 to 4: every stream's ``(agent, head seq, head checksum)``; versions
        5 and 6 (:data:`HEAD_TAGS`): ``(agent, head seq, head tag)``, the tag None for a
        stream without one (its checksum in :meth:`untagged`)."""
        column = "tag" if self.header.version in HEAD_TAGS else "checksum"
        try:
            columns = self.manifest["heads"]
            rows = list(zip(columns["agent"], columns["head"], columns[column], strict=True))
        except (KeyError, TypeError, ValueError):
            raise self._corrupt("manifest", "its list of stream heads is malformed") from None
        return rows

    def untagged(self) -> dict[str, bytes]:
        """Versions 5 and 6: the head checksum of each stream listed without a head tag."""
        columns = self.manifest.get("untagged") or {"agent": [], "checksum": []}
        try:
            rows = zip(columns["agent"], columns["checksum"], strict=True)
            return {str(a): bytes(c) for a, c in rows}
        except (KeyError, TypeError, ValueError):
            raise self._corrupt("manifest", "its list of untagged heads is malformed") from None

    def head_marks(self) -> list[tuple[str, int, bytes]]:
        """Every stream's ``(agent, head seq, what names its head)``: the head tag, or
        (version 2 to 4, or a stream without a tag) the head record's checksum. Two
        backups of the same kind name an unchanged head the same."""
        rows = self.heads()
        if self.header.version not in HEAD_TAGS:
            return rows
        untagged = self.untagged()
        return [(a, h, t if t is not None else untagged.get(a, b"")) for a, h, t in rows]

    def file_chunks(self) -> Any:
        """Version 2: yield every chunk's plain bytes (pieces of the store file copy),
        in order, each checked against the manifest."""
        yield from self.chunks(raw=True)

    def chunks(self, raw: bool = False) -> Any:
        """Yield every chunk's content, in order, each checked against the manifest."""
        expected = len(MAGIC) + 4 + len(self.header.raw)
        for index, entry in enumerate(self.manifest["chunks"]):
            what = f"chunk {index}"
            if entry["index"] != index or entry["offset"] != expected:
                raise self._corrupt(what, "the manifest's chunk list has a hole")
            content, frame = self._frame_at(entry["offset"], CHUNK, index, what, raw)
            if len(frame) != entry["length"] or not named_by(entry, frame):
                raise self._corrupt(what, "differs from the manifest's digest")
            expected += len(frame)
            yield content
