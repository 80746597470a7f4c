"""The CKKS layer against numpy, its presets, and the secret key never leaving a party.

Precision is stated in decimal digits: ``assert_digits(x, ref, d)`` requires
``max|x - ref| <= 10**-d``.
"""

from __future__ import annotations

import os
import struct
import tempfile

import numpy as np
import pytest
import tenseal.sealapi as seal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedsec.auc.fhauc import FHAUCAggregator, FHAUCConfig, FHAUCParty
from fedsec.crypto.ckks import CKKSContext, galois_element
from fedsec.crypto.identity import Identity, Roster
from fedsec.crypto.keysetup import KeySetupAggregator, KeySetupParty, KeySpec
from fedsec.crypto.params import DEFAULT_PRESET, PRESETS, CKKSParams, get_preset
from fedsec.errors import ProtocolError
from fedsec.protocol import wire

TEST_PRESET = "INSECURE_TEST_N4096_DEPTH1"
FHAUC_TEST_PRESET = "INSECURE_TEST_N4096_DEPTH1_S39"  # FHAUC's chain (rescaled masks)
SLOTS = 2048


def assert_digits(x, ref, digits):
    err = float(np.max(np.abs(np.asarray(x) - np.asarray(ref))))
    assert err <= 10.0 ** -digits, f"error {err:.3g} exceeds 1e-{digits}"


@pytest.fixture(scope="module")
def vecs():
    g = np.random.default_rng(7)
    return g.uniform(-1, 1, SLOTS), g.uniform(-1, 1, SLOTS)


# ---------------------------------------------------------------- round trips
def test_symmetric_seeded_round_trip_12_digits(ckks, vecs):
    x, _ = vecs
    blob = ckks.encrypt_bytes(x)
    ct = ckks.deserialize(blob, at_top=True, scale=ckks.scale)
    out = ckks.decrypt(ct)
    assert_digits(out.real, x, 11)
    assert_digits(out.imag, 0.0, 11)


def test_seeded_ciphertext_is_about_half_size(ckks, vecs):
    x, _ = vecs
    seeded = ckks.encrypt_bytes(x)
    full = ckks.serialize(ckks.encrypt(x))
    assert len(seeded) < 0.55 * len(full)


def test_public_key_encryption_round_trip(ckks, ckks_public, vecs):
    x, _ = vecs
    assert not ckks_public.has_secret_key
    blob = ckks_public.encrypt_bytes(x)  # no secret key: ordinary public-key ciphertext
    out = ckks.decrypt(ckks.deserialize(blob))
    assert_digits(out.real, x, 10)
    with pytest.raises(ValueError, match="secret key"):
        ckks_public.decrypt(ckks.deserialize(blob))


def test_complex_and_short_vectors_are_zero_padded(ckks):
    z = np.array([1 + 2j, -0.5j, 3.25])
    out = ckks.decrypt(ckks.encrypt(z))
    assert_digits(out[:3], z, 10)
    assert_digits(out[3:], 0.0, 10)


@pytest.mark.parametrize("bad", [np.zeros(SLOTS + 1), np.zeros((2, 2)), [np.nan], [np.inf]])
def test_encrypt_rejects_bad_vectors(ckks, bad):
    with pytest.raises(ValueError):
        ckks.encrypt(bad)


# ---------------------------------------------------------------- arithmetic vs numpy
def test_add_sub_negate(ckks_public, ckks, vecs):
    x, y = vecs
    a, b = ckks_public.encrypt(x), ckks_public.encrypt(y)
    assert_digits(ckks.decrypt(ckks_public.add(a, b)).real, x + y, 10)
    assert_digits(ckks.decrypt(ckks_public.sub(a, b)).real, x - y, 10)
    assert_digits(ckks.decrypt(ckks_public.negate(a)).real, -x, 10)
    assert_digits(ckks.decrypt(ckks_public.add_many([a, b, a])).real, 2 * x + y, 10)
    assert_digits(ckks.decrypt(ckks_public.add_many([a])).real, x, 10)
    assert_digits(ckks.decrypt(ckks_public.add_plain(a, y)).real, x + y, 10)
    with pytest.raises(ValueError):
        ckks_public.add_many([])


def test_multiply_square_and_plain(ckks_public, ckks, vecs):
    x, y = vecs
    a, b = ckks_public.encrypt(x), ckks_public.encrypt(y)
    prod = ckks_public.multiply(a, b)
    assert ckks_public.level_of(prod) == ckks_public.level_of(a) - 1
    assert_digits(ckks.decrypt(prod).real, x * y, 9)
    assert_digits(ckks.decrypt(ckks_public.square(a)).real, x * x, 9)
    assert_digits(ckks.decrypt(ckks_public.multiply_plain(a, y, rescale=True)).real, x * y, 9)
    # complex products
    z, w = x + 1j * y, y - 0.5j * x
    zz = ckks_public.multiply(ckks_public.encrypt(z), ckks_public.encrypt(w))
    assert_digits(ckks.decrypt(zz), z * w, 9)


def test_multiply_aligns_levels(ckks_public, ckks, vecs):
    x, y = vecs
    # one level down
    a = ckks_public.multiply_plain(ckks_public.encrypt(x), np.ones(SLOTS), rescale=True)
    b = ckks_public.encrypt(y)
    assert ckks_public.level_of(a) == ckks_public.level_of(b) - 1
    out = ckks_public.multiply(a, b)
    assert ckks_public.level_of(out) == ckks_public.level_of(a) - 1
    assert_digits(ckks.decrypt(out).real, x * y, 8)
    assert_digits(ckks.decrypt(ckks_public.multiply(b, a)).real, x * y, 8)


def test_multiply_needs_relinearization_keys(ckks, vecs):
    no_rk = CKKSContext.generate(TEST_PRESET, relin=False, allow_insecure=True)
    a = no_rk.encrypt(vecs[0])
    with pytest.raises(ValueError, match="relinearization"):
        no_rk.multiply(a, a)


def test_rotate_left_and_negative_steps(ckks_public, ckks, vecs):
    x, _ = vecs
    a = ckks_public.encrypt(x)
    for step in (1, 2, 64, 1024):
        assert_digits(ckks.decrypt(ckks_public.rotate(a, step)).real, np.roll(x, -step), 10)
    # -1024 == +1024 modulo 2048 slots; 0 is a copy
    assert_digits(ckks.decrypt(ckks_public.rotate(a, -1024)).real, np.roll(x, 1024), 10)
    assert_digits(ckks.decrypt(ckks_public.rotate(a, 0)).real, x, 10)


def test_rotation_without_a_key_raises(ckks_public, vecs):
    a = ckks_public.encrypt(vecs[0])
    with pytest.raises(ValueError, match="no Galois key for a rotation by 3"):
        ckks_public.rotate(a, 3)
    bare = CKKSContext.generate(TEST_PRESET, allow_insecure=True)
    b = bare.encrypt(vecs[0])
    with pytest.raises(ValueError, match="Galois key"):
        bare.rotate(b, 1)
    with pytest.raises(ValueError, match="conjugation"):
        bare.conjugate(b)
    with pytest.raises(ValueError, match="Galois key"):
        bare.sum_slots(b)


def test_only_requested_galois_keys_exist():
    ctx = CKKSContext.generate(TEST_PRESET, rotations=[1, 5, 5, SLOTS + 1, 0],
                               allow_insecure=True)
    assert ctx.rotations == (1, 5)
    pub = CKKSContext.from_public_bytes(ctx.public_bytes(), allow_insecure=True)
    assert pub.rotations == (1, 5) and not pub.conjugate_key
    with pytest.raises(ValueError):
        pub.rotate(pub.encrypt([1.0]), 2)
    # fewer keys, fewer bytes
    big = CKKSContext.generate(TEST_PRESET, rotations=CKKSContext.sum_rotations(SLOTS),
                               allow_insecure=True)
    assert len(ctx.public_bytes()) < len(big.public_bytes())


def test_galois_element():
    assert galois_element(1, 4096) == 3
    assert galois_element(2, 4096) == 9
    assert galois_element(SLOTS + 1, 4096) == 3
    with pytest.raises(ValueError):
        galois_element(SLOTS, 4096)


def test_conjugate(ckks_public, ckks, vecs):
    x, y = vecs
    z = x + 1j * y
    out = ckks.decrypt(ckks_public.conjugate(ckks_public.encrypt(z)))
    assert_digits(out, np.conj(z), 10)


def test_sum_slots_stride_1_and_2(ckks_public, ckks, vecs):
    x, y = vecs
    z = x + 1j * y
    a = ckks_public.encrypt(z)
    s1 = ckks.decrypt(ckks_public.sum_slots(a))
    assert_digits(s1, np.full(SLOTS, z.sum()), 9)
    s2 = ckks.decrypt(ckks_public.sum_slots(a, stride=2))
    even, odd = z[0::2].sum(), z[1::2].sum()
    assert_digits(s2[0::2], np.full(SLOTS // 2, even), 9)
    assert_digits(s2[1::2], np.full(SLOTS // 2, odd), 9)
    assert CKKSContext.sum_rotations(SLOTS, 2) == [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    with pytest.raises(ValueError, match="power of two"):
        ckks_public.sum_slots(a, stride=3)


def test_sum_slots_of_short_vector(ckks_public, ckks):
    v = np.arange(1.0, 101.0)
    out = ckks.decrypt(ckks_public.sum_slots(ckks_public.encrypt(v))).real
    assert_digits(out, np.full(SLOTS, 5050.0), 7)


@pytest.fixture(scope="module")
def depth2():
    return CKKSContext.generate("INSECURE_TEST_N4096_DEPTH2", allow_insecure=True)


def test_polyval_degree2_on_depth2(depth2, vecs):
    x, _ = vecs
    coeffs = [0.5, -1.0, 0.25]
    out = depth2.decrypt(depth2.polyval(depth2.encrypt(x), coeffs)).real
    # 40-bit scale: ~6 digits
    assert_digits(out, np.polynomial.polynomial.polyval(x, coeffs), 6)


def test_polyval_checks_depth(depth2, vecs):
    ct = depth2.encrypt(vecs[0])
    with pytest.raises(ValueError, match="needs depth 3"):
        depth2.polyval(ct, [0.0, 1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="degree >= 1"):
        depth2.polyval(ct, [1.0, 0.0])


def test_polyval_degree7_on_papers_preset(vecs):
    ctx = CKKSContext.generate("CKKS_128_N16384_DEPTH4")
    x = np.resize(vecs[0], ctx.slots)
    coeffs = [0.1, 1.0, -0.5, 0.25, 0.0, 0.1, 0.2, -0.3]
    out = ctx.decrypt(ctx.polyval(ctx.encrypt(x), coeffs)).real
    assert_digits(out, np.polynomial.polynomial.polyval(x, coeffs), 6)


# ---------------------------------------------------------------- exact constants
@pytest.mark.parametrize("const", [0.5, 0.75, -0.375, 12345 / 2**14, 3.0])
def test_dyadic_constants_multiply_exactly(ckks, vecs, const):
    """``value * scale`` integer: the constant polynomial is exact, so the product
    decrypts to ``const`` times the decryption of the input up to float rounding only."""
    x, _ = vecs
    ct = ckks.encrypt(x)
    before = ckks.decrypt(ct)
    out = ckks.multiply_const(ct, const, scale=2.0 ** 16)
    assert out.scale == ct.scale * 2.0 ** 16
    after = ckks.decrypt(out)
    np.testing.assert_allclose(after, const * before, rtol=0, atol=1e-13)


def test_non_dyadic_constant_is_rounded_at_its_scale(ckks, vecs):
    """Contrast: 0.3 * 2^16 is not an integer; the encoded constant is 19661/2^16."""
    x, _ = vecs
    ct = ckks.encrypt(x)
    before = ckks.decrypt(ct).real
    after = ckks.decrypt(ckks.multiply_const(ct, 0.3, scale=2.0 ** 16)).real
    np.testing.assert_allclose(after, (19661 / 2**16) * before, rtol=0, atol=1e-13)
    assert np.max(np.abs(after - 0.3 * before)) > 1e-7


def test_imaginary_constant(ckks, vecs):
    x, y = vecs
    ct = ckks.encrypt(x + 1j * y)
    out = ckks.decrypt(ckks.multiply_const(ct, 0.5j, scale=2.0 ** 16))
    assert_digits(out, 0.5j * (x + 1j * y), 4)


def test_rescaling_by_the_constants_own_prime_keeps_the_scale(ckks, vecs):
    """A constant encoded at exactly the prime the next rescale divides by: after the
    rescale the scale is unchanged, one level is gone, and the value is scaled."""
    x, _ = vecs
    ct = ckks.encrypt(x)
    primes = ckks.level_primes(ct)
    assert primes == ckks.params.primes()[:-1] == ckks.level_primes(ckks.top_parms_id)
    q = ckks.rescale_prime(ct)
    assert q == primes[-1]
    out = ckks.rescale(ckks.multiply_const(ct, 0.7, scale=float(q)))
    assert out.scale == ct.scale
    assert ckks.level_primes(out) == primes[:-1]
    assert_digits(ckks.decrypt(out).real, 0.7 * x, 8)
    last = ckks.rescale(ckks.multiply_const(out, 1.0, scale=float(ckks.rescale_prime(out))))
    assert len(ckks.level_primes(last)) == 1
    with pytest.raises(ValueError, match="last level"):
        ckks.rescale_prime(last)
    with pytest.raises(ValueError, match="last level"):
        ckks.rescale(last)


# ---------------------------------------------------------------- presets
def test_presets_state_security_and_support():
    for name, p in PRESETS.items():
        assert p.check() is p
        assert p.supports
        assert p.insecure == name.startswith("INSECURE_TEST_")
        if not p.insecure:
            assert p.security_bits == 128
            limit = seal.CoeffModulus.MaxBitCount(p.poly_modulus_degree,
                                                  seal.SEC_LEVEL_TYPE.TC128)
            assert p.total_modulus_bits <= limit
    assert DEFAULT_PRESET == "CKKS_128_N8192_DEPTH1_S39"
    paper = PRESETS["CKKS_128_N16384_DEPTH4"]
    assert (paper.poly_modulus_degree, paper.scale_bits, paper.depth) == (16384, 50, 4)


def test_check_rejects_too_large_modulus_claiming_128_bits():
    p = CKKSParams("CKKS_128_BOGUS", 8192, (60, 60, 60, 40), 40, 128, "too big")
    assert p.total_modulus_bits == 220 > 218
    with pytest.raises(ValueError, match="218-bit limit"):
        p.check()
    # exactly at the limit is fine
    CKKSParams("CKKS_128_EDGE", 8192, (60, 60, 58, 40), 40, 128, "edge").check()
    with pytest.raises(ValueError):
        CKKSContext.generate(p)


@pytest.mark.parametrize("params, match", [
    (CKKSParams("X", 3000, (40, 40), 40, 128, ""), "power of two"),
    (CKKSParams("X", 8192, (40,), 40, 128, ""), "special prime"),
    (CKKSParams("X", 8192, (40, 61), 40, 128, ""), "20..60"),
    (CKKSParams("X", 8192, (40, 40), 61, 128, ""), "scale_bits"),
    (CKKSParams("INSECURE_TEST_X", 8192, (40, 40), 40, 128, ""), "cannot claim"),
    (CKKSParams("WEAK", 4096, (60, 60, 60), 40, 0, ""), "INSECURE_TEST_"),
])
def test_check_rejects_bad_literals(params, match):
    with pytest.raises(ValueError, match=match):
        params.check()


def test_insecure_presets_unreachable_without_opt_in(ckks):
    with pytest.raises(ValueError, match="allow_insecure"):
        get_preset(TEST_PRESET)
    with pytest.raises(ValueError, match="allow_insecure"):
        CKKSContext.generate(TEST_PRESET)
    with pytest.raises(ValueError, match="allow_insecure"):
        CKKSContext.generate(PRESETS[TEST_PRESET])
    with pytest.raises(ProtocolError):
        CKKSContext.from_public_bytes(ckks.public_bytes())
    with pytest.raises(ProtocolError):
        CKKSContext.from_secret_bytes(ckks.secret_bytes())
    with pytest.raises(ValueError):
        FHAUCConfig.create(10, preset=TEST_PRESET)
    with pytest.raises(ValueError):
        KeySpec.create(TEST_PRESET, [], False)
    # the error for an unknown name lists secure presets only
    with pytest.raises(ValueError) as info:
        get_preset("nope")
    assert "INSECURE" not in str(info.value)
    with pytest.raises(TypeError):
        get_preset(8192)


# ---------------------------------------------------------------- the secret key stays home
def _secret_key_material(ctx: CKKSContext) -> tuple[bytes, bytes]:
    """(SEAL's compressed save of the secret key, the raw secret polynomial as uint64 LE).

    Obtained through the public API: ``secret_bytes()`` framed blob -> SEAL ``SecretKey``.
    SEAL keeps the key in NTT/RNS form, ``n * (primes)`` 64-bit words of high entropy; an
    uncompressed SEAL save would contain exactly these bytes.
    """
    saved = wire.decode(ctx.secret_bytes(), expect="ckks/secret").blobs[0]
    params = ctx.params
    p = seal.EncryptionParameters(seal.SCHEME_TYPE.CKKS)
    p.set_poly_modulus_degree(params.poly_modulus_degree)
    p.set_coeff_modulus(seal.CoeffModulus.Create(params.poly_modulus_degree,
                                                 list(params.coeff_mod_bit_sizes)))
    sctx = seal.SEALContext(p, True, seal.SEC_LEVEL_TYPE.NONE)
    sk = seal.SecretKey()
    fd, path = tempfile.mkstemp()
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(saved)
        sk.load(sctx, path)
    finally:
        os.unlink(path)
    pt = sk.data()
    raw = struct.pack(f"<{pt.coeff_count()}Q", *(pt[i] for i in range(pt.coeff_count())))
    assert len(set(raw[i:i + 8] for i in range(0, len(raw), 8))) > 0.99 * pt.coeff_count()
    return saved, raw


def _contains_chunk(needle: bytes, haystack: bytes, width: int = 16) -> bool:
    """Does any width-byte aligned chunk of ``needle`` occur anywhere in ``haystack``?

    Any copy of >= 2*width contiguous bytes of ``needle`` is caught. Vectorized: the first
    8 bytes of every chunk are looked up at every byte offset of the haystack.
    """
    chunks = {needle[i:i + width] for i in range(0, len(needle) - width + 1, width)}
    heads = np.array([int.from_bytes(c[:8], "little") for c in chunks], dtype=np.uint64)
    mask = np.uint64((1 << 24) - 1)
    table = np.zeros(1 << 24, dtype=bool)  # hash filter on 24 bits of each chunk's head
    table[heads & mask] = True
    for a in range(8):
        m = (len(haystack) - a) // 8
        if m <= 0:
            continue
        words = np.frombuffer(haystack, dtype="<u8", count=m, offset=a)
        for h in np.nonzero(table[words & mask])[0]:
            pos = a + 8 * int(h)
            if haystack[pos:pos + width] in chunks:
                return True
    return False


def _assert_no_secret(ctx: CKKSContext, *blobs: bytes) -> None:
    saved, raw = _secret_key_material(ctx)
    body = saved[32:]  # skip SEAL/zstd headers, which any saved object shares
    for blob in blobs:
        assert not _contains_chunk(raw, blob), "raw secret polynomial found"
        assert not _contains_chunk(body, blob), "serialized secret key found"
        assert saved not in blob


def test_leak_detector_finds_the_secret_key(ckks):
    """Positive control: the search does find the key where it is."""
    saved, raw = _secret_key_material(ckks)
    assert _contains_chunk(saved[32:], ckks.secret_bytes())
    assert _contains_chunk(raw, b"xx" + raw[1000:1040] + b"yy")  # any unaligned copy
    assert not _contains_chunk(raw, raw[1000:1020])  # too short to be caught, by design


def test_public_bytes_never_contain_the_secret_key(ckks):
    _assert_no_secret(ckks, ckks.public_bytes())
    # also when the public blobs are rebuilt from the key objects (loaded context)
    pub = CKKSContext.from_public_bytes(ckks.public_bytes(), allow_insecure=True)
    assert not pub.has_secret_key
    with pytest.raises(ValueError, match="no secret key"):
        pub.secret_bytes()
    _assert_no_secret(ckks, pub.public_bytes())


def test_public_bytes_of_secure_default_preset_never_contain_the_secret_key():
    cfg = FHAUCConfig.create(100)
    ctx = CKKSContext.generate(DEFAULT_PRESET, rotations=cfg.rotations(), conjugate=True)
    _assert_no_secret(ctx, ctx.public_bytes())


def test_no_byte_the_aggregator_receives_contains_the_secret_key():
    """A whole run played by hand: hellos, the key offer, submissions."""
    names = ["a", "b", "c"]
    cfg = FHAUCConfig.create(50, preset=FHAUC_TEST_PRESET, allow_insecure=True)
    identities = [Identity(n) for n in names]
    roster = Roster.of(identities)
    parties = [KeySetupParty(i, roster, cfg.key_spec()) for i in identities]
    agg = KeySetupAggregator(roster, cfg.key_spec())
    received: list[bytes] = [p.hello() for p in parties]
    holder, request = agg.request(received)
    offer = parties[holder].offer(request)
    received.append(offer)
    confirms = [p.receive(d) for p, d in zip(parties, agg.accept(offer), strict=True)]
    received += confirms
    keys = [p.finish(agg.confirm(confirms)) for p in parties]
    g = np.random.default_rng(3)
    roles = [FHAUCParty(g.integers(0, 2, 40), g.random(40), keys=k, config=cfg) for k in keys]
    subs = [r.submit() for r in roles]
    received += subs
    assert agg.context is not None
    out = FHAUCAggregator(agg.context, cfg, names=names, session=agg.session).aggregate(subs)
    assert 0.0 <= roles[0].finalize(out) <= 1.0
    # every party holds the same secret key (tests/crypto/test_keys.py); search for it in
    # every message, and across message boundaries
    sk_blobs = {wire.decode(k.context.secret_bytes()).blobs[0] for k in keys}
    assert len(sk_blobs) == 1
    _assert_no_secret(keys[0].context, *received)
    _assert_no_secret(keys[0].context, b"".join(received))


# ---------------------------------------------------------------- deserialization
def test_deserialize_checks_level_and_scale(ckks, vecs):
    x, _ = vecs
    fresh = ckks.encrypt_bytes(x)
    ckks.deserialize(fresh, at_top=True, scale=ckks.scale)
    lower = ckks.serialize(ckks.multiply_plain(ckks.encrypt(x), x, rescale=True))
    with pytest.raises(ProtocolError, match="top modulus level"):
        ckks.deserialize(lower, at_top=True)
    other_scale = ckks.encrypt_bytes(x, scale=2.0 ** 40)
    with pytest.raises(ProtocolError, match="scale"):
        ckks.deserialize(other_scale, scale=ckks.scale)


def test_deserialize_rejects_unrelinearized_ciphertexts(ckks, vecs):
    """A size-3 ciphertext (product without relinearization) is not a valid message."""
    params = ckks.params
    p = seal.EncryptionParameters(seal.SCHEME_TYPE.CKKS)
    p.set_poly_modulus_degree(params.poly_modulus_degree)
    p.set_coeff_modulus(seal.CoeffModulus.Create(params.poly_modulus_degree,
                                                 list(params.coeff_mod_bit_sizes)))
    evaluator = seal.Evaluator(seal.SEALContext(p, True, seal.SEC_LEVEL_TYPE.NONE))
    a = ckks.encrypt(vecs[0])
    three = seal.Ciphertext()
    evaluator.multiply(a, a, three)
    assert three.size() == 3
    with pytest.raises(ProtocolError, match="3 polynomials"):
        ckks.deserialize(ckks.serialize(three))


@pytest.mark.parametrize("garbage", [b"", b"\x00", b"hello world" * 10, os.urandom(4096),
                                     b"^\xa1\x10\x04" + b"\xff" * 60])
def test_deserialize_rejects_garbage(ckks, garbage):
    with pytest.raises(ProtocolError):
        ckks.deserialize(garbage)


def test_deserialize_rejects_truncations(ckks, vecs):
    blob = ckks.encrypt_bytes(vecs[0])
    cuts = list(range(0, 80)) + list(range(80, len(blob), max(1, len(blob) // 40)))
    for n in cuts:
        with pytest.raises(ProtocolError):
            ckks.deserialize(blob[:n])


@pytest.mark.parametrize("other", ["INSECURE_TEST_N4096_DEPTH2", "CKKS_128_N8192_DEPTH1"])
def test_deserialize_rejects_foreign_parameters(ckks, other):
    foreign = CKKSContext.generate(other, allow_insecure=True)
    for blob in (foreign.encrypt_bytes([1.0, 2.0]),
                 foreign.serialize(foreign.encrypt([1.0, 2.0]))):
        with pytest.raises(ProtocolError):
            ckks.deserialize(blob)


_HEADER_FUZZ_BLOB = CKKSContext.generate(TEST_PRESET, allow_insecure=True).encrypt_bytes(
    [0.25, 0.5])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(st.tuples(st.integers(0, 63), st.integers(0, 255)), min_size=1,
                      max_size=4))
def test_corrupted_headers_raise_protocol_error_or_load(ckks, edits):
    """Random edits of the SEAL/zstd header: a clean ProtocolError or a ciphertext of the
    right shape, never a crash or another exception."""
    blob = bytearray(_HEADER_FUZZ_BLOB)
    for pos, val in edits:
        blob[pos] = val
    try:
        ct = ckks.deserialize(bytes(blob))
    except ProtocolError:
        return
    assert ct.size() == 2


def test_loading_public_material_rejects_garbage(ckks):
    good = wire.decode(ckks.public_bytes(), expect="ckks/public")
    for blobs in ([b"junk", b"", b""], [good.blobs[0][:100], b"", b""], [b""] * 2):
        with pytest.raises(ProtocolError):
            CKKSContext.from_public_bytes(wire.encode("ckks/public", good.meta, blobs),
                                          allow_insecure=True)
    meta = dict(good.meta, n=8192)
    with pytest.raises(ProtocolError, match="do not match"):
        CKKSContext.from_public_bytes(wire.encode("ckks/public", meta, good.blobs),
                                      allow_insecure=True)
    with pytest.raises(ProtocolError):
        CKKSContext.from_public_bytes(ckks.secret_bytes(), allow_insecure=True)
    with pytest.raises(ProtocolError):
        CKKSContext.from_secret_bytes(ckks.public_bytes(), allow_insecure=True)


@pytest.mark.parametrize("field, value", [("rotations", ["x"]), ("rotations", None),
                                          ("primes", 5)])
def test_malformed_public_metadata_raises_protocol_error(ckks, field, value):
    good = wire.decode(ckks.public_bytes(), expect="ckks/public")
    forged = wire.encode("ckks/public", dict(good.meta, **{field: value}), good.blobs)
    with pytest.raises(ProtocolError):
        CKKSContext.from_public_bytes(forged, allow_insecure=True)
