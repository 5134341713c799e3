"""A lease grant or release commits with its audit entry on SQLite, PostgreSQL and Redis
(one server: one Lua script): a process SIGKILLed as the engine is asked for the lease
change, or inside the engine's transaction after the change was made and before the
commit (Redis: once the script ran, before the engine answers), leaves both the lease
change and its entry, or neither (real child process, real SIGKILL), and ``audit
verify`` is clean. Was: the entry first (marked ``ahead``), then the grant in a second
commit: a kill between them left an entry of a lease never granted (``unapplied``)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.concurrency import LeaseManager
from statekeeper.governance import Audit, AuditLog, parse_policy

from ..backends._services import fresh_url
from .conftest import KEYRING

POLICY = '[principals.w]\nwrite = ["tenant/**"]\n'
AGENT = "tenant/a"

CHILD = textwrap.dedent(
    """
    import asyncio, os, signal, sys, time
    from statekeeper import StateStore
    from statekeeper.concurrency import LeaseManager
    from statekeeper.concurrency.leases import Lease
    from statekeeper.governance import Audit, parse_policy
    from statekeeper.security import Keyring

    url, what, inside = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    instrumented = sys.argv[4] == "1"

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    async def main() -> None:
        store = StateStore(
            url,
            keyring=Keyring({"k1": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}),
            principal="w",
            policy=parse_policy('[principals.w]\\nwrite = ["tenant/**"]\\n'),
            audit=Audit(),
            witness=False,
        )
        if instrumented:  # metrics on: the store's backend is the engine's wrapper
            from prometheus_client import CollectorRegistry
            from statekeeper.observability import instrument
            instrument(store, registry=CollectorRegistry(), tracing=False)
        backend = getattr(store.backend, "inner", store.backend)  # the engine
        step = getattr(type(backend), "_change", None)
        if inside and step is None:  # Redis: the one script ran, the engine not answered
            write = backend._write
            async def dying_write(agent, script, *a, **k):
                reply = await write(agent, script, *a, **k)
                if script is backend._together_script:
                    die()
                return reply
            backend._write = dying_write
        elif inside:  # after the engine made the change in its transaction, before COMMIT
            if asyncio.iscoroutinefunction(step):
                async def dying(*a, **k):
                    await step(backend, *a, **k)
                    die()
            else:
                def dying(*a, **k):
                    step(backend, *a, **k)
                    die()
            backend._change = dying
        else:  # as the engine is asked for the lease change (any way it may be asked)
            def at(method, always):
                async def call(*args, **kw):
                    changes = args[1] if len(args) > 1 else kw.get("changes", ())
                    if always or any(c.lease is not None for c in changes):
                        die()
                    return await method(*args, **kw)
                return call
            setattr(backend, "append_together", at(backend.append_together, False))
            for name in ("acquire_lease", "release_lease"):
                setattr(backend, name, at(getattr(backend, name), True))
        manager = LeaseManager(store, holder="w", ttl=300)
        if what == "grant":
            await manager.acquire("tenant/a")
        else:  # the lease the parent took as this holder, released here
            info = await backend.get_lease("tenant/a")
            await Lease(manager, info, 300, time.monotonic()).release()
        print("finished", flush=True)

    asyncio.run(main())
    """
)


def _store(url: str) -> StateStore:
    return StateStore(
        url,
        keyring=KEYRING,
        principal="w",
        policy=parse_policy(POLICY),
        audit=Audit(),
        witness=False,
    )


async def _prepare(url: str, what: str) -> None:
    store = _store(url)
    try:
        await store.save(AGENT, {"n": 1})
        if what == "release":
            await LeaseManager(store, holder="w", ttl=300).acquire(AGENT)
    finally:
        await store.close()


async def _state(url: str) -> tuple[list[tuple[str, int]], int, str | None]:
    """The lease entries of the agent that stand (op, token), the stored lease's token
    and holder; and verify is clean: no problem, nothing announced and not applied."""
    store = StateStore(url, keyring=KEYRING, witness=False)
    try:
        log = AuditLog(store.backend, KEYRING)
        report = await log.verify()
        assert report.ok and not report.unapplied, (report.problems, report.unapplied)
        entries = [e async for e in log.entries(agent=AGENT)]
        voided = {e.detail["voids"] for e in entries if "voids" in e.detail}
        leases = [
            (e.operation, e.detail["token"])
            for e in entries
            if e.operation.startswith("lease") and e.outcome == "ok" and e.seq not in voided
        ]
        info = await store.backend.get_lease(AGENT)
        return leases, (info.token if info else 0), (info.holder if info else None)
    finally:
        await store.close()


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["sqlite", "postgresql", "redis"])
@pytest.mark.parametrize("what", ["grant", "release"])
@pytest.mark.parametrize("inside", [False, True], ids=["before", "inside"])
def test_a_lease_killed_at_its_change_leaves_both_or_neither(
    tmp_path: Path, engine: str, what: str, inside: bool
) -> None:
    _killed_at_the_change(tmp_path, engine, what, inside, instrumented=False)


@pytest.mark.slow
@pytest.mark.parametrize("what", ["grant", "release"])
@pytest.mark.parametrize("inside", [False, True], ids=["before", "inside"])
def test_an_instrumented_stores_lease_killed_at_its_change_leaves_both_or_neither(
    tmp_path: Path, what: str, inside: bool
) -> None:
    """(metrics on, ``observability.instrument``: the same one commit; was: the
    engine's wrapper did not declare ``changes_leases_and_rewrites`` and the audit log
    kept the bare engine, so the lease went entry first)"""
    _killed_at_the_change(tmp_path, "sqlite", what, inside, instrumented=True)


def _killed_at_the_change(
    tmp_path: Path, engine: str, what: str, inside: bool, *, instrumented: bool
) -> None:
    with fresh_url(engine, tmp_path) as url:
        asyncio.run(_prepare(url, what))
        before = asyncio.run(_state(url))
        script = tmp_path / "lease.py"
        script.write_text(CHILD)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        child = subprocess.run(
            [
                sys.executable,
                str(script),
                url,
                what,
                "1" if inside else "0",
                "1" if instrumented else "0",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        # killed where it was asked to be (main never reached the inside point: the
        # grant was not in the entry's commit)
        assert child.returncode == -signal.SIGKILL, (child.stdout, child.stderr)
        after = asyncio.run(_state(url))
        if what == "grant":
            assert before == ([], 0, None)
        else:
            assert before == ([("lease", 1)], 1, "w")
        if engine == "redis" and inside:  # the script ran whole: the change and its entry
            made = [("lease", 1)] if what == "grant" else [("lease", 1), ("lease-release", 1)]
            assert after == (made, 1, "w" if what == "grant" else None), after
        else:  # neither: the commit that held both never happened
            assert after == before, (after, before)


@pytest.mark.parametrize("engine", ["memory", "sqlite", "postgresql", "redis"])
@pytest.mark.parametrize("instrumented", [False, True], ids=["plain", "instrumented"])
def test_a_lease_and_its_entry_are_one_commit(
    tmp_path: Path, engine: str, instrumented: bool
) -> None:
    """(the counterpart, not killed: the grant and the release each come with their
    entry, none written ahead, and the engine's own lease calls are not used; also
    with metrics on, through the engine's wrapper)"""

    async def go(url: str) -> None:
        store = _store(url)
        try:
            if instrumented:
                from prometheus_client import CollectorRegistry

                from statekeeper.observability import instrument

                instrument(store, registry=CollectorRegistry(), tracing=False)
            backend = store.backend
            calls: list[str] = []
            for name in ("acquire_lease", "release_lease"):
                method = getattr(backend, name)

                async def call(*a: object, _m: object = method, _n: str = name) -> object:
                    calls.append(_n)
                    return await _m(*a)  # type: ignore[operator]

                setattr(backend, name, call)
            manager = LeaseManager(store, holder="w", ttl=300)
            first = await manager.acquire(AGENT)
            assert await first.release() is True
            second = await manager.acquire(AGENT)
            assert (first.token, second.token) == (1, 2)
            assert calls == []
            log = AuditLog(backend, KEYRING)
            entries = [e async for e in log.entries(agent=AGENT)]
            assert [(e.operation, e.outcome, e.detail) for e in entries] == [
                ("lease", "ok", {"holder": "w", "token": 1}),
                ("lease-release", "ok", {"holder": "w", "token": 1}),
                ("lease", "ok", {"holder": "w", "token": 2}),
            ]
            stored = await backend.get_lease(AGENT)
            assert stored is not None and (stored.holder, stored.token) == ("w", 2)
            assert second.expires_at == stored.expires_at
            report = await log.verify()
            assert report.ok and not report.unapplied and not report.unchecked, report
        finally:
            await store.close()

    with fresh_url(engine, tmp_path) as url:
        asyncio.run(go(url))


async def test_an_instrumented_store_lists_its_leases_for_verify(tmp_path: Path) -> None:
    """An instrumented store's backend (``observability.instrument``) copies the
    engine's capabilities, so it forwards the lease listing too: verify through it
    finds a lease no entry records (it would refuse ``list_leases`` otherwise)."""
    from prometheus_client import CollectorRegistry

    from statekeeper.backends.base import Capability
    from statekeeper.observability import instrument

    with fresh_url("sqlite", tmp_path) as url:
        async with _store(url) as store:
            instrument(store, registry=CollectorRegistry(), tracing=False)
            assert store.backend.supports(Capability.LEASE_LIST)
            await store.save(AGENT, {"n": 1})
            await store.backend.acquire_lease("tenant/b", "rogue", 300)  # past the log
            assert [i.agent_id for i in await store.backend.list_leases()] == ["tenant/b"]
            report = await AuditLog(store.backend, KEYRING).verify()
            assert len(report.problems) == 1 and "holder 'rogue'" in report.problems[0]
