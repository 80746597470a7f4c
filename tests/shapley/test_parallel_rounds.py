"""Rounds evaluated in parallel give the sequential run's FSVs (seed 004, Sec. 6.2.2)."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from fedsec.runtime.parallel import shapley_in_parallel
from fedsec.shapley.fsv import federated_shapley
from fedsec.shapley.secsv import secsv_shapley

pytestmark = pytest.mark.filterwarnings(
    "ignore:.*schedule='paper'.*:fedsec.errors.PrivacyWarning")


def _sets(tr):  # type: ignore[no-untyped-def]
    return [(c.x_test, c.y_test) for c in tr.fed.clients]


def test_record_slices_keep_their_position(agnews_small) -> None:  # type: ignore[no-untyped-def]
    rec = agnews_small.record
    part = rec.slice(1, 3)
    assert part.n_rounds == 2 and part.first_round == 1 and part.slice(1, 2).first_round == 2
    assert part.rounds[0] is rec.rounds[1]
    with pytest.raises(ValueError, match="slice"):
        rec.slice(2, 2)


def test_nssv_estimator_in_parallel_equals_sequential(agnews_small) -> None:  # type: ignore[no-untyped-def]
    tr = agnews_small
    seq = federated_shapley(tr.record, tr.x, tr.y, estimator="ps", budget=3, seed=4)
    par = shapley_in_parallel("nssv", tr.record, _sets(tr), workers=2, estimator="ps",
                              budget=3, seed=4)
    np.testing.assert_array_equal(par.ssv, seq.ssv)
    np.testing.assert_array_equal(par.fsv, seq.fsv)
    assert par.models_tested == seq.models_tested


def test_secsv_in_parallel_equals_sequential(agnews_small) -> None:  # type: ignore[no-untyped-def]
    tr = agnews_small
    seq = secsv_shapley(tr.record, _sets(tr), sample_skip=True, schedule="paper")
    par = shapley_in_parallel("secsv", tr.record, _sets(tr), workers=2, sample_skip=True,
                              schedule="paper")
    np.testing.assert_array_equal(par.ssv, seq.ssv)  # exact shares: bit-identical
    assert par.protocol == "secsv" and par.skip.skipped == seq.skip.skipped
    assert par.accounting.total_bytes > seq.accounting.total_bytes  # one key set-up per slice
    with pytest.raises(ValueError, match="protocol"):
        shapley_in_parallel("fast", tr.record, _sets(tr))


def test_secsv_derived_in_parallel_equals_sequential(agnews_small) -> None:  # type: ignore[no-untyped-def]
    """The default (derived decryption for this one-layer model) in round slices."""
    tr = agnews_small
    seq = secsv_shapley(tr.record, _sets(tr), schedule="paper")
    par = shapley_in_parallel("secsv", tr.record, _sets(tr), workers=2, schedule="paper")
    np.testing.assert_array_equal(par.ssv, seq.ssv)
    kinds = {k for (_s, _r, k) in par.accounting.messages}
    assert "secsv/decrypt-all" in kinds and par.models_tested == seq.models_tested


# Ray's shutdown leaves its helper processes to exit on their own.
@pytest.mark.filterwarnings("ignore::ResourceWarning",
                            "ignore::pytest.PytestUnraisableExceptionWarning")
def test_secsv_on_ray_equals_sequential(agnews_small) -> None:  # type: ignore[no-untyped-def]
    """Seed 004 Sec. 6.2.2 on Ray (a local cluster here): the same SSVs as one process."""
    pytest.importorskip("ray")
    tr = agnews_small
    seq = secsv_shapley(tr.record, _sets(tr), schedule="paper")
    try:
        par = shapley_in_parallel("secsv", tr.record, _sets(tr), workers=2, backend="ray",
                                  schedule="paper")
    finally:
        gc.collect()  # Ray's leftover file objects are reclaimed here, not in a later test
    np.testing.assert_array_equal(par.ssv, seq.ssv)
    assert par.protocol == "secsv" and par.models_tested == seq.models_tested
