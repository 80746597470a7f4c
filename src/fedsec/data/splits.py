"""Federated splits of one labelled test set into parties.

* :func:`iid_split` -- samples assigned uniformly at random (seed 000 and seed 003 "IID").
* :func:`score_sorted_split` -- seed 003 "Non-IID": samples with similar prediction scores go
  to the same party (contiguous blocks of the score order).
* :func:`dirichlet_label_split` -- label skew: each class is spread over the parties with
  proportions drawn from ``Dirichlet(alpha)`` (small ``alpha``: strong skew).

All return a list of index arrays that partition ``range(n)``. Randomness here simulates data
and may use seeded numpy generators; it protects nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec._validation import check_int, check_labels_scores, check_real

__all__ = ["iid_split", "score_sorted_split", "dirichlet_label_split", "apply_split"]

IntArray = NDArray[np.int64]
Seed = int | np.random.Generator | None


def _rng(seed: Seed) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed)


def iid_split(n_samples: int, n_parties: int, *, seed: Seed = None) -> list[IntArray]:
    """Shuffle ``range(n_samples)`` and cut it into ``n_parties`` near-equal parts.

    Parameters
    ----------
    n_samples : int
    n_parties : int
        ``1 <= n_parties <= n_samples``.
    seed : int or numpy.random.Generator, optional
    """
    n = check_int(n_samples, "n_samples", "iid_split", min_value=1)
    k = check_int(n_parties, "n_parties", "iid_split", min_value=1, max_value=n)
    perm = _rng(seed).permutation(n).astype(np.int64)
    return [np.sort(p) for p in np.array_split(perm, k)]


def score_sorted_split(y_score: Any, n_parties: int) -> list[IntArray]:
    """Seed 003's non-IID split: sort by score and cut into ``n_parties`` contiguous blocks."""
    s = np.asarray(y_score, dtype=np.float64)
    if s.ndim != 1 or s.size == 0:
        raise ValueError("y_score of score_sorted_split must be a non-empty 1-D array.")
    k = check_int(n_parties, "n_parties", "score_sorted_split", min_value=1, max_value=s.size)
    order = np.argsort(s, kind="stable").astype(np.int64)
    return list(np.array_split(order, k))


def dirichlet_label_split(
    y_true: Any, n_parties: int, *, alpha: float = 0.5, seed: Seed = None,
) -> list[IntArray]:
    """Label-skewed split: class ``c`` goes to the parties in proportions ``~ Dir(alpha)``.

    Parties may end up with a single class or (for tiny data) no samples at all; DPAUC does
    not mind, the global federation must still hold both classes.

    Parameters
    ----------
    y_true : array-like of shape (n,)
    n_parties : int
    alpha : float, default=0.5
        Dirichlet concentration, ``> 0``.
    seed : int or numpy.random.Generator, optional
    """
    y = np.asarray(y_true)
    if y.ndim != 1 or y.size == 0:
        raise ValueError("y_true of dirichlet_label_split must be a non-empty 1-D array.")
    k = check_int(n_parties, "n_parties", "dirichlet_label_split", min_value=1)
    a = check_real(alpha, "alpha", "dirichlet_label_split", gt=0.0)
    rng = _rng(seed)
    parts: list[list[IntArray]] = [[] for _ in range(k)]
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c)).astype(np.int64)
        props = rng.dirichlet(np.full(k, a))
        cuts = np.floor(np.cumsum(props)[:-1] * idx.size).astype(np.int64)
        for j, chunk in enumerate(np.split(idx, cuts)):
            parts[j].append(chunk)
    return [np.sort(np.concatenate(p)) for p in parts]


def apply_split(
    y_true: Any, y_score: Any, split: list[IntArray]
) -> list[tuple[NDArray[np.int64], NDArray[np.float64]]]:
    """Materialise ``(y_true, y_score)`` per party from index arrays."""
    y, s = check_labels_scores(y_true, y_score, "apply_split")
    return [(y[i], s[i]) for i in split]
