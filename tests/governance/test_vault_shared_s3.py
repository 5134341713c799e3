"""An S3 store in a key vault shared with other stores: the S3 engine kept no store id
(``Backend.feed_id`` None), so its agents were sealed with the id-only data key of the
vault — ``forget user-1`` in an S3 store shredded ``user-1`` in every store of the vault,
and a forget in any other store destroyed the S3 store's ``user-1`` (AgentForgotten,
exit 0). The S3 engine now keeps a store id (``<prefix>/statekeeper.id``, made by a
conditional create), the key family of its agents (:mod:`statekeeper.codec.keyscope`).
An S3 store written before (``tests/data/s3-store-by-main.*``: written by main's code,
its agents' keys id-only entries of the vault) keeps working."""

from __future__ import annotations

import asyncio
import base64
import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.s3 import S3Backend
from statekeeper.codec.datakeys import SqliteKeyVault
from statekeeper.codec.keys import Keyring
from statekeeper.errors import AgentForgotten, CapabilityUnsupported
from statekeeper.governance.shredding import forget

from ..backends._services import drop_bucket, fresh_url, namespace, s3_url

KEY = bytes(range(32))
DATA = Path(__file__).parents[1] / "data"

pytestmark = pytest.mark.slow  # (moto S3)


@contextmanager
def _bucket(tmp_path: Path) -> Iterator[str]:
    bucket = namespace(tmp_path).replace("_", "-")
    try:
        yield bucket
    finally:
        drop_bucket(bucket)


def _at(url: str, prefix: str) -> str:
    """``url`` (a store under ``/agents``) with another prefix in the same bucket."""
    return url.replace("/agents?", f"/{prefix}?", 1)


@contextmanager
def _pair(kind: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(an S3 store, another store): SQLite, or S3 on another prefix of the bucket."""
    with fresh_url("s3", tmp_path) as s3:
        other = f"sqlite:///{tmp_path / 'support.db'}" if kind == "sqlite" else _at(s3, "support")
        yield _at(s3, "billing"), other


@pytest.mark.parametrize("kind", ["sqlite", "s3"])
async def test_a_forget_in_either_store_leaves_the_other_stores_same_id(
    tmp_path: Path, kind: str
) -> None:
    keys = Keyring({"k1": KEY}, data_keys=SqliteKeyVault(tmp_path / "vault.db"))
    with _pair(kind, tmp_path) as (s3_url_, other_url):
        async with (
            StateStore(s3_url_, keyring=keys) as s3,
            StateStore(other_url, keyring=keys) as other,
        ):
            for name in ("user-1", "user-2"):
                await s3.save(name, {"email": f"{name}@s3"})
                await other.save(name, {"email": f"{name}@other"})
            assert (await forget(s3, "user-1")).destroyed  # in the S3 store
            assert (await forget(other, "user-2")).destroyed  # in the other store
        again = Keyring({"k1": KEY}, data_keys=tmp_path / "vault.db")
        async with (
            StateStore(s3_url_, keyring=again) as s3,
            StateStore(other_url, keyring=again) as other,
        ):
            with pytest.raises(AgentForgotten):
                await s3.load("user-1")
            with pytest.raises(AgentForgotten):
                await other.load("user-2")
            # was: AgentForgotten for both (one id-only key for the S3 store's agents)
            assert (await other.load("user-1")).data == {"email": "user-1@other"}
            assert (await s3.load("user-2")).data == {"email": "user-2@s3"}
            await s3.save("user-2", {"email": "user-2@s3", "n": 2})
            assert (await s3.verify()).ok


async def test_the_store_id_is_kept_and_agreed_on_by_two_first_opens(tmp_path: Path) -> None:
    with _bucket(tmp_path) as bucket:
        url = s3_url(bucket)
        a, b = S3Backend.from_url(url), S3Backend.from_url(url)
        try:
            ids = await asyncio.gather(a.feed_id(), b.feed_id())
            assert ids[0] == ids[1] and len(str(ids[0])) == 16
            int(str(ids[0]), 16)
        finally:
            await a.close()
            await b.close()
        reopened = S3Backend.from_url(url)
        try:
            assert await reopened.feed_id() == ids[0]
            # a store id, not a change feed: S3 keeps none
            with pytest.raises(CapabilityUnsupported):
                await reopened.feed_bounds()
            renewed = await reopened.renew_feed_id()
            assert renewed not in (None, ids[0]) and await reopened.feed_id() == renewed
        finally:
            await reopened.close()
        other = S3Backend.from_url(_at(url, "elsewhere"))  # another prefix: another store
        try:
            assert await other.feed_id() not in (None, ids[0], renewed)
        finally:
            await other.close()


async def test_a_process_losing_the_create_takes_the_winners_id(tmp_path: Path) -> None:
    # two processes opening a new store: the loser read no id, then the winner made one
    # (its conditional create); the loser's create is refused and it reads the winner's
    with _bucket(tmp_path) as bucket:
        url = s3_url(bucket)
        winner, loser = S3Backend.from_url(url), S3Backend.from_url(url)
        try:
            await loser.health()
            real = loser._object
            made: list[str] = []

            def first_read_finds_none(call: Any, key: str) -> Any:
                if key == loser._id_key and not made:
                    made.append("0123456789abcdef")
                    assert winner._put_new(winner._id_key, made[0].encode())
                    return None  # (read before the winner's create landed)
                return real(call, key)

            loser._object = first_read_finds_none  # type: ignore[method-assign]
            assert await loser.feed_id() == "0123456789abcdef" == made[0]
            assert await winner.feed_id() == made[0]
        finally:
            await winner.close()
            await loser.close()


def _upload_by_main(url: str) -> None:
    import boto3  # type: ignore[import-untyped]

    from ..backends._services import moto_endpoint, s3_credentials

    bucket = url.split("://", 1)[1].split("/", 1)[0]
    s3 = boto3.client("s3", endpoint_url=moto_endpoint(), **s3_credentials())
    s3.create_bucket(Bucket=bucket)
    for obj in json.loads((DATA / "s3-store-by-main.json").read_text(encoding="utf-8")):
        s3.put_object(
            Bucket=bucket,
            Key=obj["key"],
            Body=base64.b64decode(obj["body"]),
            Metadata=obj["metadata"],
        )


async def test_an_s3_store_written_before_store_ids_keeps_working(tmp_path: Path) -> None:
    # written by main's code: user-1 and user-2, their data keys id-only vault entries
    with closing(sqlite3.connect(tmp_path / "vault.db")) as db:
        db.executescript((DATA / "s3-store-by-main.vault.sql").read_text(encoding="utf-8"))
    keys = Keyring({"k1": KEY}, data_keys=tmp_path / "vault.db")
    with fresh_url("s3", tmp_path) as url:
        _upload_by_main(url)
        async with StateStore(url, keyring=keys) as store:
            assert (await store.load("user-1")).data == {"email": "alice@s3"}
            assert (await store.load("user-2")).data == {"email": "dave@s3"}
            await store.save("user-1", {"email": "alice@s3", "n": 2})  # its own key now
            await store.save("user-3", {"email": "erin@s3"})
            assert (await store.verify()).ok
            family = await store.backend.feed_id()
            result = await forget(store, "user-1")
            # the legacy key is destroyed with the store's own: the store used it
            assert result.scopes == ("legacy", family)
        async with StateStore(url, keyring=keys) as store:
            assert await store.backend.feed_id() == family
            with pytest.raises(AgentForgotten):
                await store.load("user-1")
            assert (await store.load("user-2")).data == {"email": "dave@s3"}
            assert (await store.load("user-3")).data == {"email": "erin@s3"}
