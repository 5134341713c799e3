"""The LangChain messages a ``$m`` cell holds: the fixed table of core classes
(:data:`MESSAGE_CLASSES`: no class is ever imported by name) and how a message is built
from its stored fields, validated once per class and field names, then made directly
as ``model_construct`` makes it (:func:`_learn`, :func:`_construct`). A part of the
LangGraph value codec (see :mod:`.serde`)."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from langchain_core import messages as lc_messages

from . import memo as _memo
from .fingerprints import _EMPTY_DICT, _EMPTY_LIST, Fingerprint, fingerprint
from .memo import _MESSAGE_OVERHEAD, Stored, _Field, _template

# assigned from its module, not imported by name: Python 3.11 compiles a method call on an
# imported name (``_TEMPLATES.get(...)``) as an attribute load and a plain call, on a name
# the module assigns as a method call; the put / get_tuple path keeps the bytecode it had
# before serde.py was split (issue 11)
_TEMPLATES = _memo._TEMPLATES

__all__ = ["MESSAGE_CLASSES", "is_message"]


_MESSAGE_NAMES = (
    "AIMessage",
    "AIMessageChunk",
    "ChatMessage",
    "ChatMessageChunk",
    "FunctionMessage",
    "FunctionMessageChunk",
    "HumanMessage",
    "HumanMessageChunk",
    "RemoveMessage",
    "SystemMessage",
    "SystemMessageChunk",
    "ToolMessage",
    "ToolMessageChunk",
)


#: the only classes a ``$m`` cell can build, by name
MESSAGE_CLASSES: dict[str, type[Any]] = {
    name: getattr(lc_messages, name) for name in _MESSAGE_NAMES if hasattr(lc_messages, name)
}


_CLASS_NAMES: dict[type[Any], str] = {cls: name for name, cls in MESSAGE_CLASSES.items()}


def is_message(value: Any) -> bool:
    """Whether ``value`` is stored as a ``$m`` message cell."""
    return type(value) in _CLASS_NAMES


def _make(name: str, fields: dict[str, Any]) -> tuple[Any, bool]:
    """The message of class ``name`` built from ``fields``, and whether its class
    validated them (else it is constructed from them as they are)."""
    cls = MESSAGE_CLASSES[name]  # KeyError for an unknown name: never imported
    try:
        return cls(**fields), True
    except Exception:
        return cls.model_construct(**fields), False


#: (class, stored field names) -> how messages of that class stored with those plain
#: fields are made without validating them again (see :func:`_learn`): (the
#: ``__dict__`` with every value that is not a stored field, the empty containers'
#: names and types, ``__pydantic_fields_set__``, whether ``__pydantic_extra__`` is a
#: dict, the class's fingerprint template, its attribute setters: see :func:`_slot_setters`)
_DIRECT: dict[tuple[type[Any], tuple[str, ...]], Any] = {}


_new_object = object.__new__


#: the attributes a message made by :func:`_construct` gets, as ``model_construct``
#: sets them (``__dict__`` and pydantic's three slots)
_MADE_ATTRS = ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__")


def _slot_setters(cls: type[Any]) -> tuple[Callable[[Any, Any], None], ...] | None:
    """The ``__set__`` of the data descriptors that ``object.__setattr__(value, name,
    ...)`` calls for each of :data:`_MADE_ATTRS` on instances of ``cls`` (found as it
    finds them: the first class of the MRO that defines the name), bound once per
    class; None when one is not a data descriptor (such a class is not made
    directly). ``object.__setattr__`` looks the descriptor up and unpacks its
    arguments at every call: a cold read of the latest checkpoint of a 400-message
    chat made 30.18 M -> 29.37 M instructions, a warm one 8.77 M -> 7.95 M
    (``benchmarks/bench_langgraph_read_window.py``; docs/benchmarks.md, lgcold)."""
    setters: list[Callable[[Any, Any], None]] = []
    for name in _MADE_ATTRS:
        found = next((k.__dict__[name] for k in cls.__mro__ if name in k.__dict__), None)
        setter = getattr(type(found), "__set__", None)
        if found is None or setter is None:
            return None
        setters.append(found.__set__)
    return tuple(setters)


_weak = weakref.ref


def _learn(value: Any, fields: dict[str, Any]) -> None:
    """Note how ``value`` (validated from plain stored ``fields``) was made, when its
    class's :func:`_template` says each value it holds is a stored field (as stored),
    an empty container or a declared default: the next messages of its class stored
    with the same field names are then made by :func:`_construct` as
    ``model_construct`` does. Validating stored fields again changes nothing (they are
    ``model_dump()`` of a message that was validated), and was ~40 % of a cold read of
    a 400-message chat (``benchmarks/bench_langgraph_cold_callgrind.py``)."""
    cls = type(value)
    key = (cls, tuple(fields))
    if key in _DIRECT:
        return
    # worked out from this validated message itself (the one in _TEMPLATES may come
    # from a message its class did not validate)
    template = _template(value, fields, fingerprint(value))
    if template is None:
        return
    extra = getattr(value, "__pydantic_extra__", None)
    names = template[0]
    if (
        extra  # values kept beside the fields: not made here
        or getattr(value, "__pydantic_private__", None) is not None
        or getattr(cls, "__pydantic_post_init__", None)
        or not set(fields) <= set(names)
    ):
        return
    base: dict[str, Any] = {}
    empties: list[tuple[str, type[Any]]] = []
    for name, part in zip(names, template[1], strict=True):
        if part is _EMPTY_DICT or part is _EMPTY_LIST:
            empties.append((name, type(part)))
        base[name] = None if type(part) is _Field else part
    setters = _slot_setters(cls)
    if setters is None:
        return
    fields_set = frozenset(value.__pydantic_fields_set__)
    _DIRECT[key] = (cls, base, tuple(empties), fields_set, extra is not None, template, setters)


def _construct(name: str, fields: dict[str, Any]) -> tuple[Any, Any] | None:
    """A message of class ``name`` made from plain stored ``fields`` as :func:`_learn`
    noted (fresh empty containers, the stored values themselves), and its class's
    fingerprint template; None when nothing was noted for its class and fields."""
    cls = MESSAGE_CLASSES[name]  # KeyError for an unknown name: never imported
    direct = _DIRECT.get((cls, tuple(fields)))
    if direct is None:
        return None
    _, base, empties, fields_set, extra, template, setters = direct
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
    return value, template


def _fingerprint_built(
    value: Any, fields: dict[str, Any], plain: bool
) -> tuple[Fingerprint | Stored, int | None]:
    """The fingerprint of a message just built from stored ``fields`` (``plain``: all
    plain values, kept by the stored document, never changed), and its estimated
    size: a :class:`Stored` one (nothing computed) when its class has a template."""
    if plain:
        key = (type(value), tuple(fields))
        template = _TEMPLATES.get(key, _TEMPLATES)
        if template is not _TEMPLATES and template is not None:
            # the size estimate counts the content only (most of a chat message's
            # bytes): summing every field's length was ~6 % of a cold read's CPU
            content = fields.get("content")
            return Stored(template, fields), _MESSAGE_OVERHEAD + (
                len(content) if type(content) is str else 0
            )
        fp = fingerprint(value)
        if template is _TEMPLATES:
            _TEMPLATES[key] = _template(value, fields, fp)
        return fp, None
    return fingerprint(value), None
