"""How deep a document may nest, checked on the changes that make it deeper.

A state is read back through encoders with a fixed nesting limit (``orjson``: 254
containers, counting the records that wrap a document), so a document that grew deeper
than that one patch at a time — each event small, every save acknowledged — could no
longer be loaded at all. The limit is therefore checked when a change is written:
a document nests at most :data:`MAX_DEPTH` containers, its top-level dict included,
where a typed value counts as the containers of its stored form (a set is a tagged
dict holding a list: two). An op puts its value ``path.count("/")`` containers deep, so
checking each op's value against what is left below its path keeps every document
within the limit without walking the rest of it: O(size of the change).
"""

from __future__ import annotations

from typing import Any

from ..errors import SerializationError
from ..patch import unescape
from .serializer import format_path
from .types import TAG

__all__ = ["MAX_DEPTH", "bounded", "check_ops_depth", "depth", "too_deep"]

#: the most containers a document may nest, its top-level dict included (a created
#: event wraps the document in three more: the body, its ops list and the op)
MAX_DEPTH = 251

_LEAVES = frozenset({str, int, float, bool, type(None)})
_NONE = object()  # (an op without a value)


def depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """The containers ``value`` nests as stored (0 for a scalar); counting stops past
    ``limit`` (the answer is then ``limit + 1``)."""
    t = type(value)
    if t in _LEAVES:
        return 0
    if t is dict and TAG not in value:  # (a flat dict, a chat message: no stack)
        for child in value.values():
            if type(child) not in _LEAVES:
                break
        else:
            return 1
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        node, above = pop()
        t = type(node)
        if t in _LEAVES:
            continue
        if isinstance(node, dict):
            level = above + (2 if TAG in node else 1)  # (escaped as {"$t": "dict", "v": …})
            children: Any = node.values()
        elif isinstance(node, list | tuple):
            level = above + 1
            children = node
        elif isinstance(node, set | frozenset):
            level = above + 2  # {"$t": "set", "v": [...]}
            children = node
        else:  # a typed value: a tagged dict at least, its encoded form inside
            level = above + 2
            children = ()
        if level > deepest:
            deepest = level
            if deepest > limit:
                return limit + 1
        for child in children:
            if type(child) not in _LEAVES:
                push((child, level))
    return deepest


def bounded(body: bytes) -> bool:
    """True when the JSON bytes ``body`` of a change (its ops, as ``orjson`` encodes
    them, no tagged dict in them: no ``"$t"``) cannot make a document nest deeper than
    :data:`MAX_DEPTH`, told from the bytes without a walk: an op's value lies
    ``path.count("/")`` containers deep, and neither that count nor the containers of
    any value (each encoded as one ``{`` or ``[``; a value ``orjson`` encodes that
    :func:`depth` counts as a typed one, two at most, at the end of a path) can be more
    than the body's ``/``, ``{`` and ``[`` bytes. False says nothing: :func:`too_deep`
    walks the ops then. The three counted in one pass in C (the body with them left
    out: 3.4x faster than three ``count`` passes, docs/benchmarks.md, "lgonepath"), and
    none for a body too short to hold that many; the walk of a checkpoint's six ops
    is ~74 k instructions ("lgwrite2")."""
    size = len(body)
    return size + 2 <= MAX_DEPTH or size - len(body.translate(None, b"/{[")) + 2 <= MAX_DEPTH


def too_deep(ops: list[dict[str, Any]], doc: Any = None) -> str | None:
    """The path of the first op of ``ops`` whose value would make the document nest
    deeper than :data:`MAX_DEPTH`, else None. ``doc``: the document the ops apply to,
    for the value a ``move`` or ``copy`` takes from it (without it those are not
    checked)."""
    leaves = _LEAVES
    for op in ops:
        value = op.get("value", _NONE)
        t = type(value)
        if t in leaves:
            continue
        path = op.get("path")
        if type(path) is not str:
            continue  # (malformed: the patch itself refuses it)
        if t is dict and TAG not in value:  # (a chat message: a dict of scalars, depth 1)
            for child in value.values():
                if type(child) not in leaves:
                    break
            else:
                if path.count("/") < MAX_DEPTH:
                    continue
        if value is _NONE:
            if doc is None or op.get("op") not in ("move", "copy"):
                continue
            value = _at(doc, op.get("from"))
        above = path.count("/")
        if above + depth(value, MAX_DEPTH - above) > MAX_DEPTH:
            return path
    return None


def check_ops_depth(agent_id: str, ops: list[dict[str, Any]], doc: Any = None) -> None:
    """Refuse ``ops`` that would make ``agent_id``'s document nest deeper than
    :data:`MAX_DEPTH`: :class:`SerializationError` naming the op's path (see
    :func:`too_deep`); nothing is written."""
    path = too_deep(ops, doc)
    if path is not None:
        raise SerializationError(
            f"cannot store agent {agent_id!r}: the document would nest deeper than "
            f"{MAX_DEPTH} levels (a value written {path.count('/')} levels down)",
            _shown(path),
        )


def _shown(pointer: str) -> str:
    """``data.a.b[3]`` for the JSON Pointer ``/a/b/3`` (its first 8 steps)."""
    tokens = [unescape(t) for t in pointer[1:].split("/")] if pointer else []
    parts: list[str | int] = [int(t) if t.isdigit() else t for t in tokens[:8]]
    return format_path("data", parts) + ("…" if len(tokens) > 8 else "")


def _at(doc: Any, pointer: Any) -> Any:
    if type(pointer) is not str or not pointer.startswith("/"):
        return None
    node = doc
    for token in pointer[1:].split("/"):
        token = unescape(token)
        if isinstance(node, dict):
            node = node.get(token)
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    return node
