"""How ``agents`` and ``stats`` read an agent's machine state, and mark the agents whose
state cannot be shown (forgotten, encrypted without a key, lost, damaged)."""

from __future__ import annotations

from typing import Any

from ..errors import AgentForgotten, DecryptionError, IntegrityError, KeyNotFound

__all__ = ["DAMAGED", "ENCRYPTED", "FORGOTTEN", "LOST", "head_fsm", "head_or_damaged"]

#: how ``agents`` and ``stats`` show an agent whose data key was destroyed (``forget``)
FORGOTTEN = "(forgotten)"
#: how ``stats`` counts an agent whose stored data is lost (``AgentLost``)
LOST = "(lost)"


#: how ``agents`` and ``stats`` show an agent whose state is encrypted and no key was given
ENCRYPTED = "(encrypted)"


async def head_fsm(store: Any, agent_id: str) -> tuple[str | None, str | None]:
    """The agent's machine state (no data folded) and, when it cannot be shown, why
    (:data:`FORGOTTEN`, :data:`ENCRYPTED`): a crypto-shredded agent, or an encrypted
    one in a store opened without a key (its id and times are stored in the clear), is
    listed as such, not a failure of the whole listing."""
    try:
        head = await store.head_state(agent_id)
    except AgentForgotten:
        return None, FORGOTTEN
    except KeyNotFound as exc:
        if not exc.no_keyring:  # a key was given and it is the wrong one: say so
            raise
        return None, ENCRYPTED
    return (head.fsm_state if head is not None else None), None


#: how ``stats`` counts an agent whose head fails verification (``IntegrityError``)
DAMAGED = "(damaged)"


async def head_or_damaged(
    store: Any, agent_id: str, damaged: list[IntegrityError]
) -> tuple[str | None, str | None]:
    """:func:`head_fsm`, with an agent whose head fails verification (a damaged record:
    an ``IntegrityError``) marked :data:`DAMAGED` and its error added to ``damaged``,
    so one damaged stream does not hide every other agent. A record that does not
    decrypt (``DecryptionError``: most likely a wrong key) is raised as before."""
    try:
        return await head_fsm(store, agent_id)
    except IntegrityError as exc:
        if isinstance(exc, DecryptionError):
            raise
        damaged.append(exc)
        return None, DAMAGED
