"""Packing: values made into JSON cells, messages and serde blobs pooled by content,
a message met again unchanged (the memo, :mod:`.memo`) its stored reference, not
serialized again. The packing half of :class:`~.serde.ValueCodec` (see :mod:`.serde` for
the format)."""

from __future__ import annotations

import base64
import math
import weakref
from collections.abc import Mapping
from typing import Any

import orjson

from . import messages as _messages
from .fingerprints import _changed, _only_id_differs, _same_default, fingerprint, fp_id
from .memo import Memo, Stored, _alive, resolved
from .pooling import _base_key, _pool_key, fresh_ref
from .unpacking import _Unpacking

# assigned from its module, not imported by name: Python 3.11 compiles a method call on an
# imported name (``_CLASS_NAMES.get(...)``) as an attribute load and a plain call, on a name
# the module assigns as a method call; the put / get_tuple path keeps the bytecode it had
# before serde.py was split (issue 11)
_CLASS_NAMES = _messages._CLASS_NAMES

__all__: list[str] = []


_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1


_SCALARS = (str, bool, type(None))


#: scalars a list keeps as they are stored (see :meth:`ValueCodec.pack_items`)
_KEPT = frozenset({str, bool, type(None), int})


class _Defaults:
    """Per message class: fields whose value equals the default are not stored."""

    def __init__(self) -> None:
        self._cache: dict[type[Any], dict[str, Any]] = {}

    def of(self, cls: type[Any]) -> dict[str, Any]:
        found = self._cache.get(cls)
        if found is None:
            found = {}
            for name, info in cls.model_fields.items():
                if not info.is_required():
                    found[name] = info.get_default(call_default_factory=True)
            self._cache[cls] = found
        return found


_DEFAULTS = _Defaults()


class _Packing(_Unpacking):
    """The packing half of :class:`~.serde.ValueCodec` (its base): ``native`` and
    ``pool_min`` are set by the codec."""

    native: bool
    pool_min: int

    def pack(
        self,
        value: Any,
        pool: Mapping[str, Any] | None = None,
        new: dict[str, Any] | None = None,
        memo: Memo | None = None,
        used: Memo | None = None,
    ) -> Any:
        """Pack ``value``; pooled cells not already in ``pool`` are added to ``new``.

        With ``new=None`` nothing is pooled (the cells are inlined). ``memo`` maps
        ``id(message)`` to ``(message, pooled reference, fields when packed)`` from
        earlier packs (or loads, see :meth:`unpack`): a message object met again whose
        fields are all still equal to those is not serialized again. A message whose
        only change is its ``id`` (``add_messages`` gives ids to the messages a node
        returned, after their write was stored) becomes ``{"$r": [key, id]}``: the
        stored message under ``key`` with that id, so its content is stored once.
        Every entry used or made is also put in ``used`` (and ``memo``).
        """
        if not self.native:
            if type(value) is list or type(value) is tuple:
                return [self._blob(v, pool, new) for v in value]
            return self._blob(value, pool, new)
        return self._pack(value, pool, new, memo, used)

    def pack_items(
        self,
        value: list[Any] | tuple[Any, ...],
        old: list[Any],
        pool: Mapping[str, Any],
        new: dict[str, Any],
        memo: Memo,
        used: Memo,
    ) -> tuple[list[Any], bool]:
        """Pack a list channel's value in one pass against ``old``, its packed form in
        the stored document, and the memo: an item at an index ``old`` has that is a
        message the memo knows, unchanged since it was packed and stored there as it
        is in the memo, is ``old``'s own cell (nothing serialized, nothing copied);
        every other item is packed as :meth:`pack` packs it. Returns the packed list
        and whether it is ``old`` followed by new items (the items of ``old`` are then
        the same objects, so the caller knows the change without comparing the lists).

        :meth:`pack` of a 400-message chat's list went through ``_pack``,
        ``_memo_message``, ``_changed`` and a fresh reference per message, then the
        caller compared the whole old and new lists (twice serialized) to find that
        two messages were appended; here the usual message costs a memo look-up, a
        reference comparison and one C-level comparison of its fields.
        """
        if not self.native:
            return self.pack(value, pool, new, memo, used), False
        out: list[Any] = []
        append = out.append
        lo = len(old)
        extends = len(value) >= lo
        get = memo.get
        names_of = _CLASS_NAMES
        for i, v in enumerate(value):
            if i < lo:
                if type(v) in names_of:
                    seen = get(id(v))
                    if seen is not None and seen[0]() is v:
                        cell = old[i]
                        if cell == seen[1]:
                            fp = seen[2]
                            d = getattr(v, "__dict__", None)
                            try:
                                if type(fp) is Stored:
                                    # built by a read from stored fields (a whole chat
                                    # but its newest messages): one C comparison with
                                    # what it was built with, no tuples made (see
                                    # Stored.unchanged; a false alarm goes the long way)
                                    expect = fp.expect
                                    same = d == (expect if expect is not None else fp.expected())
                                    if not same:
                                        fp = fp.fp or fp.resolve()
                                else:
                                    names, values = fp  # type: ignore[misc]
                                    same = (
                                        d is not None
                                        and len(d) == len(names)
                                        and tuple(d.values()) == values
                                        and tuple(d) == names
                                    )
                            except Exception:  # a field whose == raises: the long way
                                same = False
                                if type(fp) is Stored:
                                    fp = fp.fp or fp.resolve()
                            # a non-empty container field is frozen in the fingerprint:
                            # compared the long way
                            if same or _changed(v, fp) == set():  # type: ignore[arg-type]
                                used[id(v)] = seen
                                append(cell)
                                continue
                elif type(v) in _KEPT and type(old[i]) is type(v) and old[i] == v:
                    append(old[i])  # an immutable scalar stored as it is
                    continue
                packed = self._pack(v, pool, new, memo, used)
                if extends and packed is not old[i]:
                    extends = False
                append(packed)
            else:
                append(self._pack(v, pool, new, memo, used))
        return out, extends

    def _pack(
        self,
        v: Any,
        pool: Mapping[str, Any] | None,
        new: dict[str, Any] | None,
        memo: Memo | None = None,
        used: Memo | None = None,
    ) -> Any:
        t = type(v)
        if t in _SCALARS:
            return v
        if t is int:
            return v if _INT_MIN <= v <= _INT_MAX else self._blob(v, pool, new)
        if t is float:
            return v if math.isfinite(v) else self._blob(v, pool, new)
        if t is list or t is tuple:
            return [self._pack(x, pool, new, memo, used) for x in v]
        if t is dict:
            out: dict[str, Any] = {}
            escape = False
            for k, x in v.items():
                if type(k) is not str:
                    return self._blob(v, pool, new)
                if k[:1] == "$":
                    escape = True
                out[k] = self._pack(x, pool, new, memo, used)
            return {"$d": out} if escape else out
        name = _CLASS_NAMES.get(t)
        if name is not None:
            return self._memo_message(v, t, name, pool, new, memo, used)
        return self._blob(v, pool, new)

    def _memo_message(
        self,
        v: Any,
        t: type[Any],
        name: str,
        pool: Mapping[str, Any] | None,
        new: dict[str, Any] | None,
        memo: Memo | None,
        used: Memo | None,
    ) -> Any:
        if memo is not None and new is not None and pool is not None:
            seen = memo.get(id(v))
            if seen is not None and _alive(seen[0], v):
                base = _base_key(seen[1])
                inline = type(seen[1]) is dict and "$m" in seen[1]
                if inline or (base is not None and (base in pool or base in new)):
                    was = resolved(seen[2])
                    changed = _changed(v, was)
                    if changed is not None and not changed:
                        if used is not None:
                            used[id(v)] = seen
                        return fresh_ref(seen[1])
                    fp = fingerprint(v) if base is not None and changed == {"id"} else None
                    if fp is not None and _only_id_differs(was, fp):
                        entry = (weakref.ref(v), {"$r": [base, fp_id(fp)]}, fp)
                        memo[id(v)] = entry
                        if used is not None:
                            used[id(v)] = entry
                        return fresh_ref(entry[1])
        # fingerprint first: a field changed by another thread while we serialize
        # (add_messages setting an id) then shows as a change next time
        fp = fingerprint(v) if memo is not None and new is not None else None
        ref, dumped = self._message(v, t, name, pool, new)
        if memo is not None and dumped and fp is not None:
            entry = (weakref.ref(v), ref, fp)
            memo[id(v)] = entry
            if used is not None:
                used[id(v)] = entry
            return fresh_ref(ref)
        return ref

    def _message(
        self,
        v: Any,
        t: type[Any],
        name: str,
        pool: Mapping[str, Any] | None,
        new: dict[str, Any] | None,
    ) -> tuple[Any, bool]:
        try:
            data = v.model_dump()
        except Exception:  # a message that cannot dump itself: let serde try
            return self._blob(v, pool, new), False
        defaults = _DEFAULTS.of(t)
        fields = {
            k: self._pack(x, None, None)
            for k, x in data.items()
            if not (k in defaults and _same_default(x, defaults[k]))
        }
        return self._pooled({"$m": [name, fields]}, pool, new), True

    def _blob(self, v: Any, pool: Mapping[str, Any] | None, new: dict[str, Any] | None) -> Any:
        type_, data = self.serde.dumps_typed(v)
        return self._pooled({"$s": [type_, base64.b64encode(data).decode()]}, pool, new)

    def _pooled(
        self, cell: dict[str, Any], pool: Mapping[str, Any] | None, new: dict[str, Any] | None
    ) -> Any:
        if new is None:
            return cell
        blob = orjson.dumps(cell)
        if len(blob) < self.pool_min:
            return cell
        key = _pool_key(blob)
        if (pool is None or key not in pool) and key not in new:
            new[key] = cell
        return {"$p": key}
