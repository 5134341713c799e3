"""Every command that opens an encrypted store given the WRONG key (another key file
under the same key id) says it in one way: "the key does not open this store: wrong key
file or keyring?", exit code 2, one line. Before, it read as damage ("integrity check
failed for agent '\\x01sk-holds/registry' seq 1"), named a stream of the store's own
by its stored id, and ``backup`` and ``retention apply --dry-run`` succeeded under a
key that opens nothing of the store. No key material is ever printed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..governance._audited import save_audited
from ._subprocess import Run, cli_in_process, one_error_line
from .test_cli_trust import key_file

WORDS = "the key does not open this store: wrong key file or keyring?"


@pytest.fixture(scope="module")
def governed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(store, its key file, a wrong key file): a store with an audit log and a hold."""
    root = tmp_path_factory.mktemp("wrongkey")
    keys, wrong = key_file(root / "right"), key_file(root / "wrong")
    db = root / "s.db"
    save_audited(db, keys, ["acme/alice", "acme/bob"])
    placed = cli_in_process(
        "hold",
        "add",
        "acme/alice",
        "--reason",
        "a matter",
        "--db",
        str(db),
        "--key-file",
        str(keys),
    )
    assert placed.code == 0, str(placed)
    return db, keys, wrong


COMMANDS = [
    ["show", "acme/alice"],
    ["history", "acme/alice"],
    ["agents"],
    ["stats"],
    ["hold", "list"],
    ["hold", "add", "acme/bob", "--reason", "another matter"],
    ["retention", "apply", "--rule", "* keep_last=1", "--dry-run"],
    ["backup", "--to", "{root}/b.skb", "--backup-key", "{root}/b.key", "--create-backup-key"],
    ["audit"],
    ["export", "--output", "{root}/out.jsonl"],
]


def _secrets(*files: Path) -> list[str]:
    return [k for f in files for k in json.loads(f.read_text())["keys"].values()]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_a_wrong_key_is_said_to_be_the_key(
    governed: tuple[Path, Path, Path], command: list[str]
) -> None:
    db, keys, wrong = governed
    root = db.parent
    args = [a.format(root=root) for a in command]
    before = db.read_bytes()
    run = cli_in_process(*args, "--db", str(db), "--key-file", str(wrong))
    assert run.code == 2, str(run)
    line = one_error_line(run)
    assert WORDS in line, line
    assert "integrity check failed" not in line
    assert "\\x01" not in line and "\x01" not in line and "sk-holds" not in line, line
    for secret in _secrets(keys, wrong):
        assert secret not in run.stdout + run.stderr
    assert db.read_bytes() == before  # nothing written
    assert not (root / "b.skb").exists() and not (root / "out.jsonl").exists()


def test_the_store_s_own_streams_are_named_in_words(governed: tuple[Path, Path, Path]) -> None:
    db, _, wrong = governed
    held = cli_in_process("hold", "list", "--db", str(db), "--key-file", str(wrong))
    assert "(the store's legal holds, record 1:" in one_error_line(held)


def test_audit_verify_with_a_wrong_key_says_it_is_the_key(
    governed: tuple[Path, Path, Path],
) -> None:
    db, keys, wrong = governed
    run: Run = cli_in_process("audit", "verify", "--db", str(db), "--key-file", str(wrong))
    assert run.code == 1, str(run)  # problems found, listed
    text = " ".join(run.stdout.split())
    assert "records encrypted with a key the keyring given lacks" in text, text
    assert "--key-file FILE" in text
    good = cli_in_process("audit", "verify", "--db", str(db), "--key-file", str(keys))
    assert good.code == 0 and "keyring" not in good.stdout, str(good)


#: (see below; ``agents`` and ``stats`` list without a key: test_no_key_lists_the_agents)
NO_KEY = [c for c in COMMANDS if c[0] not in ("backup", "audit", "agents", "stats")]


@pytest.mark.parametrize("command", NO_KEY, ids=lambda c: " ".join(c[:2]))
def test_no_key_at_all_is_said_to_be_missing(
    governed: tuple[Path, Path, Path], command: list[str]
) -> None:
    """Given NO key (no --key-file, no $STATEKEEPER_KEY_FILE), a command said the key
    was wrong; it says none was given, and how to give one. (``audit`` says it in its
    own words; ``backup`` copies records as stored and needs no store key.)"""
    db, keys, _ = governed
    root = db.parent
    before = db.read_bytes()
    run = cli_in_process(*[a.format(root=root) for a in command], "--db", str(db))
    assert run.code == 2, str(run)
    line = one_error_line(run)
    assert "this store is encrypted and no key was given: pass --key-file FILE" in line, line
    assert "$STATEKEEPER_KEY_FILE" in line and "wrong key" not in line, line
    for secret in _secrets(keys):
        assert secret not in run.stdout + run.stderr
    assert db.read_bytes() == before


@pytest.mark.parametrize("json_out", [False, True])
def test_no_key_lists_the_agents_and_says_their_data_is_encrypted(
    governed: tuple[Path, Path, Path], json_out: bool
) -> None:
    """Agent ids and times are stored in the clear: ``agents`` without a key listed
    nothing (exit 2, "no key was given"); it lists them, each state shown as
    ``(encrypted)`` (null with ``"encrypted": true`` in JSON), and says how to show
    the states. A WRONG key still fails (test_a_wrong_key_is_said_to_be_the_key)."""
    db, keys, _ = governed
    before = db.read_bytes()
    run = cli_in_process("agents", "--db", str(db), *(["--json"] if json_out else []))
    assert run.code == 0, str(run)
    if json_out:
        rows = json.loads(run.stdout)["agents"]
        assert [(r["agent_id"], r["state"], r["encrypted"]) for r in rows] == [
            ("acme/alice", None, True),
            ("acme/bob", None, True),
        ]
    else:
        text = " ".join(run.stdout.split())
        assert "acme/alice" in text and "acme/bob" in text, text
        assert text.count("(encrypted)") >= 3, text  # two rows and the note
        assert "no key was given" in text and "--key-file FILE" in text, text
    for secret in _secrets(keys):
        assert secret not in run.stdout + run.stderr
    assert db.read_bytes() == before
    stats = cli_in_process("stats", "--db", str(db), "--json")
    assert stats.code == 0, str(stats)
    assert json.loads(stats.stdout)["states"] == {"(encrypted)": 2}
    with_key = cli_in_process("agents", "--db", str(db), "--key-file", str(keys), "--json")
    assert {r["encrypted"] for r in json.loads(with_key.stdout)["agents"]} == {False}
