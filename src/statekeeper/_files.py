"""Small files written atomically and durably: a key file, a witness, a journal, a
progress file. One implementation below every layer that writes one."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import os
import re
import secrets
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from .errors import NotOwned

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "create_private",
    "folder_locked",
    "new_temporary",
    "place_unless_exists",
    "remove_stale_temporaries",
    "run_locked",
    "staged_new_file",
    "sync_directory",
    "write_atomically",
]

#: the part of a temporary file's name after ``.<target name>.``: the creator's host (a
#: digest of its name) and process id, then 48 random bits
_OURS = re.compile(r"(?P<host>[0-9a-f]{4})-(?P<pid>[0-9]{1,10})-[0-9a-f]{12}\.tmp")
#: the targets whose stale temporary files this process removed already (once each)
_swept: set[str] = set()
_swept_lock = threading.Lock()


def _host() -> str:
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:4]


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` runs on this host (one we may not signal does)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # (PermissionError: another user's, alive; EINVAL: unknowable)
        return True
    return True


def remove_stale_temporaries(target: Path) -> list[Path]:
    """Remove the temporary files :func:`new_temporary` made beside ``target`` for a
    process that is gone (killed before it could rename or remove its file: a partial
    export, backup or progress file, an export of an encrypted store holding decrypted
    records). Only files named as ``new_temporary`` names them, made on this host by a
    process that no longer runs, owned by this user, and not symlinks; a temporary file
    of a live run (another process's, this one's) is never touched, nor any other file.
    Returns the files removed. Not on Windows (no harmless way to ask whether a process
    runs: the files stay)."""
    if sys.platform == "win32":  # pragma: no cover - os.kill(pid, 0) would end it
        return []
    prefix = f".{target.name}."
    host, me, uid = _host(), os.getpid(), os.getuid()
    removed: list[Path] = []
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return removed
    for entry in entries:
        name = entry.name
        if not name.startswith(prefix):
            continue
        match = _OURS.fullmatch(name, len(prefix))
        if match is None or match["host"] != host:
            continue
        pid = int(match["pid"])
        if pid == me or _alive(pid):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
            if not entry.is_file(follow_symlinks=False) or info.st_uid != uid:
                continue
            os.unlink(entry.path)
        except OSError:  # gone meanwhile (another run removed it), or not ours to remove
            continue
        removed.append(Path(entry.path))
    return removed


def _sweep_once(target: Path) -> None:
    key = os.path.abspath(target)
    with _swept_lock:
        if key in _swept:
            return
        _swept.add(key)
    remove_stale_temporaries(target)


def new_temporary(target: Path, mode: int = 0o666) -> tuple[int, Path]:
    """A new, empty temporary file beside ``target`` (to be renamed over it), opened for
    writing: its name is random and it is created exclusively (``O_EXCL``), so it is
    never a file that was there — someone's ``notes.json.tmp``, or a symlink to a file
    elsewhere that would be written through — nor a leftover of a run killed earlier.

    The name records the creating host and process (``.<name>.<host>-<pid>-<random>.tmp``):
    the first call for a ``target`` in a process removes the temporary files of that
    target left by processes that are gone (:func:`remove_stale_temporaries`)."""
    _sweep_once(target)
    while True:
        tmp = target.with_name(f".{target.name}.{_host()}-{os.getpid()}-{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), tmp
        except FileExistsError:  # pragma: no cover - 48 random bits taken
            continue


def write_atomically(target: Path, text: str, *, mode: int = 0o666, durable: bool = True) -> None:
    """Write ``text`` to ``target`` atomically: a new temporary file beside it (created
    with ``mode``, less the umask), flushed to disk unless not ``durable`` (a progress
    file written once per item), then renamed over it. A crash leaves the old file or
    the new one, never a mix (small file: blocking is fine). ``durable``: the rename
    itself is flushed too (the directory), so a power loss after the return cannot
    bring the old file back (a key file without the key just added and used)."""
    fd, tmp = new_temporary(target, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        sync_directory(target.parent)


#: errno of a write that found no room (a full disk, a quota, a file size limit)
NO_ROOM = frozenset(getattr(errno, n) for n in ("ENOSPC", "EDQUOT", "EFBIG") if hasattr(errno, n))


def replace_durably(fh: IO[bytes], tmp: Path, target: Path) -> None:
    """Put the temporary file ``tmp`` (from :func:`new_temporary`, open as ``fh``) over
    ``target`` so that a power loss leaves the old file or the new one whole: its data
    flushed to disk (``fsync``) and closed, then renamed, then the folder flushed (the
    rename). Without the first flush the rename can reach the disk before the data:
    the previous good file replaced by an empty one. An ``OSError`` without a file
    name (a full disk on the flush) is given ``target``'s."""
    try:
        fh.flush()
        os.fsync(fh.fileno())
        fh.close()
        os.replace(tmp, target)
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(target)
        raise
    sync_directory(target.parent)


@contextlib.contextmanager
def staged_new_file(target: Path, mode: int = 0o666) -> Iterator[Path]:
    """A new file that appears at ``target`` only complete: the block builds it at the
    empty temporary sibling it is given (:func:`new_temporary`), and once it ends
    without an error the file is put at ``target`` — unless a file is there by then
    (never replaced: ``FileExistsError``). On an error, or that refusal, the temporary
    file is removed with the journal files SQLite keeps beside a database (``-wal``,
    ``-shm``, ``-journal``): a failed run leaves no partial file that looks whole."""
    fd, tmp = new_temporary(target, mode)
    os.close(fd)
    try:
        yield tmp
        if not place_unless_exists(str(tmp), str(target)):
            raise FileExistsError(errno.EEXIST, "created meanwhile: not replaced", str(target))
        sync_directory(target.parent)
    finally:
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{tmp}{suffix}").unlink(missing_ok=True)


@contextlib.contextmanager
def folder_locked(target: Path) -> Iterator[None]:
    """Hold an exclusive lock for a read-modify-write of the small file ``target`` (a
    key file: read, a key added, written back with :func:`write_atomically`), across
    processes: another run doing the same waits, then reads what this one wrote,
    instead of writing back what it read before and dropping this one's change.

    The lock is an advisory ``flock`` on ``target``'s folder, not on the file: the
    file is replaced by each write (a new inode, which a waiting process would not
    have locked), and no lock file is left beside it. Where folders cannot be locked
    (not POSIX, a file system without ``flock``) it does nothing."""
    if fcntl is None:  # pragma: no cover - not POSIX
        yield
        return
    try:
        fd = os.open(target.parent, os.O_RDONLY)
    except OSError:  # (a missing folder: the write that follows names it)
        yield
        return
    try:
        with contextlib.suppress(OSError):  # (no flock on this file system: unlocked)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # (releases the flock)


@contextlib.contextmanager
def run_locked(
    file: Path, mark: bytes, what: str, busy: Callable[[str], Exception]
) -> Iterator[None]:
    """Hold ``<file>.lock`` for the block: the run lock of a file one run at a time uses
    (a migration journal, a retention progress file). An advisory ``flock`` the operating
    system releases when the holder exits or dies, so a crashed run holds nothing. The
    lock file says who holds it (``mark`` then pid, host, since when): a second run
    raises ``busy(holder)`` at once. A lock file not starting with ``mark`` was not
    written by a run: :class:`~statekeeper.errors.NotOwned`, left untouched (``what``
    names the file in its message, e.g. ``"migration journal"``). Without ``fcntl`` (not
    POSIX) no lock is taken."""
    if fcntl is None:
        yield
        return
    path = file.with_name(file.name + ".lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        found = os.pread(fd, 512, 0)
        if found and not found.startswith(mark):  # never written by a run: not ours
            raise NotOwned(
                f"{path} is the lock file of {what} {file}, but it holds something else:"
                f" it was left untouched (move it, or give another {what})"
            )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = found[len(mark) :].decode("utf-8", "replace").strip()
            raise busy(holder or "unknown") from None
        os.ftruncate(fd, 0)  # who holds it, for the message of a run refused meanwhile
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
        who = f"pid {os.getpid()} on {socket.gethostname()} since {stamp} UTC"
        os.pwrite(fd, mark + who.encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
            os.pwrite(fd, mark, 0)
    finally:
        os.close(fd)  # (releases the flock)


def sync_directory(folder: Path) -> None:
    """Flush ``folder``'s entries to disk (a file just created or renamed in it): until
    then a power loss can undo the rename. A no-op where directories cannot be opened
    or synced (Windows, some network file systems)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


#: errno values of a rename-without-replacing this system or file system cannot do
_UNSUPPORTED = frozenset(
    code
    for code in (
        errno.EINVAL,
        errno.ENOSYS,
        getattr(errno, "ENOTSUP", None),
        getattr(errno, "EOPNOTSUPP", None),
    )
    if code is not None
)


def _rename_no_replace(src: str, dst: str) -> bool | None:
    """Rename ``src`` to ``dst`` only if ``dst`` does not exist, atomically (the kernel
    checks and renames under the directory's lock): True if renamed, False if ``dst``
    exists, None where neither Linux's ``renameat2(RENAME_NOREPLACE)`` nor macOS's
    ``renamex_np(RENAME_EXCL)`` is available for this file system."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:  # pragma: no cover - no C library to ask (Windows)
        return None
    paths = (os.fsencode(src), os.fsencode(dst))
    if sys.platform.startswith("linux") and hasattr(libc, "renameat2"):
        at_fdcwd, rename_noreplace = -100, 1
        result = libc.renameat2(at_fdcwd, paths[0], at_fdcwd, paths[1], rename_noreplace)
    elif sys.platform == "darwin" and hasattr(libc, "renamex_np"):  # pragma: no cover
        rename_excl = 0x4
        result = libc.renamex_np(paths[0], paths[1], rename_excl)
    else:  # pragma: no cover - another system
        return None
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code == errno.EEXIST:
        return False
    if code in _UNSUPPORTED:
        return None
    raise OSError(code, os.strerror(code), dst)


def place_unless_exists(src: str, dst: str) -> bool:
    """Put the complete file ``src`` at ``dst`` unless a file is there: True if it was
    placed, False if ``dst`` existed (then ``src`` is left as it was, to be removed).

    Never a check followed by a replace: another process can create ``dst`` in between
    and write to it, and the replace would drop its file with what was written. In
    order: a hard link (``dst`` must not exist); where the file system has none (FAT,
    exFAT, some network and FUSE file systems), a rename that refuses to replace; where
    that is missing too, ``dst`` created exclusively (``O_EXCL``) and ``src``'s bytes
    copied into it (a reader opening it meanwhile can see it incomplete: the only
    way left that never replaces a file)."""
    try:
        os.link(src, dst)
        return True
    except FileExistsError:
        return False
    except OSError:
        pass  # no hard links here
    renamed = _rename_no_replace(src, dst)
    if renamed is not None:
        return renamed
    try:
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    try:
        with open(src, "rb") as source, os.fdopen(fd, "wb") as target:
            shutil.copyfileobj(source, target)
            target.flush()
            os.fsync(target.fileno())
    except BaseException:
        os.unlink(dst)  # ours, incomplete: not a store anyone wrote to yet
        raise
    return True


def warn_if_open_to_others(path: str | os.PathLike[str], *, stacklevel: int = 2) -> None:
    """Warn :class:`~statekeeper.errors.KeyFileOpenToOthers` when the key file at
    ``path`` gives its group or others any access (the rule ssh applies to private
    keys). The caller uses the file all the same (a refusal would stop running
    services); the warning names the file and the fix, never a key. ``stacklevel`` is
    :func:`warnings.warn`'s, counted from the caller (the default 2: the caller's
    caller, the code that asked for the file). Not on Windows, whose mode bits do not
    say who may read a file."""
    import warnings

    from .errors import KeyFileOpenToOthers

    if os.name == "nt":
        return
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if mode & 0o077:
        warnings.warn(KeyFileOpenToOthers(os.fspath(path), mode), stacklevel=stacklevel + 1)


def create_private(path: str | os.PathLike[str]) -> bool:
    """Create ``path`` empty with mode 0600 (whatever the umask) unless something is
    there: a file that will hold records decrypted (a read model of an encrypted
    store) is its owner's only, as an export of one is. SQLite gives its ``-wal`` and
    ``-shm`` files the mode of the database file. True when it was created."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    try:
        os.fchmod(fd, 0o600)  # (a umask cannot widen it; a default ACL might have)
    finally:
        os.close(fd)
    return True
