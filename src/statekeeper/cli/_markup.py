"""``escape``: rich's markup escaping, imported on first use so that loading the CLI
(and ``statekeeper --help``) does not import rich."""

from __future__ import annotations

__all__ = ["escape", "escape_id", "printable"]

# C0 controls (but newline and tab), DEL and the C1 controls: a terminal acts on them
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))}


def printable(text: str) -> str:
    """``text`` with the characters a terminal would act on shown as ``\\x1b`` (an
    agent id or a stored value must not move the cursor, recolour or erase output)."""
    return text.translate(_CONTROLS)


#: for an agent id, which is one line: a newline or tab in it is shown escaped too (a
#: raw one split the id over two rows of a table, or forged a row of its own), and a
#: backslash is doubled, so that the id holding the text ``\\x0a`` (shown ``\\\\x0a``)
#: does not print like the one holding a newline (shown ``\\x0a``): two ids never print alike
_ID_CONTROLS = {**_CONTROLS, 0x09: "\\x09", 0x0A: "\\x0a", 0x5C: "\\\\"}


def escape_id(agent_id: str) -> str:
    """:func:`escape` for an agent id: every control character shown as ``\\x0a`` and a
    backslash as ``\\\\`` (the display is injective); other ids print unchanged."""
    from rich.markup import escape as rich_escape

    return rich_escape(agent_id.translate(_ID_CONTROLS))


def escape(text: str) -> str:
    """Escape ``text`` for rich markup (see :func:`rich.markup.escape`)."""
    from rich.markup import escape as rich_escape

    return rich_escape(printable(text))
