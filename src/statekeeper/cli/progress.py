"""The progress bar every long-running command shows on stderr: done/total, rate, ETA.

It draws only on an interactive terminal (rich's live display) and disappears when the
command ends, so stdout stays exactly the command's output; ``--json`` turns it off.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rich.progress import Task, TaskID
    from rich.text import Text

__all__ = ["Bar", "bar"]


class Bar(Protocol):
    """What commands use of a progress bar."""

    def __enter__(self) -> Bar: ...

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

    def add_task(self, description: str, *, total: float | None = ...) -> TaskID: ...

    def advance(self, task_id: TaskID, advance: float = 1) -> None: ...


class _NoBar:
    """The bar when none is drawn (not a terminal, or ``--json``): rich is not imported."""

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, description: str, *, total: float | None = None) -> TaskID:
        return 0  # type: ignore[return-value]

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        return None


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


def bar(label: str, *, unit: str = "agents", disable: bool = False) -> Bar:
    """A transient progress bar on stderr: ``label ━━━━ 12/40 31 agents/s 0:00:01``
    (nothing when ``disable`` or when stderr is not a terminal)."""
    import sys

    if disable or (not sys.stderr.isatty() and not _forced()):
        return _NoBar()
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


def _forced() -> bool:
    """rich's own switches for a terminal that is not a tty (FORCE_COLOR, TTY_INTERACTIVE)."""
    import os

    return bool(os.environ.get("FORCE_COLOR") or os.environ.get("TTY_INTERACTIVE"))
