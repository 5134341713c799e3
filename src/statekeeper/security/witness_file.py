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

__all__ = ["VERSION", "canonical", "load_witness", "write_atomically"]

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
        raise ConfigurationError(f"{os.fspath(path)} is not a statekeeper witness file")
    if not isinstance(doc.get("streams"), list):
        raise ConfigurationError(f"{os.fspath(path)} has no streams")
    return doc
