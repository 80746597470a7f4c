"""The aggregator's masks, shared by both FHAUC variants.

Masks are real numbers with a full 52-bit mantissa from ``secrets``, encoded at exactly the
prime the masked result is then rescaled by: the rescale rounds away the exact multiple of
the mask that the decrypted polynomial would otherwise be (a party holding the secret key
can decrypt raw coefficients and take their gcd). A small Gaussian noise from the operating
system's randomness is added to each masked value so that the mask's encoding grid does not
give candidate denominators away. :mod:`fedsec.auc.fhauc` states what a party learns.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.dpnoise import gaussian_noise
from fedsec.crypto.params import DEFAULT_PRESET, CKKSParams

__all__ = ["RESULT_NOISE_SD", "MALICIOUS_RESULT_NOISE_SD",
           "OUTPUT_SCALE_FACTOR", "Masks", "real_mask", "masked_product",
           "finish_masked", "add_result_noise", "check_masking_capacity"]

# Gaussian noise (standard deviation, in units of the masked values) added to each masked
# value a party reads. A mask encoded at the prime S is K/S for an integer K; CKKS's own noise
# on the numerator channel is far below a step of that grid (value/S), which would let a
# party test candidate denominators for an integer K. This noise spreads each value over
# ~S * 2^-29 = 64 grid steps (default chain). 2^-29 since FHAUC's 4-slot layout (issue 13):
# its CKKS noise is smaller than the earlier layout's, and with 2^-32 the grid test kept
# 32-46 of ~9,000 candidates at denom = 20,000 (pair mask: 1-2) where the earlier layout kept
# 78-675; with 2^-29 it keeps ~290 (pair: ~37). Larger noise hides more and costs precision
# (absolute AUC error ~ noise / denom: ~2.6e-9 relative at worst, one sample per class).
RESULT_NOISE_SD = 2.0 ** -29
#: Malicious mode keeps the earlier 2^-32: its CKKS noise (2^12 zero-sum masks) is larger
#: anyway, and its runs must agree within the tolerance.
MALICIOUS_RESULT_NOISE_SD = 2.0 ** -32
# The masked result is computed at 4x its value (the slot sums carry a factor 4) and the
# factor is removed exactly by declaring the ciphertext's scale 4x larger.
OUTPUT_SCALE_FACTOR = 4.0


def real_mask() -> float:
    """A mask uniform in [1/2, 1) with a full 52-bit mantissa, from ``secrets``.

    Encoding it at a prime's scale ``q`` rounds it to ``K/q`` for an integer ``K`` with
    ``log2(q)`` bits: the mask a party faces lives on that grid (see the module docs)."""
    return float((1 << 52) + secrets.randbits(52)) / float(1 << 53)


def masked_product(ctx: CKKSContext, ct: Any, values: complex | np.ndarray) -> Any:
    """``ct`` times a constant or a slot vector encoded at the scale of the prime the
    following rescale divides by, *not yet rescaled* (add such products, then
    :func:`finish_masked`). Their scale stays that of ``ct`` after the rescale."""
    scale = float(ctx.rescale_prime(ct))
    if isinstance(values, np.ndarray):
        return ctx.multiply_plain(ct, ctx.encode(values, scale=scale,
                                                     parms_id=ct.parms_id()), rescale=False)
    return ctx.multiply_const(ct, values, scale=scale)


def finish_masked(ctx: CKKSContext, ct: Any) -> Any:
    """Rescale a sum of :func:`masked_product` terms (rounding away the exact multiple of the
    mask the decrypted polynomial would otherwise be) and divide by
    :data:`OUTPUT_SCALE_FACTOR` through the scale."""
    out = ctx.rescale(ct)
    out.scale = out.scale * OUTPUT_SCALE_FACTOR
    return out


def add_result_noise(ctx: CKKSContext, ct: Any, pattern: Callable[[np.ndarray], Any],
                     count: int = 2, sigma: float = RESULT_NOISE_SD) -> Any:
    """Add :data:`RESULT_NOISE_SD` Gaussian noise (from ``secrets``) to a masked result.

    ``pattern(e)`` maps ``count`` fresh noise values to the slot vector to add (the same
    noise wherever a value is repeated, so slots stay consistent)."""
    return ctx.add_plain(ct, pattern(gaussian_noise(count, sigma=sigma)))


def check_masking_capacity(params: CKKSParams, max_total_samples: int) -> None:
    """Refuse a preset whose prime chain cannot carry FHAUC's rescaled masks.

    FHAUC rescales twice (after the product, after the mask) and the last level must hold
    every coefficient of the masked result: at most ``2 * M**2`` at the product's scale for
    ``M`` total samples (the pre-mask sums are at most ``3 * M**2``; masks are below 1)."""
    primes = params.primes()[:-1]
    if len(primes) < 3:
        raise ValueError(f"{params.name} has {len(primes)} data primes; FHAUC needs at least "
                         "3 (two rescales and a last level)")
    scale = 2.0 ** (2 * params.scale_bits) / primes[-1]
    last = 1
    for q in primes[:-2]:
        last *= q
    need = 2.0 * 3.0 * float(max_total_samples) ** 2 * scale
    if math.log2(last) <= math.log2(need):
        raise ValueError(
            f"{params.name} cannot carry FHAUC's masked result for max_total_samples="
            f"{max_total_samples}: its last level has {math.log2(last):.1f} bits, "
            f"{math.log2(need):.1f} are needed; use {DEFAULT_PRESET}")


@dataclass(frozen=True)
class Masks:
    """One evaluation's masks (see :meth:`FHAUCAggregator.mask`).

    ``d_num`` and ``d_den`` multiply the numerator and the denominator channel (the same
    value in an honest run; :mod:`fedsec.testing.auc` forges with different ones), ``c``
    adds ``c*denom`` to the numerator (pair masking; 0 for single), ``ratio = c/d_den`` is
    published with the result."""

    d_num: float
    d_den: float
    c: float = 0.0

    @property
    def ratio(self) -> float:
        return self.c / self.d_den if self.c else 0.0

    @classmethod
    def draw(cls, masking: str) -> Masks:
        d = real_mask()
        return cls(d, d, real_mask() if masking == "pair" else 0.0)


