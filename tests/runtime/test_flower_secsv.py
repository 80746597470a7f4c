"""SecSV (Zheng et al.) on Flower: P in the ServerApp, A and every client on SuperNodes.

Prepare: a small federation (5 clients -- the fewest for which the decryption rule
schedules exact SSVs of 2 rounds -- a one-layer logistic model, each client's own test set
and its own part of the training record, the public round information), identities and
roster made with the CLI (``federation`` fixture). Execute: the real ServerApp ``main``
over ``LocalGrid`` (in-process, ``role-host="inline"``), or ``flwr run`` on a TLS
deployment. Assert: the FSVs equal ``secsv_shapley`` on the same inputs; nothing P sees
holds a client's model in the clear and A's traffic is sealed; a relay that reads,
forges or replays A's sealed boxes is refused; a silent client stops the run with an
attributed error within its timeout.
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
    ClientPart,
    public_rounds,
    save_test_set,
    split_record,
)
from fedsec.shapley.secsv import secsv_shapley  # noqa: E402

N = 5
PARTS = ((0, 1, 2), (2, 3, 4))
NAMES = [f"client-{i}" for i in range(N)]
AUX = "aux-server"
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
    aux = fed.node_config(AUX, role="auxiliary", **extra)
    aux.pop("data-path")
    configs[AUX] = aux
    rounds = fed.root / "rounds.json"
    rounds.write_text(json.dumps(public_rounds(record)))
    return configs, rounds


def _nodes(configs: dict[str, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {201 + i: cfg for i, cfg in enumerate(configs.values())}


def _run(grid: LocalGrid, run_config: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    from flwr.app import Context, RecordDict

    from fedsec.runtime.flower_secsv import main
    from fedsec.runtime.node_host import inline_state

    inline_state().clear()  # LocalGrids reuse one run id: no state of an earlier test

    result = tmp_path / "result.json"
    rc = {"protocol": "secsv", "result-path": str(result), "step-timeout": STEP_TIMEOUT,
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
    ref = secsv_shapley(record, sets)
    return record, sets, ref


def _setup(federation: Callable[..., Federation], tmp_path: Path, record: TrainingRecord,
           sets: list[Any]) -> tuple[Federation, dict[int, dict[str, Any]], dict[str, Any]]:
    fed = federation(tmp_path / "fed", [*NAMES, AUX])
    configs, rounds = prepare(fed, record, sets, **{"role-host": "inline"})
    rc = {"roster-path": str(fed.roster_path), "secsv-rounds-path": str(rounds)}
    return fed, _nodes(configs), rc


# ------------------------------------------------------------------------- pieces
def test_client_part_round_trip(tmp_path: Path) -> None:
    record, _sets = world()
    parts = split_record(record)
    for i, part in enumerate(parts):
        part.save(tmp_path / f"{i}.npz")
        back = ClientPart.load(tmp_path / f"{i}.npz")
        assert back.index == i and back.public == public_rounds(record)
        assert sorted(back.locals) == [t for t, p in enumerate(PARTS) if i in p]
        for t, r in enumerate(record.rounds):
            for a, b in zip(back.globals[t], r.global_params, strict=True):
                np.testing.assert_array_equal(a, b)
            if i in r.participants:
                own = r.local_params[r.participants.index(i)]
                for a, b in zip(back.locals[t], own, strict=True):
                    np.testing.assert_array_equal(a, b)
    bad = tmp_path / "bad.npz"
    np.savez(bad, index=np.array(0))
    with pytest.raises(ValueError, match="client part"):
        ClientPart.load(bad)


def test_run_config_is_checked() -> None:
    from fedsec.runtime.flower_secsv import SecSVOptions

    with pytest.raises(ValueError, match="roster-path"):
        SecSVOptions.from_run_config({})
    with pytest.raises(ValueError, match="secsv-rounds-path"):
        SecSVOptions.from_run_config({"roster-path": "r.json"})
    with pytest.raises(ValueError, match="secsv-schedule"):
        SecSVOptions.from_run_config({"roster-path": "r", "secsv-rounds-path": "x",
                                      "secsv-schedule": "fast"})


# ------------------------------------------------------------------ whole runs (LocalGrid)
def test_flower_secsv_equals_in_process(federation: Callable[..., Federation],
                                        local_grid: Callable[..., LocalGrid],
                                        tmp_path: Path, small: Any) -> None:
    """Same FSVs as ``secsv_shapley``; P never sees a local model in the clear; everything
    P relays to A is sealed (A's plaintext messages never appear in P's view)."""
    record, sets, ref = small
    _fed, nodes, rc = _setup(federation, tmp_path, record, sets)
    sent: list[tuple[str, int, list[bytes]]] = []

    def spy(step: str, node: int, blobs: list[bytes]) -> list[bytes]:
        sent.append((step, node, list(blobs)))
        return blobs

    grid = local_grid(nodes, {}, edit=spy)
    t0 = time.monotonic()
    doc = _run(grid, rc, tmp_path)
    print(f"SecSV LocalGrid: {time.monotonic() - t0:.2f}s, {doc['exchanges']} exchanges, "
          f"bytes {doc['bytes']}; secsv_shapley {ref.seconds:.2f}s")
    assert doc["status"] == "done", doc
    np.testing.assert_array_equal(np.asarray(doc["fsv"]), ref.fsv)
    for got, want in zip(doc["utilities"], ref.utilities, strict=True):
        np.testing.assert_array_equal(np.asarray(got), want)
    assert doc["models_tested"] == ref.models_tested
    # 5 set-up exchanges, then upload + A + decrypt + A for round 0, and A + decrypt + A
    # for round 1 (round 1's models come with round 0's answers)
    assert doc["exchanges"] == 12, [s["step"] for s in doc["steps"]]
    from fedsec.runtime.flower_io import get_blobs

    seen = [b for _s, _n, msg in grid.replies for b in get_blobs(msg.content)]
    seen += [b for _s, _n, blobs in sent for b in blobs]
    for t, r in enumerate(record.rounds):
        for params in r.local_params:
            for p in params:
                for raw in (np.asarray(p, np.float64).tobytes(),
                            np.asarray(p, np.float32).tobytes()):
                    assert not any(raw[:16] in b for b in seen), t
    # every blob P hands A is either P's own message or a client's sealed box
    from fedsec.protocol import wire

    a_node = max(nodes)
    own = {"secsv/plan", "secsv/batches", "secsv/eval", "secsv/label-mask"}
    to_a = [b for _step, node, blobs in sent if node == a_node for b in blobs]
    assert to_a
    sealed = 0
    for b in to_a:
        if b.startswith(b"FSB1"):
            sealed += 1
        else:
            assert wire.decode(b).kind in own
    # the data shares of 5 clients, 2 x 4 models (global and 3 local per round) and
    # one answer per evaluation (2 rounds x 8 coalitions x 5 batches)
    assert sealed == 5 + 8 + 2 * 8 * 5
    # and what the clients send for A is sealed in their replies too
    for step, _node, msg in grid.replies:
        blobs = get_blobs(msg.content)
        if step == "secsv_plan":
            assert blobs[1].startswith(b"FSB1")
        if step == "secsv_upload":
            assert all(b.startswith(b"FSB1") for b in blobs[1::2])


def test_two_layer_model_equals_in_process(federation: Callable[..., Federation],
                                           local_grid: Callable[..., LocalGrid],
                                           tmp_path: Path) -> None:
    """A hidden layer: the decrypting client re-shares its output to P and A (A's share
    sealed), A answers its next products; 2 more exchanges per round and layer."""
    record, sets = world(hidden=True)
    ref = secsv_shapley(record, sets)
    _fed, nodes, rc = _setup(federation, tmp_path, record, sets)
    doc = _run(local_grid(nodes, {}), rc, tmp_path)
    assert doc["status"] == "done", doc
    np.testing.assert_array_equal(np.asarray(doc["fsv"]), ref.fsv)
    for got, want in zip(doc["utilities"], ref.utilities, strict=True):
        np.testing.assert_array_equal(np.asarray(got), want)
    assert [s["step"] for s in doc["steps"]].count("secsv_aux_reshare") == 2
    assert doc["exchanges"] == 16


def _relay(kind: str) -> Callable[[str, int, list[bytes]], list[bytes]]:
    """A ServerApp that tampers with the sealed boxes it relays to A."""
    kept: dict[str, bytes] = {}

    def edit(step: str, _node: int, blobs: list[bytes]) -> list[bytes]:
        if kind == "forge-data" and step == "secsv_aux_round" and len(blobs) > 2:
            out = list(blobs)  # plan, batches, then client 0's sealed data shares
            out[2] = out[2][:-70] + bytes([out[2][-70] ^ 1]) + out[2][-69:]
            return out
        if step != "secsv_aux_labels" or not blobs:
            return blobs
        out = list(blobs)
        if kind == "forge":
            box = bytearray(out[0])
            box[len(box) // 2] ^= 1
            out[0] = bytes(box)
        elif kind == "replay":  # round 1 gets round 0's first sealed answer
            if "first" in kept:
                out[0] = kept["first"]
            else:
                kept["first"] = out[0]
        elif kind == "swap":  # two evaluations' answers swapped
            out[0], out[2] = out[2], out[0]
        return out

    return edit


@pytest.mark.parametrize("kind", ["forge", "replay", "swap", "forge-data"])
def test_relay_adversary_is_refused(federation: Callable[..., Federation],
                                    local_grid: Callable[..., LocalGrid],
                                    tmp_path: Path, small: Any, kind: str) -> None:
    """P alters a client's sealed answer, replays round 0's in round 1, swaps two
    evaluations' answers, or alters a sealed data share: A refuses, the run stops."""
    record, sets, _ref = small
    _fed, nodes, rc = _setup(federation, tmp_path, record, sets)
    grid = local_grid(nodes, {}, edit=_relay(kind))
    doc = _run(grid, rc, tmp_path)
    assert doc["status"] == "failed"
    step = "secsv_aux_round" if kind == "forge-data" else "secsv_aux_labels"
    assert doc["failed"]["party"] == AUX and doc["failed"]["step"] == step
    assert doc["failed"]["check"] == "protocol-error"
    assert "fsv" not in doc


def test_sealed_box_cannot_be_read_by_the_relay(tmp_path: Path) -> None:
    """P holds no key that opens what a client seals to A."""
    from fedsec.auc.common import local_federation
    from fedsec.crypto.sealed import SealKey, announce, read_announcement, seal, unseal
    from fedsec.errors import ProtocolError

    ids, roster = local_federation(["client-0", "aux"])
    a_key = SealKey.generate()
    pub = read_announcement(roster, "aux", announce(ids[1], a_key, context=b"c"),
                            context=b"c")
    secret = b"secsv/labels" + os.urandom(64)
    box = seal(ids[0], "aux", pub, secret, context=b"x")
    assert secret not in box and secret[12:] not in box
    with pytest.raises(ProtocolError):
        unseal(SealKey.generate(), roster, "client-0", "aux", box, context=b"x")
    assert unseal(a_key, roster, "client-0", "aux", box, context=b"x") == secret


@pytest.mark.parametrize(("who", "at"), [(2, "secsv_decrypt"), (5, "secsv_aux_labels")],
                         ids=["client", "auxiliary"])
def test_killed_party_stops_the_run(federation: Callable[..., Federation],
                                    local_grid: Callable[..., LocalGrid],
                                    tmp_path: Path, small: Any, who: int, at: str) -> None:
    """SecSV needs every role: a silent client (in both rounds) or a silent A stops the
    run within the step timeout, naming the party and the step."""
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
    assert doc["failed"]["party"] == [*NAMES, AUX][who] and doc["failed"]["step"] == at
    assert "no reply" in doc["failed"]["reason"] and "fsv" not in doc


def test_invalid_node_file_is_attributed(federation: Callable[..., Federation],
                                         local_grid: Callable[..., LocalGrid],
                                         tmp_path: Path, small: Any) -> None:
    record, sets, _ref = small
    fed, nodes, rc = _setup(federation, tmp_path, record, sets)
    (fed.data_dir / f"{NAMES[1]}.test.npz").write_bytes(b"not an npz")
    doc = _run(local_grid(nodes, {}), rc, tmp_path)
    assert doc["status"] == "failed"
    assert doc["failed"]["step"] == "secsv_hello" and doc["failed"]["check"] == "input-invalid"
    assert doc["failed"]["node"] == min(nodes) + 1


def test_stranger_is_left_out_and_round_info_is_checked(
        federation: Callable[..., Federation], local_grid: Callable[..., LocalGrid],
        tmp_path: Path, small: Any) -> None:
    """A connected node that is no SecSV party is left out; a client whose own record
    disagrees with the server's round information refuses the run."""
    record, sets, ref = small
    fed, nodes, rc = _setup(federation, tmp_path, record, sets)
    stranger = {**nodes[min(nodes)], "role": "bystander"}
    doc = _run(local_grid({**nodes, 999: stranger}, {}), rc, tmp_path)
    assert doc["status"] == "done", doc
    np.testing.assert_array_equal(np.asarray(doc["fsv"]), ref.fsv)
    assert [(e["node"], e["check"]) for e in doc["left_out"]] == [(999, "node-config")]
    pub = json.loads(Path(rc["secsv-rounds-path"]).read_text())
    pub["rounds"][0]["weights"][0] *= 2  # the server claims other FedAvg weights
    lie = tmp_path / "lie.json"
    lie.write_text(json.dumps(pub))
    doc = _run(local_grid(nodes, {}), {**rc, "secsv-rounds-path": str(lie)}, tmp_path)
    assert doc["status"] == "failed" and doc["failed"]["check"] == "policy:round-info"


def test_paper_schedule_needs_the_clients_consent(federation: Callable[..., Federation],
                                                  local_grid: Callable[..., LocalGrid],
                                                  tmp_path: Path, small: Any) -> None:
    record, sets, _ref = small
    _fed, nodes, rc = _setup(federation, tmp_path, record, sets)
    doc = _run(local_grid(nodes, {}), {**rc, "secsv-schedule": "paper"}, tmp_path)
    assert doc["status"] == "failed" and doc["failed"]["check"] == "policy:schedule"


# ------------------------------------------------------------------ deployment (TLS)
def test_secsv_deployment_tls(flower: Callable[[Path], Any],
                              federation: Callable[..., Federation],
                              tls: tuple[Path, Path, Path], tmp_path: Path,
                              small: Any) -> None:
    """SuperLink + 6 SuperNodes (5 clients, A) over TLS on loopback, each with its own
    identity, files and node host; the FSVs equal the in-process run's exactly."""
    record, sets, ref = small
    fed = federation(tmp_path / "fed", [*NAMES, AUX])
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
        "protocol": "secsv", "result-path": str(result),
        "roster-path": str(fed.roster_path), "secsv-rounds-path": str(rounds),
        "step-timeout": 60.0, "wait-nodes-timeout": 30.0})
    doc = dep.wait_result(result, {"done", "failed"}, 300.0)  # a loaded CI machine
    wall = time.monotonic() - t1
    print(f"SecSV deployment: startup {startup:.1f}s, run {wall:.1f}s (ServerApp "
          f"{doc['timings']['total_s']}s), {doc['exchanges']} exchanges, in-process "
          f"{ref.seconds:.2f}s; steps {[(s['step'], s['seconds']) for s in doc['steps']]}")
    assert doc["status"] == "done", doc
    np.testing.assert_array_equal(np.asarray(doc["fsv"]), ref.fsv)
    assert doc["exchanges"] == 12
    assert doc["parties"] == {"clients": NAMES, "auxiliary": AUX}
