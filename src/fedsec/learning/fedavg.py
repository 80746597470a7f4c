"""Federated averaging that records every round (Zheng et al., Sec. 2 "Federated learning").

Two roles, used both by the in-process loop :func:`run_fedavg` and by the Flower apps
(:mod:`fedsec.runtime.flower_shapley`):

* :class:`FedAvgClient` -- trains the global model on its own data
  (:func:`fedsec.learning.torch_net.train_local`) and reports its local model and its
  number of training samples (the FedAvg weight ``ω_i``);
* :class:`FedAvgServer` -- picks the participants ``I^t`` of a round, aggregates their
  local models into ``θ^{t+1} = Σ ω_i θ_i / Σ ω_i`` and records ``θ^t``, ``I^t``,
  ``θ_i^t`` and ``ω_i^t`` (:class:`~fedsec.learning.record.TrainingRecord`).

Local training of client ``i`` in round ``t`` is seeded by ``(seed, i, t)``, so a run is
reproducible wherever the clients run. Seeded numpy/torch generators are fine here: they
simulate training and protect nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec._validation import check_int, check_real
from fedsec.learning.model import ModelSpec, Params, aggregate
from fedsec.learning.record import RoundRecord, TrainingRecord
from fedsec.learning.tasks import ClientData, Federation, LocalTraining, Task

__all__ = ["FedAvgClient", "FedAvgServer", "run_fedavg", "initial_params"]

Progress = Callable[[str], None]


def initial_params(spec: ModelSpec, seed: int) -> Params:
    """The initial global model ``θ^1`` of a run (seeded)."""
    return spec.init_params(np.random.default_rng(np.random.SeedSequence([seed, 0xF1])))


@dataclass
class FedAvgClient:
    """A client's training role: its data, the model spec and local-training settings."""

    client_id: int
    spec: ModelSpec
    data: ClientData
    training: LocalTraining
    seed: int = 0

    @property
    def n_examples(self) -> int:
        return int(len(self.data.y_train))

    def train(self, global_params: Sequence[NDArray[Any]], round_index: int
              ) -> tuple[Params, int]:
        """Local model ``θ_i^t`` trained from ``θ^t``, and the weight (training samples)."""
        from fedsec.learning.torch_net import TrainConfig, train_local

        cfg = TrainConfig(**vars(self.training))
        local = train_local(self.spec, global_params, self.data.x_train, self.data.y_train,
                            cfg, seed=(self.seed, self.client_id, round_index))
        return local, self.n_examples


@dataclass
class FedAvgServer:
    """The server's role: participant selection, aggregation and the round record."""

    spec: ModelSpec
    n_clients: int
    participation: float = 1.0
    seed: int = 0
    rounds: list[RoundRecord] = field(default_factory=list)

    def __post_init__(self) -> None:
        check_int(self.n_clients, "n_clients", "FedAvgServer", min_value=1)
        check_real(self.participation, "participation", "FedAvgServer", gt=0.0, le=1.0)

    def select(self, round_index: int) -> tuple[int, ...]:
        """``I^t``: ``ceil(participation * n)`` clients, drawn with a seeded generator."""
        k = int(np.ceil(self.participation * self.n_clients - 1e-9))
        if k >= self.n_clients:
            return tuple(range(self.n_clients))
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, round_index, 0x5E1]))
        return tuple(sorted(int(c) for c in rng.choice(self.n_clients, size=k, replace=False)))

    def aggregate(self, global_params: Sequence[NDArray[Any]],
                  updates: Mapping[int, tuple[Sequence[NDArray[Any]], float]]) -> Params:
        """Record the round and return ``θ^{t+1}`` (float32, as the clients will get it).

        ``updates`` maps each participant's client id to ``(θ_i^t, ω_i^t)``. With no
        update the global model is kept.
        """
        parts = tuple(sorted(updates))
        if any(not 0 <= c < self.n_clients for c in parts):
            raise ValueError(f"Client ids must lie in 0..{self.n_clients - 1}. Got {parts}.")
        local = tuple([np.asarray(p, dtype=np.float32) for p in updates[c][0]] for c in parts)
        weights = np.array([float(updates[c][1]) for c in parts], dtype=np.float64)
        glob = [np.asarray(p, dtype=np.float32) for p in global_params]
        for m in local:
            self.spec.check_params(m)
        self.rounds.append(RoundRecord(glob, parts, local, weights))
        if not parts or weights.sum() <= 0:
            return [p.copy() for p in glob]
        return [p.astype(np.float32) for p in aggregate(local, weights)]

    def record(self, final_params: Sequence[NDArray[Any]], meta: dict[str, Any] | None = None
               ) -> TrainingRecord:
        """The :class:`TrainingRecord` of the rounds so far, ending in ``θ^{T+1}``."""
        final = [np.asarray(p, dtype=np.float32) for p in final_params]
        return TrainingRecord(self.spec, self.n_clients, tuple(self.rounds), final, meta)


def run_fedavg(task: Task, federation: Federation, *, rounds: int = 10,
               participation: float = 1.0, seed: int = 0,
               progress: Progress | None = None) -> TrainingRecord:
    """Train ``task.spec`` by FedAvg over ``federation.clients`` for ``rounds`` rounds.

    Parameters
    ----------
    task : Task
    federation : Federation
        From :meth:`Task.federate`.
    rounds : int, default=10
        ``T``.
    participation : float, default=1.0
        Share of clients that take part in each round (partial participation < 1).
    seed : int, default=0
        Initial model, participant draws and mini-batch orders.
    progress : callable, optional
        Called with a short message after every round.
    """
    t_rounds = check_int(rounds, "rounds", "run_fedavg", min_value=1)
    n = federation.n_clients
    server = FedAvgServer(task.spec, n, participation, seed)
    clients = [FedAvgClient(i, task.spec, federation.clients[i], task.training, seed)
               for i in range(n)]
    params = initial_params(task.spec, seed)
    for t in range(t_rounds):
        updates = {c: clients[c].train(params, t) for c in server.select(t)}
        params = server.aggregate(params, updates)
        if progress is not None:
            progress(f"round {t + 1}/{t_rounds}: {len(updates)} clients trained")
    meta = {"task": task.name, "rounds": t_rounds, "participation": participation,
            "seed": seed, "training": vars(task.training)}
    return server.record(params, meta)
