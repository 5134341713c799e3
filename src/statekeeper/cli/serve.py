"""``statekeeper serve [URL]``: the web inspector (see :mod:`statekeeper.inspector`).

Read-only unless ``--allow-writes``; binds to 127.0.0.1 unless ``--host`` names
another address *and* ``--public`` is given; every request needs the token, which is
generated and printed at start (in the link to open), or given with ``--token`` /
``$STATEKEEPER_INSPECTOR_TOKEN``. With the global ``--as PRINCIPAL --policy FILE``
the store is opened as that principal: pages show what it may read, the rest is a 403.
``--metrics`` instruments the store and serves its Prometheus metrics at ``/metrics``
(store-wide aggregates: with ``--as``, only an admin on ``**`` may scrape them).
Requests must name this server in their ``Host`` (loopback names, the address
listened on, or a name given with ``--allowed-host``): DNS rebinding gets a 400.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from ..errors import AccessDenied, ConfigurationError
from .app import DbOption, KeyFileOption, app, handled, resolve_url, run
from .stores import check_store, env_keyring, governance_options

__all__ = ["serve"]

ENV_TOKEN = "STATEKEEPER_INSPECTOR_TOKEN"


@app.command()
@handled
def serve(
    ctx: typer.Context,
    url: Annotated[
        str | None,
        typer.Argument(
            help="The store URL or SQLite path [default: --db, $STATEKEEPER_URL].",
            show_default=False,
        ),
    ] = None,
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on (loopback unless --public).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", "-p", min=0, max=65535)] = 8765,
    allow_writes: Annotated[
        bool,
        typer.Option("--allow-writes", help="Offer delete, repair and retention (CSRF-checked)."),
    ] = False,
    public: Annotated[
        bool,
        typer.Option("--public", help="Allow a --host other machines can reach (token-guarded)."),
    ] = False,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            metavar="NAME",
            help="Also answer requests whose Host is NAME (a reverse proxy's name; repeatable)."
            " Other names get a 400 (DNS rebinding).",
            show_default=False,
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            metavar="TOKEN",
            help=f"The bearer token [default: ${ENV_TOKEN}, else a new random one, printed].",
            show_default=False,
        ),
    ] = None,
    machine: Annotated[
        str | None,
        typer.Option("--machine", metavar="MODULE:ATTR", help="The agents' state machine to draw."),
    ] = None,
    langgraph_prefix: Annotated[
        str, typer.Option("--langgraph-prefix", help="Agent-id prefix of LangGraph threads.")
    ] = "lg/",
    metrics: Annotated[
        bool,
        typer.Option(
            "--metrics",
            help="Instrument the store and serve its Prometheus metrics at /metrics"
            " (token-guarded; with --as, admins on '**' only).",
        ),
    ] = False,
    metrics_state_labels: Annotated[
        bool,
        typer.Option(
            "--metrics-state-labels",
            help="With --metrics on an encrypted store, label agents_in_state with the"
            " state names (default: a keyed hash of each name).",
        ),
    ] = False,
    db: DbOption = None,
    key_file: KeyFileOption = None,
) -> None:
    """Serve the web inspector: agents, history, time travel, machines, LangGraph threads."""
    _require_extra()
    from ..backends.redact import mask_url
    from ..inspector.auth import allowed_host as check_allowed_host
    from ..inspector.server import check_host
    from ..inspector.server import serve as run_server
    from ..inspector.settings import InspectorSettings

    store_url = url or resolve_url(ctx, db)
    check_host(host, public=public)
    allowed_hosts = tuple(check_allowed_host(name) for name in allowed_host or ())
    given = token or os.environ.get(ENV_TOKEN, "").strip() or None
    if given is not None and len(given) < 16:
        raise ConfigurationError("--token must be at least 16 characters")
    keyring = env_keyring(key_file)  # a bad key file fails before anything listens
    # --as / --policy (global options): the inspector opens its store as that principal
    governance = governance_options(keyring)
    principal, policy = governance.get("principal"), governance.get("policy")

    async def check() -> None:
        backend = await check_store(store_url)
        await backend.close()

    run(check())  # not a store: NotAStore, nothing created
    if principal is not None and policy is not None and not policy.knows(principal):
        run(_refuse_unknown(store_url, key_file, principal))
    settings = InspectorSettings(
        url=store_url,
        key_file=key_file,
        allow_writes=allow_writes,
        machine=machine,
        langgraph_prefix=langgraph_prefix,
        shown_url=mask_url(store_url),
        principal=principal,
        policy=policy,
        metrics=metrics,
        metrics_state_labels=metrics_state_labels,
        allowed_hosts=allowed_hosts,
    )
    if given is not None:
        settings.token = given
    run_server(settings, host=host, port=port, public=public)


async def _refuse_unknown(url: str, key_file: Path | None, principal: str) -> None:
    """Refuse to serve as a principal the policy does not name, as every refusal is:
    :class:`AccessDenied` recorded in the store's audit log (when it keeps one)."""
    from ..store.governed import governance_of
    from .stores import open_store

    async with open_store(url, key_file=key_file) as store:
        gov = governance_of(store)
        if gov is not None:
            await gov.require(None, "read", "serve")  # refused: names it, audited
    raise AccessDenied(principal, "read", "serve", reason="the policy does not name it")


def _require_extra() -> None:
    """The inspector's own dependencies come with ``statekeeper[inspector]``: say so,
    naming what is missing, instead of failing on the first import."""
    missing = []
    for module in ("starlette", "uvicorn", "jinja2"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise ConfigurationError(
            "the web inspector needs the 'inspector' extra: "
            f"pip install 'statekeeper[inspector]' (missing: {', '.join(missing)})"
        )
