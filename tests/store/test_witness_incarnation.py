"""A witness mark records its stream's incarnation (``c``: its first record's time) and
the last reset of it the file knew (``r``): :mod:`statekeeper.security.incarnation`.

The gaps it closes are tests/store/test_witness_held_stale.py's and
tests/store/test_witness_ttl_expiry.py's former expected failures; here: the marks
carry it, a stream gone back further than the other process's mark still shows, a
delete and a new stream elsewhere stays no rollback even at the very same time (a
``clock=`` that stands still), a file written before (marks without it) is read and
checked as it was, and a file of a newer format is refused with a typed error.
"""

from __future__ import annotations

import copy
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends import MemoryBackend
from statekeeper.errors import ConfigurationError, IntegrityError, RollbackDetected
from statekeeper.security.highwater import _seal
from statekeeper.security.witness import load_witness
from statekeeper.security.witness_file import canonical


def _pair(
    backend: MemoryBackend, witness: Path, clock: Callable[[], float] = time.time
) -> tuple[StateStore, StateStore]:
    """Two processes sharing ``backend`` and the witness file (marks written on flush)."""

    def one() -> StateStore:
        return StateStore(
            backend, witness=witness, cache_size=0, witness_interval=3600, clock=clock
        )

    return one(), one()


async def _lost_and_written_again(
    backend: MemoryBackend, one: StateStore, two: StateStore, last: int
) -> None:
    """``one`` saves "a" up to seq 4 (``two`` in the file first: its "b"), a lossy
    failover takes seq 4 back, then ``two`` saves "a" again from seq 4 to ``last``
    (``{"other": seq}``); every mark flushed."""
    assert one.witness is not None and two.witness is not None
    await two.save("b", {"n": 1})
    await two.witness.flush()
    for n in range(1, 4):
        await one.save("a", {"n": n})
    older = copy.deepcopy(backend._streams)
    await one.save("a", {"n": 4})
    await one.witness.flush()
    backend._streams = older  # a lossy failover
    for seq in range(4, last + 1):
        await two.save("a", {"other": seq})
    await two.witness.flush()


async def test_a_mark_records_the_time_of_its_streams_first_record(tmp_path: Path) -> None:
    async with StateStore(f"sqlite:///{tmp_path}/s.db") as store:
        for n in range(3):
            await store.save("a", {"n": n})
        (first,) = await store.backend.read("a", 0, 1)
        assert store.witness is not None
        await store.witness.flush()
        (entry,) = _doc(Path(store.witness.path))["streams"]
    assert (entry["seq"], entry["c"]) == (3, first.timestamp)
    # (never deleted: its one reset is its begin, the seq 1 this process wrote)
    assert first.timestamp <= entry["r"] < entry["t"]


async def test_a_stream_gone_back_below_the_other_process_mark_still_shows(
    tmp_path: Path,
) -> None:
    # as the held-stale test, the lost seq passed: the other process wrote seq 4 and 5
    backend, witness = MemoryBackend(), tmp_path / "w"
    one, two = _pair(backend, witness)
    await _lost_and_written_again(backend, one, two, 5)
    with pytest.raises(RollbackDetected, match="seq 4"):
        await one.load("a")


async def test_a_delete_and_a_new_stream_elsewhere_at_the_same_time_is_no_rollback(
    tmp_path: Path,
) -> None:
    # a clock that stands still: the new stream's first record has the deleted one's
    # time; the deletion the file held before its marks (r) tells them apart
    backend, witness = MemoryBackend(), tmp_path / "w"
    one, two = _pair(backend, witness, clock=lambda: 1_000_000.0)
    assert one.witness is not None and two.witness is not None
    for n in range(1, 5):
        await one.save("a", {"n": n})
    await one.witness.flush()
    await two.delete("a")  # (its deletion written to the file first)
    for n in range(1, 5):
        await two.save("a", {"other": n})
    await two.witness.flush()
    assert (await one.load("a")).data == {"other": 4}  # no RollbackDetected


def _doc(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def _write(path: Path, doc: dict[str, Any]) -> None:
    path.write_text(json.dumps(doc))


def _strip_incarnations(path: Path) -> None:
    """The witness file as a version before incarnations wrote it (resealed)."""
    doc = _doc(path)
    for entry in doc["streams"]:
        entry.pop("c", None)
        entry.pop("r", None)
    doc["seal"]["mac"] = _seal(canonical(doc["streams"]))
    _write(path, doc)


async def test_a_file_written_before_incarnations_is_read_and_checked(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    async with StateStore(url) as store:
        for n in range(3):
            await store.save("a", {"n": n})
        await store.save("b", {"n": 1})
        assert store.witness is not None
        path = Path(store.witness.path)
    _strip_incarnations(path)
    async with StateStore(url) as store:  # read as it was: its marks hold
        assert (await store.load("a")).seq == 3
        await store.save("b", {"n": 2})  # (its mark written again, with c now)
    assert [e.get("c") is not None for e in _doc(path)["streams"]] == [False, True]
    async with StateStore(url, witness=False) as behind:  # a's stream gone back
        await behind.delete("a")
        await behind.save("a", {"other": 1})
    async with StateStore(url) as store:
        with pytest.raises(RollbackDetected, match="seq 3"):
            await store.load("a")


async def test_a_witness_file_of_a_newer_format_is_refused_with_a_typed_error(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    async with StateStore(url) as store:
        await store.save("a", {"n": 1})
        assert store.witness is not None
        path = Path(store.witness.path)
    doc = _doc(path)
    doc["statekeeper_witness"] = 2
    _write(path, doc)
    async with StateStore(url) as store:
        with pytest.raises(IntegrityError, match="witness format 2") as raised:
            await store.load("a")
        assert "damaged" not in str(raised.value)
    with pytest.raises(ConfigurationError, match="witness format 2"):
        load_witness(path)


async def test_a_damaged_incarnation_is_a_damaged_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    async with StateStore(url) as store:
        await store.save("a", {"n": 1})
        assert store.witness is not None
        path = Path(store.witness.path)
    doc = _doc(path)
    doc["streams"][0]["c"] = "yesterday"
    doc["seal"]["mac"] = _seal(canonical(doc["streams"]))
    _write(path, doc)
    async with StateStore(url) as store:
        with pytest.raises(IntegrityError, match="damaged"):
            await store.load("a")


async def test_a_rewrite_elsewhere_then_saves_is_no_rollback(tmp_path: Path) -> None:
    # the rewrite's marks carry no incarnation; the saves after it carry the stream's
    # (unchanged by a rewrite): the reset the rewrite wrote is kept across them (r)
    from statekeeper.schema.migrate import migrate

    from ..schema.test_events import v2
    from ..schema.test_migrated_head_event_names import _record

    url, witness = f"sqlite:///{tmp_path / 'app.db'}", tmp_path / "w"
    async with (
        StateStore(url, witness=witness, cache_size=0, witness_interval=3600) as mine,
        StateStore(url, witness=witness, witness_interval=3600) as theirs,
    ):
        await _record(mine, "note")
        assert mine.witness is not None and theirs.witness is not None
        await mine.witness.flush()  # (its mark of the old head, in the file)
        assert (await migrate(theirs, v2, method="rewrite")).ok
        await theirs.witness.flush()  # (the rewrite's mark in the file, then the save's)
        await theirs.save("a-1", {"after": 1})
        await theirs.witness.flush()
        assert (await mine.load("a-1")).data == {"after": 1}  # no RollbackDetected


async def test_a_reset_is_kept_across_a_mark_without_incarnation(tmp_path: Path) -> None:
    # a rewrite's mark (or an older version's) carries no incarnation: the deletion
    # before it still counts for the marks of the stream made after it
    async with StateStore(f"sqlite:///{tmp_path}/s.db", witness_interval=3600) as store:
        witness = store.witness
        assert witness is not None
        witness.deleted("x")
        await witness.flush()
        (deletion,) = _doc(Path(witness.path))["streams"]
        witness.acked("x", 2, b"\1" * 32)  # (a rewrite's mark: no incarnation)
        await witness.flush()
        witness.acked("x", 3, b"\2" * 32, 5.0)  # (past seq 1: no stream begun here)
        await witness.flush()
        (entry,) = _doc(Path(witness.path))["streams"]
    assert (entry["seq"], entry["c"], entry["r"]) == (3, 5.0, deletion["t"])


async def test_a_lost_seq_written_again_elsewhere_stays_a_rollback_on_every_read(
    tmp_path: Path,
) -> None:
    # the holding process was told once, then the next read served the other state and
    # verify found nothing: its copy of the file had taken the other process's mark
    backend, witness = MemoryBackend(), tmp_path / "w"
    one, two = _pair(backend, witness)
    assert one.witness is not None and two.witness is not None
    await _lost_and_written_again(backend, one, two, 4)
    for _ in range(2):
        with pytest.raises(RollbackDetected, match="seq 4"):
            await one.load("a")
        (problem,) = (await one.verify()).problems  # (verify says so too)
        assert "seq 4" in str(problem)
    await one.save("b", {"n": 2})
    await one.witness.flush()  # (its copy of the file read again: still told)
    with pytest.raises(RollbackDetected, match="seq 4"):
        await one.load("a")
    os.replace(witness, tmp_path / "moved-away")  # the store accepted as it is
    assert not (await one.verify()).problems
    assert (await one.load("a")).data == {"other": 4}


async def test_a_lost_seq_found_by_verify_first_stays_a_rollback(tmp_path: Path) -> None:
    # verify took the other process's newer mark for a delete and a new stream
    backend, witness = MemoryBackend(), tmp_path / "w"
    one, two = _pair(backend, witness)
    assert one.witness is not None and two.witness is not None
    await _lost_and_written_again(backend, one, two, 4)
    (problem,) = (await one.verify()).problems
    assert "seq 4" in str(problem)
    with pytest.raises(RollbackDetected, match="seq 4"):
        await one.load("a")
    await two.delete("a")  # (the file says otherwise now: deleted)
    await two.save("a", {"new": 1})
    await two.witness.flush()
    assert (await one.load("a")).data == {"new": 1}
    assert not (await one.verify()).problems


@pytest.mark.parametrize("seal", [[1], "sealed", 7])
async def test_a_seal_that_is_no_object_is_a_damaged_file(tmp_path: Path, seal: object) -> None:
    # (was: AttributeError from the read of the file, no typed error)
    url = f"sqlite:///{tmp_path}/s.db"
    async with StateStore(url) as store:
        await store.save("a", {"n": 1})
        assert store.witness is not None
        path = Path(store.witness.path)
    doc = _doc(path)
    doc["seal"] = seal
    _write(path, doc)
    async with StateStore(url) as store:
        with pytest.raises(IntegrityError, match="damaged"):
            await store.load("a")
