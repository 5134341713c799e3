"""The Redis backend: the shared contract, plus TTL, pipelining and lost connections.

Needs a server: ``$STATEKEEPER_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``).
Every test uses its own key prefix (deleted afterwards); tests that kill a server start
their own private ``redis-server`` on another loopback port.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

pytest.importorskip("redis")

import redis.asyncio as aioredis

from statekeeper.backends import open_backend
from statekeeper.backends.redis import RedisBackend
from statekeeper.errors import BackendError, BackendUnavailable, ConfigurationError, StoreLost
from statekeeper.records import AppendRequest, AppendResult, RawEvent
from statekeeper.store import StateStore
from statekeeper.testing import BackendConformance, request

from ._services import (
    REDIS_URL,
    namespace,
    private_redis,
)


class TestRedisConformance(BackendConformance):
    @pytest.fixture(autouse=True)
    def _isolated_prefix(self, prefix: str) -> None:
        """Require the server and give the test its own key prefix."""

    async def make_backend(self, tmp_path: Path) -> RedisBackend:
        return RedisBackend(REDIS_URL, prefix=namespace(tmp_path) + ":")

    async def open_peer(self, tmp_path: Path) -> RedisBackend:
        return RedisBackend(REDIS_URL, prefix=namespace(tmp_path) + ":")

    async def open_readonly(self, tmp_path: Path) -> RedisBackend:
        return RedisBackend(REDIS_URL, prefix=namespace(tmp_path) + ":", readonly=True)


class TestRedisWithTTLConformance(TestRedisConformance):
    """The contract holds with a TTL set (long enough not to fire during a test)."""

    async def make_backend(self, tmp_path: Path) -> RedisBackend:
        return RedisBackend(REDIS_URL, prefix=namespace(tmp_path) + ":", ttl=600)

    async def open_peer(self, tmp_path: Path) -> RedisBackend:
        return RedisBackend(REDIS_URL, prefix=namespace(tmp_path) + ":", ttl=600)


# -- Redis only ---------------------------------------------------------------------------


async def test_keys_live_under_the_prefix(prefix: str) -> None:
    backend = RedisBackend(REDIS_URL, prefix=prefix)
    raw = aioredis.Redis.from_url(REDIS_URL)
    try:
        await backend.append(request("a", 0, 3, key="k", snap_at=2))
        keys = sorted(await raw.keys(prefix.replace("*", r"\*") + "*"))
        feed = ("feed", "feed:n")  # the store-wide change feed (see backends/redis/feed.py)
        # epoch: the store's identity marker (backends/redis/identity.py)
        keys_of = ("a:a", "agents", "epoch", *feed, "s:a")
        assert keys == [f"{prefix}{k}".encode() for k in keys_of]
        assert await backend.delete_agent("a")
        # the agent's keys are gone; the feed outlives agents (trim_feed shortens it); the
        # delete's receipt (what makes a retry after a lost reply exact) expires
        left = sorted(await raw.keys(prefix + "*"))
        receipts = [k for k in left if k.startswith(f"{prefix}d:".encode())]
        # the agent index outlives its agents: its proof entry shows it is whole (identity.py)
        kept = [f"{prefix}{k}".encode() for k in ("agents", "epoch", *feed)]
        assert [k for k in left if k not in receipts] == kept
        assert len(receipts) == 1 and 0 < await raw.pttl(receipts[0]) <= 60_000
    finally:
        await raw.aclose()
        await backend.close()


async def test_ttl_expires_idle_agents_and_list_forgets_them(prefix: str) -> None:
    backend = RedisBackend(REDIS_URL, prefix=prefix, ttl=0.3)
    try:
        await backend.append(request("idle", 0, 2, snap_at=1))
        await backend.append(request("busy", 0))
        await backend.set_ttl("busy", None)  # per-agent override: never expires
        await asyncio.sleep(0.5)
        assert await backend.head("idle") == 0
        assert await backend.latest_snapshot("idle") is None
        assert [i.agent_id for i in await backend.list_agents()] == ["busy"]
        assert await backend.count_agents() == 1
        assert await backend.head("busy") == 1
    finally:
        await backend.close()


async def test_reads_refresh_the_ttl(prefix: str) -> None:
    """A read puts the agent's TTL back to the full ``ttl``. Checked against the key's
    remaining time on the server, with bounds from this process's own clock, so a slow
    machine can only make the check weaker, never make it fail."""
    ttl_ms = 4000
    backend = RedisBackend(REDIS_URL, prefix=prefix, ttl=ttl_ms / 1000)
    raw = aioredis.Redis.from_url(REDIS_URL)
    key = f"{prefix}a:a"
    try:
        await backend.append(request("a", 0))
        for _ in range(3):
            # wait until the key has visibly aged (a condition on the server's clock)
            while True:
                aged = await raw.pttl(key)
                assert aged > 0, "expired: the previous read did not refresh the TTL"
                if aged < ttl_ms - 300:
                    break
                await asyncio.sleep(0.02)
            started = time.monotonic()
            assert len(await backend.read("a")) == 1  # touches the agent
            left = await raw.pttl(key)
            since = (time.monotonic() - started) * 1000
            # refreshed: at least the full TTL minus the time the read and check took
            assert left >= ttl_ms - since - 5, (left, since, aged)
        assert await backend.head("a") == 1
    finally:
        await raw.aclose()
        await backend.close()


async def test_a_ttl_never_expires_the_store_s_own_streams(prefix: str) -> None:
    """``ttl=`` expires idle *agents*; the store's own streams (the audit log) are kept.
    They expired with the agents: a governed store on ``redis://...?ttl=N`` lost its
    whole audit log N seconds after the last write, and ``audit verify`` then said
    "0 entries, ok". Checked on the keys' expiry on the server (no waiting for it),
    on every path that writes or touches a stream, and a log an older version left
    with an expiry loses it at its next write."""
    from statekeeper.arguments import AUDIT_STREAM, INTERNAL_PREFIX
    from statekeeper.governance import Audit, AuditLog
    from statekeeper.security import Keyring, generate_key

    keyring = Keyring({"k1": generate_key()})
    backend = RedisBackend(REDIS_URL, prefix=prefix, ttl=600)
    store = StateStore(backend, keyring=keyring, principal="ops", audit=Audit())
    raw = aioredis.Redis.from_url(REDIS_URL)
    log_hash, log_snapshots = backend._keys(AUDIT_STREAM)
    try:
        await store.save("acme/a", {"n": 1})  # the save and its entry: one script
        assert 0 < await raw.pttl(backend._keys("acme/a")[0]) <= 600_000  # the agent expires
        assert await raw.pttl(log_hash) == -1  # the log does not
        await raw.pexpire(log_hash, 600_000)  # as an older version left it
        await store.save("acme/a", {"n": 2})
        assert await raw.pttl(log_hash) == -1
        other = INTERNAL_PREFIX + "test/x"  # any of the store's own streams
        await backend.append(request(other, 0, snap_at=1))  # a plain append (entry first)
        assert await raw.pttl(backend._keys(other)[0]) == -1
        assert await raw.pttl(backend._keys(other)[1]) == -1
        await raw.pexpire(log_hash, 600_000)
        assert await backend.read(AUDIT_STREAM)  # a read touches: it keeps no expiry
        assert await raw.pttl(log_hash) == -1
        assert await raw.pttl(log_snapshots) in (-1, -2)  # none, or no such key
        assert (await AuditLog(backend, keyring).verify()).entries == 2
    finally:
        await raw.aclose()
        await store.close()


async def test_batch_is_one_round_trip(prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = RedisBackend(REDIS_URL, prefix=prefix)
    try:
        await backend.append(request("warm", 0))  # load the script
        sent = 0
        real = backend._client.pipeline

        def counting(*args: object, **kwargs: object) -> object:
            nonlocal sent
            sent += 1
            return real(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(backend._client, "pipeline", counting)
        results = await backend.append_batch([request(f"g{i}", 0) for i in range(100)])
        assert all(isinstance(r, AppendResult) for r in results)
        assert sent == 1
    finally:
        await backend.close()


async def test_url_options(prefix: str) -> None:
    backend = open_backend(f"{REDIS_URL}?prefix={prefix}&ttl=60&max_connections=4")
    assert isinstance(backend, RedisBackend)
    try:
        assert backend.prefix == prefix and backend.ttl == 60
        await backend.append(request("a", 0))
        assert await backend.head("a") == 1
    finally:
        await backend.close()
    with pytest.raises(ConfigurationError):
        RedisBackend.from_url(f"{REDIS_URL}?ttl=soon")


async def test_store_on_redis(prefix: str) -> None:
    async with StateStore(RedisBackend(REDIS_URL, prefix=prefix), snapshot_every=3) as store:
        for i in range(10):
            await store.save("agent", {"step": i}, fsm_state="running")
        assert (await store.load("agent")).data == {"step": 9}
        assert (await store.load("agent", at_seq=4)).data == {"step": 3}
        assert (await store.verify()).ok


@pytest.mark.parametrize("keep", [0, 5, 13])
async def test_an_event_blob_cut_short_is_an_integrity_error_naming_its_seq(
    prefix: str, keep: int
) -> None:
    """Damage inside the engine's own framing is reported like any other damage."""
    from statekeeper.errors import IntegrityError

    async with StateStore(RedisBackend(REDIS_URL, prefix=prefix), witness=False) as store:
        for i in range(4):
            await store.save("agent", {"step": i})
    raw = aioredis.Redis.from_url(REDIS_URL)
    try:
        field = b"e:3"
        blob = await raw.hget(f"{prefix}a:agent", field)
        assert blob is not None
        await raw.hset(f"{prefix}a:agent", field, blob[:keep])
    finally:
        await raw.aclose()
    async with StateStore(RedisBackend(REDIS_URL, prefix=prefix), witness=False) as store:
        with pytest.raises(IntegrityError) as caught:
            await store.load("agent")
        assert caught.value.seq == 3 and caught.value.agent_id == "agent"
        report = await store.verify()
    assert [(p.agent_id, p.seq) for p in report.problems][:1] == [("agent", 3)]


@pytest.mark.slow
async def test_a_dead_server_is_a_typed_error_and_a_restart_is_survived() -> None:
    with private_redis() as server:
        backend = RedisBackend(server.url, prefix="x:", retry_timeout=5)
        try:
            await backend.append(request("a", 0, 2, key="k1"))
            fast = RedisBackend(server.url, prefix="x:", retry_timeout=0)
            assert await fast.head("a") == 2  # it has reached the server once
            server.kill()
            never = RedisBackend(server.url, prefix="x:")
            try:  # never reached: cannot connect at all, at once, with the reason
                with pytest.raises(BackendUnavailable, match="Connect"):
                    await never.append(request("b", 0))
            finally:
                await never.close()
            try:  # lost a connection that worked: a retried (here: at once) BackendError
                with pytest.raises(BackendError):
                    await fast.head("a")
                with pytest.raises(BackendError) as info:
                    await fast.append(request("b", 0))
                assert info.value.maybe_applied is True
                assert (await fast.health()).ok is False
            finally:
                await fast.close()
            # the server comes back (empty: no persistence) while a write is retrying: the
            # reconnect is survived, and the loss of "a" is an error, not a fresh store
            restart = asyncio.get_running_loop().call_later(0.3, server.start)
            with pytest.raises(StoreLost):
                await backend.append(request("b", 0, key="kb"))
            restart.cancel()
            with pytest.raises(StoreLost):
                await backend.head("a")
        finally:
            await backend.close()
        again = RedisBackend(server.url, prefix="x:")  # opened again: what it holds now
        try:
            assert await again.append(request("b", 0, key="kb")) == AppendResult("b", 1, 1)
            assert await again.head("a") == 0
            assert (await again.health()).ok is True
        finally:
            await again.close()


@pytest.mark.parametrize("landed", [True, False], ids=["applied", "not-applied"])
async def test_an_append_whose_reply_is_lost_is_settled_exactly_once(
    prefix: str, monkeypatch: pytest.MonkeyPatch, landed: bool
) -> None:
    from redis.exceptions import ConnectionError as RedisConnectionError

    backend = RedisBackend(REDIS_URL, prefix=prefix, retry_timeout=5)
    try:
        await backend.append(request("a", 0))
        real = backend._append_script
        calls = 0

        async def flaky(**kwargs: object) -> object:
            nonlocal calls
            calls += 1
            if calls == 1:
                if landed:
                    await real(**kwargs)  # type: ignore[arg-type]
                raise RedisConnectionError("Connection closed by server.")
            return await real(**kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(backend, "_append_script", flaky)
        event = RawEvent(2, "patch", 2.0, b"mine", b"c")
        result = await backend.append(AppendRequest("a", 1, (event,)))
        assert result == AppendResult("a", 2, 2)
        assert calls == (1 if landed else 2)
        assert [e.payload for e in await backend.read("a")] == [b"payload-1", b"mine"]
    finally:
        await backend.close()


def _flaky_script(backend: RedisBackend, name: str, landed: bool) -> list[int]:
    """Make the script attribute ``name`` lose its first reply (after running it, when
    ``landed``); the list counts its calls."""
    from redis.exceptions import ConnectionError as RedisConnectionError

    real = getattr(backend, name)
    calls = [0]

    async def flaky(**kwargs: object) -> object:
        calls[0] += 1
        if calls[0] == 1:
            if landed:
                await real(**kwargs)
            raise RedisConnectionError("Connection closed by server.")
        return await real(**kwargs)

    setattr(backend, name, flaky)
    return calls


@pytest.mark.parametrize("landed", [True, False], ids=["applied", "not-applied"])
async def test_a_compacted_stream_whose_reply_is_lost_is_settled_exactly_once(
    prefix: str, landed: bool
) -> None:
    """A restore's ``append_from_base`` whose connection dies around the script: the
    stream is written once, and the retry does not meet its own stream as a conflict."""
    from statekeeper.testing import snapshot

    backend = RedisBackend(REDIS_URL, prefix=prefix, retry_timeout=5)
    try:
        calls = _flaky_script(backend, "_from_base_script", landed)
        made = await backend.append_from_base(request("a", 3, 2, key="k"), snapshot(3))
        assert (made.first_seq, made.last_seq) == (4, 5)
        assert calls == [1 if landed else 2]  # applied: found by looking, not re-sent
        assert [e.seq for e in await backend.read("a")] == [4, 5]
        assert await backend.latest_snapshot("a") == snapshot(3)
        assert await backend.lookup_key("a", "k") == AppendResult("a", 4, 5, True)
    finally:
        await backend.close()


@pytest.mark.parametrize("landed", [True, False], ids=["applied", "not-applied"])
async def test_appends_together_whose_reply_is_lost_are_settled_exactly_once(
    prefix: str, landed: bool
) -> None:
    """``append_together`` (an audited write and its entry) whose reply is lost: the
    script ran whole or not at all, so looking at the first stream settles all of them;
    nothing is written twice, nothing reported lost."""
    from statekeeper.records import StreamChange

    backend = RedisBackend(REDIS_URL, prefix=prefix, retry_timeout=5)
    try:
        await backend.append(request("gone", 0))
        calls = _flaky_script(backend, "_together_script", landed)
        results = await backend.append_together(
            [request("log", 0), request("a", 0, 2)], [StreamChange("gone", delete_at=1)]
        )
        assert results == [AppendResult("log", 1, 1), AppendResult("a", 1, 2)]
        assert calls == [1 if landed else 2]
        assert [e.seq for e in await backend.read("a")] == [1, 2]
        assert [e.seq for e in await backend.read("log")] == [1]
        assert await backend.head("gone") == 0
    finally:
        await backend.close()
