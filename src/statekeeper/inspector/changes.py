"""JSON Patch as something to read: each operation with the value it replaced and the
value it put there, for an event's ops and for the difference between two states."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from .. import patch
from ..codec.types import shown

__all__ = ["Change", "changes", "compare", "pretty"]

_MISSING = object()


def pretty(value: Any, limit: int = 4000) -> str:
    """Indented JSON text of ``value`` (cut at ``limit`` characters)."""
    try:
        text = orjson.dumps(
            shown(value), option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS
        ).decode()
    except TypeError:
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class Change:
    """One operation: ``op`` at ``path``, the old value (``had_old``) and the new one."""

    op: str
    path: str
    old: str | None
    new: str | None
    source: str | None = None


def _get(doc: Any, path: str) -> Any:
    if path == "":
        return doc
    node = doc
    for token in path.split("/")[1:]:
        key = patch.unescape(token)
        if isinstance(node, dict):
            if key not in node:
                return _MISSING
            node = node[key]
        elif isinstance(node, list):
            if key == "-" or not key.isdigit() or int(key) >= len(node):
                return _MISSING
            node = node[int(key)]
        else:
            return _MISSING
    return node


def changes(ops: list[dict[str, Any]], before: Any | None = None) -> list[Change]:
    """``ops`` for reading; with ``before`` (the document they applied to) each one
    shows the value it replaced or removed."""
    out: list[Change] = []
    doc = before
    for op in ops:
        kind = str(op.get("op"))
        path = str(op.get("path", ""))
        old: Any = _MISSING
        if doc is not None and kind in ("replace", "remove", "add"):
            old = _get(doc, path)
            if kind == "add" and isinstance(_get(doc, path.rsplit("/", 1)[0]), list):
                old = _MISSING  # an insert into a list replaces nothing
        new: Any = op.get("value", _MISSING)
        if kind in ("move", "copy") and doc is not None:
            new = _get(doc, str(op.get("from", "")))
        out.append(
            Change(
                kind,
                path or "/",
                None if old is _MISSING else pretty(old, 600),
                None if new is _MISSING else pretty(new, 600),
                str(op["from"]) if "from" in op else None,
            )
        )
        if doc is not None:
            try:
                doc = patch.apply(doc, [op])
            except Exception:
                doc = None  # cannot follow further: show the rest without old values
    return out


def compare(old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    """What changed from ``old`` to ``new`` (both ``{"state": …, "data": …}``)."""
    return changes(patch.diff(old, new), old)
