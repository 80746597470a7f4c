"""SecSV's derived decryption: one request per batch and round for one-layer models.

The decrypting client gets the global model's output, every other participant's
singleton output and one pair with its own model, and derives every coalition's output
itself. Tests: the FSV is bit-identical to per-coalition decryption (and to NSSV's
utilities), one request per batch and round, what each decryptor receives (never its own
samples, never its own model's singleton), the client's refusals, A's and P's checks of
the all-coalition shares, and when the mode applies.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from fedsec.crypto import wire
from fedsec.errors import ProtocolError
from fedsec.learning.record import TrainingRecord
from fedsec.shapley import federated_shapley
from fedsec.shapley import secsv as sv
from fedsec.shapley.accounting import Accounting
from fedsec.shapley.binding import RID, ReplayRefused

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
import fuzz_shapley as fz  # noqa: E402


def _record(trained, rounds: int = 2) -> tuple[TrainingRecord, list]:
    rec = trained.record
    short = TrainingRecord(rec.spec, rec.n_clients, rec.rounds[:rounds], rec.final_params)
    return short, [(c.x_test, c.y_test) for c in trained.fed.clients]


@pytest.fixture(scope="module")
def logistic(agnews_small):
    return _record(agnews_small)


def test_fsv_identical_to_per_coalition_and_nssv(logistic, agnews_small) -> None:
    rec, sets = logistic
    derived = sv.secsv_shapley(rec, sets)  # default: derived for a one-layer model
    per = sv.secsv_shapley(rec, sets, derived_decryption=False)
    np.testing.assert_array_equal(derived.fsv, per.fsv)
    for a, b in zip(derived.utilities or [], per.utilities or [], strict=True):
        np.testing.assert_array_equal(a, b)
    ref = federated_shapley(rec, agnews_small.x, agnews_small.y)
    assert derived.error_to(ref) <= 1e-3
    assert derived.models_tested == per.models_tested == ref.models_tested
    acc_d, acc_p = derived.accounting, per.accounting
    assert acc_d is not None and acc_p is not None

    def requests(acc: Accounting) -> int:
        return sum(v for (s, r, k), v in acc.messages.items()
                   if s == "P" and r.startswith("client:") and k == "decrypt")

    # one request per batch and round instead of one per coalition and batch (the
    # batch widths differ: derived decryption makes more batches cheap)
    k, n_rounds = len(rec.rounds[0].participants), len(rec.rounds)
    assert requests(acc_p) % (n_rounds * 2 ** k) == 0
    assert requests(acc_d) % n_rounds == 0
    assert requests(acc_d) * 2 ** (k - 2) <= requests(acc_p)


def _world(trained, derived: bool = True):
    rec, sets = _record(trained, 1)
    log = fz.Recorder()
    run = sv._setup(rec, sets, sv.SecSVConfig().check(), log, True, derived)  # noqa: SLF001
    run.upload_round(0)
    return rec, run, log


def test_what_each_decryptor_receives(agnews_small) -> None:
    rec, run, log = _world(agnews_small)
    n_log = len(log.log)
    run.evaluate(0, 3, None)
    reqs = [(int(r.split(":")[1]), p) for _s, r, k, p in log.log[n_log:] if k == "decrypt"]
    assert len(reqs) == len(run.batches)
    parts = list(rec.rounds[0].participants)
    for (me, data), batch in zip(reqs, run.batches, strict=True):
        meta = wire.decode(data).meta
        owners = run.groups[batch.group]
        assert me not in owners and meta["batch_owners"] == owners
        assert [me] not in meta["terms"]  # never its own model's singleton
        assert meta["terms"][0] == []
        singles = [t[0] for t in meta["terms"] if len(t) == 1]
        assert singles == [c for c in parts if c != me]
        pairs = [t for t in meta["terms"] if len(t) == 2]
        assert (pairs and pairs[0][0] == me) == (me in parts)
    # later coalitions of the round are answered from the derived table (no new requests)
    n2 = len(log.log)
    for mask in (0, 1, 2 ** len(parts) - 1):
        run.evaluate(0, mask, None)
    assert not [k for _s, _r, k, _p in log.log[n2:] if k == "decrypt"]


def _one_request(trained):
    rec, run, log = _world(trained)
    snap = fz.clone_srun(run)
    run.evaluate(0, 1, None)
    me, data = next((int(r.split(":")[1]), p) for _s, r, k, p in log.log
                    if k == "decrypt")
    return snap, me, data


def _rebuild(data: bytes, **changes) -> bytes:
    msg = wire.decode(data)
    meta = dict(msg.meta)
    meta.update(changes)
    return wire.encode(msg.kind, meta, list(msg.blobs))


def test_client_refusals(agnews_small) -> None:
    snap, me, data = _one_request(agnews_small)
    client = fz.clone_sclient(snap.clients[me])
    meta = wire.decode(data).meta
    # the honest request is answered once; a replay (same or fresh id) is refused
    to_p, to_a = client.decrypt_all(data, Accounting())
    assert wire.decode(to_p).kind == "secsv/labels-all"
    with pytest.raises(ReplayRefused):
        client.decrypt_all(data, Accounting())
    with pytest.raises(ReplayRefused):
        client.decrypt_all(_rebuild(data, **{RID: "ab" * 16}), Accounting())
    terms = meta["terms"]
    bad_terms = [
        terms[:1] + [[me]] + terms[2:],  # its own singleton instead of another's
        terms[:-1] if len(terms[-1]) == 2 else terms + [[me, terms[1][0]]],  # pair missing
        [[]] + terms[2:] + terms[1:2],  # order changed
    ]
    for bad in bad_terms:
        c = fz.clone_sclient(snap.clients[me])
        with pytest.raises(ProtocolError):
            c.decrypt_all(_rebuild(data, terms=bad), Accounting())
    c = fz.clone_sclient(snap.clients[me])
    with pytest.raises(ProtocolError):  # asked to decrypt its own samples
        c.decrypt_all(_rebuild(data, batch_owners=[me]), Accounting())
    c = fz.clone_sclient(snap.clients[me])
    with pytest.raises(ProtocolError):  # a bound below the values: refused, not wrapped
        c.decrypt_all(_rebuild(data, bounds=[1] * len(meta["bounds"])), Accounting())
    # another client of the batch's owners refuses the same request
    owner = meta["batch_owners"][0]
    with pytest.raises(ProtocolError):
        fz.clone_sclient(snap.clients[owner]).decrypt_all(data, Accounting())
    # a per-coalition client method refuses the all-coalition request and vice versa
    with pytest.raises(ProtocolError):
        fz.clone_sclient(snap.clients[me]).decrypt_layer(data, Accounting())


def test_servers_check_all_coalition_shares(agnews_small) -> None:
    rec, run, log = _world(agnews_small)
    k = len(rec.rounds[0].participants)
    seen: list[tuple[str, str, str, bytes]] = []
    log.hook = lambda s, r, kd, p: seen.append((s, r, kd, p))
    run.evaluate(0, 1, None)
    to_a = next(p for s, r, kd, p in seen if kd == "share" and r == "A")
    # A refuses a label share that claims another number of coalitions
    snap_rec, snap, _ = _world(agnews_small)
    snap.A.open_eval(snap.P.open_eval(sv.ALL, 0, None))
    m = len(snap.batches[0].rows)
    with pytest.raises(ProtocolError):
        snap.A.label_diff_all(_rebuild(to_a, coalitions=2 ** (k - 1)), m)
    # ... and one of another evaluation (the id P announced differs)
    with pytest.raises(ProtocolError):
        snap.A.label_diff_all(to_a, m)
    # outside a derived evaluation, neither server takes all-coalition messages
    s2_rec, s2, _ = _world(agnews_small)
    s2.A.open_eval(s2.P.open_eval(1, 0, None))
    with pytest.raises(ProtocolError):
        s2.A.label_diff_all(to_a, m)
    with pytest.raises(ProtocolError):
        s2.P.decrypt_all_request({}, [])


def test_when_derived_applies(logistic, digits_small) -> None:
    rec, sets = logistic
    for kw in ({"sample_skip": True}, {"estimator": "ps", "budget": 2},
               {"linear_shortcut": False}):
        with pytest.raises(ValueError, match="derived_decryption"):
            sv.secsv_shapley(rec, sets, derived_decryption=True, **kw)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        sv.secsv_shapley(rec, sets, derived_decryption=1)  # type: ignore[arg-type]
    crec, csets = _record(digits_small, 1)
    with pytest.raises(ValueError, match="one-layer"):
        sv.secsv_shapley(crec, csets, derived_decryption=True)
    # SampleSkip on a one-layer model: per coalition by default (no derived request)
    res = sv.secsv_shapley(rec, sets, sample_skip=True)
    assert res.accounting is not None
    kinds = {k for (_s, _r, k) in res.accounting.messages}
    assert "decrypt" in kinds
