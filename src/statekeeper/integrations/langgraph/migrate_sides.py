"""The two sides of a LangGraph thread migration (:mod:`.migrate`): a LangGraph saver's
own database and a statekeeper store, read and written through their savers, and the
empty target of an export's dry run."""

from __future__ import annotations

import abc
import builtins
from collections.abc import Callable, Coroutine, Iterator, Mapping
from typing import TYPE_CHECKING, Any, cast

from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    CheckpointTuple,
)

from .history import View
from .peers import IncompatibleTarget, PeerDatabase

if TYPE_CHECKING:
    from ...codec.keys import Keyring
    from .saver import StatekeeperSaver

#: checkpoints read per ``list`` call from a statekeeper source
_PAGE = 64

#: ``{(namespace, checkpoint id, task id): [(idx, channel)]}`` (see ``_Side.write_indexes``)
Indexes = dict[tuple[str, str, str], builtins.list[tuple[int, str]]]


# -- the two kinds of sides ------------------------------------------------------------


class _Side(abc.ABC):
    """What the copy needs of a saver's database."""

    saver: BaseCheckpointSaver[Any]
    location: str

    @abc.abstractmethod
    def threads(self) -> builtins.list[str]:
        """Every thread id of the database."""

    @abc.abstractmethod
    def index(self, thread_id: str) -> builtins.list[tuple[str, str]]:
        """``[(checkpoint id, namespace)]`` of ``thread_id``."""

    @abc.abstractmethod
    def write_counts(self, thread_id: str) -> dict[tuple[str, str], int]:
        """``{(checkpoint id, namespace): number of pending writes}``."""

    @abc.abstractmethod
    def task_paths(self, thread_id: str) -> dict[tuple[str, str, str], str]:
        """``{(checkpoint id, namespace, task id): task path}`` of the pending writes."""

    @abc.abstractmethod
    def write_indexes(self, thread_id: str) -> Indexes:
        """``{(namespace, checkpoint id, task id): [(idx, channel)]}`` of the pending
        writes, each task's by index (the order the savers list them in)."""

    @abc.abstractmethod
    def put_writes_at(
        self,
        config: Any,
        items: builtins.list[tuple[int, str, Any]],
        task_id: str,
        task_path: str,
    ) -> None:
        """``put_writes`` with each write's index given: ``(idx, channel, value)``."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the database."""

    def settled(self) -> BaseCheckpointSaver[Any]:
        """Make every write durable; the saver to verify the copy with."""
        return self.saver

    def tuples(
        self, thread_id: str, wanted: builtins.list[tuple[str, str]]
    ) -> Iterator[CheckpointTuple]:
        """The checkpoints ``wanted`` (``(id, namespace)``, oldest first), read one by one
        with ``get_tuple``."""
        for cid, ns in wanted:
            conf = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}
            found = self.saver.get_tuple({"configurable": conf})
            if found is not None:  # else deleted from the source meanwhile
                yield found


class _PeerSide(_Side):
    def __init__(self, db: PeerDatabase) -> None:
        self.db = db
        self.saver = db.saver
        self.location = db.location

    def threads(self) -> builtins.list[str]:
        return self.db.threads()

    def index(self, thread_id: str) -> builtins.list[tuple[str, str]]:
        return self.db.index(thread_id)

    def write_counts(self, thread_id: str) -> dict[tuple[str, str], int]:
        return self.db.write_counts(thread_id)

    def task_paths(self, thread_id: str) -> dict[tuple[str, str, str], str]:
        return self.db.task_paths(thread_id)

    def write_indexes(self, thread_id: str) -> Indexes:
        return self.db.write_indexes(thread_id)

    def put_writes_at(
        self,
        config: Any,
        items: builtins.list[tuple[int, str, Any]],
        task_id: str,
        task_path: str,
    ) -> None:
        self.db.put_writes_at(config, items, task_id, task_path)

    def close(self) -> None:
        self.db.close()


class _StatekeeperSide(_Side):
    """A statekeeper store through :class:`StatekeeperSaver`; the thread index and task
    paths come from the thread's document (see :mod:`.mapping`)."""

    def __init__(
        self,
        saver: StatekeeperSaver,
        location: str,
        reopen: Callable[[], StatekeeperSaver] | None = None,
    ) -> None:
        self.saver = saver
        self.sk = saver
        self.location = location
        self.reopen = reopen

    def settled(self) -> BaseCheckpointSaver[Any]:
        """Flush the store (the copy writes behind), close it, and verify through a new
        saver on a new store: what is compared is read back from the backend."""
        if self.reopen is None:
            return self.saver
        self.sk._portal.call(self.sk.store.flush())
        self.sk.close()
        self.sk = self.reopen()
        self.saver = self.sk
        return self.saver

    def _view(self, thread_id: str) -> View | None:
        """Every checkpoint of the thread and its writes (see :mod:`.history`)."""

        async def read() -> View | None:
            st = await self.sk._open(thread_id, create=False)
            return None if st is None else await self.sk._view(st)

        return self.sk._portal.call(read())

    def tuples(
        self, thread_id: str, wanted: builtins.list[tuple[str, str]]
    ) -> Iterator[CheckpointTuple]:
        """The checkpoints ``wanted``, newest first, by ``list`` in pages (one pass over
        the thread's stream per page, where ``get_tuple`` of an older checkpoint
        replays the stream from a snapshot each time)."""
        todo = set(wanted)
        config: Any = {"configurable": {"thread_id": thread_id}}
        before: Any = None
        while todo:
            page = builtins.list(self.saver.list(config, before=before, limit=_PAGE))
            for tup in page:
                key = (tup.checkpoint["id"], tup.config["configurable"]["checkpoint_ns"])
                if key in todo:
                    todo.discard(key)
                    yield tup
            if len(page) < _PAGE:
                return
            before = page[-1].config

    def threads(self) -> builtins.list[str]:
        async def collect() -> builtins.list[str]:
            return [t async for t in self.sk._thread_ids()]

        return sorted(self.sk._portal.call(collect()))

    def index(self, thread_id: str) -> builtins.list[tuple[str, str]]:
        view = self._view(thread_id)
        if view is None:
            return []
        return sorted((cid, ns) for ns, cids in view.idx.items() for cid in cids)

    def write_counts(self, thread_id: str) -> dict[tuple[str, str], int]:
        view = self._view(thread_id)
        if view is None:
            return {}
        return {
            (cid, ns): sum(len(task["i"]) for task in tasks.values())
            for ns, by_cid in view.writes.items()
            for cid, tasks in by_cid.items()
        }

    def task_paths(self, thread_id: str) -> dict[tuple[str, str, str], str]:
        view = self._view(thread_id)
        if view is None:
            return {}
        return {
            (ns, cid, task_id): str(task.get("p") or "")
            for ns, by_cid in view.writes.items()
            for cid, tasks in by_cid.items()
            for task_id, task in tasks.items()
        }

    def write_indexes(self, thread_id: str) -> Indexes:
        view = self._view(thread_id)
        if view is None:
            return {}
        return {
            (ns, cid, task_id): sorted(
                (int(idx), str(entry[0])) for idx, entry in task["i"].items()
            )
            for ns, by_cid in view.writes.items()
            for cid, tasks in by_cid.items()
            for task_id, task in tasks.items()
        }

    def put_writes_at(
        self,
        config: Any,
        items: builtins.list[tuple[int, str, Any]],
        task_id: str,
        task_path: str,
    ) -> None:
        self.sk._put_writes_at(config, items, task_id, task_path)

    def close(self) -> None:
        self.sk.close()


def _open_statekeeper(
    url: str,
    keyring: Keyring | None,
    *,
    readonly: bool,
    serde: Any = None,
    extra: Mapping[str, Any] | None = None,
) -> _StatekeeperSide:
    from ...backends.redact import mask_url
    from ...backends.url import open_backend
    from ...errors import NotAStore
    from .saver import StatekeeperSaver

    async def check() -> None:
        backend = open_backend(url, readonly=True)
        try:
            await backend.ensure_store()
            if not readonly:
                await _check_keys(backend, url, keyring)
        finally:
            await backend.close()

    try:
        _run_sync(check())
    except NotAStore as exc:
        if readonly:
            raise
        # (the engine's reason may name `statekeeper init` already: said once)
        said = "statekeeper init" in exc.reason
        hint = "" if said else "; create one with `statekeeper init URL`"
        raise IncompatibleTarget(
            mask_url(url), f"it is not a statekeeper store ({exc.reason}){hint}"
        ) from None
    options: dict[str, Any] = {"keyring": keyring, "fork_protection": False}
    if serde is not None:
        options["serde"] = serde

    def reading() -> StatekeeperSaver:
        # read through a read-only backend: nothing can be written
        return StatekeeperSaver.from_url(cast(Any, open_backend(url, readonly=True)), **options)

    if readonly:
        return _StatekeeperSide(reading(), mask_url(url))
    # The copy writes behind (batched commits): a thread is one stream whose appends
    # land in order, so whatever a crash keeps is a prefix — every checkpoint present
    # still has its writes, and the next run resumes after it. The store is flushed
    # before the copy is verified, through a new saver reading the backend.
    writer = StatekeeperSaver.from_url(url, durability="async", **options, **(extra or {}))
    return _StatekeeperSide(writer, mask_url(url), reading)


async def _check_keys(backend: Any, url: str, keyring: Keyring | None) -> None:
    """Refuse to write into an encrypted store without its keys, or encrypted records
    into a store kept in the clear: either would leave a store its readers cannot read
    (judged from the clear header of the first record; nothing is decrypted)."""
    from ...backends.redact import mask_url
    from ...codec.pipeline import Codec

    for info in await backend.list_agents(None, limit=1):
        for raw in await backend.read(info.agent_id, 0, None, limit=1):
            header = Codec.header(raw.payload)
            key_id = header.key_id if header is not None else None
            if key_id is not None and keyring is None:
                raise IncompatibleTarget(
                    mask_url(url),
                    f"it is encrypted (records under key {key_id!r}): give its keys "
                    "(--key-file, $STATEKEEPER_KEY_FILE or $STATEKEEPER_KEYS)",
                )
            if key_id is None and keyring is not None:
                raise IncompatibleTarget(
                    mask_url(url),
                    "it is not encrypted: copying encrypted threads into it would leave "
                    "records its readers cannot read; drop the keys, or encrypt the store "
                    "first (`statekeeper rekey`)",
                )
            if keyring is not None:  # the keys must open what is there (a wrong key fails)
                await _opens(backend, keyring)


async def _opens(backend: Any, keyring: Keyring) -> None:
    """Load the first stored agent that is not forgotten with ``keyring`` (a wrong key
    raises; a crypto-shredded agent opens with no key and says nothing about it)."""
    from ...arguments import INTERNAL_PREFIX
    from ...errors import AgentForgotten
    from ...store import StateStore

    store = StateStore(backend, keyring=keyring)
    after: str | None = None
    while page := await backend.list_agents(after, limit=100):
        for info in page:
            if info.agent_id.startswith(INTERNAL_PREFIX):
                continue  # the store's own streams (audit log, feed tombstones): no agent
            try:
                await store.load(info.agent_id)
            except AgentForgotten:
                continue
            return
        after = page[-1].agent_id


def _run_sync(coro: Coroutine[Any, Any, None]) -> None:
    """Run a coroutine to completion from sync code, also when this thread already
    runs an event loop (then on a thread of its own)."""
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(coro)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(asyncio.run, coro).result()


#: why a dry run's target is a database the export would create or set up
_NEW = ("no such file", "it is empty", "the search path has no", "schema ")


class _Empty(_Side):
    """A target that does not exist yet (a dry run of an export)."""

    def __init__(self, location: str) -> None:
        self.location = location

    # nothing is there yet: no threads, checkpoints, writes or connection
    def threads(self) -> builtins.list[str]:
        return []

    def index(self, thread_id: str) -> builtins.list[tuple[str, str]]:
        return []

    def write_counts(self, thread_id: str) -> dict[tuple[str, str], int]:
        return {}

    def task_paths(self, thread_id: str) -> dict[tuple[str, str, str], str]:
        return {}

    def write_indexes(self, thread_id: str) -> Indexes:
        return {}

    def put_writes_at(
        self,
        config: Any,
        items: builtins.list[tuple[int, str, Any]],
        task_id: str,
        task_path: str,
    ) -> None:  # pragma: no cover - a dry run writes nothing
        raise AssertionError("a dry run writes nothing")

    def close(self) -> None:
        pass
