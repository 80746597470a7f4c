"""Semi-honest FHAUC against the plaintext trapezoid, and its protocol checks.

Agreement is required to 1e-9 relative (``REL``), the issue's bar. The error is absolute in
the masked values (CKKS noise and the aggregator's 2^-32 result noise), so relative to the
AUC it is largest for the smallest federations: ~5e-10 at denom = 2*Pos*Neg = 12, up to
~1.3e-9 at denom = 2 (benchmarks/bench_precision.py); the fixed federations below have
denom >= 18 and the random ones are rarely smaller. An AUC of exactly 0 has no relative
scale: there the bar is 1e-9 absolute (the pair masking subtracts ``c/d`` ~ 1 from
``num/denom + c/d``, so its error is absolute too).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

from fedsec.auc.common import local_federation
from fedsec.auc.fhauc import (
    FHAUCAggregator,
    FHAUCConfig,
    FHAUCParty,
    secure_auc,
)
from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.keysetup import run_key_setup
from fedsec.crypto.params import DEFAULT_PRESET
from fedsec.errors import ProtocolError, UndefinedMetricError
from fedsec.metrics import trapezoid_auc
from fedsec.protocol import wire

TEST_PRESET = "INSECURE_TEST_N4096_DEPTH1_S39"
MAX_PARTIES = 100  # every party verifies every signed hello: set-up is O(parties^2)
REL = 1e-9


def key_setup(names, cfg):
    """Signed key set-up among fresh local identities (the in-process federation)."""
    identities, roster = local_federation(names)
    return run_key_setup(identities, roster, cfg.key_spec())


def approx(ref):
    """The AUC's precision: the counts' noise (fedsec.auc.masking) gives an absolute error of
    ~COUNT_NOISE_SD * (1/Pos + 1/Neg), up to ~2e-9 for these tests' smallest federations."""
    return pytest.approx(ref, rel=REL, abs=1e-8)


@pytest.fixture(scope="module")
def fed():
    """One key set-up for up to MAX_PARTIES parties on the test preset, shared by every test."""
    names = [f"p{i:03d}" for i in range(MAX_PARTIES)]
    agg, keys = key_setup(names, FHAUCConfig.create(2, preset=TEST_PRESET,
                                                    allow_insecure=True))
    return agg, keys


def make_federation(g, n_parties, *, max_size=60, levels=None, one_class_parties=0.2):
    """Uneven sizes and class balances, ties (scores on a grid), exact 0 and 1 scores,
    some parties holding one class only; the federation as a whole has both classes."""
    data = []
    for _ in range(n_parties):
        n = int(g.integers(1, max_size + 1))
        p = float(g.beta(0.7, 0.7))
        if g.random() < one_class_parties:
            p = float(g.integers(0, 2))
        y = (g.random(n) < p).astype(np.int64)
        s = np.clip(0.6 * y + 0.7 * g.random(n) - 0.15, 0.0, 1.0)
        if levels is not None:
            s = np.round(s * levels) / levels
        s[g.random(n) < 0.05] = 0.0
        s[g.random(n) < 0.05] = 1.0
        data.append((y, s))
    y_all = np.concatenate([y for y, _ in data])
    if y_all.min() == y_all.max():
        y0, s0 = data[0]
        y0 = y0.copy()
        y0[0] = 1 - y0[0]
        data[0] = (y0, s0)
    return data


def pooled(data):
    return (np.concatenate([y for y, _ in data]), np.concatenate([s for _, s in data]))


def run_roles(fed, data, cfg, *, submit=None, min_parties=None):
    """Play a federation over the shared key set-up; ``submit`` picks who submits."""
    ks, keys = fed
    n = len(data)
    names = ks.names[:n]
    agg = FHAUCAggregator(ks.context, cfg, names=names, session=ks.session,
                          min_parties=min_parties)
    roles = [FHAUCParty(y, s, keys=keys[i], config=cfg) for i, (y, s) in enumerate(data)]
    who = range(n) if submit is None else submit
    response = agg.aggregate([roles[i].submit() for i in who])
    return roles, agg, response


@settings(max_examples=14, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(n_parties=st.integers(2, MAX_PARTIES), seed=st.integers(0, 2**32 - 1),
       n_points=st.sampled_from([2, 3, 10, 100, 101, 1000, 2048]),
       masking=st.sampled_from(["single", "pair"]),
       levels=st.sampled_from([None, 4, 10, 37]))
def test_agrees_with_plaintext_trapezoid(fed, n_parties, seed, n_points, masking, levels):
    g = np.random.default_rng(seed)
    data = make_federation(g, n_parties, levels=levels)
    cfg = FHAUCConfig.create(n_points, preset=TEST_PRESET, masking=masking,
                             allow_insecure=True)
    roles, agg, response = run_roles(fed, data, cfg)
    ref = trapezoid_auc(*pooled(data), points=n_points)
    for i in {0, n_parties // 2, n_parties - 1}:
        assert roles[i].finalize(response) == approx(ref)
    assert roles[0].included == fed[0].names[:n_parties]
    assert set(agg.timing) == {"deserialize_s", "compute_s", "total_s"}


@pytest.mark.parametrize("n_parties, masking, n_points", [
    (2, "single", 2), (2, "pair", 2048), (100, "pair", 2), (100, "single", 2048),
])
def test_extremes_of_parties_and_points(fed, n_parties, masking, n_points):
    g = np.random.default_rng(n_parties * 7 + n_points)
    data = make_federation(g, n_parties, levels=20)
    cfg = FHAUCConfig.create(n_points, preset=TEST_PRESET, masking=masking,
                             allow_insecure=True)
    roles, _, response = run_roles(fed, data, cfg)
    assert roles[-1].finalize(response) == approx(trapezoid_auc(*pooled(data), n_points))


def test_custom_points_with_every_score_equal_sklearn(fed):
    g = np.random.default_rng(11)
    data = make_federation(g, 12, levels=50)
    y, s = pooled(data)
    points = np.unique(np.append(s, 1.0))
    cfg = FHAUCConfig.create(points, preset=TEST_PRESET, allow_insecure=True)
    roles, _, response = run_roles(fed, data, cfg)
    assert roles[0].finalize(response) == approx(roc_auc_score(y, s))


@pytest.mark.parametrize("case", ["perfect", "inverted", "all-tied", "edges"])
def test_degenerate_rankings(fed, case):
    y = np.array([0, 0, 0, 1, 1, 1])
    s = {"perfect": [0.0, 0.1, 0.2, 0.8, 0.9, 1.0],
         "inverted": [1.0, 0.9, 0.8, 0.2, 0.1, 0.0],
         "all-tied": [0.5] * 6,
         "edges": [0.0, 1.0, 0.0, 1.0, 0.0, 1.0]}[case]
    s = np.asarray(s)
    data = [(y[:2], s[:2]), (y[2:4], s[2:4]), (y[4:], s[4:])]
    for masking in ("single", "pair"):
        cfg = FHAUCConfig.create(100, preset=TEST_PRESET, masking=masking, allow_insecure=True)
        roles, _, response = run_roles(fed, data, cfg)
        assert roles[1].finalize(response) == approx(trapezoid_auc(y, s, 100))


def test_parties_holding_one_class_and_tiny_parties(fed):
    data = [(np.array([1, 1, 1]), np.array([0.9, 0.4, 1.0])),
            (np.array([0]), np.array([0.0])),
            (np.array([0, 0]), np.array([0.3, 0.95])),
            (np.array([1]), np.array([0.3]))]
    cfg = FHAUCConfig.create(21, preset=TEST_PRESET, allow_insecure=True)
    roles, _, response = run_roles(fed, data, cfg)
    assert roles[3].finalize(response) == approx(trapezoid_auc(*pooled(data), 21))


def test_large_federation(fed):
    """100 parties, ~50k samples, every point the preset allows."""
    g = np.random.default_rng(5)
    data = make_federation(g, 100, max_size=1000)
    cfg = FHAUCConfig.create(2048, preset=TEST_PRESET, masking="pair", allow_insecure=True)
    roles, _, response = run_roles(fed, data, cfg)
    assert roles[0].finalize(response) == approx(trapezoid_auc(*pooled(data), 2048))


def test_at_max_total_samples_with_heavy_ties():
    """2^20 samples (the default capacity) piled onto two scores: the largest T*F terms
    (~2^40) the preset is sized for. One more sample is refused."""
    n = 2**19
    g = np.random.default_rng(8)
    data = [(np.ones(n, dtype=np.int64), np.full(n, 0.5)),
            (np.zeros(n, dtype=np.int64), np.where(g.random(n) < 0.5, 0.5, 0.0))]
    res = secure_auc(data, decision_points=2048, masking="pair", preset=TEST_PRESET,
                     allow_insecure=True)
    assert res.auc == approx(trapezoid_auc(*pooled(data), 2048))
    data[1] = (np.zeros(n + 1, dtype=np.int64), np.zeros(n + 1))
    with pytest.raises(ValueError, match="max_total_samples"):
        secure_auc(data, preset=TEST_PRESET, allow_insecure=True)


# ---------------------------------------------------------------- one-call function
@pytest.mark.parametrize("masking", ["single", "pair"])
def test_secure_auc_one_call_insecure_preset(masking):
    g = np.random.default_rng(1)
    data = make_federation(g, 6)
    res = secure_auc(data, decision_points=64, masking=masking, preset=TEST_PRESET,
                     allow_insecure=True, names=[f"h{i}" for i in range(6)])
    assert res.auc == approx(trapezoid_auc(*pooled(data), 64))
    assert (res.parties, res.decision_points, res.security, res.masking) == \
        (6, 64, "semi-honest", masking)
    assert res.included == [f"h{i}" for i in range(6)]
    assert res.bytes_up_per_party > 0 and res.bytes_down_per_party > 0
    assert res.setup_bytes_to_aggregator > 0 and res.aggregator_seconds > 0
    assert res.as_dict()["auc"] == res.auc


@pytest.mark.parametrize("n_parties, n_points, masking", [
    (2, 100, "single"),
    (25, 4096, "pair"),
])
def test_secure_auc_default_preset(n_parties, n_points, masking):
    g = np.random.default_rng(n_parties)
    data = make_federation(g, n_parties, levels=30)
    res = secure_auc(data, decision_points=n_points, masking=masking)
    assert res.preset == DEFAULT_PRESET == "CKKS_128_N8192_DEPTH1_S39"
    assert res.auc == approx(trapezoid_auc(*pooled(data), n_points))
    # one seeded ciphertext of 8192 coefficients over 170 bits of data primes per 1024
    # points (4 slots per point): ~215 kB each
    assert res.bytes_up_per_party < 240_000 * -(-n_points // 1024)


def test_default_preset_random_federations():
    """A few random federations on the secure default preset (one key set-up)."""
    cfg0 = FHAUCConfig.create(2)
    names = [f"q{i}" for i in range(40)]
    ks, keys = key_setup(names, cfg0)
    g = np.random.default_rng(99)
    for n_parties, n_points, masking in [(3, 7, "single"), (40, 500, "pair"),
                                         (17, 4096, "single")]:
        data = make_federation(g, n_parties, max_size=300, levels=100)
        cfg = FHAUCConfig.create(n_points, masking=masking)
        roles, _, resp = run_roles((ks, keys), data, cfg)
        assert roles[-1].finalize(resp) == approx(trapezoid_auc(*pooled(data), n_points))


def test_too_many_points_for_the_slots():
    assert FHAUCConfig.create(512 * 64, preset=TEST_PRESET, allow_insecure=True
                              ).n_chunks == 64
    with pytest.raises(ValueError, match="2048 slots"):
        FHAUCConfig.create(512 * 64 + 1, preset=TEST_PRESET, allow_insecure=True)
    with pytest.raises(ValueError, match="masking"):
        FHAUCConfig.create(10, preset=TEST_PRESET, masking="double", allow_insecure=True)
    with pytest.raises(ValueError):
        FHAUCConfig.create(1, preset=TEST_PRESET, allow_insecure=True)


def test_presets_without_a_level_for_the_rescaled_mask_are_refused():
    from fedsec.auc.fhauc_malicious import MaliciousConfig

    for preset, why in (("CKKS_128_N8192_DEPTH1", "cannot carry FHAUC's masked result"),
                        ("CKKS_128_N8192_DEPTH2", "masks at a 40-bit prime"),
                        ("CKKS_128_N8192_DEPTH2_S49", "masks at a 37-bit prime")):
        with pytest.raises(ValueError, match=why):
            FHAUCConfig.create(10, preset=preset)
        with pytest.raises(ValueError, match=why):
            MaliciousConfig.create(10, preset=preset, min_bound_bits=0.0)
    # the papers' ring has levels to spare
    FHAUCConfig.create(10, preset="CKKS_128_N16384_DEPTH4")


# ---------------------------------------------------------------- undefined AUC
@pytest.mark.parametrize("label", [0, 1])
def test_single_class_federation_is_undefined(fed, label):
    data = [(np.full(5, label), np.linspace(0, 1, 5)), (np.full(3, label), np.zeros(3))]
    with pytest.raises(UndefinedMetricError):
        secure_auc(data, preset=TEST_PRESET, allow_insecure=True)
    # the roles find out by themselves: the decrypted denominator is zero
    cfg = FHAUCConfig.create(50, preset=TEST_PRESET, allow_insecure=True)
    roles, _, response = run_roles(fed, data, cfg)
    with pytest.raises(UndefinedMetricError, match="one class"):
        roles[0].finalize(response)


# ---------------------------------------------------------------- protocol checks
@pytest.fixture(scope="module")
def three(fed):
    g = np.random.default_rng(3)
    data = make_federation(g, 3)
    cfg = FHAUCConfig.create(100, preset=TEST_PRESET, allow_insecure=True)
    ks, keys = fed
    roles = [FHAUCParty(y, s, keys=keys[i], config=cfg) for i, (y, s) in enumerate(data)]
    return data, cfg, roles, [r.submit() for r in roles]


def aggregator(fed, cfg, n=3, **kw):
    ks, _ = fed
    return FHAUCAggregator(ks.context, cfg, names=ks.names[:n], session=ks.session, **kw)


def test_duplicate_submission_rejected(fed, three):
    _, cfg, _, subs = three
    with pytest.raises(ProtocolError, match="duplicate"):
        aggregator(fed, cfg).aggregate([subs[0], subs[1], subs[0]])


def test_party_index_out_of_range_rejected(fed, three):
    _, cfg, _, subs = three
    with pytest.raises(ProtocolError, match="party index"):
        aggregator(fed, cfg, n=2, min_parties=2).aggregate(subs)
    msg = wire.decode(subs[0])
    for bad in (-1, "0", None, 1.0):
        forged = wire.encode(msg.kind, dict(msg.meta, party=bad), msg.blobs)
        with pytest.raises(ProtocolError):
            aggregator(fed, cfg, min_parties=1).aggregate([forged])


def test_submission_for_another_config_rejected(fed, three):
    _, cfg, roles, subs = three
    for other in (FHAUCConfig.create(99, preset=TEST_PRESET, allow_insecure=True),
                  FHAUCConfig.create(100, preset=TEST_PRESET, masking="pair",
                                     allow_insecure=True)):
        with pytest.raises(ProtocolError, match="another configuration or session"):
            aggregator(fed, other).aggregate(subs)


def test_submission_from_another_session_rejected(fed, three):
    _, cfg, _, subs = three
    ks2, keys2 = key_setup(["x", "y"], cfg)
    g = np.random.default_rng(0)
    foreign = FHAUCParty(g.integers(0, 2, 10), g.random(10), keys=keys2[0], config=cfg)
    with pytest.raises(ProtocolError, match="another configuration or session"):
        aggregator(fed, cfg).aggregate([subs[0], subs[1], foreign.submit()])
    # and a result of another session is refused by a party
    agg2 = FHAUCAggregator(ks2.context, cfg, names=ks2.names, session=ks2.session,
                           min_parties=1)
    other_result = agg2.aggregate([foreign.submit()])
    with pytest.raises(ProtocolError, match="another configuration or session"):
        three[2][0].finalize(other_result)


def test_result_for_another_config_rejected(fed, three):
    _, cfg, roles, subs = three
    response = aggregator(fed, cfg).aggregate(subs)
    other = FHAUCConfig.create(100, preset=TEST_PRESET, masking="pair", allow_insecure=True)
    party = FHAUCParty(*three[0][0], keys=fed[1][0], config=other)
    with pytest.raises(ProtocolError):
        party.finalize(response)
    # forged masking metadata
    msg = wire.decode(response)
    forged = wire.encode(msg.kind, dict(msg.meta, ratio=0.5), msg.blobs)
    with pytest.raises(ProtocolError, match="masking"):
        roles[0].finalize(forged)
    with pytest.raises(ProtocolError):
        roles[0].finalize(wire.encode(msg.kind, msg.meta, []))
    with pytest.raises(ProtocolError):
        roles[0].finalize(subs[0])  # wrong kind


@pytest.mark.parametrize("field, value", [("ratio", "x"), ("ratio", None),
                                          ("parties", [999]), ("parties", ["a"])])
def test_malformed_result_metadata_raises_protocol_error(fed, three, field, value):
    _, cfg, roles, subs = three
    msg = wire.decode(aggregator(fed, cfg).aggregate(subs))
    forged = wire.encode(msg.kind, dict(msg.meta, **{field: value}), msg.blobs)
    with pytest.raises(ProtocolError):
        roles[0].finalize(forged)


def test_malformed_submissions_rejected(fed, three):
    _, cfg, _, subs = three
    ks, keys = fed
    msg = wire.decode(subs[0])
    ctx = keys[0].context
    bad_blobs = [
        [],                                                   # no ciphertext
        [msg.blobs[0], msg.blobs[0]],                         # two
        [msg.blobs[0][:1000]],                                # truncated
        [ctx.encrypt_bytes(np.zeros(10), scale=2.0 ** 40)],  # other scale
        # not top level
        [ctx.serialize(ctx.multiply_plain(ctx.encrypt([1.0]), [1.0], rescale=True))],
    ]
    for blobs in bad_blobs:
        forged = wire.encode(msg.kind, msg.meta, blobs)
        with pytest.raises(ProtocolError):
            aggregator(fed, cfg, min_parties=1).aggregate([forged])
    for junk in (b"", b"FSEC", subs[0][:-1], subs[0] + b"\x00"):
        with pytest.raises(ProtocolError):
            aggregator(fed, cfg, min_parties=1).aggregate([junk])


def test_aggregator_refuses_secret_or_unsuitable_contexts(fed, three):
    _, cfg, _, _ = three
    ks, keys = fed
    with pytest.raises(ValueError, match="secret key"):
        FHAUCAggregator(keys[0].context, cfg, names=ks.names, session=ks.session)
    few = CKKSContext.from_public_bytes(
        CKKSContext.generate(TEST_PRESET, rotations=[1], allow_insecure=True).public_bytes(),
        allow_insecure=True)
    with pytest.raises(ValueError, match="Galois"):
        FHAUCAggregator(few, cfg, names=ks.names, session=ks.session)


def test_party_needs_the_secret_key(fed, three):
    data, cfg, _, _ = three
    ks, keys = fed
    from fedsec.crypto.keysetup import PartyKeys

    public_only = PartyKeys(ks.session, ks.names, 0, ks.context, keys[0].seed)
    with pytest.raises(ValueError, match="secret key"):
        FHAUCParty(*data[0], keys=public_only, config=cfg)


# ---------------------------------------------------------------- masks
def _masked(keys, response):
    ctx = keys.context
    msg = wire.decode(response)
    z = ctx.decrypt(ctx.deserialize(msg.blobs[0]))[0]
    return float(z.real), float(z.imag), float(msg.meta["ratio"])


@pytest.mark.parametrize("masking", ["single", "pair"])
def test_masks_are_fresh_real_and_hide_the_plain_values(fed, three, masking):
    """Masks are in [1/2, 1), fresh per aggregation, not on the old 14-bit dyadic grid, and
    the same on the two channels a party divides (they cancel to CKKS precision).
    (What the masks hide, attacked from what a party decrypts: test_mask_leakage.py.)"""
    data, _, _, _ = three
    cfg = FHAUCConfig.create(100, preset=TEST_PRESET, masking=masking, allow_insecure=True)
    ks, keys = fed
    roles = [FHAUCParty(y, s, keys=keys[i], config=cfg) for i, (y, s) in enumerate(data)]
    subs = [r.submit() for r in roles]
    y, s = pooled(data)
    ref = trapezoid_auc(y, s, 100)
    denom = 2.0 * y.sum() * (1 - y).sum()
    seen = []
    for _ in range(5):
        response = aggregator(fed, cfg).aggregate(subs)
        mden, mnum, ratio = _masked(keys[0], response)
        d = mden / denom
        assert 0.5 - 1e-9 <= d < 1.0 + 1e-9
        assert abs(d * 2**14 - round(d * 2**14)) > 1e-6  # not a 14-bit dyadic mask
        d_num = (mnum - ratio * mden) / (ref * denom)
        # one mask; the channels differ by the counts' noise (relative ~2^-28/count)
        assert abs(d_num / d - 1.0) < 1e-8
        if masking == "single":
            assert ratio == 0.0
        else:
            assert 0.5 < ratio < 2.0  # c/d with c, d in [1/2, 1)
        assert roles[1].finalize(response) == approx(ref)
        seen.append((mden, mnum, ratio))
    # fresh masks per aggregation
    assert len({round(m[0], 6) for m in seen}) == 5


def test_submissions_are_fresh_encryptions(three):
    """The same party encrypting twice sends different bytes (new randomness each time)."""
    _, _, roles, subs = three
    assert roles[0].submit() != subs[0]


# ---------------------------------------------------------------- dropouts
def test_dropped_party_is_tolerated_when_min_parties_allows(fed):
    g = np.random.default_rng(21)
    data = make_federation(g, 6)
    cfg = FHAUCConfig.create(100, preset=TEST_PRESET, allow_insecure=True)
    ks = fed[0]
    survivors = [0, 1, 3, 5]
    roles, agg, response = run_roles(fed, data, cfg, submit=survivors, min_parties=4)
    ref = trapezoid_auc(*pooled([data[i] for i in survivors]), 100)
    for i in survivors:
        assert roles[i].finalize(response) == approx(ref)
        assert roles[i].included == tuple(ks.names[j] for j in survivors)
    # submission order does not matter
    _, _, response2 = run_roles(fed, data, cfg, submit=survivors[::-1], min_parties=4)
    assert roles[0].finalize(response2) == approx(ref)


def test_dropped_party_rejected_by_default(fed):
    g = np.random.default_rng(22)
    data = make_federation(g, 4)
    cfg = FHAUCConfig.create(100, preset=TEST_PRESET, allow_insecure=True)
    with pytest.raises(ProtocolError, match="at least 4"):
        run_roles(fed, data, cfg, submit=[0, 1, 2])
    with pytest.raises(ProtocolError, match="at least 3"):
        run_roles(fed, data, cfg, submit=[0, 1], min_parties=3)


# ---------------------------------------------------------------- inputs
def test_party_inputs_are_validated(fed):
    cfg = FHAUCConfig.create(10, preset=TEST_PRESET, allow_insecure=True)
    k = fed[1][0]
    with pytest.raises(ValueError, match="0 and 1"):
        FHAUCParty([0, 2], [0.1, 0.2], keys=k, config=cfg)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        FHAUCParty([0, 1], [0.1, 1.5], keys=k, config=cfg)
    with pytest.raises(ValueError, match="finite"):
        FHAUCParty([0, 1], [0.1, np.nan], keys=k, config=cfg)
    small = FHAUCConfig.create(10, preset=TEST_PRESET, max_total_samples=3,
                               allow_insecure=True)
    with pytest.raises(ValueError, match="max_total_samples"):
        FHAUCParty([0, 1, 0, 1], [0.1] * 4, keys=k, config=small)
    with pytest.raises(ValueError, match="security"):
        secure_auc([([0, 1], [0.1, 0.9])], security="paranoid", preset=TEST_PRESET,
                   allow_insecure=True)
