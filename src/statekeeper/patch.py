"""JSON Patch (RFC 6902): compute the diff between two JSON documents and apply it.

The store records every data change as a patch instead of a whole copy, so a chat that
grows by one message costs one ``add`` op, not the whole history again. :func:`diff`
is tuned for the way agent state changes: dictionaries are compared key by key, a list
that grew at the end becomes ``add …/-`` ops, a list of equal length is compared item
by item, and anything else is replaced. :func:`apply` never mutates its input unless
asked to (``in_place=True``), and raises :class:`~statekeeper.errors.PatchError` on an
operation that does not fit the document.

The functions speak plain RFC 6902 (``add``, ``remove``, ``replace``, ``move``,
``copy``, ``test``), so patches written here are readable by any JSON Patch library,
and patches from elsewhere apply here.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
from datetime import datetime, time
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from .errors import PatchError, SerializationError

__all__ = ["apply", "diff", "escape", "list_at", "moved_keys", "strict_packer", "unescape"]

Op = dict[str, Any]


def escape(token: str) -> str:
    """Escape one JSON Pointer reference token (``~`` → ``~0``, ``/`` → ``~1``)."""
    if "~" in token or "/" in token:
        return token.replace("~", "~0").replace("/", "~1")
    return token


def unescape(token: str) -> str:
    """Undo :func:`escape`."""
    if "~" in token:
        return token.replace("~1", "/").replace("~0", "~")
    return token


def diff(old: Any, new: Any, path: str = "") -> list[Op]:
    """Return the ops that turn ``old`` into ``new`` (an empty list when they are equal);
    ``path``: where they sit in a larger document (a JSON Pointer, ``""`` for the root)."""
    ops: list[Op] = []
    try:
        _diff(old, new, path, ops)
    except TypeError as exc:  # a dict key that is not a string: not a JSON document
        raise SerializationError(f"cannot diff: {exc}") from exc
    return ops


_SCALARS = (str, type(None))


def _same(a: Any, b: Any) -> bool:
    """JSON equality: ``True == 1`` and ``1 == 1.0`` in Python, but not in a document."""
    ta = type(a)
    if ta is not type(b):
        return False
    if ta is Decimal:  # as stored: NaN is not != NaN, and a signaling NaN compared raises
        return bool(a.as_tuple() == b.as_tuple())
    try:
        if a != b:
            return False
    except ArithmeticError:  # (decimal.InvalidOperation: a signaling NaN inside)
        return _same_json(a, b)
    if isinstance(a, _SCALARS):
        return True
    # Equal by Python's rules; equal packed bytes rule out bool/int/float mixing.
    # (Different bytes may mean a typed value the packer refuses: check the slow way,
    # key order included.)
    # Packed in strict types (msgpack), not as JSON: orjson writes a ``StrEnum`` or
    # ``IntEnum`` member, a UUID or a dataclass as the plain value it equals, so an
    # old list item edited in place into one was taken for unchanged and the old
    # value kept (the codec tags such values, or refuses them). Strict packing
    # refuses every value that is not plain JSON; those are compared type by type.
    strict = strict_packer()
    if strict is not None:
        packb, options = strict
        try:
            if packb(a, None, options) == packb(b, None, options):
                return True
        except TypeError:  # (ormsgpack.MsgpackEncodeError is one)
            pass
    return _same_json(a, b)


#: ``(ormsgpack.packb, strict options)``; None: no ormsgpack; False: not looked for yet
_STRICT_PACKER: tuple[Any, int] | bool | None = False


def strict_packer() -> tuple[Any, int] | None:
    """``ormsgpack.packb`` and the options that make it refuse (``TypeError``) every
    value that is not plain JSON — subclasses of the built-in types (enum members
    among them), tuples, typed values, integers beyond 64 bits (imported on first
    use: ``import statekeeper`` does not pay for it)."""
    global _STRICT_PACKER
    if _STRICT_PACKER is False:
        try:
            import ormsgpack  # type: ignore[import-not-found, unused-ignore]
        except ImportError:  # pragma: no cover - a core dependency
            _STRICT_PACKER = None
        else:
            _STRICT_PACKER = (
                ormsgpack.packb,
                ormsgpack.OPT_PASSTHROUGH_SUBCLASS
                | ormsgpack.OPT_PASSTHROUGH_TUPLE
                | ormsgpack.OPT_PASSTHROUGH_DATETIME
                | ormsgpack.OPT_PASSTHROUGH_DATACLASS
                | ormsgpack.OPT_PASSTHROUGH_ENUM
                | ormsgpack.OPT_PASSTHROUGH_UUID
                | ormsgpack.OPT_PASSTHROUGH_BIG_INT,
            )
    assert _STRICT_PACKER is not True
    return _STRICT_PACKER or None


def _diff(old: Any, new: Any, path: str, ops: list[Op]) -> None:
    if old is new:
        return
    told, tnew = type(old), type(new)
    if told is dict and tnew is dict:
        moved = moved_keys(old, new)
        for key, oval in old.items():
            p = path + "/" + escape(key)
            if key in new:
                if moved and key in moved:
                    continue  # (removed and added again below, in its new place)
                nval = new[key]
                if oval is not nval and not _same(oval, nval):
                    _diff(oval, nval, p, ops)
            else:
                ops.append({"op": "remove", "path": p})
        if moved:
            for key in moved:
                p = path + "/" + escape(key)
                if key in old:
                    ops.append({"op": "remove", "path": p})
                ops.append({"op": "add", "path": p, "value": new[key]})
            return
        for key, nval in new.items():
            if key not in old:
                ops.append({"op": "add", "path": path + "/" + escape(key), "value": nval})
        return
    if told is list and tnew is list:
        lo, ln = len(old), len(new)
        if ln >= lo and (lo == 0 or _same(old[lo - 1], new[lo - 1])) and _same(old, new[:lo]):
            # grew at the end (the common case: a chat history)
            for item in new[lo:]:
                ops.append({"op": "add", "path": path + "/-", "value": item})
            return
        if ln < lo and _same(old[:ln], new):
            # shrank at the end: remove from the back so indexes stay valid
            for i in range(lo - 1, ln - 1, -1):
                ops.append({"op": "remove", "path": f"{path}/{i}"})
            return
        if ln == lo:
            changed = [i for i in range(lo) if not _same(old[i], new[i])]
            if len(changed) * 2 <= lo or lo <= 2:
                for i in changed:
                    _diff(old[i], new[i], f"{path}/{i}", ops)
                return
    if not _same(old, new):
        ops.append({"op": "replace", "path": path, "value": new})


def moved_keys(old: Any, new: dict[str, Any]) -> dict[str, None] | None:
    """The keys of ``new`` to remove (when ``old`` has them) and add again, in this
    order, after the other ops, so that the keys of the patched dict sit in ``new``'s
    order; None when removing ``old``'s keys that ``new`` lacks and adding ``new``'s
    keys that ``old`` lacks (at the end, in ``new``'s order) already gives it.

    A Python dict is ordered, and a load must give back the keys in the order they were
    saved (prompts, tool lists and JSON built from a state follow it): a key moved or
    inserted elsewhere than at the end changes no value, so a diff by value recorded
    nothing, and the order was lost at the next load from storage. ``old`` is a dict or
    any iterable of its keys in order (the store's packed bytes by key). Costs one
    comparison of the two key sequences when they are equal (the common case); else
    O(keys). The keys kept in place are the longest start of ``new``'s keys found in
    order among ``old``'s; the rest are the moved keys (a key re-inserted at the end is
    one remove and one add)."""
    new_keys = list(new)
    old_keys = list(old)
    if old_keys == new_keys:
        return None
    kept = [key for key in old_keys if key in new]
    j = 0
    count = len(new_keys)
    for key in kept:
        if j < count and key == new_keys[j]:
            j += 1
    if j == len(kept):  # every kept key in place: the adds at the end give new's order
        return None
    # from j on: the keys old lacks (not in ``kept``), and those of old out of place
    return dict.fromkeys(new_keys[j:])


def apply(doc: Any, ops: list[Op], *, in_place: bool = False) -> Any:
    """Apply ``ops`` to ``doc`` and return the result.

    Without ``in_place`` the input is left untouched: containers on the paths the
    patch touches are copied (structural sharing for the rest), which keeps replay
    cheap. Values inserted by ``add``/``replace`` are shared with the patch, so do
    not mutate a patch after applying it.
    """
    for index, op in enumerate(ops):
        try:
            doc = _apply_one(doc, op, in_place)
        except (PatchError, KeyError, IndexError, TypeError, ValueError) as exc:
            raise PatchError(f"op {index} {op.get('op')!r} at {op.get('path')!r}: {exc}") from exc
    return doc


@functools.lru_cache(maxsize=4096)
def _split(path: str) -> tuple[str, ...]:
    """Parse a JSON Pointer (cached: replay sees the same few paths over and over)."""
    if path == "":
        return ()
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}")
    return tuple(unescape(t) for t in path[1:].split("/"))


def _index(container: list[Any], token: str, *, allow_end: bool) -> int:
    if token == "-":
        if allow_end:
            return len(container)
        raise PatchError("'-' is only valid as the target of add")
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise PatchError(f"invalid array index {token!r}")
    i = int(token)
    limit = len(container) + (1 if allow_end else 0)
    if i >= limit:
        raise PatchError(f"array index {i} out of range (length {len(container)})")
    return i


def _shallow(value: Any) -> Any:
    t = type(value)
    if t is dict:
        return dict(value)
    if t is list:
        return list(value)
    return value


def _walk(doc: Any, tokens: tuple[str, ...], in_place: bool) -> tuple[Any, Any]:
    """Return (new_root, parent_of_last_token), copying the path unless in place."""
    root = doc if in_place else _shallow(doc)
    node = root
    for tok in tokens[:-1]:
        if type(node) is dict:
            if tok not in node:
                raise PatchError(f"path segment {tok!r} not found")
            child = node[tok] if in_place else _shallow(node[tok])
            node[tok] = child
        elif type(node) is list:
            i = _index(node, tok, allow_end=False)
            child = node[i] if in_place else _shallow(node[i])
            node[i] = child
        else:
            raise PatchError(f"cannot descend into {type(node).__name__} at {tok!r}")
        node = child
    return root, node


def _get(doc: Any, path: str) -> Any:
    node = doc
    for tok in _split(path):
        if type(node) is dict:
            if tok not in node:
                raise PatchError(f"path {path!r} not found")
            node = node[tok]
        elif type(node) is list:
            node = node[_index(node, tok, allow_end=False)]
        else:
            raise PatchError(f"path {path!r} not found")
    return node


def list_at(doc: Any, pointer: str) -> list[Any] | None:
    """The list at ``pointer`` in ``doc``, or None (absent, or not a list): what an
    ``add`` at ``pointer + "/-"`` appends to (a replay appends a run of them to it)."""
    if type(doc) is dict and pointer.rfind("/") == 0 and "~" not in pointer:
        node = doc.get(pointer[1:])  # (a top-level key, nothing escaped: a chat's list)
        return node if type(node) is list else None
    try:
        node = _get(doc, pointer)
    except PatchError:
        return None
    return node if type(node) is list else None


def _add(doc: Any, tokens: tuple[str, ...], value: Any, in_place: bool) -> Any:
    if not tokens:
        return value
    root, parent = _walk(doc, tokens, in_place)
    last = tokens[-1]
    if type(parent) is dict:
        parent[last] = value
    elif type(parent) is list:
        parent.insert(_index(parent, last, allow_end=True), value)
    else:
        raise PatchError(f"cannot add into {type(parent).__name__}")
    return root


def _remove(doc: Any, tokens: tuple[str, ...], in_place: bool) -> tuple[Any, Any]:
    if not tokens:
        raise PatchError("cannot remove the whole document")
    root, parent = _walk(doc, tokens, in_place)
    last = tokens[-1]
    if type(parent) is dict:
        if last not in parent:
            raise PatchError(f"key {last!r} not found")
        return root, parent.pop(last)
    if type(parent) is list:
        return root, parent.pop(_index(parent, last, allow_end=False))
    raise PatchError(f"cannot remove from {type(parent).__name__}")


def _apply_one(doc: Any, op: Op, in_place: bool) -> Any:
    kind = op.get("op")
    path = op.get("path")
    if not isinstance(path, str):
        raise PatchError(f"op {kind!r} has no string 'path'")
    if kind == "add":
        if "value" not in op:
            raise PatchError("add needs a 'value'")
        if path.endswith("/-") and in_place:
            # fast path for appends (the common case while replaying a chat)
            target = _get(doc, path[:-2])
            if type(target) is list:
                target.append(op["value"])
                return doc
        return _add(doc, _split(path), op["value"], in_place)
    if kind == "remove":
        return _remove(doc, _split(path), in_place)[0]
    if kind == "replace":
        if "value" not in op:
            raise PatchError("replace needs a 'value'")
        tokens = _split(path)
        if not tokens:
            return op["value"]
        _get(doc, path)  # must exist
        root, parent = _walk(doc, tokens, in_place)
        last = tokens[-1]
        if type(parent) is dict:
            parent[last] = op["value"]
        else:
            parent[_index(parent, last, allow_end=False)] = op["value"]
        return root
    if kind in ("move", "copy"):
        src = op.get("from")
        if not isinstance(src, str):
            raise PatchError(f"{kind} needs a string 'from'")
        if kind == "move":
            if path.startswith(src + "/"):
                raise PatchError("cannot move a value into one of its children")
            doc, value = _remove(doc, _split(src), in_place)
        else:
            value = copy.deepcopy(_get(doc, src))
        return _add(doc, _split(path), value, in_place)
    if kind == "test":
        if not _same_json(_get(doc, path), op.get("value"), ordered=False):
            raise PatchError(f"test failed at {path!r}")
        return doc
    raise PatchError(f"unknown op {kind!r}")


def _same_json(a: Any, b: Any, ordered: bool = True) -> bool:
    """JSON equality, strict on types (``True``, ``1``, ``1.0`` differ); ``ordered``:
    dicts with the same items in another key order differ (a state's key order is kept:
    a change of it alone is a change to store), as they do not for a patch's ``test``
    op (RFC 6902: objects are unordered)."""
    ta = type(a)
    if ta is not type(b):
        return False
    if ta is dict:
        if ordered:
            if list(a) != list(b):
                return False
        elif a.keys() != b.keys():
            return False
        return all(_same_json(a[k], b[k], ordered) for k in a)
    if ta is list:
        return len(a) == len(b) and all(
            _same_json(x, y, ordered) for x, y in zip(a, b, strict=True)
        )
    if ta is Decimal:  # (its stored form: see _same)
        return bool(a.as_tuple() == b.as_tuple())
    try:
        return bool(a == b) and _same_stored(a, b)
    except ArithmeticError:  # a signaling NaN inside a set or a registered value
        return False


def _same_stored(a: Any, b: Any) -> bool:
    """Whether two values Python calls equal are also stored the same: ``-0.0`` and
    ``0.0``, ``Decimal("1.10")`` and ``Decimal("1.100")``, the same instant at another
    UTC offset are equal by ``==`` but not as data (a diff that called them the same
    dropped the change: the old value was loaded back, without an error)."""
    if isinstance(a, float):
        return a != 0.0 or math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, Decimal):
        return bool(a.as_tuple() == b.as_tuple())
    if isinstance(a, datetime | time):
        # the offset, and the named zone a datetime is stored with (``"z"``,
        # statekeeper.codec.types): the same wall time in Europe/Paris, Africa/Lagos
        # or at a fixed +01:00 is one instant at one offset, three values (the next
        # day, or the next DST change, is not the same in each)
        return bool(a.utcoffset() == b.utcoffset()) and _zone(a) == _zone(b)
    if isinstance(a, set | frozenset):  # ({1} == {True}): items told apart as above
        return sorted(map(repr, a)) == sorted(map(repr, b))
    # a registered type is stored by its fields (a dataclass) or model_dump() (a
    # pydantic model): equal by its __eq__, which compares them with == (1 == 1.0,
    # True == 1, 0.0 == -0.0), is not stored the same
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return all(
            _same_json(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
        )
    dump = getattr(a, "model_dump", None)
    if callable(dump) and callable(getattr(b, "model_dump", None)):
        return _same_json(dump(), b.model_dump())
    return True


def _zone(value: datetime | time) -> str | None:
    """The name of ``value``'s time zone when it is a ``ZoneInfo`` (what is stored of it
    besides its offset), else None."""
    tz = value.tzinfo
    return tz.key if isinstance(tz, ZoneInfo) else None
