"""SecretSV (Zheng et al.'s two-server baseline) on Flower: P in the ServerApp; A, the
dealer and every client on SuperNodes.

Prepare: a small federation (5 clients, a one-layer logistic model or a two-layer one,
each client's own test set and its own part of the training record, the public round
information), identities and roster made with the CLI (``federation`` fixture). Execute:
the real ServerApp ``main`` over ``LocalGrid`` (in-process, ``role-host="inline"``), or
``flwr run`` on a TLS deployment. Assert: the FSVs equal ``secretsv_shapley`` on the same
inputs; nothing P sees holds a client's model in the clear and everything P relays to A
that is not P's own is sealed; a relay that reads, forges, replays or swaps sealed boxes
(the dealer's triples included) is refused; a silent client, A or dealer stops the run
with an attributed error within its timeout.
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

from fedsec.learning.model import LayerSpec, ModelSpec  # noqa: E402
from fedsec.learning.record import RoundRecord, TrainingRecord  # noqa: E402
from fedsec.runtime.flower_secsv import (  # noqa: E402
    public_rounds,
    save_test_set,
    split_record,
)
from fedsec.shapley.secretsv import secretsv_shapley  # noqa: E402

N = 5
PARTS = ((0, 1, 2), (2, 3, 4))
NAMES = [f"client-{i}" for i in range(N)]
AUX = "aux-server"
DEALER = "dealer"
ALL = [*NAMES, AUX, DEALER]
STEP_TIMEOUT = 0.5
REPO = Path(__file__).resolve().parents[2]
APP_DIR = REPO / "examples" / "fedsec-flower"

Federation = Any
LocalGrid = Any


def world(seed: int = 5, m: int = 6, hidden: bool = False
          ) -> tuple[TrainingRecord, list[tuple[np.ndarray, np.ndarray]]]:
    """A one-layer logistic model (4 features, 3 classes; with ``hidden``, a square-
    activated hidden layer of 3 first), 2 rounds, 5 clients."""
    rng = np.random.default_rng(seed)
    spec = (ModelSpec("mlp", (LayerSpec.dense(4, 3, activation="square"),
                              LayerSpec.dense(3, 3))) if hidden
            else ModelSpec("logistic", (LayerSpec.dense(4, 3),)))
    rnds, glob = [], spec.init_params(rng)
    for parts in PARTS:
        local = tuple(spec.init_params(rng) for _ in parts)
        rnds.append(RoundRecord(glob, parts, local,
                                np.array([float(10 + 3 * i) for i in range(len(parts))])))
        glob = spec.init_params(rng)
    sets = [(rng.uniform(-1, 1, size=(m, 4)), rng.integers(0, 3, m).astype(np.int64))
            for _ in range(N)]
    return TrainingRecord(spec, N, tuple(rnds), glob), sets


def prepare(fed: Federation, record: TrainingRecord, sets: list[Any], **extra: Any
            ) -> tuple[dict[str, dict[str, Any]], Path]:
    """Every node's files and node config; the public round file (P's)."""
    configs: dict[str, dict[str, Any]] = {}
    for i, part in enumerate(split_record(record)):
        name = NAMES[i]
        rec = fed.data_dir / f"{name}.record.npz"
        data = fed.data_dir / f"{name}.test.npz"
        part.save(rec)
        save_test_set(data, *sets[i])
        configs[name] = fed.node_config(name, role="client", auxiliary=AUX,
                                        **{"record-path": str(rec), "data-path": str(data)},
                                        **extra)
    aux = fed.node_config(AUX, role="auxiliary", dealer=DEALER, **extra)
    aux.pop("data-path")
    configs[AUX] = aux
    dealer = fed.node_config(DEALER, role="dealer", auxiliary=AUX, **extra)
    dealer.pop("data-path")
    configs[DEALER] = dealer
    rounds = fed.root / "rounds.json"
    rounds.write_text(json.dumps(public_rounds(record)))
    return configs, rounds


def _nodes(configs: dict[str, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {201 + i: cfg for i, cfg in enumerate(configs.values())}


A_NODE, DEALER_NODE = 201 + N, 202 + N


def _run(grid: LocalGrid, run_config: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    from flwr.app import Context, RecordDict

    from fedsec.runtime.flower_secretsv import main
    from fedsec.runtime.node_host import inline_state

    inline_state().clear()  # LocalGrids reuse one run id: no state of an earlier test

    result = tmp_path / "result.json"
    rc = {"protocol": "secretsv", "result-path": str(result), "step-timeout": STEP_TIMEOUT,
          "wait-nodes-timeout": 2.0, **run_config}
    grid.run_config.update(rc)
    ctx = Context(run_id=grid.run_id, node_id=0, node_config={}, state=RecordDict(),
                  run_config=rc)
    try:
        main(grid, ctx)
    except Exception:  # noqa: BLE001 - the result JSON says what failed
        pass
    doc: dict[str, Any] = json.loads(result.read_text())
    return doc


@pytest.fixture(scope="module")
def small() -> tuple[TrainingRecord, list[Any], Any]:
    record, sets = world()
    ref = secretsv_shapley(record, sets)
    return record, sets, ref


def _setup(federation: Callable[..., Federation], tmp_path: Path, record: TrainingRecord,
           sets: list[Any]) -> tuple[Federation, dict[int, dict[str, Any]], dict[str, Any]]:
    fed = federation(tmp_path / "fed", ALL)
    configs, rounds = prepare(fed, record, sets, **{"role-host": "inline"})
    rc = {"roster-path": str(fed.roster_path), "secretsv-rounds-path": str(rounds)}
    return fed, _nodes(configs), rc


def _same(doc: dict[str, Any], ref: Any) -> None:
    assert doc["status"] == "done", doc
    np.testing.assert_array_equal(np.asarray(doc["fsv"]), ref.fsv)
    for got, want in zip(doc["utilities"], ref.utilities, strict=True):
        np.testing.assert_array_equal(np.asarray(got), want)
    assert doc["models_tested"] == ref.models_tested


# ------------------------------------------------------------------------- pieces
def test_run_config_is_checked(tmp_path: Path) -> None:
    from fedsec.runtime.flower_secretsv import SecretSVOptions

    with pytest.raises(ValueError, match="roster-path"):
        SecretSVOptions.from_run_config({})
    with pytest.raises(ValueError, match="secretsv-rounds-path"):
        SecretSVOptions.from_run_config({"roster-path": "r.json"})
    with pytest.raises(ValueError, match="secretsv-schedule"):
        SecretSVOptions.from_run_config({"roster-path": "r", "secretsv-rounds-path": "x",
                                         "secretsv-schedule": "fast"})
    with pytest.raises(ValueError, match="step-timeout"):
        SecretSVOptions.from_run_config({"roster-path": "r", "secretsv-rounds-path": "x",
                                         "step-timeout": 0})
    bad = tmp_path / "rounds.json"
    bad.write_text("{}")
    opts = SecretSVOptions.from_run_config({"roster-path": str(tmp_path / "none.json"),
                                            "secretsv-rounds-path": str(bad)})
    with pytest.raises(ValueError, match="roster-path"):
        opts.load()


# ------------------------------------------------------------------ whole runs (LocalGrid)
def test_flower_secretsv_equals_in_process(federation: Callable[..., Federation],
                                           local_grid: Callable[..., LocalGrid],
                                           tmp_path: Path, small: Any) -> None:
    """Same FSVs as ``secretsv_shapley``; P never sees a model in the clear; everything P
    relays to A is P's own message or a sealed box; so is what the clients send A."""
    record, sets, ref = small
    _fed, nodes, rc = _setup(federation, tmp_path, record, sets)
    sent: list[tuple[str, int, list[bytes]]] = []

    def spy(step: str, node: int, blobs: list[bytes]) -> list[bytes]:
        sent.append((step, node, list(blobs)))
        return blobs

    grid = local_grid(nodes, {}, edit=spy)
    t0 = time.monotonic()
    doc = _run(grid, rc, tmp_path)
    print(f"SecretSV LocalGrid: {time.monotonic() - t0:.2f}s, {doc['exchanges']} "
          f"exchanges, bytes {doc['bytes']}; secretsv_shapley {ref.seconds:.2f}s")
    _same(doc, ref)
    # hello, session (with the dealer's triples); per round A and reconstruct; the last
    # round's zero tests
    assert [s["step"] for s in doc["steps"]] == [
        "secretsv_hello", "secretsv_session", "secretsv_aux", "secretsv_reconstruct",
        "secretsv_aux", "secretsv_reconstruct", "secretsv_aux"]
    assert doc["parties"] == {"clients": NAMES, "auxiliary": AUX, "dealer": DEALER}
    from fedsec.protocol import wire
    from fedsec.runtime.flower_io import get_blobs, get_meta

    seen = [b for _s, _n, msg in grid.replies for b in get_blobs(msg.content)]
    seen += [b for _s, _n, blobs in sent for b in blobs]
    for r in record.rounds:
        for params in [r.global_params, *r.local_params]:
            for p in params:
                for raw in (np.asarray(p, np.float64).tobytes(),
                            np.asarray(p, np.float32).tobytes()):
                    assert not any(raw[:16] in b for b in seen)
    for x, _y in sets:
        assert not any(np.asarray(x, np.float64).tobytes()[:16] in b for b in seen)
    own = {"secretsv/session", "secretsv/batches", "secretsv/eval", "secretsv/open",
           "secretsv/label-mask"}
    to_a = [b for step, node, blobs in sent if node == A_NODE and step == "secretsv_aux"
            for b in blobs]
    sealed = 0
    for b in to_a:
        if b.startswith(b"FSB1"):
            sealed += 1
        else:
            assert wire.decode(b).kind in own
    # 5 data shares, 2 x 4 models, per evaluation (2 rounds x 8 coalitions x 5 batches):
    # its triple and the client's label shares
    assert sealed == 5 + 8 + 2 * 80
    checked = 0
    for step, node, msg in grid.replies:
        blobs = get_blobs(msg.content)
        if step == "secretsv_session" and node == DEALER_NODE:
            assert len(blobs) == 160
            assert all(b.startswith(b"FSB1") for b in blobs[80:])
        if step == "secretsv_aux":  # A's output shares for the clients are sealed
            pairs = blobs[get_meta(msg.content)["diffs"]:]
            assert all(b.startswith(b"FSB1") for b in pairs[1::2])
            assert not any(b.startswith(b"FSB1") for b in pairs[0::2])
            checked += len(pairs) // 2
    assert checked == 80


def test_two_layer_model_equals_in_process(federation: Callable[..., Federation],
                                           local_grid: Callable[..., LocalGrid],
                                           tmp_path: Path) -> None:
    """A hidden layer: the reconstructing client re-shares its output to P and A (A's
    share sealed); A opens the next layer; 2 more exchanges per round."""
    record, sets = world(hidden=True)
    ref = secretsv_shapley(record, sets)
    _fed, nodes, rc = _setup(federation, tmp_path, record, sets)
    doc = _run(local_grid(nodes, {}), rc, tmp_path)
    _same(doc, ref)
    assert doc["exchanges"] == 11


def _relay(kind: str) -> Callable[[str, int, list[bytes]], list[bytes]]:
    """A ServerApp that tampers with what it relays to A. A's first message (round 0):
    batches, 5 sealed data shares, 4 sealed models, then per evaluation its announcement,
    sealed triple and P's opening; its second: 40 x (sealed label shares, P's mask) of
    round 0, then round 1 laid out as round 0; its third: round 1's label shares."""
    seen: list[list[bytes]] = []

    def flip(b: bytes) -> bytes:
        box = bytearray(b)
        box[len(box) // 2] ^= 1
        return bytes(box)

    def edit(step: str, _node: int, blobs: list[bytes]) -> list[bytes]:
        if step != "secretsv_aux":
            return blobs
        out = list(blobs)
        seen.append(list(blobs))
        k = len(seen)
        first_triple = 1 + 5 + 4 + 1
        if kind == "forge-data" and k == 1:
            out[1] = flip(out[1])
        elif kind == "forge-triple" and k == 1:
            out[first_triple] = flip(out[first_triple])
        elif kind == "swap-triple" and k == 1:  # two evaluations' triples swapped
            a, b = first_triple, first_triple + 3
            out[a], out[b] = out[b], out[a]
        elif kind == "replay-triple" and k == 2:  # round 1 gets round 0's triple
            out[80 + 4 + 1] = seen[0][first_triple]
        elif kind == "forge-label" and k == 2:
            out[0] = flip(out[0])
        elif kind == "replay-label" and k == 3:  # round 1 gets round 0's label shares
            out[0] = seen[1][0]
        elif kind == "swap-label" and k == 2:  # two evaluations' label shares swapped
            out[0], out[2] = out[2], out[0]
        return out

    return edit


@pytest.mark.parametrize("kind", ["forge-data", "forge-triple", "swap-triple",
                                  "replay-triple", "forge-label", "replay-label",
                                  "swap-label"])
def test_relay_adversary_is_refused(federation: Callable[..., Federation],
                                    local_grid: Callable[..., LocalGrid],
                                    tmp_path: Path, small: Any, kind: str) -> None:
    """P alters a client's sealed data share, the dealer's sealed triple or a client's
    sealed label shares, swaps two evaluations' triples or label shares, or replays
    round 0's triple or label shares in round 1: A refuses, the run stops with no
    result, and the step says which message A refused."""
    record, sets, _ref = small
    _fed, nodes, rc = _setup(federation, tmp_path, record, sets)
    doc = _run(local_grid(nodes, {}, edit=_relay(kind)), rc, tmp_path)
    assert doc["status"] == "failed"
    assert doc["failed"]["party"] == AUX and doc["failed"]["step"] == "secretsv_aux"
    assert doc["failed"]["check"] == "protocol-error"
    assert "fsv" not in doc
    at = [s["step"] for s in doc["steps"]].count("secretsv_aux")
    assert at == {"replay-triple": 2, "forge-label": 2, "swap-label": 2,
                  "replay-label": 3}.get(kind, 1)


def test_relay_cannot_read_a_triple_or_forge_an_output(
        federation: Callable[..., Federation], local_grid: Callable[..., LocalGrid],
        tmp_path: Path, small: Any) -> None:
    """What the dealer sends A through P opens with no key P holds (A's seal key stays
    on A's node); an output share of A forged on its way to a client is refused by the
    client."""
    record, sets, _ref = small
    _fed, nodes, rc = _setup(federation, tmp_path, record, sets)

    def edit(step: str, _node: int, blobs: list[bytes]) -> list[bytes]:
        if step == "secretsv_reconstruct" and blobs:
            out = list(blobs)
            box = bytearray(out[1])
            box[len(box) // 2] ^= 1
            out[1] = bytes(box)
            return out
        return blobs

    grid = local_grid(nodes, {}, edit=edit)
    doc = _run(grid, rc, tmp_path)
    assert doc["status"] == "failed" and doc["failed"]["step"] == "secretsv_reconstruct"
    assert doc["failed"]["party"] in NAMES and doc["failed"]["check"] == "protocol-error"
    from fedsec.crypto.identity import Roster
    from fedsec.crypto.sealed import SealKey, unseal
    from fedsec.errors import ProtocolError
    from fedsec.runtime.flower_io import get_blobs

    roster = Roster.load(rc["roster-path"])
    triples = [get_blobs(msg.content) for step, node, msg in grid.replies
               if step == "secretsv_session" and node == DEALER_NODE][0]
    box = triples[len(triples) // 2]
    assert box.startswith(b"FSB1")
    with pytest.raises(ProtocolError):
        unseal(SealKey.generate(), roster, DEALER, AUX, box, context=b"")


@pytest.mark.parametrize(("who", "at"), [(2, "secretsv_reconstruct"), (N, "secretsv_aux"),
                                         (N + 1, "secretsv_session")],
                         ids=["client", "auxiliary", "dealer"])
def test_killed_party_stops_the_run(federation: Callable[..., Federation],
                                    local_grid: Callable[..., LocalGrid],
                                    tmp_path: Path, small: Any, who: int, at: str) -> None:
    """SecretSV needs every role: a silent client, A or dealer stops the run within the
    step timeout, naming the party and the step."""
    record, sets, _ref = small
    _fed, nodes, rc = _setup(federation, tmp_path, record, sets)
    victim = min(nodes) + who

    def hook(grid: Any, step: str, _nodes: list[int]) -> None:
        if step == at:
            grid.kill(victim)

    grid = local_grid(nodes, {}, before_step=hook)
    t0 = time.monotonic()
    doc = _run(grid, rc, tmp_path)
    assert time.monotonic() - t0 < 30
    assert doc["status"] == "failed"
    assert doc["failed"]["party"] == ALL[who] and doc["failed"]["step"] == at
    assert "no reply" in doc["failed"]["reason"] and "fsv" not in doc


def test_invalid_node_file_is_attributed(federation: Callable[..., Federation],
                                         local_grid: Callable[..., LocalGrid],
                                         tmp_path: Path, small: Any) -> None:
    record, sets, _ref = small
    fed, nodes, rc = _setup(federation, tmp_path, record, sets)
    (fed.data_dir / f"{NAMES[1]}.test.npz").write_bytes(b"not an npz")
    doc = _run(local_grid(nodes, {}), rc, tmp_path)
    assert doc["status"] == "failed"
    assert doc["failed"]["step"] == "secretsv_hello"
    assert doc["failed"]["check"] == "input-invalid"
    assert doc["failed"]["node"] == min(nodes) + 1


def test_stranger_is_left_out_and_round_info_is_checked(
        federation: Callable[..., Federation], local_grid: Callable[..., LocalGrid],
        tmp_path: Path, small: Any) -> None:
    """A connected node that is no SecretSV party is left out; a client whose own record
    disagrees with the server's round information refuses the run; a dealer whose node
    config names no auxiliary server stops it at the hello."""
    record, sets, ref = small
    fed, nodes, rc = _setup(federation, tmp_path, record, sets)
    stranger = {**nodes[min(nodes)], "role": "bystander"}
    doc = _run(local_grid({**nodes, 999: stranger}, {}), rc, tmp_path)
    _same(doc, ref)
    assert [(e["node"], e["check"]) for e in doc["left_out"]] == [(999, "node-config")]
    pub = json.loads(Path(rc["secretsv-rounds-path"]).read_text())
    pub["rounds"][0]["weights"][0] *= 2  # the server claims other FedAvg weights
    lie = tmp_path / "lie.json"
    lie.write_text(json.dumps(pub))
    doc = _run(local_grid(nodes, {}), {**rc, "secretsv-rounds-path": str(lie)}, tmp_path)
    assert doc["status"] == "failed" and doc["failed"]["check"] == "policy:round-info"
    lone = {**nodes, DEALER_NODE: {**nodes[DEALER_NODE], "auxiliary": ""}}
    doc = _run(local_grid(lone, {}), rc, tmp_path)
    assert doc["status"] == "failed" and doc["failed"]["node"] == DEALER_NODE
    assert doc["failed"]["check"] == "node-config"


def test_paper_schedule_needs_the_clients_consent(federation: Callable[..., Federation],
                                                  local_grid: Callable[..., LocalGrid],
                                                  tmp_path: Path, small: Any) -> None:
    record, sets, _ref = small
    _fed, nodes, rc = _setup(federation, tmp_path, record, sets)
    doc = _run(local_grid(nodes, {}), {**rc, "secretsv-schedule": "paper"}, tmp_path)
    assert doc["status"] == "failed" and doc["failed"]["check"] == "policy:schedule"


# ------------------------------------------------------------------ deployment (TLS)
def test_secretsv_deployment_tls(flower: Callable[[Path], Any],
                                 federation: Callable[..., Federation],
                                 tls: tuple[Path, Path, Path], tmp_path: Path,
                                 small: Any) -> None:
    """SuperLink + 7 SuperNodes (5 clients, A, the dealer) over TLS on loopback, each with
    its own identity, files and node host; the FSVs equal the in-process run's exactly."""
    record, sets, ref = small
    fed = federation(tmp_path / "fed", ALL)
    configs, rounds = prepare(fed, record, sets)
    t0 = time.monotonic()
    dep = flower(tmp_path / "deploy")
    dep.env["FLWR_SUPEREXEC_TASK_POLL_INTERVAL"] = "0.05"
    # Flower's processes import this checkout's fedsec (a relative PYTHONPATH would not
    # resolve from their working directory)
    dep.env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / "src"), *filter(None, [os.environ.get("PYTHONPATH", "")])])
    dep.start_superlink_tls(*tls)
    for name, cfg in configs.items():
        dep.start_supernode(name, cfg)
    dep.wait_supernodes(list(configs))
    startup = time.monotonic() - t0
    result = tmp_path / "result.json"
    t1 = time.monotonic()
    dep.flwr_run(APP_DIR, "fedsec-tls", {
        "protocol": "secretsv", "result-path": str(result),
        "roster-path": str(fed.roster_path), "secretsv-rounds-path": str(rounds),
        "step-timeout": 60.0, "wait-nodes-timeout": 30.0})
    doc = dep.wait_result(result, {"done", "failed"}, 300.0)  # a loaded CI machine
    wall = time.monotonic() - t1
    print(f"SecretSV deployment: startup {startup:.1f}s, run {wall:.1f}s (ServerApp "
          f"{doc['timings']['total_s']}s), {doc['exchanges']} exchanges, in-process "
          f"{ref.seconds:.2f}s; steps {[(s['step'], s['seconds']) for s in doc['steps']]}")
    _same(doc, ref)
    assert doc["exchanges"] == 7
    assert doc["parties"] == {"clients": NAMES, "auxiliary": AUX, "dealer": DEALER}


def test_paper_schedule_with_consent_equals_in_process(
        federation: Callable[..., Federation], local_grid: Callable[..., LocalGrid],
        tmp_path: Path, small: Any) -> None:
    """Every client allowing it, ``schedule="paper"`` (Prop. 6.8's chains over planned
    batch groups) gives ``secretsv_shapley(schedule="paper")``'s FSVs."""
    from fedsec.errors import PrivacyWarning

    record, sets, _ref = small
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        ref = secretsv_shapley(record, sets, schedule="paper")
    _fed, nodes, rc = _setup(federation, tmp_path, record, sets)
    nodes = {nd: {**cfg, "allow-paper-schedule": True} if cfg["role"] == "client" else cfg
             for nd, cfg in nodes.items()}
    doc = _run(local_grid(nodes, {}), {**rc, "secretsv-schedule": "paper"}, tmp_path)
    _same(doc, ref)
    assert doc["schedule"] == "paper"


def test_servers_keep_several_evaluations_in_flight() -> None:
    """``suspend``/``resume`` (what the deployment uses to batch a round) refuse a
    missing or a second evaluation in flight."""
    from fedsec.errors import ProtocolError
    from fedsec.shapley.secretsv import SecretSVPrincipal

    record, _sets = world()
    P = SecretSVPrincipal(record.spec, [(r.participants, r.weights)  # noqa: N806
                                        for r in record.rounds], n_clients=N)
    with pytest.raises(ProtocolError, match="no evaluation"):
        P.suspend()
    with pytest.raises(ProtocolError, match="no evaluation"):
        P.triple_request()
    with pytest.raises(ValueError, match="no such product"):
        P.triple_request_for(0, 1, 0, 1, 6)  # a one-layer model has no layer 1
