"""The seed's mathematical foundations, computed from a store's recorded history.

* :mod:`.markov` — the state transition probability matrix ``P_ij = N_ij / N_i`` with
  counts, Wilson confidence intervals and the stationary distribution;
* :mod:`.entropy` — Shannon entropy of a state distribution, of each state's outgoing
  transitions, and the chain's entropy rate;
* :mod:`.checkpoint` — the optimal checkpoint (snapshot) interval from Young's and
  Daly's formulas;
* :mod:`.history` — reading transitions out of a store's event streams;
* :mod:`.recovery` — measured and predicted recovery time (RTO);
* :mod:`.consistency` — the state consistency score.
"""

from .checkpoint import (
    daly_interval,
    daly_wall_time,
    optimal_snapshot_interval,
    young_interval,
    young_overhead,
)
from .entropy import entropy, entropy_rate, normalized_entropy
from .markov import TransitionMatrix, estimate

__all__ = [
    "TransitionMatrix",
    "daly_interval",
    "daly_wall_time",
    "entropy",
    "entropy_rate",
    "estimate",
    "normalized_entropy",
    "optimal_snapshot_interval",
    "young_interval",
    "young_overhead",
]
