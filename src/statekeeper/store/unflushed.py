"""How the write-behind buffer (:mod:`.durability`) says that acknowledged writes were
not stored: a store dropped with writes buffered, a flush cancelled as it wrote, a
write-out at the loop's end that failed. A loss is never silent: each is logged, and
the ones nobody else will report are warned as
:class:`~statekeeper.errors.UnflushedWritesWarning`."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Sequence

from ..errors import BackendError, UnflushedWritesWarning
from ..records import AppendRequest

__all__ = ["dropped", "interrupted", "lost_at_exit", "lost_at_loop_end"]

logger = logging.getLogger("statekeeper.store")


def dropped(pending: Sequence[AppendRequest]) -> None:
    """A store collected (or its loop closed) with ``pending`` never written."""
    agents = len({r.agent_id for r in pending})
    events = sum(len(r.events) for r in pending)
    with contextlib.suppress(Exception):  # (at interpreter exit: whatever is left)
        logger.error(
            "a store with durability='async' was dropped with %d buffered event(s) of "
            "%d agent(s) never written: they are lost",
            events,
            agents,
        )
        warnings.warn(UnflushedWritesWarning(agents, events), stacklevel=3)


def lost_at_loop_end(lost: dict[str, int]) -> None:
    """The buffer's write-out at its loop's end failed for the agents of ``lost`` (each
    logged as it failed): nobody will call ``flush()`` to raise it, so the loss is said
    here, once, as an :class:`~statekeeper.errors.UnflushedWritesWarning` naming them."""
    events = sum(lost.values())
    names = ", ".join(repr(agent) for agent in list(lost)[:10])
    more = f" and {len(lost) - 10} more" if len(lost) > 10 else ""
    message = (
        f"a store with durability='async' left open when its event loop ended could not "
        f"write {events} buffered event(s) of {len(lost)} agent(s) ({names}{more}): they "
        "are lost (await store.flush() or store.close() before its event loop ends)"
    )
    with contextlib.suppress(Exception):  # (at interpreter exit: whatever is left)
        logger.error("%s", message)
        warnings.warn(UnflushedWritesWarning(message, events), stacklevel=2)


def lost_at_exit(failures: dict[str, BaseException]) -> None:
    """The flush of a sync facade left open (:mod:`.sync_exit`) failed at interpreter
    exit for the agents of ``failures`` (each logged as it failed): said once more,
    as an :class:`~statekeeper.errors.UnflushedWritesWarning` naming them."""
    names = ", ".join(repr(agent) for agent in list(failures)[:10])
    more = f" and {len(failures) - 10} more" if len(failures) > 10 else ""
    message = (
        f"a store with durability='async' left open at interpreter exit could not write "
        f"the buffered writes of {len(failures)} agent(s) ({names}{more}): they are lost "
        "(close the store before the program ends)"
    )
    with contextlib.suppress(Exception):
        logger.error("%s", message)
        warnings.warn(UnflushedWritesWarning(message), stacklevel=2)


def interrupted(batch: list[AppendRequest]) -> None:
    """A flush cancelled while it wrote ``batch`` (its loop shutting down): whether its
    appends were stored is unknown, and that is said."""
    agents = len({r.agent_id for r in batch})
    logger.error(
        "a write-behind flush of %d buffered append(s) of %d agent(s) was cancelled "
        "while it wrote them: they may not be stored (close or flush the store before "
        "its event loop ends)",
        len(batch),
        agents,
    )


def cut_short(batch: list[AppendRequest]) -> dict[str, BaseException]:
    """A flush whose event loop closed while it wrote ``batch`` (a worker's loop ended
    without the store's flush or close) never ends; ``batch``: its appends not found
    stored after. Said here, and the failures the next flush raises
    (``WriteBufferError``) name each agent (a later buffered append of one is stored
    only where the engine's compare-and-append finds the head it expects)."""
    logger.error(
        "a write-behind flush cut short by its event loop's close left %d buffered"
        " append(s) unstored (flush or close the store before its event loop ends)",
        len(batch),
    )
    return {
        r.agent_id: BackendError(
            "a write-behind flush writing this agent's buffered append(s) was cut short:"
            " its event loop was closed (flush or close the store before its loop ends);"
            " not stored",
        )
        for r in batch
    }
