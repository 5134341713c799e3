"""What the tests of a resumed ``statekeeper retention apply`` share: a store of three
agents of three events each in namespace ``acme``, and the command run on it."""

from __future__ import annotations

from pathlib import Path

from statekeeper import SyncStateStore

from ..cli._subprocess import Run, cli_in_process

AGENTS = ("acme/a1", "acme/a2", "acme/a3")


def store_of_three(path: Path) -> str:
    """A SQLite store at ``path`` holding :data:`AGENTS`, three saves each; its URL."""
    url = f"sqlite:///{path}"
    with SyncStateStore(url) as store:
        for agent in AGENTS:
            for n in range(3):
                store.save(agent, {"n": n})
    return url


def apply_keep_last(url: str, progress: Path, *more: str) -> Run:
    """``retention apply --rule 'acme keep_last=1'`` with a progress file, in process."""
    return cli_in_process(
        "retention", "apply", "--db", url, "--rule", "acme keep_last=1",
        "--progress-file", str(progress), *more,
    )  # fmt: skip
