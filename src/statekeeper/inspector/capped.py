"""What a page renders of a large document: a copy cut to a budget of characters.

An agent's state has no size bound a page can afford (a 5 MB state rendered as a tree
was 5.5 MB of HTML): :func:`capped` keeps the document's shape, depth first, until the
text it would show reaches :data:`STATE_BUDGET` characters; a container cut short is a
:class:`CappedDict` / :class:`CappedList` that knows how many entries it had and how
many are not shown. The page says so and links to the whole state as JSON
(``/agent/state.json``). :func:`capped_rows` does the same for a list of changes.
"""

from __future__ import annotations

from typing import Any, TypeVar

from .changes import pretty

__all__ = [
    "CHANGES_BUDGET",
    "LEAF_LIMIT",
    "STATE_BUDGET",
    "Capped",
    "CappedDict",
    "CappedList",
    "capped",
    "capped_rows",
]

#: characters of values one state view shows at most (the rest: the JSON download)
STATE_BUDGET = 256 * 1024
#: characters of one value shown at most (as before: cut with "…")
LEAF_LIMIT = 2000
#: the characters a container's markup costs (its summary line), for the budget
_NODE = 64
#: rows of changes (an event's patch, a diff) one fragment shows at most
CHANGES_BUDGET = 500

T = TypeVar("T")


class CappedDict(dict[str, Any]):
    """A mapping cut short: ``total`` entries, ``omitted`` of them not shown."""

    total: int
    omitted: int


class CappedList(list[Any]):
    """A list cut short: ``total`` items, ``omitted`` of them not shown."""

    total: int
    omitted: int


Capped = CappedDict | CappedList


class _Budget:
    def __init__(self, chars: int) -> None:
        self.left = chars
        #: entries left out, over the whole document
        self.omitted = 0


def capped(value: Any, budget: int = STATE_BUDGET) -> tuple[Any, int]:
    """``(value cut to about budget characters of shown text, entries left out)``: the
    value itself when all of it fits."""
    state = _Budget(budget)
    out = _cut(value, state)
    return out, state.omitted


def _cut(value: Any, budget: _Budget) -> Any:
    if isinstance(value, dict):
        budget.left -= _NODE
        items = list(value.items())
        kept: dict[str, Any] = {}
        for key, item in items:
            if budget.left <= 0:
                break
            budget.left -= len(str(key))
            kept[key] = _cut(item, budget)
        if len(kept) == len(items):
            return kept
        cut = CappedDict(kept)
        cut.total, cut.omitted = len(items), len(items) - len(kept)
        budget.omitted += cut.omitted
        return cut
    if isinstance(value, list | tuple):
        budget.left -= _NODE
        shown: list[Any] = []
        for item in value:
            if budget.left <= 0:
                break
            shown.append(_cut(item, budget))
        if len(shown) == len(value):
            return shown
        cut_list = CappedList(shown)
        cut_list.total, cut_list.omitted = len(value), len(value) - len(shown)
        budget.omitted += cut_list.omitted
        return cut_list
    budget.left -= min(len(pretty(value, LEAF_LIMIT)), LEAF_LIMIT) + _NODE // 2
    return value


def capped_rows(rows: list[T], most: int = CHANGES_BUDGET) -> tuple[list[T], int]:
    """``(the first most rows, how many are left out)``."""
    return rows[:most], max(0, len(rows) - most)
