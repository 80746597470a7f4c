"""BALANCE personalised federated learning (Fang et al., CCS 2024; Aghabagherloo et al.,
Sec. 2), in the clear.

In round ``t`` of ``T`` every client trains its model locally to ``w_i^{t+1/2}``; client ``i``
accepts peer ``j`` when ``||w_i - w_j||^2 <= sigma_i(t)^2 ||w_i||^2`` with
``sigma_i(t) = gamma_i * exp(-kappa * lambda(t))`` and ``lambda(t) = t / T`` (rounds counted
from 0, so the first round uses ``gamma_i``), and mixes (Eq. 2)::

    w_i^{t+1} = alpha * w_i^{t+1/2} + (1 - alpha) * mean_{j in S_i} w_j^{t+1/2}.

Defaults as in public re-implementations: ``gamma = 0.3``, ``kappa = 1``, ``alpha = 0.5``;
per-client ``gamma_i`` may be given. A client that accepts nobody keeps ``w_i^{t+1/2}``
(Eq. 2's mean has no terms); there is **no** "accept the nearest peer" fallback.

Two deployments:

* **decentralised** (BALANCE): clients are the nodes of a graph (complete by default; ring
  and Erdős–Rényi via :func:`graph_neighbours`); each :class:`BalancePeer` checks the models
  its neighbours send and aggregates them itself (``deg(i)`` checks per client);
* **server-assisted** (Priv-PFL): a :class:`BalanceServer` receives every ``w_i^{t+1/2}``,
  selects ``S_i`` for every client -- brute force or Algorithm 1
  (:mod:`fedsec.pfl.selection`) -- and returns each client its personalised model.

Models are flat float vectors (:func:`flatten_params` / :func:`unflatten_params`).

Threat model: Byzantine clients may send arbitrary models (poisoning); the server (in the
server-assisted deployment) is honest and sees every model in the clear -- this is the
plaintext reference that the encrypted Priv-PFL protocol must reproduce. Randomness here
(graph sampling) is simulation randomness from seeded generators and protects nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec._validation import check_int, check_real
from fedsec.learning.model import ModelSpec, Params
from fedsec.pfl.selection import (
    PlaintextOracle,
    SelectionResult,
    brute_force_selection,
    complete_neighbours,
    efficient_selection,
)

__all__ = [
    "BalanceConfig",
    "BalancePeer",
    "BalanceServer",
    "GRAPHS",
    "SELECTIONS",
    "flatten_params",
    "graph_neighbours",
    "personalise",
    "unflatten_params",
]

FloatVector = NDArray[np.float64]
#: The peer graphs of decentralised BALANCE (:class:`BalancePeer`).
GRAPHS: tuple[str, ...] = ("complete", "ring", "erdos-renyi")
#: How acceptance sets are computed: every pair checked, or Algorithm 1 of Priv-PFL.
SELECTIONS: tuple[str, ...] = ("brute", "efficient")


@dataclass(frozen=True)
class BalanceConfig:
    """BALANCE's hyper-parameters.

    Parameters
    ----------
    gamma : float, default=0.3
        Acceptance threshold ``gamma > 0`` shared by all clients.
    kappa : float, default=1.0
        Decay rate ``kappa >= 0`` of the threshold.
    alpha : float, default=0.5
        Weight of the client's own model in Eq. 2, in ``[0, 1]``.
    gammas : sequence of float, optional
        Per-client thresholds ``gamma_i`` (override ``gamma``).
    """

    gamma: float = 0.3
    kappa: float = 1.0
    alpha: float = 0.5
    gammas: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        check_real(self.gamma, "gamma", "BalanceConfig", gt=0.0)
        check_real(self.kappa, "kappa", "BalanceConfig", ge=0.0)
        check_real(self.alpha, "alpha", "BalanceConfig", ge=0.0, le=1.0)
        if self.gammas is not None:
            g = tuple(check_real(v, "gammas", "BalanceConfig", gt=0.0) for v in self.gammas)
            object.__setattr__(self, "gammas", g)

    def sigmas(self, round_index: int, rounds: int, n_clients: int) -> FloatVector:
        """``sigma_i(t) = gamma_i exp(-kappa t / T)`` for every client."""
        t = check_int(round_index, "round_index", "BalanceConfig.sigmas", min_value=0)
        big_t = check_int(rounds, "rounds", "BalanceConfig.sigmas", min_value=1)
        n = check_int(n_clients, "n_clients", "BalanceConfig.sigmas", min_value=1)
        if self.gammas is not None and len(self.gammas) != n:
            raise ValueError(f"The 'gammas' of BalanceConfig must have one value per client "
                             f"({n}). Got {len(self.gammas)} instead.")
        g = np.asarray(self.gammas if self.gammas is not None else [self.gamma] * n,
                       dtype=np.float64)
        out: FloatVector = g * np.exp(-self.kappa * t / big_t)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"gamma": self.gamma, "kappa": self.kappa, "alpha": self.alpha,
                "gammas": list(self.gammas) if self.gammas is not None else None}


def flatten_params(params: Sequence[NDArray[Any]]) -> FloatVector:
    """Concatenate parameter arrays (PyTorch order) into one float64 vector."""
    if len(params) == 0:
        return np.zeros(0)
    return np.concatenate([np.asarray(p, dtype=np.float64).ravel() for p in params])


def unflatten_params(spec: ModelSpec, vector: NDArray[Any]) -> Params:
    """Split a flat vector back into ``spec``'s parameter arrays (float32)."""
    v = np.asarray(vector, dtype=np.float64)
    if v.shape != (spec.n_params(),):
        raise ValueError(f"A flat model of {spec.name} has {spec.n_params()} values. "
                         f"Got shape {v.shape} instead.")
    out: Params = []
    at = 0
    for shape in spec.param_shapes():
        size = int(np.prod(shape))
        out.append(v[at:at + size].reshape(shape).astype(np.float32))
        at += size
    return out


def personalise(own: NDArray[Any], accepted: Sequence[NDArray[Any]], alpha: float
                ) -> FloatVector:
    """Eq. 2: ``alpha * own + (1 - alpha) * mean(accepted)``; ``own`` if nobody is accepted."""
    w = np.asarray(own, dtype=np.float64)
    if len(accepted) == 0:
        return w.copy()
    mean = np.mean(np.asarray(accepted, dtype=np.float64), axis=0)
    out: FloatVector = alpha * w + (1.0 - alpha) * mean
    return out


def graph_neighbours(kind: str, n_clients: int, *, p: float = 0.5,
                     rng: np.random.Generator | None = None) -> list[frozenset[int]]:
    """Neighbourhoods of a communication graph.

    Parameters
    ----------
    kind : {"complete", "ring", "erdos-renyi"}
    n_clients : int
    p : float, default=0.5
        Edge probability of the Erdős–Rényi graph ``G(n, p)``.
    rng : numpy.random.Generator, optional
        Seeded generator for the Erdős–Rényi edges (required for that kind).
    """
    n = check_int(n_clients, "n_clients", "graph_neighbours", min_value=1)
    if kind == "complete":
        return complete_neighbours(n)
    if kind == "ring":
        if n < 3:
            return complete_neighbours(n)
        return [frozenset({(i - 1) % n, (i + 1) % n}) for i in range(n)]
    if kind == "erdos-renyi":
        q = check_real(p, "p", "graph_neighbours", ge=0.0, le=1.0)
        if rng is None:
            raise ValueError("The 'rng' parameter of graph_neighbours is required for an "
                             "Erdős–Rényi graph.")
        nb: list[set[int]] = [set() for _ in range(n)]
        for i in range(n):
            for j in range(i + 1, n):
                if rng.random() < q:
                    nb[i].add(j)
                    nb[j].add(i)
        return [frozenset(s) for s in nb]
    raise ValueError(f"The 'kind' parameter of graph_neighbours must be one of {GRAPHS}. "
                     f"Got {kind!r} instead.")


def _as_models(models: NDArray[Any], owner: str) -> FloatVector:
    w = np.asarray(models, dtype=np.float64)
    if w.ndim != 2 or w.shape[0] < 1:
        raise ValueError(f"The 'models' parameter of {owner} must be a 2-D array with one "
                         f"flat model per client. Got shape {w.shape} instead.")
    if not np.isfinite(w).all():
        raise ValueError(f"The 'models' parameter of {owner} must be finite.")
    return w


class BalanceServer:
    """Server-assisted BALANCE (Priv-PFL's setting): selection and aggregation for everyone.

    Parameters
    ----------
    n_clients : int
    config : BalanceConfig
    rounds : int
        ``T`` (for the threshold decay).
    selection : {"efficient", "brute"}, default="efficient"
        Algorithm 1 or the brute-force check.
    neighbours : sequence of collections of int, optional
        Restrict who may accept whom (default: everyone).

    Notes
    -----
    Steps per round ``t``: :meth:`select` (``S_i`` for every client, with the number of
    Ineq. 1 checks) then :meth:`aggregate` (Eq. 2 for every client).
    """

    def __init__(self, n_clients: int, config: BalanceConfig, rounds: int, *,
                 selection: str = "efficient",
                 neighbours: Sequence[Collection[int]] | None = None) -> None:
        self.n_clients = check_int(n_clients, "n_clients", "BalanceServer", min_value=1)
        self.rounds = check_int(rounds, "rounds", "BalanceServer", min_value=1)
        if selection not in SELECTIONS:
            raise ValueError(f"The 'selection' parameter of BalanceServer must be one of "
                             f"{SELECTIONS}. Got {selection!r} instead.")
        self.config = config
        self.selection = selection
        self.neighbours = neighbours

    def select(self, models: NDArray[Any], round_index: int) -> SelectionResult:
        """Acceptance sets of round ``round_index`` from the clients' ``w^{t+1/2}``."""
        w = _as_models(models, "BalanceServer.select")
        if w.shape[0] != self.n_clients:
            raise ValueError(f"BalanceServer.select expects {self.n_clients} models. Got "
                             f"{w.shape[0]} instead.")
        sig = self.config.sigmas(round_index, self.rounds, self.n_clients)
        oracle = PlaintextOracle(w, sig)
        if self.selection == "brute":
            return brute_force_selection(self.n_clients, oracle, neighbours=self.neighbours)
        return efficient_selection(oracle.keys(), oracle, neighbours=self.neighbours)

    def aggregate(self, models: NDArray[Any], selected: SelectionResult) -> FloatVector:
        """Eq. 2 for every client: an array of personalised models, one row per client."""
        w = _as_models(models, "BalanceServer.aggregate")
        if len(selected.accepted) != w.shape[0]:
            raise ValueError("The selection and the models must cover the same clients.")
        out = np.empty_like(w)
        for i, s in enumerate(selected.accepted):
            out[i] = personalise(w[i], [w[j] for j in sorted(s)], self.config.alpha)
        return out


class BalancePeer:
    """One client of decentralised BALANCE: checks its neighbours' models, then mixes.

    Parameters
    ----------
    client_id : int
    config : BalanceConfig
    rounds : int
        ``T``.
    n_clients : int
        Federation size (for per-client ``gamma_i``).
    """

    def __init__(self, client_id: int, config: BalanceConfig, rounds: int, n_clients: int
                 ) -> None:
        self.n_clients = check_int(n_clients, "n_clients", "BalancePeer", min_value=1)
        self.client_id = check_int(client_id, "client_id", "BalancePeer", min_value=0,
                                   max_value=self.n_clients - 1)
        self.rounds = check_int(rounds, "rounds", "BalancePeer", min_value=1)
        self.config = config
        self.checks = 0

    def sigma(self, round_index: int) -> float:
        return float(self.config.sigmas(round_index, self.rounds, self.n_clients)
                     [self.client_id])

    def select(self, own: NDArray[Any], received: Mapping[int, NDArray[Any]],
               round_index: int) -> frozenset[int]:
        """``S_i``: the neighbours whose models pass Ineq. 1 (one check per neighbour)."""
        peers = sorted(int(j) for j in received if int(j) != self.client_id)
        if not peers:
            return frozenset()
        w = _as_models(np.vstack([np.asarray(own, dtype=np.float64)]
                                 + [np.asarray(received[j], dtype=np.float64) for j in peers]),
                       "BalancePeer.select")
        sig = np.full(len(peers) + 1, self.sigma(round_index))
        oracle = PlaintextOracle(w, sig)
        ok = oracle([(0, k + 1) for k in range(len(peers))])
        self.checks += len(peers)
        return frozenset(j for j, a in zip(peers, ok, strict=True) if a)

    def aggregate(self, own: NDArray[Any], received: Mapping[int, NDArray[Any]],
                  accepted: Collection[int]) -> FloatVector:
        """Eq. 2 over the accepted neighbours."""
        return personalise(own, [received[j] for j in sorted(accepted)], self.config.alpha)
