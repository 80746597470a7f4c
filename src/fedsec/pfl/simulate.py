"""Training runs of BALANCE and its baselines under poisoning attacks (plaintext simulation).

:func:`run_pfl` trains one of the tasks of :mod:`fedsec.learning.tasks` over a federation
(Dirichlet label split) for ``T`` rounds with a share of malicious clients, and records every
benign client's accuracy on its own test data after every round, the acceptance sets and the
number of Ineq. 1 checks.

Methods (same data, seeds, initial model and local training for all):

* ``balance`` -- BALANCE (:mod:`fedsec.pfl.balance`), server-assisted (``deployment=
  "server"``, brute-force or Algorithm 1 selection) or decentralised over a graph
  (``"complete"``, ``"ring"``, ``"erdos-renyi"``);
* ``fedavg`` -- FedAvg without defence (sample-weighted mean of all models);
* ``local`` -- local training only (no communication, so no attack reaches anyone);
* ``trimmed-mean``, ``krum``, ``median`` -- a server aggregating all models with byzfl's
  robust aggregator (``f`` = number of malicious clients).

How malicious clients act (omniscient attacker, the usual worst case): in round ``t`` the
reference ``r`` is the mean of the benign clients' models at the start of the round (the
global model for server-side methods); benign clients train to ``w_i^{t+1/2}``; the attack
(:mod:`fedsec.learning.attacks`) receives the benign updates ``w_i^{t+1/2} - r`` and returns
one update per malicious client, which sends ``r + update``. Label flipping instead trains
the malicious clients from ``r`` on flipped labels. Under ``attack=None`` the clients chosen
as malicious behave honestly (and are still left out of the benign statistics).

Threat model: as :mod:`fedsec.pfl.balance` -- Byzantine clients, honest server, everything in
the clear. All randomness (data split, malicious set, mini-batches, attack noise, graphs) is
seeded simulation randomness.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec._validation import check_int, check_real
from fedsec.learning.attacks import Attack, LabelFlipping, make_attack
from fedsec.learning.model import accuracy
from fedsec.learning.tasks import Federation, Task
from fedsec.pfl.balance import (
    GRAPHS,
    SELECTIONS,
    BalanceConfig,
    BalancePeer,
    BalanceServer,
    flatten_params,
    graph_neighbours,
    unflatten_params,
)
from fedsec.pfl.robust import ROBUST_AGGREGATORS, robust_aggregator
from fedsec.pfl.selection import SelectionResult

__all__ = ["METHODS", "DEPLOYMENTS", "PFLRun", "RoundView", "run_pfl", "malicious_clients"]

METHODS: tuple[str, ...] = ("balance", "fedavg", "local", *ROBUST_AGGREGATORS)
DEPLOYMENTS: tuple[str, ...] = ("server", *GRAPHS)
Progress = Callable[[str], None]


@dataclass(frozen=True)
class RoundView:
    """What a round observer sees (BALANCE runs): the models sent, thresholds, selection."""

    round_index: int
    sent: NDArray[np.float64]
    sigmas: NDArray[np.float64]
    selection: SelectionResult | None
    accepted: tuple[frozenset[int], ...]


@dataclass
class PFLRun:
    """The record of one run. ``accuracy[t][i]`` is client ``i``'s accuracy on its own test
    data after round ``t`` (``None`` for malicious clients and clients without test data)."""

    method: str
    attack: str
    rounds: int
    n_clients: int
    malicious: tuple[int, ...]
    deployment: str
    selection: str
    seed: int
    accuracy: list[list[float | None]] = field(default_factory=list)
    accepted: list[list[list[int]]] = field(default_factory=list)
    checks: list[int] = field(default_factory=list)
    brute_checks: list[int] = field(default_factory=list)
    seconds: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)
    #: Every client's model after the last round, one flat row per client (not in to_dict).
    models: NDArray[np.float64] | None = field(default=None, repr=False)

    @property
    def benign(self) -> tuple[int, ...]:
        bad = set(self.malicious)
        return tuple(i for i in range(self.n_clients) if i not in bad)

    def benign_accuracies(self, round_index: int = -1) -> list[float]:
        row = self.accuracy[round_index]
        return [v for i, v in enumerate(row) if i not in self.malicious and v is not None]

    def benign_mean(self, round_index: int = -1) -> float:
        acc = self.benign_accuracies(round_index)
        return float(np.mean(acc)) if acc else math.nan

    def benign_worst(self, round_index: int = -1) -> float:
        acc = self.benign_accuracies(round_index)
        return float(np.min(acc)) if acc else math.nan

    def malicious_accepted_share(self, round_index: int = -1) -> float:
        """Share of (benign client, malicious client) pairs with the malicious one accepted."""
        if not self.accepted or not self.malicious:
            return math.nan
        sets = self.accepted[round_index]
        hits = sum(1 for i in self.benign for j in self.malicious if j in sets[i])
        return hits / (len(self.benign) * len(self.malicious))

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method, "attack": self.attack, "rounds": self.rounds,
            "n_clients": self.n_clients, "malicious": list(self.malicious),
            "deployment": self.deployment, "selection": self.selection, "seed": self.seed,
            "benign_mean": [self.benign_mean(t) for t in range(len(self.accuracy))],
            "benign_worst": [self.benign_worst(t) for t in range(len(self.accuracy))],
            "accuracy": self.accuracy, "accepted": self.accepted, "checks": self.checks,
            "brute_checks": self.brute_checks, "seconds": self.seconds, "meta": self.meta,
        }


def malicious_clients(n_clients: int, share: float, seed: int) -> tuple[int, ...]:
    """``round(share * n)`` clients drawn with a seeded generator (simulation)."""
    n = check_int(n_clients, "n_clients", "malicious_clients", min_value=1)
    f = check_real(share, "malicious", "malicious_clients", ge=0.0, lt=0.5)
    m = int(round(f * n))
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xBAD]))
    return tuple(sorted(int(c) for c in rng.choice(n, size=m, replace=False)))


def _eval(task: Task, fed: Federation, vec: NDArray[np.float64], i: int) -> float | None:
    c = fed.clients[i]
    if len(c.y_test) == 0:
        return None
    return accuracy(task.spec, unflatten_params(task.spec, vec), c.x_test, c.y_test)


def run_pfl(task: Task, federation: Federation, *, method: str = "balance", rounds: int = 20,
            attack: str | Attack | None = None, malicious: float = 0.2,
            config: BalanceConfig | None = None, deployment: str = "server",
            selection: str = "efficient", graph_p: float = 0.5, seed: int = 0,
            progress: Progress | None = None,
            observer: Callable[[RoundView], None] | None = None) -> PFLRun:
    """Train and evaluate one method under one attack.

    Parameters
    ----------
    task : Task
    federation : Federation
        From :meth:`Task.federate` (its clients are the PFL clients).
    method : {"balance", "fedavg", "local", "trimmed-mean", "krum", "median"}
    rounds : int, default=20
        ``T``.
    attack : str or Attack, optional
        A name of :data:`fedsec.learning.attacks.ATTACKS` or an instance; ``None``: no attack.
    malicious : float, default=0.2
        Share of malicious clients, in ``[0, 0.5)``.
    config : BalanceConfig, optional
        BALANCE hyper-parameters (default ``gamma=0.3, kappa=1, alpha=0.5``); its thresholds
        are also the radii the ``balance-edge`` attack aims at, whatever the method.
    deployment : {"server", "complete", "ring", "erdos-renyi"}, default="server"
        BALANCE only: server-assisted, or decentralised over that graph.
    selection : {"efficient", "brute"}, default="efficient"
        Server-assisted BALANCE: Algorithm 1 or brute force (same sets, different counts).
    graph_p : float, default=0.5
        Edge probability of the Erdős–Rényi graph.
    seed : int, default=0
    progress : callable, optional
        Called with a short message after every round.
    observer : callable, optional
        BALANCE only: called with a :class:`RoundView` every round.
    """
    if method not in METHODS:
        raise ValueError(f"The 'method' parameter of run_pfl must be one of {METHODS}. "
                         f"Got {method!r} instead.")
    if deployment not in DEPLOYMENTS:
        raise ValueError(f"The 'deployment' parameter of run_pfl must be one of "
                         f"{DEPLOYMENTS}. Got {deployment!r} instead.")
    if selection not in SELECTIONS:
        raise ValueError(f"The 'selection' parameter of run_pfl must be one of {SELECTIONS}. "
                         f"Got {selection!r} instead.")
    t_rounds = check_int(rounds, "rounds", "run_pfl", min_value=1)
    check_real(graph_p, "graph_p", "run_pfl", ge=0.0, le=1.0)
    cfg = config if config is not None else BalanceConfig()
    atk: Attack | None = make_attack(attack) if isinstance(attack, str) else attack
    n = federation.n_clients
    bad = malicious_clients(n, malicious, seed)
    if atk is not None and not bad:
        raise ValueError("An attack needs at least one malicious client: raise 'malicious'.")
    benign = [i for i in range(n) if i not in set(bad)]
    if not benign:
        raise ValueError("run_pfl needs at least one benign client.")

    from fedsec.learning.fedavg import initial_params
    from fedsec.learning.torch_net import TrainConfig, train_local

    spec = task.spec
    train_cfg = TrainConfig(**vars(task.training))
    w0 = flatten_params(initial_params(spec, seed))
    models = np.tile(w0, (n, 1))  # each client's current (personalised) model
    sizes = np.array([max(len(c.y_train), 1) for c in federation.clients], dtype=np.float64)
    rng_attack = np.random.default_rng(np.random.SeedSequence([seed, 0xA77AC]))
    nbs = None
    if method == "balance" and deployment != "server":
        nbs = graph_neighbours(deployment, n, p=graph_p,
                               rng=np.random.default_rng(np.random.SeedSequence([seed, 0x6A])))
    server = (BalanceServer(n, cfg, t_rounds, selection=selection)
              if method == "balance" and deployment == "server" else None)
    peers = [BalancePeer(i, cfg, t_rounds, n) for i in range(n)] if nbs is not None else []
    robust = robust_aggregator(method, len(bad)) if method in ROBUST_AGGREGATORS else None
    run = PFLRun(method, atk.name if atk is not None else "none", t_rounds, n, bad,
                 deployment if method == "balance" else "server",
                 selection if method == "balance" and deployment == "server" else "brute",
                 int(seed), meta={"task": task.name, "model": spec.name,
                                  "params": spec.n_params(), "balance": cfg.to_dict(),
                                  "malicious_share": malicious,
                                  "training": vars(task.training)})
    start = time.perf_counter()

    def train(i: int, frm: NDArray[np.float64], t: int, flip: bool = False
              ) -> NDArray[np.float64]:
        c = federation.clients[i]
        y = LabelFlipping.flip(c.y_train, spec.n_classes) if flip else c.y_train
        out = train_local(spec, unflatten_params(spec, frm), c.x_train, y, train_cfg,
                          seed=(seed, i, t))
        return flatten_params(out)

    for t in range(t_rounds):
        ref = models[benign].mean(axis=0)
        half = np.empty_like(models)
        for i in benign:
            half[i] = train(i, models[i], t)
        sigmas = cfg.sigmas(t, t_rounds, n)
        if bad:
            if atk is None:
                for i in bad:
                    half[i] = train(i, models[i], t)
            elif atk.poisons_data:
                own = np.vstack([train(i, ref, t, flip=True) - ref for i in bad])
                half[list(bad)] = ref + atk(own, rng_attack, n_malicious=len(bad))
            else:
                radii = sigmas[benign] * np.linalg.norm(half[benign], axis=1)
                half[list(bad)] = ref + atk(half[benign] - ref, rng_attack, n_malicious=len(bad),
                                      radii=radii)
        if not np.isfinite(half).all():
            raise ValueError(f"Round {t}: a model is not finite (attack {run.attack}).")

        accepted: tuple[frozenset[int], ...] = ()
        sel: SelectionResult | None = None
        if method == "local":
            models = half
        elif method == "fedavg" or robust is not None:
            glob = (robust(half) if robust is not None
                    else (sizes[:, None] * half).sum(axis=0) / sizes.sum())
            models = np.tile(glob, (n, 1))
        elif server is not None:
            sel = server.select(half, t)
            accepted = sel.accepted
            models = server.aggregate(half, sel)
            run.checks.append(sel.checks)
            run.brute_checks.append(n * (n - 1))
        else:
            assert nbs is not None
            new = np.empty_like(half)
            sets = []
            before = sum(p.checks for p in peers)
            for i in range(n):
                received = {j: half[j] for j in nbs[i]}
                s = peers[i].select(half[i], received, t)
                sets.append(s)
                new[i] = peers[i].aggregate(half[i], received, s)
            accepted = tuple(sets)
            models = new
            run.checks.append(sum(p.checks for p in peers) - before)
            run.brute_checks.append(sum(len(s) for s in nbs))
        if method == "balance":
            run.accepted.append([sorted(s) for s in accepted])
            if observer is not None:
                observer(RoundView(t, half.copy(), sigmas, sel, accepted))
        run.accuracy.append([None if i in bad else _eval(task, federation, models[i], i)
                             for i in range(n)])
        if progress is not None:
            extra = f", {run.checks[-1]} checks" if run.checks else ""
            progress(f"{method}/{run.attack} round {t + 1}/{t_rounds}: benign mean "
                     f"{run.benign_mean():.3f}, worst {run.benign_worst():.3f}{extra}")
    run.seconds = time.perf_counter() - start
    run.models = models
    return run
