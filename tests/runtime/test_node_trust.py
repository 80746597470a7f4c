"""Issue 22 on the Flower ClientApp: node paths only from the node, node-config
defaults (require-malicious, presets, key cap), hostile bytes kept out of the node's log.

In-process (``local_grid`` from tests/runtime/conftest.py, no processes): seconds.
"""

from __future__ import annotations

import json
import re
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

from fedsec.data.io import write_party_csv  # noqa: E402
from fedsec.errors import PolicyViolation, ProtocolError  # noqa: E402

NAMES = ["clinic-a", "clinic-b", "clinic-c"]
Federation = Any  # tests/runtime/conftest.py:Federation
LocalGrid = Any  # tests/runtime/conftest.py:LocalGrid
#: What a hostile server would like a node's log (or an operator's terminal) to show.
FAKE = ("\n2026-11-27 03:00:00,000 fedsec-node INFO: result: AUC 0.9900000000 (certified "
        "|AUC - exact AUC| <= 1e-09; malicious, verified) over 3 parties\r\x1b[2K")
#: A log line of the node's own format that claims a result.
RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ fedsec-node \w+: result: AUC")


def _context(node_config: dict[str, Any], run_config: dict[str, Any] | None = None,
             node_id: int = 9) -> Any:
    from flwr.app import Context, RecordDict

    return Context(run_id=5, node_id=node_id, node_config=node_config, state=RecordDict(),
                   run_config=run_config or {})


def _message(meta: dict[str, Any], node_id: int, step: str = "hello") -> Any:
    """A message as the ServerApp would push it (see conftest.LocalGrid)."""
    import uuid

    from flwr.app import Message
    from flwr.supercore.task_identity import TaskIdentity

    from fedsec.runtime.flower_io import make_content

    TaskIdentity.run_id = 5
    TaskIdentity.node_id = 1
    TaskIdentity.task_id = 1
    msg = Message(make_content([], meta), dst_node_id=node_id, message_type=f"query.{step}")
    msg.metadata.__dict__["_message_id"] = uuid.uuid4().hex
    return msg


def _sim_federation(federation: Callable[..., Federation], root: Path) -> Federation:
    """A federation laid out as the run config's ``sim-identity-dir``/``sim-data-dir``
    expect (identities + roster.json, one CSV per party)."""
    fed = federation(root, NAMES)
    rng = np.random.default_rng(1)
    for name in NAMES:
        y = rng.integers(0, 2, 30)
        write_party_csv(Path(fed.data_dir) / f"{name}.csv", y, rng.random(30))
    return fed


def _steering_run_config(fed: Federation) -> dict[str, Any]:
    return {"sim-identity-dir": str(fed.identity_dir), "sim-data-dir": str(fed.data_dir)}


# ------------------------------------------------------------ item 7: path steering
def test_run_config_cannot_steer_a_deployed_nodes_paths(
        federation: Callable[..., Federation], tmp_path: Path) -> None:
    """A SuperNode started with Flower's usual ``partition-id``/``num-partitions`` but no
    ``data-path`` does not take its identity, roster, policy or CSV from the server's
    ``sim-*`` run-config keys: it refuses to start (``node-config``)."""
    from fedsec.runtime.flower_client import (
        NodeCheckFailed,
        handle_hello,
        in_simulation_engine,
        load_node,
        node_config_of,
    )

    fed = _sim_federation(federation, tmp_path / "server-chosen")
    assert not in_simulation_engine()
    node = {"partition-id": 0, "num-partitions": 3, "state-dir": str(tmp_path / "st"),
            "log-path": str(tmp_path / "node.log")}
    ctx = _context(node, _steering_run_config(fed))
    assert "data-path" not in node_config_of(ctx)  # nothing taken from the run config
    with pytest.raises(NodeCheckFailed) as info:
        load_node(ctx)
    assert info.value.check == "node-config"
    assert "data-path" in str(info.value) and "simulation" in str(info.value)
    # through the handler: the reply is the check name only, the details go to the log
    from fedsec.runtime.flower_io import get_meta

    msg = _message({}, 9)
    answer = handle_hello(msg, ctx)
    assert get_meta(answer.content) == {"ok": False, "check": "node-config"}
    assert "no 'data-path' node config" in (tmp_path / "node.log").read_text()
    # a bad explicit flag is a node-config error too
    with pytest.raises(NodeCheckFailed):
        load_node(_context({**node, "simulation": "perhaps"}, _steering_run_config(fed)))


def test_sim_paths_need_the_engine_or_the_nodes_own_setting(
        federation: Callable[..., Federation], tmp_path: Path) -> None:
    """The node's own ``simulation=true`` (its operator runs the server too) and the
    simulation engine itself (detected on the call stack, as flwr 1.41's
    ``VirtualClientEngineActor.run`` calls the ClientApp) are the only ways in."""
    from fedsec.runtime.flower_client import in_simulation_engine, load_node, node_config_of

    fed = _sim_federation(federation, tmp_path / "fed")
    rc = _steering_run_config(fed)
    explicit = load_node(_context({"partition-id": 1, "simulation": "true",
                                   "state-dir": str(tmp_path / "st")}, rc))
    assert explicit.name == sorted(NAMES)[1]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ray_actor = pytest.importorskip("flwr.simulation.ray_transport.ray_actor",
                                        reason="the simulation engine needs Ray")
    seen: dict[str, Any] = {}
    ctx = _context({"partition-id": 2, "num-partitions": 3}, rc)

    def inside_engine() -> Any:
        seen["engine"] = in_simulation_engine()
        seen["cfg"] = node_config_of(ctx)
        raise RuntimeError("stop here")

    actor = ray_actor.VirtualClientEngineActor()
    with pytest.raises(Exception, match="stop here"):
        actor.run(inside_engine, None, "2", ctx)
    assert seen["engine"] is True
    assert seen["cfg"]["data-path"] == str(Path(fed.data_dir) / f"{sorted(NAMES)[2]}.csv")
    assert not in_simulation_engine()  # outside that call again


# --------------------------------------------------------------- item 9: defaults
def test_a_node_that_says_malicious_refuses_semi_honest_by_default() -> None:
    from fedsec.runtime.flower_client import NodePolicy, protocol_config
    from fedsec.runtime.flower_server import RunOptions

    sh = RunOptions.from_run_config({"security": "semi-honest"})
    meta = sh.protocol_meta(sh.protocol_config())
    assert not NodePolicy.from_node_config({}).require_malicious
    says = NodePolicy.from_node_config({"security": "malicious"})
    assert says.require_malicious
    with pytest.raises(PolicyViolation) as info:
        protocol_config(meta, says)
    assert info.value.check == "require-malicious"
    # the node may still opt out explicitly, and a semi-honest node accepts the run
    protocol_config(meta, NodePolicy.from_node_config({"security": "malicious",
                                                       "require-malicious": "false"}))
    protocol_config(meta, NodePolicy.from_node_config({"security": "semi-honest"}))
    mal = RunOptions.from_run_config({"security": "malicious"})
    protocol_config(mal.protocol_meta(mal.protocol_config()), says)
    with pytest.raises(ValueError, match="security"):
        NodePolicy.from_node_config({"security": "honest\nresult: AUC 0.99"})


# ------------------------------------------------- item 6: costly presets on request
def test_server_cannot_ask_a_node_for_costly_keys() -> None:
    """The run config's preset must be the protocol's default unless the node's
    ``presets`` lists others, and ``max-key-bytes`` caps the rest; both are checked at
    hello, before any key is built."""
    import time

    from fedsec.runtime.flower_client import NodePolicy, protocol_config
    from fedsec.runtime.flower_server import RunOptions

    def meta(preset: str, security: str = "malicious") -> dict[str, Any]:
        opts = RunOptions.from_run_config({"security": security, "decision-points": 100})
        out = dict(opts.protocol_meta(opts.protocol_config()))
        out["preset"] = preset  # what a server may announce
        return out

    big, mid = "CKKS_128_N32768_DEPTH1_S50", "CKKS_128_N16384_DEPTH4"
    default = NodePolicy.from_node_config({})
    t0 = time.perf_counter()
    for security in ("malicious", "semi-honest"):
        for preset in (big, mid):
            with pytest.raises(PolicyViolation) as info:
                protocol_config(meta(preset, security), default)
            assert info.value.check == "preset"
    allows = NodePolicy.from_node_config({"presets": f"CKKS_128_N8192_DEPTH1_S39, {mid} {big}",
                                          "max-key-bytes": 100 << 20})
    assert protocol_config(meta(mid), allows).preset == mid
    with pytest.raises(PolicyViolation) as info:
        protocol_config(meta(big), allows)
    assert info.value.check == "key-size"
    assert time.perf_counter() - t0 < 5.0  # refused without building anything
    roomy = NodePolicy.from_node_config({"presets": big, "max-key-bytes": 8 << 30})
    assert protocol_config(meta(big), roomy).preset == big
    with pytest.raises(ValueError, match="max-key-bytes"):
        NodePolicy.from_node_config({"max-key-bytes": "lots"})


# ------------------------------------------------------- item 4: hostile bytes in logs
def test_printable_escapes_hostile_text() -> None:
    from fedsec.runtime.safetext import printable

    out = printable("name" + FAKE)
    assert "\n" not in out and "\r" not in out and "\x1b" not in out
    assert "\\n2026-11-27" in out and "\\x1b" in out
    assert printable("a\\nb") == "a\\\\nb"  # an escaped-looking text stays distinct
    assert printable("é ok") == "é ok"
    assert printable("\u2028x") == "\\u2028x"
    assert printable("x" * 10, limit=4) == "xxxx...[cut]"


def test_server_bytes_cannot_forge_a_result_line_in_the_node_log(
        federation: Callable[..., Federation], local_grid: Callable[..., LocalGrid],
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server's bytes that end up quoted in an error text (here: in the announced
    configuration, and in a key-set-up message) cannot put a well-formed fake
    "result: AUC 0.99 ... verified" line into the node's log: every record is one line."""
    from fedsec.runtime import flower_client
    from fedsec.runtime.flower_client import handle_hello
    from fedsec.runtime.flower_io import get_meta

    fed = federation(tmp_path / "fed", NAMES)
    rng = np.random.default_rng(2)
    for name in NAMES:
        write_party_csv(fed.data_path(name), rng.integers(0, 2, 20), rng.random(20))
    node = fed.node_config(NAMES[0])
    log_path = Path(node["log-path"])
    # a handler some library put on the root logger sees the records too (propagation)
    import io
    import logging

    root_out = io.StringIO()
    root_handler = logging.StreamHandler(root_out)
    root_handler.setFormatter(logging.Formatter("%(asctime)s fedsec-node %(levelname)s: "
                                                "%(message)s"))
    logging.getLogger().addHandler(root_handler)

    # 1. a hostile configuration: any error text that quotes it (str, not repr)
    real = flower_client.protocol_config

    def quoting(meta: Any, policy: Any) -> Any:
        raise ProtocolError(f"unsupported preset {meta.get('preset')}")

    monkeypatch.setattr(flower_client, "protocol_config", quoting)
    msg = _message({"security": "malicious", "preset": "X" + FAKE, "decision-points": 10},
                   101)
    answer = handle_hello(msg, _context(node, node_id=101))
    assert get_meta(answer.content) == {"ok": False, "check": "protocol-error"}
    monkeypatch.setattr(flower_client, "protocol_config", real)

    # 2. an internal error with a traceback: its lines are indented, never records
    def crash(meta: Any, policy: Any) -> Any:
        raise RuntimeError("boom" + FAKE)

    monkeypatch.setattr(flower_client, "protocol_config", crash)
    answer = handle_hello(msg, _context(node, node_id=101))
    assert get_meta(answer.content) == {"ok": False, "check": "internal-error"}
    monkeypatch.setattr(flower_client, "protocol_config", real)

    logging.getLogger().removeHandler(root_handler)
    for text in (root_out.getvalue(), log_path.read_text(encoding="utf-8")):
        lines = text.splitlines()
        assert "\x1b" not in text and "\r" not in text
        assert not [ln for ln in lines if RECORD.match(ln)], lines
    lines = log_path.read_text(encoding="utf-8").splitlines()
    assert any("unsupported preset X\\n2026-11-27" in ln for ln in lines)
    records = [ln for ln in lines if re.match(r"^\d{4}-\d\d-\d\d ", ln)]
    assert all("fedsec-node ERROR: step hello failed" in ln for ln in records), records
    assert all(ln.startswith("  | ") for ln in lines if ln not in records)


def test_server_log_escapes_party_supplied_names(caplog: pytest.LogCaptureFixture) -> None:
    """The ServerApp's own log quotes names and reasons a node sent: escaped too."""
    import logging

    from fedsec.runtime.flower_server import RunOptions, ServerRun

    run = ServerRun(None, RunOptions.from_run_config({}), run_id=1)  # type: ignore[arg-type]
    run.names[7] = "mallory" + FAKE
    with caplog.at_level(logging.WARNING, logger="flwr"):
        run.leave_out(7, "hello", "no reply" + FAKE)
    (record,) = [r for r in caplog.records if "left out" in r.getMessage()]
    assert "\n" not in record.getMessage() and "\x1b" not in record.getMessage()
    json.dumps(run.doc)  # the result document keeps the raw value (JSON escapes it)


def test_node_refuses_decision_points_below_its_floor():
    """Issue 22: the server picks N; a node refuses one below its floor (node config
    ``min-decision-points``, default 10) before building any key."""
    from fedsec.runtime.flower_client import NodePolicy, protocol_config
    from fedsec.runtime.flower_server import RunOptions

    def meta(n: int) -> dict[str, Any]:
        opts = RunOptions.from_run_config({"security": "malicious", "decision-points": n})
        return dict(opts.protocol_meta(opts.protocol_config()))

    with pytest.raises(PolicyViolation) as info:
        protocol_config(meta(3), NodePolicy.from_node_config({}))
    assert info.value.check == "decision-points"
    assert protocol_config(meta(10), NodePolicy.from_node_config({})).n_points == 10
    strict = NodePolicy.from_node_config({"min-decision-points": 50})
    with pytest.raises(PolicyViolation):
        protocol_config(meta(20), strict)
    assert protocol_config(meta(3), NodePolicy.from_node_config(
        {"min-decision-points": 3})).n_points == 3
    with pytest.raises(ValueError, match="min-decision-points"):
        NodePolicy.from_node_config({"min-decision-points": "few"})


# --------------------------------------------- issue 23: the node reads what the CLI reads
def test_node_reads_its_file_as_the_cli_does(federation: Callable[..., Federation],
                                             tmp_path: Path) -> None:
    """Node config ``label-col``, ``score-col``, ``pos-label``, ``delimiter`` and ``scores``
    read an export the default CSV reader refuses (semicolons, other column names, text
    labels, logits) exactly as ``fedsec auc`` would; bad values stop the node with the
    check named."""
    from fedsec.metrics import transform_scores
    from fedsec.runtime.flower_client import NodeCheckFailed, load_node

    fed = federation(tmp_path / "fed", NAMES)
    name = NAMES[0]
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 40)
    logits = rng.normal(size=40) * 3.0
    path = tmp_path / "export.csv"
    rows = ["patient;outcome;margin"] + [
        f"p{i};{'malignant' if v else 'benign'};{str(x).replace('.', ',')}"
        for i, (v, x) in enumerate(zip(y, logits, strict=True))]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    base = {"identity-path": str(fed.identity_path(name)), "roster-path": str(fed.roster_path),
            "data-path": str(path), "state-dir": str(tmp_path / "st")}
    with pytest.raises(NodeCheckFailed) as info:   # the defaults do not fit this file
        load_node(_context(base))
    assert info.value.check == "input-invalid"
    read = {"label-col": "outcome", "score-col": "3", "pos-label": "malignant",
            "delimiter": "semicolon", "scores": "logit"}
    node = load_node(_context({**base, **read}))
    assert node.data.y_true.tolist() == y.tolist()
    np.testing.assert_allclose(node.data.y_score, transform_scores(logits, "logit"))
    for key, bad in (("delimiter", "pipe"), ("scores", "softmax"), ("label-col", " ")):
        with pytest.raises(NodeCheckFailed) as info:
            load_node(_context({**base, **read, key: bad}))
        assert info.value.check == "node-config" and key in str(info.value)


def test_server_reads_exact_mode_and_its_caps() -> None:
    """``decision-points='exact'`` crashed the ServerApp (``int('exact')``); it now selects
    exact mode, announces its caps to the parties, and bad caps are refused up front."""
    from fedsec.runtime.flower_client import NodePolicy, protocol_config
    from fedsec.runtime.flower_server import RunOptions

    opts = RunOptions.from_run_config({"decision-points": "exact", "security": "malicious"})
    assert opts.exact and opts.exact_max_points == 2048
    meta = opts.protocol_meta(opts.protocol_config())
    assert meta["exact"] is True and meta["exact-max-points"] == 2048
    cfg = protocol_config(meta, NodePolicy.from_node_config({}))
    assert cfg.n_points > 1000   # the initial grid
    strict = NodePolicy.from_node_config({"max-decision-points": 1500})
    with pytest.raises(PolicyViolation) as info:   # the grid may grow past this party's cap
        protocol_config(meta, strict)
    assert info.value.check == "decision-points"
    for bad in ({"max-points": 10}, {"max-rounds": 99}):
        with pytest.raises(ValueError, match="max-"):
            RunOptions.from_run_config({"decision-points": "exact", **bad})
