"""What each guarantee costs a LangGraph write, by switching it off (issue 12, lgfloor12).

Callgrind counts (every thread, instrumentation on only inside the window, as
``callgrind_window.py``) of ``bench_langgraph_flatput.py``'s 30-step sequence of
``put`` + ``put_writes`` pairs (one thread other than the main one, after two uncounted
sequences), for one saver VARIANT. A variant switches one guarantee or feature off **in
the measured process only** (a monkeypatch or an option: nothing in ``src`` changes,
and what it stores is not meant to be read back)::

    sk            StatekeeperSaver.from_url as shipped (fork protection, zstd-dict, keys)
    sk-nofp       fork_protection=False (no run claims, no fork checks)
    sk-nozstd     the store's codec without compression (Codec(compression=None))
    sk-nochain    SHA-256 of the link and the stored-bytes checksum made a constant
                  (the seal still builds the record; the head tag is the link's)
    sk-nokey      the checkpoint's idempotency key left out (history.checkpoint_key -> None)
    sk-notag      the one-statement append's head-tag compare left out of its trigger
                  (the seq compare-and-set and the new tag's store kept)
    sk-async      afrom_url + aput/aput_writes awaited on the saver's own loop (no
                  sync-to-loop hand-off)
    sk-nometa     the metadata handed to put is {} (both savers still add their own)
    sqlite        LangGraph's SqliteSaver on the same file options (synchronous=NORMAL)
    sqlite-noserde   its serde.dumps_typed returns a constant (no msgpack of values)
    sqlite-nostmt    its cursor() yields a cursor that runs nothing (no lock, statement,
                  commit)
    sqlite-nometa    as sk-nometa

``--graph small|chat``: instead, ``bench_langgraph_write_zones.py``'s LangGraph runs (a
30-step run, or a chat turn; ``--runs`` of them after ``--warm`` uncounted ones) by
zone, with the variant's switch-off (``sk-noreuse``: ``reuse_packed_messages=False``;
``sk-async`` and the ``-nometa`` variants are flat-only). It prints each zone's
instructions a run (turn) and the saver's writes: every zone but the graph, ``get_tuple``
and the calibration (zones are exclusive: ``put`` is without the ``lean``, ``statement``,
``serde`` zones inside it)::

    CG_PASS_EVERY=0.05 PYTHONPATH=src .venv/bin/python benchmarks/bench_langgraph_guarantees.py \
        /tmp/g sk sk-nofp sqlite --graph chat --runs 5 --warm 100

Usage::

    PYTHONPATH=src .venv/bin/python benchmarks/bench_langgraph_guarantees.py DIR VARIANT...
    CG_PASS_EVERY=1000 PYTHONPATH=src .venv/bin/python benchmarks/bench_langgraph_guarantees.py \\
        /tmp/g sk sk-nofp sk-nozstd sk-nochain sk-nokey sk-async sqlite sqlite-noserde

prints instructions a ``put`` + ``put_writes`` pair per variant (``--runs N``: counted
sequences, default 4; ``--repeat K``: each variant K times, alternated, the median
kept; ``--by-library``: each pair split by shared object: libpython, libsqlite3,
libcrypto's SHA-256, zstandard's ``backend_c``, orjson, ...).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import os
import statistics
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: F401  (PYTHONPATH wins)
from callgrind_window import helper, run_window, slowed_clock

STEPS = 30
WARM = 2
VARIANTS = (
    "sk",
    "sk-nofp",
    "sk-nozstd",
    "sk-nochain",
    "sk-nokey",
    "sk-notag",
    "sk-async",
    "sk-nometa",
    "sqlite",
    "sqlite-noserde",
    "sqlite-nostmt",
    "sqlite-nometa",
)
#: the variants ``--graph`` measures (``sk-noreuse``: ``reuse_packed_messages=False``)
CHAT_VARIANTS = (
    "sk",
    "sk-nofp",
    "sk-nozstd",
    "sk-nochain",
    "sk-nokey",
    "sk-notag",
    "sk-noreuse",
    "sqlite",
    "sqlite-noserde",
    "sqlite-nostmt",
)


def _calls(step: int, nometa: bool) -> tuple[Any, Any, Any]:
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    checkpoint: Any = empty_checkpoint()
    checkpoint["id"] = str(uuid6(clock_seq=-1))
    checkpoint["channel_values"] = {"n": step}
    checkpoint["channel_versions"] = {"n": step + 1, "__start__": 1}
    checkpoint["versions_seen"] = {"step": {"n": step}, "__input__": {}}
    checkpoint["updated_channels"] = ["n"]
    metadata: Any = {} if nometa else {"source": "loop", "step": step, "parents": {}}
    return checkpoint, metadata, {"n": step + 1}


def sequence(saver: Any, thread: str, nometa: bool) -> None:
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    for step in range(STEPS):
        checkpoint, metadata, versions = _calls(step, nometa)
        config = saver.put(config, checkpoint, metadata, versions)
        saver.put_writes(config, [("n", step + 1)], f"task-{step}")


async def asequence(saver: Any, thread: str, nometa: bool) -> None:
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    for step in range(STEPS):
        checkpoint, metadata, versions = _calls(step, nometa)
        config = await saver.aput(config, checkpoint, metadata, versions)
        await saver.aput_writes(config, [("n", step + 1)], f"task-{step}")


#: the zones that are not the saver's writes (``--graph``)
_NOT_WRITES = frozenset({"graph", "get_tuple", "calibrate"})


class _Nothing:
    """A cursor that runs nothing (``sqlite-nostmt``)."""

    def execute(self, *a: Any) -> None:
        return None

    def executemany(self, *a: Any) -> None:
        return None


class _ConstantHash:
    """``hashlib.sha256`` stand-in (``sk-nochain``): a constant digest, no hashing."""

    _DIGEST = bytes(range(32))

    def __init__(self, data: bytes = b"") -> None:
        pass

    def update(self, data: bytes) -> None:
        pass

    def digest(self) -> bytes:
        return self._DIGEST

    def hexdigest(self) -> str:
        return self._DIGEST.hex()


def _patch(variant: str) -> dict[str, Any]:
    """The switch-off of ``variant`` (applied before the saver is made); the options
    ``from_url`` is given."""
    opts: dict[str, Any] = {}
    if variant == "sk-nofp":
        opts["fork_protection"] = False
    elif variant == "sk-nozstd":
        from statekeeper.codec import Codec

        opts["codec"] = Codec(compression=None)
    elif variant == "sk-nochain":
        import types

        from statekeeper.codec import pipeline

        fake = types.SimpleNamespace(**vars(pipeline.hashlib))
        fake.sha256 = _ConstantHash
        pipeline.hashlib = fake  # type: ignore[attr-defined]
    elif variant == "sk-notag":
        from statekeeper.backends.sqlite import statements as engine

        engine._APPEND_NEXT_SCHEMA = tuple(  # type: ignore[attr-defined]
            sql.replace(" AND head_tag IS new.expected", "")
            for sql in engine._APPEND_NEXT_SCHEMA  # type: ignore[attr-defined]
        )
    elif variant == "sk-noreuse":
        opts["reuse_packed_messages"] = False
    elif variant == "sk-nokey":
        from statekeeper.integrations.langgraph import history

        history.checkpoint_key = lambda ns, cid: None  # type: ignore[assignment,return-value]
    return opts


def measure(variant: str, runs: int, out: Path) -> None:
    slowed_clock()
    window = ctypes.CDLL(str(helper(out)))
    tmp = Path(tempfile.mkdtemp(dir=out))
    nometa = variant.endswith("-nometa")
    if variant.startswith("sqlite"):
        from bench_langgraph_goals import sqlite_saver  # type: ignore[import-not-found]

        saver, close = sqlite_saver(tmp / "flat.db", "NORMAL")
        if variant == "sqlite-noserde":
            saver.serde.dumps_typed = lambda obj: ("msgpack", b"\x80")
        elif variant == "sqlite-nostmt":

            @contextlib.contextmanager
            def cursor(transaction: bool = True) -> Iterator[Any]:
                yield _Nothing()

            saver.cursor = cursor
    elif variant == "sk-async":
        from statekeeper.integrations.langgraph import StatekeeperSaver

        async def run_async() -> None:
            url = f"sqlite:///{tmp / 'flat.db'}?synchronous=NORMAL"
            saver = await StatekeeperSaver.afrom_url(url)
            for t in range(WARM + runs):
                if t == WARM:
                    window.cg_start()
                await asequence(saver, f"flat-{t}", False)
            window.cg_stop()
            await saver.aclose()

        caller = threading.Thread(target=asyncio.run, args=(run_async(),))
        caller.start()
        caller.join()
        return
    else:
        from statekeeper.integrations.langgraph import StatekeeperSaver

        opts = _patch(variant)
        url = f"sqlite:///{tmp / 'flat.db'}?synchronous=NORMAL"
        saver = StatekeeperSaver.from_url(url, **opts)
        close = saver.close

    def calls() -> None:
        for t in range(WARM + runs):
            if t == WARM:
                window.cg_start()
            sequence(saver, f"flat-{t}", nometa)
        window.cg_stop()

    caller = threading.Thread(target=calls)  # (as LangGraph's executor makes the calls)
    caller.start()
    caller.join()
    close()


def by_library(dump: Path, pairs: int) -> dict[str, float]:
    """Instructions a pair by shared object in a window's dump (``callgrind_annotate``'s
    exclusive counts summed; CPython's inlined headers counted as libpython)."""
    import re
    import subprocess

    text = subprocess.run(
        ["callgrind_annotate", "--threshold=100", str(dump)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \([\d. %]+\)\s+(.*)", line)
        if not m or "PROGRAM TOTALS" in line or m.group(2).startswith("=>"):
            continue
        name = m.group(2)
        obj = re.search(r"\[([^\]]*)\]\s*$", name)
        if obj:
            lib = re.sub(r"\.cpython.*|\.so.*", "", obj.group(1).split("/")[-1])
        elif "Modules/_sqlite" in name:
            lib = "_sqlite3"
        elif "_hashopenssl" in name:
            lib = "_hashlib"
        elif "Python-3." in name:
            lib = "libpython"
        elif name.startswith("/project/"):  # zstandard's C sources
            lib = "backend_c"
        else:
            lib = "?"
        lib = "libpython" if lib.startswith("libpython") else lib
        found[lib] = found.get(lib, 0) + int(m.group(1).replace(",", "")) / pairs
    return found


def measure_graph(variant: str, workload: str, runs: int, out: Path, warm: int) -> None:
    """``bench_langgraph_write_zones.py``'s runs of ``workload`` (zones: the graph,
    ``put``, ``put_writes``, ...) with ``variant``'s switch-off applied."""
    import bench_langgraph_goals as goals  # type: ignore[import-not-found]
    import bench_langgraph_write_zones as zones  # type: ignore[import-not-found]

    if variant.startswith("sqlite"):
        make = goals.sqlite_saver

        def sqlite_saver(path: Path, sync: str) -> Any:
            saver, close = make(path, sync)
            if variant == "sqlite-noserde":
                saver.serde.dumps_typed = lambda obj: ("msgpack", b"\x80")
            elif variant == "sqlite-nostmt":
                real = saver.cursor

                @contextlib.contextmanager
                def cursor(transaction: bool = True) -> Iterator[Any]:
                    if not transaction:  # (reads: get_tuple still reads the thread)
                        with real(transaction) as cur:
                            yield cur
                        return
                    yield _Nothing()

                saver.cursor = cursor
            return saver, close

        goals.sqlite_saver = sqlite_saver
        zones.measure("sqlite", workload, runs, out, warm)
        return
    from statekeeper.integrations.langgraph import StatekeeperSaver

    opts = _patch(variant)
    from_url = StatekeeperSaver.from_url.__func__  # type: ignore[attr-defined]

    def patched(cls: Any, url: Any = None, **options: Any) -> Any:
        return from_url(cls, url, **{**options, **opts})

    StatekeeperSaver.from_url = classmethod(patched)  # type: ignore[method-assign,assignment]
    zones.measure("sk", workload, runs, out, warm)


def graph_parts(variant: str, workload: str, runs: int, out: Path, warm: int) -> dict[str, float]:
    """Instructions a run by zone (as ``bench_langgraph_write_zones.py run``)."""
    import subprocess

    name = f"zones-{'sqlite' if variant.startswith('sqlite') else 'sk'}-{workload}"
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob(f"{name}.*"):
        if not old.name.endswith(".entered"):
            old.unlink()
    argv = ["measure-graph", variant, workload, str(runs), str(out), str(warm)]
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out / name}.%p",
            sys.executable,
            __file__,
            *argv,
        ],
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
        capture_output=True,
    )
    parts: dict[str, float] = {}
    for dump in out.glob(f"{name}.*"):
        label, count = None, None
        for line in dump.read_text(errors="replace").splitlines():
            if line.startswith("desc: Trigger: Client Request: "):
                label = line.rsplit(": ", 1)[1]
            elif line.startswith(("totals:", "summary:")) and count is None:
                count = int(line.split()[1])
        if label is not None and count is not None and count < 2**63:
            parts[label] = parts.get(label, 0) + count / runs
    return parts


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "measure":
        measure(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "measure-graph":
        argv = sys.argv[2:]
        measure_graph(argv[0], argv[1], int(argv[2]), Path(argv[3]), int(argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path, help="where callgrind's dumps and the stores go")
    parser.add_argument("variants", nargs="+", choices=sorted({*VARIANTS, *CHAT_VARIANTS}))
    parser.add_argument("--runs", type=int, default=4, help="counted 30-step sequences")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each variant")
    parser.add_argument(
        "--graph",
        choices=("small", "chat"),
        help="LangGraph runs by zone instead: --runs 30-step runs or chat turns after --warm",
    )
    parser.add_argument("--warm", type=int, default=2, help="uncounted runs (chat turns) first")
    parser.add_argument(
        "--by-library",
        action="store_true",
        help="flat: each variant's pair split by shared object (callgrind_annotate)",
    )
    args = parser.parse_args()
    if args.graph:
        for _ in range(args.repeat):
            for variant in args.variants:
                parts = graph_parts(variant, args.graph, args.runs, args.dir, args.warm)
                # zones are exclusive (a cut goes to the innermost open zone): the
                # writes are every zone but the graph's, the reads' and the calibration
                saver = sum(v for k, v in parts.items() if k not in _NOT_WRITES)
                inner = {k: round(v) for k, v in sorted(parts.items())}
                print(f"{variant:16} writes a run {saver:>12,.0f}  {inner}", flush=True)
        return
    counts: dict[str, list[float]] = {v: [] for v in args.variants}
    for _ in range(args.repeat):
        for variant in args.variants:
            argv = ["measure", variant, str(args.runs), str(args.dir)]
            total = run_window(__file__, argv, args.dir, f"g-{variant}")
            counts[variant].append(total / args.runs / STEPS)
            print(f"{variant:16} {counts[variant][-1]:>12,.0f}", flush=True)
            if args.by_library:
                dumps = sorted(args.dir.glob(f"g-{variant}.*.1"))
                libs = by_library(dumps[-1], args.runs * STEPS) if dumps else {}
                for lib, n in sorted(libs.items(), key=lambda kv: -kv[1])[:8]:
                    print(f"    {n:>12,.0f}  {lib}", flush=True)
    print("median instructions a put + put_writes pair:")
    for variant, got in counts.items():
        print(f"{variant:16} {statistics.median(got):>12,.0f}  {sorted(round(g) for g in got)}")


if __name__ == "__main__":
    main()
