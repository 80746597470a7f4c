"""Secure FHAUC across processes on Flower 1.41: deployment engine over TLS, simulation.

Prepare: a throw-away CA (``tls`` fixture), one CSV per party, a SuperLink and three
SuperNodes on 127.0.0.1 (each with its own ``data-path`` and ``state-dir`` node config).
Execute: ``flwr run examples/fedsec-flower`` with a run config, optionally killing a
SuperNode mid-run. Assert: the JSON the ServerApp writes (``result-path``) against the
plaintext trapezoid AUC (``fedsec.metrics``) and the in-process runner ``secure_auc``.

Every wait is bounded (``RUN_TIMEOUT``) and every process is killed at teardown by the
``flower`` fixture (tests/runtime/conftest.py).
"""

from __future__ import annotations

import signal
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

with warnings.catch_warnings():
    # flwr -> typer -> click 8.5 warns on import (DeprecationWarning); see flower_io.
    warnings.simplefilter("ignore", DeprecationWarning)
    pytest.importorskip(
        "flwr", reason="Flower is optional: pip install 'fedsec[flower]' (flwr==1.41.0)"
    )

from fedsec.auc.fhauc import secure_auc  # noqa: E402
from fedsec.data.io import load_party_csv, write_party_csv  # noqa: E402
from fedsec.errors import ProtocolError  # noqa: E402
from fedsec.metrics import trapezoid_auc  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
APP_DIR = REPO / "examples" / "fedsec-flower"
N_POINTS = 100
RUN_TIMEOUT = 75.0  # one `flwr run` to a final result (6 message rounds ~ 30 s)
STEP_TIMEOUT = 15.0  # per message round; a crashed SuperNode is detected after this
PAUSE = 2.0  # seconds the ServerApp waits at the kill point (test hook)

Deployment = Any  # tests/runtime/conftest.py:Deployment (not importable by name)


def _write_parties(directory: Path, seed: int = 7) -> list[Path]:
    """Three parties with different sizes and score distributions (simulated data)."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, n in enumerate((60, 45, 80)):
        y = rng.integers(0, 2, n)
        s = np.clip(0.35 * y + rng.normal(0.4, 0.25, n), 0.0, 1.0)
        path = directory / f"hospital-{i}.csv"
        write_party_csv(path, y, s)
        paths.append(path)
    return paths


def _plain_auc(paths: list[Path]) -> float:
    data = [load_party_csv(p) for p in paths]
    y = np.concatenate([d.y_true for d in data])
    s = np.concatenate([d.y_score for d in data])
    return trapezoid_auc(y, s, N_POINTS)


def _inprocess_auc(paths: list[Path], security: str) -> float:
    data = [load_party_csv(p) for p in paths]
    res = secure_auc([(d.y_true, d.y_score) for d in data], decision_points=N_POINTS,
                     security=security)
    return float(res.auc)


def _start(flower: Callable[[Path], Deployment], tmp_path: Path,
           tls: tuple[Path, Path, Path]) -> tuple[Deployment, list[Path]]:
    """SuperLink (TLS) + one SuperNode per party CSV, each with its own state dir."""
    t0 = time.monotonic()
    dep = flower(tmp_path / "deploy")
    dep.start_superlink_tls(*tls)
    paths = _write_parties(tmp_path / "data")
    for i, path in enumerate(paths):
        dep.start_supernode(f"supernode-{i}", {"data-path": str(path),
                                               "state-dir": str(tmp_path / f"state-{i}")})
    dep.wait_supernodes([f"supernode-{i}" for i in range(len(paths))])
    dep.startup_s = time.monotonic() - t0
    return dep, paths


def _run_config(result: Path, **extra: Any) -> dict[str, Any]:
    return {"result-path": str(result), "decision-points": N_POINTS,
            "step-timeout": STEP_TIMEOUT, "wait-nodes-timeout": 30.0, **extra}


def _no_secrets_left(tmp_path: Path, n: int) -> None:
    for i in range(n):
        state = tmp_path / f"state-{i}"
        if state.exists():
            assert (state.stat().st_mode & 0o077) == 0, "state dir must be private (0700)"
            assert list(state.glob("*.fedsec")) == [], "node-local secret state not deleted"


# ------------------------------------------------------------- pieces (no processes)
def _context(node_config: dict[str, Any], run_config: dict[str, Any] | None = None) -> Any:
    from flwr.app import Context, RecordDict

    return Context(run_id=5, node_id=9, node_config=node_config, state=RecordDict(),
                   run_config=run_config or {})


def test_node_store_is_private_atomic_and_deleted(tmp_path: Path) -> None:
    from fedsec.runtime.flower_client import NodeStore

    loose = tmp_path / "state"
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)
    store = NodeStore.for_context(_context({"state-dir": str(loose)}))
    assert store.path == loose / "run-5-node-9.fedsec"
    with pytest.raises(ProtocolError, match="no fedsec state"):
        store.load()
    store.save("hospital-a", {"keys": b"secret", "nonce": b"n" * 16})
    assert (loose.stat().st_mode & 0o777) == 0o700
    assert (store.path.stat().st_mode & 0o777) == 0o600
    assert store.load() == ("hospital-a", {"keys": b"secret", "nonce": b"n" * 16})
    assert [p.name for p in loose.iterdir()] == [store.path.name]  # no temp files left
    store.delete()
    assert not store.path.exists()


def test_party_policy_checks_the_announced_configuration() -> None:
    from fedsec.auc.fhauc_malicious import MaliciousConfig
    from fedsec.runtime.flower_client import protocol_config
    from fedsec.runtime.flower_server import RunOptions

    mal = RunOptions.from_run_config({"security": "malicious", "decision-points": 50})
    cfg = protocol_config(mal.protocol_meta(), _context({}))
    assert isinstance(cfg, MaliciousConfig)
    assert cfg.digest() == mal.protocol_config().digest()  # the same bytes-level config
    sh = RunOptions.from_run_config({"security": "semi-honest", "masking": "pair"})
    assert protocol_config(sh.protocol_meta(), _context({})).digest() == \
        sh.protocol_config().digest()
    with pytest.raises(ProtocolError, match="require-malicious"):
        protocol_config(sh.protocol_meta(), _context({"require-malicious": True}))
    with pytest.raises(ProtocolError, match="min-bound-bits"):
        protocol_config(mal.protocol_meta(), _context({"min-bound-bits": 60.0}))


@pytest.mark.parametrize("bad, match", [
    ({"security": "honest"}, "security"),
    ({"min-parties": 4}, "min-parties"),
    ({"step-timeout": 0.0}, "step-timeout"),
    ({"max-restarts": -1}, "max-restarts"),
])
def test_run_options_reject_bad_values(bad: dict[str, Any], match: str) -> None:
    from fedsec.runtime.flower_server import RunOptions

    with pytest.raises(ValueError, match=match):
        RunOptions.from_run_config({"num-nodes": 3, **bad})


# ------------------------------------------------------------------------ deployment
def test_malicious_fhauc_deployment_tls(flower: Callable[[Path], Deployment],
                                        tls: tuple[Path, Path, Path],
                                        tmp_path: Path) -> None:
    dep, paths = _start(flower, tmp_path, tls)
    result = tmp_path / "result.json"
    t0 = time.monotonic()
    dep.flwr_run(APP_DIR, "fedsec-tls", _run_config(result, security="malicious"))
    doc = dep.wait_result(result, {"done", "failed"}, RUN_TIMEOUT)
    print(f"startup {dep.startup_s:.1f}s, run {time.monotonic() - t0:.1f}s, "
          f"timings {doc['timings']}")
    assert doc["status"] == "done", doc
    assert doc["security"] == "malicious" and doc["verified"] is True
    names = [p.stem for p in paths]
    assert sorted(doc["parties"]["included"]) == names  # in node-id order
    assert doc["parties"]["left_out"] == [] and doc["parties"]["unreported"] == []
    assert doc["restarts"] == []
    assert set(doc["party_results"]) == set(names)
    assert all(r["ok"] and r["verified"] for r in doc["party_results"].values())
    assert doc["auc"] == pytest.approx(_plain_auc(paths), abs=1e-6)
    assert doc["auc"] == pytest.approx(_inprocess_auc(paths, "malicious"), abs=1e-6)
    # the aggregator received public key material (~11 MB of Galois keys), no secret
    assert doc["bytes"]["public_key_material"] > 1_000_000
    _no_secrets_left(tmp_path, len(paths))


@pytest.mark.parametrize("security", ["semi-honest", "malicious"])
def test_party_dropped_mid_run(flower: Callable[[Path], Deployment],
                               tls: tuple[Path, Path, Path], tmp_path: Path,
                               security: str) -> None:
    """A SuperNode drops out mid-run: semi-honest, it shuts down (SIGTERM) after key
    set-up, so the SuperLink refuses the next message; malicious, it crashes (SIGKILL)
    after the commit, so its submission times out (the SuperLink still lists it).

    Semi-honest: the other two submit, the result covers them and names the one left
    out. Malicious: the started submission set is incomplete, so no result is computed
    from it; the commit round restarts with fresh nonces over the two survivors. Either
    way the accepted AUC is the two survivors' AUC, never a number mixing in a party
    whose masks did not cancel.
    """
    dep, paths = _start(flower, tmp_path, tls)
    result = tmp_path / "result.json"
    kill_point = "deliver" if security == "semi-honest" else "commit"
    dep.flwr_run(APP_DIR, "fedsec-tls", _run_config(
        result, security=security, **{"min-parties": 2, "pause-after": kill_point,
                                      "pause-seconds": PAUSE}))
    dep.wait_result(result, {f"paused-after-{kill_point}", "failed"}, RUN_TIMEOUT)
    dep.kill("supernode-2", signal.SIGTERM if security == "semi-honest" else signal.SIGKILL)
    t_kill = time.monotonic()
    doc = dep.wait_result(result, {"done", "failed"}, RUN_TIMEOUT)
    print(f"{security}: result {time.monotonic() - t_kill:.1f}s after the kill; "
          f"timings {doc['timings']}; restarts {doc['restarts']}")
    assert doc["status"] == "done", doc
    victim = paths[2].stem
    survivors = [p.stem for p in paths[:2]]
    assert sorted(doc["parties"]["included"]) == survivors
    left = doc["parties"]["left_out"]
    assert [e["party"] for e in left] == [victim], left
    assert left[0]["step"] in ("submit", "commit")
    assert ("offline" if security == "semi-honest" else "no reply") in left[0]["reason"]
    assert set(doc["party_results"]) == set(survivors)
    expected = _plain_auc(paths[:2])
    assert expected != pytest.approx(_plain_auc(paths), abs=1e-3)  # the drop matters
    if security == "semi-honest":
        assert doc["verified"] is False and doc["restarts"] == []
        assert doc["auc"] == pytest.approx(expected, abs=1e-9)
    else:
        assert doc["verified"] is True
        assert len(doc["restarts"]) == 1 and doc["restarts"][0]["step"] == "submit"
        assert "commit#1" in doc["bytes"] and "submit#1" in doc["bytes"]
        assert doc["auc"] == pytest.approx(expected, abs=1e-6)


@pytest.mark.slow
def test_malicious_stops_cleanly_below_min_parties(flower: Callable[[Path], Deployment],
                                                    tls: tuple[Path, Path, Path],
                                                    tmp_path: Path) -> None:
    """With min-parties = all, a crash after the commit cannot be restarted around:
    the run stops with a clear error and no AUC."""
    dep, _ = _start(flower, tmp_path, tls)
    result = tmp_path / "result.json"
    dep.flwr_run(APP_DIR, "fedsec-tls", _run_config(
        result, security="malicious", **{"pause-after": "commit", "pause-seconds": PAUSE}))
    dep.wait_result(result, {"paused-after-commit", "failed"}, RUN_TIMEOUT)
    dep.kill("supernode-1", signal.SIGTERM)
    doc = dep.wait_result(result, {"done", "failed"}, RUN_TIMEOUT)
    assert doc["status"] == "failed", doc
    assert "auc" not in doc and doc["verified"] is False
    assert "min-parties" in doc["error"], doc["error"]


# ------------------------------------------------------------------------ simulation
def test_semi_honest_fhauc_simulation(flower: Callable[[Path], Deployment],
                                      tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pytest.importorskip("ray", reason="simulation engine needs fedsec[flower-sim] (Ray)")
    paths = _write_parties(tmp_path / "data")
    result = tmp_path / "result.json"
    dep = flower(tmp_path / "sim")
    dep.start_superlink_simulation()
    t0 = time.monotonic()
    dep.flwr_run(APP_DIR, "fedsec-sim",
                 _run_config(result, security="semi-honest", masking="pair",
                             **{"sim-data-dir": str(tmp_path / "data")}),
                 extra=("--federation-config", "num-supernodes=3"))
    doc = dep.wait_result(result, {"done", "failed"}, RUN_TIMEOUT)
    print(f"simulation run {time.monotonic() - t0:.1f}s: timings {doc['timings']}")
    assert doc["status"] == "done", doc
    assert sorted(doc["parties"]["included"]) == [p.stem for p in paths]
    assert doc["auc"] == pytest.approx(_plain_auc(paths), abs=1e-9)
    assert doc["auc"] == pytest.approx(_inprocess_auc(paths, "semi-honest"), abs=1e-9)
