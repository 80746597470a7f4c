"""BALANCE client selection: Ineq. 1, the brute-force check and Algorithm 1 of Priv-PFL.

Client ``i`` accepts client ``j`` in round ``t`` when (Aghabagherloo et al., Ineq. 1, in the
squared form
used throughout fedsec)::

    ||w_i - w_j||^2  <=  sigma_i(t)^2 * ||w_i||^2,     sigma_i(t) = gamma_i * exp(-kappa * t / T)

where the ``w`` are the intermediate models ``w^{t+1/2}`` as flat vectors. The squared form is
equivalent to Ineq. 1 (both sides are non-negative). **Note on Aghabagherloo et al.,
Appendix B:** the
FHE version there squares the left side (it expands ``sum_k (w_ik - w_jk)^2``) but compares it
with ``gamma * exp(-kappa*lambda(t)) * sum_k w_ik^2`` -- sigma *not* squared -- which is a
different (and scale-dependent) test. fedsec squares both sides, so the plaintext and the
encrypted check (next issue) decide the same inequality.

Who decides a pair is pluggable: every selection routine here takes a **check oracle**, a
function that receives a batch of ordered pairs ``(i, j)`` ("does ``i`` accept ``j``?") and
returns one bool per pair. :class:`PlaintextOracle` decides Ineq. 1 *exactly* on the given
float64 vectors (a certified floating-point test, with exact rational arithmetic for the rare
pairs that sit within rounding error of the boundary, so ties are decided as ``<=``); an
encrypted comparison can be plugged in instead. The routines count the Ineq. 1 evaluations
they request (:attr:`SelectionResult.checks`).

* :func:`brute_force_selection` -- BALANCE as written: every client checks every neighbour,
  ``K (K - 1)`` checks on a complete graph.
* :func:`efficient_selection` -- Algorithm 1 of Aghabagherloo et al.: clients processed in ascending
  order of ``sigma_i ||w_i||`` (here its square, the *key*); each one checks only the peers it
  has not yet been given, then hands out **mutual acceptance** (Theorem I: if ``i`` accepts
  ``j`` and ``key_i <= key_j`` then ``j`` accepts ``i``) and **inheritance** (Theorem II: if
  ``j`` is in ``S_i`` and ``key_j >= 4 key_i`` -- i.e. ``sigma_j||w_j|| >= 2 sigma_i||w_i||`` --
  then ``j`` accepts all of ``S_i``). Both theorems are exact consequences of the triangle
  inequality (Aghabagherloo et al., App. C), so with exact keys and an exact oracle the
   result equals the
  brute force; the tests check this on 1,400 random instances with ties and equal norms
  (complete and random graphs) and on every round of real training runs.

With an *approximate* oracle (a CKKS comparison) or float keys, a pair within the
approximation error of the boundary may be decided one way by a check and the other way by
an inference; the sets then equal the brute force's only up to such boundary pairs.

The keys ``sigma_i^2 ||w_i||^2`` are public in Priv-PFL (clients send ``sigma_i ||w_i||`` in
the clear so that the server can sort). Keys may be plain floats or :class:`CertifiedKey`
objects (exact comparisons, from :meth:`PlaintextOracle.keys`).

A client never appears in its own acceptance set; its own model enters Eq. 2 through
``alpha``. Neighbourhoods (decentralised graphs) restrict the candidate peers; they must be
symmetric for Theorem I to apply.

Threat model: this module is plaintext reference code with no secrets; it decides who is
accepted, it protects nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "CheckOracle",
    "CertifiedKey",
    "PlaintextOracle",
    "SelectionResult",
    "brute_force_selection",
    "efficient_selection",
    "complete_neighbours",
]

Pair = tuple[int, int]
#: Decides Ineq. 1 for a batch of ordered pairs ``(i, j)``: does client ``i`` accept ``j``?
CheckOracle = Callable[[Sequence[Pair]], Sequence[bool]]

_U = 2.0 ** -53  # unit round-off of float64


class SupportsKey(Protocol):
    """What Algorithm 1 needs of a key: an order and multiplication by 4."""

    def __lt__(self, other: Any, /) -> bool: ...

    def __le__(self, other: Any, /) -> bool: ...

    def __mul__(self, other: int, /) -> Any: ...


@dataclass(frozen=True)
class SelectionResult:
    """Acceptance sets ``S_i^t`` of one round and the number of Ineq. 1 evaluations.

    Attributes
    ----------
    accepted : tuple of frozenset of int
        ``accepted[i]`` is ``S_i``: the clients that client ``i`` accepts (never ``i``).
    checks : int
        Ineq. 1 evaluations requested from the oracle.
    order : tuple of int
        Order in which clients were processed (ascending key for Algorithm 1).
    checked : tuple of (int, int)
        The pairs ``(i, j)`` the oracle was asked about, in order.
    """

    accepted: tuple[frozenset[int], ...]
    checks: int
    order: tuple[int, ...]
    checked: tuple[Pair, ...]

    def to_lists(self) -> list[list[int]]:
        """``S_i`` as sorted lists (JSON-friendly)."""
        return [sorted(s) for s in self.accepted]


def complete_neighbours(n: int) -> list[frozenset[int]]:
    """Neighbourhoods of the complete graph on ``n`` clients."""
    return [frozenset(j for j in range(n) if j != i) for i in range(n)]


def _check_neighbours(n: int, neighbours: Sequence[Collection[int]] | None, owner: str
                      ) -> list[frozenset[int]]:
    if neighbours is None:
        return complete_neighbours(n)
    if len(neighbours) != n:
        raise ValueError(f"The 'neighbours' parameter of {owner} must have one entry per "
                         f"client ({n}). Got {len(neighbours)} instead.")
    out = []
    for i, nb in enumerate(neighbours):
        s = frozenset(int(j) for j in nb)
        if any(not 0 <= j < n for j in s):
            raise ValueError(f"The 'neighbours' parameter of {owner} must name clients in "
                             f"0..{n - 1}. Got {sorted(s)} for client {i} instead.")
        out.append(s - {i})
    for i, nb in enumerate(out):
        for j in nb:
            if i not in out[j]:
                raise ValueError(f"The 'neighbours' parameter of {owner} must be symmetric. "
                                 f"Got {j} in the neighbours of {i} but not {i} in those "
                                 f"of {j} instead.")
    return out


def _ask(oracle: CheckOracle, pairs: list[Pair]) -> list[bool]:
    answers = list(oracle(pairs))
    if len(answers) != len(pairs):
        raise ValueError(f"The check oracle must answer every pair: asked {len(pairs)}, "
                         f"got {len(answers)} answers.")
    return [bool(a) for a in answers]


def brute_force_selection(n_clients: int, oracle: CheckOracle, *,
                          neighbours: Sequence[Collection[int]] | None = None
                          ) -> SelectionResult:
    """BALANCE's selection: every client checks Ineq. 1 against every neighbour.

    Parameters
    ----------
    n_clients : int
        ``K``.
    oracle : callable
        Decides Ineq. 1 for a batch of pairs ``(i, j)`` (one batch per client ``i``).
    neighbours : sequence of collections of int, optional
        Symmetric neighbourhoods (default: the complete graph, ``K (K - 1)`` checks).

    Returns
    -------
    SelectionResult
    """
    n = _check_n(n_clients, "brute_force_selection")
    nbs = _check_neighbours(n, neighbours, "brute_force_selection")
    accepted: list[set[int]] = [set() for _ in range(n)]
    checked: list[Pair] = []
    for i in range(n):
        pairs = [(i, j) for j in sorted(nbs[i])]
        if not pairs:
            continue
        for (_, j), ok in zip(pairs, _ask(oracle, pairs), strict=True):
            if ok:
                accepted[i].add(j)
        checked.extend(pairs)
    return SelectionResult(tuple(frozenset(s) for s in accepted), len(checked),
                           tuple(range(n)), tuple(checked))


def efficient_selection(keys: Sequence[SupportsKey], oracle: CheckOracle, *,
                        neighbours: Sequence[Collection[int]] | None = None
                        ) -> SelectionResult:
    """Algorithm 1 of Aghabagherloo et al.: client selection without redundant Ineq. 1 checks.

    Parameters
    ----------
    keys : sequence
        ``key_i = sigma_i(t)^2 ||w_i^{t+1/2}||^2`` for every client (floats, or
        :class:`CertifiedKey` for exact comparisons). Only their order and the test
        ``key_j >= 4 key_i`` are used.
    oracle : callable
        Decides Ineq. 1 for a batch of pairs ``(i, j)`` (one batch per processed client).
    neighbours : sequence of collections of int, optional
        Symmetric neighbourhoods (default: the complete graph).

    Returns
    -------
    SelectionResult
        The acceptance sets; equal to :func:`brute_force_selection`'s when the keys and the
        oracle are exact.
    """
    n = _check_n(len(keys), "efficient_selection")
    nbs = _check_neighbours(n, neighbours, "efficient_selection")

    def cmp(a: int, b: int) -> int:
        if keys[a] < keys[b]:
            return -1
        if keys[b] < keys[a]:
            return 1
        return (a > b) - (a < b)

    # 1. sort by sigma_i ||w_i|| (ascending); 2. S_i = {} for all i
    order = sorted(range(n), key=functools.cmp_to_key(cmp))
    position = {c: p for p, c in enumerate(order)}
    accepted: list[set[int]] = [set() for _ in range(n)]
    checked: list[Pair] = []
    for i in order:
        # 3.1 check only the peers not yet known to be accepted
        pairs = [(i, j) for j in sorted(nbs[i] - accepted[i])]
        if pairs:
            for (_, j), ok in zip(pairs, _ask(oracle, pairs), strict=True):
                if ok:
                    accepted[i].add(j)
            checked.extend(pairs)
        s_i = frozenset(accepted[i])
        # 3.2 mutual acceptance (Theorem I): later clients have keys >= key_i
        for j in s_i:
            if position[j] > position[i]:
                accepted[j].add(i)
        # 3.3 inheritance (Theorem II): sigma_j||w_j|| >= 2 sigma_i||w_i||
        four_i = keys[i] * 4
        for j in s_i:
            if four_i <= keys[j]:
                accepted[j].update(m for m in s_i if m != j and m in nbs[j])
    return SelectionResult(tuple(frozenset(s) for s in accepted), len(checked), tuple(order),
                           tuple(checked))


def _check_n(n: int, owner: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int | np.integer):
        raise TypeError(f"The number of clients of {owner} must be an int. Got {n!r} instead.")
    if n < 1:
        raise ValueError(f"{owner} needs at least one client. Got {n} instead.")
    return int(n)


# --------------------------------------------------------------------- exact plaintext oracle
def _exact_ints(x: NDArray[np.float64]) -> tuple[NDArray[Any], int]:
    """``x`` as exact Python integers ``X`` and an exponent ``E`` with ``x = X * 2**E``."""
    m, e = np.frexp(x)
    mant = (m * 2.0 ** 53).astype(np.int64)  # exact: m has 53 significant bits
    exps = e.astype(np.int64) - 53
    nz = mant != 0
    if not nz.any():
        return np.zeros(len(x), dtype=object), 0
    low = int(exps[nz].min())
    shifts = np.where(nz, exps - low, 0)
    ints = mant.astype(object) * np.array([1 << int(s) for s in shifts], dtype=object)
    return ints, low


def _exact_sq(ints: NDArray[Any], exp: int) -> Fraction:
    total = int(np.dot(ints, ints)) if len(ints) else 0
    return Fraction(total) * Fraction(2) ** (2 * exp)


class CertifiedKey:
    """A non-negative real known to a certified relative error, exact on demand.

    Comparisons (``<``, ``<=``) and multiplication by an int use the float estimate when it
    decides the question beyond its error bound, and exact rational arithmetic otherwise.
    """

    __slots__ = ("approx", "rel", "_exact", "_factor")

    def __init__(self, approx: float, rel: float, exact: Callable[[], Fraction],
                 factor: int = 1) -> None:
        self.approx = float(approx)
        self.rel = float(rel)
        self._exact = exact
        self._factor = int(factor)

    def exact(self) -> Fraction:
        """The exact value."""
        return self._exact() * self._factor

    def _bounds(self) -> tuple[float, float]:
        return self.approx * (1.0 - self.rel), self.approx * (1.0 + self.rel)

    def __mul__(self, other: int) -> CertifiedKey:
        if isinstance(other, bool) or not isinstance(other, int) or other < 0:
            return NotImplemented
        return CertifiedKey(self.approx * other, self.rel, self._exact, self._factor * other)

    def __lt__(self, other: Any) -> bool:
        if not isinstance(other, CertifiedKey):
            return NotImplemented
        a_lo, a_hi = self._bounds()
        b_lo, b_hi = other._bounds()
        if a_hi < b_lo:
            return True
        if a_lo >= b_hi:
            return False
        return self.exact() < other.exact()

    def __le__(self, other: Any) -> bool:
        if not isinstance(other, CertifiedKey):
            return NotImplemented
        a_lo, a_hi = self._bounds()
        b_lo, b_hi = other._bounds()
        if a_hi <= b_lo:
            return True
        if a_lo > b_hi:
            return False
        return self.exact() <= other.exact()

    def __repr__(self) -> str:
        return f"CertifiedKey({self.approx!r})"


class PlaintextOracle:
    """Decides Ineq. 1 exactly, in the clear, for flat float64 models.

    Parameters
    ----------
    models : array of shape (K, d)
        The intermediate models ``w_i^{t+1/2}`` (finite).
    sigmas : array of shape (K,)
        Decayed acceptance thresholds ``sigma_i(t) > 0``.

    Attributes
    ----------
    evaluations : int
        Ineq. 1 evaluations answered so far.
    exact_evaluations : int
        Of those, how many needed exact arithmetic (the float test was within its error
        bound of the boundary).
    """

    def __init__(self, models: NDArray[Any], sigmas: Sequence[float] | NDArray[Any]) -> None:
        w = np.asarray(models, dtype=np.float64)
        s = np.asarray(sigmas, dtype=np.float64)
        if w.ndim != 2 or w.shape[0] < 1:
            raise ValueError(f"The 'models' parameter of PlaintextOracle must be a 2-D array "
                             f"with one row per client. Got shape {w.shape} instead.")
        if s.shape != (w.shape[0],):
            raise ValueError(f"The 'sigmas' parameter of PlaintextOracle must have one value "
                             f"per client ({w.shape[0]}). Got shape {s.shape} instead.")
        if not np.isfinite(w).all():
            raise ValueError("The 'models' parameter of PlaintextOracle must be finite.")
        if not (np.isfinite(s).all() and (s > 0).all()):
            raise ValueError("The 'sigmas' parameter of PlaintextOracle must be finite and "
                             "> 0.")
        self.models = w
        self.sigmas = s
        d = w.shape[1]
        # |fl(sum of n non-negative products) - exact| <= gamma_{n+2} * exact, any order;
        # doubled for the rounding of the bound itself.
        self._rel = 2.0 * (d + 4) * _U / (1.0 - (d + 4) * _U)
        nz = np.abs(w[w != 0])
        self._always_exact = bool(nz.size and (nz.min() < 2.0 ** -450 or nz.max() > 2.0 ** 450))
        self._sq_norms = np.einsum("ij,ij->i", w, w)
        self._ints: dict[int, tuple[NDArray[Any], int]] = {}
        self._exact_norms: dict[int, Fraction] = {}
        self.evaluations = 0
        self.exact_evaluations = 0

    @property
    def n_clients(self) -> int:
        return int(self.models.shape[0])

    def _int_form(self, i: int) -> tuple[NDArray[Any], int]:
        if i not in self._ints:
            self._ints[i] = _exact_ints(self.models[i])
        return self._ints[i]

    def exact_sq_norm(self, i: int) -> Fraction:
        """``||w_i||^2`` exactly."""
        if i not in self._exact_norms:
            self._exact_norms[i] = _exact_sq(*self._int_form(i))
        return self._exact_norms[i]

    def _exact_bound(self, i: int) -> Fraction:
        return Fraction(float(self.sigmas[i])) ** 2 * self.exact_sq_norm(i)

    def _exact_distance(self, i: int, j: int) -> Fraction:
        a, ea = self._int_form(i)
        b, eb = self._int_form(j)
        low = min(ea, eb)
        if ea > low:
            a = a * (1 << (ea - low))
        if eb > low:
            b = b * (1 << (eb - low))
        return _exact_sq(a - b, low)

    def keys(self) -> list[CertifiedKey]:
        """``sigma_i^2 ||w_i||^2`` for Algorithm 1, with exact comparisons."""
        out = []
        for i in range(self.n_clients):
            approx = float(self.sigmas[i]) ** 2 * float(self._sq_norms[i])
            rel = 1.0 if self._always_exact else self._rel
            out.append(CertifiedKey(approx, rel, functools.partial(self._exact_bound, i)))
        return out

    def accepts(self, i: int, j: int) -> bool:
        """Does client ``i`` accept client ``j`` (Ineq. 1, squared form)?"""
        return self([(i, j)])[0]

    def __call__(self, pairs: Sequence[Pair]) -> list[bool]:
        n = self.n_clients
        out: list[bool] = []
        if not pairs:
            return out
        idx = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        if (idx < 0).any() or (idx >= n).any():
            raise ValueError(f"Oracle pairs must name clients in 0..{n - 1}.")
        diff = self.models[idx[:, 0]] - self.models[idx[:, 1]]
        d2 = np.einsum("ij,ij->i", diff, diff)
        r2 = self.sigmas[idx[:, 0]] ** 2 * self._sq_norms[idx[:, 0]]
        rel = self._rel
        for k, (i, j) in enumerate(idx.tolist()):
            self.evaluations += 1
            lo_d, hi_d = d2[k] * (1 - rel), d2[k] * (1 + rel)
            lo_r, hi_r = r2[k] * (1 - rel), r2[k] * (1 + rel)
            if not self._always_exact and hi_d < lo_r:
                out.append(True)
            elif not self._always_exact and lo_d > hi_r:
                out.append(False)
            else:
                self.exact_evaluations += 1
                out.append(self._exact_distance(i, j) <= self._exact_bound(i))
        return out


def ineq1_margin(w_i: NDArray[Any], w_j: NDArray[Any], sigma_i: float) -> float:
    """``sigma_i^2 ||w_i||^2 - ||w_i - w_j||^2`` in float64 (>= 0 means accepted, up to
    rounding; for plots and diagnostics, not for decisions)."""
    a = np.asarray(w_i, dtype=np.float64)
    d = a - np.asarray(w_j, dtype=np.float64)
    return float(sigma_i) ** 2 * float(a @ a) - float(d @ d)
