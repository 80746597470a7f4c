"""Plaintext ROC statistics: decision points, confusion counts, trapezoid AUC.

This module is the reference every secure protocol is tested against. It holds no
cryptography.

Conventions (Baykara et al., Sec. II-B): decision points are sorted in decreasing order
``theta_0 > theta_1 > ... > theta_{N-1}``; a sample counts as predicted positive at
``theta_n`` when ``score >= theta_n``. ``TP[n]`` and ``FP[n]`` are therefore
non-decreasing in ``n``, and when the last point is ``<= min(score)`` (always true for the
default uniform points, whose last point is 0) ``TP[N-1]`` and ``FP[N-1]`` are the class
totals.

The trapezoid rule (Baykara et al., Eq. 3) is applied to the points
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
    "bin_pair_counts",
    "single_value_bins",
    "trapezoid_error_bound_from_counts",
    "trapezoid_error_bound",
    "exact_auc",
    "transform_scores",
    "PROBABILITY_SLACK",
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
    ``TP[-1] = FP[-1] = 0`` (Baykara et al., Sec. IV-C step 3). Then
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
    """Trapezoid AUC from per-point counts (Baykara et al., Eq. 3, with the origin segment).

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


# ------------------------------------------------------------------ certified error bound
def single_value_bins(points: Any) -> NDArray[np.bool_]:
    """Bins that can hold one score value only: bin 0 ``[theta_0, inf)`` when ``theta_0 =
    1`` (scores are at most 1) and bin ``n`` when ``theta_{n-1}`` is the float right after
    ``theta_n``. Pairs in such a bin are exact ties: the trapezoid's 1/2 is exact for them,
    so they do not count towards the error bound."""
    theta = as_decision_points(points)
    out = np.zeros(theta.size, dtype=bool)
    out[0] = theta[0] >= 1.0
    out[1:] = np.nextafter(theta[1:], np.inf) >= theta[:-1]
    return out


def bin_pair_counts(tp: Any, fp: Any, points: Any = None) -> IntArray:
    """Per bin, the (positive, negative) pairs whose scores fall between the same two
    decision points: ``dTP[n] * dFP[n]`` with ``dTP[n] = TP[n] - TP[n-1]`` (bin ``n`` is
    ``[theta_n, theta_{n-1})``; bin 0 is ``[theta_0, inf)``). Given ``points``, bins of
    :func:`single_value_bins` count 0 (their pairs are exact ties).

    The trapezoid rule counts every such pair as 1/2, whatever the order of the two scores;
    every other pair it counts exactly as the exact AUC does."""
    tp_a = np.asarray(tp, dtype=np.int64)
    fp_a = np.asarray(fp, dtype=np.int64)
    out = np.diff(tp_a, prepend=0) * np.diff(fp_a, prepend=0)
    if points is not None:
        out[single_value_bins(points)] = 0
    return out


def trapezoid_error_bound_from_counts(tp: Any, fp: Any, points: Any = None) -> float:
    """Certified bound on ``|exact AUC - trapezoid AUC|``: ``sum_n dTP[n]*dFP[n] /
    (2*Pos*Neg)`` over the bins (excluding :func:`single_value_bins` given ``points``).

    Each pair within one bin contributes ``1/2`` to the trapezoid and ``0``, ``1/2`` or
    ``1`` to the exact AUC (which counts ties as 1/2, like scikit-learn), so the two differ
    by at most half the share of such pairs. The bound is 0 exactly when no bin holds both
    classes (up to exact ties), and then the trapezoid *is* the exact AUC.

    Raises
    ------
    UndefinedMetricError
        If either class is absent.
    """
    tp_a = np.asarray(tp, dtype=np.int64)
    fp_a = np.asarray(fp, dtype=np.int64)
    pos, neg = int(tp_a[-1]), int(fp_a[-1])
    if pos == 0 or neg == 0:
        raise UndefinedMetricError(
            "AUC is undefined when only one class is present "
            f"(positives={pos}, negatives={neg})."
        )
    return int(bin_pair_counts(tp_a, fp_a, points).sum()) / (2 * pos * neg)


def trapezoid_error_bound(y_true: Any, y_score: Any, points: Any = 100) -> float:
    """The certified bound of :func:`trapezoid_auc` over ``points`` (plaintext reference of
    what the secure protocols report as ``error_bound``).

    Examples
    --------
    >>> trapezoid_error_bound([0, 1, 0, 1], [0.1, 0.15, 0.6, 0.9], points=[1.0, 0.5, 0.0])
    0.25
    """
    tp, fp = confusion_counts(y_true, y_score, points)
    return trapezoid_error_bound_from_counts(tp, fp, points)


def exact_auc(y_true: Any, y_score: Any) -> float:
    """The exact ROC AUC (ties count 1/2), as ``sklearn.metrics.roc_auc_score``: the
    trapezoid over every distinct score. Scores here may be any finite numbers."""
    y = np.asarray(y_true)
    s = np.asarray(y_score, dtype=np.float64)
    if y.ndim != 1 or s.shape != y.shape or not np.all(np.isfinite(s)):
        raise ValueError("y_true and y_score must be 1-D, of equal length, with finite "
                         "scores.")
    pts = np.unique(s)[::-1]
    pos = np.sort(s[y == 1])
    neg = np.sort(s[y == 0])
    tp = pos.size - np.searchsorted(pos, pts, side="left")
    fp = neg.size - np.searchsorted(neg, pts, side="left")
    return trapezoid_auc_from_counts(tp, fp)


# ------------------------------------------------------------------ real-valued scores
#: How far outside [0, 1] a ``"probability"`` score may fall (float rounding in a model's
#: softmax or calibration) and still be accepted (clipped).
PROBABILITY_SLACK = 1e-6
_SCORE_KINDS = ("probability", "logit", "range:LO:HI")


def _parse_scores(scores: Any) -> tuple[str, float, float]:
    if not isinstance(scores, str):
        raise TypeError("The 'scores' parameter must be a str among 'probability', 'logit' "
                        f"or 'range:LO:HI'. Got {type(scores).__name__} instead.")
    if scores in ("probability", "logit"):
        return scores, 0.0, 1.0
    if scores.startswith("range:"):
        parts = scores.split(":")
        try:
            if len(parts) != 3:
                raise ValueError
            lo, hi = float(parts[1]), float(parts[2])
        except ValueError:
            raise ValueError("The 'scores' parameter must be 'range:LO:HI' with two numbers "
                             f"LO < HI. Got {scores!r} instead.") from None
        if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
            raise ValueError("The 'scores' parameter must be 'range:LO:HI' with finite LO < "
                             f"HI. Got {scores!r} instead.")
        return "range", lo, hi
    raise ValueError("The 'scores' parameter must be 'probability', 'logit' or "
                     f"'range:LO:HI'. Got {scores!r} instead.")


def transform_scores(values: Any, scores: str = "probability") -> FloatArray:
    """Map model scores into [0, 1] by a declared, public, strictly increasing transform.

    A strictly increasing map keeps the order of the scores, so the exact ROC AUC is
    unchanged; the secure protocols need scores in [0, 1] because their decision points
    live there.

    Parameters
    ----------
    values : array-like of shape (n,)
        Finite scores.
    scores : {"probability", "logit", "range:LO:HI"}
        * ``"probability"`` - already in [0, 1], e.g. ``predict_proba(X)[:, 1]``. Values
          up to :data:`PROBABILITY_SLACK` outside (float rounding) are clipped; others
          are an error.
        * ``"logit"`` - any real number, e.g. ``decision_function(X)`` of a linear model
          or a network's raw logit; mapped by the sigmoid ``1 / (1 + exp(-x))``. Beyond
          about ``|x| > 36`` the sigmoid rounds distinct values to the same float, which
          would create ties: a ``UserWarning`` says so (then use ``range:LO:HI``).
        * ``"range:LO:HI"`` - scores known to lie in ``[LO, HI]`` (e.g. an SVM's
          ``decision_function`` with known bounds, a score out of 100); mapped by
          ``(x - LO) / (HI - LO)``. A value outside the range is an error.

    Returns
    -------
    ndarray of shape (n,)
        Scores in [0, 1], in the same order.

    Raises
    ------
    TypeError, ValueError
        Bad ``scores`` spec, non-finite values, or values outside the declared range.

    Examples
    --------
    >>> transform_scores([-2.0, 0.0, 3.0], "range:-2:3").tolist()
    [0.0, 0.4, 1.0]
    >>> transform_scores([0.0], "logit").tolist()
    [0.5]
    """
    kind, lo, hi = _parse_scores(scores)
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError("scores must be numbers") from None
    if arr.ndim != 1:
        arr = arr.ravel()
    bad = ~np.isfinite(arr)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"scores must be finite numbers; score {i} is {float(arr[i])!r}")
    if kind == "probability":
        out_lo, out_hi = arr < -PROBABILITY_SLACK, arr > 1.0 + PROBABILITY_SLACK
        if out_lo.any() or out_hi.any():
            i = int(np.flatnonzero(out_lo | out_hi)[0])
            raise ValueError(
                f"scores='probability' needs scores in [0, 1]; score {i} is {float(arr[i])!r} "
                f"({int(out_lo.sum() + out_hi.sum())} outside). Use scores='logit' for "
                "logits or decision_function values, or 'range:LO:HI' for a known range.")
        return np.clip(arr, 0.0, 1.0)
    if kind == "logit":
        # 1/(1+exp(-x)) in a form that neither overflows nor loses the small end
        neg = arr < 0
        e = np.exp(-np.abs(arr))
        out = np.where(neg, e / (1.0 + e), 1.0 / (1.0 + e))
        if arr.size and np.unique(out).size < np.unique(arr).size:
            import warnings
            warnings.warn("scores='logit': the sigmoid maps some distinct scores to the same "
                          "float (|x| beyond ~36); their order is lost. Use scores="
                          "'range:LO:HI' with the scores' known bounds instead.",
                          UserWarning, stacklevel=2)
        return np.clip(out.astype(np.float64), 0.0, 1.0)
    span = hi - lo
    tol = 1e-12 * max(abs(lo), abs(hi), 1.0)
    outside = (arr < lo - tol) | (arr > hi + tol)
    if outside.any():
        i = int(np.flatnonzero(outside)[0])
        raise ValueError(f"scores='{scores}' declares the range [{lo:g}, {hi:g}]; score {i} "
                         f"is {float(arr[i])!r} ({int(outside.sum())} outside)")
    return np.clip((arr - lo) / span, 0.0, 1.0)
