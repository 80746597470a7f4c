"""Fixed point that fits the run: every secure protocol values models with large weights,
and a run that cannot fit is refused with the layer, the round and the levers."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression

from fedsec.crypto.sharing import FixedPointOverflow
from fedsec.errors import PrecisionWarning
from fedsec.learning.model import LayerSpec, ModelSpec, aggregate
from fedsec.learning.record import RoundRecord, TrainingRecord
from fedsec.shapley import federated_shapley
from fedsec.shapley import fixed_point as fp
from fedsec.shapley.hesv import hesv_shapley
from fedsec.shapley.secretsv import secretsv_shapley
from fedsec.shapley.secsv import secsv_shapley


def _large_weight_record() -> tuple[TrainingRecord, list[tuple[np.ndarray, np.ndarray]]]:
    """Three clients each fit an unregularised 3-class logistic regression on nearly
    separable data (weights grow far beyond 1); one FedAvg round of those models."""
    x, y = make_classification(n_samples=360, n_features=8, n_informative=6,
                               n_redundant=0, n_classes=3, class_sep=3.0, flip_y=0.0,
                               random_state=2)
    n = 3
    train = [(x[i:240:n], y[i:240:n]) for i in range(n)]
    tests = [(x[240 + i::n], y[240 + i::n]) for i in range(n)]
    locs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lbfgs stops at max_iter on separable data
        for xi, yi in train:
            m = LogisticRegression(C=1e8, max_iter=3000).fit(xi, yi)
            locs.append([m.coef_.astype(np.float64), m.intercept_.astype(np.float64)])
    spec = ModelSpec("logistic-3", (LayerSpec.dense(8, 3),))
    weights = np.array([len(yi) for _, yi in train], dtype=np.float64)
    g0 = [np.zeros((3, 8)), np.zeros(3)]
    glob = aggregate(locs, weights)
    rnd = RoundRecord(g0, tuple(range(n)), tuple(locs), weights)
    return TrainingRecord(spec, n, (rnd,), glob), tests


def test_unregularised_logistic_with_large_weights_under_every_protocol() -> None:
    rec, tests = _large_weight_record()
    biggest = max(float(np.abs(p[0]).max()) for p in rec.rounds[0].local_params)
    assert biggest >= 50  # the models the fixed scales refused
    ref = federated_shapley(rec, np.concatenate([a for a, _ in tests]),
                            np.concatenate([b for _, b in tests]))
    assert np.abs(ref.fsv).max() > 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # the paper schedule's PrivacyWarning, and:
        got = {"hesv": hesv_shapley(rec, tests, schedule="paper"),
               "secsv": secsv_shapley(rec, tests, schedule="paper"),
               "secretsv": secretsv_shapley(rec, tests, schedule="paper")}
    for name, res in got.items():
        assert res.error_to(ref) <= 1e-3, name
    # the zero-initialised global model ties every sample: HESV decides and says so
    ties = [str(w.message) for w in caught if issubclass(w.category, PrecisionWarning)]
    assert len(ties) == 1 and "zero-initialised" in ties[0]


def _spec2() -> ModelSpec:
    return ModelSpec("mlp", (LayerSpec.dense(4, 6, "relu"), LayerSpec.dense(6, 2)))


def test_choose_splits_the_room_and_uses_the_observed_bound() -> None:
    spec = _spec2()
    models = [(1, [(2, 0), (3, 0)]), (5, [(2, 0), (3, 0)]), (7, [(2, 0), (3, 0)])]
    plan = fp.choose(spec, [models], 0, {}, 50.0, protocol="X")
    # rigorous chain: layer 1's input <= 2^2 * 1 + 1 = 5; worst_1 = 12 * (8 * 5 + 1)
    assert plan.input_bounds == (1.0, 5.0)
    assert plan.scale(1) == int(np.floor(50 - np.log2(12 * (8 * 5 + 1))))
    seen = fp.choose(spec, [models], 0, {(0, 1): -3}, 50.0, protocol="X")
    assert seen.input_bounds[1] == 2.0 ** (-3 + fp.MARGIN_BITS) < 5  # observed, with margin
    assert seen.scale(1) > plan.scale(1)
    pinned = fp.choose(spec, [models], 0, {}, 50.0, protocol="X", frac_model=9,
                       frac_data=7, frac_hidden=5)
    assert pinned.model == (9, 9) and pinned.inputs == (7, 5)


def test_a_run_that_cannot_fit_names_layer_round_and_levers() -> None:
    spec = _spec2()
    ok = [(1, [(2, 0), (3, 0)]), (4, [(2, 0), (3, 0)])]
    huge = [(1, [(2, 0), (46, 0)]), (4, [(2, 0), (46, 0)])]
    with pytest.raises(FixedPointOverflow, match=r"layer 2 in round 2.*Levers: .*--plain-bits"):
        fp.choose(spec, [ok, huge], 0, {}, 50.0, protocol="SecSV")


def test_magnitudes_beyond_any_float_are_refused() -> None:
    """A client may publish the largest exponents the format allows: through square
    activations they overflow a float; P refuses (never an OverflowError)."""
    spec = ModelSpec("deep", (LayerSpec.dense(4, 6, "square"), LayerSpec.dense(6, 6, "square"),
                              LayerSpec.dense(6, 6, "square"), LayerSpec.dense(6, 2)))
    with pytest.raises(FixedPointOverflow, match="exceed any fixed point"):
        fp.choose(spec, [[(1, [(128, 128)] * 4)]], 128, {}, 56.0, protocol="SecSV")


def test_published_bounds_are_checked() -> None:
    from fedsec.errors import ProtocolError

    spec = _spec2()
    rng = np.random.default_rng(0)
    params = spec.init_params(rng)
    pub = fp.publish(spec, [(0, "global", params)], [], rng.normal(size=(5, 4)))
    rounds, ex, acts = fp.read([pub], [[("global", 1)]], 2)
    assert rounds[0][0][0] == 1 and (0, 1) in acts and ex >= 0
    for bad in ({**pub, "x": True}, {**pub, "models": [[0, "global", [[1, 2]]]]},
                {**pub, "acts": [[0, [1, 2]]]}, "x"):
        with pytest.raises(ProtocolError):
            fp.read([bad], [[("global", 1)]], 2)
    with pytest.raises(ProtocolError, match="no bounds"):
        fp.read([pub], [[("c0", 3)]], 2)


def test_error_bound_is_stated_and_shrinks_with_more_bits() -> None:
    spec = _spec2()
    coarse = fp.FixedPointPlan((8, 8), (8, 8), (), (1.0, 5.0))
    fine = fp.FixedPointPlan((20, 20), (20, 20), (), (1.0, 5.0))
    norms = [(4.0, 1.0), (8.0, 1.0)]
    assert 0 < fp.logit_error_bound(spec, fine, norms) < fp.logit_error_bound(
        spec, coarse, norms)


def test_hesv_breaks_exact_ties_as_the_plaintext_model() -> None:
    """A zero-initialised model scores every class 0: NSSV predicts class 0 everywhere;
    under CKKS the scores are noise around 0, and HESV must still predict class 0 (the
    round's empty coalition above is such a model: its utility enters every SSV)."""
    from fedsec.shapley.hesv import tie_break

    rng = np.random.default_rng(0)
    noise = rng.normal(scale=1e-9, size=(50, 4))
    labels, ties = tie_break(noise)
    assert (labels == 0).all() and ties == 50
    assert (np.argmax(noise, axis=1) != 0).any()  # what a plain argmax would have done
    # a real model: the argmax, near-ties included (no row is decided by a tolerance)
    scores = np.array([[0.1, 0.7, 0.7 + 1e-5, 0.2], [3.0, 1.0, 2.0, 5.0]])
    labels, ties = tie_break(scores)
    np.testing.assert_array_equal(labels, [2, 3])
    assert ties == 0
