"""A codec's configuration (format, types, compression, key, checksum) and its
documents' serialization: the base of :class:`~statekeeper.codec.pipeline.Codec`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..errors import (
    ConfigurationError,
    IntegrityError,
    SerializationError,
)
from .formats import FORMATS, JSON, Format
from .layout import (
    _COMPRESSION_NAMES,
    _COMPRESSIONS,
    CHECKSUMS,
    COMPRESS_NONE,
    DEFAULT_CHECKSUM,
    FLAG_BLAKE3,
    VERSION,
)
from .links import (
    _HASHES,
)
from .types import TypeRegistry

if TYPE_CHECKING:
    from .keys import Keyring


class _Local(threading.local):
    decompressor: Any = None
    dict_decompressor: Any = None


class CodecOptions:
    """What a :class:`~statekeeper.codec.pipeline.Codec` was made with, and its
    documents' (de)serialization."""

    def __init__(
        self,
        *,
        format: str = "json",
        types: TypeRegistry | Iterable[type] | None = None,
        compression: str | None = None,
        compression_level: int = 3,
        compress_min_bytes: int = 1024,
        keyring: Keyring | None = None,
        checksum: str | None = None,
    ) -> None:
        if format not in FORMATS:
            raise ConfigurationError(f"format must be one of {sorted(FORMATS)}, not {format!r}")
        if compression not in _COMPRESSIONS:
            raise ConfigurationError(
                f"compression must be 'zstd', 'zstd-dict' or None, not {compression!r}"
            )
        if checksum is None:
            checksum = DEFAULT_CHECKSUM
        if checksum not in CHECKSUMS and checksum != "auto":
            raise ConfigurationError(
                f"checksum must be one of {sorted(CHECKSUMS)} or 'auto', not {checksum!r}"
            )
        if not 1 <= compression_level <= 22:
            raise ConfigurationError("compression_level must be 1..22")
        if compress_min_bytes < 0:
            raise ConfigurationError("compress_min_bytes must be >= 0")
        if types is None or isinstance(types, TypeRegistry):
            self.types = types if types is not None else TypeRegistry()
        else:
            self.types = TypeRegistry(types)
        self._formats = {fid: Format(fid, self.types) for fid in ((JSON, FORMATS[format]))}
        self.format = self._formats[FORMATS[format]]
        self._json = self._formats[JSON]
        self.compression = _COMPRESSIONS[compression]
        self.compression_level = compression_level
        self.compress_min_bytes = compress_min_bytes
        self._zstd: Any = None
        if self.compression != COMPRESS_NONE:
            self._zstd = _zstd()
        self._local = _Local()
        #: idle compressors, taken for one ``compress`` and put back (see _compress)
        self._compressors: list[Any] = []
        self.keyring = keyring
        #: the key family of the store this codec seals for (its store id: a data key
        #: per family and agent, see :mod:`.keyscope`); None until the store sets it
        #: (then, and for a codec of no store, an agent's data key is keyed by its id)
        self.key_family: str | None = None
        #: True from the moment a store with a vault that keys by family takes this codec
        #: until it set :attr:`key_family` (:func:`statekeeper.store.keyguard.key_family`):
        #: a data key made in between would be the agent's legacy key (keyed by its id
        #: alone), which a ``forget`` of the same id in any other store of the vault
        #: destroys: refused instead (see :meth:`seal`)
        self.family_pending = False
        # with a key, records (and heads) that are not encrypted are refused
        self._strict = keyring is not None
        self.checksum = checksum
        # the header bit of new records (with "auto": of those below BLAKE3_FROM bytes)
        self._algo = FLAG_BLAKE3 if checksum == "blake3" else 0
        self._auto = checksum == "auto"
        self._hash = _HASHES[self._algo >> 6]
        # the SHA-256 header bytes of an unencrypted record, per body compression (for a
        # caller that seals SHA-256 records itself; seal() stamps the algorithm it chose)
        self._plain_headers = {c: bytes((VERSION, self.format.id | (c << 2), 0)) for c in (0, 1, 2)}

    def __repr__(self) -> str:
        return (
            f"Codec(format={self.format.name!r}, compression="
            f"{_COMPRESSION_NAMES[self.compression]!r}, keyring={self.keyring!r}, "
            f"checksum={self.checksum!r})"
        )

    @property
    def encrypted(self) -> bool:
        """True when records are encrypted (a keyring is set)."""
        return self.keyring is not None

    def serialize(self, value: Any, root: str = "value") -> bytes:
        """A document as bytes in this codec's format; ``SerializationError`` names the path."""
        return self.format.dumps(value, root)

    def deserialize(
        self, body: bytes, agent_id: str = "*", seq: int | None = None, *, fmt: int | None = None
    ) -> Any:
        """Parse a body made by :meth:`serialize` (in format ``fmt``, default this codec's).

        Bytes that do not parse are an :class:`IntegrityError`; a tag that cannot be
        rebuilt (an unregistered type) a :class:`SerializationError`.
        """
        parser = self.format if fmt is None else self._format(fmt, agent_id, seq)
        try:
            return parser.loads(body)
        except SerializationError:
            raise
        except Exception as exc:
            raise IntegrityError(agent_id, seq, f"payload unreadable: {exc}") from exc

    def copy_dumps(self, value: Any) -> bytes:
        """Bytes for an in-memory deep copy of a document (JSON, tagged)."""
        return self._json.dumps(value, "data")

    def copy_loads(self, blob: bytes) -> Any:
        """A fresh document from :meth:`copy_dumps` bytes."""
        return self._json.loads(blob, "data")

    def _format(self, fmt: int, agent_id: str, seq: int | None) -> Format:
        parser = self._formats.get(fmt)
        if parser is None:
            try:
                parser = self._formats[fmt] = Format(fmt, self.types)
            except SerializationError as exc:
                raise IntegrityError(agent_id, seq, str(exc)) from exc
        return parser


def _zstd() -> Any:
    try:
        import zstandard
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ConfigurationError(
            "compression='zstd' needs the zstandard package: pip install zstandard"
        ) from exc
    return zstandard
