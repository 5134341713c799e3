"""Witness files: a rollback of the whole store (or a rewritten stream) is detected."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from statekeeper import ConfigurationError, StateStore
from statekeeper.errors import RollbackDetected
from statekeeper.security import Keyring, check_witness, export_witness, generate_key, load_witness

RING = Keyring({"k1": generate_key()})


@pytest.fixture(params=[True, False], ids=["with-key", "without-key"])
def keyring(request: pytest.FixtureRequest) -> Keyring | None:
    return RING if request.param else None


async def test_export_and_check(tmp_path: Path, keyring: Keyring | None) -> None:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    path = tmp_path / "witness.json"
    async with StateStore(url, keyring=keyring, snapshot_every=3) as store:
        for a in ("a", "b", "c"):
            for i in range(5):
                await store.save(a, {"n": i})
        doc = await export_witness(store, path)
        assert doc["agents"] == 3 and load_witness(path) == doc
        assert (await check_witness(store, path)).ok
        # growth since is fine, and reported
        await store.save("a", {"n": 99})
        await store.save("d", {"new": 1})
        report = await check_witness(store, path)
        assert report.ok and report.grown == 1 and report.new_agents == 1 and report.checked == 3
        # a deleted stream is not
        await store.delete("b")
        report = await check_witness(store, path)
        assert [(p.agent_id, p.seq) for p in report.problems] == [("b", 5)]
        assert "gone" in report.problems[0].reason


async def test_a_rewritten_history_of_the_same_length(
    tmp_path: Path, keyring: Keyring | None
) -> None:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    async with StateStore(url, keyring=keyring) as store:
        for i in range(4):
            await store.save("a", {"n": i})
        witness = await export_witness(store)
        await store.delete("a")
        for i in range(4):
            await store.save("a", {"n": -i})  # same agent, same length, other records
        report = await check_witness(store, witness)
    assert [p.agent_id for p in report.problems] == ["a"]
    assert "differ" in report.problems[0].reason


async def test_a_rollback_to_an_older_copy(tmp_path: Path, keyring: Keyring | None) -> None:
    db = tmp_path / "w.db"
    url = f"sqlite:///{db}"
    async with StateStore(url, keyring=keyring) as store:
        await store.save("a", {"n": 1})
    shutil.copy(db, tmp_path / "old.db")
    async with StateStore(url, keyring=keyring) as store:
        await store.save("a", {"n": 2})
        witness = await export_witness(store)
    shutil.copy(tmp_path / "old.db", db)
    async with StateStore(url, keyring=keyring, witness=False) as store:
        assert (await store.verify()).ok  # consistent in itself
        report = await check_witness(store, witness)
    assert [(p.agent_id, p.seq) for p in report.problems] == [("a", 2)]
    assert "rolled back" in report.problems[0].reason
    # the store's own automatic witness (next to the file) saw it too
    async with StateStore(url, keyring=keyring) as store:
        with pytest.raises(RollbackDetected) as info:
            await store.load("a")
    assert (info.value.agent_id, info.value.seq, info.value.found) == ("a", 2, 1)


async def test_an_edited_witness_file_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    path = tmp_path / "witness.json"
    async with StateStore(url, keyring=RING) as store:
        for a in ("a", "b"):
            await store.save(a, {"n": 1})
        await export_witness(store, path)
        doc = json.loads(path.read_text())
        doc["streams"] = doc["streams"][:1]  # hide a stream from the witness
        report = await check_witness(store, doc)
        assert not report.ok and "altered" in report.problems[0].reason
    async with StateStore(url, keyring=Keyring({"k9": generate_key()})) as store:
        report = await check_witness(store, path)  # made with a key this keyring lacks
        assert not report.ok and "k1" in report.problems[0].reason


def test_load_witness_rejects_other_files(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    for text in ("{", "[]", json.dumps({"statekeeper_witness": 2, "streams": []})):
        path.write_text(text)
        with pytest.raises(ConfigurationError):
            load_witness(path)


@pytest.mark.parametrize("seal", [[1], "sealed", 7])
async def test_a_seal_that_is_no_object_is_an_altered_file(tmp_path: Path, seal: object) -> None:
    # (was: AttributeError from check_witness, no report)
    async with StateStore(f"sqlite:///{tmp_path / 'w.db'}", keyring=RING) as store:
        await store.save("a", {"n": 1})
        path = tmp_path / "witness.json"
        await export_witness(store, path)
        doc = json.loads(path.read_text())
        doc["seal"] = seal
        report = await check_witness(store, doc)
        assert not report.ok and "altered" in report.problems[0].reason
