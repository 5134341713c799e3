"""``python -m statekeeper.demo``: the demo's worker process (started by
``statekeeper demo``; see :mod:`statekeeper.demo.worker`)."""

import sys

from ..errors import StatekeeperError
from .worker import worker_main

if __name__ == "__main__":  # pragma: no cover - exercised through subprocesses
    try:
        sys.exit(worker_main())
    except StatekeeperError as exc:
        sys.stderr.write(f"worker error: {exc}\n")
        sys.exit(2)
