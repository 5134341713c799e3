"""What changed in a tracked ``agent.data`` since its last write, as JSON Patch ops.

The containers (:mod:`.tracked`) record what their methods did; a :class:`Tracker`
turns those records into ops at a save and clears them once the write is stored.
"""

from __future__ import annotations

import marshal
from typing import Any

from .. import patch
from .tracked import TrackedDict, TrackedList, Untrackable, _json_copy, _wrap_dict

__all__ = ["Tracker"]

Op = dict[str, Any]
_get_d = dict.__getitem__
_get_l = list.__getitem__


class Tracker:
    """What changed in one agent's tracked document since its last write."""

    __slots__ = ("committed", "full", "gen", "root", "touched")

    def __init__(self, data: dict[str, Any], committed: dict[str, Any]) -> None:
        #: a private plain copy of the document as written last
        self.committed = committed
        #: True: compare the whole document at every save (see the module doc)
        self.full = False
        #: bumped by every mutation (a write in flight checks it)
        self.gen = 0
        #: containers with a record (id -> container)
        self.touched: dict[int, TrackedDict | TrackedList] = {}
        self.root = _wrap_dict(data, self, None, None)

    # -- a save: the ops ------------------------------------------------------------

    def changes(self) -> list[Op] | None:
        """The ops for what changed since the last write; None: compare in full."""
        if self.full:
            return None
        try:
            return self._changes()
        except Untrackable:  # a foreign container was given a value of another type
            self.full = True
            return None

    def _changes(self) -> list[Op] | None:
        entries = []
        for c in self.touched.values():
            path = _path(c, self.root)
            if path is not None:  # (not attached: its old place has a record of it)
                entries.append((path, c))
        entries.sort(key=lambda e: len(e[0]))
        covered: set[tuple[Any, ...]] = set()
        ops: list[Op] = []
        for path, c in entries:
            if any(path[:i] in covered for i in range(len(path) + 1)):
                continue
            try:
                old: Any = self.committed
                for key in path:
                    old = old[key]
            except (KeyError, IndexError, TypeError):  # pragma: no cover - defensive
                return None
            pointer = "".join("/" + patch.escape(str(k)) for k in path)
            if isinstance(c, TrackedDict):
                if type(old) is not dict:  # pragma: no cover - defensive
                    return None
                if c._whole:
                    ops += patch.diff(old, _json_copy(c), pointer)
                    covered.add(path)
                    continue
                dirty = c._dirty
                todo = dirty | c._foreign
                if c._foreign:
                    idle = [k for k in c._foreign - dirty if k in old and dict.__contains__(c, k)]
                    if idle and _same([old[k] for k in idle], [_get_d(c, k) for k in idle]):
                        todo -= set(idle)  # (all unchanged: one compare for them all)
                # a key deleted and set again, or keys added, may leave the keys in
                # another order than the ops would (the adds at the end, in the dict's
                # order): those out of place are removed and added again (patch.diff's
                # ops for it); only a dict with a key written or deleted is looked at
                moved = patch.moved_keys(old, c) if dirty else None
                added: list[str] = []
                for key in todo:
                    if (
                        key not in dirty
                        and key in old
                        and dict.__contains__(c, key)
                        and _same(old[key], _get_d(c, key))  # a foreign one, unchanged
                    ):
                        covered.add((*path, key))
                        continue
                    if moved and key in moved:
                        continue
                    here = pointer + "/" + patch.escape(key)
                    if dict.__contains__(c, key):
                        if key in old:
                            ops += patch.diff(old[key], _json_copy(_get_d(c, key)), here)
                        else:
                            added.append(key)
                            continue
                    elif key in old:
                        ops.append({"op": "remove", "path": here})
                    covered.add((*path, key))
                if len(added) > 1:  # (``todo`` is a set: added in the dict's order)
                    added = [key for key in c if key in added]
                for key in (*added, *moved) if moved else added:
                    here = pointer + "/" + patch.escape(key)
                    if moved and key in moved and key in old:
                        ops.append({"op": "remove", "path": here})
                    value = _json_copy(_get_d(c, key))
                    ops.append({"op": "add", "path": here, "value": value})
                    covered.add((*path, key))
            else:
                if type(old) is not list:  # pragma: no cover - defensive
                    return None
                n, base = list.__len__(c), c._base
                if c._whole or n < base or len(old) != base:
                    ops += patch.diff(old, _json_copy(c), pointer)
                    covered.add(path)
                    continue
                changed = c._dirty
                rows = changed | c._foreign
                if c._foreign:
                    kept = [i for i in c._foreign - changed if i < base]
                    if kept and _same([old[i] for i in kept], [_get_l(c, i) for i in kept]):
                        rows -= set(kept)  # (all unchanged: one compare for them all)
                for i in sorted(rows):
                    if i < base:
                        if i not in changed and _same(old[i], _get_l(c, i)):  # foreign, unchanged
                            covered.add((*path, i))
                            continue
                        ops += patch.diff(old[i], _json_copy(_get_l(c, i)), f"{pointer}/{i}")
                        covered.add((*path, i))
                for i in range(base, n):
                    item = _json_copy(_get_l(c, i))
                    ops.append({"op": "add", "path": pointer + "/-", "value": item})
                    covered.add((*path, i))
        return ops

    # -- after the write ------------------------------------------------------------

    def commit(self, ops: list[Op], gen: int) -> None:
        """``ops`` (made when :attr:`gen` was ``gen``) were written: apply them to the
        committed copy, clear the records, adopt the foreign containers now owned."""
        try:
            self.committed = patch.apply(self.committed, ops, in_place=True)
        except Exception:  # pragma: no cover - the ops came from this copy
            self.full = True
            return
        if self.full:
            return
        moved = gen != self.gen  # changed while the write was in flight
        for key, c in list(self.touched.items()):
            if moved:  # its record mixes written and unwritten changes: diff it whole
                c._whole = True
                if isinstance(c, TrackedList):
                    c._base = list.__len__(c)
                continue
            c._reset()
            if not c._foreign:
                del self.touched[key]
            else:
                c._adopt()


def _same(old: Any, value: Any) -> bool:
    """Whether ``value`` (a foreign container: the caller may hold it and change it
    without the tracker seeing) is still exactly ``old`` (its copy as written last).

    A foreign container is compared at every save; :func:`marshal.dumps` does it in C
    (measured: appending one message per save to a history whose messages the caller
    also holds ran one :func:`patch.diff` and one :func:`._json_copy` per message of
    the history, ~4x the instructions of the store's own work; see docs/benchmarks.md,
    "The common save in one call"). Equal bytes mean the same JSON: marshal tells
    ``True``, ``1`` and ``1.0`` apart, writes a dict's keys in order, and refuses
    (ValueError) every type it has no exact code for (subclasses included), and
    ``old`` holds plain JSON only. Version 2: no back-references (their flags follow
    reference counts). Any doubt (bytes differ, a string interned on one side only,
    keys reordered, an unmarshallable value) is False: the caller diffs, as before."""
    try:
        return marshal.dumps(old, 2) == marshal.dumps(value, 2)
    except ValueError:
        return False


def _path(c: TrackedDict | TrackedList, root: TrackedDict) -> tuple[Any, ...] | None:
    """Where ``c`` sits in the document, or None when it is not there any more."""
    keys = []
    while c is not root:
        parent, key = c._parent, c._key
        if parent is None:
            return None
        try:
            here = _get_d(parent, key) if isinstance(parent, TrackedDict) else _get_l(parent, key)
        except (KeyError, IndexError):
            return None
        if here is not c:
            return None
        keys.append(key)
        c = parent
    keys.reverse()
    return tuple(keys)
