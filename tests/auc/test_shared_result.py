"""What a node shares of its result: the AUC and its bound, rounded (auc.common.shared_result)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from fedsec.auc.common import shared_result


def test_rounds_to_stated_digits() -> None:
    assert shared_result(0.8765432109876, 3.21e-7) == (0.876543, 5.4e-7)
    assert shared_result(0.5, 0.123456) == (0.5, 0.13)
    assert shared_result(1.0, 0.0) == (1.0, 0.0)
    assert shared_result(0.0, 0.0) == (0.0, 0.0)
    assert shared_result(0.87654321, 1e-3, 3, bound_digits=1) == (0.877, 0.002)
    assert shared_result(0.99999996, 1e-9)[0] == 1.0  # clipped into [0, 1]


def test_shared_pair_is_still_certified() -> None:
    rng = np.random.default_rng(0)
    for _ in range(2000):
        auc = float(rng.random())
        bound = float(10.0 ** rng.uniform(-12, -1)) if rng.random() < 0.9 else 0.0
        digits = int(rng.integers(1, 10))
        bdigits = int(rng.integers(1, 4))
        s_auc, s_bound = shared_result(auc, bound, digits, bound_digits=bdigits)
        assert s_bound >= bound
        assert abs(s_auc - auc) <= s_bound
        # any exact value the full pair admits, the shared pair admits too
        for exact in (auc - bound, auc + bound):
            assert abs(Fraction(exact) - Fraction(s_auc)) <= Fraction(s_bound)
        assert float(f"{s_bound:.{bdigits}g}") == s_bound


def test_rounded_auc_no_longer_pins_the_fraction() -> None:
    # 2*Pos*Neg at 3,000 positives and 7,000 negatives; the AUC alone to 1e-16 gives the
    # exact fraction back, six digits give only a small-denominator approximation
    pos, neg = 3000, 7000
    denom = 2 * pos * neg
    num = 2 * 15_123_457 + 1
    auc = num / denom
    assert Fraction(auc).limit_denominator(denom) == Fraction(num, denom)
    s_auc, _ = shared_result(auc, 1e-9)
    assert Fraction(s_auc).limit_denominator(denom).denominator <= 10**6


@pytest.mark.parametrize(
    ("args", "kwargs", "exc", "match"),
    [
        ((1.5, 0.1), {}, ValueError, "'auc' parameter of shared_result must be <= 1.0"),
        ((math.nan, 0.1), {}, ValueError, "'auc' parameter of shared_result must be finite"),
        ((0.5, -1e-9), {}, ValueError, "'bound' parameter of shared_result must be >= 0.0"),
        ((0.5, 0.1, 0), {}, ValueError, "'digits' parameter of shared_result"),
        ((0.5, 0.1, 18), {}, ValueError, "'digits' parameter of shared_result"),
        ((0.5, 0.1), {"bound_digits": 0}, ValueError, "'bound_digits' parameter"),
        ((0.5, 0.1, 2.0), {}, TypeError, "'digits' parameter of shared_result"),
        (("0.5", 0.1), {}, TypeError, "'auc' parameter of shared_result"),
    ],
)
def test_invalid_arguments(args: tuple, kwargs: dict, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        shared_result(*args, **kwargs)
