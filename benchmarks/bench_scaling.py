"""How statekeeper's costs grow: many agents, long streams, memory, recovery.

1. **Many agents.** Stores of 1k, 100k and 1M agents (``--quick``: 1k and 100k), each
   agent a short stream of 3 events (``created`` with a small document, then two
   ``save`` s that each add a message; ~1.4 KB of file per agent). Latest-state load
   time on the cold path (``cache_size=0``: head read, snapshot lookup, event read,
   checksum verification, fold), p50 and p99 over random agents, sizes interleaved in
   rounds, twice: with the files read into the OS page cache first (what the store
   itself costs; the target is judged here: p50 flat within 2x from the smallest to
   the largest store), and right after dropping each file's pages from the page cache
   (``posix_fadvise(DONTNEED)``: every B-tree page comes from the disk). The share of
   each file found in the page cache (``mincore``) is printed: on this VM the page cache
   shrinks back within minutes, so "as found" varies from run to run.
2. **Long streams.** One agent with 100, 10k and 100k events (default
   ``snapshot_every=100``; each event changes a ~2 KB document by three fields).
   Two agents per length: ``N`` events (a snapshot sits at the head) and ``N + 99``
   events (the worst case: 99 events to replay after the latest snapshot). Same
   cold-path load measurement; target: flat within 2x.
3. **Recovery.** Open a fresh ``StateStore`` on the stream file and load the
   100k-event agent (both variants), p50 over >= 20 trials. Target: p50 <= 10 ms.
   Measured in-process: interpreter start and ``import statekeeper`` are not included
   (the import time is reported separately, from a child process).
4. **Memory.** Peak RSS of this process during each phase (a psutil sampler thread,
   every 5 ms), and, in clean child processes, RSS while loading many *distinct*
   agents from the largest store with ``cache_size=1000`` (bounded), ``0`` and
   ``unbounded`` (cache as large as the number of loads) for contrast.

The stores are built once under ``.bench/`` (git-ignored) and reused when a file of the
right size and layout is there: agents by bulk ``SQLiteBackend.append_batch`` with
``synchronous=OFF`` (events re-sealed per agent from a template the real store wrote);
streams by the real ``StateStore.save`` path in ``durability="async"`` with
``synchronous=OFF``, so events and snapshots are exactly what the store writes.
Loads run with the default ``synchronous=FULL`` (reads do not depend on it). Run::

    .venv/bin/python benchmarks/bench_scaling.py            # full, ~20 s (first run: +~40 s
                                                            # to build 1.7 GB under .bench/)
    .venv/bin/python benchmarks/bench_scaling.py --quick    # ~5 s
    .venv/bin/python benchmarks/bench_scaling.py --profile  # cProfile of the load paths
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import psutil

from _common import (
    ROOT,
    file_bytes,
    fmt_ms,
    human_bytes,
    machine,
    median,
    percentile,
    table,
)
from statekeeper.backends.sqlite import SCHEMA_VERSION, SQLiteBackend
from statekeeper.bench.workload import chat_message
from statekeeper.codec import Codec
from statekeeper.codec.pipeline import identity
from statekeeper.records import AppendRequest, RawEvent
from statekeeper.store.store import StateStore

BENCH_DIR = ROOT / ".bench"
LAYOUT = 2  # bump when the shape of the generated data changes
AGENT_SIZES = [1_000, 100_000, 1_000_000]
STREAM_SIZES = [100, 10_000, 100_000]
WORST_EXTRA = 99  # events after the latest snapshot in the worst-case agents
BUILD_BATCH = 20_000
TARGETS = {"flat": 2.0, "recovery_ms": 10.0}


def text(rng: random.Random, n: int = 200) -> str:
    return chat_message(rng, 0, n)["content"]


def fingerprint() -> dict[str, Any]:
    return {"layout": LAYOUT, "schema": SCHEMA_VERSION, "codec": Codec.name}


def agent_id(i: int) -> str:
    return f"agent-{i:07d}"


# ----------------------------------------------------------------------- peak RSS


class PeakRSS:
    """Samples this process's RSS every ``interval`` seconds in a daemon thread."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.proc = psutil.Process()
        self.peak = 0
        self.start_rss = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PeakRSS:
        self.start_rss = self.peak = self.proc.memory_info().rss
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, self.proc.memory_info().rss)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join()
        self.end_rss = self.proc.memory_info().rss
        self.peak = max(self.peak, self.end_rss)


# ------------------------------------------------------------------ agent stores


async def template_events() -> list[RawEvent]:
    """Three events exactly as StateStore writes them (created + two saves)."""
    rng = random.Random(7)
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": text(rng)} for i in range(3)]
    async with StateStore("memory://") as store:
        base = {"task": "summarise the quarterly report", "status": "running", "step": 0}
        for n in (1, 2, 3):
            await store.save("template", {**base, "step": n, "messages": msgs[:n]})
        return await store.backend.read("template")


def reseal(aid: str, tmpl: list[RawEvent]) -> tuple[tuple[RawEvent, ...], bytes]:
    """The template's events re-sealed for agent ``aid``: each plain record carries the
    link of the one before it (32 zero bytes for seq 1) and its checksum is its own
    link, SHA-256 over its identity and payload (``statekeeper.codec.pipeline``); the
    head tag of a store without a key is ``0x01 0x00`` + the last link."""
    prev = bytes(32)
    out = []
    for e in tmpl:
        assert e.payload[3:35] == (prev if e.seq == 1 else e.payload[3:35]), "not a v1 record"
        payload = e.payload[:3] + prev + e.payload[35:]
        link = hashlib.sha256(
            b"sk-link/1" + identity(aid, e.seq, e.type, e.timestamp) + payload
        ).digest()
        out.append(RawEvent(e.seq, e.type, e.timestamp, payload, link))
        prev = link
    return tuple(out), b"\x01\x00" + prev


async def build_agents(n: int, log: Any) -> Path:
    path = BENCH_DIR / f"agents-{n}.db"
    meta = BENCH_DIR / f"agents-{n}.json"
    want = {**fingerprint(), "agents": n, "events_per_agent": 3}
    if path.exists() and meta.exists() and json.loads(meta.read_text()) == want:
        backend = SQLiteBackend(path)
        try:
            if await backend.count_agents() == n:
                log(f"reusing {path} ({human_bytes(path.stat().st_size)})")
                return path
        finally:
            await backend.close()
    tmp = path.with_name(path.name + ".building")
    for suffix in ("", "-wal", "-shm"):
        Path(str(tmp) + suffix).unlink(missing_ok=True)  # noqa: ASYNC240 - setup, untimed
    tmpl = await template_events()
    backend = SQLiteBackend(tmp, synchronous="OFF")
    t0 = time.perf_counter()
    try:
        for start in range(0, n, BUILD_BATCH):
            requests = []
            for i in range(start, min(n, start + BUILD_BATCH)):
                events, head_tag = reseal(agent_id(i), tmpl)
                requests.append(AppendRequest(agent_id(i), 0, events, head_tag=head_tag))
            results = await backend.append_batch(requests)
            bad = [r for r in results if isinstance(r, BaseException)]
            if bad:
                raise RuntimeError(f"bulk insert failed: {bad[0]!r}")
            if start and start % 200_000 == 0:
                log(f"  {start:,} agents, {time.perf_counter() - t0:.0f} s")
    finally:
        await backend.close()
    meta.unlink(missing_ok=True)
    os.replace(tmp, path)
    meta.write_text(json.dumps(want))
    log(
        f"built {path}: {n:,} agents in {time.perf_counter() - t0:.1f} s "
        f"({human_bytes(path.stat().st_size)})"
    )
    return path


# ----------------------------------------------------------------- page cache


def residency(path: Path) -> float | None:
    """Fraction of the file's pages in the OS page cache (Linux ``mincore``), or None."""
    import ctypes
    import ctypes.util
    import mmap

    size = path.stat().st_size
    if size == 0:
        return 1.0
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_long,
        ]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        with open(path, "rb") as f:
            addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, f.fileno(), 0)
            if addr in (None, ctypes.c_void_p(-1).value):
                return None
            try:
                pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
                vec = ctypes.create_string_buffer(pages)
                if libc.mincore(addr, size, vec) != 0:
                    return None
                return sum(b & 1 for b in vec.raw) / pages
            finally:
                libc.munmap(addr, size)
    except (OSError, AttributeError):
        return None


def evict(path: Path) -> None:
    """Drop this file's (clean) pages from the OS page cache: the next reads hit the disk."""
    with open(path, "rb") as f:
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def prewarm(path: Path) -> None:
    """Read the whole file once so its pages are in the OS page cache."""
    with open(path, "rb", buffering=0) as f:
        while f.read(16 << 20):
            pass


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:.0f}%"


# ----------------------------------------------------------------- stream store


def stream_agents() -> list[tuple[str, int]]:
    out = []
    for n in STREAM_SIZES:
        out.append((f"stream-{n}", n))
        out.append((f"stream-{n}+{WORST_EXTRA}", n + WORST_EXTRA))
    return out


def stream_doc(
    i: int, rng: random.Random, results: list[str], memory: dict[str, str]
) -> dict[str, Any]:
    return {
        "step": i,
        "tool": ("search", "read", "write", "plan", "ask")[i % 5],
        "result": results[i % len(results)],
        "memory": memory,
    }


async def build_streams(log: Any) -> Path:
    path = BENCH_DIR / "streams.db"
    meta = BENCH_DIR / "streams.json"
    want = {**fingerprint(), "agents": stream_agents()}
    want = json.loads(json.dumps(want))
    if path.exists() and meta.exists() and json.loads(meta.read_text()) == want:
        log(f"reusing {path} ({human_bytes(path.stat().st_size)})")
        return path
    tmp = path.with_name(path.name + ".building")
    for suffix in ("", "-wal", "-shm"):
        Path(str(tmp) + suffix).unlink(missing_ok=True)  # noqa: ASYNC240 - setup, untimed
    rng = random.Random(11)
    results = [text(rng) for _ in range(50)]
    memory = {f"fact_{k}": text(rng, 120) for k in range(10)}
    t0 = time.perf_counter()
    total = 0
    async with StateStore(
        f"sqlite:///{tmp}?synchronous=OFF", durability="async", flush_size=1000, cache_size=16
    ) as store:
        for aid, n in stream_agents():
            for i in range(1, n + 1):
                await store.save(aid, stream_doc(i, rng, results, memory))
                if i % 1000 == 0:
                    # Keep the write-behind buffer small whatever its back-pressure (before
                    # 7144cca a loop that never waited on I/O buffered everything).
                    await store.flush()
            total += n
    async with StateStore(f"sqlite:///{tmp}") as store:
        for aid, n in stream_agents():
            head = await store.head(aid)
            if head != n:
                raise RuntimeError(f"{aid}: head {head}, expected {n}")
    meta.unlink(missing_ok=True)
    os.replace(tmp, path)
    meta.write_text(json.dumps(want))
    el = time.perf_counter() - t0
    log(
        f"built {path}: {total:,} events through StateStore.save in {el:.1f} s "
        f"({total / el:,.0f}/s, async durability, synchronous=OFF)"
    )
    return path


# ------------------------------------------------------------------ measurements


async def timed_loads(store: StateStore, ids: list[str]) -> list[float]:
    lat = []
    for aid in ids:
        t0 = time.perf_counter()
        await store.load(aid)
        lat.append(time.perf_counter() - t0)
    return lat


async def measure_agents(
    paths: dict[int, Path], rounds: int, per_round: int, warmup: int
) -> dict[int, dict[str, Any]]:
    stores = {n: StateStore(f"sqlite:///{p}", cache_size=0) for n, p in paths.items()}
    rng = random.Random(3)
    lat: dict[int, list[float]] = {n: [] for n in paths}
    try:
        for n, store in stores.items():  # touch the file once (not timed)
            await timed_loads(store, [agent_id(rng.randrange(n)) for _ in range(warmup)])
        order = list(paths)
        for r in range(rounds):
            for n in order[r % len(order) :] + order[: r % len(order)]:
                ids = [agent_id(rng.randrange(n)) for _ in range(per_round)]
                lat[n].extend(await timed_loads(stores[n], ids))
        probe = await stores[order[-1]].load(agent_id(order[-1] - 1))
        assert probe.seq == 3 and len(probe.data["messages"]) == 3, probe
    finally:
        for store in stores.values():
            await store.close()
    return {
        n: {
            "p50": percentile(v, 50),
            "p99": percentile(v, 99),
            "loads": len(v),
            "bytes": paths[n].stat().st_size,
        }
        for n, v in lat.items()
    }


async def measure_agents_evicted(
    paths: dict[int, Path], rounds: int, per_round: int
) -> dict[int, dict[str, Any]]:
    """Loads right after the file's pages were dropped from the OS page cache: each
    round evicts, opens a fresh store and loads ``per_round`` random agents."""
    rng = random.Random(4)
    lat: dict[int, list[float]] = {n: [] for n in paths}
    first: dict[int, list[float]] = {n: [] for n in paths}
    order = list(paths)
    for r in range(rounds):
        for n in order[r % len(order) :] + order[: r % len(order)]:
            evict(paths[n])
            store = StateStore(f"sqlite:///{paths[n]}", cache_size=0)
            try:
                times = await timed_loads(
                    store, [agent_id(rng.randrange(n)) for _ in range(per_round)]
                )
            finally:
                await store.close()
            first[n].append(times[0])
            lat[n].extend(times)
    return {
        n: {
            "p50": percentile(v, 50),
            "p99": percentile(v, 99),
            "loads": len(v),
            "first": median(first[n]),
        }
        for n, v in lat.items()
    }


async def measure_streams(path: Path, rounds: int, per_round: int) -> dict[str, dict[str, Any]]:
    store = StateStore(f"sqlite:///{path}", cache_size=0)
    lat: dict[str, list[float]] = {aid: [] for aid, _ in stream_agents()}
    try:
        await timed_loads(store, list(lat) * 3)  # warm-up (not timed)
        ids = list(lat)
        for r in range(rounds):
            for aid in ids[r % len(ids) :] + ids[: r % len(ids)]:
                lat[aid].extend(await timed_loads(store, [aid] * per_round))
        for aid, n in stream_agents():
            snap = await store.load(aid)
            assert snap.seq == n and snap.data["step"] == n, (aid, snap.seq)
    finally:
        await store.close()
    return {
        aid: {"p50": percentile(v, 50), "p99": percentile(v, 99), "loads": len(v)}
        for aid, v in lat.items()
    }


async def measure_recovery(path: Path, trials: int) -> dict[str, dict[str, Any]]:
    n = STREAM_SIZES[-1]
    agents = [f"stream-{n}", f"stream-{n}+{WORST_EXTRA}"]
    lat: dict[str, list[float]] = {a: [] for a in agents}
    open_lat: list[float] = []
    for t in range(trials):
        for aid in agents if t % 2 == 0 else agents[::-1]:
            t0 = time.perf_counter()
            store = StateStore(f"sqlite:///{path}")
            t1 = time.perf_counter()
            snap = await store.load(aid)
            t2 = time.perf_counter()
            await store.close()
            assert snap.seq >= n
            lat[aid].append(t2 - t0)
            open_lat.append(t1 - t0)
    out = {
        a: {"p50": median(v), "p99": percentile(v, 99), "max": max(v), "trials": len(v)}
        for a, v in lat.items()
    }
    out["open_only"] = {
        "p50": median(open_lat),
        "p99": percentile(open_lat, 99),
        "max": max(open_lat),
        "trials": len(open_lat),
    }
    return out


def import_time() -> float:
    """Seconds for ``import statekeeper`` in a fresh interpreter (median of 5)."""
    code = "import time; t=time.perf_counter(); import statekeeper; print(time.perf_counter()-t)"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    times = []
    for _ in range(5):
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
        )
        times.append(float(out.stdout.strip()))
    return median(times)


# ------------------------------------------------------------- RSS (child runs)


async def rss_child(path: str, stored: int, cache_size: int, loads: int, samples: int) -> None:
    proc = psutil.Process()
    store = StateStore(f"sqlite:///{path}", cache_size=cache_size)
    step = 1_000_003  # prime, coprime with the store sizes: visits distinct agents
    await store.load(agent_id(0))
    gc.collect()
    points = [(0, proc.memory_info().rss)]
    done = 0
    t0 = time.perf_counter()
    per = loads // samples
    for _ in range(samples):
        for k in range(done, done + per):
            await store.load(agent_id((k * step) % stored))
        done += per
        gc.collect()
        points.append((done, proc.memory_info().rss))
    elapsed = time.perf_counter() - t0
    cached = len(store._cache)
    await store.close()
    print(json.dumps({"points": points, "elapsed": elapsed, "cached": cached, "maxrss": vm_hwm()}))


def vm_hwm() -> int:
    """Peak RSS of this process in bytes (Linux VmHWM; ru_maxrss would include the
    parent's peak, which Linux carries across fork+exec)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_rss_child(
    path: Path, stored: int, cache_size: int, loads: int, samples: int
) -> dict[str, Any]:
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--_rss-child",
            str(path),
            str(stored),
            str(cache_size),
            str(loads),
            str(samples),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


async def profile_loads(paths: dict[int, Path], stream_path: Path, top: int) -> None:
    """cProfile the cold load path: random agents of the largest store, and the
    100k-event agent with 99 events after its latest snapshot."""
    import cProfile
    import io
    import pstats

    n = max(paths)
    n_stream = STREAM_SIZES[-1]
    cases = [
        (
            f"{n:,}-agent store, random agents (3 events each)",
            paths[n],
            [agent_id(random.Random(5).randrange(n)) for _ in range(2000)],
        ),
        (
            f"stream of {n_stream + WORST_EXTRA:,} events (99 after the snapshot)",
            stream_path,
            [f"stream-{n_stream}+{WORST_EXTRA}"] * 300,
        ),
        (
            f"stream of {n_stream:,} events (snapshot at head)",
            stream_path,
            [f"stream-{n_stream}"] * 2000,
        ),
    ]
    for label, path, ids in cases:
        store = StateStore(f"sqlite:///{path}", cache_size=0)
        try:
            await timed_loads(store, ids[:50])
            prof = cProfile.Profile()
            prof.enable()
            t0 = time.perf_counter()
            await timed_loads(store, ids)
            wall = time.perf_counter() - t0
            prof.disable()
        finally:
            await store.close()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(top)
        print(
            f"\n## cold loads, {label}: {len(ids)} loads, {wall / len(ids) * 1e6:.0f} us "
            f"each under the profiler\n```\n{buf.getvalue().strip()}\n```"
        )


# --------------------------------------------------------------------------- main


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def flat(values: list[float]) -> float:
    return max(values) / min(values)


def verdict_flat(ratio: float) -> str:
    return f"{ratio:.2f}x ({'met' if ratio <= TARGETS['flat'] else 'MISSED'}: <= 2x)"


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    BENCH_DIR.mkdir(exist_ok=True)
    sizes = AGENT_SIZES[:2] if args.quick else AGENT_SIZES
    mi = machine("psutil")
    print("machine:", json.dumps(mi))
    wall0 = time.perf_counter()
    phases: dict[str, dict[str, int]] = {}

    with PeakRSS() as rss:
        paths = {n: await build_agents(n, log) for n in sizes}
        stream_path = await build_streams(log)
    phases["build/reuse"] = {"start": rss.start_rss, "peak": rss.peak, "end": rss.end_rss}
    if args.profile:
        await profile_loads(paths, stream_path, args.top)
        return {}

    # 1. many agents: files in the OS page cache (prewarmed), then evicted
    found = {n: residency(p) for n, p in paths.items()}
    for p in paths.values():
        prewarm(p)
    warmed = {n: residency(p) for n, p in paths.items()}
    with PeakRSS() as rss:
        agents = await measure_agents(paths, args.rounds, args.per_round, warmup=200)
    phases["agent loads"] = {"start": rss.start_rss, "peak": rss.peak, "end": rss.end_rss}
    after = {n: residency(p) for n, p in paths.items()}
    evicted = await measure_agents_evicted(paths, args.evict_rounds, args.evict_loads)
    rows = [
        [
            f"{n:,}",
            human_bytes(agents[n]["bytes"]),
            f"{pct(found[n])} / {pct(warmed[n])} / {pct(after[n])}",
            agents[n]["loads"],
            fmt_ms(agents[n]["p50"]),
            fmt_ms(agents[n]["p99"]),
            evicted[n]["loads"],
            fmt_ms(evicted[n]["first"]),
            fmt_ms(evicted[n]["p50"]),
            fmt_ms(evicted[n]["p99"]),
        ]
        for n in sizes
    ]
    flat_agents = agents[sizes[-1]]["p50"] / agents[sizes[0]]["p50"]
    flat_agents_p99 = agents[sizes[-1]]["p99"] / agents[sizes[0]]["p99"]
    flat_evicted = evicted[sizes[-1]]["p50"] / evicted[sizes[0]]["p50"]
    print("\n### latest-state load, cold path (cache_size=0), by number of agents stored\n")
    print(
        table(
            [
                "agents stored",
                "file",
                "in page cache: found / prewarmed / after",
                "loads",
                "p50 (ms)",
                "p99 (ms)",
                "evicted: loads",
                "first load (ms)",
                "p50 (ms)",
                "p99 (ms)",
            ],
            rows,
        )
    )
    print(
        f"\npage cache warm: p50 {sizes[-1]:,} / {sizes[0]:,} agents: "
        f"{verdict_flat(flat_agents)}; p99 ratio {flat_agents_p99:.2f}x"
    )
    print(
        f"file evicted from the page cache before each round of {args.evict_loads} loads "
        f"(posix_fadvise DONTNEED; reads hit the disk): p50 ratio {flat_evicted:.2f}x"
    )

    # 2. long streams (file prewarmed: it is small, and what is measured is the fold)
    prewarm(stream_path)
    with PeakRSS() as rss:
        streams = await measure_streams(stream_path, args.rounds, args.per_round // 4)
    phases["stream loads"] = {"start": rss.start_rss, "peak": rss.peak, "end": rss.end_rss}
    rows = []
    for n in STREAM_SIZES:
        best, worst = streams[f"stream-{n}"], streams[f"stream-{n}+{WORST_EXTRA}"]
        rows.append(
            [
                f"{n:,}",
                fmt_ms(best["p50"]),
                fmt_ms(best["p99"]),
                f"{n + WORST_EXTRA:,}",
                fmt_ms(worst["p50"]),
                fmt_ms(worst["p99"]),
            ]
        )
    flat_best = (
        streams[f"stream-{STREAM_SIZES[-1]}"]["p50"] / streams[f"stream-{STREAM_SIZES[0]}"]["p50"]
    )
    flat_worst = (
        streams[f"stream-{STREAM_SIZES[-1]}+{WORST_EXTRA}"]["p50"]
        / streams[f"stream-{STREAM_SIZES[0]}+{WORST_EXTRA}"]["p50"]
    )
    print(
        f"\n### latest-state load, cold path, by stream length (snapshot_every=100; "
        f"file {human_bytes(file_bytes(stream_path))})\n"
    )
    print(
        table(
            [
                "events",
                "p50 (ms)",
                "p99 (ms)",
                "events (+99 after snapshot)",
                "p50 (ms)",
                "p99 (ms)",
            ],
            rows,
        )
    )
    print(
        f"\np50 {STREAM_SIZES[-1]:,} / {STREAM_SIZES[0]:,} events: snapshot at head "
        f"{verdict_flat(flat_best)}; 99 events after the snapshot {verdict_flat(flat_worst)}"
    )

    # 3. recovery
    with PeakRSS() as rss:
        recovery = await measure_recovery(stream_path, args.trials)
    phases["recovery"] = {"start": rss.start_rss, "peak": rss.peak, "end": rss.end_rss}
    imp = import_time()
    n = STREAM_SIZES[-1]
    rows = []
    for key, label in (
        (f"stream-{n}", f"{n:,} events, snapshot at head"),
        (f"stream-{n}+{WORST_EXTRA}", f"{n + WORST_EXTRA:,} events, 99 to replay"),
        ("open_only", "open StateStore only (both trials)"),
    ):
        rec = recovery[key]
        ok = rec["p50"] * 1e3 <= TARGETS["recovery_ms"]
        rows.append(
            [
                label,
                rec["trials"],
                fmt_ms(rec["p50"]),
                fmt_ms(rec["p99"]),
                fmt_ms(rec["max"]),
                "" if key == "open_only" else f"{'met' if ok else 'MISSED'} (<= 10 ms)",
            ]
        )
    print("\n### recovery: open a fresh StateStore on the file + load the agent\n")
    print(table(["case", "trials", "p50 (ms)", "p99 (ms)", "max (ms)", "target"], rows))
    print(
        f"\n(not included above: `import statekeeper` in a fresh interpreter takes "
        f"{imp * 1e3:.0f} ms, median of 5)"
    )

    # 4. memory
    rows = [
        [name, human_bytes(p["start"]), human_bytes(p["peak"]), human_bytes(p["end"])]
        for name, p in phases.items()
    ]
    print("\n### RSS of this process by phase (psutil sampler, 5 ms)\n")
    print(table(["phase", "RSS at start", "peak RSS", "RSS at end"], rows))

    stored = sizes[-1]
    loads = args.rss_loads
    samples = 10
    rss_runs: dict[str, Any] = {}
    for label, cache in (
        ("cache_size=1000", 1000),
        ("cache_size=0", 0),
        (f"cache_size={loads} (unbounded)", loads),
    ):
        rss_runs[label] = run_rss_child(paths[stored], stored, cache, loads, samples)
    points = [p for p, _ in rss_runs["cache_size=1000"]["points"]]
    headers = ["distinct agents loaded", *[f"{p:,}" for p in points]]
    rows = []
    for label, res in rss_runs.items():
        base = res["points"][0][1]
        rows.append(
            [
                f"{label}: RSS growth (MB)",
                *[f"{(rss_v - base) / 2**20:+.1f}" for _, rss_v in res["points"]],
            ]
        )
    print(
        f"\n### RSS while loading {loads:,} distinct agents from the {stored:,}-agent store "
        f"(fresh child process each)\n"
    )
    print(table(headers, rows))
    for label, res in rss_runs.items():
        print(
            f"- {label}: start {human_bytes(res['points'][0][1])}, end "
            f"{human_bytes(res['points'][-1][1])}, peak (VmHWM) "
            f"{human_bytes(res['maxrss'])}, {res['cached']:,} states cached, "
            f"{loads / res['elapsed']:,.0f} loads/s"
        )
    bounded = rss_runs["cache_size=1000"]["points"]
    late_growth = bounded[-1][1] - bounded[2][1]
    print(
        f"\nbounded cache: RSS change from {bounded[2][0]:,} to {bounded[-1][0]:,} loads: "
        f"{late_growth / 2**20:+.1f} MB"
    )
    total = time.perf_counter() - wall0
    print(f"\n(total {total:.0f} s)")
    return {
        "bench": "scaling",
        "quick": args.quick,
        "machine": mi,
        "agents": agents,
        "agents_evicted": evicted,
        "flat_agents_evicted_p50": flat_evicted,
        "page_cache": {"found": found, "prewarmed": warmed, "after": after},
        "flat_agents_p50": flat_agents,
        "flat_agents_p99": flat_agents_p99,
        "streams": streams,
        "flat_streams_best": flat_best,
        "flat_streams_worst": flat_worst,
        "recovery": recovery,
        "import_s": imp,
        "phases": phases,
        "rss": rss_runs,
        "bounded_late_growth": late_growth,
        "targets": TARGETS,
        "seconds": total,
    }


async def peer_main(args: argparse.Namespace) -> dict[str, Any]:
    """``--peer``: statekeeper vs SqliteSaver, write and load p50 at 1k / 100k / 1M agents."""
    import scaling_peer

    BENCH_DIR.mkdir(exist_ok=True)
    sizes = AGENT_SIZES[:2] if args.quick else AGENT_SIZES
    mi = machine("langgraph-checkpoint-sqlite")
    print("machine:", json.dumps(mi))
    sk_paths = {n: await build_agents(n, log) for n in sizes}
    lg_paths = {n: scaling_peer.build_peer(n, BENCH_DIR, agent_id, log) for n in sizes}
    rounds = args.rounds or (2 if args.quick else 5)
    per_round = args.per_round or (100 if args.quick else 180)
    res = await scaling_peer.measure(sk_paths, lg_paths, agent_id, rounds, per_round)
    growth = scaling_peer.report(res)
    return {"bench": "scaling-peer", "machine": mi, "sizes": res, **growth}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--_rss-child":
        path, stored, cache, loads, samples = argv[1:6]
        asyncio.run(rss_child(path, int(stored), int(cache), int(loads), int(samples)))
        return {}
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--quick", action="store_true", help="1k and 100k agents only, fewer loads and trials"
    )
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds")
    parser.add_argument("--per-round", type=int, default=None, help="loads per store per round")
    parser.add_argument("--trials", type=int, default=None, help="recovery trials (>= 20)")
    parser.add_argument(
        "--rss-loads", type=int, default=None, help="distinct agents loaded in each RSS child run"
    )
    parser.add_argument(
        "--evict-rounds",
        type=int,
        default=None,
        help="rounds of loads right after evicting the file from the page cache",
    )
    parser.add_argument(
        "--evict-loads", type=int, default=200, help="loads per store per evicted round"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="cProfile the cold load paths instead of benchmarking",
    )
    parser.add_argument("--top", type=int, default=20, help="functions per profile table")
    parser.add_argument(
        "--peer",
        action="store_true",
        help="only: write and load p50 by number of agents, vs SqliteSaver (scaling_peer.py)",
    )
    args = parser.parse_args(argv)
    if args.peer:
        payload = asyncio.run(peer_main(args))
        print(json.dumps(payload, sort_keys=True))
        return payload
    args.rounds = args.rounds or (4 if args.quick else 8)
    args.per_round = args.per_round or (250 if args.quick else 500)
    args.trials = max(20, args.trials or (20 if args.quick else 40))
    args.evict_rounds = args.evict_rounds or (2 if args.quick else 5)
    args.rss_loads = args.rss_loads or (20_000 if args.quick else 100_000)
    payload = asyncio.run(amain(args))
    if payload:
        print(json.dumps(payload, sort_keys=True))
    return payload


if __name__ == "__main__":
    main()
