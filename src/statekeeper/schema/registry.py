"""Schemas: a model, its name and version, and the casters between its versions.

A :class:`ModelSchema` is what the store knows about one state model: the name stored
with every state (``"$model"`` in the document), the current schema version (stamped on
every event and snapshot), the upcasters ``(from_version) -> from_version + 1`` that
bring older documents up on load, the optional downcasters that let older code read
newer documents during a rollout, and the renames of machine states, machine events and
custom events (see :mod:`.events`). A :class:`SchemaRegistry` holds the schemas of one
application; :data:`registry` is the default one.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, overload

import pydantic

from ..arguments import check_name
from ..errors import (
    InvalidArgument,
    MissingUpcaster,
    SchemaMismatch,
    SchemaVersionTooNew,
    StoredStateInvalid,
    UpcasterFailed,
)
from .models import MODEL_KEY, ModelAdapter, field_errors

__all__ = [
    "Caster",
    "EventCaster",
    "ModelSchema",
    "SchemaRegistry",
    "downcaster",
    "register",
    "registry",
    "schema_of",
    "upcaster",
]

M = TypeVar("M")
#: an upcaster or downcaster: a pure function from one version's document to the next
Caster = Callable[[dict[str, Any]], dict[str, Any]]
#: an event upcaster: ``(event type, event data) -> (event type, event data)``
EventCaster = Callable[[str, dict[str, Any]], tuple[str, dict[str, Any]]]


@dataclass(eq=False)
class ModelSchema(Generic[M]):
    """One state model and how its stored documents evolve (see the module docs).

    Build it with :meth:`SchemaRegistry.register` (or :func:`register`)."""

    model: type[M]
    name: str
    version: int
    adapter: ModelAdapter[M]
    aliases: frozenset[str] = frozenset()
    upcasters: dict[int, Caster] = field(default_factory=dict)
    downcasters: dict[int, Caster] = field(default_factory=dict)
    state_renames: dict[int, dict[str, str]] = field(default_factory=dict)
    event_renames: dict[int, dict[str, str]] = field(default_factory=dict)
    event_upcasters: dict[tuple[str, int], EventCaster] = field(default_factory=dict)

    # -- registration ------------------------------------------------------------------

    def upcaster(self, from_version: int) -> Callable[[Caster], Caster]:
        """Decorator: ``fn(doc) -> doc`` takes a document of ``from_version`` to
        ``from_version + 1`` (rename, split, default a new field, change a type)."""
        _check_step(self, from_version, "from_version", upper=self.version - 1)

        def add(fn: Caster) -> Caster:
            _check_fn(fn)
            self.upcasters[from_version] = fn
            return fn

        return add

    def downcaster(self, from_version: int) -> Callable[[Caster], Caster]:
        """Decorator: ``fn(doc) -> doc`` takes a document of ``from_version`` back to
        ``from_version - 1`` (so code of that version can read it during a rollout)."""
        _check_step(self, from_version, "from_version", lower=2)

        def add(fn: Caster) -> Caster:
            _check_fn(fn)
            self.downcasters[from_version] = fn
            return fn

        return add

    def rename_states(self, from_version: int, renames: Mapping[str, str]) -> None:
        """Machine states renamed between ``from_version`` and ``from_version + 1``."""
        _check_step(self, from_version, "from_version", upper=self.version - 1)
        self.state_renames[from_version] = _names(renames, "renames")

    def rename_events(self, from_version: int, renames: Mapping[str, str]) -> None:
        """Machine events (transition triggers) and custom event types renamed between
        ``from_version`` and ``from_version + 1``."""
        _check_step(self, from_version, "from_version", upper=self.version - 1)
        self.event_renames[from_version] = _names(renames, "renames")

    def event_upcaster(
        self, event_type: str, from_version: int
    ) -> Callable[[EventCaster], EventCaster]:
        """Decorator: ``fn(type, info) -> (type, info)`` takes a custom event recorded
        under ``from_version`` to ``from_version + 1``."""
        check_name(event_type, "event_type")
        _check_step(self, from_version, "from_version", upper=self.version - 1)

        def add(fn: EventCaster) -> EventCaster:
            _check_fn(fn)
            self.event_upcasters[(event_type, from_version)] = fn
            return fn

        return add

    # -- documents ---------------------------------------------------------------------

    def names(self) -> frozenset[str]:
        """The stored model names this schema reads (its name and its aliases)."""
        return self.aliases | {self.name}

    def convert(
        self,
        doc: Mapping[str, Any],
        version: int,
        target: int | None = None,
        *,
        agent_id: str | None = None,
        seq: int | None = None,
    ) -> dict[str, Any]:
        """``doc`` (stored at ``version``) brought to ``target`` (default: the current
        version) through the upcasters or downcasters; a copy, ``doc`` is untouched.

        Raises :class:`~statekeeper.errors.MissingUpcaster`,
        :class:`~statekeeper.errors.SchemaVersionTooNew` or
        :class:`~statekeeper.errors.UpcasterFailed` — never a guessed value."""
        return self.convert_keeping(doc, version, target, agent_id=agent_id, seq=seq)[0]

    def convert_keeping(
        self,
        doc: Mapping[str, Any],
        version: int,
        target: int | None = None,
        *,
        agent_id: str | None = None,
        seq: int | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """:meth:`convert`, and the top-level keys of ``doc`` its downcasters dropped:
        deleted, their value moved to no key the casters added (a renamed key's value
        is the same object under its new name). Code of an older version reading a
        newer document never sees those keys, so a typed write of it carries them
        back (the rule for every key the code could not see); empty when nothing was
        downcast."""
        target = self.version if target is None else target
        stored = doc.get(MODEL_KEY)
        if stored is not None and stored not in self.names():
            raise SchemaMismatch(
                f"the stored state is a {stored!r}, not a {self.name!r}", agent_id=agent_id, seq=seq
            )
        current = {k: v for k, v in doc.items() if k != MODEL_KEY}
        if version == target:
            return current, {}
        current = copy_document(current)  # casters may mutate their argument freely
        newer = current if version > target else None
        while version < target:
            fn = self.upcasters.get(version)
            if fn is None and self._machine_only(version):
                version += 1  # a step that renamed machine states or events only
                continue
            if fn is None:
                raise MissingUpcaster(self.name, version, target, agent_id=agent_id, seq=seq)
            current = _cast(self, fn, current, version, version + 1, agent_id, seq)
            version += 1
        while version > target:
            fn = self.downcasters.get(version)
            if fn is None:
                raise SchemaVersionTooNew(
                    self.name, version, self.version, agent_id=agent_id, seq=seq
                )
            current = _cast(self, fn, current, version, version - 1, agent_id, seq)
            version -= 1
        return current, ({} if newer is None else _dropped(newer, current))

    def _machine_only(self, version: int) -> bool:
        """True when the step from ``version`` declared machine or event changes only
        (renames, event upcasters) and no document upcaster: the document is as is."""
        return (
            version in self.state_renames
            or version in self.event_renames
            or any(v == version for _, v in self.event_upcasters)
        )

    def load(
        self,
        doc: Mapping[str, Any],
        version: int,
        *,
        agent_id: str = "",
        seq: int | None = None,
    ) -> M:
        """A stored document as a model instance: cast to the current version, then
        validated (:class:`~statekeeper.errors.StoredStateInvalid` names the field)."""
        return self.load_keeping(doc, version, agent_id=agent_id, seq=seq)[0]

    def load_keeping(
        self,
        doc: Mapping[str, Any],
        version: int,
        *,
        agent_id: str = "",
        seq: int | None = None,
    ) -> tuple[M, dict[str, Any]]:
        """:meth:`load`, and the document cast to the current version that it was
        validated from: a typed write of the state carries the keys of it that the
        model does not declare (:meth:`ModelAdapter.keep`)."""
        current, dropped = self.convert_keeping(doc, version, agent_id=agent_id or None, seq=seq)
        try:
            state = self.adapter.validate(current)
        except pydantic.ValidationError as exc:
            raise StoredStateInvalid(
                agent_id, seq, self.name, version, self.version, field_errors(exc)
            ) from None
        if dropped:  # (read through downcasters: what they dropped is carried too)
            return state, {**current, **dropped}
        return state, current

    def dump(
        self,
        value: M,
        agent_id: str | None = None,
        *,
        baseline: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The document to store for ``value`` (validated; carries the model's name).
        ``baseline``: a document validated before, see :meth:`ModelAdapter.dump`."""
        doc = self.adapter.dump(value, agent_id, baseline=baseline)
        return {MODEL_KEY: self.name, **doc}

    def state_name(self, name: str | None, version: int, target: int | None = None) -> str | None:
        """A machine state recorded under ``version`` as it is called now (or at
        ``target``, a later version)."""
        upto = self.version if target is None else target
        return _rename(name, version, upto, self.state_renames)

    def state_name_back(self, name: str | None, version: int, target: int) -> str | None:
        """A machine state named as at ``version`` as ``target`` (lower) named it: the
        renames undone (a name two old states were both renamed to stays as it is)."""
        for step in range(version - 1, target - 1, -1):
            olds = [old for old, new in self.state_renames.get(step, {}).items() if new == name]
            if len(olds) == 1:
                name = olds[0]
        return name

    def event_name(self, name: str, version: int, target: int | None = None) -> str:
        """A machine event or custom event type recorded under ``version``, as named now
        (or at ``target``, a later version)."""
        upto = self.version if target is None else target
        renamed = _rename(name, version, upto, self.event_renames)
        assert renamed is not None
        return renamed

    def __repr__(self) -> str:
        return f"ModelSchema({self.name!r}, version={self.version})"


_ATOMS = frozenset({str, int, float, bool, type(None)})


def copy_document(value: Any) -> Any:
    """A deep copy of a stored document: dicts and lists rebuilt, immutable JSON
    scalars shared, anything else (a typed value) through :func:`copy.deepcopy`.
    ~4x fewer instructions than ``copy.deepcopy`` on a JSON document (no memo: a
    decoded document shares no containers), measured in a migration
    (benchmarks/bench_schema_callgrind.py), where every agent's state is copied once."""
    t = type(value)
    if t is dict:
        atoms = _ATOMS
        return {k: v if type(v) in atoms else copy_document(v) for k, v in value.items()}
    if t is list:
        atoms = _ATOMS
        return [v if type(v) in atoms else copy_document(v) for v in value]
    if t in _ATOMS:
        return value
    return copy.deepcopy(value)


def _dropped(newer: dict[str, Any], older: dict[str, Any]) -> dict[str, Any]:
    """The keys of ``newer`` (a document before its downcasters ran) missing from
    ``older`` (after) whose value no key new in ``older`` holds (by identity: a renamed
    key's value is moved, not copied)."""
    gone = [k for k in newer if k not in older]
    if not gone:
        return {}
    moved = {id(v) for k, v in older.items() if k not in newer}
    return {k: newer[k] for k in gone if id(newer[k]) not in moved}


def _rename(
    name: str | None, version: int, current: int, table: dict[int, dict[str, str]]
) -> str | None:
    if name is None:
        return None
    for step in range(version, current):
        name = table.get(step, {}).get(name, name)
    return name


def _cast(
    schema: ModelSchema[Any],
    fn: Caster,
    doc: dict[str, Any],
    version: int,
    target: int,
    agent_id: str | None,
    seq: int | None,
) -> dict[str, Any]:
    looked = _Document(doc)
    try:
        out = fn(looked)
    except Exception as exc:
        reason = f"{type(exc).__name__} in {getattr(fn, '__qualname__', fn)!s}"
        if isinstance(exc, KeyError):
            # the key is named only when the document itself lacked it (a field name);
            # a failed lookup elsewhere (a table of values) may be keyed by data
            missing = looked.missing
            if missing is not None and exc.args and exc.args[0] == missing:
                reason += f" (the document has no key {missing!r})"
            else:
                reason += " (a lookup outside the document; its key is not shown)"
        raise UpcasterFailed(
            schema.name, version, target, reason, agent_id=agent_id, seq=seq
        ) from exc
    if not isinstance(out, dict):
        raise UpcasterFailed(
            schema.name,
            version,
            target,
            f"returned a {type(out).__name__}, not a dict",
            agent_id=agent_id,
            seq=seq,
        )
    return dict(out) if type(out) is _Document else out


class _Document(dict[str, Any]):
    """The document a caster is given: a dict that notes the last key looked up in it
    and not found (``doc[k]``, ``doc.pop(k)``, ``del doc[k]``), so that a caster's
    KeyError names a missing field, and never a key that may be data."""

    __slots__ = ("missing",)

    def __init__(self, doc: dict[str, Any]) -> None:
        super().__init__(doc)
        self.missing: object = None

    def __missing__(self, key: object) -> Any:
        self.missing = key
        raise KeyError(key)

    def pop(self, key: Any, *default: Any) -> Any:
        if not default and key not in self:
            self.missing = key
        return super().pop(key, *default)

    def __delitem__(self, key: Any) -> None:
        if key not in self:
            self.missing = key
        super().__delitem__(key)


def _cast_event(
    schema: ModelSchema[Any],
    fn: EventCaster,
    event_type: str,
    info: dict[str, Any],
    version: int,
    event: Any,
) -> tuple[str, dict[str, Any]]:
    """One event upcaster step, its failures typed."""
    agent_id, seq = getattr(event, "agent_id", None), getattr(event, "seq", None)
    try:
        out = fn(event_type, copy.deepcopy(info))
    except Exception as exc:
        raise UpcasterFailed(
            schema.name, version, version + 1,
            f"{type(exc).__name__} in the event upcaster of {event_type!r}",
            agent_id=agent_id, seq=seq,
        ) from exc  # fmt: skip
    if not (
        isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], str)
        and isinstance(out[1], dict)
    ):  # fmt: skip
        raise UpcasterFailed(
            schema.name, version, version + 1,
            f"the event upcaster of {event_type!r} did not return (type, dict)",
            agent_id=agent_id, seq=seq,
        )  # fmt: skip
    return out


def _check_fn(fn: object) -> None:
    if not callable(fn):
        raise InvalidArgument("fn", f"a caster must be callable, not {type(fn).__name__}")


def _check_step(
    schema: ModelSchema[Any],
    version: object,
    name: str,
    *,
    lower: int = 1,
    upper: int | None = None,
) -> None:
    if type(version) is not int or version < lower or (upper is not None and version > upper):
        top = schema.version if upper is None else upper
        raise InvalidArgument(
            name,
            f"{name} of {schema.name} must be an int in {lower}..{top} "
            f"(its current version is {schema.version}), not {version!r}",
        )


def _names(renames: Mapping[str, str], argument: str) -> dict[str, str]:
    if not isinstance(renames, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) and k and v for k, v in renames.items()
    ):
        raise InvalidArgument(argument, f"{argument} must map old names to new names (strings)")
    return dict(renames)


class SchemaRegistry:
    """The state models of one application, by class and by stored name."""

    def __init__(self) -> None:
        self._by_model: dict[Any, ModelSchema[Any]] = {}
        self._by_name: dict[str, ModelSchema[Any]] = {}

    def register(
        self,
        model: type[M],
        *,
        version: int = 1,
        name: str | None = None,
        aliases: tuple[str, ...] = (),
    ) -> ModelSchema[M]:
        """Register ``model`` at schema ``version`` under ``name`` (default: its module
        and qualified name; give a stable name so that moving the class keeps its stored
        states). ``aliases``: names its states were stored under before."""
        if type(version) is not int or version < 1:
            raise InvalidArgument("version", f"version must be an int >= 1, not {version!r}")
        if name is not None:
            check_name(name, "name")
        adapter = ModelAdapter(model, name)
        for alias in aliases:
            check_name(alias, "aliases[]")
        schema = ModelSchema(model, adapter.name, version, adapter, frozenset(aliases))
        for stored in schema.names():
            other = self._by_name.get(stored)
            if other is not None and other.model is not model:
                raise InvalidArgument(
                    "name", f"the name {stored!r} is registered already, for another model"
                )
        old = self._by_model.get(model)
        if old is not None:  # re-registering: keep what was registered for it
            for stored in old.names():
                self._by_name.pop(stored, None)
        self._by_model[model] = schema
        for stored in schema.names():
            self._by_name[stored] = schema
        return schema

    @overload
    def get(self, model: type[M]) -> ModelSchema[M]: ...
    @overload
    def get(self, model: str) -> ModelSchema[Any]: ...
    def get(self, model: type[M] | str) -> ModelSchema[Any]:
        """The schema of a model class or stored name (InvalidArgument if unknown)."""
        found = self._by_name.get(model) if isinstance(model, str) else self._by_model.get(model)
        if found is None:
            label = model if isinstance(model, str) else getattr(model, "__qualname__", model)
            raise InvalidArgument("model", f"model {label!r} is not registered")
        return found

    def find(self, model: Any) -> ModelSchema[Any] | None:
        """The schema of a model class or stored name, or None."""
        if isinstance(model, str):
            return self._by_name.get(model)
        return self._by_model.get(model)

    def __iter__(self) -> Iterator[ModelSchema[Any]]:
        return iter(list(self._by_model.values()))

    def __len__(self) -> int:
        return len(self._by_model)

    def __contains__(self, model: object) -> bool:
        return self.find(model) is not None


#: the default registry (used when no other is given)
registry = SchemaRegistry()


def register(
    model: type[M] | None = None,
    *,
    version: int = 1,
    name: str | None = None,
    aliases: tuple[str, ...] = (),
    into: SchemaRegistry | None = None,
) -> Any:
    """Register a model in the default registry (or ``into``); usable as a decorator
    (``@register(version=2, name="support-agent")``) or a call (returns the schema)."""
    target = into if into is not None else registry
    if model is not None:
        return target.register(model, version=version, name=name, aliases=aliases)

    def decorate(cls: type[M]) -> type[M]:
        target.register(cls, version=version, name=name, aliases=aliases)
        return cls

    return decorate


def schema_of(
    model: type[M] | ModelSchema[M], registry_: SchemaRegistry | None = None
) -> ModelSchema[M]:
    """The schema of ``model``: a :class:`ModelSchema` as is; a class registered in
    ``registry_`` (default: the default registry); else a schema at version 1 built for
    it (not registered)."""
    if isinstance(model, ModelSchema):
        return model
    found = (registry_ if registry_ is not None else registry).find(model)
    if found is not None:
        return found
    adapter = ModelAdapter(model)
    return ModelSchema(model, adapter.name, 1, adapter)


def upcaster(model: type[Any], from_version: int) -> Callable[[Caster], Caster]:
    """Decorator: an upcaster of a model of the default registry (see
    :meth:`ModelSchema.upcaster`)."""
    return registry.get(model).upcaster(from_version)


def downcaster(model: type[Any], from_version: int) -> Callable[[Caster], Caster]:
    """Decorator: a downcaster of a model of the default registry."""
    return registry.get(model).downcaster(from_version)
