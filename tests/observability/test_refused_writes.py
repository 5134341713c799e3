"""A typed write whose state fails validation (statekeeper's ValidationError, raised
while the write is made, before it reaches the store's seams) was not observed at all:
no operation count, no error counter, no span — while a conflict, a serialization
error, an invalid id or a missing agent were. It is counted and traced like them."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from prometheus_client import CollectorRegistry
from pydantic import BaseModel

from statekeeper import StateStore
from statekeeper.errors import ValidationError
from statekeeper.observability.instrumentation import instrument
from statekeeper.schema import SchemaRegistry, TypedStates

from .test_metrics import scrape, value


class Ticket(BaseModel):
    customer: str
    tags: list[str] = []


REGISTRY = SchemaRegistry()
TICKET = REGISTRY.register(Ticket, name="ticket", version=1)
BASE = {"store": "main", "backend": "memory"}


async def _refused_writes(store: StateStore) -> None:
    agent = await store.agent("t-1", model=TICKET, initial_state=Ticket(customer="a"))
    agent.state.tags = "not a list"  # type: ignore[assignment]
    with pytest.raises(ValidationError):
        await agent.save()
    await agent.refresh()
    states = TypedStates(store, TICKET)
    bad = Ticket.model_construct(customer=7, tags=[])  # (no validation on construction)
    with pytest.raises(ValidationError):
        await states.save("t-1", bad)
    with pytest.raises(ValidationError):
        await states.create("t-2", bad)


async def test_a_typed_write_that_fails_validation_is_counted() -> None:
    registry = CollectorRegistry()
    async with StateStore("memory://", witness=False) as store:
        instrument(store, registry=registry, name="main", tracing=False)
        await _refused_writes(store)
        text = scrape(registry)
    errors = "statekeeper_operation_errors_total"
    for operation in ("append", "save", "create"):
        found = value(text, errors, operation=operation, error="ValidationError", **BASE)
        assert found == 1, operation
    calls = "statekeeper_operation_duration_seconds_count"
    assert value(text, calls, operation="append", **BASE) == 1
    assert value(text, calls, operation="save", **BASE) == 1
    assert value(text, calls, operation="create", **BASE) == 2  # t-1's, and t-2's refused


async def test_a_typed_write_that_fails_validation_is_a_span_with_the_error() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with StateStore("memory://", witness=False) as store:
        instrument(store, registry=CollectorRegistry(), tracer_provider=provider)
        await _refused_writes(store)
    spans: Any = exporter.get_finished_spans()
    refused = [
        s
        for s in spans
        if s.attributes is not None and s.attributes.get("statekeeper.outcome") == "ValidationError"
    ]
    assert sorted(s.name for s in refused) == [
        "statekeeper.append",
        "statekeeper.create",
        "statekeeper.save",
    ]
    for span in refused:
        assert span.status.status_code is StatusCode.ERROR
        assert [e.name for e in span.events] == ["exception"]
        assert "not a list" not in str(span.events[0].attributes)  # the value: never
