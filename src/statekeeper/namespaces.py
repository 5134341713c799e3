"""Namespaces: where an agent lives. The one definition every part of statekeeper uses
(the access policy and retention of :mod:`statekeeper.governance`, the change feed's
``namespace=`` filter, the ``agent_activity`` projection, the web inspector's and the
CLI's namespace filters).

**An agent's namespace is everything before the last ``/`` of its id**:
``acme/support/bot-1`` lives in ``acme/support``, ``acme/bot-2`` in ``acme``, and
``bot-3`` in the root namespace ``""``. Namespaces nest: ``acme/support`` is *below*
``acme``. A **namespace filter** (``subscribe(namespace="acme")``, the inspector's
``ns=``) selects the agents of that namespace *and of every namespace below it* — the
ids that start with ``"acme/"`` — as the policy pattern ``acme/**`` does.

A namespace is ``""`` (root) or ``/``-separated segments, none empty, ``.`` or ``..``
(``acme/support``; not ``../x``, ``acme/.``, ``acme//x``, ``/acme`` nor ``acme/``), and
does not start with ``"\x01"`` (the store's own streams, no agent's namespace): a
namespace is a prefix of stored ids, never a path to resolve, so a segment that reads as
"this" or "the parent" would name another namespace than the one it seems to. An agent
id is built from one with :func:`qualify` (or a store opened with ``namespace=``, which
qualifies every id it is given).
"""

from __future__ import annotations

from .arguments import check_agent_id, check_name
from .errors import InvalidArgument

__all__ = [
    "ROOT",
    "check_namespace",
    "namespace_of",
    "namespace_prefix",
    "qualify",
    "split_id",
    "within",
]

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


#: what :func:`check_namespace` says a namespace is, in its errors
RULE = "'' (the root) or '/'-separated segments, none empty, '.' or '..'"


def check_namespace(namespace: object, argument: str = "namespace") -> str:
    """A namespace: ``""`` (root) or ``/``-separated segments, none empty, ``.`` or
    ``..``; :class:`~statekeeper.errors.InvalidArgument` naming ``argument`` and the
    rule otherwise."""
    if namespace == ROOT and type(namespace) is str:
        return ROOT
    value = check_name(namespace, argument)
    parts = value.split("/")
    if value[0] == "\x01":
        why = (
            "it starts with '\\x01', which marks the store's own streams (the audit log, "
            "the legal holds, the feed's tombstones): no agent lives there"
        )
    elif any(not part for part in parts):
        why = "it has an empty segment (leading, trailing or '//')"
    elif any(part in (".", "..") for part in parts):
        why = "it has a '.' or '..' segment (a namespace is an id prefix, not a path)"
    else:
        return value
    raise InvalidArgument(
        argument, f"{argument} {value!r:.60} is not a namespace: {why}; a namespace is {RULE}"
    )


def qualify(namespace: str, name: str) -> str:
    """The agent id of ``name`` in ``namespace`` (``qualify("acme", "bot-1")`` is
    ``"acme/bot-1"``; the root namespace ``""`` leaves ``name`` as it is)."""
    check_namespace(namespace)
    if type(name) is not str or not name or "/" in name:
        raise InvalidArgument("name", f"name must be a non-empty str without '/', not {name!r:.40}")
    return check_agent_id(f"{namespace}/{name}" if namespace else name)


def namespace_prefix(namespace: str, argument: str = "namespace") -> str:
    """The id prefix a filter on ``namespace`` selects (``"acme"``: ``"acme/"``, the
    agents of ``acme`` and below; the root ``""``: ``""``, every agent)."""
    value = check_namespace(namespace, argument)
    return value + "/" if value else ""


def within(agent_id: str, namespace: str) -> bool:
    """True when ``agent_id`` lives in ``namespace`` or below it."""
    return not namespace or agent_id.startswith(namespace + "/")
