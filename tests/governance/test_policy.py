"""Policies: patterns, permissions, roles, unknown principals, files with line numbers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from statekeeper.errors import AccessDenied, ConfigurationError, PolicyError
from statekeeper.governance import Policy, load_policy, namespace_of, parse_policy, qualify
from statekeeper.governance.policy import compile_pattern

from .conftest import POLICY_TEXT


@pytest.mark.parametrize(
    ("pattern", "namespace", "matches"),
    [
        ("acme", "acme", True),
        ("acme", "acme/support", False),
        ("acme/*", "acme/support", True),
        ("acme/*", "acme", False),
        ("acme/*", "acme/support/eu", False),
        ("acme/**", "acme", True),
        ("acme/**", "acme/support/eu", True),
        ("acme/**", "acmeX", False),
        ("**", "", True),
        ("**", "anything/at/all", True),
        ("**/eu", "acme/support/eu", True),
        ("**/eu", "eu", True),
        ("**/eu", "acme/eu/x", False),
        ("acme/**/eu", "acme/eu", True),
        ("acme/**/eu", "acme/a/b/eu", True),
        ("acme/**/eu", "acme/a/b/us", False),
        ("team-?", "team-a", True),
        ("team-?", "team-ab", False),
        ("", "", True),
        ("", "acme", False),
        ("a.b", "aXb", False),
        # a newline is one more character (an agent id may hold one), as PostgreSQL's
        # row-level security matches it (posix_pattern); '**' missed it (trialdata)
        ("**", "ac\nme", True),
        ("**", "acme/x\ny", True),
        ("acme/**", "acme/x\ny", True),
        ("**/eu", "a\nb/eu", True),
        ("acme/*", "acme/x\ny", True),
        ("acme/**", "ac\nme/x", False),
    ],
)
def test_patterns_match_namespaces_segment_by_segment(
    pattern: str, namespace: str, matches: bool
) -> None:
    assert (compile_pattern(pattern).fullmatch(namespace) is not None) is matches


@pytest.mark.parametrize("bad", ["acme//x", "/acme", "acme/", "ac**me", "a b", "é"])
def test_malformed_patterns_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        compile_pattern(bad)


def test_namespaces_of_agent_ids() -> None:
    assert namespace_of("acme/support/bot-1") == "acme/support"
    assert namespace_of("bot-1") == ""
    assert qualify("acme/support", "bot-1") == "acme/support/bot-1"
    assert qualify("", "bot-1") == "bot-1"
    with pytest.raises(ConfigurationError):
        qualify("acme//x", "bot")
    with pytest.raises(ConfigurationError):
        qualify("acme", "a/b")


def test_permissions_are_ordered_and_roles_expand() -> None:
    policy = parse_policy(POLICY_TEXT)
    assert policy.allows("alice", "acme/billing/x", "read")
    assert not policy.allows("alice", "acme/billing/x", "write")
    assert policy.allows("alice", "acme/support/eu/t1", "write")
    assert not policy.allows("alice", "acme/support/t1", "admin")
    assert not policy.allows("alice", "globex/t1", "read")
    assert policy.allows("ops", "anything", "admin") and policy.is_store_admin("ops")
    assert not policy.is_store_admin("alice")
    assert policy.permission("bob", "globex/eu/x") == "write"
    assert policy.permission("bob", "globex/x") is None  # '*' needs one segment
    assert policy.permission("bob", "globex/eu/a/x") is None  # ... exactly one
    assert policy.to_dict()["alice"] == {"read": ["acme/**"], "write": ["acme/support/**"]}


def test_an_unknown_principal_is_denied_everything() -> None:
    policy = parse_policy(POLICY_TEXT)
    assert not policy.knows("mallory")
    assert not policy.allows("mallory", "acme/support/t1", "read")
    with pytest.raises(AccessDenied, match="does not name it") as caught:
        policy.check("mallory", "acme/support/t1", "read", "load")
    assert caught.value.principal == "mallory"
    assert caught.value.agent_id == "acme/support/t1"
    with pytest.raises(AccessDenied) as denied:
        policy.check("alice", "globex/t1", "read", "load")
    assert denied.value.permission == "read" and "namespace 'globex'" in str(denied.value)


def test_a_policy_object_in_python() -> None:
    policy = Policy(
        principals={"svc": {"roles": ["reader"], "write": ["jobs/*"]}},
        roles={"reader": {"read": ["**"]}},
    )
    assert policy.allows("svc", "jobs/q1/x", "write")
    assert policy.allows("svc", "other/x", "read")
    assert not policy.allows("svc", "other/x", "write")
    with pytest.raises(PolicyError, match="role 'nope', which is not defined"):
        Policy(principals={"svc": {"roles": ["nope"]}})


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        ('[principals.alice]\nread = ["a",,]\n[principals.bob]\n', 2, "invalid TOML"),
        ('[principals.alice]\nread = ["acme/**"\n', 2, "Unclosed array"),
        ('[principals.alice]\nread = ["a"]\n\n[principals.bob]\nreed = ["b"]\n', 5, "'reed'"),
        ('[principals.alice]\nroles = ["missing"]\n', 2, "'missing', which is not defined"),
        ('[roles.r]\nwrite = ["acme//x"]\n[principals.a]\nroles = ["r"]\n', 2, "empty"),
        ('[principals.alice]\nread = "acme"\n', 2, "list of namespace patterns"),
        ('[principal.alice]\nread = ["a"]\n', 1, "unknown table 'principal'"),
        ("# nothing\n[roles.r]\nread = []\n", None, "names no principals"),
        # dotted keys, arrays over several lines, arrays of tables: still the line
        ('[principals]\nalice.read = ["a/**"]\nbob.write = ["a//b"]\n', 3, "'a//b'"),
        ('[principals]\nalice.read = ["a"]\n\nbob . raed = ["x"]\n', 4, "'raed'"),
        ('[principals.a]\nread = [\n  "ok/**",  # fine\n  "bad//x",\n]\n', 4, "'bad//x'"),
        ('[principals.a]\nread = [\n  "ok/**",\n]\nwrite = ["q//"]\n', 5, "'q//'"),
        ('\n[[principals.alice]]\nread = ["x"]\n', 2, "must be a table"),
    ],
)
def test_a_malformed_file_names_the_line(
    tmp_path: Path, text: str, line: int | None, what: str
) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(text)
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    assert caught.value.line == line
    assert what in str(caught.value)
    assert str(path) in str(caught.value)
    if line is not None:
        assert f"line {line}" in str(caught.value)


def test_an_unreadable_file_is_a_policy_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "missing.toml")
    (tmp_path / "bin.toml").write_bytes(b"\xff\xfe")
    with pytest.raises(PolicyError, match="not UTF-8"):
        load_policy(tmp_path / "bin.toml")


def test_an_admin_on_everything_reaches_a_namespace_holding_a_newline() -> None:
    """An agent id may hold a newline: ``**`` granted nothing on its namespace (Python's
    ``.`` stops at a newline), while ``ac*/**`` did and PostgreSQL's row-level security
    would: an admin on ``**`` was denied the agent and never saw it listed (trialdata)."""
    policy = Policy({"boss": {"admin": ["**"]}})
    assert policy.allows("boss", "ac\nme/y", "admin")
    assert policy.allows("boss", "top\nlevel", "admin")
    assert policy.covers("boss", "ac\nme", "admin")


@pytest.mark.parametrize("pattern", ["acme/../globex", "..", "acme/..", "./acme/**", "**/.."])
def test_a_pattern_with_a_dot_segment_is_refused(tmp_path: Path, pattern: str) -> None:
    """A namespace is not a path: no agent id has a '.' or '..' segment, so such a
    pattern matched nothing ('acme/../globex' granted neither acme nor globex) and was
    accepted silently. Refused, naming the pattern (and its line in a policy file)."""
    with pytest.raises(PolicyError, match=re.escape(repr(pattern))):
        Policy({"alice": {"read": [pattern]}})
    path = tmp_path / "policy.toml"
    path.write_text(f'[principals.alice]\nread = [\n  "ok/**",\n  "{pattern}",\n]\n')
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    assert caught.value.line == 4
    assert repr(pattern) in str(caught.value) and "line 4" in str(caught.value)
    # a segment that merely holds dots is a name like any other
    assert Policy({"alice": {"read": ["a..b/...", "v1.2/**"]}}).allows("alice", "v1.2/x/y", "read")
