"""Files a command writes: only into an existing folder, and only over a file of the
same kind that statekeeper wrote (a witness file over a witness file...), never over
anything else."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from ..errors import ConfigurationError, NotOwned

__all__ = ["check_output_file", "json_tagged"]


def json_tagged(tag: str) -> Callable[[Path], bool]:
    """A test for "a JSON object statekeeper wrote, carrying ``tag``"."""

    def test(path: Path) -> bool:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return isinstance(doc, dict) and tag in doc

    return test


def check_output_file(path: Path, what: str, is_ours: Callable[[Path], bool]) -> None:
    """Refuse, before anything is written, an output ``path`` whose folder is missing,
    that is a folder or not a regular file, or that holds something ``is_ours`` does
    not recognise."""
    parent = path.parent
    if not parent.is_dir():
        raise ConfigurationError(
            f"cannot write {what} {path}: no such folder: {parent}"
            if not parent.exists()
            else f"cannot write {what} {path}: {parent} is not a folder"
        )
    if path.is_dir():
        raise ConfigurationError(f"cannot write {what} {path}: it is a folder")
    if path.exists() and not path.is_file():  # a device, a pipe, a socket (/dev/null)
        raise ConfigurationError(
            f"cannot write {what} {path}: it is not a regular file (a device, pipe or"
            " socket); choose a file path"
        )
    if path.exists() and not is_ours(path):
        raise NotOwned(
            f"refusing to overwrite {path}: it is not a {what} statekeeper wrote; "
            "choose another path"
        )
