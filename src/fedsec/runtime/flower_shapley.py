"""Contribution evaluation for Flower users: a FedAvg strategy that records every round.

:class:`RecordingFedAvg` is a small subclass of Flower's Message-API ``FedAvg``
(``flwr.serverapp.strategy.FedAvg``, flwr 1.41). Training runs exactly as with FedAvg;
in addition, for every round it keeps what the Federated Shapley Value needs (Zheng et al.):
the global model ``θ^t`` sent out, the participants ``I^t``, their local models ``θ_i^t``
and weights ``ω_i^t`` (the ``num-examples`` each client reports). Aggregation is done by
fedsec's own :class:`~fedsec.learning.fedavg.FedAvgServer` role -- the one the in-process
loop uses -- so ``θ^{t+1}`` is bit-for-bit the ``θ_{I^t}^t`` that contribution evaluation
tests. After ``strategy.start(...)``, :meth:`RecordingFedAvg.training_record` returns the
:class:`~fedsec.learning.record.TrainingRecord`; pass it to
:func:`fedsec.shapley.federated_shapley`.

Clients must tell who they are: each train reply carries, besides Flower's usual
``ArrayRecord`` and ``MetricRecord`` (with ``num-examples``), a ``ConfigRecord`` under
``"fedsec"`` with an int ``"client-id"`` in ``0..n-1`` (:func:`train_reply` builds it).

The ServerApp/ClientApp pair built by :func:`build_server_app` / :func:`build_client_app`
(used by ``examples/shapley-flower``) trains one of fedsec's tasks: each node takes its
share of the same Dirichlet split (:meth:`fedsec.learning.tasks.Task.federate`) and
trains it with the same :class:`~fedsec.learning.fedavg.FedAvgClient` role as the
in-process run, so both yield the same FSV on the same seeds (tested). Run config keys:
``task``, ``samples`` (0 = the task's full data), ``clients``, ``rounds``, ``alpha``,
``seed``, ``fraction-train``, ``estimator``, ``budget`` (0 = default), ``sample-skip``,
``result-path`` (JSON with the FSVs, on the SuperLink machine; "" = none) and
``record-path`` (the training record's bytes; "" = none). A node's client id is its
``client-id`` node config (deployment) or its ``partition-id`` (simulation).

In this plaintext form the server records every local model and evaluates contributions
on the task's collective test set itself: right only for a server trusted with every
client's model and test data. Otherwise use FedAvg with secure aggregation
(:mod:`fedsec.runtime.flower_fedavg`: the server sees only the aggregate, each client
keeps its own record part), then HESV, SecSV or SecretSV on Flower over what the clients
kept (``fedsec flower local shapley``).
"""

from __future__ import annotations

import functools
import json
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

with warnings.catch_warnings():
    # flwr 1.41 -> typer -> click 8.5 warns on import; see fedsec.runtime.flower_io.
    warnings.simplefilter("ignore", DeprecationWarning)
    from flwr.app import (
        Array,
        ArrayRecord,
        ConfigRecord,
        Context,
        Message,
        MetricRecord,
        RecordDict,
    )
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg

from fedsec.errors import ProtocolError
from fedsec.learning.fedavg import FedAvgClient, FedAvgServer, initial_params
from fedsec.learning.model import ModelSpec, Params
from fedsec.learning.record import TrainingRecord
from fedsec.learning.tasks import Task, make_task

__all__ = [
    "RecordingFedAvg",
    "arrays_to_params",
    "params_to_arrays",
    "train_reply",
    "build_client_app",
    "build_server_app",
    "run_server",
]

FEDSEC_KEY = "fedsec"
CLIENT_ID = "client-id"


def params_to_arrays(params: Sequence[NDArray[Any]]) -> ArrayRecord:
    """Model parameters as an ``ArrayRecord`` with keys ``"0"``, ``"1"``, ... (in order)."""
    return ArrayRecord({str(k): Array(np.ascontiguousarray(p)) for k, p in enumerate(params)})


def arrays_to_params(arrays: ArrayRecord, spec: ModelSpec | None = None) -> Params:
    """Parameters from an ``ArrayRecord`` in key order (shapes checked against ``spec``)."""
    params = [np.asarray(arrays[key].numpy()) for key in arrays]
    if not all(p.dtype.kind in "fiu" and np.isfinite(p).all() for p in params):
        raise ProtocolError("Model arrays must be finite real numbers.")
    if spec is not None:
        try:
            spec.check_params(params)
        except ValueError as exc:
            raise ProtocolError(f"Model arrays do not fit {spec.name}: {exc}") from None
    return params


def train_reply(msg: Message, local: Sequence[NDArray[Any]], n_examples: int,
                client_id: int, weighted_by_key: str = "num-examples") -> Message:
    """A ClientApp's reply to a train message: local model, weight and client id."""
    content = RecordDict({
        "arrays": params_to_arrays(local),
        "metrics": MetricRecord({weighted_by_key: int(n_examples)}),
        FEDSEC_KEY: ConfigRecord({CLIENT_ID: int(client_id)}),
    })
    return Message(content, reply_to=msg)


class RecordingFedAvg(FedAvg):
    """Flower's FedAvg that records ``θ^t``, ``I^t``, ``θ_i^t`` and ``ω_i^t`` every round.

    Parameters
    ----------
    spec : ModelSpec
        The architecture of the arrays exchanged (parameters in ``parameters()`` order).
    n_clients : int
        Number of clients; each reply names its client id in ``0..n_clients-1``.
    **kwargs
        Passed to ``flwr.serverapp.strategy.FedAvg`` (``fraction_train``,
        ``min_available_nodes``, ...).
    """

    def __init__(self, spec: ModelSpec, n_clients: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.server = FedAvgServer(spec, n_clients)
        self._current: Params | None = None
        self._keys: list[str] | None = None

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """Remember ``θ^t`` (the arrays sent out), then sample nodes as FedAvg does."""
        self._keys = list(arrays.keys())
        self._current = arrays_to_params(arrays, self.spec)
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Record the round and aggregate with fedsec's FedAvg role."""
        if self._current is None or self._keys is None:
            raise ProtocolError("aggregate_train called before configure_train.")
        valid, _ = self._check_and_log_replies(list(replies), is_train=True)
        updates: dict[int, tuple[Params, float]] = {}
        for msg in valid:
            content = msg.content
            try:
                cid = int(content.config_records[FEDSEC_KEY][CLIENT_ID])  # type: ignore[arg-type]
                arrays = next(iter(content.array_records.values()))
                metrics = next(iter(content.metric_records.values()))
                weight = float(metrics[self.weighted_by_key])  # type: ignore[arg-type]
            except (KeyError, StopIteration, TypeError, ValueError, OverflowError) as exc:
                raise ProtocolError(f"A train reply lacks the fedsec client id, arrays or "
                                    f"'{self.weighted_by_key}': {exc!r}") from None
            if not 0 < weight < float("inf"):  # NaN, zero (Flower divides), negative, inf
                raise ProtocolError(f"Client {cid} reports '{self.weighted_by_key}' = {weight}.")
            if cid in updates:
                raise ProtocolError(f"Two train replies claim client id {cid}.")
            if not 0 <= cid < self.server.n_clients:
                raise ProtocolError(f"Client id {cid} is outside 0..{self.server.n_clients - 1}.")
            updates[cid] = (arrays_to_params(arrays, self.spec), weight)
        new = self.server.aggregate(self._current, updates)
        metrics_out = (self.train_metrics_aggr_fn([m.content for m in valid],
                                                  self.weighted_by_key) if valid else None)
        if not updates:
            return None, metrics_out
        return ArrayRecord({k: Array(p) for k, p in zip(self._keys, new, strict=True)}
                           ), metrics_out

    def training_record(self, final_arrays: ArrayRecord | None = None,
                        meta: dict[str, Any] | None = None) -> TrainingRecord:
        """The rounds recorded so far (``final_arrays``: ``θ^{T+1}``, e.g.
        ``result.arrays``; default: the last aggregate)."""
        if final_arrays is not None:
            final = arrays_to_params(final_arrays, self.spec)
        elif self.server.rounds:
            last = self.server.rounds[-1]
            final = last.model(last.participants) if last.participants else last.global_params
        else:
            raise ProtocolError("No round has been recorded.")
        return self.server.record(final, meta)


# ------------------------------------------------------------------- the example app
def _task_from(cfg: Mapping[str, Any]) -> tuple[Task, int, float, int]:
    seed = int(cfg.get("seed", 0))
    task = _load_task(str(cfg.get("task", "bank")), int(cfg.get("samples", 0)),
                      int(cfg.get("layers", 3)), seed)
    return task, int(cfg.get("clients", 5)), float(cfg.get("alpha", 0.5)), seed


@functools.lru_cache(maxsize=4)
def _load_task(name: str, samples: int, layers: int, seed: int) -> Task:
    # a process that serves several messages (simulation) loads the data once
    return make_task(name, n_samples=samples or None, layers=layers, seed=seed)


def _client_id(context: Context) -> int:
    node = context.node_config
    value = node.get(CLIENT_ID, node.get("partition-id"))
    if value is None:
        raise ProtocolError("The node needs a 'client-id' node config (or a partition-id).")
    return int(value)


def build_client_app() -> ClientApp:
    """ClientApp: train the task's local share with :class:`FedAvgClient`."""
    app = ClientApp()

    def client_of(context: Context) -> FedAvgClient:
        task, n, alpha, seed = _task_from(context.run_config)
        cid = _client_id(context)
        fed = task.federate(n, alpha=alpha, seed=seed)
        if not 0 <= cid < n:
            raise ProtocolError(f"client-id {cid} is outside 0..{n - 1}.")
        return FedAvgClient(cid, task.spec, fed.clients[cid], task.training, seed)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        client = client_of(context)
        params = arrays_to_params(msg.content.array_records["arrays"], client.spec)
        server_round = int(msg.content.config_records["config"]["server-round"])  # type: ignore[arg-type]
        local, n_ex = client.train(params, server_round - 1)
        return train_reply(msg, local, n_ex, client.client_id)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        from fedsec.learning.model import accuracy

        client = client_of(context)
        params = arrays_to_params(msg.content.array_records["arrays"], client.spec)
        d = client.data
        acc = accuracy(client.spec, params, d.x_test, d.y_test) if len(d.y_test) else 0.0
        content = RecordDict({"metrics": MetricRecord(
            {"accuracy": acc, "num-examples": int(max(len(d.y_test), 1))})})
        return Message(content, reply_to=msg)

    return app


def _write_json(path: str, doc: dict[str, Any]) -> None:
    if not path:
        return
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2))
    os.replace(tmp, path)


def run_server(grid: Grid, cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The ServerApp's work: FedAvg with :class:`RecordingFedAvg` over ``grid``, then FSVs.

    Returns the result document (``fsv``, ``ssv``, ... of
    :meth:`fedsec.shapley.ShapleyResult.to_dict`); writes the training record to the run
    config's ``record-path`` if set.
    """
    from fedsec.shapley import federated_shapley

    task, n, alpha, seed = _task_from(cfg)
    rounds = int(cfg.get("rounds", 10))
    strategy = RecordingFedAvg(task.spec, n,
                               fraction_train=float(cfg.get("fraction-train", 1.0)),
                               fraction_evaluate=1.0, min_train_nodes=1,
                               min_evaluate_nodes=1, min_available_nodes=n)
    result = strategy.start(grid, params_to_arrays(initial_params(task.spec, seed)),
                            num_rounds=rounds)
    record = strategy.training_record(result.arrays, meta={
        "task": task.name, "rounds": rounds, "seed": seed, "engine": "flower"})
    if str(cfg.get("record-path", "")):
        Path(str(cfg["record-path"])).write_bytes(record.to_bytes())
    fed = task.federate(n, alpha=alpha, seed=seed)
    budget = int(cfg.get("budget", 0)) or None
    res = federated_shapley(record, fed.x_test, fed.y_test,
                            estimator=str(cfg.get("estimator", "exact")), budget=budget,
                            sample_skip=bool(cfg.get("sample-skip", False)), seed=seed)
    return {"status": "done", "task": task.name, "clients": n, "rounds": rounds,
            **res.to_dict()}


def build_server_app() -> ServerApp:
    """ServerApp: FedAvg with :class:`RecordingFedAvg`, then each client's FSV."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        doc = run_server(grid, context.run_config)
        for i, v in enumerate(doc["fsv"]):
            print(f"client {i}: FSV {v:+.5f}")
        _write_json(str(context.run_config.get("result-path", "")), doc)

    return app
