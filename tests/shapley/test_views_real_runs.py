"""The decryption rule on real runs of HESV, SecSV and SecretSV (3, 5 and 8 clients,
several rounds): every decryption each client performs is logged from its own check, and
afterwards each client's whole view is checked independently -- per sample of another
client, the span of the first-layer coalitions it decrypted meets the span of the models
it knows only in 0 (``rank(D) + rank(K) = rank([D; K])``). Runs the rule cannot schedule
are refused before any work."""

from __future__ import annotations

import numpy as np
import pytest

from fedsec.learning.model import LayerSpec, ModelSpec
from fedsec.learning.record import RoundRecord, TrainingRecord
from fedsec.shapley import federated_shapley
from fedsec.shapley import views as vw
from fedsec.shapley.hesv import hesv_shapley
from fedsec.shapley.secretsv import secretsv_shapley
from fedsec.shapley.secsv import secsv_shapley

PROTOCOLS = {
    "secsv": lambda rec, sets, **kw: secsv_shapley(rec, sets, **kw),
    "secretsv": lambda rec, sets, **kw: secretsv_shapley(rec, sets, **kw),
    "hesv": lambda rec, sets, **kw: hesv_shapley(rec, sets, preset="CKKS_128_N4096_DEPTH2_S24",
                                                 **kw),
}


def _world(n: int, parts: list[tuple[int, ...]], seed: int = 3):
    rng = np.random.default_rng(seed)
    spec = ModelSpec("views", (LayerSpec.dense(3, 4),))
    rnds, glob = [], spec.init_params(rng)
    for p in parts:
        local = tuple(spec.init_params(rng) for _ in p)
        rnds.append(RoundRecord(glob, p, local, np.arange(1.0, len(p) + 1.0)))
        glob = spec.init_params(rng)
    sets = [(rng.uniform(-1, 1, size=(3, 3)), rng.integers(0, 4, 3).astype(np.int64))
            for _ in range(n)]
    return TrainingRecord(spec, n, tuple(rnds), glob), sets


def _log(monkeypatch) -> list[tuple[int, np.ndarray, list[int], bool]]:
    seen: list[tuple[int, np.ndarray, list[int], bool]] = []
    orig = vw.ClientView.check

    def spy(self, v, samples, owners, *, first_layer, blinded):
        orig(self, v, samples, owners, first_layer=first_layer, blinded=blinded)
        if not all(int(o) == self.client for o in owners):
            seen.append((self.client, v.copy(), [int(s) for s in samples], first_layer))

    monkeypatch.setattr(vw.ClientView, "check", spy)
    return seen


def _assert_views_clean(rec: TrainingRecord, seen) -> int:
    """Independent check of every client's view; returns how many (client, sample)
    views were checked."""
    space = vw.ModelSpace.of_record(rec)
    per: dict[tuple[int, int], list[np.ndarray]] = {}
    for c, v, samples, first in seen:
        assert not vw.ClientView(space, c).knows(v)  # never a known model, any layer
        if first:
            for s in samples:
                per.setdefault((c, s), []).append(v)
    for (c, _s), vs in per.items():
        d, k = np.array(vs), space.known(c)
        r = np.linalg.matrix_rank
        assert r(np.vstack([d, k]), tol=1e-9) == r(d, tol=1e-9) + r(k, tol=1e-9)
    return len(per)


def _exact_and_clean(protocol: str, rec: TrainingRecord, sets: list, monkeypatch
                     ) -> list[tuple[int, np.ndarray, list[int], bool]]:
    """Run ``protocol`` under the rule: exact FSVs, every client's view clean."""
    seen = _log(monkeypatch)
    got = PROTOCOLS[protocol](rec, sets)
    x = np.concatenate([a for a, _ in sets])
    y = np.concatenate([b for _, b in sets])
    assert got.error_to(federated_shapley(rec, x, y)) <= 1e-6
    assert _assert_views_clean(rec, seen) > 0
    return seen


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_eight_clients_exact_over_rounds(protocol: str, monkeypatch) -> None:
    """8 clients, 4 per round, 3 rounds, exact SSVs: scheduled, exact, views clean."""
    rec, sets = _world(8, [(0, 1, 2, 3), (4, 5, 6, 7), (0, 2, 5, 7)])
    _exact_and_clean(protocol, rec, sets, monkeypatch)


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_five_clients_estimator(protocol: str, monkeypatch) -> None:
    """5 clients in every round, 2 rounds: exact SSVs are refused up front; permutation
    sampling with a budget of 1 is scheduled and leaves every view clean."""
    rec, sets = _world(5, [(0, 1, 2, 3, 4)] * 2)
    with pytest.raises(vw.UnsafeSchedule, match="schedule='paper'"):
        PROTOCOLS[protocol](rec, sets)
    seen = _log(monkeypatch)
    got = PROTOCOLS[protocol](rec, sets, estimator="ps", budget=1, seed=1)
    x = np.concatenate([a for a, _ in sets])
    y = np.concatenate([b for _, b in sets])
    ref = federated_shapley(rec, x, y, estimator="ps", budget=1, seed=1)
    np.testing.assert_allclose(got.fsv, ref.fsv, atol=1e-9)
    assert _assert_views_clean(rec, seen) > 0


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_three_clients_refused(protocol: str) -> None:
    """Three clients: a singleton's only possible decryptor would know it -- refused."""
    rec, sets = _world(3, [(0, 1, 2)] * 2)
    with pytest.raises(vw.UnsafeSchedule):
        PROTOCOLS[protocol](rec, sets)


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_two_layer_model_exact(protocol: str, monkeypatch) -> None:
    """A hidden layer (x² activation): later layers go to clients that do not know the
    model, never to the one that decrypted the layer before; exact, views clean."""
    rng = np.random.default_rng(8)
    spec = ModelSpec("views2", (LayerSpec.dense(3, 4, "square"), LayerSpec.dense(4, 2)))
    parts = [(0, 1, 2, 3), (4, 5, 6, 7)]
    rnds, glob = [], spec.init_params(rng)
    for p in parts:
        local = tuple(spec.init_params(rng) for _ in p)
        rnds.append(RoundRecord(glob, p, local, np.arange(1.0, len(p) + 1.0)))
        glob = spec.init_params(rng)
    rec = TrainingRecord(spec, 8, tuple(rnds), glob)
    sets = [(rng.uniform(-1, 1, size=(3, 3)), rng.integers(0, 2, 3).astype(np.int64))
            for _ in range(8)]
    seen = _exact_and_clean(protocol, rec, sets, monkeypatch)
    assert any(not first for _c, _v, _s, first in seen)  # later layers were decrypted too
