"""Attacks that show what the DPAUC baselines leak.

* :func:`estimate_party_counts` -- the count-leakage attack of Baykara et al. (FHAUC) (App. B.2): a
  semi-honest aggregator reads one party's DPAUC submission. Because ``TP + FN`` is the
  party's number of positives and ``FP + TN`` its number of negatives at *every* decision
  point, averaging the ``N`` noisy sums estimates both class sizes (and the total) with an
  error that depends only on ``epsilon`` and ``N`` -- never on how much data the party has.
  For randomized response the statistics are exact counts of flipped labels: the total is
  revealed exactly and the class sizes up to the randomized-response noise.
* :func:`exposed_score_histogram` -- exact per-point counts of DPAUC_RR reveal how many of a
  party's scores fall in each bin (Sun et al., "Utility and Privacy Analysis").
* :func:`topk_label_inference` -- the top-K attack of Sun et al. Table 2: guess that the K
  highest-scored samples are positive and measure precision and recall.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec._validation import check_int, check_labels_scores
from fedsec.auc.dpauc import (
    gaussian_sigma,
    laplace_scale,
    parse_submission,
    rr_flip_probability,
)

__all__ = [
    "CountEstimate",
    "estimate_party_counts",
    "count_leakage_std",
    "exposed_score_histogram",
    "TopKResult",
    "topk_label_inference",
]

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class CountEstimate:
    """The aggregator's estimates of one party's sample counts and their standard errors."""

    total: float
    positives: float
    negatives: float
    total_std: float
    positives_std: float
    negatives_std: float
    mechanism: str


def count_leakage_std(
    *, mechanism: str, epsilon: float, n_points: int, delta: float = 0.0,
    n_samples: int | None = None,
) -> tuple[float, float]:
    """Theoretical standard error ``(total, per class)`` of :func:`estimate_party_counts`.

    Laplace scale ``b = 4N/eps``: each noisy sum ``TP+FN`` has variance ``4 b**2``, and the
    mean of ``N`` of them ``4 b**2 / N``; the total adds two such sums. So the per-class error
    is ``2b/sqrt(N) = 8 sqrt(N)/eps`` and the total's ``sqrt(2)`` times that -- for
    ``eps = 1, N = 100``: 80 and 113 samples (Baykara et al. (FHAUC) Table 2 measured 80 and 110).
    Gaussian: ``sigma sqrt(2/N)`` and ``2 sigma / sqrt(N)``. Randomized response: the total
    is exact; the class estimate has ``sqrt(n rho (1-rho)) / (1 - 2 rho)`` (needs
    ``n_samples``).
    """
    n = check_int(n_points, "n_points", "count_leakage_std", min_value=1)
    if mechanism == "laplace":
        b = laplace_scale(epsilon=epsilon, n_points=n)
        cls = 2.0 * b / math.sqrt(n)
        return math.sqrt(2.0) * cls, cls
    if mechanism == "gaussian":
        sigma = gaussian_sigma(epsilon=epsilon, delta=delta, n_points=n)
        return 2.0 * sigma / math.sqrt(n), sigma * math.sqrt(2.0 / n)
    if mechanism == "rr":
        if n_samples is None:
            raise ValueError("count_leakage_std needs n_samples for mechanism='rr'.")
        rho = rr_flip_probability(epsilon)
        return 0.0, math.sqrt(n_samples * rho * (1 - rho)) / (1 - 2 * rho)
    raise ValueError(f"Unknown mechanism {mechanism!r}.")


def estimate_party_counts(submission: bytes) -> CountEstimate:
    """Estimate one party's total, positive and negative counts from its DPAUC message.

    This is all a semi-honest aggregator needs: the bytes the party sent.

    Parameters
    ----------
    submission : bytes
        A message produced by :class:`fedsec.auc.dpauc.DPAUCClient` or ``RRClient``.

    Returns
    -------
    CountEstimate
    """
    sub = parse_submission(submission)
    st = sub.stats
    n = st.points.size
    pos_obs = st.tp + st.fn
    neg_obs = st.fp + st.tn
    if sub.mechanism == "rr":
        total = float(np.mean(pos_obs + neg_obs))  # exact: every point gives the same value
        rho = rr_flip_probability(sub.epsilon)
        pos = (float(np.mean(pos_obs)) - rho * total) / (1.0 - 2.0 * rho)
        tot_std, cls_std = count_leakage_std(mechanism="rr", epsilon=sub.epsilon, n_points=n,
                                             n_samples=round(total))
        return CountEstimate(total, pos, total - pos, tot_std, cls_std, cls_std, "rr")
    pos = float(np.mean(pos_obs))
    neg = float(np.mean(neg_obs))
    tot_std, cls_std = count_leakage_std(mechanism=sub.mechanism, epsilon=sub.epsilon,
                                         n_points=n, delta=sub.delta)
    return CountEstimate(pos + neg, pos, neg, tot_std, cls_std, cls_std, sub.mechanism)


def exposed_score_histogram(submission: bytes) -> tuple[FloatArray, FloatArray]:
    """Number of a party's scores in each bin ``[theta_n, theta_{n-1})``, from its message.

    Exact for DPAUC_RR (integer counts; flipping labels does not hide scores); noisy for the
    Laplace and Gaussian mechanisms.

    Returns
    -------
    points : ndarray of shape (N,)
        Lower edge of each bin (the first bin is ``[theta_0, +inf)``).
    counts : ndarray of shape (N,)
    """
    sub = parse_submission(submission)
    predicted_pos = sub.stats.tp + sub.stats.fp
    counts = np.diff(np.concatenate(([0.0], predicted_pos)))
    return sub.stats.points.copy(), counts


@dataclass(frozen=True)
class TopKResult:
    """Outcome of guessing the top-``k`` scores as positive."""

    k: int
    true_positives: int
    precision: float
    recall: float


def topk_label_inference(y_true: Any, y_score: Any, ks: Iterable[int]) -> list[TopKResult]:
    """The top-K label-inference attack on exposed scores (Sun et al. Table 2).

    Ties at the K-th score are broken by sample order (a stable sort), which is what an
    attacker without further information would do.

    Parameters
    ----------
    y_true, y_score : array-like of shape (n,)
        True labels (used only to score the attack) and the exposed scores.
    ks : iterable of int
        Values of K, each in ``[1, n]``.
    """
    y, s = check_labels_scores(y_true, y_score, "topk_label_inference")
    n_pos = int(y.sum())
    order = np.argsort(-s, kind="stable")
    hits = np.cumsum(y[order])
    out: list[TopKResult] = []
    for k in ks:
        kk = check_int(k, "k", "topk_label_inference", min_value=1, max_value=y.size)
        tp = int(hits[kk - 1])
        out.append(TopKResult(kk, tp, tp / kk, tp / n_pos if n_pos else float("nan")))
    return out
