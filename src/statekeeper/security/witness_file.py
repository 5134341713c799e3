"""The witness file format, below the store: how a witness file is written, read and
canonicalised. Both the store's own witness (:mod:`.highwater`) and the exported
witness files (:mod:`.witness`) use it; see :mod:`.witness` for the format."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .._files import write_atomically
from ..errors import ConfigurationError

__all__ = [
    "VERSION",
    "OtherFormat",
    "canonical",
    "entries_of",
    "load_witness",
    "unreadable",
    "write_atomically",
]

#: the ``statekeeper_witness`` version a witness file carries
VERSION = 1


def canonical(streams: list[dict[str, Any]]) -> bytes:
    """The bytes digests and seals are computed over (sorted keys, no spaces)."""
    return json.dumps(streams, sort_keys=True, separators=(",", ":")).encode()


def load_witness(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a witness file (raises ``ConfigurationError`` when it is not one)."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"cannot read witness file {os.fspath(path)}: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("statekeeper_witness") != VERSION:
        raise ConfigurationError(f"{os.fspath(path)}: {_not_read(doc)}")
    if not isinstance(doc.get("streams"), list):
        raise ConfigurationError(f"{os.fspath(path)} has no streams")
    return doc


class OtherFormat(ConfigurationError):
    """A witness file of another format version than the one this version reads (a
    newer statekeeper's, presumably): refused, never guessed at nor called damaged.
    Internal: the automatic witness reports it as the file being unusable."""


def _not_read(doc: Any) -> str:
    """Why ``doc`` is not a witness file this version reads: none at all, or one of
    another format version."""
    version = doc.get("statekeeper_witness") if isinstance(doc, dict) else None
    if isinstance(version, int) and not isinstance(version, bool):
        return (
            f"it is of witness format {version}, which this version of statekeeper does "
            f"not read (it reads format {VERSION}): written by a newer version? (upgrade)"
        )
    return "not a statekeeper witness file"


def unreadable(exc: Exception) -> str:
    """What an automatic witness file that :func:`entries_of` refused is, in words."""
    return str(exc) if isinstance(exc, OtherFormat) else f"it is damaged ({exc})"


def entries_of(doc: Any) -> dict[str, dict[str, Any]]:
    """The entries, by agent id, of the automatic witness file ``doc`` (parsed JSON).
    Raises :class:`OtherFormat` for a file of another format version, ``ValueError``
    (``KeyError``, ``TypeError``) naming what is wrong for a damaged one. An entry's
    optional ``c``, ``r`` and ``d`` (:mod:`.incarnation`) are numbers when present: a file
    written before they were has none, and is read as it was."""
    streams = doc.get("streams") if isinstance(doc, dict) else None
    version = doc.get("statekeeper_witness") if isinstance(doc, dict) else None
    if version != VERSION and isinstance(version, int) and not isinstance(version, bool):
        raise OtherFormat(_not_read(doc))
    if version != VERSION or not isinstance(streams, list):
        raise ValueError(_not_read(doc))
    entries = {str(e["agent_id"]): e for e in streams}
    for entry in entries.values():
        int(entry["seq"]), float(entry["t"]), float(entry.get("c", 0)), float(entry.get("r", 0))
        float(entry.get("d", 0))
    return entries
