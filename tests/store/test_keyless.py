"""A store opened without its key never writes in the clear into an encrypted store
(on every engine: memory, SQLite, PostgreSQL, Redis, tiered).

Opened without a key, a store used to encode a new agent's records in the clear:
plaintext in a store the user believes encrypted, without a word. Now every write
raises :class:`KeyRequired` before anything is stored, and reads behave as before.
The check reads the store's newest records (no marker), so a store written before it
existed (encrypted records only, as here) is protected the same way.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import ConfigurationError, DecryptionError, KeyRequired
from statekeeper.security import Keyring, generate_key

from ._raw import ENGINES, Env, raw_env

KEY = generate_key()


@pytest.fixture(params=ENGINES)
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    with raw_env(request.param, tmp_path) as e:
        yield e


def _keyed(env: Env) -> StateStore:
    return env.open(keyring=Keyring({"k1": KEY}))


async def test_a_keyless_write_into_an_encrypted_store_is_refused(env: Env) -> None:
    async with _keyed(env) as store:
        await store.save("secret-agent", {"card": "4111 1111 1111 1111"})
    before = env.raw.dump()

    async with env.open() as keyless:
        with pytest.raises(KeyRequired) as caught:
            await keyless.save("new-agent", {"password": "hunter2"})
        with pytest.raises(KeyRequired):
            await keyless.create("other-agent", {"password": "hunter2"})
        with pytest.raises(KeyRequired):
            await keyless.append("secret-agent", "note", {"n": 1}, ops=[])
        with pytest.raises(KeyRequired):
            await keyless.snapshot("secret-agent")
        # the agent API (which creates the agent) and a second try: refused too
        with pytest.raises(KeyRequired):
            await keyless.agent("third-agent")
        with pytest.raises(KeyRequired):
            await keyless.save("new-agent", {"password": "hunter2"})
        # reads are as they were: the encrypted agent needs the key
        with pytest.raises(DecryptionError):
            await keyless.get("secret-agent")
        assert [a.agent_id for a in await keyless.list_agents()] == ["secret-agent"]

    assert env.raw.dump() == before  # nothing was written
    assert isinstance(caught.value, ConfigurationError)
    assert "opened without a key" in str(caught.value)
    assert KEY not in str(caught.value)

    async with _keyed(env) as store:  # with the key, writes go on
        await store.save("new-agent", {"password": "hunter2"})
        assert (await store.get("new-agent")).data == {"password": "hunter2"}  # type: ignore[union-attr]


async def test_a_store_in_the_clear_still_takes_keyless_writes(env: Env) -> None:
    async with env.open() as store:
        await store.save("a-1", {"n": 1})
    async with env.open() as store:
        await store.save("a-2", {"n": 2})
        await store.save("a-1", {"n": 3})
        assert (await store.get("a-1")).data == {"n": 3}  # type: ignore[union-attr]


# written by main (before this check): agents secret-1 and secret-2 encrypted with
# FIXTURE_KEY, then "leaked" saved by a store opened without the key: in the clear
MAIN_STORE = Path(__file__).parents[1] / "data" / "sqlite-encrypted-store-by-main.sql"
FIXTURE_KEY = "c3RhdGVrZWVwZXIta2V5bGVzcy1maXh0dXJlLWtleSE="


def _dump(path: Path) -> list[str]:
    """The file as SQL, but for what opening a schema-4 file migrates (the schema
    version, each idempotency record's time: compared without it, and the change
    feed's id a writable open gives a file that has none: docs/feed.md)."""
    with closing(sqlite3.connect(path)) as conn:
        lines = [
            line
            for line in conn.iterdump()
            if "sk_idempotency" not in line
            and "schema_version" not in line
            and not line.startswith("""INSERT INTO "sk_meta" VALUES('feed_id',""")
        ]
        keys = conn.execute(
            "SELECT agent_id, key, first_seq, last_seq FROM sk_idempotency ORDER BY 1, 2"
        )
        return lines + [repr(row) for row in keys]


async def test_a_store_written_by_main_is_protected_too(tmp_path: Path) -> None:
    path = tmp_path / "main.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(MAIN_STORE.read_text(encoding="utf-8"))
    before = _dump(path)

    async with StateStore(f"sqlite:///{path}", witness=False) as keyless:
        with pytest.raises(KeyRequired):
            await keyless.save("new-agent", {"password": "hunter2"})
        assert (await keyless.get("leaked")).data == {"password": "hunter2"}  # type: ignore[union-attr]
    assert _dump(path) == before  # (the file's header changes: the store opens it in WAL mode)

    ring = Keyring({"k1": FIXTURE_KEY})
    async with StateStore(f"sqlite:///{path}", keyring=ring, witness=False) as store:
        assert (await store.get("secret-1")).data == {"card": "4111"}  # type: ignore[union-attr]
        await store.save("new-agent", {"n": 1})
