"""``--namespace NS``: which commands work inside a namespace, and the gate that
refuses the others.

The global option (or ``$STATEKEEPER_NAMESPACE``) opens every store of a command as a
view in that namespace (``StateStore(url, namespace=NS)``: agent ids are relative
to it, listings, feeds, exports, backups and retention see only it). A command that
works below the store's public calls (straight on the engine: the inspector, the
audit log, key rotation, repair...) cannot be limited to one namespace;
rather than ignore the option, it is refused before anything is opened, with
:class:`~statekeeper.errors.NamespaceUnsupported` saying why.

:data:`COMMANDS` lists every command and every group (a group's callback runs first;
``tests/cli/test_cli_namespace.py`` fails when one is missing); one that is not listed
is refused.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

from ..errors import NamespaceUnsupported

__all__ = ["COMMANDS", "ENV_NAMESPACE", "current_namespace", "gate_commands"]

ENV_NAMESPACE = "STATEKEEPER_NAMESPACE"

_WHOLE = "it works on the whole store"
_HOLDS = (
    "legal holds name full agent ids and namespaces, as a retention policy does"
    " (one list for the whole store)"
)
_LANGGRAPH = (
    "the LangGraph commands open their own saver over the whole store"
    " (choose the threads with --prefix)"
)

#: command path -> None when the command honours --namespace (it opens the store with
#: :func:`.stores.open_store`, which makes it a view in the namespace), else the reason
#: it refuses it
COMMANDS: dict[str, str | None] = {
    "init": "it creates a whole store (a namespace needs no setup: write agents into it)",
    "agents": None,
    "show": None,
    "history": None,
    "diff": None,
    "tail": None,
    "stats": None,
    "verify": None,
    "delete": None,
    "export": None,
    "import": None,
    "backup": None,
    "restore": None,
    "forget": None,
    "hold": _HOLDS,
    "hold add": _HOLDS,
    "hold remove": _HOLDS,
    "hold list": _HOLDS,
    "retention": None,
    "retention apply": None,
    "retention adopt-compactions": None,
    "repair": f"{_WHOLE}: it rewrites snapshots on the engine directly",
    "migrate": None,
    "schema": None,
    "schema show": "it lists an application's models and opens no store",
    "schema status": None,
    "audit": None,
    "audit verify": "the audit log is one hash chain for the whole store: verifying it"
    " reads every namespace's entries (run it without --namespace, as a store admin;"
    " 'statekeeper --namespace NS audit' lists the namespace's entries)",
    "keys": "keys belong to the whole store",
    "keys generate": "it writes a key file and opens no store",
    "keys status": f"{_WHOLE}: it counts the keys of every stored record",
    "keys vault": "it sets up a key file's vault and opens no store",
    "keys vault init": "it sets up a key file's vault and opens no store",
    "witness": None,
    "feed-intents": None,
    "rekey": f"{_WHOLE}: it re-encrypts every stored record",
    "witness export": None,
    "witness check": None,
    "diagram": None,
    "serve": f"{_WHOLE}: the inspector reads the engine directly (restrict it with --as/--policy)",
    "langgraph": _LANGGRAPH,
    "langgraph prune": _LANGGRAPH,
    "langgraph import": _LANGGRAPH,
    "langgraph export": _LANGGRAPH,
    "demo": "it creates a demo store of its own",
    "bench": "it measures stores of its own",
    "health": None,
    "analyze": None,
    "metrics": f"{_WHOLE}: metrics are counted per store",
    "metrics plot": f"{_WHOLE}: metrics are counted per store",
    "metrics record": f"{_WHOLE}: metrics are counted per store",
    "metrics serve": f"{_WHOLE}: metrics are counted per store",
    "projections": f"{_WHOLE}: a read model follows the whole store's change feed",
    "projections status": f"{_WHOLE}: a read model follows the whole store's change feed",
    "projections rebuild": f"{_WHOLE}: a read model follows the whole store's change feed",
    "projections run": f"{_WHOLE}: a read model follows the whole store's change feed",
}


def current_namespace() -> str | None:
    """The namespace of ``--namespace`` / ``$STATEKEEPER_NAMESPACE`` (None: none)."""
    value = os.environ.get(ENV_NAMESPACE, "").strip()
    return value or None


def refusal(path: str) -> str | None:
    """Why ``statekeeper PATH`` refuses --namespace (None: it honours it)."""
    if path in COMMANDS:
        return COMMANDS[path]
    return "it has not been checked against --namespace"


def _gated(callback: Callable[..., Any], path: str) -> Callable[..., Any]:
    @functools.wraps(callback)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        namespace = current_namespace()
        if namespace is not None:
            reason = refusal(path)
            if reason is not None:
                raise NamespaceUnsupported(f"statekeeper {path}", namespace, reason)
        return callback(*args, **kwargs)

    wrapper.__sk_namespace_gate__ = True  # type: ignore[attr-defined]
    return wrapper


def gate_commands(command: Any, path: str) -> None:
    """Put the --namespace gate in front of ``command`` and every command below it
    (in place; once)."""
    subcommands = getattr(command, "commands", None)
    if subcommands:
        for name, sub in subcommands.items():
            gate_commands(sub, f"{path} {name}")
    # a group's own callback runs before its subcommands (``statekeeper audit``
    # lists the log there): it is gated too, under the group's name
    callback = getattr(command, "callback", None)
    if callback is not None and not getattr(callback, "__sk_namespace_gate__", False):
        command.callback = _gated(callback, path)
