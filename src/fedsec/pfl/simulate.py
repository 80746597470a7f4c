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

Norm clipping (``clipping=``, server-assisted BALANCE only; the plaintext mirror of the
encrypted run of :mod:`fedsec.pfl.secure_sim`): every client publishes ``||w_i^{t+1/2}||``,
the round's bound is ``B_t = factor * median`` of the published norms (or a fixed ``bound``),
both public; clients scale their model down to norm ``B_t`` when above it and send that.
With ``unclipped_attackers`` the malicious clients skip clipping; a client whose sent model
exceeds ``B_t`` is *invalid*: nobody accepts it, it accepts nobody, and it keeps its own
model.

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

__all__ = ["METHODS", "DEPLOYMENTS", "ClientRounds", "NormClipping", "PFLRun", "RoundView",
           "clip_models", "run_pfl", "malicious_clients",
           "valid_neighbours"]

#: The aggregation methods :func:`run_pfl` compares.
METHODS: tuple[str, ...] = ("balance", "fedavg", "local", *ROBUST_AGGREGATORS)
#: Server-assisted BALANCE, or decentralised over one of the peer graphs.
DEPLOYMENTS: tuple[str, ...] = ("server", *GRAPHS)
Progress = Callable[[str], None]


@dataclass(frozen=True)
class NormClipping:
    """How clients bound the norm of the model they send (public rule).

    Parameters
    ----------
    factor : float, default=1.25
        ``B_t = factor * median`` of the norms the clients publish in round ``t``.
    bound : float, optional
        A fixed bound ``B`` for every round instead (overrides ``factor``).
    unclipped_attackers : bool, default=False
        Malicious clients send their model unclipped (they come out invalid when it is
        above the bound).
    """

    factor: float = 1.25
    bound: float | None = None
    unclipped_attackers: bool = False

    def __post_init__(self) -> None:
        check_real(self.factor, "factor", "NormClipping", gt=0.0)
        if self.bound is not None:
            check_real(self.bound, "bound", "NormClipping", gt=0.0)

    def round_bound(self, published_norms: NDArray[Any]) -> float:
        """``B_t`` from the published norms (or the fixed bound)."""
        if self.bound is not None:
            return float(self.bound)
        b = self.factor * float(np.median(np.asarray(published_norms, dtype=np.float64)))
        if not (math.isfinite(b) and b > 0):
            raise ValueError(f"The norm bound of a round must be finite and > 0. Got {b} "
                             f"(the median of the published norms times {self.factor}).")
        return b

    def clips(self, n_clients: int, malicious: tuple[int, ...]) -> list[bool]:
        """``clips[i]``: does client ``i`` clip its model?"""
        bad = set(malicious) if self.unclipped_attackers else set()
        return [i not in bad for i in range(n_clients)]

    def to_dict(self) -> dict[str, Any]:
        return {"factor": self.factor, "bound": self.bound,
                "unclipped_attackers": self.unclipped_attackers}


def clip_models(models: NDArray[Any], bound: float, clip: list[bool] | None = None
                ) -> NDArray[np.float64]:
    """Every row ``i`` with ``clip[i]`` scaled down to norm ``bound`` when above it."""
    w = np.array(models, dtype=np.float64)
    norms = np.linalg.norm(w, axis=1)
    for i in range(w.shape[0]):
        if (clip is None or clip[i]) and norms[i] > bound:
            w[i] *= bound / norms[i]
    return w


def valid_neighbours(valid: NDArray[np.bool_]) -> list[frozenset[int]]:
    """The complete graph on the valid clients; invalid clients have no neighbours."""
    ok = frozenset(i for i in range(len(valid)) if bool(valid[i]))
    return [ok - {i} if i in ok else frozenset() for i in range(len(valid))]


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


class ClientRounds:
    """The clients' side of a simulation, shared by the plaintext and the encrypted runs:
    data, the malicious set, local training and the attacks, all from one seed.

    :meth:`half_models` performs round ``t``'s local training and attack on the clients'
    current models and returns ``w^{t+1/2}`` (what each client would send) and the round's
    thresholds; the attacker's randomness advances the same way in every run with the same
    seed, so two runs that feed the same models get the same ``w^{t+1/2}``.
    """

    def __init__(self, task: Task, federation: Federation, *, rounds: int,
                 attack: str | Attack | None, malicious: float, config: BalanceConfig | None,
                 seed: int, owner: str) -> None:
        self.task = task
        self.federation = federation
        self.rounds = check_int(rounds, "rounds", owner, min_value=1)
        self.config = config if config is not None else BalanceConfig()
        self.attack: Attack | None = make_attack(attack) if isinstance(attack, str) else attack
        self.n_clients = federation.n_clients
        self.seed = int(seed)
        self.malicious = malicious_clients(self.n_clients, malicious, seed)
        if self.attack is not None and not self.malicious:
            raise ValueError("An attack needs at least one malicious client: raise "
                             "'malicious'.")
        self.benign = [i for i in range(self.n_clients) if i not in set(self.malicious)]
        if not self.benign:
            raise ValueError(f"{owner} needs at least one benign client.")
        from fedsec.learning.torch_net import TrainConfig

        self._train_cfg = TrainConfig(**vars(task.training))
        self._rng_attack = np.random.default_rng(np.random.SeedSequence([seed, 0xA77AC]))

    def initial_models(self) -> NDArray[np.float64]:
        """Every client's starting model (the same seeded initial model)."""
        from fedsec.learning.fedavg import initial_params

        w0 = flatten_params(initial_params(self.task.spec, self.seed))
        return np.tile(w0, (self.n_clients, 1))

    def _train(self, i: int, frm: NDArray[np.float64], t: int, flip: bool = False
               ) -> NDArray[np.float64]:
        from fedsec.learning.torch_net import train_local

        spec = self.task.spec
        c = self.federation.clients[i]
        y = LabelFlipping.flip(c.y_train, spec.n_classes) if flip else c.y_train
        out = train_local(spec, unflatten_params(spec, frm), c.x_train, y, self._train_cfg,
                          seed=(self.seed, i, t))
        return flatten_params(out)

    def half_models(self, models: NDArray[np.float64], t: int
                    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Round ``t``: ``(w^{t+1/2}`` for every client, ``sigma_i(t))``."""
        n, bad, benign, atk = self.n_clients, self.malicious, self.benign, self.attack
        ref = models[benign].mean(axis=0)
        half = np.empty_like(models)
        for i in benign:
            half[i] = self._train(i, models[i], t)
        sigmas = self.config.sigmas(t, self.rounds, n)
        if bad:
            if atk is None:
                for i in bad:
                    half[i] = self._train(i, models[i], t)
            elif atk.poisons_data:
                own = np.vstack([self._train(i, ref, t, flip=True) - ref for i in bad])
                half[list(bad)] = ref + atk(own, self._rng_attack, n_malicious=len(bad))
            else:
                radii = sigmas[benign] * np.linalg.norm(half[benign], axis=1)
                half[list(bad)] = ref + atk(half[benign] - ref, self._rng_attack,
                                            n_malicious=len(bad), radii=radii)
        if not np.isfinite(half).all():
            name = atk.name if atk is not None else "none"
            raise ValueError(f"Round {t}: a model is not finite (attack {name}).")
        return half, sigmas

    def evaluate(self, models: NDArray[np.float64]) -> list[float | None]:
        """Every benign client's accuracy on its own test data (``None``: malicious or no
        test data)."""
        return [None if i in self.malicious else _eval(self.task, self.federation, models[i], i)
                for i in range(self.n_clients)]


def run_pfl(task: Task, federation: Federation, *, method: str = "balance", rounds: int = 20,
            attack: str | Attack | None = None, malicious: float = 0.2,
            config: BalanceConfig | None = None, deployment: str = "server",
            selection: str = "efficient", graph_p: float = 0.5, seed: int = 0,
            progress: Progress | None = None,
            observer: Callable[[RoundView], None] | None = None,
            clipping: NormClipping | None = None) -> PFLRun:
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
    clipping : NormClipping, optional
        Server-assisted BALANCE only: clients clip the model they send (module docstring);
        the round's bounds and invalid clients go into ``meta``. ``RoundView.sent`` holds
        the models as sent (clipped).
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
    if clipping is not None and (method != "balance" or deployment != "server"):
        raise ValueError("The 'clipping' parameter of run_pfl applies to server-assisted "
                         "BALANCE only (method='balance', deployment='server').")
    sim = ClientRounds(task, federation, rounds=t_rounds, attack=attack, malicious=malicious,
                       config=config, seed=seed, owner="run_pfl")
    cfg, atk, n, bad = sim.config, sim.attack, sim.n_clients, sim.malicious
    spec = task.spec
    models = sim.initial_models()
    sizes = np.array([max(len(c.y_train), 1) for c in federation.clients], dtype=np.float64)
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
    if clipping is not None:
        run.meta["clipping"] = clipping.to_dict()
        run.meta["norm_bounds"] = []
        run.meta["invalid"] = []
        clip_mask = clipping.clips(n, bad)
    start = time.perf_counter()

    for t in range(t_rounds):
        half, sigmas = sim.half_models(models, t)
        if clipping is not None:
            bound = clipping.round_bound(np.linalg.norm(half, axis=1))
            raw = half
            half = clip_models(raw, bound, clip_mask)
            valid = np.array([clip_mask[i] or bool(np.linalg.norm(raw[i]) <= bound)
                              for i in range(n)])
            run.meta["norm_bounds"].append(bound)
            run.meta["invalid"].append([i for i in range(n) if not valid[i]])

        accepted: tuple[frozenset[int], ...] = ()
        sel: SelectionResult | None = None
        if method == "local":
            models = half
        elif method == "fedavg" or robust is not None:
            glob = (robust(half) if robust is not None
                    else (sizes[:, None] * half).sum(axis=0) / sizes.sum())
            models = np.tile(glob, (n, 1))
        elif server is not None:
            if clipping is not None:  # Algorithm 1 over the valid clients only
                server.neighbours = valid_neighbours(valid)
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
        run.accuracy.append(sim.evaluate(models))
        if progress is not None:
            extra = f", {run.checks[-1]} checks" if run.checks else ""
            progress(f"{method}/{run.attack} round {t + 1}/{t_rounds}: benign mean "
                     f"{run.benign_mean():.3f}, worst {run.benign_worst():.3f}{extra}")
    run.seconds = time.perf_counter() - start
    run.models = models
    return run
