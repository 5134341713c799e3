"""Child process of the lean-append crash test: ``put``s checkpoints on one thread
forever, printing each acknowledged checkpoint's id and how the store's lean keyed
append (``Backend.commit_keyed``) answered it — ``lean``, or why it declined
(``tests/lean_declines.py``, spaces as ``_``) — until the parent SIGKILLs it.

Usage: ``python _lg_lean_crash_child.py URL THREAD``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from langgraph.checkpoint.base import empty_checkpoint

from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.integrations.langgraph import StatekeeperSaver
from tests.lean_declines import recording


def main() -> None:
    url, thread = sys.argv[1:3]
    outcomes: list[str] = []
    SQLiteBackend.commit_keyed = recording(outcomes)  # type: ignore[method-assign]
    saver = StatekeeperSaver.from_url(url)
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    step = 0
    while True:
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"n": step, "text": "x" * (step % 50)}
        checkpoint["channel_versions"] = {"n": step + 1, "text": step + 1}
        config = saver.put(
            config, checkpoint, {"source": "loop", "step": step, "parents": {}}, {"n": step + 1}
        )
        outcome = outcomes.pop() if outcomes else "none"  # (none: it never came there)
        assert not outcomes
        print(config["configurable"]["checkpoint_id"], outcome.replace(" ", "_"), flush=True)
        step += 1


if __name__ == "__main__":
    main()
