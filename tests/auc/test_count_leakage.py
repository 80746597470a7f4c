"""Issue 22: what a party's whole view, or the server's, adds to the AUC about the class
counts (the denominator ``2*Pos*Neg``).

The search (:mod:`fedsec.testing.auc_counts`) keeps every candidate denominator consistent
with the AUC alone, and with the whole view: the mask's grid on the denominator and the
numerator channels, and the error bound. The attacking party adds no noise of its own and
knows the true noise scale. Goal: the whole view keeps at least half of what the AUC alone
keeps, at 10^4 samples, in single-mask, pair-mask and malicious mode; the same search finds
the denominator when the parties add no noise (the control: the search has the power to).
Larger federations: ``benchmarks/attack_auc_counts.py`` (figures in BENCHMARKS.md).
"""

from __future__ import annotations

import pytest

from fedsec.testing.auc_counts import (
    denominator_candidates,
    federation,
    observe,
    observe_malicious,
    server_candidates,
)

SAMPLES = 10_000
SCAN = dict(max_scan=1 << 22, samples=1 << 22)


@pytest.mark.parametrize("mode", ["single", "pair", "malicious"])
def test_whole_view_keeps_half_of_the_aucs_candidates(mode):
    parties = federation(SAMPLES, 1)
    view = (observe_malicious(parties) if mode == "malicious"
            else observe(parties, masking=mode))
    res = denominator_candidates(view, **SCAN)
    print(res)
    assert res["truth_survives_auc"] and res["truth_survives_view"]
    assert res["auc_alone"] >= 100    # the AUC alone leaves many candidates at 10^4
    assert res["whole_view"] >= 0.5 * res["auc_alone"]


def test_without_the_parties_noise_the_search_finds_the_denominator():
    """The control: same federation, every party quiet - the grid and the bound then
    leave the true denominator (and at most a few others) of the AUC's many."""
    view = observe(federation(SAMPLES, 1), noise=False)
    res = denominator_candidates(view, **SCAN)
    print(res)
    assert res["truth_survives_view"]
    assert res["auc_alone"] >= 100 and res["whole_view"] <= 0.01 * res["auc_alone"]


@pytest.mark.parametrize("mode", ["single", "pair", "malicious"])
def test_the_servers_view_of_shared_values_adds_nothing(mode):
    """What a node shares (malicious mode by default, semi-honest with ``share-auc``: the
    AUC to 6 digits, the bound rounded up to 2) keeps at least half of what the shared AUC
    alone keeps; the server sees nothing else but ciphertexts."""
    parties = federation(SAMPLES, 2)
    view = (observe_malicious(parties) if mode == "malicious"
            else observe(parties, masking=mode))
    res = server_candidates(view.auc, view.bound, view.true_denom, max_scan=1 << 22)
    print(res)
    assert res["auc_alone"] > 0 and res["whole_view"] >= 0.5 * res["auc_alone"]
