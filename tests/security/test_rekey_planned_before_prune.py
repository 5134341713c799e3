"""A rekey planned before a retention prune of the same agent, committed after it.

``rekey_agent`` reads the agent's snapshots, walks (and rewrites, a batch at a time)
its events, then commits the last of them with the re-sealed snapshots. A retention
``keep_last`` landing between the walk and a commit removes the events and the
snapshots below its base; the rewrite's compare-and-set does not see it (a prune keeps
the head), so every engine refuses the rewrite itself (``RewriteBelowPrunedBase``, a
ConfigurationError naming the agent and the seq, nothing of it written) and the pruned
snapshot stays gone. Was: the refusal stopped the rekey (and ``statekeeper rekey``, the
whole run) although the agent, walked again from a fresh read, rekeys: now it is planned
again, after a pause, a bounded number of times; a refusal on every walk is raised."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper import ConfigurationError, StateStore
from statekeeper.codec import Codec
from statekeeper.errors import RewriteBelowPrunedBase
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.governance.retention import apply_retention
from statekeeper.governance.retention_policy import RetentionPolicy, Rule
from statekeeper.records import RawSnapshot, RewriteRequest
from statekeeper.security import Keyring, generate_key, key_usage, rekey, rekey_agent
from statekeeper.security.rekey_retry import REPLANS

from ..backends._services import fresh_url

K1, K2 = generate_key(), generate_key()
OLD = Keyring({"k1": K1})
BOTH = Keyring({"k2": K2, "k1": K1}, active="k2")
KEEP_4 = RetentionPolicy(rules=(Rule("*", keep_last=4),))
POLICY = parse_policy('[principals.ops]\nadmin = ["**"]\n')
#: the module (``statekeeper.security.rekey`` the package attribute is the function)
REKEY = importlib.import_module("statekeeper.security.rekey")


@pytest.fixture(params=["memory", "sqlite", "postgresql", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_url(request.param, tmp_path) as value:
        yield value


async def _fill(store: StateStore) -> None:
    for i in range(10):
        await store.save("a", {"n": i})
    assert [s.seq for s in await _snapshots(store)] == [3, 6, 9]


def _prune_on(store: StateStore, name: str, when: Any) -> list[str]:
    """Wrap ``store.backend.<name>``: the first call ``when(arg)`` accepts runs the
    retention prune (keep_last 4: base 6) right before it, at the exact moment between
    the rekey's plan and its commit. Returns the log of what happened."""
    real = getattr(store.backend, name)
    log: list[str] = []

    async def call(arg: Any, *rest: Any) -> Any:
        if not log and when(arg):
            log.append("pruned")
            await apply_retention(store, KEEP_4)
            assert [s.seq for s in await _snapshots(store)] == [6, 9]
        try:
            return await real(arg, *rest)
        except RewriteBelowPrunedBase as exc:
            log.append(f"refused {exc.record} {exc.seq}")
            raise

    setattr(store.backend, name, call)
    return log


async def _after(store: StateStore) -> None:
    """The stream as retention left it, every record under the new key."""
    assert [s.seq for s in await _snapshots(store)] == [6, 9]
    assert await store.backend.latest_snapshot("a", 5) is None
    assert [e.seq for e in await store.backend.read("a", 0)] == [7, 8, 9, 10]
    assert (await store.load("a")).data == {"n": 9}
    payloads = [r.payload for r in await store.backend.read("a", 0)]
    payloads += [s.payload for s in await _snapshots(store)]
    assert {Codec.header(p).key_id for p in payloads} == {"k2"}  # type: ignore[union-attr]


async def test_a_rekey_whose_final_commit_a_prune_refused_is_planned_again(url: str) -> None:
    async with StateStore(url, keyring=OLD, snapshot_every=3) as store:
        await _fill(store)
        backend = store.backend
        async with StateStore(backend, keyring=BOTH) as rekeying:
            log = _prune_on(rekeying, "rewrite", lambda r: bool(r.snapshots))
            stats = await rekey_agent(rekeying, "a", batch=2)
            assert log == ["pruned", "refused snapshot 3"]  # refused once, then applied
            assert stats.retries >= 1
            await _after(rekeying)


async def test_a_rekey_whose_batch_a_prune_refused_is_planned_again(url: str) -> None:
    async with StateStore(url, keyring=OLD, snapshot_every=3) as store:
        await _fill(store)
        async with StateStore(store.backend, keyring=BOTH) as rekeying:
            log = _prune_on(rekeying, "rewrite", lambda r: not r.snapshots)
            await rekey(rekeying, batch=2)  # (the whole run: it goes on)
            assert log == ["pruned", "refused event 1"]  # (the batch of events 1, 2)
            await _after(rekeying)


async def test_a_rekey_committed_with_its_entry_is_planned_again(tmp_path: Path) -> None:
    """On a governed store whose engine commits the rewrite with its audit entry
    (``append_together``): the refused commit wrote neither; the second walk commits
    both, and the log verifies."""
    url = f"sqlite:///{tmp_path / 'g.db'}"
    opts: dict[str, Any] = {"principal": "ops", "policy": POLICY, "witness": False}
    async with StateStore(url, keyring=OLD, snapshot_every=3, audit=Audit(), **opts) as store:
        await _fill(store)
    async with (
        StateStore(url, keyring=BOTH, audit=Audit(), **opts) as rekeying,
        StateStore(url, keyring=BOTH) as other,  # (the retention job: another process's)
    ):
        real = rekeying.backend.append_together
        log: list[str] = []

        async def together(requests: Any, changes: Any = (), *rest: Any, **kw: Any) -> Any:
            if not log and any(c.agent_id == "a" and c.rewrite for c in changes):
                log.append("pruned")
                await apply_retention(other, KEEP_4)
            try:
                return await real(requests, changes, *rest, **kw)
            except RewriteBelowPrunedBase as exc:
                log.append(f"refused {exc.record} {exc.seq}")
                raise

        rekeying.backend.append_together = together  # type: ignore[method-assign]
        await rekey_agent(rekeying, "a")
        assert log[0] == "pruned" and log[1:] in (["refused event 1"], ["refused snapshot 3"])
        await _after(rekeying)
        audit = AuditLog(rekeying.backend, BOTH)
        entries = [e async for e in audit.entries(operation="rekey") if e.agent_id == "a"]
        assert [e.outcome for e in entries] == ["ok"]
        assert entries[0].detail["key"] == "k2"
        report = await audit.verify()
        assert report.ok and not report.unapplied, report


async def test_a_refusal_on_every_walk_is_raised_naming_the_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bounded: refused on every walk, the rekey pauses after each refusal (a growing
    pause) and gives up after ``REPLANS`` walks with the refusal, naming the agent and
    the seq; nothing was written."""
    url = f"sqlite:///{tmp_path / 'b.db'}"
    async with StateStore(url, keyring=OLD, snapshot_every=3) as store:
        await _fill(store)
    async with StateStore(url, keyring=BOTH) as rekeying:
        tries: list[RewriteRequest] = []

        async def refused(request: RewriteRequest) -> None:
            tries.append(request)
            assert len(tries) <= 5 * REPLANS, "unbounded"
            raise RewriteBelowPrunedBase(request.agent_id, 3, 6)

        waits: list[int] = []

        async def backoff(attempt: int) -> None:  # (counted, not slept: no timing)
            waits.append(attempt)

        monkeypatch.setattr(rekeying.backend, "rewrite", refused)
        monkeypatch.setattr(REKEY, "_backoff", backoff)
        with pytest.raises(RewriteBelowPrunedBase, match=r"'a'.* seq 3\b") as info:
            await rekey_agent(rekeying, "a")
        assert isinstance(info.value, ConfigurationError)  # (what callers caught before)
        assert info.value.agent_id == "a" and info.value.walks == REPLANS
        assert len(tries) == REPLANS  # one final commit a walk
        assert waits == list(range(REPLANS - 1))  # a pause between walks, growing
        assert await key_usage(rekeying) == {"k1": 14}  # nothing written: all under k1


async def _snapshots(store: StateStore) -> list[RawSnapshot]:
    """The agent's stored snapshots, newest last (read through the engine)."""
    found: list[RawSnapshot] = []
    below: int | None = None
    while (snap := await store.backend.latest_snapshot("a", below)) is not None:
        found.insert(0, snap)
        below = snap.seq - 1
        if below < 1:
            break
    return found


@pytest.mark.parametrize("where", ["memory", "sqlite"])
async def test_a_prune_landing_during_the_walk_is_walked_again_not_an_integrity_error(
    where: str, tmp_path: Path
) -> None:
    """A retention prune landing after the rekey read the stream's base (none: seq 1
    stored) and before it read the events: the page read starts past the pruned base.
    That is no gap in the stream (nothing was tampered with: the first stored record
    is past the walk's cursor, the base snapshot kept), so the stream is walked again
    from a fresh read and rekeys. Was: ``IntegrityError`` "gap in the stream" at seq 1,
    the run stopped as if the store were tampered with."""
    with fresh_url(where, tmp_path) as url:
        async with StateStore(url, keyring=OLD, snapshot_every=3) as store:
            await _fill(store)
            async with StateStore(store.backend, keyring=BOTH) as rekeying:
                real = rekeying.backend.read
                log: list[str] = []

                async def read(agent_id: str, after: int = 0, *rest: Any, **kw: Any) -> Any:
                    walking = kw.get("limit") != 1 and (rest or kw.get("before")) is not None
                    if not log and agent_id == "a" and after == 0 and walking:
                        log.append("pruned")  # (before the prune: its own reads pass)
                        await apply_retention(rekeying, KEEP_4)
                    return await real(agent_id, after, *rest, **kw)

                rekeying.backend.read = read  # type: ignore[method-assign, assignment]
                stats = await rekey_agent(rekeying, "a")
                assert log == ["pruned"]
                assert stats.retries >= 1
                await _after(rekeying)
                assert await key_usage(rekeying) == {"k2": 7}  # (nothing left under k1)
