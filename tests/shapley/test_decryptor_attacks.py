"""A decrypting client that solves for other clients' test data (SecSV), from the bytes it
decrypts.

The attack: for every sample of another client, the client holds the decrypted
first-layer outputs ``y_S = W_S x + b_S`` of the coalitions it was asked to decrypt, knows
each coalition's vector over the run's models (public FedAvg weights) and the models it
knows (the global models, its own, the aggregate). Any combination ``Σ c_S y_S`` whose
model is known gives ``W x + b`` with a known ``W`` -- here ``dense(3, 4)``, so one such
combination pins the sample. Under Prop. 6.8 alone (``schedule='paper'``) a client is
asked to decrypt the global model on another client's batch and recovers the batch
exactly; under the decryption rule (the default) no client has any such combination.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedsec.errors import PolicyViolation, PrivacyWarning
from fedsec.learning.model import LayerSpec, ModelSpec
from fedsec.learning.record import RoundRecord, TrainingRecord
from fedsec.shapley import federated_shapley
from fedsec.shapley import secsv as sv
from fedsec.shapley.views import UnsafeSchedule
from fedsec.testing.decryptor_attack import Decryption, SecSVSpy, solve_samples

N = 8
PARTS = ((0, 1, 2, 3), (4, 5, 6, 7), (0, 2, 5, 7))


def _world(rounds: int = 3) -> tuple[TrainingRecord, list[tuple[np.ndarray, np.ndarray]]]:
    rng = np.random.default_rng(5)
    spec = ModelSpec("attack", (LayerSpec.dense(3, 4),))
    rnds, glob = [], spec.init_params(rng)
    for t in range(rounds):
        local = tuple(spec.init_params(rng) for _ in PARTS[t])
        rnds.append(RoundRecord(glob, PARTS[t], local, np.array([1.0, 2.0, 3.0, 4.0])))
        glob = spec.init_params(rng)
    sets = [(rng.uniform(-1, 1, size=(3, 3)), rng.integers(0, 4, 3).astype(np.int64))
            for _ in range(N)]
    return TrainingRecord(spec, N, tuple(rnds), glob), sets


def _attack(rec: TrainingRecord, decs: list[Decryption], owner, x) -> tuple[int, int, int]:
    """Over every (client, other client's sample) view: (views pinned to 1e-3, views with a
    known-model combination, views attacked)."""
    res = solve_samples(rec, decs, owner)
    pinned = sum(np.allclose(v, x[s], atol=1e-3) for (_c, s), v in res.recovered.items())
    return pinned, res.combinations, res.attacked


def _pooled(sets):
    owner = np.concatenate([np.full(len(y), i) for i, (_x, y) in enumerate(sets)])
    return owner, np.concatenate([x for x, _ in sets])


def test_paper_schedule_hands_out_test_data() -> None:
    """Prop. 6.8 alone: decrypting clients recover other clients' samples exactly."""
    rec, sets = _world()
    with SecSVSpy() as spy, pytest.warns(PrivacyWarning, match="solve for those samples"):
        sv.secsv_shapley(rec, sets, schedule="paper", derived_decryption=False)
    owner, x = _pooled(sets)
    pinned, combos, attacked = _attack(rec, spy.decs, owner, x)
    assert attacked > 0 and pinned == combos > 0  # every known combination pins a sample


def test_default_schedule_leaves_nothing_to_solve() -> None:
    """The decryption rule: same world, 3 rounds, exact SSVs; every client's whole view
    (every output it decrypted) holds no combination that is a known model; FSVs exact."""
    rec, sets = _world()
    with SecSVSpy() as spy:
        got = sv.secsv_shapley(rec, sets)
    owner, x = _pooled(sets)
    ref = federated_shapley(rec, x, np.concatenate([y for _, y in sets]))
    assert got.error_to(ref) <= 1e-9
    assert spy.decs
    pinned, combos, attacked = _attack(rec, spy.decs, owner, x)
    assert attacked > 0 and pinned == combos == 0
    # owners evaluated the models they know: the global model never left its owner
    for d in spy.decs:
        if d.mask == 0:
            assert set(owner[list(d.samples)].tolist()) == {d.client}


def test_default_schedule_refuses_when_unsafe() -> None:
    """Every client in every round (4 clients): no safe placement, refused up front."""
    rec, sets = _world()
    rnds = tuple(RoundRecord(r.global_params, (0, 1, 2, 3), r.local_params, r.weights)
                 for r in rec.rounds)
    small = TrainingRecord(rec.spec, 4, rnds, rec.final_params)
    with pytest.raises(UnsafeSchedule, match="schedule='paper'"):
        sv.secsv_shapley(small, sets[:4])


def test_client_refuses_a_known_model_on_other_samples(monkeypatch) -> None:
    """A principal that sends the global model to a non-owner under the rule is refused
    by the client itself (its own view), not only by P's scheduler."""
    rec, sets = _world(1)
    log = []
    run = sv._setup(rec, sets, sv.SecSVConfig().check(), None, True,  # noqa: SLF001
                    False, "strict", exact=False)
    run.upload_round(0)
    sched = run.P._sched  # noqa: SLF001 - P's scheduler, made to cheat
    assert sched is not None
    monkeypatch.setattr(sched, "first", lambda t, mask, samples, turn=0: (
        log.append(mask) or (int(sched.owner[samples[0]]) + 1) % N))
    with pytest.raises(PolicyViolation, match="knows"):
        run.evaluate(0, 0, None)
    assert log


def test_derived_decryption_is_refused_under_the_rule() -> None:
    """Derived decryption hands the decrypting client the global model's output on the
    batch every round (and its own model's, by subtraction): refused by default, by the
    entry point and by the client itself."""
    rec, sets = _world(1)
    with pytest.raises(ValueError, match="schedule='paper'"):
        sv.secsv_shapley(rec, sets, derived_decryption=True)
    run = sv._setup(rec, sets, sv.SecSVConfig().check(), None, True,  # noqa: SLF001
                    True, "paper", exact=False)
    run.upload_round(0)
    plan = run.P._derived_plan(0)  # noqa: SLF001
    assert plan is not None
    strict = sv._setup(rec, sets, sv.SecSVConfig().check(), None, True,  # noqa: SLF001
                       False, "strict", exact=False)
    d = plan[0][0]
    with pytest.raises(PolicyViolation, match="derived"):
        strict.clients[d].decrypt_all(b"")
