"""Count leakage (seed 001 App. B.2), exposed score histograms and top-K inference."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedsec.auc.attacks import (
    count_leakage_std,
    estimate_party_counts,
    exposed_score_histogram,
    topk_label_inference,
)
from fedsec.auc.dpauc import DPAUCClient, RRClient
from fedsec.data.synthetic import CRITEO_LIKE
from fedsec.errors import PrivacyWarning


def test_theory_matches_seed001_table2() -> None:
    # seed 001 Table 2, eps = 1, N = 100: measured std 109.73 (total) and 80.42 (positives)
    tot, cls = count_leakage_std(mechanism="laplace", epsilon=1.0, n_points=100)
    assert cls == pytest.approx(80.0)
    assert tot == pytest.approx(80.0 * math.sqrt(2))
    tot8, cls8 = count_leakage_std(mechanism="laplace", epsilon=8.0, n_points=25)
    assert cls8 == pytest.approx(5.0)  # Table 2: 4.49 / 5.55


@pytest.mark.parametrize("n_samples", [300, 30_000])
def test_attack_error_matches_theory_independent_of_size(n_samples: int) -> None:
    y, s = CRITEO_LIKE.sample(n_samples, seed=n_samples)
    client = DPAUCClient(y, s, epsilon=1.0, decision_points=25)
    errs = []
    for _ in range(400):
        est = estimate_party_counts(client.submit())
        errs.append([est.total - y.size, est.positives - y.sum(),
                     est.negatives - (y.size - y.sum())])
    e = np.asarray(errs)
    tot, cls = count_leakage_std(mechanism="laplace", epsilon=1.0, n_points=25)
    # 400 near-normal errors: sample std within 20% (> 5 standard errors), mean within 6 s.e.
    np.testing.assert_allclose(e.std(axis=0), [tot, cls, cls], rtol=0.2)
    assert np.all(np.abs(e.mean(axis=0)) < 6 * np.array([tot, cls, cls]) / math.sqrt(400))


def test_rr_reveals_exact_total_and_histogram() -> None:
    y, s = CRITEO_LIKE.sample(4000, seed=1)
    with pytest.warns(PrivacyWarning):
        client = RRClient(y, s, epsilon=2.0, decision_points=20)
    sub = client.submit()
    est = estimate_party_counts(sub)
    assert est.total == y.size and est.total_std == 0.0
    assert abs(est.positives - y.sum()) < 6 * est.positives_std
    points, counts = exposed_score_histogram(sub)
    upper = np.concatenate(([np.inf], points[:-1]))
    expected = [np.sum((s >= lo) & (s < hi)) for lo, hi in zip(points, upper, strict=True)]
    np.testing.assert_array_equal(counts, expected)


def test_topk_by_hand() -> None:
    y = [1, 0, 1, 1, 0, 0]
    s = [0.9, 0.8, 0.7, 0.1, 0.2, 0.95]
    r = topk_label_inference(y, s, [1, 2, 3, 6])
    assert [x.true_positives for x in r] == [0, 1, 1, 3]
    assert r[1].precision == 0.5 and r[1].recall == pytest.approx(1 / 3)
    assert r[3].recall == 1.0
    with pytest.raises(ValueError, match="'k' parameter of topk_label_inference must be <= 6"):
        topk_label_inference(y, s, [7])
