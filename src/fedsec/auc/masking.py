"""What keeps a party from reading the federation's class counts out of an FHAUC result.

The grid, and why noise must scale with the counts
--------------------------------------------------
The aggregator hides ``num`` and ``denom = 2*Pos*Neg`` behind one real mask ``d``, and a
party divides. A mask is a plaintext constant encoded at the prime ``q`` the result is then
rescaled by, so it is ``K/q`` for an integer ``K``: the value a party reads, ``Y =
(K/q)*denom``, lies on a grid of step ``denom/q``, and a candidate denominator ``q'`` is
consistent only if ``q*Y/q'`` is an integer. That test (with the error bound's) left only
the true denominator from ~10^4 samples on, with the earlier 35-bit masks.

Noise on ``Y`` hides the grid only if it is at least about one step, ``denom/q``: noise
proportional to the counts. A fixed noise cannot do that across federations of 2 to 2^20
samples without ruining small ones' precision; and any second plaintext mask (per slot,
per class) is again an integer polynomial that a party who reads many slots can solve for.
Two things together do it:

* **A fine grid**: the default chain (``CKKS_128_N8192_DEPTH1_S39``) masks the product
  before any rescale, at a 48-bit prime (the earlier chain: 35 bits), so ``d`` has ~47 bits.
* **Noise proportional to the pooled counts, from the parties**: every party adds Gaussian
  noise of standard deviation :data:`COUNT_NOISE_SD` ``/ sqrt(parties)`` to its ``Pos`` and
  ``Neg`` and one such value ``4e`` to every trapezoid term ``T`` it encrypts. The
  aggregator squares the *sum*, so the noise is multiplied by the federation's pooled
  counts: ``denom`` gets ``2*(Pos*e2 + Neg*e1)`` and ``num = sum T*F`` gets ``4*e*sum F =
  4*e*Neg`` - relative errors of ``~sigma / min(Pos, Neg)``. A party knows its own noise
  but not the others' (at least one other party takes part), which is at least ``sigma /
  sqrt(2)``. With ``K ~ 2^47`` and at most 2^20 samples the grid residuals ``K * noise /
  denom`` and ``K * noise / num`` have standard deviations of at least ~0.75 (~1 for
  balanced classes): a wrapped normal that close to uniform gives a likelihood ratio
  within ~1e-5 of 1 per evaluation, so the test rules nothing out - while the AUC keeps a
  relative precision of ``~2^-28 / min(Pos, Neg)`` (measured 6e-11 to 1.0e-9 at 100
  samples, up to 7e-8 for one sample of each class). In malicious mode the same noise is
  drawn once and enters every run (it is part of the data), so the runs still agree.

The error bound (``B/denom``, ``B`` the pairs within a bin) is the second fraction over the
same denominator: read exactly, "``q' * bound`` is an integer" is another test. Every party
therefore adds a one-sided offset ``delta_m`` uniform in ``[0,`` :data:`BOUND_OFFSET_MAX`
``/ parties)`` to each of its bound terms (both the positives and the negatives of each
bin), so the pooled ``B`` becomes ``B + delta*Neg + delta'*Pos + n*delta*delta' >= B``: the
bound stays certified (it can only grow), a party cannot tell ``B`` within
``~delta*(Pos + Neg)`` counts (more than 2 from ~100 samples per class), and the reported
bound overstates by at most ``~0.05 * (1/Pos + 1/Neg)``: two significant digits once the
classes hold a few hundred samples each. (Exact mode certifies a zero bound from its
refinement rounds instead, see :mod:`fedsec.auc.exact`.)

After the mask, the aggregator adds :data:`RESULT_NOISE_SD` Gaussian noise to every slot:
far below the AUC's precision, it floods the rounding of the rescale, which would otherwise
leave ``round(d * n)`` for the small key-switching noise ``n`` in the coefficients a party
decrypts - enough, over thousands of coefficients, to estimate ``d``.

What remains is measured in ``tests/auc/test_count_leakage.py`` and
``benchmarks/attack_auc_counts.py`` (:mod:`fedsec.testing.auc_counts`).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.dpnoise import gaussian_noise, secure_uniform
from fedsec.crypto.params import DEFAULT_PRESET, CKKSParams

__all__ = ["COUNT_NOISE_SD", "NUMERATOR_NOISE_FACTOR", "BOUND_OFFSET_MAX", "RESULT_NOISE_SD",
           "MIN_MASK_PRIME_BITS",
           "OUTPUT_SCALE_FACTOR", "Masks", "real_mask", "count_noise", "bound_offset",
           "masked_product", "finish_masked", "add_result_noise", "check_masking_capacity",
           "bound_overstatement"]

#: Standard deviation of the noise the parties together add to each count they encrypt
#: (each party ``COUNT_NOISE_SD / sqrt(parties)``); see the module docs.
COUNT_NOISE_SD = 2.0 ** -28
#: Every trapezoid term gets this times one noise value (so num gets ``4*e*Neg``): the
#: numerator's grid residual then has a standard deviation of at least ~0.75 even when
#: almost every sample is positive (``Pos`` ~ 2^20), where ``2*e`` left ~0.38 - uniform
#: enough for one evaluation, not for an attacker pooling many.
NUMERATOR_NOISE_FACTOR = 4.0
#: The parties' one-sided offsets on the bound terms add up to at most this.
BOUND_OFFSET_MAX = 0.1
#: Gaussian noise the aggregator adds to every masked slot (floods the rescale's rounding).
RESULT_NOISE_SD = 2.0 ** -40
#: A mask prime below this leaves a grid the counts' noise cannot hide at 2^20 samples.
MIN_MASK_PRIME_BITS = 46
# The masked result is computed at 4x its value (the slot sums carry a factor 4) and the
# factor is removed exactly by declaring the ciphertext's scale 4x larger.
OUTPUT_SCALE_FACTOR = 4.0


def real_mask() -> float:
    """A mask uniform in [1/2, 1) with a full 52-bit mantissa, from ``secrets``.

    Encoding it at a prime's scale ``q`` rounds it to ``K/q`` for an integer ``K`` with
    ``log2(q)`` bits: the grid the counts' noise must hide (see the module docs)."""
    return float((1 << 52) + secrets.randbits(52)) / float(1 << 53)


def count_noise(size: int, n_parties: int, sigma: float = COUNT_NOISE_SD) -> np.ndarray:
    """One party's share of the counts' noise: ``size`` Gaussian values of standard
    deviation ``sigma / sqrt(n_parties)`` (operating-system randomness)."""
    if size == 0:
        return np.zeros(0)
    return gaussian_noise(size, sigma=sigma / math.sqrt(max(1, n_parties)))


def bound_offset(n_parties: int) -> float:
    """One party's one-sided offset for its bound terms, uniform in ``[0,
    BOUND_OFFSET_MAX / n_parties)``."""
    return BOUND_OFFSET_MAX / max(1, n_parties) * float(secure_uniform(1)[0])


def bound_overstatement(denom_lower: float, n_points: int) -> float:
    """The most the parties' offsets can add to a bound ``B/denom`` for any ``denom >=
    denom_lower`` (``(Pos + Neg)/denom <= 1`` whenever both classes exist)."""
    d = max(1.0, float(denom_lower))
    return BOUND_OFFSET_MAX + n_points * BOUND_OFFSET_MAX ** 2 / d


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
    """Rescale a sum of :func:`masked_product` terms (rounding away the exact multiple of
    the mask the decrypted polynomial would otherwise be) and divide by
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
    """Refuse a preset whose chain cannot carry FHAUC's masked result, or whose mask prime
    leaves a grid too coarse for the counts' noise.

    FHAUC squares without rescaling (scale ``s**2``), multiplies by a mask encoded at the
    top prime ``q`` and rescales by it: the top level must hold the masked product and the
    last level the result, values up to ``6 * M**2`` for ``M`` total samples."""
    primes = params.primes()[:-1]
    if len(primes) < 2:
        raise ValueError(f"{params.name} has {len(primes)} data primes; FHAUC needs at least "
                         "2 (the mask's rescale and a last level)")
    mask_prime = primes[-1]
    if math.log2(mask_prime) < MIN_MASK_PRIME_BITS:
        raise ValueError(
            f"{params.name} masks at a {math.log2(mask_prime):.0f}-bit prime; FHAUC needs "
            f"at least {MIN_MASK_PRIME_BITS} bits (a coarser mask grid lets a party test "
            f"candidate class counts); use {DEFAULT_PRESET}")
    scale_sq = 2.0 * params.scale_bits
    value = math.log2(6.0 * float(max_total_samples) ** 2)
    last = sum(math.log2(q) for q in primes[:-1])
    top = last + math.log2(mask_prime)
    for name, bits, need in (("last level", last, value + scale_sq),
                             ("top level", top, value + scale_sq + math.log2(mask_prime))):
        if bits - 1.0 <= need:
            raise ValueError(
                f"{params.name} cannot carry FHAUC's masked result for max_total_samples="
                f"{max_total_samples}: its {name} has {bits:.1f} bits, {need + 1.0:.1f} "
                f"are needed; use {DEFAULT_PRESET}")


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
