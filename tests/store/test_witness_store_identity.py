"""The automatic witness file records which store it witnesses
(:mod:`statekeeper.security.witness_store`), and its checks name it.

Before, the file held marks and nothing that said whose: the witness of one store given
to another (one ``witness=PATH`` for two stores) was checked against the wrong store —
every mark an unexplained alarm — or, when its marks were deletions only, silently
taken over, the two stores' marks merged into one file (where one store's newest
agents push the other's out: a rollback then unseen). Now a witness of another store is
refused at the opening (``WitnessStoreMismatch``) or its alarms say so; an older copy of
the same store is still the same store (its rollback caught, the store named); and a
restore, which renews the store's id, renews the file's.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import RollbackDetected, WitnessStoreMismatch
from statekeeper.governance.backup import BackupKey, backup, restore


def _url(path: Path) -> str:
    return f"sqlite:///{path}"


def _filed(witness: Path) -> dict[str, str]:
    return dict(json.loads(witness.read_text())["store"])


async def test_the_file_records_the_store_it_witnesses(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    async with StateStore(_url(db)) as store:
        await store.save("a", {"n": 1})
        ident = await store.backend.feed_id()
    filed = _filed(tmp_path / "app.db.sk-witness")
    assert filed["id"] == ident
    assert filed["name"] == f"sqlite:{db.resolve()}"


async def test_a_witness_of_another_store_is_refused_naming_both(tmp_path: Path) -> None:
    witness = tmp_path / "shared.sk-witness"
    async with StateStore(_url(tmp_path / "x.db"), witness=witness) as x:
        await x.save("a", {"n": 1})
        await x.delete("a")  # the file holds a deletion only: nothing to find
    async with StateStore(_url(tmp_path / "y.db"), witness=witness) as y:
        with pytest.raises(WitnessStoreMismatch, match=r"x\.db") as caught:
            await y.save("b", {"n": 1})
        assert "y.db" in caught.value.found and "x.db" in caught.value.expected
        assert await y.backend.head("b") == 0  # nothing written
        report = await y.verify()
        assert [p.agent_id for p in report.problems] == ["*"]
        assert "written for" in report.problems[0].reason
    assert "x.db" in _filed(witness)["name"]  # the file still says whose it is


async def test_alarms_from_another_stores_marks_say_so(tmp_path: Path) -> None:
    witness = tmp_path / "shared.sk-witness"
    async with StateStore(_url(tmp_path / "x.db"), witness=witness) as x:
        await x.save("a", {"n": 1})
    async with StateStore(_url(tmp_path / "y.db"), witness=witness) as y:
        with pytest.raises(RollbackDetected, match="another store's witness"):
            await y.load("a")


async def test_an_older_copy_of_the_same_store_is_a_rollback_naming_it(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    async with StateStore(_url(db)) as store:
        await store.save("a", {"n": 1})
    shutil.copy(db, tmp_path / "old.db")
    async with StateStore(_url(db)) as store:
        await store.save("a", {"n": 2})
    shutil.copy(tmp_path / "old.db", db)
    async with StateStore(_url(db)) as store:
        with pytest.raises(RollbackDetected, match=r"in sqlite:.*app\.db \(store id") as caught:
            await store.load("a")
        assert not isinstance(caught.value, WitnessStoreMismatch)


async def test_a_file_written_before_the_identity_is_taken_over(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    witness = tmp_path / "app.db.sk-witness"
    async with StateStore(_url(db)) as store:
        await store.save("a", {"n": 1})
    doc = json.loads(witness.read_text())
    del doc["store"]  # as an earlier version wrote it (the seal covers the streams)
    witness.write_text(json.dumps(doc))
    async with StateStore(_url(db)) as store:
        assert (await store.load("a")).data == {"n": 1}
        await store.save("a", {"n": 2})
    assert _filed(witness)["id"] == doc_id(db)


def doc_id(db: Path) -> str:
    import sqlite3

    with sqlite3.connect(db) as conn:
        return str(conn.execute("SELECT value FROM sk_meta WHERE key = 'feed_id'").fetchone()[0])


async def test_a_restore_renews_the_files_store_too(tmp_path: Path) -> None:
    key = BackupKey(b"k" * 32)
    async with StateStore(_url(tmp_path / "src.db"), witness=False) as source:
        await source.save("r", {"n": 1})
        await backup(source, tmp_path / "b.skb", key)
    db = tmp_path / "dst.db"
    async with StateStore(_url(db)) as target:
        await target.save("mine", {"n": 1})
        assert target.witness is not None
        await target.witness.flush()  # the file names the store (its id before the restore)
        await restore(target, [tmp_path / "b.skb"], key)
        await target.save("mine", {"n": 2})
    assert _filed(tmp_path / "dst.db.sk-witness")["id"] == doc_id(db)
    async with StateStore(_url(db)) as target:  # opened again: the same store
        assert (await target.load("mine")).data == {"n": 2}
        assert (await target.load("r")).data == {"n": 1}
        assert not (await target.verify()).problems


async def test_an_exported_witness_names_its_store_and_a_check_on_another_says_so(
    tmp_path: Path,
) -> None:
    from statekeeper.security import check_witness, export_witness

    async with StateStore(_url(tmp_path / "x.db"), witness=False) as x:
        await x.save("a", {"n": 1})
        doc = await export_witness(x, tmp_path / "x.json")
        assert doc["store"]["id"] == await x.backend.feed_id()
        assert (await check_witness(x, tmp_path / "x.json")).ok
    async with StateStore(_url(tmp_path / "y.db"), witness=False) as y:
        await y.save("a", {"n": 1})
        report = await check_witness(y, tmp_path / "x.json")
    assert [p.agent_id for p in report.problems][:1] == ["*"]
    assert "x.db" in report.problems[0].reason and "y.db" in report.problems[0].reason
