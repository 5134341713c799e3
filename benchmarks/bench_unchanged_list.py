"""Instructions a steady save costs when its document holds a list left unchanged.

``StateStore.save(agent, {"facts": facts, "messages": msgs})``: ``msgs`` grows by one
~300-character message a save (its proof kept from save to save, ``store/proofs.py``),
``facts`` (``--facts`` flat dicts of ~300 characters) never changes. Before branch
``h/memproof`` the flat save made the unchanged list's proof before packing it, found
it unchanged and dropped the proof: every save stamped, copied and packed the whole
list again. Measured by callgrind (every thread of the process) over ``--saves``
saves of one agent on ``memory://`` (the store's own cost) or SQLite at NORMAL, after
``--warm`` saves; the instructions a save of each tree side by side::

    PYTHONPATH=src .venv/bin/python benchmarks/bench_unchanged_list.py \\
        --src OLD/src NEW/src --facts 0 30 200
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from callgrind_window import helper, run_window, slowed_clock

PAD = "lorem ipsum dolor sit amet " * 11  # ~300 characters


def child(facts: int, saves: int, warm: int, url: str, out: Path) -> None:
    slowed_clock()
    from statekeeper import StateStore

    window = ctypes.CDLL(str(helper(out)))
    listed = [{"fact": f"{i} {PAD}", "n": i} for i in range(facts)]
    msgs = [{"role": "user", "content": f"{i} {PAD}"} for i in range(20)]

    async def run() -> None:
        async with StateStore(url) as store:
            doc: dict[str, Any] = {"facts": listed, "messages": msgs}
            await store.save("a", doc)
            for i in range(warm + saves):
                if i == warm:
                    window.cg_start()
                msgs.append({"role": "ai" if i % 2 else "user", "content": f"{i} {PAD}"})
                await store.save("a", doc)
            window.cg_stop()

    asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", nargs="+", default=["src"])
    parser.add_argument("--facts", type=int, nargs="+", default=[0, 30, 200])
    parser.add_argument("--saves", type=int, default=100)
    parser.add_argument("--warm", type=int, default=10)
    parser.add_argument("--url", default="memory://", help="memory:// or sqlite (NORMAL)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        facts, url, out = args.child
        child(int(facts), args.saves, args.warm, url, Path(out))
        return
    out = Path(tempfile.mkdtemp(prefix="unchanged-"))
    print("| facts | " + " | ".join(args.src) + " |")
    print("|---" * (len(args.src) + 1) + "|")
    for facts in args.facts:
        row = []
        for src in args.src:
            url = args.url
            if url == "sqlite":
                url = f"sqlite:///{out}/{Path(src).parent.name}-{facts}.db?synchronous=NORMAL"
            os.environ["PYTHONPATH"] = str(Path(src).resolve())
            os.environ.setdefault("CG_PASS_EVERY", "0.05")
            count = run_window(
                __file__,
                [
                    "--saves",
                    str(args.saves),
                    "--warm",
                    str(args.warm),
                    "--child",
                    str(facts),
                    url,
                    str(out),
                ],
                out,
                f"f{facts}",
            )
            row.append(f"{count / args.saves:,.0f}")
        print(f"| {facts} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
