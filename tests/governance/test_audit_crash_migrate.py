"""``migrate`` (and its rollback) records each agent's ``migrate`` entry with the
rewrite of the agent's head: in the same commit on SQLite, PostgreSQL and Redis (a
page's rewrites and their entries: ``AuditLog.rewrite_with``; on Redis one Lua
script). A process SIGKILLed right after the rewrites leaves every rewritten agent
with its entry and ``audit verify`` clean; one killed right before them, or inside the
engine's transaction before its COMMIT, leaves neither the rewrites nor their entries
(Redis: killed once the script ran, before the engine answered: both) (was: entries
``verify`` reported as not applied; on Redis until this change) (real child process,
real SIGKILL, at the engine's ``rewrite`` / ``rewrite_many`` / ``append_together``)."""

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
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.schema import TypedStates
from statekeeper.schema.migrate import migrate

from ..backends._services import fresh_url
from ..schema import apps
from .conftest import KEYRING

POLICY = '[principals.ops]\nadmin = ["**"]\n'
AGENTS = 5
ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from statekeeper import StateStore
    from statekeeper.governance import Audit, parse_policy
    from statekeeper.schema.migrate import finalize, migrate, rollback
    from tests.governance._keyring import KEYRING
    from tests.schema import apps

    url, scenario, when, kill_at, policy, run = sys.argv[1:7]
    kill_at = int(kill_at)
    started = finished = 0  # agents' rewrites begun, and made

    def maybe_die(moment: str) -> None:
        if moment == when and (started if when == "before" else finished) >= kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    async def main() -> None:
        store = StateStore(url, keyring=KEYRING, principal="ops",
                           policy=parse_policy(policy), audit=Audit(), witness=False)
        backend = store.backend
        one, many = backend.rewrite, backend.rewrite_many

        async def rewrite(request):
            global started, finished
            started += 1
            maybe_die("before")
            result = await one(request)
            finished += 1
            maybe_die("after")
            return result

        async def rewrite_many(requests):
            global started, finished
            started += len(requests)
            maybe_die("before")
            result = await many(requests)
            finished += len(requests)
            maybe_die("after")
            return result

        together = backend.append_together

        async def append_together(requests, changes=()):
            global started, finished
            n = sum(1 for c in changes if getattr(c, "rewrite", None) is not None)
            if not n:
                return await together(requests, changes)
            started += n
            maybe_die("before")
            result = await together(requests, changes)
            finished += n
            maybe_die("after")
            return result

        backend.rewrite, backend.rewrite_many = rewrite, rewrite_many
        backend.append_together = append_together
        step = getattr(type(backend), "_change", None)
        if when == "inside" and step is None:  # Redis: the first page's script ran, unanswered
            write = backend._write

            async def dying_write(agent, script, *a, **k):
                reply = await write(agent, script, *a, **k)
                if script is backend._together_script and started:
                    os.kill(os.getpid(), signal.SIGKILL)
                return reply

            backend._write = dying_write
        elif when == "inside":  # the first rewrite made in the transaction, before COMMIT
            if asyncio.iscoroutinefunction(step):
                async def dying(*a, **k):
                    await step(backend, *a, **k)
                    os.kill(os.getpid(), signal.SIGKILL)
            else:
                def dying(*a, **k):
                    step(backend, *a, **k)
                    os.kill(os.getpid(), signal.SIGKILL)
            backend._change = dying
        if scenario == "migrate":
            await migrate(store, apps.support_v2)
        elif scenario == "rollback":
            await rollback(store, apps.support_v2, run_id=run)
        else:  # finalize: ``run`` is the journal of the migration
            await finalize(store, apps.support_v2, journal=run)
        print("finished", flush=True)

    asyncio.run(main())
    """
)


@pytest.fixture(params=["sqlite", "postgresql", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_url(request.param, tmp_path) as value:
        yield value


def _store(url: str) -> StateStore:
    return StateStore(
        url,
        keyring=KEYRING,
        principal="ops",
        policy=parse_policy(POLICY),
        audit=Audit(),
        witness=False,
    )


async def _seed(
    url: str, migrated: bool, journal: Path | None = None
) -> tuple[dict[str, bytes], int, str]:
    """The agents at v1 (and migrated to v2 when ``migrated``, with ``journal``): each
    one's head event checksum, the audit log's length and the migration's run id."""
    async with _store(url) as store:
        states = TypedStates(store, apps.support_v1)
        for i in range(AGENTS):
            await states.create(f"a{i}", apps.SupportV1(customer_name=f"c{i}", tags=[]))
        run = ""
        if migrated:
            report = await migrate(store, apps.support_v2, journal=journal)
            assert report.changed == AGENTS
            run = report.run_id
        log = AuditLog(store.backend, KEYRING)
        return await _heads(store), len([e async for e in log.entries()]), run


async def _heads(store: StateStore) -> dict[str, bytes]:
    out = {}
    async for info in store.iter_agents():
        (raw,) = await store.backend.read(info.agent_id, info.head_seq - 1, info.head_seq)
        out[info.agent_id] = raw.checksum
    return out


def _killed(
    tmp_path: Path, url: str, scenario: str, when: str, kill_at: int, run: str = ""
) -> None:
    script = tmp_path / "migrator.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    done = subprocess.run(
        [sys.executable, str(script), url, scenario, when, str(kill_at), POLICY, run],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stdout + done.stderr


async def _after_restart(
    url: str, before: dict[str, bytes], since: int
) -> tuple[set[str], set[str], list[str]]:
    """The agents whose head was rewritten, those with a (not voided) ok ``migrate``
    entry written by the killed process, and what ``verify`` reports not applied."""
    store = StateStore(url, keyring=KEYRING, witness=False)
    try:
        log = AuditLog(store.backend, KEYRING)
        report = await log.verify()
        assert report.ok, report.problems
        entries = [e async for e in log.entries()][since:]
        voided = {e.detail["voids"] for e in entries if isinstance(e.detail.get("voids"), int)}
        recorded = {
            e.agent_id
            for e in entries
            if e.operation == "migrate" and e.outcome == "ok" and e.seq not in voided
            if e.agent_id is not None
        }
        now = await _heads(store)
        changed = {agent for agent, checksum in now.items() if before[agent] != checksum}
        return changed, recorded, report.unapplied
    finally:
        await store.close()


def _named(unapplied: list[str]) -> set[str]:
    return {line.split("the migrate of '")[1].split("'")[0] for line in unapplied}


@pytest.mark.parametrize("kill_at", [2, AGENTS])
@pytest.mark.parametrize("scenario", ["migrate", "rollback", "finalize"])
def test_killed_right_after_the_rewrites_every_rewritten_agent_has_its_entry(
    tmp_path: Path, url: str, scenario: str, kill_at: int
) -> None:
    journal = tmp_path / "journal.json"
    migrated = scenario != "migrate"
    before, since, run = asyncio.run(_seed(url, migrated, journal if migrated else None))
    _killed(
        tmp_path, url, scenario, "after", kill_at, str(journal) if scenario == "finalize" else run
    )
    changed, recorded, unapplied = asyncio.run(_after_restart(url, before, since))
    assert len(changed) >= kill_at  # (SQLite rewrites the page in one call: all of it)
    assert changed <= recorded, f"rewritten without an audit entry: {changed - recorded}"
    # verify names exactly the announced agents the kill kept from being rewritten
    # (Redis rewrites a page agent by agent): none once every rewrite was made
    assert _named(unapplied) == recorded - changed, unapplied
    if len(changed) == AGENTS:
        assert unapplied == []  # audit verify is clean


@pytest.mark.parametrize("when", ["before", "inside"])
def test_killed_right_before_the_rewrites_leaves_neither_or_entries_verify_reports(
    tmp_path: Path, url: str, when: str
) -> None:
    before, since, _ = asyncio.run(_seed(url, migrated=False))
    _killed(tmp_path, url, "migrate", when, 1)
    changed, recorded, unapplied = asyncio.run(_after_restart(url, before, since))
    if when == "inside" and url.startswith("redis"):  # the page's one script ran whole
        assert changed and changed == recorded and unapplied == [], (changed, recorded)
        return
    # one commit held the page's rewrites and entries: neither is there
    assert (changed, recorded, unapplied) == (set(), set(), [])
