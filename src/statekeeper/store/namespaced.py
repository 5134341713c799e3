"""A store opened in a namespace: agent ids are relative to it.

``StateStore(url, namespace="acme/support")`` builds a :class:`NamespacedStateStore`
(``StateStore.__new__`` picks it), a subclass that overrides every public call of the
store that takes or returns agent ids: the caller says ``"a-1"``, the stored id is
``"acme/support/a-1"`` (:func:`statekeeper.namespaces.qualify`), and every id the store
returns (snapshots, events, append results, heads, listings, feed events,
verification problems) is relative again. One layer maps ids in and out; the calls
below it (the plain store, or the governed one) only ever see full ids, so a policy
given with ``principal=`` applies to the full id.

**What the view covers**: the namespace *and the namespaces below it*, as a namespace
filter does (:mod:`statekeeper.namespaces`): in a store opened in ``acme``,
``"support/a-1"`` is ``acme/support/a-1``, and :meth:`list_agents` lists it as
``"support/a-1"``. A relative id that would leave the namespace is refused with
:class:`~statekeeper.errors.InvalidAgentId` naming it, before anything is read or
written: an absolute id (leading ``/``), a ``.`` or ``..`` segment, an empty segment
(``a//b``, trailing ``/``).

**Errors name the id the caller used**: an error raised below the view
(:class:`~statekeeper.errors.AgentNotFound`, ``ConflictError``, ``LeaseLost``,
``AccessDenied``...) has its ``agent_id`` (or ``agent_ids``) and its message made
relative before it reaches the caller (:meth:`NamespacedStateStore.relative_error`).

Store-wide calls with no agent id (``health``, ``stats``, ``flush``, ``close``,
``feed_bounds``, ``feed_cursor_bounds``, ``trim_feed``) act on the whole store, as they do without a
namespace (a policy given with ``principal=`` still decides ``trim_feed``, and gives the
feed's bounds only to a principal that may read every namespace).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..arguments import check_agent_id, check_seq, id_shape_problem
from ..errors import InvalidAgentId, StatekeeperError
from ..namespaces import check_namespace
from ..records import AgentInfo, AppendResult, Event, FeedEvent, Snapshot
from .feed import Subscription, Undo
from .feed_cursor import FeedCursor
from .governed import GovernedStateStore
from .store import StateStore

if TYPE_CHECKING:
    from ..backends.base import Backend
    from .digests import StreamDigest
    from .feed_intent_repair import FeedIntent, SettledIntent
    from .heads import AgentHead, StoredSize
    from .verification import Problem, VerifyReport

__all__ = ["NamespacedGovernedStateStore", "NamespacedStateStore", "stored_id"]

_R = TypeVar("_R")
_PAGE = 256


class NamespacedStateStore(StateStore):
    """A :class:`StateStore` whose agent ids are relative to ``namespace`` (see the
    module documentation)."""

    def __init__(
        self, backend: Backend | str | None = None, *, namespace: str, **options: Any
    ) -> None:
        self._namespace = check_namespace(namespace)
        self._prefix = self._namespace + "/" if self._namespace else ""
        super().__init__(backend, **options)

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}, namespace={self._namespace!r})"

    @property
    def namespace(self) -> str:
        """The namespace every agent id of this store is relative to."""
        return self._namespace

    # -- ids in and out ---------------------------------------------------------------

    def _full(self, agent_id: object, argument: str = "agent_id") -> str:
        """The stored id of the relative ``agent_id``; :class:`InvalidAgentId` naming it
        when it is not an id or would leave the namespace."""
        rel = check_agent_id(agent_id, argument)
        if rel.startswith("/"):
            why = "is absolute (starts with '/')"
        elif any(part in ("", ".", "..") for part in rel.split("/")):
            why = "has an empty, '.' or '..' segment"
        else:
            return check_agent_id(self._prefix + rel, argument)
        raise InvalidAgentId(
            f"{argument} {rel!r:.80} {why}: ids of a store opened in namespace"
            f" {self._namespace!r} are relative to it",
            argument,
        )

    def _link_at(self, agent_id: str, seq: int) -> bytes | None:
        return super()._link_at(self._prefix + agent_id, seq)

    def _tag_at(self, agent_id: str, seq: int) -> bytes | None:
        return super()._tag_at(self._prefix + agent_id, seq)

    def _checksum_at(self, agent_id: str, seq: int) -> bytes | None:
        return super()._checksum_at(self._prefix + agent_id, seq)

    def _rel(self, full: str) -> str:
        return full[len(self._prefix) :] if full.startswith(self._prefix) else full

    def qualify(self, agent_id: str) -> str:
        """The stored (full) id of the relative ``agent_id`` (``"a-1"`` ->
        ``"acme/support/a-1"``); :class:`InvalidAgentId` when it would leave the
        namespace. For tools that work below the view (leases, retention)."""
        return self._full(agent_id)

    def relative(self, full_id: str) -> str:
        """The id of ``full_id`` as this view names it (unchanged when it lies outside
        the namespace)."""
        return self._rel(full_id)

    def relative_error(self, exc: BaseException) -> BaseException:
        """``exc`` (changed in place) naming relative ids: its ``agent_id`` /
        ``agent_ids`` attributes and their quoted occurrences in its message."""
        if not self._prefix or not isinstance(exc, StatekeeperError):
            return exc
        renames: dict[str, str] = {}
        one = getattr(exc, "agent_id", None)
        if isinstance(one, str) and one.startswith(self._prefix):
            renames[one] = self._rel(one)
            exc.agent_id = renames[one]  # type: ignore[attr-defined]
        many = getattr(exc, "agent_ids", None)
        if isinstance(many, list) and all(isinstance(a, str) for a in many):
            renames.update({a: self._rel(a) for a in many if a.startswith(self._prefix)})
            exc.agent_ids = [self._rel(a) for a in many]  # type: ignore[attr-defined]
        if renames:
            exc.args = tuple(_renamed(arg, renames) for arg in exc.args)
        return exc

    def _out(self, record: _R) -> _R:
        """``record`` (a dataclass with ``agent_id``) with its id made relative."""
        if record is None:
            return record
        agent_id: str = record.agent_id  # type: ignore[attr-defined]
        return dataclasses.replace(record, agent_id=self._rel(agent_id))  # type: ignore[type-var]

    def _state(self, agent_id: str, fsm_state: object) -> str | None:
        # durable agents register under the id they were opened with (relative)
        return super()._state(self._rel(agent_id), fsm_state)

    async def _all_full_ids(self) -> list[str]:
        return [self._prefix + info.agent_id async for info in self.iter_agents()]

    # -- reading ----------------------------------------------------------------------

    async def get(self, agent_id: str) -> Snapshot | None:
        return self._out(await super().get(self._full(agent_id)))

    async def get_many(self, agent_ids: Sequence[str]) -> list[Snapshot | None]:
        full = [self._full(a) for a in agent_ids]
        return [self._out(s) for s in await super().get_many(full)]

    async def load(
        self, agent_id: str, *, at_seq: int | None = None, at_time: float | None = None
    ) -> Snapshot:
        return self._out(await super().load(self._full(agent_id), at_seq=at_seq, at_time=at_time))

    async def head(self, agent_id: str) -> int:
        return await super().head(self._full(agent_id))

    async def _head_tag(self, agent_id: str) -> tuple[int, bytes | None]:
        return await super()._head_tag(self._full(agent_id))

    async def head_state(self, agent_id: str) -> AgentHead | None:
        return self._out(await super().head_state(self._full(agent_id)))

    async def head_states(self, agent_ids: Sequence[str]) -> list[AgentHead | None]:
        full = [self._full(a) for a in agent_ids]
        return [self._out(h) for h in await super().head_states(full)]

    async def stored_size(self, agent_id: str) -> StoredSize:
        return self._out(await super().stored_size(self._full(agent_id)))

    async def history(
        self, agent_id: str, *, after_seq: int = 0, to_seq: int | None = None
    ) -> AsyncIterator[Event]:
        full = self._full(agent_id)
        async for event in super().history(full, after_seq=after_seq, to_seq=to_seq):
            yield self._out(event)

    async def list_agents(self, after: str | None = None, limit: int = 100) -> list[AgentInfo]:
        """One page of the agents of this namespace and below it, ordered by id, with
        relative ids (``after``: the last relative id of the previous page, or any
        relative string to start after, such as a prefix ``"lg/"``: a bound, not an
        id, so it is not refused for a trailing ``/``; nothing outside the namespace is
        ever listed). An agent an earlier version stored under an id that is not normal
        (``acme//x``, ``acme/../b/x``: :func:`~statekeeper.arguments.check_new_agent_id`)
        is passed over: no relative id names it (``/x``, ``../b/x`` are refused), so every
        id listed can be loaded; the whole store reaches it, and ``verify`` names it."""
        check_seq(limit, "limit", minimum=1)
        cursor = self._prefix + check_agent_id(after, "after") if after is not None else None
        cursor = cursor or self._prefix or None
        out: list[AgentInfo] = []
        while len(out) < limit:
            page = await super().list_agents(after=cursor, limit=limit)
            for info in page:
                if not info.agent_id.startswith(self._prefix):
                    return out  # ids are ordered: past the namespace
                if id_shape_problem(info.agent_id) is None:  # (else: no relative id names it)
                    out.append(self._out(info))
            if len(page) < limit:
                break
            cursor = page[-1].agent_id
        return out[:limit]

    async def unlisted_agents(self) -> list[str]:
        """Those of this namespace and below (relative ids; as listed, an id no relative
        id names is passed over)."""
        return [
            self._rel(a)
            for a in await super().unlisted_agents()
            if a.startswith(self._prefix) and id_shape_problem(a) is None
        ]

    async def count_agents(self) -> int:
        """How many agents live in this namespace or below it: a range count of the
        engine's agent index (SQLite, PostgreSQL, Redis; others list the namespace).
        Opened as a principal with a policy, the agents it may read are counted."""
        if not self._prefix:
            return await super().count_agents()
        if getattr(getattr(self, "_governance", None), "policy", None) is not None:
            return len([info async for info in self.iter_agents()])
        self._check_open()
        await self.flush()
        return await self.backend.count_prefix(self._prefix)

    async def find_key(self, agent_id: str, key: str) -> AppendResult | None:
        return self._out(await super().find_key(self._full(agent_id), key))

    async def digest(self, agent_id: str, at_seq: int | None = None) -> StreamDigest:
        return self._out(await super().digest(self._full(agent_id), at_seq))

    async def check_digest(self, expected: StreamDigest) -> str | None:
        agent_id = getattr(expected, "agent_id", None)
        if isinstance(agent_id, str):
            expected = dataclasses.replace(expected, agent_id=self._full(agent_id))
        return await super().check_digest(expected)

    def _report(self, report: VerifyReport) -> VerifyReport:
        report.problems = [self._out(p) for p in report.problems]
        report.forgotten = [self._rel(a) for a in report.forgotten]
        return report

    async def verify(self, agent_ids: list[str] | None = None) -> VerifyReport:
        """:meth:`StateStore.verify` of the agents of this namespace (and below), or of
        ``agent_ids`` (relative)."""
        if agent_ids is None or isinstance(agent_ids, str):
            full = await self._all_full_ids() if agent_ids is None else agent_ids
        else:
            full = [self._full(a) for a in agent_ids]
        return self._report(await super().verify(full))

    async def witness_problems(self, agent_ids: list[str] | None = None) -> list[Problem]:
        if agent_ids is None:
            full = await self._all_full_ids()
        else:
            full = [self._full(a) for a in agent_ids]
        return [self._out(p) for p in await super().witness_problems(full)]

    async def orphan_problems(self, verified: Collection[str] = ()) -> list[Problem]:
        """:meth:`StateStore.orphan_problems` in this namespace (and below), with
        relative ids (``verified`` relative too)."""
        found = await super().orphan_problems([self._prefix + a for a in verified])
        return [self._out(p) for p in found if p.agent_id.startswith(self._prefix)]

    async def feed_intents(self) -> list[FeedIntent]:
        """:meth:`StateStore.feed_intents` of this namespace's agents, ids relative."""
        found = await super().feed_intents()
        return [self._out(i) for i in found if i.agent_id.startswith(self._prefix)]

    async def settle_feed_intents(
        self,
        agent_ids: Collection[str] | None = None,
        *,
        older_than: float | None = None,
        force: bool = False,
    ) -> list[SettledIntent]:
        """:meth:`StateStore.settle_feed_intents` in this namespace (``agent_ids``
        relative; without them, every intent of the namespace older than
        ``older_than``)."""
        if agent_ids is None or isinstance(agent_ids, str):
            full: Any = agent_ids
            if agent_ids is None and older_than is not None:
                full = [i.agent_id for i in await super().feed_intents()]
                full = [a for a in full if a.startswith(self._prefix)]
        else:
            full = [self._full(a, "agent_ids[]") for a in agent_ids]
        done = await super().settle_feed_intents(full, older_than=older_than, force=force)
        return [dataclasses.replace(s, intent=self._out(s.intent)) for s in done]

    def subscribe(
        self,
        from_position: int | FeedCursor | str = 0,
        *,
        namespace: str | None = None,
        agent_prefix: str | None = None,
        **options: Any,
    ) -> Subscription:
        """The change feed of this namespace (and below): ``namespace=`` narrows it to a
        namespace relative to this one, ``agent_prefix=`` to relative ids starting with
        it; feed events carry relative ids. Positions are the store's (resume with
        ``from_position=`` as usual)."""
        self._check_open()
        if namespace is not None:
            inner = check_namespace(namespace)
            if inner.startswith("/") or any(p in (".", "..") for p in inner.split("/")):
                self._full(inner, "namespace")  # raises, naming it
            full_ns = self._prefix + inner if inner else self._namespace
        else:
            full_ns = self._namespace
        full_prefix = None
        if agent_prefix is not None:
            if not isinstance(agent_prefix, str):
                raise InvalidAgentId(
                    f"agent_prefix must be a str, not {agent_prefix!r:.40}", "agent_prefix"
                )
            full_prefix = self._prefix + agent_prefix
        return _NamespacedSubscription(
            self,
            from_position,
            namespace=full_ns or None,
            agent_prefix=full_prefix,
            access=self._feed_access(from_position, full_ns or None, full_prefix),
            **options,
        )

    # -- writing ----------------------------------------------------------------------

    async def create(self, agent_id: str, *args: Any, **kw: Any) -> AppendResult:
        return self._out(await super().create(self._full(agent_id), *args, **kw))

    async def save(self, agent_id: str, *args: Any, **kw: Any) -> AppendResult:
        return self._out(await super().save(self._full(agent_id), *args, **kw))

    async def append(self, agent_id: str, *args: Any, **kw: Any) -> AppendResult:
        return self._out(await super().append(self._full(agent_id), *args, **kw))

    async def snapshot(self, agent_id: str) -> int:
        return await super().snapshot(self._full(agent_id))

    async def settle(self, agent_id: str) -> int | None:
        return await super().settle(self._full(agent_id))

    async def delete(self, agent_id: str) -> bool:
        return await super().delete(self._full(agent_id))


def stored_id(store: StateStore, agent_id: str) -> str:
    """The id the engine stores ``agent_id`` of ``store`` under: qualified on a store
    opened in a namespace (where callers name relative ids), else ``agent_id`` itself.
    For tools that read the engine beside the store's public calls (health, witness
    checks, the tiers' consistency)."""
    return store.qualify(agent_id) if isinstance(store, NamespacedStateStore) else agent_id


def _renamed(arg: object, renames: dict[str, str]) -> object:
    if not isinstance(arg, str):
        return arg
    if arg in renames:  # AgentNotFound(agent_id) keeps the bare id
        return renames[arg]
    for full, rel in renames.items():
        arg = arg.replace(repr(full), repr(rel))
    return arg


def _caller_ids(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` of :class:`NamespacedStateStore` whose errors name relative ids."""
    if inspect.isasyncgenfunction(method):

        @functools.wraps(method)
        async def generator(self: NamespacedStateStore, *args: Any, **kw: Any) -> Any:
            try:
                async for item in method(self, *args, **kw):
                    yield item
            except StatekeeperError as exc:
                self.relative_error(exc)
                raise

        return generator
    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def coroutine(self: NamespacedStateStore, *args: Any, **kw: Any) -> Any:
            try:
                return await method(self, *args, **kw)
            except StatekeeperError as exc:
                self.relative_error(exc)
                raise

        return coroutine

    @functools.wraps(method)
    def plain(self: NamespacedStateStore, *args: Any, **kw: Any) -> Any:
        try:
            return method(self, *args, **kw)
        except StatekeeperError as exc:
            self.relative_error(exc)
            raise

    return plain


# every public call of the view names relative ids in its errors (one wrapper here
# rather than a try/except in each of them)
for _name, _member in list(vars(NamespacedStateStore).items()):
    if (
        not _name.startswith("_")
        and inspect.isfunction(_member)
        and _name
        not in (
            "qualify",
            "relative",
            "relative_error",
        )
    ):
        setattr(NamespacedStateStore, _name, _caller_ids(_member))


class _NamespacedSubscription(Subscription):
    """A subscription whose events carry ids relative to the store's namespace."""

    def _take(self, undo: Undo | None = None) -> FeedEvent | None:
        got = super()._take(undo)
        if got is None:
            return None
        store = self._store
        assert isinstance(store, NamespacedStateStore)
        return dataclasses.replace(got, event=store._out(got.event))


class NamespacedGovernedStateStore(NamespacedStateStore, GovernedStateStore):
    """A store opened in a namespace *and* as a principal: ids are mapped to full ids
    first, then checked against the policy and audited under their full id.

    Listing the namespace (``list_agents``, ``iter_agents``, ``count_agents``, and
    ``verify`` / ``witness_problems`` of every agent) shows the agents the principal
    may read; a principal that may read no agent in the namespace or below it is
    refused with :class:`~statekeeper.errors.AccessDenied` (audited) rather than
    answered with an empty page, as a subscription to the namespace is."""

    async def list_agents(self, after: str | None = None, limit: int = 100) -> list[AgentInfo]:
        if self._namespace:
            await self._governance.require_reach(self._namespace, "read", "list")
        return await super().list_agents(after, limit)
