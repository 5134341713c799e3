"""The CLI's one table style (rich is imported when a table is drawn: ``--help`` stays fast)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["titled_table"]


def titled_table(title: str, **options: Any) -> Table:
    """A table titled on the left, a rule under its header, no padding at its edges
    (``options``: more of :class:`rich.table.Table`'s, such as a caption, or a
    ``padding`` other than one space right of each cell)."""
    from rich import box
    from rich.table import Table

    return Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        **{"padding": (0, 1, 0, 0), **options},
    )
