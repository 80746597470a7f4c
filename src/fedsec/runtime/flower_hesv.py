"""HESV (Zheng et al.) on Flower's deployment engine: the server is the ServerApp, every
client a SuperNode with its own test set and its own part of the training record.

The roles are those of :mod:`fedsec.shapley.hesv` (:class:`~fedsec.shapley.hesv.HESVClient`,
:class:`~fedsec.shapley.hesv.HESVServer`) and of the signed key set-up
(:mod:`fedsec.crypto.keysetup`: the secret key is sealed from the key holder to each client,
so the ServerApp and the SuperLink relay only boxes they cannot open). This module carries
their bytes, batching every request of one step into one message per client:

=================  =============================================================  ===========
message type       client (SuperNode, role kept in its node host)                  reply
=================  =============================================================  ===========
``hesv_hello``     check the run (preset, schedule) against its policy; read its   signed
                   record part and test set; ``KeySetupParty.hello()``              hello
``hesv_offer``     the key holder: ``KeySetupParty.offer``                         offer
``hesv_deliver``   ``KeySetupParty.receive`` (its sealed secret key)               confirmation
``hesv_confirmed`` ``KeySetupParty.finish``; ``HESVClient.upload_data``            data
``hesv_models``    ``HESVClient.upload_model`` for the first round (the global     models
                   model from client 0, each participant its own local model)
``hesv_eval``      ``HESVClient.handle`` on every request of the wave (decrypt a   replies
                   layer, activate, re-encrypt; or count correct predictions); in  (+ models)
                   a round's first wave also the next round's models
``hesv_finish``    keep the federated Shapley values; the run ends on the node     ---
=================  =============================================================  ===========

Exchanges per run: 6 + rounds x (layers + 1) (a round's models come with the previous
round's first wave). Only the exact estimator (every
coalition of every round, all coalitions of a round evaluated in the same waves) runs here.

A client's files come only from its node config: ``hesv-record-path`` (its record part,
:func:`write_record_part`: the global models, the rounds' participants and weights, its own
local models), ``hesv-test-path`` (``.npz`` with ``x`` and ``y``), ``identity-path``,
``roster-path``, ``state-dir``, ``log-path``; its policy: ``presets`` (CKKS presets it
builds keys for; default HESV's own) and ``allow-paper-schedule`` (default ``false``: only
the strict decryption rule of :mod:`fedsec.shapley.views`).

Run config: ``protocol = "hesv"``, ``hesv-preset``, ``hesv-batch-hint`` (samples per batch:
the largest test set), ``hesv-schedule``, ``hesv-linear-shortcut``, ``hesv-complex-packing``,
``roster-path``, ``num-nodes``, ``step-timeout``, ``wait-nodes-timeout``, ``result-path``.
"""

from __future__ import annotations

import io
import json
import logging
import re
import time
import warnings
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

with warnings.catch_warnings():
    # flwr 1.41 -> typer -> click 8.5 warns on import; see fedsec.runtime.flower_io.
    warnings.simplefilter("ignore", DeprecationWarning)
    from flwr.app import Context
    from flwr.serverapp import Grid

from fedsec.crypto.identity import Identity, Roster
from fedsec.crypto.keysetup import KeySetupAggregator, KeySetupParty
from fedsec.errors import PolicyViolation, ProtocolError
from fedsec.learning.model import ModelSpec, Params
from fedsec.learning.record import RoundRecord, TrainingRecord
from fedsec.metrics.shapley import popcounts, shapley_values
from fedsec.protocol import fields as readers
from fedsec.protocol import wire
from fedsec.runtime.flower_client import NodeCheckFailed, _flag, _node_logger
from fedsec.runtime.flower_io import wait_for_nodes
from fedsec.runtime.flower_server import RunFailed, RunOptions, ServerRun
from fedsec.runtime.node_host import RunState, hosted
from fedsec.runtime.safetext import printable
from fedsec.shapley.hesv import HESV_PRESET, HESVClient, HESVConfig, HESVServer
from fedsec.shapley.views import ClientView, ModelSpace

__all__ = ["HESVOptions", "RecordPart", "write_record_part", "load_record_part", "main"]

logger = logging.getLogger("flwr")

PART_FORMAT = "fedsec.hesv-record-part/1"
SCHEDULES = ("strict", "paper")
_MAX_PART_BYTES = 1 << 30


# ----------------------------------------------------------------- record parts
@dataclass(frozen=True)
class RecordPart:
    """What one client holds of a training record: the model spec, every round's global
    model, participants and weights (public in FedAvg) and its own local models."""

    spec: ModelSpec
    n_clients: int
    client: int
    rounds: tuple[tuple[tuple[int, ...], NDArray[np.float64]], ...]
    global_params: tuple[Params, ...]
    local_params: dict[int, Params]   # round -> this client's local model

    def public(self) -> str:
        """The public training metadata every client must agree on (JSON)."""
        return json.dumps({"spec": self.spec.to_json(), "n_clients": self.n_clients,
                           "rounds": [[list(p), [float(x) for x in w]]
                                      for p, w in self.rounds]}, sort_keys=True)


def write_record_part(record: TrainingRecord, client: int) -> bytes:
    """Client ``client``'s part of ``record`` (``.npz``, no pickles): what that client knows
    after federated training, and what its SuperNode needs for HESV."""
    header = {"format": PART_FORMAT, "spec": record.spec.to_json(),
              "n_clients": record.n_clients, "client": int(client),
              "rounds": [{"participants": list(r.participants),
                          "weights": [float(w) for w in r.weights]} for r in record.rounds]}
    arrays: dict[str, NDArray[Any]] = {
        "header": np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)}
    for t, r in enumerate(record.rounds):
        for k, p in enumerate(r.global_params):
            arrays[f"r{t}/global/{k}"] = np.asarray(p)
        if client in r.participants:
            for k, p in enumerate(r.local_params[r.participants.index(client)]):
                arrays[f"r{t}/local/{k}"] = np.asarray(p)
    buf = io.BytesIO()
    np.savez(buf, allow_pickle=False, **arrays)
    return buf.getvalue()


def load_record_part(data: bytes) -> RecordPart:
    """Parse :func:`write_record_part` output (``ValueError`` on anything malformed)."""
    if len(data) > _MAX_PART_BYTES:
        raise ValueError("record part exceeds the size limit")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            files = {name: npz[name] for name in npz.files}
        header = json.loads(bytes(files.pop("header")).decode())
        if header.get("format") != PART_FORMAT:
            raise ValueError(f"not a HESV record part ({header.get('format')!r})")
        spec = ModelSpec.from_json(header["spec"])
        n_shapes = len(spec.param_shapes())
        n, me = int(header["n_clients"]), int(header["client"])
        if not 0 <= me < n:
            raise ValueError("client id outside 0..n_clients-1")

        def params(prefix: str) -> Params:
            ps = [files.pop(f"{prefix}/{k}") for k in range(n_shapes)]
            spec.check_params(ps)
            if any(p.dtype.kind != "f" or not np.isfinite(p).all() for p in ps):
                raise ValueError("model parameters must be finite floats")
            return ps

        rounds, glob, local = [], [], {}
        for t, rh in enumerate(header["rounds"]):
            parts = tuple(int(c) for c in rh["participants"])
            weights = np.asarray(rh["weights"], dtype=np.float64)
            RoundRecord([], parts, tuple([] for _ in parts), weights)  # alignment checks
            if parts and (min(parts) < 0 or max(parts) >= n):
                raise ValueError("participant ids outside 0..n_clients-1")
            rounds.append((parts, weights))
            glob.append(params(f"r{t}/global"))
            if me in parts:
                local[t] = params(f"r{t}/local")
        if files:
            raise ValueError(f"unexpected arrays {sorted(files)[:3]}")
    except (OSError, KeyError, TypeError, UnicodeDecodeError, AttributeError, EOFError,
            zipfile.BadZipFile) as exc:
        raise ValueError(f"malformed record part: {exc!r}") from None
    except ProtocolError as exc:
        raise ValueError(str(exc)) from None
    return RecordPart(spec, n, me, tuple(rounds), tuple(glob), local)


def load_test_set(path: Path) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """A client's test set: ``.npz`` with ``x`` (samples x features) and ``y`` (labels)."""
    with np.load(path, allow_pickle=False) as npz:
        x = np.asarray(npz["x"], dtype=np.float64)
        y = np.asarray(npz["y"])
    x = x.reshape(len(x), -1) if x.ndim != 2 else x
    if y.ndim != 1 or len(y) != len(x) or not np.isfinite(x).all():
        raise ValueError("the test set needs finite x (samples x features) and one label "
                         "per sample in y")
    if y.dtype.kind not in "iu":
        raise ValueError("labels must be integers")
    return x, y.astype(np.int64)


# -------------------------------------------------------------------- client side
@dataclass
class _Node:
    identity: Identity
    roster: Roster
    part: RecordPart
    x: NDArray[np.float64]
    y: NDArray[np.int64]
    presets: tuple[str, ...]
    allow_paper: bool


def _path(cfg: Mapping[str, Any], key: str) -> Path:
    raw = cfg.get(key)
    if not raw:
        raise NodeCheckFailed("node-config", f"this SuperNode has no '{key}' node config")
    return Path(str(raw))


def _load(cfg: Mapping[str, Any]) -> _Node:
    """This client's files and policy, from its own node config only."""
    ident_path, roster_path = _path(cfg, "identity-path"), _path(cfg, "roster-path")
    try:
        identity = Identity.load(ident_path)
    except (OSError, ValueError) as exc:
        raise NodeCheckFailed("identity-invalid", f"{ident_path}: {exc}") from None
    try:
        roster = Roster.load(roster_path)
    except (OSError, ValueError) as exc:
        raise NodeCheckFailed("roster-invalid", f"{roster_path}: {exc}") from None
    if identity.name not in roster or roster.public_key(identity.name) != identity.public_key:
        raise NodeCheckFailed("identity-not-on-roster", f"{identity.name!r} is not on "
                              f"{roster_path} with this key")
    try:
        part = load_record_part(_path(cfg, "hesv-record-path").read_bytes())
        x, y = load_test_set(_path(cfg, "hesv-test-path"))
        if len(x) and x.shape[1] != part.spec.in_features:
            raise ValueError(f"the test set has {x.shape[1]} features, the model "
                             f"{part.spec.in_features}")
        if len(y) and (y.min() < 0 or y.max() >= part.spec.layers[-1].out_features):
            raise ValueError("a label is outside the model's classes")
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as exc:
        raise NodeCheckFailed("input-invalid", f"HESV files: {exc!r}") from None
    try:
        raw = str(cfg.get("presets", "") or "").strip()
        presets = tuple(p for p in re.split(r"[\s,]+", raw) if p) if raw else (HESV_PRESET,)
        allow_paper = _flag(cfg.get("allow-paper-schedule", False), "allow-paper-schedule")
    except ValueError as exc:
        raise NodeCheckFailed("node-config", str(exc)) from None
    return _Node(identity, roster, part, x, y, presets, allow_paper)


def _config(meta: Mapping[str, Any]) -> tuple[HESVConfig, str]:
    cfg = HESVConfig(readers.text(meta, "preset", max_length=64),
                     readers.flag(meta, "linear-shortcut"),
                     batch_hint=readers.integer(meta, "batch-hint", 1, 1 << 20),
                     complex_packing=readers.flag(meta, "complex-packing"))
    return cfg, readers.text(meta, "schedule", choices=SCHEDULES)


def _hello(blobs: list[bytes], meta: dict[str, Any], state: RunState
           ) -> tuple[list[bytes], dict[str, Any]]:
    """Check the run against this client's policy, load its files, say hello."""
    if state.data:
        raise NodeCheckFailed("out-of-order", "a second hello in this run")
    node = _load(state.node_config)
    cfg, schedule = _config(meta)
    if cfg.preset not in node.presets:
        raise PolicyViolation(f"preset {cfg.preset!r} is not one this client builds keys "
                              f"for ({list(node.presets)})", check="preset")
    if schedule == "paper" and not node.allow_paper:
        raise PolicyViolation("the paper's decryption schedule lets a client solve for "
                              "another's samples (node config allow-paper-schedule)",
                              check="schedule")
    if node.part.n_clients != len(node.roster):
        raise NodeCheckFailed("input-invalid", "the record's clients are not the roster's")
    try:
        spec = cfg.key_spec(node.part.spec)
    except ValueError as exc:
        raise ProtocolError(f"the run's configuration is invalid: {exc}") from None
    party = KeySetupParty(node.identity, node.roster, spec, min_parties=len(node.roster))
    hello = party.hello()
    state.data.update(node=node, config=cfg, schedule=schedule, setup=party)
    _node_logger(state.node_config).info(
        "run %d: HESV (%s schedule, preset %s) as client %d of %d (%s, %d test samples)",
        state.run_id, schedule, cfg.preset, node.part.client, node.part.n_clients,
        node.identity.name, len(node.y))
    return [hello], {"client": node.part.client, "public": node.part.public()}


def _need(state: RunState, *keys: str) -> None:
    if any(k not in state.data for k in keys):
        raise NodeCheckFailed("out-of-order", f"this step needs {keys} from earlier steps")


def _offer(blobs: list[bytes], meta: dict[str, Any], state: RunState
           ) -> tuple[list[bytes], dict[str, Any]]:
    _need(state, "setup")
    (request,) = readers.blobs(blobs, 1)
    return [state.data["setup"].offer(request)], {}


def _deliver(blobs: list[bytes], meta: dict[str, Any], state: RunState
             ) -> tuple[list[bytes], dict[str, Any]]:
    _need(state, "setup")
    (delivery,) = readers.blobs(blobs, 1)
    return [state.data["setup"].receive(delivery)], {}


def _confirmed(blobs: list[bytes], meta: dict[str, Any], state: RunState
               ) -> tuple[list[bytes], dict[str, Any]]:
    """Keys from the confirmed transcript; the client's role; its encrypted test data."""
    _need(state, "setup", "node")
    (bundle,) = readers.blobs(blobs, 1)
    keys = state.data.pop("setup").finish(bundle)
    node: _Node = state.data["node"]
    part = node.part
    strict = state.data["schedule"] == "strict"
    view = ClientView(ModelSpace.of(part.rounds), part.client) if strict else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        client = HESVClient(part.client, keys, part.spec, state.data["config"],
                            part.n_clients, node.x, node.y, level="strong", view=view)
    state.data["client"] = client
    return ([client.upload_data()] if len(node.y) else []), {}


def _model_uploads(state: RunState, meta: Mapping[str, Any], key: str) -> list[bytes]:
    """This client's encrypted models of round ``meta[key]``: the global one (client 0),
    its own local one (if it took part); each round once, rounds in order."""
    client: HESVClient = state.data["client"]
    part: RecordPart = state.data["node"].part
    t = readers.integer(meta, key, 0, len(part.rounds) - 1)
    if t < state.data.get("next-round", 0):
        raise NodeCheckFailed("out-of-order", f"round {t}'s models were already sent")
    state.data["next-round"] = t + 1
    out = []
    if part.client == 0:
        out.append(client.upload_model(t, part.global_params[t], kind="global"))
    if t in part.local_params:
        out.append(client.upload_model(t, part.local_params[t], kind="local"))
    return out


def _models(blobs: list[bytes], meta: dict[str, Any], state: RunState
            ) -> tuple[list[bytes], dict[str, Any]]:
    """This client's encrypted models of the first round."""
    _need(state, "client")
    return _model_uploads(state, meta, "round"), {}


def _eval(blobs: list[bytes], meta: dict[str, Any], state: RunState
          ) -> tuple[list[bytes], dict[str, Any]]:
    """Every request of this wave, answered in order (each checked by the role); with
    ``upload`` in the message, then this client's models of that (next) round."""
    _need(state, "client")
    client: HESVClient = state.data["client"]
    answers = [client.handle(req) for req in blobs]
    uploads = _model_uploads(state, meta, "upload") if "upload" in meta else []
    return answers + uploads, {"answers": len(answers)}


def _finish(blobs: list[bytes], meta: dict[str, Any], state: RunState
            ) -> tuple[list[bytes], dict[str, Any]]:
    """The federated Shapley values every client learns; the run ends on this node."""
    _need(state, "node")
    node: _Node = state.data["node"]
    fsv = readers.reals(meta, "fsv", length=node.part.n_clients)
    state.done = True
    _node_logger(state.node_config).info("run %d: HESV federated Shapley values %s",
                                         state.run_id, [round(v, 6) for v in fsv])
    return [], {}


handle_hello = hosted("hesv_hello", "fedsec.runtime.flower_hesv:_hello")
handle_offer = hosted("hesv_offer", "fedsec.runtime.flower_hesv:_offer")
handle_deliver = hosted("hesv_deliver", "fedsec.runtime.flower_hesv:_deliver")
handle_confirmed = hosted("hesv_confirmed", "fedsec.runtime.flower_hesv:_confirmed")
handle_models = hosted("hesv_models", "fedsec.runtime.flower_hesv:_models")
handle_eval = hosted("hesv_eval", "fedsec.runtime.flower_hesv:_eval")
handle_finish = hosted("hesv_finish", "fedsec.runtime.flower_hesv:_finish")


# -------------------------------------------------------------------- server side
@dataclass(frozen=True)
class HESVOptions:
    """Validated run config of the HESV ServerApp."""

    preset: str = HESV_PRESET
    batch_hint: int = 0
    schedule: str = "strict"
    linear_shortcut: bool = True
    complex_packing: bool = True
    roster_path: str = ""
    num_nodes: int = 0
    step_timeout: float = 120.0
    wait_nodes_timeout: float = 60.0
    result_path: str = ""

    @classmethod
    def from_run_config(cls, cfg: Mapping[str, Any]) -> HESVOptions:
        d = cls()
        try:
            opts = cls(
                preset=str(cfg.get("hesv-preset", d.preset)),
                batch_hint=int(cfg.get("hesv-batch-hint", d.batch_hint)),
                schedule=str(cfg.get("hesv-schedule", d.schedule)),
                linear_shortcut=_flag(cfg.get("hesv-linear-shortcut", True),
                                      "hesv-linear-shortcut"),
                complex_packing=_flag(cfg.get("hesv-complex-packing", True),
                                      "hesv-complex-packing"),
                roster_path=str(cfg.get("roster-path", d.roster_path)),
                num_nodes=int(cfg.get("num-nodes", d.num_nodes)),
                step_timeout=float(cfg.get("step-timeout", d.step_timeout)),
                wait_nodes_timeout=float(cfg.get("wait-nodes-timeout",
                                                 d.wait_nodes_timeout)),
                result_path=str(cfg.get("result-path", d.result_path)))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"invalid run config value: {exc}") from None
        if opts.schedule not in SCHEDULES:
            raise ValueError(f"The 'hesv-schedule' run config must be one of "
                             f"{list(SCHEDULES)}. Got {opts.schedule!r} instead.")
        if not 1 <= opts.batch_hint <= 1 << 20:
            raise ValueError(f"The 'hesv-batch-hint' run config must be in 1..{1 << 20} (the "
                             f"largest client test set). Got {opts.batch_hint} instead.")
        if opts.num_nodes < 0:
            raise ValueError(f"The 'num-nodes' run config must be >= 0. Got "
                             f"{opts.num_nodes} instead.")
        if opts.step_timeout <= 0 or opts.wait_nodes_timeout <= 0:
            raise ValueError("The 'step-timeout' and 'wait-nodes-timeout' run config values "
                             "must be > 0.")
        HESVConfig(opts.preset).slots()  # a known preset (ValueError names it)
        return opts

    def meta(self) -> dict[str, Any]:
        return {"preset": self.preset, "linear-shortcut": self.linear_shortcut,
                "batch-hint": self.batch_hint, "complex-packing": self.complex_packing,
                "schedule": self.schedule}

    def config(self) -> HESVConfig:
        return HESVConfig(self.preset, self.linear_shortcut, batch_hint=self.batch_hint,
                          complex_packing=self.complex_packing)


class HESVRun(ServerRun):
    """One HESV evaluation driven by the ServerApp."""

    hv: HESVOptions

    @classmethod
    def create(cls, grid: Grid, hv: HESVOptions, run_id: int) -> HESVRun:
        base = RunOptions(security="semi-honest", roster_path=hv.roster_path,
                          num_nodes=hv.num_nodes, step_timeout=hv.step_timeout,
                          wait_nodes_timeout=hv.wait_nodes_timeout,
                          result_path=hv.result_path)
        run = cls(grid, base, run_id=run_id)
        run.hv = hv
        run.doc = {"status": "starting", "protocol": "hesv", "run_id": run_id,
                   "schedule": hv.schedule, "preset": hv.preset, "estimator": "exact",
                   "parties": {"included": [], "left_out": []}, "bytes": {},
                   "timings": {}, "exchanges": 0}
        return run

    def xstep(self, name: str, contents: Mapping[int, tuple[Sequence[bytes], dict[str, Any]]],
              *, attempt: int = 0, expect_blobs: int | None = 1) -> dict[int, list[bytes]]:
        """One exchange that every addressed client must answer (HESV needs them all)."""
        res = self.step(name, contents, attempt=attempt, expect_blobs=expect_blobs)
        self.doc["exchanges"] += 1
        gone = [n for n in contents if n not in res.ok]
        if gone:
            raise RunFailed(f"{name}: no valid answer from "
                            f"{[self.label(n) for n in gone]} (HESV needs every client; "
                            f"checks {sorted(set(res.refused.values())) or 'none'})")
        return {n: res.ok[n][0] for n in contents}

    def run(self) -> dict[str, Any]:
        roster = Roster.load(Path(self.hv.roster_path)) if self.hv.roster_path else None
        if roster is None:
            raise ValueError("The 'roster-path' run config must name the federation's "
                             "roster on the SuperLink machine.")
        self.doc["roster_fingerprint"] = roster.fingerprint
        n = len(roster)
        self.write("waiting-for-nodes")
        wait_for_nodes(self.grid, self.hv.num_nodes or n, self.hv.wait_nodes_timeout)
        nodes = sorted(self.grid.get_node_ids())[:2 * n + 8]
        res = self.step("hesv_hello", {m: ([], self.hv.meta()) for m in nodes})
        self.doc["exchanges"] += 1
        hellos = {m: res.ok[m][0][0] for m in nodes if m in res.ok}
        publics = {res.ok[m][1].get("public") for m in hellos}
        if len(hellos) != n:
            raise RunFailed(f"hesv_hello: {len(hellos)} of the roster's {n} clients accepted "
                            f"the run (checks {sorted(set(res.refused.values())) or 'none'})")
        if len(publics) != 1 or not isinstance(next(iter(publics)), str):
            raise RunFailed("hesv_hello: the clients hold different training records")
        pub = json.loads(str(next(iter(publics))))
        spec = ModelSpec.from_json(pub["spec"])
        rounds = [(tuple(int(c) for c in p), np.asarray(w, dtype=np.float64))
                  for p, w in pub["rounds"]]
        index = {m: res.ok[m][1].get("client") for m in hellos}
        if sorted(i for i in index.values() if isinstance(i, int)) != list(range(n)):
            raise RunFailed("hesv_hello: the clients' ids are not 0..n-1, once each")
        node_of = {int(i): m for m, i in index.items()}  # type: ignore[arg-type]
        config = self.hv.config()
        ks = KeySetupAggregator(roster, config.key_spec(spec), min_parties=n)
        order = list(hellos)
        try:
            holder_idx, request = ks.request([hellos[m] for m in order])
        except ProtocolError as exc:
            raise RunFailed(f"key set-up: {exc}") from None
        by_name = {}
        for m in order:
            by_name[readers.text(wire.decode(hellos[m], expect="keys/hello").meta,
                                 "name")] = m
            self.names[m] = readers.text(wire.decode(hellos[m], expect="keys/hello").meta,
                                         "name")
        key_order = [by_name[name] for name in ks.names]
        holder = key_order[holder_idx]
        offer = self.xstep("hesv_offer", {holder: ([request], {})})
        deliveries = ks.accept(offer[holder][0])
        confirms = self.xstep("hesv_deliver", {m: ([d], {}) for m, d in
                                               zip(key_order, deliveries, strict=True)})
        bundle = ks.confirm([confirms[m][0] for m in key_order])
        data = self.xstep("hesv_confirmed", {m: ([bundle], {}) for m in key_order},
                          expect_blobs=None)
        assert ks.context is not None
        strict = self.hv.schedule == "strict"
        server = HESVServer(ks.context, spec, config, n, rounds, ks.session, level="strong",
                            strict=strict)
        for i in range(n):
            if data[node_of[i]]:
                server.receive_data(i, data[node_of[i]][0])
        if strict:  # refuse before any model is encrypted
            for t in range(len(rounds)):
                server.plan_round(t)
        ssv = np.zeros((len(rounds), n))
        tables = []
        t_eval = time.monotonic()
        uploaded: set[int] = set()  # rounds whose models the server holds

        def uploaders(t: int) -> list[int]:
            return sorted({0, *rounds[t][0]})

        for t, (parts, _w) in enumerate(rounds):
            if t not in uploaded:  # the first round (later ones come with a wave)
                ups = self.xstep("hesv_models", {node_of[i]: ([], {"round": t})
                                                 for i in uploaders(t)},
                                 attempt=t, expect_blobs=None)
                for i in uploaders(t):
                    for blob in ups[node_of[i]]:
                        server.receive_model(i, blob)
                uploaded.add(t)
            k = len(parts)
            queue: list[tuple[int, bytes]] = []
            masks = [int(m) for m in np.argsort(popcounts(k), kind="stable")]
            for mask in masks:
                queue += server.start(t, mask)
            wave = 0
            while queue:
                per: dict[int, list[bytes]] = {}
                for to, req in queue:
                    per.setdefault(to, []).append(req)
                # the first wave also asks for the next round's models: one exchange less
                # per round, and the server holds at most two rounds' models
                nxt_round = t + 1 if wave == 0 and t + 1 < len(rounds) else None
                extra = uploaders(nxt_round) if nxt_round is not None else []
                contents = {node_of[c]: (per.get(c, []),
                                         {"upload": nxt_round} if c in extra else {})
                            for c in sorted({*per, *extra})}
                answers = self.xstep("hesv_eval", contents, attempt=100 * t + wave,
                                     expect_blobs=None)
                queue = []
                for c in sorted({*per, *extra}):
                    reqs = per.get(c, [])
                    got = answers[node_of[c]]
                    if len(got) < len(reqs) or (c not in extra and len(got) != len(reqs)):
                        raise RunFailed(f"hesv_eval: client {c} answered {len(got)} blobs "
                                        f"to {len(reqs)} requests")
                    for reply in got[:len(reqs)]:
                        nxt = server.step(c, reply)
                        if nxt is not None:
                            queue.append(nxt)
                    for blob in got[len(reqs):]:
                        assert nxt_round is not None
                        server.receive_model(c, blob)
                if nxt_round is not None:
                    uploaded.add(nxt_round)
                wave += 1
            table = np.zeros(1 << k)
            for mask in masks:
                table[mask] = server.utility(t, mask)
            phi = shapley_values(table)
            for j, cid in enumerate(parts):
                ssv[t, cid] = phi[j]
            tables.append(table.tolist())
            server.end_round(t)
        self.doc["timings"]["evaluation_s"] = round(time.monotonic() - t_eval, 3)
        fsv = ssv.sum(axis=0)
        self.xstep("hesv_finish", {m: ([], {"fsv": [float(v) for v in fsv]})
                                   for m in key_order}, expect_blobs=0)
        self.doc["parties"]["included"] = [self.names[node_of[i]] for i in range(n)]
        self.doc.update(fsv=[float(v) for v in fsv], ssv=ssv.tolist(), utilities=tables,
                        status="done")
        return self.doc


def main(grid: Grid, context: Context) -> None:
    """ServerApp entry point for ``protocol = "hesv"``: the result JSON
    (``status``, ``fsv``, ``ssv``, ``utilities``, ``exchanges``, ``bytes``, ``timings``)."""
    opts = HESVOptions.from_run_config(context.run_config)
    run = HESVRun.create(grid, opts, int(context.run_id))
    try:
        run.run()
        logger.info("fedsec: HESV done: fsv=%s", run.doc["fsv"])
    except Exception as err:
        run.doc.update(status="failed", error=f"{type(err).__name__}: {err}")
        logger.error("fedsec: HESV run failed: %s", printable(run.doc["error"]))
        raise
    finally:
        run.write()
