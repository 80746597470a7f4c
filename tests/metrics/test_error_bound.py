"""The certified error bound and the score transforms (plaintext references)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

from fedsec.errors import UndefinedMetricError
from fedsec.metrics import (
    as_decision_points,
    bin_pair_counts,
    confusion_counts,
    exact_auc,
    single_value_bins,
    transform_scores,
    trapezoid_auc,
    trapezoid_error_bound,
)


def brute_bound(y, s, theta):
    """O(n^2) reference: pairs whose scores share a bin, halved, over 2*P*N... i.e. the
    share of such pairs divided by 2 (bins of one float value excluded)."""
    theta = np.asarray(theta)
    y, s = np.asarray(y), np.asarray(s, dtype=float)
    # bin of a score: the first point it reaches (score >= theta_n)
    b = np.array([int(np.argmax(v >= theta)) for v in s])
    single = single_value_bins(theta)
    pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    same = sum(1 for i in pos for j in neg if b[i] == b[j] and not single[b[i]])
    return same / (2 * pos.size * neg.size)


@st.composite
def cases(draw):
    n = draw(st.integers(2, 60))
    y = np.array(draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)))
    y[0], y[1] = 0, 1
    levels = draw(st.integers(1, 40))
    s = np.array(draw(st.lists(st.integers(0, levels), min_size=n, max_size=n))) / levels
    pts = draw(st.integers(2, 30))
    return y, s, pts


@settings(max_examples=60, deadline=None)
@given(cases())
def test_bound_matches_brute_force_and_holds(case):
    y, s, pts = case
    theta = as_decision_points(pts)
    bound = trapezoid_error_bound(y, s, pts)
    assert bound == pytest.approx(brute_bound(y, s, theta), abs=1e-15)
    exact = roc_auc_score(y, s)
    trap = trapezoid_auc(y, s, pts)
    assert abs(exact - trap) <= bound + 1e-12
    assert 0.0 <= bound <= min(trap, 1.0 - trap) + 1e-12


def test_bound_is_zero_when_every_score_has_a_bin_of_its_own():
    """Points at every score and at the float right after it: each score's bin holds that
    value only, so every pair in a bin is a tie and the trapezoid is exact."""
    g = np.random.default_rng(3)
    y = g.integers(0, 2, 300)
    y[:2] = [0, 1]
    s = np.round(g.random(300), 3)
    assert trapezoid_error_bound(y, s, np.unique(s)) > 0  # a score's bin is wider
    pts = np.unique(np.concatenate([s, np.nextafter(s, 2.0)]).clip(0, 1))
    assert trapezoid_error_bound(y, s, pts) == 0.0
    assert trapezoid_auc(y, s, pts) == pytest.approx(roc_auc_score(y, s), abs=1e-15)


def test_ties_at_one_are_exact_and_do_not_count():
    y = np.array([0, 1, 0, 1])
    s = np.array([1.0, 1.0, 0.2, 0.7])
    # bin 0 is [1, inf): only the score 1.0, a tie the trapezoid counts exactly
    assert single_value_bins(np.array([1.0, 0.5, 0.0])).tolist() == [True, False, False]
    assert bin_pair_counts(*confusion_counts(y, s, [1.0, 0.5, 0.0]), [1.0, 0.5, 0.0])[0] == 0
    assert trapezoid_error_bound(y, s, [1.0, 0.5, 0.0]) == 0.0
    assert trapezoid_auc(y, s, [1.0, 0.5, 0.0]) == roc_auc_score(y, s)


def test_one_float_wide_bins_are_single_valued():
    a = 0.3
    pts = np.array([1.0, np.nextafter(a, 1.0), a, 0.0])
    assert single_value_bins(pts).tolist() == [True, False, True, False]


def test_bound_needs_both_classes():
    with pytest.raises(UndefinedMetricError):
        trapezoid_error_bound([1, 1], [0.2, 0.3])


def test_exact_auc_is_sklearn_on_any_finite_scores():
    g = np.random.default_rng(0)
    y = g.integers(0, 2, 500)
    s = g.normal(size=500) * 40 + np.round(g.random(500), 1)
    assert exact_auc(y, s) == pytest.approx(roc_auc_score(y, s), abs=1e-15)


# ------------------------------------------------------------------ transform_scores
def test_probability_accepts_a_float_hair_outside_and_clips():
    out = transform_scores([-1e-12, 0.5, 1.0 + 1e-9], "probability")
    assert out.tolist() == [0.0, 0.5, 1.0]
    with pytest.raises(ValueError, match=r"score 1 is 1\.5.*'logit'"):
        transform_scores([0.1, 1.5], "probability")


def test_logit_is_the_sigmoid_and_keeps_the_auc():
    g = np.random.default_rng(1)
    x = g.normal(size=400) * 5
    y = (x + g.normal(size=400) * 3 > 0).astype(int)
    p = transform_scores(x, "logit")
    assert np.all((p > 0) & (p < 1))
    assert p == pytest.approx(1.0 / (1.0 + np.exp(-x)), rel=1e-12)
    assert roc_auc_score(y, p) == roc_auc_score(y, x)
    assert transform_scores([-800.0], "logit")[0] == 0.0  # no overflow warning, no nan


def test_logit_warns_when_the_sigmoid_merges_scores():
    with pytest.warns(UserWarning, match="range:LO:HI"):
        transform_scores([40.0, 50.0], "logit")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        transform_scores([-3.0, 0.0, 3.0], "logit")


def test_range_is_affine_and_refuses_values_outside():
    assert transform_scores([-2.0, 0.5, 3.0], "range:-2:3").tolist() == [0.0, 0.5, 1.0]
    with pytest.raises(ValueError, match=r"range \[-2, 3\]; score 0 is 3\.5"):
        transform_scores([3.5], "range:-2:3")


@pytest.mark.parametrize("spec, exc", [
    ("prob", ValueError), ("range:1", ValueError), ("range:a:b", ValueError),
    ("range:3:1", ValueError), ("range:0:inf", ValueError), (3, TypeError)])
def test_bad_specs_are_refused_with_the_standard_message(spec, exc):
    with pytest.raises(exc, match="'scores' parameter"):
        transform_scores([0.5], spec)


def test_non_finite_scores_are_refused():
    with pytest.raises(ValueError, match="finite"):
        transform_scores([0.5, np.nan], "logit")
