"""The state transition probability matrix of a population of agents.

From counts ``N_ij`` of observed moves from state i to state j, the maximum-likelihood
estimate is ``P_ij = N_ij / N_i`` (``N_i = Σ_j N_ij``). Each estimate comes with its
Wilson score interval (95 % by default), which stays inside [0, 1] and behaves for the
small counts young deployments have. A state that was entered but never left has no
row to estimate: it is treated as absorbing (``P_ii = 1``) and listed in
:attr:`TransitionMatrix.absorbing`.

The stationary distribution π (``πP = π``, ``Σπ = 1``) is unique when the chain is
irreducible (every state reaches every other); then it is solved exactly, and its
entropy rate is the chain's. Otherwise the limit of the Cesàro average of ``π₀Pⁿ``
from the uniform distribution is given (exactly: each closed class's own stationary
distribution, weighted by the mass that starts in it or is absorbed into it), with
``irreducible=False``; it too solves ``πP = π``.

>>> m = estimate([("idle", "busy"), ("busy", "idle"), ("busy", "busy")])
>>> m.states
('busy', 'idle')
>>> m.probability("busy", "idle"), m.probability("idle", "busy")
(0.5, 1.0)
>>> [round(p, 4) for p in m.stationary]
[0.6667, 0.3333]
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import InvalidArgument
from .entropy import entropy, entropy_rate

__all__ = ["TransitionMatrix", "estimate", "wilson_interval"]


def wilson_interval(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (``(0, 1)`` for no trials)."""
    if trials == 0:
        return 0.0, 1.0
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    # the interval holds p; at p = 0 or 1 the bound is exactly 0 or 1 (rounding in the
    # formula above can leave it a few ulps inside, e.g. 0.9999999999999999)
    return max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))


@dataclass(frozen=True, slots=True)
class TransitionMatrix:
    """``P`` over :attr:`states` (sorted), with its counts and confidence intervals."""

    states: tuple[str, ...]
    #: ``counts[i][j]``: observed moves from ``states[i]`` to ``states[j]``
    counts: tuple[tuple[int, ...], ...]
    #: ``matrix[i][j] = P_ij``; every row sums to 1
    matrix: tuple[tuple[float, ...], ...]
    #: ``intervals[i][j]``: the Wilson interval of ``P_ij`` (``(1, 1)`` on an absorbing row)
    intervals: tuple[tuple[tuple[float, float], ...], ...]
    #: states entered but never left (their rows are ``P_ii = 1``)
    absorbing: tuple[str, ...]
    #: the stationary distribution π, in :attr:`states` order
    stationary: tuple[float, ...]
    #: True when every state reaches every other (π is then unique)
    irreducible: bool

    def index(self, state: str) -> int:
        try:
            return self.states.index(state)
        except ValueError:
            raise InvalidArgument("state", f"{state!r} is not a state of this matrix") from None

    def probability(self, source: str, target: str) -> float:
        """``P(source → target)``."""
        return self.matrix[self.index(source)][self.index(target)]

    def count(self, source: str, target: str) -> int:
        return self.counts[self.index(source)][self.index(target)]

    def exits(self, state: str) -> int:
        """``N_i``: observed moves out of ``state``."""
        return sum(self.counts[self.index(state)])

    @property
    def transitions(self) -> int:
        """Every observed move."""
        return sum(map(sum, self.counts))

    def row_entropy(self, state: str) -> float:
        """Entropy (bits) of ``state``'s outgoing transitions: how predictable its next
        state is (0: always the same)."""
        return entropy(self.matrix[self.index(state)])

    @property
    def entropy_rate(self) -> float:
        """``-Σ π_i Σ_j P_ij log2 P_ij`` bits per transition."""
        return entropy_rate(self.stationary, self.matrix)

    @property
    def stationary_entropy(self) -> float:
        """Entropy (bits) of the stationary distribution."""
        return entropy(self.stationary)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (``statekeeper analyze --json``)."""
        return {
            "states": list(self.states),
            "transitions": self.transitions,
            "counts": [list(r) for r in self.counts],
            "matrix": [list(r) for r in self.matrix],
            "intervals": [[list(c) for c in r] for r in self.intervals],
            "absorbing": list(self.absorbing),
            "stationary": dict(zip(self.states, self.stationary, strict=True)),
            "irreducible": self.irreducible,
            "row_entropy": {s: self.row_entropy(s) for s in self.states},
            "entropy_rate": self.entropy_rate,
            "stationary_entropy": self.stationary_entropy,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TransitionMatrix:
        """The matrix :meth:`to_dict` made ``d`` of."""
        return cls(
            tuple(d["states"]),
            tuple(tuple(r) for r in d["counts"]),
            tuple(tuple(r) for r in d["matrix"]),
            tuple(tuple((c[0], c[1]) for c in r) for r in d["intervals"]),
            tuple(d["absorbing"]),
            tuple(d["stationary"][s] for s in d["states"]),
            d["irreducible"],
        )


def estimate(
    moves: Iterable[tuple[str, str]], *, states: Iterable[str] = (), z: float = 1.96
) -> TransitionMatrix:
    """Estimate P from observed ``(from_state, to_state)`` moves.

    ``states``: states to include even when never seen (their rows are absorbing).
    """
    tally: Counter[tuple[str, str]] = Counter()
    names = set(states)
    for move in moves:
        if not (isinstance(move, tuple) and len(move) == 2):
            raise InvalidArgument("moves", f"a move is a (from, to) pair, not {move!r}")
        a, b = move
        if not isinstance(a, str) or not isinstance(b, str):
            raise InvalidArgument("moves", f"states must be strings, not {move!r}")
        tally[a, b] += 1
        names.update((a, b))
    order = tuple(sorted(names))
    k = len(order)
    at = {s: i for i, s in enumerate(order)}
    counts = [[0] * k for _ in range(k)]
    for (a, b), n in tally.items():
        counts[at[a]][at[b]] = n
    matrix: list[list[float]] = []
    intervals: list[list[tuple[float, float]]] = []
    absorbing: list[str] = []
    for i, row in enumerate(counts):
        total = sum(row)
        if total == 0:
            absorbing.append(order[i])
            matrix.append([1.0 if j == i else 0.0 for j in range(k)])
            intervals.append([(1.0, 1.0) if j == i else (0.0, 0.0) for j in range(k)])
            continue
        matrix.append([n / total for n in row])
        intervals.append([wilson_interval(n, total, z) for n in row])
    irreducible = k > 0 and _irreducible(matrix)
    pi = _stationary(matrix, irreducible)
    return TransitionMatrix(
        order,
        tuple(tuple(r) for r in counts),
        tuple(tuple(r) for r in matrix),
        tuple(tuple(r) for r in intervals),
        tuple(absorbing),
        tuple(pi),
        irreducible,
    )


def _irreducible(matrix: Sequence[Sequence[float]]) -> bool:
    k = len(matrix)

    def reach(start: int, forward: bool) -> set[int]:
        seen, todo = {start}, [start]
        while todo:
            i = todo.pop()
            for j in range(k):
                edge = matrix[i][j] if forward else matrix[j][i]
                if edge > 0 and j not in seen:
                    seen.add(j)
                    todo.append(j)
        return seen

    return len(reach(0, True)) == k and len(reach(0, False)) == k


def _stationary(matrix: Sequence[Sequence[float]], irreducible: bool) -> list[float]:
    k = len(matrix)
    if k == 0:
        return []
    if irreducible:
        return _solve_stationary(matrix)
    return _cesaro_limit(matrix)


def _cesaro_limit(matrix: Sequence[Sequence[float]]) -> list[float]:
    """``lim (1/N) Σ π₀Pⁿ`` from the uniform π₀, exactly: the mass that starts in or
    ends up in each closed class (absorption probabilities from the transient states),
    spread over that class by its own stationary distribution. (Iterating a few
    thousand steps instead leaves the mass of a slow transient loop — a retry loop
    left once in a thousand turns — on its transient states.)"""
    k = len(matrix)
    reach = [_reach(matrix, i) for i in range(k)]
    closed: list[list[int]] = []
    placed: set[int] = set()
    for i in range(k):
        if i in placed:
            continue
        cls = sorted(j for j in reach[i] if i in reach[j])
        if all(reach[j] <= set(cls) for j in cls):  # nothing leaves it: recurrent
            closed.append(cls)
            placed.update(cls)
    transient = [i for i in range(k) if i not in placed]
    at = {s: n for n, s in enumerate(transient)}
    # absorption probabilities: (I - Q) X = R, Q = P on the transient states
    system = [
        [(1.0 if at[j] == n else 0.0) - matrix[i][j] for j in transient]
        + [sum(matrix[i][j] for j in cls) for cls in closed]
        for n, i in enumerate(transient)
    ]
    absorbed = _solve(system, len(transient))
    pi = [0.0] * k
    for c, cls in enumerate(closed):
        mass = (len(cls) + sum(row[c] for row in absorbed)) / k
        inner = _solve_stationary([[matrix[i][j] for j in cls] for i in cls])
        for j, p in zip(cls, inner, strict=True):
            pi[j] = mass * p
    s = sum(pi)
    return [p / s for p in pi]


def _reach(matrix: Sequence[Sequence[float]], start: int) -> set[int]:
    seen, todo = {start}, [start]
    while todo:
        i = todo.pop()
        for j, p in enumerate(matrix[i]):
            if p > 0 and j not in seen:
                seen.add(j)
                todo.append(j)
    return seen


def _solve(a: list[list[float]], n: int) -> list[list[float]]:
    """Solve the n×n system of the augmented rows ``a`` (its right-hand sides after
    column n) by Gauss-Jordan elimination with partial pivoting."""
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        a[col], a[pivot] = a[pivot], a[col]
        p = a[col][col]
        a[col] = [v / p for v in a[col]]
        for r in range(n):
            if r != col and a[r][col] != 0.0:
                f = a[r][col]
                a[r] = [v - f * w for v, w in zip(a[r], a[col], strict=True)]
    return [row[n:] for row in a]


def _solve_stationary(matrix: Sequence[Sequence[float]]) -> list[float]:
    """π with (Pᵀ − I)π = 0 and Σπ = 1, by Gaussian elimination (partial pivoting)."""
    k = len(matrix)
    a = [[matrix[j][i] - (1.0 if i == j else 0.0) for j in range(k)] + [0.0] for i in range(k)]
    a[-1] = [1.0] * k + [1.0]  # replace one (redundant) equation by the normalisation
    for col in range(k):
        pivot = max(range(col, k), key=lambda r: abs(a[r][col]))
        a[col], a[pivot] = a[pivot], a[col]
        p = a[col][col]
        if abs(p) < 1e-15:
            continue
        a[col] = [v / p for v in a[col]]
        for r in range(k):
            if r != col and a[r][col] != 0.0:
                f = a[r][col]
                a[r] = [v - f * w for v, w in zip(a[r], a[col], strict=True)]
    pi = [max(0.0, a[i][k]) for i in range(k)]
    s = sum(pi)
    return [p / s for p in pi]
