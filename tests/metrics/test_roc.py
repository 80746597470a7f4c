"""Plaintext ROC reference: brute force, scikit-learn, identities and invariances."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

from fedsec.errors import UndefinedMetricError
from fedsec.metrics import (
    as_decision_points,
    class_totals_from_terms,
    confusion_counts,
    trapezoid_auc,
    trapezoid_auc_from_counts,
    trapezoid_terms,
    uniform_decision_points,
)


def brute_counts(y, s, theta):
    """O(n*N) reference: count samples with score >= theta_n, per class."""
    y = np.asarray(y)
    s = np.asarray(s, dtype=float)
    tp = np.array([int(np.sum((y == 1) & (s >= t))) for t in theta])
    fp = np.array([int(np.sum((y == 0) & (s >= t))) for t in theta])
    return tp, fp


@st.composite
def labelled_scores(draw, min_size=1, max_size=80, both_classes=False):
    """Labels and scores on a coarse grid (many ties), including exactly 0 and 1."""
    n = draw(st.integers(min_size, max_size))
    levels = draw(st.integers(1, 12))
    y = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    k = draw(st.lists(st.integers(0, levels), min_size=n, max_size=n))
    y = np.array(y, dtype=np.int64)
    if both_classes and (y.min() == y.max()):
        y[0] = 1 - y[0]
    return y, np.array(k, dtype=np.float64) / levels


# ---------------------------------------------------------------- decision points
def test_uniform_points_are_the_papers():
    pts = uniform_decision_points(5)
    np.testing.assert_array_equal(pts, [1.0, 0.75, 0.5, 0.25, 0.0])
    assert uniform_decision_points(2).tolist() == [1.0, 0.0]
    np.testing.assert_array_equal(as_decision_points(5), pts)


@pytest.mark.parametrize("bad", [1, 0, -3])
def test_fewer_than_two_uniform_points_rejected(bad):
    with pytest.raises(ValueError, match="n_points"):
        uniform_decision_points(bad)
    with pytest.raises(ValueError):
        as_decision_points(bad)


@pytest.mark.parametrize("bad", [2.0, "10", True, None])
def test_uniform_points_need_an_int(bad):
    with pytest.raises(TypeError):
        uniform_decision_points(bad)


def test_bool_decision_points_rejected():
    with pytest.raises(TypeError):
        as_decision_points(True)


def test_custom_points_sorted_deduplicated_and_closed_at_zero():
    pts = as_decision_points([0.2, 0.9, 0.5, 0.9, 0.2])
    np.testing.assert_array_equal(pts, [0.9, 0.5, 0.2, 0.0])
    # 0 already present: nothing appended
    np.testing.assert_array_equal(as_decision_points([0.0, 1.0]), [1.0, 0.0])
    # a single positive threshold becomes two points
    np.testing.assert_array_equal(as_decision_points([0.5]), [0.5, 0.0])


@pytest.mark.parametrize("bad", [[], [0.5, 1.5], [-0.1, 0.5], [np.nan, 0.5], [np.inf], [0.0]])
def test_bad_custom_points_rejected(bad):
    with pytest.raises(ValueError):
        as_decision_points(bad)


def test_non_numeric_custom_points_rejected():
    with pytest.raises(TypeError, match="decision_points"):
        as_decision_points(["a", "b"])
    with pytest.raises(TypeError, match="decision_points"):
        as_decision_points(object())


# ---------------------------------------------------------------- counts
@settings(max_examples=150, deadline=None)
@given(data=labelled_scores(min_size=0), n_points=st.integers(2, 40))
def test_counts_match_brute_force_uniform(data, n_points):
    y, s = data
    theta = uniform_decision_points(n_points)
    tp, fp = confusion_counts(y, s, n_points)
    btp, bfp = brute_counts(y, s, theta)
    np.testing.assert_array_equal(tp, btp)
    np.testing.assert_array_equal(fp, bfp)
    # last point is 0: totals
    assert tp[-1] == int(y.sum()) and fp[-1] == int((1 - y).sum())
    assert np.all(np.diff(tp) >= 0) and np.all(np.diff(fp) >= 0)


@settings(max_examples=100, deadline=None)
@given(data=labelled_scores(),
       pts=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30))
def test_counts_match_brute_force_custom_points(data, pts):
    y, s = data
    if len(set(pts) | {0.0}) < 2:
        pts = [*pts, 0.5]
    theta = as_decision_points(pts)
    tp, fp = confusion_counts(y, s, pts)
    btp, bfp = brute_counts(y, s, theta)
    np.testing.assert_array_equal(tp, btp)
    np.testing.assert_array_equal(fp, bfp)


def test_score_equal_to_threshold_counts_as_positive():
    tp, fp = confusion_counts([1, 0], [0.5, 0.5], [1.0, 0.5, 0.0])
    assert tp.tolist() == [0, 1, 1] and fp.tolist() == [0, 1, 1]


def test_counts_validate_inputs():
    with pytest.raises(ValueError, match="0 and 1"):
        confusion_counts([0, 2], [0.1, 0.2], 10)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        confusion_counts([0, 1], [0.1, 1.2], 10)
    with pytest.raises(ValueError, match="finite"):
        confusion_counts([0, 1], [0.1, np.nan], 10)
    with pytest.raises(ValueError, match="same length"):
        confusion_counts([0, 1, 1], [0.1, 0.2], 10)


# ---------------------------------------------------------------- AUC vs scikit-learn
@settings(max_examples=200, deadline=None)
@given(data=labelled_scores(min_size=2, both_classes=True))
def test_equals_sklearn_when_points_include_every_score(data):
    y, s = data
    # every distinct score is a point (1.0 added so that there are always two points)
    ours = trapezoid_auc(y, s, points=np.unique(np.append(s, 1.0)))
    assert ours == pytest.approx(roc_auc_score(y, s), abs=1e-12)


@settings(max_examples=50, deadline=None)
@given(data=labelled_scores(min_size=2, both_classes=True), levels=st.integers(1, 12))
def test_uniform_grid_points_equal_sklearn_on_grid_scores(data, levels):
    """Scores on the grid k/L are all among the uniform points when N - 1 = L * m."""
    y, s = data
    s = np.round(s * levels) / levels
    assert trapezoid_auc(y, s, points=3 * levels + 1) == pytest.approx(
        roc_auc_score(y, s), abs=1e-12)


def test_doc_example_and_known_values():
    assert trapezoid_auc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8],
                         points=[0.8, 0.4, 0.35, 0.1]) == 0.75
    # perfect and inverted rankings
    assert trapezoid_auc([0, 0, 1, 1], [0.0, 0.1, 0.9, 1.0], points=100) == 1.0
    assert trapezoid_auc([1, 1, 0, 0], [0.0, 0.1, 0.9, 1.0], points=100) == 0.0
    # all tied: chance
    assert trapezoid_auc([1, 0, 1, 0], [0.3] * 4, points=100) == 0.5


def test_negative_at_score_one_uses_the_origin_segment():
    # theta_0 = 1: a negative scoring exactly 1 moves the first ROC point off the origin
    y, s = [0, 1, 1, 0], [1.0, 1.0, 0.2, 0.0]
    assert trapezoid_auc(y, s, points=11) == pytest.approx(roc_auc_score(y, s), abs=1e-12)


@pytest.mark.parametrize("y", [[0, 0, 0], [1, 1], [1]])
def test_one_class_is_undefined(y):
    s = np.linspace(0, 1, len(y))
    with pytest.raises(UndefinedMetricError, match="one class"):
        trapezoid_auc(y, s)
    tp, fp = confusion_counts(y, s, 10)
    with pytest.raises(UndefinedMetricError):
        trapezoid_auc_from_counts(tp, fp)
    assert issubclass(UndefinedMetricError, ValueError)


# ---------------------------------------------------------------- identities
@settings(max_examples=150, deadline=None)
@given(data=labelled_scores(min_size=0), n_points=st.integers(2, 50))
def test_class_totals_from_terms_identity(data, n_points):
    y, s = data
    tp, fp = confusion_counts(y, s, n_points)
    t, f = trapezoid_terms(tp, fp)
    assert class_totals_from_terms(t, f) == (int(tp[-1]), int(fp[-1]))
    assert class_totals_from_terms(t, f) == (int(y.sum()), int((1 - y).sum()))


def test_trapezoid_terms_definition():
    t, f = trapezoid_terms([0, 1, 3], [1, 1, 4])
    assert t.tolist() == [0, 1, 4]
    assert f.tolist() == [1, 0, 3]
    with pytest.raises(ValueError):
        trapezoid_terms([0, 1], [0, 1, 2])


@settings(max_examples=60, deadline=None)
@given(data=labelled_scores(min_size=2, both_classes=True), n_points=st.integers(2, 60),
       seed=st.integers(0, 2**32 - 1))
def test_invariant_under_permuting_samples(data, n_points, seed):
    y, s = data
    perm = np.random.default_rng(seed).permutation(y.size)
    assert trapezoid_auc(y[perm], s[perm], n_points) == trapezoid_auc(y, s, n_points)
    tp1, fp1 = confusion_counts(y, s, n_points)
    tp2, fp2 = confusion_counts(y[perm], s[perm], n_points)
    np.testing.assert_array_equal(tp1, tp2)
    np.testing.assert_array_equal(fp1, fp2)


@settings(max_examples=60, deadline=None)
@given(data=labelled_scores(min_size=2, both_classes=True), n_points=st.integers(2, 60),
       cut=st.integers(0, 80))
def test_counts_add_up_over_parties(data, n_points, cut):
    """The federation's counts are the sum of the parties' (what FHAUC relies on)."""
    y, s = data
    c = min(cut, y.size)
    tp_a, fp_a = confusion_counts(y[:c], s[:c], n_points)
    tp_b, fp_b = confusion_counts(y[c:], s[c:], n_points)
    tp, fp = confusion_counts(y, s, n_points)
    np.testing.assert_array_equal(tp, tp_a + tp_b)
    np.testing.assert_array_equal(fp, fp_a + fp_b)


@settings(max_examples=40, deadline=None)
@given(data=labelled_scores(min_size=2, both_classes=True), n_points=st.integers(2, 60),
       reps=st.integers(2, 4))
def test_invariant_under_duplicating_the_data(data, n_points, reps):
    y, s = data
    assert trapezoid_auc(np.tile(y, reps), np.tile(s, reps), n_points) == pytest.approx(
        trapezoid_auc(y, s, n_points), abs=1e-15)


def test_auc_lies_in_unit_interval(rng):
    for _ in range(50):
        n = int(rng.integers(2, 100))
        y = rng.integers(0, 2, n)
        y[0], y[1] = 0, 1
        a = trapezoid_auc(y, rng.random(n), int(rng.integers(2, 200)))
        assert 0.0 <= a <= 1.0
