"""What inserting a value into a tracked ``agent.data`` checks (see :mod:`.tracked`):
whether it is a plain container the caller may still hold (compared at every save),
or a value the tracker cannot follow (the agent falls back to the full compare) — and
that it is not nested deeper than Python can walk (``SerializationError``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..codec.serializer import format_path
from ..errors import SerializationError

if TYPE_CHECKING:
    from .tracker import Tracker

__all__ = ["SCALARS", "foreign", "give_up", "too_deep"]

SCALARS = frozenset({str, int, float, bool, type(None)})


def too_deep(container: Any, key: Any) -> SerializationError:
    """What inserting a value nested deeper than Python can walk (:func:`foreign`
    raised ``RecursionError``) at ``key`` of the tracked ``container`` raises, naming
    where (``data.messages[3]``); the document is left as it was."""
    parts = [key]
    node = container
    while node._parent is not None:
        parts.append(node._key)
        node = node._parent
    path = format_path("data", [p if type(p) is int else str(p) for p in reversed(parts)])
    return SerializationError("cannot serialize: the value is nested too deeply", path)


def foreign(value: Any, tracker: Tracker | None) -> bool:
    """Whether ``value`` (being inserted) is a plain container; a value the tracker
    cannot follow (see :mod:`.tracked`) switches it to the full compare."""
    t = type(value)
    if t in SCALARS:
        return False
    if t is dict:
        for k, v in dict.items(value):
            if type(k) is not str:
                give_up(tracker)
            foreign(v, tracker)
        return True
    if t is list:
        for v in list.__iter__(value):
            foreign(v, tracker)
        return True
    give_up(tracker)
    return t is dict or t is list


def give_up(tracker: Tracker | None) -> None:
    """Switch the agent to the full compare (until it is loaded again)."""
    if tracker is not None:
        tracker.full = True
