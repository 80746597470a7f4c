"""DPAUC on Flower: the ServerApp as aggregator, one SuperNode per party.

Prepare: a federation (identities, roster, one CSV and node config per party). Execute:
the one Flower app (``protocol = "dpauc"``) on ``LocalGrid`` (the real ClientApp handlers,
in this process, node config ``role-host = "inline"``) or on a TLS deployment (SuperLink,
SuperNodes and node hosts as processes). Assert: the result JSON against the in-process
``dpauc`` on the same inputs and the same noise (the noise samplers are replaced in this
process only, by the test; the deployment compares the noiseless path), the parties'
policy refusals, a relay that reads, forges, moves and replays, a silent party.
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

from fedsec.auc import dpauc as dp  # noqa: E402
from fedsec.data.io import load_party_csv, write_party_csv  # noqa: E402
from fedsec.errors import PrivacyWarning  # noqa: E402
from fedsec.metrics import trapezoid_auc  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
APP_DIR = REPO / "examples" / "fedsec-flower"
NAMES = ["clinic-a", "clinic-b", "clinic-c"]
N_POINTS = 20
STEP_TIMEOUT = 0.5

Federation = Any  # tests/runtime/conftest.py:Federation
LocalGrid = Any  # tests/runtime/conftest.py:LocalGrid
Deployment = Any  # tests/runtime/conftest.py:Deployment


# ------------------------------------------------------------------------- helpers
def _data(fed: Federation, seed: int = 5) -> list[Path]:
    rng = np.random.default_rng(seed)
    paths = []
    for name, n in zip(fed.names, (60, 45, 80), strict=True):
        y = rng.integers(0, 2, n)
        s = np.clip(0.35 * y + rng.normal(0.4, 0.25, n), 0.0, 1.0)
        write_party_csv(fed.data_path(name), y, s)
        paths.append(fed.data_path(name))
    return paths


def _parties(paths: list[Path]) -> list[tuple[Any, Any]]:
    return [(d.y_true, d.y_score) for d in (load_party_csv(p) for p in paths)]


def _nodes(fed: Federation, **extra: Any) -> dict[int, dict[str, Any]]:
    per_party = extra.pop("per_party", {})
    return {101 + i: fed.node_config(name, **{"role-host": "inline", **extra},
                                     **per_party.get(name, {}))
            for i, name in enumerate(fed.names)}


def _run(grid: LocalGrid, fed: Federation, tmp_path: Path, **run_config: Any
         ) -> dict[str, Any]:
    """The one app's ServerApp entry (``protocol = "dpauc"``) on ``grid``."""
    from flwr.app import Context, RecordDict

    from fedsec.runtime.flower_apps import server_main

    result = tmp_path / f"result-{grid.run_id}.json"
    rc = {"protocol": "dpauc", "result-path": str(result), "roster-path":
          str(fed.roster_path), "decision-points": N_POINTS, "step-timeout": STEP_TIMEOUT,
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


def _checks(grid: LocalGrid, step: str) -> dict[int, str]:
    from fedsec.runtime.flower_io import get_meta

    out = {}
    for s, node, msg in grid.replies:
        meta = get_meta(msg.content)
        if s == step and meta.get("ok") is False:
            assert set(meta) == {"ok", "check"}, meta  # a check name, never data
            out[node] = meta["check"]
    return out


@pytest.fixture(autouse=True)
def _fresh_inline_states() -> Any:
    """LocalGrid runs share this process's table of node states: start and end empty."""
    from fedsec.runtime.node_host import inline_state

    inline_state().clear()
    yield
    inline_state().clear()


@pytest.fixture
def fixed_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same (non-zero) noise for every party, in this process only: Flower's parties
    and the in-process ``dpauc`` then see identical noisy statistics."""

    def laplace(size: int, *, scale: float) -> np.ndarray:
        return np.linspace(-0.4, 0.3, size) * scale / 20

    def gaussian(size: int, *, sigma: float) -> np.ndarray:
        return np.cos(np.arange(size)) * sigma / 20

    def bernoulli(size: int, *, p: float) -> np.ndarray:
        return np.arange(size) % 7 == 3  # the same label flips for the same data

    monkeypatch.setattr(dp, "laplace_noise", laplace)
    monkeypatch.setattr(dp, "gaussian_noise", gaussian)
    monkeypatch.setattr(dp, "secure_bernoulli", bernoulli)


def _fed(federation: Callable[..., Federation], tmp_path: Path, quorum: int | None = None
         ) -> tuple[Federation, list[Path]]:
    fed = federation(tmp_path / "fed", NAMES, quorum=quorum)
    return fed, _data(fed)


# ----------------------------------------------------------------- the result
@pytest.mark.parametrize("mechanism,extra", [
    ("laplace", {}), ("gaussian", {"dpauc-delta": 1e-6}),
    ("rr", {"dpauc-epsilon": 0.6, "dpauc-score-epsilon": 0.4})])
def test_flower_dpauc_equals_in_process(mechanism: str, extra: dict[str, Any],
                                        federation: Callable[..., Federation],
                                        local_grid: Callable[..., LocalGrid],
                                        fixed_noise: None, tmp_path: Path) -> None:
    fed, paths = _fed(federation, tmp_path)
    grid = local_grid(_nodes(fed), {})
    doc = _run(grid, fed, tmp_path, **{"dpauc-mechanism": mechanism, "dpauc-epsilon": 1.0,
                                       **extra})
    assert doc["status"] == "done", doc
    ref = dp.dpauc(_parties(paths), epsilon=extra.get("dpauc-epsilon", 1.0),
                   decision_points=N_POINTS, mechanism=mechanism,
                   delta=extra.get("dpauc-delta"),
                   score_epsilon=extra.get("dpauc-score-epsilon"))
    assert doc["auc"] == ref.auc  # bit for bit
    plain = trapezoid_auc(*map(np.concatenate, zip(*_parties(paths), strict=True)), N_POINTS)
    assert doc["auc"] != plain  # the noise is there
    assert doc["parties"]["included"] == NAMES and doc["parties"]["left_out"] == []
    assert doc["exchanges"] == 2 and doc["quorum"]["required"] == 3
    for name in NAMES:  # each party keeps its outcome, its spend and its log
        (res,) = fed.state_dir(name).glob("*.result.json")
        mine = json.loads(res.read_text())
        assert mine["status"] == "submitted" and mine["mechanism"] == mechanism
        ledger = json.loads((fed.state_dir(name) / "dpauc-budget.json").read_text())
        assert [e["epsilon"] for e in ledger["spends"]] == [1.0]  # scores included
        assert "submitted noisy statistics" in fed.log_path(name).read_text()
    from fedsec.runtime.node_host import inline_state

    assert not [k for k in inline_state() if k[0] == grid.run_id]  # states dropped


def test_rr_noiseless_path_equals_in_process(federation: Callable[..., Federation],
                                             local_grid: Callable[..., LocalGrid],
                                             tmp_path: Path) -> None:
    """Randomized response at an epsilon where no label flips (a node that allows it) is the
    exact statistic: the same number as the in-process run, with real samplers."""
    fed, paths = _fed(federation, tmp_path)
    grid = local_grid(_nodes(fed, **{"max-epsilon": 60.0, "allow-score-histogram": True}),
                      {})
    doc = _run(grid, fed, tmp_path, **{"dpauc-mechanism": "rr", "dpauc-epsilon": 50.0})
    assert doc["status"] == "done", doc
    with pytest.warns(PrivacyWarning):
        ref = dp.dpauc(_parties(paths), epsilon=50.0, decision_points=N_POINTS,
                       mechanism="rr")
    assert doc["auc"] == ref.auc
    assert "privacy:" in fed.log_path(NAMES[0]).read_text()  # the node logged the warning


# ------------------------------------------------------------------ the policy
@pytest.mark.parametrize("run_config,node_config,check", [
    ({"dpauc-epsilon": 2.0}, {}, "policy:epsilon"),
    ({"dpauc-mechanism": "rr", "dpauc-epsilon": 0.5, "dpauc-score-epsilon": 0.6}, {},
     "policy:epsilon"),
    ({"dpauc-mechanism": "rr", "dpauc-epsilon": 0.5}, {}, "policy:score-noise"),
    ({"dpauc-mechanism": "gaussian", "dpauc-delta": 1e-3}, {}, "policy:delta"),
    ({"dpauc-mechanism": "gaussian", "dpauc-delta": 1e-6}, {"mechanisms": "laplace"},
     "policy:mechanism"),
    ({"decision-points": 5000}, {"max-decision-points": 1000}, "policy:decision-points"),
    ({}, {"max-epsilon": "lots"}, "node-config"),
])
def test_party_policy_refuses_the_run(run_config: dict[str, Any],
                                      node_config: dict[str, Any], check: str,
                                      federation: Callable[..., Federation],
                                      local_grid: Callable[..., LocalGrid],
                                      tmp_path: Path) -> None:
    fed, _paths = _fed(federation, tmp_path)
    grid = local_grid(_nodes(fed, **node_config), {})
    doc = _run(grid, fed, tmp_path, **run_config)
    assert doc["status"] == "failed" and "auc" not in doc
    assert "only 0 parties remain" in doc["error"]
    assert set(_checks(grid, "dpauc_hello").values()) == {check}
    assert [e["check"] for e in doc["parties"]["left_out"]] == [check] * 3
    for name in NAMES:  # nothing spent
        assert not (fed.state_dir(name) / "dpauc-budget.json").exists()


def test_budget_over_runs(federation: Callable[..., Federation],
                          local_grid: Callable[..., LocalGrid], tmp_path: Path) -> None:
    fed, _paths = _fed(federation, tmp_path)
    nodes = _nodes(fed, **{"budget-epsilon": 1.5})
    first = _run(local_grid(nodes, {}, run_id=21), fed, tmp_path, **{"dpauc-epsilon": 1.0})
    assert first["status"] == "done", first
    grid = local_grid(nodes, {}, run_id=22)
    second = _run(grid, fed, tmp_path, **{"dpauc-epsilon": 1.0})
    assert second["status"] == "failed"
    assert set(_checks(grid, "dpauc_hello").values()) == {"policy:budget"}
    third = _run(local_grid(nodes, {}, run_id=23), fed, tmp_path, **{"dpauc-epsilon": 0.5})
    assert third["status"] == "done"


def test_invalid_party_file_stops_the_run_attributed(federation: Callable[..., Federation],
                                                     local_grid: Callable[..., LocalGrid],
                                                     tmp_path: Path) -> None:
    fed, _paths = _fed(federation, tmp_path)
    fed.data_path("clinic-b").write_text("label,score\n1,0.5\n0,oops\n")
    grid = local_grid(_nodes(fed), {})
    doc = _run(grid, fed, tmp_path)
    assert doc["status"] == "failed"
    assert "only 2 parties remain; at least 3 are required" in doc["error"]
    assert doc["parties"]["left_out"] == [{"party": "node-102", "node": 102,
                                           "step": "dpauc_hello", "check": "input-invalid",
                                           "reason": "refused: input-invalid"}]
    assert "oops" not in json.dumps(doc)
    assert "input-invalid" in fed.log_path("clinic-b").read_text()


def test_run_config_is_validated() -> None:
    from fedsec.runtime.flower_dpauc import DPAUCOptions

    for cfg, msg in [({"dpauc-mechanism": "exp"}, "'dpauc-mechanism' run config must be"),
                     ({"dpauc-epsilon": 0.0}, "'dpauc-epsilon' run config must be > 0"),
                     ({"dpauc-mechanism": "gaussian"}, "'dpauc-delta' run config must be"),
                     ({"dpauc-delta": 0.1}, "applies only to mechanism 'gaussian'"),
                     ({"dpauc-score-epsilon": 1.0}, "applies only to mechanism 'rr'"),
                     ({"decision-points": 1}, "'decision-points' run config must be"),
                     ({"dpauc-clip": "maybe"}, "dpauc-clip"),
                     ({"step-timeout": 0}, "'step-timeout'")]:
        with pytest.raises(ValueError, match=msg):
            DPAUCOptions.from_run_config(cfg)
    with pytest.raises(ValueError, match="'roster-path' run config must name"):
        DPAUCOptions.from_run_config({}).load_roster()


# ----------------------------------------------------------------- the relay
def _relay_grid(local_grid: Callable[..., LocalGrid],
                tamper: Callable[[str, int, list[bytes]], list[bytes]]) -> type:
    """A LocalGrid whose replies pass through ``tamper(step, node, blobs)`` (the SuperLink
    or anyone between a party and the ServerApp)."""

    class Relay(local_grid):  # type: ignore[misc, valid-type]
        def pull_messages(self, message_ids: Any) -> list[Any]:
            from fedsec.runtime import flower_io

            out = super().pull_messages(message_ids)
            for msg in out:
                step = next(s for s, _n, m in self.replies if m is msg)
                node = next(n for _s, n, m in self.replies if m is msg)
                blobs = flower_io.get_blobs(msg.content)
                flower_io.put_blobs(msg.content, tamper(step, node, blobs))
            return out

    return Relay


def test_relay_reads_only_noisy_statistics_and_cannot_forge_or_move(
        federation: Callable[..., Federation], local_grid: Callable[..., LocalGrid],
        tmp_path: Path) -> None:
    from fedsec.protocol import wire

    fed, paths = _fed(federation, tmp_path, quorum=2)
    seen: dict[tuple[str, int], list[bytes]] = {}

    def forge(step: str, node: int, blobs: list[bytes]) -> list[bytes]:
        seen[(step, node)] = list(blobs)
        if step != "dpauc_submit":
            return blobs
        if node == 102:  # change one statistic of clinic-b, keep its signature
            msg = wire.decode(blobs[0])
            inner = wire.decode(msg.blobs[0])
            body = bytearray(inner.blobs[0])
            body[-1] ^= 1
            payload = wire.encode(inner.kind, inner.meta, [bytes(body)])
            return [wire.encode(msg.kind, msg.meta, [payload, msg.blobs[1]])]
        if node == 103:  # clinic-a's genuine submission in place of clinic-c's
            return seen[("dpauc_submit", 101)]
        return blobs

    grid = _relay_grid(local_grid, forge)(_nodes(fed), {})
    doc = _run(grid, fed, tmp_path)
    assert doc["status"] == "failed"  # one genuine submission is fewer than the quorum
    reasons = {e["party"]: e["reason"] for e in doc["parties"]["left_out"]}
    assert "does not verify" in reasons["clinic-b"]
    assert "signed as 'clinic-a'" in reasons["clinic-c"]
    # what the relay read: a signed nonce, then statistics with Laplace noise of scale
    # 4N/epsilon (Sun et al.), not the party's counts
    exact = dp.local_statistics(*_parties(paths)[0], N_POINTS).stacked()
    sub = dp.parse_submission(wire.decode(wire.decode(
        seen[("dpauc_submit", 101)][0]).blobs[0]).blobs[0])
    assert not np.array_equal(sub.stats.stacked(), exact)


def test_relay_cannot_replay_a_submission_from_another_run(
        federation: Callable[..., Federation], local_grid: Callable[..., LocalGrid],
        tmp_path: Path) -> None:
    fed, _paths = _fed(federation, tmp_path)
    kept: dict[int, list[bytes]] = {}

    def record(step: str, node: int, blobs: list[bytes]) -> list[bytes]:
        if step == "dpauc_submit":
            kept[node] = list(blobs)
        return blobs

    first = _run(_relay_grid(local_grid, record)(_nodes(fed), {}, run_id=31), fed, tmp_path)
    assert first["status"] == "done"

    def replay(step: str, node: int, blobs: list[bytes]) -> list[bytes]:
        return kept[node] if step == "dpauc_submit" and node == 102 else blobs

    second = _run(_relay_grid(local_grid, replay)(_nodes(fed), {}, run_id=32), fed, tmp_path)
    assert second["status"] == "failed" and "auc" not in second
    assert "refused a submission" in second["error"]


def test_relay_cannot_drop_a_party_from_the_session(
        federation: Callable[..., Federation], local_grid: Callable[..., LocalGrid],
        tmp_path: Path) -> None:
    from fedsec.protocol import wire

    fed, _paths = _fed(federation, tmp_path)

    def drop(step: str, node: int, blobs: list[bytes]) -> list[bytes]:
        if step != "dpauc_submit":
            return blobs
        msg = wire.decode(blobs[0])  # the session without the last party's nonce
        return [wire.encode(msg.kind, msg.meta, msg.blobs[:-1])]

    grid = local_grid(_nodes(fed), {}, edit=drop)
    doc = _run(grid, fed, tmp_path)
    assert doc["status"] == "failed"
    checks = _checks(grid, "dpauc_submit")
    assert checks and set(checks.values()) <= {"protocol-error", "policy:quorum"}


# ------------------------------------------------------------------ faults
@pytest.mark.parametrize("quorum,status", [(2, "done"), (None, "failed")])
def test_silent_party_ends_within_timeout(quorum: int | None, status: str,
                                          federation: Callable[..., Federation],
                                          local_grid: Callable[..., LocalGrid],
                                          tmp_path: Path) -> None:
    fed, _paths = _fed(federation, tmp_path, quorum=quorum)

    def crash(grid: LocalGrid, step: str, nodes: list[int]) -> None:
        if step == "dpauc_submit":
            grid.kill(102)

    grid = local_grid(_nodes(fed), {}, before_step=crash)
    t0 = time.monotonic()
    doc = _run(grid, fed, tmp_path)
    assert time.monotonic() - t0 < STEP_TIMEOUT + 5
    assert doc["status"] == status, doc
    assert [e["party"] for e in doc["parties"]["left_out"]] == ["clinic-b"]
    assert "no reply within" in doc["parties"]["left_out"][0]["reason"]
    if status == "done":
        assert doc["parties"]["included"] == ["clinic-a", "clinic-c"]
    else:
        assert "at least 3 are required" in doc["error"]


# -------------------------------------------------------------- deployment
def test_dpauc_deployment_tls(flower: Callable[[Path], Deployment],
                              federation: Callable[..., Federation],
                              tls: tuple[Path, Path, Path], tmp_path: Path) -> None:
    fed, paths = _fed(federation, tmp_path)
    dep = flower(tmp_path / "deploy")
    dep.env["FLWR_SUPEREXEC_TASK_POLL_INTERVAL"] = "0.05"
    dep.start_superlink_tls(*tls)
    for i, name in enumerate(NAMES):
        dep.start_supernode(f"supernode-{i}", fed.node_config(
            name, **{"max-epsilon": 60.0, "allow-score-histogram": True}))
    dep.wait_supernodes([f"supernode-{i}" for i in range(len(NAMES))])
    rc = {"protocol": "dpauc", "roster-path": str(fed.roster_path),
          "decision-points": N_POINTS, "step-timeout": 60.0, "wait-nodes-timeout": 30.0}
    # the noiseless path (no label flips at this epsilon): the in-process number, exactly
    result = tmp_path / "rr.json"
    t0 = time.monotonic()
    dep.flwr_run(APP_DIR, "fedsec-tls", {**rc, "result-path": str(result),
                                         "dpauc-mechanism": "rr", "dpauc-epsilon": 50.0})
    doc = dep.wait_result(result, {"done", "failed"}, 90.0)
    wall = time.monotonic() - t0
    assert doc["status"] == "done", doc
    t1 = time.perf_counter()
    with pytest.warns(PrivacyWarning):
        ref = dp.dpauc(_parties(paths), epsilon=50.0, decision_points=N_POINTS,
                       mechanism="rr")
    inproc = time.perf_counter() - t1
    assert doc["auc"] == ref.auc
    assert sorted(doc["parties"]["included"]) == NAMES and doc["exchanges"] == 2
    print(f"DPAUC deployment: {doc['exchanges']} exchanges, run {wall:.1f}s (ServerApp "
          f"{doc['timings']['total_s']}s: hello {doc['timings']['dpauc_hello_s']}s, submit "
          f"{doc['timings']['dpauc_submit_s']}s), in-process {inproc * 1000:.1f} ms")
    for name in NAMES:
        ledger = json.loads((fed.state_dir(name) / "dpauc-budget.json").read_text())
        assert [e["epsilon"] for e in ledger["spends"]] == [50.0]
