"""The progress bar every long-running command shows on stderr: done/total, rate, ETA.

It draws only on an interactive terminal (rich's live display) and disappears when the
command ends, so stdout stays exactly the command's output; ``--json`` turns it off.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.progress import Progress, Task
    from rich.text import Text

__all__ = ["bar"]


def _rate_column() -> Any:
    from rich.progress import ProgressColumn
    from rich.text import Text

    class RateColumn(ProgressColumn):
        """Items per second (``- /s`` until there is a rate)."""

        def __init__(self, unit: str) -> None:
            super().__init__()
            self.unit = unit

        def render(self, task: Task) -> Text:
            speed = task.finished_speed or task.speed
            shown = "-" if speed is None else f"{speed:,.0f}" if speed >= 10 else f"{speed:.1f}"
            return Text(f"{shown} {self.unit}/s", style="cyan")

    return RateColumn


def bar(label: str, *, unit: str = "agents", disable: bool = False) -> Progress:
    """A transient progress bar on stderr: ``label ━━━━ 12/40 31 agents/s 0:00:01``."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    from .app import err_console

    console = err_console()
    return Progress(
        TextColumn(f"[bold]{label}[/]"),
        BarColumn(bar_width=24),
        MofNCompleteColumn(),
        _rate_column()(unit),
        TimeRemainingColumn(),
        console=console,
        transient=True,
        # only on a terminal: redirected stderr gets no bar (and no stray newline)
        disable=disable or not console.is_terminal,
    )
