"""Attacks on the secure Shapley roles, beyond fuzzing (the threat models of hesv.py,
secsv.py and secretsv.py), and one regression test per decoder bug the role fuzzing found
(``tests/fuzz/fuzz_shapley.py``; marked "regression").

Every attack starts from the bytes of a small honest run (the fuzzing corpus: 4 clients,
``dense(3,4,square) -> dense(4,2)``, 3 samples each, one round) and checks that the role
receiving the hostile bytes refuses them with ``ProtocolError`` (``PolicyViolation`` for
Prop. 6.8's decryptor rules) and that its state or result is unchanged.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
import fuzz_shapley as fz  # noqa: E402
from fuzz_targets import _encode_loose  # noqa: E402

from fedsec.errors import PolicyViolation, ProtocolError  # noqa: E402
from fedsec.protocol import wire  # noqa: E402
from fedsec.protocol.binding import CTX  # noqa: E402
from fedsec.protocol.binding import Context as PContext  # noqa: E402
from fedsec.shapley import secsv as sv  # noqa: E402


@pytest.fixture(scope="module")
def w() -> fz.ShapleyWorld:
    return fz.build_shapley_world()


def _re(data: bytes, *, blobs: list[bytes] | None = None, **meta: Any) -> bytes:
    """``data`` with metadata keys replaced (a value of ``...`` drops the key)."""
    msg = wire.decode(data)
    m = {**msg.meta, **meta}
    m = {k: v for k, v in m.items() if v is not ...}
    return _encode_loose(msg.kind, m, list(msg.blobs) if blobs is None else blobs)


# ====================================================================== HESV
def _hre(data: bytes, *, blobs: list[bytes] | None = None, **changes: Any) -> bytes:
    """An HESV message with fields of its binding context changed (the index by its parts
    ``mask``, ``owner``, ``batch``, ``layer``; a part set to ``...`` is dropped) and other
    metadata keys replaced."""
    hm = fz._hmeta(data)  # noqa: SLF001
    ctx = PContext.from_meta(hm[CTX])
    index = list(ctx.index)
    for k in reversed(fz._HINDEX):  # noqa: SLF001
        if k in changes:
            v = changes.pop(k)
            if v is ...:
                del index[fz._HINDEX.index(k)]  # noqa: SLF001
            else:
                index[fz._HINDEX.index(k)] = v  # noqa: SLF001
    ctx_changes = {k: changes.pop(k) for k in list(changes) if k in (
        "session", "protocol", "round", "step", "sender", "recipient")}
    return _re(data, blobs=blobs, **{CTX: ctx.at(index=index, **ctx_changes).to_meta()},
               **changes)


def _hat(data: bytes) -> dict[str, Any]:
    """An HESV message's round and index parts (with its other metadata)."""
    return fz._hmeta(data)  # noqa: SLF001


def _layer_requests(w: fz.ShapleyWorld, mask: int) -> list[fz.HRequest]:
    return [r for r in w.h_requests if r.kind == "hesv/layer"
            and _hat(r.request)["mask"] == mask]


def test_hesv_client_refuses_requests_outside_prop_6_8(w: fz.ShapleyWorld) -> None:
    """A server routing a decryption against the chain rules is stopped by the client."""
    owner_req = _layer_requests(w, 0b0010)[0]  # θ_1 (client 1's local model) under test
    # (each misrouted request addressed as a server that routes it so would address it)
    with pytest.raises(PolicyViolation, match="its own local model"):
        fz.clone_hclient(w.h_clients[1]).decrypt_layer(_hre(owner_req.request,
                                                            recipient="client:1"))
    batch_owner = _hat(owner_req.request)["owner"]
    with pytest.raises(PolicyViolation, match="owns the batch"):
        fz.clone_hclient(w.h_clients[batch_owner]).decrypt_layer(
            _hre(owner_req.request, recipient=f"client:{batch_owner}"))
    # the same client asked for the next layer of an evaluation it decrypted (i_(l+1) = i_l)
    first = next(r for r in w.h_requests if r.kind == "hesv/layer"
                 and _hat(r.request)["layer"] == 1)
    client = fz.clone_hclient(first.client)
    client.decrypt_layer(first.request)
    second = _hre(first.request, layer=2)
    with pytest.raises(PolicyViolation, match="another layer"):
        client.decrypt_layer(second)
    # ... and, at the strong level, a replay of the layer it already decrypted
    with pytest.raises(PolicyViolation, match="another layer"):
        client.decrypt_layer(first.request)


def test_hesv_client_refuses_the_difference_it_must_not_see(w: fz.ShapleyWorld) -> None:
    diff = next(r for r in w.h_requests if r.kind == "hesv/diff")
    meta = _hat(diff.request)
    with pytest.raises(PolicyViolation, match="owns the batch"):
        fz.clone_hclient(w.h_clients[meta["owner"]]).count(
            _hre(diff.request, recipient=f"client:{meta['owner']}"))
    # the client that decrypted the last layer (knows Ŷ) must not see Y - Ŷ
    key = (meta["round"], meta["mask"], meta["owner"], meta["batch"])
    knows = next(r.client for r in w.h_requests if r.kind == "hesv/diff"
                 and r.request == diff.request)
    predictor = next(c for c in [r.client for r in w.h_requests] if
                     fz.clone_hclient(c)._seen.get(key, set()) & {3})  # noqa: SLF001
    assert predictor.index != knows.index
    with pytest.raises(PolicyViolation, match="predicted labels"):
        fz.clone_hclient(predictor).count(_hre(diff.request,
                                               recipient=f"client:{predictor.index}"))


def test_hesv_cross_session_and_misrouted_messages(w: fz.ShapleyWorld) -> None:
    req = _layer_requests(w, 0b0011)[0]
    with pytest.raises(ProtocolError, match="another session"):
        fz.clone_hclient(req.client).decrypt_layer(_hre(req.request, session="0" * 64))
    st = w.h_steps[0]
    server = fz.clone_hserver(st.server)
    with pytest.raises(ProtocolError, match="another session"):
        server.step(st.sender, _hre(st.reply, session="0" * 64))
    other = next(c for c in range(fz.N_CLIENTS) if c != st.sender)
    with pytest.raises(ProtocolError):  # a reply claiming another client
        server.step(other, st.reply)
    with pytest.raises(ProtocolError, match="not asked"):  # ... in its context too
        server.step(other, _hre(st.reply, sender=f"client:{other}"))
    with pytest.raises(ProtocolError, match="another recipient"):  # a reflected request
        fz.clone_hclient(w.h_clients[other]).decrypt_layer(req.request)
    with pytest.raises(ProtocolError):  # an upload claiming another client
        fz.clone_hserver(w.h_server_empty).receive_data(1, w.h_data[0])
    assert server._counts == st.server._counts  # noqa: SLF001


def test_hesv_replayed_count_is_not_counted_twice(w: fz.ShapleyWorld) -> None:
    k = next(i for i, s in enumerate(w.h_steps) if s.kind == "hesv/count")
    st = w.h_steps[k]
    server = fz.clone_hserver(st.server)
    key = next(iter(server._counts))  # noqa: SLF001
    before = dict(server._counts)  # noqa: SLF001
    assert server.step(st.sender, st.reply) is None
    once = dict(server._counts)  # noqa: SLF001
    with pytest.raises(ProtocolError, match="no evaluation"):
        server.step(st.sender, st.reply)
    assert server._counts == once and once[key] >= before[key]  # noqa: SLF001
    with pytest.raises(ProtocolError):  # a count beyond the batch size
        fz.clone_hserver(st.server).step(st.sender, _re(st.reply, count=10**6))


def test_regression_hesv_reply_to_another_layer(w: fz.ShapleyWorld) -> None:
    """Regression: an activated/predicted reply naming another layer of the evaluation in
    flight was accepted (a replay at the weak level, where one client decrypts twice)."""
    st = next(s for s in w.h_steps if s.kind == "hesv/activated")
    with pytest.raises(ProtocolError, match="another layer"):
        fz.clone_hserver(st.server).step(st.sender, _hre(st.reply, layer=2))
    with pytest.raises(ProtocolError, match="another layer|field 'index'"):
        fz.clone_hserver(st.server).step(st.sender, _hre(st.reply, layer=...))
    assert fz.clone_hserver(st.server).step(st.sender, st.reply) is not None


def test_regression_hesv_ciphertexts_of_another_scale(w: fz.ShapleyWorld) -> None:
    """Regression: the server stored fresh ciphertexts (data, labels, models, activated
    features) of any scale, so a client's wrong-scale upload changed counts silently."""
    scale30, scale12 = w.h_foreign_ct[2], w.h_foreign_ct[3]
    data = wire.decode(w.h_data[0])
    for k in (0, len(data.blobs) - 1):  # a data ciphertext, the label ciphertext
        blobs = list(data.blobs)
        blobs[k] = scale30
        with pytest.raises(ProtocolError, match="scale"):
            fz.clone_hserver(w.h_server_empty).receive_data(0, _re(w.h_data[0], blobs=blobs))
    sender, model = w.h_models[1]
    blobs = list(wire.decode(model).blobs)
    blobs[0] = scale12
    with pytest.raises(ProtocolError, match="scale"):
        fz.clone_hserver(w.h_server_ready).receive_model(sender, _re(model, blobs=blobs))
    st = next(s for s in w.h_steps if s.kind == "hesv/activated")
    blobs = list(wire.decode(st.reply).blobs)
    blobs[0] = scale30
    with pytest.raises(ProtocolError, match="scale"):
        fz.clone_hserver(st.server).step(st.sender, _re(st.reply, blobs=blobs))


def test_regression_hesv_decrypted_garbage_is_refused(w: fz.ShapleyWorld) -> None:
    """Regression: a layer output that decrypts to values the client cannot re-encrypt
    raised SEAL's ValueError ("encoded values are too large")."""
    req = next(r for r in w.h_requests if r.kind == "hesv/layer"
               and _hat(r.request)["layer"] == 1)
    ctx = req.client._ctx  # noqa: SLF001
    n = len(wire.decode(req.request).blobs)
    huge = [ctx.serialize(ctx.encrypt(np.full(ctx.slots, 1e10))) for _ in range(n)]
    with pytest.raises(ProtocolError, match="out of range|not finite"):
        fz.clone_hclient(req.client).decrypt_layer(_re(req.request, blobs=huge))


# ====================================================================== SecSV
def _s_request(w: fz.ShapleyWorld, layer: int = 0) -> tuple[int, bytes]:
    log = w.s_eval[0b0011][0]
    return next((int(r.split(":")[1]), p) for _, r, p in log.of("decrypt")
                if wire.decode(p).meta["layer"] == layer)


def test_secsv_client_refuses_requests_outside_prop_6_8(w: fz.ShapleyWorld) -> None:
    me, req = _s_request(w, 1)
    client = fz.clone_sclient(w.s_run.clients[me])
    for bad, why in (({"model_owners": [me]}, "own the model"),
                     ({"batch_owners": [me]}, "last layer"),
                     ({"previous": me}, "consecutive")):
        with pytest.raises(ProtocolError, match=why):
            client.decrypt_layer(_re(req, **bad))
    me0, req0 = _s_request(w, 0)
    with pytest.raises(ProtocolError, match="i_2 = i_1"):
        fz.clone_sclient(w.s_run.clients[me0]).decrypt_layer(_re(req0, batch_owners=[me0]))
    to_p, to_a = client.decrypt_layer(req)  # the honest request goes through
    assert wire.decode(to_p).kind == wire.decode(to_a).kind == "secsv/labels"


def test_regression_secsv_request_checks(w: fz.ShapleyWorld) -> None:
    """Regressions: an oversized active-column bitmap (16 MB unpacked to 128 MB) and a
    divisor other than the plan's were accepted."""
    me, req = _s_request(w, 0)
    client = fz.clone_sclient(w.s_run.clients[me])
    msg = wire.decode(req)
    with pytest.raises(ProtocolError, match="blobs"):
        client.decrypt_layer(_re(req, blobs=[msg.blobs[0], b"\xff" * (1 << 20)]))
    with pytest.raises(ProtocolError, match="scale_bits"):
        client.decrypt_layer(_re(req, scale_bits=msg.meta["scale_bits"] - 1))


def test_secsv_share_holders_sending_wrong_shapes(w: fz.ShapleyWorld) -> None:
    snap, reshare, to_a = next(x for x in w.s_at_share
                               if wire.decode(x[1]).kind == "secsv/reshare")
    m = wire.decode(reshare).meta["m"]
    for bad in (_re(reshare, blobs=[b"\x00" * 8 * 4 * (m + 1)]),  # a share of another shape
                _re(reshare, m=m + 1)):
        with pytest.raises(ProtocolError):
            fz.clone_sserver(snap.P).receive_share(bad)
        with pytest.raises(ProtocolError):
            fz.clone_sserver(snap.A).receive_share(bad)
    p_srv, a_srv = fz.clone_sserver(snap.P), fz.clone_sserver(snap.A)
    p_srv.receive_share(reshare)  # honest: parses
    a_srv.receive_share(to_a)
    assert p_srv._eval.x.shape == a_srv._eval.x.shape == (4, m)  # noqa: SLF001
    data = wire.decode(w.s_data_p[0])
    with pytest.raises(ProtocolError):  # rows that do not match the bytes
        fz.clone_sserver(w.s_server_p_empty).receive_data(
            [_re(w.s_data_p[0], rows=data.meta["rows"] + 1), *w.s_data_p[1:]])


def test_regression_secsv_server_decoders(w: fz.ShapleyWorld) -> None:
    """Regressions: a data share missing or sent twice (ValueError on an empty list,
    silently fewer samples otherwise); a model stored under another client's key; a
    label share without its blob (IndexError)."""
    empty = w.s_server_p_empty
    with pytest.raises(ProtocolError, match="every client"):
        fz.clone_sserver(empty).receive_data([])
    with pytest.raises(ProtocolError, match="every client"):
        fz.clone_sserver(empty).receive_data(w.s_data_p[:-1])
    with pytest.raises(ProtocolError):
        fz.clone_sserver(empty).receive_data([w.s_data_p[0], *w.s_data_p[:-1]])
    ok = fz.clone_sserver(empty)
    ok.receive_data(w.s_data_p)
    assert sorted(ok._xbound) == list(range(fz.N_CLIENTS))  # noqa: SLF001
    model = next(p for p in w.s_models if wire.decode(p).meta["key"] == "c1")
    server = fz.clone_sserver(w.s_run.P)
    server._models = {}  # noqa: SLF001
    with pytest.raises(ProtocolError):
        server.receive_model(_re(model, key="c2"))
    with pytest.raises(ProtocolError):
        server.receive_model(_re(model, owner=2))
    assert server.receive_model(model) == (0, "c1")
    snap, to_p, to_a = next(x for x in w.s_at_share
                            if wire.decode(x[1]).kind == "secsv/labels")
    m = wire.decode(to_p).meta["m"]
    with pytest.raises(ProtocolError, match="two blobs"):
        fz.clone_sserver(snap.P).label_mask(_re(to_p, blobs=[]))
    p_srv = fz.clone_sserver(snap.P)
    mask_p = p_srv.label_mask(to_p)
    with pytest.raises(ProtocolError, match="malformed"):
        fz.clone_sserver(snap.A).label_diff(_re(to_a, blobs=[]), mask_p)
    with pytest.raises(ProtocolError, match="label-mask"):
        fz.clone_sserver(snap.A).label_diff(to_a, _re(mask_p, blobs=[]))
    diff = fz.clone_sserver(snap.A).label_diff(to_a, mask_p)
    with pytest.raises(ProtocolError, match="one blob"):
        fz.clone_sserver(p_srv).compare(_re(diff, blobs=[]))
    assert fz.clone_sserver(p_srv).compare(diff).shape == (m,)


def test_regression_secsv_fixed_point_bounds(w: fz.ShapleyWorld) -> None:
    """Regressions: bounds with a dict for a model's layers (KeyError) or exponents whose
    sum overflows a float (OverflowError)."""
    b = w.s_bounds
    meta = wire.decode(b[0]).meta

    def pick(first: bytes) -> Any:
        cfg = sv.SecSVConfig().check()
        return sv.pick_fixed_point([first, *b[1:]], sv.round_infos(w.record, cfg), cfg,
                                   w.s_run.P._bfv.t, w.record.spec,
                                   binding=w.s_run.P._b)  # noqa: SLF001

    entry = meta["models"][0]
    with pytest.raises(ProtocolError):
        pick(_re(b[0], models=[[entry[0], entry[1], {"x": 1}]]))
    with pytest.raises(ProtocolError):
        pick(_re(b[0], x=1024, models=[[entry[0], entry[1], [[1024, 1024]]]]))
    plan = pick(b[0])
    assert min(plan.model) >= 1 and min(plan.inputs) >= 1


# ====================================================================== SecretSV
def _tre(data: bytes, **changes: Any) -> bytes:
    """A SecretSV message with fields of its binding context changed."""
    ctx = PContext.from_meta(wire.decode(data).meta[CTX])
    return _re(data, **{CTX: ctx.at(**changes).to_meta()})


def test_secretsv_servers_disagreeing_or_misrouting(w: fz.ShapleyWorld) -> None:
    from fedsec.protocol.binding import ReplayRefused

    log = w.t_eval[0b0011][0]
    (_, to, p), (_, _, a) = log.of("output", sender="P")[0], log.of("output", sender="A")[0]
    me = int(to.split(":")[1])
    client = fz.clone_tclient(w.t_run.clients[me])
    with pytest.raises(ProtocolError, match="different requests"):
        client.reconstruct(p, _re(a, bound=wire.decode(a).meta["bound"] * 2))
    with pytest.raises(ProtocolError, match="different requests"):  # or contexts
        client.reconstruct(p, _tre(a, index=[0, 0, 0]))
    with pytest.raises(ProtocolError):  # output shares for the wrong shape
        client.reconstruct(_re(p, blobs=[b"\x00" * 8]), a)
    with pytest.raises(ReplayRefused):  # P's copy twice (A's missing)
        client.reconstruct(p, p)
    meta = wire.decode(p).meta
    owner = meta["batch_owners"][0]
    with pytest.raises(ReplayRefused) as e:  # misrouted, as addressed
        fz.clone_tclient(w.t_run.clients[owner]).reconstruct(p, a)
    assert e.value.check == "recipient"
    owner_name = f"client:{owner}"  # misrouted and readdressed: its own rule refuses
    with pytest.raises(ProtocolError, match="own samples"):
        fz.clone_tclient(w.t_run.clients[owner]).reconstruct(
            _tre(p, recipient=owner_name), _tre(a, recipient=owner_name))
    to_p, _ = client.reconstruct(p, a)
    assert wire.decode(to_p).kind == "secretsv/reshare"


def test_regression_secretsv_reconstruct_metadata(w: fz.ShapleyWorld) -> None:
    """Regressions: a weight sum beyond a float (OverflowError), a divisor exponent other
    than the protocol's (OverflowError for 10000, FixedPointOverflow for 0)."""
    log = w.t_eval[0b0011][0]
    (_, to, p), (_, _, a) = log.of("output", sender="P")[0], log.of("output", sender="A")[0]
    client = fz.clone_tclient(w.t_run.clients[int(to.split(":")[1])])
    for bad in ({"weight_sum": 10**400}, {"scale_bits": 10000}, {"scale_bits": 0}):
        with pytest.raises(ProtocolError, match="malformed"):
            client.reconstruct(_re(p, **bad), _re(a, **bad))


def test_regression_secretsv_server_decoders(w: fz.ShapleyWorld) -> None:
    """Regressions: triples whose shape is not a 3-list (TypeError/ValueError), openings
    without blobs (IndexError), data shares with a huge client id (OverflowError),
    duplicated or missing (silently fewer samples) or with 2^62 rows; model bounds as a
    dict (KeyError), negative, or a round that is a bool."""
    run = w.t_run
    p_at, a_at, tp, ta = w.t_open
    d_out, d_in, m = wire.decode(tp).meta["shape"]
    for shape in (5, [d_out, d_in], [d_out, d_in, m, 1], "abc", None):
        with pytest.raises(ProtocolError, match="does not fit"):
            fz.clone_tserver(p_at).open_share(_re(tp, shape=shape))
    p_srv, a_srv = fz.clone_tserver(p_at), fz.clone_tserver(a_at)
    p_srv.open_share(tp)
    theirs = a_srv.open_share(ta)
    with pytest.raises(ProtocolError, match="two blobs"):
        p_srv.beaver(_re(theirs, blobs=[]))
    empty = w.t_server_empty
    for msgs in ([_re(w.t_data_p[0], client=2**64), *w.t_data_p[1:]],
                 [w.t_data_p[1], *w.t_data_p[1:]], w.t_data_p[1:], [],
                 [_re(w.t_data_p[0], rows=2**62), *w.t_data_p[1:]]):
        with pytest.raises(ProtocolError):
            fz.clone_tserver(empty).receive_data(msgs)
    model = w.t_models_p[1]
    bounds = wire.decode(model).meta["bounds"]
    server = fz.clone_tserver(run.P)
    for bad in ({"bounds": [{"0": 1}] * len(bounds)}, {"bounds": [[-1, 1]] * len(bounds)}):
        with pytest.raises(ProtocolError):
            server.receive_model(_re(model, **bad))
    for rnd in (False, -1, 1):  # the round is the binding context's
        with pytest.raises(ProtocolError):
            server.receive_model(_tre(model, round=rnd))
    server.receive_model(model)


# ====================================================================== Flower runtime
def test_regression_flower_train_replies_with_hostile_numbers() -> None:
    """Regression: RecordingFedAvg.aggregate_train let OverflowError out for a client id
    of inf, ValueError for a NaN or infinite weight, ZeroDivisionError for a zero weight
    and ComplexWarning for complex arrays, and recorded negative weights and NaN models."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pytest.importorskip("flwr", reason="Flower is optional: fedsec[flower]")
        from flwr.app import ConfigRecord, Message, MetricRecord, RecordDict
        from flwr.supercore.task_identity import TaskIdentity

    from fedsec.learning.model import LayerSpec, ModelSpec
    from fedsec.runtime import flower_shapley as fs

    saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
    try:
        spec = ModelSpec("t", (LayerSpec.dense(3, 2),))
        params = spec.init_params(np.random.default_rng(0))

        def aggregate(cid: Any, weight: Any) -> Any:
            out = Message(RecordDict({"config": ConfigRecord({})}), dst_node_id=5,
                          message_type="train")
            reply = Message(RecordDict({
                "arrays": fs.params_to_arrays(params),
                "metrics": MetricRecord({"num-examples": weight}),
                fs.FEDSEC_KEY: ConfigRecord({fs.CLIENT_ID: cid})}), reply_to=out)
            strategy = fs.RecordingFedAvg(spec, 2)
            strategy._keys, strategy._current = ["0", "1"], params  # noqa: SLF001
            return strategy, strategy.aggregate_train(1, [reply])

        strategy, (arrays, _) = aggregate(1, 3)
        assert arrays is not None and strategy.server.rounds[0].participants == (1,)
        for cid, weight in ((float("inf"), 3), (0, float("nan")), (0, float("inf")),
                            (0, -5.0), (0, 0)):  # 0: Flower's metrics divided by zero
            with pytest.raises(ProtocolError):
                aggregate(cid, weight)
        good = params
        for bad in ([p.astype(np.complex128) for p in good],  # ComplexWarning, then cast
                    [np.full_like(good[0], np.nan), good[1]]):
            params = bad
            with pytest.raises(ProtocolError, match="finite real"):
                aggregate(1, 3)
        params = good
    finally:
        TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved
