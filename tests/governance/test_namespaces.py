"""One definition of "namespace" (statekeeper.namespaces): the policy, the feed's
``agent_activity`` projection and the inspector's filter all agree on it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import InvalidArgument, NonNormalAgentId
from statekeeper.feed import BUILTINS, ProjectionRunner
from statekeeper.governance import parse_policy
from statekeeper.inspector.listing import AgentQuery
from statekeeper.namespaces import check_namespace, namespace_of, namespace_prefix, within

IDS = ["acme/support/t1", "acme/support/t2", "acme/b1", "acme/eu/billing/x", "solo"]


def test_the_definition() -> None:
    assert [namespace_of(i) for i in IDS] == [
        "acme/support", "acme/support", "acme", "acme/eu/billing", "",
    ]  # fmt: skip
    assert within("acme/support/t1", "acme") and within("acme/support/t1", "acme/support")
    assert not within("acmex/t1", "acme") and within("solo", "")
    assert namespace_prefix("acme/support") == "acme/support/" and namespace_prefix("") == ""
    for bad in ("a//b", "/a", "a/", 7):
        with pytest.raises(InvalidArgument, match="namespace"):
            check_namespace(bad)


@pytest.mark.parametrize("bad", ["..", ".", "../x", "a/..", "a/./b", "a/../b"])
def test_dot_segments_are_not_namespaces(bad: str) -> None:
    """A namespace is an id prefix, never a path: '..' or '.' would name a namespace
    other than the one it reads as ('acme/../globex' is not globex), so each is
    refused, with the rule, wherever a namespace is given."""
    with pytest.raises(InvalidArgument, match=r"'\.' or '\.\.' segment") as caught:
        check_namespace(bad, "ns")
    assert caught.value.argument == "ns" and "none empty, '.' or '..'" in str(caught.value)
    with pytest.raises(InvalidArgument):
        namespace_prefix(bad)
    with pytest.raises(InvalidArgument):
        StateStore("memory://", namespace=bad)
    with pytest.raises(InvalidArgument):
        AgentQuery.parse({"ns": bad})


async def test_dot_segments_in_ids_do_not_alias_another_namespace(tmp_path: Path) -> None:
    """Ids are not paths: 'acme/../globex/g' would be an agent of namespace
    'acme/../globex' (below acme, where policy pattern acme/** puts it) reading as
    globex's 'globex/g'. A new agent is refused such an id (NonNormalAgentId naming it),
    and globex/g is never reached."""
    policy = parse_policy('[principals.p]\nread = ["acme/**"]\nwrite = ["acme/**"]\n')
    url = f"sqlite:///{tmp_path / 's.db'}"
    async with StateStore(url) as whole:
        await whole.save("globex/g", {"owner": "globex"})
    async with StateStore(url, principal="p", policy=policy) as acme:
        with pytest.raises(NonNormalAgentId, match=r"'acme/\.\./globex/g' is not a normal"):
            await acme.save("acme/../globex/g", {"owner": "acme"})
        assert not policy.allows("p", "globex/g", "read")
    async with StateStore(url) as whole:
        assert (await whole.load("globex/g")).data == {"owner": "globex"}
        assert namespace_of("acme/../globex/g") == "acme/../globex"
        assert within("acme/../globex/g", "acme") and not within("acme/../globex/g", "globex")
        assert [a.agent_id for a in await whole.list_agents()] == ["globex/g"]


def test_the_policy_uses_it() -> None:
    policy = parse_policy('[principals.p]\nread = ["acme/support"]\n')
    assert policy.allows("p", "acme/support/t1", "read")  # lives in acme/support
    assert not policy.allows("p", "acme/b1", "read")  # lives in acme


async def test_agent_activity_groups_by_the_same_namespace(tmp_path: Path) -> None:
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}") as store:
        for agent_id in IDS:
            await store.save(agent_id, {"n": 1})
        async with ProjectionRunner(store, tmp_path / "rm.db", [BUILTINS["agent_activity"]()]) as r:
            await r.catch_up()
            rows = dict(await r.query("SELECT agent_id, namespace FROM agent_activity"))
    assert rows == {agent_id: namespace_of(agent_id) for agent_id in IDS}


async def test_an_older_read_model_is_rewritten_once(tmp_path: Path) -> None:
    path = tmp_path / "rm.db"
    with sqlite3.connect(path) as db:  # as built when the namespace was the first segment
        projection = BUILTINS["agent_activity"]()
        db.execute(
            "CREATE TABLE agent_activity (agent_id TEXT PRIMARY KEY, namespace TEXT NOT NULL,"
            " first_activity REAL NOT NULL, last_activity REAL NOT NULL,"
            " last_seq INTEGER NOT NULL, events INTEGER NOT NULL)"
        )
        db.executemany(
            "INSERT INTO agent_activity VALUES (?, ?, 1, 1, 1, 1)",
            [(i, i.partition("/")[0] if "/" in i else "") for i in IDS],
        )
        projection.setup(db)
        rows = dict(db.execute("SELECT agent_id, namespace FROM agent_activity"))
        assert rows == {agent_id: namespace_of(agent_id) for agent_id in IDS}
        db.execute("UPDATE agent_activity SET namespace = 'kept' WHERE agent_id = 'solo'")
        projection.setup(db)  # once only: a later setup leaves the rows alone
        assert db.execute(
            "SELECT namespace FROM agent_activity WHERE agent_id = 'solo'"
        ).fetchone() == ("kept",)


def test_the_inspector_filters_nested_namespaces() -> None:
    query = AgentQuery.parse({"ns": "acme/support"})
    assert query.namespace == "acme/support"
    with pytest.raises(InvalidArgument, match="ns"):
        AgentQuery.parse({"ns": "acme//support"})


@pytest.mark.parametrize("bad", ["\x01sk-audit", "\x01sk-holds", "\x01sk-feed/deleted", "\x01"])
async def test_the_store_s_own_streams_are_no_namespace(bad: str, tmp_path: Path) -> None:
    """No agent may be created with an id starting with '\\x01' (the mark of the
    store's own streams), so no namespace starts with it either: a view of
    '\\x01sk-audit' counted the audit log as one of its agents (count_agents 1) and its
    listing failed naming 'after', an argument the caller never gave."""
    with pytest.raises(InvalidArgument, match="own streams") as caught:
        check_namespace(bad, "ns")
    assert caught.value.argument == "ns"
    with pytest.raises(InvalidArgument):
        StateStore(f"sqlite:///{tmp_path / 's.db'}", namespace=bad)
