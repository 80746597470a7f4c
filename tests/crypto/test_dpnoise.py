"""Secure DP noise: distribution, scale, source of randomness, accountant.

Statistical tests use a fixed significance level ALPHA = 1e-6: each fails spuriously with
probability at most 1e-6.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest
from scipy import stats

from fedsec.crypto import dpnoise
from fedsec.crypto.dpnoise import (
    PrivacyAccountant,
    PrivacyBudgetExceeded,
    analytic_gaussian_sigma,
    gaussian_noise,
    laplace_noise,
    secure_bernoulli,
    secure_uniform,
)

ALPHA = 1e-6


def test_leading_zeros_matches_python_bit_length() -> None:
    words = [0, 1, 2, 3, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1]
    rng = np.random.default_rng(0)
    words += [int(w) for w in rng.integers(0, 2**63, 200, dtype=np.uint64)]
    arr = np.array(words, dtype=np.uint64)
    got = dpnoise._leading_zeros64(arr)
    assert got.tolist() == [64 - w.bit_length() for w in words]


def test_uniform_open_interval_and_ks() -> None:
    u = secure_uniform(50_000)
    assert u.dtype == np.float64 and u.shape == (50_000,)
    assert u.min() > 0.0 and u.max() < 1.0
    assert stats.kstest(u, "uniform").pvalue > ALPHA


def test_uniform_has_full_precision_near_zero() -> None:
    # k / 2**53 constructions give multiples of 2**-53 only; ours fills every binade.
    u = secure_uniform(200_000)
    small = u[u < 2.0**-10]
    assert small.size > 0
    # mantissas of small values are not multiples of 2**-53 (probability of all being so: 0)
    assert np.any(np.mod(small, 2.0**-53) != 0.0)
    # binade frequency: P(u < 2**-4) = 1/16, check with a binomial test
    k = int((u < 2.0**-4).sum())
    assert stats.binomtest(k, u.size, 1 / 16).pvalue > ALPHA


def test_uniform_rejects_bad_size() -> None:
    with pytest.raises(ValueError, match="'size' parameter of secure_uniform must be >= 0"):
        secure_uniform(-1)
    with pytest.raises(TypeError):
        secure_uniform(2.5)  # type: ignore[arg-type]
    assert secure_uniform(0).shape == (0,)


def test_noise_comes_from_os_urandom(monkeypatch: pytest.MonkeyPatch) -> None:
    def fixed(n: int) -> bytes:
        return bytes((i * 37 + 11) % 256 for i in range(n))

    monkeypatch.setattr(dpnoise.os, "urandom", fixed)
    a = laplace_noise(100, scale=1.0)
    b = laplace_noise(100, scale=1.0)
    np.testing.assert_array_equal(a, b)  # fully determined by os.urandom
    monkeypatch.undo()
    assert not np.array_equal(laplace_noise(100, scale=1.0), a)


@pytest.mark.parametrize("scale", [0.5, 400.0])
def test_laplace_distribution_and_variance(scale: float) -> None:
    x = laplace_noise(40_000, scale=scale)
    assert stats.kstest(x, "laplace", args=(0.0, scale)).pvalue > ALPHA
    # variance 2 b^2; sample variance of 40k Laplace draws has relative s.e. ~ sqrt(5/40k)
    assert abs(x.var() / (2 * scale**2) - 1) < 6 * math.sqrt(5 / 40_000)


def test_gaussian_distribution() -> None:
    x = gaussian_noise(40_000, sigma=3.0)
    assert stats.kstest(x, "norm", args=(0.0, 3.0)).pvalue > ALPHA


def test_bernoulli_rate() -> None:
    b = secure_bernoulli(40_000, p=0.2)
    assert stats.binomtest(int(b.sum()), b.size, 0.2).pvalue > ALPHA
    assert not secure_bernoulli(1000, p=0.0).any()
    with pytest.raises(ValueError, match="'p' parameter of secure_bernoulli must be <= 1.0"):
        secure_bernoulli(3, p=1.5)


def test_noise_rejects_bad_scale() -> None:
    with pytest.raises(ValueError, match="'scale' parameter of laplace_noise must be > 0"):
        laplace_noise(3, scale=0.0)
    with pytest.raises(ValueError, match="'sigma' parameter of gaussian_noise must be > 0"):
        gaussian_noise(3, sigma=-1.0)


@pytest.mark.parametrize(("eps", "delta", "sens"), [(1.0, 1e-5, 1.0), (8.0, 1e-6, 14.1)])
def test_analytic_gaussian_is_tight(eps: float, delta: float, sens: float) -> None:
    sigma = analytic_gaussian_sigma(epsilon=eps, delta=delta, sensitivity=sens)
    phi = NormalDist().cdf

    def profile(s: float) -> float:
        a, c = sens / (2 * s), eps * s / sens
        return phi(a - c) - math.exp(eps) * phi(-a - c)

    assert profile(sigma) <= delta * (1 + 1e-9)
    assert profile(sigma * (1 - 1e-6)) > delta  # smallest such sigma
    if eps < 1 or eps == 1.0:
        classical = sens * math.sqrt(2 * math.log(1.25 / delta)) / eps
        assert sigma < classical


def test_accountant_composes_and_enforces_budget() -> None:
    acc = PrivacyAccountant(epsilon_budget=2.0, delta_budget=1e-5)
    acc.spend(1.0, label="a")
    acc.spend(0.5, 1e-6, label="b")
    assert acc.total == (1.5, 1e-6)
    assert [s.label for s in acc.spends] == ["a", "b"]
    with pytest.raises(PrivacyBudgetExceeded, match="budget"):
        acc.spend(0.6)
    assert acc.total == (1.5, 1e-6)  # refused spends are not recorded
    acc.spend(0.5)
    assert acc.remaining[0] == pytest.approx(0.0)
    with pytest.raises(ValueError, match="'epsilon' parameter"):
        acc.spend(-1.0)
    with pytest.raises(ValueError, match="'epsilon_budget' parameter"):
        PrivacyAccountant(epsilon_budget=0.0)
