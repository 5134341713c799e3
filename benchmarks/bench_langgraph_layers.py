"""Where the small graph's instructions go, layer by layer (issue 12): LangGraph alone,
the saver's own layers, the store's record, the SQLite statements — every thread,
callgrind windows around the same runs as ``bench_langgraph_write_window.py``.

Each kind runs in its own process under callgrind (instrumentation on only around
``RUNS`` 30-step runs of ``bench_langgraph_goals.small_graph``, ``durability="sync"``,
one new thread each, after two uncounted runs), and prints the instructions per run:

- ``floor``: ``bench_langgraph_floor.KeepsReferences`` (stores nothing, keeps the
  latest checkpoint object): LangGraph's own part of a run, which every saver pays;
- ``sqlite``: LangGraph's ``SqliteSaver`` (``synchronous=NORMAL``);
- ``sk``: ``StatekeeperSaver`` with its defaults (fork protection, held writes;
  ``writes_wait`` 120 s so that none times out under callgrind's slowdown);
- ``sk-nosql``: ``sk`` with the SQLite backend's ``append`` answering at once as if
  it had committed (nothing written): everything but the statements;
- ``sk-nostore``: ``sk`` with the store's ``WritePipeline.append_applied`` answering
  at once as if it had landed: the saver's own layers (plan, ops, claims, the write
  queue, the hop onto its loop), without the store's record (codec, chain, tags) and
  the statements;
- ``bare``: :class:`Bare`, the work of statekeeper's guarantees for a step written
  out in one frame per call, with no layer of the saver, store or backend: a step's
  writes kept in memory and stored with its checkpoint (as the saver's held writes),
  the checkpoint's JSON (header, metadata, values, writes) compressed with the
  codec's dictionary, its checksum and chain link (two SHA-256), and the append's
  statements on a statekeeper SQLite file (``BEGIN IMMEDIATE``, the head's
  compare-and-set, the checkpoint's key, the event row and its feed trigger,
  ``COMMIT``). What it leaves out that ``sk`` does: the run's claim and release, the
  snapshots, reading anything back. What a saver keeping those guarantees could cost
  with no Python layers at all.
- ``step``: :class:`Step`, the "one stored record per step" design with no saver
  layer, through the store's public API: a thread is a stream (created by its first
  ``put``), each ``put`` one ``append`` of a small record — header, metadata, the
  values of ``new_versions`` and the step's writes (kept in memory, as ``bare``
  does) — as one ``replace`` op on the document, with the checkpoint's idempotency
  key and the head's compare-and-set (``expected_seq``), on a ``StateStore``
  with the saver's codec (zstd with the dictionary from 64 bytes) and snapshots off,
  driven on the calling thread as the saver drives its store:
  what such a format costs on the store's general append, with everything the
  store does per append (record, seal, chain, key, statements);
- ``step-save``: the same record stored by ``StateStore.save`` of the whole
  small document (no idempotency key: the store's flat save, one statement).
- ``step-lean``: the same record, keyed, by the store's lean keyed append
  (``store/lean.py``: the body encoded once, sealed, the key, the head's
  compare-and-set and the event in one statement; the general ``append`` when it
  declines): the step-record design on the append the saver now takes.

So ``sk - sk-nosql`` is the statements, ``sk-nosql - sk-nostore`` the store's record,
``sk-nostore - floor`` the saver's own layers, ``sqlite - floor`` all of
``SqliteSaver``, ``bare - floor`` the guarantees' own work. The two stubbed kinds are
measuring tools only: their runs store nothing (each run is a new thread, so nothing
is read back from the file)::

    .venv/bin/python benchmarks/bench_langgraph_layers.py 4 /tmp/lglayers
    .venv/bin/python benchmarks/bench_langgraph_layers.py 4 /tmp/lglayers sk sk-nostore

``PYTHONPATH=<another tree's src>`` measures another tree (benchmarks/_common.py lets
it win).
"""

from __future__ import annotations

import asyncio
import ctypes
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_metadata,
)

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: F401  (PYTHONPATH wins)
from callgrind_window import helper, run_window, slowed_clock

KINDS = (
    "floor",
    "sqlite",
    "sk",
    "sk-nosql",
    "sk-nostore",
    "bare",
    "step",
    "step-save",
    "step-lean",
)
WARM = 2
#: the saver's ``writes_wait``: long enough that no held write times out under
#: callgrind on a loaded machine (at 1 s, at load ~15, some did: their callers then
#: committed them on their own, and one tree's run swung by up to 8 M instructions)
WRITES_WAIT = 120.0


def _stub_statements() -> None:
    from statekeeper.backends.sqlite import SQLiteBackend
    from statekeeper.records import AppendResult

    async def append(self: Any, request: Any) -> AppendResult:
        return AppendResult(request.agent_id, request.expected_seq + 1, request.expected_seq + 1)

    SQLiteBackend.append = append  # type: ignore[method-assign]


def _stub_store() -> None:
    from statekeeper.records import AppendResult
    from statekeeper.store.writes import WritePipeline

    async def append_applied(
        self: Any, agent_id: str, event_type: str, ops: Any, expected: int, *rest: Any
    ) -> AppendResult:
        return AppendResult(agent_id, expected + 1, expected + 1)

    WritePipeline.append_applied = append_applied  # type: ignore[method-assign]


class Bare(BaseCheckpointSaver[str]):
    """See the module's ``bare`` (a measuring tool: nothing it stores is read back)."""

    def __init__(self, path: Path) -> None:
        import hashlib
        import sqlite3

        from statekeeper.codec import zstd_dict

        super().__init__()
        asyncio.run(_schema(path))
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.lock = threading.Lock()
        self.zstd = zstd_dict.compressor(3)
        self.sha256 = hashlib.sha256
        self.seqs: dict[str, int] = {}
        self.writes: dict[str, list[Any]] = {}

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return None

    def list(self, config: Any, **kw: Any) -> Iterator[CheckpointTuple]:
        return iter(())

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        conf = config["configurable"]
        thread = conf["thread_id"]
        ns = conf.get("checkpoint_ns") or ""
        cid = checkpoint["id"]
        now = time.time()
        with self.lock:
            seq = self.seqs.get(thread, 0) + 1
            body = orjson.dumps(
                {
                    "h": [cid, checkpoint["ts"], conf.get("checkpoint_id")],
                    "v": checkpoint["v"],
                    "cv": checkpoint["channel_versions"],
                    "vs": checkpoint["versions_seen"],
                    "uc": checkpoint.get("updated_channels"),
                    "meta": get_checkpoint_metadata(config, metadata),
                    "vals": {
                        ch: checkpoint["channel_values"][ch]
                        for ch in new_versions
                        if ch in checkpoint["channel_values"]
                    },
                    "w": self.writes.pop(thread, None),
                },
                default=repr,
            )
            payload = self.zstd.compress(body)
            checksum = self.sha256(payload).digest()
            link = self.sha256(b"sk-link/1" + checksum).digest()
            cur = self.conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            if seq == 1:
                cur.execute(
                    "INSERT INTO sk_agents(agent_id, head_seq, created_at, updated_at, head_tag)"
                    " VALUES (?, 1, ?, ?, ?)",
                    (thread, now, now, link),
                )
            else:
                cur.execute(
                    "UPDATE sk_agents SET head_seq = ?, updated_at = ?, head_tag = ?"
                    " WHERE agent_id = ? AND head_seq = ? AND head_tag IS NOT NULL",
                    (seq, now, link, thread, seq - 1),
                )
            cur.execute(
                "INSERT INTO sk_idempotency(agent_id, key, first_seq, last_seq, created_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (thread, ns + cid, seq, seq, now),
            )
            cur.execute(
                "INSERT INTO sk_events(agent_id, seq, kind, ts, payload, checksum)"
                " VALUES (?, ?, 'patch', ?, ?, ?)",
                (thread, seq, now, payload, checksum),
            )
            cur.execute("COMMIT")
            self.seqs[thread] = seq
        return {"configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cid}}

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        with self.lock:
            conf = config["configurable"]
            held = self.writes.setdefault(conf["thread_id"], [])
            held.append([conf["checkpoint_id"], task_id, task_path, list(writes)])


class Step(BaseCheckpointSaver[str]):
    """See the module's ``step`` and ``step-save`` (measuring tools)."""

    def __init__(self, path: Path, save: bool, lean: bool = False) -> None:
        from statekeeper import Codec, StateStore

        super().__init__()
        codec = Codec(compression="zstd-dict", compress_min_bytes=64)
        # driven on the calling thread, one call at a time (``self.lock``), as the
        # saver drives its store (no hop to a loop thread: ``SyncStateStore`` has one)
        self.loop = asyncio.new_event_loop()
        self.store = StateStore(
            f"sqlite:///{path}?synchronous=NORMAL", codec=codec, snapshot_every=1_000_000
        )
        self.save = save
        self.lean = lean
        self.lock = threading.Lock()
        self.seqs: dict[str, int] = {}
        self.writes: dict[str, list[Any]] = {}

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return None

    def list(self, config: Any, **kw: Any) -> Iterator[CheckpointTuple]:
        return iter(())

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        conf = config["configurable"]
        thread = conf["thread_id"]
        ns = conf.get("checkpoint_ns") or ""
        cid = checkpoint["id"]
        values = checkpoint["channel_values"]
        with self.lock:
            record = {
                "h": [cid, checkpoint["ts"], conf.get("checkpoint_id")],
                "v": checkpoint["v"],
                "cv": dict(checkpoint["channel_versions"]),
                "vs": {k: dict(v) for k, v in checkpoint["versions_seen"].items()},
                "uc": list(checkpoint.get("updated_channels") or ()),
                "meta": get_checkpoint_metadata(config, metadata),
                "vals": {ch: values[ch] for ch in new_versions if ch in values},
                "w": self.writes.pop(thread, None),
            }
            seq = self.seqs.get(thread, 0)
            agent = f"lg/{thread}#1"
            if seq == 0:
                call = self.store.create(agent, {"cp": record})
            elif self.save:
                call = self.store.save(agent, {"cp": record}, expected_seq=seq)
            elif self.lean:
                call = self._lean(agent, record, seq, "k" + cid.replace("-", ""))
            else:
                call = self.store.append(
                    agent,
                    "lg.cp",
                    ops=[{"op": "replace", "path": "/cp", "value": record}],
                    expected_seq=seq,
                    idempotency_key="k" + cid.replace("-", ""),
                )
            seq = self.loop.run_until_complete(call).last_seq
            self.seqs[thread] = seq
        return {"configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cid}}

    async def _lean(self, agent: str, record: dict[str, Any], seq: int, key: str) -> Any:
        ops = [{"op": "replace", "path": "/cp", "value": record}]
        lean = self.store._writes.lean
        if lean is not None:
            done = lean(agent, "lg.cp", ops, seq, key, {"cp": record})
            if done is not None:
                return done if hasattr(done, "last_seq") else await done
        return await self.store.append(
            agent, "lg.cp", ops=ops, expected_seq=seq, idempotency_key=key
        )

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        with self.lock:
            conf = config["configurable"]
            held = self.writes.setdefault(conf["thread_id"], [])
            held.append([conf["checkpoint_id"], task_id, task_path, list(writes)])

    def close(self) -> None:
        self.loop.run_until_complete(self.store.close())
        self.loop.close()


async def _schema(path: Path) -> None:
    from statekeeper import StateStore

    store = StateStore(f"sqlite:///{path}")
    await store.create("schema", {})
    await store.close()


def write(kind: str, runs: int, out: Path) -> None:
    from bench_langgraph_floor import KeepsReferences  # type: ignore[import-not-found]
    from bench_langgraph_goals import small_graph, sqlite_saver
    from statekeeper.integrations.langgraph import StatekeeperSaver

    slowed_clock()
    window = ctypes.CDLL(str(helper(out)))
    tmp = Path(tempfile.mkdtemp(dir=out))
    saver: Any
    if kind == "floor":
        saver, close = KeepsReferences(), lambda: None
    elif kind == "bare":
        saver = Bare(tmp / "small.db")
        close = saver.conn.close
    elif kind == "sqlite":
        saver, close = sqlite_saver(tmp / "small.db", "NORMAL")
    elif kind in ("step", "step-save", "step-lean"):
        saver = Step(tmp / "small.db", save=kind == "step-save", lean=kind == "step-lean")
        close = saver.close
    else:
        if kind == "sk-nosql":
            _stub_statements()
        elif kind == "sk-nostore":
            _stub_store()
        url = f"sqlite:///{tmp / 'small.db'}?synchronous=NORMAL"
        saver = StatekeeperSaver.from_url(url, writes_wait=WRITES_WAIT)
        close = saver.close
    graph = small_graph(30).compile(checkpointer=saver)
    for t in range(WARM + runs):
        if t == WARM:
            window.cg_start()
        cfg = {"configurable": {"thread_id": f"small-{t}"}, "recursion_limit": 120}
        graph.invoke({"n": 0}, cfg, durability="sync")
    window.cg_stop()
    close()


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[1] in ("-h", "--help"):
        raise SystemExit(__doc__)
    if sys.argv[1] == "write":
        write(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
        return
    runs, out = int(sys.argv[1]), Path(sys.argv[2])
    kinds = sys.argv[3:] or KINDS
    for kind in kinds:
        if kind not in KINDS:
            raise SystemExit(f"unknown kind {kind!r}: one of {', '.join(KINDS)}")
        total = run_window(__file__, ["write", kind, str(runs), str(out)], out, f"layers-{kind}")
        print(f"{kind:<11} {total / runs:>14,.0f} instructions a 30-step run", flush=True)


if __name__ == "__main__":
    main()
