"""CPU per replayed event of ``Codec.decode_chain(..., appends=True)``, the run decoded in
one pass (``decoding._append_run``) against record by record (the same call with the
batched path switched off), alternated in one process: a chat of ~300-character
messages, 99 events past a snapshot (``snapshot_every=100``, 199 saves). Best of 7 × 300
calls, ``time.thread_time``.

Run::

    .venv/bin/python benchmarks/bench_append_run.py
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import make_messages
from statekeeper import StateStore
from statekeeper.codec import decoding


def per_event(fn: Any, events: int) -> float:
    """Microseconds per event, the best of 7 runs of 300 calls."""
    runs = timeit.repeat(fn, number=300, repeat=7, timer=time.thread_time)
    return min(runs) / 300 / events * 1e6


async def main() -> None:
    msgs = make_messages(200, seed=7, chars=300)
    with tempfile.TemporaryDirectory() as d:
        url = f"sqlite:///{d}/r.db"
        async with StateStore(url, snapshot_every=100, witness=False) as st:
            for i in range(199):
                await st.save("a", {"messages": msgs[: i + 1]})
        async with StateStore(url, cache_size=0, witness=False) as st:
            _, _, snap, rows = await st.backend.read_state_rows("a")
            assert snap is not None
            _, opened = st._reads.open_snapshot("a", snap)
            codec = st.codec

            def decode() -> Any:
                return codec.decode_chain("a", rows, opened.prev, appends=True)

            docs, _, _, error = decode()
            assert error is None and len(docs) == 99, (error, len(docs))
            batched = decoding._append_run
            try:
                for _ in range(3):
                    decoding._append_run = batched
                    one_pass = per_event(decode, len(rows))
                    decoding._append_run = lambda *_: None
                    by_record = per_event(decode, len(rows))
                    print(f"one pass {one_pass:.3f} us/event, record by record {by_record:.3f}")
            finally:
                decoding._append_run = batched


if __name__ == "__main__":
    asyncio.run(main())
