"""Change detection for :meth:`StateStore.save` in one serialization pass.

:func:`statekeeper.patch.diff` proves that a grown message list still starts with the
old one by comparing the whole history, twice over (Python equality, then the JSON
bytes of both sides to tell ``True`` from ``1``). The store can do better: it keeps,
with the cached state, the JSON bytes of each top-level value of the document the
caller saved last (``AgentRecord.dumped``). A save serializes each new top-level
value once (orjson, in C) and compares bytes:

- equal bytes: the value is unchanged (no op);
- the old bytes of a list, less their ``]``, followed by ``,`` start the new bytes:
  the list grew at the end (one ``add …/-`` op per new item);
- anything else: that one value is diffed by :func:`statekeeper.patch.diff`.

The ops are exactly those :func:`statekeeper.patch.diff` returns for the same
documents (tested on random histories); the bytes only replace the proofs. A document
that orjson cannot serialize as JSON (non-string keys, huge ints) takes the plain
diff, and so does the first save after the cached state was folded from storage.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from .. import patch

__all__ = ["diff_by_key"]

Op = dict[str, Any]
_dumps = orjson.dumps


def dump_keys(document: Mapping[str, Any]) -> dict[str, bytes] | None:
    """The JSON bytes of each top-level value, or None when one is not plain JSON."""
    try:
        return {key: _dumps(value) for key, value in document.items()}
    except (TypeError, orjson.JSONEncodeError):
        return None


def diff_by_key(
    old: Any, new: Mapping[str, Any], cached: dict[str, bytes] | None
) -> tuple[list[Op], dict[str, bytes] | None]:
    """The ops that turn ``old`` into ``new`` (as :func:`statekeeper.patch.diff`),
    and the bytes of ``new``'s top-level values to cache for the next save.

    ``cached`` must be the bytes :func:`diff_by_key` returned for a document equal,
    as JSON, to ``old`` (None: nothing cached)."""
    dumped = dump_keys(new) if type(new) is dict and type(old) is dict else None
    if dumped is None or cached is None:
        return patch.diff(old, new), dumped
    ops: list[Op] = []
    for key, oval in old.items():
        path = "/" + patch.escape(key)
        if key not in new:
            ops.append({"op": "remove", "path": path})
            continue
        nval = new[key]
        before, after = cached.get(key), dumped[key]
        if before is not None:
            if before == after:
                continue
            if type(oval) is list and type(nval) is list and _grew(before, after):
                for item in nval[len(oval) :]:
                    ops.append({"op": "add", "path": path + "/-", "value": item})
                continue
        ops.extend(patch.diff(oval, nval, path))
    for key, nval in new.items():
        if key not in old:
            ops.append({"op": "add", "path": "/" + patch.escape(key), "value": nval})
    return ops, dumped


def _grew(before: bytes, after: bytes) -> bool:
    """``after`` is the JSON array ``before`` with items appended."""
    if before == b"[]":
        return after[:1] == b"["
    n = len(before) - 1
    return after[n : n + 1] == b"," and after.startswith(before[:n])
