"""Benchmark harness: the shared workload and the seed's performance table.

* :mod:`.workload`: the synthetic chat messages and the percentile every benchmark uses
  (``benchmarks/`` imports them from here).
* :mod:`.seed`: :func:`run_bench`, the seed article's storage-strategy table measured on
  this machine. ``statekeeper bench`` wires it to options and renders the rows.
"""

from .seed import SEED_CLAIMS, STRATEGIES, BenchRow, run_bench
from .workload import CHAT_WORDS, chat_message, make_messages, percentile

__all__ = [
    "CHAT_WORDS",
    "SEED_CLAIMS",
    "STRATEGIES",
    "BenchRow",
    "chat_message",
    "make_messages",
    "percentile",
    "run_bench",
]
