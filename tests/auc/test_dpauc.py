"""DPAUC_Lap / Gaussian / RR against the plaintext reference and the papers' findings.

Statistical checks use bounds whose false-failure probability is below 1e-6.
"""

from __future__ import annotations

import math
import struct
import warnings

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import roc_auc_score

from fedsec.auc import dpauc as dp
from fedsec.auc.dpauc import (
    DPAUCClient,
    DPAUCServer,
    RRClient,
    debias_rr_auc,
    dpauc,
    laplace_scale,
    local_statistics,
    noisy_trapezoid_auc,
    parse_submission,
    rr_flip_probability,
    simulate_dpauc_runs,
)
from fedsec.crypto.dpnoise import PrivacyAccountant, PrivacyBudgetExceeded
from fedsec.data.splits import apply_split, iid_split
from fedsec.data.synthetic import CRITEO_LIKE, binormal_scores
from fedsec.errors import PrivacyWarning, ProtocolError, UndefinedMetricError
from fedsec.metrics import trapezoid_auc, trapezoid_auc_from_counts

ALPHA = 1e-6


def _parties(n: int, k: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    y, s = CRITEO_LIKE.sample(n, seed=seed)
    return apply_split(y, s, iid_split(n, k, seed=seed))


@pytest.mark.parametrize("seed", range(5))
def test_noise_free_estimator_equals_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 400))
    y = rng.integers(0, 2, n)
    y[:2] = [0, 1]
    s = np.round(rng.random(n), 2)
    for points in (25, 100, sorted(set(s.tolist()))):
        st = local_statistics(y, s, points)
        got = noisy_trapezoid_auc(st.tp, st.fp, st.tn, st.fn)
        assert got == pytest.approx(trapezoid_auc_from_counts(st.tp.astype(int),
                                                              st.fp.astype(int)), abs=1e-12)
    # with every distinct score as a point, the reference equals scikit-learn
    assert got == pytest.approx(roc_auc_score(y, s), abs=1e-12)


def test_zero_noise_roles_and_simulation_match_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    parties = _parties(3000, 4)
    y = np.concatenate([p[0] for p in parties])
    s = np.concatenate([p[1] for p in parties])
    monkeypatch.setattr(dp, "laplace_noise", lambda size, *, scale: np.zeros(size))
    res = dpauc(parties, epsilon=1.0, decision_points=50)
    ref = trapezoid_auc(y, s, 50)
    assert res.auc == pytest.approx(ref, abs=1e-12)
    stats_ = [local_statistics(a, b, 50) for a, b in parties]
    sim = simulate_dpauc_runs(stats_, epsilon=1.0, runs=3)
    np.testing.assert_allclose(sim, ref, atol=1e-12)


def test_submission_noise_has_laplace_scale() -> None:
    y, s = CRITEO_LIKE.sample(2000, seed=1)
    exact = local_statistics(y, s, 25).stacked()
    client = DPAUCClient(y, s, epsilon=2.0, decision_points=25)
    noise = np.concatenate([
        (parse_submission(client.submit()).stats.stacked() - exact).ravel() for _ in range(40)
    ])
    b = laplace_scale(epsilon=2.0, n_points=25)
    assert b == 50.0  # eps' = eps / (4N) = 0.02, scale 1/eps'
    assert stats.kstest(noise, "laplace", args=(0.0, b)).pvalue > ALPHA
    assert client.accountant.total == (80.0, 0.0)  # every evaluation spends epsilon again


def test_gaussian_submission_scale() -> None:
    y, s = CRITEO_LIKE.sample(1000, seed=2)
    exact = local_statistics(y, s, 25).stacked()
    client = DPAUCClient(y, s, epsilon=1.0, decision_points=25, mechanism="gaussian",
                         delta=1e-6)
    noise = np.concatenate([
        (parse_submission(client.submit()).stats.stacked() - exact).ravel() for _ in range(20)
    ])
    sigma = dp.gaussian_sigma(epsilon=1.0, delta=1e-6, n_points=25)
    assert stats.kstest(noise, "norm", args=(0.0, sigma)).pvalue > ALPHA
    assert client.accountant.total == pytest.approx((20.0, 2e-5))


def test_accountant_budget_stops_repeated_evaluation() -> None:
    y, s = CRITEO_LIKE.sample(500, seed=3)
    acc = PrivacyAccountant(epsilon_budget=2.0)
    client = DPAUCClient(y, s, epsilon=1.0, accountant=acc)
    client.submit()
    client.submit()
    with pytest.raises(PrivacyBudgetExceeded):
        client.submit()


def test_small_data_is_unusable_at_epsilon_1() -> None:
    # seed 000 Table I: 10^2 samples, 15 parties, eps = 1 -> std in the thousands
    parties = _parties(100, 15, seed=4)
    st = [local_statistics(a, b, 100) for a, b in parties]
    aucs = simulate_dpauc_runs(st, epsilon=1.0, runs=200)
    assert np.std(aucs) > 1.0


def test_large_data_eps8_within_001() -> None:
    parties = _parties(100_000, 15, seed=5)
    y = np.concatenate([p[0] for p in parties])
    s = np.concatenate([p[1] for p in parties])
    truth = roc_auc_score(y, s)
    st = [local_statistics(a, b, 100) for a, b in parties]
    aucs = simulate_dpauc_runs(st, epsilon=8.0, runs=50)
    assert abs(aucs.mean() - truth) < 0.01
    assert np.std(aucs) < 0.01
    assert np.max(np.abs(aucs - truth)) < 0.03  # ~8 sigma per run


def test_rr_debias_identity() -> None:
    for eps, pi, auc in [(1.0, 0.25, 0.75), (2.0, 0.6, 0.95), (8.0, 0.1, 0.6)]:
        rho = rr_flip_probability(eps)
        pi_n = pi * (1 - 2 * rho) + rho
        a = (1 - pi) * rho / pi_n
        b = pi * rho / (1 - pi_n)
        noisy = (1 - a - b) * auc + (a + b) / 2
        assert debias_rr_auc(noisy, noisy_prior=pi_n, epsilon=eps) == pytest.approx(auc)


def test_rr_recovers_truth_on_big_data() -> None:
    y, s = binormal_scores(20_000, auc=0.75, prior=0.26, seed=6)
    parties = apply_split(y, s, iid_split(y.size, 5, seed=6))
    truth = trapezoid_auc(y, s, 200)
    with pytest.warns(PrivacyWarning, match="score histogram"):
        res8 = dpauc(parties, epsilon=8.0, decision_points=200, mechanism="rr")
    assert abs(res8.auc - truth) < 0.002
    # eps = 1 on 200k: rho = 0.27, debiased std is ~0.003; 0.02 is > 6 sigma
    y, s = binormal_scores(200_000, auc=0.75, prior=0.26, seed=7)
    truth = trapezoid_auc(y, s, 200)
    with pytest.warns(PrivacyWarning):
        res1 = dpauc([(y, s)], epsilon=1.0, decision_points=200, mechanism="rr")
    assert abs(res1.auc - truth) < 0.02
    assert abs(res1.noisy_auc - truth) > 0.05  # flipping really biases, debiasing fixes it


def test_rr_score_noise_degrades_auc() -> None:
    y, s = binormal_scores(20_000, auc=0.9, prior=0.4, seed=8)
    acc = PrivacyAccountant()
    c = RRClient(y, s, epsilon=8.0, score_epsilon=1.0, accountant=acc)
    assert acc.total == (9.0, 0.0)
    res = DPAUCServer().aggregate([c.submit()])
    assert res.auc < 0.75  # seed 003 Table 3: eps <= 10 on scores ruins the AUC


def test_rr_labels_are_flipped_once() -> None:
    y, s = binormal_scores(5000, auc=0.8, prior=0.5, seed=9)
    with pytest.warns(PrivacyWarning):
        c = RRClient(y, s, epsilon=1.0)
    assert c.submit() == c.submit()
    rate = float(np.mean(c._flipped_labels != y))  # noqa: SLF001 (the flips are private)
    assert stats.binomtest(int(rate * y.size), y.size, rr_flip_probability(1.0)).pvalue > ALPHA


def test_invalid_parameters() -> None:
    y, s = np.array([0, 1, 1]), np.array([0.1, 0.5, 0.9])
    with pytest.raises(ValueError, match="The 'epsilon' parameter of DPAUCClient must be > 0"):
        DPAUCClient(y, s, epsilon=0.0)
    with pytest.raises(TypeError, match="'epsilon' parameter of DPAUCClient must be a real"):
        DPAUCClient(y, s, epsilon="1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'mechanism' parameter of dpauc must be one of"):
        dpauc([(y, s)], epsilon=1.0, mechanism="exponential")
    with pytest.raises(ValueError, match="'delta' parameter of DPAUCClient is required"):
        DPAUCClient(y, s, epsilon=1.0, mechanism="gaussian")
    with pytest.raises(ValueError, match="must be None for the Laplace"):
        DPAUCClient(y, s, epsilon=1.0, delta=1e-5)
    with pytest.raises(ValueError, match="y_true of DPAUCClient|y_true of local_statistics"):
        DPAUCClient([0, 2], [0.1, 0.2], epsilon=1.0)
    with pytest.warns(PrivacyWarning, match="weak privacy"):
        DPAUCClient(y, s, epsilon=50.0)


def test_one_class_is_undefined(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dp, "laplace_noise", lambda size, *, scale: np.zeros(size))
    with pytest.raises(UndefinedMetricError):
        dpauc([(np.ones(5, int), np.linspace(0, 1, 5))], epsilon=1.0)


def test_malformed_messages_raise_protocol_error() -> None:
    y, s = CRITEO_LIKE.sample(200, seed=10)
    good = DPAUCClient(y, s, epsilon=1.0, decision_points=10).submit()
    parse_submission(good)
    for bad in (b"", good[:10], good[:-8], good + b"\0" * 8, b"XXXX" + good[4:],
                good[:4] + b"\x09" + good[5:]):
        with pytest.raises(ProtocolError):
            parse_submission(bad)
    nan = good[:-8] + struct.pack(">d", math.nan)
    with pytest.raises(ProtocolError, match="non-finite"):
        parse_submission(nan)
    other = DPAUCClient(y, s, epsilon=1.0, decision_points=20).submit()
    with pytest.raises(ProtocolError, match="decision points"):
        DPAUCServer().aggregate([good, other])
    other_eps = DPAUCClient(y, s, epsilon=2.0, decision_points=10).submit()
    with pytest.raises(ProtocolError, match="privacy parameters"):
        DPAUCServer().aggregate([good, other_eps])
    with pytest.raises(ProtocolError):
        DPAUCServer().aggregate([])


def test_no_warning_in_normal_laplace_use() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dpauc(_parties(1000, 3), epsilon=8.0)


def _rr_submission(tp: list[float], fp: list[float], tn: list[float], fn: list[float]) -> bytes:
    """A bare DPAUC_RR statistics message (what one party sends) with chosen counts."""
    points = np.linspace(0.75, 0.25, len(tp))
    st = dp.PartyStatistics(points, *(np.asarray(a, dtype=np.float64) for a in (tp, fp, tn, fn)))
    return dp._encode("rr", 1.0, 0.0, st)  # noqa: SLF001 (a hostile party's own encoder)


@pytest.mark.parametrize(
    ("tp", "fp", "tn", "fn"),
    [
        # no negatives but a denormal TN: the flipped prior rounds to exactly 1.0
        ([1.0, 2.0, 3.0], [0.0] * 3, [5e-324] * 3, [2.0, 1.0, 0.0]),
        # no positives but a denormal FN: the prior is denormal, the debiasing overflows
        ([0.0] * 3, [1.0, 2.0, 3.0], [2.0, 1.0, 0.0], [5e-324] * 3),
        # whole counts 2**60 apart: the prior rounds to 1.0
        ([2.0**60] * 3, [0.0, 0.0, 1.0], [1.0, 1.0, 0.0], [0.0] * 3),
        # counts 1e150 against 1: the prior rounds to 1.0
        ([1e150] * 3, [0.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0] * 3),
        # a denormal positive total: the prior underflows to 0.0
        ([5e-324] * 3, [0.0, 1.0, 2.0], [2.0, 1.0, 0.0], [0.0] * 3),
        # no flipped positives at all
        ([0.0, 0.0, 0.0], [1.0, 2.0, 3.0], [2.0, 1.0, 0.0], [0.0] * 3),
    ],
)
def test_rr_degenerate_prior_is_undefined(tp: list[float], fp: list[float], tn: list[float],
                                          fn: list[float]) -> None:
    with pytest.raises(UndefinedMetricError):
        DPAUCServer().aggregate([_rr_submission(tp, fp, tn, fn)])


def test_rr_prior_at_flip_rate_is_undefined() -> None:
    rho = rr_flip_probability(1.0)
    # the estimated true prior is <= 0 or >= 1: one true class only
    for prior in (rho, rho / 2, 1 - rho, 1 - rho / 2, 0.0, 1.0, 5e-324, 1 - 2**-53):
        with pytest.raises(UndefinedMetricError):
            debias_rr_auc(0.7, noisy_prior=prior, epsilon=1.0)
    with pytest.raises(UndefinedMetricError, match="no information"):
        debias_rr_auc(0.7, noisy_prior=0.5, epsilon=1e-17)
    for bad in (-0.1, 1.1, math.nan):
        with pytest.raises(ValueError, match="noisy_prior"):
            debias_rr_auc(0.7, noisy_prior=bad, epsilon=1.0)
    # just inside the flip rate the estimate is a (large) finite number, never inf or nan
    got = debias_rr_auc(0.7, noisy_prior=rho * (1 + 1e-9), epsilon=1.0)
    assert math.isfinite(got)


def test_laplace_cancelled_denominator_is_undefined() -> None:
    # noise that cancels a class total to exactly zero at one point: undefined, not inf
    points = np.array([0.75, 0.25])
    st = dp.PartyStatistics(points, np.array([1e150, 1e150]), np.array([1.0, 2.0]),
                            np.array([1.0, 0.0]), np.array([-1e150 + 1e134, -1e150]))
    sub = dp._encode("laplace", 1.0, 0.0, st)  # noqa: SLF001
    with pytest.raises(UndefinedMetricError):
        DPAUCServer().aggregate([sub])


def test_rr_inconsistent_class_totals_are_a_protocol_error() -> None:
    # the flipped prior is read at the first point: totals that vary make it arbitrary
    for bad in (_rr_submission([1.0, 2.0], [0.0, 1.0], [3.0, 2.0], [2.0, 2.0]),
                _rr_submission([1.0, 2.0], [0.0, 1.0], [3.0, 3.0], [2.0, 1.0])):
        with pytest.raises(ProtocolError, match="class totals"):
            DPAUCServer().aggregate([bad])
    ok = _rr_submission([1.0, 2.0], [0.0, 1.0], [3.0, 2.0], [2.0, 1.0])
    assert math.isfinite(DPAUCServer().aggregate([ok, ok]).auc)
