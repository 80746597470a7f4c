"""Encrypted BALANCE end to end (fedsec.pfl.secure_sim) against plaintext BALANCE.

Issue 12, "Done when" on a small case: with the same seeds, the encrypted run's acceptance
sets equal the exact plaintext Algorithm 1's on the same uploads except for pairs within
2^-alpha of the boundary (relative to the comparison's scale), under no attack, Gaussian,
sign flipping, ALIE and the adaptive balance-edge attack; Eq. 2 matches within CKKS noise;
final accuracies match; unclipped attackers come out invalid. Runs the real protocol on the
insecure test preset (small ring), 6 clients, the 98-parameter logistic task, 2 rounds.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from fedsec.learning.tasks import make_task  # noqa: E402
from fedsec.pfl.balance import BalanceConfig  # noqa: E402
from fedsec.pfl.secure import SecurePFLClient, SecurePFLConfig, SecurePFLSession  # noqa: E402
from fedsec.pfl.secure_sim import (  # noqa: E402
    SecurePFLRun,
    agreement,
    attacker_roles,
    run_secure_pfl,
)
from fedsec.pfl.selection import (  # noqa: E402
    PlaintextOracle,
    SelectionResult,
    efficient_selection,
    ineq1_margin,
)
from fedsec.pfl.simulate import NormClipping, clip_models, run_pfl  # noqa: E402

K = 6
ROUNDS = 2
CFG = SecurePFLConfig(preset="INSECURE_TEST_N4096_DEPTH16", sign_alpha=8, allow_insecure=True)
# gamma = 0.5: wide enough acceptance balls that benign clients accept each other and the
# attacks that stay close (sign flip, ALIE, balance-edge) are accepted by some.
BAL = BalanceConfig(gamma=0.5)


@pytest.fixture(scope="module")
def small():
    task = make_task("bank", n_samples=600, seed=3)
    return task, task.federate(K, alpha=0.5, seed=3)


@pytest.fixture(scope="module")
def session() -> SecurePFLSession:
    return SecurePFLSession.create(K, CFG)


_NEXT = {"round": 0}  # round numbers must increase within the shared session


def _run(small, session, attack, **kw) -> SecurePFLRun:
    task, fed = small
    r = run_secure_pfl(task, fed, rounds=ROUNDS, attack=attack, malicious=0.34, balance=BAL,
                       config=CFG, seed=4, session=session, first_round=_NEXT["round"], **kw)
    _NEXT["round"] = r.next_round
    return r


@pytest.mark.parametrize("attack", [None, "gaussian", "sign-flip", "alie", "balance-edge"])
def test_secure_balance_agrees_with_plaintext(small, session, attack) -> None:
    r = _run(small, session, attack)
    ag = r.agreement_totals()
    assert ag is not None and ag["rounds"] == ROUNDS and ag["pairs"] == ROUNDS * K * (K - 1)
    # every differing decision lies within 2^-alpha of the boundary
    assert ag["outside_band"] == 0, ag
    assert ag["in_band"] == ag["differing"]
    assert ag["valid_mismatch"] == 0
    assert ag["eq2_noise"] < 1e-4  # CKKS at scale 2^40, weights of size ~1
    # no client is invalid when everybody clips
    assert all(d.invalid == [] for d in r.details)
    # final accuracies: the trajectories differ by CKKS noise (and boundary pairs only)
    acc = r.accuracy_comparison()
    assert acc is not None and r.plaintext is not None
    if ag["differing"] == 0:
        # same sets every round: only CKKS noise separates the models
        assert r.run.accepted == r.plaintext.accepted
        assert abs(acc["mean_diff"]) <= 0.01 and abs(acc["worst_diff"]) <= 0.01
    else:
        # a boundary pair decided the other way changes one client's Eq. 2 in that round
        assert abs(acc["mean_diff"]) <= 0.1
    # cost accounting is present and plausible
    d0 = r.details[0]
    assert d0.sign_evaluations >= 1 and d0.pairs_checked >= d0.checks > 0
    assert min(d0.bytes_up) > 0 and min(d0.bytes_down) > 0 and d0.server_bytes_in > 0
    assert {"distances", "comparison", "aggregation", "total"} <= set(d0.seconds)
    assert r.key_setup_bytes and all(v > 0 for v in r.key_setup_bytes.values())


def test_attacks_reach_the_boundary(small, session) -> None:
    """The agreement test is not vacuous: under balance-edge some benign client accepts
    a malicious model and another rejects it (the attack sits on the boundary)."""
    r = _run(small, session, "balance-edge", compare=False)
    last = r.run.accepted[-1]
    benign = [i for i in range(K) if i not in r.run.malicious]
    hits = [any(j in last[i] for j in r.run.malicious) for i in benign]
    assert any(hits) and not all(hits)
    assert r.plaintext is None and all(d.agreement is None for d in r.details)


def test_unclipped_attackers_are_invalid(small, session) -> None:
    # the malicious clients' roles upload unclipped (the simulation's attacker)
    attackers = SecurePFLSession.create(K, CFG, clients=attacker_roles(
        K, 0.34, 4, unclipped_attackers=True))
    assert sum(type(c) is not SecurePFLClient for c in attackers.clients) == 2
    r = _run(small, attackers, "gaussian", unclipped_attackers=True)
    with pytest.raises(ValueError, match="client roles"):  # honest roles cannot attack
        _run(small, session, "gaussian", unclipped_attackers=True)
    bad = list(r.run.malicious)
    assert bad
    for d in r.details:
        assert d.invalid == bad
        assert d.agreement is not None and d.agreement.valid_mismatch == []
        # the invalid clients' far-out margins must not disturb the valid pairs'
        # comparisons (they share the SIMD sign evaluation)
        assert d.agreement.outside_band == 0, d.agreement
    for t, sets in enumerate(r.run.accepted):
        for i in range(K):
            if i in bad:
                assert sets[i] == [], (t, i)
            else:
                assert not set(sets[i]) & set(bad), (t, i)
    assert r.plaintext is not None
    assert r.plaintext.meta["invalid"] == [bad] * ROUNDS
    # both run Algorithm 1 over the valid clients only: same sets, same checks
    assert r.plaintext.accepted == r.run.accepted
    assert r.plaintext.checks == r.run.checks


def test_agreement_counts_boundary_and_outside_pairs() -> None:
    """The comparison itself: flip one pair near the boundary and one far from it."""
    rng = np.random.default_rng(0)
    w = rng.normal(size=(5, 20))
    w[1] = w[0] * 1.02
    sig = np.full(5, 0.3)
    valid = np.ones(5, dtype=bool)
    o = PlaintextOracle(w, sig)
    ref = efficient_selection(o.keys(), o)
    margins = {(i, j): ineq1_margin(w[i], w[j], 0.3) for i in range(5) for j in range(5)
               if i != j}
    near = min(margins, key=lambda p: abs(margins[p]))
    far = max(margins, key=lambda p: abs(margins[p]))
    scale = abs(margins[near]) * 2 ** 8 * 1.5  # the near pair is within 2^-8 of M
    assert abs(margins[far]) / scale > 2 ** -8
    sets = [set(s) for s in ref.accepted]
    for i, j in (near, far):
        sets[i] ^= {j}
    sel = SelectionResult(tuple(frozenset(s) for s in sets), ref.checks, ref.order,
                          ref.checked + (far,))
    pers = np.vstack([w[i] for i in range(5)])
    ag = agreement(w, sig, valid, sel, valid, pers, alpha=1.0, margin_scale=scale,
                   sign_alpha=8)
    assert ag.differing == 2 and ag.in_band == 1 and ag.outside_band_checked == 1
    assert ag.eq2_noise == 0.0  # alpha = 1: Eq. 2 is the own model
    bad_valid = valid.copy()
    bad_valid[3] = False
    ag2 = agreement(w, sig, valid, ref, bad_valid, pers, alpha=1.0, margin_scale=scale,
                    sign_alpha=8)
    assert ag2.differing == 0 and ag2.valid_mismatch == [3]


def test_plaintext_clipping_rule(small) -> None:
    task, fed = small
    models = np.array([[3.0, 4.0], [0.3, 0.4], [6.0, 8.0]])
    out = clip_models(models, 2.0, [True, True, False])
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), [2.0, 0.5, 10.0])
    assert NormClipping(1.25).round_bound(np.array([1.0, 2.0, 100.0])) == 2.5
    assert NormClipping(bound=3.0).round_bound(np.array([1.0])) == 3.0
    with pytest.raises(ValueError, match="clipping"):
        run_pfl(task, fed, method="fedavg", rounds=1, clipping=NormClipping())


def test_validation(small) -> None:
    task, fed = small
    with pytest.raises(ValueError, match="norm_factor"):
        run_secure_pfl(task, fed, rounds=1, config=CFG, norm_factor=0.0)
    with pytest.raises(TypeError, match="SecurePFLConfig"):
        run_secure_pfl(task, fed, rounds=1, config="CKKS")  # type: ignore[arg-type]
