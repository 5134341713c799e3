"""How often :mod:`.rekey` tries a rewrite that another writer's change refused
(``ConflictError``: an append meanwhile, another rewrite's claim on an S3 stream), and
how long it waits between tries; shared by its batch and final commits."""

from __future__ import annotations

import asyncio

#: a refused rewrite (a batch, or the stream's final one with its head tag) is tried this
#: many times in all; then the rekey of the stream gives up with the ``ConflictError``
#: naming the agent (a stream under constant writes, or one an S3 rewrite's claim holds
#: until ``rewrite_claim_timeout``: ~4 s of pauses in all, then the caller decides)
TRIES = 200


async def backoff(attempt: int) -> None:
    """The pause after the rewrite refused at try ``attempt`` (from 0): 0.5 ms more
    after each, at most 20 ms."""
    await asyncio.sleep(min(0.0005 * attempt, 0.02))
