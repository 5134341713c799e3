"""The crash/recover demo: a deterministic research agent that is SIGKILLed mid-run.

Three pieces live here, all free of rich/typer so that the worker process starts fast:

* **The agent.** A research agent (no LLM) answers "which archived city is the most
  densely populated, and by how much does it exceed the average?". Its planner
  (:func:`next_action`) is a pure function of the agent's durable data document, so a
  process that reloads the data continues with exactly the call the dead one would
  have made next. Its tools do real work on a small on-disk corpus: ``search`` (BM25
  over the files), ``fetch`` (read + SHA-256) and ``calculator`` (an ``ast``-checked
  arithmetic evaluator).
* **The worker** (``python -m statekeeper.demo …``): runs the agent against a
  SQLite store and prints one JSON line per committed event, so the parent knows how
  far it got.
* **The orchestration** (:func:`run_demo`): starts the worker, SIGKILLs it right after
  it reports a chosen seq, reopens the store in this process (timed: that is the
  recovery time), finishes the agent, and checks from the tools' own fsynced log that
  every tool call executed exactly once.

Why a completed call is never repeated: the tool result is written into ``data`` in
the *same* append as the ``receive_result`` transition out of ``TOOL_CALL``; after a
crash the planner sees the result and moves on. A call that was *in flight* when the
process died (its ``call_tool`` intent is stored, its result is not) has to be invoked
again — no store can know whether an outside effect happened — so it is re-invoked
with the same ``call_id``, which the tools honour as an idempotency key, like a
payment API does. The demo reports such a call as "replayed", never as executed twice.

The pieces: :mod:`.tools` (corpus and tools), :mod:`.agent` (planner and ``drive``),
:mod:`.worker` (the worker process) and :mod:`.run` (the orchestration). The CLI's
``statekeeper demo`` only wires :func:`run_demo` to options and renders its result.
"""

from .agent import drive, next_action
from .constants import DEFAULT_DB, FIRST_RESULT_SEQ, TOTAL_EVENTS, DemoFailed
from .run import DemoResult, run_demo
from .tools import ToolBox

__all__ = [
    "DEFAULT_DB",
    "FIRST_RESULT_SEQ",
    "TOTAL_EVENTS",
    "DemoFailed",
    "DemoResult",
    "ToolBox",
    "drive",
    "next_action",
    "run_demo",
]
