"""A restore's chain of backup files, read in threads a cancel stops at their next
frame (:func:`.joined.run_stoppable`) and never leaves running."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from ...errors import BackupError
from .fileformat import VERSION, BackupKey, FrameReader

__all__ = ["open_chain", "owned_parts"]


def open_chain(paths: Sequence[str], key: BackupKey) -> tuple[list[str], set[str], list[int]]:
    """The backup ids of the files (each incremental's parent the file before it),
    every agent id their manifests list and their format versions; reads headers and
    manifests only."""
    ids: list[str] = []
    agents: set[str] = set()
    versions: list[int] = []
    for number, path in enumerate(paths):
        reader = FrameReader(path, key)
        try:
            header = reader.header
            expected_parent = ids[-1] if ids else None
            if header.parent != expected_parent:
                if number == 0:
                    raise BackupError(
                        f"backup {path} is incremental (parent {header.parent}): give its full"
                        " backup and every incremental before it, in order"
                    )
                raise BackupError(
                    f"backup {path} does not follow {paths[number - 1]} (its parent is"
                    f" {header.parent}, not {expected_parent})"
                )
            if header.version == VERSION:
                agents.update(reader.streams)
            else:  # its streams as columns: the ids taken from them (``streams`` makes a
                # dict per stream, ~0.1 CPU-s for 100,000: docs/benchmarks.md "restore2")
                agents.update(row[0] for row in reader.heads())
            ids.append(header.backup_id)
            versions.append(header.version)
        finally:
            reader.close()
    return ids, agents, versions


def owned_parts(parts: Any, *args: Any) -> tuple[Any, contextlib.ExitStack]:
    """``parts(stack, *args)`` on a stack of its own, returned with it: the caller
    enters it, or (cancelled) closes it (:func:`~.._joined.run_owned`): the images
    and folders opened meanwhile never outlive the restore."""
    own = contextlib.ExitStack()
    try:
        return parts(own, *args), own
    except BaseException:
        own.close()
        raise
