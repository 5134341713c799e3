"""Where a backup lives: a local file, or an S3 object (``s3://bucket/key``, with
``?endpoint_url=...&region=...`` for MinIO, Ceph or moto).

A backup is always written to a local file first (beside the target, or a temporary
file for S3) and appears at its location only when complete: renamed into place, or
uploaded. Reading an S3 backup downloads it to a temporary file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, cast
from urllib.parse import parse_qsl, urlsplit

from ..._files import new_temporary, sync_directory
from ...errors import BackupError, ConfigurationError
from .writebehind import WriteBehindFile, drop_all

__all__ = ["Location"]


class Location:
    """A backup file's location (see the module documentation)."""

    def __init__(self, spec: str | os.PathLike[str]) -> None:
        text = os.fspath(spec)
        self.spec = text
        self.s3: tuple[str, str, dict[str, str]] | None = None
        if text.startswith("s3://"):
            parts = urlsplit(text)
            key = parts.path.lstrip("/")
            if not parts.netloc or not key:
                raise ConfigurationError(f"an S3 backup location is s3://BUCKET/KEY, not {text!r}")
            self.s3 = (parts.netloc, key, dict(parse_qsl(parts.query)))
            self.display = f"s3://{parts.netloc}/{key}"
        else:
            self.display = text

    def replaces(self, other: Location) -> bool:
        """Whether a backup written here would replace the backup at ``other``: the
        same S3 object, or the same directory entry (``other`` followed through its
        symlinks; this location's last part not followed: the rename replaces the
        entry itself, so a link elsewhere to the file keeps it)."""
        if self.s3 is not None or other.s3 is not None:
            if self.s3 is None or other.s3 is None:
                return False
            ends = self.s3[2].get("endpoint_url"), other.s3[2].get("endpoint_url")
            return self.s3[:2] == other.s3[:2] and ends[0] == ends[1]
        here = Path(self.spec)
        entry = Path(os.path.realpath(here.parent)) / here.name
        return entry == Path(os.path.realpath(other.spec))

    def _client(self) -> Any:
        assert self.s3 is not None
        from ...backends.s3 import object_client  # the driver stays in its engine

        options = self.s3[2]
        return object_client(options.get("endpoint_url"), options.get("region"))

    @contextlib.contextmanager
    def writing(self) -> Iterator[IO[bytes]]:
        """A file to write the backup into; it becomes the backup only if the block
        ends without an error (otherwise nothing is left behind)."""
        if self.s3 is None:
            target = Path(self.spec)
            try:  # a new file: never an existing one, never through a symlink
                fd, tmp = new_temporary(target)
                fh = os.fdopen(fd, "wb")
            except OSError as exc:
                raise BackupError(f"cannot write backup {self.display}: {exc}") from None
            try:
                written = False
                try:
                    # written behind: its pages leave the cache as they reach the disk
                    yield cast(IO[bytes], WriteBehindFile(fh))
                    try:
                        fh.flush()
                        os.fsync(fh.fileno())
                        drop_all(fh.fileno())  # clean now: out of the page cache
                    except OSError as exc:  # the disk is full, the device failed
                        raise BackupError(f"cannot write backup {self.display}: {exc}") from None
                    written = True
                finally:
                    if written:
                        fh.close()
                    else:  # a write failed: the bytes still buffered fail again, dropped
                        with contextlib.suppress(OSError):
                            fh.close()
                os.replace(tmp, target)
                sync_directory(target.parent)  # the name too: a backup reported done stays
            finally:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
            return
        bucket, key, _ = self.s3
        with tempfile.TemporaryFile() as spool:
            yield spool
            spool.flush()
            spool.seek(0)
            try:
                self._client().upload_fileobj(spool, bucket, key)
            except Exception as exc:  # botocore's errors: one typed error, no secrets
                raise BackupError(f"cannot upload backup to {self.display}: {exc}") from None

    @contextlib.contextmanager
    def local_copy(self) -> Iterator[str]:
        """The backup as a local file path (downloaded first for S3)."""
        if self.s3 is None:
            yield self.spec
            return
        bucket, key, _ = self.s3
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "backup")
            try:
                self._client().download_file(bucket, key, path)
            except Exception as exc:
                raise BackupError(f"cannot download backup {self.display}: {exc}") from None
            yield path
