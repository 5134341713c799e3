"""Child process of the crash test: runs the parallel graph on a statekeeper saver.

Usage: ``python _lg_crash_child.py URL THREAD LOG BLOCK_FILE``. The ``slow`` node blocks
while BLOCK_FILE exists, so the parent can SIGKILL this process mid-superstep, after
``fast`` finished and its writes were saved.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _lg_graphs import parallel_graph  # type: ignore[import-not-found]  # run as a script

from statekeeper.integrations.langgraph import StatekeeperSaver


def main() -> None:
    url, thread, log_path, block = sys.argv[1:5]
    saver = StatekeeperSaver.from_url(url)
    graph = parallel_graph(log_path, block).compile(checkpointer=saver)
    graph.invoke({"notes": []}, {"configurable": {"thread_id": thread}}, durability="sync")
    saver.close()


if __name__ == "__main__":
    main()
