"""Fixtures for the LangGraph saver tests.

Every behaviour test runs on each backend URL in :data:`BACKENDS` (memory and SQLite;
``STATEKEEPER_LG_URLS`` adds server backends, e.g.
``STATEKEEPER_LG_URLS="postgresql://localhost/test redis://localhost"``) and, where
it matters, through both the sync and the async API (:class:`Api`).
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from langchain_core.messages import AIMessage
from langgraph.checkpoint.base import CheckpointTuple, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.graph import START, MessagesState, StateGraph

from statekeeper.integrations.langgraph import StatekeeperSaver

from ..backends._services import REDIS_URL, delete_prefix, namespace, require_redis

BACKENDS = ["memory", "sqlite", *os.environ.get("STATEKEEPER_LG_URLS", "").split()]


def backend_url(name: str, tmp_path: Path) -> str:
    """The URL of a fresh store for a backend name from :data:`BACKENDS`."""
    if name == "memory":
        return "memory://"
    if name == "sqlite":
        return f"sqlite:///{tmp_path}/lg.db"
    return name  # a server URL: tests use unique thread ids, so sharing is safe


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return backend_url(request.param, tmp_path)


@pytest.fixture(params=["sqlite", "redis"])
def fs_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store that two processes share, for the tests of another process acting
    between a saver's steps: a SQLite file, or a Redis key prefix of the test's own."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/shared.db"
        return
    require_redis()
    prefix = namespace(tmp_path, "sk_lgfs_") + ":"
    try:
        yield f"{REDIS_URL}?prefix={prefix}"
    finally:
        delete_prefix(prefix)


async def off_context(fn: Callable[[], None]) -> None:
    """Run ``fn`` on a new thread: another process's calls, outside this task's context
    (a conditional delete's context variable is not theirs); what it raises, raised."""
    failed: list[BaseException] = []

    def target() -> None:
        try:
            fn()
        except BaseException as exc:  # re-raised below, in the test
            failed.append(exc)

    t = threading.Thread(target=target)
    t.start()
    await asyncio.to_thread(t.join)
    if failed:
        raise failed[0]


def reply_graph() -> StateGraph[Any]:
    """A one-node ``MessagesState`` graph that answers "hello"."""
    b = StateGraph(MessagesState)
    b.add_node("reply", lambda s: {"messages": [AIMessage("hello")]})
    b.add_edge(START, "reply")
    return b


@pytest.fixture
def saver(url: str) -> Iterator[StatekeeperSaver]:
    s = StatekeeperSaver.from_url(url)
    yield s
    s.close()


class Api:
    """The saver's API called the sync way or the async way, awaited uniformly."""

    def __init__(self, saver: StatekeeperSaver, mode: str) -> None:
        self.saver = saver
        self.mode = mode

    async def put(self, config: Any, checkpoint: Any, metadata: Any, versions: Any) -> Any:
        if self.mode == "sync":
            return self.saver.put(config, checkpoint, metadata, versions)
        return await self.saver.aput(config, checkpoint, metadata, versions)

    async def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        if self.mode == "sync":
            self.saver.put_writes(config, writes, task_id, task_path)
        else:
            await self.saver.aput_writes(config, writes, task_id, task_path)

    async def get_tuple(self, config: Any) -> CheckpointTuple | None:
        if self.mode == "sync":
            return self.saver.get_tuple(config)
        return await self.saver.aget_tuple(config)

    async def list(self, config: Any, **kwargs: Any) -> list[CheckpointTuple]:
        if self.mode == "sync":
            return list(self.saver.list(config, **kwargs))
        return [t async for t in self.saver.alist(config, **kwargs)]

    async def delete_thread(self, thread_id: str) -> None:
        if self.mode == "sync":
            self.saver.delete_thread(thread_id)
        else:
            await self.saver.adelete_thread(thread_id)

    async def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        if self.mode == "sync":
            self.saver.delete_for_runs(run_ids)
        else:
            await self.saver.adelete_for_runs(run_ids)

    async def copy_thread(self, source: str, target: str) -> None:
        if self.mode == "sync":
            self.saver.copy_thread(source, target)
        else:
            await self.saver.acopy_thread(source, target)

    async def prune(self, thread_ids: Sequence[str], strategy: str = "keep_latest") -> None:
        if self.mode == "sync":
            self.saver.prune(thread_ids, strategy=strategy)
        else:
            await self.saver.aprune(thread_ids, strategy=strategy)

    async def prune_retention(self, thread_ids: Any = None, **kwargs: Any) -> Any:
        if self.mode == "sync":
            return self.saver.prune_retention(thread_ids, **kwargs)
        return await self.saver.aprune_retention(thread_ids, **kwargs)


@pytest.fixture(params=["sync", "async"])
def api(request: pytest.FixtureRequest, saver: StatekeeperSaver) -> Api:
    return Api(saver, request.param)


def new_thread() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def config(thread_id: str, ns: str = "", checkpoint_id: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def bare_checkpoint() -> Any:
    """An empty checkpoint with a fresh id (a saver's own tests: no graph)."""
    cp = empty_checkpoint()
    cp["id"] = str(uuid6())
    return cp


def checkpoint(values: dict[str, Any], versions: dict[str, Any], **extra: Any) -> dict[str, Any]:
    cp: dict[str, Any] = dict(empty_checkpoint())
    cp.update(
        id=str(uuid6(clock_seq=-1)),
        channel_values=dict(values),
        channel_versions=dict(versions),
        versions_seen=extra.pop("versions_seen", {}),
        updated_channels=extra.pop("updated_channels", sorted(values)),
    )
    cp.pop("pending_sends", None)
    cp.update(extra)
    return cp


class Chain:
    """Puts a linear chain of checkpoints on one thread, tracking versions like Pregel."""

    def __init__(self, api: Api, thread_id: str | None = None, ns: str = "") -> None:
        self.api = api
        self.thread_id = thread_id or new_thread()
        self.ns = ns
        self.values: dict[str, Any] = {}
        self.versions: dict[str, int] = {}
        self.configs: list[dict[str, Any]] = []
        self.ids: list[str] = []

    async def step(
        self, changes: dict[str, Any], metadata: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        new_versions = {}
        for channel, value in changes.items():
            self.values[channel] = value
            self.versions[channel] = self.versions.get(channel, 0) + 1
            new_versions[channel] = self.versions[channel]
        parent = self.ids[-1] if self.ids else None
        cp = checkpoint(self.values, self.versions)
        meta = {"source": "loop", "step": len(self.ids), "parents": {}, **(metadata or {})}
        saved = await self.api.put(config(self.thread_id, self.ns, parent), cp, meta, new_versions)
        self.configs.append(saved)
        self.ids.append(cp["id"])
        return saved  # type: ignore[no-any-return]


async def agen_list(agen: AsyncIterator[Any]) -> list[Any]:
    return [x async for x in agen]
