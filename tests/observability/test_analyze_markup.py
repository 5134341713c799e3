"""``analyze`` prints state names and namespaces as they are stored: a state named
``[bold]evil[/]`` was shown as ``evil`` in "agents by state" (read as console markup)
and a namespace ``[red]ns`` lost its brackets in its matrix's title."""

from __future__ import annotations

from pathlib import Path

from statekeeper import StateStore

from ..cli._proc import sk_in_process


async def test_state_names_and_groups_are_shown_as_stored(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    async with StateStore(url) as store:
        await store.create("[red]ns:a", {}, fsm_state="[bold]evil[/]")
        await store.save("[red]ns:a", {"n": 1}, fsm_state="plain")
        await store.save("[red]ns:a", {"n": 2}, fsm_state="[bold]evil[/]")
    done = sk_in_process("analyze", "--db", url, "--group", "namespace", columns=200)
    assert done.returncode == 0, done.stderr
    assert "agents by state: [bold]evil[/] 1;" in done.stdout
    assert "group '[red]ns': P(row → column)" in done.stdout
