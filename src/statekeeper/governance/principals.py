"""Principals and namespaces: who asks, and where an agent lives.

An agent id names its namespace: everything before its last ``/`` (``acme/support/bot-1``
lives in ``acme/support``; ``bot-1`` lives in the root namespace, ``""``). A
*principal* is the name a store is opened as (``StateStore(url, principal="alice")``,
``statekeeper --as alice``); what it may do is the policy's business
(:mod:`.policy`). Both follow the agent-id rule of :mod:`statekeeper.arguments`.
"""

from __future__ import annotations

from ..arguments import check_agent_id, check_name
from ..errors import InvalidArgument

__all__ = ["ROOT", "check_principal", "namespace_of", "qualify", "split_id"]

#: the namespace of agent ids without a ``/``
ROOT = ""


def namespace_of(agent_id: str) -> str:
    """The namespace of ``agent_id``: the part before its last ``/`` (``""``: root)."""
    cut = agent_id.rfind("/")
    return agent_id[:cut] if cut > 0 else ROOT


def split_id(agent_id: str) -> tuple[str, str]:
    """``(namespace, name)`` of an agent id."""
    cut = agent_id.rfind("/")
    return (agent_id[:cut], agent_id[cut + 1 :]) if cut > 0 else (ROOT, agent_id)


def qualify(namespace: str, name: str) -> str:
    """The agent id of ``name`` in ``namespace`` (``qualify("acme", "bot-1")`` is
    ``"acme/bot-1"``; the root namespace ``""`` leaves ``name`` as it is)."""
    check_namespace(namespace)
    if type(name) is not str or not name or "/" in name:
        raise InvalidArgument("name", f"name must be a non-empty str without '/', not {name!r:.40}")
    return check_agent_id(f"{namespace}/{name}" if namespace else name)


def check_namespace(namespace: object, argument: str = "namespace") -> str:
    """A namespace: ``""`` (root) or ``/``-separated non-empty segments."""
    if namespace == ROOT and type(namespace) is str:
        return ROOT
    value = check_name(namespace, argument)
    if any(not part for part in value.split("/")):
        raise InvalidArgument(
            argument, f"{argument} {value!r:.60} has an empty segment (leading, trailing or '//')"
        )
    return value


def check_principal(principal: object, argument: str = "principal") -> str:
    """A principal's name: the agent-id rule (a non-empty str of at most 1 KiB)."""
    return check_name(principal, argument)
