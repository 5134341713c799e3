"""``statekeeper delete``: delete an agent, asking first unless ``--yes``.

It deletes what it asked about: the delete is made only at the head it showed, so a
write since is never deleted unseen; nor is a new agent of the id (deleted and made
again since, up to the same head): the head event shown is read again just before the
conditional delete, and one of another stream stops it (what is left is the moment
between that read and the delete, which compares heads only); with
``--yes`` (nothing asked) it deletes the agent as it finds it and prints the events
it deleted."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import AgentLost, AgentNotFound, ConflictError
from ..records import RawEvent
from ..store.conditional import delete_only_at
from ..store.namespaced import stored_id
from ._markup import escape
from .app import (
    DbOption,
    KeyFileOption,
    app,
    err_console,
    handled,
    open_store,
    out_console,
    resolve_url,
    run,
)
from .commands import AgentArg, _require
from .stores import require_on

if TYPE_CHECKING:
    from ..store import StateStore

__all__ = ["delete"]

#: conditional deletes ``delete --yes`` tries on an agent written all the while
_TRIES = 8

#: what tells one stream's head from another's at the same seq: its event's seq, time
#: and checksum (None: no stream)
Identity = tuple[int, float, bytes] | None


async def _identity(store: StateStore, agent_id: str) -> Identity:
    """The identity of ``agent_id``'s head event as stored (read raw: a damaged or
    lost agent can still be deleted)."""
    heads: list[RawEvent | None] = await store.backend.read_heads([stored_id(store, agent_id)])
    head = heads[0] if heads else None
    return None if head is None else (head.seq, head.timestamp, head.checksum)


@app.command()
@handled
def delete(
    ctx: typer.Context,
    agent: AgentArg,
    db: DbOption = None,
    key_file: KeyFileOption = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete an agent's events and snapshots (asks first unless --yes).

    An agent whose data was lost (``AgentLost``: evicted, or deleted outside the
    store) is deleted too: that acknowledges the loss, and its id can be used again.
    Exit code 1 when the agent does not exist or the deletion is declined.
    """
    url = resolve_url(ctx, db)

    shown: list[Identity] = [None]  # the head event the question is about

    async def head_of() -> int | AgentLost:
        async with open_store(url, key_file=key_file) as store:
            await require_on(store, agent, "write", "delete")  # refused as a delete, first
            try:
                found = await _require(store, agent)
            except AgentLost as lost:  # its data is gone: deleting acknowledges it
                return lost
            shown[0] = await _identity(store, agent)
            return found

    head = run(head_of())
    if isinstance(head, AgentLost):
        question = f"{head}. Delete agent {agent!r} to acknowledge the loss?"
    else:
        question = f"Delete agent {agent!r} and its {head} event(s)? This cannot be undone"
    if not yes and not typer.confirm(question):
        err_console().print("not deleted")
        raise typer.Exit(1)

    # the head deleted at: the one shown (--yes: the one found)
    deleted = [0 if isinstance(head, AgentLost) else head]
    remade = [False]  # deleted and made again since it was shown (at the head shown)

    async def go() -> bool:
        async with open_store(url, key_file=key_file, readonly=False) as store:
            if isinstance(head, AgentLost):
                return await store.delete(agent)
            for _ in range(_TRIES if yes else 1):
                if not yes:  # the agent asked about: not one made again at its head
                    now = await _identity(store, agent)
                    if now is not None and now != shown[0]:
                        deleted[0], remade[0] = now[0], now[0] == head
                        break
                try:
                    with delete_only_at(deleted[0]):  # (head 0 since: False, not found)
                        return await store.delete(agent)
                except ConflictError as exc:
                    deleted[0] = exc.current_seq
        if remade[0]:
            err_console().print(
                f"agent {escape(agent)!r} was deleted and made again since it was shown"
                f" (a new stream, head seq {deleted[0]}): not deleted; run again"
            )
            raise typer.Exit(1)
        err_console().print(
            f"agent {escape(agent)!r} was written since it was "
            f"{'counted' if yes else 'shown'} (head seq {deleted[0]}, not {head}): not"
            " deleted; run again"
        )
        raise typer.Exit(1)

    if not run(go()):
        raise AgentNotFound(agent)
    if isinstance(head, AgentLost):
        out_console().print(
            f"deleted agent {escape(agent)!r}, whose data was lost: the loss is acknowledged"
            " and its id can be used again"
        )
    else:
        out_console().print(f"deleted agent {escape(agent)!r} ({deleted[0]} event(s))")
