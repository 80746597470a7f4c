"""Matrix Reducing (seed 004, Alg. 5): the identity in the clear, exact BFV Half (c2p) with
shared data, CKKS Full and Half, and the BFV layer's byte checks."""

from __future__ import annotations

import os

import numpy as np
import pytest

from fedsec.crypto import reducing as rd
from fedsec.crypto import sharing as sh
from fedsec.crypto.bfv import BFVContext, BFVParams
from fedsec.errors import ProtocolError


@pytest.fixture(scope="module")
def bfv() -> BFVContext:
    return BFVContext.from_seed(os.urandom(32))


@pytest.mark.parametrize("shape", [(2, 48, 30), (4, 3, 10), (5, 5, 1), (1, 1, 1),
                                   (10, 64, 7), (7, 2, 9), (3, 300, 4)])
def test_reducing_identity(shape: tuple[int, int, int]) -> None:
    d_out, d_in, m = shape
    rng = np.random.default_rng(d_in)
    a = rng.integers(-50, 50, (d_out, d_in))
    b = rng.integers(-50, 50, (d_in, m))
    np.testing.assert_array_equal(rd.reduce_plain(a, b), a @ b)


@pytest.mark.parametrize("shape", [(2, 48, 30, 30), (4, 3, 10, 12), (1, 1, 1, 1),
                                   (7, 2, 9, 9), (3, 5, 2, 6)])
def test_diagonals_match_the_definition_on_repeated_calls(
        shape: tuple[int, int, int, int]) -> None:
    # the gather indices are cached per shape: every call must still follow the definition
    # Ã⁽ᵒ⁾[i, j] = A[i, (i + j + o) mod d_in], B̃⁽ᵒ⁾[i, j] = B[(i + j + o) mod d_in, j]
    d_out, d_in, m, width = shape
    rng = np.random.default_rng(m + width)
    for _ in range(2):
        a = rng.integers(-99, 99, (d_out, d_in))
        b = rng.integers(-99, 99, (d_in, m))
        ad = rd.model_diagonals(a, width).reshape(d_in, d_out, width)
        bd = rd.data_diagonals(b, d_out, width).reshape(d_in, d_out, width)
        for o in range(d_in):
            for i in range(d_out):
                for j in range(width):
                    k = (i + j + o) % d_in
                    assert ad[o, i, j] == a[i, k]
                    assert bd[o, i, j] == (b[k, j] if j < m else 0)
        ad[...] = 0  # results are fresh arrays: writing them leaves the cache intact
    np.testing.assert_array_equal(rd.reduce_plain(a, b), a @ b)


def test_same_keys_from_the_same_seed_fresh_encryptions(bfv: BFVContext) -> None:
    seed = os.urandom(32)
    c1, c2 = BFVContext.from_seed(seed), BFVContext.from_seed(seed)
    assert c1.public_fingerprint() == c2.public_fingerprint()
    assert BFVContext.from_seed(os.urandom(32)).public_fingerprint() != c1.public_fingerprint()
    ct = c1.encrypt([1, 2, 3])
    assert c1.serialize(ct) != c1.serialize(c1.encrypt([1, 2, 3]))  # randomised
    np.testing.assert_array_equal(c2.decrypt(ct)[:4], [1, 2, 3, 0])


def test_half_bfv_exact_on_shared_data(bfv: BFVContext) -> None:
    """[[A]]·X' + [[A]]·X'' decrypts to A·X exactly (mod t, centred) — with shares that
    wrap modulo t in almost every entry, and large fixed-point magnitudes."""
    t = bfv.t
    rng = np.random.default_rng(1)
    d_out, d_in, m = 4, 37, 300
    width = rd.grid_width(d_out, bfv.slots)
    a = rng.integers(-2**20, 2**20, (d_out, d_in))
    x = rng.integers(-2**20, 2**20, (d_in, m))
    enc = [bfv.to_ntt(bfv.encrypt(r)) for r in rd.model_diagonals(sh.to_residues(a, t), width)]
    s1, s2 = sh.share(sh.to_residues(x, t), t)
    p1 = [bfv.encode_ntt(r) for r in rd.data_diagonals(s1, d_out, width)]
    p2 = [bfv.encode_ntt(r) for r in rd.data_diagonals(s2, d_out, width)]
    y = bfv.add(rd.reduce_half_bfv(bfv, enc, p1), rd.reduce_half_bfv(bfv, enc, p2))
    y = bfv.deserialize(bfv.serialize(y))
    out = sh.centre(rd.read_grid(bfv.decrypt(y), d_out, width, m), t)
    np.testing.assert_array_equal(out, a @ x)
    assert bfv.noise_budget(y) > 20


# (d_out, d_in, width, slots, fold, L): the rotation layout's two cases, incl. MNIST CNN's
# 256 -> 64 hidden layer at width 32 (fold 4, one base) and at width 128 (unfolded)
ROTATING = [(64, 256, 32, 8192, 4, 64), (64, 256, 128, 8192, 1, 32), (8, 12, 4, 32, 1, 4),
            (2, 16, 4, 32, 4, 2), (2, 8, 4, 32, 4, 2), (4, 32, 4, 64, 4, 4)]


@pytest.mark.parametrize("shape", ROTATING)
def test_rotation_layout_identity_and_rotations(shape: tuple[int, ...]) -> None:
    """Σ_u G_u ⊙ D_u summed over the fold segments is A·B, for every batch size up to the
    width; data row a·L + b is base a with both batching rows rotated left by b·width."""
    d_out, d_in, width, slots, fold, period = shape
    assert rd.rotation_period(d_out, d_in, width, slots, fold) == period
    rng = np.random.default_rng(d_in + width)
    a = rng.integers(-50, 50, (d_out, d_in))
    for m in (1, width - 1, width):
        b = rng.integers(-50, 50, (d_in, m))
        g = rd.model_rows_rotated(a, width, slots, fold)
        d = rd.data_rows_rotated(b, d_out, width, slots, fold)
        assert g.shape == d.shape == (-(-d_in // fold), slots)
        seg = d_out * width
        prod = (g * d).sum(axis=0)[:fold * seg].reshape(fold, seg).sum(axis=0)
        np.testing.assert_array_equal(rd.read_grid(prod, d_out, width, m), a @ b)
        bases = rd.data_bases_rotated(b, d_out, width, slots, fold)
        assert len(bases) == len(d) // period
        for u in range(len(d)):
            rolled = np.roll(bases[u // period].reshape(2, -1), -(u % period) * width, axis=1)
            np.testing.assert_array_equal(rolled.ravel(), d[u])


@pytest.mark.parametrize("shape", [(10, 64, 32, 8192, 25), (4, 49, 32, 8192, 1),
                                   (256, 16, 32, 8192, 1), (64, 256, 30, 8192, 4),
                                   (64, 256, 32, 8192, 2), (3, 12, 4, 32, 2)])
def test_rotation_layout_refused_where_it_does_not_fit(shape: tuple[int, ...]) -> None:
    assert rd.rotation_period(*shape) == 0
    with pytest.raises(ValueError):
        rd.model_rows_rotated(np.zeros(shape[:2], dtype=np.int64), *shape[2:])


def test_rotations_ntt_equal_encoding_the_rotated_slots(bfv: BFVContext) -> None:
    """A row rotation of an NTT plaintext by a coefficient permutation is exactly the
    plaintext ``encode_ntt`` makes of the rotated slots, at every prime."""
    v = sh.uniform_mod(bfv.t, bfv.slots)
    steps = [0, 1, 32, 4095, 4096 + 7]
    half = bfv.slots // 2
    for step, got in zip(steps, bfv.rotations_ntt(bfv.encode_ntt(v), steps), strict=True):
        want = bfv.encode_ntt(np.roll(v.reshape(2, half), -step, axis=1).ravel())
        head_g, cg = bfv._pt_coeffs(got)
        head_w, cw = bfv._pt_coeffs(want)
        assert head_g == head_w
        np.testing.assert_array_equal(cg, cw)
    with pytest.raises(RuntimeError):
        bfv._pt_coeffs(bfv.encode(v))  # not NTT form


def test_half_bfv_rotation_layout_exact_on_shared_data(bfv: BFVContext) -> None:
    """MNIST CNN's hidden layer (64 × 256, width 32, fold 4): the encrypted model rows of
    the rotation layout times one encoded base per share and its 63 rotations decrypt to
    A·X exactly, with noise budget to spare (full-range shares)."""
    t = bfv.t
    rng = np.random.default_rng(2)
    d_out, d_in, width, fold, m = 64, 256, 32, 4, 31
    a = rng.integers(-2**20, 2**20, (d_out, d_in))
    x = rng.integers(-2**20, 2**20, (d_in, m))
    enc = [bfv.to_ntt(bfv.encrypt(r))
           for r in rd.model_rows_rotated(sh.to_residues(a, t), width, bfv.slots, fold)]
    steps = [b * width for b in range(d_out)]
    y = None
    for s in sh.share(sh.to_residues(x, t), t):
        bases = [bfv.encode_ntt(r) for r in rd.data_bases_rotated(s, d_out, width,
                                                                   bfv.slots, fold)]
        part = bfv.dot_plain_rotations(enc, bases, steps)
        y = part if y is None else bfv.add(y, part)
    y = bfv.mod_switch_down(bfv.from_ntt(y))
    seg = d_out * width
    slots = bfv.decrypt(y)[:fold * seg].reshape(fold, seg)
    acc = np.zeros(seg, dtype=np.uint64)
    for p in slots:
        acc = sh.add_mod(acc, p, t)
    np.testing.assert_array_equal(sh.centre(rd.read_grid(acc, d_out, width, m), t), a @ x)
    assert bfv.noise_budget(y) > 20
    with pytest.raises(ValueError):
        bfv.dot_plain_rotations(enc[:-1], bases, steps)


def test_bfv_deserialize_rejects_garbage(bfv: BFVContext) -> None:
    good = bfv.serialize(bfv.encrypt([5]))
    for bad in (b"", good[:100], good[:-8], b"\x00" * len(good), good + b"\x00" * 8):
        with pytest.raises(ProtocolError):
            bfv.deserialize(bad)
    with pytest.raises(ProtocolError):
        bfv.deserialize(b"x" * (10 << 20))


def test_bfv_params_checked() -> None:
    with pytest.raises(ValueError, match="ring degree"):
        BFVParams(4096).check()
    with pytest.raises(ProtocolError):
        BFVParams.from_dict({"poly_modulus_degree": 8192, "plain_bits": 99})
    with pytest.raises(ProtocolError):
        BFVParams.from_dict({"poly_modulus_degree": "x"})


def test_ckks_full_and_half() -> None:
    from fedsec.crypto.ckks import CKKSContext

    ctx = CKKSContext.generate("INSECURE_TEST_N4096_DEPTH2", allow_insecure=True)
    rng = np.random.default_rng(2)
    d_out, d_in, m = 3, 8, 50
    width = rd.grid_width(d_out, ctx.slots)
    a = rng.normal(size=(d_out, d_in))
    b = rng.normal(size=(d_in, m))
    ad = rd.model_diagonals(a, width)
    bd = rd.data_diagonals(b, d_out, width)
    enc_a = [ctx.encrypt(r) for r in ad]
    full = rd.reduce_full_ckks(ctx, enc_a, [ctx.encrypt(r) for r in bd])
    half = rd.reduce_half_ckks(ctx, enc_a, bd)
    for ct in (full, half):
        got = rd.read_grid(ctx.decrypt(ct).real, d_out, width, m)
        np.testing.assert_allclose(got, a @ b, atol=1e-4)
