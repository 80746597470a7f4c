"""Additive sharing modulo a BFV prime and 2^64: exact reconstruction, wrapping shares,
fixed-point overflow refused (never wrapped)."""

from __future__ import annotations

import numpy as np
import pytest

from fedsec.crypto import sharing as sh
from fedsec.crypto.drbg import SeededRandomSource

T = 36028797018652673  # the 55-bit batching prime SecSV uses (N = 8192)


@pytest.mark.parametrize("q", [T, sh.RING64, 65537])
def test_share_reconstruct_exact(q: int) -> None:
    half = min(q // 2, 1 << 62)
    rng = np.random.default_rng(0)
    ints = rng.integers(-half + 1, half, size=5000, dtype=np.int64)
    ints[:4] = [0, 1, -1, half - 1]
    a, b = sh.share(sh.to_residues(ints, q), q)
    np.testing.assert_array_equal(sh.reconstruct(a, b, q), ints)
    if q != sh.RING64:
        assert int(a.max()) < q and int(b.max()) < q


def test_wrapping_share_reconstructs_exactly() -> None:
    """The authors' failure case: a share whose sum with the other wraps past the modulus.

    Their code adds float128 shares of 2^128 and takes "mod p"; here every wrap is integer
    arithmetic. Force the worst cases: first share q-1 (the sum wraps for every x >= 1) and
    shares just below q on both sides."""
    x = np.array([1, 7, -5, 2**40, -(2**40), (T - 1) // 2, -((T - 1) // 2)], dtype=np.int64)
    res = sh.to_residues(x, T)
    first = np.full(x.shape, T - 1, dtype=np.uint64)
    second = sh.sub_mod(res, first, T)
    assert np.all(first.astype(object) + second.astype(object) >= T)  # every sum wraps
    np.testing.assert_array_equal(sh.reconstruct(first, second, T), x)
    # The float route (shares of 2^128 in long double, 64-bit mantissa) loses it:
    two128 = np.longdouble(2.0) ** 128
    r = np.longdouble(2**128 - 2**70)  # a share near the modulus
    other = np.fmod(np.longdouble(7.0) - r + two128, two128)
    assert np.fmod(r + other, two128) != 7  # what exact integers give


def test_shares_are_uniform_and_independent_of_the_secret() -> None:
    q = 1009
    zeros = sh.share(np.zeros(20000, dtype=np.uint64), q)[1]
    ones = sh.share(np.full(20000, 500, dtype=np.uint64), q)[1]
    for s in (zeros, ones):
        counts = np.bincount(s.astype(np.int64), minlength=q)
        assert counts.min() > 0 and counts.max() < 60  # ~19.8 per residue
    assert abs(float(zeros.mean()) - float(ones.mean())) < 10


def test_shares_use_the_given_cryptographic_source() -> None:
    src1, src2 = SeededRandomSource(b"\x01" * 32, b"t"), SeededRandomSource(b"\x01" * 32, b"t")
    v = np.arange(10, dtype=np.uint64)
    np.testing.assert_array_equal(sh.share(v, T, src1)[0], sh.share(v, T, src2)[0])
    a1, _ = sh.share(v, T)
    a2, _ = sh.share(v, T)
    assert not np.array_equal(a1, a2)  # fresh OS randomness


def test_uniform_mod_above_2_62() -> None:
    q = (1 << 62) + 135
    r = sh.uniform_mod(q, 4000)
    assert int(r.max()) < q and int(r.max()) > 1 << 61


def test_fixed_point_roundtrip_and_overflow() -> None:
    x = np.array([0.5, -1.25, 3.0, -1e-6])
    v = sh.encode_fixed(x, 20, T)
    np.testing.assert_allclose(sh.decode_fixed(v, 20, T), x, atol=2**-21)
    with pytest.raises(sh.FixedPointOverflow):
        sh.encode_fixed([2.0**40], 16, T)  # 2^56 > t/2
    with pytest.raises(ValueError, match="finite"):
        sh.encode_fixed([np.nan], 16, T)


def test_argument_checks() -> None:
    with pytest.raises(ValueError, match="residues"):
        sh.share(np.array([T], dtype=np.uint64), T)
    with pytest.raises(ValueError, match="modulus"):
        sh.share(np.zeros(2, dtype=np.uint64), 1)
    with pytest.raises(TypeError, match="modulus"):
        sh.share(np.zeros(2, dtype=np.uint64), 2.5)  # type: ignore[arg-type]


def test_ring64_arithmetic_wraps_exactly() -> None:
    a = np.array([2**63 + 5], dtype=np.uint64)
    b = np.array([2**63 + 7], dtype=np.uint64)
    assert int(sh.add_mod(a, b, sh.RING64)[0]) == 12
    assert sh.reconstruct(a, b, sh.RING64)[0] == 12
