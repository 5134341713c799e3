"""State models: one adapter for pydantic v2 models, dataclasses and TypedDicts.

:class:`ModelAdapter` turns a typed state into the JSON document the store keeps and
back, validating both ways with pydantic (a ``TypeAdapter`` handles all three kinds).
Errors name the field and never echo the value (it may be a secret).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import Annotated, Any, Generic, TypeVar, cast, get_args, get_origin

import pydantic
from typing_extensions import is_typeddict

from ..errors import InvalidArgument, UndeclaredKeysDropped, ValidationError
from .carry import Carrier, Known, carries, known_items

__all__ = ["MODEL_KEY", "ModelAdapter", "field_errors", "model_kind"]

M = TypeVar("M")

#: the key of a typed agent's stored document that names its model
MODEL_KEY = "$model"


def model_kind(model: object) -> str:
    """``"pydantic"``, ``"dataclass"`` or ``"typeddict"``; InvalidArgument otherwise."""
    if isinstance(model, type) and issubclass(model, pydantic.BaseModel):
        return "pydantic"
    if isinstance(model, type) and dataclasses.is_dataclass(model):
        return "dataclass"
    if is_typeddict(model):
        return "typeddict"
    raise InvalidArgument(
        "model",
        "model must be a pydantic v2 model, a dataclass or a TypedDict class, "
        f"not {getattr(model, '__name__', type(model).__name__)}",
    )


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def field_errors(exc: pydantic.ValidationError) -> list[tuple[str, str]]:
    """``(field path, problem)`` for each error of ``exc``, without the input values."""
    return [(_path(tuple(e["loc"])), str(e["msg"])) for e in exc.errors(include_input=False)]


class ModelAdapter(Generic[M]):
    """Validate and serialise states of ``model`` (pydantic model, dataclass, TypedDict)."""

    __slots__ = ("_adapter", "_checks", "carries", "declared", "kind", "model", "name")

    def __init__(self, model: type[M], name: str | None = None) -> None:
        self.kind = model_kind(model)
        self.model = model
        self.name = name or f"{model.__module__}.{model.__qualname__}"
        try:
            self._adapter: pydantic.TypeAdapter[M] = pydantic.TypeAdapter(model)
        except pydantic.PydanticUserError as exc:
            reason = str(exc).split("\n", 1)[0]
            raise InvalidArgument("model", f"model {self.name} cannot be used: {reason}") from None
        self._checks = _FieldChecks.of(model) if self.kind == "pydantic" else None
        #: the top-level keys the model declares, when validation ignores (drops) the
        #: others; None when it keeps them (``extra="allow"``) or refuses them
        #: (``extra="forbid"``): then there is nothing to carry (see :meth:`undeclared`)
        self.declared: frozenset[str] | None = _declared(model, self.kind)
        #: whether some position of the model, at any depth, drops undeclared keys:
        #: False when none does (every model in it keeps or refuses them itself), and
        #: then a typed write has nothing to carry (:meth:`keep`) and reads nothing
        self.carries: bool = carries(model)

    def _check_type(self, value: object) -> None:
        if self.kind == "typeddict":
            ok = isinstance(value, Mapping)
        else:
            ok = isinstance(value, self.model)
        if not ok:
            raise InvalidArgument(
                "state",
                f"state must be a {self.model.__qualname__}, not {type(value).__name__}",
            )

    def dump(
        self,
        value: M,
        agent_id: str | None = None,
        *,
        baseline: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The JSON document of ``value``, validated first (a model mutated into an
        invalid state is refused with :class:`~statekeeper.errors.ValidationError`).

        ``baseline``: a document of this model validated before (the state as last
        written or loaded). When given, only what differs from it is validated where
        that is equivalent to validating the whole document (see
        :class:`_FieldChecks`): a message appended to a long conversation costs the
        validation of that message, not of the conversation."""
        self._check_type(value)
        try:
            doc = self._adapter.dump_python(value, mode="json", warnings=False)
            # validate the document itself: what is stored must load back as the model
            checks = self._checks
            if checks is None or baseline is None or not checks.validate(doc, baseline):
                self._adapter.validate_python(doc)
        except pydantic.ValidationError as exc:
            raise ValidationError(self.name, field_errors(exc), agent_id) from None
        except (TypeError, ValueError) as exc:  # not serialisable at all
            raise ValidationError(self.name, [("", _reason(exc))], agent_id) from None
        if not isinstance(doc, dict):  # pragma: no cover - the kinds above dump objects
            raise ValidationError(self.name, [("", "does not serialise to an object")], agent_id)
        return cast(dict[str, Any], doc)

    def keep(
        self,
        value: M,
        doc: dict[str, Any],
        stored: Mapping[str, Any] | None,
        agent_id: str | None = None,
        known: Known | None = None,
    ) -> dict[str, Any]:
        """``doc`` (the document of ``value``) with the keys of the stored document
        ``stored`` that the model, or a model nested in it, does not declare — and that
        validating it dropped — put back where they were, at any depth (see
        :mod:`.carry`): a typed write never deletes a stored field the code could not
        see. ``doc`` is not changed (a copy is returned when something is put back).
        Stored list items whose keys cannot be matched to a new item are reported with
        :class:`~statekeeper.errors.UndeclaredKeysDropped` (a warning). ``known``: the
        list items of the state ``stored`` was loaded into or written from
        (:meth:`known`), matched by identity first."""
        if not self.carries or not stored:
            return doc
        carrier = Carrier(known)
        out = carrier.merge(self.model, value, doc, stored)
        if carrier.dropped:
            warnings.warn(UndeclaredKeysDropped(agent_id, self.name, carrier.dropped), stacklevel=3)
        return cast(dict[str, Any], out)

    def known(self, value: M, doc: Mapping[str, Any], stored: Mapping[str, Any] | None) -> Known:
        """The list items of ``value`` (dumped as ``doc``; loaded from or just written as
        ``stored``) that hold undeclared keys, by identity (:func:`.carry.known_items`)."""
        if not self.carries or not stored:
            return {}
        return known_items(self.model, value, doc, stored)

    def dump_validated(self, value: M) -> dict[str, Any]:
        """The JSON document of ``value``, an instance this adapter has just built by
        :meth:`validate` (so not validated again: its document loads back as is)."""
        return cast(dict[str, Any], self._adapter.dump_python(value, mode="json", warnings=False))

    def validate(self, doc: Mapping[str, Any]) -> M:
        """``doc`` as a model instance (pydantic's ``ValidationError`` on a mismatch)."""
        if MODEL_KEY in doc:
            doc = {k: v for k, v in doc.items() if k != MODEL_KEY}
        return self._adapter.validate_python(doc)

    def check(self, value: M, agent_id: str | None = None) -> M:
        """Validate a state given by a caller (typed ValidationError on a mismatch)."""
        self._check_type(value)
        try:
            return self._adapter.validate_python(
                self._adapter.dump_python(value, mode="json", warnings=False)
            )
        except pydantic.ValidationError as exc:
            raise ValidationError(self.name, field_errors(exc), agent_id) from None

    def default(self) -> M | None:
        """An instance built from defaults only, or None when a field has no default."""
        try:
            return self._adapter.validate_python({})
        except pydantic.ValidationError:
            return None


def _declared(model: Any, kind: str) -> frozenset[str] | None:
    """See :attr:`ModelAdapter.declared`."""
    if kind == "pydantic":
        if model.model_config.get("extra") in ("allow", "forbid"):
            return None
        names: set[str] = set()
        for name, info in model.model_fields.items():
            names.add(name)
            for alias in (info.alias, info.validation_alias):
                if isinstance(alias, str):
                    names.add(alias)
                elif alias is not None:  # AliasChoices / AliasPath: their first keys
                    for choice in getattr(alias, "choices", [alias]):
                        path = getattr(choice, "path", [choice])
                        if path and isinstance(path[0], str):
                            names.add(path[0])
        return frozenset(names)
    config = getattr(model, "__pydantic_config__", None) or {}
    if config.get("extra") in ("allow", "forbid"):
        return None
    if kind == "dataclass":
        return frozenset(f.name for f in dataclasses.fields(model))
    return frozenset(model.__required_keys__ | model.__optional_keys__)


def _reason(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]


class _FieldChecks:
    """Validation of what changed in a pydantic model's document, field by field.

    Used only where it is equivalent to validating the whole document: the model has
    no validators of its own (no field, model or root validator: nothing that looks
    at several fields together) and every key of the documents is a field. Then a
    document whose fields each equal a validated document's, or pass their field's
    validation, is valid as a whole. A list field that only grew (the old items are
    a prefix of the new ones) validates its new items only.
    """

    __slots__ = ("_fields", "_items", "_model")

    def __init__(self, model: type[pydantic.BaseModel]) -> None:
        self._model = model
        self._fields: dict[str, pydantic.TypeAdapter[Any]] = {}
        self._items: dict[str, pydantic.TypeAdapter[Any] | None] = {}

    @classmethod
    def of(cls, model: type[Any]) -> _FieldChecks | None:
        decorators = model.__pydantic_decorators__
        if (
            decorators.validators
            or decorators.field_validators
            or decorators.root_validators
            or decorators.model_validators
            or model.model_config.get("extra") == "allow"
        ):
            return None
        return cls(model)

    def _config(self) -> pydantic.ConfigDict:
        # the model's whole config (strict, str_max_length, ...): a field's value is
        # then validated as it is inside the model
        return pydantic.ConfigDict(**self._model.model_config)

    def _adapter(self, tp: Any) -> pydantic.TypeAdapter[Any]:
        if (
            isinstance(tp, type)
            and (issubclass(tp, pydantic.BaseModel) or dataclasses.is_dataclass(tp))
        ) or is_typeddict(tp):
            return pydantic.TypeAdapter(tp)  # its own config applies (pydantic refuses another)
        return pydantic.TypeAdapter(tp, config=self._config())

    def _field(self, name: str) -> pydantic.TypeAdapter[Any]:
        adapter = self._fields.get(name)
        if adapter is None:
            info = self._model.model_fields[name]
            tp: Any = info.annotation
            if info.metadata:
                tp = Annotated[(tp, *info.metadata)]
            adapter = self._fields[name] = self._adapter(tp)
        return adapter

    def _item(self, name: str) -> pydantic.TypeAdapter[Any] | None:
        if name not in self._items:
            info = self._model.model_fields[name]
            tp = info.annotation
            args = get_args(tp)
            plain_list = get_origin(tp) is list and len(args) == 1 and not info.metadata
            self._items[name] = self._adapter(args[0]) if plain_list else None
        return self._items[name]

    def validate(self, doc: Mapping[str, Any], baseline: Mapping[str, Any]) -> bool:
        """Validate the fields of ``doc`` that differ from ``baseline``. True when they
        are valid; False when one is not (the caller validates the whole document, for
        errors located in it) or when this cannot stand in for a whole validation."""
        fields = self._model.model_fields
        old_keys = {k for k in baseline if k != MODEL_KEY}
        if old_keys != set(doc) or not old_keys <= fields.keys():
            return False
        try:
            for name, new in doc.items():
                old = baseline[name]
                if new == old:
                    continue
                item = self._item(name)
                if (
                    item is not None
                    and type(new) is list
                    and type(old) is list
                    and len(new) > len(old)
                    and new[: len(old)] == old
                ):
                    for value in new[len(old) :]:
                        item.validate_python(value)
                else:
                    self._field(name).validate_python(new)
        except pydantic.ValidationError:
            return False
        return True
