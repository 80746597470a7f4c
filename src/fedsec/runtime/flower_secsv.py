"""SecSV (Zheng et al.) on Flower: the principal server P in the ServerApp, the auxiliary
server A and every client on SuperNodes of their own.

Placement (see ``docs/flower-secsv.md``):

* **P** is the ServerApp (:func:`main`). It knows the public round information only
  (participants and FedAvg weights per round, the model architecture: run config
  ``secsv-rounds-path``, a JSON file made by :func:`public_rounds`), drives the rounds as
  the in-process runner does, and relays every message between A and the clients.
* **A** is a SuperNode with node config ``role="auxiliary"`` and its own identity on the
  roster. It announces a fresh seal key (:mod:`fedsec.crypto.sealed`) signed with that
  identity; everything a client sends A through P is sealed to that key and signed by the
  client, bound to the key set-up's session, the step, the round and the evaluation.
* **each client** is a SuperNode with ``role="client"``: its own test set
  (``data-path``, an ``.npz`` with ``x`` and ``y``) and its own part of the training
  record (``record-path``, made by :func:`split_record`: its client index, the public
  round information, the global models it received, its own local models). Its node
  config names A (``auxiliary``: A's roster name), so P cannot substitute another key.

Node-side roles live in the node host (:mod:`fedsec.runtime.node_host`) for the run.

Exchanges (one Flower message per node per step, every request of a step batched in it):
``secsv_hello`` (clients: signed key set-up hello; A: its seal-key announcement),
``secsv_offer`` (the key holder), ``secsv_deliver``, ``secsv_confirmed`` (clients: the
confirmation bundle and A's announcement; BFV keys from the set-up's seed; coarse
bounds back), ``secsv_plan`` (clients: the plan; data shares back, A's sealed), then per
round ``t``: ``secsv_upload`` (the round's encrypted models: P's copy and A's sealed
copy), ``secsv_aux_round`` (A: the sealed models and every evaluation of the round at
once; A's products back), then per layer ``secsv_decrypt`` (each decrypting client: all
its requests of the round and layer; P's answers and A's sealed answers back) and, after
a hidden layer, ``secsv_aux_reshare`` (A: the sealed re-shares; its next products back);
finally ``secsv_aux_labels`` (A: the sealed label shares with P's label masks; A's
zero-test shares back). The first ``secsv_aux_round`` also carries A's set-up (plan,
batches, sealed data shares); the next round's models come with the last layer's
answers.

The protocol's own messages and checks are those of :mod:`fedsec.shapley.secsv`; P and A
keep every coalition of a round in flight at once (:meth:`ServerBase.suspend`,
:meth:`PrincipalServer.suspend_coalition`), which changes no message. Exact SSVs of
dense models with the linearity shortcut, no SampleSkip; ``schedule`` ``"strict"``
(default, the decryption rule) or ``"paper"`` (a client accepts it only if its node
config says ``allow-paper-schedule = true``).
"""

from __future__ import annotations

import json
import logging
import secrets
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Self, cast

import numpy as np
from numpy.typing import NDArray

from fedsec.crypto.bfv import BFVContext
from fedsec.crypto.identity import Identity, Roster
from fedsec.crypto.keysetup import KeySetupAggregator, KeySetupParty, KeySpec
from fedsec.crypto.sealed import SealKey, announce, read_announcement, seal, unseal
from fedsec.errors import PolicyViolation, ProtocolError
from fedsec.learning.model import ModelSpec, Params
from fedsec.learning.record import TrainingRecord
from fedsec.metrics.shapley import popcounts
from fedsec.protocol import wire
from fedsec.protocol.accounting import Accounting
from fedsec.protocol.binding import request_id
from fedsec.runtime.node_host import RunState, hosted
from fedsec.shapley.secsv.auxiliary import AuxiliaryServer
from fedsec.shapley.secsv.client import SecSVClient
from fedsec.shapley.secsv.common import EV, SecSVConfig
from fedsec.shapley.secsv.principal import Coalition, PrincipalServer
from fedsec.shapley.secsv.server import Evaluation, RoundInfo
from fedsec.shapley.secure_game import integer_weights, run_rounds
from fedsec.shapley.views import ClientView, ModelSpace

__all__ = ["ClientPart", "split_record", "public_rounds", "save_test_set", "load_test_set",
           "SecSVOptions", "SecSVServerRun", "main", "ACTIONS"]

logger = logging.getLogger("flwr")

#: Every ClientApp action of SecSV (registered in :mod:`fedsec.runtime.flower_apps`).
ACTIONS = ("secsv_hello", "secsv_offer", "secsv_deliver", "secsv_confirmed", "secsv_plan",
           "secsv_upload", "secsv_aux_round", "secsv_decrypt", "secsv_aux_reshare",
           "secsv_aux_labels")
#: The key set-up's CKKS keys are unused; SecSV takes its BFV keys from the set-up's seed.
KEY_SPEC = ("CKKS_128_N8192_DEPTH1", (), False)
ROLE_CLIENT, ROLE_AUX = "client", "auxiliary"
SCHEDULES = ("strict", "paper")
_TAG = "fedsec/secsv-flower/v1"


# =================================================================== public round info
def public_rounds(record: TrainingRecord) -> dict[str, Any]:
    """What SecSV's servers may know of a training run: the model architecture, the
    number of clients and, per round, the participants and FedAvg weights (a JSON
    document; P reads it from the run config's ``secsv-rounds-path``)."""
    return {"version": 1, "spec": record.spec.to_json(), "n_clients": int(record.n_clients),
            "rounds": [{"participants": [int(c) for c in r.participants],
                        "weights": [float(w) for w in r.weights]} for r in record.rounds]}


@dataclass(frozen=True)
class _Public:
    spec: ModelSpec
    n: int
    space: ModelSpace
    doc: dict[str, Any]

    @property
    def n_rounds(self) -> int:
        return len(self.space.rounds)

    def infos(self, cfg: SecSVConfig) -> list[RoundInfo]:
        return [RoundInfo(p, tuple(int(q) for q in integer_weights(np.asarray(w),
                                                                    cfg.weight_bits)))
                for p, w in self.space.rounds]

    def text(self) -> str:
        return json.dumps(self.doc, sort_keys=True)


def _parse_public(doc: Any) -> _Public:
    """Check a public round document (:func:`public_rounds`); ``ProtocolError`` if bad."""
    try:
        if not isinstance(doc, dict) or doc.get("version") != 1:
            raise ValueError("not a version-1 round document")
        spec = ModelSpec.from_json(str(doc["spec"]))
        n = int(doc["n_clients"])
        if not 2 <= n <= 64:
            raise ValueError("n_clients must be in 2..64")
        rounds = doc["rounds"]
        if not isinstance(rounds, list) or not 1 <= len(rounds) <= 1000:
            raise ValueError("rounds must be a non-empty list")
        out = []
        for r in rounds:
            parts = [int(c) for c in r["participants"]]
            weights = [float(w) for w in r["weights"]]
            if parts != sorted(set(parts)) or not all(0 <= c < n for c in parts) \
                    or not 1 <= len(parts) <= 16:
                raise ValueError("participants must be ascending client ids")
            if len(weights) != len(parts) or not all(0 < w < float("inf") for w in weights):
                raise ValueError("weights must be positive, one per participant")
            out.append((parts, weights))
        space = ModelSpace.of(out)
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"malformed public round information: {exc}") from None
    return _Public(spec, n, space, doc)


# =================================================================== a client's part
@dataclass
class ClientPart:
    """One client's part of a training record: its index, the public round information,
    the global model of every round (every client receives it) and its own local models."""

    index: int
    public: dict[str, Any]
    globals: list[Params]
    locals: dict[int, Params] = field(default_factory=dict)

    def save(self, path: str | Path) -> None:
        """An ``.npz`` (no pickles)."""
        arrays: dict[str, Any] = {"index": np.array(self.index),
                                  "public": np.array(json.dumps(self.public, sort_keys=True))}
        for t, g in enumerate(self.globals):
            for k, p in enumerate(g):
                arrays[f"g{t}_{k}"] = np.asarray(p)
        for t, p_ in self.locals.items():
            for k, p in enumerate(p_):
                arrays[f"l{t}_{k}"] = np.asarray(p)
        with Path(path).open("wb") as f:
            np.savez(f, **arrays)

    @classmethod
    def load(cls, path: str | Path) -> ClientPart:
        """Read and check a part written by :meth:`save` (``ValueError`` if bad)."""
        with np.load(Path(path), allow_pickle=False) as z:
            files = dict(z.items())
        try:
            index = int(files.pop("index"))
            doc = json.loads(str(files.pop("public")))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a SecSV client part: {exc}") from None
        try:
            pub = _parse_public(doc)
        except ProtocolError as exc:
            raise ValueError(str(exc)) from None
        if not 0 <= index < pub.n:
            raise ValueError(f"client index {index} outside 0..{pub.n - 1}")
        n_params = len(pub.spec.param_shapes())

        def params(prefix: str) -> Params:
            ps = [np.asarray(files.pop(f"{prefix}_{k}"), dtype=np.float64)
                  for k in range(n_params)]
            pub.spec.check_params(ps)
            if not all(np.isfinite(p).all() for p in ps):
                raise ValueError("model parameters must be finite")
            return ps

        try:
            globals_ = [params(f"g{t}") for t in range(pub.n_rounds)]
            locals_ = {t: params(f"l{t}") for t, (parts, _w) in enumerate(pub.space.rounds)
                       if index in parts}
        except KeyError as exc:
            raise ValueError(f"the client part lacks {exc}") from None
        if files:
            raise ValueError(f"unexpected entries in the client part: {sorted(files)[:4]}")
        return cls(index, doc, globals_, locals_)


def split_record(record: TrainingRecord) -> list[ClientPart]:
    """Each client's part of ``record`` (for tests and demos: in a deployment every
    client keeps its own from training)."""
    pub = public_rounds(record)
    parts = [ClientPart(i, pub, [list(r.global_params) for r in record.rounds])
             for i in range(record.n_clients)]
    for t, r in enumerate(record.rounds):
        for c, p in zip(r.participants, r.local_params, strict=True):
            parts[int(c)].locals[t] = list(p)
    return parts


def save_test_set(path: str | Path, x: NDArray[Any], y: NDArray[Any]) -> None:
    """A client's test set as an ``.npz`` with ``x`` (samples × features) and ``y``."""
    with Path(path).open("wb") as f:
        np.savez(f, x=np.asarray(x, dtype=np.float64), y=np.asarray(y, dtype=np.int64))


def load_test_set(path: str | Path, spec: ModelSpec) -> tuple[NDArray[np.float64],
                                                               NDArray[np.int64]]:
    """Read and check a test set written by :func:`save_test_set` (``ValueError``)."""
    with np.load(Path(path), allow_pickle=False) as z:
        if set(z.files) != {"x", "y"}:
            raise ValueError("the test set must hold exactly 'x' and 'y'")
        x = np.asarray(z["x"], dtype=np.float64)
        y_raw = np.asarray(z["y"])
    x = x.reshape(len(x), -1) if x.ndim != 2 else x
    if y_raw.ndim != 1 or len(y_raw) != len(x) or not len(x):
        raise ValueError("y must be 1-D with one label per row of x (at least one row)")
    if y_raw.dtype.kind not in "iu" and not np.all(y_raw == np.rint(y_raw)):
        raise ValueError("labels must be integers")
    y = y_raw.astype(np.int64)
    if x.shape[1] != spec.in_features:
        raise ValueError(f"x must have {spec.in_features} features. Got {x.shape[1]}.")
    if not np.isfinite(x).all():
        raise ValueError("x must be finite")
    if y.min() < 0 or y.max() >= spec.n_classes:
        raise ValueError(f"labels must lie in 0..{spec.n_classes - 1}")
    return x, y


# =================================================================== sealed relays
def _ann_context(run_id: int, roster: Roster) -> bytes:
    return f"{_TAG}|aux-key|{int(run_id)}|{roster.fingerprint}".encode()


def _seal_context(session: str, step: str, t: int, extra: str | int) -> bytes:
    return f"{_TAG}|{session}|{step}|{int(t)}|{extra}".encode()


# =================================================================== node side
def _node_files(state: RunState) -> tuple[Identity, Roster, str]:
    from fedsec.runtime.flower_client import NodeCheckFailed

    cfg = state.node_config
    role = str(cfg.get("role", "") or "")
    if role not in (ROLE_CLIENT, ROLE_AUX):
        raise NodeCheckFailed("node-config", "node config 'role' must be 'client' or "
                              f"'auxiliary' for SecSV. Got {role!r} instead.")
    for key in ("identity-path", "roster-path"):
        if not cfg.get(key):
            raise NodeCheckFailed("node-config", f"this SuperNode has no {key!r} node config")
    try:
        identity = Identity.load(str(cfg["identity-path"]))
    except (OSError, ValueError) as exc:
        raise NodeCheckFailed("identity-invalid", f"identity file: {exc}") from None
    try:
        roster = Roster.load(str(cfg["roster-path"]))
    except (OSError, ValueError) as exc:
        raise NodeCheckFailed("roster-invalid", f"roster: {exc}") from None
    if identity.name not in roster or roster.public_key(identity.name) != identity.public_key:
        raise NodeCheckFailed("identity-not-on-roster",
                              f"the identity {identity.name!r} is not on the roster")
    return identity, roster, role


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", ""):
        return value.lower() in ("true", "1")
    raise ValueError(f"not a boolean: {value!r}")


def _hello(blobs: list[bytes], meta: dict[str, Any], state: RunState
           ) -> tuple[list[bytes], dict[str, Any]]:
    """Clients: check the run against the node's files and policy, signed key set-up
    hello. A: its seal-key announcement."""
    from fedsec.runtime.flower_client import NodeCheckFailed

    identity, roster, role = _node_files(state)
    cfg = state.node_config
    pub = _parse_public(json.loads(str(meta.get("public", "null"))))
    schedule = str(meta.get("schedule", ""))
    if schedule not in SCHEDULES:
        raise ProtocolError("unknown schedule")
    state.data.update(identity=identity, roster=roster, role=role, public=pub,
                      schedule=schedule, cfg=SecSVConfig().check())
    if role == ROLE_AUX:
        key = SealKey.generate()
        state.data["seal"] = key
        return [announce(identity, key, context=_ann_context(state.run_id, roster))], {
            "role": ROLE_AUX}
    try:
        allow_paper = _flag(cfg.get("allow-paper-schedule", False))
    except ValueError as exc:
        raise NodeCheckFailed("node-config", f"allow-paper-schedule: {exc}") from None
    if schedule == "paper" and not allow_paper:
        raise PolicyViolation("the server asks for schedule='paper', which lets a decrypting "
                              "client solve for other clients' test data; this node's "
                              "policy (allow-paper-schedule) refuses it", check="schedule")
    aux = str(cfg.get("auxiliary", "") or "")
    if not aux or aux not in roster or aux == identity.name:
        raise NodeCheckFailed("node-config", "node config 'auxiliary' must name the "
                              "auxiliary server's roster identity (not this node's)")
    for path_key in ("record-path", "data-path"):
        if not cfg.get(path_key):
            raise NodeCheckFailed("node-config",
                                  f"this SuperNode has no {path_key!r} node config")
    try:
        part = ClientPart.load(str(cfg["record-path"]))
    except (OSError, ValueError) as exc:
        raise NodeCheckFailed("record-invalid", f"record part: {exc}") from None
    if _parse_public(part.public).text() != pub.text():
        raise PolicyViolation("the server's round information differs from this node's "
                              "training record", check="round-info")
    try:
        x, y = load_test_set(str(cfg["data-path"]), pub.spec)
    except (OSError, ValueError) as exc:
        raise NodeCheckFailed("input-invalid", f"test set: {exc}") from None
    party = KeySetupParty(identity, roster, KeySpec.create(*KEY_SPEC), min_parties=pub.n)
    state.data.update(part=part, x=x, y=y, aux=aux, party=party)
    return [party.hello()], {"role": ROLE_CLIENT, "index": part.index, "samples": len(y)}


def _client_only(state: RunState) -> None:
    if state.data.get("role") != ROLE_CLIENT:
        raise ProtocolError("a client step sent to a node that is not a SecSV client")


def _aux_only(state: RunState) -> None:
    if state.data.get("role") != ROLE_AUX:
        raise ProtocolError("an auxiliary-server step sent to another node")


def _one(blobs: list[bytes], n: int = 1) -> list[bytes]:
    if len(blobs) != n:
        raise ProtocolError(f"expected {n} blobs, got {len(blobs)}")
    return blobs


def _offer(blobs: list[bytes], meta: dict[str, Any], state: RunState
           ) -> tuple[list[bytes], dict[str, Any]]:
    _client_only(state)
    return [state.data["party"].offer(_one(blobs)[0])], {}


def _deliver(blobs: list[bytes], meta: dict[str, Any], state: RunState
             ) -> tuple[list[bytes], dict[str, Any]]:
    _client_only(state)
    return [state.data["party"].receive(_one(blobs)[0])], {}


def _confirmed(blobs: list[bytes], meta: dict[str, Any], state: RunState
               ) -> tuple[list[bytes], dict[str, Any]]:
    """Finish key set-up (BFV keys from its seed), read A's seal key, publish bounds."""
    _client_only(state)
    bundle, ann = _one(blobs, 2)
    d = state.data
    keys = d.pop("party").finish(bundle)
    cfg: SecSVConfig = d["cfg"]
    pub: _Public = d["public"]
    part: ClientPart = d["part"]
    d["aux_key"] = read_announcement(d["roster"], d["aux"], ann,
                                     context=_ann_context(state.run_id, d["roster"]))
    leader = int(meta.get("leader", -1))
    if not 0 <= leader < pub.n:
        raise ProtocolError("malformed leader")
    ctx = BFVContext.from_seed(keys.seed, params=cfg.bfv, label=keys.session.encode())
    i = part.index
    client = SecSVClient(i, pub.n, ctx, d["x"], d["y"], pub.spec, cfg, session=keys.session,
                         view=ClientView(pub.space, i) if d["schedule"] == "strict" else None)
    owned: list[tuple[int, str, Params]] = []
    for t in range(pub.n_rounds):
        if leader == i:
            owned.append((t, "global", part.globals[t]))
        if t in part.locals:
            owned.append((t, f"c{i}", part.locals[t]))
    d.update(client=client, session=keys.session, leader=leader, next_upload=0)
    public = [(t, part.globals[t]) for t in range(pub.n_rounds)]
    return [client.coarse_bounds(owned, public)], {}


def _seal_to_aux(d: dict[str, Any], payload: bytes, step: str, t: int, extra: str | int
                 ) -> bytes:
    return seal(d["identity"], d["aux"], d["aux_key"], payload,
                context=_seal_context(d["session"], step, t, extra))


def _plan(blobs: list[bytes], meta: dict[str, Any], state: RunState
          ) -> tuple[list[bytes], dict[str, Any]]:
    """The plan; this client's data shares (A's sealed)."""
    _client_only(state)
    d = state.data
    client: SecSVClient = d["client"]
    client.receive_plan(_one(blobs)[0])
    to_p, to_a = client.share_data()
    return [to_p, _seal_to_aux(d, to_a, "data", -1, client.index)], {}


def _upload_models(d: dict[str, Any], t: int) -> tuple[list[bytes], list[str]]:
    if not d["next_upload"] <= t < d["public"].n_rounds:  # each round's models once
        raise ProtocolError("models of an unexpected round requested")
    d["next_upload"] = t + 1
    client: SecSVClient = d["client"]
    part: ClientPart = d["part"]
    jobs: list[tuple[str, Params]] = []
    if d["leader"] == client.index:
        jobs.append(("global", part.globals[t]))
    if t in part.locals:
        jobs.append((f"c{client.index}", part.locals[t]))
    out: list[bytes] = []
    for key, params in jobs:
        blob = client.encrypt_model(t, key, params)
        out += [blob, _seal_to_aux(d, blob, "model", t, key)]
    return out, [k for k, _ in jobs]


def _upload(blobs: list[bytes], meta: dict[str, Any], state: RunState
            ) -> tuple[list[bytes], dict[str, Any]]:
    """This client's encrypted models of round ``t`` (the global one if it leads)."""
    _client_only(state)
    _one(blobs, 0)
    out, keys = _upload_models(state.data, int(meta.get("round", -1)))
    return out, {"keys": keys}


def _decrypt(blobs: list[bytes], meta: dict[str, Any], state: RunState
             ) -> tuple[list[bytes], dict[str, Any]]:
    """Every decryption request of the round for this client: P's answers, then A's
    answers sealed; optionally the next round's models (``upload``)."""
    _client_only(state)
    d = state.data
    client: SecSVClient = d["client"]
    t = int(meta.get("round", -1))
    to_p, to_a = [], []
    for req in blobs:
        rmeta = wire.decode(req, expect="secsv/decrypt", max_bytes=1 << 28).meta
        ev, layer = request_id(rmeta, EV), rmeta.get("layer")
        if not isinstance(layer, int):
            raise ProtocolError("malformed decryption request: layer")
        p, a = client.decrypt_layer(req)
        to_p.append(p)
        to_a.append(_seal_to_aux(d, a, "answer", t, f"{ev}/{layer}"))
    out_meta: dict[str, Any] = {"answers": len(to_p)}
    models: list[bytes] = []
    if "upload" in meta:
        models, keys = _upload_models(d, int(meta["upload"]))
        out_meta["keys"] = keys
    if meta.get("last") is True:
        state.done = True
    return to_p + to_a + models, out_meta


def _unseal_from(d: dict[str, Any], client: int, data: bytes, step: str, t: int,
                 extra: str | int) -> bytes:
    names: list[str] = d["names"]
    if not 0 <= client < len(names):
        raise ProtocolError("sealed message from an unknown client")
    return unseal(d["seal"], d["roster"], names[client], d["identity"].name, data,
                  context=_seal_context(d["session"], step, t, extra))


def _aux_setup(d: dict[str, Any], blobs: list[bytes], meta: dict[str, Any]) -> int:
    pub: _Public = d["public"]
    names = meta.get("names")
    roster: Roster = d["roster"]
    if not isinstance(names, list) or len(names) != pub.n or len(set(names)) != pub.n or \
            not all(isinstance(v, str) and v in roster and v != d["identity"].name
                    for v in names):
        raise ProtocolError("malformed client names")
    session = str(meta.get("session", ""))
    if not session:
        raise ProtocolError("malformed session")
    d.update(names=list(names), session=session, parked={})
    cfg: SecSVConfig = d["cfg"]
    aux = AuxiliaryServer(BFVContext(cfg.bfv), pub.spec, pub.n, cfg, pub.infos(cfg),
                          session=session, linear_shortcut=True)
    if len(blobs) < 2 + pub.n:
        raise ProtocolError("malformed set-up")
    aux.receive_plan(blobs[0])
    aux.receive_data([_unseal_from(d, i, blobs[2 + i], "data", -1, i) for i in range(pub.n)])
    aux.receive_batches(blobs[1])
    d["A"] = aux
    return 2 + pub.n


def _aux_round(blobs: list[bytes], meta: dict[str, Any], state: RunState
               ) -> tuple[list[bytes], dict[str, Any]]:
    """A: (set-up,) the round's sealed models, then every evaluation P opens: A's
    products for each."""
    _aux_only(state)
    d = state.data
    at = _aux_setup(d, blobs, meta) if meta.get("setup") is True else 0
    if "A" not in d:
        raise ProtocolError("no set-up yet")
    aux: AuxiliaryServer = d["A"]
    t = int(meta.get("round", -1))
    if t != d.get("next_round", 0):
        raise ProtocolError("an unexpected round")
    d["next_round"] = t + 1
    if t > 0:
        aux.end_round(t - 1)
    aux.start_round(t)
    owners, keys = meta.get("owners"), meta.get("keys")
    if not isinstance(owners, list) or not isinstance(keys, list) or len(owners) != len(keys):
        raise ProtocolError("malformed model list")
    for owner, key in zip(owners, keys, strict=True):
        aux.receive_model(_unseal_from(d, int(owner), blobs[at], "model", t, str(key)))
        at += 1
    parked: dict[str, Evaluation] = {}
    out: list[bytes] = []
    counts: list[int] = []
    for opening in blobs[at:]:
        aux.open_eval(opening)
        prods = aux.products()
        ev = aux.suspend()
        parked[ev.ev] = ev
        out += prods
        counts.append(len(prods))
    d["parked"] = parked
    return out, {"counts": counts}


def _aux_labels(blobs: list[bytes], meta: dict[str, Any], state: RunState
                ) -> tuple[list[bytes], dict[str, Any]]:
    """A: per evaluation, the decrypting client's sealed label shares and P's mask ->
    A's zero-test share for P."""
    _aux_only(state)
    d = state.data
    aux: AuxiliaryServer = d["A"]
    evs, decs = meta.get("evs"), meta.get("decryptors")
    t = int(meta.get("round", -1))
    if t != d.get("next_round", 0) - 1 or not isinstance(evs, list) or \
            not isinstance(decs, list) or len(evs) != len(decs) or len(blobs) != 2 * len(evs):
        raise ProtocolError("malformed label round")
    parked: dict[str, Evaluation] = d["parked"]
    out = []
    for k, (ev_id, dec) in enumerate(zip(evs, decs, strict=True)):
        ev = parked.pop(str(ev_id), None)
        if ev is None:
            raise ProtocolError("labels of an evaluation that is not in flight")
        aux.resume(ev)
        to_a = _unseal_from(d, int(dec), blobs[2 * k], "answer", t, f"{ev.ev}/{ev.layer}")
        out.append(aux.label_diff(to_a, blobs[2 * k + 1]))
    if meta.get("last") is True:
        state.done = True
    return out, {}


def _aux_reshare(blobs: list[bytes], meta: dict[str, Any], state: RunState
                 ) -> tuple[list[bytes], dict[str, Any]]:
    """A, hidden layers: per evaluation, the decrypting client's sealed re-share of the
    layer's output (A's share of the next layer's input) -> A's next products."""
    _aux_only(state)
    d = state.data
    aux: AuxiliaryServer = d["A"]
    evs, decs = meta.get("evs"), meta.get("decryptors")
    t = int(meta.get("round", -1))
    if t != d.get("next_round", 0) - 1 or not isinstance(evs, list) or \
            not isinstance(decs, list) or len(evs) != len(decs) or len(blobs) != len(evs):
        raise ProtocolError("malformed re-share round")
    parked: dict[str, Evaluation] = d["parked"]
    out: list[bytes] = []
    counts: list[int] = []
    for blob, ev_id, dec in zip(blobs, evs, decs, strict=True):
        ev = parked.pop(str(ev_id), None)
        if ev is None:
            raise ProtocolError("a re-share of an evaluation that is not in flight")
        aux.resume(ev)
        aux.receive_share(_unseal_from(d, int(dec), blob, "answer", t, f"{ev.ev}/{ev.layer}"))
        prods = aux.products()
        parked[ev.ev] = aux.suspend()
        out += prods
        counts.append(len(prods))
    return out, {"counts": counts}


_M = "fedsec.runtime.flower_secsv"
handle_hello = hosted("secsv_hello", f"{_M}:_hello")
handle_offer = hosted("secsv_offer", f"{_M}:_offer")
handle_deliver = hosted("secsv_deliver", f"{_M}:_deliver")
handle_confirmed = hosted("secsv_confirmed", f"{_M}:_confirmed")
handle_plan = hosted("secsv_plan", f"{_M}:_plan")
handle_upload = hosted("secsv_upload", f"{_M}:_upload")
handle_aux_round = hosted("secsv_aux_round", f"{_M}:_aux_round")
handle_decrypt = hosted("secsv_decrypt", f"{_M}:_decrypt")
handle_aux_labels = hosted("secsv_aux_labels", f"{_M}:_aux_labels")
handle_aux_reshare = hosted("secsv_aux_reshare", f"{_M}:_aux_reshare")


# =================================================================== server side (P)
class RunFailed(ProtocolError):
    """The SecSV run stopped (the result JSON says where and who)."""


@dataclass(frozen=True)
class SecSVOptions:
    """The ServerApp's validated run config for SecSV."""

    roster_path: str = ""
    rounds_path: str = ""
    schedule: str = "strict"
    step_timeout: float = 120.0
    wait_nodes_timeout: float = 120.0
    result_path: str = ""

    #: the protocol's run-config key prefix (``secsv-rounds-path``...)
    PREFIX: ClassVar[str] = "secsv"

    @classmethod
    def from_run_config(cls, cfg: Mapping[str, Any]) -> Self:
        d, pre = cls(), cls.PREFIX
        try:
            opts = cls(roster_path=str(cfg.get("roster-path", d.roster_path)),
                       rounds_path=str(cfg.get(f"{pre}-rounds-path", d.rounds_path)),
                       schedule=str(cfg.get(f"{pre}-schedule", d.schedule)),
                       step_timeout=float(cfg.get("step-timeout", d.step_timeout)),
                       wait_nodes_timeout=float(cfg.get("wait-nodes-timeout",
                                                        d.wait_nodes_timeout)),
                       result_path=str(cfg.get("result-path", d.result_path)))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"invalid run config value: {exc}") from None
        if not opts.roster_path:
            raise ValueError("The 'roster-path' run config must name the federation's roster "
                             "(roster.json) on the SuperLink machine.")
        if not opts.rounds_path:
            raise ValueError(f"The '{pre}-rounds-path' run config must name the public round "
                             "information (JSON: model, participants and weights per round) "
                             "on the SuperLink machine.")
        if opts.schedule not in SCHEDULES:
            raise ValueError(f"The '{pre}-schedule' run config must be one of "
                             f"{list(SCHEDULES)}. Got {opts.schedule!r} instead.")
        if not opts.step_timeout > 0 or not opts.wait_nodes_timeout > 0:
            raise ValueError("The 'step-timeout' and 'wait-nodes-timeout' run config values "
                             "must be > 0.")
        return opts

    def load(self) -> tuple[Roster, _Public]:
        try:
            roster = Roster.load(self.roster_path)
        except (OSError, ValueError) as exc:
            raise ValueError(f"The 'roster-path' run config names {self.roster_path}, which "
                             f"is not a readable roster: {exc}") from None
        try:
            doc = json.loads(Path(self.rounds_path).read_text(encoding="utf-8"))
            pub = _parse_public(doc)
        except (OSError, ValueError, ProtocolError) as exc:
            raise ValueError(f"The 'secsv-rounds-path' run config names {self.rounds_path}, "
                             f"which is not valid round information: {exc}") from None
        if len(roster) < pub.n + 1:
            raise ValueError(f"The roster lists {len(roster)} identities; SecSV needs the "
                             f"{pub.n} clients and the auxiliary server.")
        return roster, pub


@dataclass
class _PublicRound:
    participants: tuple[int, ...]


@dataclass
class _PublicRecord:
    n_clients: int
    rounds: tuple[_PublicRound, ...]

    @property
    def n_rounds(self) -> int:
        return len(self.rounds)


@dataclass
class SecSVServerRun:
    """P's side of one SecSV run over a Flower grid."""

    grid: Any
    opts: SecSVOptions
    run_id: int = 0
    doc: dict[str, Any] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    _t0: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.doc = {"status": "starting", "protocol": "secsv", "run_id": self.run_id,
                    "schedule": self.opts.schedule, "exchanges": 0, "steps": [],
                    "bytes": {"to_nodes": 0, "from_nodes": 0}, "timings": {}}

    # ------------------------------------------------------------------ reporting
    def write(self, status: str | None = None) -> None:
        import os

        if status is not None:
            self.doc["status"] = status
        self.doc["timings"]["total_s"] = round(time.monotonic() - self._t0, 3)
        if not self.opts.result_path:
            return
        p = Path(self.opts.result_path)
        tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.doc, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, p)

    def label(self, node: int) -> str:
        return self.names.get(node, f"node-{node}")

    def exchange(self, action: str, contents: Mapping[int, tuple[Sequence[bytes],
                                                                 dict[str, Any]]],
                 *, every: bool = True) -> dict[int, tuple[list[bytes], dict[str, Any]]]:
        """One message round; every node must answer ``ok`` (SecSV needs every role),
        else :class:`RunFailed` names the node, the step and its check. With
        ``every=False`` (the hello to every connected node) the failures are recorded in
        ``left_out`` and the ``ok`` answers returned."""
        from fedsec.runtime.flower_io import (
            BLOBS_KEY,
            get_blobs,
            get_meta,
            make_content,
            run_step,
        )

        self.write(action)
        msgs = {n: make_content(list(b), m) for n, (b, m) in contents.items()}
        res = run_step(self.grid, msgs, f"query.{action}",
                       group_id=f"{action}/{self.doc['exchanges']}",
                       timeout=self.opts.step_timeout, fail_fast=every)
        self.doc["exchanges"] += 1
        down = sum(len(b) for blobs, _ in contents.values() for b in blobs)
        up = 0
        out: dict[int, tuple[list[bytes], dict[str, Any]]] = {}
        failures: list[tuple[int, str, str]] = []
        for node, content in res.replies.items():
            arrays = content.array_records.get(BLOBS_KEY)
            if arrays is not None:
                up += sum(len(a.data) for a in arrays.values())
            try:
                meta, blobs = get_meta(content), get_blobs(content)
            except ProtocolError:
                failures.append((node, "malformed reply", ""))
                continue
            if meta.get("ok") is not True:
                check = str(meta.get("check", "no-check"))[:64]
                failures.append((node, f"refused: {check}", check))
                continue
            out[node] = (blobs, meta)
        for node, err in res.errors.items():
            failures.append((node, f"error reply (code {err.code})", ""))
        for node in res.undelivered:
            failures.append((node, "offline (the SuperLink refused the message)", ""))
        # a node still pending when another failed (fail fast) is not to blame: the nodes
        # that failed are named first
        blamed = {node for node, _r, _c in failures}
        for node in res.missing:
            failures.append((node, f"no reply within {self.opts.step_timeout:g}s" if
                             not blamed else "no reply yet when the step stopped", ""))
        self.doc["bytes"]["to_nodes"] += down
        self.doc["bytes"]["from_nodes"] += up
        self.doc["steps"].append({"step": action, "nodes": len(contents),
                                  "seconds": round(res.elapsed, 3), "to_nodes": down,
                                  "from_nodes": up})
        logger.info("fedsec: %s step %s: %d/%d ok in %.1fs", action.split("_", 1)[0],
                    action, len(out), len(contents), res.elapsed)
        entries = [{"node": node, "party": self.label(node), "step": action,
                    "reason": reason, **({"check": check} if check else {})}
                   for node, reason, check in sorted(failures, key=lambda f: (
                       f[0] not in blamed, f[0]))]
        if entries and every:
            self.doc["failed"] = entries[0]
            raise RunFailed(f"{entries[0]['party']} at {action}: {entries[0]['reason']}")
        self.doc.setdefault("left_out", []).extend(entries)
        return out

    # ------------------------------------------------------------------ the run
    def run(self) -> dict[str, Any]:
        from fedsec.runtime.flower_io import wait_for_nodes

        roster, pub = self.opts.load()
        cfg = SecSVConfig().check()
        n = pub.n
        self.doc.update(clients=n, rounds=pub.n_rounds, roster_fingerprint=roster.fingerprint)
        self.write("waiting-for-nodes")
        wait_for_nodes(self.grid, n + 1, self.opts.wait_nodes_timeout)
        nodes = sorted(self.grid.get_node_ids())[:2 * len(roster) + 8]
        hellos = self.exchange("secsv_hello", {
            nd: ([], {"public": pub.text(), "schedule": self.opts.schedule}) for nd in nodes},
            every=False)  # a stranger among the connected nodes is left out
        clients: dict[int, int] = {}  # client index -> node
        sizes: dict[int, int] = {}
        hello_of: dict[int, bytes] = {}
        aux_node, aux_name, ann = -1, "", b""
        for nd in sorted(hellos):
            blobs, meta = hellos[nd]
            if len(blobs) != 1:
                raise RunFailed(f"node {nd}: malformed hello")
            if meta.get("role") == ROLE_AUX:
                name = ""
                for cand in roster.names:
                    try:
                        read_announcement(roster, cand, blobs[0],
                                          context=_ann_context(self.run_id, roster))
                    except ProtocolError:
                        continue
                    name = cand
                    break
                if not name or aux_node >= 0:
                    raise RunFailed(f"node {nd}: an auxiliary server that is not on the roster "
                                    "or a second one")
                aux_node, aux_name, ann = nd, name, blobs[0]
                self.names[nd] = name
                continue
            idx, size = meta.get("index"), meta.get("samples")
            if not isinstance(idx, int) or not 0 <= idx < n or idx in clients or \
                    not isinstance(size, int) or size < 1:
                raise RunFailed(f"node {nd}: bad or duplicate client index {idx!r}")
            clients[idx], sizes[idx], hello_of[idx] = nd, size, blobs[0]
            self.names[nd] = str(wire.decode(blobs[0], expect="keys/hello").meta.get("name"))
        if aux_node < 0 or len(clients) != n:
            if self.doc.get("left_out"):  # the first node that refused or stayed silent
                self.doc["failed"] = self.doc["left_out"][0]
            raise RunFailed(f"expected {n} clients and one auxiliary server; got clients "
                            f"{sorted(clients)} and {'an' if aux_node >= 0 else 'no'} "
                            "auxiliary server")
        if aux_name in {self.names[clients[i]] for i in range(n)}:
            raise RunFailed("the auxiliary server's identity is also a client's")
        self.doc["parties"] = {"clients": [self.names[clients[i]] for i in range(n)],
                               "auxiliary": aux_name}
        order = [clients[i] for i in range(n)]
        # key set-up among the clients (P relays; signed transcript)
        ks = KeySetupAggregator(roster, KeySpec.create(*KEY_SPEC), min_parties=n)
        holder_idx, request = ks.request([hello_of[i] for i in range(n)])
        if ks.rejected:
            raise RunFailed(f"key set-up: rejected hellos {ks.rejected}")
        node_of = {self.names[nd]: nd for nd in order}
        set_up = [node_of[name] for name in ks.names]
        holder = set_up[holder_idx]
        offer = self.exchange("secsv_offer", {holder: ([request], {})})
        deliveries = ks.accept(offer[holder][0][0])
        confs = self.exchange("secsv_deliver", {nd: ([dl], {}) for nd, dl in
                                                zip(set_up, deliveries, strict=True)})
        bundle = ks.confirm([confs[nd][0][0] for nd in set_up])
        leader = secrets.randbelow(n)
        bounds = self.exchange("secsv_confirmed", {
            nd: ([bundle, ann], {"leader": leader}) for nd in order})
        # P's role, the plan, the data shares
        strict = self.opts.schedule == "strict"
        groups = [[c] for c in range(n)]
        if strict:
            strong = True
        else:
            from fedsec.shapley.secure_game import plan_groups

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                groups, strong = plan_groups(n, 1)
        P = PrincipalServer(BFVContext(cfg.bfv), pub.spec, n, cfg, pub.infos(cfg),  # noqa: N806
                            session=ks.session, groups=groups, strong=strong,
                            sizes=[sizes[i] for i in range(n)], linear_shortcut=True,
                            derived=False, space=pub.space if strict else None)
        plan = P.make_plan([_one(bounds[nd][0])[0] for nd in order])
        shares = self.exchange("secsv_plan", {nd: ([plan], {}) for nd in order})
        P.receive_data([_one(shares[nd][0], 2)[0] for nd in order])
        batches = P.batches_message()
        if strict:  # refuse before any model is encrypted
            P.plan_rounds(pub.n_rounds)
        setup = [plan, batches, *[shares[nd][0][1] for nd in order]]
        run = _FlowerRun(self, P, pub, order, aux_node, leader, setup,
                         [self.names[nd] for nd in order], ks.session)
        self.write("evaluating")
        result = run_rounds(cast(Any, run), "exact", 0, False, 0, None, "secsv")
        out = result.to_dict()
        for key in ("bandwidth_mbps", "time_split_seconds", "bytes_total", "bytes_by_role",
                    "messages", "seconds"):  # in-process accounting; see bytes, steps
            out.pop(key, None)
        self.doc.update(out)
        self.doc["fsv"] = [float(v) for v in result.fsv]
        self.doc["utilities"] = [[float(v) for v in tab] for tab in result.utilities or []]
        self.doc["status"] = "done"
        return self.doc


@dataclass
class _FlowerRun:
    """The round loop's view of a Flower run (``SecureRun``): every coalition of round
    ``t`` is evaluated in four exchanges when the round's models arrive."""

    server: SecSVServerRun
    P: PrincipalServer  # noqa: N815
    pub: _Public
    order: list[int]  # client index -> node
    aux: int
    leader: int
    setup: list[bytes]
    client_names: list[str]
    session: str
    acc: Accounting = field(default_factory=Accounting)
    _ok: dict[tuple[int, int], NDArray[np.bool_]] = field(default_factory=dict)
    _early: dict[int, tuple[list[bytes], list[bytes], list[int], list[str]]] = field(
        default_factory=dict)
    record: Any = None

    def __post_init__(self) -> None:
        self.record = _PublicRecord(self.pub.n, tuple(
            _PublicRound(tuple(p)) for p, _w in self.pub.space.rounds))

    @property
    def n_samples(self) -> int:
        return self.P.n_samples

    def _uploaders(self, t: int) -> list[int]:
        parts = self.pub.space.rounds[t][0]
        return [c for c in range(self.pub.n) if c == self.leader or c in parts]

    def upload_round(self, t: int) -> None:
        P, srv = self.P, self.server  # noqa: N806
        P.start_round(t)
        if t in self._early:
            models_p, sealed, owners, keys = self._early.pop(t)
        else:
            got = srv.exchange("secsv_upload", {self.order[c]: ([], {"round": t})
                                                for c in self._uploaders(t)})
            models_p, sealed, owners, keys = [], [], [], []
            for c in self._uploaders(t):
                sealed_c, owners_c, keys_c = self._models_of(t, c, got[self.order[c]], 0)
                models_p += [got[self.order[c]][0][2 * j] for j in range(len(keys_c))]
                sealed += sealed_c
                owners += owners_c
                keys += keys_c
        for blob in models_p:
            P.receive_model(blob)
        self._evaluate_round(t, sealed, owners, keys)

    def _evaluate_round(self, t: int, sealed: list[bytes], owners: list[int],
                        keys: list[str]) -> None:
        P, srv = self.P, self.server  # noqa: N806
        k = len(self.pub.space.rounds[t][0])
        masks = [int(m) for m in np.argsort(popcounts(k), kind="stable")]
        items: list[tuple[int, bytes, Evaluation]] = []
        coal: dict[int, Coalition] = {}
        for mask in masks:
            P.start_evaluation(t, mask, None)
            while (opening := P.open_next()) is not None:
                items.append((mask, opening, P.suspend()))
            coal[mask] = P.suspend_coalition()
        meta: dict[str, Any] = {"round": t, "owners": owners, "keys": keys}
        blobs = list(sealed) + [o for _m, o, _e in items]
        if t == 0:
            meta.update(setup=True, names=self.client_names, session=self.session)
            blobs = self.setup + blobs
        reply = srv.exchange("secsv_aux_round", {self.aux: (blobs, meta)})[self.aux]
        prods = self._split_products(reply, len(items))
        evs = [e for _m, _o, e in items]
        n_layers = len(self.pub.spec.layers)
        last = t == self.pub.n_rounds - 1
        nxt = t + 1
        decs: list[int] = [0] * len(items)
        for layer in range(n_layers):
            final = layer == n_layers - 1
            requests: dict[int, list[tuple[int, bytes]]] = {}
            for pos in range(len(items)):
                P.resume(evs[pos])
                dec, req = P.decrypt_request(prods[pos])
                evs[pos] = P.suspend()
                requests.setdefault(int(dec.split(":")[1]), []).append((pos, req))
            contents: dict[int, tuple[list[bytes], dict[str, Any]]] = {}
            for c in range(self.pub.n):
                reqs = [r for _p, r in requests.get(c, [])]
                m: dict[str, Any] = {"round": t}
                if final and last:
                    m["last"] = True
                elif final and c in self._uploaders(nxt):
                    m["upload"] = nxt
                if reqs or "last" in m or "upload" in m:
                    contents[self.order[c]] = (reqs, m)
            answers = srv.exchange("secsv_decrypt", contents)
            to_a: list[bytes] = [b""] * len(items)
            to_p: list[bytes] = [b""] * len(items)
            for c, mine in requests.items():
                blobs_c, meta_c = answers[self.order[c]]
                if meta_c.get("answers") != len(mine) or len(blobs_c) < 2 * len(mine):
                    raise RunFailed(f"{self.client_names[c]}: malformed answers")
                for j, (pos, _r) in enumerate(mine):
                    to_p[pos], to_a[pos] = blobs_c[j], blobs_c[len(mine) + j]
                    decs[pos] = c
            if final:
                break
            for pos in range(len(items)):  # hidden layer: re-shares, A's next products
                P.resume(evs[pos])
                P.receive_share(to_p[pos])
                evs[pos] = P.suspend()
            reply = srv.exchange("secsv_aux_reshare", {self.aux: (to_a, {
                "round": t, "evs": [e.ev for e in evs], "decryptors": decs})})[self.aux]
            prods = self._split_products(reply, len(items))
        masks_p: list[bytes] = []
        for pos in range(len(items)):
            P.resume(evs[pos])
            masks_p.append(P.label_mask(to_p[pos]))
            evs[pos] = P.suspend()
        if not last:  # the next round's models came with the last layer's answers
            early: tuple[list[bytes], list[bytes], list[int], list[str]] = ([], [], [], [])
            for c in self._uploaders(nxt):
                got = answers[self.order[c]]
                skip = 2 * len(requests.get(c, []))
                sealed_c, owners_c, keys_c = self._models_of(nxt, c, got, skip)
                early[0].extend(got[0][skip + 2 * j] for j in range(len(keys_c)))
                early[1].extend(sealed_c)
                early[2].extend(owners_c)
                early[3].extend(keys_c)
            self._early[nxt] = early
        diffs = srv.exchange("secsv_aux_labels", {self.aux: (
            [b for pos in range(len(items)) for b in (to_a[pos], masks_p[pos])],
            {"round": t, "evs": [e.ev for e in evs], "decryptors": decs,
             **({"last": True} if last else {})})})[self.aux][0]
        if len(diffs) != len(items):
            raise RunFailed("auxiliary server: malformed label differences")
        for pos, (mask, _b, _e) in enumerate(items):
            P.resume_coalition(coal[mask])
            P.resume(evs[pos])
            P.compare(diffs[pos])
            coal[mask] = P.suspend_coalition()
        for mask in masks:
            P.resume_coalition(coal[mask])
            self._ok[(t, mask)] = P.result().copy()
            P.suspend_coalition()

    @staticmethod
    def _split_products(reply: tuple[list[bytes], dict[str, Any]], n: int
                        ) -> list[list[bytes]]:
        """A's products, per evaluation (``counts`` in the reply's metadata)."""
        blobs, meta = reply
        counts = meta.get("counts")
        if not isinstance(counts, list) or len(counts) != n or not all(
                isinstance(c, int) and c >= 0 for c in counts) or sum(counts) != len(blobs):
            raise RunFailed("auxiliary server: malformed products")
        out, at = [], 0
        for c in counts:
            out.append(blobs[at:at + c])
            at += c
        return out

    def _models_of(self, t: int, c: int, reply: tuple[list[bytes], dict[str, Any]],
                   skip: int) -> tuple[list[bytes], list[int], list[str]]:
        blobs, meta = reply
        want = (["global"] if c == self.leader else []) + (
            [f"c{c}"] if c in self.pub.space.rounds[t][0] else [])
        if meta.get("keys") != want or len(blobs) != skip + 2 * len(want):
            raise RunFailed(f"{self.client_names[c]}: malformed models of round {t}")
        return ([blobs[skip + 2 * k + 1] for k in range(len(want))], [c] * len(want),
                list(want))

    def evaluate(self, t: int, mask: int, rows: NDArray[np.int64] | None) -> NDArray[np.bool_]:
        if rows is not None or (t, mask) not in self._ok:
            raise ProtocolError("SecSV on Flower evaluates every coalition of a round at once")
        return self._ok.pop((t, mask))

    def end_round(self, t: int) -> None:
        self.P.end_round(t)


def main(grid: Any, context: Any) -> None:
    """ServerApp entry point for ``protocol='secsv'``: run, write the result JSON."""
    from fedsec.runtime.safetext import printable

    opts = SecSVOptions.from_run_config(context.run_config)
    run = SecSVServerRun(grid, opts, run_id=int(context.run_id))
    try:
        run.run()
        logger.info("fedsec: SecSV done: fsv=%s", printable(str(run.doc.get("fsv"))))
    except Exception as err:
        run.doc.update(status="failed", error=f"{type(err).__name__}: {err}")
        logger.error("fedsec: SecSV run failed: %s", printable(run.doc["error"]))
        raise
    finally:
        run.write()
