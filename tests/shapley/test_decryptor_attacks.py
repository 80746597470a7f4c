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

from fedsec.crypto import wire
from fedsec.errors import PolicyViolation, PrivacyWarning
from fedsec.learning.model import LayerSpec, ModelSpec
from fedsec.learning.record import RoundRecord, TrainingRecord
from fedsec.shapley import federated_shapley
from fedsec.shapley import secsv as sv
from fedsec.shapley.binding import context_of
from fedsec.shapley.views import UnsafeSchedule
from fedsec.testing.decryptor_attack import Decryption, solve_samples

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


def _capture(monkeypatch) -> list[tuple[int, int, int, list[int], np.ndarray]]:
    """(client, round, mask, samples, real outputs d_out × m) of every decryption."""
    seen: list[tuple[int, int, int, list[int], np.ndarray]] = []
    orig = sv.SecSVClient.decrypt_layer

    def spy(self, data, acc):
        meta = wire.decode(data).meta
        real = {}
        features = self._features

        def grab(ct, lp, width, m, a):
            out = features(ct, lp, width, m, a)
            real["v"] = out.astype(np.float64) / (meta["weight_sum"]
                                                  * 2.0 ** meta["scale_bits"])
            return out

        self._features = grab
        try:
            return orig(self, data, acc)
        finally:
            del self._features
            if "v" in real:
                ctx = context_of(meta)
                seen.append((self.index, ctx.round, ctx.mask, meta.get("samples"),
                             real["v"]))

    monkeypatch.setattr(sv.SecSVClient, "decrypt_layer", spy)
    return seen


def _attack(rec: TrainingRecord, seen, owner, x) -> tuple[int, int]:
    """(samples pinned to 1e-3, samples attacked) over every client's view."""
    decs = [Decryption(c, t, mask, tuple(rows), y) for c, t, mask, rows, y in seen]
    res = solve_samples(rec, decs, owner)
    pinned = sum(np.allclose(v, x[s], atol=1e-3) for (_c, s), v in res.recovered.items())
    return pinned, res.attacked


def _pooled(sets):
    owner = np.concatenate([np.full(len(y), i) for i, (_x, y) in enumerate(sets)])
    return owner, np.concatenate([x for x, _ in sets])


def test_paper_schedule_hands_out_test_data(monkeypatch) -> None:
    """Prop. 6.8 alone: decrypting clients recover other clients' samples exactly."""
    rec, sets = _world()
    seen = _capture(monkeypatch)
    with pytest.warns(PrivacyWarning, match="solve for those samples"):
        sv.secsv_shapley(rec, sets, schedule="paper", derived_decryption=False)
    for entry in seen:  # the paper mode sends no sample ids: P's batch rows, in order
        assert entry[3] is None
    owner, x = _pooled(sets)
    rows = _rows_from_requests(seen, rec, sets)
    pinned, attacked = _attack(rec, rows, owner, x)
    assert attacked > 0 and pinned > 0.5 * attacked


def _rows_from_requests(seen, rec, sets):
    """The paper mode does not name samples; the attacker sees one batch per request and
    the test (not the attacker) maps batches back to rows by matching the global model."""
    owner, x = _pooled(sets)
    out = []
    for c, t, mask, _rows, y in seen:
        g = rec.rounds[t].global_params
        if mask == 0:
            pred = g[0] @ x.T + g[1][:, None]
            rows = [int(np.argmin(np.abs(pred - y[:, [j]]).sum(axis=0)))
                    for j in range(y.shape[1])]
        else:
            rows = []
        if rows:
            out.append((c, t, mask, rows, y))
    return out


def test_default_schedule_leaves_nothing_to_solve(monkeypatch) -> None:
    """The decryption rule: same world, 3 rounds, exact SSVs; every client's whole view
    (every output it decrypted) holds no combination that is a known model; FSVs exact."""
    rec, sets = _world()
    seen = _capture(monkeypatch)
    got = sv.secsv_shapley(rec, sets)
    owner, x = _pooled(sets)
    ref = federated_shapley(rec, x, np.concatenate([y for _, y in sets]))
    assert got.error_to(ref) <= 1e-9
    assert seen and all(e[3] is not None for e in seen)
    pinned, attacked = _attack(rec, seen, owner, x)
    assert attacked > 0 and pinned == 0
    # owners evaluated the models they know: the global model never left its owner
    for c, _t, mask, rows, _y in seen:
        if mask == 0:
            assert set(owner[rows].tolist()) == {c}


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
    run = sv._setup(rec, sets, sv.SecSVConfig().check(), sv.Accounting(), True,  # noqa: SLF001
                    False, "strict", exact=False)
    run.upload_round(0)
    sched = run.sched
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
    run = sv._setup(rec, sets, sv.SecSVConfig().check(), sv.Accounting(), True,  # noqa: SLF001
                    True, "paper", exact=False)
    run.upload_round(0)
    plan = run._derived_plan(0)  # noqa: SLF001
    assert plan is not None
    strict = sv._setup(rec, sets, sv.SecSVConfig().check(), sv.Accounting(), True,  # noqa: SLF001
                       False, "strict", exact=False)
    d = plan[0][0]
    with pytest.raises(PolicyViolation, match="derived"):
        strict.clients[d].decrypt_all(b"", sv.Accounting())
