"""What ``statekeeper import`` (:mod:`.transfer`) does about an agent it cannot import:
one whose read-back failed (deleted again when it can be, else said how it is
stored), and one the target's key vault shredded (never written again)."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from ..errors import IntegrityError, StatekeeperError

if TYPE_CHECKING:
    from ..store import StateStore
    from .import_lines import ImportedAgent as _Agent

__all__ = ["shredded", "undo"]


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


def shredded(store: StateStore, agent_id: str, source: str | None = None) -> bool:
    """Whether the store's key vault holds a tombstone for ``agent_id`` (its data key was
    destroyed: a write of it would raise ``AgentForgotten``), in the store's key family
    or in ``source``, the key family of the store an export came from."""
    keyring = store.codec.keyring
    if keyring is None:
        return False
    if keyring.forgotten_in(store.codec.key_family, agent_id) is not None:
        return True
    return source is not None and keyring.forgotten_in(source, agent_id) is not None
