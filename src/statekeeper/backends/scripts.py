"""Scripts that live in their own files beside a backend's code: SQL for PostgreSQL,
Lua for Redis. Read from the installed package (``importlib.resources``), once."""

from __future__ import annotations

import functools
import re
from importlib import resources

__all__ = ["named_blocks", "read_script", "script_names"]

_NAME = re.compile(r"^-- name: ([a-z0-9_]+)\s*$", re.MULTILINE)


@functools.cache
def read_script(package: str, name: str) -> str:
    """The text of the file ``name`` of ``package`` (e.g. ``"sql/schema.sql"``)."""
    return resources.files(package).joinpath(name).read_text(encoding="utf-8")


def script_names(package: str, folder: str, suffix: str) -> list[str]:
    """Every ``*suffix`` file in ``folder`` of ``package``, as names for :func:`read_script`."""
    root = resources.files(package).joinpath(folder)
    return sorted(f"{folder}/{p.name}" for p in root.iterdir() if p.name.endswith(suffix))


def named_blocks(text: str) -> dict[str, str]:
    """The statements of a file of ``-- name: <name>`` blocks (what comes before the
    first name is a header; ``--`` comment lines inside a block are dropped)."""
    parts = _NAME.split(text)
    blocks: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in blocks:
            raise ValueError(f"statement {name!r} is named twice")
        lines = [line for line in body.splitlines() if not line.lstrip().startswith("--")]
        blocks[name] = " ".join(line.strip() for line in lines if line.strip())
    return blocks
