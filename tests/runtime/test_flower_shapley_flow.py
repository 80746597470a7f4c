"""The Shapley flow end to end on Flower without plaintext models at the server: FedAvg
with secure aggregation (each client keeps its own record part), then HESV on the same
SuperNodes over those parts; the same values as in one process on the same record."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    pytest.importorskip("flwr", reason="Flower is optional")
    pytest.importorskip("torch", reason="training needs PyTorch")

from fedsec.learning.record import RoundRecord, TrainingRecord  # noqa: E402

NAMES = [f"bank-{c}" for c in "abcdef"]
# half of the six clients train each round (three, the fewest secure aggregation allows):
# HESV's strict decryption rule can then place every decryption
TRAIN = {"protocol": "fedavg", "task": "bank", "samples": 360, "clients": 6, "rounds": 2,
         "seed": 7, "alpha": 0.5, "fraction-train": 0.5, "step-timeout": 60.0,
         "wait-nodes-timeout": 2.0}

Federation = Any
LocalGrid = Any


def _serve(grid: LocalGrid, rc: dict[str, Any], result: Path) -> dict[str, Any]:
    from flwr.app import Context, RecordDict

    from fedsec.runtime.flower_apps import server_main

    rc = {**rc, "result-path": str(result)}
    grid.run_config.clear()
    grid.run_config.update(rc)
    ctx = Context(run_id=grid.run_id, node_id=0, node_config={}, state=RecordDict(),
                  run_config=rc)
    try:
        server_main(grid, ctx)
    except Exception as exc:  # noqa: BLE001 - the result JSON says what failed
        if not result.exists():
            raise AssertionError(f"the ServerApp stopped before any result: {exc!r}") from exc
    out: dict[str, Any] = json.loads(result.read_text())
    return out


def test_secure_training_then_hesv_without_models_at_the_server(
        federation: Callable[..., Federation], local_grid: Callable[..., LocalGrid],
        tmp_path: Path) -> None:
    from fedsec.runtime.flower_fedavg import (
        client_record_path,
        client_test_path,
        load_client_record,
    )
    from fedsec.runtime.flower_io import get_blobs
    from fedsec.shapley.hesv import hesv_shapley

    fed = federation(tmp_path / "fed", NAMES)
    base = {201 + i: {"client-id": i, "identity-path": str(fed.identity_path(n)),
                      "roster-path": str(fed.roster_path), "state-dir": str(fed.state_dir(n)),
                      "log-path": str(fed.log_path(n)), "role-host": "inline"}
            for i, n in enumerate(NAMES)}
    train = local_grid(base, {}, run_id=61)
    doc = _serve(train, {**TRAIN, "roster-path": str(fed.roster_path)}, tmp_path / "t.json")
    assert doc["status"] == "done", doc
    seen = [b for _s, _n, m in train.replies for b in get_blobs(m.content)]
    # the same SuperNodes, now pointing at what each kept
    nodes = {k: {**cfg, "hesv-record-path": str(client_record_path(cfg["state-dir"], 61, i)),
                 "hesv-test-path": str(client_test_path(cfg["state-dir"], 61, i))}
             for i, (k, cfg) in enumerate(base.items())}
    evaluate = local_grid(nodes, {}, run_id=62)
    largest = 0
    for cfg in nodes.values():
        with np.load(cfg["hesv-test-path"]) as npz:
            largest = max(largest, len(npz["y"]))
    res = _serve(evaluate, {"protocol": "hesv", "roster-path": str(fed.roster_path),
                            "hesv-batch-hint": largest, "step-timeout": 60.0,
                            "wait-nodes-timeout": 2.0},
                 tmp_path / "e.json")
    assert res["status"] == "done", res
    seen += [b for _s, _n, m in evaluate.replies for b in get_blobs(m.content)]
    # in one process, on the record the clients hold together (a test-only assembly)
    parts = [load_client_record(client_record_path(base[201 + i]["state-dir"], 61, i))
             for i in range(6)]
    rounds = []
    for t, (who, weights) in enumerate(parts[0].rounds):
        rounds.append(RoundRecord(parts[0].global_params[t], who,
                                  tuple(parts[c].local_params[t] for c in who), weights))
        for c in who:  # no local model ever reached the server
            for p in parts[c].local_params[t]:
                assert not any(np.ascontiguousarray(p, dtype=np.float32).tobytes()[:32] in b
                               for b in seen)
    record = TrainingRecord(parts[0].spec, 6, tuple(rounds), parts[0].global_params[-1])
    sets = []
    for i in range(6):
        with np.load(client_test_path(base[201 + i]["state-dir"], 61, i)) as npz:
            sets.append((npz["x"], npz["y"]))
    ref = hesv_shapley(record, sets)
    assert np.allclose(res["fsv"], ref.fsv, atol=1e-12), (res["fsv"], ref.fsv)
