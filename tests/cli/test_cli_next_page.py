"""``agents``' next-page hint (``more: statekeeper agents ... --after ID``), pasted into
the same shell, lists the next page of the same listing: the store given by ``--db``
(before or after the command name), the namespace, the page size are repeated, and a
URL's password is never printed (it is masked, with a note saying to put it back)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from statekeeper import SyncStateStore

from ..backends._services import fresh_url
from ._proc import populate, sk_in_process


def _more(stdout: str) -> list[str]:
    """The arguments of the command after ``more:``, as a shell splits them."""
    lines = [line for line in stdout.splitlines() if line.startswith("more: statekeeper ")]
    assert len(lines) == 1, stdout
    return shlex.split(lines[0].removeprefix("more: statekeeper "))


def _listed(stdout: str) -> list[str]:
    """The agent ids of an ``agents`` table."""
    lines = [line.strip() for line in stdout.splitlines()]
    rule = next(i for i, line in enumerate(lines) if line and set(line) == {"─"})
    rows = [line for line in lines[rule + 1 :] if line and not line.startswith(("more:", "(***"))]
    return [row.split()[0] for row in rows]


@pytest.mark.parametrize(
    "where", ["after the command", "before the command"], ids=["db-after", "db-before"]
)
def test_the_pasted_next_page_lists_the_same_store(tmp_path: Path, where: str) -> None:
    # the user's store, and another at the default place (statekeeper.db in the folder)
    populate(f"sqlite:///{tmp_path / 'mine.db'}")
    with SyncStateStore(f"sqlite:///{tmp_path / 'statekeeper.db'}") as other:
        for agent_id in ("delta", "epsilon"):
            other.save(agent_id, {"n": 1})
    args = ["agents", "--limit", "2", "--db", "mine.db"]
    if where == "before the command":
        args = ["--db", "mine.db", "agents", "--limit", "2"]
    first = sk_in_process(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert _listed(first.stdout) == ["alpha", "beta"]
    more = _more(first.stdout)
    assert more == ["agents", "--db", "mine.db", "--limit", "2", "--after", "beta"]
    second = sk_in_process(*more, cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert _listed(second.stdout) == ["gamma"]  # not delta, epsilon of the default store


def test_the_pasted_next_page_stays_in_the_namespace(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tenants.db'}"
    with SyncStateStore(url) as store:
        for agent_id in ("acme/t-1", "acme/t-2", "acme/t-3", "globex/g-1"):
            store.save(agent_id, {"n": 1})
    first = sk_in_process("--namespace", "acme", "agents", "-n", "2", "--db", url)
    assert first.returncode == 0, first.stderr
    assert _listed(first.stdout) == ["t-1", "t-2"]
    more = _more(first.stdout)
    assert more[:2] == ["--namespace", "acme"], more
    second = sk_in_process(*more)
    assert second.returncode == 0, second.stderr
    assert _listed(second.stdout) == ["t-3"]  # not the whole store after "t-2"


def test_a_password_in_the_url_is_masked_in_the_hint_and_said_to_be_needed(
    tmp_path: Path,
) -> None:
    with fresh_url("postgresql", tmp_path) as url:  # the server trusts 127.0.0.1: any
        # password is accepted, so the command runs with one in its URL
        scheme, rest = url.split("://", 1)
        user, host = rest.split("@", 1)
        secret_url = f"{scheme}://{user}:s3cret-pw@{host}"
        populate(secret_url)
        run = sk_in_process("agents", "--limit", "1", "--db", secret_url)
        assert run.returncode == 0, run.stderr
        assert "s3cret-pw" not in run.stdout + run.stderr
        more = _more(run.stdout)
        assert more == [
            "agents",
            "--db",
            f"{scheme}://{user}:***@{host}",
            "--limit",
            "1",
            "--after",
            "alpha",
        ]
        note = run.stdout.split("--after alpha\n", 1)[1]
        assert note == "(*** stands for the URL's password: type it in its place)\n", run.stdout
        # put back, the password makes the hint the next page of the same store
        second = sk_in_process(*[a.replace(":***@", ":s3cret-pw@") for a in more])
        assert second.returncode == 0, second.stderr
        assert _listed(second.stdout) == ["beta"]


def test_options_from_the_environment_are_not_repeated(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    populate(url)
    run = sk_in_process("agents", "-n", "1", STATEKEEPER_URL=url)
    assert run.returncode == 0, run.stderr
    assert _more(run.stdout) == ["agents", "--limit", "1", "--after", "alpha"]
