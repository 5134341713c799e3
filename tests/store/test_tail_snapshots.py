"""Tail snapshots (store/tails.py, docs/benchmarks.md "coldtail"): every few events past
the latest whole snapshot the append carries a delta snapshot made of the bytes the save
holds, so a cold load replays at most ``TAIL_EVERY - 1`` events. Each one is verified and
chained as any snapshot; an edited or removed one is passed over, never trusted."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from statekeeper import IntegrityError, StateStore
from statekeeper.governance.retention import RetentionPolicy, apply_retention
from statekeeper.security import Keyring, generate_key
from statekeeper.store import snapshots, tails
from statekeeper.store.reads import ReadPath
from statekeeper.store.tails import CUMULATIVE_EVERY, TAIL_EVERY, TailBase

from ..conftest import FakeClock
from .test_save_fast import Calls, stored

MSGS = [{"role": "user" if i % 2 else "assistant", "text": f"message {i} " * 8} for i in range(160)]


def _doc(n: int) -> dict[str, Any]:
    return {"task": "chat", "messages": MSGS[:n]}


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'tail.db'}?synchronous=OFF"


async def _chat(url: str, saves: int, **options: Any) -> None:
    """``saves`` saves of a growing chat on agent ``a`` (a whole snapshot every 20
    events unless ``options`` say otherwise)."""
    async with StateStore(url, **{"witness": False, "snapshot_every": 20, **options}) as store:
        for n in range(1, saves + 1):
            await store.save("a", _doc(n))


def _snapshot_seqs(tmp_path: Path) -> list[int]:
    with closing(sqlite3.connect(tmp_path / "tail.db")) as conn:
        return [r[0] for r in conn.execute("SELECT seq FROM sk_snapshots ORDER BY seq")]


def _replayed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The events each load replays, folded onto a record (``apply_events``) or, by a
    load kept by nobody, onto the snapshot's data (``bare_fold``, "cold6")."""
    counts: list[int] = []
    apply, bare_fold = ReadPath.apply_events, ReadPath.bare_fold

    def counting(self: ReadPath, record: Any, events: Any) -> None:
        counts.append(len(events))
        apply(self, record, events)

    def counting_bare(self: ReadPath, *args: Any) -> Any:
        folded = bare_fold(self, *args)
        if folded is not None:
            counts.append(len(args[-1]))  # (its events)
        return folded

    monkeypatch.setattr(ReadPath, "apply_events", counting)
    monkeypatch.setattr(ReadPath, "bare_fold", counting_bare)
    return counts


async def test_a_tail_snapshot_is_stored_every_few_events_past_the_whole_one(
    tmp_path: Path,
) -> None:
    await _chat(_url(tmp_path), 45)
    # whole snapshots at 20 and 40, tails every TAIL_EVERY events after each
    assert _snapshot_seqs(tmp_path) == [20, 20 + TAIL_EVERY, 20 + 2 * TAIL_EVERY, 40]


@pytest.mark.parametrize("cache_size", [0, 8])
async def test_a_cold_load_past_a_tail_replays_only_the_events_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_size: int
) -> None:
    url = _url(tmp_path)
    await _chat(url, 39)  # whole at 20, tails at 28 and 36: 3 events after the last
    counts = _replayed(monkeypatch)
    async with StateStore(url, cache_size=cache_size, witness=False) as cold:
        loaded = await cold.load("a")
        assert loaded.data == _doc(39) and loaded.seq == 39
        assert sum(counts) == 39 - 36
        await cold.save("a", _doc(40))  # a write on the state so read
        assert (await cold.load("a")).data == _doc(40)
    async with StateStore(url, cache_size=0, witness=False) as again:
        assert (await again.load("a")).data == _doc(40)
        assert (await again.verify()).ok


async def test_every_head_loads_the_state_saved(tmp_path: Path) -> None:
    url = _url(tmp_path)
    async with (
        StateStore(url, witness=False, snapshot_every=20) as store,
        StateStore(url, cache_size=0, witness=False) as cold,
    ):
        for n in range(1, 62):
            state = {"task": f"t{n % 3}", "messages": MSGS[:n], "n": n}
            if n % 11 == 0:
                del state["task"]  # a key removed, then added again
            await store.save("a", state)
            loaded = await cold.load("a")
            assert loaded.data == state and loaded.seq == n
        assert (await cold.verify()).ok


def _tamper(tmp_path: Path, sql: str, *args: Any) -> None:
    with closing(sqlite3.connect(tmp_path / "tail.db")) as conn:
        conn.execute(sql, args)
        conn.commit()


def _flip(tmp_path: Path, table: str, seq: int) -> bytes:
    """Flip a bit of the stored payload of agent ``a``'s record ``seq`` in ``table``
    (``sk_snapshots`` or ``sk_events``); returns the payload as it was."""
    with closing(sqlite3.connect(tmp_path / "tail.db")) as conn:
        query = f"SELECT payload FROM {table} WHERE seq = ?"
        payload: bytes = conn.execute(query, (seq,)).fetchone()[0]
    edited = payload[:-3] + bytes([payload[-3] ^ 1]) + payload[-2:]
    _tamper(tmp_path, f"UPDATE {table} SET payload = ? WHERE seq = ?", edited, seq)
    return payload


async def _loads_the_saved_state(url: str, n: int) -> None:
    async with StateStore(url, cache_size=0, witness=False) as cold:
        loaded = await cold.load("a")
        assert loaded.data == _doc(n) and loaded.seq == n


async def test_an_edited_tail_is_passed_over(tmp_path: Path) -> None:
    url = _url(tmp_path)
    await _chat(url, 39)
    _flip(tmp_path, "sk_snapshots", 36)
    await _loads_the_saved_state(url, 39)  # (from the tail at 28: the events verified)
    async with StateStore(url, witness=False) as store:
        assert not (await store.verify()).ok


async def test_a_removed_tail_is_passed_over(tmp_path: Path) -> None:
    url = _url(tmp_path)
    await _chat(url, 39)
    _tamper(tmp_path, "DELETE FROM sk_snapshots WHERE seq = 36")
    await _loads_the_saved_state(url, 39)


async def test_an_edited_base_of_a_tail_is_passed_over(tmp_path: Path) -> None:
    url = _url(tmp_path)
    await _chat(url, 39)
    _flip(tmp_path, "sk_snapshots", 20)
    await _loads_the_saved_state(url, 39)


async def test_a_tail_moved_onto_another_seq_is_not_trusted(tmp_path: Path) -> None:
    url = _url(tmp_path)
    await _chat(url, 39)
    _tamper(tmp_path, "DELETE FROM sk_snapshots WHERE seq = 36")
    _tamper(tmp_path, "UPDATE sk_snapshots SET seq = 36 WHERE seq = 28")
    await _loads_the_saved_state(url, 39)


async def test_an_edited_event_after_the_tail_still_fails(tmp_path: Path) -> None:
    url = _url(tmp_path)
    await _chat(url, 39)
    _flip(tmp_path, "sk_events", 38)
    async with StateStore(url, cache_size=0, witness=False) as cold:
        with pytest.raises(IntegrityError):
            await cold.load("a")


async def test_an_edited_event_under_a_tail_is_found_by_verify(tmp_path: Path) -> None:
    # as under any snapshot: the load trusts the (sealed, chained) tail, verify reads all
    url = _url(tmp_path)
    await _chat(url, 39)
    _flip(tmp_path, "sk_events", 30)
    await _loads_the_saved_state(url, 39)
    async with StateStore(url, witness=False) as store:
        assert not (await store.verify()).ok


@pytest.mark.parametrize(
    "options", [{"snapshot_every": "cost"}, {"snapshot_every": 20, "full_snapshot_every": 3}]
)
async def test_other_policies_write_no_tails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: dict[str, Any]
) -> None:
    def no_tail(record: Any) -> None:
        raise AssertionError("a tail snapshot was made")

    monkeypatch.setattr(snapshots, "tail_body", no_tail)
    url = _url(tmp_path)
    await _chat(url, 39, **options)
    assert _snapshot_seqs(tmp_path)
    await _loads_the_saved_state(url, 39)


async def test_an_engine_without_the_chain_read_writes_no_tails() -> None:
    # (the memory engine, like PostgreSQL, Redis and S3: no inline read of a range of
    # snapshots, where a chain would cost a read per tail)
    async with StateStore("memory://", witness=False, snapshot_every=20) as store:
        for n in range(1, 40):
            await store.save("a", _doc(n))
        raw = await store.backend.latest_snapshot("a")
        assert raw is not None and raw.seq == 20
        store._reads.forget("a")
        loaded = await store.load("a")
        assert loaded.data == _doc(39) and loaded.seq == 39
        assert (await store.verify()).ok


async def test_a_chain_of_tails_folds_the_general_way_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an engine without the inline read of a chain (an observed or wrapped one, a file
    # copied elsewhere): the general fold resolves each tail against the one before it
    url = _url(tmp_path)
    await _chat(url, 39)
    monkeypatch.setattr("statekeeper.store.reads._inline_base", lambda *a: None)
    async with StateStore(url, cache_size=0, witness=False) as cold:
        loaded = await cold.load("a")
        assert loaded.data == _doc(39) and loaded.seq == 39


async def test_an_edited_tail_inside_the_chain_is_passed_over(tmp_path: Path) -> None:
    url = _url(tmp_path)
    await _chat(url, 39)
    _flip(tmp_path, "sk_snapshots", 28)
    await _loads_the_saved_state(url, 39)


async def test_get_many_reads_past_a_tail_on_the_thin_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _url(tmp_path)
    await _chat(url, 39)

    async def no_fold(*args: Any, **kw: Any) -> Any:
        raise AssertionError("the general fold was taken")

    monkeypatch.setattr(ReadPath, "fold", no_fold)
    async with StateStore(url, cache_size=0, witness=False) as cold:
        got = await cold.get_many(["a", "nobody"])
        assert got[0] is not None and got[0].data == _doc(39) and got[1] is None


async def _stored_snapshots(path: Path) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        return list(
            conn.execute("SELECT seq, ts, payload, checksum FROM sk_snapshots ORDER BY seq")
        )


@pytest.mark.parametrize("durability", ["sync", "group"])
async def test_the_flat_save_makes_the_tails_the_general_path_makes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    calls = Calls(monkeypatch)
    for name, fast in (("flat.db", True), ("general.db", False)):
        async with StateStore(
            f"sqlite:///{tmp_path}/{name}",
            clock=FakeClock(),
            snapshot_every=20,
            durability=durability,
            witness=False,
        ) as store:
            before = calls.flat
            for n in range(1, 46):
                store._writes.fast = fast  # (False: the general path, as with options)
                await store.save("a", _doc(n))
            if fast:  # every save but the first and the whole snapshots' (20, 40): flat
                assert calls.flat - before == 45 - 3
    assert await stored(tmp_path / "flat.db") == await stored(tmp_path / "general.db")
    snaps = await _stored_snapshots(tmp_path / "flat.db")
    assert snaps == await _stored_snapshots(tmp_path / "general.db")
    assert [s[0] for s in snaps] == [20, 28, 36, 40]  # (tails at 28, 36: made flat)


@pytest.mark.parametrize("rule", ["* keep_last=5", "* snapshot_every=20"])
async def test_retention_keeps_the_chain_of_every_tail_it_keeps(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, rule: str
) -> None:
    url = _url(tmp_path)
    await _chat(url, 39)  # whole at 20, tails at 28 and 36
    async with StateStore(url, witness=False, snapshot_every=20) as store:
        await apply_retention(store, RetentionPolicy.parse(rule))
        assert (await store.verify()).ok
    caplog.clear()
    await _loads_the_saved_state(url, 39)
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


async def test_appends_that_hold_no_packed_bytes_write_no_extra_snapshot(tmp_path: Path) -> None:
    # a tail is made of the save's packed bytes: events appended as ops (no bytes held)
    # after a whole snapshot write neither a tail nor a whole snapshot in its place
    async with StateStore(_url(tmp_path), witness=False, snapshot_every=20) as store:
        for n in range(1, 22):  # the whole snapshot at 20 (its bytes held: a tail base)
            await store.save("a", _doc(n))
        for n in range(21, 30):
            await store.append(
                "a", "note", ops=[{"op": "add", "path": "/messages/-", "value": MSGS[n]}]
            )
        assert (await store.load("a")).data == _doc(30)
    assert _snapshot_seqs(tmp_path) == [20]


async def test_a_keyed_store_seals_its_tails_and_loads_past_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = Keyring({"k1": generate_key()}, active="k1")
    url = _url(tmp_path)
    await _chat(url, 39, keyring=key)
    assert _snapshot_seqs(tmp_path) == [20, 28, 36]
    counts = _replayed(monkeypatch)
    async with StateStore(url, keyring=key, cache_size=0, witness=False) as cold:
        loaded = await cold.load("a")
        assert loaded.data == _doc(39) and sum(counts) == 3
        assert (await cold.verify()).ok
    payload = _flip(tmp_path, "sk_snapshots", 36)
    assert b"message 30" not in payload  # (sealed: the values are not in the clear)
    async with StateStore(url, keyring=key, cache_size=0, witness=False) as cold:
        assert (await cold.load("a")).data == _doc(39)


def _bases(tmp_path: Path) -> dict[int, int | None]:
    """``{snapshot seq: the seq its delta is on (None: whole)}``, read from the rows."""
    import msgpack  # type: ignore[import-untyped]

    out: dict[int, int | None] = {}
    with closing(sqlite3.connect(tmp_path / "tail.db")) as conn:
        for seq, payload in conn.execute("SELECT seq, payload FROM sk_snapshots ORDER BY seq"):
            out[seq] = msgpack.unpackb(payload[35:]).get("base")
    return out


async def test_every_few_tails_one_is_cumulative_and_the_base_of_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _url(tmp_path)
    async with StateStore(url, witness=False, snapshot_every=100) as store:
        for n in range(1, 142):
            await store.save("a", _doc(n))
    cumulative = 100 + CUMULATIVE_EVERY * TAIL_EVERY
    bases = _bases(tmp_path)
    assert [s for s in bases if s > 100] == list(range(108, 141, TAIL_EVERY))
    for seq, base in bases.items():
        if seq <= 100:
            continue  # (the whole snapshot at 100, and the tails of the one before)
        expected = 100 if seq <= cumulative else cumulative
        assert base == expected, (seq, base)
    # a cold load reads the tail at the head, its cumulative base and the whole one
    read: list[tuple[int, int]] = []
    at = tails._chain

    def reading(codec: Any, rows: Any, *args: Any) -> Any:
        read.append(tuple(raw.seq for raw in rows))  # type: ignore[arg-type]
        return at(codec, rows, *args)

    monkeypatch.setattr(tails, "_chain", reading)
    counts = _replayed(monkeypatch)
    async with StateStore(url, cache_size=0, witness=False) as cold:
        loaded = await cold.load("a")
        assert loaded.data == _doc(141) and sum(counts) == 1
        assert read == [(100, cumulative)]
        assert (await cold.verify()).ok


@pytest.mark.parametrize("saved", [21, 30])
async def test_a_store_that_loaded_the_agent_cold_writes_tails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, saved: int
) -> None:
    # the state a save is made on was read from storage (21: the whole snapshot at 20 is
    # the latest; 30: the tail at 28 is): the next tails are made on the whole one read
    # (before, such a store wrote none until its next whole snapshot)
    url = _url(tmp_path)
    await _chat(url, saved)
    async with StateStore(url, witness=False, snapshot_every=20) as store:
        for n in range(saved + 1, 40):
            await store.save("a", _doc(n))
    assert _snapshot_seqs(tmp_path) == [20, 28, 36]
    counts = _replayed(monkeypatch)
    async with StateStore(url, cache_size=0, witness=False) as cold:
        loaded = await cold.load("a")
        assert loaded.data == _doc(39) and sum(counts) == 39 - 36
        assert (await cold.verify()).ok


async def test_an_edited_cumulative_tail_is_passed_over(tmp_path: Path) -> None:
    url = _url(tmp_path)
    async with StateStore(url, witness=False, snapshot_every=100) as store:
        for n in range(1, 142):
            await store.save("a", _doc(n))
    cumulative = 100 + CUMULATIVE_EVERY * TAIL_EVERY
    _flip(tmp_path, "sk_snapshots", cumulative)
    await _loads_the_saved_state(url, 141)  # (from a tail below it: the events verified)
    async with StateStore(url, witness=False) as store:
        assert not (await store.verify()).ok


async def test_tails_chained_one_on_another_still_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the layout written before cumulative tails: each tail a delta on the one before
    def chained(base: TailBase, seq: int, link: bytes, dumped: Any) -> TailBase:
        return TailBase(seq, seq, link, dumped, base.whole_seq, base.whole_link, base.whole, 0)

    url = _url(tmp_path)
    with monkeypatch.context() as patched:
        patched.setattr(tails, "CUMULATIVE_EVERY", 1 << 30)
        patched.setattr(tails, "_advanced", chained)
        async with StateStore(url, witness=False, snapshot_every=100) as store:
            for n in range(1, 132):
                await store.save("a", _doc(n))
    bases = _bases(tmp_path)
    assert [bases[s] for s in (108, 116, 124)] == [100, 108, 116]
    counts = _replayed(monkeypatch)
    async with StateStore(url, cache_size=0, witness=False) as cold:
        loaded = await cold.load("a")
        assert loaded.data == _doc(131) and sum(counts) == 131 - 124
        assert (await cold.verify()).ok
