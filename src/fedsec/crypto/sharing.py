"""Two-party additive secret sharing over ``Z_q`` and fixed-point encoding, exactly.

A value ``x`` (an integer residue, or a real number in fixed point ``round(x·2^f)``) is
split into ``x' = r`` and ``x'' = x − r mod q`` with ``r`` uniform in ``[0, q)`` from the
operating system's CSPRNG (rejection sampling, no modulo bias). Either share alone is
uniform and independent of ``x``. Reconstruction is ``x' + x'' mod q`` followed by
*centring* (residues ``>= q/2`` stand for negative numbers), exact for every
``|x| < q/2``.

Why this matters (seed 004's public code): it shares over ``2^128`` held in numpy
``float128`` with a non-cryptographic generator and reconstructs by adding the shares and
taking "mod p" in floating point. ``float128`` carries a 64-bit mantissa, so any share
near ``2^128`` is rounded and a sum that wraps past the modulus comes back wrong (one
forced wrap in 48,000 entries gave an output error of 7·10^7). Here shares are integers
below ``q < 2^63`` held in ``uint64``; sums of two residues fit in ``uint64`` and the
reduction is integer arithmetic, so a wrapping share reconstructs exactly (tested).

Two moduli are used: a BFV plaintext prime ``t`` (SecSV, :mod:`fedsec.crypto.bfv`) and
``2^64`` (SecretSV, where numpy's ``uint64`` arithmetic *is* arithmetic modulo ``2^64``).

Fixed point: :func:`encode_fixed` refuses (:class:`FixedPointOverflow`) any value whose
encoding does not fit ``|v| < q/2``; protocols also check a priori that every linear output
they compute stays inside the budget, so nothing ever wraps silently.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedsec.crypto.drbg import RandomSource, SystemRandomSource

__all__ = ["FixedPointOverflow", "RING64", "share", "reconstruct", "centre", "add_mod",
           "sub_mod", "to_residues", "encode_fixed", "decode_fixed", "uniform_mod"]

U64 = NDArray[np.uint64]
#: The modulus ``2^64`` (uint64 arithmetic wraps at it).
RING64 = 1 << 64


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
