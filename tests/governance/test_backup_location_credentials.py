"""A backup location with credentials in its URL (``s3://KEY:SECRET@bucket/key``)
took ``KEY:SECRET@bucket`` for the bucket's name and showed it in every error
(``cannot look up backup s3://KEY:SECRET@bucket/k: ... Invalid bucket name
"KEY:SECRET@bucket"``), from ``backup``, ``restore`` and the CLI alike; a location
without a key showed its query (``?aws_secret_access_key=...``) whole. Both are
ConfigurationErrors naming neither, as the S3 store URL's are."""

from __future__ import annotations

import asyncio
import os
import traceback
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import ConfigurationError
from statekeeper.governance.backup import BackupKey, backup, restore

KEY_ID, SECRET = "AKIAq9LOCATIONx", "s3cr3t-Vn28Qd-location"


def _shown(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)) + repr(exc.args)


@pytest.mark.parametrize(
    "location",
    [
        f"s3://{KEY_ID}:{SECRET}@bucket/nightly.skb",
        f"s3://{SECRET}@bucket/nightly.skb?endpoint_url=http://127.0.0.1:9",
        f"s3://bucket?aws_secret_access_key={SECRET}",
    ],
)
def test_backup_and_restore_refuse_credentials_in_the_location_unshown(
    location: str, tmp_path: Path
) -> None:
    pytest.importorskip("boto3")
    key = BackupKey(os.urandom(32))

    async def main() -> None:
        async with StateStore(f"sqlite:///{tmp_path / 'a.db'}") as store:
            await store.save("a", {"n": 1})
            with pytest.raises(ConfigurationError) as wrote:
                await backup(store, location, key)
            with pytest.raises(ConfigurationError) as read:
                await restore(store, [location], key)
        for info in (wrote, read):
            shown = _shown(info.value)
            assert SECRET not in shown and KEY_ID not in shown, shown

    asyncio.run(main())


def test_the_cli_names_neither(tmp_path: Path) -> None:
    pytest.importorskip("boto3")
    from tests.cli._proc import cli_env, run_in_process

    db = tmp_path / "a.db"
    code, out, err = run_in_process(("init", str(db)), cli_env(200))
    assert code == 0, err
    location = f"s3://{KEY_ID}:{SECRET}@bucket/nightly.skb"
    args = ("backup", "--db", str(db), "--to", location, "--backup-key", str(tmp_path / "bk"))
    code, out, err = run_in_process((*args, "--create-backup-key"), cli_env(200))
    assert code == 2, err
    assert SECRET not in out + err and KEY_ID not in out + err, err
    assert "takes no credentials" in err


@pytest.mark.parametrize("quoted", [False, True])
def test_an_endpoint_password_is_not_shown_in_a_driver_error(
    quoted: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``?endpoint_url=http://user:PASSWORD@minio:9000``: botocore's message quotes the
    endpoint whole ('Could not connect to the endpoint URL: "http://minio:PASSWORD@…"'),
    which the BackupError repeated."""
    pytest.importorskip("boto3")
    from urllib.parse import quote

    from statekeeper.errors import BackupError

    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        monkeypatch.setenv(name, value)  # (without any, botocore stops before connecting)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    endpoint = f"http://minio:{SECRET}@127.0.0.1:1"  # (nothing listens on port 1)
    location = f"s3://bucket/k.skb?endpoint_url={quote(endpoint, safe='') if quoted else endpoint}"
    key = BackupKey(os.urandom(32))

    async def main() -> None:
        async with StateStore(f"sqlite:///{tmp_path / 'a.db'}") as store:
            await store.save("a", {"n": 1})
            with pytest.raises(BackupError) as wrote:
                await backup(store, location, key)
            with pytest.raises(BackupError) as read:
                await restore(store, [location], key)
        for info in (wrote, read):
            assert SECRET not in _shown(info.value), _shown(info.value)

    asyncio.run(main())
