"""The inspector's ASGI application: routes, templates, errors, the live stream.

Agent ids travel in query parameters (``/agent?id=…``), never in paths, so every id
(slashes, spaces, markup) round-trips unchanged; every value a page shows goes through
Jinja2's autoescaping, and the Content-Security-Policy forbids inline script besides.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..arguments import check_agent_id
from ..backends.redact import mask_url, scrub
from ..errors import (
    AccessDenied,
    AgentForgotten,
    AgentLost,
    AgentNotFound,
    ConfigurationError,
    IntegrityError,
    InvalidArgument,
    StatekeeperError,
)
from ..store.delete_shown import identity_at, identity_mark
from ..store.governed import governance_of
from ..store.keyguard import ENCRYPTED
from . import pages
from .auth import TokenMiddleware, csrf_token, valid_csrf
from .changes import pretty
from .deletes import NotDeleted, delete_as_shown, lost_head_message
from .diagram import render_svg
from .environment import environment
from .failures import describe
from .listing import AgentQuery, list_page
from .live import head_events, head_version, parse_version, record_digest
from .params import agent_id_of as _agent_id
from .params import seq_of as _seq
from .retention import apply_retention
from .settings import InspectorSettings
from .threads import EXTRA, list_threads, missing_extra, thread_view

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from ..machine import AgentStateMachine
    from ..store import StateStore
    from .metrics import InspectorMetrics

__all__ = ["create_app"]

HERE = Path(__file__).parent


class Inspector:
    """The state of one running inspector: settings, the store, the machine."""

    def __init__(self, settings: InspectorSettings, store: StateStore | None) -> None:
        self.settings = settings
        self.store_given = store
        self._store = store
        self.env = environment()
        self.machine: AgentStateMachine[Any, Any] | None = None
        self.csrf = csrf_token(settings.token)
        #: ``--metrics``: the served store's metrics (inspector/metrics.py; None without)
        self.metrics: InspectorMetrics | None = None
        if settings.metrics:
            from .metrics import InspectorMetrics

            self.metrics = InspectorMetrics(state_names=settings.metrics_state_labels)

    @property
    def store(self) -> StateStore:
        assert self._store is not None, "the inspector's store is not open"
        return self._store

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        from ..machine.loading import load_machine

        self.machine = load_machine(self.settings.machine)
        if self._store is not None:
            async with self.instrumented():
                yield
            return
        from ..store.opening import configured_keyring, open_existing

        keyring = configured_keyring(self.settings.key_file)
        governance = self.governance(keyring is not None)
        # refusals are appended to the audit log: a store that keeps one is opened for
        # writing (the inspector still offers no write without --allow-writes)
        readonly = not self.settings.allow_writes and governance.get("audit") is None
        async with open_existing(
            self.settings.url, keyring=keyring, readonly=readonly, **governance
        ) as store:
            self._store = store
            try:
                async with self.instrumented():
                    yield
            finally:
                self._store = None

    @contextlib.asynccontextmanager
    async def instrumented(self) -> AsyncIterator[None]:
        """With ``--metrics``: the store's metrics while the app runs."""
        if self.metrics is None:
            yield
            return
        async with self.metrics.instrumented(self.store):
            yield

    def governance(self, keyed: bool) -> dict[str, Any]:
        """``principal``, ``policy`` and ``audit`` for the store (empty without a
        principal); the audit log is kept when the store has a key, as on the CLI."""
        principal, policy = self.settings.principal, self.settings.policy
        if principal is None and policy is None:
            return {}
        from ..governance import Audit

        return {"principal": principal, "policy": policy, "audit": Audit() if keyed else None}

    @property
    def principal(self) -> str | None:
        """Who this inspector acts as (None: the plain store, no policy)."""
        gov = governance_of(self._store) if self._store is not None else None
        return gov.principal if gov is not None else self.settings.principal

    @property
    def store_admin(self) -> bool:
        """May this inspector's principal see store-wide detail (admin on ``**``)?"""
        gov = governance_of(self.store)
        return gov is None or gov.store_admin()

    def safe(self, text: str) -> str:
        """``text`` with the store URL's secrets masked."""
        return scrub(text, self.settings.url) if self.settings.url else text

    def render(
        self, request: Request, name: str, status: int = 200, **context: Any
    ) -> HTMLResponse:
        template = self.env.get_template(name)
        html = template.render(
            request=request,
            writes=self.settings.allow_writes,
            csrf=self.csrf,
            store_url=self.safe(self.settings.shown_url or mask_url(self.settings.url)),
            lg_prefix=self.settings.langgraph_prefix,
            principal=self.principal,
            **context,
        )
        return HTMLResponse(html, status_code=status)

    def error(self, request: Request, exc: Exception) -> HTMLResponse:
        status, title, message = describe(exc)
        fragment = request.headers.get("hx-request") == "true"
        return self.render(
            request,
            "fragments/error.html" if fragment else "error.html",
            status=status,
            title=title,
            message=self.safe(message),
        )


def create_app(settings: InspectorSettings, *, store: StateStore | None = None) -> Any:
    """The inspector as an ASGI app (token check and security headers included).

    ``store``: serve this open store instead of opening ``settings.url`` (the caller
    keeps owning it; tests and embedding).
    """
    ins = Inspector(settings, store)

    def handled(fn: Any) -> Any:
        async def endpoint(request: Request) -> Response:
            try:
                response: Response = await fn(request)
                return response
            except StatekeeperError as exc:
                return ins.error(request, exc)

        return endpoint

    async def home(request: Request) -> Response:
        return RedirectResponse("/agents", status_code=303)

    async def favicon(request: Request) -> Response:
        return RedirectResponse("/static/favicon.svg", status_code=301)

    @handled
    async def agents(request: Request) -> Response:
        params = dict(request.query_params)
        query = AgentQuery.parse(params)
        started = time.perf_counter()
        page = await list_page(ins.store, query)
        return ins.render(
            request,
            "agents.html",
            query=query,
            page=page,
            by_write=ins.store.backend.lists_by_write,
            elapsed=time.perf_counter() - started,
        )

    @handled
    async def agent(request: Request) -> Response:
        params = dict(request.query_params)
        agent_id = _agent_id(params)
        try:
            view, line = await pages.agent_view(
                ins.store, agent_id, ins.machine, ins.settings.history_budget
            )
        except AgentLost as lost:  # listed, its data gone: say so and what to do
            status, _, message = describe(lost)
            return ins.render(
                request, "lost.html", status=status, agent_id=agent_id, message=ins.safe(message)
            )
        except IntegrityError:  # its head itself lost (S3: newest commit gone)? as lost
            if (said := await lost_head_message(ins.store, agent_id)) is None:
                raise
            return ins.render(
                request, "lost.html", status=410, agent_id=agent_id, message=ins.safe(said)
            )
        seq, version = await head_version(ins.store, agent_id)
        return ins.render(
            request,
            "agent.html",
            agent_id=agent_id,
            view=view,
            diagram=render_svg(view.graph, view.snapshot.fsm_state),
            line=line,
            snap=view.snapshot,
            head=view.snapshot.seq,
            schema_module=pages.optional_module("schema"),
            # the live view's baseline: a rewrite in place changes it without a new seq
            live_version=version if seq == view.snapshot.seq else "",
            # and the record it shows at its head (see live.head_events)
            live_mark=await record_digest(ins.store, agent_id, view.snapshot.seq),
            # the head the Delete form deletes at (the live view keeps it current)
            delete_mark=identity_mark(await identity_at(ins.store, agent_id, view.snapshot.seq))
            if ins.settings.allow_writes
            else "",
            rewritten=params.get("rewritten") == "1",
        )

    @handled
    async def agent_state(request: Request) -> Response:
        params = dict(request.query_params)
        agent_id = _agent_id(params)
        seq = _seq(params, "seq", optional=True)
        snap = await ins.store.load(agent_id, at_seq=seq) if seq else await ins.store.load(agent_id)
        head = await ins.store.head(agent_id)
        return ins.render(request, "fragments/state.html", agent_id=agent_id, snap=snap, head=head)

    @handled
    async def agent_state_json(request: Request) -> Response:
        """The whole state at ``seq`` (default: the head) as JSON, for a state too
        large for the page (which shows its first STATE_BUDGET characters)."""
        params = dict(request.query_params)
        agent_id = _agent_id(params)
        seq = _seq(params, "seq", optional=True)
        snap = await ins.store.load(agent_id, at_seq=seq) if seq else await ins.store.load(agent_id)
        return Response(
            orjson.dumps(pages.state_document(agent_id, snap), option=pages.JSON_OPTIONS),
            media_type="application/json",
            headers={"Content-Disposition": f'attachment; filename="state-{snap.seq}.json"'},
        )

    @handled
    async def agent_events(request: Request) -> Response:
        params = dict(request.query_params)
        agent_id = _agent_id(params)
        line = await pages.timeline(
            ins.store,
            agent_id,
            before=_seq(params, "before", optional=True),
            after=_seq(params, "after", optional=True) if params.get("after") != "0" else 0,
            # the live view: up to the head its stream announced (see pages.timeline)
            to=_seq(params, "to", optional=True),
        )
        return ins.render(
            request,
            "fragments/events.html",
            agent_id=agent_id,
            line=line,
            live=params.get("after") is not None,
        )

    @handled
    async def agent_event(request: Request) -> Response:
        params = dict(request.query_params)
        agent_id = _agent_id(params)
        seq = _seq(params, "seq")
        assert seq is not None
        event, changes = await pages.event_detail(ins.store, agent_id, seq)
        return ins.render(
            request, "fragments/event.html", agent_id=agent_id, event=event, changes=changes
        )

    @handled
    async def agent_diff(request: Request) -> Response:
        params = dict(request.query_params)
        agent_id = _agent_id(params)
        a, b = _seq(params, "a"), _seq(params, "b")
        assert a is not None and b is not None
        old, new, changes = await pages.diff_view(ins.store, agent_id, a, b)
        return ins.render(
            request, "fragments/diff.html", agent_id=agent_id, old=old, new=new, changes=changes
        )

    @handled
    async def agent_keys(request: Request) -> Response:
        params = dict(request.query_params)
        agent_id = _agent_id(params)
        keys = await pages.keys_view(ins.store, agent_id, ins.settings.history_budget)
        return ins.render(request, "fragments/keys.html", agent_id=agent_id, keys=keys)

    @handled
    async def agent_verify(request: Request) -> Response:
        params = dict(request.query_params)
        agent_id = _agent_id(params)
        if await ins.store.head(agent_id) == 0:
            raise AgentNotFound(agent_id)
        started = time.perf_counter()
        report = await pages.verify_view(ins.store, agent_id)
        if agent_id in report.forgotten:  # nothing of it could be checked: not "Verified."
            raise AgentForgotten(agent_id)
        return ins.render(
            request,
            "fragments/verify.html",
            agent_id=agent_id,
            report=report,
            problems=pages.problem_rows(report, ins.safe),
            elapsed=time.perf_counter() - started,
        )

    async def agent_live(request: Request) -> Response:
        """Server-sent events: ``head`` with the new head seq whenever it moves;
        ``rewritten`` with the head seq when the agent's records were rewritten in place
        (a schema migration, a repair: the head's tag changed without a new seq, or the
        head went back), so the page reloads what it shows."""
        params = dict(request.query_params)
        try:
            agent_id = _agent_id(params)
            since = _seq(params, "since", optional=True) or 0
            given = parse_version(params)
            shown = parse_version(params, "m")
            await ins.store.head(agent_id)  # may this principal read it? (403 if not)
        except StatekeeperError as exc:
            return ins.error(request, exc)

        return StreamingResponse(
            head_events(
                ins.store,
                agent_id,
                since,
                given,
                ins.settings.live_interval,
                request.is_disconnected,
                shown,
            ),
            media_type="text/event-stream",
            headers={"X-Accel-Buffering": "no"},
        )

    def no_langgraph(request: Request) -> Response | None:
        """The page saying which extra to install, when the LangGraph integration is
        not installed (the ``inspector`` extra alone does not bring it); else None."""
        why = missing_extra()
        if why is None:
            return None
        return ins.render(request, "no_langgraph.html", extra=EXTRA, why=ins.safe(why))

    @handled
    async def threads(request: Request) -> Response:
        missing = no_langgraph(request)
        if missing is not None:
            return missing
        params = dict(request.query_params)
        after = params.get("after") or None
        if after is not None:
            check_agent_id(after, "after")
        rows, nxt = await list_threads(ins.store, ins.settings.langgraph_prefix, after, 50)
        return ins.render(request, "threads.html", rows=rows, next_after=nxt, after=after)

    @handled
    async def thread(request: Request) -> Response:
        params = dict(request.query_params)
        missing = no_langgraph(request)
        if missing is not None:
            return missing
        thread_id = params.get("id", "")
        if not thread_id:
            raise InvalidArgument("id", "which thread? (the id parameter is missing)")
        view = await thread_view(
            ins.store, ins.settings.langgraph_prefix, thread_id, params.get("cp") or None
        )
        if not view.checkpoints:
            raise AgentNotFound(f"{ins.settings.langgraph_prefix}{thread_id}")
        if params.get("cp") and view.selected is None:  # (was: the page, silently empty)
            return ins.render(
                request,
                "error.html",
                status=404,
                title="Not found",
                message=ins.safe(
                    f"thread {thread_id!r} has no checkpoint {params['cp'][:80]!r}: retention "
                    "removed it, or it was never written"
                ),
            )
        return ins.render(request, "thread.html", view=view)

    async def _encryption(store: StateStore) -> str:
        if store.codec.keyring is not None:
            return "AES-256-GCM (keyring loaded)"
        # a store with a key, opened without one: its records cannot be read here
        if await store.backend.read_marker(ENCRYPTED):
            return "AES-256-GCM, no key loaded: records cannot be read (give --key-file)"
        return "none (checksums only)"

    @handled
    async def store_page(request: Request) -> Response:
        health = await ins.store.health()
        backend = ins.store.backend
        return ins.render(
            request,
            "store.html",
            health_ok=health.ok,
            backend_name=health.backend,
            # store-wide detail (paths, sizes, counts of every tenant): admins only
            detail=ins.safe(pretty(health.detail, 8000)) if ins.store_admin else None,
            capabilities=sorted(c.value for c in backend.capabilities),
            leases=backend.supports_leases,
            encryption=await _encryption(ins.store),
            stats=ins.store.stats(),
            observability=pages.optional_module("observability"),
            schema_module=pages.optional_module("schema"),
        )

    @handled
    async def store_analysis(request: Request) -> Response:
        from .analysis import analyse, describe, heat

        report = await analyse(ins.store, dict(request.query_params))
        return ins.render(
            request, "fragments/analysis.html", a=report, heat=heat, **describe(report)
        )

    @handled
    async def store_count(request: Request) -> Response:
        started = time.perf_counter()
        n = await ins.store.count_agents()
        return HTMLResponse(
            ins.env.from_string(
                "{{ n }} agents <span class=muted>(counted in {{ ms }} ms)</span>"
            ).render(n=f"{n:,}", ms=f"{(time.perf_counter() - started) * 1000:.0f}")
        )

    # -- writes (only with --allow-writes; CSRF-checked) ---------------------------

    async def _form(request: Request) -> dict[str, str]:
        if not ins.settings.allow_writes:
            raise ConfigurationError(
                "this inspector is read-only (start it with --allow-writes to change the store)"
            )
        # (a browser sends "Origin: null" under our Referrer-Policy: no-referrer)
        origin = request.headers.get("origin") or request.headers.get("referer")
        if origin is not None and origin != "null":
            own = f"{request.url.scheme}://{request.url.netloc}"
            if not (origin == own or origin.startswith(own + "/")):
                raise ConfigurationError("refused: the request came from another site")
        form = await request.form()
        values = {k: v for k, v in form.items() if isinstance(v, str)}
        if not valid_csrf(ins.settings.token, values.get("csrf")):
            raise ConfigurationError("refused: the form's CSRF token is missing or wrong")
        return values

    @handled
    async def delete_agent(request: Request) -> Response:
        form = await _form(request)
        agent_id = _agent_id(form)
        if form.get("confirm") != agent_id:
            raise InvalidArgument("confirm", "type the agent's id to confirm the delete")
        done = await delete_as_shown(ins.store, agent_id, form)  # as its page showed it
        if isinstance(done, NotDeleted):
            return ins.render(
                request, "moved.html", status=409, agent_id=agent_id, message=done.message
            )
        return ins.render(
            request,
            "done.html",
            title="Deleted" if done.existed else "Nothing to delete",
            message=f"agent {agent_id!r} " + ("was deleted" if done.existed else "did not exist"),
        )

    @handled
    async def repair_agent(request: Request) -> Response:
        from ..store.repair import repair_agent as repair

        form = await _form(request)
        agent_id = _agent_id(form)
        report = await repair(ins.store, agent_id, apply=True)
        again = len(report.run_again)  # (not damage: the agent changed meanwhile)
        rerun = f"; {again} snapshot(s) not written: the agent changed while repair ran"
        message = (
            f"{len(report.changes)} snapshot(s) rebuilt; {len(report.unrepairable) - again}"
            f" problem(s) repair cannot fix{rerun + ' (repair again)' if again else ''}"
        )
        return ins.render(request, "done.html", title="Repair", message=ins.safe(message))

    @handled
    async def retention(request: Request) -> Response:
        form = await _form(request)
        done = await apply_retention(ins.store, ins.settings.langgraph_prefix, form)
        return ins.render(
            request,
            "done.html",
            title="Retention applied",
            message=f"thread {done.thread_id!r}: {done.checkpoints_deleted} checkpoint(s) and "
            f"{done.writes_deleted} pending write(s) removed, keeping the newest "
            f"{done.keep_last} per namespace of those its page showed, and any written since",
        )

    class Metrics:
        """``GET /metrics`` (``--metrics``): prometheus-client's ASGI exposition of
        the inspector's registry. Metrics are aggregates, but over every tenant of the
        store (operation counts, latencies, state sizes per backend) — store-wide
        detail, shown, like the store page's backend detail, to admins on ``**`` only."""

        def __init__(self, registry: CollectorRegistry) -> None:
            from ..observability import metrics_app

            self.exposition = metrics_app(registry)

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            if not ins.store_admin:
                request = Request(scope, receive)
                principal = ins.principal or "?"
                refusal = AccessDenied(
                    principal, "admin", "metrics", reason="metrics need admin on '**'"
                )
                gov = governance_of(ins.store)
                if gov is not None:  # refused as every call is: in the audit log
                    with contextlib.suppress(AccessDenied):
                        await gov.refuse(refusal, None)
                response = ins.error(request, refusal)
                await response(scope, receive, send)
                return
            if ins.metrics is not None:
                await ins.metrics.refresh(ins.store)
            await self.exposition(scope, receive, send)

    metrics = [Route("/metrics", Metrics(ins.metrics.registry))] if ins.metrics is not None else []

    routes = [
        Route("/", home),
        Route("/favicon.ico", favicon),
        Route("/agents", agents),
        Route("/agent", agent),
        Route("/agent/state", agent_state),
        Route("/agent/state.json", agent_state_json),
        Route("/agent/events", agent_events),
        Route("/agent/event", agent_event),
        Route("/agent/diff", agent_diff),
        Route("/agent/keys", agent_keys),
        Route("/agent/verify", agent_verify),
        Route("/agent/live", agent_live),
        Route("/agent/delete", delete_agent, methods=["POST"]),
        Route("/agent/repair", repair_agent, methods=["POST"]),
        Route("/threads", threads),
        Route("/thread", thread),
        Route("/thread/retention", retention, methods=["POST"]),
        Route("/store", store_page),
        Route("/store/count", store_count),
        Route("/store/analysis", store_analysis),
        *metrics,
        Mount("/static", app=StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    app = Starlette(routes=routes, lifespan=ins.lifespan)
    app.state.inspector = ins
    return TokenMiddleware(app, settings.token, hosts=settings.allowed_hosts)
