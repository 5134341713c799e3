"""The synthetic agent workload every benchmark shares: chat messages of a fixed size,
deterministic per seed, and the percentile used to report latencies.

``statekeeper bench`` (:mod:`statekeeper.bench.seed`) and the scripts in
``benchmarks/`` draw their states from here, so their numbers describe one workload.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

__all__ = ["CHAT_WORDS", "chat_message", "make_messages", "percentile"]

#: the vocabulary of the synthetic chat messages
CHAT_WORDS: tuple[str, ...] = (
    "the",
    "agent",
    "plans",
    "a",
    "step",
    "calls",
    "a",
    "tool",
    "reads",
    "the",
    "result",
    "and",
    "then",
    "writes",
    "a",
    "short",
    "summary",
    "of",
    "what",
    "it",
    "found",
    "so",
    "far",
    "before",
    "it",
    "asks",
    "the",
    "user",
    "whether",
    "to",
    "continue",
    "with",
    "the",
    "search",
    "or",
    "stop",
    "here",
    "because",
    "the",
    "budget",
    "for",
    "this",
    "task",
    "is",
    "nearly",
    "spent",
)


def chat_message(rng: random.Random, i: int, chars: int = 200) -> dict[str, str]:
    """Message ``i`` of a chat (user and assistant alternate): ~``chars`` characters of
    words drawn with ``rng``."""
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < chars:
        words.append(rng.choice(CHAT_WORDS))
    return {"role": "user" if i % 2 == 0 else "assistant", "content": " ".join(words)[:chars]}


def make_messages(n: int, seed: int, chars: int = 200) -> list[dict[str, str]]:
    """``n`` chat messages of ~``chars`` characters, deterministic per seed."""
    rng = random.Random(seed)
    return [chat_message(rng, i, chars) for i in range(n)]


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of unsorted values (NaN when empty)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[k]
