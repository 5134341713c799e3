"""Two ``keys generate`` on one key file at once: each reads the file, adds its key and
writes the file back. Without one lock around that, the second write dropped the
first's key, though both reported it added (and a service reloading the file between
the two writes could encrypt under the lost key: records nobody can read again)."""

from __future__ import annotations

import fcntl
import json
import threading
import time
from pathlib import Path

import pytest

from statekeeper.codec import keys as keys_module
from statekeeper.codec.keys import add_key_to_file


def test_two_keys_added_to_one_file_at_once_are_both_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "keys.json"
    add_key_to_file(path)  # k1
    real_generate, real_flock = keys_module.generate_key, fcntl.flock
    waiting = threading.Event()  # the other adder asked for the lock
    other_done = threading.Event()
    added: dict[str, tuple[str, str]] = {}
    first = threading.current_thread()

    def flock(fd: int, operation: int) -> None:
        if threading.current_thread() is not first and operation & fcntl.LOCK_EX:
            waiting.set()
        real_flock(fd, operation)

    def other() -> None:
        try:
            added["other"] = add_key_to_file(path)
        finally:
            other_done.set()

    def generate() -> str:
        if threading.current_thread() is first and "thread" not in added:
            # this adder has read the file: another one runs now, to its end or until
            # it waits for this one's lock
            thread = threading.Thread(target=other)
            added["thread"] = ("", "")
            thread.start()
            for _ in range(6000):  # (bounded: a condition, not a duration)
                if waiting.is_set() or other_done.is_set():
                    break
                time.sleep(0.01)
            assert waiting.is_set() or other_done.is_set()
            generate.thread = thread  # type: ignore[attr-defined]
        return real_generate()

    monkeypatch.setattr(keys_module, "generate_key", generate)
    monkeypatch.setattr(fcntl, "flock", flock)
    added["first"] = add_key_to_file(path)
    generate.thread.join()  # type: ignore[attr-defined]
    doc = json.loads(path.read_text(encoding="utf-8"))
    ids = {added["first"][0], added["other"][0]}
    assert len(ids) == 2, added  # two keys, two ids
    assert ids <= set(doc["keys"]), (added, sorted(doc["keys"]))
    assert set(doc["keys"]) == {"k1", *ids}
    assert doc["active"] == added["other"][1]  # the last one added is active


def test_add_key_to_file_refuses_an_id_the_file_has(tmp_path: Path) -> None:
    from statekeeper.errors import ConfigurationError

    path = tmp_path / "keys.json"
    assert add_key_to_file(path, key_id="a") == ("a", "a")
    assert add_key_to_file(path, key_id="b", activate=False) == ("b", "a")
    with pytest.raises(ConfigurationError, match="already has a key 'a'"):
        add_key_to_file(path, key_id="a")


def test_a_vault_named_while_a_key_is_added_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``keys vault init`` while ``keys generate`` adds a key to the same file: both
    changes kept (the vault dropped from the file would orphan every data key in it:
    every agent's records unreadable)."""
    from statekeeper.governance.shredding import init_vault

    path = tmp_path / "keys.json"
    add_key_to_file(path)
    real_generate, real_flock = keys_module.generate_key, fcntl.flock
    waiting = threading.Event()
    other_done = threading.Event()
    first = threading.current_thread()
    threads: list[threading.Thread] = []

    def flock(fd: int, operation: int) -> None:
        if threading.current_thread() is not first and operation & fcntl.LOCK_EX:
            waiting.set()
        real_flock(fd, operation)

    def other() -> None:
        try:
            init_vault(path)
        finally:
            other_done.set()

    def generate() -> str:
        if threading.current_thread() is first and not threads:
            threads.append(threading.Thread(target=other))
            threads[0].start()
            for _ in range(6000):  # (bounded: a condition, not a duration)
                if waiting.is_set() or other_done.is_set():
                    break
                time.sleep(0.01)
        return real_generate()

    monkeypatch.setattr(keys_module, "generate_key", generate)
    monkeypatch.setattr(fcntl, "flock", flock)
    added, _ = add_key_to_file(path)
    threads[0].join()
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert set(doc["keys"]) == {"k1", added}
    assert doc.get("data_keys") == "keys.vault.db", doc
