"""SampleSkip under SecSV that pays off: merged batches (multi-layer models: the first
layer on the round's fixed batches, the later layers on the tested samples packed into
fewer batches) and SampleSkip with derived decryption (one-layer models). Each must give
the plaintext SampleSkip's utilities, skip exactly its samples, and (merged) decrypt less."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from fedsec.learning.model import LayerSpec, ModelSpec, predict
from fedsec.learning.record import RoundRecord, TrainingRecord
from fedsec.protocol import wire
from fedsec.protocol.network import Network
from fedsec.shapley import RoundGame, federated_shapley
from fedsec.shapley import utility as plain_utility
from fedsec.shapley.secsv import SecSVConfig, secsv_shapley
from fedsec.shapley.secsv.principal import PrincipalServer

pytestmark = pytest.mark.filterwarnings(
    "ignore:.*schedule='paper'.*:fedsec.errors.PrivacyWarning")


def _wide_record(n: int, seed: int) -> tuple[TrainingRecord, list[tuple[Any, Any]]]:
    """A 6 -> 1024 (x^2) -> 3 model: 1,024 hidden outputs cap the batch width at 8, so
    each client's 30 samples fill several fixed batches. Local models near the global
    one, labels mostly the final model's: SampleSkip skips much."""
    spec = ModelSpec("wide", (LayerSpec.dense(6, 1024, activation="square"),
                              LayerSpec.dense(1024, 3)))
    rng = np.random.default_rng(seed)  # test data and models only
    g = [0.3 * p for p in spec.init_params(rng)]
    locs = tuple([p + 0.01 * rng.standard_normal(p.shape) for p in g] for _ in range(n))
    wts = rng.uniform(1.0, 3.0, size=n)
    rec = TrainingRecord(spec, n, (RoundRecord(g, tuple(range(n)), locs, wts),), g)
    x = rng.standard_normal((30 * n, 6))
    y = predict(spec, locs[0], x)
    y[::10] = (y[::10] + 1) % 3
    return rec, [(x[i::n], y[i::n]) for i in range(n)]


def _tapped() -> tuple[Network, list[tuple[str, dict[str, Any]]]]:
    net = Network()
    seen: list[tuple[str, dict[str, Any]]] = []

    def tap(batch: list[Any]) -> None:
        for env in batch:
            if env.kind in ("secsv/eval", "secsv/decrypt", "secsv/decrypt-all"):
                seen.append((env.kind, wire.decode(env.payload).meta))

    net.intercept(tap)
    return net, seen


def test_merged_batches_equal_plaintext_sampleskip(monkeypatch: pytest.MonkeyPatch) -> None:
    n = 4
    rec, sets = _wide_record(n, seed=2)
    x = np.concatenate([a for a, _ in sets])
    y = np.concatenate([b for _, b in sets])
    exact = federated_shapley(rec, x, y)
    # what the plaintext SampleSkip tests: (mask, rows) of every model it tests
    plain_asked: dict[int, list[int] | None] = {}
    orig_test = RoundGame._test

    def plain_test(self: RoundGame, mask: int, rows: Any) -> Any:
        plain_asked[mask] = None if rows is None else [int(r) for r in rows]
        return orig_test(self, mask, rows)

    monkeypatch.setattr(plain_utility.RoundGame, "_test", plain_test)
    ref = federated_shapley(rec, x, y, sample_skip=True)
    # what SecSV's P is asked to test
    secure_asked: dict[int, list[int] | None] = {}
    orig_start = PrincipalServer.start_evaluation

    def start(self: PrincipalServer, t: int, mask: int, rows: Any) -> None:
        secure_asked[mask] = None if rows is None else [int(r) for r in rows]
        orig_start(self, t, mask, rows)

    monkeypatch.setattr(PrincipalServer, "start_evaluation", start)
    cfg = SecSVConfig(frac_bits_hidden=12)
    net, seen = _tapped()
    got = secsv_shapley(rec, sets, sample_skip=True, config=cfg, schedule="paper",
                        network=net)
    assert ref.skip.skipped_share > 0.5  # a game where SampleSkip matters
    assert secure_asked == plain_asked  # exactly the plaintext SampleSkip's samples
    assert got.error_to(ref) <= 1e-12
    assert got.skip.skipped == ref.skip.skipped and got.samples_tested == ref.samples_tested
    for a, b in zip(got.utilities or [], ref.utilities or [], strict=True):
        np.testing.assert_array_equal(a, b)
    merged = [m for k, m in seen if k == "secsv/eval" and m.get("sources")]
    assert merged, "SampleSkip merged no batches"
    # a merged batch's later layers name their fixed batches, and hold more samples
    packed = [m for k, m in seen if k == "secsv/decrypt" and m.get("sources")]
    assert packed and all(m["layer"] > 0 for m in packed)
    # fewer decryptions than without SampleSkip, on the same game
    monkeypatch.setattr(PrincipalServer, "start_evaluation", orig_start)
    net0, seen0 = _tapped()
    off = secsv_shapley(rec, sets, config=cfg, schedule="paper", network=net0)
    assert off.error_to(exact) <= 1e-12
    later = sum(1 for k, m in seen if k == "secsv/decrypt" and m["layer"] > 0)
    later0 = sum(1 for k, m in seen0 if k == "secsv/decrypt" and m["layer"] > 0)
    assert later < 0.7 * later0, (later, later0)


def test_sample_skip_with_derived_decryption_one_layer(agnews_small) -> None:
    """One-layer models: SampleSkip keeps derived decryption (one request per batch and
    round); P reads the samples left to test from the round's table."""
    rec = replace(agnews_small.record, rounds=agnews_small.record.rounds[:1])
    sets = [(c.x_test, c.y_test) for c in agnews_small.fed.clients]
    x = np.concatenate([a for a, _ in sets])
    y = np.concatenate([b for _, b in sets])
    ref = federated_shapley(rec, x, y, sample_skip=True)
    net, seen = _tapped()
    got = secsv_shapley(rec, sets, sample_skip=True, schedule="paper", network=net)
    kinds = {k for k, _m in seen}
    assert "secsv/decrypt-all" in kinds and "secsv/decrypt" not in kinds
    assert got.error_to(ref) <= 1e-3  # near-tie predictions may flip in fixed point
    assert got.skip.skipped > 0
    assert abs(got.samples_tested - ref.samples_tested) <= 0.01 * ref.samples_tested


def test_client_refuses_a_packed_layer_next_to_its_first_layer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A P that asks the first layer's client for the packed batch's next layer (and
    hides it from the Prop. 6.8 check) is refused from the client's own memory: the
    request names the fixed batches, whose first layer that client decrypted."""
    from fedsec.errors import ProtocolError
    from fedsec.shapley.secsv import client as client_mod

    rec, sets = _wide_record(4, seed=2)
    orig_open = PrincipalServer.open_next

    def open_next(self: PrincipalServer) -> bytes | None:
        out = orig_open(self)
        ev = self._eval  # noqa: SLF001
        if out is not None and ev is not None and ev.merge is not None:
            ev.job.chain = [ev.job.chain[0]] * len(ev.job.chain)
        return out

    monkeypatch.setattr(PrincipalServer, "open_next", open_next)
    monkeypatch.setattr(client_mod, "check_decryptor", lambda *a, **k: None)
    with pytest.raises(ProtocolError, match="merged batch"):
        secsv_shapley(rec, sets, sample_skip=True, config=SecSVConfig(frac_bits_hidden=12),
                      schedule="paper")


def test_aux_refuses_malformed_merged_evaluations() -> None:
    """A's decoder of a merged evaluation's ``sources``: two or more distinct fixed
    batches, distinct columns inside each, at most a batch width in all."""
    import warnings

    from fedsec.errors import ProtocolError
    from fedsec.protocol.binding import new_request_id
    from fedsec.shapley.secsv import runner

    rec, sets = _wide_record(4, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = runner._setup(rec, sets, SecSVConfig(frac_bits_hidden=12).check())  # noqa: SLF001
    run.upload_round(0)
    P, A = run.P, run.A  # noqa: N806
    nb, width = len(P._batches), P.plan.width  # noqa: SLF001

    def eval_msg(sources: Any, batch: int = nb) -> bytes:
        return wire.encode("secsv/eval", P._b.bind(  # noqa: SLF001
            {"rows": None, "sources": sources}, step="eval", to="A", round=0,
            index=(3, batch, -1), rid=new_request_id()))

    good = [[0, [0, 1]], [1, [0]]]
    for bad in ([[0, [0, 1]]],                      # one fixed batch: not a merge
                [[0, [0]], [0, [1]]],               # the same fixed batch twice
                [[0, [0, 0]], [1, [0]]],            # a column twice
                [[0, [0]], [nb, [0]]],              # no such fixed batch
                [[0, [width + 5]], [1, [0]]],       # no such column
                [[0, list(range(width))], [1, [0]]],  # beyond a batch width
                [[0, "x"], [1, [0]]], "x", None):
        with pytest.raises(ProtocolError):
            A.open_eval(eval_msg(bad))
    with pytest.raises(ProtocolError):  # a merge must name a packed batch id
        A.open_eval(eval_msg(good, batch=0))
    A.open_eval(eval_msg(good))  # well-formed: accepted
    assert A._eval is not None and A._eval.merge is not None  # noqa: SLF001
    assert A._eval.batch == 0 and len(A._eval.merge.packed_rows) == 3  # noqa: SLF001
