"""Two-party additive secret sharing over ``Z_q`` and fixed-point encoding, exactly.

A value ``x`` (an integer residue, or a real number in fixed point ``round(x·2^f)``) is
split into ``x' = r`` and ``x'' = x − r mod q`` with ``r`` uniform in ``[0, q)`` from the
operating system's CSPRNG (rejection sampling, no modulo bias). Either share alone is
uniform and independent of ``x``. Reconstruction is ``x' + x'' mod q`` followed by
*centring* (residues ``>= q/2`` stand for negative numbers), exact for every
``|x| < q/2``.

Why this matters (Zheng et al.'s public code): it shares over ``2^128`` held in numpy
``float128`` with a non-cryptographic generator and reconstructs by adding the shares and
taking "mod p" in floating point. ``float128`` carries a 64-bit mantissa, so any share
near ``2^128`` is rounded and a sum that wraps past the modulus comes back wrong (one
forced wrap in 48,000 entries gave an output error of 7·10^7). Here shares are integers
below ``q < 2^63`` held in ``uint64``; sums of two residues fit in ``uint64`` and the
reduction is integer arithmetic, so a wrapping share reconstructs exactly (tested).

Two moduli are used: a BFV plaintext prime ``t`` (SecSV, :mod:`fedsec.crypto.bfv`) and
``2^64`` (SecretSV, where numpy's ``uint64`` arithmetic *is* arithmetic modulo ``2^64``).

Zero test (:func:`zero_test_deal` and the three steps after it): two servers P and A hold
additive shares of labels ``y`` modulo a prime ``q``; a third party D that knows the
predictions ``ŷ`` lets P learn *whether* ``ŷ = y`` per sample and nothing else -- not
``ŷ − y`` (whose size and sign pin labels). D deals, per sample, a fresh mask ``b``
(shared), a uniform non-zero ``r`` (to A) and shares of ``g = r·(ŷ − b)``; P sends A
``f_P = y_P − b_P``; A opens ``f = y − b`` and returns ``z_A = g_A − r·f``; P adds its
``g_P``: ``z = r·(ŷ − y)``, zero iff ``ŷ = y`` and otherwise uniform over the non-zero
residues (``q`` prime, ``r`` uniform non-zero: ``r·δ`` is uniform for ``δ ≠ 0``). A sees
``r``, uniform shares and ``f`` (uniform: ``b_P`` is unknown to it); D receives nothing.
A prime modulus matters: in ``Z_{2^64}`` an odd ``r`` keeps ``δ``'s 2-adic valuation.

Fixed point: :func:`encode_fixed` refuses (:class:`FixedPointOverflow`) any value whose
encoding does not fit ``|v| < q/2``; protocols also check a priori that every linear output
they compute stays inside the budget, so nothing ever wraps silently.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedsec.crypto.drbg import RandomSource, SystemRandomSource

__all__ = ["FixedPointOverflow", "RING64", "share", "reconstruct", "centre", "add_mod",
           "sub_mod", "to_residues", "encode_fixed", "decode_fixed", "uniform_mod",
           "uniform_nonzero_mod", "mul_mod", "LABEL_PRIME", "zero_test_deal",
           "zero_test_mask", "zero_test_respond", "zero_test_open"]

U64 = NDArray[np.uint64]
#: The modulus ``2^64`` (uint64 arithmetic wraps at it).
RING64 = 1 << 64
#: A prime for label shares where the data's modulus is ``2^64`` (the zero test needs a
#: field): the Mersenne prime ``2^61 − 1``.
LABEL_PRIME = (1 << 61) - 1


class FixedPointOverflow(ValueError):
    """A fixed-point value (or a bound on a computed one) does not fit ``|v| < q/2``."""


def _check_modulus(q: int) -> int:
    if isinstance(q, bool) or not isinstance(q, int | np.integer):
        raise TypeError(f"The 'modulus' parameter must be an int. Got {type(q).__name__}.")
    q = int(q)
    if q != RING64 and not 2 <= q < 1 << 63:
        raise ValueError(f"The 'modulus' parameter must be 2^64 or in [2, 2^63). Got {q}.")
    return q


def uniform_mod(q: int, shape: tuple[int, ...] | int,
                rng: RandomSource | None = None) -> U64:
    """Uniform residues in ``[0, q)`` (cryptographic randomness by default)."""
    q = _check_modulus(q)
    src = rng if rng is not None else SystemRandomSource()
    n = int(np.prod(shape))
    if q == RING64:
        out = src.uint64(n)
    else:  # rejection on draws of q's bit length: acceptance > 1/2, no modulo bias
        mask = np.uint64((1 << q.bit_length()) - 1)
        accept = q / float(1 << q.bit_length())
        got: list[U64] = []
        have = 0
        while have < n:
            need = n - have
            cand = src.uint64(int(need / accept * 1.1) + 16) & mask
            cand = cand[cand < np.uint64(q)][:need]
            got.append(cand)
            have += cand.size
        out = np.concatenate(got) if got else np.zeros(0, dtype=np.uint64)
    return out.reshape(shape)


def uniform_nonzero_mod(q: int, shape: tuple[int, ...] | int,
                        rng: RandomSource | None = None) -> U64:
    """Uniform residues in ``[1, q)`` (cryptographic randomness by default)."""
    q = _check_modulus(q)
    src = rng if rng is not None else SystemRandomSource()
    if q == RING64:
        raise ValueError("uniform non-zero residues are drawn modulo a prime, not 2^64")
    out: U64 = uniform_mod(q - 1, shape, src) + np.uint64(1)
    return out


def _mul_small(a: U64, b: U64, q: int) -> U64:
    """``a·b mod q`` for residues ``a < q < 2^62`` and ``b <= 2^32``: the quotient
    ``a·b/q < b <= 2^32`` from float64 is off by at most one (relative error ~2^-51), so
    ``a·b − ⌊quot⌋·q`` in wrapping uint64 arithmetic is the residue plus at most one ``q``
    either way, which fits int64 and is reduced exactly."""
    quot = np.floor(a.astype(np.float64) * b.astype(np.float64) / float(q)).astype(np.uint64)
    low = (a * b - quot * np.uint64(q)).view(np.int64)
    out: U64 = np.mod(low, np.int64(q)).astype(np.uint64)
    return out


def mul_mod(a: U64, b: U64, q: int) -> U64:
    """``a·b mod q`` for residues (broadcasting), exact: ``q`` is ``2^64`` (uint64
    wraps) or below ``2^62`` (``b`` is split into 32-bit halves, see ``_mul_small``)."""
    q = _check_modulus(q)
    a = np.asarray(a, dtype=np.uint64)
    b = np.asarray(b, dtype=np.uint64)
    if q == RING64:
        prod: U64 = a * b
        return prod
    if q >= 1 << 62:
        raise ValueError(f"mul_mod needs a modulus below 2^62 (or 2^64). Got {q}.")
    a, b = np.broadcast_arrays(a, b)
    hi = _mul_small(a, b >> np.uint64(32), q)
    hi = _mul_small(hi, np.full_like(hi, 1 << 32), q)
    return add_mod(hi, _mul_small(a, b & np.uint64(0xFFFFFFFF), q), q)


def zero_test_deal(predicted: U64, q: int, rng: RandomSource | None = None, *,
                   void: NDArray[np.bool_] | None = None
                   ) -> tuple[tuple[U64, U64], tuple[U64, U64, U64]]:
    """D's correlated randomness for the zero test of ``predicted − y`` (module docstring).

    Parameters
    ----------
    predicted : uint64 array, shape ``(..., m)``
        Residues mod ``q`` D compares (one row per coalition, if any).
    q : int
        A prime below ``2^62`` (the label shares' modulus).
    rng : RandomSource, optional
        Cryptographic by default.
    void : bool array, shape ``(m,)``, optional
        Samples D has no prediction for (e.g. skipped by SampleSkip): there ``g`` is
        uniform, so P opens a uniform value whatever the label (a made-up prediction
        would still tell P whether the label equals it).

    Returns
    -------
    (b_P, g_P), (r, b_A, g_A)
        P's part (mask share ``(m,)``, ``g`` share like ``predicted``) and A's part (the
        non-zero multipliers and A's shares).
    """
    q = _check_modulus(q)
    src = rng if rng is not None else SystemRandomSource()
    v = np.asarray(predicted, dtype=np.uint64)
    if v.ndim < 1 or (v.size and int(v.max()) >= q):
        raise ValueError("predicted values must be residues in [0, modulus)")
    b = uniform_mod(q, v.shape[-1], src)
    r = uniform_nonzero_mod(q, v.shape, src)
    g = mul_mod(r, sub_mod(v, np.broadcast_to(b, v.shape), q), q)
    if void is not None and np.any(void):
        g[..., np.asarray(void, dtype=bool)] = uniform_mod(q, g[..., void].shape, src)
    g_p, g_a = share(g, q, src)
    b_p, b_a = share(b, q, src)
    return (b_p, g_p), (r, b_a, g_a)


def zero_test_mask(y_p: U64, b_p: U64, q: int) -> U64:
    """P's ``f_P = y_P − b_P`` for A (uniform to A: ``b_P`` is D's secret share)."""
    return sub_mod(y_p, b_p, q)


def zero_test_respond(f_p: U64, y_a: U64, r: U64, b_a: U64, g_a: U64, q: int) -> U64:
    """A's ``z_A = g_A − r·(f_P + y_A − b_A)`` for P (``r`` and ``g_A`` may carry a leading
    coalition axis; ``f_P``, ``y_A``, ``b_A`` are per sample)."""
    f = sub_mod(add_mod(f_p, y_a, q), b_a, q)
    return sub_mod(g_a, mul_mod(r, np.broadcast_to(f, r.shape), q), q)


def zero_test_open(g_p: U64, z_a: U64, q: int) -> NDArray[np.bool_]:
    """P's result: ``g_P + z_A = r·(ŷ − y)``; True where it is zero (``ŷ = y``)."""
    out: NDArray[np.bool_] = add_mod(g_p, z_a, q) == 0
    return out


def add_mod(a: U64, b: U64, q: int) -> U64:
    """``a + b mod q`` for residues (exact: the sum of two residues < 2^63 fits uint64)."""
    if q == RING64:
        return a + b
    return (a + b) % np.uint64(q)


def sub_mod(a: U64, b: U64, q: int) -> U64:
    """``a − b mod q`` for residues."""
    if q == RING64:
        return a - b
    return (a + (np.uint64(q) - b)) % np.uint64(q)


def share(values: ArrayLike, q: int, rng: RandomSource | None = None) -> tuple[U64, U64]:
    """Split residues ``values`` (uint64, each < q) into two additive shares mod ``q``."""
    q = _check_modulus(q)
    v = np.asarray(values, dtype=np.uint64)
    if q != RING64 and v.size and int(v.max()) >= q:
        raise ValueError("values to share must be residues in [0, modulus)")
    r = uniform_mod(q, v.shape, rng)
    return r, sub_mod(v, r, q)


def reconstruct(a: U64, b: U64, q: int) -> NDArray[np.int64]:
    """The shared *signed* integers: ``centre(a + b mod q)``."""
    return centre(add_mod(np.asarray(a, np.uint64), np.asarray(b, np.uint64), q), q)


def centre(v: U64, q: int) -> NDArray[np.int64]:
    """Residues as signed integers: ``v`` if ``v <= q // 2`` else ``v − q`` (exact)."""
    v = np.asarray(v, dtype=np.uint64)
    if q == RING64:
        return v.view(np.int64).copy()
    half = np.uint64(q // 2)
    neg = v > half
    out = v.astype(np.int64)  # v < q < 2^63: fits
    out[neg] = -((np.uint64(q) - v[neg]).astype(np.int64))
    return out


def to_residues(ints: NDArray[np.int64], q: int) -> U64:
    """Signed integers (``|x| < q/2``) as residues modulo ``q``."""
    x = np.asarray(ints, dtype=np.int64)
    if q == RING64:
        return x.view(np.uint64).copy()
    out = x.astype(np.uint64)
    neg = x < 0
    out[neg] = np.uint64(q) - (-x[neg]).astype(np.uint64)
    return out


def encode_fixed(x: ArrayLike, frac_bits: int, q: int) -> U64:
    """``round(x·2^frac_bits)`` as residues mod ``q``; :class:`FixedPointOverflow` unless
    every ``|round(x·2^f)| < q/2`` (and below ``2^62``, where float64 still rounds to an
    integer exactly representable)."""
    q = _check_modulus(q)
    a = np.asarray(x, dtype=np.float64)
    if not np.isfinite(a).all():
        raise ValueError("fixed-point encoding needs finite values")
    ints = np.rint(np.ldexp(a, frac_bits))
    limit = min(q // 2, 1 << 62)
    if ints.size and float(np.abs(ints).max()) >= limit:
        raise FixedPointOverflow(
            f"a value of magnitude {float(np.abs(a).max()):.3g} does not fit the fixed-point "
            f"budget (2^{frac_bits} scale, modulus of {q.bit_length()} bits)")
    return to_residues(ints.astype(np.int64), q)


def decode_fixed(v: U64, frac_bits: int, q: int) -> NDArray[np.float64]:
    """Centred residues divided by ``2^frac_bits``."""
    return np.ldexp(centre(v, q).astype(np.float64), -frac_bits)
