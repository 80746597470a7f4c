"""Algorithm 1 (seed 002) against brute force, with an independent exact reference."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from fedsec.pfl.balance import graph_neighbours
from fedsec.pfl.selection import (
    CertifiedKey,
    PlaintextOracle,
    brute_force_selection,
    complete_neighbours,
    efficient_selection,
)


def reference_sets(models: np.ndarray, sigmas: np.ndarray, neighbours=None) -> list[set[int]]:
    """Ineq. 1 in exact rational arithmetic, written independently of fedsec."""
    n = len(models)
    # every float64 is an integer times 2**-1100: compare integers exactly
    rows = [[int(Fraction(float(v)) * 2 ** 1100) for v in row] for row in models]
    out = []
    for i in range(n):
        s2 = Fraction(float(sigmas[i])) ** 2
        norm = sum(v * v for v in rows[i])
        cand = range(n) if neighbours is None else neighbours[i]
        out.append({j for j in cand if j != i
                    and sum((a - b) ** 2 for a, b in zip(rows[i], rows[j], strict=True))
                    <= s2 * norm})
    return out


def tie_heavy_instance(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Small integer vectors and dyadic thresholds: many exact ties, equal norms, repeats."""
    k = int(rng.integers(2, 13))
    d = int(rng.integers(1, 5))
    w = rng.integers(-2, 3, size=(k, d)).astype(np.float64)
    if rng.random() < 0.3:  # duplicated models
        w[rng.integers(0, k)] = w[rng.integers(0, k)]
    if rng.random() < 0.2:  # a zero model
        w[rng.integers(0, k)] = 0.0
    if rng.random() < 0.3:  # one shared threshold: equal keys whenever norms are equal
        sig = np.full(k, rng.choice([0.5, 1.0, 1.5]))
    else:
        sig = rng.choice([0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0], size=k)
    return w, sig


def clustered_instance(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Float models around a centre (benign-like), some outliers, sigma ~ U[0.1, 0.5]."""
    k = int(rng.integers(2, 31)) if rng.random() < 0.2 else int(rng.integers(2, 12))
    d = int(rng.integers(2, 12))
    centre = rng.normal(size=d)
    w = centre + rng.normal(scale=rng.uniform(0.02, 0.6), size=(k, d))
    bad = rng.random(k) < 0.2
    w[bad] = rng.normal(scale=2.0, size=(int(bad.sum()), d))
    return w, rng.uniform(0.1, 0.5, size=k)


def both(w: np.ndarray, sig: np.ndarray, neighbours=None):
    brute_oracle = PlaintextOracle(w, sig)
    brute = brute_force_selection(len(w), brute_oracle, neighbours=neighbours)
    eff_oracle = PlaintextOracle(w, sig)
    eff = efficient_selection(eff_oracle.keys(), eff_oracle, neighbours=neighbours)
    assert brute.checks == brute_oracle.evaluations
    assert eff.checks == eff_oracle.evaluations
    return brute, eff


def test_algorithm1_equals_brute_force_on_1200_random_instances() -> None:
    rng = np.random.default_rng(20240)
    saved = 0
    exact_used = 0
    for n in range(1200):
        w, sig = tie_heavy_instance(rng) if n % 2 == 0 else clustered_instance(rng)
        brute, eff = both(w, sig)
        ref = reference_sets(w, sig)
        assert [set(s) for s in brute.accepted] == ref, n
        assert [set(s) for s in eff.accepted] == ref, n
        k = len(w)
        assert brute.checks == k * (k - 1)
        assert eff.checks <= brute.checks
        assert len(set(eff.checked)) == eff.checks  # no pair is checked twice
        saved += brute.checks - eff.checks
        if n % 2 == 0:
            o = PlaintextOracle(w, sig)
            o([(i, j) for i in range(k) for j in range(k) if i != j])
            exact_used += o.exact_evaluations
    assert saved > 0
    assert exact_used > 0  # the tie-heavy half does exercise the exact fall-back


def test_algorithm1_on_random_graphs() -> None:
    rng = np.random.default_rng(7)
    for n in range(200):
        w, sig = tie_heavy_instance(rng) if n % 2 else clustered_instance(rng)
        kind = ("complete", "ring", "erdos-renyi")[n % 3]
        nbs = graph_neighbours(kind, len(w), p=0.4, rng=rng)
        brute, eff = both(w, sig, nbs)
        ref = reference_sets(w, sig, nbs)
        assert [set(s) for s in eff.accepted] == ref
        assert [set(s) for s in brute.accepted] == ref
        assert brute.checks == sum(len(s) for s in nbs)
        assert all(eff.accepted[i] <= nbs[i] for i in range(len(w)))


def test_wrong_order_breaks_agreement() -> None:
    """The comparison has teeth: Algorithm 1 fed reversed keys (so Theorem I's premise is
    false) disagrees with the brute force on some instance."""
    rng = np.random.default_rng(3)
    mismatches = 0
    for _ in range(300):
        w, sig = clustered_instance(rng)
        o = PlaintextOracle(w, sig)
        wrong = [-float(k.approx) for k in o.keys()]
        eff = efficient_selection(wrong, o)
        if [set(s) for s in eff.accepted] != reference_sets(w, sig):
            mismatches += 1
    assert mismatches > 0


def test_paper_setting_saves_checks() -> None:
    """30 clients, thresholds U[0.1, 0.5], similar models: far fewer than 870 checks."""
    rng = np.random.default_rng(0)
    w = rng.normal(size=200) + rng.normal(scale=0.05, size=(30, 200))
    sig = rng.uniform(0.1, 0.5, size=30)
    brute, eff = both(w, sig)
    assert brute.checks == 870
    assert eff.accepted == brute.accepted
    assert eff.checks < 870 // 2


def test_exact_tie_is_accepted() -> None:
    # ||w0 - w1||^2 = 1 = 0.5^2 * ||w0||^2 with ||w0||^2 = 4
    w = np.array([[2.0, 0.0], [2.0, 1.0]])
    o = PlaintextOracle(w, [0.5, 0.5])
    assert o.accepts(0, 1)
    assert o.exact_evaluations == 1
    o2 = PlaintextOracle(w, [0.5 - 2.0 ** -40, 0.5])
    assert not o2.accepts(0, 1)


def test_certified_key_order_is_exact() -> None:
    # keys equal in exact arithmetic but computed from different models
    w = np.array([[3.0, 4.0], [5.0, 0.0], [0.0, 5.0 + 2.0 ** -40]])
    o = PlaintextOracle(w, [0.5, 0.5, 0.5])
    k = o.keys()
    assert k[0] <= k[1] and k[1] <= k[0] and not k[0] < k[1]
    assert k[0] < k[2] and not k[2] <= k[0]
    assert k[0] * 4 <= k[0] * 4 and k[0] < k[0] * 4
    assert isinstance(k[0] * 4, CertifiedKey)


def test_oracle_must_answer_every_pair() -> None:
    with pytest.raises(ValueError, match="answer every pair"):
        brute_force_selection(3, lambda pairs: [True])


@pytest.mark.parametrize("bad", [np.array([[1.0, np.nan]]), np.zeros(3)])
def test_oracle_rejects_bad_models(bad: np.ndarray) -> None:
    with pytest.raises(ValueError, match="models"):
        PlaintextOracle(bad, [0.3] * len(np.atleast_2d(bad)))


def test_oracle_rejects_bad_sigmas() -> None:
    with pytest.raises(ValueError, match="sigmas"):
        PlaintextOracle(np.ones((2, 2)), [0.3, 0.0])


def test_neighbours_must_be_symmetric() -> None:
    with pytest.raises(ValueError, match="symmetric"):
        brute_force_selection(3, lambda p: [True] * len(p), neighbours=[{1}, set(), set()])


def test_complete_graph_checks_and_self_exclusion() -> None:
    nbs = complete_neighbours(4)
    assert all(i not in nbs[i] and len(nbs[i]) == 3 for i in range(4))
    res = brute_force_selection(4, lambda p: [True] * len(p))
    assert all(i not in res.accepted[i] for i in range(4))
    assert res.checks == 12
