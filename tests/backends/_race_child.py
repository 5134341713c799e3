"""Child process for the two-process race test: compare-and-append on a shared file.

Usage: python _race_child.py DB NAME ROUNDS. Prints ``ready``, waits for a line on
stdin (the start signal, so all processes race from the same moment), opens the file
(possibly creating it, while the others do the same), tries to append seq 1..ROUNDS to
agent ``race`` and prints a JSON list of the seqs it won.
"""

from __future__ import annotations

import asyncio
import json
import sys

from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.errors import ConflictError
from statekeeper.records import AppendRequest, RawEvent


async def main(path: str, name: str, rounds: int) -> None:
    print("ready", flush=True)
    sys.stdin.readline()
    backend = SQLiteBackend(path)
    won = []
    for seq in range(1, rounds + 1):
        body = f"{name}-{seq}".encode()
        request = AppendRequest("race", seq - 1, (RawEvent(seq, "patch", 0.0, body, b"x"),))
        try:
            await backend.append(request)
            won.append(seq)
        except ConflictError as exc:
            if exc.current_seq < seq:
                raise SystemExit(f"conflict with an older head {exc.current_seq} at {seq}") from exc
    await backend.close()
    print(json.dumps(won), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
