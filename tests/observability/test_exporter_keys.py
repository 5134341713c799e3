"""``statekeeper metrics serve`` and ``metrics record`` with a key that opens no agent:
refused at start (exit 2, one line), not served or recorded as "0 agents"."""

from __future__ import annotations

from pathlib import Path

from statekeeper.codec.keys import Keyring

from ..cli._proc import populate, sk
from ..cli.test_cli_trust import key_file


def test_a_key_that_opens_no_agent_is_refused_at_start(tmp_path: Path) -> None:
    right = key_file(tmp_path / "right")
    wrong = key_file(tmp_path / "wrong")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    populate(url, keyring=Keyring.from_file(right))
    ok = sk("metrics", "serve", "--once", "--db", url, "--key-file", str(right))
    assert ok.returncode == 0, ok.stderr
    assert 'statekeeper_agents_unreadable{store="store"} 0.0' in ok.stdout
    bad = sk("metrics", "serve", "--once", "--db", url, "--key-file", str(wrong))
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert "could be read" in bad.stderr and "Traceback" not in bad.stderr
    assert bad.stdout == ""


def test_recording_a_store_with_a_key_that_opens_no_agent_is_refused(tmp_path: Path) -> None:
    wrong = key_file(tmp_path / "wrong")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    populate(url, keyring=Keyring.from_file(key_file(tmp_path / "right")))
    out = tmp_path / "rec.jsonl"
    bad = sk(
        "metrics", "record", url, "--samples", "1", "--out", str(out), "--key-file", str(wrong)
    )
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert "could be read" in bad.stderr and "Traceback" not in bad.stderr
    assert not out.exists()
