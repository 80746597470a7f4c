"""Attacks on secure Priv-PFL (fedsec.pfl.secure) from the bytes each role receives.

Malicious clients are in the threat model (any model, any published value, any bytes);
the server and the decryptor are honest-but-curious. Each test states which it plays and
what must happen: a ProtocolError, or an outcome that gives the attacker nothing. Server
deviations the decryptor cannot detect are out of scope (module docstring); where the
decryptor refuses them anyway, the test says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest

from fedsec.crypto import wire
from fedsec.crypto.keys import open_sealed
from fedsec.crypto.rawpoly import ciphertext_polys, plaintext_from_ntt, plaintext_ntt
from fedsec.crypto.sign import sign_depth
from fedsec.errors import ProtocolError
from fedsec.pfl.secure import (
    UPLOAD_LEVEL,
    SecurePFLConfig,
    SecurePFLSession,
    _box_context,
    _pairs,
    clip_to_norm,
)
from fedsec.pfl.selection import efficient_selection

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


def _to_compare(s: SecurePFLSession, ups: list[bytes], t: int, **kw: float) -> None:
    kw = {"sigma": 0.5, "norm_bound": B, **kw}  # the round's public values
    for i, u in enumerate(ups):
        s.server.receive(i, u, round_index=t, **kw)
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
        session.server.receive(3, ups[3], round_index=t, sigma=0.5, norm_bound=B)
    # what the check prevents (a server that took the claim as the round's sigma): the
    # margin of honest client 0 about the attacker, clearly negative in the honest scale,
    # becomes indistinguishable from 0
    for i, u in enumerate(ups):
        session.server.receive(i, u, round_index=t, sigma=1e6 if i == 3 else 0.5,
                               norm_bound=B)
    session.server.compare(session.decryptor.refresh(session.server.gram_request()))
    x = session.decryptor.ctx.decrypt(session.server._margins[0]).real  # noqa: SLF001
    a = _pairs(K).index((0, 3))
    assert abs(x[a]) < 2.0 ** -30 < 2.0 ** -CFG.sign_alpha
    honest = (0.25 * np.sum(w[0] ** 2) - np.sum((w[0] - w[3]) ** 2)) / (4 * B * B)
    assert honest < -0.1


def test_other_norm_bound_claim_is_refused(session: SecurePFLSession) -> None:
    t = next(_ROUND)
    up = session.clients[0].upload(_models(2)[0], norm_bound=1e6, sigma=0.5, round_index=t)
    with pytest.raises(ProtocolError, match="norm bound"):
        session.server.receive(0, up, round_index=t, sigma=0.5, norm_bound=B)


def test_huge_published_norm_raises_protocol_error(session: SecurePFLSession) -> None:
    """Regression: a norm of 1e200 over a small bound overflowed ``(n / B) ** 2`` in the
    server's Gram request (OverflowError); it is now an invalid client."""
    w = _models(3)
    t = next(_ROUND)
    ups = _uploads(session, w, t)
    ups[2] = _edit(ups[2], norm=1e200)
    for i, u in enumerate(ups):
        session.server.receive(i, u, round_index=t, sigma=0.5, norm_bound=B)
    session.server.compare(session.decryptor.refresh(session.server.gram_request()))
    assert list(session.server.valid) == [True, True, False, True]


def test_byte_replay_of_another_clients_upload_is_refused(session: SecurePFLSession) -> None:
    w = _models(4)
    t = next(_ROUND)
    ups = _uploads(session, w, t)
    session.server.receive(0, ups[0], round_index=t, sigma=0.5, norm_bound=B)
    stolen = _edit(ups[0], client=1)  # client 1 claims client 0's ciphertext
    with pytest.raises(ProtocolError, match="replays"):
        session.server.receive(1, stolen, round_index=t, sigma=0.5, norm_bound=B)
    # ... or last round's: also refused (the server remembers the session's ciphertexts)
    t2 = next(_ROUND)
    with pytest.raises(ProtocolError, match="replays"):
        session.server.receive(1, _edit(ups[0], client=1, round=t2), round_index=t2,
                               sigma=0.5, norm_bound=B)


def test_rerandomized_replay_failing_the_norm_check_gets_its_own_model(
        session: SecurePFLSession) -> None:
    """A client re-randomizes client 0's upload (adds Enc(0): new bytes, same plaintext)
    and claims a wrong norm so it is invalid. Before the fix the decryptor decrypted an
    invalid client's upload as its 'own model' -- client 0's model. Now nothing of an
    invalid client is decrypted: it gets the model it kept locally."""
    w = _models(5)
    t = next(_ROUND)
    ups = _uploads(session, w, t)
    ctx = session.clients[1].ctx
    pid = ctx.parms_id_at_level(UPLOAD_LEVEL)
    scale = session.clients[1].enc.upload_scale
    zero = ctx.encrypt_plaintext(ctx.encode(np.zeros(ctx.slots), scale=scale, parms_id=pid))
    copied = ctx.add(ctx.deserialize(wire.decode(ups[0]).blobs[0]), zero)
    ups[1] = _edit(_blobs(ups[1], [ctx.serialize(copied)]), norm=0.0)
    _to_compare(session, ups, t)
    assert not session.server.valid[1]
    out = _finish_all(session, tuple(frozenset() for _ in range(K)))
    np.testing.assert_array_equal(out[1], w[1])  # its own, never decrypted
    assert np.linalg.norm(out[1] - w[0]) > 0.1  # CKKS error is ~1e-5
    for i in (0, 2, 3):
        np.testing.assert_allclose(out[i], w[i], atol=1e-4)


def test_decryptor_never_decrypts_for_an_invalid_client(session: SecurePFLSession) -> None:
    """Even a server that asks (it deviates: out of scope) gets no decryption of an
    invalid client's ciphertext from the decryptor."""
    w = _models(6)
    t = next(_ROUND)
    ups = _uploads(session, w, t)
    ups[2] = _edit(ups[2], norm=0.0)
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


@pytest.mark.parametrize("how", ["level0", "level2", "other-session", "huge", "size3"])
def test_hostile_upload_ciphertexts(session: SecurePFLSession, how: str) -> None:
    w = _models(7)
    t = next(_ROUND)
    up = session.clients[0].upload(w[0], norm_bound=B, sigma=0.5, round_index=t)
    ctx = session.clients[0].ctx
    scale = session.clients[0].enc.upload_scale
    if how in ("level0", "level2"):
        lvl = 0 if how == "level0" else 2
        ct = ctx.encrypt_plaintext(ctx.encode(np.ones(ctx.slots), scale=scale,
                                              parms_id=ctx.parms_id_at_level(lvl)))
        bad = _blobs(up, [ctx.serialize(ct)])
    elif how in ("other-session", "huge"):
        # well-formed ciphertexts the server cannot tell apart: accepted, then invalid
        if how == "other-session":  # same parameters, another key: decrypts to noise
            other = SecurePFLSession.create(2, CFG)
            o = other.clients[0].upload(w[0], norm_bound=B, sigma=0.5, round_index=t)
            bad = _blobs(up, list(wire.decode(o).blobs))
        else:
            pid = ctx.parms_id_at_level(UPLOAD_LEVEL)
            ct = ctx.encrypt_plaintext(ctx.encode(np.full(ctx.slots, 1e6 + 1e6j),
                                                  scale=scale, parms_id=pid))
            bad = _blobs(up, [ctx.serialize(ct)])
        ups = _uploads(session, w, t)
        ups[0] = bad
        _to_compare(session, ups, t)
        assert not session.server.valid[0] and session.server.valid[1:].all()
        return
    else:  # a 3-polynomial ciphertext (an unrelinearized product)
        c = ctx.deserialize(wire.decode(up).blobs[0])
        bad = _blobs(up, [ctx.serialize(ctx.multiply_lazy(c, c))])
    with pytest.raises(ProtocolError):
        session.server.receive(0, bad, round_index=t, sigma=0.5, norm_bound=B)


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
    t = _ready(session, 9)
    up = session.clients[0].upload(_models(9)[0], norm_bound=B, sigma=0.5, round_index=t)
    with pytest.raises(ProtocolError, match="level"):
        _reveal(session, [[0, 2]], lambda _b: [wire.decode(up).blobs[0]])
    ctx = session.server.ctx
    c = ctx.deserialize(wire.decode(up).blobs[0])
    gram = ctx.serialize(ctx.rescale(ctx.relinearize(ctx.multiply_lazy(c, ctx.conjugate(c)))))
    reply = wire.decode(_reveal(session, [[0, 2]], lambda _b: [gram]))
    assert reply.meta["bits"] in ([0], [1]) and not reply.blobs


def test_reveal_of_another_round_is_refused(session: SecurePFLSession) -> None:
    t = _ready(session, 10)
    old = session.server.reveal_request([(0, 1)])
    _ready(session, 11)
    with pytest.raises(ProtocolError, match="round"):
        session.decryptor.reveal(old)
    with pytest.raises(ProtocolError, match="round"):
        session.decryptor.reveal(_edit(old, round=t + 1000))


# ---------------------------------------------------------------------- results
def test_result_of_an_earlier_round_or_another_client_is_refused(
        session: SecurePFLSession) -> None:
    t = _ready(session, 12)
    sel = type("S", (), {"accepted": tuple(frozenset() for _ in range(K))})
    reqs = session.server.aggregate(sel, 0.5)  # type: ignore[arg-type]
    res0 = session.server.deliver(0, session.decryptor.unmask_for_client(reqs[0]))
    res1 = session.server.deliver(1, session.decryptor.unmask_for_client(reqs[1]))
    with pytest.raises(ProtocolError):  # someone else's result, relabelled
        session.clients[0].finish(_edit(res1, client=0))
    session.clients[0].finish(res0)
    # next round: client 0 uploads again; the server replays round t's result
    t2 = _ready(session, 13)
    with pytest.raises(ProtocolError, match="round"):
        session.clients[0].finish(res0)
    with pytest.raises(ProtocolError):  # relabelled: the sealed boxes are bound to round t
        session.clients[0].finish(_edit(res0, round=t2))
    with pytest.raises(ProtocolError):  # "own" on a valid client's round needs no blobs
        session.clients[0].finish(_edit(res0, round=t2, own=1))
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


def test_rerandomized_replay_with_the_victims_norm_is_not_detected(
        session: SecurePFLSession) -> None:
    """The documented limit (module docstring, "Replayed uploads"): a re-randomized copy of
    client 0's upload with client 0's published norm passes as client 1's own model; its
    Eq. 2 result then mixes client 0's model with its acceptance set's. What it gains is
    measured here so a change of behaviour shows up."""
    w = _models(15)
    t = next(_ROUND)
    ups = _uploads(session, w, t)
    ctx = session.clients[1].ctx
    pid = ctx.parms_id_at_level(UPLOAD_LEVEL)
    scale = session.clients[1].enc.upload_scale
    zero = ctx.encrypt_plaintext(ctx.encode(np.zeros(ctx.slots), scale=scale, parms_id=pid))
    copied = ctx.add(ctx.deserialize(wire.decode(ups[0]).blobs[0]), zero)
    norm0 = wire.decode(ups[0]).meta["norm"]
    ups[1] = _edit(_blobs(ups[1], [ctx.serialize(copied)]), norm=norm0)
    _to_compare(session, ups, t, sigma=0.5, norm_bound=B)
    assert session.server.valid.all()  # not detected
    srv, dec = session.server, session.decryptor

    def oracle(pairs: Sequence[tuple[int, int]]) -> list[bool]:
        return srv.read_bits(dec.reveal(srv.reveal_request(pairs)), pairs)

    sel = efficient_selection(srv.keys(), oracle, neighbours=srv.neighbours())
    s1 = sorted(sel.accepted[1])
    assert 0 in s1  # at distance 0 from client 0: always accepted
    out = _finish_all(session, sel.accepted, alpha=0.5)
    # client 1 receives 0.5 w_0 + 0.5 mean_{S_1} w: half of it is client 0's model (all of
    # it when S_1 = {0})
    np.testing.assert_allclose(out[1], 0.5 * w[0] + 0.5 * w[s1].mean(axis=0), atol=1e-4)


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
    srv, dec, ctx = session.server, session.decryptor, session.server.ctx
    sel = type("S", (), {"accepted": tuple(frozenset() for _ in range(K))})
    req0 = srv.aggregate(sel, 0.5)[0]  # type: ignore[arg-type]
    ct0 = ctx.deserialize(wire.decode(req0).blobs[0])
    # what client 0 opens from the decryptor's sealed box (residues mod q0, mask included
    # as in the ciphertext), and, as the control, the exact decryption
    box = wire.decode(dec.unmask_for_client(req0)).blobs[0]
    opened = open_sealed(session.clients[0]._x, box,  # noqa: SLF001
                         context=_box_context(b"result", dec.session, t, 0, 0))
    p_real = np.frombuffer(opened, dtype="<u8").astype(np.uint64)
    p_exact = plaintext_ntt(dec.ctx.decrypt_plaintext(dec.ctx.deserialize(
        wire.decode(req0).blobs[0])))
    _, _, data = ciphertext_polys(ct0)
    q0 = session.server.enc.q0
    c0, c1 = data[0, 0], data[1, 0]
    inv = np.array([pow(int(x), -1, q0) for x in c1], dtype=object)

    def steal(p: np.ndarray) -> np.ndarray:
        s_ntt = _mulmod((p.astype(object) - c0.astype(object)) % q0, inv, q0)
        # the server brings client 2's upload to level 0 (as Eq. 2 does) and decrypts it
        up2 = srv._uploads[2].cts[0]  # noqa: SLF001
        q = ctx.rescale_prime(up2)
        lvl0 = ctx.rescale(ctx.multiply_plaintext(up2, ctx.encode_constant(
            1.0, scale=float(q), parms_id=up2.parms_id())))
        _, _, d2 = ciphertext_polys(lvl0)
        m = (d2[0, 0].astype(object) + _mulmod(d2[1, 0], s_ntt, q0).astype(object)) % q0
        pt = plaintext_from_ntt(ctx, np.asarray(m, dtype=np.uint64), level=0, scale=lvl0.scale)
        z = ctx.decode_plaintext(pt)[: (D + 1) // 2]
        stolen = np.empty(2 * z.size)
        stolen[0::2], stolen[1::2] = z.real, z.imag
        return stolen[:D] * B

    assert p_real.shape == p_exact.shape and not np.array_equal(p_real, p_exact)
    assert np.linalg.norm(steal(p_exact) - w[2]) < 1e-3 * B  # control: the attack works
    assert np.linalg.norm(steal(p_real) - w[2]) > 1e-2 * B  # re-randomised: it fails
