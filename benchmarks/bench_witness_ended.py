"""What the witness's ``"d"`` (h/witlost: the deletion before an incarnation, kept
with each mark) costs a delete and a cold load on a SQLite store whose witness file is
full (1,024 marks), against the rule before, side by side in one process: alternate
rounds set the old ``reset_kept`` (no ``"d"``) and strip ``"d"`` from the file, or the
new one (``"d"`` on the marks of an incarnation begun after a deletion the file held:
none here but those of agents deleted and made again). A delete writes the file (merge,
fsync, rename); a load of an agent whose mark holds runs no new code (the proof of a
delete is read only for a mark that does not hold). Prints CPU microseconds (this
process: the SQLite and file work run in its threads) per delete and per cold load, per
round, and the ratios new/old of the paired rounds.

``--merges N --rule old|new`` instead: N merges of one deletion into a full file (1,024
marks), nothing else, for instruction counts::

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        python benchmarks/bench_witness_ended.py --merges 20 --rule new
    (and --merges 0: the difference over 20 is one merge's instructions)"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import _common  # noqa: F401  (puts the measured tree's src/ on the path)
from statekeeper import StateStore
from statekeeper.security import highwater
from statekeeper.security.highwater import _seal
from statekeeper.security.incarnation import reset_kept
from statekeeper.security.witness_file import canonical

NEW = reset_kept


def _old_reset_kept(mark: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
    """``reset_kept`` as on main before h/witlost (the peer): no ``"d"``."""
    if old is None:
        return mark
    if int(old["seq"]) < 1:
        mark["r"] = float(old["t"])
    elif "r" in old and (None in (old.get("c"), mark.get("c")) or old["c"] == mark["c"]):
        mark["r"] = float(old["r"])
    return mark


def _file_as(path: Path, new: bool) -> None:
    """The file as the rule writes it: as it is (new), every ``"d"`` gone (old)."""
    if new:
        return
    doc = json.loads(path.read_text())
    for entry in doc["streams"]:
        entry.pop("d", None)
    doc["seal"]["mac"] = _seal(canonical(doc["streams"]))
    path.write_text(json.dumps(doc, separators=(",", ":")) + "\n")


async def _round(url: str, witness: Path, n: int, new: bool, tag: str) -> tuple[float, float]:
    vars(highwater)["reset_kept"] = NEW if new else _old_reset_kept  # (the merge's)
    ids = [f"{tag}-{i}" for i in range(n)]
    async with StateStore(url, witness=witness, cache_size=0) as store:
        for agent_id in ids:
            await store.save(agent_id, {"n": 1})
        assert store.witness is not None
        await store.witness.flush()
    _file_as(witness, new)
    async with StateStore(url, witness=witness, cache_size=0) as store:
        await store.load(ids[0])  # (opened, its witness read)
        started = time.process_time()
        for agent_id in ids:
            await store.load(agent_id)
        load = (time.process_time() - started) / n * 1e6
        started = time.process_time()
        for agent_id in ids:
            await store.delete(agent_id)
        delete = (time.process_time() - started) / n * 1e6
    return delete, load


async def main(n: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        url, witness = f"sqlite:///{Path(folder) / 'd.db'}", Path(folder) / "w"
        async with StateStore(url, witness=witness) as store:  # a full file: 1,024 marks
            for i in range(1024):
                await store.save(f"fill-{i}", {"n": i})
        results: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        for r in range(rounds):
            for new in (r % 2 == 0, r % 2 != 0):  # (alternating which goes first)
                results[new].append(await _round(url, witness, n, new, f"r{r}{int(new)}"))
        vars(highwater)["reset_kept"] = NEW
    for which, name in ((0, "delete"), (1, "cold load")):
        old = [x[which] for x in results[False]]
        new_ = [x[which] for x in results[True]]
        ratios = [b / a for a, b in zip(old, new_, strict=True)]
        print(
            f"{name}\told median {statistics.median(old):.0f} us CPU\t"
            f"new median {statistics.median(new_):.0f} us CPU\tnew/old median "
            f"{statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})"
        )


def merges(count: int, new: bool) -> None:
    """``count`` merges of a deletion into a full witness file (see module)."""
    from statekeeper.codec import Codec

    vars(highwater)["reset_kept"] = NEW if new else _old_reset_kept  # (the merge's)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "w"
        witness = highwater.HighWater(path, Codec())
        now = time.time()
        for i in range(1024):  # (the marks of 1,024 streams, each begun here)
            witness._dirty[f"fill-{i}"] = (3, bytes(32), now, now - 5)
        witness._merge(dict(witness._dirty))
        witness._dirty.clear()
        _file_as(path, new)
        for i in range(count):
            witness._merge({f"fill-{i}": (0, None, time.time(), None)})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=100, help="agents loaded and deleted per round")
    parser.add_argument("--rounds", type=int, default=6, help="rounds per rule")
    parser.add_argument("--merges", type=int, default=None, help="only merges (see module)")
    parser.add_argument("--rule", choices=["old", "new"], default="new")
    args = parser.parse_args()
    if args.merges is not None:
        merges(args.merges, args.rule == "new")
    else:
        asyncio.run(main(args.n, args.rounds))
