"""The store-level "encrypted" marker: a store opened without its key refuses writes
into a store marked encrypted even where the newest records are all in the clear.

The key guard used to decide on the 8 newest heads only: a store whose newest agents
were written in the clear (by a process that opened the store before it was
encrypted, or by an older version; or records rekeyed partially) took cleartext
writes from a store without a key. The marker is set by the first write of a store
with a key and by ``rekey``, and read once, at a store's first write. Engines that keep
markers: memory, SQLite, PostgreSQL (``sk_markers``, migration 9), Redis, S3 (an object
under ``<prefix>/m/``; the moto server: slow), tiered (its durable tier). PostgreSQL's
migration and row-level security: test_keyless_marker_postgres.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import KeyRequired
from statekeeper.security import Keyring, generate_key
from statekeeper.security.rekey import rekey_agent
from statekeeper.store.keyguard import ENCRYPTED, SAMPLE

from ..backends._services import fresh_url
from ._raw import Env, Raw, raw_env

KEY = generate_key()
MARKED = [
    "memory",
    "sqlite",
    "postgres",
    "redis",
    "tiered",
    pytest.param("s3", marks=pytest.mark.slow),
]


@pytest.fixture(params=MARKED)
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    if request.param == "s3":  # (no raw edits: only stores are opened here)
        with fresh_url("s3", tmp_path) as url:
            yield Env("s3", lambda: url, Raw())
        return
    with raw_env(request.param, tmp_path) as e:
        yield e


def _keyed(env: Env) -> StateStore:
    return env.open(keyring=Keyring({"k1": KEY}), witness=False)


async def test_cleartext_newest_heads_do_not_open_a_marked_store(env: Env) -> None:
    async with env.open(witness=False) as old:  # opened (and checked) before encryption
        await old.save("plain-0", {"n": 0})
        async with _keyed(env) as keyed:
            await keyed.save("secret", {"card": "4111"})  # marks the store
        for i in range(1, SAMPLE + 2):  # then the newest heads all in the clear
            await old.save(f"plain-{i}", {"n": i})
    async with env.open(witness=False) as keyless:
        with pytest.raises(KeyRequired):
            await keyless.save("leak", {"password": "hunter2"})
        assert await keyless.backend.read_marker(ENCRYPTED) is True
        with pytest.raises(KeyRequired):
            await keyless.save("plain-1", {"n": 99})
        assert await keyless.head("leak") == 0
        assert (await keyless.load("plain-1")).data == {"n": 1}  # reads go on


async def test_rekey_marks_a_store_it_encrypts(env: Env) -> None:
    async with env.open(witness=False) as plain:
        for i in range(SAMPLE + 2):
            await plain.save(f"a{i}", {"n": i})
        assert await plain.backend.read_marker(ENCRYPTED) is False
    async with _keyed(env) as keyed:
        await rekey_agent(keyed, "a0")  # partly: the newest heads stay in the clear
    async with env.open(witness=False) as keyless:
        with pytest.raises(KeyRequired):
            await keyless.save("a9", {"n": -1})
        assert await keyless.backend.read_marker(ENCRYPTED) is True


async def test_a_store_in_the_clear_stays_unmarked_and_writable(env: Env) -> None:
    async with env.open(witness=False) as plain:
        await plain.save("a", {"n": 1})
        assert await plain.backend.read_marker(ENCRYPTED) is False
    async with env.open(witness=False) as again:
        await again.save("a", {"n": 2})
        assert (await again.load("a")).data == {"n": 2}
