"""What ``statekeeper import`` (:mod:`.transfer`) does about an agent it cannot import:
one whose read-back failed (deleted again when it can be, else said how it is
stored), one with an event the target refuses as too large (deleted again, see
:func:`written`), and one the target's key vault shredded (never written again)."""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING

from ..errors import ConflictError, IntegrityError, StatekeeperError, StateTooLarge

if TYPE_CHECKING:
    from ..store import StateStore
    from .import_lines import ImportedAgent as _Agent

__all__ = ["last_written", "shredded", "undo", "written", "written_identity"]


async def written(
    write: Awaitable[None],
    store: StateStore,
    agent: _Agent,
    stored: int,
    last: Sequence[tuple[int, bytes | None] | None] = (),
) -> None:
    """``write`` (the agent's events, written one by one; ``last``: the last one it
    wrote, as the store kept it, set as it goes), and when the target refuses
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
        from ..store.delete_shown import identity_at

        # the last event this import wrote, as the store kept it: read back, the head
        # could be an event another process appended since the refusal, deleted with
        # the agent (acknowledged to that process, then gone)
        mine = last[-1] if last else None
        head = mine[0] if mine is not None else await store.head(agent.agent_id)
        of = f"agent {agent.agent_id!r} written up to seq {head} of the file's"
        of += f" {agent.base_seq + len(agent.events)}"
        if stored and head:
            refused.add_note(f"{of} (an interrupted import had started it)")
        elif head:
            if mine is None:
                found = await identity_at(store, agent.agent_id, head)
                mine = (head, found[2] if found is not None else None)
            try:  # (at that head event: never a write since, nor a stream made again)
                with delete_only_at(*mine):
                    await store.delete(agent.agent_id)
            except StatekeeperError as exc:  # written since, on hold, not permitted...
                refused.add_note(
                    f"{of}: deleting it again failed ({exc}){_suggested(agent, *mine)}"
                )
            else:
                refused.add_note(f"{of} was deleted again: the import left it absent")
        raise


def last_written(store: StateStore, agent_id: str) -> tuple[int, bytes | None] | None:
    """The seq and stored checksum of the last record of ``agent_id`` the store wrote
    and keeps (not yet flushed, or cached); None when it keeps none."""
    from ..store.namespaced import stored_id

    full = stored_id(store, agent_id)
    record = store._unflushed.get(full) or store._cache.peek(full)
    if record is None or record.checksum is None:
        return None
    return record.seq, record.checksum


async def written_identity(store: StateStore, agent: _Agent) -> bytes | None:
    """The stored checksum of the head event the import just wrote of ``agent`` (all
    its events: it created the agent): the identity :func:`undo` deletes at, never a
    stream deleted and made again to the same seq by another process since. From the
    record the store wrote (no read); read when the store keeps none (its cache off,
    or evicted). None: no event at that head (nothing of this import's to delete)."""
    from ..store.delete_shown import identity_at
    from ..store.namespaced import stored_id

    agent_id, head = agent.agent_id, agent.base_seq + len(agent.events)
    full = stored_id(store, agent_id)
    record = store._unflushed.get(full) or store._cache.peek(full)
    if record is not None and record.seq == head and record.checksum is not None:
        return record.checksum
    found = await identity_at(store, agent_id, head)
    return found[2] if found is not None else None


async def undo(
    store: StateStore,
    agent: _Agent,
    stored: int,
    failed: IntegrityError,
    checksum: bytes | None = None,
) -> IntegrityError:
    """``failed`` (the agent's read-back), saying what became of the agent: one this
    import created is deleted again — only while its head is the very event this
    import wrote (its seq and, given, its stored ``checksum`` from :func:`written_identity`):
    a write since is never lost, nor another process's stream deleted and made again
    up to the same seq meanwhile — so the failed import leaves it absent, as it found
    it; one it completed (an interrupted import had stored its first ``stored``
    events) keeps them: a stream cannot be cut back to a seq."""
    from ..store.conditional import delete_only_at

    agent_id = agent.agent_id
    head = agent.base_seq + len(agent.events)
    undo = _suggested(agent, head, checksum)
    if stored:
        said = (
            f"the agent is stored as the file's events say: it existed up to seq {stored}"
            f" (an interrupted import) and a stream cannot be cut back{undo}"
        )
    else:
        try:
            with delete_only_at(head, checksum):
                await store.delete(agent_id)
        except ConflictError as exc:  # (not the file's agent now: no undo to offer)
            said = (
                "the agent was not deleted again: it was written since the import wrote it"
                f" (or deleted and made again by another up to the same seq: {exc}), and"
                " what is stored now is kept; check it before deleting it"
            )
        except StatekeeperError as exc:  # on hold, not permitted...
            said = (
                f"the agent is stored as the file's events say: deleting it again failed"
                f" ({exc}){undo}"
            )
        else:
            said = "the agent was deleted again: the failed import left it absent, as it was"
    return IntegrityError(failed.agent_id, failed.seq, f"{failed.reason}; {said}")


def _suggested(agent: _Agent, seq: int, checksum: bytes | None) -> str:
    """`` (undo: <command>)``: the exact command deleting ``agent`` only while its head
    is the event this import wrote at ``seq`` (stored ``checksum``) — ``statekeeper
    delete AGENT --at SEQ:MARK --yes``, MARK its identity mark (seq, the file's time of
    that event, which the import stamped it with, and the checksum). Before, the undo
    was ``statekeeper delete AGENT --yes``: run after another process wrote the agent
    (or deleted and made it again), it deleted those acknowledged writes. "" when the
    record is not known (no undo can name it: check the agent before deleting it)."""
    from ..store.delete_shown import identity_mark

    at = seq - agent.base_seq - 1
    if checksum is None or not 0 <= at < len(agent.events):
        return ""
    mark = identity_mark((seq, float(agent.events[at]["ts"]), checksum))
    return f" (undo: statekeeper delete {shlex.quote(agent.agent_id)} --at {seq}:{mark} --yes)"


def shredded(
    store: StateStore, agent_id: str, source: str | None = None, held: bool = True
) -> bool:
    """Whether the store's key vault holds a tombstone for ``agent_id`` (its data key was
    destroyed: a write of it would raise ``AgentForgotten``), in the store's key family
    or in ``source``, the key family of the store an export came from (a copy there,
    restored before copies adopted their keys, is forgotten once every key of the
    agent is destroyed: ``Keyring.forgotten_in(held=True)``; not when ``held`` is False:
    the file says its records there use no data key, :attr:`ImportedAgent.data_key`)."""
    keyring = store.codec.keyring
    if keyring is None:
        return False
    if keyring.forgotten_in(store.codec.key_family, agent_id) is not None:
        return True
    # (the store the file came from held the agent: a copy of another store's there
    # counts as forgotten once every key of it is destroyed)
    return source is not None and keyring.forgotten_in(source, agent_id, held=held) is not None
