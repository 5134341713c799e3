"""Instructions per batched save of 16 agents on group commit, counted in a window
(issue 11): callgrind with instrumentation on only for ``--saves`` rounds after a
warm-up, every thread of the process, ``synchronous=OFF`` (no fsync: the CPU alone;
``--sync FULL`` for the WAL's growth steps and the commits' syncs, user space only).

Chat states as in :mod:`bench_save_instructions` (~300-character messages, one more a
save), ``durability="group"``, the witness on (the default). Load-independent: the
figure is the window's instructions over the saves made in it.

Run::

    .venv/bin/python benchmarks/bench_group_window.py run /tmp/gw            # 16 agents
    PYTHONPATH=<tree>/src .venv/bin/python benchmarks/bench_group_window.py run /tmp/gw
    callgrind_annotate --inclusive=yes /tmp/gw/group.<pid>.1                 # where it goes
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Workload
from callgrind_window import helper, run_window

CHARS = 300
FIRST = 10
WARM = 5


async def child(
    out: Path,
    agents: int,
    saves: int,
    witness: bool,
    warm: int = WARM,
    new: bool = False,
    sync: str = "OFF",
) -> None:
    from statekeeper import StateStore

    window = ctypes.CDLL(str(helper(out)))
    wl = Workload(agents, FIRST, FIRST + warm + saves - 1, chars=CHARS)
    docs = {a: wl.docs(a) for a in wl.agent_ids}
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/bench.db?synchronous={sync}"
        async with StateStore(url, durability="group", witness=None if witness else False) as store:

            async def run(a: str, steps: slice) -> None:
                for doc in docs[a][steps]:
                    await store.save(a, doc)

            async def rounds(steps: slice) -> None:
                if new:  # each step: the first save of agents never seen before
                    for step in range(steps.start, steps.stop):
                        await asyncio.gather(
                            *(store.save(f"{a}-{step}", docs[a][0]) for a in wl.agent_ids)
                        )
                    return
                await asyncio.gather(*(run(a, steps) for a in wl.agent_ids))

            await rounds(slice(0, warm))
            commits = store.backend.append_commits  # type: ignore[attr-defined]
            window.cg_start()
            await rounds(slice(warm, warm + saves))
            window.cg_stop()
            done = store.backend.append_commits - commits  # type: ignore[attr-defined]
            (out / "commits").write_text(str(done))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("mode", choices=["run", "child"])
    parser.add_argument("out", type=Path)
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--saves", type=int, default=40, help="saves an agent in the window")
    parser.add_argument("--no-witness", action="store_true", help="witness=False")
    parser.add_argument(
        "--warm",
        type=int,
        default=WARM,
        help="saves an agent before the window (0: the window starts with each agent's"
        " first save, as bench_hotpath.py's concurrency curve does)",
    )
    parser.add_argument(
        "--new",
        action="store_true",
        help="every save the first of an agent never seen before (--saves rounds of"
        " --agents new agents, after --warm such rounds)",
    )
    parser.add_argument(
        "--sync",
        default="OFF",
        choices=["OFF", "NORMAL", "FULL"],
        help="the store's synchronous (FULL: the WAL's growth steps and a sync a commit"
        " included; the kernel's side of a sync is not counted)",
    )
    args = parser.parse_args()
    if args.mode == "child":
        asyncio.run(
            child(
                args.out,
                args.agents,
                args.saves,
                not args.no_witness,
                args.warm,
                args.new,
                args.sync,
            )
        )
        return
    argv = ["child", str(args.out), "--agents", str(args.agents), "--saves", str(args.saves)]
    argv += ["--warm", str(args.warm)] + (["--new"] if args.new else [])
    argv += ["--no-witness"] if args.no_witness else []
    argv += ["--sync", args.sync]
    total = run_window(__file__, argv, args.out, "group")
    commits = int((args.out / "commits").read_text())
    saves = args.agents * args.saves
    print(
        f"{args.agents} agents, {saves} saves in {commits} commits: {total:,} instructions,"
        f" {total / saves:,.0f} a save"
    )


if __name__ == "__main__":
    main()
