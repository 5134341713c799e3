"""What an audited save of a tenant's database role costs under PostgreSQL's row-level
security (issue 15): N sequential governed saves (each with its audit entry, in one
commit) of a role granted one namespace, on a fresh schema per side and round, the two
source trees in alternating order, each in its own process (``PYTHONPATH``). Reports
the wall time per save (median, min..max over rounds): on a shared, loaded machine
only differences beyond the spread of the rounds mean anything. Needs the PostgreSQL
of ``$STATEKEEPER_TEST_POSTGRES`` (default ``postgresql://postgres@127.0.0.1:5432/test``)
with the right to create roles.

Run::

    .venv/bin/python benchmarks/bench_rls_audit.py run --base /work/main/src --tree src
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid

DSN = os.environ.get("STATEKEEPER_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
KEY = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="


def _as(role: str) -> str:
    scheme, rest = DSN.split("://", 1)
    return f"{scheme}://{role}@{rest.split('@', 1)[-1]}"


async def one(saves: int) -> float:
    """Microseconds per governed save of a tenant role (this process's statekeeper)."""
    import psycopg

    from statekeeper import StateStore
    from statekeeper.governance import Audit, parse_policy
    from statekeeper.governance.policy_postgres import (
        enforce_in_postgres,
        stop_enforcing_in_postgres,
    )
    from statekeeper.security import Keyring

    keyring = Keyring({"k1": KEY})
    policy = parse_policy('[principals.a]\nwrite = ["tenant-a/**"]\n')
    suffix = uuid.uuid4().hex[:8]
    schema, role = f"sk_bench_rls_{suffix}", f"sk_bench_rls_a_{suffix}"
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')  # type: ignore[arg-type]
    try:
        async with StateStore(f"{DSN}?schema={schema}", keyring=keyring) as owner:
            await owner.backend.initialize()
        await enforce_in_postgres(DSN, schema, policy, roles={"a": role})
        async with StateStore(
            f"{_as(role)}?schema={schema}",
            keyring=keyring,
            principal="a",
            policy=policy,
            audit=Audit(),
        ) as tenant:
            await tenant.save("tenant-a/warm", {"n": -1})
            start = time.perf_counter()
            for i in range(saves):
                await tenant.save(f"tenant-a/x{i % 10}", {"n": i})
            return (time.perf_counter() - start) / saves * 1e6
    finally:
        await stop_enforcing_in_postgres(DSN, schema, [role])
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')  # type: ignore[arg-type]
            conn.execute(f'DROP OWNED BY "{role}"')  # type: ignore[arg-type]
            conn.execute(f'DROP ROLE "{role}"')  # type: ignore[arg-type]


def _side(src: str, saves: int) -> float:
    env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
    out = subprocess.run(
        [sys.executable, __file__, "one", "--saves", str(saves)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return float(out.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["run", "one"])
    parser.add_argument("--base", default="/work/main/src")
    parser.add_argument("--tree", default="src")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--saves", type=int, default=500)
    args = parser.parse_args()
    if args.mode == "one":
        print(f"{asyncio.run(one(args.saves)):.1f}")
        return
    times: dict[str, list[float]] = {"base": [], "tree": []}
    for r in range(args.rounds):
        order = ["base", "tree"] if r % 2 == 0 else ["tree", "base"]
        for side in order:
            times[side].append(_side(getattr(args, side), args.saves))
    for side, values in times.items():
        print(
            f"{side:5} {statistics.median(values):8.0f} us/save"
            f"  ({min(values):.0f}..{max(values):.0f}, {args.rounds} rounds)"
        )


if __name__ == "__main__":
    main()
