"""The ``statekeeper`` command line: inspect, verify and demo durable agent state.

``main`` is the console-script entry point; ``app`` is the typer application (use it
with ``typer.testing.CliRunner``). See ``docs/cli.md``.
"""

from .app import app, main

__all__ = ["app", "main"]
