"""RecordingFedAvg on Flower 1.41: Flower training yields the in-process FSV exactly.

The default test drives the real strategy and ClientApp over a loopback grid (seconds).
The simulation test (marked ``slow``: 50-140 s on a busy 2-core machine, mostly Ray
start-up and a fresh ClientApp per message; run with ``-m slow``) starts a
``--simulation`` SuperLink (Ray) with the harness in ``conftest.py``, submits
``examples/shapley-flower`` with ``flwr run`` and reads the JSON the ServerApp writes; the
in-process reference trains the same task with :func:`fedsec.learning.fedavg.run_fedavg`
on the same seeds.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    pytest.importorskip("flwr", reason="Flower is optional: fedsec[flower]")
pytest.importorskip("torch", reason="training needs fedsec[learning] (torch)")

from fedsec.errors import ProtocolError  # noqa: E402
from fedsec.learning.record import TrainingRecord  # noqa: E402
from fedsec.learning.tasks import make_task, task_spec  # noqa: E402
from fedsec.runtime import flower_shapley  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
APP_DIR = REPO / "examples" / "shapley-flower"
RUN_TIMEOUT = 120.0
Deployment = Any  # tests/runtime/conftest.py:Deployment


def test_arrays_roundtrip_and_shape_check() -> None:
    spec = task_spec("digits")
    params = spec.init_params(np.random.default_rng(0))
    rec = flower_shapley.params_to_arrays(params)
    back = flower_shapley.arrays_to_params(rec, spec)
    for a, b in zip(params, back, strict=True):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype
    with pytest.raises(ProtocolError):
        flower_shapley.arrays_to_params(flower_shapley.params_to_arrays(params[:-1]), spec)


class LoopbackGrid:
    """Test scaffold: a Flower ``Grid`` that hands each message straight to the ClientApp
    of its destination node, in this process (no SuperLink, no Ray). Only what
    ``Strategy.start`` uses is implemented."""

    def __init__(self, client_app: Any, run_config: dict[str, Any], n_nodes: int) -> None:
        from flwr.app import Context, RecordDict

        self.app = client_app
        self.contexts = {100 + i: Context(run_id=1, node_id=100 + i,
                                          node_config={"partition-id": i,
                                                       "num-partitions": n_nodes},
                                          state=RecordDict(), run_config=run_config)
                         for i in range(n_nodes)}

    def get_node_ids(self) -> list[int]:
        return list(self.contexts)

    def send_and_receive(self, messages: Any, *, timeout: float | None = None) -> list[Any]:
        from flwr.supercore.task_identity import TaskIdentity

        replies = []
        for msg in list(messages):
            node = msg.metadata.dst_node_id
            TaskIdentity.node_id = node
            reply = self.app(msg, self.contexts[node])
            replies.append(reply)
        TaskIdentity.node_id = 1
        return replies


@pytest.fixture
def task_identity() -> Any:
    """Message objects read the run's identity; set one for the loopback grid."""
    from flwr.supercore.task_identity import TaskIdentity

    saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
    yield
    TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved


def test_recording_strategy_and_client_app_in_process(task_identity: Any, tmp_path: Path
                                                      ) -> None:
    """The real RecordingFedAvg.start and ClientApp, over a loopback grid: the same FSV
    and record as the in-process run, bit for bit."""
    cfg = {"task": "bank", "samples": 400, "clients": 3, "rounds": 3, "seed": 5,
           "record-path": str(tmp_path / "record.bin")}
    grid = LoopbackGrid(flower_shapley.build_client_app(), cfg, cfg["clients"])
    doc = flower_shapley.run_server(grid, cfg)  # type: ignore[arg-type]
    ref_record, ref_fsv = _inprocess(cfg)
    np.testing.assert_array_equal(doc["fsv"], ref_fsv)
    assert TrainingRecord.from_bytes((tmp_path / "record.bin").read_bytes()).to_bytes() != b""
    _same_rounds(TrainingRecord.from_bytes((tmp_path / "record.bin").read_bytes()), ref_record)


def test_duplicate_client_ids_are_refused(task_identity: Any) -> None:
    """A reply claiming another client's id never enters the record."""
    cfg = {"task": "bank", "samples": 200, "clients": 2, "rounds": 1, "seed": 0}
    honest = flower_shapley.build_client_app()

    def liar(msg: Any, context: Any) -> Any:
        reply = honest(msg, context)
        if msg.metadata.message_type == "train":
            from flwr.app import ConfigRecord

            reply.content[flower_shapley.FEDSEC_KEY] = ConfigRecord(
                {flower_shapley.CLIENT_ID: 0})
        return reply

    grid = LoopbackGrid(liar, cfg, cfg["clients"])
    with pytest.raises(ProtocolError, match="client id 0"):
        flower_shapley.run_server(grid, cfg)  # type: ignore[arg-type]


def _same_rounds(a_rec: TrainingRecord, b_rec: TrainingRecord) -> None:
    assert a_rec.n_rounds == b_rec.n_rounds
    for a, b in zip(a_rec.rounds, b_rec.rounds, strict=True):
        assert a.participants == b.participants
        np.testing.assert_array_equal(a.weights, b.weights)
        for x, y in zip(a.local_params, b.local_params, strict=True):
            for p, q in zip(x, y, strict=True):
                np.testing.assert_array_equal(p, q)


def _inprocess(cfg: dict[str, Any]) -> tuple[TrainingRecord, np.ndarray]:
    from fedsec.learning.fedavg import run_fedavg
    from fedsec.shapley import federated_shapley

    task = make_task(cfg["task"], n_samples=cfg["samples"], seed=cfg["seed"])
    fed = task.federate(cfg["clients"], seed=cfg["seed"])
    rec = run_fedavg(task, fed, rounds=cfg["rounds"], seed=cfg["seed"])
    return rec, federated_shapley(rec, fed.x_test, fed.y_test).fsv


@pytest.mark.slow
def test_simulation_fsv_equals_inprocess(flower: Callable[[Path], Deployment],
                                         tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pytest.importorskip("ray", reason="simulation engine needs fedsec[flower-sim] (Ray)")
    cfg = {"task": "bank", "samples": 400, "clients": 3, "rounds": 3, "seed": 5}
    result, record = tmp_path / "result.json", tmp_path / "record.bin"
    dep = flower(tmp_path / "sim")
    dep.start_superlink_simulation()
    t0 = time.monotonic()
    dep.flwr_run(APP_DIR, "fedsec-sim",
                 {**cfg, "result-path": str(result), "record-path": str(record)},
                 extra=("--federation-config", f"num-supernodes={cfg['clients']}"))
    doc = dep.wait_result(result, {"done"}, RUN_TIMEOUT)
    print(f"simulation run {time.monotonic() - t0:.1f}s")
    ref_record, ref_fsv = _inprocess(cfg)
    np.testing.assert_array_equal(doc["fsv"], ref_fsv)  # bit for bit
    _same_rounds(TrainingRecord.from_bytes(record.read_bytes()), ref_record)
