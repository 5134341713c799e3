"""The digest an export's completion line carries, computed here on its own: the
SHA-256 of every line between the header and the completion line, each followed by
``\\n``."""

from __future__ import annotations

import hashlib


def digest_of(exported: str) -> str:
    lines = exported.splitlines()[1:-1]
    return hashlib.sha256("".join(line + "\n" for line in lines).encode()).hexdigest()
