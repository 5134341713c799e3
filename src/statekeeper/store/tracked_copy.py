"""A deep copy of ``agent.data`` (:mod:`.tracked`'s containers) as plain dicts and lists."""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["deep_copy"]


def deep_copy(value: Any, memo: dict[int, Any], tracked_dict: type, tracked_list: type) -> Any:
    """``copy.deepcopy`` of a document as plain dicts and lists (its dicts and lists, and
    the tracked kinds ``tracked_dict`` / ``tracked_list``): a container met twice (an
    alias: the same list at two keys) is copied once and shared in the copy, as
    ``copy.deepcopy`` does for a plain dict (a copy of each place apart made a change
    through one alias of the copy no longer show at the other, and the save stored
    what no plain dict would hold); other values ``copy.deepcopy``'d."""
    t = type(value)
    if t is dict or t is tracked_dict:
        found = memo.get(id(value))
        if found is not None:
            return found
        out: dict[Any, Any] = {}
        memo[id(value)] = out
        for k, v in dict.items(value):
            out[k] = deep_copy(v, memo, tracked_dict, tracked_list)
        return out
    if t is list or t is tracked_list:
        found = memo.get(id(value))
        if found is not None:
            return found
        items: list[Any] = []
        memo[id(value)] = items
        items.extend(deep_copy(v, memo, tracked_dict, tracked_list) for v in list.__iter__(value))
        return items
    return copy.deepcopy(value, memo)
