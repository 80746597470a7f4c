"""HESV (seed 004, Alg. 1-2) against NSSV on a small logistic task; Prop. 6.8's decryptor
rules (planner, level choice, refusal, warning, and each client's own enforcement);
malformed messages."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

from fedsec.errors import PolicyViolation, PrivacyWarning, ProtocolError
from fedsec.learning.model import LayerSpec, ModelSpec
from fedsec.learning.record import RoundRecord, TrainingRecord
from fedsec.protocol import wire
from fedsec.protocol.binding import CTX, Context, ReplayRefused
from fedsec.protocol.network import Network
from fedsec.shapley.fsv import federated_shapley
from fedsec.shapley.hesv import (
    HESVClient,
    HESVConfig,
    HESVServer,
    _key_setup,
    decryptor_chain,
    hesv_shapley,
    security_level,
)

PRESET = "CKKS_128_N4096_DEPTH2_S24"
TIE = 1e-3  # CKKS errors on scores are ~1e-4: closer scores may legitimately flip


pytestmark = [pytest.mark.filterwarnings(
    "ignore:.*schedule='paper'.*:fedsec.errors.PrivacyWarning"),
    # near-ties (scores within the CKKS noise) are decided as ties and reported
    pytest.mark.filterwarnings("ignore::fedsec.errors.PrecisionWarning")]


def _near_ties(record: TrainingRecord, x: np.ndarray) -> list[np.ndarray]:
    """Per round and coalition mask: samples whose two best plaintext scores are within
    ``TIE`` (the only predictions CKKS noise may change)."""
    from fedsec.learning.model import forward

    out = []
    for rnd in record.rounds:
        k = len(rnd.participants)
        counts = np.zeros(1 << k)
        for mask in range(1 << k):
            scores = np.sort(forward(record.spec, rnd.model_of_mask(mask), x), axis=1)
            counts[mask] = np.sum(scores[:, -1] - scores[:, -2] < TIE)
        out.append(counts)
    return out


def _assert_utilities(res: object, ref: object, record: TrainingRecord, x: np.ndarray
                      ) -> None:
    ties = _near_ties(record, x)
    assert sum(t.sum() for t in ties) <= 0.01 * len(x) * sum(len(t) for t in ties)
    for got, want, near in zip(res.utilities, ref.utilities, ties, strict=True):  # type: ignore[attr-defined]
        assert np.all(np.abs(got - want) <= near / len(x) + 1e-12)


@pytest.fixture(scope="module")
def bank_small():  # type: ignore[no-untyped-def]
    pytest.importorskip("torch", reason="training needs fedsec[learning] (torch)")
    from fedsec.learning.fedavg import run_fedavg
    from fedsec.learning.tasks import make_task

    task = make_task("bank", n_samples=3000, n_test=1000, seed=1)
    fed = task.federate(4, seed=1)
    record = run_fedavg(task, fed, rounds=2, seed=1)
    sets = [(c.x_test, c.y_test) for c in fed.clients]
    return record, sets, fed


def test_hesv_matches_nssv_on_logistic_task(bank_small) -> None:  # type: ignore[no-untyped-def]
    record, sets, fed = bank_small
    ref = federated_shapley(record, fed.x_test, fed.y_test)
    res = hesv_shapley(record, sets, preset=PRESET, schedule="paper")
    assert res.protocol == "hesv"
    assert res.error_to(ref) < 1e-3
    _assert_utilities(res, ref, record, fed.x_test)  # predictions agree up to near ties
    acc = res.accounting
    roles = acc.bytes_by_role()
    assert roles["server"]["received"] > 0 and roles["client"]["received"] > 0
    split = acc.split()
    assert split["arithmetic"] > 0 and split["encryption"] > 0 and split["decryption"] > 0
    kinds = {k for _, _, k in acc.bytes_by_message}
    assert {"keys/hello", "keys/offer", "hesv/data", "hesv/model", "hesv/layer",
            "hesv/predicted", "hesv/diff", "hesv/count"} <= kinds
    d = res.to_dict()
    assert d["protocol"] == "hesv" and d["bytes_total"] == acc.total_bytes


def test_paper_path_and_shortcut_agree(bank_small) -> None:  # type: ignore[no-untyped-def]
    """Without the shortcut, θ_S is aggregated under HE first (Alg. 1, step 6); both
    paths give NSSV's utilities up to CKKS noise near ties (at most one sample in 50)."""
    record, sets, fed = bank_small
    one = TrainingRecord(record.spec, record.n_clients, record.rounds[:1],
                         record.final_params)
    ref = federated_shapley(one, fed.x_test, fed.y_test)
    paper = hesv_shapley(one, sets, linear_shortcut=False, preset=PRESET, schedule="paper")
    _assert_utilities(paper, ref, one, fed.x_test)
    assert paper.error_to(ref) < 1e-3


def test_server_never_sees_the_secret_key(bank_small) -> None:  # type: ignore[no-untyped-def]
    record, _, _ = bank_small
    cfg = HESVConfig(PRESET)
    agg, keys = _key_setup(4, cfg.key_spec(record.spec), Network())
    assert agg.context is not None and not agg.context.has_secret_key
    assert all(k.context.has_secret_key for k in keys)
    sk = keys[0].context.secret_bytes()
    secret = wire.decode(sk).blobs[0][-4096:]
    ks = cfg.key_spec(record.spec)
    assert ks.rotations == () and ks.conjugate  # rotation-free layouts: conjugation only
    with pytest.raises(ValueError, match="secret key"):
        HESVServer(keys[0].context, record.spec, cfg, 4, [], keys[0].session)
    sent = agg.context.public_bytes()
    assert secret not in sent


# ---------------------------------------------------------------------- Prop. 6.8
def _check_chain(chain: tuple[int, ...], n: int, layers: int, owner: int,
                 model_owner: int | None, strong: bool) -> None:
    full = (owner, *chain)
    assert len(chain) == layers + 1 and all(0 <= c < n for c in chain)
    for pos in range(1, layers + 1):
        assert full[pos] != full[pos - 1]
        assert full[pos] != model_owner
    assert full[layers] != owner
    assert chain[-1] not in (full[layers], owner)
    if strong:
        assert len(set(full[:layers + 1])) == layers + 1


@pytest.mark.parametrize("n", range(2, 7))
@pytest.mark.parametrize("layers", range(1, 5))
def test_decryptor_chains_follow_prop_6_8(n: int, layers: int) -> None:
    for level in ("strong", "weak"):
        for owner, mowner in itertools.product(range(n), [None, *range(n)]):
            for start in range(n):
                try:
                    chain = decryptor_chain(n, layers, owner, mowner, level=level, start=start)
                except ValueError:
                    if level == "strong":
                        assert n < layers + 2
                    else:
                        assert n < 4
                    continue
                _check_chain(chain, n, layers, owner, mowner, level == "strong")


def test_security_levels() -> None:
    assert security_level(3, 1) == "strong"      # n >= L + 2
    assert security_level(5, 3) == "strong"
    assert security_level(4, 3) == "weak"        # the paper's n >= 4
    assert security_level(4, 5) == "weak"
    with pytest.raises(ValueError, match="needs more clients"):
        security_level(2, 1)
    with pytest.raises(ValueError, match="needs more clients"):
        security_level(3, 2)
    with pytest.raises(ValueError, match="'level' parameter"):
        decryptor_chain(4, 1, 0, None, level="none")


def _tiny_record(n: int, layers: int) -> TrainingRecord:
    rng = np.random.default_rng(0)
    if layers == 1:
        spec = ModelSpec("tiny", (LayerSpec.dense(3, 2),))
    else:
        spec = ModelSpec("tiny2", (LayerSpec.dense(3, 4, "square"), LayerSpec.dense(4, 2)))
    params = [spec.init_params(rng) for _ in range(n + 1)]
    rnd = RoundRecord(params[0], tuple(range(n)), tuple(params[1:]), np.ones(n))
    return TrainingRecord(spec, n, (rnd,), params[0])


def test_too_few_clients_refused_and_weak_level_warns() -> None:
    rng = np.random.default_rng(1)
    rec = _tiny_record(2, 1)
    sets = [(rng.normal(size=(4, 3)), rng.integers(0, 2, 4)) for _ in range(2)]
    with pytest.raises(ValueError, match="needs more clients"):
        hesv_shapley(rec, sets, preset=PRESET, schedule="paper")
    rec = _tiny_record(3, 2)
    sets3 = [(rng.normal(size=(4, 3)), rng.integers(0, 2, 4)) for _ in range(3)]
    with pytest.raises(ValueError, match="needs more clients"):
        hesv_shapley(rec, sets3, preset=PRESET, schedule="paper")
    assert security_level(4, 2) == "strong"  # n = 4 = L + 2; the weak level needs L = 3
    spec3 = ModelSpec("tiny3", (LayerSpec.dense(3, 4, "square"), LayerSpec.dense(4, 4, "square"),
                                LayerSpec.dense(4, 2)))
    params = [[2 * p for p in spec3.init_params(rng)] for _ in range(5)]
    rec3 = TrainingRecord(spec3, 4, (RoundRecord(params[0], (0, 1, 2, 3), tuple(params[1:]),
                                                 np.arange(1.0, 5.0)),), params[0])
    sets4 = [(2 * rng.normal(size=(3, 3)), rng.integers(0, 2, 3)) for _ in range(4)]
    x = np.concatenate([s[0] for s in sets4])
    y = np.concatenate([s[1] for s in sets4])
    ties = sum(t.sum() for t in _near_ties(rec3, x))
    with pytest.warns(PrivacyWarning, match="weak level"):
        res = hesv_shapley(rec3, sets4, preset=PRESET, schedule="paper")
    ref = federated_shapley(rec3, x, y)
    _assert_utilities(res, ref, rec3, x)  # a three-layer model with x² activations
    if ties == 0:
        assert res.error_to(ref) < 1e-9


# ---------------------------------------------------------------------- client rules
@pytest.fixture(scope="module")
def tiny_roles():  # type: ignore[no-untyped-def]
    rec = _tiny_record(4, 2)
    cfg = HESVConfig(PRESET, batch_hint=4)
    agg, keys = _key_setup(4, cfg.key_spec(rec.spec), Network())
    rng = np.random.default_rng(3)
    sets = [(rng.normal(size=(4, 3)), rng.integers(0, 2, 4)) for _ in range(4)]
    rounds = [(r.participants, r.weights) for r in rec.rounds]
    assert agg.context is not None
    return rec, cfg, agg, keys, sets, rounds


def _roles(tiny_roles, level: str = "strong"):  # type: ignore[no-untyped-def]
    rec, cfg, agg, keys, sets, rounds = tiny_roles
    server = HESVServer(agg.context, rec.spec, cfg, 4, rounds, agg.session, level=level)
    clients = [HESVClient(i, keys[i], rec.spec, cfg, 4, *sets[i], level=level)
               for i in range(4)]
    for c in clients:
        server.receive_data(c.index, c.upload_data())
    rnd = rec.rounds[0]
    server.receive_model(0, clients[0].upload_model(0, rnd.global_params, kind="global"))
    for cid, p in zip(rnd.participants, rnd.local_params, strict=True):
        server.receive_model(cid, clients[cid].upload_model(0, p))
    return server, clients


def _retarget(request: bytes, **meta: object) -> bytes:
    msg = wire.decode(request)
    return wire.encode(msg.kind, {**msg.meta, **meta}, msg.blobs)


_INDEX = ("mask", "owner", "batch", "layer")


def _context(request: bytes) -> Context:
    return Context.from_meta(wire.decode(request).meta[CTX])


def _recontext(request: bytes, **changes: object) -> bytes:
    """``request`` with fields of its binding context changed (the index by its parts:
    ``mask``, ``owner``, ``batch``, ``layer``)."""
    ctx = _context(request)
    index = list(ctx.index)
    for k in _INDEX:
        if k in changes:
            index[_INDEX.index(k)] = changes.pop(k)
    return _retarget(request, **{CTX: ctx.at(index=index, **changes).to_meta()})


def _to(request: bytes, client: int) -> bytes:
    """``request`` as a server that routes it to ``client`` would address it."""
    return _recontext(request, recipient=f"client:{client}")


def test_clients_refuse_what_prop_6_8_forbids(tiny_roles) -> None:  # type: ignore[no-untyped-def]
    server, clients = _roles(tiny_roles)
    reqs = server.start(0, 0b0010)  # client 1's local model
    to, req = reqs[0]
    owner = _context(req).index[1]
    with pytest.raises(PolicyViolation, match="its own local model") as e:
        clients[1].decrypt_layer(_to(req, 1))
    assert e.value.check == "decryptor"
    with pytest.raises(PolicyViolation, match="owns the batch"):
        clients[owner].decrypt_layer(_to(req, owner))
    reply = clients[to].decrypt_layer(req)
    nxt = server.step(to, reply)
    assert nxt is not None
    to2, req2 = nxt
    assert to2 not in (to, 1)
    with pytest.raises(PolicyViolation, match="another layer"):
        clients[to].decrypt_layer(_to(req2, to))  # i_(l+1) == i_l
    reply2 = clients[to2].decrypt_layer(req2)  # the last layer: predicted labels
    to3, req3 = server.step(to2, reply2)  # type: ignore[misc]
    with pytest.raises(PolicyViolation, match="predicted labels"):
        clients[to2].count(_to(req3, to2))
    with pytest.raises(PolicyViolation, match="owns the batch"):
        clients[owner].count(_to(req3, owner))
    other = next(c for c in range(4) if c not in (owner, to2, to3))
    with pytest.raises(PolicyViolation, match="not the chain's decryptor"):
        clients[other].count(_to(req3, other))  # not the chain member
    with pytest.raises(ReplayRefused) as refused:  # misrouted as addressed: the binding
        clients[other].count(req3)
    assert refused.value.check == "recipient"
    reply3 = clients[to3].count(req3)
    with pytest.raises(ProtocolError, match="not asked"):  # a reply claiming another client
        server.step(other, _recontext(reply3, sender=f"client:{other}"))
    assert server.step(to3, reply3) is None


def test_malformed_messages_raise_protocol_error(tiny_roles) -> None:  # type: ignore[no-untyped-def]
    server, clients = _roles(tiny_roles)
    to, req = server.start(0, 0b0011)[0]
    for bad in (req[:-10], req + b"x", _recontext(req, session="ab" * 16),
                _retarget(req, ctx="other"), _recontext(req, layer=7),
                _recontext(req, recipient="client:9"), _retarget(req, m=10 ** 6),
                wire.encode("hesv/layer", wire.decode(req).meta, [b"junk"])):
        with pytest.raises(ProtocolError):
            clients[to].decrypt_layer(bad)
    with pytest.raises(ProtocolError):
        clients[to].handle(wire.encode("hesv/other", {}))
    up = clients[0].upload_data()
    with pytest.raises(ProtocolError):
        server.receive_data(1, up)  # claims another client
    with pytest.raises(ProtocolError):
        server.receive_data(0, up[:-3])
    with pytest.raises(ProtocolError):
        server.receive_model(2, clients[2].upload_model(0, tiny_roles[0].rounds[0].global_params,
                                                        kind="global"))
    with pytest.raises(ProtocolError, match="no evaluation"):
        server.step(to, _recontext(clients[to].decrypt_layer(req), batch=99))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ProtocolError, match="not every batch"):
            server.utility(0, 0b0011)


def test_argument_validation(bank_small) -> None:  # type: ignore[no-untyped-def]
    record, sets, _ = bank_small
    with pytest.raises(TypeError, match="'record' parameter"):
        hesv_shapley("record", sets, schedule="paper")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'estimator' parameter"):
        hesv_shapley(record, sets, estimator="x", schedule="paper")
    with pytest.raises(ValueError, match="'budget' parameter"):
        hesv_shapley(record, sets, estimator="ps", budget=0, schedule="paper")
    with pytest.raises(ValueError, match="test_sets"):
        hesv_shapley(record, sets[:2], schedule="paper")
    with pytest.raises(ValueError, match="insecure"):
        hesv_shapley(record, sets, preset="INSECURE_TEST_N2048_DEPTH2_S24", schedule="paper")


def test_estimators_run_on_secure_utilities() -> None:
    """PS over HESV's utilities samples the same coalitions as over NSSV's (same seed)."""
    rng = np.random.default_rng(5)
    rec = _tiny_record(4, 1)
    sets = [(rng.normal(size=(6, 3)), rng.integers(0, 2, 6)) for _ in range(4)]
    x = np.concatenate([s[0] for s in sets])
    y = np.concatenate([s[1] for s in sets])
    assert all(t.sum() == 0 for t in _near_ties(rec, x))
    for est in ("ps", "ks"):
        ref = federated_shapley(rec, x, y, estimator=est, budget=3, seed=2)
        res = hesv_shapley(rec, sets, estimator=est, budget=3, seed=2, preset=PRESET,
                           schedule="paper")
        assert res.estimator == est and res.budget == 3
        assert res.error_to(ref) < 1e-9
        assert res.models_tested <= 16


def test_rotating_first_layer_is_masked_before_decryption() -> None:
    """A 4x300 first layer under the shortcut uses a rotate-and-sum layout (fewer model
    ciphertexts); the weighting zeroes the partial sums, so a decryptor sees Ŷ only."""
    rng = np.random.default_rng(8)
    spec = ModelSpec("wide", (LayerSpec.dense(300, 4),))
    params = [[p * 3 for p in spec.init_params(rng)] for _ in range(5)]
    rec = TrainingRecord(spec, 4, (RoundRecord(params[0], (0, 1, 2, 3), tuple(params[1:]),
                                               np.array([3.0, 1.0, 2.0, 5.0])),), params[0])
    sets = [(rng.normal(size=(k, 300)), rng.integers(0, 4, k)) for k in (30, 12, 20, 7)]
    cfg = HESVConfig(PRESET, batch_hint=30)
    plan = cfg.plans(spec)[0].plan
    assert plan.fold > 1 and cfg.key_spec(spec).rotations == tuple(plan.rotations())
    x = np.concatenate([s[0] for s in sets])
    y = np.concatenate([s[1] for s in sets])
    ref = federated_shapley(rec, x, y)
    res = hesv_shapley(rec, sets, preset=PRESET, schedule="paper")
    _assert_utilities(res, ref, rec, x)
    # what a decryptor receives: exactly lin(θ_S, X) in the valid slots, ~0 elsewhere
    agg, keys = _key_setup(4, cfg.key_spec(spec), Network())
    server = HESVServer(agg.context, spec, cfg, 4, [(r.participants, r.weights)
                                                   for r in rec.rounds], agg.session)
    clients = [HESVClient(i, keys[i], spec, cfg, 4, *sets[i]) for i in range(4)]
    for c in clients:
        server.receive_data(c.index, c.upload_data())
    server.receive_model(0, clients[0].upload_model(0, params[0], kind="global"))
    for cid in range(4):
        server.receive_model(cid, clients[cid].upload_model(0, params[cid + 1]))
    for mask in (0, 0b0100, 0b1011):
        to, req = server.start(0, mask)[0]
        ct = keys[to].context.deserialize(wire.decode(req).blobs[0])
        vals = keys[to].context.decrypt(ct)
        valid = server._valid_slots  # noqa: SLF001
        assert valid is not None
        assert np.abs(vals[valid == 0]).max() < 1e-3 < np.abs(vals[valid == 1]).max()


# ---------------------------------------------------------------------- CNN layers
def _naive_conv(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, stride: int
                ) -> np.ndarray:
    """Cross-correlation by explicit loops (independent of model.py's im2col)."""
    m, _, h, w = x.shape
    o, _, k, _ = weight.shape
    ho, wo = (h - k) // stride + 1, (w - k) // stride + 1
    out = np.zeros((m, o, ho, wo))
    for s in range(m):
        for f in range(o):
            for i in range(ho):
                for j in range(wo):
                    patch = x[s, :, i * stride:i * stride + k, j * stride:j * stride + k]
                    out[s, f, i, j] = np.sum(patch * weight[f]) + bias[f]
    return out.reshape(m, -1)


CONVS = [  # (in_shape (C, H, W), out_channels, kernel, stride, samples)
    ((1, 28, 28), 4, 7, 3, 3),   # seed 004's MNIST CNN: 8x8 outputs, a border left over
    ((1, 8, 8), 4, 3, 1, 5),     # the digits CNN
    ((3, 5, 7), 2, 3, 2, 4),     # channels, non-square input, stride 2
    ((2, 6, 6), 3, 6, 1, 2),     # kernel = input: one output position per channel
    ((1, 5, 5), 1, 1, 1, 1),     # 1x1 kernel, one sample
    ((2, 9, 4), 5, 2, 3, 3),     # stride > kernel: skipped input rows and columns
]


@pytest.mark.parametrize(("in_shape", "out_channels", "kernel", "stride", "m"), CONVS)
def test_conv_as_kernel_times_im2col_matches_plain_conv(
        in_shape: tuple[int, int, int], out_channels: int, kernel: int, stride: int,
        m: int) -> None:
    """HESV's conv layer is one product ``[kernel | b] @ im2col(X)`` (a column per sample
    and output position); in the clear and under CKKS it equals the convolution."""
    from fedsec.crypto.ckks import CKKSContext
    from fedsec.crypto.matmul import matrix_product

    rng = np.random.default_rng(sum(in_shape) + kernel)
    layer_spec = LayerSpec.conv2d(in_shape, out_channels, kernel, stride)
    spec = ModelSpec("conv", (layer_spec, LayerSpec.dense(layer_spec.out_features, 2)))
    params = spec.init_params(rng)
    layer = spec.layers_of(params)[0]
    x = rng.normal(size=(m, layer_spec.in_features))
    want = _naive_conv(x.reshape(m, *in_shape), layer.params[0], layer.params[1], stride)
    np.testing.assert_allclose(layer.linear(x), want, atol=1e-12)
    w_mat, b_vec = layer.matrix()  # the Toeplitz form, a third reference
    np.testing.assert_allclose(x @ w_mat.T + b_vec, want, atol=1e-12)
    for shortcut in (True, False):
        lp = HESVConfig(PRESET, batch_hint=m, linear_shortcut=shortcut).plans(spec)[0]
        b = lp.inputs(x)
        assert b.shape == (layer_spec.in_shape[0] * kernel ** 2 + 1,
                           m * int(np.prod(layer_spec.out_shape[1:])))
        np.testing.assert_allclose(lp.outputs(lp.matrix(layer) @ b, m), want, atol=1e-12)
        # encrypted: the plan's operands, product and decoding, chunk by chunk
        ctx = CKKSContext.generate(PRESET, rotations=lp.plan.rotations(),
                                   conjugate=lp.plan.packed)
        enc_a = [[ctx.encrypt(v) for v in vs] for vs in lp.plan.encode_a(lp.matrix(layer))]
        enc_b = [ctx.encrypt(v) for v in lp.encode_inputs(x)]
        per = lp.plan.b_count
        outs = []
        for k in range(len(lp.chunks(m))):
            outs += matrix_product(ctx, lp.plan, enc_a, enc_b[k * per:(k + 1) * per])
        got = lp.decode_outputs([ctx.decrypt(o).real for o in outs], m)
        assert got.shape == want.shape
        assert np.abs(got - want).max() < 1e-2 * max(1.0, np.abs(want).max())


def _tiny_cnn_record(n: int, in_shape: tuple[int, int, int], seed: int) -> TrainingRecord:
    rng = np.random.default_rng(seed)
    conv = LayerSpec.conv2d(in_shape, 2, kernel=3, stride=1, activation="square")
    spec = ModelSpec("tiny-cnn", (conv, LayerSpec.dense(conv.out_features, 6, "square"),
                                  LayerSpec.dense(6, 3)))
    params = [[1.5 * p for p in spec.init_params(rng)] for _ in range(n + 1)]
    rnd = RoundRecord(params[0], tuple(range(n)), tuple(params[1:]),
                      np.arange(1.0, n + 1.0))
    return TrainingRecord(spec, n, (rnd,), params[0])


@pytest.mark.parametrize("shortcut", [True, False])
def test_hesv_cnn_matches_nssv(shortcut: bool) -> None:
    """A tiny CNN (conv 2x6x6 -> x² -> dense 32->6 -> x² -> 6->3), n = 5 clients (the
    strong level for L = 3): the hidden layer runs in the folded layout, and every
    coalition's utility equals NSSV's up to near-tie predictions."""
    from fedsec.crypto.matmul import FoldedPlan

    rec = _tiny_cnn_record(5, (2, 6, 6), seed=6)  # seeds with no near-tie prediction
    rng = np.random.default_rng(6)
    sets = [(rng.normal(size=(k, 72)), rng.integers(0, 3, k)) for k in (9, 4, 7, 12, 6)]
    x = np.concatenate([s[0] for s in sets])
    y = np.concatenate([s[1] for s in sets])
    plans = HESVConfig(PRESET, batch_hint=12, linear_shortcut=shortcut).plans(rec.spec)
    assert plans[0].spec_kind == "conv2d" and plans[0].cols == 16
    assert isinstance(plans[1].plan, FoldedPlan)
    ref = federated_shapley(rec, x, y)
    res = hesv_shapley(rec, sets, preset=PRESET, linear_shortcut=shortcut, schedule="paper")
    _assert_utilities(res, ref, rec, x)
    assert sum(t.sum() for t in _near_ties(rec, x)) == 0  # so the FSVs must agree
    assert res.error_to(ref) < 1e-9
    assert len(set(np.round(ref.utilities[0], 6))) > 3  # coalitions really differ
