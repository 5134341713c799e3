"""State models: one adapter for pydantic v2 models, dataclasses and TypedDicts.

:class:`ModelAdapter` turns a typed state into the JSON document the store keeps and
back, validating both ways with pydantic (a ``TypeAdapter`` handles all three kinds).
Errors name the field and never echo the value (it may be a secret).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Generic, TypeVar, cast

import pydantic
from typing_extensions import is_typeddict

from ..errors import InvalidArgument, ValidationError

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

    __slots__ = ("_adapter", "kind", "model", "name")

    def __init__(self, model: type[M], name: str | None = None) -> None:
        self.kind = model_kind(model)
        self.model = model
        self.name = name or f"{model.__module__}.{model.__qualname__}"
        try:
            self._adapter: pydantic.TypeAdapter[M] = pydantic.TypeAdapter(model)
        except pydantic.PydanticUserError as exc:
            reason = str(exc).split("\n", 1)[0]
            raise InvalidArgument("model", f"model {self.name} cannot be used: {reason}") from None

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

    def dump(self, value: M, agent_id: str | None = None) -> dict[str, Any]:
        """The JSON document of ``value``, validated first (a model mutated into an
        invalid state is refused with :class:`~statekeeper.errors.ValidationError`)."""
        self._check_type(value)
        try:
            doc = self._adapter.dump_python(value, mode="json", warnings=False)
            # validate the document itself: what is stored must load back as the model
            self._adapter.validate_python(doc)
        except pydantic.ValidationError as exc:
            raise ValidationError(self.name, field_errors(exc), agent_id) from None
        except (TypeError, ValueError) as exc:  # not serialisable at all
            raise ValidationError(self.name, [("", _reason(exc))], agent_id) from None
        if not isinstance(doc, dict):  # pragma: no cover - the kinds above dump objects
            raise ValidationError(self.name, [("", "does not serialise to an object")], agent_id)
        return cast(dict[str, Any], doc)

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


def _reason(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]
