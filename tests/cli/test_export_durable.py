"""``statekeeper export -o FILE`` writes a temporary file and renames it over ``FILE``.
Before: the rename came without a flush of the file's data or of the folder, so after
a power loss the previous good export could be replaced by an empty file (the rename
on disk before the data). Now: the file is flushed, renamed, then its folder flushed
— in that order (a power loss cannot be simulated: the calls are recorded). And a
full disk named only "No space left on device": the message now names the file."""

from __future__ import annotations

import errno
import io
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from statekeeper.cli import app

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")


def record_syncs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every ``os.fsync`` (of a file or a folder, by path) and ``os.replace`` from now on."""
    calls: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        kind = "fsync dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file"
        calls.append((kind, os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        calls.append(("replace", os.fspath(dst)))
        real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return calls


def test_export_flushes_the_file_then_renames_then_flushes_the_folder(
    runner: CliRunner, url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out" / "agents.jsonl"
    out.parent.mkdir()
    calls = record_syncs(monkeypatch)
    done = runner.invoke(app, ["export", "--db", url, "-o", str(out)])
    assert done.exit_code == 0, done.output
    mine = [(kind, path) for kind, path in calls if Path(path).parent == out.parent.resolve()]
    mine += [(kind, path) for kind, path in calls if Path(path) == out.parent.resolve()]
    mine.sort(key=calls.index)
    assert [kind for kind, _ in mine] == ["fsync file", "replace", "fsync dir"], calls
    assert Path(mine[0][1]).name.startswith(".agents.jsonl.")  # the temporary file
    assert Path(mine[1][1]) == out
    assert out.read_text().count("\n") > 3


def test_a_full_disk_names_the_export_file_and_keeps_the_old_one(
    runner: CliRunner, url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "agents.jsonl"
    assert runner.invoke(app, ["export", "--db", url, "-o", str(out)]).exit_code == 0
    good = out.read_bytes()

    async def full(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as a write reports it

    monkeypatch.setattr("statekeeper.cli.transfer.export_agents", full)
    done = runner.invoke(app, ["export", "--db", url, "-o", str(out)])
    assert done.exit_code != 0
    assert "No space left on device" in " ".join(done.output.split())
    assert str(out) in "".join(done.output.split()), done.output  # (wrapped lines joined)
    assert out.read_bytes() == good
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".agents")) == []


class _FullDisk(io.RawIOBase):
    """A file on a full disk: every write of its buffered bytes fails, as the OS says."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        if not self.closed:
            os.close(self.fd)
        super().close()


def test_a_disk_full_on_the_bytes_still_buffered_names_the_export_file(
    runner: CliRunner, url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flush fails on a full disk (the file named), then the file's close fails
    again on the bytes still buffered, without a name: that second error replaced the
    first, and the CLI printed only "No space left on device" (trialdisk, on a 64 KiB
    tmpfs: there the first failing write came inside the export)."""
    out = tmp_path / "agents.jsonl"
    assert runner.invoke(app, ["export", "--db", url, "-o", str(out)]).exit_code == 0
    good = out.read_bytes()
    monkeypatch.setattr(os, "fdopen", lambda fd, *a, **k: io.BufferedWriter(_FullDisk(fd)))
    done = runner.invoke(app, ["export", "--db", url, "-o", str(out)])
    assert done.exit_code != 0
    assert "No space left on device" in " ".join(done.output.split())
    assert str(out) in "".join(done.output.split()), done.output  # (wrapped lines joined)
    assert out.read_bytes() == good
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".agents")) == []
