"""``statekeeper delete``: delete an agent, asking first unless ``--yes``.

It deletes what it asked about: the delete is made only at the head it showed, so a
write since is never deleted unseen; nor is a new agent of the id (deleted and made
again since, up to the same head): :func:`~statekeeper.store.delete_shown.delete_shown`,
which the inspector's *Delete* form calls too; with
``--yes`` (nothing asked) it deletes the agent as it finds it and prints the events
it deleted. An agent whose head cannot be read (an ``IntegrityError``: on S3, its
newest commits deleted by something else) is deleted as a lost one is, acknowledging
the loss — unless its head reads by the time of the delete (it changed since).

``--at SEQ:MARK`` names the head it may delete: the head event's seq and its
identity mark (:func:`~statekeeper.store.delete_shown.identity_mark`: 16 hex digits
of its seq, time and stored checksum — what a failed ``statekeeper import`` prints in
its undo, naming the last event it wrote). Any other head — a write since, or the
agent deleted and made again by another process, even up to the same seq — is
refused with :class:`~statekeeper.errors.HeadMoved` (exit code 1), nothing deleted."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

from ..errors import (
    AgentLost,
    AgentNotFound,
    ConflictError,
    DecryptionError,
    HeadMoved,
    IntegrityError,
    InvalidArgument,
)
from ..store.conditional import delete_only_at
from ..store.delete_shown import Identity, Moved, delete_shown, head_identity, identity_mark
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

__all__ = ["delete"]

#: conditional deletes ``delete --yes`` tries on an agent written all the while
_TRIES = 8


@app.command()
@handled
def delete(
    ctx: typer.Context,
    agent: AgentArg,
    db: DbOption = None,
    key_file: KeyFileOption = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    at: Annotated[
        str | None,
        typer.Option(
            "--at",
            metavar="SEQ:MARK",
            help="Delete only while the agent's head is this event (its seq and identity"
            " mark, as a failed import's undo names it); else refuse, nothing deleted.",
        ),
    ] = None,
) -> None:
    """Delete an agent's events and snapshots (asks first unless --yes).

    An agent whose data was lost (``AgentLost``: evicted, or deleted outside the
    store; or its newest records, its head unreadable) is deleted too: that
    acknowledges the loss, and its id can be used again.
    Exit code 1 when the agent does not exist or the deletion is declined, or (--at)
    its head is not the one named: written since, or deleted and made again.
    """
    url = resolve_url(ctx, db)
    if at is not None:
        _delete_at(url, key_file, agent, at, yes)
        return

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
            shown[0] = await head_identity(store, agent)
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
                    f"agent {escape(repr(agent))} changed since it was shown (its head reads"
                    f" now: seq {current}): not deleted; run again"
                )
                raise typer.Exit(1)
            if not yes:  # the agent asked about: not written since, nor made again
                done = await delete_shown(store, agent, head, identity_mark(shown[0]))
                if not isinstance(done, Moved):
                    return done
                deleted[0], remade[0] = done.head, done.remade
            for _ in range(_TRIES if yes else 0):  # --yes: the head found, any record
                try:
                    with delete_only_at(deleted[0]):  # (head 0 since: False, not found)
                        return await store.delete(agent)
                except ConflictError as exc:
                    if exc.agent_id != agent:  # (another stream's: that failure, as it is)
                        raise
                    deleted[0] = exc.current_seq
        if remade[0]:
            err_console().print(
                f"agent {escape(repr(agent))} was deleted and made again since it was shown"
                f" (a new stream, head seq {deleted[0]}): not deleted; run again"
            )
            raise typer.Exit(1)
        err_console().print(
            f"agent {escape(repr(agent))} was written since it was "
            f"{'counted' if yes else 'shown'} (head seq {deleted[0]}, not {head}): not"
            " deleted; run again"
        )
        raise typer.Exit(1)

    if not run(go()):
        raise AgentNotFound(agent)
    if not isinstance(head, int):
        out_console().print(
            f"deleted agent {escape(repr(agent))}, whose data was lost: the loss is acknowledged"
            " and its id can be used again"
        )
    else:
        out_console().print(f"deleted agent {escape(repr(agent))} ({deleted[0]} event(s))")


#: the largest seq an engine stores (a signed 64-bit integer)
_MAX_SEQ = 2**63 - 1


def parse_at(value: str) -> tuple[int, str]:
    """``SEQ:MARK`` of ``--at``: a head seq >= 1 and an identity mark (16 hex digits);
    :class:`~statekeeper.errors.InvalidArgument` naming what is wrong."""
    found = re.fullmatch(r"([0-9]{1,19}):([0-9a-fA-F]{16})", value)  # (ASCII digits only)
    if found is None or not 1 <= int(found[1]) <= _MAX_SEQ:
        raise InvalidArgument(
            "--at",
            f"--at takes SEQ:MARK (a head seq from 1 to {_MAX_SEQ}, then the head event's"
            f" identity mark: 16 hex digits, as a failed import's undo prints it), not"
            f" {value!r}",
        )
    return int(found[1]), found[2].lower()


def _delete_at(url: str, key_file: Path | None, agent: str, at: str, yes: bool) -> None:
    """``delete --at SEQ:MARK``: the agent deleted only while its head is that event."""
    seq, mark = parse_at(at)
    question = f"Delete agent {agent!r} at its head seq {seq} ({mark})? This cannot be undone"
    if not yes and not typer.confirm(question):
        err_console().print("not deleted")
        raise typer.Exit(1)

    async def go() -> bool | Moved:
        async with open_store(url, key_file=key_file, readonly=False) as store:
            await require_on(store, agent, "write", "delete")
            # (the head's identity read, compared, and the delete conditional on that
            # event in the engine's commit: delete_shown, as the inspector's form)
            return await delete_shown(store, agent, seq, mark)

    done = run(go())
    if isinstance(done, Moved):
        raise HeadMoved(agent, seq, mark, done.head, done.remade)
    if not done:
        raise AgentNotFound(agent)
    out_console().print(f"deleted agent {escape(repr(agent))} ({seq} event(s))")
