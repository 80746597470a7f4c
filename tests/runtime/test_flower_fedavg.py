"""FedAvg with secure aggregation on Flower: the server sees the aggregate only; each client
keeps its own record part; the global models match plaintext FedAvg to fixed point."""

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

from fedsec.learning.fedavg import run_fedavg  # noqa: E402
from fedsec.learning.tasks import make_task  # noqa: E402
from fedsec.runtime.flower_fedavg import client_record_path, load_client_record  # noqa: E402

NAMES = ["bank-a", "bank-b", "bank-c"]
CFG = {"protocol": "fedavg", "task": "bank", "samples": 300, "clients": 3, "rounds": 2,
       "seed": 4, "alpha": 0.5, "step-timeout": 60.0, "wait-nodes-timeout": 2.0}

Federation = Any
LocalGrid = Any


def _nodes(fed: Federation) -> dict[int, dict[str, Any]]:
    return {201 + i: {"client-id": i, "identity-path": str(fed.identity_path(n)),
                      "roster-path": str(fed.roster_path),
                      "state-dir": str(fed.state_dir(n)), "log-path": str(fed.log_path(n)),
                      "role-host": "inline"}
            for i, n in enumerate(NAMES)}


def _run(grid: LocalGrid, rc: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    from flwr.app import Context, RecordDict

    from fedsec.runtime.flower_fedavg import main

    result = tmp_path / "fedavg.json"
    rc = {**rc, "result-path": str(result)}
    grid.run_config.update(rc)
    ctx = Context(run_id=grid.run_id, node_id=0, node_config={}, state=RecordDict(),
                  run_config=rc)
    try:
        main(grid, ctx)
    except Exception:  # noqa: BLE001 - the result JSON says what failed
        pass
    out: dict[str, Any] = json.loads(result.read_text())
    return out


def test_secure_fedavg_matches_plaintext_and_keeps_models_at_the_clients(
        federation: Callable[..., Federation], local_grid: Callable[..., LocalGrid],
        tmp_path: Path) -> None:
    fed = federation(tmp_path / "fed", NAMES)
    sent_to_server: list[bytes] = []
    grid = local_grid(_nodes(fed), {}, run_id=51)
    doc = _run(grid, {**CFG, "roster-path": str(fed.roster_path)}, tmp_path)
    assert doc["status"] == "done", doc
    assert doc["clients_with_record"] == [0, 1, 2]
    task = make_task("bank", n_samples=300, seed=4)
    ref = run_fedavg(task, task.federate(3, alpha=0.5, seed=4), rounds=2, seed=4)
    final = [np.asarray(p, dtype=np.float32) for p in doc["final"]]
    for a, b in zip(final, ref.final_params, strict=True):
        assert np.allclose(a, b, atol=1e-5), np.max(np.abs(a - b))
    from fedsec.runtime.flower_io import get_blobs

    sent_to_server = [b for _s, _n, m in grid.replies for b in get_blobs(m.content)]
    for i, name in enumerate(NAMES):
        part = load_client_record(client_record_path(fed.state_dir(name), 51, i))
        assert part.client == i and len(part.rounds) == 2 and part.n_clients == 3
        for t, (parts, weights) in enumerate(part.rounds):
            assert parts == (0, 1, 2)
            assert list(weights) == list(ref.rounds[t].weights)
            for a, b in zip(part.global_params[t], ref.rounds[t].global_params, strict=True):
                assert np.allclose(a, b, atol=0 if t == 0 else 1e-5)
            refl = ref.rounds[t].local_params[i]
            for a, b in zip(part.local_params[t], refl, strict=True):
                # the first round trains from the same θ^1: bit for bit
                assert np.allclose(a, b, atol=0 if t == 0 else 1e-5)
            # the server never received this local model (nor its weighted copy)
            for p in part.local_params[t]:
                probe = np.ascontiguousarray(p, dtype=np.float32).tobytes()[:32]
                assert not any(probe in b for b in sent_to_server)


def test_secure_fedavg_survives_a_silent_client_with_fresh_masks(
        federation: Callable[..., Federation], local_grid: Callable[..., LocalGrid],
        tmp_path: Path) -> None:
    fed = federation(tmp_path / "fed", [*NAMES, "bank-d"])
    nodes = _nodes(fed)
    nodes[204] = {**nodes[201], "client-id": 3, "identity-path": str(
        fed.identity_path("bank-d")), "state-dir": str(fed.state_dir("bank-d")),
        "log-path": str(fed.log_path("bank-d"))}

    def kill(grid: LocalGrid, step: str, _nodes: list[int]) -> None:
        if step == "fedavg_train" and 204 not in grid.silent:
            grid.kill(204)

    grid = local_grid(nodes, {}, run_id=52, before_step=kill)
    doc = _run(grid, {**CFG, "clients": 4, "rounds": 1, "step-timeout": 2.0,
                      "roster-path": str(fed.roster_path)}, tmp_path)
    assert doc["status"] == "done", doc
    assert doc["rounds"][0]["participants"] == [0, 1, 2]
    assert any(e["step"] == "train 0" for e in doc["left_out"])
    task = make_task("bank", n_samples=300, seed=4)
    fed4 = task.federate(4, alpha=0.5, seed=4)
    from fedsec.learning.fedavg import FedAvgClient, initial_params
    from fedsec.learning.model import aggregate

    theta = initial_params(task.spec, 4)
    ups = [FedAvgClient(i, task.spec, fed4.clients[i], task.training, 4).train(theta, 0)
           for i in range(3)]
    expect = aggregate([u[0] for u in ups], np.array([u[1] for u in ups], dtype=float))
    for a, b in zip(doc["final"], expect, strict=True):
        assert np.allclose(np.asarray(a), b, atol=1e-6)


def test_server_cannot_substitute_a_clients_mask_key(
        federation: Callable[..., Federation], local_grid: Callable[..., LocalGrid],
        tmp_path: Path) -> None:
    """The relay swaps bank-b's signed announcement for bank-c's (it has no roster key to
    sign its own): every client refuses the round, no model is aggregated."""
    from fedsec.runtime.flower_io import get_meta

    fed = federation(tmp_path / "fed", NAMES)

    def swap(step: str, _node: int, blobs: list[bytes]) -> list[bytes]:
        if step == "fedavg_train" and len(blobs) > 3:
            return [blobs[0], blobs[2], blobs[2], *blobs[3:]]
        return blobs

    grid = local_grid(_nodes(fed), {}, run_id=53, edit=swap)
    doc = _run(grid, {**CFG, "roster-path": str(fed.roster_path)}, tmp_path)
    assert doc["status"] == "failed" and "final" not in doc
    refusals = [get_meta(m.content) for s, _n, m in grid.replies if s == "fedavg_train"]
    assert refusals and all(r == {"ok": False, "check": "protocol-error"} for r in refusals)


def test_secure_fedavg_as_separate_processes(federation: Callable[..., Federation],
                                             tmp_path: Path) -> None:
    """SuperLink (TLS), three SuperNodes with node hosts, the ServerApp: the same global
    model as in one process, a record part per client, nothing left running."""
    from fedsec.runtime.local_deploy import LocalNode, run_local

    fed = federation(tmp_path / "fed", NAMES)
    nodes = [LocalNode(n, {**cfg, "role-host": "process"})
             for n, cfg in zip(NAMES, _nodes(fed).values(), strict=True)]
    run = run_local(nodes, {**CFG, "roster-path": str(fed.roster_path)},
                    workdir=tmp_path / "work", timeout=240.0)
    print(f"fedavg on Flower: {run.seconds:.1f} s, timings {run.doc.get('timings')}")
    assert run.leftover == []
    assert run.doc["status"] == "done", run.doc
    task = make_task("bank", n_samples=300, seed=4)
    ref = run_fedavg(task, task.federate(3, alpha=0.5, seed=4), rounds=2, seed=4)
    for a, b in zip(run.doc["final"], ref.final_params, strict=True):
        assert np.allclose(np.asarray(a, dtype=np.float32), b, atol=1e-5)
    for i, name in enumerate(NAMES):
        (path,) = Path(fed.state_dir(name)).glob(f"fedavg-run-*-client-{i}.npz")
        assert load_client_record(path).client == i
