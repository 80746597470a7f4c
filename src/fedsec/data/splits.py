"""Federated splits of one labelled test set into parties.

* :func:`iid_split` -- samples assigned uniformly at random (Baykara et al. and Sun et al. "IID").
* :func:`score_sorted_split` -- Sun et al. "Non-IID": samples with similar prediction scores go
  to the same party (contiguous blocks of the score order).
* :func:`dirichlet_label_split` -- label skew: each class is spread over the parties with
  proportions drawn from ``Dirichlet(alpha)`` (small ``alpha``: strong skew).
* :func:`dirichlet_train_test_split` -- Zheng et al.'s federation: one Dirichlet draw per label
  splits both the training and the test samples over the clients.

All return a list of index arrays that partition ``range(n)``. Randomness here simulates data
and may use seeded numpy generators; it protects nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec._validation import check_int, check_labels_scores, check_real

__all__ = [
    "iid_split",
    "score_sorted_split",
    "dirichlet_label_split",
    "dirichlet_label_proportions",
    "split_by_proportions",
    "dirichlet_train_test_split",
    "apply_split",
]

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
    """Sun et al.'s non-IID split: sort by score and cut into ``n_parties`` contiguous blocks."""
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


def dirichlet_label_proportions(
    n_classes: int, n_parties: int, *, alpha: float = 0.5, seed: Seed = None,
) -> NDArray[np.float64]:
    """Per-class party proportions, row ``c`` drawn from ``Dirichlet(alpha, ..., alpha)``.

    Returns an ``(n_classes, n_parties)`` matrix whose rows sum to 1 (Zheng et al. follows
    Yurochkin et al.: every label is allocated to the clients by its own Dirichlet draw).
    """
    c = check_int(n_classes, "n_classes", "dirichlet_label_proportions", min_value=1)
    k = check_int(n_parties, "n_parties", "dirichlet_label_proportions", min_value=1)
    a = check_real(alpha, "alpha", "dirichlet_label_proportions", gt=0.0)
    return _rng(seed).dirichlet(np.full(k, a), size=c)


def split_by_proportions(
    y_true: Any, proportions: NDArray[np.float64], *, seed: Seed = None,
) -> list[IntArray]:
    """Split samples so that party ``j`` gets the share ``proportions[c, j]`` of class ``c``.

    ``y_true`` must hold labels ``0 .. n_classes - 1``. Returns one sorted index array per
    party (a partition of ``range(len(y_true))``).
    """
    y = np.asarray(y_true)
    p = np.asarray(proportions, dtype=np.float64)
    if y.ndim != 1 or p.ndim != 2:
        raise ValueError("split_by_proportions needs 1-D labels and a 2-D proportion matrix.")
    if y.size and (y.min() < 0 or y.max() >= p.shape[0]):
        raise ValueError(f"Labels must lie in 0..{p.shape[0] - 1} for these proportions.")
    rng = _rng(seed)
    parts: list[list[IntArray]] = [[] for _ in range(p.shape[1])]
    for c in range(p.shape[0]):
        idx = rng.permutation(np.flatnonzero(y == c)).astype(np.int64)
        cuts = np.floor(np.cumsum(p[c])[:-1] * idx.size).astype(np.int64)
        for j, chunk in enumerate(np.split(idx, cuts)):
            parts[j].append(chunk)
    return [np.sort(np.concatenate(q)) if q else np.zeros(0, np.int64) for q in parts]


def dirichlet_train_test_split(
    y_train: Any, y_test: Any, n_parties: int, *, alpha: float = 0.5, seed: Seed = None,
    min_train: int = 1, max_tries: int = 100,
) -> tuple[list[IntArray], list[IntArray]]:
    """Zheng et al.'s non-IID federation: the same per-label Dirichlet proportions split the
    training and the test samples over ``n_parties`` clients.

    Proportions are redrawn (at most ``max_tries`` times) until every client has at least
    ``min_train`` training samples, as is usual, since FedAvg weights clients by data size.
    """
    ytr, yte = np.asarray(y_train), np.asarray(y_test)
    k = check_int(n_parties, "n_parties", "dirichlet_train_test_split", min_value=1)
    check_int(min_train, "min_train", "dirichlet_train_test_split", min_value=0)
    rng = _rng(seed)
    n_classes = int(max(ytr.max(initial=0), yte.max(initial=0))) + 1
    for _ in range(max_tries):
        props = dirichlet_label_proportions(n_classes, k, alpha=alpha, seed=rng)
        train = split_by_proportions(ytr, props, seed=rng)
        if min(len(t) for t in train) >= min_train:
            return train, split_by_proportions(yte, props, seed=rng)
    raise ValueError(f"No Dirichlet({alpha}) split gave every one of {k} clients at least "
                     f"{min_train} training samples in {max_tries} tries.")
