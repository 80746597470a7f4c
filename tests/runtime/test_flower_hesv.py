"""HESV on Flower: the ServerApp as server, one SuperNode per client with its own test set
and its own part of the training record.

Prepare: a federation of six clients (identities, roster), a small logistic record of two
rounds (two participants each: the strict decryption rule can place every coalition), each
client's record part and test set. Execute: the one Flower app (``protocol = "hesv"``) on
``LocalGrid`` (the real ClientApp handlers in this process, ``role-host = "inline"``).
Assert: the federated Shapley values equal the in-process ``hesv_shapley`` on the same
inputs; the clients' policy; a client that falls silent; the record part's format.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    pytest.importorskip(
        "flwr", reason="Flower is optional: pip install 'fedsec[flower]' (flwr==1.41.0)"
    )

from fedsec.learning.model import LayerSpec, ModelSpec  # noqa: E402
from fedsec.learning.record import RoundRecord, TrainingRecord  # noqa: E402
from fedsec.shapley.hesv import hesv_shapley  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
NAMES = [f"client-{i}" for i in range(6)]
PRESET = "CKKS_128_N4096_DEPTH2_S24"
SAMPLES = 6

Federation = Any
LocalGrid = Any


def _min_score_gap(rec: TrainingRecord, sets: list[Any]) -> float:
    """The smallest gap between a sample's two best plaintext scores over every coalition:
    CKKS errors (~1e-4) cannot change a prediction when it is larger."""
    from fedsec.learning.model import forward

    x = np.concatenate([s[0] for s in sets])
    gaps = []
    for r in rec.rounds:
        for mask in range(1 << len(r.participants)):
            sc = np.sort(forward(rec.spec, r.model_of_mask(mask), x), axis=1)
            gaps.append(float((sc[:, -1] - sc[:, -2]).min()))
    return min(gaps)


def _record_and_sets() -> tuple[TrainingRecord, list[tuple[np.ndarray, np.ndarray]]]:
    rng = np.random.default_rng(0)
    spec = ModelSpec("tiny", (LayerSpec.dense(3, 2),))
    rounds = []
    params = [spec.init_params(rng)]
    for parts in ((0, 1), (2, 3)):
        params = [spec.init_params(rng) for _ in range(3)]
        rounds.append(RoundRecord(params[0], parts, tuple(params[1:]), np.array([1.0, 2.0])))
    rec = TrainingRecord(spec, len(NAMES), tuple(rounds), params[0])
    sets = [(rng.normal(size=(SAMPLES, 3)), rng.integers(0, 2, SAMPLES)) for _ in NAMES]
    return rec, sets


@pytest.fixture(autouse=True)
def _fresh_inline_states() -> Any:
    from fedsec.runtime.node_host import inline_state

    inline_state().clear()
    yield
    inline_state().clear()


def _setup(federation: Callable[..., Federation], tmp_path: Path, **node_extra: Any
           ) -> tuple[Federation, dict[int, dict[str, Any]], TrainingRecord, list[Any]]:
    from fedsec.runtime.flower_hesv import write_record_part

    fed = federation(tmp_path / "fed", NAMES)
    rec, sets = _record_and_sets()
    nodes = {}
    for i, name in enumerate(NAMES):  # what each client holds on its own machine
        part = fed.root / f"{name}.record.npz"
        part.write_bytes(write_record_part(rec, i))
        test = fed.root / f"{name}.test.npz"
        np.savez(test, x=sets[i][0], y=sets[i][1])
        nodes[201 + i] = fed.node_config(name, **{"hesv-record-path": str(part),
                                                  "hesv-test-path": str(test),
                                                  "role-host": "inline", **node_extra})
    return fed, nodes, rec, sets


def _run(grid: LocalGrid, fed: Federation, tmp_path: Path, **run_config: Any
         ) -> dict[str, Any]:
    from flwr.app import Context, RecordDict

    from fedsec.runtime.flower_apps import server_main

    result = tmp_path / f"result-{grid.run_id}.json"
    rc = {"protocol": "hesv", "result-path": str(result), "roster-path": str(fed.roster_path),
          "hesv-preset": PRESET, "hesv-batch-hint": SAMPLES, "step-timeout": 0.5,
          "wait-nodes-timeout": 2.0, **run_config}
    grid.run_config.update(rc)
    ctx = Context(run_id=grid.run_id, node_id=0, node_config={}, state=RecordDict(),
                  run_config=rc)
    try:
        server_main(grid, ctx)
    except Exception:  # noqa: BLE001 - the result JSON says what failed
        pass
    doc: dict[str, Any] = json.loads(result.read_text())
    return doc


def test_flower_hesv_equals_in_process(federation: Callable[..., Federation],
                                       local_grid: Callable[..., LocalGrid],
                                       tmp_path: Path) -> None:
    fed, nodes, rec, sets = _setup(federation, tmp_path, presets=PRESET)
    grid = local_grid(nodes, {})
    t0 = time.perf_counter()
    doc = _run(grid, fed, tmp_path)
    flower_s = time.perf_counter() - t0
    assert doc["status"] == "done", doc
    t1 = time.perf_counter()
    ref = hesv_shapley(rec, sets, preset=PRESET)
    inproc_s = time.perf_counter() - t1
    assert _min_score_gap(rec, sets) > 1e-3  # no near tie: both runs count exactly
    assert np.array_equal(doc["fsv"], ref.fsv)  # exact counts: the same values
    for got, want in zip(doc["utilities"], ref.utilities, strict=True):
        assert np.array_equal(got, want)
    # 6 + rounds x (layers + 1): hello, offer, deliver, confirmed, first models, 2 waves a
    # round (the next round's models with the first), finish
    assert doc["exchanges"] == 6 + 2 * 2
    assert sorted(doc["parties"]["included"]) == NAMES
    print(f"HESV on LocalGrid {flower_s:.1f}s, in-process {inproc_s:.1f}s, "
          f"{doc['exchanges']} exchanges")
    for name in NAMES:
        assert "federated Shapley values" in fed.log_path(name).read_text()
    # the server never holds a plaintext local model (nor a test sample)
    from fedsec.runtime.flower_io import get_blobs, get_meta

    secrets = [np.asarray(p, dtype=np.float64).tobytes() for r in rec.rounds
               for m in r.local_params for p in m]
    secrets += [x.tobytes() for x, _y in sets]
    for _step, _node, msg in grid.replies:
        sent = b"".join(get_blobs(msg.content)) + json.dumps(get_meta(msg.content)).encode()
        assert not any(s in sent for s in secrets)
    from fedsec.runtime.node_host import inline_state

    assert not [k for k in inline_state() if k[0] == grid.run_id]  # every run ended


@pytest.mark.parametrize("run_config,node_config,check", [
    ({"hesv-schedule": "paper"}, {"presets": PRESET}, "policy:schedule"),
    ({}, {"presets": "CKKS_128_N8192_DEPTH1_S39"}, "policy:preset"),
])
def test_client_policy_refuses(run_config: dict[str, Any], node_config: dict[str, Any],
                               check: str, federation: Callable[..., Federation],
                               local_grid: Callable[..., LocalGrid], tmp_path: Path) -> None:
    from fedsec.runtime.flower_io import get_meta

    fed, nodes, _rec, _sets = _setup(federation, tmp_path, **node_config)
    grid = local_grid(nodes, {})
    doc = _run(grid, fed, tmp_path, **run_config)
    assert doc["status"] == "failed" and "fsv" not in doc
    checks = {get_meta(m.content).get("check") for s, _n, m in grid.replies
              if s == "hesv_hello"}
    assert checks == {check}


def test_invalid_client_file_stops_the_run_attributed(
        federation: Callable[..., Federation], local_grid: Callable[..., LocalGrid],
        tmp_path: Path) -> None:
    fed, nodes, _rec, _sets = _setup(federation, tmp_path, presets=PRESET)
    Path(nodes[203]["hesv-test-path"]).write_bytes(b"not an npz")
    grid = local_grid(nodes, {})
    doc = _run(grid, fed, tmp_path)
    assert doc["status"] == "failed" and "input-invalid" in doc["error"]
    assert [(e["node"], e.get("check")) for e in doc["parties"]["left_out"]] == [
        (203, "input-invalid")]
    assert "HESV files" in fed.log_path("client-2").read_text()


def test_silent_client_stops_the_run_within_timeout(federation: Callable[..., Federation],
                                                    local_grid: Callable[..., LocalGrid],
                                                    tmp_path: Path) -> None:
    fed, nodes, _rec, _sets = _setup(federation, tmp_path, presets=PRESET)

    def crash(grid: LocalGrid, step: str, _nodes: list[int]) -> None:
        if step == "hesv_eval":
            grid.kill(203)

    grid = local_grid(nodes, {}, before_step=crash)
    t0 = time.monotonic()
    doc = _run(grid, fed, tmp_path)
    assert time.monotonic() - t0 < 30
    assert doc["status"] == "failed" and "fsv" not in doc
    assert "HESV needs every client" in doc["error"]


def test_record_part_holds_only_the_clients_own_local_models() -> None:
    from fedsec.runtime.flower_hesv import load_record_part, write_record_part

    rec, _sets = _record_and_sets()
    part = load_record_part(write_record_part(rec, 2))
    assert part.client == 2 and set(part.local_params) == {1}
    assert np.array_equal(part.local_params[1][0], rec.rounds[1].local_params[0][0])
    assert load_record_part(write_record_part(rec, 5)).local_params == {}
    with pytest.raises(ValueError):
        load_record_part(b"not an archive")


# ----------------------------------------------------------------- the relay
def test_relay_cannot_open_forge_or_replay(federation: Callable[..., Federation],
                                           local_grid: Callable[..., LocalGrid],
                                           tmp_path: Path) -> None:
    """The relay (SuperLink, ServerApp) carries the sealed secret key and every request: a
    changed box is refused, a request answered twice is refused."""
    fed, nodes, _rec, _sets = _setup(federation, tmp_path, presets=PRESET)
    seen: list[bytes] = []

    def tamper_box(step: str, node: int, blobs: list[bytes]) -> list[bytes]:
        if step == "hesv_deliver" and node == 202:
            box = bytearray(blobs[0])
            box[len(box) // 2] ^= 1
            return [bytes(box)]
        return blobs

    grid = local_grid(nodes, {}, edit=tamper_box)
    doc = _run(grid, fed, tmp_path)
    assert doc["status"] == "failed" and "client-1" in doc["error"]

    def replay(step: str, node: int, blobs: list[bytes]) -> list[bytes]:
        if step == "hesv_eval" and blobs:
            if not seen:
                seen.append(blobs[0])
            return [*blobs, blobs[0]]  # the same request twice in one wave
        return blobs

    grid = local_grid(nodes, {}, edit=replay, run_id=12)
    doc = _run(grid, fed, tmp_path)
    assert doc["status"] == "failed" and "fsv" not in doc
    assert "hesv_eval" in doc["error"]


# -------------------------------------------------------------- deployment
# 10 exchanges x 6 SuperNodes: ~80 s on an idle 2-core machine (~140 s loaded); the one
# HESV deployment test, so it runs in make test
def test_hesv_deployment_tls(flower: Callable[[Path], Any],
                             federation: Callable[..., Federation],
                             tls: tuple[Path, Path, Path], tmp_path: Path) -> None:
    fed, nodes, rec, sets = _setup(federation, tmp_path, presets=PRESET)
    dep = flower(tmp_path / "deploy")
    dep.env["FLWR_SUPEREXEC_TASK_POLL_INTERVAL"] = "0.05"
    dep.start_superlink_tls(*tls)
    for i, cfg in enumerate(nodes.values()):
        dep.start_supernode(f"supernode-{i}", {k: v for k, v in cfg.items()
                                               if k != "role-host"})
    dep.wait_supernodes([f"supernode-{i}" for i in range(len(nodes))])
    result = tmp_path / "hesv.json"
    t0 = time.monotonic()
    dep.flwr_run(REPO / "examples" / "fedsec-flower", "fedsec-tls", {
        "protocol": "hesv", "roster-path": str(fed.roster_path), "result-path": str(result),
        "hesv-preset": PRESET, "hesv-batch-hint": SAMPLES, "step-timeout": 60.0,
        "wait-nodes-timeout": 30.0})
    doc = dep.wait_result(result, {"done", "failed"}, 240.0)
    wall = time.monotonic() - t0
    assert doc["status"] == "done", doc
    t1 = time.perf_counter()
    ref = hesv_shapley(rec, sets, preset=PRESET)
    inproc = time.perf_counter() - t1
    assert np.array_equal(doc["fsv"], ref.fsv)
    print(f"HESV deployment: {doc['exchanges']} exchanges, run {wall:.1f}s (ServerApp "
          f"{doc['timings']['total_s']}s), in-process {inproc:.2f}s; steps "
          f"{ {k: v for k, v in doc['timings'].items() if k.endswith('_s')} }")
