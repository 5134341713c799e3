"""Durable steps: run a side effect once, and after a crash return its recorded result.

A *step* is a unit of work with a stable id inside an agent — "charge-card",
``f"email-{n}"``. :meth:`Steps.run` first looks for the step's recorded result in the
agent's stream (one idempotency-key lookup, key ``"step:<id>"``); if it is there, the
result is returned and the function is **not** called. Otherwise the function runs and
its result is appended to the stream as a ``step`` event under that key — with the
agent's pending data changes when the steps belong to a
:class:`~statekeeper.store.DurableAgent`, in the same atomic write.

The boundary, precisely
    *Recorded* means the append of the step's event committed. A step whose result is
    recorded never runs again, in any process (the key makes a second record of the
    same step a no-op, so two runners racing keep the first result). A step whose
    function ran but whose record did not commit — the process died (or lost its
    lease, or storage failed) after the side effect and before the commit — runs
    **again** on recovery: steps are *at-least-once* up to the commit and
    *exactly-once* from it on. A side effect is therefore exactly-once only when it is
    idempotent (pass :meth:`Steps.idempotency_key` to the external system — a
    payment API's idempotency key, an upsert) or when the effect *is* the recorded
    state change itself. A step that raises is not recorded and runs again next time.
    Results must be JSON values; what a replay returns is the stored JSON (tuples come
    back as lists).

Run steps of one agent from one worker at a time (hold its lease,
:mod:`~statekeeper.concurrency.leases`): two workers could otherwise both run a step
before either records it.

>>> import asyncio
>>> from statekeeper import StateStore
>>> calls = []
>>> async def demo():
...     async with StateStore("memory://") as store:
...         steps = Steps(store, "order-7")
...         @steps.step("charge")
...         async def charge(amount):
...             calls.append(amount)          # the side effect
...             return {"charged": amount}
...         first = await charge(30)
...         again = await charge(30)          # recorded: not run again
...         return first, again, calls
>>> asyncio.run(demo())
({'charged': 30}, {'charged': 30}, [30])
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from ..arguments import check_agent_id, check_name
from ..codec import serializer
from ..errors import (
    AgentNotFound,
    ConfigurationError,
    ConflictError,
    HistoryCompacted,
    InvalidArgument,
    LeaseLost,
    SerializationError,
    StepError,
)
from ..records import STEP_KEY_PREFIX, EventType

if TYPE_CHECKING:
    from ..store.agent import DurableAgent
    from ..store.store import Leased, StateStore

__all__ = ["STEP_KEY_PREFIX", "StepHandle", "StepRecord", "Steps"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StepRecord:
    """A recorded step: its id, its result (as stored) and the seq of its event."""

    step_id: str
    result: Any
    seq: int


@dataclass(slots=True)
class StepHandle:
    """The handle :meth:`Steps.once` yields: run the block's effect only if
    :attr:`needed`, and put its outcome in :attr:`result`."""

    step_id: str
    needed: bool
    result: Any = None


class Steps:
    """Durable steps of one agent.

    Args:
        target: a :class:`~statekeeper.store.StateStore` (then give ``agent_id``) or a
            :class:`~statekeeper.store.DurableAgent` (its pending data changes are
            recorded with each step, fenced by its bound lease).
        agent_id: the agent, when ``target`` is a store.
        lease: fence the step records with this lease (store targets only; a durable
            agent uses its own :attr:`~statekeeper.store.DurableAgent.lease`).
    """

    def __init__(
        self,
        target: StateStore | DurableAgent,
        agent_id: str | None = None,
        *,
        lease: Leased | None = None,
    ) -> None:
        from ..store.agent import DurableAgent
        from ..store.store import StateStore

        self._agent: DurableAgent | None = None
        if not isinstance(target, DurableAgent | StateStore):
            raise InvalidArgument(
                "target",
                f"target must be a StateStore or a DurableAgent, not {type(target).__name__}",
            )
        if isinstance(target, DurableAgent):
            if lease is not None:
                raise ConfigurationError("a DurableAgent's steps use the agent's own lease")
            self._agent = target
            self.store: StateStore = target.store
            self.agent_id: str = target.agent_id
        else:
            if agent_id is None:
                raise InvalidArgument("agent_id", "Steps over a store need an agent_id")
            self.store = target
            self.agent_id = check_agent_id(agent_id)
            if lease is not None:  # refused here, before a step's effect runs
                from ..store.agent import check_agent_lease

                check_agent_lease(target, self.agent_id, lease)
        self.lease = lease

    @staticmethod
    def key(step_id: str) -> str:
        """The idempotency key the step's record is stored under."""
        return STEP_KEY_PREFIX + step_id

    def idempotency_key(self, step_id: str) -> str:
        """A key unique to this agent's step, to hand to an external system so that a
        re-run of the step (see the at-least-once boundary) does not repeat the effect."""
        return f"{self.agent_id}/{self.key(step_id)}"

    async def recorded(self, step_id: str) -> StepRecord | None:
        """The step's record, or None if its result was never recorded.

        Asked of the store every time (never remembered by this object): the agent may
        have been deleted and started over since, by this process or another, and its
        new incarnation's step is not recorded."""
        _check_id(step_id)
        found = await self.store.find_key(self.agent_id, self.key(step_id))
        if found is None:
            return None
        async for event in self.store.history(
            self.agent_id, after_seq=found.first_seq - 1, to_seq=found.first_seq
        ):
            if event.info.get("step") != step_id or "result" not in event.info:
                raise StepError(
                    f"agent {self.agent_id!r}: the event at seq {event.seq} under key "
                    f"{self.key(step_id)!r} is not the record of step {step_id!r}"
                )
            return StepRecord(step_id, event.info["result"], event.seq)
        raise StepError(
            f"agent {self.agent_id!r}: step {step_id!r} is recorded at seq "
            f"{found.first_seq}, but that event cannot be read"
        )

    async def run(
        self, step_id: str, fn: Callable[..., Awaitable[T] | T], *args: Any, **kwargs: Any
    ) -> Any:
        """The step's recorded result; or run ``fn(*args, **kwargs)``, record its result
        and return it (as stored, i.e. JSON). Exceptions from ``fn`` propagate and
        nothing is recorded."""
        if not callable(fn):
            raise InvalidArgument("fn", f"fn must be callable, not {type(fn).__name__}")
        record = await self.recorded(step_id)
        if record is not None:
            return record.result
        self._check_lease(step_id)
        result = fn(*args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return (await self._record(step_id, result)).result

    def step(
        self, step_id: str | Callable[..., str] | None = None
    ) -> Callable[[Callable[..., Awaitable[T] | T]], Callable[..., Awaitable[Any]]]:
        """Decorator: calls of the function become durable steps.

        ``step_id`` is a fixed id, a function of the call's arguments (for steps run
        once per item: ``lambda n: f"email-{n}"``), or None for the function's
        qualified name.
        """

        def decorate(fn: Callable[..., Awaitable[T] | T]) -> Callable[..., Awaitable[Any]]:
            @functools.wraps(fn)
            async def wrapper(*args: Any, **kwargs: Any) -> Any:
                if callable(step_id):
                    sid = step_id(*args, **kwargs)
                else:
                    sid = step_id if step_id is not None else fn.__qualname__
                return await self.run(sid, fn, *args, **kwargs)

            return wrapper

        return decorate

    @contextlib.asynccontextmanager
    async def once(self, step_id: str) -> AsyncIterator[StepHandle]:
        """Context-manager form: ``async with steps.once("x") as s:`` — if
        ``s.needed``, do the work and set ``s.result``; it is recorded when the block
        exits without an exception. Otherwise ``s.result`` is the recorded result."""
        record = await self.recorded(step_id)
        if record is None:
            self._check_lease(step_id)
        handle = StepHandle(
            step_id, needed=record is None, result=record.result if record else None
        )
        yield handle
        if handle.needed:
            stored = await self._record(step_id, handle.result)
            handle.result, handle.needed = stored.result, False

    def _check_lease(self, step_id: str) -> None:
        """Refuse to run ``step_id`` under a lease this process already knows it lost
        (or released): its record would be refused after its side effect ran."""
        lease = self._agent.lease if self._agent is not None else self.lease
        refusal = getattr(lease, "refusal", None)
        error = refusal() if callable(refusal) else None
        if isinstance(error, LeaseLost):
            error.add_note(f"step {step_id!r} was not run: its record could not be stored")
            raise error

    async def results(self) -> dict[str, Any]:
        """Every recorded step of the agent: ``{step_id: result}``, in record order.
        On a stream compacted by retention, from its base on (retention never
        compacts away a step's record, nor does its ``keys_ttl`` forget one)."""
        out: dict[str, Any] = {}
        try:
            try:
                await self._collect(0, out)
            except HistoryCompacted as exc:
                out.clear()
                await self._collect(exc.base_seq, out)
        except AgentNotFound:
            return {}
        return out

    async def _collect(self, after_seq: int, out: dict[str, Any]) -> None:
        async for event in self.store.history(self.agent_id, after_seq=after_seq):
            key = event.idempotency_key or ""
            if event.type == EventType.STEP and key.startswith(STEP_KEY_PREFIX):
                out[key[len(STEP_KEY_PREFIX) :]] = event.info.get("result")

    async def _record(self, step_id: str, result: Any) -> StepRecord:
        try:  # (orjson alone writes nan/inf as null: a result altered without an error)
            stored = orjson.loads(serializer.dumps(result, "result"))
        except SerializationError as exc:
            raise InvalidArgument(
                "result", f"the result of step {step_id!r} is not a JSON value: {exc}"
            ) from exc
        info = {"step": step_id, "result": stored}
        key = self.key(step_id)
        if self._agent is not None:
            appended = await self._agent.record(EventType.STEP, info, idempotency_key=key)
        else:
            try:
                appended = await self.store.append(
                    self.agent_id, EventType.STEP, info, idempotency_key=key, lease=self.lease
                )
            except AgentNotFound:
                with contextlib.suppress(ConflictError):  # another runner created it
                    await self.store.create(self.agent_id, {}, lease=self.lease)
                appended = await self.store.append(
                    self.agent_id, EventType.STEP, info, idempotency_key=key, lease=self.lease
                )
        if self.store.durability == "async":
            # write-behind acknowledges on buffering: a step is recorded once its record
            # commits, so the flush is awaited here (a crash after run() returned lost
            # the buffered record, and the recorded step, its side effect done, ran again)
            await self.store.flush()
        if appended.duplicate:  # recorded by an earlier or concurrent run: that one holds
            record = await self.recorded(step_id)
            if record is None:  # pragma: no cover - the key exists, so must its record
                raise StepError(f"step {step_id!r} reported recorded but not found")
            return record
        return StepRecord(step_id, stored, appended.first_seq)


def _check_id(step_id: str) -> None:
    check_name(step_id, "step_id")
    check_name(STEP_KEY_PREFIX + step_id, "step_id")  # its key follows the same rule
