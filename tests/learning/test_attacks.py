"""Poisoning attacks: definitions, cross-checks against byzfl, edge cases."""

from __future__ import annotations

import numpy as np
import pytest

from fedsec.learning.attacks import (
    ATTACKS,
    ALittleIsEnough,
    BalanceEdge,
    FangTrim,
    Gaussian,
    InnerProductManipulation,
    LabelFlipping,
    MinMax,
    MinSum,
    SignFlipping,
    alie_z_max,
    make_attack,
)
from fedsec.pfl.robust import load_byzfl, robust_aggregator


@pytest.fixture(scope="module")
def byz():  # byzfl's aggregators and attacks modules
    return load_byzfl()


def honest(seed: int = 0, n: int = 8, d: int = 50) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(size=d) + rng.normal(scale=0.3, size=(n, d))


@pytest.mark.parametrize("seed", range(5))
def test_sign_flip_ipm_alie_match_byzfl(byz, seed: int) -> None:
    _, attacks = byz
    x = honest(seed)
    rng = np.random.default_rng(seed)
    np.testing.assert_allclose(SignFlipping()(x, rng)[0], attacks.SignFlipping()(x), rtol=1e-12)
    for tau in (0.5, 2.0, 7.0):
        np.testing.assert_allclose(InnerProductManipulation(tau)(x, rng, n_malicious=3),
                                   np.tile(attacks.InnerProductManipulation(tau)(x), (3, 1)),
                                   rtol=1e-12)
        np.testing.assert_allclose(ALittleIsEnough(tau)(x, rng)[0],
                                   attacks.ALittleIsEnough(tau)(x), rtol=1e-12)


def test_label_flip_mean_matches_byzfl(byz) -> None:
    _, attacks = byz
    x = honest(3, n=4)
    rng = np.random.default_rng(0)
    np.testing.assert_allclose(LabelFlipping(share_mean=True)(x, rng, n_malicious=2)[1],
                               attacks.LabelFlipping()(x), rtol=1e-12)
    np.testing.assert_array_equal(LabelFlipping()(x, rng, n_malicious=4), x)
    assert LabelFlipping.flip(np.array([0, 3, 9]), 10).tolist() == [9, 6, 0]
    with pytest.raises(ValueError, match="expected 2 rows"):
        LabelFlipping()(x, rng, n_malicious=2)


def test_gaussian_matches_byzfl_in_distribution(byz) -> None:
    _, attacks = byz
    x = honest(1, d=20000)
    ours = Gaussian(0.5, 2.0)(x, np.random.default_rng(1), n_malicious=2)
    theirs = attacks.Gaussian(mu=0.5, sigma=2.0)(x)  # byzfl draws from np.random
    for v in (ours[0], ours[1], theirs):
        assert v.shape == (20000,)
        assert abs(v.mean() - 0.5) < 0.06 and abs(v.std() - 2.0) < 0.06
    assert not np.array_equal(ours[0], ours[1])  # independent per malicious client
    again = Gaussian(0.5, 2.0)(x, np.random.default_rng(1), n_malicious=2)
    np.testing.assert_array_equal(ours, again)  # reproducible from the seeded generator


def test_alie_z_max() -> None:
    # n = 50, f = 10: s = 26 - 10 = 16, Phi^{-1}(34/50) ~= 0.4677
    assert alie_z_max(50, 10) == pytest.approx(0.4677, abs=1e-3)
    x = honest(2)
    v = ALittleIsEnough()(x, np.random.default_rng(0), n_malicious=2)[0]
    z = alie_z_max(10, 2)
    np.testing.assert_allclose(v, x.mean(0) + z * x.std(0, ddof=1))


@pytest.mark.parametrize("perturbation", ["unit", "std", "sign"])
def test_min_max_is_tight(perturbation: str) -> None:
    x = honest(4)
    v = MinMax(perturbation)(x, np.random.default_rng(0))[0]
    pair = max(np.linalg.norm(a - b) for a in x for b in x)
    worst = max(np.linalg.norm(v - a) for a in x)
    assert worst == pytest.approx(pair, rel=1e-9)  # on the constraint's boundary
    assert not np.allclose(v, x.mean(0))


@pytest.mark.parametrize("perturbation", ["unit", "std", "sign"])
def test_min_sum_is_tight(perturbation: str) -> None:
    x = honest(5)
    v = MinSum(perturbation)(x, np.random.default_rng(0))[0]
    bound = max(sum(np.linalg.norm(a - b) ** 2 for b in x) for a in x)
    total = sum(np.linalg.norm(v - a) ** 2 for a in x)
    assert total == pytest.approx(bound, rel=1e-9)


def test_min_max_bisection_agrees() -> None:
    """The closed form equals the paper's search (bisection on g)."""
    x = honest(6)
    mean = x.mean(0)
    p = -mean / np.linalg.norm(mean)
    bound = max(np.linalg.norm(a - b) for a in x for b in x)
    lo, hi = 0.0, 1e3
    for _ in range(200):
        mid = (lo + hi) / 2
        ok = max(np.linalg.norm(mean + mid * p - a) for a in x) <= bound
        lo, hi = (mid, hi) if ok else (lo, mid)
    v = MinMax("unit")(x, np.random.default_rng(0))[0]
    assert np.linalg.norm(v - mean) == pytest.approx(lo, rel=1e-9)


def test_trim_attack_direction() -> None:
    x = honest(7)
    out = FangTrim()(x, np.random.default_rng(0), n_malicious=4)
    s = np.sign(x.sum(0))
    lo, hi = x.min(0), x.max(0)
    # every malicious value lies beyond the honest range, against the honest direction
    for row in out:
        assert np.all(np.where(s > 0, row <= lo + 1e-15, row >= hi - 1e-15))
        assert np.all(np.abs(row) <= 2 * np.maximum(np.abs(lo), np.abs(hi)) + 1e-12)
    assert not np.array_equal(out[0], out[1])


def test_trim_attack_breaks_trimmed_mean_more_than_noise() -> None:
    x = honest(8, n=16)
    rng = np.random.default_rng(0)
    agg = robust_aggregator("trimmed-mean", 4)
    clean = agg(x)
    hit = agg(np.vstack([x[:12], FangTrim()(x[:12], rng, n_malicious=4)]))
    noise = agg(np.vstack([x[:12], x[:12].mean(0) + rng.normal(scale=0.01, size=(4, 50))]))
    assert np.linalg.norm(hit - clean) > 3 * np.linalg.norm(noise - clean)


def test_balance_edge_is_on_the_edge() -> None:
    x = honest(9, n=10)
    rho = np.full(10, 1.5 * np.sqrt(50) * 0.3)  # comparable to the honest spread
    for coverage in (0.3, 0.5, 1.0):
        v = BalanceEdge(coverage)(x, np.random.default_rng(0), radii=rho)[0]
        inside = np.linalg.norm(x - v, axis=1) <= rho
        assert inside.sum() >= np.ceil(coverage * 10)
        # a little further along the same direction loses coverage
        d = v - x.mean(0)
        further = x.mean(0) + d * 1.001
        assert (np.linalg.norm(x - further, axis=1) <= rho).sum() < np.ceil(coverage * 10)
    with pytest.raises(ValueError, match="radii"):
        BalanceEdge()(x, np.random.default_rng(0))


def test_registry_and_validation() -> None:
    assert set(ATTACKS) == {"gaussian", "sign-flip", "label-flip", "alie", "ipm", "min-max",
                            "min-sum", "trim", "balance-edge"}
    assert isinstance(make_attack("ipm", tau=3.0), InnerProductManipulation)
    with pytest.raises(ValueError, match="attack"):
        make_attack("nope")
    with pytest.raises(TypeError, match="Generator"):
        SignFlipping()(honest(), 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="finite"):
        SignFlipping()(np.array([[np.nan]]), np.random.default_rng(0))
    with pytest.raises(ValueError, match="perturbation"):
        MinMax("flip")


def test_byzfl_aggregators_against_numpy(byz) -> None:
    x = honest(10, n=9)
    f = 2
    srt = np.sort(x, axis=0)
    np.testing.assert_allclose(robust_aggregator("trimmed-mean", f)(x), srt[f:-f].mean(0))
    np.testing.assert_allclose(robust_aggregator("median", f)(x), np.median(x, axis=0))
    d2 = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    scores = np.sort(d2, axis=1)[:, 1:len(x) - f].sum(1)
    np.testing.assert_allclose(robust_aggregator("krum", f)(x), x[np.argmin(scores)])
