"""The demo's constants and its one error (shared by the agent, the worker and the run)."""

from __future__ import annotations

from ..errors import StatekeeperError

#: where the demo keeps its store unless ``--db`` says otherwise
DEFAULT_DB = "statekeeper-demo.db"
AGENT_PREFIX = "demo-research-"
QUESTION = (
    "Which city in the archive is the most densely populated, "
    "and by how much does it exceed the average density?"
)
SEARCH_QUERY = "city population area"
TOP_K = 4
#: events of one full run: created, start_processing, 2 per tool call (1 search,
#: TOP_K fetches, TOP_K densities, 1 average), complete
TOOL_CALLS = 1 + TOP_K + TOP_K + 1
TOTAL_EVENTS = 2 + 2 * TOOL_CALLS + 1
#: seq of the first ``receive_result``: the earliest kill that follows a completed call
FIRST_RESULT_SEQ = 4


class DemoFailed(StatekeeperError):
    """The demo could not run as designed (worker died early, timed out...)."""
