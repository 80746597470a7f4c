"""The stand-in bytes protocol on Flower 1.41: records, simulation and deployment.

The deployment tests start a real SuperLink and three SuperNodes on 127.0.0.1 with
TLS (a throw-away CA, harness in ``conftest.py``), submit the app in
``src/fedsec/testing/flower_standin`` (a test scaffold, moved out of ``examples/``) with
``flwr run``, and read the JSON the ServerApp
writes to the ``result-path`` run-config value. Every wait is bounded and every
process started (and each one they spawn: SuperExec, ServerApp, ClientApp) is
killed at teardown.

The process-based tests are marked ``slow`` (run them with ``-m slow``): the real
protocol tests in ``test_flower_fhauc.py`` cover TLS deployment, node failure and
simulation in the default suite; the record tests stay.
"""

from __future__ import annotations

import json
import os
import signal
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():
    # flwr -> typer -> click 8.5 warns on import (DeprecationWarning); see flower_io.
    warnings.simplefilter("ignore", DeprecationWarning)
    pytest.importorskip(
        "flwr", reason="Flower is optional: pip install 'flwr==1.41.0' (fedsec[flower])"
    )

from fedsec.runtime import flower_io  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
APP_DIR = REPO / "src" / "fedsec" / "testing" / "flower_standin"

SECRETS = [7, -1234567, 2**40 + 3]
PAD_BYTES = 200_000  # each hello carries ~200 KB, like a CKKS ciphertext

RUN_TIMEOUT = 45.0  # one `flwr run` to a final result


# ----------------------------------------------------------------- records (no I/O)
def test_blob_records_roundtrip_in_order() -> None:
    blobs = [b"", b"\x00" * 3, os.urandom(200_000), os.urandom(6 * 1024 * 1024)]
    content = flower_io.make_content(blobs, meta={"step": 2, "tag": "x", "raw": b"\x01"})
    assert flower_io.get_blobs(content) == blobs
    assert flower_io.get_meta(content) == {"step": 2, "tag": "x", "raw": b"\x01"}
    # the >5 MiB blob is split into Flower ArrayChunks, the rest are single objects
    arr = content.array_records[flower_io.BLOBS_KEY]["3"]
    assert len(arr.slice_array()) == 2


def test_blob_records_reject_malformed() -> None:
    from flwr.app import Array, ArrayRecord, RecordDict

    with pytest.raises(flower_io.ProtocolError):
        flower_io.get_blobs(RecordDict())
    rd = RecordDict(
        {
            flower_io.BLOBS_KEY: ArrayRecord(
                {"1": Array(dtype="uint8", shape=(1,), stype=flower_io.RAW_STYPE, data=b"x")}
            )
        }
    )
    with pytest.raises(flower_io.ProtocolError):
        flower_io.get_blobs(rd)
    with pytest.raises(flower_io.ProtocolError):
        flower_io.get_blob(flower_io.make_content([b"a", b"b"]))
    with pytest.raises(TypeError):
        flower_io.make_content(["text"])  # type: ignore[list-item]


# ------------------------------------------------------------------- process harness
# The Deployment harness, the ``tls`` and ``flower`` fixtures live in conftest.py.
Deployment = Any  # tests/runtime/conftest.py:Deployment (not importable by name)


def _write_secrets(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, s in enumerate(SECRETS):
        p = directory / f"node_{i}.csv"
        p.write_text(f"value\n{s}\n", encoding="utf-8")
        paths.append(p)
    return paths


@pytest.fixture
def deployment(
    flower: Callable[[Path], Deployment], tmp_path: Path, tls: tuple[Path, Path, Path]
) -> Deployment:
    """SuperLink (TLS) + 3 SuperNodes, each reading its secret from its own CSV."""
    dep = flower(tmp_path)
    t0 = time.monotonic()
    dep.start_superlink_tls(*tls)
    for i, path in enumerate(_write_secrets(tmp_path / "data")):
        dep.start_supernode(f"supernode-{i}", {"data-path": str(path)})
    dep.wait_supernodes([f"supernode-{i}" for i in range(3)])
    dep.startup_s = time.monotonic() - t0
    return dep


# ----------------------------------------------------------------------- deployment
@pytest.mark.slow
def test_standin_deployment_tls(deployment: Deployment, tmp_path: Path) -> None:
    result = tmp_path / "result.json"
    t0 = time.monotonic()
    deployment.flwr_run(APP_DIR, "fedsec-tls", {"result-path": str(result), "pad-bytes": PAD_BYTES})
    doc = deployment.wait_result(result, {"done", "failed"}, RUN_TIMEOUT)
    elapsed = time.monotonic() - t0
    assert doc["status"] == "done", doc
    assert doc["sum"] == sum(SECRETS)
    assert sorted(doc["nodes"]) == sorted(deployment.node_ids.values())
    assert doc["hello_bytes"] == [32 + PAD_BYTES] * 3
    print(
        f"startup {deployment.startup_s:.1f}s, run {elapsed:.1f}s, "
        f"step1 {doc['step1']['elapsed']}s, step2 {doc['step2']['elapsed']}s"
    )


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["crash", "shutdown"])
def test_standin_deployment_node_failure(
    deployment: Deployment, tmp_path: Path, sig: signal.Signals
) -> None:
    """A SuperNode dies between step 1 and step 2; the ServerApp must fail closed
    within the step timeout instead of waiting for a reply forever."""
    result = tmp_path / "result.json"
    step_timeout = 8.0
    deployment.flwr_run(
        APP_DIR,
        "fedsec-tls",
        {
            "result-path": str(result),
            "pad-bytes": 1000,
            "step-timeout": step_timeout,
            "pause-after-hello": 2.0,
        },
    )
    deployment.wait_result(result, {"hello-done"}, RUN_TIMEOUT)
    victim = deployment.node_ids["supernode-2"]
    deployment.kill("supernode-2", sig)
    t_kill = time.monotonic()
    doc = deployment.wait_result(result, {"done", "failed"}, step_timeout + 20)
    detected = time.monotonic() - t_kill
    print(f"{sig.name}: failure reported {detected:.1f}s after the kill: {json.dumps(doc)}")
    assert doc["status"] == "failed", doc
    assert "sum" not in doc
    step2 = doc["step2"]
    if sig == signal.SIGKILL:
        # The SuperLink still believes the node is online (2 missed 30 s heartbeats
        # are needed), accepts the instruction, and nobody replies: timeout.
        assert step2["missing"] == [victim], doc
        assert step2["undelivered"] == [] and step2["errors"] == {}
        assert step_timeout - 0.5 <= step2["elapsed"] <= step_timeout + 5
    else:
        # A clean SuperNode shutdown deactivates the node: the SuperLink refuses the
        # instruction at push time ("Invalid destination node ID"), no waiting.
        assert step2["undelivered"] == [victim], doc
        assert step2["missing"] == [] and step2["errors"] == {}
        assert step2["elapsed"] < step_timeout
    assert detected < step_timeout + 20


# ----------------------------------------------------------------------- simulation
@pytest.mark.slow
def test_standin_simulation(flower: Callable[[Path], Deployment], tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pytest.importorskip("ray", reason="simulation engine needs flwr[simulation] (Ray)")
    data = tmp_path / "data"
    _write_secrets(data)
    result = tmp_path / "result.json"
    dep = flower(tmp_path / "sim")
    dep.start_superlink_simulation()
    t0 = time.monotonic()
    dep.flwr_run(
        APP_DIR,
        "fedsec-sim",
        {"result-path": str(result), "sim-data-dir": str(data), "pad-bytes": PAD_BYTES},
        extra=("--federation-config", "num-supernodes=3"),
    )
    doc = dep.wait_result(result, {"done", "failed"}, 60.0)
    print(f"simulation run {time.monotonic() - t0:.1f}s: {doc}")
    assert doc["status"] == "done", doc
    assert doc["sum"] == sum(SECRETS)
