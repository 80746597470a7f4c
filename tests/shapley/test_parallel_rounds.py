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


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_secsv_in_parallel_equals_sequential(agnews_small, start) -> None:  # type: ignore[no-untyped-def]
    tr = agnews_small
    seq = secsv_shapley(tr.record, _sets(tr), sample_skip=True, schedule="paper")
    par = shapley_in_parallel("secsv", tr.record, _sets(tr), workers=2, sample_skip=True,
                              schedule="paper", start_method=start)
    np.testing.assert_array_equal(par.ssv, seq.ssv)  # exact shares: bit-identical
    assert par.protocol == "secsv" and par.skip.skipped == seq.skip.skipped
    setup = sum(v for (_s, _r, k), v in seq.accounting.bytes_by_message.items()
                if k.startswith("keys/"))
    if start == "spawn":  # one key set-up per worker
        assert par.accounting.total_bytes >= seq.accounting.total_bytes + setup // 2
    else:  # one set-up, copied into the workers, counted once (ciphertext sizes vary a
        # little with SEAL's compression)
        assert abs(par.accounting.total_bytes - seq.accounting.total_bytes) < setup // 2
        def per_kind(acc):  # type: ignore[no-untyped-def]
            out: dict[str, int] = {}
            for (_s, _r, k), m in acc.messages.items():
                out[k] = out.get(k, 0) + m
            return out
        # the same messages of each kind (which client decrypts which round is drawn
        # at random, so not the same senders)
        assert per_kind(par.accounting) == per_kind(seq.accounting)
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


# ----------------------------------------------------- rounds handed out one at a time
@pytest.fixture(scope="module")
def partial():  # type: ignore[no-untyped-def]
    """Rounds of different cost (3 or 5 participants): workers take unequal shares."""
    pytest.importorskip("torch", reason="training needs fedsec[learning] (torch)")
    from fedsec.learning.fedavg import run_fedavg
    from fedsec.learning.record import TrainingRecord
    from fedsec.learning.tasks import make_task

    task = make_task("agnews", n_samples=500, seed=1)
    fed = task.federate(5, seed=1)
    some = run_fedavg(task, fed, rounds=4, participation=0.6, seed=1)
    every = run_fedavg(task, fed, rounds=4, seed=1)
    rounds = [some.rounds[0], every.rounds[1], some.rounds[2], every.rounds[3]]
    return fed, TrainingRecord(some.spec, 5, rounds, every.final_params, dict(some.meta or {}))


def test_rounds_played_out_of_order_fill_their_own_rows(agnews_small) -> None:  # type: ignore[no-untyped-def]
    """A round source decides which rounds a protocol plays; each lands in its own row."""
    from fedsec.shapley.rounds import round_source

    tr = agnews_small
    seq = federated_shapley(tr.record, tr.x, tr.y)
    lines: list[str] = []
    with round_source(lambda n: iter([2, 0])):
        part = federated_shapley(tr.record, tr.x, tr.y, progress=lines.append)
    np.testing.assert_array_equal(part.ssv[[2, 0]], seq.ssv[[2, 0]])
    assert not part.ssv[1].any() and part.models_tested == 2 * seq.models_tested // 3
    assert part.utilities is not None and seq.utilities is not None
    np.testing.assert_array_equal(part.utilities[0], seq.utilities[2])
    assert lines[0].startswith("round 3/3 done (") and "ETA" in lines[0]
    assert lines[1].startswith("round 1/3 done (") and len(lines) == 2


def test_serial_secure_run_reports_elapsed_time_and_eta(agnews_small) -> None:  # type: ignore[no-untyped-def]
    tr = agnews_small
    lines: list[str] = []
    shapley_in_parallel("secsv", tr.record, _sets(tr), workers=1, schedule="paper",
                        progress=lines.append)
    assert [ln.split(" done")[0] for ln in lines] == ["round 1/3", "round 2/3", "round 3/3"]
    assert all("models tested; elapsed " in ln for ln in lines)
    assert "ETA" in lines[0] and "ETA" in lines[1] and "ETA" not in lines[2]


def test_secsv_workers_give_sequential_ssvs_progress_and_one_warning(partial) -> None:  # type: ignore[no-untyped-def]
    """Rounds of unequal cost in two workers: the sequential SSVs bit for bit, a progress
    line per round naming its worker, and the workers' privacy warning raised once."""
    import warnings

    from fedsec.errors import PrivacyWarning
    from fedsec.runtime.parallel import round_costs

    fed, record = partial
    sets = [(c.x_test, c.y_test) for c in fed.clients]
    costs = round_costs(record)
    assert costs == [8.0, 32.0, 8.0, 32.0]  # the rounds really differ in cost
    seq = secsv_shapley(record, sets, sample_skip=True, schedule="paper")
    lines: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        par = shapley_in_parallel("secsv", record, sets, workers=2, sample_skip=True,
                                  schedule="paper", progress=lines.append)
    np.testing.assert_array_equal(par.ssv, seq.ssv)
    np.testing.assert_array_equal(par.fsv, seq.fsv)
    assert par.utilities is not None and seq.utilities is not None
    for a, b in zip(par.utilities, seq.utilities, strict=True):
        np.testing.assert_array_equal(a, b)
    assert par.models_tested == seq.models_tested and par.skip.skipped == seq.skip.skipped
    assert par.participants == seq.participants
    privacy = [str(w.message) for w in caught if issubclass(w.category, PrivacyWarning)]
    assert len(privacy) == 1 and "schedule='paper'" in privacy[0]
    done = [ln for ln in lines if ln.startswith("round ")]
    assert len(done) == record.n_rounds
    assert all("done (worker " in ln for ln in done)
    assert sorted(int(ln.split()[1].split("/")[0]) for ln in done) == [1, 2, 3, 4]
    assert "ETA" in done[0] and "ETA" not in done[-1]
    assert sum(ln.startswith("worker ") and "ready" in ln for ln in lines) == 2
    finished = [ln for ln in lines if ln.startswith("worker ") and " done: " in ln]
    assert len(finished) == 2 and all(ln.endswith(" of CPU") for ln in finished)
    assert sum(int(ln.split(" done: ")[1].split()[0]) for ln in finished) == record.n_rounds
    played: dict[str, list[int]] = {}  # every worker plays increasing rounds
    for ln in done:
        played.setdefault(ln.split("(worker ")[1].split(",")[0], []).append(
            int(ln.split()[1].split("/")[0]))
    assert all(p == sorted(p) for p in played.values())


def test_secretsv_and_nssv_workers_equal_sequential(partial) -> None:  # type: ignore[no-untyped-def]
    from fedsec.shapley.secretsv import secretsv_shapley

    fed, record = partial
    sets = [(c.x_test, c.y_test) for c in fed.clients]
    seq = secretsv_shapley(record, sets, schedule="paper")
    par = shapley_in_parallel("secretsv", record, sets, workers=2, schedule="paper")
    np.testing.assert_array_equal(par.ssv, seq.ssv)
    plain = federated_shapley(record, fed.x_test, fed.y_test, estimator="ps", budget=3, seed=2)
    par = shapley_in_parallel("nssv", record, sets, workers=3, estimator="ps", budget=3,
                              seed=2)
    np.testing.assert_array_equal(par.ssv, plain.ssv)


def test_a_failing_worker_fails_the_run(agnews_small) -> None:  # type: ignore[no-untyped-def]
    tr = agnews_small
    with pytest.raises(ValueError, match="schedule"):
        shapley_in_parallel("secsv", tr.record, _sets(tr), workers=2, schedule="loose")
    with pytest.raises(ValueError, match="workers"):
        shapley_in_parallel("secsv", tr.record, _sets(tr), workers=0)


def test_hesv_workers_equal_nssv_and_warn_once(agnews_small) -> None:  # type: ignore[no-untyped-def]
    """HESV in two workers: NSSV's FSVs (up to CKKS noise) and its warning raised once."""
    import warnings

    tr = agnews_small
    record, sets = tr.record, _sets(tr)
    ref = federated_shapley(record, tr.x, tr.y)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        par = shapley_in_parallel("hesv", record, sets, workers=2, schedule="paper")
    assert par.protocol == "hesv" and par.models_tested == ref.models_tested
    assert par.error_to(ref) < 1e-3
    texts = [str(w.message) for w in caught]
    assert len(texts) == len(set(texts))  # each distinct warning once, not once per worker


@pytest.mark.parametrize("how", ["raises", "dies"])
def test_a_forked_worker_that_fails_mid_round_fails_the_run(agnews_small, monkeypatch,
                                                            how) -> None:  # type: ignore[no-untyped-def]
    """A forked worker whose round raises passes the error on; one that dies (no message)
    makes the run raise instead of waiting for it."""
    import os

    import fedsec.shapley.fsv as fsv

    tr = agnews_small
    parent = os.getpid()
    original = fsv._round_ssv

    def flaky(*args, **kwargs):  # type: ignore[no-untyped-def]
        if os.getpid() != parent:
            if how == "dies":
                os._exit(3)
            raise ArithmeticError("a round failed in a worker")
        return original(*args, **kwargs)

    monkeypatch.setattr(fsv, "_round_ssv", flaky)
    expected = RuntimeError if how == "dies" else ArithmeticError
    with pytest.raises(expected, match="worker|failed"):
        shapley_in_parallel("nssv", tr.record, _sets(tr), workers=2, start_method="fork")
    with pytest.raises(ValueError, match="start_method"):
        shapley_in_parallel("nssv", tr.record, _sets(tr), workers=2, start_method="thread")
