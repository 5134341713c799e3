"""OpenTelemetry spans: one per store operation and backend call, in the caller's trace."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any, TypedDict

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client import CollectorRegistry

from statekeeper import StateStore, StateTransition, SyncStateStore
from statekeeper.errors import ConflictError
from statekeeper.observability.instrumentation import instrument


@pytest.fixture
def traced() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def by_name(spans: tuple[ReadableSpan, ...] | list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def ancestors(span: ReadableSpan, spans: Any) -> list[str]:
    """Names of the span's ancestors, nearest first."""
    index = {s.context.span_id: s for s in spans}
    out = []
    parent = span.parent
    while parent is not None and parent.span_id in index:
        found = index[parent.span_id]
        out.append(found.name)
        parent = found.parent
    return out


async def test_operations_and_backend_calls_are_spans_with_their_attributes(traced: Any) -> None:
    provider, exporter = traced
    tracer = provider.get_tracer("app")
    async with StateStore("memory://", witness=False) as store:
        instrument(store, registry=CollectorRegistry(), tracer_provider=provider)
        with tracer.start_as_current_span("request"):
            await store.save("a", {"n": 1})
            agent = await store.agent("m")
            await agent.transition(StateTransition.START_PROCESSING)
            await store.load("a")
            with pytest.raises(ConflictError):
                await store.save("a", {"n": 2}, expected_seq=7)
    spans = exporter.get_finished_spans()
    (save, bad) = by_name(spans, "statekeeper.save")
    assert save.kind is SpanKind.INTERNAL
    assert save.attributes is not None
    assert save.attributes["statekeeper.agent_id"] == "a"
    assert save.attributes["statekeeper.seq"] == 1
    assert save.attributes["statekeeper.backend"] == "memory"
    assert save.attributes["statekeeper.outcome"] == "ok"
    assert ancestors(save, spans) == ["request"]
    assert bad.attributes is not None and bad.attributes["statekeeper.outcome"] == "conflict"
    assert bad.status.status_code is StatusCode.ERROR
    (move,) = by_name(spans, "statekeeper.transition")
    assert move.attributes is not None and move.attributes["statekeeper.seq"] == 2
    assert by_name(spans, "statekeeper.load")
    # the backend call of the first save is a CLIENT span under it, named by the conventions
    (append,) = [s for s in by_name(spans, "append memory") if s.parent == save.context]
    assert append.kind is SpanKind.CLIENT
    assert append.attributes is not None
    assert append.attributes["db.system.name"] == "statekeeper.memory"
    assert append.attributes["db.operation.name"] == "append"
    assert append.attributes["statekeeper.agent_id"] == "a"
    assert append.attributes["statekeeper.outcome"] == "ok"
    assert ancestors(append, spans) == ["statekeeper.save", "request"]
    assert {s.context.trace_id for s in spans} == {save.context.trace_id}


async def test_sqlite_backend_calls_carry_the_db_system(traced: Any, tmp_path: Any) -> None:
    provider, exporter = traced
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", witness=False) as store:
        instrument(store, registry=CollectorRegistry(), tracer_provider=provider)
        await store.save("a", {"n": 1})
    (append,) = by_name(exporter.get_finished_spans(), "append sqlite")
    assert append.attributes is not None and append.attributes["db.system.name"] == "sqlite"


def test_the_sync_face_runs_in_the_callers_context(traced: Any) -> None:
    provider, exporter = traced
    with SyncStateStore("memory://", witness=False) as sync:
        instrument(sync.store, registry=CollectorRegistry(), tracer_provider=provider)
        with provider.get_tracer("app").start_as_current_span("caller"):
            sync.save("a", {"n": 1})
    spans = exporter.get_finished_spans()
    (save,) = by_name(spans, "statekeeper.save")
    assert ancestors(save, spans) == ["caller"]


class Chat(TypedDict):
    n: int


def test_a_langgraph_node_span_is_the_parent_of_the_savers_spans(traced: Any) -> None:
    """Spans the saver starts while a graph runs belong to the caller's trace, and the
    store calls a node makes are children of the node's span."""
    from langgraph.graph import END, START, StateGraph

    from statekeeper.integrations.langgraph import StatekeeperSaver

    provider, exporter = traced
    tracer = provider.get_tracer("app")
    saver = StatekeeperSaver.from_url("memory://")
    instrument(saver.store, registry=CollectorRegistry(), tracer_provider=provider)

    def node(state: Chat) -> Chat:
        with tracer.start_as_current_span("node"):
            saver.get_tuple({"configurable": {"thread_id": "t"}})
        return {"n": state["n"] + 1}

    builder = StateGraph(Chat)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    builder.add_edge("node", END)
    graph = builder.compile(checkpointer=saver)
    try:
        with tracer.start_as_current_span("run"):
            assert graph.invoke({"n": 1}, {"configurable": {"thread_id": "t"}}) == {"n": 2}
    finally:
        saver.close()
    spans = exporter.get_finished_spans()
    ours = [s for s in spans if s.attributes and "statekeeper.backend" in s.attributes]
    assert ours, "the saver made no store calls in a span"
    (run,) = by_name(spans, "run")
    for span in ours:
        assert span.context.trace_id == run.context.trace_id
        assert "run" in ancestors(span, spans)
    (node_span,) = by_name(spans, "node")
    under_node = [s for s in ours if s.parent == node_span.context]
    assert under_node, "the store calls made in the node are not children of its span"


def test_no_cost_and_no_import_without_opentelemetry(tmp_path: Any) -> None:
    """Without OpenTelemetry installed (its import blocked), instrumenting works,
    records metrics, starts no spans; ``tracing=True`` is a clear error."""
    code = """
import asyncio, sys
sys.modules["opentelemetry"] = None  # as if not installed
from prometheus_client import CollectorRegistry, generate_latest
from statekeeper import StateStore
from statekeeper.errors import ConfigurationError
from statekeeper.observability.instrumentation import instrument

async def main():
    registry = CollectorRegistry()
    async with StateStore("memory://", witness=False) as store:
        obs = instrument(store, registry=registry)
        assert obs.tracer is None
        await store.save("a", {"n": 1})
        try:
            instrument(StateStore("memory://", witness=False), tracing=True)
        except ConfigurationError as exc:
            assert "statekeeper[otel]" in str(exc)
        else:
            raise AssertionError("tracing=True without OpenTelemetry was accepted")
    text = generate_latest(registry).decode()
    assert 'statekeeper_appends_total{backend="memory",store="memory"} 1.0' in text, text

asyncio.run(main())
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


async def test_auto_tracing_waits_for_a_real_provider() -> None:
    """``tracing="auto"`` starts no span (and pays for none) while the global tracer
    provider is OpenTelemetry's no-op default."""
    from opentelemetry import trace

    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        pytest.skip("a global tracer provider is set in this process")
    async with StateStore("memory://", witness=False) as store:
        obs = instrument(store, registry=CollectorRegistry())
        assert obs.tracer is None
        await store.save("a", {})
