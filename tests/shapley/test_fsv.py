"""Exact FSV (NSSV): Shapley axioms on trained federations, brute force over all orderings."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from fedsec.learning.model import LayerSpec, ModelSpec, accuracy
from fedsec.learning.record import RoundRecord, TrainingRecord
from fedsec.shapley import RoundGame, federated_shapley


def test_efficiency_per_round(agnews_small) -> None:
    t = agnews_small
    res = federated_shapley(t.record, t.x, t.y)
    spec = t.record.spec
    for r, rnd in enumerate(t.record.rounds):
        v_all = accuracy(spec, rnd.model(rnd.participants), t.x, t.y)
        v_empty = accuracy(spec, rnd.global_params, t.x, t.y)
        assert res.ssv[r].sum() == pytest.approx(v_all - v_empty, abs=1e-12)
    np.testing.assert_allclose(res.fsv, res.ssv.sum(axis=0))
    assert res.models_tested == 3 * 32


@pytest.mark.parametrize("fixture", ["agnews_small", "digits_small"])
def test_equals_brute_force_over_all_orderings(fixture, request) -> None:
    t = request.getfixturevalue(fixture)
    res = federated_shapley(t.record, t.x, t.y)
    for r, rnd in enumerate(t.record.rounds):
        game = RoundGame(t.record.spec, rnd, t.x, t.y)
        k = game.k
        phi = np.zeros(k)
        for order in itertools.permutations(range(k)):
            mask = 0
            for i in order:
                phi[i] += game.value(mask | 1 << i) - game.value(mask)
                mask |= 1 << i
        np.testing.assert_allclose(res.ssv[r, list(rnd.participants)],
                                   phi / math.factorial(k), atol=1e-12)


def _with_round(record: TrainingRecord, rounds: tuple[RoundRecord, ...]) -> TrainingRecord:
    return TrainingRecord(record.spec, record.n_clients, rounds, record.final_params)


def test_symmetry_of_identical_clients(agnews_small) -> None:
    t = agnews_small
    rnd = t.record.rounds[1]
    local = list(rnd.local_params)
    weights = rnd.weights.copy()
    local[3], weights[3] = local[1], weights[1]  # client 3 = client 1
    twin = RoundRecord(rnd.global_params, rnd.participants, tuple(local), weights)
    res = federated_shapley(_with_round(t.record, (twin,)), t.x, t.y)
    assert res.fsv[3] == pytest.approx(res.fsv[1], abs=1e-12)


def test_null_player() -> None:
    """For a linear classifier, a zero model adds nothing: θ_{S∪{i}} is θ_S scaled by a
    positive factor (same arg-max), and with θ^t = 0 also v({i}) = v(∅)."""
    rng = np.random.default_rng(0)
    spec = ModelSpec("logistic", (LayerSpec.dense(6, 3),))
    zero = [np.zeros((3, 6), np.float32), np.zeros(3, np.float32)]
    local = tuple([rng.normal(size=(3, 6)).astype(np.float32),
                   rng.normal(size=3).astype(np.float32)] for _ in range(3))
    local = (*local[:2], zero, local[2])
    rnd = RoundRecord(zero, (0, 1, 2, 3), local, np.array([3.0, 1.0, 2.0, 5.0]))
    x, y = rng.normal(size=(300, 6)), rng.integers(0, 3, 300)
    res = federated_shapley(TrainingRecord(spec, 4, (rnd,), zero), x, y)
    assert res.fsv[2] == pytest.approx(0.0, abs=1e-12)
    assert np.abs(res.fsv).sum() > 0.01


def test_additivity_over_rounds(agnews_small) -> None:
    t = agnews_small
    whole = federated_shapley(t.record, t.x, t.y)
    first = federated_shapley(_with_round(t.record, t.record.rounds[:1]), t.x, t.y)
    rest = federated_shapley(_with_round(t.record, t.record.rounds[1:]), t.x, t.y)
    np.testing.assert_allclose(whole.fsv, first.fsv + rest.fsv, atol=1e-12)


def test_non_participants_get_zero() -> None:
    pytest.importorskip("torch")
    from fedsec.learning.fedavg import run_fedavg
    from fedsec.learning.tasks import make_task

    task = make_task("bank", n_samples=300, seed=0)
    fed = task.federate(5, seed=0)
    rec = run_fedavg(task, fed, rounds=3, participation=0.6, seed=0)
    res = federated_shapley(rec, fed.x_test, fed.y_test)
    for r, rnd in enumerate(rec.rounds):
        out = [c for c in range(5) if c not in rnd.participants]
        assert np.all(res.ssv[r, out] == 0.0)
    assert res.models_tested == 3 * 8


def test_input_validation(agnews_small) -> None:
    t = agnews_small
    with pytest.raises(ValueError, match="estimator"):
        federated_shapley(t.record, t.x, t.y, estimator="tmc")
    with pytest.raises(ValueError, match="budget"):
        federated_shapley(t.record, t.x, t.y, estimator="ps", budget=0)
    with pytest.raises(ValueError, match="features"):
        federated_shapley(t.record, t.x[:, :5], t.y)
