"""``statekeeper delete``: delete an agent, asking first unless ``--yes``.

It deletes what it asked about: the delete is made only at the head it showed, so a
write since is never deleted unseen; nor is a new agent of the id (deleted and made
again since, up to the same head): the head event shown is read again just before the
conditional delete, and one of another stream stops it (what is left is the moment
between that read and the delete, which compares heads only); with
``--yes`` (nothing asked) it deletes the agent as it finds it and prints the events
it deleted. An agent whose head cannot be read (an ``IntegrityError``: on S3, its
newest commits deleted by something else) is deleted as a lost one is, acknowledging
the loss — unless its head reads by the time of the delete (it changed since)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import AgentLost, AgentNotFound, ConflictError, DecryptionError, IntegrityError
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
    store; or its newest records, its head unreadable) is deleted too: that
    acknowledges the loss, and its id can be used again.
    Exit code 1 when the agent does not exist or the deletion is declined.
    """
    url = resolve_url(ctx, db)

    shown: list[Identity] = [None]  # the head event the question is about

    async def head_of() -> int | AgentLost | IntegrityError:
        async with open_store(url, key_file=key_file) as store:
            await require_on(store, agent, "write", "delete")  # refused as a delete, first
            try:
                found = await _require(store, agent)
            except AgentLost as lost:  # its data is gone: deleting acknowledges it
                return lost
            except IntegrityError as damaged:  # its head is lost (S3: newest commits gone)
                if isinstance(damaged, DecryptionError):  # (a wrong key: not a loss)
                    raise
                return damaged
            shown[0] = await _identity(store, agent)
            return found

    head = run(head_of())
    if isinstance(head, AgentLost | IntegrityError):
        question = f"{head}. Delete agent {agent!r} to acknowledge the loss?"
    else:
        question = f"Delete agent {agent!r} and its {head} event(s)? This cannot be undone"
    if not yes and not typer.confirm(question):
        err_console().print("not deleted")
        raise typer.Exit(1)

    # the head deleted at: the one shown (--yes: the one found)
    deleted = [head if isinstance(head, int) else 0]
    remade = [False]  # deleted and made again since it was shown (at the head shown)

    async def go() -> bool:
        async with open_store(url, key_file=key_file, readonly=False) as store:
            if isinstance(head, AgentLost):
                return await store.delete(agent)
            if isinstance(head, IntegrityError):
                try:  # the stream shown, its head still unreadable?
                    current = await store.head(agent)
                except IntegrityError:
                    return await store.delete(agent)
                if current == 0:
                    return False
                err_console().print(
                    f"agent {escape(agent)!r} changed since it was shown (its head reads"
                    f" now: seq {current}): not deleted; run again"
                )
                raise typer.Exit(1)
            for _ in range(_TRIES if yes else 1):
                if not yes:  # the agent asked about: not one made again at its head
                    now = await _identity(store, agent)
                    if now is not None and now != shown[0]:
                        deleted[0], remade[0] = now[0], now[0] == head
                        break
                # asked: that head record alone (one made again since, even in between
                # the look above and the delete, has another checksum: not deleted)
                record = shown[0][2] if shown[0] is not None and not yes else None
                try:
                    with delete_only_at(deleted[0], record):  # (head 0 since: False)
                        return await store.delete(agent)
                except ConflictError as exc:
                    remade[0] = record is not None and exc.current_seq == deleted[0]
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
    if not isinstance(head, int):
        out_console().print(
            f"deleted agent {escape(agent)!r}, whose data was lost: the loss is acknowledged"
            " and its id can be used again"
        )
    else:
        out_console().print(f"deleted agent {escape(agent)!r} ({deleted[0]} event(s))")
