"""Plaintext ROC statistics: decision points, confusion counts, trapezoid AUC.

This module is the reference every secure protocol is tested against. It holds no
cryptography.

Conventions (seed 000, Sec. II-B): decision points are sorted in decreasing order
``theta_0 > theta_1 > ... > theta_{N-1}``; a sample counts as predicted positive at
``theta_n`` when ``score >= theta_n``. ``TP[n]`` and ``FP[n]`` are therefore
non-decreasing in ``n``, and when the last point is ``<= min(score)`` (always true for the
default uniform points, whose last point is 0) ``TP[N-1]`` and ``FP[N-1]`` are the class
totals.

The trapezoid rule (seed 000, Eq. 3) is applied to the points
``(FP[n]/FP[N-1], TP[n]/TP[N-1])`` preceded by the origin ``(0, 0)``. The paper's sum
starts at ``n = 1``; adding the origin segment makes the curve start where scikit-learn's
does, so that with every distinct score among the points the result equals
``sklearn.metrics.roc_auc_score``. With the paper's uniform points the origin segment is
non-zero only when some negative sample scores exactly ``theta_0 = 1``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec._validation import check_int, check_labels_scores
from fedsec.errors import UndefinedMetricError

__all__ = [
    "uniform_decision_points",
    "as_decision_points",
    "confusion_counts",
    "trapezoid_terms",
    "class_totals_from_terms",
    "trapezoid_auc_from_counts",
    "trapezoid_auc",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


def uniform_decision_points(n_points: int) -> FloatArray:
    """The papers' ``N`` uniform decision points ``theta_n = 1 - n/(N-1)``.

    Parameters
    ----------
    n_points : int
        ``N >= 2``.

    Returns
    -------
    ndarray of shape (N,)
        Decreasing from 1.0 to 0.0.
    """
    n = check_int(n_points, "n_points", "uniform_decision_points", min_value=2)
    return 1.0 - np.arange(n, dtype=np.float64) / (n - 1)


def as_decision_points(points: Any, *, max_points: int | None = None) -> FloatArray:
    """Validate decision points: an int ``N`` (uniform points) or custom thresholds.

    Custom thresholds must be finite numbers in ``[0, 1]``; they are de-duplicated and sorted
    in decreasing order. If the smallest is above 0, 0.0 is appended so that the last point
    counts every sample as positive and the curve ends at ``(1, 1)``. ``max_points`` bounds
    ``N`` before anything is allocated.
    """
    if isinstance(points, (bool, np.bool_)):
        raise TypeError("The 'decision_points' parameter must be an int or a sequence of "
                        "numbers. Got bool instead.")
    if isinstance(points, (int, np.integer)):
        if max_points is not None and int(points) > max_points:
            raise ValueError(f"The 'decision_points' parameter must be <= {max_points}. "
                             f"Got {int(points)} instead.")
        return uniform_decision_points(int(points))
    if max_points is not None and hasattr(points, "__len__") and len(points) > max_points:
        raise ValueError(f"At most {max_points} decision points are supported. Got "
                         f"{len(points)} instead.")
    try:
        arr = np.asarray(points, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        raise TypeError(
            "The 'decision_points' parameter must be an int or a sequence of numbers. "
            f"Got {type(points).__name__} instead."
        ) from None
    if arr.size == 0:
        raise ValueError("The 'decision_points' parameter must not be empty.")
    if not np.all(np.isfinite(arr)) or arr.min() < 0.0 or arr.max() > 1.0:
        raise ValueError("Custom decision points must be finite numbers in [0, 1].")
    arr = np.unique(arr)[::-1].copy()
    if arr[-1] > 0.0:
        arr = np.append(arr, 0.0)
    if arr.size < 2:
        raise ValueError("At least 2 distinct decision points are needed.")
    return arr


def confusion_counts(
    y_true: Any, y_score: Any, points: Any
) -> tuple[IntArray, IntArray]:
    """True- and false-positive counts at every decision point, in O((n + N) log n).

    Parameters
    ----------
    y_true : array-like of shape (n,)
        Labels in {0, 1}.
    y_score : array-like of shape (n,)
        Scores in [0, 1].
    points : int or array-like
        See :func:`as_decision_points`.

    Returns
    -------
    tp, fp : ndarray of shape (N,)
        ``tp[n] = #{i : y_i = 1, s_i >= theta_n}``, likewise ``fp`` for ``y_i = 0``.
    """
    y, s = check_labels_scores(y_true, y_score, "confusion_counts")
    theta = as_decision_points(points)
    pos = np.sort(s[y == 1])
    neg = np.sort(s[y == 0])
    # number of scores >= theta = len - number of scores < theta
    tp = pos.size - np.searchsorted(pos, theta, side="left")
    fp = neg.size - np.searchsorted(neg, theta, side="left")
    return tp.astype(np.int64), fp.astype(np.int64)


def trapezoid_terms(tp: Any, fp: Any) -> tuple[IntArray, IntArray]:
    """Per-point terms of the trapezoid sum, with the origin prepended.

    ``T[n] = TP[n] + TP[n-1]`` and ``F[n] = FP[n] - FP[n-1]`` for ``n = 0..N-1`` with
    ``TP[-1] = FP[-1] = 0`` (seed 000, Sec. IV-C step 3). Then
    ``AUC = sum(T * F) / (2 * TP[N-1] * FP[N-1])``.
    """
    tp_a = np.asarray(tp, dtype=np.int64)
    fp_a = np.asarray(fp, dtype=np.int64)
    if tp_a.ndim != 1 or tp_a.shape != fp_a.shape:
        raise ValueError("tp and fp must be 1-D arrays of the same length.")
    tp_prev = np.concatenate(([0], tp_a[:-1]))
    fp_prev = np.concatenate(([0], fp_a[:-1]))
    return tp_a + tp_prev, fp_a - fp_prev


def class_totals_from_terms(t: Any, f: Any) -> tuple[int, int]:
    """Recover ``(positives, negatives)`` from the trapezoid terms alone.

    ``sum(F) = FP[N-1]`` telescopes, and so does the alternating sum
    ``sum_n (-1)**(N-1-n) * T[n] = TP[N-1]`` because ``TP[-1] = 0``. The secure protocols
    use these identities to get the denominator without sending the totals separately.
    """
    t_a = np.asarray(t, dtype=np.int64)
    f_a = np.asarray(f, dtype=np.int64)
    n = t_a.size
    signs = np.where((n - 1 - np.arange(n)) % 2 == 0, 1, -1)
    return int((signs * t_a).sum()), int(f_a.sum())


def trapezoid_auc_from_counts(tp: Any, fp: Any) -> float:
    """Trapezoid AUC from per-point counts (seed 000, Eq. 3, with the origin segment).

    Raises
    ------
    UndefinedMetricError
        If either class is absent (``TP[N-1] == 0`` or ``FP[N-1] == 0``).
    """
    t, f = trapezoid_terms(tp, fp)
    pos, neg = int(np.asarray(tp)[-1]), int(np.asarray(fp)[-1])
    if pos == 0 or neg == 0:
        raise UndefinedMetricError(
            "AUC is undefined when only one class is present "
            f"(positives={pos}, negatives={neg})."
        )
    num = int((t * f).sum())
    return num / (2 * pos * neg)


def trapezoid_auc(y_true: Any, y_score: Any, points: Any = 100) -> float:
    """Trapezoid AUC of one data set over the given decision points.

    Examples
    --------
    >>> trapezoid_auc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8], points=[0.8, 0.4, 0.35, 0.1])
    0.75
    """
    tp, fp = confusion_counts(y_true, y_score, points)
    return trapezoid_auc_from_counts(tp, fp)
