"""A store rotated to a new key opens and loads once the old key is retired, whatever
of its automatic witness the rotation could re-make.

``rekey`` makes the witness's marks under the old key again under the active one, for
the agents it re-encrypts, in memory first (the file is written within
``witness_interval``), while its progress file is saved every half second: a run
killed between the two resumed after agents whose new marks never reached the file,
and a witness the rekeying process does not hold at all (an application's
``witness=PATH``: ``statekeeper rekey`` does not know it) keeps every old mark. Such a
mark, once its key was retired, made every load of its agent raise ``KeyNotFound``
("the key does not open this store: wrong key file or keyring?") although every record
was under the new key: the store could not be used. Now a mark made under a key the
keyring lacks is checked by seq only on the read path (as at the opening and by
``verify``), and ``rekey`` re-makes, at its end, every mark of the file still under
another key (a resumed run's too), and writes the file before it reports done."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from statekeeper import Keyring, StateStore
from statekeeper.security import generate_key, rekey

K1, K2 = generate_key(), generate_key()
OLD = Keyring({"k1": K1})
BOTH = Keyring({"k2": K2, "k1": K1}, active="k2")
NEW = Keyring({"k2": K2})


class _Killed(Exception):
    """The rekeying process dies (what it held in memory only is gone)."""


async def _written(url: str, **options: object) -> None:
    async with StateStore(url, keyring=OLD, snapshot_every=2, **options) as store:  # type: ignore[arg-type]
        for agent_id in ("a", "b", "c"):
            for i in range(3):
                await store.save(agent_id, {"n": i})


def _mark_keys(path: Path) -> dict[str, str | None]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    return {e["agent_id"]: e.get("key_id") for e in doc["streams"] if int(e["seq"]) > 0}


async def test_a_rekey_killed_before_its_witness_write_then_resumed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    witness = tmp_path / "app.db.sk-witness"
    await _written(url)
    assert _mark_keys(witness) == {"a": "k1", "b": "k1", "c": "k1"}
    progress = tmp_path / "rekey.json"

    async with StateStore(url, keyring=BOTH) as store:

        def killed(agent_id: str, *_: object) -> None:
            assert store.witness is not None
            store.witness._dirty.clear()  # (the marks made again: in memory only, lost)
            raise _Killed(agent_id)

        with pytest.raises(_Killed, match="a"):
            await rekey(store, progress_file=progress, on_agent=killed)
    assert json.loads(progress.read_text(encoding="utf-8"))["after"] == "a"
    assert _mark_keys(witness)["a"] == "k1"

    async with StateStore(url, keyring=BOTH) as store:  # resumed after "a"
        stats = await rekey(store, progress_file=progress)
    assert stats.agents == 2
    # every mark is under the active key: still checked in full once k1 is retired
    assert _mark_keys(witness) == {"a": "k2", "b": "k2", "c": "k2"}
    async with StateStore(url, keyring=NEW) as store:
        for agent_id in ("a", "b", "c"):
            assert (await store.load(agent_id)).data == {"n": 2}
        assert (await store.verify()).ok


async def test_a_witness_the_rekeying_process_did_not_hold(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    witness = tmp_path / "app.witness"  # the application's witness=PATH
    await _written(url, witness=witness)
    async with StateStore(url, keyring=BOTH, witness=False) as store:  # as the CLI's
        await rekey(store)
    assert _mark_keys(witness) == {"a": "k1", "b": "k1", "c": "k1"}
    # k1 retired: the application opens with the new key only, its old marks still there
    async with StateStore(url, keyring=NEW, witness=witness) as store:
        for agent_id in ("a", "b", "c"):
            assert (await store.load(agent_id)).data == {"n": 2}
        assert (await store.verify()).ok
        await store.save("a", {"n": 3})
    async with StateStore(url, keyring=NEW, witness=witness) as store:
        assert (await store.load("a")).data == {"n": 3}
    assert _mark_keys(witness)["a"] == "k2"  # (a save marks it under the active key)
