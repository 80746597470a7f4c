"""Estimators (PS, GT, KS, GTG-Shapley) converge to the exact values as budgets grow."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from fedsec.metrics.shapley import shapley_values
from fedsec.shapley import federated_shapley
from fedsec.shapley.estimators import (
    group_testing,
    gtg_shapley,
    kernel_shap,
    permutation_sampling,
)


@dataclass
class TableGame:
    table: np.ndarray

    @property
    def k(self) -> int:
        return int(len(self.table)).bit_length() - 1

    def value(self, mask: int) -> float:
        return float(self.table[mask])


def _game(k: int, seed: int) -> TableGame:
    """An accuracy-like game: increasing in coalition size with interactions."""
    rng = np.random.default_rng(seed)
    w = rng.uniform(0, 0.2, size=k)
    masks = np.arange(1 << k)
    bits = (masks[:, None] >> np.arange(k)) & 1
    table = 0.3 + np.tanh(bits @ w * 2) * 0.5 + rng.normal(0, 0.01, size=1 << k)
    return TableGame(table)


def _gtg(game: TableGame, budget: int, rng: np.random.Generator) -> np.ndarray:
    return gtg_shapley(game, budget, rng, eps_between=0.0, eps_within=0.0, tolerance=0.0)


ESTIMATORS = {"ps": permutation_sampling, "gt": group_testing, "ks": kernel_shap,
              "gtg": _gtg}


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_error_shrinks_with_budget(name: str) -> None:
    fn = ESTIMATORS[name]
    errors = {}
    for budget in (4, 64, 1024):
        errs = []
        for seed in range(8):
            game = _game(5, seed)
            exact = shapley_values(game.table)
            est = fn(game, budget, np.random.default_rng(100 + seed))
            errs.append(np.linalg.norm(est - exact))
        errors[budget] = float(np.mean(errs))
    assert errors[4] > errors[64] > errors[1024]
    assert errors[1024] < 0.1 * errors[4]  # ~1/sqrt(budget): 256x budget, ~16x smaller
    assert errors[1024] < 0.05  # values sum to ~0.3 here; GT has the largest variance


@pytest.mark.parametrize("name", ["gt", "ks"])
def test_efficiency_is_kept(name: str) -> None:
    game = _game(5, 1)
    est = ESTIMATORS[name](game, 12, np.random.default_rng(0))
    assert est.sum() == pytest.approx(game.table[-1] - game.table[0], abs=1e-9)


def test_gtg_truncation_between_rounds() -> None:
    game = TableGame(np.full(8, 0.5))
    assert np.all(gtg_shapley(game, 50, np.random.default_rng(0)) == 0.0)


def test_budget_validation() -> None:
    game = _game(3, 0)
    for fn in ESTIMATORS.values():
        with pytest.raises(ValueError, match="budget"):
            fn(game, 0, np.random.default_rng(0))


def test_fsv_estimates_converge_on_a_trained_federation(agnews_small) -> None:
    t = agnews_small
    exact = federated_shapley(t.record, t.x, t.y)
    for est in ("ps", "gtg"):
        low = np.mean([federated_shapley(t.record, t.x, t.y, estimator=est, budget=1,
                                         seed=s).error_to(exact) for s in range(4)])
        high = np.mean([federated_shapley(t.record, t.x, t.y, estimator=est, budget=200,
                                          seed=s).error_to(exact) for s in range(2)])
        assert high < low
    r = federated_shapley(t.record, t.x, t.y, estimator="ks", budget=4, seed=0)
    assert r.models_tested < exact.models_tested  # KS skips models
    assert r.budget == 4 and r.utilities is None
