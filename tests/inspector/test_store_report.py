"""The store page's report (issue 18 item 4): state health, the metrics ``metrics
serve`` exports, the transition matrix as a heat map and entropy over time, computed
with statekeeper.observability on a bounded scope of agents."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

from .seed import HOSTILE_ID


def _cells(html: str) -> dict[tuple[str, str], tuple[float, int]]:
    """``(from, to) -> (P, count)`` from the rendered matrix."""
    table = html[html.index('id="transition-matrix"') :]
    table = table[: table.index("</table>")]
    heads = [unescape(h) for h in re.findall(r"<th>(.*?)</th>", table.split("</thead>")[0])]
    states = heads[1:-3]
    out = {}
    body = table.split("<tbody>")[1]
    for row in re.findall(r"<tr><th>(.*?)</th>(.*?)</tr>", body, re.S):
        source = unescape(row[0])
        cells = re.findall(
            r'<td class="heat heat-(\d+)"[^>]*>([0-9.]+)<span class="count">(\d+)</span>', row[1]
        )
        for target, (_, p, n) in zip(states, cells, strict=True):
            out[(source, target)] = (float(p), int(n))
    return out


def test_the_store_page_loads_the_report(client: Any) -> None:
    html = client.get("/store").text
    assert 'hx-get="/store/analysis"' in html and 'id="analysis"' in html
    assert "does not draw them yet" not in html


def test_the_report_shows_health_matrix_entropy_and_metrics(client: Any) -> None:
    html = client.get("/store/analysis").text
    # the seed: 30 agents idle -> processing; 10 of them processing -> tool_call
    # -> processing; 15 processing -> completed
    cells = _cells(html)
    assert cells[("idle", "processing")] == (1.0, 30)
    assert cells[("tool_call", "processing")] == (1.0, 10)
    assert cells[("processing", "completed")] == (0.6, 15)
    assert cells[("processing", "tool_call")] == (0.4, 10)
    assert cells[("processing", "idle")] == (0.0, 0)
    assert cells[("completed", "completed")] == (1.0, 0)  # absorbing: P_ii = 1
    assert 'class="heat heat-10"' in html and 'class="heat heat-4"' in html
    by_state = html[html.index('id="by-state"') :].split("</table>")[0]
    assert "<td>completed</td><td>15</td>" in by_state
    assert "<td>processing</td><td>15</td>" in by_state
    assert 'id="entropy-chart"' in html and "<rect " in html
    metrics = unescape(html[html.index('<pre id="metrics">') :].split("</pre>")[0])
    assert 'statekeeper_agents_in_state{state="completed",store="inspected"} 15.0' in metrics
    assert "statekeeper_agents_unreadable" in metrics
    assert float(re.search(r'id="state-entropy">([0-9.]+)<', html)[1]) > 0  # type: ignore[index]
    assert "<script>window.__pwned" not in html  # agent ids escaped here too


def test_the_report_is_bounded_and_scoped(client: Any) -> None:
    html = client.get("/store/analysis?scope=5").text
    assert "5 agent(s)" in html and "the store holds more" in html
    # the first five ids: the hostile one ('<' sorts first; no machine) and agent-000..003
    assert _cells(html)[("idle", "processing")] == (1.0, 4)
    tenant = client.get("/store/analysis?ns=tenant").text
    assert "2 agent(s) of namespace" in tenant and "the store holds more" not in tenant
    assert 'id="no-transitions"' in tenant
    for bad in ("scope=0", "scope=x", "scope=999999", "ns=a//b", "ns=/a", "window=-1"):
        r = client.get(f"/store/analysis?{bad}")
        assert r.status_code == 400, bad
    assert HOSTILE_ID not in client.get("/store/analysis?scope=20000").text
