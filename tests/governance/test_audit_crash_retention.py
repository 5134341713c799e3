"""A retention run's compaction, thinning or purge commits with its audit entry on
SQLite, PostgreSQL and Redis: a process SIGKILLed as the engine is asked for the change, or
inside the engine's transaction after the change was made and before the commit, leaves
both the change and its entry, or neither (real child process, real SIGKILL). Was: the
entry first, then the base snapshot, then the prune (or the delete), each its own
commit."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.governance import Audit, AuditLog, parse_policy

from ..backends._services import fresh_url
from .conftest import KEYRING

POLICY = '[principals.ops]\nadmin = ["**"]\n'
RULES = {"compact": "*  keep_last=3", "thin": "*  snapshot_every=4", "purge": "*  ttl=1h"}

CHILD = textwrap.dedent(
    """
    import asyncio, os, signal, sys, time
    from statekeeper import StateStore
    from statekeeper.governance import Audit, parse_policy
    from statekeeper.governance.retention import RetentionPolicy, apply_retention
    from statekeeper.security import Keyring

    url, rules, inside = sys.argv[1], sys.argv[2], sys.argv[3] == "1"

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    async def main() -> None:
        store = StateStore(
            url,
            keyring=Keyring({"k1": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}),
            principal="ops",
            policy=parse_policy('[principals.ops]\\nadmin = ["**"]\\n'),
            audit=Audit(),
            witness=False,
        )
        backend = store.backend
        if inside:  # after the engine made the change in its transaction, before COMMIT
            step = type(backend)._change
            if asyncio.iscoroutinefunction(step):
                async def dying(*a, **k):
                    await step(backend, *a, **k)
                    die()
            else:
                def dying(*a, **k):
                    step(backend, *a, **k)
                    die()
            backend._change = dying
        else:  # as the engine is asked to change the agent (any way it may be asked)
            def at(method):
                async def call(*args, **kw):
                    changes = args[1] if len(args) > 1 else kw.get("changes", ())
                    first = args[0]
                    if isinstance(first, str) or changes:
                        die()
                    return await method(*args, **kw)
                return call
            for name in ("append_together", "prune", "save_snapshot"):
                setattr(backend, name, at(getattr(backend, name)))
        # (two hours on: a purge rule's agents are stale by then)
        await apply_retention(store, RetentionPolicy.parse(rules), now=time.time() + 7200)
        print("finished", flush=True)

    asyncio.run(main())
    """
)


async def _prepare(url: str, scenario: str) -> None:
    store = StateStore(
        url, keyring=KEYRING, principal="ops", policy=parse_policy(POLICY), audit=Audit()
    )
    try:
        for n in range(1, 9):
            await store.save("tenant/r", {"n": n, "pad": "x" * 100})
            if scenario == "thin" or n in (3, 6):
                await store.snapshot("tenant/r")
    finally:
        await store.close()


async def _state(url: str) -> tuple[list[str], int, set[int], int]:
    """The retention (and delete) entries of the agent, its first stored seq, its
    snapshots' seqs, its head; and verify is clean: no problem, nothing announced and
    not applied."""
    store = StateStore(url, keyring=KEYRING, witness=False)
    try:
        log = AuditLog(store.backend, KEYRING)
        report = await log.verify()
        assert report.ok and not report.unapplied, (report.problems, report.unapplied)
        ops = [
            e.operation
            async for e in log.entries(agent="tenant/r")
            if e.operation in ("compact", "thin", "purge", "delete")
        ]
        first = (await store.backend.read("tenant/r", 0, None, limit=1))[0].seq
        seqs = set()
        for seq in range(1, 9):
            raw = await store.backend.latest_snapshot("tenant/r", seq)
            if raw is not None:
                seqs.add(raw.seq)
        return ops, first, seqs, await store.backend.head("tenant/r")
    finally:
        await store.close()


#: (engine, die inside its transaction): Redis makes the change and the entry in one
#: Lua script, which the server runs whole, so there is no step inside it to die at
KILLS = [
    ("sqlite", False),
    ("sqlite", True),
    ("postgresql", False),
    ("postgresql", True),
    ("redis", False),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("engine", "inside"), KILLS, ids=[f"{e}-{'inside' if i else 'before'}" for e, i in KILLS]
)
@pytest.mark.parametrize("scenario", ["compact", "thin", "purge"])
def test_retention_killed_at_the_change_leaves_both_or_neither(
    tmp_path: Path, engine: str, scenario: str, inside: bool
) -> None:
    with fresh_url(engine, tmp_path) as url:
        asyncio.run(_prepare(url, scenario))
        _, _, before, _ = asyncio.run(_state(url))
        script = tmp_path / "retention.py"
        script.write_text(CHILD)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        child = subprocess.run(
            [sys.executable, str(script), url, RULES[scenario], "1" if inside else "0"],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert child.returncode == -signal.SIGKILL, (child.stdout, child.stderr)
        ops, first, after, head = asyncio.run(_state(url))
        # neither the change nor its entry (the commit that held both never happened)
        assert ops == [], ops
        assert head == 8 and first == 1 and after == before, (head, first, after, before)


@pytest.mark.parametrize("engine", ["memory", "sqlite", "postgresql", "redis"])
def test_retention_commits_its_change_with_its_entry(tmp_path: Path, engine: str) -> None:
    """(the counterpart: not killed, the run's change and its entry are both there,
    and the entry names the snapshots it dropped)"""

    async def go(url: str) -> None:
        from statekeeper.governance.retention import RetentionPolicy, apply_retention

        store = StateStore(
            url, keyring=KEYRING, principal="ops", policy=parse_policy(POLICY), audit=Audit()
        )
        try:
            for n in range(1, 9):
                await store.save("tenant/r", {"n": n})
                if n in (3, 6):
                    await store.snapshot("tenant/r")
            calls: list[str] = []
            backend = store.backend
            for name in ("prune", "save_snapshot"):  # not used: the change goes with the entry
                method = getattr(backend, name)

                async def call(*a: object, _m: object = method, _n: str = name) -> object:
                    calls.append(_n)
                    return await _m(*a)  # type: ignore[operator]

                setattr(backend, name, call)
            report = await apply_retention(store, RetentionPolicy.parse(RULES["compact"]))
            assert [a.outcome for a in report.actions] == ["done"]
            assert calls == []
            log = AuditLog(backend, KEYRING)
            entries = [e async for e in log.entries(agent="tenant/r", operation="compact")]
            assert len(entries) == 1 and "ahead" not in entries[0].detail
            assert entries[0].outcome == "done" and entries[0].last_seq == 5
            assert entries[0].detail["dropped"] == [3]  # (at 6: the snapshots above are kept)
            assert (await backend.read("tenant/r", 0, None, limit=1))[0].seq == 6
            verified = await log.verify()
            assert verified.ok and not verified.unapplied and not verified.unchecked
        finally:
            await store.close()

    with fresh_url(engine, tmp_path) as url:
        asyncio.run(go(url))


@pytest.mark.parametrize("engine", ["memory", "sqlite", "postgresql", "redis"])
def test_a_purge_commits_its_entry_with_the_delete(tmp_path: Path, engine: str) -> None:
    async def go(url: str) -> None:
        from statekeeper.governance.retention import RetentionPolicy, apply_retention

        store = StateStore(
            url, keyring=KEYRING, principal="ops", policy=parse_policy(POLICY), audit=Audit()
        )
        try:
            await store.save("tenant/p", {"n": 1})
            log = AuditLog(store.backend, KEYRING)
            before = (await log.head()).seq  # type: ignore[union-attr]
            policy = RetentionPolicy.parse(RULES["purge"])
            report = await apply_retention(store, policy, now=time.time() + 7200)
            assert [(a.kind, a.outcome) for a in report.actions] == [("purge", "done")]
            entries = [e async for e in log.entries(after_seq=before)]
            assert [(e.operation, e.outcome) for e in entries] == [
                ("purge", "done"),
                ("delete", "ok"),
            ]
            assert "ahead" not in entries[0].detail  # (was: written ahead, then the delete)
            assert await store.backend.head("tenant/p") == 0
            verified = await log.verify()
            assert verified.ok and not verified.unapplied, (verified.problems, verified.unapplied)
        finally:
            await store.close()

    with fresh_url(engine, tmp_path) as url:
        asyncio.run(go(url))
