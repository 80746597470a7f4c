"""SampleSkip (seed 004, Alg. 6-7): no wrong skips for linear classifiers (Theorem 6.3)."""

from __future__ import annotations

import numpy as np
import pytest

from fedsec.learning.model import LayerSpec, ModelSpec
from fedsec.learning.record import RoundRecord, TrainingRecord
from fedsec.shapley import RoundGame, federated_shapley


def test_no_wrong_skips_for_trained_logistic(agnews_small) -> None:
    t = agnews_small
    exact = federated_shapley(t.record, t.x, t.y)
    skip = federated_shapley(t.record, t.x, t.y, sample_skip=True, audit=True)
    assert skip.skip.wrong == 0 and skip.skip.skipped > 0
    np.testing.assert_array_equal(skip.fsv, exact.fsv)
    for a, b in zip(skip.utilities or [], exact.utilities or [], strict=True):
        np.testing.assert_array_equal(a, b)
    assert skip.samples_tested < exact.samples_tested


@pytest.mark.parametrize("seed", range(6))
def test_theorem_6_3_random_linear_models(seed: int) -> None:
    """Any linear classifiers, any non-negative weights: never a wrong skip."""
    rng = np.random.default_rng(seed)
    d, c, k = 7, 4, 5
    spec = ModelSpec("linear", (LayerSpec.dense(d, c, activation="sigmoid"),))  # η increasing
    local = tuple([rng.normal(size=(c, d)), rng.normal(size=c)] for _ in range(k))
    glob = [rng.normal(size=(c, d)), rng.normal(size=c)]
    rnd = RoundRecord(glob, tuple(range(k)), local, rng.uniform(0.1, 5, size=k))
    x, y = rng.normal(size=(400, d)), rng.integers(0, c, 400)
    game = RoundGame(spec, rnd, x, y, sample_skip=True, audit=True)
    skipped = game.table()
    truth = RoundGame(spec, rnd, x, y).table()
    assert game.stats.wrong == 0 and game.stats.skipped > 0
    np.testing.assert_array_equal(skipped, truth)
    rec = TrainingRecord(spec, k, (rnd,), glob)
    assert federated_shapley(rec, x, y, sample_skip=True).error_to(
        federated_shapley(rec, x, y)) == 0.0


def test_counts_for_a_nonlinear_cnn(digits_small) -> None:
    t = digits_small
    exact = federated_shapley(t.record, t.x, t.y)
    skip = federated_shapley(t.record, t.x, t.y, sample_skip=True, audit=True)
    s = skip.skip
    m = len(t.y)
    assert 0 <= s.wrong <= s.skipped <= s.slots == 3 * 11 * m  # 11 aggregated models per round
    # every utility is over-estimated by exactly its wrongly skipped share
    diff = np.concatenate([a - b for a, b in zip(skip.utilities, exact.utilities, strict=True)])
    assert np.all(diff >= -1e-12)
    assert diff.sum() * m == pytest.approx(s.wrong)
    assert s.max_delta == pytest.approx(diff.max())
    # Lemma 6.4: |φ̂_i − φ_i| <= T · Δv_max
    assert np.all(np.abs(skip.fsv - exact.fsv) <= 3 * s.max_delta + 1e-12)
    # without audit, the same estimates and no wrong-skip count
    plain = federated_shapley(t.record, t.x, t.y, sample_skip=True)
    np.testing.assert_array_equal(plain.fsv, skip.fsv)
    assert plain.skip.wrong == 0 and plain.skip.to_dict()["wrongly_skipped_share"] is None


def test_find_skippable_example_5_5() -> None:
    """Seed 004, Example 5.5: x1..x4; Φ_{1}=Φ_{23}={x1,x2}, Φ_{2}=Φ_{13}={x2,x3},
    Φ_{3}=Φ_{12}={x3,x4}: every sample is skippable when testing θ_{123}."""
    spec = ModelSpec("l", (LayerSpec.dense(1, 2),))
    zero = [np.zeros((2, 1)), np.zeros(2)]
    rnd = RoundRecord(zero, (0, 1, 2), (zero, zero, zero), np.ones(3))
    game = RoundGame(spec, rnd, np.zeros((4, 1)), np.zeros(4, np.int64), sample_skip=True)

    def ids(*xs: int) -> np.ndarray:
        out = np.zeros(4, bool)
        out[[x - 1 for x in xs]] = True
        return out

    game._correct.update({0b001: ids(1, 2), 0b110: ids(1, 2), 0b010: ids(2, 3),
                          0b101: ids(2, 3), 0b100: ids(3, 4), 0b011: ids(3, 4)})
    assert game.find_skippable(0b111).all()
    assert game.find_skippable(0b011).tolist() == [False, True, False, False]  # Φ_1 ∩ Φ_2
