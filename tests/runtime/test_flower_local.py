"""The Flower runtime's protocol flow, in-process: the real ServerApp ``main`` and the real
ClientApp handlers, connected by ``LocalGrid`` (tests/runtime/conftest.py) instead of a
SuperLink. Each party has its own identity file, roster, CSV, state directory and log
(``federation`` fixture), exactly as its SuperNode would.

Prepare: a federation and each node's config. Execute: ``flower_server.main`` with a run
config, optionally killing a node or rewriting what the server sends. Assert: the result
JSON, every reply the parties sent (check names only, never data), the parties' own
result files and logs.

The same flows across real processes (TLS deployment, simulation) are in
``test_flower_fhauc.py``.
"""

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
    pytest.importorskip(
        "flwr", reason="Flower is optional: pip install 'fedsec[flower]' (flwr==1.41.0)"
    )

from fedsec.data.io import load_party_csv, write_party_csv  # noqa: E402
from fedsec.errors import PolicyViolation, ProtocolError, TamperingDetected  # noqa: E402
from fedsec.metrics import trapezoid_auc  # noqa: E402

N_POINTS = 64
NAMES = ["clinic-a", "clinic-b", "clinic-c"]
STEP_TIMEOUT = 0.5  # in-process replies are immediate; a killed node costs this much

Federation = Any  # tests/runtime/conftest.py:Federation (not importable by name)
LocalGrid = Any  # tests/runtime/conftest.py:LocalGrid


# ------------------------------------------------------------------------- helpers
def _data(fed: Federation, seed: int = 3) -> list[Path]:
    rng = np.random.default_rng(seed)
    paths = []
    for name, n in zip(fed.names, (40, 25, 55), strict=True):
        y = rng.integers(0, 2, n)
        s = np.clip(0.3 * y + rng.normal(0.4, 0.25, n), 0.0, 1.0)
        write_party_csv(fed.data_path(name), y, s)
        paths.append(fed.data_path(name))
    return paths


def _plain(paths: list[Path]) -> float:
    data = [load_party_csv(p) for p in paths]
    return trapezoid_auc(np.concatenate([d.y_true for d in data]),
                         np.concatenate([d.y_score for d in data]), N_POINTS)


def _nodes(fed: Federation, **extra: Any) -> dict[int, dict[str, Any]]:
    """Node ids 101, 102, ... -> each party's own node config."""
    per_party = extra.pop("per_party", {})
    return {101 + i: fed.node_config(name, **extra, **per_party.get(name, {}))
            for i, name in enumerate(fed.names)}


def _run(grid: LocalGrid, run_config: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """The ServerApp's main function on ``grid``; returns the result JSON."""
    from flwr.app import Context, RecordDict

    from fedsec.runtime.flower_server import main

    result = tmp_path / "result.json"
    rc = {"result-path": str(result), "decision-points": N_POINTS,
          "step-timeout": STEP_TIMEOUT, "wait-nodes-timeout": 2.0, **run_config}
    grid.run_config.update(rc)
    ctx = Context(run_id=grid.run_id, node_id=0, node_config={}, state=RecordDict(),
                  run_config=rc)
    try:
        main(grid, ctx)
    except Exception:  # noqa: BLE001 - the result JSON says what failed
        pass
    doc: dict[str, Any] = json.loads(result.read_text())
    return doc


def _reply_meta(grid: LocalGrid) -> list[tuple[str, int, dict[str, Any]]]:
    from fedsec.runtime.flower_io import get_meta

    return [(step, node, get_meta(msg.content)) for step, node, msg in grid.replies]


def _assert_no_data_in_replies(grid: LocalGrid, fed: Federation, paths: list[Path]) -> None:
    """What the parties told the server carries no paths, rows, values or exception text."""
    banned = [str(fed.root), "row", "score", "Error", "Traceback"]
    for p in paths:
        banned += [ln.split(",")[1] for ln in p.read_text().splitlines()[1:] if ln][:5]
    for step, _node, meta in _reply_meta(grid):
        for key, value in meta.items():
            if key in ("auc", "included", "name", "quorum", "parties"):
                continue
            text = json.dumps(value)
            assert not any(b in text for b in banned), (step, key, value)
        if meta.get("ok") is False:
            assert set(meta) == {"ok", "check"}, meta


def _party_result(fed: Federation, name: str) -> dict[str, Any]:
    (path,) = fed.state_dir(name).glob("*.result.json")
    out: dict[str, Any] = json.loads(path.read_text())
    return out


def _no_state_left(fed: Federation) -> None:
    for name in fed.names:
        assert list(fed.state_dir(name).glob("*.fedsec")) == [], name


# ------------------------------------------------------------ pieces (no protocol)
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
    from fedsec.runtime.flower_client import NodePolicy, protocol_config
    from fedsec.runtime.flower_server import RunOptions

    default = NodePolicy()
    mal = RunOptions.from_run_config({"security": "malicious", "decision-points": 50})
    cfg = protocol_config(mal.protocol_meta(mal.protocol_config()), default)
    assert isinstance(cfg, MaliciousConfig)
    assert cfg.digest() == mal.protocol_config().digest()  # the same bytes-level config
    sh = RunOptions.from_run_config({"security": "semi-honest", "masking": "pair"})
    assert protocol_config(sh.protocol_meta(sh.protocol_config()), default).digest() == \
        sh.protocol_config().digest()
    strict = NodePolicy.from_node_config({"require-malicious": "true"})
    with pytest.raises(PolicyViolation) as exc:
        protocol_config(sh.protocol_meta(sh.protocol_config()), strict)
    assert exc.value.check == "require-malicious"
    picky = NodePolicy.from_node_config({"min-bound-bits": 80.0})
    with pytest.raises(PolicyViolation) as exc:
        protocol_config(mal.protocol_meta(mal.protocol_config()), picky)
    assert exc.value.check == "cheat-bound"
    loose = RunOptions.from_run_config({"security": "malicious", "tolerance": 1e-5,
                                        "min-bound-bits": 0.0})
    with pytest.raises(PolicyViolation) as exc:  # the run config cannot loosen a party
        protocol_config(loose.protocol_meta(loose.protocol_config()), default)
    assert exc.value.check == "tolerance"
    for bad in ({}, {"security": "malicious", "decision-points": "50", "preset": "x"},
                {"security": "semi-honest", "decision-points": 50, "preset": "x"}):
        with pytest.raises(ProtocolError):
            protocol_config(bad, default)
    huge = {"security": "semi-honest", "decision-points": 10**12,
            "preset": "CKKS_128_N8192_DEPTH1_S39"}
    with pytest.raises(PolicyViolation) as exc:  # refused before allocating anything
        protocol_config(huge, default)
    assert exc.value.check == "decision-points"


def test_node_policy_from_node_config() -> None:
    from fedsec.runtime.flower_client import NodePolicy

    p = NodePolicy.from_node_config({})
    assert p.party.quorum is None and not p.require_malicious
    assert p.shares_auc("malicious") and not p.shares_auc("semi-honest")
    p = NodePolicy.from_node_config({"quorum": 2, "share-auc": "false",
                                     "max-tolerance": 1e-8, "max-decision-points": 128})
    assert p.party.quorum == 2 and p.party.max_tolerance == 1e-8
    assert not p.shares_auc("malicious") and p.party.max_decision_points == 128
    for bad in ({"quorum": "two"}, {"quorum": 1}, {"share-auc": "maybe"},
                {"min-bound-bits": "nan"}, {"quorum": 2.5}):
        with pytest.raises(ValueError):
            NodePolicy.from_node_config(bad)


def test_check_names_carry_no_data() -> None:
    from fedsec.runtime.flower_client import NodeCheckFailed, check_name

    assert check_name(PolicyViolation("3 < 4 at /etc/x", check="quorum")) == "policy:quorum"
    assert check_name(TamperingDetected("auc 0.73", check="double-execution")) == \
        "tampering:double-execution"
    assert check_name(ProtocolError("row 7: 0.123")) == "protocol-error"
    assert check_name(ValueError("/home/x.csv row 7")) == "internal-error"
    assert check_name(NodeCheckFailed("input-invalid", "/x.csv row 3")) == "input-invalid"
    assert check_name(TamperingDetected("x", check="0.731 (leak)")) == "internal-error"


@pytest.mark.parametrize("bad, match", [
    ({"security": "honest"}, "security"),
    ({"num-nodes": 3, "min-parties": 4}, "min-parties"),
    ({"step-timeout": 0.0}, "step-timeout"),
    ({"max-restarts": -1}, "max-restarts"),
    ({"pause-after": "lunch"}, "pause-after"),
    ({"decision-points": "many"}, "run config"),
])
def test_run_options_reject_bad_values(bad: dict[str, Any], match: str) -> None:
    from fedsec.runtime.flower_server import RunOptions

    with pytest.raises(ValueError, match=match):
        RunOptions.from_run_config(bad)


# ----------------------------------------------------------------------- happy paths
def test_malicious_run_in_process(federation: Callable[..., Federation],
                                  local_grid: Callable[..., LocalGrid],
                                  tmp_path: Path) -> None:
    fed = federation(tmp_path / "fed", NAMES)
    paths = _data(fed)
    grid = local_grid(_nodes(fed), {})
    doc = _run(grid, {"security": "malicious", "roster-path": str(fed.roster_path)},
               tmp_path)
    assert doc["status"] == "done", doc
    assert doc["verified"] is True and doc["parties"]["included"] == NAMES
    assert doc["auc"] == pytest.approx(_plain(paths), abs=1e-6)
    assert doc["quorum"] == {"required": 3, "parties": 3, "roster": None, "min_parties": 0,
                             "whole_roster": True}
    steps = [s for s, _n, _m in _reply_meta(grid)]
    # five exchanges: each party's signed commit rides with its delivery, its submission
    # with the confirmations
    assert steps == ["hello"] * 3 + ["offer"] + ["deliver"] * 3 + ["confirmed"] * 3 + \
        ["finalize"] * 3
    _assert_no_data_in_replies(grid, fed, paths)
    _no_state_left(fed)
    for name in NAMES:
        mine = _party_result(fed, name)
        assert mine["status"] == "ok" and mine["auc"] == pytest.approx(doc["auc"], abs=1e-6)


def test_semi_honest_parties_keep_the_auc_by_default(federation: Callable[..., Federation],
                                                    local_grid: Callable[..., LocalGrid],
                                                    tmp_path: Path) -> None:
    """Semi-honest mode trusts the aggregator to follow the protocol; a deviating one
    could read a party's decryption, so by default parties keep the AUC: the server
    learns only that they accepted the result."""
    fed = federation(tmp_path / "fed", NAMES)
    paths = _data(fed)
    grid = local_grid(_nodes(fed), {})
    doc = _run(grid, {"security": "semi-honest", "roster-path": str(fed.roster_path)},
               tmp_path)
    assert doc["status"] == "done", doc
    assert "auc" not in doc and doc["auc_shared_by"] == [] and doc["verified"] is False
    finals = [m for s, _n, m in _reply_meta(grid) if s == "finalize"]
    assert all(m["ok"] and "auc" not in m and m["shared"] is False for m in finals)
    for name in NAMES:  # ...each party has it, on its own machine
        assert _party_result(fed, name)["auc"] == pytest.approx(_plain(paths), abs=1e-6)
        assert "result: AUC" in fed.log_path(name).read_text()


def test_threshold_keys_run_in_process(federation: Callable[..., Federation],
                                       local_grid: Callable[..., LocalGrid],
                                       tmp_path: Path) -> None:
    """``keys = "threshold"``: the signed key set-up (result key), the collective key
    set-up, submissions under the collective key, every party's key switch of the
    aggregate it recomputed, and each party's own AUC - equal to the plaintext."""
    fed = federation(tmp_path / "fed", NAMES)
    paths = _data(fed)
    grid = local_grid(_nodes(fed), {})
    doc = _run(grid, {"security": "semi-honest", "keys": "threshold",
                      "roster-path": str(fed.roster_path), "step-timeout": 120.0}, tmp_path)
    assert doc["status"] == "done", doc
    assert doc["keys"] == "threshold" and doc["preset"] == "CKKS_128_N16384_DEPTH1_S60"
    steps = [s for s, _n, _m in _reply_meta(grid)]
    for step in ("mk_reveal", "mk_relin", "mk_check", "mk_finish", "t_share"):
        assert step in steps
    for name in NAMES:
        assert _party_result(fed, name)["auc"] == pytest.approx(_plain(paths), abs=1e-9)
    _assert_no_data_in_replies(grid, fed, paths)
    _no_state_left(fed)


def test_threshold_keys_malicious_run_in_process(federation: Callable[..., Federation],
                                                 local_grid: Callable[..., LocalGrid],
                                                 tmp_path: Path) -> None:
    """``keys = "threshold"`` against a malicious aggregator: commits after the collective
    set-up, the start message, signed submissions, the key switch, and every party
    verifies the answer."""
    fed = federation(tmp_path / "fed", NAMES)
    paths = _data(fed)
    grid = local_grid(_nodes(fed, security="malicious"), {})
    doc = _run(grid, {"security": "malicious", "keys": "threshold",
                      "roster-path": str(fed.roster_path), "step-timeout": 120.0}, tmp_path)
    assert doc["status"] == "done", doc
    assert doc["verified"] is True and doc["keys"] == "threshold"
    for name in NAMES:
        res = _party_result(fed, name)
        assert res["verified"] is True
        assert res["auc"] == pytest.approx(_plain(paths), abs=1e-6)
    _assert_no_data_in_replies(grid, fed, paths)
    _no_state_left(fed)


# --------------------------------------------------------------- errors never leak
def test_bad_csv_is_reported_locally_as_a_check_name(federation: Callable[..., Federation],
                                                     local_grid: Callable[..., LocalGrid],
                                                     tmp_path: Path) -> None:
    """A party whose CSV is invalid tells the server ``input-invalid`` and nothing else;
    the file, row and value are in its own log. By default the run stops, naming the
    node and the check; with allow-left-out, semi-honest goes on with the two others
    (every party's quorum is 2)."""
    fed = federation(tmp_path / "fed", NAMES)
    paths = _data(fed)
    bad = fed.data_path(NAMES[1])
    bad.write_text(bad.read_text() + "1,1.4375\n")  # row 27: score out of range
    grid = local_grid(_nodes(fed, **{"share-auc": True}), {})
    stopped = _run(grid, {"security": "semi-honest", "roster-path": str(fed.roster_path)},
                   tmp_path)
    assert stopped["status"] == "failed" and "auc" not in stopped
    assert "node-102 refused with input-invalid" in stopped["error"]
    assert "allow-left-out=true" in stopped["error"]
    grid = local_grid(_nodes(fed, **{"share-auc": True}), {}, run_id=12)
    doc = _run(grid, {"security": "semi-honest", "roster-path": str(fed.roster_path),
                      "allow-left-out": True}, tmp_path)
    assert doc["status"] == "done", doc
    assert doc["parties"]["left_out"] == [{"party": "node-102", "node": 102, "step": "hello",
                                          "reason": "refused: input-invalid",
                                          "check": "input-invalid"}]
    assert doc["auc"] == pytest.approx(_plain([paths[0], paths[2]]), abs=1e-6)
    assert ("hello", 102, {"ok": False, "check": "input-invalid"}) in _reply_meta(grid)
    _assert_no_data_in_replies(grid, fed, paths)
    log = fed.log_path(NAMES[1]).read_text()
    assert str(bad) in log and "row 27" in log and "1.4375" in log
    assert "1.4375" not in json.dumps(doc) and "row 27" not in json.dumps(doc)


def test_tampered_result_is_reported_as_a_check_name(federation: Callable[..., Federation],
                                                     local_grid: Callable[..., LocalGrid],
                                                     tmp_path: Path) -> None:
    """A deviating aggregator sends each party an altered result: every party answers
    ``tampering:<check>`` - no decrypted value - and the run fails."""
    from fedsec.protocol import wire

    fed = federation(tmp_path / "fed", NAMES)
    paths = _data(fed)

    def swap_runs(step: str, _node: int, blobs: list[bytes]) -> list[bytes]:
        if step != "finalize":
            return blobs
        msg = wire.decode(blobs[0])
        ct = bytearray(msg.blobs[0])
        ct[len(ct) // 2] ^= 0x40   # one flipped bit in the (packed) result ciphertext
        return [wire.encode(msg.kind, msg.meta, [bytes(ct)]), blobs[1]]

    grid = local_grid(_nodes(fed), {}, edit=swap_runs)
    doc = _run(grid, {"security": "malicious", "roster-path": str(fed.roster_path)},
               tmp_path)
    assert doc["status"] == "failed" and "auc" not in doc and doc["verified"] is False
    checks = {r["check"] for r in doc["party_results"].values()}
    assert len(checks) == 1 and checks.pop().startswith("tampering:"), doc["party_results"]
    assert "parties rejected the result" in doc["error"]
    _assert_no_data_in_replies(grid, fed, paths)
    _no_state_left(fed)
    assert _party_result(fed, NAMES[0])["status"] == "failed"
    assert "TamperingDetected" in fed.log_path(NAMES[0]).read_text()


def test_party_policy_refusals(federation: Callable[..., Federation],
                               local_grid: Callable[..., LocalGrid], tmp_path: Path) -> None:
    """A party that requires malicious security refuses a semi-honest run at hello
    (``policy:require-malicious``); the others go on without it."""
    fed = federation(tmp_path / "fed", NAMES)
    _data(fed)
    nodes = _nodes(fed, per_party={NAMES[0]: {"require-malicious": True}})
    grid = local_grid(nodes, {})
    doc = _run(grid, {"security": "semi-honest", "roster-path": str(fed.roster_path)},
               tmp_path)
    assert doc["status"] == "done", doc
    assert [(e["node"], e["check"]) for e in doc["parties"]["left_out"]] == \
        [(101, "policy:require-malicious")]
    assert doc["parties"]["included"] == NAMES[1:]


def test_node_without_identity_or_roster(federation: Callable[..., Federation],
                                         local_grid: Callable[..., LocalGrid],
                                         tmp_path: Path) -> None:
    """Identities are never made by or fetched from the server: a node without its own
    identity and roster cannot take part."""
    fed = federation(tmp_path / "fed", NAMES)
    _data(fed)
    nodes = _nodes(fed)
    nodes[101].pop("identity-path")
    fed.identity_path(NAMES[1]).chmod(0o644)
    nodes[103]["roster-path"] = str(tmp_path / "nowhere.json")
    grid = local_grid(nodes, {})
    doc = _run(grid, {"security": "semi-honest", "roster-path": str(fed.roster_path)},
               tmp_path)
    assert doc["status"] == "failed"
    refusals = {n: m["check"] for s, n, m in _reply_meta(grid) if s == "hello"}
    assert refusals == {101: "node-config", 102: "identity-invalid", 103: "roster-invalid"}


def test_strangers_are_asked_and_left_out(federation: Callable[..., Federation],
                                          local_grid: Callable[..., LocalGrid],
                                          tmp_path: Path) -> None:
    """Nodes that are not roster parties connect first: every connected node is asked,
    the signed hellos decide. One plays another federation's roster (its hello does not
    verify against ours), one has an identity that is not on our roster (it refuses)."""
    fed = federation(tmp_path / "fed", NAMES)
    paths = _data(fed)
    other = federation(tmp_path / "other", ["mallory", "trent"])
    write_party_csv(other.data_path("mallory"), [0, 1], [0.2, 0.9])
    nodes = _nodes(fed)
    nodes[99] = other.node_config("mallory")
    nodes[100] = {**other.node_config("mallory"), "roster-path": str(fed.roster_path)}
    grid = local_grid(nodes, {})
    doc = _run(grid, {"security": "malicious", "roster-path": str(fed.roster_path)},
               tmp_path)
    assert doc["status"] == "done", doc
    assert doc["parties"]["included"] == NAMES
    left = {e["node"]: e["reason"] for e in doc["parties"]["left_out"]}
    assert left[99].startswith("hello rejected: hello from a party not on the roster")
    assert left[100] == "refused: identity-not-on-roster"
    assert doc["auc"] == pytest.approx(_plain(paths), abs=1e-6)


# ----------------------------------------------------------------------- drop-outs
def _kill_before(step: str, node: int, how: str = "silent"
                 ) -> Callable[[Any, str, list[int]], None]:
    def hook(grid: Any, current: str, _nodes: list[int]) -> None:
        if current == step:
            grid.kill(node, how)
    return hook


def test_semi_honest_continues_over_survivors(federation: Callable[..., Federation],
                                              local_grid: Callable[..., LocalGrid],
                                              tmp_path: Path) -> None:
    fed = federation(tmp_path / "fed", NAMES)
    paths = _data(fed)
    grid = local_grid(_nodes(fed, **{"share-auc": True}), {},
                      before_step=_kill_before("confirmed", 103, "offline"))
    doc = _run(grid, {"security": "semi-honest", "roster-path": str(fed.roster_path)},
               tmp_path)
    assert doc["status"] == "done", doc
    assert doc["parties"]["included"] == NAMES[:2]
    # a semi-honest party submits with its confirmation: it drops out at that step
    assert [(e["party"], e["step"]) for e in doc["parties"]["left_out"]] == \
        [(NAMES[2], "confirmed")]
    assert doc["auc"] == pytest.approx(_plain(paths[:2]), abs=1e-6)


def test_malicious_drop_out_stops_by_default(federation: Callable[..., Federation],
                                             local_grid: Callable[..., LocalGrid],
                                             tmp_path: Path) -> None:
    """Parties require the whole roster in malicious mode unless told otherwise: a
    party that crashes after its commit stops the run with a clear error, no result."""
    fed = federation(tmp_path / "fed", NAMES)
    _data(fed)
    # the commit rode with the delivery; the party crashes before its submission (which
    # rides with the confirmation)
    grid = local_grid(_nodes(fed), {}, before_step=_kill_before("confirmed", 102))
    doc = _run(grid, {"security": "malicious", "roster-path": str(fed.roster_path)},
               tmp_path)
    assert doc["status"] == "failed" and "auc" not in doc
    assert doc["restarts"] == []
    err = doc["error"]
    assert "only 2 parties remain" in err and "whole roster" in err
    assert "at least 3 are required" in err
    assert [(e["party"], e["step"]) for e in doc["parties"]["left_out"]] == \
        [(NAMES[1], "confirmed")]


@pytest.mark.parametrize("where", ["roster", "node-config"])
def test_malicious_drop_out_restarts_with_a_lower_quorum(
        federation: Callable[..., Federation], local_grid: Callable[..., LocalGrid],
        tmp_path: Path, where: str) -> None:
    """With a quorum of 2 (in the roster, or in every party's own policy) the commit round
    restarts over the survivors with fresh nonces; the verified AUC is theirs."""
    fed = federation(tmp_path / "fed", NAMES, quorum=2 if where == "roster" else None)
    paths = _data(fed)
    extra = {"quorum": 2} if where == "node-config" else {}
    grid = local_grid(_nodes(fed, **extra), {},
                      before_step=_kill_before("confirmed", 102))
    doc = _run(grid, {"security": "malicious", "roster-path": str(fed.roster_path)},
               tmp_path)
    assert doc["status"] == "done", doc
    assert doc["parties"]["included"] == [NAMES[0], NAMES[2]] and doc["verified"] is True
    assert len(doc["restarts"]) == 1 and doc["restarts"][0]["step"] == "submit"
    assert "commit#1" in doc["bytes"] and "submit#1" in doc["bytes"]
    assert doc["auc"] == pytest.approx(_plain([paths[0], paths[2]]), abs=1e-6)


def test_no_submission_at_all_is_not_a_restart(federation: Callable[..., Federation],
                                               local_grid: Callable[..., LocalGrid],
                                               tmp_path: Path) -> None:
    """Every node too slow for ``step-timeout`` (what a loaded machine did to the old
    drop-out test): the run says so instead of "restarting over 0 survivors"."""
    fed = federation(tmp_path / "fed", NAMES, quorum=2)
    _data(fed)

    def all_silent(grid: Any, step: str, _nodes: list[int]) -> None:
        if step == "confirmed":
            for n in list(grid.node_configs):
                grid.kill(n)

    grid = local_grid(_nodes(fed), {}, before_step=all_silent)
    doc = _run(grid, {"security": "malicious", "roster-path": str(fed.roster_path)},
               tmp_path)
    assert doc["status"] == "failed" and doc["restarts"] == []
    assert "only 0 parties remain" in doc["error"], doc["error"]
    assert all(e["reason"].startswith("no reply within")
               for e in doc["parties"]["left_out"]), doc["parties"]["left_out"]


def test_key_holder_drop_out_restarts_key_setup(federation: Callable[..., Federation],
                                                local_grid: Callable[..., LocalGrid],
                                                tmp_path: Path) -> None:
    """The key holder (fixed by the transcript) does not answer: key set-up restarts over
    the others; the new transcript fixes a new key holder."""
    fed = federation(tmp_path / "fed", NAMES)
    paths = _data(fed)
    victim: list[int] = []

    def kill_holder(grid: Any, step: str, nodes: list[int]) -> None:
        if step == "offer" and not victim:
            victim.extend(nodes)
            grid.kill(nodes[0])

    grid = local_grid(_nodes(fed, **{"share-auc": True}), {}, before_step=kill_holder)
    doc = _run(grid, {"security": "semi-honest", "roster-path": str(fed.roster_path)},
               tmp_path)
    assert doc["status"] == "done", doc
    gone = fed.names[victim[0] - 101]
    assert [(e["party"], e["step"]) for e in doc["parties"]["left_out"]] == [(gone, "offer")]
    assert doc["restarts"][0]["step"] == "offer" and doc["key_holder"] != gone
    survivors = [p for p, n in zip(paths, fed.names, strict=True) if n != gone]
    assert doc["auc"] == pytest.approx(_plain(survivors), abs=1e-6)


# ------------------------------------------------------ exact mode on Flower (issue 23)
@pytest.mark.parametrize("security", ["semi-honest", "malicious"])
def test_exact_mode_runs_on_flower(federation: Callable[..., Federation],
                                   local_grid: Callable[..., LocalGrid], tmp_path: Path,
                                   security: str) -> None:
    """``decision-points='exact'``: refinement rounds (``refine``, ``marks``) over every
    party, then the evaluation on the refined grid; the same AUC and certified-zero bound
    as the in-process exact mode on the same files, the exact AUC to the counts' noise."""
    from sklearn.metrics import roc_auc_score

    import fedsec

    fed = federation(tmp_path / "fed", NAMES)
    paths = _data(fed)
    grid = local_grid(_nodes(fed, **{"share-auc": "true"}), {})
    doc = _run(grid, {"security": security, "roster-path": str(fed.roster_path),
                      "decision-points": "exact"}, tmp_path)
    assert doc["status"] == "done", doc
    data = [load_party_csv(p) for p in paths]
    y = np.concatenate([d.y_true for d in data])
    s = np.concatenate([d.y_score for d in data])
    assert doc["exact"]["stopped"] == "no-pair-left" and doc["exact"]["rounds"]
    assert doc["decision_points"] == doc["exact"]["final_points"] > 1000
    assert doc["auc"] == pytest.approx(roc_auc_score(y, s), abs=1e-6)
    # the shared bound covers the shared (6-digit) AUC: only the rounding is left
    assert 0.0 < doc["error_bound"] <= 1e-6
    assert abs(doc["auc"] - roc_auc_score(y, s)) <= doc["error_bound"] + 1e-9
    inproc = fedsec.secure_auc([(d.y_true, d.y_score) for d in data], security=security,
                               decision_points="exact")
    assert inproc.decision_points == doc["decision_points"]   # the same refined grid
    assert doc["auc"] == pytest.approx(inproc.auc, abs=1e-6)
    steps = [st for st, _n, _m in _reply_meta(grid)]
    rounds = len(doc["exact"]["rounds"])
    assert steps.count("refine") == steps.count("marks") == 3 * rounds
    _assert_no_data_in_replies(grid, fed, paths)
    for name in NAMES:
        mine = _party_result(fed, name)
        assert mine["status"] == "ok" and mine["error_bound"] == 0.0


def test_exact_mode_refinement_answer_forged_on_flower(
        federation: Callable[..., Federation], local_grid: Callable[..., LocalGrid],
        tmp_path: Path) -> None:
    """A server that answers a refinement round with a function of one party's submission
    (the oracle of issue 22; ``fedsec.testing.exact.RefinementForger``, fed the bytes the
    server holds) is caught by the parties' canaries: every party refuses
    (``tampering:canary``) and the run stops before any evaluation."""
    from fedsec.protocol import wire
    from fedsec.protocol.network import Envelope
    from fedsec.runtime.flower_io import get_blob
    from fedsec.testing.exact import RefinementForger

    fed = federation(tmp_path / "fed", NAMES)
    paths = _data(fed)
    forger = RefinementForger("one-party", victim=0)
    holder: dict[str, Any] = {}

    def forge(step: str, _node: int, blobs: list[bytes]) -> list[bytes]:
        if step != "marks":
            return blobs
        if "forged" not in holder:   # the same forged answer to every party
            bins = [msg for st, _n, msg in holder["grid"].replies if st == "refine"]
            forger([Envelope(f"party:{i}", "aggregator", get_blob(m.content))
                    for i, m in enumerate(bins[-len(NAMES):])])
            out = forger([Envelope("aggregator", "*", blobs[0])])
            assert out is not None
            holder["forged"] = out[0].payload
        return [holder["forged"]]

    grid = local_grid(_nodes(fed), {}, edit=forge)
    holder["grid"] = grid
    doc = _run(grid, {"security": "malicious", "roster-path": str(fed.roster_path),
                      "decision-points": "exact"}, tmp_path)
    assert forger.forged, "the forgery was not sent"
    assert wire.decode(holder["forged"]).kind == "fhauc-exact/pairs"
    assert doc["status"] == "failed" and "auc" not in doc
    assert "refinement round 1" in doc["error"]
    steps = [st for st, _n, _m in _reply_meta(grid)]
    assert "submit" not in steps and "commit" not in steps
    refusals = {m.get("check") for st, _n, m in _reply_meta(grid) if st == "marks"}
    assert refusals == {"tampering:canary"}, refusals
    _assert_no_data_in_replies(grid, fed, paths)


def test_exact_mode_party_reads_one_answer_per_round(
        federation: Callable[..., Federation], local_grid: Callable[..., LocalGrid],
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server whose refinement answer was refused cannot retry the round (it would
    learn, answer by answer, which slots are canaries): a node deletes its keys and state
    after any failure, so the honest answer sent after the refused one gets
    ``out-of-order`` from every party."""
    from fedsec.runtime import flower_server

    fed = federation(tmp_path / "fed", NAMES)
    _data(fed)
    real_step = flower_server.ServerRun.step
    second: dict[str, Any] = {}
    forged: set[int] = set()

    def twice(self: Any, name: str, contents: Any, **kw: Any) -> Any:
        out = real_step(self, name, contents, **kw)
        if name == "marks" and "replies" not in second:
            second["first"] = out
            second["replies"] = real_step(self, name, contents, **kw)
        return out

    def flip_once(step: str, node: int, blobs: list[bytes]) -> list[bytes]:
        if step != "marks" or node in forged:
            return blobs
        forged.add(node)
        return [blobs[0][:-1] + bytes([blobs[0][-1] ^ 1])]   # malformed: refused, not read

    monkeypatch.setattr(flower_server.ServerRun, "step", twice)
    grid = local_grid(_nodes(fed), {}, edit=flip_once)
    _run(grid, {"security": "semi-honest", "roster-path": str(fed.roster_path),
                "decision-points": "exact"}, tmp_path)
    assert second["first"].ok == {} and second["replies"].ok == {}
    assert set(second["replies"].refused.values()) == {"out-of-order"}


# ------------------------------------------------------------------ the relay as adversary
def test_relay_reads_no_secret_and_cannot_forge_or_replay(
        federation: Callable[..., Federation], local_grid: Callable[..., LocalGrid],
        tmp_path: Path) -> None:
    """The ServerApp and SuperLink relay every key set-up message. Read: no byte that
    reaches the server carries a party's CKKS secret key or shared seed. Forge: a flipped
    byte in a relayed delivery box or confirmation bundle is refused (check name, no
    result). Replay: a delivery box of an earlier run, relayed into a new run, is refused."""
    from fedsec.crypto.keysetup import PartyKeys
    from fedsec.runtime.flower_io import get_blobs

    fed = federation(tmp_path / "fed", NAMES)
    _data(fed)
    rc = {"security": "malicious", "roster-path": str(fed.roster_path)}
    seen: dict[str, list[bytes]] = {}
    secrets_: list[bytes] = []

    def record(step: str, node: int, blobs: list[bytes]) -> list[bytes]:
        seen.setdefault(f"{step}:{node}", []).extend(blobs)
        if step == "finalize":  # every party holds its keys now: read them from its disk
            for name in NAMES:
                for f in fed.state_dir(name).glob("*.fedsec"):
                    from fedsec.protocol import wire
                    state = wire.decode(f.read_bytes())
                    fields = dict(zip(state.meta["fields"], state.blobs, strict=True))
                    keys = PartyKeys.from_bytes(fields["keys"], allow_insecure=True)
                    secrets_.extend([keys.context.secret_bytes(), keys.seed])
        return blobs

    grid = local_grid(_nodes(fed), {}, run_id=21, edit=record)
    (tmp_path / "r1").mkdir()
    doc = _run(grid, rc, tmp_path / "r1")
    assert doc["status"] == "done", doc
    assert secrets_, "no key was read"
    received = [b for _s, _n, msg in grid.replies for b in get_blobs(msg.content)]
    sent = [b for blobs in seen.values() for b in blobs]
    for secret in secrets_:
        mid = len(secret) // 2
        probe = secret[mid - 16:mid + 16]
        assert len(probe) == 32
        assert not any(probe in b for b in received + sent)

    def flip(target: str) -> Callable[[str, int, list[bytes]], list[bytes]]:
        def edit(step: str, node: int, blobs: list[bytes]) -> list[bytes]:
            if step == target and node == 102:
                b = bytearray(blobs[0])
                b[len(b) // 2] ^= 1
                return [bytes(b)]
            return blobs
        return edit

    for i, target in enumerate(("deliver", "confirmed")):
        (tmp_path / f"f{i}").mkdir()
        forged = local_grid(_nodes(fed), {}, run_id=30 + i, edit=flip(target))
        bad = _run(forged, {**rc, "max-restarts": 0}, tmp_path / f"f{i}")
        assert bad["status"] == "failed" and "auc" not in bad, bad
        refusals = [m for s, n, m in _reply_meta(forged) if s == target and n == 102]
        assert refusals and refusals[0]["ok"] is False, refusals
        assert set(refusals[0]) == {"ok", "check"}

    old = seen["deliver:102"][0]

    def replay(step: str, node: int, blobs: list[bytes]) -> list[bytes]:
        return [old] if step == "deliver" and node == 102 else blobs

    (tmp_path / "rp").mkdir()
    again = local_grid(_nodes(fed), {}, run_id=40, edit=replay)
    bad = _run(again, {**rc, "max-restarts": 0}, tmp_path / "rp")
    assert bad["status"] == "failed" and "auc" not in bad, bad
    refusals = [m for s, n, m in _reply_meta(again) if s == "deliver" and n == 102]
    assert refusals and refusals[0] == {"ok": False, "check": refusals[0]["check"]}
    # the old delivery's transcript lacks this run's fresh hello of the party
    assert refusals[0]["check"] == "tampering:own-hello", refusals
