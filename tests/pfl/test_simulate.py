"""BALANCE and baselines in real (small) training runs."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from fedsec.learning.tasks import make_task  # noqa: E402
from fedsec.pfl.balance import BalanceConfig  # noqa: E402
from fedsec.pfl.selection import (  # noqa: E402
    PlaintextOracle,
    brute_force_selection,
    efficient_selection,
)
from fedsec.pfl.simulate import RoundView, malicious_clients, run_pfl  # noqa: E402


@pytest.fixture(scope="module")
def small():
    task = make_task("digits", n_samples=500, seed=1)
    return task, task.federate(8, alpha=0.5, seed=1)


def test_algorithm1_equals_brute_force_on_every_round(small) -> None:
    """Every round of real runs (clean and under attacks, incl. the edge attack that puts
    models on the acceptance boundary), with the run's thresholds and with thresholds drawn
    from U[0.1, 0.5] as in seed 002."""
    task, fed = small
    rng = np.random.default_rng(0)
    rounds_seen = 0

    def check(view: RoundView) -> None:
        nonlocal rounds_seen
        rounds_seen += 1
        k = len(view.sent)
        for sig in (view.sigmas, rng.uniform(0.1, 0.5, size=k)):
            brute = brute_force_selection(k, PlaintextOracle(view.sent, sig))
            o = PlaintextOracle(view.sent, sig)
            eff = efficient_selection(o.keys(), o)
            assert eff.accepted == brute.accepted
            assert eff.checks <= brute.checks == k * (k - 1)
        assert view.selection is not None and view.selection.accepted == view.accepted
        assert view.accepted == brute_force_selection(
            k, PlaintextOracle(view.sent, view.sigmas)).accepted

    for attack in (None, "balance-edge", "sign-flip"):
        run_pfl(task, fed, method="balance", rounds=3, attack=attack, malicious=0.25,
                config=BalanceConfig(gamma=0.5), seed=2, observer=check)
    assert rounds_seen == 9


def test_deployments_and_selections_agree(small) -> None:
    task, fed = small
    kw = dict(method="balance", rounds=2, attack="ipm", malicious=0.25, seed=3)
    eff = run_pfl(task, fed, selection="efficient", **kw)
    brute = run_pfl(task, fed, selection="brute", **kw)
    dec = run_pfl(task, fed, deployment="complete", **kw)
    assert eff.accuracy == brute.accuracy == dec.accuracy
    assert eff.accepted == brute.accepted == dec.accepted
    assert brute.checks == dec.checks == [56, 56]
    assert all(e <= b for e, b in zip(eff.checks, brute.checks, strict=True))
    ring = run_pfl(task, fed, deployment="ring", **kw)
    assert ring.checks == [16, 16]
    assert all(set(s) <= {(i - 1) % 8, (i + 1) % 8} for i, s in enumerate(ring.accepted[0]))


def test_local_training_ignores_attacks(small) -> None:
    task, fed = small
    clean = run_pfl(task, fed, method="local", rounds=2, attack=None, seed=4)
    hit = run_pfl(task, fed, method="local", rounds=2, attack="gaussian", seed=4)
    assert clean.benign_accuracies() == hit.benign_accuracies()


def test_fedavg_matches_run_fedavg(small) -> None:
    """Without malicious clients our FedAvg baseline is fedsec.learning's FedAvg."""
    from fedsec.learning.fedavg import run_fedavg
    from fedsec.pfl.balance import flatten_params

    task, fed = small
    rec = run_fedavg(task, fed, rounds=2, seed=5)
    ours = run_pfl(task, fed, method="fedavg", rounds=2, malicious=0.0, seed=5)
    assert ours.models is not None
    final = flatten_params(rec.final_params)
    for row in ours.models:
        np.testing.assert_allclose(row, final, rtol=0, atol=1e-6)
    assert not np.allclose(final, flatten_params(rec.rounds[0].global_params), atol=1e-3)


def test_gaussian_attack_hurts_fedavg_not_balance(small) -> None:
    task, fed = small
    kw = dict(rounds=3, attack="gaussian", malicious=0.25, seed=6)
    bal = run_pfl(task, fed, method="balance", **kw)
    avg = run_pfl(task, fed, method="fedavg", **kw)
    assert bal.malicious_accepted_share() == 0.0
    assert bal.benign_mean() > avg.benign_mean() + 0.2


def test_robust_baseline_runs(small) -> None:
    task, fed = small
    r = run_pfl(task, fed, method="trimmed-mean", rounds=1, attack="trim", seed=7)
    assert len(r.benign_accuracies()) > 0 and r.checks == []


def test_validation(small) -> None:
    task, fed = small
    with pytest.raises(ValueError, match="method"):
        run_pfl(task, fed, method="avg")
    with pytest.raises(ValueError, match="deployment"):
        run_pfl(task, fed, deployment="star")
    with pytest.raises(ValueError, match="malicious"):
        run_pfl(task, fed, attack="ipm", malicious=0.0)
    with pytest.raises(ValueError, match="malicious"):
        malicious_clients(10, 0.5, 0)
    assert malicious_clients(10, 0.2, 0) == malicious_clients(10, 0.2, 0)
    assert len(malicious_clients(30, 0.2, 1)) == 6
