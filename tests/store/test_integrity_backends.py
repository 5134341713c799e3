"""Issue 9, items 3 and 5, on every engine (memory, SQLite, PostgreSQL, Redis, tiered).

Item 3 — idempotency records are checked against the event they claim: a record
inserted or moved directly in the database is an ``IntegrityError`` (never a write
silently skipped as a "duplicate"), ``verify`` checks every record, and with a keyring
the backend holds a keyed hash of each key, never the key.

Item 5 — a damaged snapshot does not make an agent unloadable: the load falls back to
an older snapshot or a full replay and logs a warning; ``verify`` lists every problem
of every agent; ``repair`` rebuilds the snapshots (a dry run changes nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper import IntegrityError, StateStore
from statekeeper.concurrency import Steps
from statekeeper.errors import WriteBufferError
from statekeeper.security import Keyring, generate_key
from statekeeper.store.repair import repair

from ._raw import ENGINES, Env, raw_env

K1, K2 = generate_key(), generate_key()
MODES = [pytest.param(True, id="with-key"), pytest.param(False, id="without-key")]


@pytest.fixture(params=ENGINES)
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    with raw_env(request.param, tmp_path) as e:
        yield e


def _store(env: Env, keyed: bool, **options: Any) -> StateStore:
    ring = Keyring({"k1": K1}) if keyed else None
    options.setdefault("snapshot_every", 3)
    return env.open(keyring=ring, cache_size=0, **options)


async def _populate(env: Env, keyed: bool, agents: tuple[str, ...] = ("a-1",), n: int = 10) -> None:
    async with _store(env, keyed) as store:
        for agent in agents:
            for i in range(1, n + 1):
                key = "pay-1" if i == 2 else None
                await store.save(agent, {"owner": agent, "n": i}, idempotency_key=key)


# -- item 3: idempotency records -------------------------------------------------------


@pytest.mark.parametrize("keyed", MODES)
async def test_a_retry_is_still_recognised(env: Env, keyed: bool) -> None:
    await _populate(env, keyed, n=4)
    async with _store(env, keyed) as store:
        again = await store.save("a-1", {"owner": "a-1", "n": 2}, idempotency_key="pay-1")
        assert (again.duplicate, again.first_seq) == (True, 2)
        assert await store.head("a-1") == 4
        report = await store.verify()
        assert report.ok, report.problems
        assert report.keys == 1


@pytest.mark.parametrize("keyed", MODES)
async def test_the_key_is_stored_as_a_keyed_hash_with_a_keyring(env: Env, keyed: bool) -> None:
    await _populate(env, keyed, n=4)
    [(stored, first, last)] = env.raw.keys("a-1")
    assert (first, last) == (2, 2)
    if keyed:
        assert stored.startswith("hmac:k1:") and "pay-1" not in stored
        assert len(stored) == len("hmac:k1:") + 64
    else:
        assert stored == "pay-1"


async def test_a_forged_record_is_an_integrity_error_not_a_skipped_write(env: Env) -> None:
    """Without a key the record holds the key in clear: anyone can write one."""
    await _populate(env, False, n=4)
    env.raw.put_key("a-1", "pay-2", 3, 3)  # seq 3 exists, but was not written with pay-2
    env.raw.put_key("a-1", "step:charge", 4, 4)
    async with _store(env, False) as store:
        with pytest.raises(IntegrityError) as info:
            await store.save("a-1", {"owner": "a-1", "n": 99}, idempotency_key="pay-2")
        assert (info.value.agent_id, info.value.seq) == ("a-1", 3)
        assert "forged or damaged" in info.value.reason
        assert await store.head("a-1") == 4  # not written, and not reported as written
        with pytest.raises(IntegrityError):
            await store.find_key("a-1", "pay-2")
        calls: list[int] = []
        with pytest.raises(IntegrityError):  # a durable step is not skipped either
            await Steps(store, "a-1").run("charge", lambda: calls.append(1))
        assert calls == []
        report = await store.verify()
        found = [(p.seq, p.kind) for p in report.problems]
        assert found == [(3, "idempotency"), (4, "idempotency")]
        assert report.keys == 3


@pytest.mark.parametrize("keyed", MODES)
async def test_a_record_moved_to_another_event_is_an_integrity_error(env: Env, keyed: bool) -> None:
    await _populate(env, keyed, n=4)
    [(stored, _, _)] = env.raw.keys("a-1")
    env.raw.put_key("a-1", stored, 3, 3)  # the genuine record, pointed elsewhere
    async with _store(env, keyed) as store:
        with pytest.raises(IntegrityError) as info:
            await store.save("a-1", {"owner": "a-1", "n": 2}, idempotency_key="pay-1")
        assert info.value.seq == 3
        assert await store.head("a-1") == 4
        assert [(p.seq, p.kind) for p in (await store.verify()).problems] == [(3, "idempotency")]
    env.raw.put_key("a-1", stored, 3, 70)  # past the end of the stream
    async with _store(env, keyed) as store:
        with pytest.raises(IntegrityError, match="not in the stream"):
            await store.find_key("a-1", "pay-1")


async def test_with_a_key_a_record_written_in_clear_does_not_suppress_the_write(
    env: Env,
) -> None:
    await _populate(env, True, n=4)
    env.raw.put_key("a-1", "pay-2", 3, 3)  # all an attacker without the key can write
    async with _store(env, True) as store:
        result = await store.save("a-1", {"owner": "a-1", "n": 5}, idempotency_key="pay-2")
        assert (result.duplicate, result.first_seq) == (False, 5)
        assert (await store.load("a-1")).data["n"] == 5
        problems = (await store.verify()).problems
        assert [(p.seq, p.kind) for p in problems] == [(3, "idempotency")]
        assert "stored in clear" in problems[0].reason


async def test_records_made_before_a_key_rotation_are_recognised(env: Env) -> None:
    await _populate(env, True, n=4)
    rotated = Keyring({"k2": K2, "k1": K1}, active="k2")
    async with env.open(keyring=rotated, snapshot_every=3) as store:
        again = await store.save("a-1", {"owner": "a-1", "n": 2}, idempotency_key="pay-1")
        assert (again.duplicate, again.first_seq) == (True, 2)
        fresh = await store.save("a-1", {"owner": "a-1", "n": 6}, idempotency_key="pay-3")
        assert not fresh.duplicate
        assert (await store.verify()).ok
    assert sorted(k[0].split(":")[1] for k in env.raw.keys("a-1")) == ["k1", "k2"]


# -- item 5: damaged snapshots, verify, repair -----------------------------------------


@pytest.mark.parametrize("keyed", MODES)
async def test_a_damaged_snapshot_falls_back_with_a_warning(
    env: Env, keyed: bool, caplog: pytest.LogCaptureFixture
) -> None:
    await _populate(env, keyed)  # snapshots at 3, 6, 9
    env.raw.damage_snapshot("a-1", 9)
    async with _store(env, keyed) as store:
        with caplog.at_level(logging.WARNING, logger="statekeeper.store"):
            loaded = await store.load("a-1")
        assert loaded.data == {"owner": "a-1", "n": 10} and loaded.seq == 10
        warnings = [r.getMessage() for r in caplog.records if r.name == "statekeeper.store"]
        assert any("snapshot at seq 9 is unusable" in w for w in warnings), warnings
    env.raw.damage_snapshot("a-1", 6)
    env.raw.damage_snapshot("a-1", 3)  # every snapshot damaged: a full replay
    async with _store(env, keyed) as store:  # (a tiered store's hot tier filled up)
        assert (await store.load("a-1", at_seq=9)).data["n"] == 9
        assert (await store.load("a-1")).data["n"] == 10
        # and the agent still takes writes
        await store.save("a-1", {"owner": "a-1", "n": 11})
        assert (await store.load("a-1")).data["n"] == 11
        problems = (await store.verify()).problems
        expected = [(3, "snapshot"), (6, "snapshot"), (9, "snapshot")]
        assert [(p.seq, p.kind) for p in problems] == expected
        assert all("fall back" in p.reason for p in problems)


@pytest.mark.parametrize("keep", [0, 3, 11])
async def test_a_truncated_snapshot_falls_back_too(env: Env, keep: int) -> None:
    """A snapshot cut short (even inside an engine's own framing) is damage, not a crash."""
    await _populate(env, False)  # snapshots at 3, 6, 9
    env.raw.truncate_snapshot("a-1", 9, keep)
    async with _store(env, False) as store:
        loaded = await store.load("a-1")
        assert loaded.data == {"owner": "a-1", "n": 10} and loaded.seq == 10
        problems = (await store.verify()).problems
    assert [(p.seq, p.kind) for p in problems] == [(9, "snapshot")]


async def test_verify_lists_every_problem_of_every_agent(env: Env) -> None:
    agents = ("a-1", "a-2", "a-3")
    await _populate(env, False, agents)
    env.raw.damage_snapshot("a-1", 3)
    env.raw.damage_snapshot("a-1", 9)
    env.raw.damage_snapshot("a-2", 6)
    env.raw.put_key("a-3", "pay-9", 5, 5)
    async with _store(env, False) as store:
        report = await store.verify()
    assert report.agents == 3
    assert [(p.agent_id, p.seq, p.kind) for p in report.problems] == [
        ("a-1", 3, "snapshot"),
        ("a-1", 9, "snapshot"),
        ("a-2", 6, "snapshot"),
        ("a-3", 5, "idempotency"),
    ]


@pytest.mark.parametrize("keyed", MODES)
async def test_repair_dry_run_changes_nothing_and_apply_fixes(
    env: Env, keyed: bool, caplog: pytest.LogCaptureFixture
) -> None:
    agents = ("a-1", "a-2", "a-3")
    await _populate(env, keyed, agents)
    env.raw.damage_snapshot("a-1", 6)
    env.raw.damage_snapshot("a-1", 9)
    env.raw.damage_snapshot("a-3", 3)
    before = env.raw.dump()
    async with _store(env, keyed) as store:
        dry = await repair(store)
    assert env.raw.dump() == before  # byte for byte
    assert not dry.applied and dry.ok
    assert [(c.agent_id, c.seq) for c in dry.changes] == [("a-1", 6), ("a-1", 9), ("a-3", 3)]
    async with _store(env, keyed) as store:
        done = await repair(store, apply=True)
        assert done.applied and done.ok
        assert [(c.agent_id, c.seq) for c in done.changes] == [
            ("a-1", 6),
            ("a-1", 9),
            ("a-3", 3),
        ]
    assert env.raw.dump() != before
    async with _store(env, keyed) as store:
        report = await store.verify()
        assert report.ok, report.problems
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="statekeeper.store"):
            for agent in agents:
                assert (await store.load(agent)).data == {"owner": agent, "n": 10}
                assert (await store.load(agent, at_seq=6)).data == {"owner": agent, "n": 6}
        assert not [r for r in caplog.records if r.name == "statekeeper.store"]
        assert not (await repair(store)).changes


async def test_async_durability_checks_a_record_that_appears_before_the_flush(env: Env) -> None:
    await _populate(env, False, n=4)
    store = _store(env, False, durability="async", flush_interval=3600, flush_size=100)
    try:
        # buffered: the key is new when the write is acknowledged…
        await store.save("a-1", {"owner": "a-1", "n": 5}, idempotency_key="pay-7")
        env.raw.put_key("a-1", "pay-7", 3, 3)  # …and forged before the flush
        with pytest.raises(WriteBufferError) as info:
            await store.flush()
        assert isinstance(info.value.failures["a-1"], IntegrityError)
    finally:
        await store.close()
