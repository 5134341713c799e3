"""The concurrency tools, blocking: durable steps, leases, read-modify-write and merges
for sync code (a Flask view, a script, a sync LangChain tool) over a
:class:`~statekeeper.SyncStateStore`.

They are faces, not copies: each call runs the async tool's own coroutine on the sync
store's loop (:class:`~statekeeper.store.portal.Portal`), so the rules — what a step
records and when, the fencing, the conflict retries and their budget, the coalescing of
concurrent updates — exist once. The names are the async ones: :class:`SyncSteps` for
:class:`~statekeeper.concurrency.Steps`, :class:`SyncLeaseManager` and
:class:`SyncLease` for :class:`~statekeeper.concurrency.LeaseManager` and
:class:`~statekeeper.concurrency.Lease`, and this module's :func:`update`,
:func:`update_agent` and :func:`merge_into` for the functions of the same names; the
arguments, results and exceptions are the same.

Your code runs in your thread: a step's function, an update's change function and an
``update_agent`` function are called in the thread that called the sync face (the async
core hands each call back to it, :meth:`Portal.serve
<statekeeper.store.portal.Portal.serve>`), so they may use the sync store themselves and
see your thread's state. Meanwhile the store's loop goes on running — a lease's
heartbeat keeps the lease while your code blocks.

>>> from statekeeper import SyncStateStore
>>> calls = []
>>> with SyncStateStore("memory://") as store:
...     steps = SyncSteps(store, "order-7")
...     @steps.step("charge")
...     def charge(amount):
...         calls.append(amount)          # the side effect
...         return {"charged": amount}
...     first, again = charge(30), charge(30)    # the second is the recorded result
...     bumped = update(store, "counter", lambda data: data.update(n=data.get("n", 0) + 1))
>>> first, again, calls, bumped.data
({'charged': 30}, {'charged': 30}, [30], {'n': 1})
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import InvalidArgument
from ..records import EventType
from ..store.sync import SyncDurableAgent, SyncStateStore
from . import merge as _merge
from . import retry as _retry
from .merge import META_KEY
from .retry import DEFAULT_BUDGET
from .steps import StepHandle, StepRecord, Steps
from .sync_leases import SyncLease, SyncLeaseManager

if TYPE_CHECKING:
    from ..store.portal import Handoff, Portal
    from ..store.store import Leased
    from .merge import Merged, MergePolicies, Merger, Version
    from .retry import Backoff, ChangeFn, Updated

__all__ = [
    "SyncLease",
    "SyncLeaseManager",
    "SyncSteps",
    "merge_into",
    "update",
    "update_agent",
]

T = TypeVar("T")


def handed(handoff: Handoff, fn: Callable[..., Any]) -> Callable[..., Coroutine[Any, Any, Any]]:
    """``fn`` as the async core calls it: run in the thread waiting in
    :meth:`Portal.serve <statekeeper.store.portal.Portal.serve>` (the user's), an
    awaitable it returns (an ``async def`` function's) awaited on the loop."""

    @functools.wraps(fn)
    async def call(*args: Any, **kwargs: Any) -> Any:
        out = await handoff.run(fn, *args, **kwargs)
        if inspect.isawaitable(out):
            out = await out
        return out

    return call


def _as_handed(handoff: Handoff, fn: Any) -> Any:
    # (not callable: given as it is, for the async core's own refusal)
    return handed(handoff, fn) if callable(fn) else fn


class SyncSteps:
    """:class:`~statekeeper.concurrency.Steps`, blocking: a step's function runs once,
    in your thread, and its recorded result is returned ever after — across retries,
    processes and crashes, with the boundary the async class documents.

    Args:
        target: a :class:`~statekeeper.SyncStateStore` (then give ``agent_id``) or a
            :class:`~statekeeper.SyncDurableAgent` (its pending data changes are
            recorded with each step, fenced by its bound lease).
        agent_id: the agent, when ``target`` is a store.
        lease: fence the step records with this lease (a :class:`SyncLease`; store
            targets only).
    """

    def __init__(
        self,
        target: SyncStateStore | SyncDurableAgent,
        agent_id: str | None = None,
        *,
        lease: Leased | None = None,
    ) -> None:
        if isinstance(target, SyncDurableAgent):
            self.steps = Steps(target.agent, agent_id, lease=lease)
        elif isinstance(target, SyncStateStore):
            self.steps = Steps(target.store, agent_id, lease=lease)
        else:
            raise InvalidArgument(
                "target",
                "target must be a SyncStateStore or a SyncDurableAgent, "
                f"not {type(target).__name__}",
            )
        self._portal: Portal = target._portal

    @property
    def agent_id(self) -> str:
        """The agent whose steps these are."""
        return self.steps.agent_id

    @property
    def lease(self) -> Leased | None:
        """The lease the step records are fenced with (store targets)."""
        return self.steps.lease

    @staticmethod
    def key(step_id: str) -> str:
        """See :meth:`Steps.key <statekeeper.concurrency.Steps.key>`."""
        return Steps.key(step_id)

    def idempotency_key(self, step_id: str) -> str:
        """See :meth:`Steps.idempotency_key <statekeeper.concurrency.Steps.idempotency_key>`."""
        return self.steps.idempotency_key(step_id)

    def recorded(self, step_id: str) -> StepRecord | None:
        """See :meth:`Steps.recorded <statekeeper.concurrency.Steps.recorded>`."""
        return self._portal.call(self.steps.recorded(step_id))

    def run(
        self, step_id: str, fn: Callable[..., Awaitable[T] | T], *args: Any, **kwargs: Any
    ) -> Any:
        """See :meth:`Steps.run <statekeeper.concurrency.Steps.run>`: ``fn`` runs in
        this thread, only when the step is not recorded."""
        return self._portal.serve(
            lambda handoff: self.steps.run(step_id, _as_handed(handoff, fn), *args, **kwargs)
        )

    def step(
        self, step_id: str | Callable[..., str] | None = None
    ) -> Callable[[Callable[..., Awaitable[T] | T]], Callable[..., Any]]:
        """See :meth:`Steps.step <statekeeper.concurrency.Steps.step>`: the decorated
        function becomes a blocking durable step (its id by the same rule)."""

        def decorate(fn: Callable[..., Awaitable[T] | T]) -> Callable[..., Any]:
            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                def make(handoff: Handoff) -> Coroutine[Any, Any, Any]:
                    durable = self.steps.step(step_id)(handed(handoff, fn))
                    return durable(*args, **kwargs)  # type: ignore[return-value]

                return self._portal.serve(make)

            return wrapper

        return decorate

    @contextlib.contextmanager
    def once(self, step_id: str) -> Iterator[StepHandle]:
        """See :meth:`Steps.once <statekeeper.concurrency.Steps.once>`: ``with
        steps.once("x") as s:`` — if ``s.needed``, do the work and set ``s.result``."""
        with self._portal.enter(self.steps.once(step_id)) as handle:
            yield handle

    def results(self) -> dict[str, Any]:
        """See :meth:`Steps.results <statekeeper.concurrency.Steps.results>`."""
        return self._portal.call(self.steps.results())


def update(
    store: SyncStateStore,
    agent_id: str,
    fn: ChangeFn,
    *,
    budget: float | None = DEFAULT_BUDGET,
    attempts: int | None = None,
    backoff: Backoff | None = None,
    lease: Leased | None = None,
    create: bool = True,
    event_type: str = EventType.PATCH,
    info: dict[str, Any] | None = None,
    actor: str | None = None,
    idempotency_key: str | None = None,
) -> Updated:
    """:func:`statekeeper.concurrency.update`, blocking: ``fn(data)`` gets a private
    copy of the freshest data (in this thread), changes it, and the result is written
    with optimistic locking — on a conflict, ``fn`` runs again on the new state.
    Concurrent calls from many threads on one agent of one store coalesce, as the
    async ones do; ``fn`` must not update the same agent itself (it would wait for
    its own call)."""
    if not isinstance(store, SyncStateStore):
        raise InvalidArgument(
            "store", f"store must be a SyncStateStore, not {type(store).__name__}"
        )
    return store._portal.serve(
        lambda handoff: _retry.update(
            store.store,
            agent_id,
            _as_handed(handoff, fn),
            budget=budget,
            attempts=attempts,
            backoff=backoff,
            lease=lease,
            create=create,
            event_type=event_type,
            info=info,
            actor=actor,
            idempotency_key=idempotency_key,
        )
    )


def update_agent(
    agent: SyncDurableAgent,
    fn: Callable[[SyncDurableAgent], Awaitable[Any] | Any],
    *,
    budget: float | None = DEFAULT_BUDGET,
    attempts: int | None = None,
    backoff: Backoff | None = None,
) -> int:
    """:func:`statekeeper.concurrency.update_agent`, blocking: ``fn(agent)`` (in this
    thread) changes ``agent.data`` and/or fires transitions; the changes are saved, and
    on a conflict the agent is refreshed and ``fn`` runs again."""
    if not isinstance(agent, SyncDurableAgent):
        raise InvalidArgument(
            "agent", f"agent must be a SyncDurableAgent, not {type(agent).__name__}"
        )

    def make(handoff: Handoff) -> Coroutine[Any, Any, int]:
        change = _as_handed(handoff, fn)
        # the core calls fn with its async agent: the user's gets the sync one
        return _retry.update_agent(
            agent.agent,
            (lambda _: change(agent)) if callable(fn) else fn,
            budget=budget,
            attempts=attempts,
            backoff=backoff,
        )

    return agent._portal.serve(make)


def merge_into(
    store: SyncStateStore,
    agent_id: str,
    ours: Version,
    *,
    base_seq: int,
    created_at: float | None = None,
    merger: Merger | MergePolicies | None = None,
    lease: Leased | None = None,
    budget: float | None = DEFAULT_BUDGET,
    attempts: int | None = None,
    backoff: Backoff | None = None,
    meta_key: str = META_KEY,
) -> Merged:
    """:func:`statekeeper.concurrency.merge_into`, blocking (the merger's strategies
    run on the store's loop: keep them pure functions of the versions)."""
    if not isinstance(store, SyncStateStore):
        raise InvalidArgument(
            "store", f"store must be a SyncStateStore, not {type(store).__name__}"
        )
    return store._portal.call(
        _merge.merge_into(
            store.store,
            agent_id,
            ours,
            base_seq=base_seq,
            created_at=created_at,
            merger=merger,
            lease=lease,
            budget=budget,
            attempts=attempts,
            backoff=backoff,
            meta_key=meta_key,
        )
    )
