"""Odd polynomials for CKKS: minimax design (Remez) and depth-optimal evaluation.

Two parts, used by :mod:`fedsec.crypto.sign`:

* :func:`remez_odd_one` finds the odd polynomial of a given degree that best approximates
  the constant 1 on an interval ``[a, 1]`` (``0 < a < 1``) in the maximum norm — by
  oddness, the best approximation of ``sign`` on ``[-1, -a] U [a, 1]``. It is the Remez
  exchange algorithm on the Haar system ``T_1, T_3, ..., T_d`` (odd Chebyshev
  polynomials; odd monomials form a Chebyshev system on ``(0, inf)``), with the
  reference's extrema found as the roots of the derivative.
* :func:`evaluate_odd_chebyshev` evaluates ``sum_j c_j T_j(y)`` (odd ``j``) on a CKKS
  ciphertext holding ``y`` in ``[-1, 1]`` with multiplicative depth
  ``ceil(log2(d + 1))`` — the minimum for degree ``d`` — and returns the result at a
  requested scale *exactly*.

Evaluation
----------
The giant steps ``G_j = T_{2^j}(y)`` come from ``T_{2n} = 2 T_n^2 - 1`` (one squaring
each; ``G_j`` at depth ``j``). A polynomial ``p`` of degree below ``2m`` (``m = 2^{k-1}``)
splits as ``p = q + T_m * r`` with ``q`` and ``r`` of degree below ``m``
(``T_{m+i} = 2 T_m T_i - T_{m-i}``); ``r`` is evaluated recursively one level above the
target, multiplied by ``G_{k-1}`` and rescaled, ``q`` recursively at the target level.
Constants only ever multiply ``y`` itself (the recursion's leaves, ``c * T_1``), so
they use no extra level, and their encoding scale is chosen so that every term reaches
its sum at the same, exact scale. Pieces of degree 3 that are needed at least three levels
below ``y`` are combined from ``T_1`` and one shared baby step ``T_3 = 2 T_2 T_1 - T_1``
instead (constants only). Degree 15 costs 3 squarings and 5 products, degree 13 3 and
4, degree 7 2 and 3 (ciphertext products dominate the time: relinearization).

Chebyshev coefficients of a function bounded on ``[-1, 1]`` stay small, so terms do not
cancel catastrophically (power-basis coefficients of the same minimax polynomials reach
the thousands).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from numpy.polynomial import chebyshev as C
from numpy.typing import ArrayLike, NDArray

if TYPE_CHECKING:
    from fedsec.crypto.ckks import Ciphertext, CKKSContext

__all__ = ["remez_odd_one", "odd_depth", "chebyshev_split", "evaluate_odd_chebyshev",
           "evaluate_odd_chebyshev_plain"]


def odd_depth(degree: int) -> int:
    """Multiplicative depth :func:`evaluate_odd_chebyshev` uses for ``degree``."""
    if degree < 1:
        raise ValueError(f"The 'degree' parameter of odd_depth must be >= 1. Got {degree} "
                         "instead.")
    return max(1, math.ceil(math.log2(degree + 1)))


def _odd_from(coef_odd: NDArray[np.float64]) -> NDArray[np.float64]:
    c = np.zeros(2 * len(coef_odd), dtype=np.float64)
    c[1::2] = coef_odd
    return c


def remez_odd_one(degree: int, a: float, *, tol: float = 1e-10,
                  max_iter: int = 200) -> tuple[NDArray[np.float64], float]:
    """Minimax odd polynomial of ``degree`` approximating 1 on ``[a, 1]``.

    Parameters
    ----------
    degree : int
        Odd degree >= 1.
    a : float
        Left end of the interval, ``0 < a < 1``.
    tol : float
        Stop when the extremal errors of the reference agree to this relative tolerance
        (equioscillation).
    max_iter : int
        Iteration limit; reaching it raises ``RuntimeError``.

    Returns
    -------
    coeffs : ndarray
        Chebyshev coefficients (``coeffs[j]`` multiplies ``T_j``; even ones are 0).
    error : float
        ``max |p(x) - 1|`` over ``[a, 1]``: the levelled error of the final reference,
        checked against the extrema of ``p - 1``.
    """
    if degree < 1 or degree % 2 == 0:
        raise ValueError(f"The 'degree' parameter of remez_odd_one must be an odd int >= 1. "
                         f"Got {degree} instead.")
    if not 0.0 < a < 1.0:
        raise ValueError(f"The 'a' parameter of remez_odd_one must be in (0, 1). Got {a} "
                         "instead.")
    m = (degree + 1) // 2
    # Initial reference: Chebyshev extrema mapped linearly onto [a, 1].
    t = np.cos(np.pi * np.arange(m + 1)[::-1] / m) if m > 0 else np.zeros(1)
    ref = a + (1.0 - a) * (t + 1.0) / 2.0
    basis = [np.eye(2 * j + 2)[-1] for j in range(m)]  # T_1, T_3, ..., T_degree
    signs = (-1.0) ** np.arange(m + 1)
    for _ in range(max_iter):
        A = np.empty((m + 1, m + 1))
        for j, e in enumerate(basis):
            A[:, j] = C.chebval(ref, e)
        A[:, m] = signs
        sol = np.linalg.solve(A, np.ones(m + 1))
        c = _odd_from(np.asarray(sol[:m], dtype=np.float64))
        crit = C.chebroots(C.chebder(c)) if degree > 1 else np.zeros(0)
        crit = np.real(crit[np.abs(np.imag(crit)) < 1e-12])
        crit = crit[(crit > a) & (crit < 1.0)]
        cand = np.unique(np.concatenate([[a, 1.0], crit, ref]))
        err = C.chebval(cand, c) - 1.0
        pts: list[float] = []
        vals: list[float] = []
        for x, e in zip(cand, err, strict=True):  # keep the largest of each same-sign run
            if pts and np.sign(e) == np.sign(vals[-1]):
                if abs(e) > abs(vals[-1]):
                    pts[-1], vals[-1] = float(x), float(e)
            else:
                pts.append(float(x))
                vals.append(float(e))
        while len(pts) > m + 1:  # drop the smaller end until m + 1 alternating points remain
            if abs(vals[0]) < abs(vals[-1]):
                pts.pop(0)
                vals.pop(0)
            else:
                pts.pop()
                vals.pop()
        if len(pts) < m + 1:
            raise RuntimeError(f"Remez lost alternation (degree {degree}, a={a})")
        hi = max(abs(v) for v in vals)
        lo = min(abs(v) for v in vals)
        ref = np.asarray(pts)
        if hi - lo <= tol * hi:
            return c, float(np.max(np.abs(err)))
    raise RuntimeError(f"Remez did not converge (degree {degree}, a={a})")


def chebyshev_split(coeffs: ArrayLike, m: int) -> tuple[NDArray[np.float64],
                                                        NDArray[np.float64]]:
    """Write ``p = sum c_j T_j`` (degree < 2m) as ``q + T_m * r`` with deg q, deg r < m."""
    c = np.asarray(coeffs, dtype=np.float64)
    if len(c) > 2 * m:
        raise ValueError(f"degree {len(c) - 1} does not split at T_{m}")
    q = np.zeros(m, dtype=np.float64)
    r = np.zeros(m, dtype=np.float64)
    q[:min(m, len(c))] = c[:m]
    for i in range(m, len(c)):  # T_{m+j} = 2 T_m T_j - T_{m-j}
        j = i - m
        if j == 0:
            r[0] += c[i]
            continue
        r[j] += 2.0 * c[i]
        q[m - j] -= c[i]
    return q, r


def _trim(c: NDArray[np.float64]) -> NDArray[np.float64]:
    nz = np.nonzero(c)[0]
    return c[:nz[-1] + 1] if nz.size else c[:0]


def evaluate_odd_chebyshev_plain(coeffs: ArrayLike, y: ArrayLike) -> NDArray[np.float64]:
    """``sum_j coeffs[j] T_j(y)`` in floating point (the reference for the CKKS path)."""
    return np.asarray(C.chebval(np.asarray(y, dtype=np.float64),
                                np.asarray(coeffs, dtype=np.float64)), dtype=np.float64)


class _Giants:
    """``T_{2^j}(y)`` for ``j = 0, 1, ...``, computed on demand (one squaring each), and
    the baby step ``T_3(y)`` (one product, two levels below ``y``)."""

    def __init__(self, ctx: CKKSContext, y: Ciphertext) -> None:
        self.ctx = ctx
        self.g: list[Ciphertext] = [y]
        self._t3: Ciphertext | None = None

    def __getitem__(self, j: int) -> Ciphertext:
        while len(self.g) <= j:
            s = self.ctx.square(self.g[-1])
            self.g.append(self.ctx.add_constant(self.ctx.add(s, s), -1.0))
        return self.g[j]

    @property
    def t3_level(self) -> int:
        return self.ctx.level_of(self.g[0]) - 2

    def t3(self) -> Ciphertext:
        """``T_3 = 2 T_2 T_1 - T_1``; ``T_1`` is brought to the product's exact scale by a
        constant multiplication (no product)."""
        if self._t3 is None:
            y, g1 = self.g[0], self[1]
            prod = self.ctx.multiply(g1, self.ctx.mod_switch(y, level=self.ctx.level_of(g1)))
            lin = self.ctx.multiply_const_exact(y, 0.5, level=self.ctx.level_of(prod),
                                                scale=float(prod.scale))
            self._t3 = self.ctx.with_value_factor(self.ctx.sub(prod, lin), 2.0)
        return self._t3


def _eval(ctx: CKKSContext, giants: _Giants, c: NDArray[np.float64], level: int,
          scale: float) -> Ciphertext | None:
    c = _trim(c)
    if c.size == 0:
        return None
    if np.any(c[0::2] != 0.0):
        raise ValueError("evaluate_odd_chebyshev needs an odd polynomial")
    d = len(c) - 1
    if d == 1:
        return ctx.multiply_const_exact(giants[0], float(c[1]), level=level, scale=scale)
    if d == 3 and level < giants.t3_level:  # c1 T1 + c3 T3: constants only, T3 shared
        t1 = ctx.multiply_const_exact(giants[0], float(c[1]), level=level, scale=scale)
        t3 = ctx.multiply_const_exact(giants.t3(), float(c[3]), level=level, scale=scale)
        return ctx.add(t1, t3)
    k = odd_depth(d)
    m = 1 << (k - 1)
    q, r = chebyshev_split(c, m)
    g = giants[k - 1]
    if ctx.level_of(g) > level + 1:
        g = ctx.mod_switch(g, level=level + 1)
    prime = ctx.rescale_prime(g)
    r_ct = _eval(ctx, giants, r, level + 1, scale * prime / float(g.scale))
    out = None
    if r_ct is not None:
        out = ctx.multiply(g, r_ct)
        ctx.snap_scale(out, scale)
    q_ct = _eval(ctx, giants, q, level, scale)
    if q_ct is not None:
        out = q_ct if out is None else ctx.add(out, q_ct)
    return out


def evaluate_odd_chebyshev(ctx: CKKSContext, y: Ciphertext, coeffs: Sequence[float] | ArrayLike,
                           *, scale: float | None = None) -> Ciphertext:
    """Evaluate the odd Chebyshev series ``sum_j coeffs[j] T_j(y)`` homomorphically.

    Parameters
    ----------
    ctx : CKKSContext
        Needs relinearization keys.
    y : Ciphertext
        Slots in ``[-1, 1]`` (outside it the Chebyshev polynomials grow like
        ``(|y| + sqrt(y^2 - 1))^d``). Its scale must be within a factor 2 of the
        preset's scale.
    coeffs : array_like
        Chebyshev coefficients, ``coeffs[j]`` for ``T_j``; even entries must be 0.
    scale : float, optional
        Exact scale of the result (default: the preset's scale).

    Returns
    -------
    Ciphertext
        The result ``odd_depth(d)`` levels below ``y``, at exactly ``scale``.
    """
    c = _trim(np.asarray(coeffs, dtype=np.float64).ravel())
    if c.size < 2 or not np.all(np.isfinite(c)):
        raise ValueError("The 'coeffs' parameter of evaluate_odd_chebyshev must be finite "
                         "and of degree >= 1.")
    if np.any(c[0::2] != 0.0):
        raise ValueError("The 'coeffs' parameter of evaluate_odd_chebyshev must be odd "
                         "(even-index coefficients 0).")
    target = float(ctx.scale if scale is None else scale)
    ratio = math.log2(float(y.scale)) - ctx.params.scale_bits
    if abs(ratio) > 1.0:
        raise ValueError(f"the input's scale 2^{math.log2(float(y.scale)):.2f} is not within "
                         f"a factor 2 of the preset's 2^{ctx.params.scale_bits}")
    depth = odd_depth(len(c) - 1)
    if depth > ctx.level_of(y):
        raise ValueError(f"degree {len(c) - 1} needs depth {depth}; the ciphertext has "
                         f"{ctx.level_of(y)} levels left")
    out = _eval(ctx, _Giants(ctx, y), c, ctx.level_of(y) - depth, target)
    assert out is not None
    return out
