"""The compression stage of a codec: zstd (plain, or with the built-in dictionary of
:mod:`.zstd_dict`), pooled compressors, per-thread decompressors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import (
    IntegrityError,
)
from .layout import (
    COMPRESS_NONE,
    COMPRESS_ZSTD,
    COMPRESS_ZSTD_DICT,
)
from .options import CodecOptions, _zstd

if TYPE_CHECKING:
    pass


#: the largest body a record may decompress to (a defence against decompression bombs)
_MAX_BODY = 1 << 31


class Compression(CodecOptions):
    """Compress a body on write, decompress it on read (bounded)."""

    def _compress(self, body: bytes) -> tuple[bytes, int]:
        if self.compression == COMPRESS_NONE or len(body) < self.compress_min_bytes:
            return body, COMPRESS_NONE
        pool = self._compressors
        try:
            comp = pool.pop()
        except IndexError:  # (none idle: another thread may have taken the last)
            comp = self._compressor()
        out: bytes = comp.compress(body)
        pool.append(comp)
        if len(out) >= len(body):
            return body, COMPRESS_NONE
        return out, self.compression

    def _compressor(self) -> Any:
        """A new compressor for this codec, when none is idle in ``_compressors``.

        A zstandard compressor is not thread-safe: it serves one ``compress`` at a time,
        so a caller takes one from the list (``pop``, atomic under the GIL) and puts it
        back after its ``compress`` — never two threads at once on one. It was one per
        thread (a ``threading.local``): LangGraph runs each ``invoke``'s saver calls on
        threads of its own, so each new thread paid a compressor's set-up (~25 us, its
        context built on the shared digested dictionary) for the one or two records it
        sealed; the list keeps as many as were ever used at once (docs/benchmarks.md,
        "lgturn")."""
        if self.compression == COMPRESS_ZSTD_DICT:
            from .zstd_dict import compressor

            return compressor(self.compression_level)
        return self._zstd.ZstdCompressor(level=self.compression_level, write_content_size=True)

    def _decompress(
        self, data: bytes, comp: int, agent_id: str, seq: int, record_type: str
    ) -> bytes:
        if comp == COMPRESS_NONE:
            return data
        local = self._local
        if comp == COMPRESS_ZSTD_DICT:
            dec = local.dict_decompressor
            if dec is None:
                from .zstd_dict import decompressor

                dec = local.dict_decompressor = decompressor()
        elif comp == COMPRESS_ZSTD:
            dec = local.decompressor
            if dec is None:
                zstd = self._zstd or _zstd()
                dec = local.decompressor = zstd.ZstdDecompressor()
        else:
            raise IntegrityError(agent_id, seq, f"{record_type} record has an invalid header")
        try:
            out: bytes = dec.decompress(data, max_output_size=_MAX_BODY)
        except Exception as exc:
            raise IntegrityError(
                agent_id, seq, f"{record_type} record does not decompress: {exc}"
            ) from exc
        return out
