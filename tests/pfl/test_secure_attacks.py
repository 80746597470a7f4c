"""Attacks on secure Priv-PFL (fedsec.pfl.secure) from the bytes each role receives.

Malicious clients are in the threat model (any model, any published value, any bytes);
the server and the decryptor are honest-but-curious. Each test states which it plays and
what must happen: a ProtocolError, or an outcome that gives the attacker nothing. Server
deviations the decryptor cannot detect are out of scope (module docstring); where the
decryptor refuses them anyway, the test says so.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.keys import open_sealed
from fedsec.crypto.rawpoly import (
    ciphertext_from_polys,
    ciphertext_polys,
    plaintext_from_ntt,
    plaintext_ntt,
    secret_key_coeffs,
)
from fedsec.crypto.sign import sign_depth
from fedsec.errors import ProtocolError
from fedsec.pfl.secure import (
    UPLOAD_LEVEL,
    SecurePFLConfig,
    SecurePFLSession,
    client_name,
    clip_to_norm,
)
from fedsec.pfl.secure.common import _box_context, _pairs, _register_payload, _result_mask
from fedsec.pfl.selection import PlaintextOracle, brute_force_selection, efficient_selection
from fedsec.protocol import wire
from fedsec.testing.pfl import (
    ciphertext_upload,
    plaintext_upload,
    relabel,
    relay_upload,
    unclipped_upload,
    upload_plaintexts,
)

PRESET = "INSECURE_TEST_N4096_DEPTH19"
CFG = SecurePFLConfig(preset=PRESET, allow_insecure=True, sign_alpha=8)
K, D, B = 4, 24, 10.0
_ROUND = iter(range(1, 1000))


@pytest.fixture(scope="module")
def session() -> SecurePFLSession:
    return SecurePFLSession.create(K, CFG)


def _models(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = rng.normal(size=D)
    w = base + 0.1 * rng.normal(size=(K, D))
    return np.asarray(w * (0.5 * B / np.linalg.norm(w, axis=1, keepdims=True)))


def _uploads(s: SecurePFLSession, w: np.ndarray, t: int, sigma: float = 0.5) -> list[bytes]:
    return [c.upload(w[i], norm_bound=B, sigma=sigma, round_index=t)
            for i, c in enumerate(s.clients)]


def _edit(msg: bytes, **meta: object) -> bytes:
    m = wire.decode(msg)
    return wire.encode(m.kind, {**m.meta, **meta}, m.blobs)


def _blobs(msg: bytes, blobs: list[bytes]) -> bytes:
    m = wire.decode(msg)
    return wire.encode(m.kind, m.meta, blobs)


def _receive(s: SecurePFLSession, i: int, u: bytes, t: int, **kw: float) -> None:
    kw = {"sigma": 0.5, "norm_bound": B, **kw}  # the round's public values
    s.server.receive(i, u, round_index=t, model_size=D, **kw)  # type: ignore[arg-type]


def _unmask(s: SecurePFLSession) -> None:
    s.server.receive_masks(s.decryptor.mask_ciphertexts(s.server.mask_request()))


def _to_compare(s: SecurePFLSession, ups: list[bytes], t: int, **kw: float) -> None:
    for i, u in enumerate(ups):
        _receive(s, i, u, t, **kw)
    _unmask(s)
    s.server.compare(s.decryptor.refresh(s.server.gram_request()))


def _finish_all(s: SecurePFLSession, accepted: tuple[frozenset[int], ...], alpha: float = 0.5
                ) -> list[np.ndarray]:
    sel = type("S", (), {"accepted": accepted})
    out = []
    for i, r in enumerate(s.server.aggregate(sel, alpha)):  # type: ignore[arg-type]
        out.append(s.clients[i].finish(s.server.deliver(i, s.decryptor.unmask_for_client(r))))
    return out


# ---------------------------------------------------------------------- malicious clients
def test_huge_sigma_claim_is_refused_and_what_it_would_do(session: SecurePFLSession) -> None:
    """A client claiming sigma = 10^6 inflates the margin scale M by 10^12: every margin,
    its own far-away pair included, lands inside the 2^-alpha band where the comparison is
    decided by noise. The server checks the round's public sigma (regression)."""
    w = _models(1)
    w[3] = -w[3]  # far from everyone: nobody should accept it
    t = next(_ROUND)
    ups = _uploads(session, w, t)
    ups[3] = session.clients[3].upload(w[3], norm_bound=B, sigma=1e6, round_index=t)
    with pytest.raises(ProtocolError, match="sigma"):
        _receive(session, 3, ups[3], t)
    # what the check prevents (a server that took the claim as the round's sigma): the
    # margin of honest client 0 about the attacker, clearly negative in the honest scale,
    # becomes indistinguishable from 0
    for i, u in enumerate(ups):
        _receive(session, i, u, t, sigma=1e6 if i == 3 else 0.5)
    _unmask(session)
    session.server.compare(session.decryptor.refresh(session.server.gram_request()))
    x = session.decryptor._ctx.decrypt(session.server._margins[0]).real  # noqa: SLF001
    a = _pairs(K).index((0, 3))
    assert abs(x[a]) < 2.0 ** -30 < 2.0 ** -CFG.sign_alpha
    honest = (0.25 * np.sum(w[0] ** 2) - np.sum((w[0] - w[3]) ** 2)) / (4 * B * B)
    assert honest < -0.1


def test_other_norm_bound_claim_is_refused(session: SecurePFLSession) -> None:
    t = next(_ROUND)
    up = session.clients[0].upload(_models(2)[0], norm_bound=1e6, sigma=0.5, round_index=t)
    with pytest.raises(ProtocolError, match="norm bound"):
        _receive(session, 0, up, t)


def test_huge_published_norm_makes_the_client_invalid(session: SecurePFLSession) -> None:
    """Regression: a norm of 1e200 over a small bound overflowed ``(n / B) ** 2`` in the
    server's Gram request (OverflowError); it is now an invalid client."""
    w = _models(3)
    t = next(_ROUND)
    ups = _uploads(session, w, t)
    ups[2] = unclipped_upload(session.clients[2], w[2], norm_bound=B, sigma=0.5,
                              round_index=t, claimed_norm=1e200)
    _to_compare(session, ups, t)
    assert list(session.server.validity()) == [True, True, False, True]
    # the published values are signed: the server cannot be handed another norm
    t2 = next(_ROUND)
    up = session.clients[2].upload(w[2], norm_bound=B, sigma=0.5, round_index=t2)
    with pytest.raises(ProtocolError, match="signature"):
        _receive(session, 2, _edit(up, norm=1e200), t2)


def _coeffs(ctx: CKKSContext, residues: np.ndarray, level: int) -> np.ndarray:
    """Coefficient form (centred mod the level's first prime) of NTT residues."""
    tmpl = ctx.mod_switch(ctx.encrypt([0.0]), level=level)
    header, prefix, data = ciphertext_polys(tmpl)
    data = np.ones_like(data)
    data[0] = np.asarray(residues, dtype=np.uint64).reshape(data.shape[1], data.shape[2])
    ct = ciphertext_from_polys(ctx, header, prefix, data)
    ctx._evaluator.transform_from_ntt_inplace(ct)  # noqa: SLF001
    c = ciphertext_polys(ct)[2][0, 0].astype(object)
    q = ctx.level_primes(ctx.parms_id_at_level(level))[0]
    return np.array([int(v) - q if v > q // 2 else int(v) for v in c])


def _opened_result(s: SecurePFLSession, i: int, t: int, res: bytes) -> np.ndarray:
    """What client ``i`` opens from its result: the plaintext residues mod q0, mask
    removed (as :meth:`SecurePFLClient.finish` does before decoding)."""
    msg = wire.decode(res)
    x = s.clients[i]._x  # noqa: SLF001 - the client's own key
    poly = np.frombuffer(open_sealed(x, msg.blobs[0], context=_box_context(
        b"result", s.server.session, t, i, 0)), dtype="<u8").astype(np.uint64)
    seed = open_sealed(x, msg.blobs[1], context=_box_context(b"mask", s.server.session, t, i, 0))
    q0 = s.server._enc.q0
    mask = _result_mask(seed, q0, s.server._enc.n)
    return np.where(poly >= mask, poly - mask, poly + (np.uint64(q0) - mask))


def _rounding_attack(s: SecurePFLSession, opened: np.ndarray, chosen: np.ndarray,
                     c: int) -> float:
    """The reviewer's attack: were the result ``c1 s + e'`` with ``c1 = c``, rounding
    ``(result - known) / c`` gives ``s``. Returns the fraction of key coefficients it
    gets right (1.0 against the old protocol; 1/3 is what guessing 0 everywhere gives)."""
    ctx = s.decryptor._ctx
    r = _coeffs(ctx, opened, 0) - _coeffs(ctx, chosen, 0)
    guess = np.array([round(v / c) for v in r])
    sk = secret_key_coeffs(ctx)
    return float(np.mean(guess == sk))


def _chosen_plaintext(s: SecurePFLSession, c: int) -> list[np.ndarray]:
    """Residues (upload level, NTT form) of the polynomial with every coefficient ``c``
    in NTT form: the constant polynomial ``c`` -- the reviewer's ``c1``, now as the
    client's plaintext (all it controls)."""
    ctx = s.clients[0]._ctx
    primes = ctx.level_primes(ctx.parms_id_at_level(UPLOAD_LEVEL))
    n = s.server._enc.n
    return [np.concatenate([np.full(n, c % q, dtype=np.uint64) for q in primes])]


def _to_level0(s: SecurePFLSession, plain: np.ndarray) -> np.ndarray:
    """The residues mod q0 a level-1 plaintext has after Eq. 2's rescale by q1 (for
    alpha = 1 on itself): what an exact result would carry."""
    ctx = s.server._ctx
    pt = plaintext_from_ntt(ctx, plain, level=UPLOAD_LEVEL, scale=s.server._enc.upload_scale)
    ct = ctx.encrypt(pt)
    q = ctx.rescale_prime(ct)
    lvl0 = ctx.rescale(ctx.multiply_plain(ct, ctx.encode_constant(
        1.0, scale=float(q), parms_id=ct.parms_id()), rescale=False))
    return np.asarray(plaintext_ntt(s.decryptor._ctx.decrypt_plaintext(lvl0)), dtype=np.uint64)


@pytest.mark.parametrize("variant", ["norm-0", "plausible-norm", "sybils"])
def test_a_client_cannot_recover_the_secret_key(session: SecurePFLSession,
                                                variant: str) -> None:
    """The reviewer's key recovery. Against the old protocol a client uploaded the
    ciphertext (0, c) with norm 0, passed the checks, accepted nobody, and its "result" was
    c s + e': rounding recovered every key coefficient. Now a client chooses only a
    plaintext: here the same polynomial c, correctly padded, sealed and signed. Whatever
    it publishes (norm 0; a large plausible norm; two Sybils accepting each other), what it
    opens is its own plaintext plus noise, and the rounding attack gets the key
    coefficients right at chance (1/3: the zeros), not 100%."""
    c = 1 << 20
    w = _models(17)
    t = next(_ROUND)
    ups = _uploads(session, w, t)
    chosen = _chosen_plaintext(session, c)
    attackers = [1, 2] if variant == "sybils" else [1]
    norm = {"norm-0": 0.0, "plausible-norm": 0.9 * B, "sybils": 0.0}[variant]
    for a in attackers:
        ups[a] = plaintext_upload(session.clients[a], chosen, d=D, claimed_norm=norm,
                                  norm_bound=B, sigma=0.5, round_index=t)
    _to_compare(session, ups, t)
    srv, dec = session.server, session.decryptor
    if variant == "plausible-norm":  # the norm check catches the lie: nothing decrypted
        assert not srv.validity()[1] and srv.validity()[[0, 2, 3]].all()
    else:
        assert srv.validity().all()
    accepted = [frozenset() for _ in range(K)]
    if variant == "sybils":  # they accept each other (distance 0)
        accepted[1], accepted[2] = frozenset({2}), frozenset({1})
    sel = type("S", (), {"accepted": tuple(accepted)})
    reqs = srv.aggregate(sel, 0.5)  # type: ignore[arg-type]
    results = {a: srv.deliver(a, dec.unmask_for_client(reqs[a])) for a in attackers}
    if variant == "plausible-norm":
        assert wire.decode(results[1]).meta.get("own") is True  # a notice, no decryption
        return
    expect = _to_level0(session, chosen[0])
    q0 = srv._enc.q0
    for a in attackers:
        opened = _opened_result(session, a, t, results[a])
        # what it opens is its own plaintext plus small noise (no c s term)
        noise = _coeffs(dec._ctx, opened, 0) - _coeffs(dec._ctx, expect, 0)
        assert np.abs(noise).max() < 2 ** 12 < q0
        assert _rounding_attack(session, opened, expect, c) < 0.45


def test_copy_of_another_clients_upload_is_useless_or_refused(
        session: SecurePFLSession) -> None:
    """The old limitation ("a re-randomized copy of an upload with the victim's norm passes
    as a valid client") is closed. Client 1, having seen client 0's padded plaintext x_0
    (an eavesdropper, or the server pooling with it): (a) sends x_0 with its own seed
    boxes and client 0's norm -- its plaintext is x_0 - M_1 = p_0 + M_0 - M_1, uniform mod
    q: it fails the norm check, is invalid, and gets nothing decrypted; (b) sends x_0 with
    client 0's seed boxes -- signed by client 0 for client 0: refused; (c) replays its own
    or client 0's upload in a later round -- the signatures bind the round: refused."""
    w = _models(5)
    t = next(_ROUND)
    ups = _uploads(session, w, t)
    v = wire.decode(ups[0])
    chunks = len(v.blobs) // 3
    copy_with_mine = relay_upload(session.clients[1], v.blobs[:chunks], d=D,
                                  claimed_norm=v.meta["norm"], norm_bound=B, sigma=0.5,
                                  round_index=t, keep=w[1])
    with pytest.raises(ProtocolError, match="signature"):
        _receive(session, 1, relabel(ups[0], sender="client:1"), t)  # (b)
    ups[1] = copy_with_mine
    _to_compare(session, ups, t)
    assert not session.server.validity()[1] and session.server.validity()[[0, 2, 3]].all()
    assert session.decryptor.norm_errors()[1] > 1.0  # far from anything a model decrypts to
    out = _finish_all(session, tuple(frozenset() for _ in range(K)))
    np.testing.assert_array_equal(out[1], w[1])  # its own, kept locally, never decrypted
    np.testing.assert_allclose(out[0], w[0], atol=1e-4)
    t2 = next(_ROUND)  # (c)
    for who, up in ((1, ups[1]), (1, relabel(ups[0], sender="client:1")), (0, ups[0])):
        with pytest.raises(ProtocolError, match="signature"):
            _receive(session, who, relabel(up, round=t2), t2)


def test_forged_or_replayed_seed_box_is_refused_by_the_decryptor(
        session: SecurePFLSession) -> None:
    """The decryptor checks every seed box itself (it does not trust the server's check):
    a box signed by another client, of another round, or altered refuses that client in
    its reply (no Enc(-M) for it); the server then drops it (invalid this round)."""
    w = _models(18)
    t = next(_ROUND)
    for i, u in enumerate(_uploads(session, w, t)):
        _receive(session, i, u, t)
    srv, dec = session.server, session.decryptor
    req = wire.decode(srv.mask_request())
    blobs = list(req.blobs)  # per client (one chunk): box, signature, digest of x_i
    blobs[3:6] = blobs[0:3]  # client 1 "sends" client 0's box and signature
    blobs[7] = bytes(64)  # client 2's signature forged
    reply = dec.mask_ciphertexts(wire.encode(req.kind, req.meta, blobs))
    assert wire.decode(reply).meta["refused"] == [1, 2]
    assert wire.decode(reply).meta["clients"] == [0, 3]
    srv.receive_masks(reply)
    srv.compare(dec.refresh(srv.gram_request()))
    assert list(srv.validity()) == [True, False, False, True]
    with pytest.raises(ProtocolError, match="replay"):  # and never twice for a round
        dec.mask_ciphertexts(wire.encode(req.kind, req.meta, list(req.blobs)))


def test_decryptor_never_decrypts_for_an_invalid_client(session: SecurePFLSession) -> None:
    """Even a server that asks (it deviates: out of scope) gets no decryption of an
    invalid client's ciphertext from the decryptor."""
    w = _models(6)
    t = next(_ROUND)
    ups = _uploads(session, w, t)
    ups[2] = unclipped_upload(session.clients[2], w[2], norm_bound=B, sigma=0.5,
                              round_index=t, claimed_norm=0.0)
    _to_compare(session, ups, t)
    sel = type("S", (), {"accepted": tuple(frozenset() for _ in range(K))})
    reqs = session.server.aggregate(sel, 0.5)  # type: ignore[arg-type]
    real = session.server.aggregate(sel, 0.5)[0]  # type: ignore[arg-type]
    with pytest.raises(ProtocolError, match="failed the checks"):
        session.decryptor.unmask_for_client(_blobs(_edit(reqs[2], own=False),
                                                   wire.decode(real).blobs))
    # a valid client's result cannot be turned into "own" by a forged box or result:
    # the notice is sealed by the decryptor to the invalid client, for this round
    box = session.decryptor.unmask_for_client(reqs[0])
    with pytest.raises(ProtocolError):
        session.server.deliver(0, _blobs(_edit(box, own=True), []))
    own2 = session.server.deliver(2, session.decryptor.unmask_for_client(reqs[2]))
    res0 = session.server.deliver(0, box)
    with pytest.raises(ProtocolError):
        session.clients[0].finish(_blobs(_edit(res0, own=True), list(wire.decode(
            own2).blobs)))
    with pytest.raises(ProtocolError):
        session.clients[0].finish(_blobs(_edit(res0, own=True), []))
    np.testing.assert_array_equal(session.clients[2].finish(own2), w[2])


@pytest.mark.parametrize("how", ["old-format", "ciphertext-as-plaintext", "out-of-range",
                                 "short", "other-session-box", "huge"])
def test_hostile_uploads(session: SecurePFLSession, how: str) -> None:
    """Uploads in the retired ciphertext format, with a ciphertext or out-of-range
    residues in place of the padded plaintext, or a seed box of another session are
    refused; a well-formed upload of a huge plaintext is accepted, then invalid."""
    w = _models(7)
    t = next(_ROUND)
    client = session.clients[0]
    up = client.upload(w[0], norm_bound=B, sigma=0.5, round_index=t)
    m = wire.decode(up)
    if how == "huge":
        ups = _uploads(session, w, t)
        ups[0] = unclipped_upload(client, w[0] * 1e6, norm_bound=B, sigma=0.5, round_index=t,
                                  claimed_norm=B)
        _to_compare(session, ups, t)
        assert not session.server.validity()[0] and session.server.validity()[1:].all()
        return
    if how == "old-format":
        bad = ciphertext_upload(client, w[0] / 2, norm_bound=B, sigma=0.5, round_index=t)
    elif how == "ciphertext-as-plaintext":
        ct = wire.decode(ciphertext_upload(client, w[0], norm_bound=B, sigma=0.5,
                                           round_index=t)).blobs[0]
        bad = _blobs(up, [ct, *m.blobs[1:]])
    elif how == "out-of-range":
        x = bytearray(m.blobs[0])
        x[:8] = (2 ** 64 - 1).to_bytes(8, "little")
        bad = _blobs(up, [bytes(x), *m.blobs[1:]])
    elif how == "short":
        bad = _blobs(up, [m.blobs[0][:-8], *m.blobs[1:]])
    else:
        other = SecurePFLSession.create(2, CFG)
        o = wire.decode(other.clients[0].upload(w[0], norm_bound=B, sigma=0.5,
                                                 round_index=t))
        bad = _blobs(up, [m.blobs[0], *o.blobs[1:]])
    with pytest.raises(ProtocolError):
        _receive(session, 0, bad, t)


# ---------------------------------------------------------------------- registration
def test_registration_hijack_is_refused(session: SecurePFLSession) -> None:
    """Client 1 re-registers client 0's name with its own X25519 key so the server would
    seal client 0's result mask to it: refused (the signature is client 1's, not client
    0's); so is a replay of client 0's own registration (a second one for the name) and a
    name off the roster."""
    srv, dec = session.server, session.decryptor
    victim = srv._clients[0]  # noqa: SLF001
    attacker = session.clients[1]
    reg = wire.decode(attacker.register())
    x_pk = reg.blobs[0]
    sig = attacker._identity.sign("pfl/register", _register_payload(  # noqa: SLF001
        session.server.session, client_name(0), x_pk))
    # in client 0's place (the context names client 0; only the signature is client 1's)
    hijack = relabel(wire.encode("pfl/register", {**reg.meta, "client": 0,
                                                  "name": client_name(0)}, [x_pk, sig]),
                     sender="client:0")
    for role in (srv, dec):
        with pytest.raises(ProtocolError, match="does not verify"):
            role.register(hijack)
        with pytest.raises(ProtocolError, match="second registration"):
            role.register(session.clients[0].register())
    stranger = relabel(hijack, name="mallory")
    with pytest.raises(ProtocolError):
        srv.register(stranger)
    assert srv._clients[0] == victim == dec._clients[0]  # noqa: SLF001


# ---------------------------------------------------------------------- one client aborts
def _drive(s: SecurePFLSession, w: np.ndarray, ups: dict[int, bytes], t: int
           ) -> tuple[np.ndarray, list[np.ndarray]]:
    """A round as the session runs it, with the given uploads (refused ones dropped)."""
    for i, u in ups.items():
        try:
            _receive(s, i, u, t)
        except ProtocolError:
            pass
    _unmask(s)
    srv, dec = s.server, s.decryptor
    srv.compare(dec.refresh(srv.gram_request()))

    def oracle(pairs: Sequence[tuple[int, int]]) -> list[bool]:
        return srv.read_bits(dec.reveal(srv.reveal_request(pairs)), pairs)

    sel = efficient_selection(srv.keys(), oracle, neighbours=srv.neighbours())
    reqs = srv.aggregate(sel, 0.5)
    out = [s.clients[i].finish(srv.deliver(i, dec.unmask_for_client(r))) if i in ups
           else w[i] for i, r in enumerate(reqs)]
    return srv.validity().copy(), out


@pytest.mark.parametrize("how", ["other-d", "other-sigma", "other-bound", "malformed",
                                 "bad-signature", "missing", "old-format"])
def test_one_bad_upload_does_not_abort_the_round(session: SecurePFLSession, how: str
                                                 ) -> None:
    """An upload claiming another model size, sigma or bound, malformed, refused, in the old
    format, or missing makes that client invalid; the others' results equal plaintext BALANCE on the
    valid clients (Algorithm 1 and Eq. 2, exact reference)."""
    w = _models(19)
    w[3] = w[3] * 0.8  # clients 0-2 close together
    t = next(_ROUND)
    ups = dict(enumerate(_uploads(session, w, t)))
    bad = 2
    c = session.clients[bad]
    if how == "other-d":
        ups[bad] = c.upload(np.append(w[bad], 0.1), norm_bound=B, sigma=0.5, round_index=t)
    elif how == "other-sigma":
        ups[bad] = c.upload(w[bad], norm_bound=B, sigma=0.9, round_index=t)
    elif how == "other-bound":
        ups[bad] = c.upload(w[bad], norm_bound=2 * B, sigma=0.5, round_index=t)
    elif how == "malformed":
        ups[bad] = ups[bad][:-9]
    elif how == "bad-signature":
        m = wire.decode(ups[bad])
        ups[bad] = _blobs(ups[bad], [*m.blobs[:-1], bytes(64)])
    elif how == "old-format":  # (the client's own state holds its model: it keeps it)
        ups[bad] = ciphertext_upload(c, w[bad], norm_bound=B, sigma=0.5, round_index=t)
        c.upload(w[bad], norm_bound=B, sigma=0.5, round_index=t)
    else:
        del ups[bad]
    valid, out = _drive(session, w, ups, t)
    assert list(valid) == [i != bad for i in range(K)]
    ok = [i for i in range(K) if i != bad]
    ref = brute_force_selection(K, PlaintextOracle(w, np.full(K, 0.5)),
                                neighbours=[[j for j in ok if j != i] if i in ok else []
                                            for i in range(K)])
    assert sum(len(a) for a in ref.accepted) > 0
    for i in ok:
        s_i = sorted(ref.accepted[i])
        exp = 0.5 * w[i] + 0.5 * w[s_i].mean(axis=0) if s_i else w[i]
        np.testing.assert_allclose(out[i], exp, atol=1e-4)
    if how != "missing":
        np.testing.assert_array_equal(out[bad][:D], w[bad])  # kept, own


def test_fewer_than_two_accepted_uploads_is_a_clear_error() -> None:
    s = SecurePFLSession.create(2, CFG)
    t = 3
    up = s.clients[0].upload(_models(20)[0], norm_bound=B, sigma=0.5, round_index=t)
    s.server.receive(0, up, round_index=t, sigma=0.5, norm_bound=B, model_size=D)
    with pytest.raises(ProtocolError, match="fewer than two"):
        s.server.mask_request()


# ---------------------------------------------------------------------- the reveal step
def _ready(session: SecurePFLSession, seed: int) -> int:
    t = next(_ROUND)
    _to_compare(session, _uploads(session, _models(seed), t), t)
    return t


def _reveal(session: SecurePFLSession, pairs: list[list[int]],
            blobs: Callable[[list[bytes]], list[bytes]] | None = None) -> bytes:
    req = session.server.reveal_request([(0, 1)])
    m = wire.decode(req)
    bl = list(m.blobs) if blobs is None else blobs(list(m.blobs))
    return session.decryptor.reveal(wire.encode(m.kind, {**m.meta, "pairs": pairs}, bl))


def test_reveal_refuses_repeats_unknown_and_too_many_pairs(session: SecurePFLSession) -> None:
    _ready(session, 8)
    with pytest.raises(ProtocolError):
        _reveal(session, [[0, 1], [0, 1]])  # the same pair twice in one request
    with pytest.raises(ProtocolError):
        _reveal(session, [[0, K]])  # no such client
    with pytest.raises(ProtocolError):
        _reveal(session, [[1, 1]])  # not a pair
    with pytest.raises(ProtocolError):
        _reveal(session, [[i, j] for i, j in _pairs(K)] + [[0, 1]])  # more than exist
    assert len(wire.decode(_reveal(session, [[0, 1]])).meta["bits"]) == 1
    with pytest.raises(ProtocolError, match="twice"):
        _reveal(session, [[0, 1]])  # asked before, in a new batch


def test_reveal_of_a_non_comparison_ciphertext_gives_bits_only(
        session: SecurePFLSession) -> None:
    """A (deviating) server sends an upload instead of the comparison ciphertext: the
    decryptor refuses anything not at the comparison's final level (0); a level-0
    ciphertext of other content (a Gram product) still yields one rounded bit per pair."""
    _ready(session, 9)
    ctx = session.server._ctx
    c = session.server._uploads[0].cts[0]  # noqa: SLF001 - Enc(p_0), level 1
    with pytest.raises(ProtocolError, match="level"):
        _reveal(session, [[0, 2]], lambda _b: [ctx.serialize(c)])
    lazy = ctx.multiply(c, ctx.conjugate(c), relinearize=False, rescale=False)
    gram = ctx.serialize(ctx.rescale(ctx.relinearize(lazy)))
    reply = wire.decode(_reveal(session, [[0, 2]], lambda _b: [gram]))
    assert reply.meta["bits"] in ([0], [1]) and not reply.blobs


def test_reveal_of_another_round_is_refused(session: SecurePFLSession) -> None:
    t = _ready(session, 10)
    old = session.server.reveal_request([(0, 1)])
    _ready(session, 11)
    with pytest.raises(ProtocolError, match="round"):
        session.decryptor.reveal(old)
    with pytest.raises(ProtocolError, match="round"):
        session.decryptor.reveal(relabel(old, round=t + 1000))


# ---------------------------------------------------------------------- results
def test_result_of_an_earlier_round_or_another_client_is_refused(
        session: SecurePFLSession) -> None:
    t = _ready(session, 12)
    sel = type("S", (), {"accepted": tuple(frozenset() for _ in range(K))})
    reqs = session.server.aggregate(sel, 0.5)  # type: ignore[arg-type]
    res0 = session.server.deliver(0, session.decryptor.unmask_for_client(reqs[0]))
    res1 = session.server.deliver(1, session.decryptor.unmask_for_client(reqs[1]))
    with pytest.raises(ProtocolError):  # someone else's result, relabelled
        session.clients[0].finish(relabel(res1, recipient="client:0"))
    session.clients[0].finish(res0)
    # next round: client 0 uploads again; the server replays round t's result
    t2 = _ready(session, 13)
    with pytest.raises(ProtocolError, match="round"):
        session.clients[0].finish(res0)
    with pytest.raises(ProtocolError):  # relabelled: the sealed boxes are bound to round t
        session.clients[0].finish(relabel(res0, round=t2))
    with pytest.raises(ProtocolError):  # "own" on a valid client's round needs no blobs
        session.clients[0].finish(relabel(res0, round=t2, own=1))
    assert t2 > t


def test_an_honest_round_still_agrees_with_plaintext(session: SecurePFLSession) -> None:
    """The fixes leave honest rounds alone (run_round passes sigma and B to the server)."""
    w = _models(14)
    w[3] = -w[3]
    r = session.run_round(w, np.full(K, 0.5), alpha=0.5, norm_bound=B,
                          round_index=next(_ROUND))
    assert r.valid.all()
    assert all(3 not in r.selection.accepted[i] for i in range(3))
    np.testing.assert_allclose(r.personalised[3], clip_to_norm(w[3], B), atol=1e-4)
    assert sign_depth(CFG.sign_alpha) + 2 <= CFG.params.depth


def _mulmod(a: np.ndarray, b: np.ndarray, q: int) -> np.ndarray:
    return np.array([int(x) * int(y) % q for x, y in zip(a, b, strict=True)], dtype=np.uint64)


def test_client_and_server_together_cannot_recover_the_secret_key(
        session: SecurePFLSession) -> None:
    """Li-Micciancio key recovery by client 0 + the server. Were client 0's result the
    exact decryption ``p = c0 + c1 s (mod q0)`` of the ciphertext the server built, pooled
    they would solve ``s = (p - c0) / c1`` in the NTT domain and decrypt client 2's upload
    (the first version of the decryptor sent exactly that; this attack recovered w_2 to
    3e-7). The decryptor re-randomises with a fresh encryption of zero first; the test
    runs the attack on the residues client 0 really opens, and as a control on an exact
    decryption, which must still give the model away (so the attack itself works)."""
    w = _models(16)
    t = next(_ROUND)
    _to_compare(session, _uploads(session, w, t), t, sigma=0.5, norm_bound=B)
    srv, dec, ctx = session.server, session.decryptor, session.server._ctx
    sel = type("S", (), {"accepted": tuple(frozenset() for _ in range(K))})
    req0 = srv.aggregate(sel, 0.5)[0]  # type: ignore[arg-type]
    ct0 = ctx.deserialize(wire.decode(req0).blobs[0])
    # what client 0 opens from the decryptor's sealed box (residues mod q0, mask included
    # as in the ciphertext), and, as the control, the exact decryption
    box = wire.decode(dec.unmask_for_client(req0)).blobs[0]
    opened = open_sealed(session.clients[0]._x, box,  # noqa: SLF001
                         context=_box_context(b"result", dec.session, t, 0, 0))
    p_real = np.frombuffer(opened, dtype="<u8").astype(np.uint64)
    p_exact = plaintext_ntt(dec._ctx.decrypt_plaintext(dec._ctx.deserialize(
        wire.decode(req0).blobs[0])))
    _, _, data = ciphertext_polys(ct0)
    q0 = session.server._enc.q0
    c0, c1 = data[0, 0], data[1, 0]
    inv = np.array([pow(int(x), -1, q0) for x in c1], dtype=object)

    def steal(p: np.ndarray) -> np.ndarray:
        s_ntt = _mulmod((p.astype(object) - c0.astype(object)) % q0, inv, q0)
        # the server brings client 2's upload to level 0 (as Eq. 2 does) and decrypts it
        up2 = srv._uploads[2].cts[0]  # noqa: SLF001
        q = ctx.rescale_prime(up2)
        lvl0 = ctx.rescale(ctx.multiply_plain(up2, ctx.encode_constant(
            1.0, scale=float(q), parms_id=up2.parms_id()), rescale=False))
        _, _, d2 = ciphertext_polys(lvl0)
        m = (d2[0, 0].astype(object) + _mulmod(d2[1, 0], s_ntt, q0).astype(object)) % q0
        pt = plaintext_from_ntt(ctx, np.asarray(m, dtype=np.uint64), level=0, scale=lvl0.scale)
        z = ctx.decode(pt)[: (D + 1) // 2]
        stolen = np.empty(2 * z.size)
        stolen[0::2], stolen[1::2] = z.real, z.imag
        return stolen[:D] * B

    assert p_real.shape == p_exact.shape and not np.array_equal(p_real, p_exact)
    assert np.linalg.norm(steal(p_exact) - w[2]) < 1e-3 * B  # control: the attack works
    assert np.linalg.norm(steal(p_real) - w[2]) > 1e-2 * B  # re-randomised: it fails


def test_client_and_server_pooling_the_mask_view_get_an_rlwe_sample_only(
        session: SecurePFLSession) -> None:
    """Client 1 and the server pool what they hold about client 1's upload: its plaintext
    p_1 (the client's), x_1 = p_1 + M_1 (the server's) hence M_1, and the decryptor's
    Enc(-M_1) = (c0, c1) with c0 = -c1 s - M_1 + e. So c0 + M_1 = -c1 s + e: one RLWE
    sample with the decryptor's own c1, like the public key. Solving it as if it were exact
    (s = -(c0 + M_1) / c1 in the NTT domain) decrypts nothing; the control removes e with
    the true key and the same solve then decrypts client 2's upload -- so the attack code
    works and e is all that stops it."""
    w = _models(21)
    t = next(_ROUND)
    ups = _uploads(session, w, t)
    srv, dec, ctx = session.server, session.decryptor, session.server._ctx
    for i, u in enumerate(ups):
        _receive(session, i, u, t)
    masks = dec.mask_ciphertexts(srv.mask_request())
    srv.receive_masks(masks)
    m = wire.decode(masks)
    neg = ctx.deserialize(m.blobs[m.meta["clients"].index(1)])
    _, _, data = ciphertext_polys(neg)  # (2, primes, n), NTT form
    x1 = srv._uploads[1].xs[0]  # noqa: SLF001 - the server's view
    p1 = upload_plaintexts(session.clients[1], w[1], B)[0]  # the client's own
    primes = ctx.level_primes(ctx.parms_id_at_level(UPLOAD_LEVEL))
    n = srv._enc.n
    m1 = [(x1[a * n:(a + 1) * n].astype(object) - p1[a * n:(a + 1) * n].astype(object)) % q
          for a, q in enumerate(primes)]
    b = [(data[0, a].astype(object) + m1[a]) % q for a, q in enumerate(primes)]  # -c1 s + e
    up2 = srv._uploads[2].cts[0]  # noqa: SLF001 - Enc(p_2) at level 1
    _, _, d2 = ciphertext_polys(up2)

    def steal(rhs: list[np.ndarray]) -> np.ndarray:
        out = []
        for a, q in enumerate(primes):
            inv = np.array([pow(-int(v) % q, -1, q) for v in data[1, a]], dtype=object)
            s_ntt = (rhs[a] * inv) % q
            out.append(np.asarray((d2[0, a].astype(object) + d2[1, a].astype(object)
                                   * s_ntt) % q, dtype=np.uint64))
        pt = plaintext_from_ntt(ctx, np.concatenate(out), level=UPLOAD_LEVEL,
                                scale=up2.scale)
        z = ctx.decode(pt)[: (D + 1) // 2]
        stolen = np.empty(2 * z.size)
        stolen[0::2], stolen[1::2] = z.real, z.imag
        return stolen[:D] * B

    sk = plaintext_ntt(dec._ctx.decrypt_plaintext(ctx.add_plain(neg, plaintext_from_ntt(
        ctx, x1, level=UPLOAD_LEVEL, scale=neg.scale))))  # p_1 + e, the decryptor's view
    e = [(sk[a * n:(a + 1) * n].astype(object) - p1[a * n:(a + 1) * n].astype(object)) % q
         for a, q in enumerate(primes)]
    exact = [(b[a] - e[a]) % q for a, q in enumerate(primes)]
    assert any(np.any(v != 0) for v in e)  # there is noise
    assert np.linalg.norm(steal(exact) - w[2]) < 1e-3 * B  # control: the solve works
    assert np.linalg.norm(steal(b) - w[2]) > 1e-2 * B  # with the noise: nothing


def test_decryptor_checks_the_gram_request_against_the_signed_values(
        session: SecurePFLSession) -> None:
    """The norms and sigmas the server puts in its Gram request must be those each client
    signed with its upload (relayed to the decryptor with the seed boxes)."""
    t = next(_ROUND)
    for i, u in enumerate(_uploads(session, _models(22), t)):
        _receive(session, i, u, t)
    _unmask(session)
    gram = session.server.gram_request()
    nu = wire.decode(gram).meta["norms_sq"]
    for edit in ({"norms_sq": [0.0, *nu[1:]]}, {"sigmas": [0.5, 0.5, 0.5, 0.25]}):
        with pytest.raises(ProtocolError, match="signed"):
            copy.copy(session.decryptor).refresh(_edit(gram, **edit))
    session.decryptor.refresh(gram)


# ---------------------------------------------------------------------- the network
def test_a_relay_that_copies_an_upload_only_invalidates_that_client() -> None:
    """An adversary on the network (an interceptor: it sees and rewrites bytes, never a
    role's state) replaces client 2's upload by client 0's, relabelled as client 2's:
    the signatures are client 0's, so the server refuses it; client 2 is invalid and
    keeps its own model, the others' round goes on."""
    s = SecurePFLSession.create(K, CFG)
    seen: list[str] = []

    def copy_upload(batch: list) -> list | None:
        kinds = [e.kind for e in batch]
        seen.extend(kinds)
        if kinds != ["pfl/masked-upload"] * K:
            return None
        first = batch[0].payload
        return [e.with_payload(relabel(first, sender="client:2")) if e.sender == "client:2"
                else e for e in batch]

    remove = s.network.intercept(copy_upload)
    w = _models(23)
    r = s.run_round(w, np.full(K, 0.5), alpha=0.5, norm_bound=B, round_index=0)
    remove()
    assert list(r.valid) == [True, True, False, True]
    np.testing.assert_array_equal(r.personalised[2], clip_to_norm(w[2], B))
    assert {"pfl/masked-upload", "pfl/mask-request", "pfl/gram", "pfl/result"} <= set(seen)
    # what the network counted is what crossed: every client's upload and result
    assert (r.bytes_up > 0).all() and (r.bytes_down > 0).all()
    assert r.accounting.total_bytes == sum(r.accounting.bytes_by_message.values())
    assert r.server_bytes_in + r.decryptor_bytes_in + int(r.bytes_down.sum()) == \
        r.accounting.total_bytes


def test_the_runner_touches_roles_through_their_methods_only(
        session: SecurePFLSession) -> None:
    """The in-process runner moves bytes and calls role methods; it reads no role
    attribute but a role's name and clock (its state is private)."""
    import ast
    import inspect

    from fedsec.pfl.secure import SecurePFLClient, SecurePFLDecryptor, SecurePFLServer
    from fedsec.pfl.secure import runner as runner_module

    tree = ast.parse(inspect.getsource(runner_module))
    roles = (SecurePFLClient, SecurePFLServer, SecurePFLDecryptor)
    allowed = {"clock", "name", "seconds"}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        if node.attr.startswith("_") and not node.attr.endswith("__") and not (
                isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
            raise AssertionError(f"the runner reads a private attribute: {node.attr}")
        for role in roles:
            member = inspect.getattr_static(role, node.attr, None)
            if member is None or node.attr in allowed or node.attr.endswith("__"):
                continue
            assert callable(member) or isinstance(member, property), node.attr
    # every attribute of a role is private but its clock
    for role in (session.clients[0], session.server, session.decryptor):
        public = [n for n in vars(role) if not n.startswith("_")]
        assert public == ["clock"], (type(role).__name__, public)
