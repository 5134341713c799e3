"""The agent-id check :class:`~statekeeper.backends.base.Backend` wraps around every
engine's methods whose first argument is an agent id, and around ``append_batch``
(see ``Backend.__init_subclass__``)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from ...arguments import check_stored_id
from ...errors import InvalidAgentId
from ...records import (
    AppendRequest,
    AppendResult,
)

if TYPE_CHECKING:
    from ..base import Backend


#: the contract's methods whose first argument is an agent id (see Backend.__init_subclass__)
_AGENT_ID_METHODS = (
    "lookup_key",
    "head",
    "head_tag",
    "read",
    "seq_at",
    "save_snapshot",
    "latest_snapshot",
    "read_latest",
    "read_state",
    "read_state_rows",
    "delete_agent",
    "delete_agent_at",
    "acquire_lease",
    "renew_lease",
    "release_lease",
    "release_lease_again",
    "get_lease",
    "next_lease_token",
    "idempotency_keys",
    "rename_keys",
    "set_ttl",
    "prune",
    "replace_snapshot",
)


def _checking_agent_id(
    fn: Callable[..., Awaitable[Any]],
) -> Callable[..., Awaitable[Any]]:
    # a plain function handing back the engine's own coroutine: no extra coroutine per
    # call on the hot path; a bad id still fails when awaited, like any other error
    @functools.wraps(fn)
    def checked(self: Backend, agent_id: str, *args: Any, **kwargs: Any) -> Awaitable[Any]:
        try:
            check_stored_id(agent_id)
        except InvalidAgentId as exc:
            return _failed(exc)
        return fn(self, agent_id, *args, **kwargs)

    checked.__statekeeper_checked__ = True  # type: ignore[attr-defined]
    return checked


async def _failed(exc: BaseException) -> Any:
    raise exc


def _checking_batch(
    fn: Callable[..., Awaitable[list[AppendResult | BaseException]]],
) -> Callable[..., Awaitable[list[AppendResult | BaseException]]]:
    """``append_batch``: a request with a bad agent id fails on its own (its error in
    its place of the results); the engine sees only the others."""

    @functools.wraps(fn)
    async def checked(
        self: Backend, requests: Sequence[AppendRequest]
    ) -> list[AppendResult | BaseException]:
        refused: dict[int, BaseException] = {}
        for index, request in enumerate(requests):
            try:
                check_stored_id(request.agent_id)
            except InvalidAgentId as exc:
                refused[index] = exc
        if not refused:
            return await fn(self, requests)
        rest = [r for i, r in enumerate(requests) if i not in refused]
        done = iter(await fn(self, rest))
        return [refused[i] if i in refused else next(done) for i in range(len(requests))]

    checked.__statekeeper_checked__ = True  # type: ignore[attr-defined]
    return checked
