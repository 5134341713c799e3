"""``$STATEKEEPER_ACTIVE_KEY`` names the active key of a ``--key-file`` too.

The variable chose the active key of ``$STATEKEEPER_KEYS`` and of
``$STATEKEEPER_KEY_FILE``, but a key file given with ``--key-file`` kept its own
``"active"``: an operator who set the variable to rotate (the new key added to the file,
not yet made its active one) and ran ``rekey --key-file`` was told every record was
"re-encrypted under 'k1'" — the old key — and every write went on under it, silently.
The variable now overrides the active key whichever source gives the keys; an id the
keys lack is refused (exit 2), naming the file, before the store is touched."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from statekeeper import StateStore
from statekeeper.codec import Codec
from statekeeper.codec.keys import Keyring

from ..cli._subprocess import cli_env, cli_in_process

K1, K2 = os.urandom(32), os.urandom(32)


def _store(tmp_path: Path) -> tuple[Path, Path]:
    key_file = tmp_path / "keys.json"
    Keyring.write_file(key_file, {"k1": _b64(K1), "k2": _b64(K2)}, "k1")
    db = tmp_path / "s.db"

    async def write() -> None:
        async with StateStore(f"sqlite:///{db}", keyring=Keyring({"k1": K1})) as store:
            await store.save("a1", {"n": 1})

    asyncio.run(write())
    return key_file, db


def _b64(key: bytes) -> str:
    import base64

    return base64.b64encode(key).decode()


def _key_ids(db: Path) -> list[str | None]:
    async def read() -> list[str | None]:
        async with StateStore(f"sqlite:///{db}", keyring=Keyring({"k1": K1, "k2": K2})) as s:
            raws = await s.backend.read("a1", 0, None)
            return [h.key_id if (h := Codec.header(r.payload)) else None for r in raws]

    return asyncio.run(read())


def test_the_variable_names_the_active_key_of_a_key_file_given_with_the_flag(
    tmp_path: Path,
) -> None:
    key_file, db = _store(tmp_path)
    args = ("rekey", "--key-file", str(key_file), "--db", str(db), "--json")
    run = cli_in_process(*args, env=cli_env(STATEKEEPER_ACTIVE_KEY="k2"))
    assert run.code == 0, run
    summary = json.loads(run.stdout)
    assert summary["active_key"] == "k2"  # was: 'k1', the file's
    assert summary["events_reencrypted"] == 1
    assert _key_ids(db) == ["k2"]
    status = cli_in_process(
        "keys", "status", "--key-file", str(key_file), "--db", str(db), "--json",
        env=cli_env(STATEKEEPER_ACTIVE_KEY="k2"),
    )  # fmt: skip
    assert status.code == 0, status
    assert json.loads(status.stdout)["active"] == "k2"


def test_without_the_variable_the_files_active_key_and_an_unknown_id_is_refused(
    tmp_path: Path,
) -> None:
    key_file, db = _store(tmp_path)
    args = ("rekey", "--key-file", str(key_file), "--db", str(db), "--json")
    run = cli_in_process(*args, env=cli_env())
    assert run.code == 0, run
    assert json.loads(run.stdout)["active_key"] == "k1"
    refused = cli_in_process(*args, env=cli_env(STATEKEEPER_ACTIVE_KEY="k9"))
    assert refused.code == 2, refused
    assert "k9" in refused.stderr and str(key_file) in refused.stderr
    assert _key_ids(db) == ["k1"]  # nothing re-encrypted
