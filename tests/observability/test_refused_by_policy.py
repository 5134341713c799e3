"""A write refused by the store's principal policy (``--as``) was only in the audit
log: no operation count, no ``statekeeper_operation_errors_total``, no span — while
every other failed write was observed. It is counted and traced like them (error /
outcome ``AccessDenied``); the span names the agent only where the principal may read
it."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from prometheus_client import CollectorRegistry

from statekeeper import StateStore
from statekeeper.errors import AccessDenied
from statekeeper.governance import Policy
from statekeeper.observability.instrumentation import instrument

from .test_metrics import scrape, value

POLICY = Policy(principals={"bob": {"read": ["seen/**"], "write": ["mine/**"]}})
BASE = {"store": "main", "backend": "memory"}


async def _refused(store: StateStore) -> None:
    await store.save("mine/a", {"n": 1})
    with pytest.raises(AccessDenied):
        await store.save("seen/b", {"n": 1})
    with pytest.raises(AccessDenied):
        await store.append("hidden/c", "note", {"n": 1})
    with pytest.raises(AccessDenied):
        await store.delete("hidden/c")
    with pytest.raises(AccessDenied):  # writing as someone else needs admin
        await store.save("mine/a", {"n": 2}, actor="alice")


async def test_a_write_the_policy_refuses_is_counted() -> None:
    registry = CollectorRegistry()
    async with StateStore("memory://", witness=False, principal="bob", policy=POLICY) as store:
        instrument(store, registry=registry, name="main", tracing=False)
        await _refused(store)
        text = scrape(registry)
    errors = "statekeeper_operation_errors_total"
    assert value(text, errors, operation="save", error="AccessDenied", **BASE) == 2
    assert value(text, errors, operation="append", error="AccessDenied", **BASE) == 1
    assert value(text, errors, operation="delete", error="AccessDenied", **BASE) == 1
    calls = "statekeeper_operation_duration_seconds_count"
    assert value(text, calls, operation="save", **BASE) == 3  # mine/a's, and two refused
    assert "hidden/c" not in text and "seen/b" not in text


async def test_a_write_the_policy_refuses_is_a_span_naming_only_what_may_be_read() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with StateStore("memory://", witness=False, principal="bob", policy=POLICY) as store:
        instrument(store, registry=CollectorRegistry(), tracer_provider=provider)
        await _refused(store)
    spans: Any = exporter.get_finished_spans()
    refused = [
        s
        for s in spans
        if s.attributes is not None and s.attributes.get("statekeeper.outcome") == "AccessDenied"
    ]
    assert sorted(s.name for s in refused) == [
        "statekeeper.append",
        "statekeeper.delete",
        "statekeeper.save",
        "statekeeper.save",
    ]
    named = sorted(str(s.attributes.get("statekeeper.agent_id")) for s in refused)
    assert named == ["None", "None", "mine/a", "seen/b"]
    for span in refused:
        assert span.status.status_code is StatusCode.ERROR
        assert "hidden/c" not in str(span.attributes)
        assert "hidden/c" not in str([e.attributes for e in span.events])
