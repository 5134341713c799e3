"""Which sequential saves are the slow ones, and what they did (issue 11, "tail").

The workload of ``bench_hotpath.py`` section 1 (agents x chat saves, each
``StateStore.save`` interleaved with a ``SqliteSaver.put`` and a bare commit, the
order rotating per operation), with every ``StateStore.save`` tagged by what it did:

* ``first``: the agent's first save (its create);
* ``path``: ``flat`` (committed in the flat save's one call), ``land`` (the flat save
  handed to ``append_next``: the engine declined the inline commit), ``fast``
  (``save_fast``), ``general``;
* ``snap``: the save wrote a snapshot;
* ``hop``: a transaction of the save ran on the writer thread (``_locked``);
* ``ckq`` / ``ckrun``: a WAL checkpoint was queued / ran during the save;
* ``wit``: a witness flush ran during the save.

It prints, per ``synchronous`` mode, the pooled p50/p99 of each side, then the saves
at or above the store's p99 (and the slowest 5 %) counted by what they did — counts,
not times, are what a loaded machine cannot blur. Private names are wrapped; one that
moved is reported as absent.

Run::

    .venv/bin/python benchmarks/bench_save_tail.py              # 2 rounds, as --quick
    .venv/bin/python benchmarks/bench_save_tail.py --rounds 10
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BareCommits, Workload, lg_config, lg_open, lg_plan, percentile
from bench_checkpoint import sk_url
from statekeeper.store.store import StateStore

FLAGS = ("first", "snap", "hop", "ckq", "ckrun", "wit")


class Tags:
    """What the save in progress did (set by the wrappers)."""

    def __init__(self) -> None:
        self.now: dict[str, Any] = {}

    def reset(self) -> None:
        self.now = {"path": "general"}

    def set(self, key: str, value: Any = True) -> None:
        self.now[key] = value


def instrument(store: StateStore, tags: Tags) -> list[str]:
    """Wrap the store's save stages; the names not found (moved)."""
    absent: list[str] = []
    writes = store._writes
    backend: Any = store.backend

    flat = writes.flat
    if flat is None:
        absent.append("_writes.flat")
    else:

        def flat_tagged(agent_id: str, doc: dict[str, Any]) -> Any:
            done = flat(agent_id, doc)
            if done is None:
                return None
            if done.__class__.__name__ == "AppendResult":
                tags.set("path", "flat")
            else:
                tags.set("path", "land")
            return done

        writes.flat = flat_tagged  # type: ignore[assignment]

    save_fast = writes.save_fast

    async def fast_tagged(*a: Any) -> Any:
        done = await save_fast(*a)
        if done is not None and tags.now.get("path") == "general":
            tags.set("path", "fast")
        return done

    writes.save_fast = fast_tagged  # type: ignore[method-assign]

    for name, flag in (("_locked", "hop"), ("_checkpoint", "ckrun"), ("_wrote", None)):
        fn = getattr(backend, name, None)
        if fn is None:
            absent.append(f"backend.{name}")
            continue
        if flag is None:

            def wrote(pages: int, fn: Any = fn) -> None:
                due = backend._checkpoint_due
                fn(pages)
                if backend._checkpoint_due and not due:
                    tags.set("ckq")

            backend._wrote = wrote
        else:

            def tagged(*a: Any, fn: Any = fn, flag: str = flag) -> Any:
                tags.set(flag)
                return fn(*a)

            setattr(backend, name, tagged)

    commit_next = getattr(backend, "commit_next", None)
    if commit_next is not None:

        def commit_tagged(row: Any) -> bool:
            if row[-1] is not None:
                tags.set("snap")
            ok: bool = commit_next(row)
            # (a checkpoint queued by this commit: commit_next writes _wrote out)
            if backend._checkpoint_due:
                tags.set("ckq")
            return ok

        backend.commit_next = commit_tagged
    append_next = getattr(backend, "append_next", None)
    if append_next is not None:

        async def append_tagged(*a: Any) -> Any:
            if len(a) >= 8 and a[7] is not None:
                tags.set("snap")
            return await append_next(*a)

        backend.append_next = append_tagged
    append = backend.append

    async def append_any(requests: Any, *a: Any, **kw: Any) -> Any:
        for r in requests if isinstance(requests, list) else [requests]:
            if getattr(r, "snapshot", None) is not None:
                tags.set("snap")
        return await append(requests, *a, **kw)

    backend.append = append_any
    witness = writes.witness
    if witness is None:
        absent.append("witness (none)")
    else:
        merge = witness._merge

        def merge_tagged(*a: Any) -> Any:
            tags.set("wit")
            return merge(*a)

        witness._merge = merge_tagged  # type: ignore[method-assign]
    return absent


async def one_round(
    tmp: Path, tag: str, sync: str, wl: Workload, first: int, reopen: bool = False
) -> tuple[list[dict[str, Any]], dict[str, list[float]], list[str]]:
    url = sk_url(tmp / f"tail-sk-{tag}.db", sync)
    store = StateStore(url, durability="sync")
    saver = lg_open(tmp / f"tail-lg-{tag}.db", sync)
    if reopen:  # the peer's first put into an empty WAL too, as the store's first save
        saver.conn.close()
        saver = lg_open(tmp / f"tail-lg-{tag}.db", sync)
    bare = BareCommits(tmp / f"tail-bare-{tag}.db", sync, 64)
    tags = Tags()
    absent = instrument(store, tags)
    docs = {a: wl.docs(a) for a in wl.agent_ids}
    plans = {a: lg_plan(saver, docs[a]) for a in wl.agent_ids}
    configs = {a: lg_config(a) for a in wl.agent_ids}
    sides = ("sk", "lg", "bare")
    lat: dict[str, list[float]] = {s: [] for s in sides}
    saves: list[dict[str, Any]] = []
    wall = time.perf_counter
    try:
        i = first
        for step in range(len(wl.sizes)):
            for a in wl.agent_ids:
                i += 1
                for side in sides[i % 3 :] + sides[: i % 3]:
                    if side == "sk":
                        tags.reset()
                        t0 = wall()
                        await store.save(a, docs[a][step])
                        t1 = wall()
                        info = dict(tags.now, step=step, agent=a, ms=1e3 * (t1 - t0))
                        info["first"] = step == 0
                        saves.append(info)
                    elif side == "lg":
                        cp, meta, versions = plans[a][step]
                        t0 = wall()
                        configs[a] = saver.put(configs[a], cp, meta, versions)
                        t1 = wall()
                    else:
                        t0 = wall()
                        bare.commit()
                        t1 = wall()
                    lat[side].append(t1 - t0)
    finally:
        await store.close()
        saver.conn.close()
        bare.close()
    return saves, lat, absent


def what(s: dict[str, Any]) -> str:
    return "+".join([s["path"], *(f for f in FLAGS if s.get(f))])


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--agents", type=int, default=4)
    p.add_argument("--last", type=int, default=30)
    p.add_argument(
        "--peer-reopen",
        action="store_true",
        help="reopen the peer's file after setup(): its WAL starts empty, as the store's",
    )
    args = p.parse_args()
    wl = Workload(args.agents, 10, args.last)
    for sync in ("NORMAL", "FULL"):
        saves: list[dict[str, Any]] = []
        lat: dict[str, list[float]] = {"sk": [], "lg": [], "bare": []}
        absent: list[str] = []
        with tempfile.TemporaryDirectory() as d:
            for r in range(args.rounds):
                s, l_, absent = await one_round(
                    Path(d), f"{sync}{r}", sync, wl, r, args.peer_reopen
                )
                saves += s
                for k in lat:
                    lat[k] += l_[k]
        print(f"\n## synchronous={sync}: {len(saves)} saves ({args.rounds} rounds)")
        if absent:
            print("absent:", ", ".join(absent))
        for side, xs in lat.items():
            print(
                f"{side:5s} p50 {1e3 * percentile(xs, 50):.3f} ms  "
                f"p95 {1e3 * percentile(xs, 95):.3f}  p99 {1e3 * percentile(xs, 99):.3f}"
            )
        firsts = len(wl.agent_ids)
        steady = {
            k: [x for j, x in enumerate(v) if j % len(wl.sizes * firsts) >= firsts]
            for k, v in lat.items()
        }
        print(
            f"time sk / lg: all {sum(lat['sk']) / sum(lat['lg']):.2f}x, "
            f"without each round's first {firsts} ops of each side "
            f"{sum(steady['sk']) / sum(steady['lg']):.2f}x; "
            f"p99 without them: sk {1e3 * percentile(steady['sk'], 99):.3f} ms, "
            f"lg {1e3 * percentile(steady['lg'], 99):.3f} ms"
        )
        print("all saves by what they did:", dict(Counter(what(s) for s in saves)))
        ms = sorted(s["ms"] for s in saves)
        for pct in (99, 95):
            cut = percentile(ms, pct)
            slow = [s for s in saves if s["ms"] >= cut]
            print(
                f"saves >= p{pct} ({cut:.3f} ms): {len(slow)}:",
                dict(Counter(what(s) for s in slow)),
            )
        top = sorted(saves, key=lambda s: -s["ms"])[: max(4, len(saves) // 50)]
        print("slowest:")
        for s in top:
            print(f"  {s['ms']:7.3f} ms  {s['agent']} step {s['step']:2d}  {what(s)}")


if __name__ == "__main__":
    asyncio.run(main())
