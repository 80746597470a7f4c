"""Model-poisoning attacks over flat parameter vectors (one small class per attack, byzfl-style).

Every attack is called with the honest clients' vectors (rows of a ``(n_honest, d)`` array --
in fedsec's simulations, model *updates* relative to a reference model the attacker knows),
a seeded ``numpy.random.Generator`` and the number of malicious clients, and returns one
malicious vector per malicious client, shape ``(n_malicious, d)``. The attacker is
*omniscient* (it sees every honest vector), the standard worst case in the literature.

=====================  ========================================================================
``gaussian``           each malicious vector ~ N(mu, sigma^2 I)
``sign-flip``          ``-mean`` of the honest vectors (Allen-Zhu et al. 2020)
``label-flip``         data poisoning: malicious clients train on labels ``c - 1 - y``; the
                       attack sends their own (honestly computed) vectors
``alie``               "a little is enough": ``mean + tau * std`` (Baruch et al. 2019), with
                       ``tau`` from the paper's ``z_max`` when not given
``ipm``                inner-product manipulation: ``-tau * mean`` (Xie et al. 2020)
``min-max``            ``mean + g * p`` with the largest ``g`` whose distance to every honest
                       vector stays below the honest vectors' largest pairwise distance
                       (Shejwalkar & Houmansadr, NDSS 2021), solved in closed form
``min-sum``            same, bounding the *sum* of squared distances
``trim``               Fang et al.'s full-knowledge trim attack (USENIX Security 2020)
``balance-edge``       adaptive attack on BALANCE's acceptance rule: the point furthest from
                       the honest mean, against the honest direction, that still lies inside
                       the acceptance balls of at least a share ``coverage`` of honest clients
=====================  ========================================================================

Randomness (Gaussian, trim) comes only from the ``rng`` passed in: simulation randomness,
reproducible, protecting nothing. byzfl (MIT) implements sign flipping, IPM, ALIE, Gaussian
and label flipping; the tests cross-check ours against it.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from statistics import NormalDist
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from fedsec._validation import check_int, check_real

__all__ = [
    "ATTACKS",
    "Attack",
    "ALittleIsEnough",
    "BalanceEdge",
    "FangTrim",
    "Gaussian",
    "InnerProductManipulation",
    "LabelFlipping",
    "MinMax",
    "MinSum",
    "SignFlipping",
    "alie_z_max",
    "make_attack",
]

FloatMatrix = NDArray[np.float64]


def _honest(vectors: NDArray[Any], owner: str, minimum: int = 1) -> FloatMatrix:
    x = np.asarray(vectors, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < minimum:
        raise ValueError(f"The honest vectors given to {owner} must be a 2-D array with at "
                         f"least {minimum} row(s). Got shape {x.shape} instead.")
    if not np.isfinite(x).all():
        raise ValueError(f"The honest vectors given to {owner} must be finite.")
    return x


def _repeat(v: NDArray[np.float64], n: int) -> FloatMatrix:
    return np.repeat(v[None, :], n, axis=0)


class Attack(ABC):
    """A poisoning attack: honest vectors in, one malicious vector per malicious client out."""

    #: Registry name.
    name: ClassVar[str] = ""
    #: True when the attack needs each honest client's acceptance radius (``radii=``).
    needs_radii: ClassVar[bool] = False
    #: True for data poisoning (malicious clients train on altered data).
    poisons_data: ClassVar[bool] = False

    def __call__(self, honest: NDArray[Any], rng: np.random.Generator, *,
                 n_malicious: int = 1, radii: NDArray[Any] | None = None) -> FloatMatrix:
        """Malicious vectors, shape ``(n_malicious, d)``.

        Parameters
        ----------
        honest : array of shape (n_honest, d)
        rng : numpy.random.Generator
            Seeded simulation randomness.
        n_malicious : int, default=1
        radii : array of shape (n_honest,), optional
            Acceptance radius ``sigma_i ||w_i||`` of each honest client (``balance-edge``).
        """
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"The 'rng' parameter of the {self.name} attack must be a "
                            f"numpy.random.Generator. Got {type(rng).__name__} instead.")
        m = check_int(n_malicious, "n_malicious", f"the {self.name} attack", min_value=1)
        x = _honest(honest, f"the {self.name} attack", self._min_honest)
        out = self._attack(x, rng, m, radii)
        return np.asarray(out, dtype=np.float64).reshape(m, x.shape[1])

    _min_honest: ClassVar[int] = 1

    @abstractmethod
    def _attack(self, x: FloatMatrix, rng: np.random.Generator, m: int,
                radii: NDArray[Any] | None) -> FloatMatrix: ...

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, **{k: v for k, v in vars(self).items()
                                      if not k.startswith("_")}}


class Gaussian(Attack):
    """Random vectors ``N(mu, sigma^2 I)``, independent per malicious client."""

    name = "gaussian"

    def __init__(self, mu: float = 0.0, sigma: float = 1.0) -> None:
        self.mu = check_real(mu, "mu", "Gaussian")
        self.sigma = check_real(sigma, "sigma", "Gaussian", ge=0.0)

    def _attack(self, x: FloatMatrix, rng: np.random.Generator, m: int,
                radii: NDArray[Any] | None) -> FloatMatrix:
        out: FloatMatrix = rng.normal(self.mu, self.sigma, size=(m, x.shape[1]))
        return out


class SignFlipping(Attack):
    """The opposite of the honest mean."""

    name = "sign-flip"

    def _attack(self, x: FloatMatrix, rng: np.random.Generator, m: int,
                radii: NDArray[Any] | None) -> FloatMatrix:
        return _repeat(-x.mean(axis=0), m)


class LabelFlipping(Attack):
    """Data poisoning: malicious clients train on flipped labels ``n_classes - 1 - y``.

    The vectors passed to the call are the malicious clients' own updates, computed on
    flipped labels; the attack sends their mean (as byzfl does) when ``share_mean`` is set,
    else each client's own vector (one row per malicious client is then required).
    """

    name = "label-flip"
    poisons_data = True

    def __init__(self, share_mean: bool = False) -> None:
        self.share_mean = bool(share_mean)

    @staticmethod
    def flip(y: NDArray[Any], n_classes: int) -> NDArray[np.int64]:
        """Flipped labels ``n_classes - 1 - y``."""
        c = check_int(n_classes, "n_classes", "LabelFlipping.flip", min_value=2)
        out: NDArray[np.int64] = (c - 1 - np.asarray(y, dtype=np.int64)).astype(np.int64)
        return out

    def _attack(self, x: FloatMatrix, rng: np.random.Generator, m: int,
                radii: NDArray[Any] | None) -> FloatMatrix:
        if self.share_mean:
            return _repeat(x.mean(axis=0), m)
        if x.shape[0] != m:
            raise ValueError(f"The label-flip attack sends each malicious client's own vector: "
                             f"expected {m} rows. Got {x.shape[0]} instead.")
        return x.copy()


def alie_z_max(n_clients: int, n_malicious: int) -> float:
    """Baruch et al.'s ``z_max``: ``s = floor(n/2 + 1) - f``, ``z = Phi^{-1}((n - s) / n)``."""
    n = check_int(n_clients, "n_clients", "alie_z_max", min_value=2)
    f = check_int(n_malicious, "n_malicious", "alie_z_max", min_value=1, max_value=n - 1)
    s = math.floor(n / 2 + 1) - f
    p = (n - s) / n
    p = min(max(p, 1e-9), 1 - 1e-9)
    return float(NormalDist().inv_cdf(p))


class ALittleIsEnough(Attack):
    """``mean + tau * std`` (coordinate-wise, ``ddof=1``); ``tau=None`` uses ``z_max``."""

    name = "alie"
    _min_honest = 2

    def __init__(self, tau: float | None = None) -> None:
        self.tau = None if tau is None else check_real(tau, "tau", "ALittleIsEnough")

    def _attack(self, x: FloatMatrix, rng: np.random.Generator, m: int,
                radii: NDArray[Any] | None) -> FloatMatrix:
        tau = self.tau if self.tau is not None else alie_z_max(x.shape[0] + m, m)
        return _repeat(x.mean(axis=0) + tau * x.std(axis=0, ddof=1), m)


class InnerProductManipulation(Attack):
    """``-tau * mean`` of the honest vectors."""

    name = "ipm"

    def __init__(self, tau: float = 2.0) -> None:
        self.tau = check_real(tau, "tau", "InnerProductManipulation", gt=0.0)

    def _attack(self, x: FloatMatrix, rng: np.random.Generator, m: int,
                radii: NDArray[Any] | None) -> FloatMatrix:
        return _repeat(-self.tau * x.mean(axis=0), m)


def _perturbation(x: FloatMatrix, kind: str) -> NDArray[np.float64]:
    mean = x.mean(axis=0)
    if kind == "unit":
        norm = float(np.linalg.norm(mean))
        p: NDArray[np.float64] = -mean / norm if norm > 0 else np.zeros_like(mean)
    elif kind == "std":
        p = -x.std(axis=0)
    else:
        p = -np.sign(mean)
    return p


_PERTURBATIONS = ("unit", "std", "sign")


class _Shejwalkar(Attack):
    _min_honest = 2

    def __init__(self, perturbation: str = "unit") -> None:
        if perturbation not in _PERTURBATIONS:
            raise ValueError(f"The 'perturbation' parameter of {type(self).__name__} must be "
                             f"one of {_PERTURBATIONS}. Got {perturbation!r} instead.")
        self.perturbation = perturbation

    def _attack(self, x: FloatMatrix, rng: np.random.Generator, m: int,
                radii: NDArray[Any] | None) -> FloatMatrix:
        mean = x.mean(axis=0)
        p = _perturbation(x, self.perturbation)
        pp = float(p @ p)
        if pp == 0.0:
            return _repeat(mean, m)
        return _repeat(mean + self._gamma(x, mean, p, pp) * p, m)

    @abstractmethod
    def _gamma(self, x: FloatMatrix, mean: NDArray[np.float64], p: NDArray[np.float64],
               pp: float) -> float: ...


def _pairwise_sq(x: FloatMatrix) -> FloatMatrix:
    g = x @ x.T
    n2 = np.diag(g)
    out: FloatMatrix = np.maximum(n2[:, None] + n2[None, :] - 2 * g, 0.0)
    return out


class MinMax(_Shejwalkar):
    """Largest ``g`` with ``max_i ||mean + g p - x_i|| <= max_{i,j} ||x_i - x_j||``.

    Each constraint is a convex quadratic in ``g`` that holds at ``g = 0``; the answer is
    the smallest positive root, computed in closed form (the paper finds it by bisection).
    """

    name = "min-max"

    def _gamma(self, x: FloatMatrix, mean: NDArray[np.float64], p: NDArray[np.float64],
               pp: float) -> float:
        bound = float(_pairwise_sq(x).max())
        c = mean[None, :] - x  # (n, d)
        b = c @ p  # ||c + g p||^2 = pp g^2 + 2 b g + ||c||^2 <= bound
        cc = np.einsum("ij,ij->i", c, c)
        disc = np.maximum(b * b - pp * (cc - bound), 0.0)
        roots = (-b + np.sqrt(disc)) / pp
        return float(max(roots.min(), 0.0))


class MinSum(_Shejwalkar):
    """Largest ``g`` with ``sum_i ||mean + g p - x_i||^2 <= max_i sum_j ||x_i - x_j||^2``.

    Since ``sum_i (mean - x_i) = 0`` the left side is ``n pp g^2 + sum_i ||mean - x_i||^2``.
    """

    name = "min-sum"

    def _gamma(self, x: FloatMatrix, mean: NDArray[np.float64], p: NDArray[np.float64],
               pp: float) -> float:
        bound = float(_pairwise_sq(x).sum(axis=1).max())
        spread = float(((x - mean) ** 2).sum())
        return math.sqrt(max(bound - spread, 0.0) / (x.shape[0] * pp))


class FangTrim(Attack):
    """Fang et al.'s full-knowledge trim attack on trimmed-mean / median aggregation.

    Per coordinate: ``s = sign(sum of honest values)``; take the honest minimum where
    ``s > 0`` and the maximum where ``s <= 0``; each malicious client sends that value
    pushed further against ``s`` by a factor ``b ~ U[1, 2]`` (divided by ``b`` when it has
    the sign of ``s``, multiplied otherwise).
    """

    name = "trim"

    def _attack(self, x: FloatMatrix, rng: np.random.Generator, m: int,
                radii: NDArray[Any] | None) -> FloatMatrix:
        s = np.sign(x.sum(axis=0))
        directed = np.where(s > 0, x.min(axis=0), x.max(axis=0))
        b = 1.0 + rng.random(size=(m, x.shape[1]))
        same = (s * directed) > 0
        out: FloatMatrix = np.where(same[None, :], directed[None, :] / b, directed[None, :] * b)
        return out


class BalanceEdge(Attack):
    """Adaptive attack on BALANCE: sit on the edge of the honest clients' acceptance balls.

    With honest vectors ``x_i`` (updates ``w_i - r`` from a reference ``r``) and radii
    ``rho_i = sigma_i ||w_i||``, the malicious vector is ``mean + g d`` with
    ``d = -mean / ||mean||`` (against the honest progress) and the largest ``g >= 0`` such
    that at least ``ceil(coverage * n_honest)`` honest clients still accept it
    (``||x_i - mean - g d|| <= rho_i``), shrunk by ``1 - margin``. Each honest client's
    acceptable ``g`` form an interval (a quadratic inequality), so ``g`` is exact.
    """

    name = "balance-edge"
    needs_radii = True

    def __init__(self, coverage: float = 0.5, margin: float = 1e-6) -> None:
        self.coverage = check_real(coverage, "coverage", "BalanceEdge", gt=0.0, le=1.0)
        self.margin = check_real(margin, "margin", "BalanceEdge", ge=0.0, lt=1.0)

    def _attack(self, x: FloatMatrix, rng: np.random.Generator, m: int,
                radii: NDArray[Any] | None) -> FloatMatrix:
        if radii is None:
            raise ValueError("The balance-edge attack needs the honest clients' acceptance "
                             "radii ('radii').")
        rho = np.asarray(radii, dtype=np.float64)
        if rho.shape != (x.shape[0],) or not np.isfinite(rho).all() or (rho < 0).any():
            raise ValueError(f"The 'radii' of the balance-edge attack must be {x.shape[0]} "
                             f"finite values >= 0. Got shape {rho.shape} instead.")
        mean = x.mean(axis=0)
        norm = float(np.linalg.norm(mean))
        if norm > 0:
            d = -mean / norm
        else:
            d = rng.normal(size=x.shape[1])
            d /= float(np.linalg.norm(d))
        c = x - mean  # accept iff ||c_i - g d||^2 <= rho_i^2: g^2 - 2 b g + cc - rho^2 <= 0
        b = c @ d
        disc = b * b - (np.einsum("ij,ij->i", c, c) - rho * rho)
        ok = disc >= 0
        lo = np.where(ok, b - np.sqrt(np.maximum(disc, 0.0)), np.inf)
        hi = np.where(ok, b + np.sqrt(np.maximum(disc, 0.0)), -np.inf)
        need = math.ceil(self.coverage * x.shape[0] - 1e-12)
        best = 0.0
        for g in sorted(set(hi[ok].tolist()), reverse=True):
            if g <= 0:
                break
            g_in = g * (1.0 - self.margin)
            if int(((lo <= g_in) & (g_in <= hi)).sum()) >= need:
                best = g_in
                break
        return _repeat(mean + best * d, m)


ATTACKS: dict[str, type[Attack]] = {
    cls.name: cls for cls in (Gaussian, SignFlipping, LabelFlipping, ALittleIsEnough,
                              InnerProductManipulation, MinMax, MinSum, FangTrim, BalanceEdge)
}


def make_attack(name: str, **params: Any) -> Attack:
    """An attack by registry name (see :data:`ATTACKS`) with its parameters."""
    if name not in ATTACKS:
        raise ValueError(f"The 'attack' parameter must be one of {tuple(ATTACKS)}. "
                         f"Got {name!r} instead.")
    return ATTACKS[name](**params)
