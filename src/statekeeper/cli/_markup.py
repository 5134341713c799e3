"""``escape``: rich's markup escaping, imported on first use so that loading the CLI
(and ``statekeeper --help``) does not import rich."""

from __future__ import annotations

__all__ = ["escape"]


def escape(text: str) -> str:
    """Escape ``text`` for rich markup (see :func:`rich.markup.escape`)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)
