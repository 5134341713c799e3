"""A save on PostgreSQL with and without row-level security, two statekeeper trees side by
side (before and after a change: migration 25 of h/pgpriv), paired and interleaved.

Each round runs, for each tree in turn (which goes first alternates), one child process
per mode: ``plain`` (the schema's owner, no row security) and ``rls`` (a tenant's role
under row security, installed with ``enforce_in_postgres``), each saving one agent
``--saves`` times in sequence (one append a save: the hot path), after ``--warm`` saves
not timed. A child prints its median save in microseconds; the ratio after / before is
taken per round and mode, and its median and spread (min..max) over the rounds printed.
A child also prints a digest of the SQL text of its backend's statements (all but the
probe when it opens, ``row_security``): ``plain`` must be the same in both trees (the
statements of a store without row security unchanged).

Run (from a tree; ``--before`` another tree, e.g. ``git worktree add --detach
/tmp/before 4bf1615d^1`` with the compiled modules copied into its ``src``)::

    .venv/bin/python benchmarks/bench_rls_save.py --before /tmp/before --after . --rounds 8
    .venv/bin/python benchmarks/bench_rls_save.py --before /tmp/before --after . \
        --rounds 8 --options '&options=-c%20synchronous_commit%3Doff'
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import statistics
import subprocess
import sys
import time
import uuid

DSN = os.environ.get("STATEKEEPER_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
POLICY = """\
[principals.alice]
write = ["acme/**"]
"""


async def _child(mode: str, saves: int, warm: int, options: str) -> None:
    import psycopg

    from statekeeper import StateStore
    from statekeeper.governance import parse_policy
    from statekeeper.governance.policy_postgres import enforce_in_postgres

    suffix = uuid.uuid4().hex[:8]
    schema, role = f"sk_bench_rls_{suffix}", f"sk_bench_rls_{suffix}"
    url = f"{DSN}?schema={schema}"
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
    try:
        async with StateStore(url) as owner:
            await owner.save("acme/a0", {"n": 0})
        if mode == "rls":
            await enforce_in_postgres(DSN, schema, parse_policy(POLICY), roles={"alice": role})
            scheme, rest = DSN.split("://", 1)
            url = f"{scheme}://{role}@{rest.split('@', 1)[-1]}?schema={schema}"
        async with StateStore(url + options, cache_size=0) as store:
            for i in range(warm):
                await store.save("acme/a1", {"n": i, "pad": "x" * 200})
            took = []
            for i in range(saves):
                start = time.perf_counter()
                await store.save("acme/a1", {"n": warm + i, "pad": "x" * 200})
                took.append(time.perf_counter() - start)
            sql = dict(getattr(store.backend, "_sql", {}))
            sql.pop("row_security", None)  # (the probe when it opens: one more column)
            text = b"\0".join(v for _, v in sorted(sql.items())).replace(schema.encode(), b"S")
            digest = hashlib.sha256(text).hexdigest()
        print(f"{statistics.median(took) * 1e6:.1f} {digest[:16]}")
    finally:
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


def _run(tree: str, mode: str, saves: int, warm: int, options: str) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": os.path.join(tree, "src")}
    child = ["--child", mode, "--saves", str(saves), "--warm", str(warm)]
    out = subprocess.run(
        [sys.executable, __file__, *child, "--options", options],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return float(out[-2]), out[-1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", default=".")
    parser.add_argument("--after", default=".")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--saves", type=int, default=300)
    parser.add_argument("--warm", type=int, default=30)
    parser.add_argument("--child")
    # e.g. "&options=-c%20synchronous_commit%3Doff": no WAL flush wait (on a loaded
    # machine the flush's spread hides a statement's cost)
    parser.add_argument("--options", default="")
    args = parser.parse_args()
    if args.child:
        asyncio.run(_child(args.child, args.saves, args.warm, args.options))
        return
    print(f"load: {os.getloadavg()}")
    for mode in ("plain", "rls"):
        ratios, pairs, digests = [], [], set()
        for r in range(args.rounds):
            trees = [("before", args.before), ("after", args.after)]
            if r % 2:
                trees.reverse()
            got = {}
            for name, tree in trees:
                got[name], digest = _run(tree, mode, args.saves, args.warm, args.options)
                digests.add((name, digest))
            pairs.append((got["before"], got["after"]))
            ratios.append(got["after"] / got["before"])
        print(
            f"{mode}: before {statistics.median(p[0] for p in pairs):.0f} us,"
            f" after {statistics.median(p[1] for p in pairs):.0f} us;"
            f" after/before median {statistics.median(ratios):.3f}"
            f" (min {min(ratios):.3f}, max {max(ratios):.3f}, {args.rounds} rounds);"
            f" SQL digests {sorted(digests)}"
        )


if __name__ == "__main__":
    main()
