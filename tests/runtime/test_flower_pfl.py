"""Priv-PFL (BALANCE selection and aggregation under CKKS) on Flower: the ServerApp is the
PFL server, one SuperNode the decryptor, one SuperNode per client.

Prepare: identities and roster made with the CLI (``client-0`` ... ``client-3`` and
``decryptor``), each client's per-round models in its own ``.npz`` (node config
``data-path``). Execute: the real ServerApp and ClientApp over ``LocalGrid`` (in-process,
``role-host="inline"``), or across processes on the deployment engine with TLS.
Assert: the acceptance sets equal the in-process :class:`SecurePFLSession`'s on the same
inputs and the personalised models (kept on each client's node) agree with it and with
plaintext BALANCE within the protocol's tolerance (``1e-6 B`` each, so ``2e-6 B``
between two noisy runs); what the server relays cannot be forged or replayed; a silent
client is left out of the round within ``step-timeout``.
"""

from __future__ import annotations

import json
import os
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

from fedsec.pfl.balance import personalise  # noqa: E402
from fedsec.pfl.secure import SecurePFLConfig, SecurePFLSession, margin_scale  # noqa: E402
from fedsec.pfl.selection import ineq1_margin  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
APP_DIR = REPO / "examples" / "fedsec-flower"
PRESET = "INSECURE_TEST_N4096_DEPTH19"
K, D, ROUNDS = 4, 24, 2
NAMES = [f"client-{i}" for i in range(K)] + ["decryptor"]
BOUND = 7.0
GAMMA, KAPPA, ALPHA = 0.6, 1.0, 0.5
STEP_TIMEOUT = 0.5
# Across processes every message round costs a SuperNode poll plus a fresh ClientApp
# process (~3-5 s on an idle machine; 10-15 s measured on a loaded 2-core one): one round
# there (4 set-up + 4 + reveal batches + 1 delivery exchanges); two rounds in-process.
DEPLOY_ROUNDS = 1
DEPLOY_TIMEOUT = 300.0

Federation = Any  # tests/runtime/conftest.py:Federation
LocalGrid = Any  # tests/runtime/conftest.py:LocalGrid
Deployment = Any  # tests/runtime/conftest.py:Deployment


def _sigma(t: int, rounds: int = ROUNDS) -> float:
    return float(GAMMA * np.exp(-KAPPA * t / rounds))


def _models(seed: int = 5) -> np.ndarray:
    """(K, ROUNDS, D): three similar clients and one outlier, no pair near the boundary."""
    rng = np.random.default_rng(seed)
    base = rng.normal(size=D)
    base *= 4.5 / np.linalg.norm(base)
    out = np.empty((K, ROUNDS, D))
    for t in range(ROUNDS):
        for i in range(K):
            spread = 2.5 if i == K - 1 else 0.12 + 0.05 * i
            out[i, t] = base + spread * rng.normal(size=D) / np.sqrt(D) * (1 + t)
    return out


def _write(fed: Federation, models: np.ndarray) -> dict[str, Path]:
    paths = {}
    for i in range(K):
        p = fed.data_dir / f"client-{i}.npz"
        np.savez(p, models=models[i])
        paths[f"client-{i}"] = p
    return paths


def _node_config(fed: Federation, name: str, paths: dict[str, Path], **extra: Any
                 ) -> dict[str, Any]:
    role = "decryptor" if name == "decryptor" else "client"
    cfg = fed.node_config(name, **{"role": role, "presets": PRESET, **extra})
    if role == "client":
        cfg["data-path"] = str(paths[name])
    else:
        cfg.pop("data-path")
    return cfg


def _run_config(fed: Federation, result: Path, **extra: Any) -> dict[str, Any]:
    return {"protocol": "pfl", "result-path": str(result), "roster-path": str(fed.roster_path),
            "pfl-rounds": ROUNDS, "pfl-model-size": D, "pfl-alpha": ALPHA,
            "pfl-norm-bound": BOUND, "pfl-gamma": GAMMA, "pfl-kappa": KAPPA,
            "pfl-preset": PRESET, "step-timeout": STEP_TIMEOUT, "wait-nodes-timeout": 2.0,
            **extra}


def _local(local_grid: Callable[..., LocalGrid], fed: Federation, paths: dict[str, Path],
           tmp_path: Path, *, node_extra: dict[str, dict[str, Any]] | None = None,
           **kw: Any) -> tuple[dict[str, Any], LocalGrid, float]:
    from flwr.app import Context, RecordDict

    from fedsec.runtime.flower_apps import server_main

    extra = node_extra or {}
    nodes = {201 + i: _node_config(fed, n, paths, **{"role-host": "inline"},
                                   **extra.get(n, {}))
             for i, n in enumerate(NAMES)}
    result = tmp_path / "result.json"
    rc = _run_config(fed, result, **kw.pop("run_config", {}))
    grid = local_grid(nodes, rc, **kw)
    ctx = Context(run_id=grid.run_id, node_id=0, node_config={}, state=RecordDict(),
                  run_config=rc)
    t0 = time.perf_counter()
    try:
        server_main(grid, ctx)
    except Exception:  # noqa: BLE001 - the result JSON says what failed
        pass
    wall = time.perf_counter() - t0
    return json.loads(result.read_text()), grid, wall


def _inprocess(models: np.ndarray, n_rounds: int = ROUNDS) -> tuple[list[Any], float]:
    """The in-process session on the same inputs (and its wall time, set-up included)."""
    cfg = SecurePFLConfig(preset=PRESET, allow_insecure=True)
    t0 = time.perf_counter()
    session = SecurePFLSession.create(K, cfg)
    rounds = [session.run_round(models[:, t], np.full(K, _sigma(t, n_rounds)), alpha=ALPHA,
                                norm_bound=BOUND, round_index=t) for t in range(n_rounds)]
    return rounds, time.perf_counter() - t0


def _kept(fed: Federation, name: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    (doc_path,) = fed.state_dir(name).glob("*.result.json")
    doc = json.loads(doc_path.read_text())
    path = Path(doc["models_path"])
    assert (path.stat().st_mode & 0o777) == 0o600
    with np.load(path) as f:
        return doc, {k: f[k] for k in f.files}


def _check_against_inprocess(doc: dict[str, Any], fed: Federation, models: np.ndarray,
                             names: list[str] | None = None) -> None:
    n_rounds = len(doc["rounds"])
    ref, _ = _inprocess(models, n_rounds)
    for t, (r, mine) in enumerate(zip(ref, doc["rounds"], strict=True)):
        want = {f"client-{i}": sorted(f"client-{j}" for j in r.selection.accepted[i])
                for i in range(K)}
        assert mine["accepted"] == want, (t, mine["accepted"], want)
        assert mine["pairs_checked"] == r.selection.checks
    for name in names or [f"client-{i}" for i in range(K)]:
        i = int(name.rsplit("-", 1)[1])
        kept, arrays = _kept(fed, name)
        assert kept["status"] == "ok" and kept["rounds"] == n_rounds
        for t in range(n_rounds):
            got = arrays["personalised"][t]
            assert np.abs(got - ref[t].personalised[i]).max() <= 2e-6 * BOUND
            acc = [models[j, t] for j in sorted(ref[t].selection.accepted[i])]
            plain = personalise(models[i, t], acc, ALPHA) if acc else models[i, t]
            assert np.abs(got - plain).max() <= 1e-6 * BOUND


@pytest.fixture(autouse=True)
def _fresh_inline_state() -> Any:
    """Node states of the in-process grids are per (run, node): none survives a test."""
    from fedsec.runtime.node_host import inline_state

    def clear() -> None:
        ours = {199, *range(201, 201 + len(NAMES))}
        for key in [k for k in inline_state() if k[1] in ours]:
            inline_state().pop(key, None)

    clear()
    yield
    clear()


# ------------------------------------------------------------------------ in-process
def test_inputs_have_no_pair_near_the_comparison_boundary() -> None:
    models = _models()
    for t in range(ROUNDS):
        sig = np.full(K, _sigma(t))
        m = margin_scale(sig) * BOUND ** 2
        for i in range(K):
            assert np.linalg.norm(models[i, t]) <= BOUND
            for j in range(K):
                if i != j:
                    assert abs(ineq1_margin(models[i, t], models[j, t], sig[i])) > 2 * m / 256
    ref, _ = _inprocess(models)
    sizes = [len(s) for r in ref for s in r.selection.accepted]
    assert 0 < sum(sizes) < K * (K - 1) * ROUNDS  # some accept, not everybody


def test_pfl_localgrid_matches_inprocess(local_grid: Callable[..., LocalGrid],
                                         federation: Callable[..., Federation],
                                         tmp_path: Path) -> None:
    fed = federation(tmp_path / "fed", NAMES)
    models = _models()
    paths = _write(fed, models)
    doc, grid, wall = _local(local_grid, fed, paths, tmp_path)
    assert doc["status"] == "done", doc
    assert doc["parties"]["left_out"] == []
    assert doc["delivered"] == [f"client-{i}" for i in range(K)]
    batches = sum(r["reveal_batches"] for r in doc["rounds"])
    assert doc["exchanges"] == 4 + ROUNDS * 4 + batches + 1 == len(doc["exchange_log"])
    _check_against_inprocess(doc, fed, models)
    _, inproc = _inprocess(models)
    print(f"\nPFL LocalGrid: {wall:.2f}s for {doc['exchanges']} exchanges (in-process "
          f"session {inproc:.2f}s)")
    # nothing of a client's model or result goes to the server in the clear
    raw = [models[i, t].tobytes()[8 * a:8 * a + 16] for i in range(K) for t in range(ROUNDS)
           for a in (0, 5)]
    for _step, _node, reply in grid.replies:
        from fedsec.runtime.flower_io import get_blobs

        for blob in get_blobs(reply.content):
            assert not any(r in blob for r in raw)


# ---------------------------------------------------------------- relay adversaries
def _edit_round(target: int, change: Callable[[int, list[bytes]], list[bytes]]
                ) -> Callable[[str, int, list[bytes]], list[bytes]]:
    count = {"n": 0}

    def edit(step: str, node: int, blobs: list[bytes]) -> list[bytes]:
        if step != "pfl_round":
            return blobs
        if node == 201 + target:
            count["n"] += 1
            return change(count["n"] - 1, blobs)
        return blobs

    return edit


def _flip(b: bytes, at: int = -1) -> bytes:
    x = bytearray(b)
    x[at] ^= 1
    return bytes(x)


@pytest.mark.parametrize("attack", ["forge-decryptor-key", "forge-result", "replay-result",
                                    "swap-results"])
def test_relayed_messages_cannot_be_forged_or_replayed(
        local_grid: Callable[..., LocalGrid], federation: Callable[..., Federation],
        tmp_path: Path, attack: str) -> None:
    """The server relays the decryptor's key to the clients and the decryptor's sealed,
    signed result boxes; a client refuses a changed or replayed one (check name only)."""
    fed = federation(tmp_path / "fed", NAMES)
    paths = _write(fed, _models())
    seen: list[list[bytes]] = []

    def change(n: int, blobs: list[bytes]) -> list[bytes]:
        seen.append(list(blobs))
        if attack == "forge-decryptor-key" and n == 0:
            return [_flip(blobs[0], 40), *blobs[1:]]
        if attack == "forge-result" and n == 1:
            return [_flip(blobs[0]), blobs[1]]
        if attack == "replay-result" and n == 2:  # round 1's result replaced by round 0's
            return seen[1]
        return blobs

    edit = _edit_round(1, change)
    if attack == "swap-results":  # client-0's result box sent to client-1
        first: dict[int, list[bytes]] = {}

        def edit(step: str, node: int, blobs: list[bytes]) -> list[bytes]:  # noqa: F811
            if step == "pfl_round" and blobs and len(blobs) == 2:
                first.setdefault(node, blobs)
                if node == 202 and 201 in first:
                    return first[201]
            return blobs

    doc, grid, _ = _local(local_grid, fed, paths, tmp_path, edit=edit)
    refusals = [(step, node, meta) for step, node, meta in _metas(grid)
                if meta.get("ok") is False]
    assert refusals, doc
    assert all(node == 202 and set(meta) == {"ok", "check"} for _, node, meta in refusals)
    assert {m["check"] for _, _, m in refusals} == {"protocol-error"}
    left = [e["party"] for e in doc["parties"]["left_out"]]
    assert left == ["client-1"], doc
    assert doc["status"] == "done"  # the others go on
    assert "client-1" not in doc["delivered"]
    for kept in fed.state_dir("client-1").glob("*.result.json"):  # what came before
        assert json.loads(kept.read_text())["status"] == "partial"


def _metas(grid: LocalGrid) -> list[tuple[str, int, dict[str, Any]]]:
    from fedsec.runtime.flower_io import get_meta

    return [(step, node, get_meta(msg.content)) for step, node, msg in grid.replies]


def test_replayed_decryptor_request_stops_the_run(local_grid: Callable[..., LocalGrid],
                                                  federation: Callable[..., Federation],
                                                  tmp_path: Path) -> None:
    """Round 1's mask request replaced by round 0's (relayed seed boxes): refused."""
    fed = federation(tmp_path / "fed", NAMES)
    paths = _write(fed, _models())
    kept: list[list[bytes]] = []

    def edit(step: str, node: int, blobs: list[bytes]) -> list[bytes]:
        if step == "pfl_decrypt":
            kept.append(blobs)
            if len(kept) > 3 and len(blobs) == 1 and blobs[0][7:30].find(b"mask") >= 0:
                return [kept[0][-1]]
        return blobs

    doc, _, _ = _local(local_grid, fed, paths, tmp_path, edit=edit)
    assert doc["status"] == "failed", doc
    assert "decryptor did not answer (protocol-error)" in doc["error"]


# ---------------------------------------------------------------------- faults, files
def test_silent_client_is_left_out_of_the_round(local_grid: Callable[..., LocalGrid],
                                                federation: Callable[..., Federation],
                                                tmp_path: Path) -> None:
    fed = federation(tmp_path / "fed", NAMES)
    models = _models()
    paths = _write(fed, models)
    calls = {"n": 0}

    def before(grid: LocalGrid, step: str, nodes: list[int]) -> None:
        if step == "pfl_round":
            calls["n"] += 1
            if calls["n"] == 2:  # client-2 crashes before its round-1 upload
                grid.kill(203)

    t0 = time.monotonic()
    doc, _, _ = _local(local_grid, fed, paths, tmp_path, before_step=before)
    assert time.monotonic() - t0 < 30
    assert doc["status"] == "done", doc
    (gone,) = doc["parties"]["left_out"]
    assert gone["party"] == "client-2" and "no reply within" in gone["reason"]
    assert doc["rounds"][0]["valid"] == NAMES[:K]
    assert doc["rounds"][1]["valid"] == ["client-0", "client-1", "client-3"]
    assert doc["rounds"][1]["accepted"]["client-2"] == []
    assert all("client-2" not in v for v in doc["rounds"][1]["accepted"].values())
    assert doc["delivered"] == ["client-0", "client-1", "client-3"]


def test_silent_decryptor_stops_the_run(local_grid: Callable[..., LocalGrid],
                                        federation: Callable[..., Federation],
                                        tmp_path: Path) -> None:
    fed = federation(tmp_path / "fed", NAMES)
    paths = _write(fed, _models())

    def before(grid: LocalGrid, step: str, nodes: list[int]) -> None:
        if step == "pfl_decrypt":
            grid.kill(205)

    doc, _, _ = _local(local_grid, fed, paths, tmp_path, before_step=before)
    assert doc["status"] == "failed"
    assert "decryptor did not answer" in doc["error"]


def test_invalid_client_file_stops_the_run_attributed(
        local_grid: Callable[..., LocalGrid], federation: Callable[..., Federation],
        tmp_path: Path) -> None:
    fed = federation(tmp_path / "fed", NAMES)
    paths = _write(fed, _models())
    np.savez(paths["client-1"], models=np.zeros((ROUNDS, D + 1)))
    doc, grid, _ = _local(local_grid, fed, paths, tmp_path)
    assert doc["status"] == "failed"
    assert "node-202" in doc["error"] and "input-invalid" in doc["error"]
    log = fed.log_path("client-1").read_text()
    assert "need a finite 'models' array" in log
    assert all(set(m) == {"ok", "check"} for _, _, m in _metas(grid) if not m.get("ok"))


def test_node_policy_refuses_an_insecure_preset(local_grid: Callable[..., LocalGrid],
                                                federation: Callable[..., Federation],
                                                tmp_path: Path) -> None:
    fed = federation(tmp_path / "fed", NAMES)
    paths = _write(fed, _models())
    doc, _, _ = _local(local_grid, fed, paths, tmp_path,
                       node_extra={"decryptor": {"presets": ""}})
    assert doc["status"] == "failed" and "policy:preset" in doc["error"]


@pytest.mark.parametrize(("key", "value", "message"), [
    ("pfl-alpha", 1.5, "'pfl-alpha' run config must be in [0, 1]"),
    ("pfl-model-size", 0, "'pfl-model-size' run config must be"),
    ("pfl-rounds", 0, "'pfl-rounds' run config must be in"),
    ("pfl-preset", "NOPE", "'pfl-preset' run config must be one of"),
    ("pfl-sign-alpha", 9, "pfl-sign-alpha"),
    ("pfl-norm-bound", -1.0, "'pfl-norm-bound' run config must be finite and > 0"),
])
def test_run_config_is_validated_at_start(key: str, value: Any, message: str) -> None:
    from fedsec.runtime.flower_pfl import PFLOptions

    good = {"pfl-model-size": D, "pfl-preset": PRESET}
    PFLOptions.from_run_config(good)
    with pytest.raises(ValueError, match=None) as err:
        PFLOptions.from_run_config({**good, key: value})
    assert message in str(err.value)


# ------------------------------------------------------------------------ deployment
def test_pfl_deployment_tls(flower: Callable[[Path], Deployment],
                            federation: Callable[..., Federation],
                            tls: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """The whole run across processes: SuperLink (TLS) + 5 SuperNodes, one node host per
    SuperNode; same acceptance sets and models as in one process."""
    fed = federation(tmp_path / "fed", NAMES)
    models = _models()
    paths = _write(fed, models)
    dep = flower(tmp_path / "deploy")
    dep.env["FLWR_SUPEREXEC_TASK_POLL_INTERVAL"] = "0.05"
    if dep.env.get("PYTHONPATH"):  # the processes run elsewhere: keep it absolute
        dep.env["PYTHONPATH"] = os.pathsep.join(
            os.path.abspath(p) for p in dep.env["PYTHONPATH"].split(os.pathsep) if p)
    t0 = time.monotonic()
    dep.start_superlink_tls(*tls)
    for i, name in enumerate(NAMES):
        dep.start_supernode(f"supernode-{i}", _node_config(fed, name, paths))
    dep.wait_supernodes([f"supernode-{i}" for i in range(len(NAMES))])
    startup = time.monotonic() - t0
    result = tmp_path / "result.json"
    t1 = time.monotonic()
    dep.flwr_run(APP_DIR, "fedsec-tls", _run_config(fed, result, **{
        "step-timeout": 60.0, "wait-nodes-timeout": 30.0, "pfl-rounds": DEPLOY_ROUNDS}))
    doc = dep.wait_result(result, {"done", "failed"}, DEPLOY_TIMEOUT)
    wall = time.monotonic() - t1
    _, inproc = _inprocess(models, DEPLOY_ROUNDS)
    print(f"\nPFL deployment: startup {startup:.1f}s, run {wall:.1f}s (in-process "
          f"{inproc:.2f}s), exchanges {doc.get('exchanges')}, timings {doc.get('timings')}")
    if os.environ.get("FEDSEC_PFL_REPORT"):
        Path(os.environ["FEDSEC_PFL_REPORT"]).write_text(json.dumps(
            {"startup_s": startup, "run_s": wall, "inprocess_s": inproc, "doc": doc}))
    assert doc["status"] == "done", doc
    assert doc["parties"]["left_out"] == []
    assert len(doc["rounds"]) == DEPLOY_ROUNDS
    assert doc["exchanges"] == 4 + 4 * DEPLOY_ROUNDS + sum(
        r["reveal_batches"] for r in doc["rounds"]) + 1
    _check_against_inprocess(doc, fed, models)
    for name in NAMES:  # no node-local state or host left behind
        assert not list(fed.state_dir(name).glob("*.fedsec"))


def test_stranger_node_is_left_out(local_grid: Callable[..., LocalGrid],
                                   federation: Callable[..., Federation],
                                   tmp_path: Path) -> None:
    """A SuperNode of another federation (same names, another roster) on this SuperLink:
    its hello does not verify against this roster; the run goes on without it."""
    fed = federation(tmp_path / "fed", NAMES)
    other = federation(tmp_path / "other", NAMES)
    models = _models()
    paths = _write(fed, models)
    other_paths = _write(other, models)
    stranger = _node_config(other, "client-0", other_paths, **{"role-host": "inline"})

    class WithStranger:
        def __init__(self, nodes: dict[int, dict[str, Any]], rc: dict[str, Any],
                     **kw: Any) -> None:
            self.grid = local_grid({**nodes, 199: stranger}, rc, **kw)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.grid, name)

    doc, _, _ = _local(WithStranger, fed, paths, tmp_path)
    assert doc["status"] == "done", doc
    (left,) = doc["parties"]["left_out"]
    assert left["node"] == 199 and left["step"] == "pfl_hello"
    _check_against_inprocess(doc, fed, models)
