"""JSON serialization of agent documents with errors that say *where* a value is bad.

Agent state is a JSON document: dicts with string keys, lists, strings, integers
(64-bit), finite floats, booleans and null. :func:`dumps` refuses anything else with a
:class:`~statekeeper.errors.SerializationError` naming the path (for example
``data.messages[3].content``) and the type, before anything is written.

NaN and ±Infinity policy: refused. JSON has no spelling for them, and the usual
fallback (writing ``null``) silently changes the value; a caller that needs them
stores a string such as ``"NaN"`` explicitly.
"""

from __future__ import annotations

import math
import re
from typing import Any

import orjson

from ..errors import SerializationError

__all__ = ["dumps", "find_unserializable", "format_path", "loads"]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1


def format_path(root: str, parts: list[str | int]) -> str:
    """Render ``["messages", 3, "content"]`` under ``data`` as ``data.messages[3].content``."""
    out = root
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENT.match(part):
            out += f".{part}"
        else:
            out += f"[{part!r}]"
    return out


def _bad_text(text: str) -> bool:
    """True for a string UTF-8 cannot encode (a lone surrogate such as ``"\\ud800"``)."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def find_unserializable(
    value: Any, root: str = "value", *, text: bool = False
) -> tuple[str, str] | None:
    """Return ``(path, problem)`` for the first value that is not plain JSON, else None.

    With ``text``, strings (and keys) that are not valid Unicode are reported too.
    """
    stack: list[tuple[Any, list[str | int]]] = [(value, [])]
    while stack:
        node, parts = stack.pop()
        t = type(node)
        if t is dict:
            for key, child in node.items():
                if type(key) is not str:
                    return format_path(
                        root, parts
                    ), f"dict key {key!r} of type {type(key).__name__} (keys must be str)"
                if text and _bad_text(key):
                    return format_path(root, parts), f"dict key {key!r} is not valid Unicode"
                stack.append((child, [*parts, key]))
        elif t is list or t is tuple:
            for i, child in enumerate(node):
                stack.append((child, [*parts, i]))
        elif t is float:
            if not math.isfinite(node):
                return format_path(root, parts), f"non-finite float {node!r}"
        elif t is int:
            if not _INT_MIN <= node <= _INT_MAX:
                return format_path(root, parts), f"integer {node} out of 64-bit range"
        elif t is str:
            if text and _bad_text(node):
                return format_path(root, parts), f"string {node!r} is not valid Unicode"
        elif node is None or t is bool:
            continue
        else:
            return format_path(root, parts), f"type {t.__module__}.{t.__qualname__}"
    return None


#: what orjson must refuse rather than write as the plain value it resembles: a
#: datetime (an ISO string), a dataclass (a dict), a str/int/dict/list subclass (an enum
#: member among them: its value)
_STRICT = (
    orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def dumps(value: Any, root: str = "value") -> bytes:
    """Serialize a JSON document to bytes, or raise :class:`SerializationError`.

    Only plain JSON is written: ``orjson`` alone also wrote a datetime, a UUID, an enum
    member or a dataclass as the string or dict it resembles (a durable step's result
    came back, on its first run too, as another value than the one returned)."""
    if _plain_only(value):
        found = find_unserializable(value, root, text=True)
        if found is not None:
            raise SerializationError(f"cannot serialize {found[1]}", found[0])
    try:
        out = orjson.dumps(value, option=_STRICT)
    except (TypeError, orjson.JSONEncodeError) as exc:
        found = find_unserializable(value, root, text=True)
        if found is None:
            raise SerializationError(f"cannot serialize: {exc}", root) from exc
        path, problem = found
        raise SerializationError(f"cannot serialize {problem}", path) from exc
    if b"null" in out:  # orjson writes NaN/Infinity as null: tell them apart
        found = find_unserializable(value, root)
        if found is not None:
            raise SerializationError(f"cannot serialize {found[1]}", found[0])
    return out


def loads(data: bytes) -> Any:
    """Parse bytes written by :func:`dumps`. Raises ``orjson.JSONDecodeError`` on bad input."""
    return orjson.loads(data)


def _plain_only(value: Any) -> bool:
    """True when ``value`` holds something orjson writes although it is not plain JSON
    (a UUID, a plain enum member: no orjson option refuses them), or may: one pass,
    no copy; False for the common plain document."""
    from .types import needs_tagging  # (types imports this module)

    return needs_tagging(value, strict_keys=True)
