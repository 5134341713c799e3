"""What proving "the old history is unchanged" costs a steady save, by each way of proving
it (issue 11, "perf-steady" in docs/benchmarks.md).

``StateStore.save(agent_id, dict)`` gets the caller's own plain dict: nothing records
what the caller changed, so a save proves it. Today (``store/flat.py``) it packs the
whole message list in strict-types msgpack (C, ``ormsgpack``) and checks that the
cached bytes start the new ones: O(history) bytes. The candidates for O(change):

- ``pack``: today's proof (pack + the prefix comparison of the bytes);
- ``identity``: exact for a list of flat dicts of immutable scalars (``str``, ``int``,
  ``float``, ``bool``, ``None``), the chat shape: the old items are the same objects
  as at the last save, each with the same number of keys, and every key and value is
  the very object seen then (the proof holds references to them, so no identity is
  reused; an in-place edit puts another object in place). Written with C builtins
  (``map``, ``operator.is_``, ``itertools.chain``): no Python loop per item;
- ``equality`` (not exact, for reference): the old items ``==`` shallow copies kept
  at the last save: ``True == 1``, ``0.0 == -0.0``, a ``StrEnum`` member equals its
  value, an object may say it equals anything;
- ``items-only`` (not exact, for reference): the old items are the same objects (an
  item edited in place is the same object).

Each is timed with ``timeit`` (the best of ``--repeat`` runs of ``--number`` calls, so
the load of other processes mostly falls out of it; ratios to ``pack`` of the same
run)::

    PYTHONPATH=src .venv/bin/python benchmarks/bench_change_proofs.py
"""

from __future__ import annotations

import argparse
import sys
import timeit
from collections.abc import Callable
from itertools import chain
from operator import is_
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import table
from statekeeper.bench.workload import make_messages
from statekeeper.store.change import fast_packer

CASES = [(15, 300), (300, 300), (3000, 300), (15, 4000), (300, 4000)]


def proofs(messages: list[dict[str, Any]]) -> dict[str, Callable[[], bool]]:
    """The proofs that ``messages[:-1]`` (saved last time) starts ``messages``."""
    found = fast_packer()
    assert found is not None, "ormsgpack is a core dependency"
    packb, strict = found
    old = messages[:-1]
    before = packb(old, None, strict)
    head = 3 if before[0] == 0xDC else 5 if before[0] == 0xDD else 1
    new = list(messages)  # the caller's list this save (same items, one appended)
    objs = list(old)
    lens = list(map(len, objs))
    keys = list(chain.from_iterable(objs))
    values = list(chain.from_iterable(map(dict.values, objs)))
    copies = [dict(m) for m in objs]
    n = len(objs)

    def pack() -> bool:
        after = packb(new, None, strict)
        return after.startswith(memoryview(before)[head:], 3 if after[0] == 0xDC else 1)

    def identity() -> bool:
        return (
            len(new) >= n
            and all(map(is_, new, objs))
            and list(map(len, objs)) == lens
            and all(map(is_, chain.from_iterable(objs), keys))
            and all(map(is_, chain.from_iterable(map(dict.values, objs)), values))
        )

    def equality() -> bool:
        return new[:n] == copies

    def items_only() -> bool:
        return all(map(is_, new, objs))

    return {"pack": pack, "identity": identity, "equality": equality, "items-only": items_only}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--number", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    rows = []
    for count, chars in CASES:
        messages = make_messages(count + 1, seed=1, chars=chars)
        timings = {}
        for name, proof in proofs(messages).items():
            assert proof(), name
            best = min(timeit.repeat(proof, number=args.number, repeat=args.repeat))
            timings[name] = best / args.number * 1e6
        base = timings["pack"]
        rows.append(
            [
                f"{count} x {chars}",
                *(f"{us:,.2f} ({us / base:.2f}x)" for us in timings.values()),
            ]
        )
    print("us per proof, best of runs (ratio to pack)")
    print(table(["old history", "pack", "identity", "equality", "items-only"], rows))


if __name__ == "__main__":
    main()
