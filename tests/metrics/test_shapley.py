"""Exact Shapley arithmetic against the definition: the average over all k! orderings."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsec.metrics.shapley import popcounts, shapley_values


def brute_force(v: np.ndarray) -> np.ndarray:
    k = int(len(v)).bit_length() - 1
    phi = np.zeros(k)
    for order in itertools.permutations(range(k)):
        mask = 0
        for i in order:
            phi[i] += v[mask | 1 << i] - v[mask]
            mask |= 1 << i
    return phi / math.factorial(k)


games = st.integers(1, 6).flatmap(
    lambda k: st.lists(st.floats(-1, 1, allow_nan=False), min_size=1 << k, max_size=1 << k))


@settings(max_examples=60, deadline=None)
@given(games)
def test_equals_average_over_all_orderings(values: list[float]) -> None:
    v = np.array(values)
    np.testing.assert_allclose(shapley_values(v), brute_force(v), atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(games)
def test_efficiency(values: list[float]) -> None:
    v = np.array(values)
    assert shapley_values(v).sum() == pytest.approx(v[-1] - v[0], abs=1e-12)


def test_symmetry_null_player_additivity() -> None:
    rng = np.random.default_rng(0)
    k = 5
    masks = np.arange(1 << k)
    # players 1 and 3 interchangeable; player 4 null
    base = rng.normal(size=(2, 3, 2))  # depends on player 0, |S ∩ {1, 3}|, player 2
    v = np.array([base[m & 1, (m >> 1 & 1) + (m >> 3 & 1), m >> 2 & 1] for m in masks])
    phi = shapley_values(v)
    assert phi[1] == pytest.approx(phi[3], abs=1e-12)
    assert phi[4] == pytest.approx(0.0, abs=1e-12)
    w = rng.normal(size=1 << k)
    np.testing.assert_allclose(shapley_values(v + w), phi + shapley_values(w), atol=1e-12)
    assert popcounts(3).tolist() == [0, 1, 1, 2, 1, 2, 2, 3]


def test_rejects_bad_tables() -> None:
    with pytest.raises(ValueError):
        shapley_values(np.zeros(3))
    with pytest.raises(ValueError):
        shapley_values(np.array([0.0, np.nan]))
