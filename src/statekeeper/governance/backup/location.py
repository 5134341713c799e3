"""Where a backup lives: a local file, or an S3 object (``s3://bucket/key``, with
``?endpoint_url=...&region=...`` for MinIO, Ceph or moto).

A backup is always written to a local file first (beside the target, or a temporary
file for S3) and appears at its location only when complete: renamed into place, or
uploaded. Reading an S3 backup downloads it to a temporary file.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, cast
from urllib.parse import parse_qsl, urlsplit

from ..._files import new_temporary, sync_directory
from ..._joined import released_after, thread_scope
from ...errors import BackupCorrupt, BackupError, ConfigurationError
from .directfile import direct_file
from .writebehind import WriteBehindFile, drop_all

__all__ = ["Location", "local_copies", "named_as_given", "placed_here"]

#: the local backups this process placed (absolute paths, by :meth:`Location.writing`)
_placed: set[str] = set()
#: the signals held while a backup is placed (so it is recorded as placed once it is)
_HELD = {signal.SIGINT, signal.SIGTERM}


def placed_here(spec: str | os.PathLike[str]) -> bool:
    """Whether this process placed a complete backup at the local file ``spec``: a
    command stopped (Ctrl-C, SIGTERM) after it did reports the backup written."""
    return os.path.abspath(os.fspath(spec)) in _placed


def _dropped(direct: Any, fh: IO[bytes], tmp: Path | None) -> None:
    """A backup file given up: closed (its buffered bytes dropped) and removed."""
    if direct is not None:
        direct.close()
    with contextlib.suppress(OSError):
        fh.close()
    if tmp is not None:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Within: SIGINT and SIGTERM wait (delivered at the end of the block), so a backup
    placed is recorded as placed before a stop can interrupt. Main thread only."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(
        signal, "pthread_sigmask"
    ):
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


class Location:
    """A backup file's location (see the module documentation)."""

    def __init__(self, spec: str | os.PathLike[str], *, overwrite: bool = False) -> None:
        text = os.fspath(spec)
        self.spec = text
        #: :meth:`writing` may replace a backup already there (else refused)
        self.overwrite = overwrite
        self.s3: tuple[str, str, dict[str, str]] | None = None
        if text.startswith("s3://"):
            from ...backends.redact import mask_url

            parts = urlsplit(text)
            key = parts.path.lstrip("/")
            if "@" in parts.netloc:  # (it was the bucket's name, shown in every error)
                bucket = parts.netloc.rpartition("@")[2]
                raise ConfigurationError(
                    f"s3://…@{bucket}{parts.path}: an S3 backup location takes no"
                    " credentials: give them as AWS_ACCESS_KEY_ID and"
                    " AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ~/.aws/credentials or an"
                    " instance role"
                )
            if not parts.netloc or not key:
                raise ConfigurationError(
                    f"an S3 backup location is s3://BUCKET/KEY, not {mask_url(text)!r}"
                )
            self.s3 = (parts.netloc, key, dict(parse_qsl(parts.query)))
            self.display = f"s3://{parts.netloc}/{key}"
        else:
            self.display = text

    def _said(self, exc: BaseException) -> str:
        """A driver's message about this location without the secrets of its URL
        (botocore quotes the endpoint whole: ``http://user:password@minio:9000/...``)."""
        from ...backends.redact import scrub

        return scrub(str(exc), self.spec)

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

    def check_free(self) -> None:
        """Refuse (:class:`~statekeeper.errors.BackupError`) a location that already
        holds something, unless ``overwrite``: a backup written over another one (the
        parent of incrementals, perhaps) silently lost it."""
        if not self.overwrite and self._taken():
            raise self._taken_error()

    def _taken_error(self) -> BackupError:
        return BackupError(
            f"backup {self.display} already exists: give a new"
            f" {'key' if self.s3 is not None else 'file'} for this backup, or replace it"
            " on purpose (--overwrite; overwrite=True)"
        )

    def _taken(self) -> bool:
        """Whether something is at this location (a file, a symlink, an S3 object)."""
        if self.s3 is None:
            return os.path.lexists(self.spec)
        bucket, key, _ = self.s3
        try:
            self._client().head_object(Bucket=bucket, Key=key)
        except Exception as exc:  # botocore's errors: a 404 is "free", the rest typed
            status = getattr(exc, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status == 404:
                return False
            raise BackupError(f"cannot look up backup {self.display}: {self._said(exc)}") from None
        return True

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
            _placed.discard(os.path.abspath(target))  # (placed by this run, once it is)
            try:  # a new file: never an existing one, never through a symlink
                fd, tmp = new_temporary(target)
                fh = os.fdopen(fd, "wb")
            except OSError as exc:
                raise BackupError(f"cannot write backup {self.display}: {exc}") from None
            # (a thread writing it still running as the block is left: a second cancel,
            # Ctrl-C raised in the task's own code: closed and removed once it ends)
            handed = written = False
            direct: Any = None

            def gone() -> None:  # (the process's exit, its thread still running)
                tmp.unlink(missing_ok=True)

            try:
                # straight to the disk (O_DIRECT), else written behind: either way the
                # file does not stay in the page cache
                direct = direct_file(str(tmp), fh.fileno())
                with thread_scope() as threads:
                    try:
                        yield cast(IO[bytes], direct or WriteBehindFile(fh))
                    except BaseException as exc:
                        handed = threads.handed(lambda: _dropped(direct, fh, tmp), exc, gone)
                        raise
                    if threads.running():  # (an escape swallowed: never placed)
                        handed = threads.handed(lambda: _dropped(direct, fh, tmp), None, gone)
                        raise BackupError(
                            f"cannot write backup {self.display}: a thread still writes it"
                        )
                try:
                    if direct is not None:
                        direct.finish()
                    fh.flush()
                    os.fsync(fh.fileno())
                    drop_all(fh.fileno())  # clean now: out of the page cache
                except OSError as exc:  # the disk is full, the device failed
                    raise BackupError(f"cannot write backup {self.display}: {exc}") from None
                written = True
                if direct is not None:
                    direct.close()
                fh.close()
                with _signals_held():  # placed and recorded, or neither
                    if self.overwrite:
                        os.replace(tmp, target)
                    else:  # never over a file that appeared meanwhile (a link fails if taken)
                        try:
                            os.link(tmp, target)
                        except FileExistsError:
                            raise self._taken_error() from None
                        except OSError:  # no hard links here (a FUSE, FAT folder): checked
                            self.check_free()
                            os.replace(tmp, target)
                    _placed.add(os.path.abspath(target))
                sync_directory(target.parent)  # the name too: a backup reported done stays
            finally:
                if not handed:  # a write failed: its buffered bytes fail again, dropped
                    _dropped(None if written else direct, fh, tmp)
            return
        bucket, key, _ = self.s3
        with contextlib.ExitStack() as closing:
            spool = tempfile.TemporaryFile()  # noqa: SIM115 - closed below, or by its thread
            closing.enter_context(released_after(spool.close))
            threads = closing.enter_context(thread_scope())
            yield spool
            if threads.running():  # (an escape swallowed: never uploaded, still written)
                raise BackupError(f"cannot write backup {self.display}: a thread still writes it")
            spool.flush()
            spool.seek(0)
            self.check_free()  # one appeared while the backup ran: refused before uploading
            from ...backends.s3 import upload_new

            try:  # conditional: refused by S3 too, if one appeared since that look
                done = upload_new(self._client(), spool, bucket, key, replace=self.overwrite)
            except Exception as exc:  # botocore's errors: one typed error, no secrets
                raise BackupError(
                    f"cannot upload backup to {self.display}: {self._said(exc)}"
                ) from None
            if not done:
                raise self._taken_error()

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
                raise BackupError(
                    f"cannot download backup {self.display}: {self._said(exc)}"
                ) from None
            yield path


def local_copies(
    stack: contextlib.ExitStack, backups: Sequence[str | os.PathLike[str]]
) -> list[str]:
    """``backups`` as local files (S3 ones downloaded) until ``stack`` closes; a backup
    error raised before then names the locations given, not the downloads."""
    downloaded: dict[str, str] = {}
    stack.enter_context(named_as_given(downloaded))
    paths: list[str] = []
    for spec in backups:
        where = Location(spec)
        paths.append(stack.enter_context(where.local_copy()))
        if paths[-1] != where.display:
            downloaded[paths[-1]] = where.display
    return paths


@contextlib.contextmanager
def named_as_given(given: Mapping[str, str]) -> Iterator[None]:
    """A backup error raised in the block names the locations the caller gave, never
    the temporary files they were downloaded to (``given``: local path -> location,
    filled in as the block downloads them)."""
    try:
        yield
    except BackupError as exc:
        renamed = _renamed(exc, given)
        if renamed is None:
            raise
        raise renamed from None


def _renamed(exc: BackupError, given: Mapping[str, str]) -> BackupError | None:
    """``exc`` with each local path of ``given`` in its message replaced by its
    location, or None when it names none of them."""
    text = str(exc)
    if not any(local in text for local in given):
        return None

    def swap(part: str) -> str:
        for local, shown in given.items():
            part = part.replace(local, shown)
        return part

    if isinstance(exc, BackupCorrupt):
        return BackupCorrupt(swap(exc.path), swap(exc.what), swap(exc.reason))
    try:
        return type(exc)(swap(text))
    except TypeError:  # a subclass with another signature: the message, as a BackupError
        return BackupError(swap(text))
