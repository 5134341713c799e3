"""The demo's research agent (no LLM): a planner that is a pure function of the agent's
durable data, so a process that reloads the data continues with exactly the call the
dead one would have made next, and :func:`drive`, which runs it against a store."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import ConfigurationError
from ..machine import AgentState, StateTransition
from ..store import DurableAgent
from .constants import QUESTION, SEARCH_QUERY, TOP_K
from .tools import ToolBox

# ----------------------------------------------------------------------------- agent


def initial_data() -> dict[str, Any]:
    """The data document a new demo agent starts with."""
    return {"question": QUESTION, "results": {}, "facts": {}, "notes": []}


def planned_calls(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every tool call the agent plans, given the results it has so far (pure)."""
    results: Mapping[str, Any] = data.get("results", {})
    n = 0

    def call(tool: str, args: dict[str, Any]) -> dict[str, Any]:
        nonlocal n
        n += 1
        return {"call_id": f"call-{n:02d}-{tool}", "tool": tool, "args": args}

    calls = [call("search", {"query": SEARCH_QUERY})]
    search = results.get(calls[0]["call_id"])
    if search is None:
        return calls
    fetches = [call("fetch", {"doc_id": doc}) for doc in search["hits"]]
    calls += fetches
    facts = data.get("facts", {})
    densities = []
    for fetch in fetches:
        fact = facts.get(fetch["args"]["doc_id"])
        if fact is None:
            return calls
        densities.append(
            call("calculator", {"expression": f"{fact['population']} / {fact['area_km2']}"})
        )
    calls += densities
    values = [results[c["call_id"]]["value"] for c in densities if c["call_id"] in results]
    if len(values) < len(densities):
        return calls
    calls.append(
        call(
            "calculator", {"expression": f"({' + '.join(repr(v) for v in values)}) / {len(values)}"}
        )
    )
    return calls


def next_action(data: Mapping[str, Any]) -> dict[str, Any] | None:
    """The first planned call without a result, or None when the research is done."""
    results = data.get("results", {})
    for c in planned_calls(data):
        if c["call_id"] not in results:
            return c
    return None


def _number(text: str) -> float:
    value = float(text.replace(",", ""))
    return int(value) if value.is_integer() else value


def absorb(data: dict[str, Any], call: Mapping[str, Any], result: Mapping[str, Any]) -> None:
    """Process a tool result: record it and take notes (written with the same append)."""
    data["results"][call["call_id"]] = dict(result)
    notes: list[str] = data["notes"]
    if call["tool"] == "search":
        notes.append(
            f"search {result['query']!r}: {len(result['hits'])} of "
            f"{result['documents_scanned']} documents match: {', '.join(result['hits'])}"
        )
    elif call["tool"] == "fetch":
        text = result["text"]
        pop = re.search(r"population of ([\d,]+)", text)
        area = re.search(r"area of ([\d,.]+) square kilometres", text)
        if pop is None or area is None:
            notes.append(f"{result['doc_id']} ({result['title']}): no census figures")
            return
        data["facts"][result["doc_id"]] = {
            "city": result["title"],
            "population": _number(pop.group(1)),
            "area_km2": _number(area.group(1)),
            "sha256": result["sha256"][:16],
        }
        notes.append(f"{result['title']}: population {pop.group(1)}, {area.group(1)} km²")
    elif call["tool"] == "calculator":
        for fact in data["facts"].values():
            if call["args"]["expression"] == f"{fact['population']} / {fact['area_km2']}":
                fact["density"] = result["value"]
                notes.append(f"{fact['city']}: {result['value']:,.1f} people/km²")
                return
        data["average_density"] = result["value"]
        notes.append(f"average density: {result['value']:,.1f} people/km²")


def compose_answer(data: Mapping[str, Any]) -> str:
    """The agent's final answer, from its facts."""
    facts = [f for f in data["facts"].values() if "density" in f]
    top = max(facts, key=lambda f: f["density"])
    avg = data["average_density"]
    return (
        f"{top['city']} is the most densely populated city in the archive at "
        f"{top['density']:,.1f} people/km², {top['density'] / avg:.2f}x the average of "
        f"{avg:,.1f} across {len(facts)} cities."
    )


OnCommit = Callable[[DurableAgent, dict[str, Any]], None]


async def drive(
    agent: DurableAgent,
    tools: ToolBox,
    *,
    actor: str,
    step_delay: float = 0.0,
    on_commit: OnCommit | None = None,
) -> None:
    """Run the agent from wherever its stored state says it is until COMPLETED.

    Each loop iteration makes exactly one durable transition. ``step_delay`` is
    pacing only (a pause between steps so a kill can land mid-run); it stands in for
    nothing.
    """

    async def step(event: StateTransition, meta: dict[str, Any]) -> None:
        source = agent.machine.state_value
        if not await agent.transition(event, meta, actor=actor):
            raise ConfigurationError(f"demo agent cannot fire {event.value} from {source}")
        if on_commit is not None:
            on_commit(
                agent,
                {
                    "seq": agent.seq,
                    "event": event.value,
                    "from": source,
                    "to": agent.machine.state_value,
                    **meta,
                },
            )
        if step_delay > 0:
            await asyncio.sleep(step_delay)

    while True:
        state = agent.state
        data = agent.data
        if state is AgentState.COMPLETED:
            return
        if state is AgentState.IDLE:
            data["plan"] = [
                f"search the archive for {SEARCH_QUERY!r}",
                f"fetch the top {TOP_K} documents and read the census figures",
                "compute each city's density, then the average",
                "answer with the densest city and its ratio to the average",
            ]
            await step(StateTransition.START_PROCESSING, {})
        elif state is AgentState.PROCESSING:
            action = next_action(data)
            if action is None:
                data["answer"] = compose_answer(data)
                await step(StateTransition.COMPLETE, {})
            else:
                data["pending"] = action
                await step(
                    StateTransition.CALL_TOOL,
                    {"call_id": action["call_id"], "tool": action["tool"], "args": action["args"]},
                )
        elif state is AgentState.TOOL_CALL:
            pending = data["pending"]
            if pending["call_id"] not in data["results"]:
                result = tools.invoke(pending["call_id"], pending["tool"], pending["args"])
                absorb(data, pending, result)
            del data["pending"]
            # the result and the transition out of TOOL_CALL are ONE append
            await step(
                StateTransition.RECEIVE_RESULT,
                {"call_id": pending["call_id"], "tool": pending["tool"]},
            )
        else:
            raise ConfigurationError(f"demo agent is in unexpected state {state}")
