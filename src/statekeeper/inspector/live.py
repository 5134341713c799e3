"""The live view of an agent's page: server-sent events as its stream moves.

``head`` carries the new head seq whenever it moves (the page loads the new events);
``rewritten`` the head seq when the agent's records were rewritten in place — a schema
migration by rewrite, a repair: the head's tag changed without a new seq, or the head
went back — so everything the page shows is stale and it reloads. The head's version
is a short hash of the stream's head tag, which changes with every append *and* with
a rewrite; the page is given the version it shows (never the tag itself). When the head
moved on, the record the page showed as its head is read again: a rewrite followed by
an append in the same interval (a migration under a running agent), or another stream
under the same id (deleted and written again), changed it, and the page reloads too.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from ..errors import InvalidArgument, StatekeeperError
from ..store.delete_shown import identity_at, identity_mark
from ..store.namespaced import stored_id

if TYPE_CHECKING:
    from ..store import StateStore

__all__ = ["head_events", "head_version", "parse_version"]


def parse_version(params: Mapping[str, str], name: str = "v") -> str | None:
    """The ``v`` parameter of the live view: the head version the page shows (``m``:
    the digest of the record it shows at its head, see :func:`record_digest`)."""
    text = params.get(name, "")
    if not text:
        return None
    if len(text) != 16 or any(c not in "0123456789abcdef" for c in text):
        raise InvalidArgument(name, f"{name} must be the head version the page was given")
    return text


def _digest(checksum: bytes | None) -> str:
    return hashlib.sha256(checksum or b"").hexdigest()[:16]


async def record_digest(store: StateStore, agent_id: str, seq: int) -> str:
    """A short digest of the agent's stored record at ``seq`` (the page's ``m``): what
    the live view compares, when it starts, with the record there now — the page
    may have been rendered before a rewrite, or be reconnecting after one."""
    return _digest(await _mark(store, agent_id, seq))


async def head_version(store: StateStore, agent_id: str) -> tuple[int, str]:
    """``(head seq, version)`` of the agent (see the module docstring)."""
    seq, tag = await store.backend.head_tag(stored_id(store, agent_id))
    return seq, hashlib.sha256(tag or b"").hexdigest()[:16]


async def head_events(
    store: StateStore,
    agent_id: str,
    since: int,
    version: str | None,
    interval: float,
    disconnected: Callable[[], Awaitable[bool]],
    shown: str | None = None,
) -> AsyncIterator[bytes]:
    """The event stream of a page showing ``agent_id`` at seq ``since`` and head
    ``version`` (None: the first look is the baseline), checked every ``interval``
    seconds until ``disconnected()``. ``shown``: the :func:`record_digest` of the
    record the page shows at ``since`` — a page opened (or reconnecting) after that
    record was rewritten and the stream grew reloads, instead of appending the new
    events to what it showed (its first look knew no record to compare). Each
    ``head`` event carries the new head's digest after its seq, for a reconnect, and
    then its :func:`~statekeeper.store.delete_shown.identity_mark`, which the page's
    *Delete* form sends (it deletes the agent only as the page shows it)."""
    last = since
    mark: bytes | None = None  # the checksum of the record at `last`, once known
    yield b"retry: 2000\n\n"
    if shown is not None and since > 0:
        try:
            now_there = await _mark(store, agent_id, since)
        except StatekeeperError:
            now_there = None
        if _digest(now_there) != shown:  # not the record the page shows (any more)
            yield f"event: rewritten\ndata: {since}\n\n".encode()
            return
        mark = now_there
    while not await disconnected():
        now: str | None
        try:
            await store.head(agent_id)  # (still readable by this principal?)
            head, now = await head_version(store, agent_id)
            if version is None and head == last:
                version = now  # the baseline of a page that gave none
            moved = head > last and mark is not None and await _mark(store, agent_id, last) != mark
            if head != last or now != version or mark is None:
                mark = await _mark(store, agent_id, head)
            # the new head's identity, for the page's Delete form (see delete_shown)
            ident = identity_mark(await identity_at(store, agent_id, head)) if head > last else ""
        except StatekeeperError:
            head, now, moved = last, version, False
        if moved or head < last or (head == last and now != version):
            yield f"event: rewritten\ndata: {head}\n\n".encode()
        elif head != last:
            yield f"event: head\ndata: {head} {_digest(mark)} {ident}\n\n".encode()
        else:
            yield b": idle\n\n"
        last, version = head, now
        await asyncio.sleep(interval)


async def _mark(store: StateStore, agent_id: str, seq: int) -> bytes | None:
    """The stored checksum of the agent's record at ``seq`` (None: there is none)."""
    if seq < 1:
        return None
    raw = await store.backend.read(stored_id(store, agent_id), after_seq=seq - 1, to_seq=seq)
    return raw[0].checksum if raw else None
