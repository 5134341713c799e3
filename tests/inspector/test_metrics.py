"""``statekeeper serve --metrics``: the inspector instruments its store and serves the
Prometheus metrics at ``/metrics``, behind the token, and to admins on ``**`` only when
it acts as a principal."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from statekeeper.governance import parse_policy

from .conftest import make_client

POLICY = """\
[principals.alice]
read = ["agent-*"]

[principals.ops]
admin = ["**"]
"""


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples of family ``name`` (by label set) in an exposition ``text``."""
    found: dict[tuple[tuple[str, str], ...], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def appends(client: Any) -> float:
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    values = samples(response.text, "statekeeper_appends_total")
    assert list(values) == [(("backend", "sqlite"), ("store", "sqlite"))], values
    return next(iter(values.values()))


def test_metrics_count_the_saves_of_the_inspectors_store(store_copy: str) -> None:
    with make_client(store_copy, metrics=True, allow_writes=True) as client:
        before = appends(client)
        inspector = client.app.app.state.inspector
        client.portal.call(inspector.store.save, "agent-metrics", {"n": 1})
        client.portal.call(inspector.store.save, "agent-metrics", {"n": 2})
        assert appends(client) == before + 2
        # the pages' own reads are measured too: a load is an operation with a latency
        assert client.get("/agent?id=agent-metrics").status_code == 200
        text = client.get("/metrics").text
        loads = samples(text, "statekeeper_operation_duration_seconds_count")
        assert any(dict(k)["operation"] == "load" and v >= 1 for k, v in loads.items()), loads


def test_metrics_need_the_token_and_the_option(seeded_url: str) -> None:
    with make_client(seeded_url, metrics=True) as client:
        assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    with make_client(seeded_url) as client:  # no --metrics: no endpoint, no instrumentation
        assert client.get("/metrics").status_code == 404
        inspector = client.app.app.state.inspector
        assert type(inspector.store.backend).__name__ == "SQLiteBackend"


def test_metrics_are_for_store_admins_when_acting_as_a_principal(seeded_url: str) -> None:
    policy = parse_policy(POLICY)
    with make_client(seeded_url, metrics=True, principal="alice", policy=policy) as client:
        assert client.get("/agents").status_code == 200  # alice may use the inspector
        refused = client.get("/metrics")
        assert refused.status_code == 403
        assert "admin" in refused.text and "statekeeper_" not in refused.text
    with make_client(seeded_url, metrics=True, principal="ops", policy=policy) as client:
        assert samples(client.get("/metrics").text, "statekeeper_appends_total")


def test_serve_metrics_prints_the_address_and_serves_it(seeded_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "STATEKEEPER_INSPECTOR_TOKEN": "t" * 32}
    proc = subprocess.Popen(
        [sys.executable, "-m", "statekeeper.cli", "serve", seeded_url, "--port", "0",
         "--metrics"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        proc.stdout.readline()  # the link; blocks until the server listens
        line = proc.stdout.readline()
        found = re.search(r"metrics on (http://127\.0\.0\.1:\d+)/metrics", line)
        assert found is not None, line
        auth = {"Authorization": "Bearer " + "t" * 32}
        with httpx.Client(base_url=found.group(1), timeout=30, headers=auth) as client:
            assert client.get("/agent?id=agent-000").status_code == 200
            text = client.get("/metrics").text
        loads = samples(text, "statekeeper_operation_duration_seconds_count")
        assert any(dict(k)["operation"] == "load" and v >= 1 for k, v in loads.items()), loads
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_metrics_are_the_served_stores_own(store_copy: str) -> None:
    """``/metrics`` exposes the served store: its contents, whoever wrote them (another
    store on the same file here), and the store-level families of the operations made
    through the inspector (appends, loads, latency histograms), labelled with the
    served backend."""
    from statekeeper import StateStore
    from statekeeper.observability.health import health_report

    from .conftest import in_thread

    async def written_elsewhere() -> int:
        async with StateStore(store_copy) as other:
            await other.save("agent-elsewhere", {"n": 1}, fsm_state="idle")
            return (await health_report(other)).agents

    agents = in_thread(written_elsewhere)
    with make_client(store_copy, metrics=True, allow_writes=True) as client:
        assert client.get("/agent?id=agent-elsewhere").status_code == 200  # a load
        inspector = client.app.app.state.inspector
        client.portal.call(inspector.store.save, "agent-metrics", {"n": 1})
        found = families(client.get("/metrics").text)
    sqlite = {"store": "sqlite"}
    # what is in the store: the agents written elsewhere and the one saved here
    assert samples_of(found, "statekeeper_agents") == {(("store", "sqlite"),): agents + 1}
    in_idle = samples_of(found, "statekeeper_agents_in_state")
    assert in_idle[(("state", "idle"), ("store", "sqlite"))] >= 1
    assert samples_of(found, "statekeeper_exporter_scan_ok") == {(("store", "sqlite"),): 1.0}
    # the store's own operations, labelled with its backend
    backend = {**sqlite, "backend": "sqlite"}
    assert found["statekeeper_appends"].type == "counter"
    assert samples_of(found, "statekeeper_appends", "_total")[key(backend)] == 1
    loads = samples_of(found, "statekeeper_loads_from_backend", "_total")
    assert loads[key(backend)] >= 1
    for name, label, value in (
        ("statekeeper_operation_duration_seconds", "operation", "load"),
        ("statekeeper_operation_duration_seconds", "operation", "save"),
        ("statekeeper_backend_call_duration_seconds", "call", "append"),
    ):
        assert found[name].type == "histogram"
        labels = {**backend, label: value}
        assert samples_of(found, name, "_count")[key(labels)] >= 1
        buckets = samples_of(found, name, "_bucket")
        assert buckets[key({**labels, "le": "+Inf"})] >= 1


def key(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def samples_of(found: dict[str, Any], family: str, suffix: str = "") -> dict[Any, float]:
    return {key(s.labels): s.value for s in found[family].samples if s.name == family + suffix}
