"""``statekeeper langgraph export`` of an encrypted store writes a SQLite file holding
the checkpoints decrypted: it is created readable by its owner only (0600)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from statekeeper.codec.keys import Keyring, generate_key
from tests.keyfiles import write_key_file

from ..cli._subprocess import cli_in_process

pytest.importorskip("langgraph.checkpoint.sqlite")


def test_a_langgraph_export_of_an_encrypted_store_is_owner_only(tmp_path: Path) -> None:
    from statekeeper.integrations.langgraph import StatekeeperSaver

    keys = tmp_path / "keys.json"
    write_key_file(keys, {"active": "k1", "keys": {"k1": generate_key()}})
    url = f"sqlite:///{tmp_path / 'enc.db'}"
    with StatekeeperSaver.from_url(url, keyring=Keyring.from_file(keys)) as saver:
        saver.put(
            {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}},
            {
                "v": 4,
                "id": "1ef4f797-8335-6428-8001-8a1503f9b875",
                "ts": "2024-05-04T06:32:42.235444+00:00",
                "channel_values": {"secret": "s3cr3t"},
                "channel_versions": {},
                "versions_seen": {},
                "updated_channels": [],
            },
            {},
            {},
        )
    out = tmp_path / "plain.sqlite"
    done = cli_in_process("langgraph", "export", url, str(out), "--key-file", str(keys))
    assert done.code == 0, str(done)
    assert stat.S_IMODE(out.stat().st_mode) & 0o077 == 0, oct(out.stat().st_mode)
