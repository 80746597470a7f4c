"""Threshold-key FHAUC: the AUC equals the plaintext trapezoid, and an aggregator with every
party but one (all their key shares, the result key, every message) cannot decrypt the
honest party's submission - not with the shares it holds, not by asking the honest party
to decrypt a ciphertext of its choosing, not by asking twice."""

from __future__ import annotations

import numpy as np
import pytest

from fedsec.auc.common import local_federation
from fedsec.auc.fhauc import FHAUCConfig, secure_auc
from fedsec.auc.fhauc_threshold import (
    ThresholdFHAUCAggregator,
    ThresholdFHAUCParty,
    switch_smudging_bits,
)
from fedsec.auc.policy import PartyPolicy
from fedsec.crypto import multiparty as mpc
from fedsec.crypto.collective import run_collective_key_setup
from fedsec.crypto.keysetup import KeySpec, run_key_setup
from fedsec.crypto.params import THRESHOLD_PRESET
from fedsec.crypto.rawpoly import plaintext_from_ntt
from fedsec.errors import ProtocolError
from fedsec.metrics import trapezoid_auc
from fedsec.protocol import wire

PRESET = "INSECURE_TEST_N4096_DEPTH1_S60"
NAMES = ["honest", "colluder-1", "colluder-2"]
POINTS = 40


def _data(seed: int, n: int = 50) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, 2, n), rng.random(n)) for _ in NAMES]


@pytest.fixture(scope="module")
def fed():  # type: ignore[no-untyped-def]
    ids, roster = local_federation(NAMES)
    cfg = FHAUCConfig.create(POINTS, preset=PRESET, allow_insecure=True)
    _, result = run_key_setup(ids, roster, KeySpec.create(PRESET, [], False,
                                                          allow_insecure=True))
    cagg, keys = run_collective_key_setup(ids, roster, cfg.key_spec(), result)
    return ids, roster, cfg, cagg, keys


def _roles(fed, data):  # type: ignore[no-untyped-def]
    ids, roster, cfg, cagg, keys = fed
    policy = PartyPolicy(presets=(PRESET,), min_decision_points=1)
    parties = [ThresholdFHAUCParty(y, s, keys=k, identity=i, config=cfg, roster=roster,
                                   policy=policy)
               for (y, s), k, i in zip(data, keys, ids, strict=True)]
    agg = ThresholdFHAUCAggregator(cagg.context, cfg, names=cagg.names, session=cagg.session,
                                   roster=roster)
    return parties, agg


def _run(parties, agg):  # type: ignore[no-untyped-def]
    subs = [p.submit() for p in parties]
    agg.begin()
    for s in subs:
        agg.add(s)
    request = agg.switch_request()
    shares = [p.share(request) for p in parties]
    result = agg.finish_shares(shares)
    return subs, request, shares, [p.finalize(result) for p in parties]


def test_threshold_auc_equals_plaintext_at_the_library_preset() -> None:
    """>= 100 samples, the threshold preset: within 1e-9 of the plaintext trapezoid."""
    data = _data(7, 40)
    res = secure_auc(data, decision_points=100, keys="threshold")
    y = np.concatenate([d[0] for d in data])
    s = np.concatenate([d[1] for d in data])
    want = trapezoid_auc(y, s, 100)
    assert res.preset == THRESHOLD_PRESET
    assert res.extra["keys"] == "threshold"
    assert abs(res.auc - want) <= 1e-9 * want
    assert res.error_bound >= 0


def test_roles_agree_with_plaintext(fed) -> None:  # type: ignore[no-untyped-def]
    data = _data(1)
    parties, agg = _roles(fed, data)
    *_, aucs = _run(parties, agg)
    y = np.concatenate([d[0] for d in data])
    s = np.concatenate([d[1] for d in data])
    want = trapezoid_auc(y, s, POINTS)
    assert max(aucs) - min(aucs) <= 1e-12
    assert abs(aucs[0] - want) <= 1e-8
    assert parties[0].included == tuple(NAMES)


def _decode(ctx, rows_data, ct) -> np.ndarray:  # type: ignore[no-untyped-def]
    pt = plaintext_from_ntt(ctx, rows_data.reshape(-1), level=ctx.level_of(ct),
                            scale=ct.scale)
    return np.asarray(ctx.decode(pt))


def test_coalition_cannot_decrypt_the_honest_submission(fed) -> None:  # type: ignore[no-untyped-def]
    """The coalition adds every key share it holds and every share the honest party sent
    to the honest submission's ``c0 + c1 s``: the values are garbage (the same sum with the
    honest party's key share recovers them, so the check can fail)."""
    _, _, cfg, cagg, keys = fed
    data = _data(2)
    parties, agg = _roles(fed, data)
    subs, _, shares, _ = _run(parties, agg)
    ctx = cagg.context
    mp = mpc._mp(ctx.params)
    truth = parties[0].slot_vectors()[0]
    ct = ctx.deserialize(wire.decode(subs[0]).blobs[0])
    c = mpc._ct_data(mp, ct)
    rows = c.shape[1]
    s_coal = mp.add(keys[1].share._s[:rows], keys[2].share._s[:rows])
    base = mp.add(c[0], mp.mul(c[1], s_coal))
    honest_shares = []
    for b in wire.decode(shares[0]).blobs:
        share_rows = int(wire.decode(b).meta["rows"])
        honest_shares.append(mpc._unpack(mp, b, "mpckks/switch-share", share_rows, 1)[0])
    assert all(h.shape[0] == rows for h in honest_shares)  # both at the fresh level
    for m in [base] + [mp.add(base, h) for h in honest_shares]:
        assert np.max(np.abs(_decode(ctx, m, ct) - truth)) > 1e6
    # control: with the honest party's key share the same sum decrypts (up to the
    # counts' noise, drawn afresh by slot_vectors)
    full = mp.add(base, mp.mul(c[1], keys[0].share._s[:rows]))
    assert np.max(np.abs(_decode(ctx, full, ct) - truth)) < 1.0


def test_honest_party_refuses_a_ciphertext_of_the_aggregators_choosing(fed) -> None:  # type: ignore[no-untyped-def]
    """The aggregator relays the honest submission in a colluder's place, drops the honest
    one, forges a colluder's ciphertext, or asks twice: the honest party refuses each."""
    _, _, cfg, cagg, keys = fed
    parties, agg = _roles(fed, _data(3))
    subs = [p.submit() for p in parties]
    agg.begin()
    for s in subs:
        agg.add(s)
    genuine = agg.switch_request()
    msg = wire.decode(genuine)

    def request(blobs: list[bytes]) -> bytes:
        return wire.encode("fhauc-t/switch", msg.meta, blobs)

    honest = parties[0]
    # 1. the honest submission twice (once under its own index)
    with pytest.raises(ProtocolError):
        honest.share(request([subs[0], subs[0], subs[2]]))
    # 2. without the honest submission
    with pytest.raises(ProtocolError):
        honest.share(request([subs[1], subs[2]]))
    # 3. a colluder's submission replaced by the honest ciphertexts under its index
    forged = wire.decode(subs[1])
    honest_blobs = wire.decode(subs[0]).blobs
    fake = wire.encode("fhauc-t/submit", forged.meta, [*honest_blobs[:-1], forged.blobs[-1]])
    with pytest.raises(ProtocolError, match="signature"):
        honest.share(request([subs[0], fake, subs[2]]))
    # 4. the honest submission changed
    mine = wire.decode(subs[0])
    flipped = bytearray(mine.blobs[0])
    flipped[-1] ^= 1
    changed = wire.encode("fhauc-t/submit", mine.meta, [bytes(flipped), *mine.blobs[1:]])
    with pytest.raises(ProtocolError):
        honest.share(request([changed, subs[1], subs[2]]))
    # the genuine request is answered once, never twice
    honest.share(genuine)
    with pytest.raises(ProtocolError, match="already"):
        honest.share(genuine)


def test_smudging_drowns_the_aggregates_noise_at_the_library_preset() -> None:
    """What a coalition reads from the switched aggregate is ``Dec(Q) + E``: the key switch's
    smudging must exceed the aggregate's data-independent noise (relinearisation, rotations,
    encryption noise squared, measured here on zero statistics under real collective keys)
    by ``2^39`` times the ring degree (statistical distance ``n B / 2^k <= 2^-39``)."""
    from fedsec.testing.multiparty import aggregate_noise_bits

    names = ["p0", "p1", "p2"]
    ids, roster = local_federation(names)
    cfg = FHAUCConfig.create(100, preset=THRESHOLD_PRESET)
    _, result = run_key_setup(ids, roster, KeySpec.create(THRESHOLD_PRESET, [], False))
    cagg, keys = run_collective_key_setup(ids, roster, cfg.key_spec(), result)
    ctx = cagg.context
    noise_bits = aggregate_noise_bits(ctx, [k.share for k in keys])
    n_bits = ctx.params.poly_modulus_degree.bit_length() - 1
    k = switch_smudging_bits(ctx.params, len(names))
    assert k - noise_bits - n_bits >= 39  # measured 41.4 to 42.3


def test_aggregator_refuses_shares_for_another_set(fed) -> None:  # type: ignore[no-untyped-def]
    parties, agg = _roles(fed, _data(5))
    subs = [p.submit() for p in parties]
    agg.begin()
    for s in subs:
        agg.add(s)
    request = agg.switch_request()
    shares = [p.share(request) for p in parties]
    with pytest.raises(ProtocolError, match="missing"):
        agg.finish_shares(shares[:2])
    with pytest.raises(ProtocolError):
        agg.finish_shares([shares[0], shares[0], shares[1]])
    with pytest.raises(ProtocolError):
        agg.add(subs[0])  # a submission twice


def test_threshold_mode_options_are_checked() -> None:
    data = _data(6, 10)
    with pytest.raises(ValueError, match="keys"):
        secure_auc(data, keys="shamir")
    with pytest.raises(ValueError, match="security"):
        secure_auc(data, keys="threshold", security="paranoid")
    with pytest.raises(ValueError, match="fixed decision points"):
        secure_auc(data, keys="threshold", decision_points="exact")


# ------------------------------------------------------------------ malicious aggregator
def _malicious_run(net=None):  # type: ignore[no-untyped-def]
    data = _data(11, 40)
    res = secure_auc(data, decision_points=20, security="malicious", keys="threshold",
                     preset=PRESET, allow_insecure=True, network=net)
    return data, res


def test_malicious_threshold_verifies_and_equals_plaintext() -> None:
    data, res = _malicious_run()
    y = np.concatenate([d[0] for d in data])
    s = np.concatenate([d[1] for d in data])
    assert res.verified and res.extra["keys"] == "threshold"
    assert abs(res.auc - trapezoid_auc(y, s, 20)) <= 1e-6


def test_malicious_threshold_refuses_a_substituted_submission() -> None:
    """The aggregator relays a colluder's submission with the honest ciphertexts in it:
    the honest party raises before it sends any share."""
    from fedsec.errors import TamperingDetected
    from fedsec.protocol.network import Network

    net = Network()

    def swap(envs):  # type: ignore[no-untyped-def]
        out = []
        for env in envs:
            if env.kind == "fhauc-mt/switch":
                msg = wire.decode(env.payload)
                a, b = wire.decode(msg.blobs[0]), wire.decode(msg.blobs[1])
                forged = wire.encode("fhauc-mt/submit", b.meta, [*a.blobs[:-1], b.blobs[-1]])
                env = env.with_payload(wire.encode("fhauc-mt/switch", msg.meta,
                                                   [msg.blobs[0], forged, *msg.blobs[2:]]))
            out.append(env)
        return out

    net.intercept(swap)
    with pytest.raises(TamperingDetected, match="submission"):
        _malicious_run(net)


def test_malicious_threshold_detects_a_changed_answer() -> None:
    """The answer shifted (a quarter added to every slot's numerator channel): verification
    fails as in single-key mode - the key switch changes who can decrypt, not what is
    checked."""
    from fedsec.errors import TamperingDetected
    from fedsec.protocol.network import Network

    net = Network()
    state: dict = {}

    def grab(envs):  # type: ignore[no-untyped-def]
        out = []
        for env in envs:
            if env.kind == "fhauc-mt/result":
                msg = wire.decode(env.payload)
                if "ct" not in state:
                    ctx = CKKS_FOR_TAMPER
                    ct = ctx.deserialize(msg.blobs[0])
                    state["ct"] = ctx.serialize(ctx.add_plain(
                        ct, np.full(ctx.slots, 0.25j)))
                env = env.with_payload(wire.encode("fhauc-mt/result", msg.meta,
                                                   [state["ct"]]))
            out.append(env)
        return out

    net.intercept(grab)
    with pytest.raises(TamperingDetected):
        _malicious_run(net)


CKKS_FOR_TAMPER = None  # set below (a public context of the preset, for the tamperer)


@pytest.fixture(autouse=True, scope="module")
def _tamper_context():  # type: ignore[no-untyped-def]
    from fedsec.crypto.ckks import CKKSContext

    global CKKS_FOR_TAMPER
    CKKS_FOR_TAMPER = CKKSContext.generate(PRESET, allow_insecure=True)
    yield
