"""What ``statekeeper import`` (:mod:`.transfer`) does about an agent it cannot import:
one whose read-back failed (deleted again when it can be, else said how it is
stored), one with an event the target refuses as too large (deleted again, see
:func:`written`), and one the target's key vault shredded (never written again)."""

from __future__ import annotations

import shlex
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from ..errors import IntegrityError, StatekeeperError, StateTooLarge

if TYPE_CHECKING:
    from ..store import StateStore
    from .import_lines import ImportedAgent as _Agent

__all__ = ["shredded", "undo", "written"]


async def written(write: Awaitable[None], store: StateStore, agent: _Agent, stored: int) -> None:
    """``write`` (the agent's events, written one by one), and when the target refuses
    one as too large (:class:`StateTooLarge`: over the engine's limit, a record another
    engine held) the agent this import created deleted again — only while its head is
    the one this import wrote — before the error is raised: the events before the
    refused one made an agent that listed and verified as whole, older than the file
    (before). One it was completing (``stored``) keeps its events: a stream cannot be
    cut back to a seq."""
    from ..store.conditional import delete_only_at

    try:
        await write
    except StateTooLarge as refused:
        head = await store.head(agent.agent_id)
        of = f"agent {agent.agent_id!r} written up to seq {head} of the file's"
        of += f" {agent.base_seq + len(agent.events)}"
        if stored and head:
            refused.add_note(f"{of} (an interrupted import had started it)")
        elif head:
            try:
                with delete_only_at(head):
                    await store.delete(agent.agent_id)
            except StatekeeperError as exc:  # written since, on hold, not permitted...
                undo = f"statekeeper delete {shlex.quote(agent.agent_id)} --yes"
                refused.add_note(f"{of}: deleting it again failed ({exc}) (undo: {undo})")
            else:
                refused.add_note(f"{of} was deleted again: the import left it absent")
        raise


async def undo(
    store: StateStore, agent: _Agent, stored: int, failed: IntegrityError
) -> IntegrityError:
    """``failed`` (the agent's read-back), saying what became of the agent: one this
    import created is deleted again — only while its head is the one this import
    wrote (a write since is never lost) — so the failed import leaves it absent, as
    it found it; one it completed (an interrupted import had stored its first
    ``stored`` events) keeps them: a stream cannot be cut back to a seq."""
    from ..store.conditional import delete_only_at

    agent_id = agent.agent_id
    undo = f"(undo: statekeeper delete {shlex.quote(agent_id)} --yes)"
    if stored:
        said = (
            f"the agent is stored as the file's events say: it existed up to seq {stored}"
            f" (an interrupted import) and a stream cannot be cut back {undo}"
        )
    else:
        try:
            with delete_only_at(agent.base_seq + len(agent.events)):
                await store.delete(agent_id)
        except StatekeeperError as exc:  # written since, on hold, not permitted...
            said = (
                f"the agent is stored as the file's events say: deleting it again failed"
                f" ({exc}) {undo}"
            )
        else:
            said = "the agent was deleted again: the failed import left it absent, as it was"
    return IntegrityError(failed.agent_id, failed.seq, f"{failed.reason}; {said}")


def shredded(store: StateStore, agent_id: str) -> bool:
    """Whether the store's key vault holds a tombstone for ``agent_id`` (its data key was
    destroyed: a write of it would raise ``AgentForgotten``)."""
    keyring = store.codec.keyring
    vault = keyring.data_keys if keyring is not None else None
    entry = vault.load(agent_id) if vault is not None else None
    return entry is not None and entry.wrapped is None
