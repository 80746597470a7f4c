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


@pytest.mark.parametrize("q", [T, sh.LABEL_PRIME, 65537, (1 << 62) - 57, sh.RING64])
def test_mul_mod_exact(q: int) -> None:
    src = SeededRandomSource(b"\x01" * 32, b"test/mul_mod")
    a, b = sh.uniform_mod(q, 4000, src), sh.uniform_mod(q, 4000, src)
    top = q - 1 if q != sh.RING64 else (1 << 64) - 1
    edge = np.array([0, 1, 2, top, top - 1, (1 << 32) - 1, 1 << 32, (1 << 32) + 1],
                    dtype=np.uint64) % np.uint64(q) if q != sh.RING64 else np.array(
        [0, 1, 2, top, top - 1, (1 << 32) - 1, 1 << 32], dtype=np.uint64)
    a = np.concatenate([a, np.repeat(edge, len(edge))])
    b = np.concatenate([b, np.tile(edge, len(edge))])
    got = sh.mul_mod(a, b, q)
    want = [int(x) * int(y) % q for x, y in zip(a, b, strict=True)]
    assert [int(v) for v in got] == want
    if q != sh.RING64:
        with pytest.raises(ValueError):
            sh.mul_mod(a, b, 1 << 62 | 1)


@pytest.mark.parametrize("q", [T, sh.LABEL_PRIME])
def test_zero_test_opens_only_whether_equal(q: int) -> None:
    """P's opened value is 0 exactly where the prediction equals the label; otherwise it
    is ``r·(ŷ − y)`` with a fresh uniform non-zero ``r``: distinct values spread over the
    field whatever ``ŷ − y`` is. A's opened ``f = y − b`` is uniform too."""
    n, classes = 20000, 4
    src = SeededRandomSource(b"\x02" * 32, b"test/zero-test")
    y = src.integers(0, classes, n).astype(np.uint64)
    pred = src.integers(0, classes, n).astype(np.uint64)
    pred[:100] = y[:100]
    y_p, y_a = sh.share(y, q, src)
    (b_p, g_p), (r, b_a, g_a) = sh.zero_test_deal(pred, q, src)
    assert int(r.min()) >= 1
    f_p = sh.zero_test_mask(y_p, b_p, q)
    z_a = sh.zero_test_respond(f_p, y_a, r, b_a, g_a, q)
    np.testing.assert_array_equal(sh.zero_test_open(g_p, z_a, q), pred == y)
    opened = sh.centre(sh.add_mod(g_p, z_a, q), q)
    wrong = opened[pred != y]
    assert len(np.unique(wrong)) == len(wrong)
    assert int((np.abs(wrong) < 1 << 32).sum()) == 0  # no small error, no sign pattern
    delta = pred.astype(np.int64) - y.astype(np.int64)
    for d in (-3, -1, 1, 2):  # the same spread whatever the error (up to sampling)
        pos = float((opened[delta == d] > 0).mean())
        assert 0.45 < pos < 0.55, (d, pos)
    f = sh.centre(sh.sub_mod(sh.add_mod(f_p, y_a, q), b_a, q), q)
    assert int((np.abs(f) < 1 << 32).sum()) == 0
    # a coalition axis: one b per sample, a fresh r per (coalition, sample)
    preds = np.stack([pred, y, (y + np.uint64(1)) % np.uint64(classes)])
    (b_p, g_p), (r, b_a, g_a) = sh.zero_test_deal(preds, q, src)
    assert b_p.shape == (n,) and g_p.shape == r.shape == preds.shape
    z_a = sh.zero_test_respond(sh.zero_test_mask(y_p, b_p, q), y_a, r, b_a, g_a, q)
    np.testing.assert_array_equal(sh.zero_test_open(g_p, z_a, q), preds == y[None, :])
    with pytest.raises(ValueError):
        sh.zero_test_deal(pred, sh.RING64)
    with pytest.raises(ValueError):
        sh.zero_test_deal(np.full(3, q, dtype=np.uint64), q)


def test_zero_test_void_samples_open_uniform() -> None:
    """Samples without a prediction (SampleSkip's skipped ones): P's opened value is
    uniform whatever the label -- a placeholder prediction 0 would tell P whether y = 0."""
    n, q = 4000, T
    src = SeededRandomSource(b"\x03" * 32, b"test/zero-test-void")
    y = src.integers(0, 2, n).astype(np.uint64)
    pred = np.zeros(n, dtype=np.uint64)
    void = np.zeros(n, dtype=bool)
    void[: n // 2] = True
    y_p, y_a = sh.share(y, q, src)
    (b_p, g_p), (r, b_a, g_a) = sh.zero_test_deal(pred, q, src, void=void)
    z_a = sh.zero_test_respond(sh.zero_test_mask(y_p, b_p, q), y_a, r, b_a, g_a, q)
    opened = sh.add_mod(g_p, z_a, q)
    assert int((opened[void] == 0).sum()) == 0  # before: zero exactly where y = 0
    np.testing.assert_array_equal(opened[~void] == 0, y[~void] == 0)
