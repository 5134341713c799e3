"""The typer application, its global options and the error policy shared by commands.

Exit codes: ``0`` success; ``1`` the thing asked about is not there or not right
(unknown agent, verification problems, a failed demo check, a declined confirmation);
``2`` a usage error or any :class:`~statekeeper.errors.StatekeeperError` (bad URL,
unreadable database, a server that cannot be reached within ``--connect-timeout``...),
reported as one red line on stderr without a traceback.
"""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from .. import __version__
from ..errors import AgentNotFound, ConfigurationError, StatekeeperError
from ._help import HelpGroup

if TYPE_CHECKING:
    from rich.console import Console

    from ..store import StateStore

#: the store used when neither --db nor $STATEKEEPER_URL is given (the library's
#: ``statekeeper.store.store.DEFAULT_URL``, repeated so that ``--help`` need not
#: import the store; a test keeps them equal)
DEFAULT_URL = "sqlite:///statekeeper.db"

__all__ = [
    "DbOption",
    "JsonOption",
    "app",
    "err_console",
    "main",
    "open_store",
    "out_console",
    "resolve_url",
    "run",
]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

app = typer.Typer(
    name="statekeeper",
    cls=HelpGroup,
    help="Inspect, verify and demo durable agent state.\n\n"
    "The store is chosen with --db/--url (a SQLite path or URL such as "
    "sqlite:///agents.db, or memory://); default: $STATEKEEPER_URL, else "
    f"{DEFAULT_URL}.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        "--url",
        metavar="URL",
        help=f"Store URL or SQLite path [default: $STATEKEEPER_URL, else {DEFAULT_URL}]",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
ConnectTimeoutOption = Annotated[
    float,
    typer.Option(
        "--connect-timeout",
        metavar="SECONDS",
        min=0.001,
        envvar="STATEKEEPER_CONNECT_TIMEOUT",
        help="Give up on a PostgreSQL/Redis server that does not answer within this "
        "many seconds [default: 3; $STATEKEEPER_CONNECT_TIMEOUT].",
        show_default=False,
    ),
]


@dataclass
class Globals:
    """Options given before the command name."""

    db: str | None = None


def out_console() -> Console:
    """A console on the current stdout (created per call: tests swap stdout)."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False)


def err_console() -> Console:
    """A console on the current stderr."""
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"statekeeper {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    db: DbOption = None,
    connect_timeout: ConnectTimeoutOption = 3.0,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Show the version and exit."
        ),
    ] = False,
) -> None:
    ctx.obj = Globals(db=db)
    # the library's default for every server backend this command opens (a URL's own
    # ?connect_timeout= still wins); restored afterwards for in-process callers
    previous = os.environ.get("STATEKEEPER_CONNECT_TIMEOUT")
    os.environ["STATEKEEPER_CONNECT_TIMEOUT"] = repr(connect_timeout)
    ctx.call_on_close(functools.partial(_restore_env, "STATEKEEPER_CONNECT_TIMEOUT", previous))


def _restore_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def global_db(ctx: typer.Context) -> str | None:
    """The --db given before the command name, if any."""
    root = ctx.find_root()
    obj = root.obj if isinstance(root.obj, Globals) else None
    return obj.db if obj is not None else None


def resolve_url(ctx: typer.Context, db: str | None) -> str:
    """Command --db, else global --db, else $STATEKEEPER_URL, else the default file."""
    return db or global_db(ctx) or os.environ.get("STATEKEEPER_URL") or DEFAULT_URL


def sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL (or bare path) names; None for other backends."""
    if "://" not in url:
        return Path(url)
    scheme, rest = url.split("://", 1)
    if scheme.lower().split("+", 1)[0] != "sqlite":
        return None
    rest = rest.split("?", 1)[0]
    if rest in ("", "/", "/:memory:"):
        return None  # an in-memory store (SQLAlchemy's spellings)
    return Path(rest[1:] if rest.startswith("/") else rest)


class StoreMissing(ConfigurationError):
    """The SQLite file a read command was pointed at does not exist."""


@asynccontextmanager
async def open_store(url: str, *, must_exist: bool = True) -> AsyncIterator[StateStore]:
    """Open the store at ``url``; for SQLite, refuse to create a file a reader asked for."""
    path = sqlite_file(url)
    if must_exist and path is not None and not path.exists():
        raise StoreMissing(
            f"no statekeeper database at {path} (pass --db/--url or set STATEKEEPER_URL)"
        )
    from ..store import StateStore
    from .security import env_keyring  # keys from $STATEKEEPER_KEY_FILE / $STATEKEEPER_KEYS

    store = StateStore(url, keyring=env_keyring())
    try:
        yield store
    finally:
        await store.close()


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine to completion."""
    import asyncio

    return asyncio.run(coro)


def _known_urls() -> list[str]:
    """The store URLs this invocation was given (--db before or after the command,
    $STATEKEEPER_URL): their secrets are masked in anything printed."""
    import importlib

    try:  # typer >= 0.29 runs on its own copy of click: ask that one for the context
        contexts = importlib.import_module("typer._click.globals")
    except ImportError:  # older typer runs on the click package
        contexts = importlib.import_module("click.globals")

    urls = [os.environ.get("STATEKEEPER_URL", "")]
    ctx = contexts.get_current_context(silent=True)
    while ctx is not None:
        urls.append(str(ctx.params.get("db") or ""))
        if isinstance(ctx.obj, Globals):
            urls.append(ctx.obj.db or "")
        ctx = ctx.parent
    return [u for u in urls if u]


def masked(text: str) -> str:
    """``text`` with the password of every store URL of this invocation masked."""
    from ..backends.redact import scrub

    for url in _known_urls():
        text = scrub(text, url)
    return text


def fail(message: str, code: int) -> typer.Exit:
    """Print ``message`` as one red line on stderr (credentials masked); return the
    Exit to raise."""
    message = masked(message)
    from rich.markup import escape

    err_console().print(f"[bold red]error:[/] [red]{escape(message)}[/]", soft_wrap=True)
    return typer.Exit(code)


def handled(fn: F) -> F:
    """Turn library errors into one-line messages and exit codes (no traceback)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except AgentNotFound as exc:
            raise fail(str(exc), 1) from None
        except StatekeeperError as exc:
            raise fail(str(exc), 2) from None
        except KeyboardInterrupt:
            raise fail("interrupted", 130) from None

    return wrapper  # type: ignore[return-value]


def main() -> None:
    """Console-script entry point (``statekeeper``; also ``python -m statekeeper.cli``)."""
    app(prog_name="statekeeper")


# register the commands on ``app``
from . import bench, commands, diagram, diff, repair, security, tail, transfer  # noqa: E402,F401
from .langgraph import langgraph_app  # noqa: E402

app.add_typer(langgraph_app)
