"""Federated splits partition the data and have the promised shape."""

from __future__ import annotations

import numpy as np
import pytest

from fedsec.data.splits import apply_split, dirichlet_label_split, iid_split, score_sorted_split
from fedsec.data.synthetic import binormal_scores, sklearn_model_scores


def _is_partition(parts: list[np.ndarray], n: int) -> bool:
    allidx = np.concatenate(parts)
    return allidx.size == n and np.array_equal(np.sort(allidx), np.arange(n))


def test_iid_split() -> None:
    parts = iid_split(1003, 10, seed=1)
    assert _is_partition(parts, 1003)
    assert {p.size for p in parts} == {100, 101}
    assert all(np.array_equal(a, b) for a, b in zip(parts, iid_split(1003, 10, seed=1),
                                                     strict=True))
    with pytest.raises(ValueError, match="'n_parties' parameter of iid_split must be <= 5"):
        iid_split(5, 6)


def test_score_sorted_split_is_contiguous_in_score() -> None:
    s = np.random.default_rng(0).random(500)
    parts = score_sorted_split(s, 7)
    assert _is_partition(parts, 500)
    for a, b in zip(parts, parts[1:], strict=False):
        assert s[a].max() <= s[b].min()


def test_dirichlet_split_skews_labels() -> None:
    y = np.repeat([0, 1], 5000)
    skewed = dirichlet_label_split(y, 10, alpha=0.1, seed=3)
    mild = dirichlet_label_split(y, 10, alpha=1000.0, seed=3)
    assert _is_partition(skewed, y.size) and _is_partition(mild, y.size)

    def spread(parts: list[np.ndarray]) -> float:
        return float(np.std([y[p].mean() for p in parts if p.size]))

    assert spread(skewed) > 0.2 > 0.05 > spread(mild)
    with pytest.raises(ValueError, match="'alpha' parameter of dirichlet_label_split"):
        dirichlet_label_split(y, 3, alpha=0.0)


def test_apply_split_and_synthetic_calibration() -> None:
    from sklearn.metrics import roc_auc_score

    y, s = binormal_scores(200_000, auc=0.75, prior=0.25, seed=0)
    assert abs(roc_auc_score(y, s) - 0.75) < 0.005
    assert abs(y.mean() - 0.25) < 0.005
    parties = apply_split(y, s, iid_split(y.size, 4, seed=0))
    assert sum(p[0].size for p in parties) == y.size
    yd, sd = sklearn_model_scores("breast_cancer")
    assert yd.size == 569 and roc_auc_score(yd, sd) > 0.9
    with pytest.raises(ValueError, match="'name' parameter of sklearn_model_scores"):
        sklearn_model_scores("criteo")
