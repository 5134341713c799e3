"""A subscription's ``agent_prefix`` that ends inside a segment crosses namespaces:
``"glo"`` is the root namespace's agents ``glo...`` and the namespaces ``globex``,
``glow/...``. The policy was asked about the namespace before its last ``/`` (``""``
for ``"glo"``: "anywhere"), so a principal that may read only ``acme/**`` was given a
live subscription to ``agent_prefix="glo"`` that could never deliver anything, though
docs/governance.md says such a subscription is refused (``AccessDenied``, audited).
Now the policy is asked about the prefix itself (:meth:`Policy.reaches_prefix`)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from statekeeper import StateStore
from statekeeper.errors import AccessDenied
from statekeeper.governance import AuditLog, Policy

from .conftest import KEYRING

Make = Callable[..., StateStore]


async def test_a_prefix_crossing_namespaces_it_may_read_nothing_under_is_refused(
    as_principal: Make,
) -> None:
    ops = as_principal("ops")
    await ops.save("globex/eu/g1", {"n": 1})
    await ops.save("acme/support/t1", {"n": 1})
    alice = as_principal("alice")  # reads acme/**
    for prefix in ("glo", "globex/", "g", "acme/../globex/"):
        with pytest.raises(AccessDenied, match=f"agent_prefix {prefix!r}"):
            await alice.subscribe(agent_prefix=prefix, stop_at_head=True).next_batch()
    # prefixes under which it may read stay live, crossing namespaces or not
    for prefix in ("ac", "acme", "acme/", "acme/sup", "", "a"):
        got = [e.agent_id async for e in alice.subscribe(agent_prefix=prefix, stop_at_head=True)]
        assert got == ["acme/support/t1"], prefix
    bob = as_principal("bob")  # writes globex/*: 'glo' reaches globex/eu's agents
    got = [e.agent_id async for e in bob.subscribe(agent_prefix="glo", stop_at_head=True)]
    assert got == ["globex/eu/g1"]
    log = AuditLog(ops.backend, KEYRING)
    denied = [e async for e in log.entries() if e.outcome == "denied"]
    assert [(e.principal, e.operation, e.detail.get("agent_prefix")) for e in denied] == [
        ("alice", "subscribe", p) for p in ("glo", "globex/", "g", "acme/../globex/")
    ]


@pytest.mark.parametrize(
    ("grants", "prefix", "reached"),
    [
        ({"read": ["acme/**"]}, "glo", False),
        ({"read": ["acme/**"]}, "ac", True),
        ({"read": ["acme/**"]}, "acme/x", True),
        ({"read": ["acme/**"]}, "acmeX", False),
        ({"read": ["acme"]}, "acme/x", True),  # acme's own agents 'acme/x...'
        ({"read": ["acme"]}, "acme/x/", False),  # only below acme/x...: not granted
        ({"read": ["a*e/b?"]}, "ace/b", True),
        ({"read": ["a*e/b?"]}, "ace/bcd", False),  # 'b?' is two characters
        ({"read": ["a*e/b?"]}, "ace/c", False),
        ({"read": ["a*e/b?"]}, "axx", True),
        ({"read": ["a*e/b?"]}, "b", False),
        ({"read": ["*/eu/**"]}, "glo", True),
        ({"read": ["*/eu/**"]}, "globex/u", False),
        ({"read": ["*/eu/**"]}, "globex/e", True),
        ({"read": [""]}, "glo", True),  # the root namespace's agents 'glo...'
        ({"read": [""]}, "globex/", False),
        ({"read": ["**"]}, "anything/at/all", True),
        ({"read": ["acme/**"]}, "/acme", False),  # no agent id starts with '/'
        ({"write": ["globex/*"]}, "globex", True),  # globex/eu's agents 'globex/eu/...'
        ({"write": ["globex/*"]}, "globex/", True),
        ({"write": ["globex/*"]}, "globex/g", True),  # namespaces 'globex/g...'
        ({"write": ["globex/*"]}, "globex/eu/g", True),  # globex/eu's agents 'g...'
        ({"write": ["globex/*"]}, "globex/eu/g/", False),  # only below globex/eu/g...
        ({"write": ["globex/*"]}, "globexx", False),
    ],
)
def test_reaches_prefix(grants: dict[str, list[str]], prefix: str, reached: bool) -> None:
    policy = Policy({"p": grants})
    assert policy.reaches_prefix("p", prefix) is reached
    assert policy.reaches_prefix("nobody", prefix) is False
