"""``statekeeper serve``: a web inspector over a store — agents, their history and
machines, time travel and diffs, LangGraph threads, verification — read-only by
default, behind a token, every asset shipped in the package (works offline).

Install with the ``inspector`` extra (Starlette, uvicorn, Jinja2). See
``docs/inspector.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_app
    from .settings import InspectorSettings

__all__ = ["InspectorSettings", "create_app", "serve"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    if name == "InspectorSettings":
        from .settings import InspectorSettings

        return InspectorSettings
    if name == "serve":
        from .server import serve

        return serve
    raise AttributeError(name)
