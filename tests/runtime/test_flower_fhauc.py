"""Secure FHAUC across processes on Flower 1.41: deployment engine over TLS, simulation.

Prepare: a throw-away CA (``tls`` fixture), the parties' identities and roster made with
``fedsec identity init`` / ``fedsec roster create`` (``federation`` fixture), one CSV per
party, a SuperLink and three SuperNodes on 127.0.0.1 (each with its own ``data-path``,
``identity-path``, ``roster-path``, ``state-dir`` and ``log-path`` node config).
Execute: ``flwr run examples/fedsec-flower`` with a run config, optionally killing a
SuperNode mid-run. Assert: the JSON the ServerApp writes (``result-path``) against the
plaintext trapezoid AUC (``fedsec.metrics``) and the in-process runner ``secure_auc``;
the parties' own result files and logs.

The protocol flow, drop-out rules and error replies are tested in-process and fast in
``test_flower_local.py``; here every wait is bounded (``RUN_TIMEOUT``) and every process
is killed at teardown by the ``flower`` fixture (tests/runtime/conftest.py).
"""

from __future__ import annotations

import json
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
from fedsec.metrics import trapezoid_auc, trapezoid_error_bound  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
APP_DIR = REPO / "examples" / "fedsec-flower"
N_POINTS = 100
NAMES = ["hospital-0", "hospital-1", "hospital-2"]
RUN_TIMEOUT = 180.0  # one `flwr run` to a final result (5 message exchanges, ~20 s idle)
# Per message round. Measured reply latency on loopback: 5-14 s per round (the SuperNode
# polls every 3 s, then starts a ClientApp process), more on a loaded machine. The old
# 15 s made the crash test flaky: every reply came late and the malicious run "restarted
# over 0 survivors". Only the (slow) crash test waits for it to expire.
STEP_TIMEOUT = 60.0
CRASH_STEP_TIMEOUT = 45.0
PAUSE = 2.0  # seconds the ServerApp waits at the kill point (test hook)

Deployment = Any  # tests/runtime/conftest.py:Deployment (not importable by name)
Federation = Any  # tests/runtime/conftest.py:Federation


def write_parties(fed: Federation, seed: int = 7) -> list[Path]:
    """Three parties with different sizes and score distributions (simulated data)."""
    rng = np.random.default_rng(seed)
    paths = []
    for name, n in zip(fed.names, (60, 45, 80), strict=True):
        y = rng.integers(0, 2, n)
        s = np.clip(0.35 * y + rng.normal(0.4, 0.25, n), 0.0, 1.0)
        write_party_csv(fed.data_path(name), y, s)
        paths.append(fed.data_path(name))
    return paths


def plain_auc(paths: list[Path]) -> float:
    data = [load_party_csv(p) for p in paths]
    y = np.concatenate([d.y_true for d in data])
    s = np.concatenate([d.y_score for d in data])
    return trapezoid_auc(y, s, N_POINTS)


def plain_bound(paths: list[Path]) -> float:
    data = [load_party_csv(p) for p in paths]
    y = np.concatenate([d.y_true for d in data])
    s = np.concatenate([d.y_score for d in data])
    return trapezoid_error_bound(y, s, N_POINTS)


def _inprocess_auc(paths: list[Path], security: str) -> float:
    data = [load_party_csv(p) for p in paths]
    res = secure_auc([(d.y_true, d.y_score) for d in data], decision_points=N_POINTS,
                     security=security)
    return float(res.auc)


def _start(flower: Callable[[Path], Deployment], federation: Callable[..., Federation],
           tmp_path: Path, tls: tuple[Path, Path, Path], *, quorum: int | None = None,
           **node_extra: Any) -> tuple[Deployment, Federation, list[Path]]:
    """Identities and roster, then SuperLink (TLS) + one SuperNode per party."""
    fed = federation(tmp_path / "federation", NAMES, quorum=quorum)
    paths = write_parties(fed)
    t0 = time.monotonic()
    dep = flower(tmp_path / "deploy")
    dep.start_superlink_tls(*tls)
    for i, name in enumerate(fed.names):
        dep.start_supernode(f"supernode-{i}", fed.node_config(name, **node_extra))
    dep.wait_supernodes([f"supernode-{i}" for i in range(len(paths))])
    dep.startup_s = time.monotonic() - t0
    return dep, fed, paths


def _run_config(fed: Federation, result: Path, **extra: Any) -> dict[str, Any]:
    return {"result-path": str(result), "roster-path": str(fed.roster_path),
            "decision-points": N_POINTS, "step-timeout": STEP_TIMEOUT,
            "wait-nodes-timeout": 30.0, **extra}


def _no_secrets_left(fed: Federation, names: list[str] | None = None) -> None:
    for name in fed.names if names is None else names:
        state = fed.state_dir(name)
        if state.exists():
            assert (state.stat().st_mode & 0o077) == 0, "state dir must be private (0700)"
            assert list(state.glob("*.fedsec")) == [], "node-local secret state not deleted"


def _roster_fingerprint(fed: Federation) -> str:
    from fedsec.crypto.identity import Roster

    return Roster.load(fed.roster_path).fingerprint


def _party_result(fed: Federation, name: str) -> dict[str, Any]:
    files = list(fed.state_dir(name).glob("*.result.json"))
    assert len(files) == 1, files
    assert (files[0].stat().st_mode & 0o777) == 0o600
    out: dict[str, Any] = json.loads(files[0].read_text())
    return out


# ------------------------------------------------------------------------ deployment
def test_malicious_fhauc_deployment_tls(flower: Callable[[Path], Deployment],
                                        federation: Callable[..., Federation],
                                        tls: tuple[Path, Path, Path],
                                        tmp_path: Path) -> None:
    dep, fed, paths = _start(flower, federation, tmp_path, tls)
    result = tmp_path / "result.json"
    t0 = time.monotonic()
    dep.flwr_run(APP_DIR, "fedsec-tls", _run_config(fed, result, security="malicious"))
    doc = dep.wait_result(result, {"done", "failed"}, RUN_TIMEOUT)
    print(f"startup {dep.startup_s:.1f}s, run {time.monotonic() - t0:.1f}s, "
          f"timings {doc['timings']}")
    assert doc["status"] == "done", doc
    assert doc["security"] == "malicious" and doc["verified"] is True
    assert doc["roster_fingerprint"] == _roster_fingerprint(fed)
    assert sorted(doc["parties"]["included"]) == NAMES
    assert doc["parties"]["left_out"] == [] and doc["parties"]["unreported"] == []
    assert doc["restarts"] == []
    assert doc["quorum"]["required"] == 3 and doc["quorum"]["whole_roster"] is True
    assert set(doc["party_results"]) == set(NAMES)
    assert all(r["ok"] and r["verified"] and r["shared"]
               for r in doc["party_results"].values())
    assert doc["auc"] == pytest.approx(plain_auc(paths), abs=1e-6)
    assert doc["auc"] == pytest.approx(_inprocess_auc(paths, "malicious"), abs=1e-6)
    # shared rounded up to 2 significant digits, over the parties' one-sided offsets
    assert plain_bound(paths) - 1e-12 <= doc["error_bound"] <= 1.1 * plain_bound(paths) + 1e-2
    # the aggregator received public key material (~11 MB of Galois keys), no secret
    assert doc["bytes"]["public_key_material"] > 1_000_000
    _no_secrets_left(fed)
    for name in NAMES:  # each party keeps its own outcome and log
        mine = _party_result(fed, name)
        assert mine["status"] == "ok" and mine["verified"] is True
        assert mine["auc"] == pytest.approx(doc["auc"], abs=1e-6)
        assert "result: AUC" in fed.log_path(name).read_text()


def test_exact_fhauc_deployment_tls(flower: Callable[[Path], Deployment],
                                    federation: Callable[..., Federation],
                                    tls: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """Exact mode as separate processes (SuperLink with TLS, one SuperNode per party,
    ``flwr run``): the same refined grid and AUC as in-process exact mode on the same
    files, and the exact AUC (scikit-learn's) to the parties' noise and the 6-digit
    sharing."""
    from sklearn.metrics import roc_auc_score

    dep, fed, paths = _start(flower, federation, tmp_path, tls, **{"share-auc": "true"})
    result = tmp_path / "result.json"
    t0 = time.monotonic()
    dep.flwr_run(APP_DIR, "fedsec-tls", _run_config(fed, result, security="semi-honest",
                                                    **{"decision-points": "exact"}))
    doc = dep.wait_result(result, {"done", "failed"}, RUN_TIMEOUT)
    print(f"startup {dep.startup_s:.1f}s, run {time.monotonic() - t0:.1f}s, "
          f"exact {doc.get('exact')}, timings {doc['timings']}")
    assert doc["status"] == "done", doc
    data = [load_party_csv(p) for p in paths]
    y = np.concatenate([d.y_true for d in data])
    s = np.concatenate([d.y_score for d in data])
    inproc = secure_auc([(d.y_true, d.y_score) for d in data], decision_points="exact",
                        security="semi-honest")
    assert doc["decision_points"] == inproc.decision_points
    assert doc["exact"]["bound_certified_zero"] is True
    assert doc["auc"] == pytest.approx(inproc.auc, abs=1e-6)
    assert abs(doc["auc"] - roc_auc_score(y, s)) <= doc["error_bound"] + 1e-9
    _no_secrets_left(fed)


@pytest.mark.parametrize("security, sig", [
    # semi-honest drop-outs are covered in-process (test_flower_local.py); slow here
    pytest.param("semi-honest", signal.SIGTERM, marks=pytest.mark.slow, id="semi-honest"),
    pytest.param("malicious", signal.SIGTERM, id="malicious"),
    pytest.param("malicious", signal.SIGKILL, marks=pytest.mark.slow, id="malicious-crash"),
])
def test_party_dropped_mid_run(flower: Callable[[Path], Deployment],
                               federation: Callable[..., Federation],
                               tls: tuple[Path, Path, Path], tmp_path: Path,
                               security: str, sig: signal.Signals) -> None:
    """A SuperNode drops out mid-run, after key delivery (in malicious mode its commit rode
    with the delivery), before its submission (which rides with the confirmations).
    SIGTERM shuts it down cleanly, so the SuperLink refuses the next message at once;
    SIGKILL crashes it, so its submission times out (the SuperLink still lists it for
    2 x 30 s of missed heartbeats): slow, it waits ``CRASH_STEP_TIMEOUT``.

    Semi-honest: the other two submit (they meet every party's quorum, 2 by default), the
    result covers them and names the one left out. Malicious: the roster's quorum is 2 so
    the parties accept two; the started submission set is incomplete, so no result is
    computed from it; the commit round restarts with fresh nonces over the two survivors.
    Either way the accepted AUC is the two survivors' AUC, never a number mixing in a
    party whose masks did not cancel. (With the default quorum - the whole roster in
    malicious mode - the run stops instead: ``test_malicious_drop_out_stops_*``.)
    """
    quorum = 2 if security == "malicious" else None
    dep, fed, paths = _start(flower, federation, tmp_path, tls, quorum=quorum,
                             **{"share-auc": True})
    result = tmp_path / "result.json"
    kill_point = "deliver"
    timeout = CRASH_STEP_TIMEOUT if sig == signal.SIGKILL else STEP_TIMEOUT
    dep.flwr_run(APP_DIR, "fedsec-tls", _run_config(
        fed, result, security=security, **{"pause-after": kill_point,
                                           "pause-seconds": PAUSE,
                                           "step-timeout": timeout}))
    dep.wait_result(result, {f"paused-after-{kill_point}", "failed"}, RUN_TIMEOUT)
    dep.kill("supernode-2", sig)
    t_kill = time.monotonic()
    doc = dep.wait_result(result, {"done", "failed"}, RUN_TIMEOUT)
    print(f"{security}/{sig.name}: result {time.monotonic() - t_kill:.1f}s after the kill; "
          f"timings {doc['timings']}; restarts {doc['restarts']}")
    assert doc["status"] == "done", doc
    victim, survivors = NAMES[2], NAMES[:2]
    assert sorted(doc["parties"]["included"]) == survivors
    left = doc["parties"]["left_out"]
    assert [e["party"] for e in left] == [victim], left
    assert left[0]["step"] == "confirmed"
    assert ("offline" if sig == signal.SIGTERM else "no reply") in left[0]["reason"]
    assert set(doc["party_results"]) == set(survivors)
    expected = plain_auc(paths[:2])
    assert expected != pytest.approx(plain_auc(paths), abs=1e-3)  # the drop matters
    if security == "semi-honest":
        assert doc["verified"] is False and doc["restarts"] == []
        assert doc["auc"] == pytest.approx(expected, abs=1e-6)
    else:
        assert doc["verified"] is True
        assert len(doc["restarts"]) == 1 and doc["restarts"][0]["step"] == "submit"
        assert "commit#1" in doc["bytes"] and "submit#1" in doc["bytes"]
        assert doc["auc"] == pytest.approx(expected, abs=1e-6)
    _no_secrets_left(fed, survivors)  # the victim's stays on its disk: wipe after failures


@pytest.mark.slow
def test_malicious_drop_out_stops_without_quorum(flower: Callable[[Path], Deployment],
                                                 federation: Callable[..., Federation],
                                                 tls: tuple[Path, Path, Path],
                                                 tmp_path: Path) -> None:
    """By default a malicious-mode party requires the whole roster: a crash after the
    commit cannot be restarted around, so the run stops with a clear error and no AUC."""
    dep, fed, _ = _start(flower, federation, tmp_path, tls)
    result = tmp_path / "result.json"
    dep.flwr_run(APP_DIR, "fedsec-tls", _run_config(
        fed, result, security="malicious", **{"pause-after": "commit",
                                              "pause-seconds": PAUSE}))
    dep.wait_result(result, {"paused-after-commit", "failed"}, RUN_TIMEOUT)
    dep.kill("supernode-1", signal.SIGTERM)
    doc = dep.wait_result(result, {"done", "failed"}, RUN_TIMEOUT)
    assert doc["status"] == "failed", doc
    assert "auc" not in doc and doc["verified"] is False
    assert "whole roster" in doc["error"] and "no result" in doc["error"], doc["error"]


# ------------------------------------------------------------------------ simulation
def test_semi_honest_fhauc_simulation(flower: Callable[[Path], Deployment],
                                      federation: Callable[..., Federation],
                                      tmp_path: Path) -> None:
    """Virtual nodes have no files: each plays an identity of ``sim-identity-dir`` (with
    its roster) and reads its CSV from ``sim-data-dir``; ``<name>.node.json`` stands in
    for its node config (here: share the AUC, which semi-honest parties keep by
    default)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pytest.importorskip("ray", reason="simulation engine needs fedsec[flower-sim] (Ray)")
    fed = federation(tmp_path / "federation", NAMES)
    paths = write_parties(fed)
    for name in NAMES:
        (fed.identity_dir / f"{name}.node.json").write_text(
            json.dumps({"share-auc": True, "state-dir": str(fed.state_dir(name))}))
    result = tmp_path / "result.json"
    dep = flower(tmp_path / "sim")
    dep.start_superlink_simulation()
    t0 = time.monotonic()
    dep.flwr_run(APP_DIR, "fedsec-sim",
                 {"result-path": str(result), "security": "semi-honest", "masking": "pair",
                  "decision-points": N_POINTS, "step-timeout": STEP_TIMEOUT,
                  "sim-identity-dir": str(fed.identity_dir),
                  "sim-data-dir": str(fed.data_dir)},
                 extra=("--federation-config", "num-supernodes=3"))
    doc = dep.wait_result(result, {"done", "failed"}, RUN_TIMEOUT)
    print(f"simulation run {time.monotonic() - t0:.1f}s: timings {doc['timings']}")
    assert doc["status"] == "done", doc
    assert sorted(doc["parties"]["included"]) == NAMES
    assert doc["auc"] == pytest.approx(plain_auc(paths), abs=1e-6)
    assert doc["auc"] == pytest.approx(_inprocess_auc(paths, "semi-honest"), abs=1e-6)
    _no_secrets_left(fed)


@pytest.mark.slow  # the ServerApp gives a dead SuperLink GRID_CALL_TIMEOUT (60 s): ~100 s
def test_superlink_stopped_mid_run_ends_the_run_failed(flower: Callable[[Path], Deployment],
                                                       federation: Callable[..., Federation],
                                                       tls: tuple[Path, Path, Path],
                                                       tmp_path: Path) -> None:
    """The SuperLink dies while the ServerApp waits between two steps: the run ends with
    ``status = "failed"`` and an attributed error within a bounded time, never a result
    file stuck at an intermediate stage."""
    import os

    dep, fed, _paths = _start(flower, federation, tmp_path, tls)
    result = tmp_path / "result.json"
    dep.flwr_run(APP_DIR, "fedsec-tls", _run_config(
        fed, result, security="semi-honest", **{"pause-after": "deliver",
                                                "pause-seconds": 15.0}))
    dep.wait_result(result, {"paused-after-deliver", "failed", "done"}, RUN_TIMEOUT)
    os.kill(dep.procs["superlink"].pid, signal.SIGKILL)  # the SuperLink process only
    from fedsec.runtime.flower_io import GRID_CALL_TIMEOUT

    t0 = time.monotonic()
    deadline = t0 + 15.0 + max(GRID_CALL_TIMEOUT, STEP_TIMEOUT) + 20.0
    doc: dict[str, Any] = {}
    while time.monotonic() < deadline:
        doc = json.loads(result.read_text())
        if doc.get("status") in ("failed", "done"):
            break
        time.sleep(0.5)
    print(f"run ended {time.monotonic() - t0:.1f}s after the SuperLink died: {doc.get('error')}")
    assert doc.get("status") == "failed", doc
    assert "auc" not in doc and "SuperLink did not answer" in doc["error"], doc["error"]
