"""A key pasted where its id goes is never printed back.

``STATEKEEPER_KEYS=<base64>`` without the ``k1=`` in front (the key copied out of a key
file), ``k1:<base64>``, ``$STATEKEEPER_ACTIVE_KEY`` or a key file's ``"active"`` set to
the key: the error named the "key id" it could not use — the key itself, 43 of its 44
characters, on stderr and in every log that keeps it ("invalid key id 'DOF…rus'", or,
when the text happens to be a valid id, about half of all keys, "key 'yYo…QNc' must be
32 bytes, not 0"). Such an id is now described by its length only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from statekeeper.cli import app
from statekeeper.codec.keys import Keyring, generate_key
from statekeeper.errors import ConfigurationError
from tests.keyfiles import write_key_file


def _key(slash: bool) -> str:
    """A key whose base64 holds a '/' (never a valid id) or none (then it is one)."""
    while True:
        key = generate_key()
        if ("/" in key) == slash:
            return key


def _leaks(text: str, key: str) -> bool:
    core = key.rstrip("=")
    return any(core[i : i + 12] in text for i in range(len(core) - 11))


def _environ(mistake: str, key: str) -> dict[str, str]:
    if mistake == "keys-without-id":
        return {"STATEKEEPER_KEYS": key}
    if mistake == "keys-colon":
        return {"STATEKEEPER_KEYS": f"k1:{key}"}
    return {"STATEKEEPER_KEYS": f"k1={key}", "STATEKEEPER_ACTIVE_KEY": key}


MISTAKES = ["active-is-the-key", "keys-colon", "keys-without-id"]


@pytest.mark.parametrize("slash", [True, False], ids=["invalid-id", "valid-id"])
@pytest.mark.parametrize("mistake", MISTAKES)
def test_from_env_never_shows_a_misplaced_key(mistake: str, slash: bool) -> None:
    key = _key(slash)
    with pytest.raises(ConfigurationError) as caught:
        Keyring.from_env(environ=_environ(mistake, key))
    assert not _leaks(str(caught.value), key), str(caught.value)
    assert "not shown" in str(caught.value)


@pytest.mark.parametrize("slash", [True, False], ids=["invalid-id", "valid-id"])
def test_a_key_file_whose_active_is_the_key(tmp_path: Path, slash: bool) -> None:
    key = _key(slash)
    path = write_key_file(tmp_path / "keys.json", {"active": key, "keys": {"k1": key}})
    with pytest.raises(ConfigurationError) as caught:
        Keyring.from_file(path)
    assert not _leaks(str(caught.value), key)
    with pytest.raises(ConfigurationError) as caught:
        Keyring({key: key})  # the key as its own id
    assert not _leaks(str(caught.value), key)


@pytest.mark.parametrize("slash", [True, False], ids=["invalid-id", "valid-id"])
def test_the_cli_never_prints_a_misplaced_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slash: bool
) -> None:
    for var in ("STATEKEEPER_URL", "STATEKEEPER_KEY_FILE", "STATEKEEPER_ACTIVE_KEY"):
        monkeypatch.delenv(var, raising=False)
    key = _key(slash)
    runner = CliRunner(env={"COLUMNS": "400", "NO_COLOR": "1", "STATEKEEPER_KEYS": key})
    result = runner.invoke(app, ["--db", str(tmp_path / "a.db"), "verify"])
    assert result.exit_code != 0
    assert not _leaks(result.output + json.dumps(str(result.exception)), key), result.output
    assert "not shown" in result.output
