"""Homomorphic sign (comparison) by composite minimax polynomials, after Lee et al.

``sign(x)`` is approximated by ``p_k o ... o p_1`` where each ``p_i`` is the odd minimax
polynomial of degree ``d_i`` on the image of the previous stage (Lee, Lee, Kim, No:
*Minimax approximation of sign function by composite polynomial for homomorphic
comparison*, and the degree sets of their RNS-CKKS optimisation, IEEE Access 2022). Lee
et al. show that this composition of stage-wise minimax polynomials is the optimal
composite polynomial for given degrees; Priv-PFL (Aghabagherloo et al., App. A) uses it for the
encrypted acceptance test. The coefficients are computed here (Remez, in double
precision, ~10 ms per precision, cached), not copied.

Precision ``alpha`` and what is guaranteed
------------------------------------------
For ``alpha`` in :data:`SUPPORTED_ALPHAS` and every real ``x`` with
``2^-alpha * (1 - 2^-10) <= |x| <= 1 + 2^-10`` (:func:`sign_input_bound`)::

    |F(x) - sign(x)| <= sign_error_bound(alpha) < 2^(1 - alpha)

for the polynomial evaluated in exact arithmetic (the bound is the levelled error of the
converged Remez reference, checked on 600,000-point grids per precision in the tests),
i.e. the comparison ``(F(x) + 1) / 2`` is within
``2^-alpha`` of the step function — Lee et al.'s ``(alpha, alpha)``-closeness. The bounds
(the last stage's levelled minimax error) are 2^-7.44 (alpha 8), 2^-9.16 (alpha 10) and
2^-11.50 (alpha 12). Under CKKS add the evaluation noise: at a 40-bit scale measured up
to 1.2e-5 (ring 2^15, alpha 12; see BENCHMARKS.md), well inside the slack to
2^(1 - alpha) (1.4e-4 at alpha 12).

============  ===============  =====  =======================================
alpha         degrees          depth  ciphertext products (squarings included)
============  ===============  =====  =======================================
8             7, 15, 15        11     21
10            7, 7, 13, 15     14     25
12            15, 15, 15, 15   16     32
============  ===============  =====  =======================================

Margins for SEAL's prime-vs-scale mismatch
------------------------------------------
SEAL's 40-bit primes differ from 2^40 by ~2^-16 (ring 2^15). The evaluation
(:func:`fedsec.crypto.poly.evaluate_odd_chebyshev`) tracks scales exactly: every stage
ends at exactly the preset's scale, so the mismatch changes no value. On top of that each
stage is designed on the previous stage's image widened by ``2^-16`` on both sides
(:data:`STAGE_MARGIN`), about 100 times the CKKS noise, so noise never pushes an
intermediate value outside the interval its stage was designed for (where the high-degree
stages leave their equioscillating band fast); and the first stage accepts inputs
``2^-10`` beyond ``[2^-alpha, 1]`` on either side (:data:`INPUT_MARGIN`).

Outside the domain
------------------
* ``0 < |x| < 2^-alpha``: no precision guarantee. Every stage is positive on ``(0, 1]``
  (checked in the tests), so the output keeps the sign of ``x`` and stays within
  ``[-1 - err, 1 + err]``, but tends to 0 as ``x`` does: such ``x`` decide nothing.
* ``|x| > 1 + 2^-10``: **no guarantee at all**. The polynomials leave their band at
  once: a positive ``x`` yields a confident ``-1`` from ``x`` = 1.0022 (alpha 8),
  1.0013 (alpha 10) and 1.0010 (alpha 12) on (e.g. alpha 8: F(1.002) = -0.18,
  F(1.005) = -1.004), and a little further the composition overflows (alpha 12 from
  ``x`` ~ 1.008; garbage under CKKS). A protocol must scale its values into the domain
  from public bounds and make sure no party can push a compared value out of it: a
  party that can exceed the bound by 0.1% can flip its comparison.
  :func:`sign_input_bound` says what this module assumes; :func:`check_sign_domain`
  checks plaintext values.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedsec._validation import check_int
from fedsec.crypto.ckks import Ciphertext, CKKSContext
from fedsec.crypto.poly import (
    evaluate_odd_chebyshev,
    evaluate_odd_chebyshev_plain,
    odd_depth,
    remez_odd_one,
)

__all__ = [
    "SUPPORTED_ALPHAS", "SIGN_DEGREES", "INPUT_MARGIN", "STAGE_MARGIN", "SignApproximation",
    "sign_approximation", "sign_depth", "sign_error_bound", "sign_input_bound",
    "check_sign_domain", "sign_plain", "sign_encrypted", "step_encrypted",
]

SUPPORTED_ALPHAS: tuple[int, ...] = (8, 10, 12)
#: Lee et al.'s depth-optimal degree sets for each precision.
SIGN_DEGREES: dict[int, tuple[int, ...]] = {
    8: (7, 15, 15),
    10: (7, 7, 13, 15),
    12: (15, 15, 15, 15),
}
#: Relative slack of the first stage's interval beyond ``[2^-alpha, 1]``.
INPUT_MARGIN = 2.0 ** -10
#: Absolute slack around each intermediate stage's input interval.
STAGE_MARGIN = 2.0 ** -16


@dataclass(frozen=True)
class SignApproximation:
    """A composite odd polynomial approximating ``sign`` on ``lower <= |x| <= upper``.

    Attributes
    ----------
    alpha : int
        Precision parameter.
    degrees : tuple of int
        Degree of each stage.
    stages : tuple of ndarray
        Chebyshev coefficients of each stage in its normalised variable: stage 1 reads
        ``x / upper``; each stage's output is already divided by the next stage's
        interval bound, so every stage reads values in ``[-1, 1]``.
    lower, upper : float
        The guaranteed domain ``lower <= |x| <= upper``.
    error : float
        ``max |F(x) - sign(x)|`` over the domain (the last stage's minimax error).
    stage_errors : tuple of float
        Minimax error of each stage on its own (un-normalised) interval.
    stage_intervals : tuple of (float, float)
        Each stage's design interval in its normalised variable, ``[a_i, 1]``.
    """

    alpha: int
    degrees: tuple[int, ...]
    stages: tuple[NDArray[np.float64], ...]
    lower: float
    upper: float
    error: float
    stage_errors: tuple[float, ...]
    stage_intervals: tuple[tuple[float, float], ...]

    @property
    def depth(self) -> int:
        """Multiplicative depth of the homomorphic evaluation."""
        return sum(odd_depth(d) for d in self.degrees)

    def plain(self, x: ArrayLike) -> NDArray[np.float64]:
        """Evaluate the composite polynomial in floating point."""
        y = np.asarray(x, dtype=np.float64) / self.upper
        for c in self.stages:
            y = evaluate_odd_chebyshev_plain(c, y)
        return y


def _check_alpha(alpha: Any, owner: str) -> int:
    a = check_int(alpha, "alpha", owner)
    if a not in SUPPORTED_ALPHAS:
        raise ValueError(f"The 'alpha' parameter of {owner} must be one of "
                         f"{list(SUPPORTED_ALPHAS)}. Got {a} instead.")
    return a


@functools.cache
def _design(alpha: int) -> SignApproximation:
    degrees = SIGN_DEGREES[alpha]
    lower = 2.0 ** -alpha * (1.0 - INPUT_MARGIN)
    upper = 1.0 + INPUT_MARGIN
    a = lower / upper
    raw: list[np.ndarray] = []
    errors: list[float] = []
    intervals: list[tuple[float, float]] = []
    bounds: list[float] = []
    for d in degrees:
        c, err = remez_odd_one(d, a)
        raw.append(c)
        errors.append(err)
        intervals.append((a, 1.0))
        hi = 1.0 + err + STAGE_MARGIN
        lo = 1.0 - err - STAGE_MARGIN
        if lo <= 0.0:
            raise RuntimeError(f"stage of degree {d} does not separate the signs")
        bounds.append(hi)
        a = lo / hi
    stages = tuple(c / bounds[i] if i + 1 < len(raw) else c for i, c in enumerate(raw))
    for s in stages:
        s.setflags(write=False)
    return SignApproximation(alpha, degrees, stages, lower, upper, errors[-1], tuple(errors),
                             tuple(intervals))


def sign_approximation(alpha: int) -> SignApproximation:
    """The composite minimax sign polynomial for precision ``alpha`` (computed once).

    Parameters
    ----------
    alpha : int
        One of :data:`SUPPORTED_ALPHAS`.
    """
    return _design(_check_alpha(alpha, "sign_approximation"))


def sign_depth(alpha: int) -> int:
    """Levels one homomorphic sign evaluation consumes (11, 14, 16 for alpha 8, 10, 12)."""
    return sum(odd_depth(d) for d in SIGN_DEGREES[_check_alpha(alpha, "sign_depth")])


def sign_error_bound(alpha: int) -> float:
    """Guaranteed ``max |F(x) - sign(x)|`` on the domain, in exact arithmetic."""
    return sign_approximation(alpha).error


def sign_input_bound(alpha: int) -> tuple[float, float]:
    """The domain ``(lower, upper)``: the guarantee holds for ``lower <= |x| <= upper``.

    ``upper`` is the largest magnitude the evaluation tolerates (``1 + 2^-10``); values
    beyond it make the output meaningless (see the module docstring). ``lower`` is
    ``2^-alpha (1 - 2^-10)``; smaller magnitudes keep their sign but not the precision.
    """
    s = sign_approximation(alpha)
    return s.lower, s.upper


def check_sign_domain(values: ArrayLike, alpha: int) -> NDArray[np.bool_]:
    """Which plaintext ``values`` the precision guarantee covers.

    Returns a boolean mask; raises ``ValueError`` if any value exceeds the upper bound
    (where the approximation is meaningless) or is not finite.
    """
    lo, hi = sign_input_bound(alpha)
    v = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(v)):
        raise ValueError("The 'values' parameter of check_sign_domain must be finite.")
    over = np.abs(v) > hi
    if np.any(over):
        raise ValueError(f"The 'values' parameter of check_sign_domain must satisfy "
                         f"|x| <= {hi!r}. Got max |x| = {float(np.max(np.abs(v)))!r} instead.")
    return np.asarray(np.abs(v) >= lo)


def sign_plain(x: ArrayLike, alpha: int) -> NDArray[np.float64]:
    """The composite polynomial evaluated in floating point (reference for tests)."""
    return sign_approximation(alpha).plain(x)


def _stages_encrypted(ctx: CKKSContext, ct: Ciphertext, approx: SignApproximation,
                      last_factor: float, keep_levels: int | None, owner: str) -> Ciphertext:
    if not isinstance(ctx, CKKSContext):
        raise TypeError(f"The 'ctx' parameter of {owner} must be a CKKSContext. Got "
                        f"{type(ctx).__name__} instead.")
    if not ctx.has_relin_keys:
        raise ValueError(f"{owner} needs a context with relinearization keys")
    left = ctx.level_of(ct)
    if left < approx.depth:
        raise ValueError(f"{owner} with alpha={approx.alpha} needs {approx.depth} levels; "
                         f"the ciphertext has {left}")
    if abs(math.log2(float(ct.scale)) - ctx.params.scale_bits) > 1.0:
        raise ValueError(f"{owner}: the ciphertext's scale 2^{math.log2(float(ct.scale)):.2f} "
                         f"must be within a factor 2 of the preset's 2^{ctx.params.scale_bits}")
    if keep_levels is not None:
        keep = check_int(keep_levels, "keep_levels", owner, min_value=0,
                         max_value=left - approx.depth)
        ct = ctx.mod_switch(ct, level=approx.depth + keep)
    y = ctx.with_value_factor(ct, 1.0 / approx.upper)
    n = len(approx.stages)
    for i, c in enumerate(approx.stages):
        coeffs = c * last_factor if i == n - 1 else c
        y = evaluate_odd_chebyshev(ctx, y, coeffs, scale=ctx.scale)
    return y


def sign_encrypted(ctx: CKKSContext, ct: Ciphertext, alpha: int, *,
                   keep_levels: int | None = None) -> Ciphertext:
    """Homomorphic ``sign`` of every slot of ``ct``.

    Parameters
    ----------
    ctx : CKKSContext
        Any role's context with relinearization keys (no secret key needed).
    ct : Ciphertext
        Real slots with ``|x| <= sign_input_bound(alpha)[1]``; at least
        ``sign_depth(alpha)`` levels left; scale within a factor 2 of the preset's.
    alpha : int
        Precision, one of :data:`SUPPORTED_ALPHAS`.
    keep_levels : int, optional
        Levels the result keeps. By default all the input has beyond the depth. A smaller
        value first drops the input to ``sign_depth(alpha) + keep_levels`` (free), and
        every product then runs on fewer primes: with ``keep_levels=0`` (a result that
        is only decrypted) the evaluation is several times faster at ring 2^15.

    Returns
    -------
    Ciphertext
        ``F(x)`` with ``|F(x) - sign(x)| <= sign_error_bound(alpha)`` (plus CKKS noise)
        for ``|x| >= 2^-alpha``; ``sign_depth(alpha)`` levels below ``ct``, at exactly the
        preset's scale.
    """
    approx = _design(_check_alpha(alpha, "sign_encrypted"))
    return _stages_encrypted(ctx, ct, approx, 1.0, keep_levels, "sign_encrypted")


def step_encrypted(ctx: CKKSContext, ct: Ciphertext, alpha: int, *,
                   keep_levels: int | None = None) -> Ciphertext:
    """Homomorphic comparison with 0: ``(F(x) + 1) / 2``, about 1 for ``x > 0`` and 0
    for ``x < 0`` (error at most ``sign_error_bound(alpha) / 2`` plus noise on the
    domain). Same depth, requirements and ``keep_levels`` as :func:`sign_encrypted`; the
    halving is folded into the last stage, the ``+ 1/2`` is a free plaintext addition."""
    approx = _design(_check_alpha(alpha, "step_encrypted"))
    out = _stages_encrypted(ctx, ct, approx, 0.5, keep_levels, "step_encrypted")
    return ctx.add_constant(out, 0.5)
