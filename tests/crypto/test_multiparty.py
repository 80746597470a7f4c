"""N-out-of-N multiparty CKKS: collective keys work in SEAL, decryption needs every share,
malformed shares are refused, and a crafted ciphertext's decryption share gives the key
share away (why protocols must check what they decrypt)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from fedsec.crypto import multiparty as M
from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.ckks_keys import CKKSKeys
from fedsec.crypto.params import get_preset
from fedsec.crypto.rawpoly import secret_key_coeffs
from fedsec.crypto.sealio import galois_element
from fedsec.errors import ProtocolError
from fedsec.protocol import wire
from fedsec.testing.multiparty import crafted_ciphertext, key_share_from_decryption_share

PRESET = get_preset("CKKS_128_N8192_DEPTH2_S40")
STEPS = (1, 4)


def _coeffs(share: M.KeyShare) -> np.ndarray:
    q = share.mp.primes[0]
    c = share.mp.to_coeffs(share._s[:1])[0].astype(object)
    return np.array([int(v) - q if int(v) > q // 2 else int(v) for v in c], dtype=np.int64)


@pytest.fixture(scope="module")
def federation() -> tuple[list[M.KeyShare], CKKSContext, bytes]:
    parties = [M.KeyShare(PRESET) for _ in range(3)]
    seed = os.urandom(M.crs_seed_bytes())
    pk = M.aggregate_public_key(PRESET, seed, [k.public_key_share(seed) for k in parties])
    elts = [galois_element(s, PRESET.poly_modulus_degree) for s in STEPS]
    gk = M.aggregate_galois_keys(PRESET, seed, {g: [k.galois_key_share(seed, g)
                                                    for k in parties] for g in elts})
    rounds = [k.relin_round1(seed) for k in parties]
    sum1 = M.aggregate_relin_round1(PRESET, [b for _, b in rounds])
    rk = M.aggregate_relin_key(PRESET, sum1, [k.relin_round2(st, sum1)
                                              for k, (st, _) in zip(parties, rounds,
                                                                    strict=True)])
    ctx = CKKSContext(CKKSKeys(PRESET, public_key=pk, relin_keys=rk, galois_keys=gk,
                               rotations=STEPS))
    return parties, ctx, seed


def _decrypt(parties: list[M.KeyShare], ctx: CKKSContext, ct: object, k: int) -> np.ndarray:
    shares = [p.decryption_share(ct, smudging=k) for p in parties]
    return M.combine_decryption(ctx, ct, shares).real


def test_ntt_matches_seal() -> None:
    """A key share built from SEAL's own secret key decrypts SEAL's ciphertexts as SEAL's
    decryptor does: the NTT form and the residue layout are SEAL's."""
    ref = CKKSContext.generate(PRESET)
    share = M.KeyShare(PRESET, _coeffs=secret_key_coeffs(ref))
    x = np.linspace(-1, 1, ref.slots)
    ct = ref.encrypt(x)
    ours = M.combine_decryption(ref, ct, [share.decryption_share(ct, smudging=0)]).real
    assert np.abs(ours - ref.decrypt(ct).real).max() < 1e-8
    assert np.abs(ours - x).max() < 1e-8


def test_collective_keys_encrypt_rotate_multiply(federation) -> None:
    parties, ctx, _ = federation
    x = np.linspace(-1, 1, ctx.slots)
    ct = ctx.encrypt(x)
    # public-key encryption under SEAL's own keys reaches ~7e-9 here; sums of shares add
    # a little noise
    assert np.abs(_decrypt(parties, ctx, ct, 0) - x).max() < 1e-7
    for step in STEPS:
        got = _decrypt(parties, ctx, ctx.rotate(ct, step), 0)
        assert np.abs(got - np.roll(x, -step)).max() < 1e-5
    got = _decrypt(parties, ctx, ctx.multiply(ct, ct), 0)
    assert np.abs(got - x * x).max() < 1e-6


def test_smudging_costs_what_it_should(federation) -> None:
    parties, ctx, _ = federation
    x = np.linspace(-1, 1, ctx.slots)
    ct = ctx.encrypt(x)
    err20 = np.abs(_decrypt(parties, ctx, ct, 20) - x).max()
    err30 = np.abs(_decrypt(parties, ctx, ct, 30) - x).max()
    # noise of 2^k per coefficient and party, at scale 2^40: ~2^(k-40) sqrt(n) per slot
    assert 1e-6 < err20 < 1e-3
    assert 1e-3 < err30 < 1.0
    assert M.smudging_bits(10, n=8192, security_bits=40) == 63


def test_every_share_is_needed(federation) -> None:
    parties, ctx, _ = federation
    x = np.linspace(-1, 1, ctx.slots)
    ct = ctx.encrypt(x)
    shares = [p.decryption_share(ct, smudging=0) for p in parties]
    for drop in range(len(parties)):
        partial = shares[:drop] + shares[drop + 1:]
        got = M.combine_decryption(ctx, ct, partial).real
        assert np.abs(got - x).max() > 1e3  # uniformly random, not the plaintext


def test_malformed_shares_are_refused(federation) -> None:
    parties, ctx, seed = federation
    good = parties[0].public_key_share(seed)
    msg = wire.decode(good)
    blob = bytearray(msg.blobs[0])
    blob[:8] = (2 ** 64 - 1).to_bytes(8, "little")  # a residue >= q
    bad = [wire.encode(msg.kind, msg.meta, [bytes(blob)]),
           wire.encode(msg.kind, msg.meta, [msg.blobs[0][:-8]]),
           wire.encode(msg.kind, {"preset": "other"}, msg.blobs),
           wire.encode("mpckks/dec-share", msg.meta, msg.blobs),
           good[:-1], b"", b"FSEC"]
    for b in bad:
        with pytest.raises(ProtocolError):
            M.aggregate_public_key(PRESET, seed, [good, b])
    g = galois_element(1, PRESET.poly_modulus_degree)
    other = galois_element(4, PRESET.poly_modulus_degree)
    with pytest.raises(ProtocolError):  # a share for another rotation
        M.aggregate_galois_keys(PRESET, seed, {g: [parties[0].galois_key_share(seed, other)]})
    ct = ctx.encrypt([0.5])
    low = ctx.mod_switch(ctx.encrypt([0.5]), level=0)
    with pytest.raises(ProtocolError):  # a share computed for a ciphertext at another level
        M.combine_decryption(ctx, ct, [p.decryption_share(low, smudging=0) for p in parties])


def test_crafted_ciphertext_gives_the_key_share_away(federation) -> None:
    """Smudging does not protect a key share from a requester who chose c1."""
    parties, ctx, _ = federation
    k = 40
    constant = 1 << (k + 2)
    ct = crafted_ciphertext(ctx, constant)
    share = parties[1].decryption_share(ct, smudging=k)
    assert np.array_equal(key_share_from_decryption_share(ctx, share, constant),
                          _coeffs(parties[1]))


def test_threshold_decryption_any_t_of_n(federation) -> None:
    """t-out-of-N: every party deals Shamir shares of its key share; any t decrypt, t - 1
    do not, and shares for another set or from a party twice are refused."""
    parties, ctx, _ = federation
    ids, t = [1, 2, 3], 2
    deals = [M.deal_threshold_shares(p, t, ids) for p in parties]
    holders = {i: M.ThresholdKeyShare(PRESET, i, t, [d[i] for d in deals]) for i in ids}
    x = np.linspace(-1, 1, ctx.slots)
    ct = ctx.encrypt(x)
    for group in ([1, 2], [1, 3], [2, 3]):
        shares = [holders[i].decryption_share(ct, smudging=0, participants=group)
                  for i in group]
        got = M.combine_decryption(ctx, ct, shares, participants=group).real
        assert np.abs(got - x).max() < 1e-7
    alone = holders[1].decryption_share(ct, smudging=0, participants=[1, 2])
    with pytest.raises(ProtocolError):  # one share short
        M.combine_decryption(ctx, ct, [alone], participants=[1, 2])
    with pytest.raises(ProtocolError):  # the same party twice
        M.combine_decryption(ctx, ct, [alone, alone], participants=[1, 2])
    other = holders[3].decryption_share(ct, smudging=0, participants=[1, 3])
    with pytest.raises(ProtocolError):  # a share for another set
        M.combine_decryption(ctx, ct, [alone, other], participants=[1, 2])
    with pytest.raises(ProtocolError):  # threshold shares where N-out-of-N ones belong
        M.combine_decryption(ctx, ct, [alone, other])
    with pytest.raises(ValueError):
        holders[1].decryption_share(ct, smudging=0, participants=[2, 3])
    # below the threshold: one holder's Shamir share, used as if it were the secret,
    # decrypts to noise
    mp = M._mp(PRESET)
    c1 = M._ct_data(mp, ct)[1]
    lone = M._pack("mpckks/dec-share", {"preset": PRESET.name, "rows": c1.shape[0]},
                   [mp.mul(c1, holders[1]._sh[:c1.shape[0]])])
    assert np.abs(M.combine_decryption(ctx, ct, [lone]).real - x).max() > 1e3


def test_rogue_key_share_and_the_commitments_that_stop_it(federation) -> None:
    """A party that sees the others' shares first can make the collective key its own and
    decrypt alone; committing to every share before any is revealed stops it."""
    from fedsec.testing.multiparty import rogue_public_key_share

    parties, _, _ = federation
    seed = os.urandom(M.crs_seed_bytes())
    honest = [p.public_key_share(seed) for p in parties[:2]]
    attacker = parties[2]
    rogue = rogue_public_key_share(PRESET, seed, attacker, honest)
    pk = M.aggregate_public_key(PRESET, seed, [*honest, rogue])
    ctx = CKKSContext(CKKSKeys(PRESET, public_key=pk))
    x = np.linspace(-1, 1, ctx.slots)
    ct = ctx.encrypt(x)
    # the attacker decrypts alone with its own key share
    alone = M.combine_decryption(ctx, ct, [attacker.decryption_share(ct, smudging=0)]).real
    assert np.abs(alone - x).max() < 1e-6
    # commit first: the attacker had to commit before it saw the others' shares, so its
    # rogue share (a function of theirs) does not open its commitment
    session = os.urandom(32)
    names = ["a", "b", "c"]
    committed = [*honest, attacker.public_key_share(seed)]
    commitments = {n: M.commit_share(s, sender=n, session=session)
                   for n, s in zip(names, committed, strict=True)}
    revealed = dict(zip(names, [*honest, rogue], strict=True))
    with pytest.raises(ProtocolError, match="'c'"):
        M.open_commitments(revealed, commitments, session=session)
    honest_open = M.open_commitments(dict(zip(names, committed, strict=True)), commitments,
                                     session=session)
    assert honest_open == committed
    with pytest.raises(ProtocolError):  # a commitment of another session, or party missing
        M.open_commitments(dict(zip(names, committed, strict=True)), commitments,
                           session=os.urandom(32))
    with pytest.raises(ProtocolError):
        M.open_commitments(dict(zip(names[:2], committed[:2], strict=True)), commitments,
                           session=session)


def test_known_answer_test_passes_honest_keys_and_catches_a_wrong_share(federation) -> None:
    """Every party computes the same known-answer ciphertext itself; honest keys decrypt
    it to the known values, a wrong Galois share (valid to SEAL) fails the check."""
    from fedsec.crypto.sealio import save

    parties, ctx, seed = federation
    kat = os.urandom(M.crs_seed_bytes())
    a, _ = M.known_answer_ciphertext(ctx, kat)
    b, _ = M.known_answer_ciphertext(ctx, kat)
    assert save(a) == save(b)  # the same bytes for every party: nothing to craft
    shares = [M.known_answer_share(p, ctx, kat, smudging=0) for p in parties]
    assert M.check_known_answer(ctx, kat, shares, tolerance=1e-3) < 1e-3
    # one party's Galois share made with another key: SEAL loads the keys, the test fails
    g = galois_element(STEPS[0], PRESET.poly_modulus_degree)
    g4 = galois_element(STEPS[1], PRESET.poly_modulus_degree)
    stranger = M.KeyShare(PRESET)
    bad = M.aggregate_galois_keys(PRESET, seed, {
        g: [stranger.galois_key_share(seed, g)] + [p.galois_key_share(seed, g)
                                                  for p in parties[1:]],
        g4: [p.galois_key_share(seed, g4) for p in parties]})
    wrong = CKKSContext(CKKSKeys(PRESET, public_key=ctx.keys.public_key,
                                 relin_keys=ctx.keys.relin_keys, galois_keys=bad,
                                 rotations=STEPS))
    shares = [M.known_answer_share(p, wrong, kat, smudging=0) for p in parties]
    with pytest.raises(ProtocolError, match="known-answer"):
        M.check_known_answer(wrong, kat, shares, tolerance=1e-3)


def test_collective_refresh_restores_the_levels(federation) -> None:
    """A product at the last level, refreshed by every party without anyone decrypting
    it, comes back at the top level with the same values and multiplies again."""
    parties, ctx, seed = federation
    x = np.linspace(-1, 1, ctx.slots)
    cube = ctx.multiply(ctx.multiply(ctx.encrypt(x), ctx.encrypt(x)),
                        ctx.mod_switch(ctx.encrypt(x), level=1))
    assert ctx.level_of(cube) == 0
    shares = [M.refresh_share(p, cube, seed, mask_bits=50, smudging=20) for p in parties]
    fresh = M.combine_refresh(ctx, cube, seed, shares)
    assert ctx.level_of(fresh) == ctx.top_level
    assert np.abs(_decrypt(parties, ctx, fresh, 0) - x ** 3).max() < 1e-3
    assert np.abs(_decrypt(parties, ctx, ctx.multiply(fresh, fresh), 0) - x ** 6).max() < 1e-2
    with pytest.raises(ValueError, match="mask_bits"):  # masks that would wrap q0
        M.refresh_share(parties[0], cube, seed, mask_bits=70, smudging=20)
    with pytest.raises(ProtocolError):  # a share for a ciphertext at another level
        M.combine_refresh(ctx, ctx.encrypt(x), seed, shares)
    too_many = [M.refresh_share(parties[0], cube, seed, mask_bits=56, smudging=0)] * 5
    with pytest.raises(ProtocolError, match="wrap"):  # 5 x 2^56 masks against q0 ~ 2^60
        M.combine_refresh(ctx, cube, seed, too_many)
