"""SecSV's derived decryption: one request per batch and round for one-layer models.

The decrypting client gets the global model's output, every other participant's
singleton output and one pair with its own model, and derives every coalition's output
itself. Tests: the FSV is bit-identical to per-coalition decryption (and to NSSV's
utilities), one request per batch and round, what each decryptor receives (never its own
samples, never its own model's singleton), the client's refusals, A's and P's checks of
the all-coalition shares, and when the mode applies. Then regressions from the fuzz
campaign (``tests/fuzz/fuzz_shapley.py``: the label table's size is bounded, P's metadata
cannot relabel a ciphertext) and attacks built from the bytes the roles receive, each
stating what is detected and what is not (a curious P reusing a singleton in a
per-coalition request, relabelling a client's own singleton as its pair, lying about a
batch's owners, replaying a request in the next round).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from fedsec.errors import ProtocolError
from fedsec.learning.record import TrainingRecord
from fedsec.protocol import wire
from fedsec.protocol.accounting import Accounting
from fedsec.protocol.binding import RID, Binding, ReplayRefused, new_request_id
from fedsec.shapley import federated_shapley
from fedsec.shapley import secsv as sv
from fedsec.shapley.secsv import client as sv_client
from fedsec.shapley.secsv import principal as sv_principal
from fedsec.shapley.secure_game import integer_weights

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
import fuzz_shapley as fz  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:.*schedule='paper'.*:fedsec.errors.PrivacyWarning")


def _record(trained, rounds: int = 2) -> tuple[TrainingRecord, list]:
    rec = trained.record
    short = TrainingRecord(rec.spec, rec.n_clients, rec.rounds[:rounds], rec.final_params)
    return short, [(c.x_test, c.y_test) for c in trained.fed.clients]


@pytest.fixture(scope="module")
def logistic(agnews_small):
    return _record(agnews_small)


def test_fsv_identical_to_per_coalition_and_nssv(logistic, agnews_small) -> None:
    rec, sets = logistic
    derived = sv.secsv_shapley(rec, sets,
                               schedule="paper")  # default: derived for a one-layer model
    per = sv.secsv_shapley(rec, sets, derived_decryption=False, schedule="paper")
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
                   if s == "P" and r.startswith("client:")
                   and k in ("secsv/decrypt", "secsv/decrypt-all"))

    # one request per batch and round instead of one per coalition and batch (the
    # batch widths differ: derived decryption makes more batches cheap)
    k, n_rounds = len(rec.rounds[0].participants), len(rec.rounds)
    assert requests(acc_p) % (n_rounds * 2 ** k) == 0
    assert requests(acc_d) % n_rounds == 0
    assert requests(acc_d) * 2 ** (k - 2) <= requests(acc_p)


def _world(trained, derived: bool = True):
    rec, sets = _record(trained, 1)
    log = fz.Recorder()
    run = sv._setup(rec, sets, sv.SecSVConfig().check(), fz.recorder_net(log),  # noqa: SLF001
                    True, derived)
    run.upload_round(0)
    return rec, run, log


def _as_principal(run, kind: str, meta: dict, blobs: list[bytes], to: int, index,
                  rnd: int = 0) -> bytes:
    """A request as a curious P could send it (P's binding, fresh ids): the bytes the
    client receives, whatever P's own code would do."""
    b = Binding(run.P._b.session, "secsv", "P")  # noqa: SLF001
    return wire.encode(kind, b.bind({**meta, "ev": new_request_id()},
                                    step=kind.split("/", 1)[1], to=f"client:{to}",
                                    round=rnd, index=index, rid=new_request_id()), blobs)


def test_what_each_decryptor_receives(agnews_small) -> None:
    rec, run, log = _world(agnews_small)
    n_log = len(log.log)
    run.evaluate(0, 3, None)
    reqs = [(int(r.split(":")[1]), p) for _s, r, k, p in log.log[n_log:] if k == "decrypt"]
    batches, groups = run.P._batches, run.P._groups  # noqa: SLF001
    assert len(reqs) == len(batches)
    parts = list(rec.rounds[0].participants)
    for (me, data), batch in zip(reqs, batches, strict=True):
        meta = wire.decode(data).meta
        owners = groups[batch.group]
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
    to_p, to_a = client.decrypt_all(data)
    assert wire.decode(to_p).kind == "secsv/labels-all"
    with pytest.raises(ReplayRefused):
        client.decrypt_all(data)
    with pytest.raises(ReplayRefused):
        client.decrypt_all(_rebuild(data, **{RID: "ab" * 16}))
    terms = meta["terms"]
    bad_terms = [
        terms[:1] + [[me]] + terms[2:],  # its own singleton instead of another's
        terms[:-1] if len(terms[-1]) == 2 else terms + [[me, terms[1][0]]],  # pair missing
        [[]] + terms[2:] + terms[1:2],  # order changed
    ]
    for bad in bad_terms:
        c = fz.clone_sclient(snap.clients[me])
        with pytest.raises(ProtocolError):
            c.decrypt_all(_rebuild(data, terms=bad))
    c = fz.clone_sclient(snap.clients[me])
    with pytest.raises(ProtocolError):  # asked to decrypt its own samples
        c.decrypt_all(_rebuild(data, batch_owners=[me]))
    c = fz.clone_sclient(snap.clients[me])
    with pytest.raises(ProtocolError):  # a bound below the values: refused, not wrapped
        c.decrypt_all(_rebuild(data, bounds=[1] * len(meta["bounds"])))
    # another client of the batch's owners refuses the same request
    owner = meta["batch_owners"][0]
    with pytest.raises(ProtocolError):
        fz.clone_sclient(snap.clients[owner]).decrypt_all(data)
    # a per-coalition client method refuses the all-coalition request and vice versa
    with pytest.raises(ProtocolError):
        fz.clone_sclient(snap.clients[me]).decrypt_layer(data)


def test_servers_check_all_coalition_shares(agnews_small) -> None:
    rec, run, log = _world(agnews_small)
    k = len(rec.rounds[0].participants)
    seen: list[tuple[str, str, str, bytes]] = []
    log.hook = lambda s, r, kd, p: seen.append((s, r, kd, p))
    run.evaluate(0, 1, None)
    to_a = next(p for s, r, kd, p in seen if kd == "share" and r == "A")
    mask_p = next(p for s, r, kd, p in seen if kd == "label-mask")
    # A refuses a label share that claims another number of coalitions
    snap_rec, snap, _ = _world(agnews_small)
    assert snap.P.start_derived(0, None)
    snap.A.open_eval(snap.P.open_next())
    with pytest.raises(ProtocolError):
        snap.A.label_diff_all(_rebuild(to_a, coalitions=2 ** (k - 1)), mask_p)
    # ... and one of another evaluation (the id P announced differs)
    with pytest.raises(ProtocolError):
        snap.A.label_diff_all(to_a, mask_p)
    # outside a derived evaluation, neither server takes all-coalition messages
    s2_rec, s2, _ = _world(agnews_small)
    s2.P.start_evaluation(0, 1, None)
    s2.A.open_eval(s2.P.open_next())
    with pytest.raises(ProtocolError):
        s2.A.label_diff_all(to_a, mask_p)
    with pytest.raises(ProtocolError):
        s2.P.decrypt_all_request([])


def test_when_derived_applies(logistic, digits_small) -> None:
    rec, sets = logistic
    for kw in ({"estimator": "ps", "budget": 2}, {"linear_shortcut": False}):
        with pytest.raises(ValueError, match="derived_decryption"):
            sv.secsv_shapley(rec, sets, derived_decryption=True, **kw,
                             schedule="paper")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        sv.secsv_shapley(rec, sets, derived_decryption=1,
                         schedule="paper")  # type: ignore[arg-type]
    crec, csets = _record(digits_small, 1)
    with pytest.raises(ValueError, match="one-layer"):
        sv.secsv_shapley(crec, csets, derived_decryption=True, schedule="paper")
    # SampleSkip on a one-layer model: derived by default, per coalition on request
    for derived, want in ((None, "secsv/decrypt-all"), (False, "secsv/decrypt")):
        res = sv.secsv_shapley(rec, sets, sample_skip=True, schedule="paper",
                               derived_decryption=derived)
        assert res.accounting is not None
        kinds = {k for (_s, _r, k) in res.accounting.messages}
        other = "secsv/decrypt" if want == "secsv/decrypt-all" else "secsv/decrypt-all"
        assert want in kinds and other not in kinds


# ---------------------------------------------------------------- the tiny derived world
def _tiny(rounds: int = 1, derived: bool = True):
    """The fuzz world's one-layer record (4 clients, participants 0, 1, 3; batches of
    clients {0, 1} and {2, 3}), set up with round 0's models uploaded."""
    _rec, sets = fz._tiny_record()  # noqa: SLF001
    rec = fz.tiny_derived_record(sets, rounds)
    log = fz.Recorder()
    run = sv._setup(rec, sets, sv.SecSVConfig().check(), fz.recorder_net(log),  # noqa: SLF001
                    True, derived)
    run.upload_round(0)
    return rec, run, log


def _requests(log) -> list[tuple[int, bytes]]:
    return [(int(r.split(":")[1]), p) for _s, r, k, p in log.log if k == "decrypt"]


def _segment_sum(client, ct_bytes: bytes) -> np.ndarray:
    """What ``client`` reads from a ciphertext of a one-layer request: the fold segments'
    sum (P's masks cancel in it)."""
    plan, bfv = client._plan, client._bfv  # noqa: SLF001 - what the client holds
    lp = plan.layers[0]
    seg = lp.d_out * plan.width
    slots = bfv.decrypt(bfv.deserialize(ct_bytes, low=True))
    return slots[:lp.fold * seg].reshape(lp.fold, seg).astype(object).sum(axis=0) % bfv.t


# ---------------------------------------------------------------- regressions (fuzzing)
def _wide_request(k: int, m: int):
    """A client of ``k + 2`` and a derived request with ``k`` participants and ``m``
    samples (the widest batch a plan of ``slots / d_out`` columns allows): the label
    table a hostile or careless P can ask for."""
    import secrets as _secrets

    from fedsec.crypto.bfv import BFVContext
    from fedsec.learning.model import LayerSpec, ModelSpec
    n, cfg = k + 2, sv.SecSVConfig().check()
    bfv = BFVContext.from_seed(_secrets.token_bytes(32), params=cfg.bfv, label=b"wide")
    session = "ab" * 16
    spec = ModelSpec("lin", (LayerSpec.dense(3, 2),))
    client = sv.SecSVClient(n - 1, n, bfv, np.zeros((1, 3)), np.zeros(1, dtype=np.int64),
                            spec, cfg, session=session)
    plan = {"width": bfv.slots // 2, "frac_models": [20], "frac_inputs": [20],
            "layers": [[2, 3, 1]]}
    p_side = Binding(session, "secsv", "P")
    client.receive_plan(wire.encode("secsv/plan", p_side.bind(plan, step="plan", to="*")))
    parts = list(range(k))
    ct = bfv.serialize(bfv.mod_switch_down(bfv.encrypt(np.zeros(bfv.slots, np.uint64))))
    meta = {"m": m, "batch_owners": [k], "participants": parts, "weights": [1] * k,
            "terms": [[]] + [[c] for c in parts], "bounds": [1 << 40] * (k + 1),
            "scale_bits": 40, "ev": new_request_id()}
    return client, wire.encode("secsv/decrypt-all", p_side.bind(
        meta, step="decrypt-all", to=f"client:{n - 1}", round=0, index=(sv.ALL, 0, 0),
        rid=new_request_id()), [ct] * (k + 1))


def test_client_bounds_the_label_table(monkeypatch) -> None:
    """Regression (found reading the derived code for the fuzz campaign; the fuzz world's
    4 clients cannot reach it): the client took any ``2^k × m``
    table P asked for -- 16 participants and a 4096-column batch (what the plan allows
    for ``d_out = 2``) meant ~12 GiB at the client (measured: 196 MiB traced at k = 10,
    772 MiB at k = 12, x2 per participant). It now refuses more than 2^22 entries before
    decrypting anything."""
    client, req = _wide_request(16, 4096)
    with pytest.raises(ProtocolError, match="coalitions"):
        client.decrypt_all(req)
    assert wire.decode(req).meta[RID] not in client._answered  # noqa: SLF001 - nothing done
    # the cap is inclusive: a table of exactly the cap is answered, one more sample is not
    monkeypatch.setattr(sv_client, "MAX_DERIVED_LABELS", 16 * 64)
    client, req = _wide_request(4, 64)
    to_p, _ = client.decrypt_all(req)
    assert len(wire.decode(to_p).blobs[-1]) == 8 * 16 * 64  # P: (b', g'), g' per coalition
    client, req = _wide_request(4, 65)
    with pytest.raises(ProtocolError, match="coalitions"):
        client.decrypt_all(req)


def test_principal_decrypts_per_coalition_beyond_the_cap(monkeypatch) -> None:
    """P does not ask for a table the client would refuse: the round falls back to one
    request per coalition (same results)."""
    rec, ref, _ = _tiny(derived=False)
    want = [ref.evaluate(0, mask, None) for mask in range(8)]
    widest = max(len(b.rows) for b in _tiny()[1].P._batches)  # noqa: SLF001
    monkeypatch.setattr(sv_principal, "MAX_DERIVED_LABELS", 8 * widest - 1)
    _rec, run, log = _tiny()
    assert run.P._derived_plan(0) is None  # noqa: SLF001
    for mask in range(8):
        np.testing.assert_array_equal(run.evaluate(0, mask, None), want[mask])
    kinds = {k for _s, _r, k, _p in log.log}
    assert "decrypt" in kinds and not any(
        wire.decode(p).kind == "secsv/decrypt-all" for _s, _r, k, p in log.log
        if k == "decrypt")


def test_blocked_derivation_is_exact(monkeypatch) -> None:
    """The derived sums are computed in bounded blocks of coalitions; one coalition per
    block gives the same table as per-coalition SecSV."""
    _rec, ref, _ = _tiny(derived=False)
    want = np.stack([ref.evaluate(0, mask, None) for mask in range(8)])
    monkeypatch.setattr(sv_client, "DERIVED_BLOCK", 1)
    _rec, run, _ = _tiny()
    run.evaluate(0, 0, None)
    np.testing.assert_array_equal(run.P._derived_correct[0], want)  # noqa: SLF001


def test_metadata_cannot_relabel_a_ciphertext() -> None:
    """Regression (found reviewing what the derived in-flight target's strict oracle
    must hold; its ``decrypt:forged`` producer reproduces it: 19 violations in 1,000
    executions with ``--seed 1`` before the fix, 0 after): client 1's request holds the
    pair ``{1, p}``; rewriting only the partner in the metadata to another participant
    (blobs intact) was accepted and the client derived its coalitions from the wrong
    singleton -- 15 of the 96 table entries changed silently on this world -- and so
    was a consistently reordered participant list. The partner is now fixed (the first
    other participant) and the participants must be ascending, so the term list follows
    from the participants: both forgeries are refused, and an accepted metadata change
    (here the weights: a positive divisor per coalition) leaves the table exact."""
    rec, run, log = _tiny()
    honest = fz.clone_srun(run)
    honest.evaluate(0, 0, None)
    table = honest.P._derived_correct[0]  # noqa: SLF001

    def forge(edit):
        def swap(data: bytes) -> bytes:
            msg = wire.decode(data)
            meta = dict(msg.meta)
            if 1 in meta["terms"][-1]:
                edit(meta)
            return fz._encode_loose(msg.kind, meta, list(msg.blobs))  # noqa: SLF001
        return swap

    def partner(meta: dict) -> None:
        meta["terms"] = [*meta["terms"][:-1], [1, 3]]

    def reorder(meta: dict) -> None:  # participants and singletons swapped consistently
        meta["participants"] = [3, 1, 0]
        meta["weights"] = meta["weights"][::-1]
        meta["terms"] = [[], [3], [0], [1, 0]]

    def weights(meta: dict) -> None:  # harmless: a positive divisor per coalition
        meta["weights"] = [w + 1 for w in meta["weights"]]

    for edit in (partner, reorder):
        r = fz.clone_srun(run)
        fz.recorder_of(r).swaps = {("decrypt", k): forge(edit) for k in range(2)}
        with pytest.raises(ProtocolError, match="pair term|participants"):
            r.evaluate(0, 0, None)
    r = fz.clone_srun(run)
    fz.recorder_of(r).swaps = {("decrypt", k): forge(weights) for k in range(2)}
    r.evaluate(0, 0, None)
    np.testing.assert_array_equal(r.P._derived_correct[0], table)  # noqa: SLF001


# ---------------------------------------------------------------- attacks from the bytes
def test_curious_principal_reuses_a_singleton_in_a_per_coalition_request() -> None:
    """A curious P takes the ciphertext of client 3's singleton ``q_3·lin(θ_3, X_b)`` out
    of the derived request it sent client 2 and asks client 3 itself to decrypt it in a
    per-coalition ``secsv/decrypt`` request.

    Detected: the derived request sent to client 3 (its singleton is a term; refused),
    the derived bytes at the per-coalition entry point (another kind), and the honest
    labelling of the reused ciphertext (coalition {3}, model owner 3; Prop. 6.8,
    refused). Not detected -- the limit: a ciphertext carries no provenance, so P
    relabelling it as an aggregated coalition without an owner gets it decrypted (and
    client 3 learns its own model's outputs on clients 0 and 1's samples). That needs
    P to lie about the coalition, which the semi-honest model excludes; stopping it
    would need authenticated ciphertexts (signed by their model owners) or a proof of
    the linear combination."""
    rec, run, log = _tiny()
    snap = fz.clone_srun(run)
    run.evaluate(0, 0, None)
    me, data = next((me, d) for me, d in _requests(log) if me == 2)
    msg = wire.decode(data)
    terms, parts = msg.meta["terms"], list(rec.rounds[0].participants)
    j = terms.index([3])
    ct, bound = msg.blobs[j], msg.meta["bounds"][j]
    owners, m = msg.meta["batch_owners"], msg.meta["m"]
    assert 3 not in owners  # Prop. 6.8's other rule does not apply: only the singleton one
    with pytest.raises(ProtocolError):  # the derived request itself, misrouted to 3
        fz.clone_sclient(snap.clients[3]).decrypt_all(data)
    with pytest.raises(ProtocolError):  # the derived bytes at the per-coalition entry
        fz.clone_sclient(snap.clients[3]).decrypt_layer(data)

    def per_coalition(mask: int, mowners: list[int]) -> bytes:
        return _as_principal(snap, "secsv/decrypt", {
            "layer": 0, "m": m, "batch_owners": owners, "model_owners": mowners,
            "previous": -1, "scale_bits": msg.meta["scale_bits"], "weight_sum": 3,
            "bound": bound}, [ct, np.packbits(np.ones(m, dtype=bool)).tobytes()], 3,
            (mask, msg.meta["ctx"][6][1], 0))

    single = 1 << parts.index(3)
    with pytest.raises(ProtocolError, match="own|model"):  # honestly labelled: refused
        fz.clone_sclient(snap.clients[3]).decrypt_layer(per_coalition(single, [3]))
    # relabelled as the aggregate {1, 3}: decrypted (the limit stated above)
    to_p, _ = fz.clone_sclient(snap.clients[3]).decrypt_layer(
        per_coalition(single | 1 << parts.index(1), []))
    assert wire.decode(to_p).kind == "secsv/labels"


def test_relabelled_own_singleton_reveals_nothing_new() -> None:
    """P swaps the pair term ``q_1·lin(θ_1, X_b) + q_0·lin(θ_0, X_b)`` of client 1's
    derived request for client 1's own singleton ``q_1·lin(θ_1, X_b)`` (which P can
    compute), so that client 1 decrypts its own singleton under the pair's name.

    Not detected: the client cannot tell which ciphertext is which (no provenance;
    the values stay within the pair's bound). But it learns nothing the honest request
    does not show it: the pair minus its partner's singleton *is* its own singleton
    (asserted on what client 1 decrypts from the honest request), as in the paper's
    schedule that lets a client decrypt {p} and {me, p}. The swap only corrupts the
    labels P gets back (P's own loss). The rule derived decryption enforces is on what
    the request says: never ``[me]`` as a term (refused) and never its own samples."""
    rec, run, log = _tiny()
    snap = fz.clone_srun(run)
    run.evaluate(0, 0, None)
    me, data = next((me, d) for me, d in _requests(log) if me == 1)
    msg = wire.decode(data)
    assert msg.meta["terms"][-1] == [1, 0]
    bi = msg.meta["ctx"][6][1]
    # q_1·lin(θ_1, X_b): P computed it for the pair (the shortcut's cache), as it can
    own = run.P._lin_cache[(0, "c1", bi)]  # noqa: SLF001
    own_bytes = run.P._bfv.serialize(own)  # noqa: SLF001
    client = fz.clone_sclient(snap.clients[1])
    t = client._bfv.t  # noqa: SLF001
    pair = _segment_sum(client, msg.blobs[-1])
    partner = _segment_sum(client, msg.blobs[msg.meta["terms"].index([0])])
    assert np.array_equal((pair - partner) % t, _segment_sum(client, own_bytes))
    # the swap: P re-issues the request (fresh id) with its own singleton as the pair
    meta = {k: v for k, v in msg.meta.items() if k not in ("ctx", RID, "ev")}
    forged = _as_principal(snap, "secsv/decrypt-all", meta, [*msg.blobs[:-1], own_bytes], 1,
                           (sv.ALL, bi, 0))
    to_p, _ = client.decrypt_all(forged)
    assert wire.decode(to_p).kind == "secsv/labels-all"
    # named as what it is, the same ciphertext is refused
    named = _as_principal(snap, "secsv/decrypt-all",
                          {**meta, "terms": [*msg.meta["terms"][:-1], [1]]},
                          [*msg.blobs[:-1], own_bytes], 1, (sv.ALL, bi, 0))
    with pytest.raises(ProtocolError, match="pair term"):
        fz.clone_sclient(snap.clients[1]).decrypt_all(named)


def test_derived_request_replayed_in_the_next_round() -> None:
    """Round 0's derived request delivered again in round 1 (as it was, or re-issued by P
    with a fresh id) is refused by the client that answered it: an answered id, a round
    earlier than one it served, or a batch of a round it already decrypted. The limit
    (module docstring): re-bound to round 1 with a fresh id, the same ciphertexts would
    be decrypted -- binding does not authenticate ciphertexts -- but the client then
    sees outputs it already derived in round 0."""
    rec, run, log = _tiny(rounds=2)
    run.evaluate(0, 0, None)
    reqs0 = _requests(log)
    run.end_round(0)
    run.upload_round(1)
    n_log = len(log.log)
    run.evaluate(1, 0, None)
    served1 = {int(r.split(":")[1]) for _s, r, k, _p in log.log[n_log:] if k == "decrypt"}
    assert reqs0 and served1
    for me, data in reqs0:
        client = run.clients[me]
        with pytest.raises(ReplayRefused):
            fz.clone_sclient(client).decrypt_all(data)
        with pytest.raises(ReplayRefused):  # re-issued by P with a fresh id
            fz.clone_sclient(client).decrypt_all(_rebuild(data, **{RID: "cd" * 16}))
        if me in served1:  # a client that served round 1 refuses round 0 outright
            with pytest.raises(ReplayRefused, match="earlier round"):
                fz.clone_sclient(client).decrypt_all(
                    _rebuild(data, **{RID: "ef" * 16}))


def test_own_samples_under_other_owners() -> None:
    """A P that lies about a batch's owners: client 2 is asked to derive the outputs on
    the batch of clients {2, 3} -- its own samples.

    Detected: the batch named with its true owners (client 2 among them) is refused,
    whatever the terms. Not detected -- the limit: announced as the batch of {0, 1}
    (the context's batch index is P's to choose, and the client holds no schedule nor
    any way to recognise its samples in the ciphertexts), the same request is
    decrypted, and client 2 learns every participant's model output on its own samples.
    Prop. 6.8 is enforced on what the request says; a P that lies about it is outside
    the semi-honest model (as for per-coalition SecSV)."""
    rec, run, log = _tiny()
    snap = fz.clone_srun(run)
    run.evaluate(0, 0, None)
    batches, groups = run.P._batches, run.P._groups  # noqa: SLF001
    bfv = run.P._bfv  # noqa: SLF001
    bi = next(i for i, b in enumerate(batches) if 2 in groups[b.group])
    other = next(i for i in range(len(batches)) if i != bi)
    keys = ["global", "c0", "c1", "c3"]  # client 2's terms: [], [0], [1], [3]
    blobs = [bfv.serialize(run.P._lin_cache[(0, k, bi)]) for k in keys]  # noqa: SLF001
    parts = list(rec.rounds[0].participants)
    q = [int(v) for v in integer_weights(rec.rounds[0].weights,
                                         sv.SecSVConfig().weight_bits)]
    m = len(batches[bi].rows)
    meta = {"m": m, "participants": parts, "weights": q,
            "terms": [[]] + [[c] for c in parts], "bounds": [(bfv.t - 1) // 8] * 4,
            "scale_bits": run.P.plan.scale(0)}

    def request(batch: int, owners: list[int]) -> bytes:
        return _as_principal(snap, "secsv/decrypt-all", {**meta, "batch_owners": owners},
                             blobs, 2, (sv.ALL, batch, 0))

    with pytest.raises(ProtocolError, match="own samples"):
        fz.clone_sclient(snap.clients[2]).decrypt_all(request(bi, [2, 3]))
    to_p, _ = fz.clone_sclient(snap.clients[2]).decrypt_all(request(other, [0, 1]))
    assert wire.decode(to_p).meta["coalitions"] == 2 ** len(parts)
