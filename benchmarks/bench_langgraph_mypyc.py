"""Does compiling the write path's Python with mypyc move the write goals? (issues 11, 12)

``build OUT``: a copy of ``src`` in ``OUT/src`` with the write path's modules compiled by
mypyc (the ``mypyc`` of this interpreter's environment). mypyc refuses three things in
these modules as they are, so the *copy* is changed first (the tree this script lives in
never is):

* a class whose base is an interpreted class (``BaseCheckpointSaver``: the saver's mixin
  chain) must be a non-native class (``@mypyc_attr(native_class=False)``), and mypyc
  (mypy 2.4) crashes on a closure or lambda inside a non-native class's method, so each
  such method's body is moved to a module-level function the method calls;
* ``continue`` inside ``try``/``finally`` (``streams.py``) becomes a flag;
* two locals mypy narrows to ``None`` (``highwater.py``) are annotated.

Modules with async generators (``saver.py``, ``listing.py``, ``loop.py``) or a class
hierarchy rooted in LangGraph (``state.py``) stay interpreted.

``cpu PURE_SRC COMPILED_SRC``: CPU seconds (``time.process_time``: every thread of the
process) of a flat ``put`` + ``put_writes`` pair (``bench_langgraph_flatput.py``'s
30-step sequence) and of a ``StateStore.save`` of a growing chat state
(``bench_save_instructions.py``'s workload), each with its ``SqliteSaver`` peer in the
same child process, one child per tree per round, the order alternating. Reported:
statekeeper / ``SqliteSaver`` per tree, and compiled / pure.

Run::

    .venv/bin/python benchmarks/bench_langgraph_mypyc.py build /tmp/mypyc-tree
    .venv/bin/python benchmarks/bench_langgraph_mypyc.py cpu src /tmp/mypyc-tree/src --rounds 6
    # instructions and the goals: the existing scripts with each tree's PYTHONPATH, e.g.
    CG_PASS_EVERY=1000 PYTHONPATH=/tmp/mypyc-tree/src .venv/bin/python \\
        benchmarks/bench_langgraph_flatput.py 4 /tmp/x
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
LG = "statekeeper/integrations/langgraph/"
#: the saver's modules of functions and plain classes (the pool, the history index, the
#: LangGraph mapping, the value codec, the run and interrupt helpers)
LG_MODULES = [
    "made",
    "history",
    "mapping",
    "serde",
    "fingerprints",
    "memo",
    "messages",
    "packing",
    "pooling",
    "safe_serde",
    "unpacking",
    "interrupts",
    "runs",
    "steps",
    "stream",
]
#: the saver's mixin chain (``--chain``): compiles, but does not run (docs/benchmarks.md,
#: "lgmypyc": a compiled non-native class's methods refuse an instance of an interpreted
#: subclass, and ``listing.py`` / ``saver.py`` hold async generators mypyc cannot compile)
CHAIN_MODULES = ["commits", "claims", "reads", "writes", "pruning", "streams"]
#: the store's write path (the flat save, the depth bound, the witness, the lean append)
STORE_MODULES = [
    "statekeeper/store/flat.py",
    "statekeeper/codec/depth.py",
    "statekeeper/security/highwater.py",
    "statekeeper/store/lean.py",
    "statekeeper/store/proofs.py",
]
#: classes that must be non-native: the mixin chain (its base, BaseCheckpointSaver, is
#: interpreted) and those weakly referenced (a native class takes no weak reference)
NON_NATIVE = {
    LG + "commits.py": ["_SaverCommits"],
    LG + "claims.py": ["_SaverClaims"],
    LG + "reads.py": ["_SaverReads"],
    LG + "writes.py": ["_SaverWrites"],
    LG + "pruning.py": ["_SaverPruning"],
    LG + "streams.py": ["_SaverStreams"],
    LG + "safe_serde.py": ["_KnownTypes"],
    "statekeeper/security/highwater.py": ["HighWater"],
}


def _hoist(path: Path) -> None:
    """Move each method of ``path``'s classes that holds a closure or lambda to a
    module-level function ``_hoisted_<Class>_<method>(self, ...)`` the method returns."""
    src = path.read_text()
    lines = src.splitlines(keepends=True)
    appended: list[str] = []
    edits: list[tuple[int, int, str]] = []
    for cls in (n for n in ast.parse(src).body if isinstance(n, ast.ClassDef)):
        for fn in cls.body:
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) or fn.decorator_list:
                continue
            nodes = list(ast.walk(fn))
            inner = [n for n in nodes[1:] if isinstance(n, ast.FunctionDef | ast.Lambda)]
            is_async = isinstance(fn, ast.AsyncFunctionDef)
            if not (inner or is_async) or any(
                isinstance(n, ast.Yield | ast.YieldFrom) for n in nodes
            ):
                continue
            if any(isinstance(n, ast.Name) and n.id == "super" for n in nodes):
                continue
            first = fn.body[0]
            has_doc = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            body_at = fn.body[1].lineno - 1 if has_doc and len(fn.body) > 1 else first.lineno - 1
            header = "".join(lines[fn.lineno - 1 : first.lineno - 1])
            doc = "".join(lines[first.lineno - 1 : body_at])
            a = fn.args
            names = [x.arg for x in a.posonlyargs + a.args]
            call = names[1:] + ([f"*{a.vararg.arg}"] if a.vararg else [])
            call += [f"{k.arg}={k.arg}" for k in a.kwonlyargs]
            call += [f"**{a.kwarg.arg}"] if a.kwarg else []
            new = f"_hoisted_{cls.name}_{fn.name}"
            indent = " " * (fn.col_offset + 4)
            method = header
            if is_async:  # a sync method handing back the coroutine (no typed env object)
                returns = ast.get_source_segment(src, fn.returns) if fn.returns else None
                method = method.replace("async def ", "def ", 1)
                if returns:
                    at = method.rindex(f"-> {returns}")
                    method = method[:at] + "-> Any" + method[at + len(returns) + 3 :]
            edits.append(
                (
                    fn.lineno - 1,
                    fn.end_lineno or fn.lineno,
                    f"{method}{doc}{indent}return {new}({', '.join([names[0], *call])})\n",
                )
            )
            out = "".join(x[4:] if x.startswith("    ") else x for x in header.splitlines(True))
            out = out.replace(f"def {fn.name}(", f"def {new}(", 1)
            out = re.sub(rf"\(\s*{names[0]}(?=[,)])", f"({names[0]}: Any", out, count=1)
            body = "".join(
                x[4:] if x.startswith("    ") else x
                for x in lines[body_at : fn.end_lineno or fn.lineno]
            )
            appended.append(f"\n\n{out}{body}")
    for start, end, text in sorted(edits, reverse=True):
        lines[start:end] = [text]
    path.write_text("".join(lines) + "".join(appended))


def _patch(root: Path, chain: bool) -> None:
    lg = root / LG
    p = lg / "streams.py"
    s = p.read_text() if chain else ""
    old = (
        "            try:\n"
        "                created = await self.store.create(agent, m.new_doc(thread_id))\n"
        "            except ConflictError:\n"
        "                continue"
    )
    if chain:
        assert old in s, "streams.py changed: update bench_langgraph_mypyc.py"
        s = s.replace(old, "            raced = False\n" + old.replace("continue", "raced = True"))
        s = s.replace(
            "                SEEN.reset(token)\n",
            "                SEEN.reset(token)\n            if raced:\n                continue\n",
            1,
        )
        p.write_text(s)
    p = root / "statekeeper/security/highwater.py"
    s = p.read_text()
    for old, new in (
        ("filed = self.filed_store\n", "filed: Identity | None = self.filed_store\n"),
        (
            "key_id, mac = None, _seal(data)\n",
            "key_id: str | None = None\n            mac = _seal(data)\n",
        ),
    ):
        assert old in s, "highwater.py changed: update bench_langgraph_mypyc.py"
        s = s.replace(old, new)
    p.write_text(s)
    for mod, classes in NON_NATIVE.items():
        if mod.startswith(LG) and Path(mod).stem in CHAIN_MODULES and not chain:
            continue
        p = root / mod
        s = p.read_text().replace(
            "from __future__ import annotations\n",
            "from __future__ import annotations\n\nfrom mypy_extensions import mypyc_attr\n",
            1,
        )
        for c in classes:
            s = re.sub(
                rf"^class {c}\b",
                f"@mypyc_attr(native_class=False)\nclass {c}",
                s,
                count=1,
                flags=re.M,
            )
        p.write_text(s)
        _hoist(p)


def build(out: Path, chain: bool) -> None:
    src = out / "src"
    if src.exists():
        shutil.rmtree(src)
    shutil.copytree(HERE.parent / "src", src, ignore=shutil.ignore_patterns("__pycache__"))
    _patch(src, chain)
    (src / "mypy.ini").write_text(
        "[mypy]\nstrict = True\npython_version = 3.11\n"
        "warn_return_any = False\nwarn_unused_ignores = False\n"
    )
    mypyc = Path(sys.executable).parent / "mypyc"
    saver = LG_MODULES + (CHAIN_MODULES if chain else [])
    groups = [[LG + m + ".py" for m in saver], STORE_MODULES]
    for group in groups:  # two groups: two C files gcc compiles one after the other
        started = time.monotonic()
        subprocess.run([str(mypyc), *group], cwd=src, check=True, stdout=subprocess.DEVNULL)
        print(f"compiled {len(group)} modules in {time.monotonic() - started:.0f} s")


# --- the CPU child ---------------------------------------------------------------------


def _flat_cpu(sequences: int) -> dict[str, float]:
    """CPU seconds per flat pair: statekeeper's saver and SqliteSaver, alternated."""
    sys.path.insert(0, str(HERE))
    from _common import lg_open
    from bench_langgraph_flatput import STEPS, sequence
    from statekeeper.integrations.langgraph import StatekeeperSaver

    out: dict[str, list[float]] = {"sk": [], "sqlite": []}
    with tempfile.TemporaryDirectory() as tmp:
        savers = {
            "sk": StatekeeperSaver.from_url(f"sqlite:///{tmp}/sk.db?synchronous=NORMAL"),
            "sqlite": lg_open(Path(tmp) / "lg.db", "NORMAL"),
        }
        for side, saver in savers.items():
            sequence(saver, f"warm-{side}")
        for t in range(sequences):
            for side in ("sk", "sqlite") if t % 2 == 0 else ("sqlite", "sk"):
                started = time.process_time()
                sequence(savers[side], f"{side}-{t}")
                out[side].append((time.process_time() - started) / STEPS)
        savers["sk"].close()
        savers["sqlite"].conn.close()
    return {k: statistics.median(v) for k, v in out.items()}


def _save_cpu(steps: int) -> dict[str, float]:
    """CPU seconds per save: ``StateStore.save`` (sync) and ``SqliteSaver.put`` of the
    same growing chat states (4 agents, one at a time), per operation alternated."""
    sys.path.insert(0, str(HERE))
    from _common import Workload, lg_config, lg_open, lg_plan
    from statekeeper import StateStore

    wl = Workload(4, 10, 10 + steps, chars=300)
    out: dict[str, list[float]] = {"sk": [], "sqlite": []}

    async def run(tmp: str) -> None:
        lg = lg_open(Path(tmp) / "lg.db", "NORMAL")
        plans = {a: lg_plan(lg, wl.docs(a)) for a in wl.agent_ids}
        configs = {a: lg_config(a) for a in wl.agent_ids}
        docs = {a: wl.docs(a) for a in wl.agent_ids}
        async with StateStore(f"sqlite:///{tmp}/sk.db?synchronous=NORMAL") as store:
            for step in range(steps):
                for i, a in enumerate(wl.agent_ids):
                    for side in ("sk", "sqlite") if (step + i) % 2 == 0 else ("sqlite", "sk"):
                        started = time.process_time()
                        if side == "sk":
                            await store.save(a, docs[a][step])
                        else:
                            cp, meta, versions = plans[a][step]
                            configs[a] = lg.put(configs[a], cp, meta, versions)
                        if step >= 5:  # the first saves of each agent: warm-up
                            out[side].append(time.process_time() - started)
        lg.conn.close()

    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(run(tmp))
    return {k: statistics.median(v) for k, v in out.items()}


def child(sequences: int, steps: int) -> None:
    import statekeeper.integrations.langgraph.serde as serde

    compiled = not str(serde.__file__).endswith(".py")
    print(
        json.dumps({"compiled": compiled, "flat": _flat_cpu(sequences), "save": _save_cpu(steps)})
    )


def cpu(pure: Path, compiled: Path, rounds: int, sequences: int, steps: int) -> None:
    trees = {"pure": pure.resolve(), "compiled": compiled.resolve()}
    got: dict[str, list[dict[str, Any]]] = {"pure": [], "compiled": []}
    for r in range(rounds):
        for name in ("pure", "compiled") if r % 2 == 0 else ("compiled", "pure"):
            env = {**os.environ, "PYTHONPATH": str(trees[name])}
            proc = subprocess.run(
                [sys.executable, __file__, "child", str(sequences), str(steps)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            assert result["compiled"] == (name == "compiled"), f"{name} tree is not {name}"
            got[name].append(result)
            print(name, json.dumps(result), flush=True)
    print(f"\nload average {os.getloadavg()[0]:.1f}; medians over {rounds} rounds, min-max")
    for what, unit in (("flat", "a put + put_writes pair"), ("save", "a save / put")):
        print(f"\nCPU {unit} ({what}):")
        for name in ("pure", "compiled"):
            sk = [x[what]["sk"] * 1e6 for x in got[name]]
            lg = [x[what]["sqlite"] * 1e6 for x in got[name]]
            ratio = [a / b for a, b in zip(sk, lg, strict=True)]
            print(
                f"  {name:9s} statekeeper {statistics.median(sk):7.1f} us"
                f"  SqliteSaver {statistics.median(lg):7.1f} us"
                f"  ratio {statistics.median(ratio):.2f}x ({min(ratio):.2f}-{max(ratio):.2f})"
            )
        pairs = [
            c[what]["sk"] / p[what]["sk"] for p, c in zip(got["pure"], got["compiled"], strict=True)
        ]
        print(
            f"  compiled / pure (statekeeper): {statistics.median(pairs):.3f}"
            f" ({min(pairs):.3f}-{max(pairs):.3f})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("out", type=Path)
    b.add_argument("--chain", action="store_true", help="also the saver's mixin chain")
    c = sub.add_parser("cpu")
    c.add_argument("pure", type=Path)
    c.add_argument("compiled", type=Path)
    c.add_argument("--rounds", type=int, default=6)
    c.add_argument("--sequences", type=int, default=20)
    c.add_argument("--steps", type=int, default=40)
    k = sub.add_parser("child")
    k.add_argument("sequences", type=int)
    k.add_argument("steps", type=int)
    args = parser.parse_args()
    if args.cmd == "build":
        build(args.out, args.chain)
    elif args.cmd == "cpu":
        cpu(args.pure, args.compiled, args.rounds, args.sequences, args.steps)
    else:
        child(args.sequences, args.steps)


if __name__ == "__main__":
    main()
