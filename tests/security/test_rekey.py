"""Key rotation: rekey re-encrypts everything under the active key, online, resumable,
and never launders a damaged stream."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from statekeeper import ConfigurationError, IntegrityError, StateStore
from statekeeper.codec import Codec
from statekeeper.errors import KeyNotFound
from statekeeper.security import (
    Keyring,
    RekeyProgress,
    generate_key,
    key_usage,
    rekey,
    rekey_agent,
)

K1, K2 = generate_key(), generate_key()
OLD = Keyring({"k1": K1})
BOTH = Keyring({"k2": K2, "k1": K1}, active="k2")
NEW = Keyring({"k2": K2})


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'r.db'}"


async def _fill(url: str, keyring: Keyring | None, agents: int = 12, saves: int = 7) -> None:
    async with StateStore(url, keyring=keyring, snapshot_every=3) as store:
        for a in range(agents):
            for i in range(saves):
                await store.save(f"agent-{a:02d}", {"n": i, "log": [f"line {j}" for j in range(i)]})


def _file(url: str) -> bytes:
    return Path(url.removeprefix("sqlite:///")).read_bytes()


def _key_ids(url: str) -> set[str | None]:
    path = url.removeprefix("sqlite:///")
    with closing(sqlite3.connect(path)) as conn:
        payloads = [r[0] for r in conn.execute("SELECT payload FROM sk_events")]
        payloads += [r[0] for r in conn.execute("SELECT payload FROM sk_snapshots")]
    return {Codec.header(p).key_id for p in payloads}  # type: ignore[union-attr]


async def test_rotation_end_to_end(tmp_path: Path) -> None:
    url = _url(tmp_path)
    await _fill(url, OLD)
    async with StateStore(url, keyring=BOTH) as store:
        # before: old records still decrypt; new ones use k2
        assert (await store.load("agent-03")).data["n"] == 6
        await store.save("agent-03", {"n": 7})
        assert await key_usage(store) == {"k1": 12 * 9 + 11, "k2": 2}
        stats = await rekey(store)
        assert stats.agents == 12 and stats.skipped == 1
        assert stats.heads == 11  # agent-03's head was written under k2 already
        assert await key_usage(store) == {"k2": 12 * 9 + 13}
    assert _key_ids(url) == {"k2"}
    async with StateStore(url, keyring=NEW, cache_size=0) as store:  # k1 retired
        assert (await store.load("agent-03")).data == {"n": 7}
        assert (await store.verify()).ok
    async with StateStore(url, keyring=OLD) as store:  # and k1 alone no longer reads
        with pytest.raises(KeyNotFound) as info:
            await store.load("agent-00")
        assert info.value.key_id == "k2"


async def test_rekey_encrypts_a_plaintext_store(tmp_path: Path) -> None:
    url = _url(tmp_path)
    await _fill(url, None, agents=3)
    async with StateStore(url, keyring=OLD) as store:
        stats = await rekey(store)
        assert stats.events == 3 * 7 and stats.snapshots == 3 * 2
        assert (await store.verify()).ok
    assert _key_ids(url) == {"k1"}
    assert b"line 1" not in _file(url)


async def test_rekey_needs_a_key(tmp_path: Path) -> None:
    async with StateStore(_url(tmp_path)) as store:
        with pytest.raises(ConfigurationError):
            await rekey(store)


async def test_interrupted_rekey_resumes_where_it_stopped(tmp_path: Path) -> None:
    url = _url(tmp_path)
    progress = tmp_path / "rekey.json"
    await _fill(url, OLD)
    seen: list[str] = []

    def crash_after_five(agent_id: str, *_: object) -> None:
        seen.append(agent_id)
        if len(seen) == 5:
            raise KeyboardInterrupt  # ^C, or the process killed

    async with StateStore(url, keyring=BOTH) as store:
        with pytest.raises(KeyboardInterrupt):
            await rekey(store, progress_file=progress, on_agent=crash_after_five)
    saved = RekeyProgress.load(progress)
    assert saved is not None and saved.after == "agent-04" and not saved.done
    assert saved.target_key == "k2" and saved.stats.agents == 5
    async with StateStore(url, keyring=BOTH) as store:
        assert (await key_usage(store)).keys() == {"k1", "k2"}  # half done
        resumed: list[str] = []
        stats = await rekey(store, progress_file=progress, on_agent=lambda a, *_: resumed.append(a))
        assert resumed == [f"agent-{a:02d}" for a in range(5, 12)]  # finished agents skipped
        assert stats.agents == 7
        assert (await key_usage(store)).keys() == {"k2"}
    done = RekeyProgress.load(progress)
    assert done is not None and done.done and done.stats.agents == 12
    async with StateStore(url, keyring=NEW) as store:
        assert (await store.verify()).ok
        # a finished run starts over next time (and finds nothing to do)
        again = await rekey(store, progress_file=progress)
        assert again.agents == 12 and again.events == 0 and again.skipped > 0


async def test_a_crash_between_batches_leaves_a_valid_store(tmp_path: Path) -> None:
    url = _url(tmp_path)
    await _fill(url, OLD, agents=1, saves=40)
    async with StateStore(url, keyring=BOTH) as store:
        backend = store.backend
        real = backend.rewrite
        calls = 0

        async def rewrite_then_die(request: object) -> None:
            nonlocal calls
            calls += 1
            if calls == 2:
                raise KeyboardInterrupt
            await real(request)  # type: ignore[arg-type]

        backend.rewrite = rewrite_then_die  # type: ignore[method-assign]
        with pytest.raises(KeyboardInterrupt):
            await rekey_agent(store, "agent-00", batch=10)
        backend.rewrite = real  # type: ignore[method-assign]
        assert (await key_usage(store)).keys() == {"k1", "k2"}
        assert (await store.verify()).ok  # half-rekeyed is a valid store
        await rekey_agent(store, "agent-00", batch=10)
        assert (await key_usage(store)).keys() == {"k2"}


async def test_rekey_while_writers_keep_writing(tmp_path: Path) -> None:
    url = _url(tmp_path)
    await _fill(url, OLD, agents=4, saves=30)
    async with (
        StateStore(url, keyring=BOTH) as app,
        StateStore(url, keyring=BOTH) as admin,
    ):
        stop = asyncio.Event()

        async def writer(agent: str) -> int:
            n = 0
            while not stop.is_set():
                n += 1
                await app.save(agent, {"n": 1000 + n, "log": ["x"] * (n % 5)})
                if n % 3 == 0:
                    await app.snapshot(agent)  # snapshots appear under rekey too
                await asyncio.sleep(0.0005)
            return n

        tasks = [asyncio.create_task(writer(f"agent-{a:02d}")) for a in range(4)]
        await asyncio.sleep(0.05)
        stats = await rekey(admin, batch=7)
        stop.set()
        written = await asyncio.gather(*tasks)
        assert all(n > 0 for n in written)
        await rekey(admin)  # a second pass catches anything a racing writer left
    async with StateStore(url, keyring=NEW, cache_size=0) as store:
        report = await store.verify()
        assert report.ok, report.problems
        for a in range(4):
            assert (await store.load(f"agent-{a:02d}")).data["n"] == 1000 + written[a]
    assert stats.agents == 4


async def test_rekey_refuses_a_damaged_stream(tmp_path: Path) -> None:
    url = _url(tmp_path)
    await _fill(url, OLD, agents=2)
    with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn, conn:
        conn.execute("DELETE FROM sk_events WHERE agent_id = 'agent-01' AND seq > 5")
        conn.execute("UPDATE sk_agents SET head_seq = 5 WHERE agent_id = 'agent-01'")
    async with StateStore(url, keyring=BOTH) as store:
        await rekey_agent(store, "agent-00")
        with pytest.raises(IntegrityError):
            await rekey_agent(store, "agent-01")
        # the truncated stream was not re-authenticated: it still fails
        report = await store.verify(["agent-01"])
        assert not report.ok
        assert (await store.verify(["agent-00"])).ok
