"""Estimators of one round's Shapley values from a utility oracle (Zheng et al.'s baselines).

Each function takes a game -- anything with ``k`` (players) and ``value(mask)`` -- a budget
and a seeded numpy generator (sampling here simulates nothing secret), and returns the
``k`` estimated values. The game is ``v`` with ``v(∅) = v(θ^t)``; estimators work on
``u(S) = v(S) − v(∅)`` where they need ``u(∅) = 0``.

* :func:`permutation_sampling` -- Monte-Carlo over random orderings (PS; Maleki et al.,
  Zheng et al. ref. [43]): the average marginal contribution over ``budget`` permutations.
* :func:`group_testing` -- Group Testing (GT; Jia et al. 2019, Zheng et al. ref. [23]): sample
  ``budget`` coalitions with size ``s`` drawn with probability ``∝ 1/s + 1/(k−s)``,
  estimate pairwise differences ``φ_i − φ_j`` from them, then find values summing to
  ``u(N)`` that fit the differences -- as the paper's feasibility programme with the
  smallest tolerance ε that makes it feasible, a linear programme solved by SciPy's HiGHS
  (:func:`scipy.optimize.linprog`).
* :func:`kernel_shap` -- KernelSHAP (KS; Lundberg & Lee, Zheng et al. ref. [39]): ``budget``
  coalitions drawn from the Shapley-kernel distribution, then the efficiency-constrained
  least-squares fit ``min Σ (u(S) − Σ_{i∈S} φ_i)²  s.t.  Σ φ_i = u(N)`` (Covert & Lee 2021),
  solved in closed form with ``numpy.linalg``. Why not ``shap.KernelExplainer``: shap
  0.52+ needs Python >= 3.12 (we support 3.11) and 0.51 pulls numba, llvmlite and pandas;
  and KernelExplainer explains a model on feature vectors against background data, and
  spends its budget enumerating whole coalition sizes when it can -- with ``k = 5`` it
  becomes exact rather than the sampling estimator whose error Zheng et al. reports. The solve
  itself is three lines of maintained linear algebra.
* :func:`gtg_shapley` -- GTG-Shapley (Liu et al. 2022, Zheng et al. ref. [38]), the FL-specific
  estimator: skip the round when ``|v(I^t) − v(θ^t)|`` is below ``eps_between``
  (between-round truncation); otherwise guided Monte-Carlo permutations (each permutation
  starts with the next player in turn), truncated within a permutation once
  ``|v(I^t) − v(prefix)| < eps_within``, until the estimates move less than
  ``tolerance`` (relative) between checks or ``budget`` permutations are spent.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
from numpy.typing import NDArray

__all__ = ["Game", "permutation_sampling", "group_testing", "kernel_shap", "gtg_shapley"]

FloatArray = NDArray[np.float64]


class Game(Protocol):
    """A cooperative game over ``k`` players, coalitions as bitmasks."""

    @property
    def k(self) -> int: ...

    def value(self, mask: int) -> float: ...


def _check_budget(budget: int, name: str) -> int:
    if isinstance(budget, bool) or not isinstance(budget, int | np.integer) or budget < 1:
        raise ValueError(f"The 'budget' parameter of {name} must be an int >= 1. "
                         f"Got {budget!r} instead.")
    return int(budget)


def permutation_sampling(game: Game, budget: int, rng: np.random.Generator) -> FloatArray:
    """PS: average marginal contributions over ``budget`` random orderings."""
    n_perm = _check_budget(budget, "permutation_sampling")
    k = game.k
    phi = np.zeros(k)
    if k == 0:
        return phi
    for _ in range(n_perm):
        mask, prev = 0, game.value(0)
        for i in rng.permutation(k):
            mask |= 1 << int(i)
            cur = game.value(mask)
            phi[i] += cur - prev
            prev = cur
    out: FloatArray = phi / n_perm
    return out


def _ends(game: Game) -> tuple[float, float, FloatArray | None]:
    """``v(∅)``, ``v(I) − v(∅)`` and, for ``k <= 1``, the SSVs themselves (nothing to
    estimate)."""
    k = game.k
    if k == 0:
        return 0.0, 0.0, np.zeros(0)
    v0 = game.value(0)
    total = game.value((1 << k) - 1) - v0
    return v0, total, np.array([total]) if k == 1 else None


def _gt_size_probs(k: int) -> FloatArray:
    sizes = np.arange(1, k)
    q = 1.0 / sizes + 1.0 / (k - sizes)
    out: FloatArray = q / q.sum()
    return out


def group_testing(game: Game, budget: int, rng: np.random.Generator) -> FloatArray:
    """GT: pairwise differences from sampled coalitions, then the minimax-ε LP."""
    from scipy.optimize import linprog

    n_samples = _check_budget(budget, "group_testing")
    k = game.k
    v0, total, trivial = _ends(game)
    if trivial is not None:
        return trivial
    q = _gt_size_probs(k)
    z = float(np.sum(1.0 / np.arange(1, k) + 1.0 / (k - np.arange(1, k))))  # Z in Jia et al.
    beta = np.zeros((n_samples, k))
    util = np.zeros(n_samples)
    for t in range(n_samples):
        size = int(rng.choice(np.arange(1, k), p=q))
        members = rng.choice(k, size=size, replace=False)
        mask = int(np.sum(1 << members))
        beta[t, members] = 1.0
        util[t] = game.value(mask) - v0
    # ΔU_ij ≈ (Z / T) Σ_t u(S_t) (β_ti − β_tj)
    delta = z / n_samples * ((beta * util[:, None]).sum(axis=0)[:, None]
                             - (beta * util[:, None]).sum(axis=0)[None, :])
    # LP over (φ_1..φ_k, ε): min ε  s.t. |φ_i − φ_j − ΔU_ij| <= ε (i < j), Σ φ = u(N)
    rows, rhs = [], []
    for i in range(k):
        for j in range(i + 1, k):
            r = np.zeros(k + 1)
            r[i], r[j], r[k] = 1.0, -1.0, -1.0
            rows.append(r.copy())
            rhs.append(delta[i, j])
            r[i], r[j] = -1.0, 1.0
            rows.append(r)
            rhs.append(-delta[i, j])
    a_eq = np.append(np.ones(k), 0.0)[None, :]
    cost = np.zeros(k + 1)
    cost[k] = 1.0
    res = linprog(cost, A_ub=np.array(rows), b_ub=np.array(rhs), A_eq=a_eq, b_eq=[total],
                  bounds=[(None, None)] * k + [(0.0, None)], method="highs")
    if not res.success:  # pragma: no cover - the programme is always feasible
        raise RuntimeError(f"Group-testing LP failed: {res.message}")
    out: FloatArray = np.asarray(res.x[:k], dtype=np.float64)
    return out


def _kernel_size_probs(k: int) -> FloatArray:
    sizes = np.arange(1, k)
    p = (k - 1) / (sizes * (k - sizes))
    out: FloatArray = p / p.sum()
    return out


def kernel_shap(game: Game, budget: int, rng: np.random.Generator) -> FloatArray:
    """KS: efficiency-constrained least squares on ``budget`` kernel-sampled coalitions."""
    n_samples = _check_budget(budget, "kernel_shap")
    k = game.k
    v0, total, trivial = _ends(game)
    if trivial is not None:
        return trivial
    p = _kernel_size_probs(k)
    z = np.zeros((n_samples, k))
    u = np.zeros(n_samples)
    for t in range(n_samples):
        size = int(rng.choice(np.arange(1, k), p=p))
        members = rng.choice(k, size=size, replace=False)
        z[t, members] = 1.0
        u[t] = game.value(int(np.sum(1 << members))) - v0
    a = z.T @ z / n_samples
    b = z.T @ u / n_samples
    ones = np.ones(k)
    a_inv = np.linalg.pinv(a)
    a_inv_b, a_inv_1 = a_inv @ b, a_inv @ ones
    denom = ones @ a_inv_1
    if abs(denom) < 1e-12:  # too few distinct samples to pin anything down
        return np.full(k, total / k)
    out: FloatArray = a_inv_b - a_inv_1 * ((ones @ a_inv_b - total) / denom)
    return out


def gtg_shapley(game: Game, budget: int, rng: np.random.Generator, *,
                eps_between: float = 1e-3, eps_within: float = 1e-3,
                tolerance: float = 0.05, check_every: int | None = None) -> FloatArray:
    """GTG-Shapley for one round (guided, truncated permutation sampling).

    ``budget`` caps the number of permutations; convergence is checked every
    ``check_every`` permutations (default ``k``): stop when the relative change of the
    running mean is below ``tolerance``.
    """
    max_perm = _check_budget(budget, "gtg_shapley")
    k = game.k
    phi = np.zeros(k)
    if k == 0:
        return phi
    v0 = game.value(0)
    vn = game.value((1 << k) - 1)
    if abs(vn - v0) <= eps_between:  # between-round truncation
        return phi
    every = check_every or k
    done = 0
    last = phi.copy()
    while done < max_perm:
        first = done % k  # guided sampling: every player leads in turn
        rest = [int(i) for i in rng.permutation([j for j in range(k) if j != first])]
        mask, prev = 0, v0
        for i in [first, *rest]:
            if abs(vn - prev) < eps_within:  # within-round truncation
                break
            mask |= 1 << i
            cur = game.value(mask)
            phi[i] += cur - prev
            prev = cur
        done += 1
        if done % every == 0:
            mean = phi / done
            change = np.abs(mean - last).sum() / max(np.abs(mean).sum(), 1e-12)
            if done > every and change < tolerance:
                break
            last = mean.copy()
    out: FloatArray = phi / done
    return out
