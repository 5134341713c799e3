"""A mark of one incarnation, the file's newer mark of another: a rollback unless the
store or the file records that the marked incarnation was ended (security/ended.py).

``one`` holds the mark of ``a`` at seq 3; ``two`` shares the witness file and its copy
of the file never held ``a``; ``a``'s incarnation ends (legitimately, or lost whole by
a lossy failover) and ``two`` begins ``a`` again: its newer mark replaces ``one``'s in
the file. Every legitimate end is served as the new stream (each tested: a false alarm
is a failure too; a ``forget`` purge leaves its id refused for good: no incarnation
follows it), a loss is a :class:`RollbackDetected` naming the agent and seq 3
(tests/store/test_witness_lost_rewritten.py has the read path's; here ``verify`` and
a tombstone older than the mark).
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends import MemoryBackend
from statekeeper.codec.keys import Keyring
from statekeeper.errors import RollbackDetected
from statekeeper.governance.retention import RetentionPolicy, apply_retention
from statekeeper.security.highwater import _seal
from statekeeper.security.witness_file import canonical

from ..backends._services import fresh_url

A, B = "t/a", "u/b"  # (namespaces: a retention rule for t/ alone)

End = Callable[[StateStore, Path, Any], Awaitable[None]]


def _store(backend: Any, witness: Path | bool, keyring: Keyring | None = None) -> StateStore:
    return StateStore(
        backend,
        witness=witness,
        cache_size=0,
        witness_interval=3600,
        keyring=keyring,
        clock=lambda: time.time(),  # (late bound: the tests that move the clock, _Clock)
    )


async def _flush(store: StateStore) -> None:
    assert store.witness is not None
    await store.witness.flush()


async def _delete_with_witness(backend: Any, witness: Path, keyring: Any) -> None:
    three = _store(backend, witness, keyring)
    assert await three.delete(A)  # (not closed: it would close the shared engine)


async def _delete_without_witness(backend: Any, witness: Path, keyring: Any) -> None:
    # (the CLI on a server engine: witness=PATH is the application's, it knows none)
    plain = _store(backend, False, keyring)
    assert await plain.delete(A)


async def _purge_without_witness(backend: Any, witness: Path, keyring: Any) -> None:
    plain = _store(backend, False, keyring)
    policy = RetentionPolicy.parse("t  ttl=1h")  # (t/a, not u/b)
    await apply_retention(plain, policy, now=time.time() + 7200)
    assert await plain.get(A) is None


ENDS = {
    "delete, witness": _delete_with_witness,
    "delete, no witness": _delete_without_witness,
    "retention purge, no witness": _purge_without_witness,
}


ENGINES = ["memory", "sqlite", "postgresql", "redis", "s3", "tiered"]
#: the engines that keep a change feed, and so tombstones (S3, tiered: none; a delete
#: there proves itself through the witness file only: docs/security.md)
FEEDS = {"memory", "sqlite", "postgresql", "redis"}


@pytest.mark.parametrize("kind", ENGINES)
@pytest.mark.parametrize("end", list(ENDS))
async def test_an_incarnation_ended_on_purpose_and_begun_again_elsewhere_is_served(
    tmp_path: Path, kind: str, end: str
) -> None:
    if "no witness" in end and kind not in FEEDS:
        pytest.skip("no tombstones: a delete without the witness is a rollback to it")
    keyring = Keyring({"k1": bytes(range(32))})  # (the tombstones opened: sealed)
    with fresh_url(kind, tmp_path) as url:
        await _ended_and_begun(url if kind != "memory" else MemoryBackend(), tmp_path, end, keyring)


async def _ended_and_begun(backend: Any, tmp_path: Path, end: str, keyring: Keyring) -> None:
    witness = tmp_path / "w"
    one = _store(backend, witness, keyring)
    shared = one.backend  # (one engine for every store: a memory backend's too)
    two = _store(shared, witness, keyring)
    await two.save(B, {"n": 1})
    await _flush(two)  # (its copy of the file: without one's marks of a)
    for n in range(1, 4):
        await one.save(A, {"n": n})
    await _flush(one)
    await ENDS[end](shared, witness, keyring)
    await two.save(A, {"other": 1})
    await _flush(two)
    assert (await one.load(A)).data == {"other": 1}
    assert not (await one.verify()).problems
    await two.witness.close() if two.witness is not None else None
    await one.close()


async def _lost_and_begun(
    tmp_path: Path, before: Callable[[StateStore], Awaitable[None]]
) -> StateStore:
    backend, witness = MemoryBackend(), tmp_path / "w"
    one, two = _store(backend, witness), _store(backend, witness)
    await before(one)
    await two.save(B, {"n": 1})
    await _flush(two)
    older = copy.deepcopy(backend._streams)  # (the tombstone stream's records too)
    for n in range(1, 4):
        await one.save(A, {"n": n})
    await _flush(one)
    backend._streams = older  # a lossy failover: a wholly lost, no delete
    await two.save(A, {"other": 1})
    await _flush(two)
    return one


async def _nothing(store: StateStore) -> None:
    return None


async def _an_older_incarnation_deleted(store: StateStore) -> None:
    # (a stream of a before one's: its tombstone is older than one's mark)
    plain = _store(store.backend, False)
    await plain.save(A, {"first": 1})
    assert await plain.delete(A)


@pytest.mark.parametrize("before", [_nothing, _an_older_incarnation_deleted])
async def test_verify_reports_a_stream_wholly_lost_and_begun_again_elsewhere(
    tmp_path: Path, before: Callable[[StateStore], Awaitable[None]]
) -> None:
    one = await _lost_and_begun(tmp_path, before)
    problems = (await one.verify()).problems  # (was: none; verify reads the file first)
    assert [(p.agent_id, p.seq) for p in problems] == [(A, 3)]
    with pytest.raises(RollbackDetected, match="seq 3"):
        await one.load(A)  # (and on every read after)
    with pytest.raises(RollbackDetected, match="seq 3"):
        await one.load(A)


async def test_an_older_incarnations_tombstone_is_no_proof_on_the_read_path(
    tmp_path: Path,
) -> None:
    one = await _lost_and_begun(tmp_path, _an_older_incarnation_deleted)
    with pytest.raises(RollbackDetected, match="seq 3"):  # (its tombstone: before the mark)
        await one.load(A)


async def test_an_older_versions_marks_prove_a_delete_by_the_stores_tombstone(
    tmp_path: Path,
) -> None:
    """A delete and a new stream written by a version that kept no ``"d"``: the store's
    tombstone proves the delete (the file format unchanged: ``d`` is optional)."""
    backend, witness = MemoryBackend(), tmp_path / "w"
    one, two = _store(backend, witness), _store(backend, witness)
    await two.save(B, {"n": 1})
    await _flush(two)
    for n in range(1, 4):
        await one.save(A, {"n": n})
    await _flush(one)
    await _delete_with_witness(backend, witness, None)
    await two.save(A, {"other": 1})
    await _flush(two)
    _as_an_older_version_wrote_it(witness)
    assert (await one.load(A)).data == {"other": 1}
    assert not (await one.verify()).problems


def _as_an_older_version_wrote_it(path: Path) -> None:
    """The file without any ``"d"``, sealed again (what a version before it writes)."""
    doc = json.loads(path.read_text())
    for entry in doc["streams"]:
        entry.pop("d", None)
    doc["seal"]["mac"] = _seal(canonical(doc["streams"]))
    path.write_text(json.dumps(doc))


class _Clock:
    """This process's wall clock, moved to act as several processes' (time.time)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.off = 0.0
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + self.off)


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgresql", "redis"])
@pytest.mark.parametrize("end", list(ENDS))
async def test_a_delete_by_a_process_whose_clock_is_behind_is_served(
    tmp_path: Path, kind: str, end: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The incarnation began an hour ago; ``one`` marks it now; the delete comes from a
    process whose clock is 30 s behind: its deletion (the file's ``"d"``, the store's
    tombstone) is stamped before ``one``'s mark, but long after the incarnation began.
    Was: RollbackDetected (the deletion compared with the mark's time)."""
    clock = _Clock(monkeypatch)
    keyring = Keyring({"k1": bytes(range(32))})
    with fresh_url(kind, tmp_path) as url:
        witness = tmp_path / "w"
        one = _store(url if kind != "memory" else MemoryBackend(), witness, keyring)
        shared = one.backend
        two = _store(shared, witness, keyring)
        await two.save(B, {"n": 1})
        await _flush(two)
        clock.off = -3600.0  # (its first record: an hour ago)
        await one.save(A, {"n": 1})
        clock.off = 0.0
        for n in range(2, 4):
            await one.save(A, {"n": n})
        await _flush(one)
        clock.off = -30.0  # (the deleting process: 30 s behind)
        await ENDS[end](shared, witness, keyring)
        clock.off = 0.0
        await two.save(A, {"other": 1})
        await _flush(two)
        assert (await one.load(A)).data == {"other": 1}
        assert not (await one.verify()).problems
        await two.witness.close() if two.witness is not None else None
        await one.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgresql", "redis"])
async def test_a_later_tombstone_stamped_earlier_hides_no_delete(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tombstones of one stream are appended by many processes, each by its own clock:
    the stream's order is not its stamps'. ``a``'s tombstone, then one of ``c`` by a
    process 60 s behind: the read back from the head stopped at ``c``'s (stamped before
    the mark) and never reached ``a``'s. Was: RollbackDetected."""
    clock = _Clock(monkeypatch)
    with fresh_url(kind, tmp_path) as url:
        witness = tmp_path / "w"
        one = _store(url if kind != "memory" else MemoryBackend(), witness)
        shared = one.backend
        two = _store(shared, witness)
        plain = _store(shared, False)
        await two.save(B, {"n": 1})
        await _flush(two)
        await plain.save("t/c", {"n": 1})
        for n in range(1, 4):
            await one.save(A, {"n": n})
        await _flush(one)
        assert await plain.delete(A)  # (no witness: the store's tombstone proves it)
        clock.off = -60.0
        assert await plain.delete("t/c")
        clock.off = 0.0
        await two.save(A, {"other": 1})
        await _flush(two)
        assert (await one.load(A)).data == {"other": 1}
        assert not (await one.verify()).problems
        await two.witness.close() if two.witness is not None else None
        await one.close()


async def test_the_stores_proof_is_read_only_on_the_rare_path(tmp_path: Path) -> None:
    """Loads and saves that find their mark, and deletes, read no tombstone; a delete
    without the witness is proven once, not on every read after."""
    from statekeeper.security.ended import provide
    from statekeeper.store.deleted_since import deleted_since

    backend, witness = MemoryBackend(), tmp_path / "w"
    one, two = _store(backend, witness), _store(backend, witness)
    reads: list[str] = []

    async def counted(store: StateStore, agent_id: str, since: float) -> bool:
        reads.append(agent_id)
        return await deleted_since(store, agent_id, since)

    for store in (one, two):
        assert store.witness is not None
        provide(store.witness, counted)
    await two.save(B, {"n": 1})
    await _flush(two)
    for n in range(1, 4):
        await one.save(A, {"n": n})
        assert (await one.load(A)).data == {"n": n}
    await _flush(one)
    assert await one.delete(A)
    await one.save(A, {"again": 1})
    await _flush(one)
    for _ in range(5):
        await one.load(A)
        await two.load(A)
    assert reads == []
    await _delete_without_witness(backend, witness, None)
    await two.save(A, {"other": 1})
    await _flush(two)
    for _ in range(5):
        assert (await one.load(A)).data == {"other": 1}
    assert reads == [A]
