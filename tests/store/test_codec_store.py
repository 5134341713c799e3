"""The codec through the store: typed state everywhere (load, history, snapshots, cache),
formats, compression and encryption per store, size limits, delta snapshots, and files
written before the record header existed."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable
from contextlib import closing
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekeeper import ConfigurationError, IntegrityError, SerializationError, StateStore
from statekeeper.backends.sqlite import SCHEMA_VERSION
from statekeeper.codec import Codec, TypeRegistry
from statekeeper.codec.pipeline import legacy_checksum
from statekeeper.errors import StateTooLarge, UnknownTypeTag
from statekeeper.security import Keyring, generate_key, rekey

from ..codec.strategies import Priority, ToolCall, documents, registry, strict
from ..conftest import FakeClock

KEY = generate_key()

CONFIGS = {
    "json": {},
    "msgpack": {"format": "msgpack"},
    "zstd": {"compression": "zstd"},
    "zstd-dict": {"compression": "zstd-dict"},
    "keyed": {"keyring": Keyring({"k1": KEY})},
    "keyed-msgpack-zstd-delta": {
        "keyring": Keyring({"k1": KEY}),
        "format": "msgpack",
        "compression": "zstd",
        "full_snapshot_every": 3,
    },
}


@pytest.fixture(params=list(CONFIGS))
def config(request: pytest.FixtureRequest) -> dict[str, Any]:
    return dict(CONFIGS[request.param])  # type: ignore[no-any-return]


def _state(i: int) -> dict[str, Any]:
    return {
        "when": datetime(2024, 1, 1, i % 24, tzinfo=UTC),
        "day": date(2024, 1, 1 + i % 28),
        "id": uuid.UUID(int=i),
        "price": Decimal(f"{i}.10"),
        "blob": bytes([i % 256]) * 3,
        "tags": {f"t{j}" for j in range(i % 4)},
        "priority": Priority.HIGH if i % 2 else Priority.LOW,
        "calls": [
            ToolCall("search", {"q": str(j)}, datetime(2024, 1, 2, tzinfo=UTC))
            for j in range(i % 3)
        ],
        "$t": "a user key that looks like the tag",
        "messages": [{"role": "user", "content": "x" * 300} for _ in range(i)],
    }


async def test_typed_state_everywhere(
    url: str, open_store: Callable[..., StateStore], config: dict[str, Any]
) -> None:
    store = open_store(url, snapshot_every=3, types=registry(), **config)
    for i in range(1, 12):
        await store.save("a", _state(i), fsm_state=f"s{i % 3}")
    # the cached state, a copy from the cache, a fold from storage, history, time travel
    assert strict((await store.load("a")).data) == strict(_state(11))
    assert strict((await store.get("a")).data) == strict(_state(11))  # type: ignore[union-attr]
    for seq in (1, 3, 7, 11):
        assert strict((await store.load("a", at_seq=seq)).data) == strict(_state(seq))
    events = [e async for e in store.history("a")]
    assert len(events) == 11 and events[0].ops[0]["value"]["when"] == _state(1)["when"]
    assert (await store.verify()).ok
    cold = open_store(url, snapshot_every=3, types=registry(), cache_size=0, **config)
    if url != "memory://":
        assert strict((await cold.load("a")).data) == strict(_state(11))
        # the same typed state saved again diffs as no change at all
        result = await cold.save("a", _state(11), fsm_state="s2")
        last = [e async for e in cold.history("a", after_seq=result.last_seq - 1)]
        assert last[0].ops == []


async def test_the_callers_objects_are_never_shared(open_store: Callable[..., StateStore]) -> None:
    store = open_store("memory://", types=registry())
    state = {"tags": {"a"}, "call": ToolCall("x", {"k": [1]})}
    await store.save("a", state)
    state["tags"].add("b")  # type: ignore[attr-defined]
    state["call"].args["k"].append(2)  # type: ignore[attr-defined]
    loaded = (await store.load("a")).data
    assert loaded["tags"] == {"a"} and loaded["call"].args["k"] == [1]
    loaded["tags"].add("c")
    assert (await store.load("a")).data["tags"] == {"a"}


async def test_an_unregistered_type_is_refused_on_write_and_on_read(db_url: str) -> None:
    async with StateStore(db_url, types=[Priority]) as store:
        with pytest.raises(SerializationError) as info:
            await store.save("a", {"p": [ToolCall("x", {})]})
        assert info.value.path == "data.p[0]" and "ToolCall" in str(info.value)
        assert await store.head("a") == 0
        await store.save("a", {"p": Priority.LOW})
    async with StateStore(db_url) as store:  # registered on write, not here
        with pytest.raises(UnknownTypeTag) as info2:
            await store.load("a")
        assert info2.value.tag.endswith("Priority")


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    docs=st.lists(
        st.dictionaries(st.text(max_size=4), documents(), max_size=4), min_size=1, max_size=6
    )
)
async def test_random_typed_documents_survive_the_store(docs: list[dict[str, Any]]) -> None:
    async with StateStore("memory://", types=registry(), snapshot_every=2) as store:
        for doc in docs:
            await store.save("a", doc)
        assert strict((await store.load("a")).data) == strict(docs[-1])
        for seq in range(1, await store.head("a") + 1):
            await store.load("a", at_seq=seq)
        assert (await store.verify()).ok


async def test_one_store_holds_both_formats(db_url: str) -> None:
    async with StateStore(db_url, snapshot_every=3, types=registry()) as store:
        for i in range(1, 6):
            await store.save("a", _state(i))
    async with StateStore(db_url, snapshot_every=3, types=registry(), format="msgpack") as store:
        assert strict((await store.load("a")).data) == strict(_state(5))
        for i in range(6, 10):
            await store.save("a", _state(i))
        assert (await store.verify()).ok
    async with StateStore(db_url, types=registry(), cache_size=0) as store:
        assert strict((await store.load("a")).data) == strict(_state(9))
        assert strict((await store.load("a", at_seq=4)).data) == strict(_state(4))
    with closing(sqlite3.connect(db_url.removeprefix("sqlite:///"))) as conn:
        headers = [Codec.header(p) for (p,) in conn.execute("SELECT payload FROM sk_events")]
    assert None not in headers  # every stored payload has a codec header
    formats = {h.format_name for h in headers if h is not None}
    assert formats == {"json", "msgpack"}


def _exists(url: str) -> bool:
    return Path(url.removeprefix("sqlite:///")).exists()


async def test_codec_options_are_checked(db_url: str) -> None:
    with pytest.raises(ConfigurationError):
        StateStore("memory://", codec=Codec(), compression="zstd")
    for bad in (
        {"format": "xml"},
        {"compression": "lz4"},
        {"full_snapshot_every": 0},
        {"max_event_bytes": 0},
    ):
        with pytest.raises(ConfigurationError):
            StateStore(db_url, **bad)
    assert not _exists(db_url)  # checked before opening


# -- size limits ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limit", "what"),
    [
        ("max_event_bytes", "event"),
        ("max_state_bytes", "state"),
        ("max_snapshot_bytes", "snapshot"),
    ],
)
async def test_size_limits_refuse_before_writing(
    url: str, open_store: Callable[..., StateStore], limit: str, what: str
) -> None:
    store = open_store(url, snapshot_every=2, **{limit: 2_000})
    await store.save("a", {"messages": ["x" * 100]})
    big = {"messages": ["x" * 100, "y" * 3_000]}
    with pytest.raises(StateTooLarge) as info:
        await store.save("a", big)
    assert info.value.what == what and info.value.limit == 2_000
    assert info.value.size > 2_000 and f"{info.value.size:,}" in str(info.value)
    assert info.value.agent_id == "a"
    assert await store.head("a") == 1
    assert (await store.load("a")).data == {"messages": ["x" * 100]}
    await store.save("a", {"messages": ["x" * 100, "z"]})  # still usable
    assert await store.head("a") == 2


async def test_the_state_limit_counts_the_whole_document(
    open_store: Callable[..., StateStore],
) -> None:
    store = open_store("memory://", max_state_bytes=5_000, max_event_bytes=1_000)
    for i in range(5):  # small events, a growing state
        await store.append(
            "a", "note", ops=[{"op": "add", "path": f"/m{i}", "value": "x" * 900}]
        ) if i else await store.create("a", {})
    with pytest.raises(StateTooLarge) as info:
        for i in range(5, 10):
            await store.append(
                "a", "note", ops=[{"op": "add", "path": f"/m{i}", "value": "x" * 900}]
            )
    assert info.value.what == "state"


# -- delta snapshots ------------------------------------------------------------------


def _chat(n: int) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": f"message {i} " * 20} for i in range(n)]}


def _snapshots(db: Path) -> list[tuple[int, dict[str, Any]]]:
    codec = Codec()
    out = []
    with closing(sqlite3.connect(db)) as conn:
        for seq, ts, payload, checksum in conn.execute(
            "SELECT seq, ts, payload, checksum FROM sk_snapshots WHERE agent_id='a' ORDER BY seq"
        ):
            out.append((seq, codec.decode("a", seq, "snapshot", ts, payload, checksum)[0]))
    return out


async def test_delta_snapshots(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    full = tmp_path / "f.db"
    async with (
        StateStore(f"sqlite:///{db}", snapshot_every=4, full_snapshot_every=3) as store,
        StateStore(f"sqlite:///{full}", snapshot_every=4) as plain,
    ):
        for n in range(1, 41):
            await store.save("a", _chat(n))
            await plain.save("a", _chat(n))
        await store.snapshot("a")  # an explicit one at the head (already one there)
    snaps = _snapshots(db)
    kinds = ["delta" if "base" in body else "full" for _, body in snaps]
    assert kinds[:6] == ["full", "delta", "delta", "full", "delta", "delta"]
    for seq, body in snaps:
        if "base" in body:
            assert body["base"] in (s for s, b in snaps if "base" not in b) and body["base"] < seq
    assert db.stat().st_size < full.stat().st_size
    async with StateStore(
        f"sqlite:///{db}", snapshot_every=4, full_snapshot_every=3, cache_size=0
    ) as store:
        for seq in (3, 8, 12, 20, 24, 39, 40):
            assert (await store.load("a", at_seq=seq)).data == _chat(seq)
        assert (await store.verify()).ok
        # a fresh store continues the cycle from what is stored (its base loaded lazily)
        for n in range(41, 60):
            await store.save("a", _chat(n))
        assert (await store.load("a")).data == _chat(59)
        assert (await store.verify()).ok


async def test_a_delta_whose_base_is_gone_is_an_integrity_error(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    async with StateStore(f"sqlite:///{db}", snapshot_every=2, full_snapshot_every=4) as store:
        for n in range(1, 8):
            await store.save("a", _chat(n))
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("DELETE FROM sk_snapshots WHERE agent_id='a' AND seq=2")  # the full one
    async with StateStore(f"sqlite:///{db}", cache_size=0) as store:
        # the deltas cannot be resolved: the load falls back to a full replay
        assert (await store.load("a")).data == _chat(7)
        report = await store.verify()
        assert {p.seq for p in report.problems} == {4, 6}
        assert all("base snapshot" in p.reason for p in report.problems)


async def test_storage_grows_linearly_for_a_growing_chat(tmp_path: Path) -> None:
    sizes = []
    for steps in (100, 200):
        db = tmp_path / f"c{steps}.db"
        async with StateStore(
            f"sqlite:///{db}?synchronous=OFF",
            snapshot_every=25,
            full_snapshot_every=8,
            compression="zstd",
        ) as store:
            for n in range(1, steps + 1):
                await store.save("a", _chat(n))
        sizes.append(db.stat().st_size)
    assert sizes[1] < 2.6 * sizes[0]  # quadratic would be ~4x


# -- files from before the record header ---------------------------------------------------

V1_SCHEMA = """
CREATE TABLE sk_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE sk_agents (agent_id TEXT PRIMARY KEY, head_seq INTEGER NOT NULL,
    created_at REAL NOT NULL, updated_at REAL NOT NULL) WITHOUT ROWID;
CREATE TABLE sk_events (agent_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL,
    ts REAL NOT NULL, payload BLOB NOT NULL, checksum BLOB NOT NULL, PRIMARY KEY (agent_id, seq));
CREATE TABLE sk_snapshots (agent_id TEXT NOT NULL, seq INTEGER NOT NULL, ts REAL NOT NULL,
    payload BLOB NOT NULL, checksum BLOB NOT NULL, PRIMARY KEY (agent_id, seq));
CREATE TABLE sk_idempotency (agent_id TEXT NOT NULL, key TEXT NOT NULL, first_seq INTEGER NOT NULL,
    last_seq INTEGER NOT NULL, PRIMARY KEY (agent_id, key)) WITHOUT ROWID;
INSERT INTO sk_meta VALUES ('schema_version', '1');
"""


def _write_v1_file(db: Path) -> None:
    """A database as statekeeper 0.1 wrote it: schema 1, bare-JSON records."""
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.executescript(V1_SCHEMA)
        for n in range(1, 6):
            body = orjson.dumps(
                {"ops": [{"op": "replace", "path": "", "value": {"n": 1}}]}
                if n == 1
                else {"ops": [{"op": "replace", "path": "/n", "value": n}]}
            )
            kind = "created" if n == 1 else "patch"
            conn.execute(
                "INSERT INTO sk_events VALUES ('old', ?, ?, ?, ?, ?)",
                (n, kind, float(n), body, legacy_checksum("old", n, kind, body)),
            )
        snap = orjson.dumps(
            {
                "fsm": None,
                "data": {"n": 4},
                "v": 1,
                "created_at": 1.0,
                "updated_at": 4.0,
                "entered": 0.0,
            }
        )
        conn.execute(
            "INSERT INTO sk_snapshots VALUES ('old', 4, 4.0, ?, ?)",
            (snap, legacy_checksum("old", 4, "snapshot", snap)),
        )
        conn.execute("INSERT INTO sk_agents VALUES ('old', 5, 1.0, 5.0)")


async def test_a_schema_1_file_is_migrated_and_keeps_working(tmp_path: Path) -> None:
    db = tmp_path / "v1.db"
    _write_v1_file(db)
    url = f"sqlite:///{db}"
    async with StateStore(url, clock=FakeClock(10.0)) as store:
        assert (await store.load("old")).data == {"n": 5}
        assert (await store.load("old", at_seq=4)).data == {"n": 4}
        assert (await store.verify()).ok
        await store.save("old", {"n": 6})  # new records chain on to the old ones
        await store.save("new", {"fresh": True})
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT value FROM sk_meta WHERE key='schema_version'").fetchone() == (
            str(SCHEMA_VERSION),
        )
        tags = dict(conn.execute("SELECT agent_id, head_tag FROM sk_agents").fetchall())
    assert tags["old"] is not None and tags["new"] is not None
    async with StateStore(url, cache_size=0) as store:
        assert (await store.load("old")).data == {"n": 6}
        assert (await store.verify()).ok


async def test_a_legacy_snapshot_at_the_head_then_a_write(tmp_path: Path) -> None:
    db = tmp_path / "v1.db"
    _write_v1_file(db)
    with closing(sqlite3.connect(db)) as conn, conn:  # make seq 4 (which has a snapshot) the head
        conn.execute("DELETE FROM sk_events WHERE seq = 5")
        conn.execute("UPDATE sk_agents SET head_seq = 4")
    async with StateStore(f"sqlite:///{db}", cache_size=0) as store:
        assert (await store.load("old")).data == {"n": 4}
        await store.save("old", {"n": 40})
        assert (await store.load("old")).data == {"n": 40}
        assert (await store.verify()).ok


async def test_an_old_file_is_encrypted_by_rekey(tmp_path: Path) -> None:
    db = tmp_path / "v1.db"
    _write_v1_file(db)
    ring = Keyring({"k1": KEY})
    async with StateStore(f"sqlite:///{db}", keyring=ring) as store:
        with pytest.raises(IntegrityError, match="not encrypted"):
            await store.load("old")
        stats = await rekey(store)
        assert stats.events == 5 and stats.snapshots == 1 and stats.heads == 1
        assert (await store.load("old")).data == {"n": 5}
        await store.save("old", {"n": 6})
        assert (await store.verify()).ok
    assert b'"n":4' not in db.read_bytes()


@pytest.mark.parametrize("durability", ["group", "async"])
async def test_encrypted_store_in_every_durability_mode(db_url: str, durability: str) -> None:
    ring = Keyring({"k1": KEY})
    async with StateStore(
        db_url, keyring=ring, durability=durability, snapshot_every=3, types=registry()
    ) as store:
        for i in range(1, 10):
            await store.save("a", _state(i))
    async with StateStore(db_url, keyring=ring, types=registry(), cache_size=0) as store:
        assert strict((await store.load("a")).data) == strict(_state(9))
        assert (await store.verify()).ok


def test_types_accepts_a_registry_or_classes() -> None:
    assert StateStore("memory://", types=TypeRegistry([Priority])).codec.types.names
    assert StateStore("memory://", types=[Priority]).codec.types.names
