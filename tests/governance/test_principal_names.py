"""A policy file naming a principal no one can be opened as ("bad name/x", " ops", "*")
was accepted: the grants went to a name no store could use, so the principal meant was
silently denied everything (or a wildcard was taken as a literal name). The policy is
refused with a PolicyError naming the line, and a store is refused such a principal."""

from __future__ import annotations

import pytest

from statekeeper import StateStore
from statekeeper.errors import InvalidArgument, PolicyError
from statekeeper.governance import parse_policy
from statekeeper.governance.principals import check_principal


@pytest.mark.parametrize("name", ["bad name/x", " ops", "ops ", "*", "tab\there", "a/b", ""])
def test_a_policy_refuses_a_principal_name_outside_the_syntax(name: str) -> None:
    text = (
        '[roles.r]\nread = ["**"]\n\n[principals.ok]\nroles = ["r"]\n\n'
        f'[principals."{name}"]\nread = ["acme/**"]\n'
    )
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, source="team.toml")
    assert caught.value.line == 7, str(caught.value)
    assert "principal" in str(caught.value) and "team.toml" in str(caught.value)


@pytest.mark.parametrize(
    "name", ["ops", "support-bot", "alice@acme.com", "svc:worker.2", "auth0|5f1c", "a_b+c"]
)
def test_the_names_people_use_stay_accepted(name: str) -> None:
    policy = parse_policy(f'[principals."{name}"]\nread = ["acme/**"]\n')
    assert policy.knows(name)
    assert check_principal(name) == name


@pytest.mark.parametrize("name", ["bad name/x", " ops", "*"])
def test_a_store_refuses_the_same_principal_names(name: str) -> None:
    with pytest.raises(InvalidArgument, match="principal"):
        check_principal(name)
    with pytest.raises(InvalidArgument, match="principal"):
        StateStore("memory://", principal=name)
