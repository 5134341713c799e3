"""Optimistic locking made convenient: read, change, write — and on conflict, again.

Every write to a stream can carry ``expected_seq``; if another writer got there first
the write fails with :class:`~statekeeper.errors.ConflictError` and nothing is stored.
:func:`update` wraps the whole read-modify-write cycle: it reads the agent's current
data, calls *your* change function on a private copy, and writes the result expecting
the seq it read. On a conflict it waits (full-jitter exponential backoff), re-reads the
new state and calls your function *again* on it — so a change is always applied to the
state it was computed from, and no concurrent update is lost.

How long it keeps trying is a **time budget** (``budget``, 30 s by default), not a
bare attempt count: under contention an attempt count runs out after a few hundred
milliseconds while the other writers are still making progress. When the budget (or
an explicit ``attempts`` limit) is spent it raises
:class:`~statekeeper.errors.RetriesExhausted` (a ``ConflictError`` carrying the last
conflict); the change was not written.

Concurrent :func:`update` calls on the same agent *in one process* (one
:class:`~statekeeper.StateStore`) are **coalesced**: they queue behind each other, and
the calls waiting when a write starts are applied one after the other to the same
fresh copy and written as one event (one compare-and-append), so a process never
conflicts with itself and pays one round trip for many changes. Calls are coalesced
only with calls that have the same ``event_type``, ``info``, ``actor``, ``lease`` and
``create``; a change function that raises fails its own call only.

The change function may be called several times: keep it free of side effects (or
make them idempotent), and do not keep state between calls.

>>> import asyncio
>>> from statekeeper import StateStore
>>> async def demo():
...     async with StateStore("memory://") as store:
...         def bump(data):
...             data["n"] = data.get("n", 0) + 1
...         await asyncio.gather(*(update(store, "counter", bump) for _ in range(20)))
...         return (await store.load("counter")).data
>>> asyncio.run(demo())
{'n': 20}
"""

from __future__ import annotations

import asyncio
import inspect
import math
import random
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from .. import patch
from ..arguments import check_name
from ..errors import (
    AgentNotFound,
    AgentReplaced,
    ConfigurationError,
    ConflictError,
    InvalidArgument,
    RetriesExhausted,
    StatekeeperError,
)
from ..records import AppendResult, EventType

if TYPE_CHECKING:
    from ..store.agent import DurableAgent
    from ..store.store import Leased, StateStore

__all__ = ["DEFAULT_BUDGET", "Backoff", "Updated", "retry_on_conflict", "update", "update_agent"]

T = TypeVar("T")

#: a change function: mutate ``data`` in place (return None) or return new data
ChangeFn = Callable[[dict[str, Any]], "dict[str, Any] | Awaitable[dict[str, Any] | None] | None"]

#: seconds the retry helpers keep trying by default before ``RetriesExhausted``
DEFAULT_BUDGET = 30.0


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with full jitter between conflicting attempts.

    Before attempt ``n + 1`` the helper sleeps a uniformly random time in
    ``[0, min(cap, base * factor ** (n - 1))]`` ("full jitter"): randomness spreads
    writers that collided so they do not collide again in lock-step; the cap bounds
    the wait.
    """

    base: float = 0.002
    factor: float = 2.0
    cap: float = 0.1

    def __post_init__(self) -> None:
        if self.base < 0 or self.factor < 1 or self.cap < 0:
            raise ConfigurationError("backoff needs base >= 0, factor >= 1 and cap >= 0")

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        exponent = min(max(attempt - 1, 0), 64)  # no float overflow on long runs
        ceiling = min(self.cap, self.base * self.factor**exponent)
        return (rng or random).uniform(0.0, ceiling)


@dataclass(frozen=True, slots=True)
class Updated:
    """What :func:`update` stored: the agent's data after the change, its seq, and
    how many attempts it took. ``result`` is None when the change left the data as it
    was (nothing was written). Coalesced calls share one ``seq`` and ``result``;
    ``data`` is the data right after *this* call's change."""

    agent_id: str
    seq: int
    data: dict[str, Any]
    attempts: int
    result: AppendResult | None


class _Budget:
    """How long a retry helper may keep trying: ``attempts`` and/or ``budget`` seconds."""

    __slots__ = ("attempts", "backoff", "deadline")

    def __init__(self, attempts: int | None, seconds: float | None, backoff: Backoff | None):
        if attempts is not None and (
            isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1
        ):
            raise InvalidArgument(
                "attempts", f"attempts must be an int >= 1 or None, not {attempts!r:.60}"
            )
        if seconds is not None and (
            isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0
        ):
            raise InvalidArgument(
                "budget", f"budget must be a number of seconds > 0 or None, not {seconds!r:.60}"
            )
        if attempts is None and seconds is None:
            raise InvalidArgument(
                "budget", "give attempts or budget (or both): retries must be bounded"
            )
        if backoff is not None and not isinstance(backoff, Backoff):
            raise InvalidArgument("backoff", f"backoff must be a Backoff, not {backoff!r:.60}")
        self.attempts = attempts
        self.backoff = backoff or Backoff()
        self.deadline = time.monotonic() + seconds if seconds is not None else math.inf

    def spent(self, attempt: int) -> bool:
        """True when no attempt may follow attempt number ``attempt``."""
        if self.attempts is not None and attempt >= self.attempts:
            return True
        return time.monotonic() >= self.deadline

    def pause(self, attempt: int) -> float:
        """The backoff before the next attempt, never past the deadline."""
        return max(0.0, min(self.backoff.delay(attempt), self.deadline - time.monotonic()))


# -- coalescing -----------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class _Call:
    """One pending :func:`update` call."""

    fn: ChangeFn
    budget: _Budget
    lease: Leased | None
    event_type: str
    info: dict[str, Any] | None
    actor: str | None
    create: bool
    future: asyncio.Future[Updated]
    idempotency_key: str | None = None
    key: tuple[Any, ...] = ()
    attempts: int = 0
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            info_key: Any = (
                orjson.dumps(self.info, option=orjson.OPT_SORT_KEYS) if self.info else b""
            )
        except TypeError:
            info_key = id(self)  # not JSON (the write will say so): coalesced with nothing
        if self.idempotency_key is not None:
            info_key = id(self)  # one call, one keyed event: coalesced with nothing
        self.key = (self.event_type, info_key, self.actor, self.create, id(self.lease))

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)

    def succeed(self, value: Updated) -> None:
        if not self.future.done():
            self.future.set_result(value)


@dataclass(eq=False, slots=True)
class _Lane:
    """The queue of one agent's pending update() calls in one store."""

    waiting: list[_Call] = field(default_factory=list)
    runner: asyncio.Task[None] | None = None


#: per store, per (agent, event loop): calls coalesce only within one loop
_Lanes = dict[tuple[str, asyncio.AbstractEventLoop], _Lane]
_lanes: weakref.WeakKeyDictionary[StateStore, _Lanes] = weakref.WeakKeyDictionary()


Copy = Callable[[dict[str, Any]], dict[str, Any]]


def _copier(store: StateStore) -> Copy:
    """A deep copy of a document through ``store``'s codec (tagged JSON): exact for
    every value the store holds. (``orjson`` alone wrote a datetime or a UUID as a
    string, so an update that changed another key stored them as strings, and refused
    a Decimal, bytes or a set with an untyped TypeError.)"""
    codec = store.codec

    def copy(data: dict[str, Any]) -> dict[str, Any]:
        copied: dict[str, Any] = codec.copy_loads(codec.copy_dumps(data))
        return copied

    return copy


def _unchanged(original: dict[str, Any], new: dict[str, Any]) -> bool:
    """``new`` is ``original`` as stored: equal by ``==`` (1 == 1.0, True == 1,
    0.0 == -0.0, the same instant in another zone) is not enough — such a change was
    reported written, with the new data, and never saved."""
    try:
        if new != original:
            return False
    except ArithmeticError:  # (a signaling-NaN Decimal compared: the diff says)
        pass
    return not patch.diff(original, new)


async def update(
    store: StateStore,
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
    """Apply ``fn`` to the agent's data with optimistic locking, retrying on conflict.

    ``fn(data)`` receives a private copy of the current data; it mutates it in place
    (returning None) or returns the new data; it may be a coroutine function. The new
    data is written with ``expected_seq`` = the seq it was read at (and fenced with
    ``lease`` when given). On :class:`~statekeeper.errors.ConflictError` the helper
    backs off (``backoff``, full jitter), re-reads and calls ``fn`` again — for up to
    ``budget`` seconds (default 30) and, when given, at most ``attempts`` times.

    Concurrent calls on the same agent through the same store are coalesced (see the
    module documentation): they never conflict with each other.

    With ``create`` (the default) a missing agent starts from ``{}``; otherwise
    :class:`~statekeeper.errors.AgentNotFound` is raised. Raises
    :class:`~statekeeper.errors.RetriesExhausted` when the budget is spent;
    :class:`~statekeeper.errors.LeaseLost` (not retried) when ``lease`` was taken over.

    With ``idempotency_key`` the change is written under that key, as
    :meth:`~statekeeper.StateStore.save` writes one: when an earlier call with the key
    was stored (a retry after a crash or a lost reply), ``fn`` is not called and
    nothing is written; the result is that earlier write's (``result.duplicate``
    True, ``data`` the agent's data right after it, ``attempts`` 0). A keyed call is
    written as its own event (it is not coalesced).
    """
    _check_update(agent_id, fn, info)
    if idempotency_key is not None:
        check_name(idempotency_key, "idempotency_key")
        earlier = await store.find_key(agent_id, idempotency_key)
        if earlier is not None:  # applied before: not again (fn is not called)
            return await _earlier(store, agent_id, earlier, 0)
    if lease is not None:  # refused before fn runs (the store refuses it again)
        from ..store.agent import check_agent_lease

        check_agent_lease(store, agent_id, lease)
    limit = _Budget(attempts, budget, backoff)
    loop = asyncio.get_running_loop()
    call = _Call(
        fn, limit, lease, event_type, info, actor, create, loop.create_future(), idempotency_key
    )
    lanes = _lanes.setdefault(store, {})
    where = (agent_id, loop)
    lane = lanes.get(where)
    if lane is None:
        lane = lanes[where] = _Lane()
    lane.waiting.append(call)
    if lane.runner is None:
        lane.runner = loop.create_task(_drain(store, where, lane, lanes))
    return await call.future


async def _earlier(
    store: StateStore, agent_id: str, earlier: AppendResult, attempts: int
) -> Updated:
    """The :class:`Updated` of the keyed write ``earlier`` found again (a duplicate)."""
    data = (await store.load(agent_id, at_seq=earlier.last_seq)).data
    return Updated(agent_id, earlier.last_seq, data, attempts, earlier)


def _check_update(agent_id: str, fn: object, info: object) -> None:
    """The arguments of :func:`update` that the store does not see before ``fn`` runs."""
    from ..arguments import check_agent_id, check_mapping

    check_agent_id(agent_id)
    if not callable(fn):
        raise InvalidArgument("fn", f"fn must be callable, not {type(fn).__name__}")
    check_mapping(info, "info", optional=True)


async def _drain(
    store: StateStore, where: tuple[str, asyncio.AbstractEventLoop], lane: _Lane, lanes: _Lanes
) -> None:
    """Run the lane's queued calls, one compatible group at a time, until none is left."""
    try:
        while True:
            lane.waiting = [c for c in lane.waiting if not c.future.done()]
            if not lane.waiting:
                return
            await _run(store, where[0], lane)
    except BaseException as exc:  # never leave a caller waiting
        for call in lane.waiting:
            call.fail(exc)
        lane.waiting = []
        if not isinstance(exc, Exception):
            raise
    finally:
        lane.runner = None
        if lanes.get(where) is lane:
            del lanes[where]


def _join(lane: _Lane, batch: list[_Call]) -> None:
    """Move the waiting calls compatible with ``batch`` into it (all, when it is empty)."""
    key = batch[0].key if batch else next(c.key for c in lane.waiting if not c.future.done())
    joined = [c for c in lane.waiting if c.key == key and not c.future.done()]
    batch.extend(joined)
    lane.waiting = [c for c in lane.waiting if c.key != key and not c.future.done()]


async def _apply(
    batch: list[_Call], original: dict[str, Any], _copy: Copy
) -> tuple[list[_Call], dict[str, Any]]:
    """Apply each call's change in turn; a change that raises (or whose data the store
    cannot hold) fails its own call only."""
    working = _copy(original)
    applied: list[_Call] = []
    for call in batch:
        before = _copy(working)
        try:
            out = call.fn(working)
            if inspect.isawaitable(out):
                out = await out
        except Exception as exc:
            call.fail(exc)
            working = before
            continue
        new = working if out is None else out
        if not isinstance(new, dict):
            call.fail(
                InvalidArgument(
                    "fn", f"fn (the change function) must return a dict or None, not {new!r:.60}"
                )
            )
            working = before
            continue
        try:
            call.data = _copy(new)
        except StatekeeperError as exc:  # (a value the codec refuses: NaN, a naive datetime...)
            call.fail(exc)
            working = before
            continue
        working = new
        applied.append(call)
    return applied, working


async def _run(store: StateStore, agent_id: str, lane: _Lane) -> None:
    """Write one group of compatible calls: read, apply all, compare-and-append; on a
    conflict back off and do it again (calls queued meanwhile join in), until every
    call of the group is settled."""
    batch: list[_Call] = []
    _join(lane, batch)
    try:
        await _attempts(store, agent_id, lane, batch)
    except BaseException as exc:  # a read or a backoff that failed: settle the group
        for call in batch:
            call.fail(exc)
        if not isinstance(exc, Exception):
            raise


async def _attempts(store: StateStore, agent_id: str, lane: _Lane, batch: list[_Call]) -> None:
    first = batch[0]
    copy = _copier(store)
    while True:
        batch[:] = [c for c in batch if not c.future.done()]  # a caller may have gone
        if not batch:
            return
        current = await store.get(agent_id)
        if current is None and not first.create:
            for call in batch:
                call.fail(AgentNotFound(agent_id))
            return
        seq = current.seq if current is not None else 0
        original = current.data if current is not None else {}
        for call in batch:
            call.attempts += 1
        applied, new = await _apply(batch, original, copy)
        if not applied:
            return
        if current is not None and _unchanged(original, new):
            for call in applied:
                call.succeed(Updated(agent_id, seq, call.data, call.attempts, None))
            return
        try:
            result = await store.save(
                agent_id,
                new,
                expected_seq=seq,
                lease=first.lease,
                event_type=first.event_type,
                info=first.info,
                actor=first.actor,
                idempotency_key=first.idempotency_key,
            )
        except ConflictError as exc:
            batch.clear()
            for call in applied:
                if call.future.done():
                    continue
                if call.budget.spent(call.attempts):
                    call.fail(RetriesExhausted(agent_id, call.attempts, exc))
                else:
                    batch.append(call)
            if batch:
                await asyncio.sleep(batch[0].budget.pause(batch[0].attempts))
                _join(lane, batch)
            continue
        except Exception as exc:
            for call in applied:
                call.fail(exc)
            return
        if result.duplicate:  # the key's earlier write (a concurrent retry): not ours
            try:
                done = await _earlier(store, agent_id, result, first.attempts)
            except Exception as exc:
                first.fail(exc)
            else:
                first.succeed(done)
            return
        for call in applied:
            call.succeed(Updated(agent_id, result.last_seq, call.data, call.attempts, result))
        return


async def update_agent(
    agent: DurableAgent,
    fn: Callable[[DurableAgent], Awaitable[Any] | Any],
    *,
    budget: float | None = DEFAULT_BUDGET,
    attempts: int | None = None,
    backoff: Backoff | None = None,
) -> int:
    """Read-modify-write on a :class:`~statekeeper.store.DurableAgent`.

    ``fn(agent)`` changes ``agent.data`` and/or fires transitions; pending data changes
    are then saved. On a conflict the agent is refreshed from storage (unsaved changes
    dropped, a transition that failed to write already reverted) and ``fn`` runs again,
    for up to ``budget`` seconds and, when given, at most ``attempts`` times.
    Returns the agent's seq after the write (it is fenced by ``agent.lease`` if bound).

    Raises :class:`~statekeeper.errors.InvalidArgument` before ``fn`` runs when the
    agent already has unsaved changes: a conflict's refresh would drop them (they were
    written only when no conflict happened); save them first or make them in ``fn``.
    """
    limit = _Budget(attempts, budget, backoff)
    try:
        dirty = agent.dirty
    except StatekeeperError:  # (data that cannot be diffed counts as changed)
        dirty = True
    if dirty:
        raise InvalidArgument(
            "agent",
            f"agent {agent.agent_id!r} has unsaved changes to its data: update_agent "
            "would drop them on a conflict (its refresh reloads the stored state); "
            "save them first (agent.save()) or make them inside fn",
        )

    async def once() -> int:
        out = fn(agent)
        if inspect.isawaitable(out):
            await out
        await agent.save()
        return agent.seq

    return await retry_loop(once, limit, agent.agent_id, on_conflict=agent.refresh)


async def retry_on_conflict(
    op: Callable[[], Awaitable[T]],
    *,
    budget: float | None = DEFAULT_BUDGET,
    attempts: int | None = None,
    backoff: Backoff | None = None,
    agent_id: str = "",
) -> T:
    """Run ``op()`` until it does not raise :class:`~statekeeper.errors.ConflictError`.

    ``op`` must re-read whatever it depends on each time it is called. Raises
    :class:`~statekeeper.errors.RetriesExhausted` when the budget (``budget``
    seconds, default 30, and ``attempts`` when given) is spent.
    """
    return await retry_loop(op, _Budget(attempts, budget, backoff), agent_id)


async def retry_loop(
    op: Callable[[], Awaitable[T]],
    limit: _Budget,
    agent_id: str = "",
    *,
    on_conflict: Callable[[], Awaitable[object]] | None = None,
) -> T:
    """The one conflict-retry loop (:func:`retry_on_conflict`, :func:`update_agent`,
    :func:`~statekeeper.concurrency.merge.merge`): ``op()`` again after each
    :class:`~statekeeper.errors.ConflictError` — ``on_conflict()`` first, then the
    backoff — until it returns or ``limit`` is spent (:class:`RetriesExhausted`). A
    ``RetriesExhausted`` from a nested helper is final: it is not retried again."""
    attempt = 0
    while True:
        attempt += 1
        try:
            return await op()
        except (RetriesExhausted, AgentReplaced):  # final: another try cannot help
            raise
        except ConflictError as exc:
            if on_conflict is not None:
                await on_conflict()
            if limit.spent(attempt):
                raise RetriesExhausted(agent_id or exc.agent_id, attempt, exc) from exc
            await asyncio.sleep(limit.pause(attempt))
