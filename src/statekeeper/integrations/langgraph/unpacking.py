"""Unpacking: a packed value (JSON cells, pool references) made into values again,
fresh objects every call, messages built from their stored fields through the cache of
a thread's latest checkpoint (:class:`~.memo.Built`). The base of
:class:`~.serde.ValueCodec` (see :mod:`.serde` for the format)."""

from __future__ import annotations

import base64
import weakref
from collections.abc import Mapping
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from . import memo as _memo
from . import messages as _messages
from .memo import _MESSAGE_OVERHEAD, Built, Memo, Stored, _register, _unchanged
from .messages import (
    MESSAGE_CLASSES,
    _construct,
    _fingerprint_built,
    _learn,
    _make,
    _new_object,
    _weak,
)

# assigned from their modules, not imported by name: Python 3.11 compiles a method call on
# an imported name (``_PLAIN.issuperset(...)``, ``_DIRECT.get(...)``) as an attribute load
# and a plain call, on a name the module assigns as a method call; the get_tuple path keeps
# the bytecode it had before serde.py was split (issue 11)
_PLAIN = _memo._PLAIN
_DIRECT = _messages._DIRECT

__all__: list[str] = []


class _Unpacking:
    """The unpacking half of :class:`~.serde.ValueCodec` (its base): ``serde`` is set
    by the codec."""

    serde: SerializerProtocol

    def unpack(
        self,
        packed: Any,
        pool: Mapping[str, Any],
        seen: Memo | None = None,
        built: Built | None = None,
    ) -> Any:
        """Rebuild a value (fresh objects every call) from its packed form.

        ``seen``: pooled messages built are registered there as :meth:`pack`'s memo
        entries, so packing the same objects again costs no serialization.
        ``built``: pooled messages built by earlier calls, by reference (see
        :meth:`_reuse`); the ones used are marked in ``built.used``.
        """
        t = type(packed)
        if t is list:
            if built is not None:  # a message list (the common channel): see _messages
                return self._messages(packed, pool, seen, built)
            return [self.unpack(x, pool, seen, built) for x in packed]
        if t is not dict:
            return packed
        if len(packed) == 1:
            tag, body = next(iter(packed.items()))
            if tag[:1] == "$":
                return self._tagged(tag, body, pool, seen, built)
        return {k: self.unpack(x, pool, seen, built) for k, x in packed.items()}

    def _tagged(
        self,
        tag: str,
        body: Any,
        pool: Mapping[str, Any],
        seen: Memo | None = None,
        built: Built | None = None,
    ) -> Any:
        if tag == "$p":
            if built is not None:
                return self._pooled_message(body, pool, seen, built)
            cell = pool[body]
            value = self.unpack(cell, pool)
            if seen is not None and "$m" in cell:
                _register(seen, value, {"$p": body})
            return value
        if tag == "$r":
            key, message_id = body
            cell = pool[key]["$m"]

            def make() -> Any:
                return self._stored_message(cell[0], {**cell[1], "id": message_id}, pool)

            ref = {"$r": [key, message_id]}
            if built is not None:
                return self._built_message(
                    f"{key} {message_id}", cell, message_id, ref, pool, seen, built
                )
            value = make()
            if seen is not None:
                _register(seen, value, ref)
            return value
        if tag == "$s":
            return self.serde.loads_typed((body[0], base64.b64decode(body[1])))
        if tag == "$m":
            return self._stored_message(body[0], body[1], pool)
        if tag == "$d":
            return {k: self.unpack(x, pool) for k, x in body.items()}
        raise ValueError(f"unknown packed tag {tag!r}")

    def _stored_message(self, name: str, fields: dict[str, Any], pool: Mapping[str, Any]) -> Any:
        """A message of class ``name`` from its stored ``fields`` (e.g. a pending write's,
        or a checkpoint's listed by ``list``): made without validation when they are all
        plain and :func:`_learn` knows its class and fields (see :meth:`_messages`)."""
        if _PLAIN.issuperset(map(type, fields.values())):
            made = _construct(name, fields)
            if made is not None:
                return made[0]
            value, valid = _make(name, fields)
            if valid:
                _fingerprint_built(value, fields, True)  # its class's template
                _learn(value, fields)
            return value
        return self._build(name, self.unpack(fields, pool))

    def _messages(
        self, packed: list[Any], pool: Mapping[str, Any], seen: Memo | None, built: Built
    ) -> list[Any]:
        """A packed list unpacked through ``built`` (see :meth:`_built_message`). A
        pooled message (``$p``, or ``$r``: with the id given it later) whose stored
        fields are all plain, of a class and fields :func:`_learn` knows, is made here
        in one loop (what :meth:`_built_message` does for it, inlined: a cold read of
        a 400-message chat made ~5 Python calls per message); one made before from
        the same stored fields is made again from them the same way, with its
        fingerprint kept: no check that the one made before is unchanged and no
        ``model_copy`` (a warm read of a 400-message chat: 12.8 M -> 10.0 M
        instructions), and what one read hands out shares no container with what
        another does."""
        out: list[Any] = []
        append = out.append
        cache = built.cache
        used = built.used
        recipes = built.recipes
        size = 0
        for x in packed:
            # made here before (by the branch below): its recipe, by its cache key,
            # without the pool cell, the class's entry or the field names looked up
            # again (a warm read of a 400-message chat: 7.88 M -> 5.96 M instructions,
            # benchmarks/bench_langgraph_read_window.py warm-latest)
            recipe = None
            if type(x) is dict:
                rkey: Any = x.get("$p")
                if rkey is None and "$r" in x:  # a pooled message given its id later
                    r = x["$r"]
                    rkey = f"{r[0]} {r[1]}"
                if type(rkey) is str:
                    recipe = recipes.get(rkey)
            if recipe is not None:
                cls, base, fields, empties, fields_set, extra, setters, kept, ref = recipe
                values = base.copy()
                values.update(fields)
                for field_name, kind in empties:
                    values[field_name] = kind()
                value = _new_object(cls)
                set_dict, set_fields, set_extra, set_private = setters
                set_dict(value, values)
                set_fields(value, set(fields_set))
                set_extra(value, {} if extra else None)
                set_private(value, None)
                used.add(rkey)
                if seen is not None:
                    seen[id(value)] = (_weak(value), ref, kept)
                append(value)
                continue
            if type(x) is not dict or len(x) != 1:
                append(self.unpack(x, pool, seen, built))
                continue
            if "$p" in x:
                key = ckey = x["$p"]
                mid = None
            elif "$r" in x:
                key, mid = x["$r"]
                ckey = f"{key} {mid}"
            else:
                append(self.unpack(x, pool, seen, built))
                continue
            cell = pool[key]
            body = cell.get("$m") if len(cell) == 1 else None
            if body is None:
                append(self.unpack(cell if mid is None else x, pool, seen, built))
                continue
            hit = cache.get(ckey)
            stored: Any = None
            if hit is None:
                fields = body[1] if mid is None else {**body[1], "id": mid}
                plain = _PLAIN.issuperset(map(type, fields.values()))
            else:  # made before from these stored fields: made again, not copied
                stored = hit[1]
                plain = type(stored) is Stored
                fields = stored.fields if plain else None
            direct = _DIRECT.get((MESSAGE_CLASSES[body[0]], tuple(fields))) if plain else None
            ref = {"$p": key} if mid is None else {"$r": [key, mid]}
            if direct is None:
                append(self._built_message(ckey, body, mid, ref, pool, seen, built))
                continue
            cls, base, empties, fields_set, extra, template, setters = direct
            values = base.copy()
            values.update(fields)
            for field_name, kind in empties:
                values[field_name] = kind()
            value = _new_object(cls)
            set_dict, set_fields, set_extra, set_private = setters
            set_dict(value, values)
            set_fields(value, set(fields_set))
            set_extra(value, {} if extra else None)
            set_private(value, None)
            if stored is None:
                content = fields.get("content")
                nbytes = _MESSAGE_OVERHEAD + (len(content) if type(content) is str else 0)
                stored = Stored(template, fields)
                cache[ckey] = (value, stored, nbytes)
                size += nbytes
            recipes[ckey] = (cls, base, fields, empties, fields_set, extra, setters, stored, ref)
            used.add(ckey)
            if seen is not None:
                seen[id(value)] = (_weak(value), ref, stored)
            append(value)
        built.nbytes += size
        return out

    def _pooled_message(
        self, key: str, pool: Mapping[str, Any], seen: Memo | None, built: Built
    ) -> Any:
        """A pooled cell (``{"$p": key}``) unpacked through ``built`` when it holds a
        message: :meth:`_reuse` without its closure, and the message built straight
        from its stored fields when they are all scalars (the usual chat message:
        nothing in them is packed, so unpacking them would copy the dict for nothing)."""
        cell = pool[key]
        body = cell.get("$m") if len(cell) == 1 else None
        if body is None:
            return self.unpack(cell, pool, seen, built)
        return self._built_message(key, body, None, {"$p": key}, pool, seen, built)

    def _built_message(
        self,
        key: str,
        body: list[Any],
        message_id: Any,
        ref: dict[str, Any],
        pool: Mapping[str, Any],
        seen: Memo | None,
        built: Built,
    ) -> Any:
        """A fresh (shallow) copy of the message built earlier for ``key`` (stored as
        ``body``, with ``message_id`` when not None: a ``$r`` reference), when that
        original is unchanged (its containers are shared with copies handed out, so a
        change made through one shows in its fingerprint); else a new build, handed
        out itself (a change made to it shows the same way: the next read builds
        again). A copy costs a third of a build and needs no new fingerprint. A
        message whose stored fields are all scalars (the usual chat message) is built
        straight from them (unpacking them would copy the dict for nothing), and its
        fingerprint is left to be worked out when needed (:class:`Stored`)."""
        hit = built.cache.get(key)
        if hit is None or not _unchanged(hit):
            fields = body[1]
            plain = True
            for x in fields.values():
                if type(x) not in _PLAIN:
                    fields = self.unpack(fields, pool)
                    plain = False
                    break
            if message_id is not None:
                plain = plain and type(message_id) in _PLAIN
                fields = {**fields, "id": message_id}
            made = _construct(body[0], fields) if plain else None
            if made is not None:
                value = made[0]
                content = fields.get("content")
                size = _MESSAGE_OVERHEAD + (len(content) if type(content) is str else 0)
                hit = built.put(key, value, Stored(made[1], fields), size)
            else:
                value, valid = _make(body[0], fields)
                hit = built.put(key, value, *_fingerprint_built(value, fields, plain))
                if valid and plain:
                    _learn(value, fields)
        else:
            value = hit[0].model_copy()
        built.used.add(key)
        if seen is not None:
            seen[id(value)] = (weakref.ref(value), ref, hit[1])
        return value

    @staticmethod
    def _build(name: str, fields: dict[str, Any]) -> Any:
        return _make(name, fields)[0]
