"""Principals and namespaces: who asks, and where an agent lives.

An agent id names its namespace: everything before its last ``/`` (``acme/support/bot-1``
lives in ``acme/support``; ``bot-1`` lives in the root namespace, ``""``), the one
definition of :mod:`statekeeper.namespaces`, re-exported here. A
*principal* is the name a store is opened as (``StateStore(url, principal="alice")``,
``statekeeper --as alice``); what it may do is the policy's business
(:mod:`.policy`). A namespace follows the agent-id rule of :mod:`statekeeper.arguments`,
a principal :func:`~statekeeper.arguments.check_principal` (no spaces, ``/`` or ``*``).
"""

from __future__ import annotations

from ..arguments import check_principal
from ..namespaces import ROOT, check_namespace, namespace_of, qualify, split_id

__all__ = [
    "ROOT",
    "check_namespace",
    "check_principal",
    "namespace_of",
    "qualify",
    "split_id",
]
