"""Secure Priv-PFL (fedsec.pfl.secure) against plaintext BALANCE, and its security checks.

All at the insecure 4096-ring test preset (2,048 slots, the 128-bit preset's chain).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from fedsec.crypto.identity import Identity, Roster
from fedsec.crypto.keysetup import KeySpec, run_key_setup
from fedsec.crypto.rawpoly import _PT_MEMBERS, _split
from fedsec.crypto.sealio import save as _save
from fedsec.crypto.sign import sign_input_bound
from fedsec.errors import ProtocolError, TamperingDetected
from fedsec.pfl.balance import personalise
from fedsec.pfl.secure import (
    BLINDED_BAND,
    DECRYPTOR_NAME,
    SecurePFLConfig,
    SecurePFLSession,
    clip_to_norm,
    margin_scale,
)
from fedsec.pfl.selection import PlaintextOracle, brute_force_selection, ineq1_margin
from fedsec.protocol import wire
from fedsec.protocol.network import Network
from fedsec.testing.pfl import UnclippedClient, relabel, unclipped_upload

PRESET = "INSECURE_TEST_N4096_DEPTH19"
CFG = SecurePFLConfig(preset=PRESET, allow_insecure=True, sign_alpha=8)


@pytest.fixture(scope="module")
def session() -> SecurePFLSession:
    return SecurePFLSession.create(8, CFG, network=Network(record=True))


_ROUND = iter(range(1000))


def _models(rng: np.random.Generator, k: int, d: int, spread: float) -> np.ndarray:
    base = rng.normal(size=d)
    return base + spread * rng.normal(size=(k, d)) * rng.uniform(0.2, 1.5, size=(k, 1))


def _near_boundary(wc: np.ndarray, sig: np.ndarray, m: float, alpha: int) -> set[tuple[int, int]]:
    k = len(wc)
    return {(i, j) for i in range(k) for j in range(k) if i != j
            and abs(ineq1_margin(wc[i], wc[j], sig[i])) < 2.0 ** -alpha * m}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_acceptance_sets_match_brute_force(session: SecurePFLSession, seed: int) -> None:
    rng = np.random.default_rng(seed)
    k, d = session.n_clients, 700 + 37 * seed
    w = _models(rng, k, d, 0.5)
    sig = rng.uniform(0.3, 0.9, size=k)
    b = float(np.median(np.linalg.norm(w, axis=1)))  # about half the clients are clipped
    r = session.run_round(w, sig, alpha=0.5, norm_bound=b, round_index=next(_ROUND))
    wc = np.array([clip_to_norm(x, b) for x in w])
    ref = brute_force_selection(k, PlaintextOracle(wc, sig))
    near = _near_boundary(wc, sig, r.margin_scale, CFG.sign_alpha)
    assert r.valid.all()
    # honest norms decrypt well inside the decryptor's tolerance (2^-14; measured <= 2^-17)
    assert session.decryptor.norm_errors().max() < 2.0 ** -16
    differ = {(i, j) for i in range(k) for j in range(k) if i != j
              and (j in r.selection.accepted[i]) != (j in ref.accepted[i])}
    assert differ <= near, (differ, near)
    assert sum(len(s) for s in ref.accepted) > 0  # the instance accepts someone
    assert r.sign_evaluations == 1
    assert r.pairs_checked == r.selection.checks == r.revealed_bits
    assert 0 < r.pairs_checked <= k * (k - 1)
    # Eq. 2 on the same clipped models and the secure acceptance sets
    exp = np.array([personalise(wc[i], [wc[j] for j in sorted(r.selection.accepted[i])], 0.5)
                    for i in range(k)])
    assert np.abs(r.personalised - exp).max() <= 1e-6 * b
    assert set(r.seconds) >= {"distances", "comparison", "aggregation", "total"}
    assert (r.bytes_up > 0).all() and (r.bytes_down > 0).all() and r.server_bytes_in > 0


def test_margins_of_valid_clients_stay_in_the_sign_domain() -> None:
    rng = np.random.default_rng(5)
    for _ in range(200):
        k = 5
        b = float(rng.uniform(0.1, 10))
        sig = rng.uniform(0.05, 3.0, size=k)
        w = np.array([clip_to_norm(x, b) for x in rng.normal(size=(k, 20)) * 10])
        w[0] = -w[1]  # extreme: opposite models
        m = margin_scale(sig) * b * b
        lo, hi = sign_input_bound(8)
        for i in range(k):
            for j in range(k):
                assert abs(ineq1_margin(w[i], w[j], sig[i])) / m < 1.0 < hi


def test_liar_about_its_norm_is_rejected() -> None:
    session = SecurePFLSession.create(8, CFG, clients={3: UnclippedClient})
    rng = np.random.default_rng(11)
    k, d = session.n_clients, 300
    w = _models(rng, k, d, 0.1)
    b = float(np.linalg.norm(w, axis=1).max()) * 1.01
    w[3] = 5.0 * w[3]  # too long, claims min(||w||, B) = B
    sig = np.full(k, 8.0)  # everyone would accept everyone in the clear
    r = session.run_round(w, sig, alpha=0.5, norm_bound=b, round_index=next(_ROUND))
    assert not r.valid[3] and r.valid.sum() == k - 1
    assert all(3 not in s for s in r.selection.accepted)
    assert r.selection.accepted[3] == frozenset()
    assert all(len(r.selection.accepted[i]) == k - 2 for i in range(k) if i != 3)
    # its own result is its own (unclipped) upload
    np.testing.assert_allclose(r.personalised[3], w[3], atol=1e-5 * b * 5)


def test_huge_values_rejected_and_never_accepted(session: SecurePFLSession) -> None:
    """Huge models, truthful or lying about their norm, are invalid; nobody accepts them
    even when their out-of-domain margins would read as 'accept'."""
    rng = np.random.default_rng(12)
    k, d = session.n_clients, 300
    w = _models(rng, k, d, 0.1)
    b = float(np.linalg.norm(w, axis=1).max()) * 1.01
    sig = np.full(k, 0.9)
    # client 0: 10^4 times a benign model, lying (claims B); its huge margins would be
    # far outside the domain. client 1: 10^3 B along the mean, truthful norm.
    w[0] = 1e4 * w[2]
    w[1] = 1e3 * w[1]
    t = next(_ROUND)
    clients = session.clients
    ups = []
    for i in range(k):
        if i > 1:
            ups.append(clients[i].upload(w[i], norm_bound=b, sigma=float(sig[i]),
                                         round_index=t))
        else:
            ups.append(unclipped_upload(clients[i], w[i], norm_bound=b, sigma=float(sig[i]),
                                        round_index=t, claimed_norm=b if i == 0 else None))
    for i, u in enumerate(ups):
        session.server.receive(i, u, round_index=t, sigma=float(sig[i]), norm_bound=b,
                               model_size=d)
    _unmask(session)
    refreshed = session.decryptor.refresh(session.server.gram_request())
    session.server.compare(refreshed)
    assert list(session.server.validity()[:2]) == [False, False]
    assert session.server.validity()[2:].all()
    nb = session.server.neighbours()
    assert nb[0] == frozenset() and nb[1] == frozenset()
    assert all(0 not in s and 1 not in s for s in nb)
    # the decryptor refuses to reveal a bit of an invalid client, even if asked
    with pytest.raises(ProtocolError, match="invalid client"):
        session.decryptor.reveal(session.server.reveal_request([(2, 0)]))


def test_no_secret_key_in_any_byte_the_server_receives(session: SecurePFLSession) -> None:
    rng = np.random.default_rng(3)
    w = _models(rng, session.n_clients, 200, 0.3)
    session.run_round(w, np.full(session.n_clients, 0.5), alpha=0.3, norm_bound=100.0,
                      round_index=next(_ROUND))
    ctx = session.decryptor._ctx  # noqa: SLF001
    assert ctx.has_secret_key and not session.server._ctx.has_secret_key  # noqa: SLF001
    assert all(not c._ctx.has_secret_key for c in session.clients)  # noqa: SLF001
    sk_plain = _split(_save(ctx._sk), _PT_MEMBERS, "secret key")[2]
    needles = [ctx.secret_bytes()[-64:], _save(ctx._sk)[-64:]]
    n = ctx.params.poly_modulus_degree
    needles += [sk_plain[a:a + 4].astype("<u8").tobytes() for a in range(0, sk_plain.size, n)]
    s = session.decryptor._s
    needles += [s[:64].astype(np.int64).tobytes(), s[:64].astype(np.int8).tobytes()]
    received = [e.payload for e in session.network.transcript if e.recipient == "server"]
    assert len(received) > 20
    assert any(wire.peek_kind(blob) == "keys/offer" for blob in received)
    for blob in received:
        for needle in needles:
            assert needle not in blob


def _unmask(session: SecurePFLSession) -> None:
    """Steps 1b-1c: the server relays the seed boxes; the decryptor's Enc(-M_i) come back."""
    srv = session.server
    srv.receive_masks(session.decryptor.mask_ciphertexts(srv.mask_request()))


def _fresh_round(session: SecurePFLSession, d: int = 100) -> tuple[int, list[bytes]]:
    rng = np.random.default_rng(7)
    w = _models(rng, session.n_clients, d, 0.2)
    t = next(_ROUND)
    ups = [c.upload(w[i], norm_bound=100.0, sigma=0.5, round_index=t)
           for i, c in enumerate(session.clients)]
    return t, ups


#: The public sigma and bound of :func:`_fresh_round`'s uploads, as the server knows them.
FRESH = {"sigma": 0.5, "norm_bound": 100.0}


def test_replayed_foreign_and_other_round_messages_raise(session: SecurePFLSession) -> None:
    t, ups = _fresh_round(session)
    srv, dec = session.server, session.decryptor
    with pytest.raises(ProtocolError, match="another round"):
        srv.receive(0, ups[0], round_index=t + 1, model_size=100, **FRESH)
    for i, u in enumerate(ups):
        srv.receive(i, u, round_index=t, model_size=100, **FRESH)
    with pytest.raises(ProtocolError, match="twice"):
        srv.receive(0, ups[0], round_index=t, model_size=100, **FRESH)
    with pytest.raises(ProtocolError, match="another sender"):
        srv.receive(1, ups[0], round_index=t, model_size=100, **FRESH)  # 0's, claimed by 1
    mreq = srv.mask_request()
    masks = dec.mask_ciphertexts(mreq)
    with pytest.raises(ProtocolError, match="replay"):
        dec.mask_ciphertexts(mreq)
    with pytest.raises(ProtocolError, match="past round"):  # the round's uploads are closed
        srv.receive(0, ups[0], round_index=t, model_size=100, **FRESH)
    srv.receive_masks(masks)
    with pytest.raises(ProtocolError, match="pending"):
        srv.receive_masks(masks)
    gram = srv.gram_request()
    refreshed = dec.refresh(gram)
    with pytest.raises(ProtocolError, match="replay"):
        dec.refresh(gram)
    srv.compare(refreshed)
    req = srv.reveal_request([(0, 1), (1, 0)])
    reply = dec.reveal(req)
    assert len(srv.read_bits(reply, [(0, 1), (1, 0)])) == 2
    with pytest.raises(ProtocolError, match="replayed"):
        dec.reveal(req)
    with pytest.raises(ProtocolError, match="twice"):
        dec.reveal(srv.reveal_request([(0, 1)]))
    # a message of another session (same roster names, other key set-up)
    other = SecurePFLSession.create(2, CFG)
    foreign = other.clients[0].upload(np.ones(10), norm_bound=10.0, sigma=0.5,
                                      round_index=t + 1)
    with pytest.raises(ProtocolError, match="another session"):
        srv.receive(0, foreign, round_index=t + 1, sigma=0.5, norm_bound=10.0, model_size=10)
    with pytest.raises(ProtocolError, match="another session"):
        dec.register(other.clients[0].register())
    # results: replayed, and for another client
    sel = type("S", (), {"accepted": tuple(frozenset() for _ in range(session.n_clients))})
    reqs = srv.aggregate(sel, 0.5)  # type: ignore[arg-type]
    box = dec.unmask_for_client(reqs[0])
    with pytest.raises(ProtocolError, match="replayed"):
        dec.unmask_for_client(reqs[0])
    with pytest.raises(ProtocolError, match="another client"):
        srv.deliver(1, box)
    res = srv.deliver(0, box)
    with pytest.raises(ProtocolError, match="another recipient"):
        session.clients[1].finish(res)
    out = session.clients[0].finish(res)
    assert out.shape == (100,)


def test_client_cannot_decrypt_another_clients_result(session: SecurePFLSession) -> None:
    t, ups = _fresh_round(session, d=64)
    srv, dec = session.server, session.decryptor
    for i, u in enumerate(ups):
        srv.receive(i, u, round_index=t, model_size=64, **FRESH)
    _unmask(session)
    srv.compare(dec.refresh(srv.gram_request()))
    sel = type("S", (), {"accepted": tuple(frozenset() for _ in range(session.n_clients))})
    reqs = srv.aggregate(sel, 0.5)  # type: ignore[arg-type]
    res = srv.deliver(0, dec.unmask_for_client(reqs[0]))
    msg = wire.decode(res)
    forged = relabel(res, recipient="client:1")
    with pytest.raises(ProtocolError, match="authentication"):
        session.clients[1].finish(forged)
    # the server cannot open the decryptor's box either: it is sealed to client 0's key
    assert all(b"FSEC" not in blob[:64] for blob in msg.blobs)
    assert session.clients[0].finish(res).shape == (64,)


def _mutations(data: bytes) -> list[bytes]:
    out = [b"", data[:10], data[:-1], data + b"\x00", b"XXXX" + data[4:]]
    msg = wire.decode(data)
    out.append(wire.encode(msg.kind, msg.meta, msg.blobs[:-1]) if msg.blobs else data[:5])
    for key in list(msg.meta)[:6]:
        for bad in (None, -1, "x", [1, 2], 1e308, True, 10 ** 400, [10 ** 400] * 8):
            out.append(wire.encode(msg.kind, {**msg.meta, key: bad}, msg.blobs))
    if msg.blobs:
        b0 = msg.blobs[0]
        out.append(wire.encode(msg.kind, msg.meta, [b0[: len(b0) // 2], *msg.blobs[1:]]))
        out.append(wire.encode(msg.kind, msg.meta, [b0 + b"\x01", *msg.blobs[1:]]))
        out.append(wire.encode(msg.kind, msg.meta, [*msg.blobs, b0]))
    return out


def test_malformed_messages_raise_protocol_error(session: SecurePFLSession) -> None:
    t, ups = _fresh_round(session, d=50)
    srv, dec = session.server, session.decryptor
    for bad in _mutations(ups[0]):
        with pytest.raises(ProtocolError):
            srv.receive(0, bad, round_index=t, model_size=50, **FRESH)
    for i, u in enumerate(ups):
        srv.receive(i, u, round_index=t, model_size=50, **FRESH)
    mreq = srv.mask_request()
    for bad in _mutations(mreq):
        try:  # a malformed request raises; a box that does not verify refuses its client
            out = wire.decode(copy.copy(dec).mask_ciphertexts(bad))
        except ProtocolError:
            continue
        assert out.meta["refused"], "a mutated mask request was served in full"
    masks = dec.mask_ciphertexts(mreq)
    for bad in _mutations(masks):
        with pytest.raises(ProtocolError):
            srv.receive_masks(bad)
    srv.receive_masks(masks)
    gram = srv.gram_request()
    for bad in _mutations(gram):
        with pytest.raises(ProtocolError):
            dec.refresh(bad)
    refreshed = dec.refresh(gram)
    for bad in _mutations(refreshed):
        with pytest.raises(ProtocolError):
            srv.compare(bad)
    srv.compare(refreshed)
    req = srv.reveal_request([(2, 3)])
    for bad in _mutations(req):
        with pytest.raises(ProtocolError):
            dec.reveal(bad)
    reply = dec.reveal(req)
    for bad in _mutations(reply):
        with pytest.raises(ProtocolError):
            srv.read_bits(bad, [(2, 3)])
    sel = type("S", (), {"accepted": tuple(frozenset() for _ in range(session.n_clients))})
    reqs = srv.aggregate(sel, 0.5)  # type: ignore[arg-type]
    for bad in _mutations(reqs[2]):
        with pytest.raises(ProtocolError):
            dec.unmask_for_client(bad)
    box = dec.unmask_for_client(reqs[2])
    for bad in _mutations(box):
        with pytest.raises(ProtocolError):
            srv.deliver(2, bad)
    res = srv.deliver(2, box)
    for bad in _mutations(res):
        with pytest.raises(ProtocolError):
            session.clients[2].finish(bad)
    for bad in _mutations(session.clients[0].register()):
        with pytest.raises(ProtocolError):
            dec.register(bad)
        with pytest.raises(ProtocolError):
            srv.register(bad)
    for bad in _mutations(dec.announce()):
        with pytest.raises(ProtocolError):
            session.clients[0].receive_decryptor_key(bad)


def test_fixed_holder_key_setup_gives_clients_no_secret_key() -> None:
    ids = [Identity(f"p{i}") for i in range(3)] + [Identity(DECRYPTOR_NAME)]
    roster = Roster.of(ids)
    spec = KeySpec.create(PRESET, (), True, allow_insecure=True, holder=DECRYPTOR_NAME)
    assert spec.digest() != KeySpec.create(PRESET, (), True, allow_insecure=True).digest()
    agg, keys = run_key_setup(ids, roster, spec)
    assert agg.names[agg.holder] == DECRYPTOR_NAME
    assert keys[3].context.has_secret_key
    assert not any(k.context.has_secret_key for k in keys[:3])
    assert len({k.session for k in keys}) == 1 and keys[0].seed == keys[3].seed
    # the public-only party state round-trips
    from fedsec.crypto.keysetup import PartyKeys
    again = PartyKeys.from_bytes(keys[0].to_bytes(), allow_insecure=True)
    assert not again.context.has_secret_key and again.session == keys[0].session
    # a holder that does not take part stops the set-up
    bad = KeySpec.create(PRESET, (), True, allow_insecure=True, holder="nobody")
    with pytest.raises(ProtocolError, match="does not take part"):
        run_key_setup(ids, roster, bad)
    # a delivery whose public key was swapped is detected
    def swap(step: str, value: object) -> object:
        if step == "keys/deliveries":
            out = []
            for d in value:  # type: ignore[attr-defined]
                m = wire.decode(d)
                if len(m.blobs) == 5:
                    pk = bytearray(m.blobs[4])
                    pk[len(pk) // 2] ^= 1
                    m = wire.Message(m.kind, m.meta, (*m.blobs[:4], bytes(pk)))
                out.append(wire.encode(m.kind, m.meta, m.blobs))
            return out
        return value
    from fedsec.protocol.network import Network
    from fedsec.testing.auc import tamper_steps

    net = Network()
    net.intercept(tamper_steps(swap))
    with pytest.raises(TamperingDetected):
        run_key_setup(ids, roster, spec, network=net)


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="sign_alpha"):
        SecurePFLConfig(preset=PRESET, allow_insecure=True, sign_alpha=9)
    with pytest.raises(ValueError, match="insecure"):
        SecurePFLConfig(preset=PRESET)
    with pytest.raises(ValueError, match="levels"):
        SecurePFLConfig(preset="INSECURE_TEST_N4096_DEPTH16", allow_insecure=True,
                        sign_alpha=12)
    with pytest.raises(ValueError):
        clip_to_norm(np.ones(3), 0.0)
    x = np.arange(1.0, 50.0)
    assert np.linalg.norm(clip_to_norm(x, 3.0)) <= 3.0
    np.testing.assert_array_equal(clip_to_norm(x, 1e9), x)


def test_more_pairs_than_slots_use_several_sign_evaluations() -> None:
    """K (K - 1) = 2,070 margins need two ciphertexts of 2,048 slots: two sign
    evaluations, and pairs in the second one decide like the first."""
    k = 46
    s = SecurePFLSession.create(k, CFG)
    rng = np.random.default_rng(21)
    w = _models(rng, k, 40, 0.3)
    sig = rng.uniform(0.2, 0.6, size=k)
    b = float(np.median(np.linalg.norm(w, axis=1)))
    r = s.run_round(w, sig, alpha=0.5, norm_bound=b, round_index=0)
    assert r.sign_evaluations == 2
    wc = np.array([clip_to_norm(x, b) for x in w])
    ref = brute_force_selection(k, PlaintextOracle(wc, sig))
    near = _near_boundary(wc, sig, r.margin_scale, CFG.sign_alpha)
    differ = {(i, j) for i in range(k) for j in range(k) if i != j
              and (j in r.selection.accepted[i]) != (j in ref.accepted[i])}
    assert differ <= near
    # some revealed pair lives in the second ciphertext (ordered pair index >= 2,048)
    assert max(i * (k - 1) + (j if j < i else j - 1) for i, j in r.selection.checked) >= 2048


BLIND = SecurePFLConfig(preset=PRESET, allow_insecure=True, comparison="blinded")


def test_margins_reach_the_comparison_within_2_to_minus_17() -> None:
    """The refresh (exact constant terms, masked re-encryption, unmasking) delivers the
    margins x = m / M to the comparison with error < 2^-17 (measured ~2^-19: the float64
    re-encoding of ~2^31-sized masked values); the blinded mode's band is 2^-14."""
    s = SecurePFLSession.create(5, BLIND)
    rng = np.random.default_rng(31)
    w = _models(rng, 5, 900, 0.4)
    sig = rng.uniform(0.2, 0.7, size=5)
    b = float(np.median(np.linalg.norm(w, axis=1)))
    r = s.run_round(w, sig, alpha=0.5, norm_bound=b, round_index=0)
    wc = np.array([clip_to_norm(x, b) for x in w])
    x = s.decryptor._ctx.decrypt(s.server._margins[0]).real
    exp = np.array([ineq1_margin(wc[i], wc[j], sig[i]) for i in range(5) for j in range(5)
                    if i != j]) / r.margin_scale
    assert np.abs(x[:20] - exp).max() < 2.0 ** -17
    assert np.abs(x[20:]).max() < 2.0 ** -17  # unused slots are zero


def test_blinded_comparison_mode() -> None:
    s = SecurePFLSession.create(8, BLIND, clients={5: UnclippedClient})
    rng = np.random.default_rng(41)
    k = 8
    for t, seed in enumerate((1, 2)):
        rng = np.random.default_rng(seed)
        w = _models(rng, k, 500, 0.4)
        sig = rng.uniform(0.2, 0.7, size=k)
        b = float(np.median(np.linalg.norm(w, axis=1)))
        w[5] *= 3.0  # a liar (claims B)
        r = s.run_round(w, sig, alpha=0.5, norm_bound=b, round_index=t)
        assert r.sign_evaluations == 0 and not r.valid[5] and r.valid.sum() == k - 1
        wc = np.array([clip_to_norm(x, b) for x in w])
        ok = [i for i in range(k) if i != 5]
        ref = brute_force_selection(k, PlaintextOracle(wc, sig),
                                    neighbours=[frozenset(j for j in ok if j != i)
                                                if i in ok else frozenset()
                                                for i in range(k)])
        differ = {(i, j) for i in range(k) for j in range(k) if i != j
                  and (j in r.selection.accepted[i]) != (j in ref.accepted[i])}
        near = {(i, j) for i in ok for j in ok if i != j
                and abs(ineq1_margin(wc[i], wc[j], sig[i])) < BLINDED_BAND * r.margin_scale}
        assert differ <= near
        assert sum(len(a) for a in r.selection.accepted) > 0


@pytest.mark.parametrize("alpha", [10, 12])
def test_higher_precisions_match_brute_force(alpha: int) -> None:
    cfg = SecurePFLConfig(preset=PRESET, allow_insecure=True, sign_alpha=alpha)
    s = SecurePFLSession.create(5, cfg)
    rng = np.random.default_rng(50 + alpha)
    w = _models(rng, 5, 300, 0.3)
    sig = rng.uniform(0.2, 0.6, size=5)
    b = float(np.median(np.linalg.norm(w, axis=1)))
    r = s.run_round(w, sig, alpha=0.5, norm_bound=b, round_index=0)
    wc = np.array([clip_to_norm(x, b) for x in w])
    ref = brute_force_selection(5, PlaintextOracle(wc, sig))
    near = _near_boundary(wc, sig, r.margin_scale, alpha)
    differ = {(i, j) for i in range(5) for j in range(5) if i != j
              and (j in r.selection.accepted[i]) != (j in ref.accepted[i])}
    assert differ <= near and r.sign_evaluations == 1
