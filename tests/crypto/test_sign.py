"""Composite minimax sign: the design (Remez), its error bound in plaintext on dense grids
and at the domain edges, its depth-optimal exact-scale evaluation under CKKS, and the
documented behaviour outside the domain.

CKKS tests use the insecure 4096-ring chain with 16 rescalings (a sign evaluation takes
about half a second); the secure ring-2^15 preset is exercised in benchmarks/bench_sign.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import tenseal.sealapi as seal
from numpy.polynomial import chebyshev as C

from fedsec.crypto import poly, sign
from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.params import CKKSParams, get_preset

PRESET = "INSECURE_TEST_N4096_DEPTH16"
SLOTS = 2048
CKKS_NOISE = 1e-5  # allowance for CKKS noise on top of the plaintext bound


@pytest.fixture(scope="module")
def ctx() -> CKKSContext:
    return CKKSContext.generate(PRESET, allow_insecure=True)


@pytest.fixture(scope="module")
def server(ctx: CKKSContext) -> CKKSContext:
    """The evaluator's view: public material only."""
    return CKKSContext.from_public_bytes(ctx.public_bytes(), allow_insecure=True)


def _domain_sample(alpha: int, n: int, g: np.random.Generator) -> np.ndarray:
    """``n`` values with random signs, log-uniform magnitudes over the domain, the
    domain edges and the nominal edges ``2^-alpha`` and 1 first."""
    lo, hi = sign.sign_input_bound(alpha)
    mag = np.exp(g.uniform(math.log(lo), math.log(hi), n))
    x = mag * g.choice([-1.0, 1.0], n)
    edges = [lo, -lo, hi, -hi, 2.0 ** -alpha, -(2.0 ** -alpha), 1.0, -1.0]
    x[:len(edges)] = edges
    return x


# ---------------------------------------------------------------- Remez design
def test_remez_degree_one_matches_closed_form() -> None:
    # best c*x for 1 on [a, 1]: c = 2 / (1 + a), error (1 - a) / (1 + a)
    for a in (0.01, 0.3, 0.7):
        c, err = poly.remez_odd_one(1, a)
        assert c[1] == pytest.approx(2.0 / (1.0 + a), rel=1e-12)
        assert err == pytest.approx((1.0 - a) / (1.0 + a), rel=1e-12)


@pytest.mark.parametrize(("degree", "a"), [(3, 0.1), (7, 2.0 ** -8), (13, 0.35),
                                           (15, 2.0 ** -12), (15, 0.4)])
def test_remez_equioscillates(degree: int, a: float) -> None:
    """Chebyshev's theorem: the minimax error attains its maximum at (d+1)/2 + 1 points
    with alternating signs. Check it on a dense grid, independently of the routine."""
    c, err = poly.remez_odd_one(degree, a)
    assert np.all(c[0::2] == 0.0)
    x = np.concatenate([np.geomspace(a, 1.0, 200_001), np.linspace(a, 1.0, 200_001)])
    x.sort()
    e = C.chebval(x, c) - 1.0
    assert np.max(np.abs(e)) == pytest.approx(err, rel=1e-6)
    peaks = np.abs(e) >= err * (1 - 1e-5)
    signs = np.sign(e[peaks])
    alternations = 1 + int(np.count_nonzero(signs[1:] != signs[:-1]))
    assert alternations >= (degree + 1) // 2 + 1


def test_remez_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="odd int"):
        poly.remez_odd_one(4, 0.1)
    with pytest.raises(ValueError, match=r"in \(0, 1\)"):
        poly.remez_odd_one(7, 0.0)


def test_chebyshev_split_is_an_identity() -> None:
    g = np.random.default_rng(3)
    for d in (3, 7, 13, 15):
        c = np.zeros(d + 1)
        c[1::2] = g.normal(size=(d + 1) // 2)
        m = 1 << (poly.odd_depth(d) - 1)
        q, r = poly.chebyshev_split(c, m)
        y = np.linspace(-1, 1, 101)
        lhs = C.chebval(y, c)
        rhs = C.chebval(y, q) + C.chebval(y, np.eye(m + 1)[m]) * C.chebval(y, r)
        np.testing.assert_allclose(lhs, rhs, atol=1e-12)
        assert np.all(q[0::2] == 0.0) and np.all(r[0::2] == 0.0)  # both stay odd


# ---------------------------------------------------------------- plaintext guarantee
def test_depths_are_lee_et_al() -> None:
    assert [sign.sign_depth(a) for a in sign.SUPPORTED_ALPHAS] == [11, 14, 16]
    assert sign.SIGN_DEGREES == {8: (7, 15, 15), 10: (7, 7, 13, 15), 12: (15, 15, 15, 15)}


@pytest.mark.parametrize("alpha", sign.SUPPORTED_ALPHAS)
def test_error_bound_below_two_to_one_minus_alpha(alpha: int) -> None:
    bound = sign.sign_error_bound(alpha)
    assert bound < 2.0 ** (1 - alpha)
    # the values stated in the module docstring
    assert math.log2(bound) == pytest.approx({8: -7.44, 10: -9.16, 12: -11.50}[alpha], abs=0.01)
    lo, hi = sign.sign_input_bound(alpha)
    assert lo < 2.0 ** -alpha and hi > 1.0


@pytest.mark.parametrize("alpha", sign.SUPPORTED_ALPHAS)
def test_plaintext_error_on_dense_grid_and_edges(alpha: int) -> None:
    lo, hi = sign.sign_input_bound(alpha)
    bound = sign.sign_error_bound(alpha)
    grid = np.concatenate([np.geomspace(lo, hi, 300_001), np.linspace(lo, hi, 300_001)])
    x = np.concatenate([grid, -grid])
    err = np.abs(sign.sign_plain(x, alpha) - np.sign(x))
    assert err.max() <= bound * (1 + 1e-9)
    assert err.max() >= bound * (1 - 1e-3)  # the bound is attained, not loose
    edges = np.array([2.0 ** -alpha, 1.0, lo, hi])
    for e in (edges, -edges):
        assert np.all(np.abs(sign.sign_plain(e, alpha) - np.sign(e)) <= bound)
    g = np.random.default_rng(alpha)
    xr = _domain_sample(alpha, 100_000, g)
    assert np.all(np.abs(sign.sign_plain(xr, alpha) - np.sign(xr)) <= bound)
    np.testing.assert_allclose(sign.sign_plain(-xr, alpha), -sign.sign_plain(xr, alpha),
                               atol=1e-12)  # odd


@pytest.mark.parametrize("alpha", sign.SUPPORTED_ALPHAS)
def test_every_stage_keeps_its_image_inside_the_next_interval(alpha: int) -> None:
    s = sign.sign_approximation(alpha)
    for i, c in enumerate(s.stages[:-1]):
        a, _ = s.stage_intervals[i]
        y = np.geomspace(a, 1.0, 100_001)
        out = C.chebval(y, c)
        a_next, _ = s.stage_intervals[i + 1]
        # image plus the designed margin on both sides stays in [a_next, 1]
        margin = sign.STAGE_MARGIN / (1 + s.stage_errors[i] + sign.STAGE_MARGIN)
        assert out.min() - margin >= a_next * (1 - 1e-12)
        assert out.max() + margin <= 1.0 + 1e-12


@pytest.mark.parametrize("alpha", sign.SUPPORTED_ALPHAS)
def test_below_the_domain_sign_is_kept_but_not_precision(alpha: int) -> None:
    lo, _ = sign.sign_input_bound(alpha)
    x = np.geomspace(1e-12, lo, 50_001)
    f = sign.sign_plain(x, alpha)
    assert np.all(f > 0) and np.all(f <= 1 + sign.sign_error_bound(alpha))
    assert f[0] < 1e-6  # tends to 0: tiny differences decide nothing
    for c in sign.sign_approximation(alpha).stages:  # each stage positive on (0, 1]
        assert np.all(C.chebval(np.geomspace(1e-9, 1.0, 20_001), c) > 0)


@pytest.mark.parametrize("alpha", sign.SUPPORTED_ALPHAS)
def test_above_the_domain_the_sign_flips(alpha: int) -> None:
    """The documented hazard: just beyond the bound the output is a confident wrong sign
    (a party that can push its value past the bound can flip its comparison)."""
    _, hi = sign.sign_input_bound(alpha)
    x = np.linspace(hi, 1.003, 3001)[1:]
    f = sign.sign_plain(x, alpha)
    assert np.all(np.isfinite(f))
    assert np.any(f < -0.5)  # positive input, output near -1
    with pytest.raises(ValueError, match=r"\|x\| <="):
        sign.check_sign_domain([0.5, -1.01], alpha)
    mask = sign.check_sign_domain([0.5, -hi, 2.0 ** (-alpha - 1), 0.0], alpha)
    assert mask.tolist() == [True, True, False, False]


def test_argument_validation(ctx: CKKSContext) -> None:
    for bad in (7, 16, 0):
        with pytest.raises(ValueError, match="'alpha' parameter of sign_depth must be one of"):
            sign.sign_depth(bad)
    with pytest.raises(TypeError, match="'alpha' parameter"):
        sign.sign_approximation("8")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'alpha' parameter"):
        sign.sign_approximation(True)
    ct = ctx.encrypt(np.full(4, 0.5))
    with pytest.raises(TypeError, match="CKKSContext"):
        sign.sign_encrypted(object(), ct, 8)  # type: ignore[arg-type]
    low = ctx.mod_switch(ct, level=10)
    with pytest.raises(ValueError, match="needs 11 levels"):
        sign.sign_encrypted(ctx, low, 8)
    off = ctx.encrypt(np.full(4, 0.5), scale=2.0 ** 45)
    with pytest.raises(ValueError, match="scale"):
        sign.sign_encrypted(ctx, off, 8)
    with pytest.raises(ValueError, match="'keep_levels' parameter of sign_encrypted must be <= 5"):
        sign.sign_encrypted(ctx, ct, 8, keep_levels=6)
    with pytest.raises(ValueError, match="'keep_levels'"):
        sign.sign_encrypted(ctx, ct, 8, keep_levels=-1)
    norelin = CKKSContext.generate(PRESET, relin=False, allow_insecure=True)
    with pytest.raises(ValueError, match="relinearization"):
        sign.sign_encrypted(norelin, norelin.encrypt([0.5]), 8)


# ---------------------------------------------------------------- presets
def test_secure_preset_is_128_bit_and_deep_enough() -> None:
    p = get_preset("CKKS_128_N32768_DEPTH19")
    assert p.poly_modulus_degree == 32768 and p.slots == 16384
    assert p.coeff_mod_bit_sizes == (60,) + (40,) * 19 + (60,)
    assert p.total_modulus_bits <= seal.CoeffModulus.MaxBitCount(32768, seal.SEC_LEVEL_TYPE.TC128)
    assert p.security_bits == 128 and p.depth == 19 >= max(
        sign.sign_depth(a) for a in sign.SUPPORTED_ALPHAS)
    with pytest.raises(ValueError, match="insecure"):
        get_preset(PRESET)


# ---------------------------------------------------------------- CKKS evaluation
def test_odd_chebyshev_depth_and_exact_scale(ctx: CKKSContext) -> None:
    g = np.random.default_rng(11)
    y = g.uniform(-1, 1, SLOTS)
    ct = ctx.encrypt(y)
    for d in (1, 3, 5, 7, 9, 11, 13, 15):
        c = np.zeros(d + 1)
        c[1::2] = g.normal(size=(d + 1) // 2)
        out = poly.evaluate_odd_chebyshev(ctx, ct, c)
        assert ctx.level_of(ct) - ctx.level_of(out) == poly.odd_depth(d)
        assert out.scale == ctx.scale
        ref = poly.evaluate_odd_chebyshev_plain(c, y)
        assert np.max(np.abs(ctx.decrypt(out).real - ref)) < 1e-6
    with pytest.raises(ValueError, match="odd"):
        poly.evaluate_odd_chebyshev(ctx, ct, [0.1, 1.0, 0.5])


def test_sign_survives_a_badly_mismatched_chain() -> None:
    """Primes alternating 2^38 / 2^42 against a 2^40 scale: with untracked scales the
    values would be off by factors of 4 after one level. The exact-scale evaluation
    keeps the result within the bound."""
    bits = (60,) + (38, 42) * 6 + (60,)
    params = CKKSParams("INSECURE_TEST_MISMATCH", 4096, bits, 40, 0, "test").check()
    c = CKKSContext.generate(params, allow_insecure=True)
    x = _domain_sample(8, SLOTS, np.random.default_rng(5))
    out = sign.sign_encrypted(c, c.encrypt(x), 8)
    v = c.decrypt(out).real
    assert np.max(np.abs(v - np.sign(x))) <= sign.sign_error_bound(8) + CKKS_NOISE


@pytest.mark.parametrize("alpha", sign.SUPPORTED_ALPHAS)
def test_sign_encrypted_error_random_and_edges(ctx: CKKSContext, server: CKKSContext,
                                               alpha: int,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    x = _domain_sample(alpha, SLOTS, np.random.default_rng(100 + alpha))
    ct = server.deserialize(ctx.encrypt_bytes(x))
    products = []
    for name in ("multiply", "square"):
        def counted(*a: object, _f: object = getattr(server, name), **k: object) -> object:
            products.append(1)
            return _f(*a, **k)  # type: ignore[operator]
        monkeypatch.setattr(server, name, counted)
    out = sign.sign_encrypted(server, ct, alpha)  # the evaluator holds no secret key
    assert len(products) == {8: 21, 10: 25, 12: 32}[alpha]  # as the module docstring says
    assert server.level_of(ct) - server.level_of(out) == sign.sign_depth(alpha)
    assert out.scale == server.scale
    v = ctx.decrypt(out).real
    assert np.array_equal(np.sign(v), np.sign(x))  # no wrong sign, edges included
    assert np.max(np.abs(v - np.sign(x))) <= sign.sign_error_bound(alpha) + CKKS_NOISE
    assert np.max(np.abs(v - sign.sign_plain(x, alpha))) <= CKKS_NOISE


def test_step_encrypted_is_the_comparison(ctx: CKKSContext) -> None:
    g = np.random.default_rng(9)
    a, b = g.uniform(0, 0.5, SLOTS), g.uniform(0, 0.5, SLOTS)
    d = a - b
    keep = np.abs(d) >= 2.0 ** -10
    out = sign.step_encrypted(ctx, ctx.sub(ctx.encrypt(a), ctx.encrypt(b)), 10, keep_levels=0)
    assert ctx.level_of(out) == 0  # dropped to exactly the depth first
    v = ctx.decrypt(out).real
    ref = (d > 0).astype(float)
    assert np.max(np.abs(v - ref)[keep]) <= sign.sign_error_bound(10) / 2 + CKKS_NOISE
    assert np.all(((v > 0.5) == (d > 0))[keep])


def test_sign_at_the_secure_preset() -> None:
    """The real ring-2^15 chain (primes ~2^-16 away from the scale), alpha 12, one
    evaluation (about 20 s with key generation on this machine)."""
    ctx = CKKSContext.generate("CKKS_128_N32768_DEPTH19")
    x = _domain_sample(12, 4096, np.random.default_rng(12))
    out = sign.sign_encrypted(ctx, ctx.encrypt(x), 12, keep_levels=0)
    assert ctx.level_of(out) == 0 and out.scale == ctx.scale
    v = ctx.decrypt(out).real
    assert np.array_equal(np.sign(v[:x.size]), np.sign(x))
    # noise measured up to 1.2e-5 over 16,384 slots; allow 1e-4 on top of the bound
    assert np.max(np.abs(v[:x.size] - np.sign(x))) <= sign.sign_error_bound(12) + 1e-4


def test_exact_scale_helpers(ctx: CKKSContext) -> None:
    x = np.linspace(-1, 1, SLOTS)
    ct = ctx.encrypt(x)
    top = ctx.top_level
    assert ctx.level_of(ct) == top == 16
    low = ctx.mod_switch(ct, level=7)
    assert ctx.level_of(low) == 7 and low.scale == ct.scale
    assert np.max(np.abs(ctx.decrypt(low).real - x)) < 1e-8
    with pytest.raises(ValueError, match="cannot raise"):
        ctx.mod_switch(low, level=8)
    with pytest.raises(ValueError, match="'level' parameter"):
        ctx.parms_id_at_level(top + 1)
    target = 2.0 ** 40 * 1.2345
    y = ctx.multiply_const_exact(ct, -0.75, level=3, scale=target)
    assert ctx.level_of(y) == 3 and y.scale == target
    assert np.max(np.abs(ctx.decrypt(y).real + 0.75 * x)) < 1e-7
    z = ctx.with_value_factor(ct, 1.5)
    assert np.max(np.abs(ctx.decrypt(z).real - 1.5 * x)) < 1e-8
    assert ctx.level_of(z) == top and ct.scale == ctx.scale  # the input is untouched
    with pytest.raises(ValueError, match="'factor'"):
        ctx.with_value_factor(ct, -1.0)
    w = ctx.add_constant(ct, 0.25)
    assert np.max(np.abs(ctx.decrypt(w).real - (x + 0.25))) < 1e-8
    with pytest.raises(ValueError, match="below the ciphertext's"):
        ctx.multiply_const_exact(low, 2.0, level=7, scale=ctx.scale)
    with pytest.raises(ValueError, match="rounding"):
        ctx.snap_scale(ctx.encrypt(x), ctx.scale * (1 + 1e-6))
