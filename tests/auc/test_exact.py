"""Certified error bound (both modes), real-valued scores and exact mode, against the
plaintext reference and scikit-learn on pooled data."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_digits, load_wine
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import train_test_split
from sklearn.naive_bayes import GaussianNB

from fedsec.auc.exact import initial_grid, refinable_bins, refine_grid
from fedsec.auc.fhauc import secure_auc
from fedsec.auc.fhauc_malicious import secure_auc_malicious
from fedsec.errors import PrivacyWarning
from fedsec.metrics import trapezoid_auc, trapezoid_error_bound

TEST = {"preset": "INSECURE_TEST_N4096_DEPTH2_S49", "allow_insecure": True}


def split(y, s, parties=3):
    return [(y[i::parties], s[i::parties]) for i in range(parties)]


def pooled(parts):
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


@pytest.fixture(scope="module")
def digits8():
    """The issue's case: digits '3 vs rest' probabilities raised to the 8th power."""
    x, y = load_digits(return_X_y=True)
    y = (y == 3).astype(int)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.5, random_state=0)
    p = LogisticRegression(max_iter=3000).fit(xtr, ytr).predict_proba(xte)[:, 1]
    return split(yte, p ** 8)


@pytest.fixture(scope="module")
def cancer_logits():
    """decision_function of a linear model: logits, refused by 'probability'."""
    x, y = load_breast_cancer(return_X_y=True)
    x = (x - x.mean(0)) / x.std(0)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.5, random_state=1)
    return split(yte, LogisticRegression(C=0.05, max_iter=2000).fit(xtr, ytr)
                 .decision_function(xte))


# ------------------------------------------------------------------ the certified bound
@pytest.mark.parametrize("security", ["semi-honest", "malicious"])
def test_bound_at_default_points_equals_the_plaintext_bound(digits8, security):
    y, s = pooled(digits8)
    res = secure_auc(digits8, security=security, **TEST)
    assert res.decision_points == 100
    assert res.auc == pytest.approx(trapezoid_auc(y, s, 100), rel=1e-9)
    ref = trapezoid_error_bound(y, s, 100)
    assert ref > 0.01  # this case is far from exact at N = 100
    assert res.error_bound == pytest.approx(ref, rel=1e-9, abs=1e-12)
    assert abs(roc_auc_score(y, s) - res.auc) <= res.error_bound
    assert res.verified == (security == "malicious")
    d = res.to_dict()
    assert d["error_bound"] == res.error_bound and json.loads(res.to_json())["auc"] == res.auc


def test_bound_on_the_secure_default_preset():
    g = np.random.default_rng(7)
    parts = [(g.integers(0, 2, 60), np.round(g.random(60), 2)) for _ in range(2)]
    y, s = pooled(parts)
    res = secure_auc(parts)
    assert res.error_bound == pytest.approx(trapezoid_error_bound(y, s, 100), rel=1e-9)


# ------------------------------------------------------------------ real-valued scores
def test_logits_are_refused_as_probabilities_and_accepted_as_logits(cancer_logits):
    with pytest.raises(ValueError, match="party 0: .*'logit'"):
        secure_auc(cancer_logits, **TEST)
    y, s = pooled(cancer_logits)
    res = secure_auc(cancer_logits, scores="logit", decision_points=50, **TEST)
    p = 1.0 / (1.0 + np.exp(-s))
    assert res.auc == pytest.approx(trapezoid_auc(y, p, 50), rel=1e-9)
    lo, hi = float(s.min()) - 1.0, float(s.max()) + 1.0
    res = secure_auc(cancer_logits, scores=f"range:{lo}:{hi}", decision_points=50, **TEST)
    assert res.auc == pytest.approx(trapezoid_auc(y, (s - lo) / (hi - lo), 50), rel=1e-9)


# ------------------------------------------------------------------ exact mode
def test_exact_mode_on_digits_to_the_8th(digits8):
    y, s = pooled(digits8)
    res = secure_auc(digits8, decision_points="exact", **TEST)
    assert res.decision_mode == "exact" and res.target_reached and res.rounds >= 2
    assert res.error_bound <= 1e-6
    assert abs(res.auc - roc_auc_score(y, s)) <= res.error_bound + 1e-9
    assert res.extra["refinement_rounds"][0]["marked_bins"] > 0


def test_exact_mode_on_decision_function_logits(cancer_logits):
    y, s = pooled(cancer_logits)
    res = secure_auc(cancer_logits, decision_points="exact", scores="logit", **TEST)
    assert res.error_bound <= 1e-6 and res.target_reached
    assert abs(res.auc - roc_auc_score(y, s)) <= res.error_bound + 1e-9


def test_exact_mode_malicious_verifies_the_final_result():
    """wine 'class 0 vs rest', GaussianNB log-odds (raw logits); refinement rounds are
    verified too (canaries), so malicious exact mode raises no PrivacyWarning."""
    x, y = load_wine(return_X_y=True)
    y = (y == 1).astype(int)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.5, random_state=2)
    lp = GaussianNB().fit(xtr, ytr).predict_log_proba(xte)
    parts = split(yte, lp[:, 1] - lp[:, 0], 2)
    yy, ss = pooled(parts)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyWarning)
        res = secure_auc_malicious(parts, decision_points="exact", scores="logit",
                                   min_bound_bits=0.0, runs=2, tolerance=1e-7, **TEST)
    assert res.verified and res.error_bound <= 1e-6
    assert abs(res.auc - roc_auc_score(yy, ss)) <= res.error_bound + 1e-9


def test_exact_mode_says_when_its_cap_stops_it(digits8):
    y, s = pooled(digits8)
    with pytest.warns(UserWarning, match="above the target"):
        res = secure_auc(digits8, decision_points="exact", max_rounds=0, **TEST)
    assert not res.target_reached and res.error_bound > 1e-6
    assert res.extra["refinement_capped"]
    assert abs(res.auc - roc_auc_score(y, s)) <= res.error_bound


def test_exact_mode_arguments_are_checked(digits8):
    with pytest.raises(ValueError, match="'decision_points' parameter"):
        secure_auc(digits8, decision_points="exakt", **TEST)
    with pytest.raises(ValueError, match="'target'"):
        secure_auc(digits8, decision_points="exact", target=-1.0, **TEST)


# ------------------------------------------------------------------ the public grid
def test_refinement_reaches_single_floats_and_isolates_edges():
    pts = initial_grid(16)
    assert pts[0] == 1.0 and pts[-1] == 0.0 and np.all(np.diff(pts) < 0)
    marked = np.zeros(pts.size, dtype=bool)
    marked[3] = True
    new = refine_grid(pts, marked, 8)
    assert set(pts) <= set(new) and new.size == pts.size + 8
    assert np.nextafter(pts[3], 1.0) in set(new)
    # a bin 3 floats wide is split into single floats, which cannot be refined further
    a = 0.25
    tiny = np.array([1.0, np.nextafter(np.nextafter(np.nextafter(a, 1), 1), 1), a, 0.0])
    out = refine_grid(tiny, np.array([False, False, True, False]), 64)
    assert out.size == 6 and not refinable_bins(out)[2:5].any()


def test_no_warning_when_the_target_is_met(digits8):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        secure_auc(digits8, decision_points="exact", target=0.5, max_rounds=0, **TEST)
