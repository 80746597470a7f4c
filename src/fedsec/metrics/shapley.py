"""Shapley-value arithmetic over utility tables indexed by bitmasks (plaintext reference).

A game of ``k`` players is a vector ``v`` of length ``2^k``: ``v[mask]`` is the utility of
the coalition whose members are the set bits of ``mask`` (``v[0]`` is the empty
coalition). The Shapley value of player ``i`` is

    φ_i = Σ_{S ⊆ N∖{i}} |S|! (k-|S|-1)! / k! · (v(S ∪ {i}) − v(S)),

so ``Σ_i φ_i = v(N) − v(∅)`` (efficiency). :func:`shapley_values` evaluates this sum for
all players in ``O(k 2^k)``.
"""

from __future__ import annotations

from math import factorial

import numpy as np
from numpy.typing import NDArray

__all__ = ["shapley_values", "shapley_weights", "popcounts", "MAX_PLAYERS"]

MAX_PLAYERS = 20


def popcounts(k: int) -> NDArray[np.int64]:
    """Number of set bits of every mask ``0 .. 2^k - 1``."""
    masks = np.arange(1 << k, dtype=np.int64)
    out = np.zeros(1 << k, dtype=np.int64)
    for j in range(k):
        out += (masks >> j) & 1
    return out


def shapley_weights(k: int) -> NDArray[np.float64]:
    """``w[s] = s! (k-s-1)! / k!`` for coalition sizes ``s = 0 .. k-1``."""
    return np.array([factorial(s) * factorial(k - s - 1) / factorial(k) for s in range(k)])


def shapley_values(utilities: NDArray[np.float64]) -> NDArray[np.float64]:
    """Exact Shapley values of the game ``utilities`` (length ``2^k``, ``k <= 20``)."""
    v = np.asarray(utilities, dtype=np.float64)
    size = v.shape[0] if v.ndim == 1 else -1
    k = int(size).bit_length() - 1
    if v.ndim != 1 or size < 1 or (1 << k) != size:
        raise ValueError("utilities must be a 1-D array of length 2^k.")
    if k > MAX_PLAYERS:
        raise ValueError(f"Exact Shapley values are limited to {MAX_PLAYERS} players.")
    if k == 0:
        return np.zeros(0)
    if not np.isfinite(v).all():
        raise ValueError("utilities must be finite.")
    masks = np.arange(size, dtype=np.int64)
    # weight by |S| (only masks without i are used, so |S| <= k-1; the full mask gets 0)
    w = np.append(shapley_weights(k), 0.0)[popcounts(k)]
    phi = np.empty(k)
    for i in range(k):
        without = masks[(masks >> i) & 1 == 0]
        phi[i] = float(np.sum(w[without] * (v[without | (1 << i)] - v[without])))
    return phi
