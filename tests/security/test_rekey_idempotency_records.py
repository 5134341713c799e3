"""``rekey`` re-records the idempotency records under the active key, so a retry of an
append made before a store was encrypted (or before a key rotation) is still one.

Before, rekey left them as they were: after the documented way to encrypt a plain
store (a key generated, configured, ``rekey``) the retry of ``append(...,
idempotency_key="charge-42")`` was stored a second time (its key was looked up only
in its keyed form), the records stayed in clear (docs/security.md: "the database
never holds an idempotency key in clear") and ``verify`` called each "forged or
damaged"; after a rotation k1 -> k2 and k1 retired, the same retry was stored again.
On every engine (``Backend.rename_keys``)."""

from __future__ import annotations

import contextlib
import importlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import IntegrityError
from statekeeper.security import Keyring, generate_key, key_usage, rekey
from statekeeper.store.idempotency import HMAC_PREFIX

from ..backends._services import fresh_url

K1, K2 = generate_key(), generate_key()
OLD = Keyring({"k1": K1})
BOTH = Keyring({"k2": K2, "k1": K1}, active="k2")
NEW = Keyring({"k2": K2})

ENGINES = ["memory", "sqlite", "postgresql", "redis", "s3", "tiered"]


@pytest.fixture(params=ENGINES)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_url(request.param, tmp_path) as made:
        yield made


async def _charges(store: StateStore) -> list[int]:
    return [e.info["amount"] async for e in store.history("pay") if e.type == "charge"]


async def _charge(store: StateStore, key: str = "charge-42") -> None:
    await store.append("pay", "charge", {"amount": 100}, idempotency_key=key)


async def _stored(store: StateStore) -> list[str]:
    return sorted(k for k, _, _ in await store.backend.idempotency_keys("pay"))


async def test_a_retry_after_a_plain_store_is_encrypted_is_not_stored_again(url: str) -> None:
    async with StateStore(url) as plain:
        await plain.save("pay", {"n": 0})
        await _charge(plain)
        await _charge(plain)  # a retry: one charge
        await _charge(plain, "charge-43")
        assert await _charges(plain) == [100, 100]

        keyed = StateStore(plain.backend, keyring=OLD)  # statekeeper keys generate
        stats = await rekey(keyed)

        after = StateStore(plain.backend, keyring=OLD)  # a process opened after rekey
        await _charge(after)  # (this was stored again: [100, 100, 100])
        await _charge(after, "charge-43")
        assert await _charges(after) == [100, 100]
        assert (stats.keys, stats.keys_left) == (2, 0)
        stored = await _stored(plain)
        assert len(stored) == 2 and all(k.startswith(HMAC_PREFIX + "k1:") for k in stored)
        assert not any("charge-4" in k for k in stored)  # never in clear
        report = await after.verify()
        assert report.ok, report.problems  # (each record was "forged or damaged")
        assert (await rekey(after)).keys == 0  # a rerun: nothing left to do


async def test_a_retry_after_a_key_rotation_is_not_stored_again(url: str) -> None:
    async with StateStore(url, keyring=OLD) as store:
        await store.save("pay", {"n": 0})
        await _charge(store)
        rotating = StateStore(store.backend, keyring=BOTH)
        await _charge(rotating)  # (k1 still in the keyring: found under it)
        assert await _charges(rotating) == [100]
        await rekey(rotating)
        assert "k1" not in await key_usage(rotating)

        after = StateStore(store.backend, keyring=NEW)  # k1 retired
        await _charge(after)  # (this was stored again: its record was under k1)
        assert await _charges(after) == [100]
        stored = await _stored(store)
        assert len(stored) == 1 and stored[0].startswith(HMAC_PREFIX + "k2:"), stored
        report = await after.verify()
        assert report.ok, report.problems


async def test_a_record_that_does_not_match_its_event_is_not_laundered(tmp_path: Path) -> None:
    """A record in clear naming another key than its event carries (anyone could write
    one into the plain store) is refused by rekey, not re-recorded as authentic."""
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}") as plain:
        await plain.save("pay", {"n": 0})
        await _charge(plain)
        with contextlib.closing(sqlite3.connect(tmp_path / "s.db")) as conn, conn:
            conn.execute("UPDATE sk_idempotency SET key = 'forged' WHERE agent_id = 'pay'")
        keyed = StateStore(plain.backend, keyring=OLD)
        with pytest.raises(IntegrityError, match="does not match its event"):
            await rekey(keyed)
        assert await _stored(plain) == ["forged"]  # nothing of it written


async def test_s3_killed_between_the_new_record_and_the_old_ones_removal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S3 has no transaction over objects: the new record is written first, the old
    one removed after; a rotation's rekey stopped in between leaves both, a retry
    meanwhile is one, and the rerun finishes it."""
    with fresh_url("s3", tmp_path) as s3:
        async with StateStore(s3, keyring=OLD) as store:
            await store.save("pay", {"n": 0})
            await _charge(store)
            await _charge(store, "charge-43")
            backend = store.backend

            def killed(*args: object) -> None:
                raise KeyboardInterrupt  # (as a SIGKILL: nothing after it runs)

            rotating = StateStore(backend, keyring=BOTH)
            with monkeypatch.context() as patch:
                patch.setattr(backend, "_delete_keys", killed)
                with pytest.raises(KeyboardInterrupt):
                    await rekey(rotating)
            forms = [k.split(":")[1] for k in await _stored(store)]
            assert sorted(forms) == ["k1", "k1", "k2"]  # charge-42's in both forms
            await _charge(rotating)
            await _charge(rotating, "charge-43")
            assert await _charges(rotating) == [100, 100]
            await rekey(rotating)  # the rerun finishes it
            after = StateStore(backend, keyring=NEW)  # k1 retired
            await _charge(after)
            await _charge(after, "charge-43")
            assert await _charges(after) == [100, 100]
            stored = await _stored(store)
            assert len(stored) == 2 and all(k.startswith(HMAC_PREFIX + "k2:") for k in stored)
            assert (await after.verify()).ok


@pytest.mark.parametrize("engine", ["memory", "sqlite"])
async def test_a_record_whose_events_were_compacted_away(tmp_path: Path, engine: str) -> None:
    """A record retention kept after removing its events: in clear, it is the key and
    is re-recorded (a retry is one); under a key being retired, its key is stored
    nowhere else: it stays, counted in ``keys_left``."""
    from statekeeper.governance.retention import apply_retention
    from statekeeper.governance.retention_policy import RetentionPolicy

    policy = RetentionPolicy.parse("t0 keep_last=3\n")
    with fresh_url(engine, tmp_path) as made:
        async with StateStore(made, snapshot_every=3) as plain:
            await plain.save("t0/pay", {"n": 0}, idempotency_key="charge-1")
            for n in range(1, 8):
                await plain.save("t0/pay", {"n": n})
            await apply_retention(plain, policy)
            assert await plain.backend.stream_bases(["t0/pay"]) == [5]
            keyed = StateStore(plain.backend, keyring=OLD, snapshot_every=3)
            stats = await rekey(keyed)
            assert (stats.keys, stats.keys_left) == (1, 0)
            again = await keyed.save("t0/pay", {"n": 0}, idempotency_key="charge-1")
            assert (again.duplicate, again.last_seq) == (True, 1)
            assert (await keyed.load("t0/pay")).seq == 8  # not stored again
            assert (await keyed.verify()).ok
            stats = await rekey(StateStore(plain.backend, keyring=BOTH, snapshot_every=3))
            assert (stats.keys, stats.keys_left) == (0, 1)


async def test_rekey_heals_a_store_rotated_by_an_earlier_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store whose rotation ran before rekey re-recorded anything (k1 retired since,
    its records still under k1): a rekey with the new key alone re-records them by the
    key their events carry, and a retry is one again."""
    rekey_module = importlib.import_module("statekeeper.security.rekey")

    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=OLD) as store:
        await store.save("pay", {"n": 0})
        await _charge(store)

        async def nothing(*args: object) -> tuple[int, int]:
            return 0, 0

        with monkeypatch.context() as patch:  # (the earlier version's rekey)
            patch.setattr(rekey_module, "rekey_keys", nothing)
            await rekey(StateStore(store.backend, keyring=BOTH))
        assert (await _stored(store))[0].startswith(HMAC_PREFIX + "k1:")
        after = StateStore(store.backend, keyring=NEW)  # k1 retired
        assert (await rekey(after)).keys == 1
        await _charge(after)
        assert await _charges(after) == [100]
        assert (await after.verify()).ok
