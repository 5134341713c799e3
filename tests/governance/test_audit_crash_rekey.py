"""``rekey`` commits each agent's whole rewrite with its audit entry on SQLite,
PostgreSQL and Redis (one ``append_together``; on Redis one Lua script): a rekeying
process SIGKILLed right after an agent's commit leaves that agent with its entry, one
killed right before it or inside the engine's transaction before its COMMIT leaves
neither (Redis: killed once the script ran, before the engine answered, leaves both),
and ``audit verify`` is clean (was: entry first, an entry reported as not applied;
on Redis until this change). Entry first still for an agent longer than
``rekey.TOGETHER_MAX`` events (its records are re-encrypted in batches): there the
entry is written before the rewrite and a kill between them leaves an entry
``verify`` reports as not applied (real child process, real SIGKILL, at the engine's
``rewrite`` / ``append_together``)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.codec import Codec
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.security import Keyring

from ..backends._services import fresh_url

OLD = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
NEW = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA="
POLICY = '[principals.ops]\nadmin = ["**"]\n'
AGENTS = 4

CHILD = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from statekeeper import StateStore
    from statekeeper.governance import Audit, parse_policy
    from statekeeper.security import Keyring
    from statekeeper.security.rekey import rekey

    url, when, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
    OLD, NEW, POLICY = sys.argv[4], sys.argv[5], sys.argv[6]
    if len(sys.argv) > 7:  # agents this long or longer: entry first, in batches
        sys.modules["statekeeper.security.rekey"].TOGETHER_MAX = int(sys.argv[7])
    rewrites = 0

    async def main() -> None:
        store = StateStore(
            url,
            keyring=Keyring({"k1": OLD, "k2": NEW}, active="k2"),
            principal="ops",
            policy=parse_policy(POLICY),
            audit=Audit(),
            witness=False,
        )
        backend = store.backend
        rewrite = backend.rewrite

        async def at_rewrite(request):
            # the engine call that re-encrypts an agent (not the audit log)
            global rewrites
            agent = not request.agent_id.startswith("\\x01")
            rewrites += agent
            if agent and rewrites == kill_at and when == "before":
                os.kill(os.getpid(), signal.SIGKILL)
            result = await rewrite(request)
            if agent and rewrites == kill_at and when == "after":
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        together = backend.append_together

        async def at_together(requests, changes=()):
            # an agent's rewrite committed with its entry
            global rewrites
            agent = any(getattr(c, "rewrite", None) is not None for c in changes)
            rewrites += agent
            if agent and rewrites == kill_at and when == "before":
                os.kill(os.getpid(), signal.SIGKILL)
            result = await together(requests, changes)
            if agent and rewrites == kill_at and when == "after":
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        backend.rewrite = at_rewrite
        backend.append_together = at_together
        step = getattr(type(backend), "_change", None)
        if when == "inside" and step is None:  # Redis: the kill_at-th script ran, unanswered
            write = backend._write

            async def dying_write(agent, script, *a, **k):
                reply = await write(agent, script, *a, **k)
                if script is backend._together_script and rewrites == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
                return reply

            backend._write = dying_write
        elif when == "inside":  # the kill_at-th rewrite made in its transaction, not committed
            made = 0

            def last(a):
                nonlocal made
                made += getattr(a[0] if a else None, "rewrite", None) is not None
                return made == kill_at

            if asyncio.iscoroutinefunction(step):
                async def dying(*a, **k):
                    await step(backend, *a, **k)
                    if last(a[1:]):
                        os.kill(os.getpid(), signal.SIGKILL)
            else:
                def dying(*a, **k):
                    step(backend, *a, **k)
                    if last(a[1:]):
                        os.kill(os.getpid(), signal.SIGKILL)
            backend._change = dying
        await rekey(store)
        print("finished", flush=True)

    asyncio.run(main())
    """
)


@pytest.fixture(params=["sqlite", "postgresql", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_url(request.param, tmp_path) as value:
        yield value


async def _seed(url: str) -> None:
    store = StateStore(
        url,
        keyring=Keyring({"k1": OLD}),
        principal="ops",
        policy=parse_policy(POLICY),
        audit=Audit(),
        witness=False,
    )
    try:
        for i in range(AGENTS):
            for n in range(3):
                await store.save(f"acme/r{i}", {"n": n})
    finally:
        await store.close()


def _rekey_killed(
    tmp_path: Path, url: str, when: str, kill_at: int, together_max: int | None = None
) -> None:
    script = tmp_path / "rekeyer.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    extra = [] if together_max is None else [str(together_max)]
    done = subprocess.run(
        [sys.executable, str(script), url, when, str(kill_at), OLD, NEW, POLICY, *extra],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stdout + done.stderr


async def _after_restart(url: str) -> tuple[set[str], set[str], list[str]]:
    """The agents whose records are under the new key, those with a (not voided) ok
    rekey entry, and what ``verify`` reports not applied (the log itself intact)."""
    keys = Keyring({"k1": OLD, "k2": NEW}, active="k2")
    store = StateStore(url, keyring=keys, witness=False)
    try:
        log = AuditLog(store.backend, keys)
        report = await log.verify()
        assert report.ok, report.problems
        entries = [entry async for entry in log.entries()]
        voided = {e.detail["voids"] for e in entries if isinstance(e.detail.get("voids"), int)}
        recorded = {
            e.agent_id
            for e in entries
            if e.operation == "rekey"
            and e.outcome == "ok"
            and e.seq not in voided
            and e.agent_id is not None
        }
        changed = set()
        async for info in store.iter_agents():
            raws = await store.backend.read(info.agent_id, 0, None)
            under = {Codec.header(raw.payload).key_id for raw in raws}  # type: ignore[union-attr]
            if "k2" in under:
                changed.add(info.agent_id)
        return changed, recorded, report.unapplied
    finally:
        await store.close()


@pytest.mark.parametrize("kill_at", [1, 3])
def test_rekey_killed_after_a_rewrite_left_every_changed_agent_with_its_entry(
    tmp_path: Path, url: str, kill_at: int
) -> None:
    asyncio.run(_seed(url))
    _rekey_killed(tmp_path, url, "after", kill_at)
    changed, recorded, unapplied = asyncio.run(_after_restart(url))
    assert len(changed) == kill_at  # the kill came right after the kill_at-th rewrite
    assert changed <= recorded, f"re-keyed without an audit entry: {changed - recorded}"
    assert recorded == changed  # (each agent's entry goes just before its rewrite)
    assert unapplied == []  # audit verify is clean: every entry's rekey is there


@pytest.mark.parametrize("when", ["before", "inside"])
def test_rekey_killed_before_an_agent_s_commit_leaves_neither(
    tmp_path: Path, url: str, when: str
) -> None:
    asyncio.run(_seed(url))
    _rekey_killed(tmp_path, url, when, 2)
    changed, recorded, unapplied = asyncio.run(_after_restart(url))
    # the first agent's commit, not the second's (Redis, inside: its script ran whole)
    assert len(changed) == (2 if when == "inside" and url.startswith("redis") else 1)
    assert recorded == changed  # nor its entry
    assert unapplied == []  # audit verify is clean


def test_rekey_entry_first_killed_before_a_rewrite_leaves_an_entry_verify_reports(
    tmp_path: Path, url: str
) -> None:
    """Entry first where one commit cannot be had: for an agent whose stream is longer
    than ``TOGETHER_MAX`` (here 2; each agent has 3 events)."""
    asyncio.run(_seed(url))
    _rekey_killed(tmp_path, url, "before", 2, together_max=2)
    changed, recorded, unapplied = asyncio.run(_after_restart(url))
    assert len(changed) == 1
    (stopped,) = recorded - changed  # announced, then killed before its rewrite
    assert len(unapplied) == 1 and f"rekey of {stopped!r}" in unapplied[0], unapplied
    assert "not applied" in unapplied[0]
