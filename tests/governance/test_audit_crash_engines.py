"""No mutation without its audit entry, on every engine and in every durability mode:
a writer process SIGKILLed exactly at the audit entry, exactly at the write, or
anywhere, leaves no write the log does not record (real child processes, real SIGKILL).

Where one commit takes both (memory, SQLite, PostgreSQL, Redis: sync, ``group`` and
``async`` saves, deletes and snapshots) the log and the store hold exactly the same
writes. Where it cannot (S3, a Redis Cluster) the entry is written first: a kill between the
two leaves an entry for a write that did not happen, which ``AuditLog.verify`` reports
in ``unapplied`` — never a write without an entry. (The SIGKILL cases of sync saves on
SQLite and PostgreSQL are in ``test_audit_crash.py``.)"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.governance import AuditLog

from ..backends._services import fresh_url, moto_endpoint, s3_credentials
from .conftest import KEYRING

CHILD = textwrap.dedent(
    """
    import asyncio, os, signal, sys, time
    from statekeeper import StateStore
    from statekeeper.governance import Audit, parse_policy
    from statekeeper.security import Keyring

    url, durability, scenario = sys.argv[1], sys.argv[2], sys.argv[3]
    kill_entry, kill_write, inside = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6] == "1"
    entries = writes = 0
    backend = None

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    def clock() -> float:
        # read once per audit entry, as it is made: dying here is dying at the entry
        global entries
        entries += 1
        if entries == kill_entry:
            die()
        return time.time()

    def die_inside() -> bool:
        # dying INSIDE the engine's transaction, after it made the delete or stored
        # the snapshot, before it commits (the engine's step that makes a change
        # with the entry); False where there is no such step (then: die before it)
        step = getattr(type(backend), "_change", None)
        if step is None:
            return False
        if asyncio.iscoroutinefunction(step):
            async def dying(*a, **k):
                await step(backend, *a, **k)
                die()
        else:
            def dying(*a, **k):
                step(backend, *a, **k)
                die()
        backend._change = dying
        return True

    def at_write(method):
        # the engine call that writes an agent (not the audit log): dying here is
        # dying after everything before the write, the write not made
        async def call(*args, **kw):
            global writes
            first = args[0]
            first = first[0] if isinstance(first, list) else first
            agent = first if isinstance(first, str) else first.agent_id
            changes = args[1] if len(args) > 1 else kw.get("changes", ())
            if isinstance(changes, list) and changes:  # a delete or snapshot with its entry
                agent = changes[0].agent_id
            if not agent.startswith("\\x01"):
                writes += 1
                if writes == kill_write and not (inside and die_inside()):
                    die()
            return await method(*args, **kw)
        return call

    async def main() -> None:
        global backend
        store = StateStore(
            url,
            keyring=Keyring({"k1": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}),
            principal="app",
            policy=parse_policy('[principals.app]\\nwrite = ["tenant/**"]\\n'),
            audit=Audit(clock=clock),
            witness=False,
            # snapshots only where the scenario asks for one (store.snapshot), each with
            # its own entry: a policy such as "cost" would also write one with a save (in the
            # save's append, recorded by the save's entry), which the check below could
            # not tell from an explicit snapshot stored without its entry
            snapshot_every=100,
            durability=durability,
            flush_size=3,
            flush_interval=3600,
        )
        backend = store.backend
        for name in ("append", "append_batch", "append_together", "delete_agent",
                     "delete_agent_at", "save_snapshot"):
            setattr(backend, name, at_write(getattr(backend, name)))
        i = 0
        while True:
            i += 1
            if scenario == "save":
                agent = f"tenant/a{i % 3}"
                result = await store.save(agent, {"n": i, "pad": "x" * 300})
                print("save", agent, result.last_seq, flush=True)
            else:  # every agent: created, saved, snapshotted, deleted
                agent = f"tenant/d{i}"
                await store.save(agent, {"n": 1})
                print("save", agent, 1, flush=True)
                await store.save(agent, {"n": 2})
                print("save", agent, 2, flush=True)
                print("snapshot", agent, await store.snapshot(agent), flush=True)
                await store.delete(agent)
                print("delete", agent, 0, flush=True)

    asyncio.run(main())
    """
)

ENGINES = ["sqlite", "postgresql", "redis"]
#: engines without a commit for two streams: every write there is entry-first (a Redis
#: Cluster is too: tests/backends/test_redis_cluster.py)
AHEAD = ["s3"]
#: engines that commit a change (append, delete, snapshot) and its entry together
TOGETHER = ["sqlite", "postgresql", "redis"]


@contextlib.contextmanager
def _store_url(engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if engine != "s3":
        with fresh_url(engine, tmp_path) as url:
            yield url
        return
    for name, value in s3_credentials().items():  # (inherited by the writer process)
        monkeypatch.setenv(name.upper() if name != "region_name" else "AWS_DEFAULT_REGION", value)
    bucket = f"audit-{uuid.uuid4().hex[:12]}"
    yield f"s3://{bucket}/agents?endpoint_url={moto_endpoint()}&create_bucket=1"


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def url(engine: str, tmp_path: Path) -> Iterator[str]:
    with fresh_url(engine, tmp_path) as value:
        yield value


Acked = set[tuple[str, str, int]]


def _run_child(
    tmp_path: Path,
    url: str,
    *,
    durability: str = "sync",
    scenario: str = "save",
    kill_entry: int = 0,
    kill_write: int = 0,
    acks_before_kill: int = 0,
    inside: bool = False,
) -> Acked:
    """Run the writer until it kills itself (at its ``kill_entry``-th audit entry or
    ``kill_write``-th agent write) or, with neither, until ``acks_before_kill`` calls
    were acknowledged and the test SIGKILLs it wherever it is; the acknowledged calls."""
    script = tmp_path / "writer.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, str(script), url, durability, scenario]
    child = subprocess.Popen(
        [*command, str(kill_entry), str(kill_write), "1" if inside else "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    acked: Acked = set()
    assert child.stdout is not None
    try:
        for line in child.stdout:
            op, agent, seq = line.split()
            acked.add((op, agent, int(seq)))
            if acks_before_kill and len(acked) == acks_before_kill:
                child.send_signal(signal.SIGKILL)  # wherever it is now
                break
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        assert child.stderr is not None
        errors = child.stderr.read()
        child.stdout.close()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL, errors
    return acked


async def _check(url: str, acked: Acked, *, exact: bool, durability: str = "sync") -> list[str]:
    """No write without its entry: every stored event of an agent has its ok ``save``
    entry, a deleted agent its ``delete`` entry, a stored snapshot its ``snapshot``
    entry. An entry without its write is allowed only where it was written ahead and
    ``verify`` reports it unapplied; with ``exact`` (one commit for both) there is
    none. Returns the unapplied reports."""
    store = StateStore(url, keyring=KEYRING, witness=False)
    try:
        log = AuditLog(store.backend, KEYRING)
        report = await log.verify()
        assert report.ok, report.problems
        voided = set()
        entries = []
        async for entry in log.entries():
            entries.append(entry)
            if isinstance(entry.detail.get("voids"), int):
                voided.add(entry.detail["voids"])
        saved: dict[tuple[str, int], int] = {}  # (agent, seq) -> entry seq
        deleted: dict[str, int] = {}
        snapshotted: set[tuple[str, int]] = set()
        for entry in entries:
            if entry.seq in voided or entry.outcome != "ok" or entry.agent_id is None:
                continue
            if entry.operation in ("save", "create"):
                assert entry.first_seq is not None and entry.last_seq is not None
                for seq in range(entry.first_seq, entry.last_seq + 1):
                    saved[(entry.agent_id, seq)] = entry.seq
            elif entry.operation == "delete":
                deleted[entry.agent_id] = entry.seq
            elif entry.operation == "snapshot":
                assert entry.last_seq is not None
                snapshotted.add((entry.agent_id, entry.last_seq))
        events = set()
        snapshots = set()
        agents = set()
        for info in [info async for info in store.iter_agents()]:
            agents.add(info.agent_id)
            async for event in store.history(info.agent_id):
                events.add((info.agent_id, event.seq))
            raw = await store.backend.latest_snapshot(info.agent_id)
            if raw is not None:
                snapshots.add((info.agent_id, raw.seq))
        missing = sorted(events - set(saved))
        assert not missing, f"writes without their audit entry: {missing}"
        assert snapshots <= snapshotted, f"snapshots without entry: {snapshots - snapshotted}"
        # the writer's work is in the store: live events, or (delete scenario: the kill can
        # land after an agent's delete, before the next one's first save) recorded deletes
        assert events or deleted, "the writer stored nothing before it was killed"
        unapplied: list[str] = getattr(report, "unapplied", [])  # (main had none)

        def reported(agent: str, seq: int) -> bool:
            return any(f"{agent!r} at seq {seq} " in line for line in unapplied)

        # an agent that is gone was deleted with its entry, or never written at all
        # (its only entries were written ahead of writes a kill stopped, and reported)
        gone = {agent for agent, _ in saved} - agents - set(deleted)
        undeclared = {
            agent
            for agent in gone
            if exact or not all(reported(a, seq) for a, seq in saved if a == agent)
        }
        assert not undeclared, f"agents deleted without their audit entry: {undeclared}"
        not_stored = [
            key
            for key in set(saved) - events
            if key[0] not in deleted or deleted[key[0]] < saved[key]
        ]
        if exact:
            assert not not_stored, f"entries of writes that are not stored: {not_stored}"
            assert not unapplied, unapplied
        else:
            for agent, seq in not_stored:  # each one is reported, never silently wrong
                assert reported(agent, seq), (agent, seq, unapplied)
        if durability != "async":  # write-behind loses the unflushed buffer by design
            for op, agent, seq in acked:
                if op == "save" and agent not in deleted:
                    assert (agent, seq) in events
        return unapplied
    finally:
        await store.close()


# -- sync saves on S3 (no commit for two streams: the entry goes first) ----------------


@pytest.mark.slow
@pytest.mark.parametrize("ahead_engine", AHEAD)
@pytest.mark.parametrize("kill_entry", [2, 5])
def test_save_killed_at_its_entry_leaves_no_unrecorded_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ahead_engine: str, kill_entry: int
) -> None:
    with _store_url(ahead_engine, tmp_path, monkeypatch) as url:
        acked = _run_child(tmp_path, url, kill_entry=kill_entry)
        assert len(acked) == kill_entry - 1
        asyncio.run(_check(url, acked, exact=True))


@pytest.mark.slow
@pytest.mark.parametrize("ahead_engine", AHEAD)
@pytest.mark.parametrize("kill_write", [2, 5])
def test_save_killed_between_entry_and_write_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ahead_engine: str, kill_write: int
) -> None:
    with _store_url(ahead_engine, tmp_path, monkeypatch) as url:
        acked = _run_child(tmp_path, url, kill_write=kill_write)
        assert len(acked) == kill_write - 1
        unapplied = asyncio.run(_check(url, acked, exact=False))
        assert len(unapplied) == 1 and "was not written" in unapplied[0]


@pytest.mark.slow
@pytest.mark.parametrize("ahead_engine", AHEAD)
def test_killed_anywhere_while_writing_leaves_no_unrecorded_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ahead_engine: str
) -> None:
    with _store_url(ahead_engine, tmp_path, monkeypatch) as url:
        for _ in range(3):
            acked = _run_child(tmp_path, url, acks_before_kill=25)
            asyncio.run(_check(url, acked, exact=False))


# -- group commit and write-behind: the batch's entries in the batch's commit ----------


@pytest.mark.slow
@pytest.mark.parametrize("durability", ["group", "async"])
@pytest.mark.parametrize("kill_entry", [5, 8])
def test_batched_saves_killed_at_an_entry_leave_both_or_neither(
    engine: str, url: str, tmp_path: Path, durability: str, kill_entry: int
) -> None:
    acked = _run_child(tmp_path, url, durability=durability, kill_entry=kill_entry)
    asyncio.run(_check(url, acked, exact=True, durability=durability))


@pytest.mark.slow
@pytest.mark.parametrize("durability", ["group", "async"])
def test_batched_saves_killed_anywhere_leave_both_or_neither(
    engine: str, url: str, tmp_path: Path, durability: str
) -> None:
    for _ in range(3):
        acked = _run_child(tmp_path, url, durability=durability, acks_before_kill=20)
        asyncio.run(_check(url, acked, exact=True, durability=durability))


# -- deletes and snapshots: with their entry in one commit where the engine can ------


@pytest.mark.slow
@pytest.mark.parametrize("kill_entry", [3, 4])
def test_delete_and_snapshot_killed_at_their_entry_leave_no_unrecorded_change(
    engine: str, url: str, tmp_path: Path, kill_entry: int
) -> None:
    # entries per agent: save 1, save 2, snapshot (3), delete (4)
    acked = _run_child(tmp_path, url, scenario="delete", kill_entry=kill_entry)
    asyncio.run(_check(url, acked, exact=engine in TOGETHER))


@pytest.mark.slow
@pytest.mark.parametrize("together", TOGETHER)
@pytest.mark.parametrize("inside", [False, True], ids=["before", "inside"])
@pytest.mark.parametrize("kill_write", [3, 4])
def test_delete_and_snapshot_killed_at_the_change_leave_both_or_neither(
    tmp_path: Path, together: str, inside: bool, kill_write: int
) -> None:
    # agent writes per agent: save 1, save 2, snapshot (3), delete (4); the writer dies
    # as the engine is asked to make the change, or inside its transaction after the
    # change was made and before the commit: neither the change nor its entry is kept
    with fresh_url(together, tmp_path) as url:
        acked = _run_child(tmp_path, url, scenario="delete", kill_write=kill_write, inside=inside)
        asyncio.run(_check(url, acked, exact=True))
        ops, head, snapshot = asyncio.run(_state_of(url, "tenant/d1"))
        assert head == 2, "the agent's saves are kept"
        if kill_write == 3:  # neither the snapshot nor its entry
            assert "snapshot" not in ops and snapshot is None, (ops, snapshot)
        else:  # the snapshot and its entry, then neither the delete nor its entry
            assert snapshot == 2 and "snapshot" in ops, (ops, snapshot)
            assert "delete" not in ops, ops


async def _state_of(url: str, agent: str) -> tuple[list[str], int, int | None]:
    """The operations the log records for ``agent``, its stored head and the seq of its
    latest stored snapshot."""
    store = StateStore(url, keyring=KEYRING, witness=False)
    try:
        log = AuditLog(store.backend, KEYRING)
        ops = [entry.operation async for entry in log.entries(agent=agent)]
        raw = await store.backend.latest_snapshot(agent)
        return ops, await store.backend.head(agent), None if raw is None else raw.seq
    finally:
        await store.close()


@pytest.mark.slow
@pytest.mark.parametrize("kill_write", [3, 4])
def test_delete_and_snapshot_killed_between_entry_and_change_are_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kill_write: int
) -> None:
    # S3 (no commit for two streams): the entry first, then the change
    with _store_url("s3", tmp_path, monkeypatch) as url:
        acked = _run_child(tmp_path, url, scenario="delete", kill_write=kill_write)
        unapplied = asyncio.run(_check(url, acked, exact=False))
        assert len(unapplied) == 1, unapplied
        if kill_write == 4:  # the delete was announced, not made: verify says so
            assert "was not deleted" in unapplied[0], unapplied
        else:  # the snapshot was announced, not stored
            assert "snapshot of 'tenant/d1' at seq 2" in unapplied[0], unapplied
            assert "was not stored" in unapplied[0], unapplied


@pytest.mark.slow
def test_deleting_killed_anywhere_leaves_no_unrecorded_change(
    engine: str, url: str, tmp_path: Path
) -> None:
    for _ in range(3):
        acked = _run_child(tmp_path, url, scenario="delete", acks_before_kill=30)
        asyncio.run(_check(url, acked, exact=engine in TOGETHER))
