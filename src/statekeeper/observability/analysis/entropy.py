"""Shannon entropy of state distributions and of a Markov chain.

``H(p) = -Σ p_i log2 p_i`` bits (0 log 0 = 0), between 0 (one state) and ``log2 k``
(k equally likely states); :func:`normalized_entropy` divides by ``log2 k``. The
entropy rate of a chain is ``H = -Σ_i π_i Σ_j P_ij log2 P_ij``: the uncertainty of the
next state given the current one, averaged over the stationary distribution π.

>>> entropy([0.5, 0.5])
1.0
>>> entropy([1.0, 0.0])
0.0
>>> round(normalized_entropy([0.25, 0.25, 0.25, 0.25]), 12)
1.0
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from ...errors import InvalidArgument

__all__ = ["entropy", "entropy_rate", "normalized_entropy"]


def _probabilities(values: Iterable[float] | Mapping[str, float]) -> list[float]:
    probs = list(values.values() if isinstance(values, Mapping) else values)
    for p in probs:
        if isinstance(p, bool) or not isinstance(p, int | float) or not 0 <= p <= 1 + 1e-9:
            raise InvalidArgument("distribution", f"a probability must be in [0, 1], not {p!r}")
    total = sum(probs)
    if probs and abs(total - 1.0) > 1e-6:
        raise InvalidArgument("distribution", f"probabilities must sum to 1, not {total!r}")
    return probs


def entropy(distribution: Iterable[float] | Mapping[str, float]) -> float:
    """Shannon entropy in bits of a probability distribution (0.0 for an empty one)."""
    h = -sum(p * math.log2(p) for p in _probabilities(distribution) if p > 0)
    return h + 0.0  # no -0.0


def normalized_entropy(distribution: Iterable[float] | Mapping[str, float]) -> float:
    """Entropy divided by its maximum ``log2 k`` (k = number of states): 0..1; 0.0 when
    there are fewer than two states."""
    probs = _probabilities(distribution)
    if len(probs) < 2:
        return 0.0
    return entropy(probs) / math.log2(len(probs))


def entropy_rate(stationary: Sequence[float], matrix: Sequence[Sequence[float]]) -> float:
    """``-Σ_i π_i Σ_j P_ij log2 P_ij`` bits per step."""
    if len(stationary) != len(matrix):
        raise InvalidArgument("stationary", "one stationary probability per row of the matrix")
    return sum(pi * entropy(row) for pi, row in zip(stationary, matrix, strict=True)) + 0.0
