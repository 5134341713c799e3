"""``backup(store, to, key)`` over an existing file or S3 object replaced it, even the
parent of incrementals: the chain then failed to restore. It is refused
(:class:`BackupError` naming the target) before anything is written, unless
``overwrite=True``. A restore error about S3 backups named the temporary files they
were downloaded to (``backup /tmp/tmpp4.../backup does not follow /tmp/tmpop.../backup``):
it names the URLs given."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import BackupError
from statekeeper.governance.backup import BackupKey, backup, restore


async def test_a_backup_file_is_not_replaced_unless_asked(tmp_path: Path) -> None:
    key = BackupKey(os.urandom(32))
    b1, b2 = tmp_path / "b1.skb", tmp_path / "b2.skb"
    async with StateStore(f"sqlite:///{tmp_path / 'a.db'}") as store:
        await store.save("x", {"n": 1})
        await backup(store, b1, key)
        await store.save("x", {"n": 2})
        await backup(store, b2, key, since=b1)
        before = b1.read_bytes()
        with pytest.raises(BackupError, match=r"b1\.skb already exists.*overwrite"):
            await backup(store, b1, key)
        assert b1.read_bytes() == before
        left = sorted(p.name for p in tmp_path.iterdir() if "skb" in p.name)  # noqa: ASYNC240
        assert left == [
            "b1.skb",
            "b2.skb",
        ]  # no temporary file left
        async with StateStore(f"sqlite:///{tmp_path / 'r.db'}") as target:
            await restore(target, [b1, b2], key)
            assert (await target.load("x")).data == {"n": 2}
        await backup(store, b1, key, overwrite=True)
        assert b1.read_bytes() != before


def _s3(bucket: str) -> str:
    from ..backends._services import moto_endpoint

    endpoint = moto_endpoint()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    import boto3  # type: ignore[import-untyped]

    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    return f"?endpoint_url={endpoint}&region=us-east-1"


@pytest.mark.slow
async def test_an_s3_backup_is_not_replaced_unless_asked(tmp_path: Path) -> None:
    query = _s3("nooverwrite")
    b1, b2 = f"s3://nooverwrite/b1.skb{query}", f"s3://nooverwrite/b2.skb{query}"
    key = BackupKey(os.urandom(32))
    async with StateStore(f"sqlite:///{tmp_path / 'a.db'}") as store:
        await store.save("x", {"n": 1})
        first = await backup(store, b1, key)
        await store.save("x", {"n": 2})
        await backup(store, b2, key, since=b1)
        with pytest.raises(BackupError, match=r"s3://nooverwrite/b1\.skb already exists"):
            await backup(store, b1, key)
        async with StateStore(f"sqlite:///{tmp_path / 'r.db'}") as target:
            result = await restore(target, [b1, b2], key)
            assert result.backup_ids[0] == first.backup_id  # b1 untouched
        await backup(store, b1, key, overwrite=True)
        # b2's parent is gone now: the error names the URLs given, no temporary file
        async with StateStore(f"sqlite:///{tmp_path / 'r2.db'}") as target:
            with pytest.raises(BackupError) as caught:
                await restore(target, [b1, b2], key)
        message = str(caught.value)
        assert "does not follow" in message
        assert "s3://nooverwrite/b2.skb" in message and "s3://nooverwrite/b1.skb" in message
        assert "/tmp" not in message and "tmp" not in message.replace("s3://", "")


@pytest.mark.slow
@pytest.mark.parametrize("size", [1000, 9 * 1024 * 1024], ids=["one-put", "multipart"])
def test_an_s3_backup_appearing_after_the_check_is_not_overwritten(
    monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    """The existence check and the upload were two requests: a backup written by
    someone else between them was silently replaced. The upload itself is conditional
    (S3's ``If-None-Match: *``), for one PUT and for a multipart upload."""
    import boto3

    from statekeeper.governance.backup.location import Location

    from ..backends._services import moto_endpoint

    bucket = f"race{size}"
    query = _s3(bucket)
    client = boto3.client("s3", endpoint_url=moto_endpoint(), region_name="us-east-1")
    theirs = b"their backup"
    checked = Location.check_free

    def check_then_race(self: Location) -> None:
        checked(self)  # nothing there yet: passes
        client.put_object(Bucket=bucket, Key="b.skb", Body=theirs)

    monkeypatch.setattr(Location, "check_free", check_then_race)
    where = Location(f"s3://{bucket}/b.skb{query}")
    taken = rf"s3://{bucket}/b\.skb already exists.*overwrite"
    with pytest.raises(BackupError, match=taken), where.writing() as out:
        out.write(os.urandom(size))
    assert client.get_object(Bucket=bucket, Key="b.skb")["Body"].read() == theirs
    assert not client.list_multipart_uploads(Bucket=bucket).get("Uploads")  # none left
    # asked to: replaced
    with Location(f"s3://{bucket}/b.skb{query}", overwrite=True).writing() as out:
        out.write(b"ours")
    assert client.get_object(Bucket=bucket, Key="b.skb")["Body"].read() == b"ours"
