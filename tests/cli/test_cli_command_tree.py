"""The CLI's click command tree is built once and reused by every in-process run
(:func:`statekeeper.cli.app.command`), and reusing it carries nothing from one run to
the next: global options, option values, the environment, the help listing."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import typer

from statekeeper.cli._help import HelpGroup

from ._proc import cli_env, populate, run_in_process


def _run(*args: str, **env: str) -> tuple[int, str, str]:
    return run_in_process(args, cli_env(160, **env))


def _agents(*args: str, **env: str) -> list[str]:
    code, out, err = _run(*args, "agents", "--json", **env)
    assert code == 0, err
    return [row["agent_id"] for row in json.loads(out)["agents"]]


@pytest.fixture
def two_stores(tmp_path: Path) -> tuple[str, str]:
    """Two stores told apart by their agents: the CLI's three, and one ``solo``."""
    first, second = f"sqlite:///{tmp_path / 'one.db'}", f"sqlite:///{tmp_path / 'two.db'}"
    populate(first)
    code, _, err = _run("init", "--db", second)
    assert code == 0, err
    from statekeeper import SyncStateStore

    with SyncStateStore(second) as store:
        store.save("solo", {"n": 1})
    return first, second


def test_repeated_runs_build_the_tree_once(
    monkeypatch: pytest.MonkeyPatch, two_stores: tuple[str, str]
) -> None:
    """Runs of commands already loaded build no tree: typer's build (every option of
    every loaded command) was most of an in-process run of a quick command."""
    first, _ = two_stores
    _agents("--db", first)  # the command's module is loaded, its tree built
    built: list[HelpGroup] = []
    init = HelpGroup.__init__

    def counted(self: HelpGroup, *args: Any, **kwargs: Any) -> None:
        built.append(self)
        init(self, *args, **kwargs)

    monkeypatch.setattr(HelpGroup, "__init__", counted)
    for _ in range(3):
        assert _agents("--db", first) == ["alpha", "beta", "gamma"]
        code, out, _ = _run("--help")
        assert code == 0 and "agents" in out
    assert built == []


def test_a_newly_loaded_command_gets_a_tree_that_has_it() -> None:
    from statekeeper.cli.app import app, command

    before = command()
    assert command() is before
    # a module registering a command on first use: a new tree, reused from then on
    probe = typer.Typer(name="tree-probe")
    probe.command("run")(lambda: None)
    app.add_typer(probe)
    try:
        after = command()
        assert after is not before and "tree-probe" in after.commands
        assert command() is after
    finally:
        app.registered_groups[:] = [
            g for g in app.registered_groups if g.typer_instance is not probe
        ]
    assert "tree-probe" not in command().commands


def test_nothing_of_a_run_is_left_for_the_next(two_stores: tuple[str, str]) -> None:
    """Global options, the environment they set, and option values of one run are not
    seen by the next run on the same tree."""
    first, second = two_stores
    assert _agents("--db", first) == ["alpha", "beta", "gamma"]
    # the global --db of the run before is not the next run's store
    assert _agents(STATEKEEPER_URL=second) == ["solo"]
    # --namespace sets $STATEKEEPER_NAMESPACE for its run only
    assert _agents("--db", first, "--namespace", "elsewhere") == []
    assert "STATEKEEPER_NAMESPACE" not in os.environ
    assert _agents("--db", first) == ["alpha", "beta", "gamma"]
    # a command option's value (--at) does not become the next run's default
    code, out, err = _run("show", "alpha", "--at", "1", "--json", "--db", first)
    assert code == 0, err
    assert json.loads(out)["seq"] == 1
    code, out, err = _run("show", "alpha", "--json", "--db", first)
    assert code == 0, err
    assert json.loads(out)["seq"] == 4
    # --connect-timeout's value is restored after its run, its default applies again
    assert _agents("--db", first, "--connect-timeout", "7") == ["alpha", "beta", "gamma"]
    assert "STATEKEEPER_CONNECT_TIMEOUT" not in os.environ


def test_a_help_listing_on_one_thread_does_not_stub_commands_of_another() -> None:
    """While one run writes the root help's command list (where a command not loaded
    yet is listed from the registry's table, not imported), another run on the same
    tree still gets the real command it asks for."""
    from typer._click.formatting import HelpFormatter

    root = HelpGroup(name="statekeeper")  # a root with no command loaded yet
    seen: list[Any] = []

    class Formatter(HelpFormatter):
        def write_dl(self, rows: Any, *args: Any, **kwargs: Any) -> None:
            # in the middle of the listing: a run on another thread resolves "diagram"
            other = typer.Context(root, info_name="statekeeper")
            resolve = lambda: seen.append(root.get_command(other, "diagram"))  # noqa: E731
            thread = threading.Thread(target=resolve)
            thread.start()
            thread.join()
            super().write_dl(rows, *args, **kwargs)

    listing = typer.Context(root, info_name="statekeeper")
    root.format_commands(listing, Formatter())
    assert len(seen) == 1
    assert seen[0].callback is not None, "the other run got the listing's stand-in"
    assert root.get_command(listing, "diagram") is seen[0]
