"""Run a benchmark with the store's snapshot policy changed, for same-minute A/Bs of a
policy against the default (issue 11).

``SK_SNAPSHOT_EVERY`` (``cost``, ``auto`` or a number) becomes the default of every
``StateStore`` the benchmark opens (one that names ``snapshot_every`` keeps its own);
``SK_EVENT_COST`` / ``SK_MIN_COST`` replace the replay-cost rule's constants
(:mod:`statekeeper.store.snapshots`). Then the script named runs as ``__main__``::

    SK_SNAPSHOT_EVERY=cost .venv/bin/python benchmarks/with_snapshot_policy.py \\
        benchmarks/bench_hotpath.py --quick
"""

from __future__ import annotations

import os
import runpy
import sys
from typing import Any

from statekeeper.store import snapshots
from statekeeper.store.store import StateStore

policy = os.environ.get("SK_SNAPSHOT_EVERY")
if policy is not None:
    every: Any = policy if policy in ("cost", "auto") else int(policy)
    original = StateStore.__init__

    def __init__(self: StateStore, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("snapshot_every", every)
        original(self, *args, **kwargs)

    StateStore.__init__ = __init__  # type: ignore[method-assign]
for name in ("EVENT_COST", "MIN_COST"):
    value = os.environ.get(f"SK_{name}")
    if value is not None:
        setattr(snapshots, name, int(value))

if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
    print(__doc__)
    sys.exit(0 if len(sys.argv) >= 2 else 2)
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
runpy.run_path(script, run_name="__main__")
