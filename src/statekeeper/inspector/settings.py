"""How an inspector is configured (what ``statekeeper serve`` passes to the app)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING

from ..backends.redact import mask_url
from .auth import new_token

if TYPE_CHECKING:
    from ..store.governed import AccessPolicy

__all__ = ["InspectorSettings"]


@dataclass(repr=False)
class InspectorSettings:
    """Options of :func:`~statekeeper.inspector.create_app`.

    Args:
        url: the store (opened read-only unless ``allow_writes``; never created).
        key_file: the key file (else ``$STATEKEEPER_KEY_FILE`` / ``$STATEKEEPER_KEYS``).
        allow_writes: offer delete, repair and retention apply (each behind CSRF).
        token: the bearer token every request needs (generated when None).
        machine: ``module:attr`` of the agents' machine, drawn on agent pages (the
            default machine when None; observed transitions are drawn either way).
        langgraph_prefix: agent-id prefix of LangGraph threads (the saver's ``prefix``).
        live_interval: how often the live view checks an agent's head (seconds).
        history_budget: the most events one agent page reads for the diagram's counts
            and the keys/steps tables (the page says when it stopped early).
        principal: act as this principal (``statekeeper serve --as``): the store is
            opened governed, every read checked against ``policy``, and refusals
            answer 403 (audited when the store has a key).
        policy: the access policy of ``principal``
            (:func:`statekeeper.governance.load_policy`; ``--policy``).
        metrics: instrument the store (:func:`statekeeper.observability.instrument`,
            into a registry of this inspector's own) and serve its Prometheus metrics
            at ``/metrics`` (``statekeeper serve --metrics``). Behind the token like
            every page; with a ``principal``, only an admin on ``**`` may read them
            (they count every tenant's operations).
        metrics_state_labels: on an encrypted store, label
            ``statekeeper_agents_in_state`` with the state names themselves
            (``--metrics-state-labels``); by default each name is replaced by a keyed
            hash of it, so that the scrapes and what stores them hold no name.
        allowed_hosts: names besides localhost, 127.0.0.1, [::1] and the address
            served that a request's ``Host`` header may give (``--allowed-host``: the
            name of a reverse proxy in front of it); any other Host is a 400, which
            is what stops a page of another site whose name was re-bound to this
            machine (DNS rebinding).
    """

    url: str
    key_file: Path | None = None
    allow_writes: bool = False
    token: str = field(default_factory=new_token)
    machine: str | None = None
    langgraph_prefix: str = "lg/"
    live_interval: float = 0.5
    history_budget: int = 5_000
    #: shown on the store page (the URL with any password removed)
    shown_url: str = ""
    principal: str | None = None
    policy: AccessPolicy | None = None
    metrics: bool = False
    metrics_state_labels: bool = False
    allowed_hosts: tuple[str, ...] = ()

    def __repr__(self) -> str:
        """The fields, with the URL's password masked and the token left out (the
        dataclass ``repr`` showed both: in a log line, a debugger, a traceback)."""
        shown = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "token"}
        shown["url"] = mask_url(self.url)
        body = ", ".join(f"{name}={value!r}" for name, value in shown.items())
        return f"InspectorSettings({body}, token=<not shown>)"
