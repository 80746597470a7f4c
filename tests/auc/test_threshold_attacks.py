"""Attacks on threshold-key ("no single key holder") secure AUC and its collective key
set-up: crafted messages to every handler of the honest party and of the aggregator.

An attack that succeeds today is an ``xfail(strict=True)`` test that asserts the defence
(so fixing the leak turns it into an XPASS that must be un-marked)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from fedsec.auc.common import local_federation
from fedsec.auc.fhauc import FHAUCConfig
from fedsec.auc.fhauc_threshold import ThresholdFHAUCAggregator, ThresholdFHAUCParty
from fedsec.auc.policy import PartyPolicy
from fedsec.crypto import multiparty as mpc
from fedsec.crypto.collective import (
    CollectiveKeyAggregator,
    CollectiveKeyParty,
    run_collective_key_setup,
)
from fedsec.crypto.keysetup import KeySpec, run_key_setup
from fedsec.crypto.params import get_preset
from fedsec.errors import ProtocolError, TamperingDetected
from fedsec.protocol import wire

SETUP_PRESET = "INSECURE_TEST_N4096_DEPTH1_S39"
SETUP_SPEC = KeySpec.create(SETUP_PRESET, [1, 2], True, allow_insecure=True)
SETUP_PARAMS = get_preset(SETUP_PRESET, allow_insecure=True)
AUC_PRESET = "INSECURE_TEST_N4096_DEPTH1_S60"
NAMES = ["honest", "colluder-1", "colluder-2"]
POINTS = 40


# ----------------------------------------------------------------------------- helpers
def _rewrap(raw: bytes, blobs: list[bytes] | None = None,
            meta: dict[str, Any] | None = None) -> bytes:
    """The same message (kind, binding) with other blobs or meta."""
    msg = wire.decode(raw)
    return wire.encode(msg.kind, dict(msg.meta) if meta is None else meta,
                       list(msg.blobs) if blobs is None else blobs)


def _polys(mp: mpc.MultipartyParams, inner: bytes) -> tuple[wire.Message, list[np.ndarray]]:
    msg = wire.decode(inner)
    rows = len(msg.blobs[0]) // (8 * mp.n)
    return msg, [np.frombuffer(b, dtype="<u8").reshape(rows, mp.n).astype(np.uint64)
                 for b in msg.blobs]


def _pack(msg: wire.Message, polys: list[np.ndarray]) -> bytes:
    return wire.encode(msg.kind, dict(msg.meta),
                       [np.ascontiguousarray(p, dtype="<u8").tobytes() for p in polys])


def _signed(mp: mpc.MultipartyParams, ntt_row0: np.ndarray) -> np.ndarray:
    """Centred coefficients (first prime) of an NTT-form polynomial."""
    c = mp.to_coeffs(np.asarray(ntt_row0, dtype=np.uint64).reshape(1, mp.n))[0].astype(np.int64)
    q0 = np.int64(mp.primes[0])
    return np.where(c > q0 // 2, c - q0, c)


def _true_share(mp: mpc.MultipartyParams, share: mpc.KeyShare) -> np.ndarray:
    return _signed(mp, share._s[0])


def _mutations(raw: bytes) -> list[tuple[str, bytes]]:
    """Malformed versions of a message, labelled: truncations, flipped bytes, junk, an
    extra or a missing blob, each blob truncated or garbage, one level down for nested
    messages (shares, sums, submissions), and odd meta values."""
    out = [("empty", b""), ("nul", b"\0"), ("half", raw[:len(raw) // 2]),
           ("minus-1", raw[:-1]), ("plus-1", raw + b"\0"), ("ff64", b"\xff" * 64)]
    for pos in (0, 4, 8, 16, len(raw) // 3, len(raw) - 1):
        if pos < len(raw):
            out.append((f"flip@{pos}", raw[:pos] + bytes([raw[pos] ^ 0xFF]) + raw[pos + 1:]))
    msg = wire.decode(raw)
    blobs = list(msg.blobs)
    out.append(("extra-blob", _rewrap(raw, blobs + [b"\0" * 8])))
    if blobs:
        out.append(("missing-blob", _rewrap(raw, blobs[:-1])))
    for i, b in enumerate(blobs):
        for name, junk in (("cut8", b[:-8]), ("add8", b + b"\0" * 8), ("ff", b"\xff" * len(b)),
                           ("empty", b""), ("ones17", b"\1" * 17)):
            out.append((f"blob{i}:{name}", _rewrap(raw, blobs[:i] + [junk] + blobs[i + 1:])))
        try:
            inner = wire.decode(b)
        except ProtocolError:
            continue
        ib = list(inner.blobs)
        for k, x in enumerate(ib):
            for name, junk in (("cut8", x[:-8]), ("ff", b"\xff" * len(x)),
                               ("half", x[:len(x) // 2]), ("empty", b"")):
                sub = wire.encode(inner.kind, dict(inner.meta), ib[:k] + [junk] + ib[k + 1:])
                out.append((f"blob{i}/{k}:{name}",
                            _rewrap(raw, blobs[:i] + [sub] + blobs[i + 1:])))
        for name, m in (("no-meta", {}), ("bad-meta", {"preset": [1]})):
            out.append((f"blob{i}:{name}", _rewrap(raw, blobs[:i] + [wire.encode(inner.kind, m, ib)]
                                                   + blobs[i + 1:])))
    meta = dict(msg.meta)
    for key in list(meta):
        for val in (None, -1, "x", [], {}, 10 ** 30, True):
            m2 = dict(meta)
            m2[key] = val
            out.append((f"meta[{key}]={val!r}", _rewrap(raw, meta=m2)))
    return out


def _fuzz(handler: Callable[[bytes], Any], raw: bytes) -> list[str]:
    """Every mutation of ``raw`` must raise ProtocolError or TamperingDetected (which is
    *not* a ProtocolError subclass in fedsec.errors); the failures, described."""
    bad = []
    for label, m in _mutations(raw):
        if m == raw:
            continue
        try:
            handler(m)
        except (ProtocolError, TamperingDetected):
            continue
        except Exception as exc:  # noqa: BLE001 - what the test looks for
            bad.append(f"{label}: {type(exc).__name__}: {str(exc)[:80]}")
            continue
        bad.append(f"{label}: accepted")
    return bad


# ----------------------------------------------------------------------------- set-up
@pytest.fixture(scope="module")
def first():  # type: ignore[no-untyped-def]
    ids, roster = local_federation(NAMES)
    _, result = run_key_setup(ids, roster, KeySpec.create(SETUP_PRESET, [], False,
                                                          allow_insecure=True))
    return ids, roster, result


class _Setup:
    """The collective set-up's rounds by hand, stopping wherever a test wants."""

    def __init__(self, first) -> None:  # type: ignore[no-untyped-def]
        ids, roster, result = first
        self.parties = [CollectiveKeyParty(i, roster, SETUP_SPEC, k)
                        for i, k in zip(ids, result, strict=True)]
        self.agg = CollectiveKeyAggregator(roster, SETUP_SPEC, names=result[0].names,
                                           result_session=result[0].session)
        self.mp = mpc._mp(SETUP_PARAMS)
        self.commits = [p.commit() for p in self.parties]
        self.relayed = self.agg.commits(self.commits)
        self.reveals = [p.reveal(self.relayed) for p in self.parties]
        self.relin_msg = self.agg.reveals(self.reveals)

    def genuine_sum(self) -> list[np.ndarray]:
        """The round-1 sums of the relayed, committed shares (what every party adds up)."""
        relayed = wire.decode(self.relin_msg).blobs
        total = mpc.aggregate_relin_round1(SETUP_PARAMS, relayed[1::2])
        return _polys(self.mp, total)[1]

    def crafted_relin(self, c: int) -> bytes:
        """The relayed round-1 shares rewritten so that their sum has every ``h0_j`` equal
        to the constant ``c`` (the first share takes the difference; the ``h1`` halves, which
        the party later uses to rebuild the relinearisation key, stay genuine). The relay
        used to be the sum itself; now the party checks each share's commitment."""
        blobs = list(wire.decode(self.relin_msg).blobs)
        inner, h = _polys(self.mp, blobs[1])
        total = self.genuine_sum()
        for j in range(self.mp.decomp):
            target = np.full_like(total[j], c)
            h[j] = self.mp.add(h[j], self.mp.sub(target, total[j]))
        blobs[1] = _pack(inner, h)
        return _rewrap(self.relin_msg, blobs)


# ----------------------------------------------------------------------------- confirmed leak
LEAK_C = 1 << 20


def test_crafted_relin_sums_reveal_the_honest_key_share(first) -> None:  # type: ignore[no-untyped-def]
    """Was a leak (the party multiplied its key share by sums the aggregator chose); now
    the party adds the committed round-1 shares itself and refuses a changed one."""
    st = _Setup(first)
    honest = st.parties[0]
    mp = st.mp
    truth = _true_share(mp, honest._share)
    crafted = st.crafted_relin(LEAK_C)
    try:
        out = honest.relin(crafted)
    except TamperingDetected:
        return  # the defence: a relayed share that is not its sender's is refused
    share2 = wire.decode(out).blobs[0]
    _, polys = _polys(mp, share2)
    recovered = np.rint(_signed(mp, polys[0][0]) / LEAK_C).astype(np.int64)
    assert not np.array_equal(recovered, truth), \
        "the aggregator recovered the honest party's collective key share s_i"


def test_control_genuine_relin_share_does_not_reveal_the_key_share(first) -> None:  # type: ignore[no-untyped-def]
    """Control: the same recovery on the genuine round-2 share gives garbage."""
    st = _Setup(first)
    honest = st.parties[0]
    mp = st.mp
    truth = _true_share(mp, honest._share)
    out = honest.relin(st.relin_msg)
    _, polys = _polys(mp, wire.decode(out).blobs[0])
    recovered = np.rint(_signed(mp, polys[0][0]) / LEAK_C).astype(np.int64)
    assert np.mean(recovered == truth) < 0.6


def test_aggregator_alone_obtains_the_collective_secret_and_setup_completes(first) -> None:  # type: ignore[no-untyped-def]
    st = _Setup(first)
    mp = st.mp
    genuine_h = st.genuine_sum()
    crafted = st.crafted_relin(LEAK_C)
    try:
        relin2 = [p.relin(crafted) for p in st.parties]
    except TamperingDetected:
        return  # refused: the aggregator learns no key share
    recovered: list[np.ndarray] = []
    forged = []
    for raw in relin2:
        inner, polys = _polys(mp, wire.decode(raw).blobs[0])
        s_i = np.rint(_signed(mp, polys[0][0]) / LEAK_C).astype(np.int64)
        recovered.append(s_i)
        s_ntt = mp.from_signed(s_i)
        for j in range(mp.decomp):  # what the party would have sent on the genuine sums
            polys[j] = mp.add(mp.mul(genuine_h[j], s_ntt), mp.from_signed(mpc._cbd(mp.n)))
        forged.append(_rewrap(raw, [_pack(inner, polys)]))
    keys_msg = st.agg.relin_keys(forged)
    try:
        checks = [p.check(keys_msg) for p in st.parties]
        done = st.agg.confirm(checks)
        keys = [p.finish(done) for p in st.parties]
    except ProtocolError:
        return  # the set-up noticed
    # the set-up completed; the aggregator decrypts what the honest party encrypts
    ctx = keys[0].context
    x = np.linspace(-1, 1, ctx.slots)
    ct = ctx.encrypt(x)
    s_all = mpc.KeyShare(SETUP_PARAMS, _coeffs=np.sum(recovered, axis=0))
    got = mpc.combine_decryption(ctx, ct, [s_all.decryption_share(ct, smudging=0)]).real
    assert np.max(np.abs(got - x)) > 1.0, "the aggregator alone decrypts under the " \
        "collective key"


def _kat_contexts(st: _Setup, inner: wire.Message, polys: list[np.ndarray]) -> tuple[Any, Any, Any]:
    """The collective contexts a party builds from these data halves: full, without the
    relinearisation key, and with the public key only (to read the known-answer
    ciphertext's intermediate values, all public)."""
    from fedsec.crypto.ckks import CKKSContext
    from fedsec.crypto.ckks_keys import CKKSKeys
    from fedsec.crypto.collective import _crs_seed

    p = st.parties[0]
    pk, gk, rk = mpc.keys_from_compact(SETUP_PARAMS, _crs_seed(p.session), p._relin_sum,
                                       p._elts, _pack(inner, polys))
    rot, conj = SETUP_SPEC.rotations, SETUP_SPEC.conjugate
    return (CKKSContext(CKKSKeys(SETUP_PARAMS, public_key=pk, relin_keys=rk, galois_keys=gk,
                                 rotations=rot, conjugate=conj)),
            CKKSContext(CKKSKeys(SETUP_PARAMS, public_key=pk, galois_keys=gk, rotations=rot,
                                 conjugate=conj)),
            CKKSContext(CKKSKeys(SETUP_PARAMS, public_key=pk, rotations=(), conjugate=False)))


def _kat_ct(ctx: Any, seed: bytes) -> np.ndarray:
    return mpc._ct_data(mpc._mp(SETUP_PARAMS), mpc.known_answer_ciphertext(ctx, seed)[0])


def _craft_conjugation_key(st: _Setup, keys_msg: bytes) -> tuple[bytes, int, int]:
    """mpkeys/keys with the conjugation key's first data half shifted so that the honest
    party's known-answer ciphertext has ``c1 = C`` (a constant): returns the message,
    ``C`` and the ciphertext's prime count. Only public values are used."""
    import math

    from fedsec.crypto.collective import _h

    mp, p = st.mp, st.parties[0]
    n, qs, special = mp.n, mp.primes, mp.primes[-1]
    inner, polys = _polys(mp, wire.decode(keys_msg).blobs[0])
    gi = 1 + p._elts.index(2 * n - 1) * mp.decomp  # conjugation key, decomposition 0
    seed = _h(b"fedsec/mpkeys/kat", p.session.encode(),
              *[p._commits[i] for i in range(len(st.parties))])
    full0, norel0, plain0 = _kat_contexts(st, inner, polys)
    fresh, acc0, f0 = _kat_ct(plain0, seed), _kat_ct(norel0, seed), _kat_ct(full0, seed)
    rows, level = fresh.shape[1], f0.shape[1]

    def shifted(w: np.ndarray) -> list[np.ndarray]:
        d = np.zeros((len(qs), n), dtype=np.uint64)  # P * w in the data primes: mod-down
        for i in range(rows):                        # by P leaves w * (decomposed c1)
            d[i] = (w[i].astype(object) * (special % qs[i]) % qs[i]).astype(np.uint64)
        out = [x.copy() for x in polys]
        out[gi] = mp.add(out[gi], d)
        return out

    _, norel1, _ = _kat_contexts(st, inner, shifted(np.ones((rows, n), dtype=object)))
    d0 = mp.sub(_kat_ct(norel1, seed)[0], acc0[0])  # the decomposed c1(X^g), per prime
    big_q = math.prod(qs[:level])
    c = big_q // 8
    dropped = qs[level]  # the prime the product's rescale drops
    w = np.empty((rows, n), dtype=object)
    for i in range(rows):
        q = qs[i]
        for x in range(n):
            dd1 = dropped * ((c - int(f0[1][i][x])) % q) % q if i < level else 0
            t = dd1 * pow(int(fresh[1][i][x]), -1, q) % q      # d1 = A0 c1 + A1 c0
            w[i][x] = t * pow(int(d0[i][x]), -1, q) % q
    return _rewrap(keys_msg, [_pack(inner, shifted(w))]), c, level


def _recover_from_kat(mp: mpc.MultipartyParams, check_msg: bytes, c: int, level: int
                      ) -> np.ndarray:
    """round((c1 s_i + E) / C), centred over the known-answer level's primes."""
    import math

    raw = wire.decode(check_msg).blobs[0]
    level = int(wire.decode(raw).meta["rows"])   # the ciphertext the party really decrypted
    share = mpc._unpack(mp, raw, "mpckks/dec-share", level, 1)[0]
    coeffs = mp.to_coeffs(share)
    big_q = math.prod(mp.primes[:level])
    acc = [0] * mp.n
    for r in range(level):  # CRT, then centre
        q = mp.primes[r]
        qi = big_q // q
        f = qi * pow(qi, -1, q)
        acc = [(a + int(v) * f) % big_q for a, v in zip(acc, coeffs[r].tolist(), strict=True)]
    return np.asarray([round((a - big_q if a > big_q // 2 else a) / c) for a in acc])


def test_crafted_key_data_half_makes_the_known_answer_share_reveal_the_key_share(first) -> None:  # type: ignore[no-untyped-def]
    """Was a leak (the known answer's product let a data half steer its c1 to a constant);
    the known answer is now linear, so its c1 is the same whatever data halves are sent."""
    st = _Setup(first)
    mp = st.mp
    relin2 = [q.relin(st.relin_msg) for q in st.parties]  # genuine relinearisation round
    keys_msg = st.agg.relin_keys(relin2)
    crafted, c, level = _craft_conjugation_key(st, keys_msg)
    honest = st.parties[0]
    try:
        out = honest.check(crafted)
    except (ProtocolError, TamperingDetected):
        return
    rec = _recover_from_kat(mp, out, c, level)
    assert not np.array_equal(rec, _true_share(mp, honest._share)), \
        "the aggregator recovered s_i from the honest party's known-answer share"


def test_control_genuine_known_answer_share_does_not_reveal_the_key_share(first) -> None:  # type: ignore[no-untyped-def]
    """Control: the same recovery on the genuine keys' known-answer share gives garbage
    (the genuine ciphertext's c1 is uniform, not a constant)."""
    st = _Setup(first)
    relin2 = [q.relin(st.relin_msg) for q in st.parties]
    keys_msg = st.agg.relin_keys(relin2)
    _, c, level = _craft_conjugation_key(st, keys_msg)
    out = st.parties[0].check(keys_msg)
    rec = _recover_from_kat(st.mp, out, c, level)
    assert np.mean(rec == _true_share(st.mp, st.parties[0]._share)) < 0.6



def test_known_answer_shares_are_bound_to_their_senders(first) -> None:  # type: ignore[no-untyped-def]
    st = _Setup(first)
    relin2 = [q.relin(st.relin_msg) for q in st.parties]
    keys_msg = st.agg.relin_keys(relin2)
    checks = [q.check(keys_msg) for q in st.parties]
    a, b = wire.decode(checks[1]), wire.decode(checks[2])
    swapped = [checks[0], wire.encode(a.kind, dict(a.meta), [b.blobs[0], a.blobs[1]]),
               wire.encode(b.kind, dict(b.meta), [a.blobs[0], b.blobs[1]])]
    from fedsec.protocol.binding import BROADCAST

    relayed = wire.encode("mpkeys/confirmed",
                          st.agg._binding.bind({}, step="confirmed", to=BROADCAST), swapped)
    refused = False
    try:
        st.parties[0].finish(relayed)
    except (ProtocolError, TamperingDetected):
        refused = True
    assert refused, "known-answer shares exchanged between senders were accepted"

# ----------------------------------------------------------------------------- set-up: what held
def test_relin_shares_with_out_of_range_residues_are_refused(first) -> None:  # type: ignore[no-untyped-def]
    st = _Setup(first)
    blobs = list(wire.decode(st.relin_msg).blobs)
    inner, h = _polys(st.mp, blobs[3])
    h[0] = h[0].copy()
    h[0][0, 0] = np.uint64(st.mp.primes[0])
    blobs[3] = _pack(inner, h)
    with pytest.raises((ProtocolError, TamperingDetected)):
        st.parties[0].relin(_rewrap(st.relin_msg, blobs))


def test_setup_party_decoders_raise_protocol_error(first) -> None:  # type: ignore[no-untyped-def]
    st = _Setup(first)
    p = st.parties[0]
    assert _fuzz(p.reveal, st.relayed) == []
    state = p._relin_state

    def relin_fresh(m: bytes) -> Any:
        p._relin_state = state  # an accepted message consumes the ephemeral secret
        return p.relin(m)

    # every mutation of the relayed shares is refused (a flip inside a share breaks its
    # commitment)
    assert _fuzz(relin_fresh, st.relin_msg) == []
    p._relin_state = state
    relin2 = [q.relin(st.relin_msg) for q in st.parties]
    keys_msg = st.agg.relin_keys(relin2)
    # likewise a flipped residue of the keys' data halves: the party answers the known
    # answer on them and only finish() catches the wrong keys
    assert [b for b in _fuzz(p.check, keys_msg) if not b.startswith("flip@")] == []
    checks = [q.check(keys_msg) for q in st.parties]
    done = st.agg.confirm(checks)
    assert _fuzz(p.finish, done) == []
    p.finish(done)  # the genuine message still works after every refusal


def test_a_flipped_key_data_half_is_caught_at_finish(first) -> None:  # type: ignore[no-untyped-def]
    st = _Setup(first)
    relin2 = [q.relin(st.relin_msg) for q in st.parties]
    keys_msg = st.agg.relin_keys(relin2)
    inner_raw = wire.decode(keys_msg).blobs[0]
    inner, polys = _polys(st.mp, inner_raw)
    rng = np.random.default_rng(0)
    polys[0] = polys[0].copy()  # the public key's data half, first prime, made uniform
    polys[0][0] = rng.integers(0, st.mp.primes[0], st.mp.n, dtype=np.uint64)
    bad = _rewrap(keys_msg, [_pack(inner, polys)])
    checks = [q.check(bad) for q in st.parties]  # every party shown the same bad keys
    # the aggregator that sent them has the genuine keys: its own known answer (whose c1
    # does not depend on the data halves) passes; each party runs it on the keys it got
    from fedsec.protocol.binding import BROADCAST

    relayed = wire.encode("mpkeys/confirmed",
                          st.agg._binding.bind({}, step="confirmed", to=BROADCAST), checks)
    with pytest.raises(ProtocolError, match="known-answer"):
        st.parties[0].finish(relayed)


def test_setup_aggregator_decoders_raise_protocol_error(first) -> None:  # type: ignore[no-untyped-def]
    st = _Setup(first)
    agg = st.agg
    n = len(st.parties)

    def one(handler: Callable[[list[bytes]], Any], raws: list[bytes]) -> Callable[[bytes], Any]:
        return lambda m: handler([m] + raws[1:])

    fresh = CollectiveKeyAggregator(first[1], SETUP_SPEC, names=first[2][0].names,
                                    result_session=first[2][0].session)
    assert _fuzz(one(fresh.commits, st.commits), st.commits[0]) == []
    assert _fuzz(one(agg.reveals, st.reveals), st.reveals[0]) == []
    relin2 = [q.relin(st.relin_msg) for q in st.parties]
    assert _fuzz(one(agg.relin_keys, relin2), relin2[0]) == []
    keys_msg = agg.relin_keys(relin2)
    checks = [q.check(keys_msg) for q in st.parties]
    # the aggregator does not verify the checks' signatures (the parties do, in finish):
    # a changed signature is relayed, and every party then refuses the confirmation
    lax = _fuzz(one(agg.confirm, checks), checks[0])
    assert all(x.endswith("accepted") for x in lax)
    for label, m in _mutations(checks[0]):
        if any(x.startswith(label + ":") for x in lax):
            done = agg.confirm([m] + checks[1:])
            with pytest.raises(TamperingDetected):
                st.parties[1].finish(done)
    assert len(checks) == n


# ----------------------------------------------------------------------------- threshold AUC
@pytest.fixture(scope="module")
def fed():  # type: ignore[no-untyped-def]
    ids, roster = local_federation(NAMES)
    cfg = FHAUCConfig.create(POINTS, preset=AUC_PRESET, allow_insecure=True)
    _, result = run_key_setup(ids, roster, KeySpec.create(AUC_PRESET, [], False,
                                                          allow_insecure=True))
    cagg, keys = run_collective_key_setup(ids, roster, cfg.key_spec(), result)
    return ids, roster, cfg, cagg, keys


def _data(seed: int, n: int = 50) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, 2, n), rng.random(n)) for _ in NAMES]


def _roles(fed, data, cfg=None):  # type: ignore[no-untyped-def]
    ids, roster, cfg0, cagg, keys = fed
    cfg = cfg or cfg0
    policy = PartyPolicy(presets=(AUC_PRESET,), min_decision_points=1)
    parties = [ThresholdFHAUCParty(y, s, keys=k, identity=i, config=cfg, roster=roster,
                                   policy=policy)
               for (y, s), k, i in zip(data, keys, ids, strict=True)]
    agg = ThresholdFHAUCAggregator(cagg.context, cfg, names=cagg.names, session=cagg.session,
                                   roster=roster)
    return parties, agg


def _submitted(fed, seed=3):  # type: ignore[no-untyped-def]
    parties, agg = _roles(fed, _data(seed))
    subs = [p.submit() for p in parties]
    agg.begin()
    for s in subs:
        agg.add(s)
    return parties, agg, subs, agg.switch_request()


def test_switch_request_with_submissions_of_another_configuration_is_refused(fed) -> None:  # type: ignore[no-untyped-def]
    """Valid, signed submissions from an evaluation with another configuration (other
    decision points) relayed in this evaluation's request."""
    parties, agg, subs, request = _submitted(fed)
    cfg2 = FHAUCConfig.create(POINTS + 8, preset=AUC_PRESET, allow_insecure=True)
    others, _ = _roles(fed, _data(4), cfg2)
    other_subs = [p.submit() for p in others]
    for i in (1, 2):
        blobs = list(wire.decode(request).blobs)
        blobs[i] = other_subs[i]
        with pytest.raises(ProtocolError):
            parties[0].share(_rewrap(request, blobs))
    # the honest party's own submission from the other evaluation in place of its own
    blobs = list(wire.decode(request).blobs)
    blobs[0] = other_subs[0]
    with pytest.raises(ProtocolError):
        parties[0].share(_rewrap(request, blobs))
    assert parties[0].switched is None


def test_switch_request_reordered_gives_a_share_of_the_same_aggregate(fed) -> None:  # type: ignore[no-untyped-def]
    """Reordering the signed submissions changes nothing the coalition can exploit: the
    sum is exact mod q, so the aggregate and its ``c1`` are the very same."""
    parties, agg, subs, request = _submitted(fed)
    blobs = list(wire.decode(request).blobs)
    reordered = _rewrap(request, blobs[::-1])
    sh = parties[0].share(reordered)
    assert parties[0].switched == [0, 1, 2]
    # the aggregator combines it with the genuine shares as usual
    others = [p.share(request) for p in parties[1:]]
    res = agg.finish_shares([sh] + others)
    aucs = [p.finalize(res) for p in parties]
    assert max(aucs) - min(aucs) <= 1e-9


def test_switch_request_duplicates_omissions_and_second_asks_are_refused(fed) -> None:  # type: ignore[no-untyped-def]
    parties, agg, subs, request = _submitted(fed)
    blobs = list(wire.decode(request).blobs)
    for bad in ([blobs[0], blobs[1], blobs[1]], [blobs[1], blobs[2]], [blobs[0]],
                [blobs[0], blobs[0], blobs[1], blobs[2]], []):
        with pytest.raises(ProtocolError):
            parties[0].share(_rewrap(request, bad))
    parties[0].share(request)
    with pytest.raises(ProtocolError):
        parties[0].share(request)  # once per evaluation
    with pytest.raises(ProtocolError):
        parties[0].share(_rewrap(request, blobs[:2]))


def test_colluder_submission_cancelling_the_honest_one_hides_nothing_new(fed) -> None:  # type: ignore[no-untyped-def]
    """A colluder signs ``-honest + (0, C)``: the aggregate then decrypts to ``C * s``.
    The honest party's share is of a ciphertext whose ``c1`` is the product/rotation of
    that sum, smudged: the coalition's decryption of the honest party's *submission* with
    every share it now holds stays garbage (the honest share of the aggregate is no
    decryption share of the submission)."""
    _, roster, cfg, cagg, keys = fed
    ids = fed[0]
    parties, agg, subs, request = _submitted(fed)
    ctx = cagg.context
    mp = mpc._mp(ctx.params)
    honest_cts = list(wire.decode(subs[0]).blobs[:-1])
    from fedsec.auc.fhauc_threshold import _SIG_SUBMIT, _submission_payload
    from fedsec.crypto.rawpoly import ciphertext_from_polys, ciphertext_polys

    crafted = []
    for b in honest_cts:
        ct = ctx.deserialize(b)
        header, prefix, data = ciphertext_polys(ct)
        c = np.asarray(data, dtype=np.uint64)
        neg = np.stack([mp.neg(c[0]), mp.add(mp.neg(c[1]), np.ones_like(c[1]))])
        crafted.append(ctx.serialize(ciphertext_from_polys(ctx, header, prefix, neg)))
    col = wire.decode(subs[1])
    session = parties[1]._binding.session
    sig = ids[1].sign(_SIG_SUBMIT, _submission_payload(session, NAMES[1], crafted))
    forged_sub = wire.encode(col.kind, dict(col.meta), [*crafted, sig])
    blobs = list(wire.decode(request).blobs)
    blobs[1] = forged_sub
    try:
        share = parties[0].share(_rewrap(request, blobs))
    except ProtocolError:
        return
    # the coalition tries the honest share as a decryption share of the submission
    truth = parties[0].slot_vectors()[0]
    ct = ctx.deserialize(honest_cts[0])
    c = mpc._ct_data(mp, ct)
    rows = c.shape[1]
    s_coal = mp.add(keys[1].share._s[:rows], keys[2].share._s[:rows])
    base = mp.add(c[0], mp.mul(c[1], s_coal))
    from fedsec.crypto.rawpoly import plaintext_from_ntt

    for b in wire.decode(share).blobs:
        inner = wire.decode(b)
        h = mpc._unpack(mp, b, "mpckks/switch-share", int(inner.meta["rows"]), 1)[0]
        if h.shape[0] != rows:
            continue
        m = mp.add(base, h)
        pt = plaintext_from_ntt(ctx, m.reshape(-1), level=ctx.level_of(ct), scale=ct.scale)
        assert np.max(np.abs(np.asarray(ctx.decode(pt)) - truth)) > 1e6


def test_threshold_party_decoders_raise_protocol_error(fed) -> None:  # type: ignore[no-untyped-def]
    parties, agg, subs, request = _submitted(fed)
    honest = parties[0]
    # a request without one colluder's submission is a legitimate drop-out (quorum 2)

    def share_fresh(m: bytes) -> Any:
        honest._switched = None  # an accepted request is answered once
        return honest.share(m)

    # ... and the request's "parties" meta is not read: the party derives the set from
    # the signed submissions themselves
    bad = [b for b in _fuzz(share_fresh, request)
           if not b.startswith(("missing-blob", "meta[parties]"))]
    assert bad == []
    honest._switched = None
    shares = [p.share(request) for p in parties]
    result = agg.finish_shares(shares)
    assert _fuzz(honest.finalize, result) == []
    honest.finalize(result)


def test_threshold_aggregator_decoders_raise_protocol_error(fed) -> None:  # type: ignore[no-untyped-def]
    parties, agg = _roles(fed, _data(5))
    subs = [p.submit() for p in parties]
    agg.begin()

    def add_fresh(m: bytes) -> Any:
        agg.begin()
        return agg.add(m)

    # the submission's "chunks" meta is not read (the blob count is checked instead)
    assert [b for b in _fuzz(add_fresh, subs[0]) if not b.startswith("meta[chunks]")] == []
    agg.begin()
    for s in subs:
        agg.add(s)
    request = agg.switch_request()
    shares = [p.share(request) for p in parties]
    pending = agg._pending

    def finish_fresh(m: bytes) -> Any:
        agg._pending = pending  # an accepted share resets the aggregator
        return agg.finish_shares([m] + shares[1:])

    # a flipped residue is another well-formed share (semi-honest: no integrity)
    assert [b for b in _fuzz(finish_fresh, shares[0]) if not b.startswith("flip@")] == []
    agg._pending = pending
    res = agg.finish_shares(shares)
    assert all(abs(p.finalize(res) - parties[0].finalize(res)) < 1e-9 for p in parties[1:])


# ----------------------------------------------------------------------------- malicious mode
def test_malicious_threshold_party_decoders_raise(fed) -> None:  # type: ignore[no-untyped-def]
    """Every malformed fhauc-mt/switch: ProtocolError or TamperingDetected, no share."""
    from fedsec.auc.fhauc_malicious import MaliciousConfig
    from fedsec.auc.fhauc_threshold import (
        ThresholdMaliciousAggregator,
        ThresholdMaliciousParty,
    )
    from fedsec.crypto.keysetup import VerificationCache

    ids, roster, _, _, _ = fed
    cfg = MaliciousConfig.create(20, preset=AUC_PRESET, allow_insecure=True)
    _, result = run_key_setup(ids, roster, KeySpec.create(AUC_PRESET, [], False,
                                                          allow_insecure=True))
    cagg, keys = run_collective_key_setup(ids, roster, cfg.key_spec(), result)
    policy = PartyPolicy(presets=(AUC_PRESET,), min_decision_points=1)
    cache = VerificationCache()
    data = _data(11, 40)
    roles = [ThresholdMaliciousParty(y, s, keys=k, config=cfg, identity=i, roster=roster,
                                     policy=policy, verification_cache=cache)
             for (y, s), k, i in zip(data, keys, ids, strict=True)]
    agg = ThresholdMaliciousAggregator(cagg.context, cfg, names=cagg.names,
                                       session=cagg.session, roster=roster)
    start = agg.start([r.commit() for r in roles])
    agg.begin()
    subs = [r.submit(start) for r in roles]
    for s in subs:
        agg.add(s)
    request = agg.switch_request()
    honest = roles[0]

    def share_fresh(m: bytes) -> Any:
        honest._switched = False
        return honest.share(m)

    # the request's "parties" meta is not read (the set comes from the submissions)
    bad = [b for b in _fuzz(share_fresh, request) if not b.startswith("meta[parties]")]
    assert bad == []
    honest._switched = False
    # a colluder's submission dropped: malicious mode needs every party that started
    blobs = list(wire.decode(request).blobs)
    with pytest.raises(TamperingDetected):
        share_fresh(_rewrap(request, blobs[:2]))
    with pytest.raises(TamperingDetected):
        share_fresh(_rewrap(request, [blobs[0], blobs[1], blobs[1]]))
    honest._switched = False
    shares = [r.share(request) for r in roles]
    with pytest.raises(ProtocolError):
        honest.share(request)  # once per evaluation
    answer = agg.finish_shares(shares)
    assert _fuzz(honest.finalize, answer) == []
