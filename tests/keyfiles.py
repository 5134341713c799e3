"""Key files as tests write them by hand: private to their owner (mode 0600), as
``statekeeper keys generate`` writes them, so that no test is told "key file ... is open
to other users" (``KeyFileOpenToOthers``) unless it is about that warning."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_key_file(path: Path, doc: dict[str, Any] | str) -> Path:
    """Write the key file ``doc`` (a JSON document, or its text as given) at ``path``,
    mode 0600 before a byte of it is written. Returns ``path``."""
    text = doc if isinstance(doc, str) else json.dumps(doc)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # (an existing file keeps its mode through O_CREAT)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    return path
