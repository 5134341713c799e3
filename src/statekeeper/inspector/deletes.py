"""The inspector's *Delete*: it deletes the agent as its page showed it, not as it is
when the form arrives. The form carries the head the page shows (``head``, and
``mark``: :func:`~statekeeper.store.delete_shown.identity_mark` of that head event;
the live view keeps both current as the page follows new events), and the delete is
:func:`~statekeeper.store.delete_shown.delete_shown` — the one ``statekeeper delete``
makes after its question. An agent written since, or deleted and made again, is not
deleted: the answer is a 409 naming its head now, asking to look again. A form
without the head (a page of an older inspector) is refused: nothing is deleted.

A lost agent's page (its data gone; on S3, its newest commit gone: its head an
:class:`~statekeeper.errors.IntegrityError` naming the lost seqs) sends ``lost=1``: it
is deleted, acknowledging the loss, while it is still lost; one whose data reads again
is not (409).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import AgentLost, DecryptionError, IntegrityError, InvalidArgument
from ..store.delete_shown import Moved, delete_shown
from ..store.governed import governance_of
from ..store.namespaced import stored_id
from .live import parse_version
from .params import seq_of

if TYPE_CHECKING:
    from ..store import StateStore

__all__ = ["Deleted", "NotDeleted", "delete_as_shown", "lost_head_message"]

NO_HEAD = (
    "this delete form does not say which head of the agent its page showed (a page"
    " from an older inspector?): nothing was deleted; open the agent's page again and"
    " delete from there"
)


@dataclass(frozen=True)
class Deleted:
    """``existed``: the agent was deleted (False: it had no stream any more)."""

    existed: bool
    lost: bool = False


@dataclass(frozen=True)
class NotDeleted:
    """Nothing deleted: the agent is not as its page showed it; ``message`` says how."""

    message: str


async def lost_head_message(store: StateStore, agent_id: str) -> str | None:
    """What the lost page says when ``agent_id``'s head itself cannot be read (S3: its
    newest commit deleted behind the store's back), else None (damage elsewhere, or a
    wrong or missing key: :class:`~statekeeper.errors.DecryptionError`, not a loss)."""
    try:
        await store.head(agent_id)
    except DecryptionError:
        return None
    except IntegrityError as exc:
        return (
            f"agent {agent_id!r} lost its newest records: {exc}. Delete it to acknowledge"
            f" the loss (statekeeper delete {agent_id!r}), then save it afresh or restore"
            " it from a backup"
        )
    return None


async def delete_as_shown(
    store: StateStore, agent_id: str, form: dict[str, str]
) -> Deleted | NotDeleted:
    """Delete ``agent_id`` as the form's page showed it (see the module docstring)."""
    gov = governance_of(store)
    if gov is not None:  # refused before anything about the agent is read
        await gov.require(stored_id(store, agent_id), "write", "delete")
    if form.get("lost") == "1":
        try:
            now = await store.head(agent_id)
        except AgentLost:  # still lost: deleting acknowledges it
            return Deleted(await store.delete(agent_id), lost=True)
        except IntegrityError as exc:  # its head lost (S3), as statekeeper delete takes it
            if isinstance(exc, DecryptionError):  # (a wrong key: not a loss)
                raise
            return Deleted(await store.delete(agent_id), lost=True)
        if now == 0:
            return Deleted(False)
        return NotDeleted(
            f"agent {agent_id!r} was shown lost, but its data reads now (head seq {now}):"
            " it was written since it was shown; nothing was deleted — look at it again"
        )
    if not form.get("head", "").strip() or not form.get("mark", "").strip():
        raise InvalidArgument("head", NO_HEAD)
    head = seq_of(form, "head")
    mark = parse_version(form, "mark")
    assert head is not None and mark is not None
    done = await delete_shown(store, agent_id, head, mark)
    if not isinstance(done, Moved):
        return Deleted(done)
    if done.remade:
        why = (
            "was deleted and made again since it was shown, or its records rewritten in"
            f" place (a migration, a rekey): another record at head seq {done.head}"
        )
    else:
        why = f"was written since it was shown (head seq {done.head} now, the page showed {head})"
    return NotDeleted(f"agent {agent_id!r} {why}: nothing was deleted — look at it again")
