"""LangGraph's own checkpointer conformance suite (``langgraph-checkpoint-conformance``),
run against the statekeeper saver on each backend. Skipped when the suite is not
installed (it is not a dependency of ``langgraph-checkpoint`` itself)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

conformance = pytest.importorskip("langgraph.checkpoint.conformance")

from langgraph.checkpoint.conformance import checkpointer_test, validate  # noqa: E402

from statekeeper.integrations.langgraph import StatekeeperSaver  # noqa: E402

from .conftest import BACKENDS, backend_url  # noqa: E402


@pytest.mark.parametrize("backend", BACKENDS)
async def test_langgraph_conformance_suite(backend: str, tmp_path: Path) -> None:
    counter = iter(range(1000))

    @checkpointer_test(name=f"statekeeper-{backend}")
    async def make() -> AsyncIterator[StatekeeperSaver]:
        saver = StatekeeperSaver.from_url(backend_url(backend, tmp_path / str(next(counter))))
        yield saver
        await saver.aclose()

    report = await validate(make)
    failures = {cap: result.failures for cap, result in report.results.items() if result.failures}
    assert not failures
    assert report.passed_all_base()
    # every extended capability is implemented and passes too
    assert all(result.passed for result in report.results.values()), report.results


@pytest.mark.parametrize("backend", BACKENDS)
async def test_langgraph_conformance_suite_on_the_callers_loop(
    backend: str, tmp_path: Path
) -> None:
    # StatekeeperSaver.afrom_url: the saver's work on the test's own event loop
    counter = iter(range(1000))

    @checkpointer_test(name=f"statekeeper-bound-{backend}")
    async def make() -> AsyncIterator[StatekeeperSaver]:
        url = backend_url(backend, tmp_path / f"bound-{next(counter)}")
        saver = await StatekeeperSaver.afrom_url(url)
        yield saver
        await saver.aclose()

    report = await validate(make)
    failures = {cap: result.failures for cap, result in report.results.items() if result.failures}
    assert not failures
    assert all(result.passed for result in report.results.values()), report.results
