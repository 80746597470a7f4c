"""Certified error bound (both modes), real-valued scores and exact mode, against the
plaintext reference and scikit-learn on pooled data; exact mode's refinement rounds
against a deviating aggregator (one party's submission as an oracle, other functions,
replays) and malformed bytes."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_digits, load_wine
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import train_test_split
from sklearn.naive_bayes import GaussianNB

from fedsec.auc.common import AGGREGATOR, local_federation
from fedsec.auc.exact import (
    CANARY_MAX_COUNT,
    EXACT_BFV,
    MIN_CANARIES,
    BinPairsAggregator,
    BinPairsParty,
    _layout,
    initial_grid,
    refinable_bins,
    refine_grid,
    refinement_keys,
)
from fedsec.auc.fhauc import secure_auc
from fedsec.auc.fhauc_malicious import secure_auc_malicious, shift_bound
from fedsec.crypto.keysetup import KeySpec, party_role, run_key_setup
from fedsec.errors import PrivacyWarning, ProtocolError, TamperingDetected
from fedsec.metrics import confusion_counts, trapezoid_auc, trapezoid_error_bound
from fedsec.protocol import wire
from fedsec.protocol.network import Network
from fedsec.testing.exact import FORGERIES, RefinementForger

TEST = {"preset": "INSECURE_TEST_N4096_DEPTH1_S39", "allow_insecure": True}
#: malicious mode's chain (its runs must agree to the tolerance even for tiny classes)
TEST_M = {"preset": "INSECURE_TEST_N4096_DEPTH1_S50", "allow_insecure": True}


def offsets_max(y, n_points):
    """The most the parties' one-sided offsets add to B/denom (fedsec.auc.masking)."""
    pos, neg = int(np.sum(y)), int(np.size(y) - np.sum(y))
    d = 2.0 * pos * neg
    return 0.1 * (pos + neg) / d + n_points * 0.01 / d


def split(y, s, parties=3):
    return [(y[i::parties], s[i::parties]) for i in range(parties)]


def pooled(parts):
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


@pytest.fixture(scope="module")
def digits8():
    """The issue's case: digits '3 vs rest' probabilities raised to the 8th power."""
    x, y = load_digits(return_X_y=True)
    y = (y == 3).astype(int)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.5, random_state=0)
    p = LogisticRegression(max_iter=3000).fit(xtr, ytr).predict_proba(xte)[:, 1]
    return split(yte, p ** 8)


@pytest.fixture(scope="module")
def cancer_logits():
    """decision_function of a linear model: logits, refused by 'probability'."""
    x, y = load_breast_cancer(return_X_y=True)
    x = (x - x.mean(0)) / x.std(0)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.5, random_state=1)
    return split(yte, LogisticRegression(C=0.05, max_iter=2000).fit(xtr, ytr)
                 .decision_function(xte))


# ------------------------------------------------------------------ the certified bound
@pytest.mark.parametrize("security", ["semi-honest", "malicious"])
def test_bound_at_default_points_equals_the_plaintext_bound(digits8, security):
    y, s = pooled(digits8)
    res = secure_auc(digits8, security=security,
                     **(TEST if security == "semi-honest" else TEST_M))
    assert res.decision_points == 100
    assert res.auc == pytest.approx(trapezoid_auc(y, s, 100), rel=1e-9)
    ref = trapezoid_error_bound(y, s, 100)
    assert ref > 0.01  # this case is far from exact at N = 100
    # malicious mode adds what verification admits (MaliciousParty.error_bound)
    shift = res.extra["shift_bound"] if security == "malicious" else 0.0
    assert shift == (0.0 if security == "semi-honest" else
                     shift_bound(res.extra["tolerance"], res.extra["runs"], 40.0))
    # the parties' one-sided offsets lift the bound (it stays certified), to 2 digits or so
    assert ref + shift - 1e-12 <= res.error_bound <= ref + shift + offsets_max(y, 100)
    assert abs(roc_auc_score(y, s) - res.auc) <= res.error_bound
    assert res.verified == (security == "malicious")
    d = res.to_dict()
    assert d["error_bound"] == res.error_bound and json.loads(res.to_json())["auc"] == res.auc


def test_bound_on_the_secure_default_preset():
    g = np.random.default_rng(7)
    parts = [(g.integers(0, 2, 60), np.round(g.random(60), 2)) for _ in range(2)]
    y, s = pooled(parts)
    res = secure_auc(parts)
    ref = trapezoid_error_bound(y, s, 100)
    assert ref - 1e-12 <= res.error_bound <= ref + offsets_max(y, 100)


# ------------------------------------------------------------------ real-valued scores
def test_logits_are_refused_as_probabilities_and_accepted_as_logits(cancer_logits):
    with pytest.raises(ValueError, match="party 0: .*'logit'"):
        secure_auc(cancer_logits, **TEST)
    y, s = pooled(cancer_logits)
    res = secure_auc(cancer_logits, scores="logit", decision_points=50, **TEST)
    p = 1.0 / (1.0 + np.exp(-s))
    assert res.auc == pytest.approx(trapezoid_auc(y, p, 50), rel=1e-9)
    lo, hi = float(s.min()) - 1.0, float(s.max()) + 1.0
    res = secure_auc(cancer_logits, scores=f"range:{lo}:{hi}", decision_points=50, **TEST)
    assert res.auc == pytest.approx(trapezoid_auc(y, (s - lo) / (hi - lo), 50), rel=1e-9)


# ------------------------------------------------------------------ exact mode
def test_exact_mode_on_digits_to_the_8th(digits8):
    y, s = pooled(digits8)
    res = secure_auc(digits8, decision_points="exact", **TEST)
    assert res.decision_mode == "exact" and res.target_reached and res.rounds >= 2
    assert res.error_bound <= 1e-6
    assert abs(res.auc - roc_auc_score(y, s)) <= res.error_bound + 1e-9
    assert res.extra["refinement_rounds"][0]["marked_bins"] > 0


def test_exact_mode_on_decision_function_logits(cancer_logits):
    y, s = pooled(cancer_logits)
    res = secure_auc(cancer_logits, decision_points="exact", scores="logit", **TEST)
    assert res.error_bound <= 1e-6 and res.target_reached
    assert abs(res.auc - roc_auc_score(y, s)) <= res.error_bound + 1e-9


def test_exact_mode_malicious_verifies_the_final_result():
    """wine 'class 0 vs rest', GaussianNB log-odds (raw logits); refinement rounds are
    verified too (canaries), so malicious exact mode raises no PrivacyWarning."""
    x, y = load_wine(return_X_y=True)
    y = (y == 1).astype(int)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.5, random_state=2)
    lp = GaussianNB().fit(xtr, ytr).predict_log_proba(xte)
    parts = split(yte, lp[:, 1] - lp[:, 0], 2)
    yy, ss = pooled(parts)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyWarning)
        res = secure_auc_malicious(parts, decision_points="exact", scores="logit",
                                   min_bound_bits=0.0, runs=2, tolerance=1e-9, **TEST_M)
    # the bound includes what verification admits: 11 tolerances at 0 bits
    assert res.extra["shift_bound"] == pytest.approx(1.1e-8)
    assert res.verified and res.error_bound <= 1e-6 and res.target_reached
    assert abs(res.auc - roc_auc_score(yy, ss)) <= res.error_bound + 1e-9


def test_exact_mode_says_when_its_cap_stops_it(digits8):
    y, s = pooled(digits8)
    with pytest.warns(UserWarning, match="above the target"):
        res = secure_auc(digits8, decision_points="exact", max_rounds=0, **TEST)
    assert not res.target_reached and res.error_bound > 1e-6
    assert res.extra["refinement_capped"]
    assert abs(res.auc - roc_auc_score(y, s)) <= res.error_bound


def test_exact_mode_arguments_are_checked(digits8):
    with pytest.raises(ValueError, match="'decision_points' parameter"):
        secure_auc(digits8, decision_points="exakt", **TEST)
    with pytest.raises(ValueError, match="'target'"):
        secure_auc(digits8, decision_points="exact", target=-1.0, **TEST)


# ------------------------------------------------------------------ the public grid
def test_refinement_reaches_single_floats_and_isolates_edges():
    pts = initial_grid(16)
    assert pts[0] == 1.0 and pts[-1] == 0.0 and np.all(np.diff(pts) < 0)
    marked = np.zeros(pts.size, dtype=bool)
    marked[3] = True
    new = refine_grid(pts, marked, 8)
    assert set(pts) <= set(new) and new.size == pts.size + 8
    assert np.nextafter(pts[3], 1.0) in set(new)
    # a bin 3 floats wide is split into single floats, which cannot be refined further
    a = 0.25
    tiny = np.array([1.0, np.nextafter(np.nextafter(np.nextafter(a, 1), 1), 1), a, 0.0])
    out = refine_grid(tiny, np.array([False, False, True, False]), 64)
    assert out.size == 6 and not refinable_bins(out)[2:5].any()


def test_no_warning_when_the_target_is_met(digits8):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        secure_auc(digits8, decision_points="exact", target=0.5, max_rounds=0, **TEST)


# ------------------------------------------------------------------ refinement security
# (the refinement round used to be an oracle on one party's scores)


@pytest.fixture(scope="module")
def fed(digits8):
    """Key set-up for three parties holding digits8, each party's refinement keys."""
    identities, roster = local_federation(["a", "b", "c"])
    spec = KeySpec.create(TEST["preset"], [], False, allow_insecure=True)
    ks_agg, keys = run_key_setup(identities, roster, spec)
    return {"data": digits8, "agg": ks_agg, "keys": keys,
            "bfv": [refinement_keys(k) for k in keys]}


def _parties(fed, points, round_index):
    return [BinPairsParty(y, s, keys=k, points=points, round_index=round_index, bfv=b)
            for (y, s), k, b in zip(fed["data"], fed["keys"], fed["bfv"], strict=True)]


def _round(fed, points, round_index=0, net=None):
    """One refinement round over ``net``: (marks per party or the exception each raised,
    the submissions, the answer each party received)."""
    net = net or Network()
    roles = _parties(fed, points, round_index)
    agg = BinPairsAggregator(points=points, names=fed["agg"].names,
                             session=fed["agg"].session, round_index=round_index)
    on_net = [party_role(k.name) for k in fed["keys"]]
    subs = net.gather(on_net, AGGREGATOR, [r.submit() for r in roles])
    delivered = net.broadcast(AGGREGATOR, on_net, agg.aggregate(subs))
    out = []
    for r, d in zip(roles, delivered, strict=True):
        try:
            out.append(r.read(d))
        except TamperingDetected as exc:
            out.append(exc)
    return out, subs, delivered


def _pooled_pairs(fed, points):
    tp, fp = (sum(c) for c in zip(*(confusion_counts(y, s, points)
                                     for y, s in fed["data"]), strict=True))
    return (np.diff(tp, prepend=0) > 0) & (np.diff(fp, prepend=0) > 0)


def _slots(fed, party, points, round_index, blobs, **kw):
    """What ``party`` decrypts from ``blobs``, slot by slot, and the round's layout."""
    bfv, keys = fed["bfv"][party], fed["keys"][party]
    binding_session = BinPairsParty(*fed["data"][party], keys=keys, points=points,
                                    round_index=round_index, bfv=bfv)._binding.session
    lay = _layout(keys.seed, binding_session, round_index, points.size, bfv.slots)
    vals = np.concatenate([bfv.decrypt(bfv.deserialize(b, **kw)) for b in blobs])
    return vals, lay


def test_refinement_parameters_and_canaries(fed):
    """t is a prime above 2^40 (any pos*neg of up to 2^20 samples); every free slot is a
    canary, at least MIN_CANARIES, a quarter of each kind."""
    from sympy import isprime

    t = fed["bfv"][0].t
    assert 2 ** 40 < t < 2 ** 41 and isprime(t) and EXACT_BFV.plain_bits == 41
    pts = initial_grid()
    for n_bins in (pts.size, 8192 - MIN_CANARIES, 8192 - MIN_CANARIES + 1):
        lay = _layout(fed["keys"][0].seed, "ab" * 16, 0, n_bins, 8192)
        slots = np.concatenate([lay.bin_slots, lay.canary_slots])
        assert sorted(slots.tolist()) == list(range(slots.size)) and slots.size % 8192 == 0
        assert lay.canary_slots.size >= MIN_CANARIES
        kinds = (lay.canary_pos > 0).astype(int) + 2 * (lay.canary_neg > 0)
        assert abs(np.bincount(kinds, minlength=4) - lay.canary_slots.size / 4).max() <= 1
        assert lay.canary_pos.max() <= CANARY_MAX_COUNT
    # fresh per round and per session
    a = _layout(fed["keys"][0].seed, "ab" * 16, 0, 1000, 8192)
    b = _layout(fed["keys"][0].seed, "ab" * 16, 1, 1000, 8192)
    c = _layout(fed["keys"][0].seed, "cd" * 16, 0, 1000, 8192)
    assert not np.array_equal(a.bin_slots, b.bin_slots)
    assert not np.array_equal(a.bin_slots, c.bin_slots)


@pytest.mark.parametrize("n_points", [1024, 9000])
def test_honest_round_marks_exactly_the_pooled_pair_bins(fed, n_points):
    pts = initial_grid(n_points)
    marks, _subs, _ = _round(fed, pts)
    want = _pooled_pairs(fed, pts)
    assert want.any() and not want.all()
    for m in marks:
        assert isinstance(m, np.ndarray) and np.array_equal(m, want)


def test_one_submission_decrypts_to_uniform_noise(fed):
    """A party's submission is uniform mod t in every slot (bins and canaries alike);
    only the sum of all parties' is the pooled counts (and the canaries' counts)."""
    from scipy.stats import kstest

    pts = initial_grid()
    _marks, subs, _ = _round(fed, pts)
    t = fed["bfv"][0].t
    total = np.zeros(8192, dtype=object)
    for i, raw in enumerate(subs):
        msg = wire.decode(raw)
        vals, lay = _slots(fed, 0, pts, 0, msg.blobs)
        pos, neg = vals[:8192], vals[8192:]
        for v in (pos, neg):
            assert kstest(v.astype(np.float64) / t, "uniform").pvalue > 1e-6
        y, s = fed["data"][int(msg.meta["party"])]
        tp, _fp = confusion_counts(y, s, pts)
        dtp = np.diff(tp, prepend=0)
        # the party's empty bins do not read 0, its non-empty ones not their counts
        assert np.count_nonzero(pos[lay.bin_slots] == 0) == 0
        assert np.count_nonzero(pos[lay.bin_slots] == dtp) <= 1
        total = (total + pos.astype(object)) % t
        if i == 0:
            first = pos
    y_all = np.concatenate([y for y, _ in fed["data"]])
    s_all = np.concatenate([s for _, s in fed["data"]])
    tp, _ = confusion_counts(y_all, s_all, pts)
    assert np.array_equal(total[lay.bin_slots].astype(np.int64), np.diff(tp, prepend=0))
    assert np.array_equal(total[lay.canary_slots].astype(np.uint64), lay.canary_pos)
    assert not np.array_equal(first, total)


@pytest.mark.parametrize("how", ["one-party", "one-party-pos"])
def test_one_party_oracle_learns_nothing_and_is_detected(fed, how):
    """The attack of issue 22: answer with a function of the victim's submission alone.
    The marks it would give (if parties did not check) are independent of the victim's
    bins -- every bin reads a uniform residue, non-zero -- so their agreement with the
    victim's non-empty bins is the base rate; and every party raises."""
    from scipy.stats import kstest

    pts = initial_grid()
    victim = 1
    forger = RefinementForger(how, victim=victim)
    net = Network()
    net.intercept(forger)
    marks, _subs, _ = _round(fed, pts, net=net)
    assert all(isinstance(m, TamperingDetected) and m.check == "canary" for m in marks)
    vals, lay = _slots(fed, 0, pts, 0, forger.forged[0], low=True, polys=3)
    at_bins = vals[lay.bin_slots]
    would_mark = at_bins != 0
    y, s = fed["data"][victim]
    tp, fp = confusion_counts(y, s, pts)
    truth = np.diff(tp, prepend=0) > 0
    if how == "one-party":
        truth &= np.diff(fp, prepend=0) > 0
    assert 0 < truth.sum() < truth.size
    # every bin is marked, whatever the victim holds: agreement is the base rate
    assert would_mark.all()
    agree = np.mean(would_mark == truth)
    assert agree == pytest.approx(np.mean(truth), abs=1e-12)
    # and the values themselves carry nothing: uniform, in the victim's bins and elsewhere
    u = at_bins.astype(np.float64) / fed["bfv"][0].t
    assert kstest(u, "uniform").pvalue > 1e-6
    assert kstest(u[~truth], "uniform").pvalue > 1e-6


@pytest.mark.parametrize("security", ["semi-honest", "malicious"])
def test_one_party_oracle_raises_in_secure_auc(digits8, security):
    net = Network()
    net.intercept(RefinementForger("one-party", victim=0))
    kw = {"min_bound_bits": 0.0, "runs": 2} if security == "malicious" else {}
    with pytest.raises(TamperingDetected) as info:
        secure_auc(digits8, decision_points="exact", security=security, network=net,
                   **kw, **(TEST if security == "semi-honest" else TEST_M))
    assert info.value.check == "canary"


@pytest.mark.parametrize("how", [f for f in FORGERIES if not f.startswith("one-party")])
def test_other_deviations_raise(fed, how):
    """pooled positives (negatives) only, every party but one, chunks swapped, the
    previous round's answer replayed: every party raises TamperingDetected."""
    pts = initial_grid(9000 if how == "swap-chunks" else 1024)
    rounds = (1,) if how == "replay" else (0,)
    net = Network()
    forger = RefinementForger(how, victim=2, rounds=rounds)
    net.intercept(forger)
    if how == "replay":
        honest, _, _ = _round(fed, pts, 0, net=net)
        assert all(isinstance(m, np.ndarray) for m in honest)
    marks, _, _ = _round(fed, pts, rounds[0], net=net)
    assert forger.forged
    assert all(isinstance(m, TamperingDetected) and m.check == "canary" for m in marks)


def test_refinement_decoders_refuse_malformed_bytes(fed):
    pts = initial_grid()
    _marks, subs, answers = _round(fed, pts)
    party = _parties(fed, pts, 0)[0]
    agg = BinPairsAggregator(points=pts, names=fed["agg"].names,
                             session=fed["agg"].session, round_index=0)
    ans = wire.decode(answers[0])
    sub = wire.decode(subs[0])
    bad_answers = [b"", answers[0][:-1], b"\0" * 64,
                   wire.encode("fhauc-exact/pairs", ans.meta, []),
                   wire.encode("fhauc-exact/pairs", ans.meta, [*ans.blobs, *ans.blobs]),
                   wire.encode("fhauc-exact/pairs", ans.meta, [sub.blobs[0]]),  # 2 polys
                   wire.encode("fhauc-exact/pairs", ans.meta, [ans.blobs[0][:-8]]),
                   wire.encode("fhauc-exact/pairs", {}, ans.blobs)]
    for b in bad_answers:
        with pytest.raises(ProtocolError):
            party.read(b)
    bad_subs = [b"", subs[0][:-1],
                wire.encode("fhauc-exact/bins", sub.meta, sub.blobs[:1]),
                wire.encode("fhauc-exact/bins", sub.meta, [ans.blobs[0], sub.blobs[1]]),
                wire.encode("fhauc-exact/bins", sub.meta, [sub.blobs[0][:-8],
                                                            sub.blobs[1]])]
    for b in bad_subs:
        with pytest.raises(ProtocolError):
            agg.aggregate([b, *subs[1:]])
    with pytest.raises(ProtocolError):
        agg.aggregate(subs[:2])  # every party is needed
    with pytest.raises(ProtocolError):
        agg.aggregate([subs[0], *subs[:2]])  # a duplicate


@pytest.mark.parametrize("n_parties", [2, 5])
def test_zero_sum_masks_cancel_for_any_federation_size(n_parties):
    """Random federations of 2 and 5 parties with ties and one-class parties: the honest
    round marks exactly the bins holding a pooled pair."""
    g = np.random.default_rng(n_parties)
    data = []
    for i in range(n_parties):
        n = int(g.integers(5, 60))
        y = np.zeros(n, dtype=int) if i == 0 else g.integers(0, 2, n)
        data.append((y, np.round(g.random(n) ** 4, 3)))
    identities, roster = local_federation([f"p{i}" for i in range(n_parties)])
    spec = KeySpec.create(TEST["preset"], [], False, allow_insecure=True)
    ks_agg, keys = run_key_setup(identities, roster, spec)
    fed5 = {"data": data, "agg": ks_agg, "keys": keys,
            "bfv": [refinement_keys(k) for k in keys]}
    pts = initial_grid(512)
    marks, _, _ = _round(fed5, pts)
    want = _pooled_pairs(fed5, pts)
    assert want.any()
    assert all(isinstance(m, np.ndarray) and np.array_equal(m, want) for m in marks)
