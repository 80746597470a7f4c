"""SecretSV (Zheng et al.'s two-server secret-sharing baseline) on Flower: the principal
server P in the ServerApp; the auxiliary server A, the dealer and every client on
SuperNodes of their own.

Placement (see ``docs/flower-secretsv.md``):

* **P** is the ServerApp (:func:`main`). It knows the public round information only
  (participants and FedAvg weights per round, the model architecture: run config
  ``secretsv-rounds-path``, a JSON file made by
  :func:`fedsec.runtime.flower_secsv.public_rounds`), holds its own shares, and relays
  every message between A, the dealer and the clients.
* **A** is a SuperNode with node config ``role="auxiliary"`` (its node config ``dealer``
  names the dealer's roster identity, so P cannot substitute another dealer).
* **the dealer** is a SuperNode with ``role="dealer"`` (its node config ``auxiliary``
  names A); it only produces Beaver triples.
* **each client** is a SuperNode with ``role="client"``: its own test set (``data-path``)
  and its own part of the training record (``record-path``,
  :class:`fedsec.runtime.flower_secsv.ClientPart`); its node config ``auxiliary`` names A.

Every role announces a fresh seal key (:mod:`fedsec.crypto.sealed`) signed with its roster
identity, bound to the Flower run. Everything a client, A or the dealer sends another role
than P passes through P sealed to the recipient and signed by the sender, bound to the
SecretSV session (the hash of every role's fresh nonce), the step, the round and the
evaluation (its id and layer; a triple: its coalition, batch group and layer): clients'
data and model shares for A, the dealer's triple shares for A, A's output shares for the
reconstructing client, the client's re-shares and label shares for A. Inside, the
protocol's own messages and checks are those of :mod:`fedsec.shapley.secretsv`.

Exchanges (one Flower message per node per step, every request of a step batched in it):
``secretsv_hello`` (every role: its session nonce and seal-key announcement),
``secretsv_session`` (every role joins the session; clients: their data shares and round
0's model shares back; the dealer: every triple request of the run, its triples back),
then per round ``t``: ``secretsv_aux`` (A: the round's sealed models, every
evaluation of the round, their triples and P's Beaver openings of layer 0 -- with the
previous round's zero tests; A's openings and sealed output shares back),
``secretsv_reconstruct`` (each reconstructing client: all its outputs of the round and
layer; re-shares or label shares back, and the next round's models) and, after a hidden
layer, ``secretsv_aux`` again (the re-shares and P's next openings); finally
``secretsv_aux`` with the last round's zero tests. Exact SSVs, no SampleSkip;
``schedule`` ``"strict"`` (default) or ``"paper"`` (a client accepts it only if its node
config says ``allow-paper-schedule = true``).
"""

from __future__ import annotations

import json
import logging
import secrets
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, cast

import numpy as np
from numpy.typing import NDArray

from fedsec.crypto.identity import Identity, Roster
from fedsec.crypto.sealed import SealKey, announce, read_announcement, seal, unseal
from fedsec.errors import PolicyViolation, ProtocolError
from fedsec.learning.model import Params
from fedsec.metrics.shapley import popcounts
from fedsec.protocol import wire
from fedsec.protocol.accounting import Accounting
from fedsec.protocol.binding import context_of, request_id, session_from_nonces
from fedsec.runtime.flower_secsv import (
    ClientPart,
    RunFailed,
    SecSVOptions,
    SecSVServerRun,
    _flag,
    _parse_public,
    _Public,
    _PublicRecord,
    _PublicRound,
    load_test_set,
)
from fedsec.runtime.node_host import RunState, hosted
from fedsec.shapley.secretsv import (
    EV,
    PROTOCOL,
    Dealer,
    SecretSVAuxiliary,
    SecretSVClient,
    SecretSVPrincipal,
)
from fedsec.shapley.secure_game import run_rounds
from fedsec.shapley.views import ClientView

__all__ = ["SecretSVOptions", "SecretSVServerRun", "main", "ACTIONS"]

logger = logging.getLogger("flwr")

#: Every ClientApp action of SecretSV (registered in :mod:`fedsec.runtime.flower_apps`).
ACTIONS = ("secretsv_hello", "secretsv_session", "secretsv_aux", "secretsv_reconstruct")
ROLE_CLIENT, ROLE_AUX, ROLE_DEALER = "client", "auxiliary", "dealer"
ROLES = (ROLE_CLIENT, ROLE_AUX, ROLE_DEALER)
SCHEDULES = ("strict", "paper")
_TAG = "fedsec/secretsv-flower/v1"


# =================================================================== sealed relays
def _ann_context(run_id: int, roster: Roster, role: str) -> bytes:
    return f"{_TAG}|seal-key|{int(run_id)}|{roster.fingerprint}|{role}".encode()


def _seal_context(session: str, step: str, t: int, extra: str | int) -> bytes:
    return f"{_TAG}|{session}|{step}|{int(t)}|{extra}".encode()


def _session_id(data: bytes) -> str:
    """The session id every role derives from P's ``secretsv/session`` message (the
    role object checks the message itself when it joins)."""
    return session_from_nonces(PROTOCOL, list(wire.decode(data, expect="secretsv/session",
                                                          max_bytes=1 << 24).blobs))


def _rounds(pub: _Public) -> list[tuple[tuple[int, ...], NDArray[np.float64]]]:
    return [(tuple(p), np.asarray(w, dtype=np.float64)) for p, w in pub.space.rounds]


# =================================================================== node side
def _node_files(state: RunState) -> tuple[Identity, Roster, str]:
    from fedsec.runtime.flower_client import NodeCheckFailed

    cfg = state.node_config
    role = str(cfg.get("role", "") or "")
    if role not in ROLES:
        raise NodeCheckFailed("node-config", "node config 'role' must be 'client', "
                              f"'auxiliary' or 'dealer' for SecretSV. Got {role!r} instead.")
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


def _peer(state: RunState, key: str, what: str) -> str:
    """A roster name from this node's own config (never from P)."""
    from fedsec.runtime.flower_client import NodeCheckFailed

    name = str(state.node_config.get(key, "") or "")
    roster: Roster = state.data["roster"]
    if not name or name not in roster or name == state.data["identity"].name:
        raise NodeCheckFailed("node-config", f"node config {key!r} must name {what}'s "
                              "roster identity (not this node's)")
    return name


def _hello(blobs: list[bytes], meta: dict[str, Any], state: RunState
           ) -> tuple[list[bytes], dict[str, Any]]:
    """Check the run against the node's files and policy; this role's session nonce and
    its seal-key announcement."""
    from fedsec.runtime.flower_client import NodeCheckFailed

    identity, roster, role = _node_files(state)
    cfg = state.node_config
    pub = _parse_public(json.loads(str(meta.get("public", "null"))))
    schedule = str(meta.get("schedule", ""))
    if schedule not in SCHEDULES:
        raise ProtocolError("unknown schedule")
    strict = schedule == "strict"
    key = SealKey.generate()
    d = state.data
    d.update(identity=identity, roster=roster, role=role, public=pub, schedule=schedule,
             seal=key)
    ann = announce(identity, key, context=_ann_context(state.run_id, roster, role))
    if role == ROLE_AUX:
        d["dealer_name"] = _peer(state, "dealer", "the dealer")
        aux = SecretSVAuxiliary(pub.spec, _rounds(pub), n_clients=pub.n,
                                space=pub.space if strict else None)
        d["A"] = aux
        return [aux.hello(), ann], {"role": ROLE_AUX}
    d["aux"] = _peer(state, "auxiliary", "the auxiliary server")
    if role == ROLE_DEALER:
        dealer = Dealer()
        d["dealer"] = dealer
        return [dealer.hello(), ann], {"role": ROLE_DEALER}
    try:
        allow_paper = _flag(cfg.get("allow-paper-schedule", False))
    except ValueError as exc:
        raise NodeCheckFailed("node-config", f"allow-paper-schedule: {exc}") from None
    if schedule == "paper" and not allow_paper:
        raise PolicyViolation("the server asks for schedule='paper', which lets a "
                              "reconstructing client solve for other clients' test data; "
                              "this node's policy (allow-paper-schedule) refuses it",
                              check="schedule")
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
    i = part.index
    client = SecretSVClient(i, pub.n, pub.spec, x, y,
                            view=ClientView(pub.space, i) if strict else None)
    d.update(part=part, client=client)
    mine = [(t, "global", g) for t, g in enumerate(part.globals)]
    mine += [(t, f"c{i}", p) for t, p in sorted(part.locals.items())]
    return [client.hello(mine), ann], {"role": ROLE_CLIENT, "index": i, "samples": len(y)}


def _only(state: RunState, role: str) -> dict[str, Any]:
    if state.data.get("role") != role:
        raise ProtocolError(f"a step for the {role} sent to another node")
    return state.data


def _sealed_to(d: dict[str, Any], to: str, pub: Any, payload: bytes, step: str, t: int,
               extra: str | int) -> bytes:
    return seal(d["identity"], to, pub, payload,
                context=_seal_context(d["session"], step, t, extra))


def _opened(d: dict[str, Any], sender: str, data: bytes, step: str, t: int,
            extra: str | int) -> bytes:
    return unseal(d["seal"], d["roster"], sender, d["identity"].name, data,
                  context=_seal_context(d["session"], step, t, extra))


def _upload_models(d: dict[str, Any], t: int) -> tuple[list[bytes], list[str]]:
    """This client's model shares of round ``t`` (the global model if it leads): P's
    share, then A's sealed, per model."""
    pub: _Public = d["public"]
    if not d["next_upload"] <= t < pub.n_rounds:  # each round's models once
        raise ProtocolError("models of an unexpected round requested")
    d["next_upload"] = t + 1
    client: SecretSVClient = d["client"]
    part: ClientPart = d["part"]
    jobs: list[tuple[str, Params]] = []
    if d["leader"] == client.index:
        jobs.append(("global", part.globals[t]))
    if t in part.locals:
        jobs.append((f"c{client.index}", part.locals[t]))
    out: list[bytes] = []
    for key, params in jobs:
        to_p, to_a = client.share_model(t, key, params)
        out += [to_p, _sealed_to(d, d["aux"], d["aux_key"], to_a, "model", t, key)]
    return out, [k for k, _ in jobs]


def _session(blobs: list[bytes], meta: dict[str, Any], state: RunState
             ) -> tuple[list[bytes], dict[str, Any]]:
    """Join the session P announces. Clients: read A's seal key; their data shares and
    round 0's model shares (A's sealed). A: read the clients' seal keys (names from P,
    each key signed by that name). The dealer: read A's seal key and deal every triple
    P asks for (the batch sizes are P's; A and P check each triple against its
    evaluation when they use it)."""
    d = state.data
    role = d.get("role")
    if role not in ROLES or not blobs:
        raise ProtocolError("a session before the hello")
    obj = d["A"] if role == ROLE_AUX else d["dealer"] if role == ROLE_DEALER else d["client"]
    obj.join(blobs[0])
    d["session"] = _session_id(blobs[0])
    roster: Roster = d["roster"]
    pub: _Public = d["public"]
    if role == ROLE_AUX:
        names = meta.get("names")
        me = d["identity"].name
        if not isinstance(names, list) or len(names) != pub.n or len(set(names)) != pub.n \
                or not all(isinstance(v, str) and v in roster and v not in
                           (me, d["dealer_name"]) for v in names) or len(blobs) != 1 + pub.n:
            raise ProtocolError("malformed client names")
        d["names"] = list(names)
        d["client_keys"] = [read_announcement(roster, name, ann, context=_ann_context(
            state.run_id, roster, ROLE_CLIENT)) for name, ann in zip(names, blobs[1:],
                                                                    strict=True)]
        d.update(parked={}, triples={}, next_round=0)
        return [], {}
    if len(blobs) < 2 or (role == ROLE_CLIENT and len(blobs) != 2):
        raise ProtocolError("malformed session message")
    d["aux_key"] = read_announcement(roster, d["aux"], blobs[1],
                                     context=_ann_context(state.run_id, roster, ROLE_AUX))
    if role == ROLE_DEALER:
        return _deal(d, blobs[2:], state)
    leader = meta.get("leader")
    if not isinstance(leader, int) or not 0 <= leader < pub.n:
        raise ProtocolError("malformed leader")
    client: SecretSVClient = d["client"]
    d.update(leader=leader, next_upload=0)
    to_p, to_a = client.share_data()
    models, keys = _upload_models(d, 0)
    return [to_p, _sealed_to(d, d["aux"], d["aux_key"], to_a, "data", -1, client.index),
            *models], {"keys": keys}


def _deal(d: dict[str, Any], requests: list[bytes], state: RunState
          ) -> tuple[list[bytes], dict[str, Any]]:
    """The dealer: every triple P asks for, P's share in the clear, A's sealed to A
    (bound to the request's round, coalition, batch group and layer)."""
    dealer: Dealer = d["dealer"]
    if not requests:
        raise ProtocolError("no triple requested")
    to_p, to_a = [], []
    for req in requests:
        p, a = dealer.triple(req)
        ctx = context_of(wire.decode(req, expect="secretsv/triple-request",
                                     max_bytes=1 << 12).meta)
        to_p.append(p)
        to_a.append(_sealed_to(d, d["aux"], d["aux_key"], a, "triple", ctx.round,
                               "/".join(str(v) for v in ctx.index)))
    state.done = True  # the dealer deals once per run
    return to_p + to_a, {"triples": len(to_p)}


def _reconstruct(blobs: list[bytes], meta: dict[str, Any], state: RunState
                 ) -> tuple[list[bytes], dict[str, Any]]:
    """Every output of the round and layer this client reconstructs (P's share, A's
    sealed share): its re-share or label shares for P, and A's sealed; optionally the
    next round's models (``upload``)."""
    d = _only(state, ROLE_CLIENT)
    client: SecretSVClient = d["client"]
    t = meta.get("round")
    if not isinstance(t, int) or len(blobs) % 2:
        raise ProtocolError("malformed reconstruction request")
    to_p, to_a = [], []
    for k in range(0, len(blobs), 2):
        rmeta = wire.decode(blobs[k], expect="secretsv/output", max_bytes=1 << 34).meta
        ev, layer = request_id(rmeta, EV), rmeta.get("layer")
        if not isinstance(layer, int):
            raise ProtocolError("malformed output request: layer")
        from_a = _opened(d, d["aux"], blobs[k + 1], "output", t, f"{ev}/{layer}")
        p, a = client.reconstruct(blobs[k], from_a)
        to_p.append(p)
        to_a.append(_sealed_to(d, d["aux"], d["aux_key"], a, "answer", t, f"{ev}/{layer}"))
    out_meta: dict[str, Any] = {"answers": len(to_p)}
    models: list[bytes] = []
    if "upload" in meta:
        models, keys = _upload_models(d, int(meta["upload"]))
        out_meta["keys"] = keys
    if meta.get("last") is True:
        state.done = True
    return to_p + to_a + models, out_meta


def _client_of(d: dict[str, Any], c: Any) -> tuple[str, Any]:
    names: list[str] = d["names"]
    if not isinstance(c, int) or not 0 <= c < len(names):
        raise ProtocolError("a sealed message of an unknown client")
    return names[c], d["client_keys"][c]


def _aux_products(d: dict[str, Any], t: int, ev: Any, opening: bytes) -> list[bytes]:
    """A, with evaluation ``ev`` in flight at a layer: its Beaver opening for P (from the
    layer's triple) and its output share sealed to the reconstructing client; the
    evaluation is parked until the client answers."""
    aux: SecretSVAuxiliary = d["A"]
    layer = ev.layer  # the layer in flight
    mine = aux.open_share(d["triples"][ev.ev][layer])
    to, out = aux.beaver(opening)
    name, key = _client_of(d, int(to.split(":")[1]))
    d["parked"][ev.ev] = aux.suspend()
    return [mine, _sealed_to(d, name, key, out, "output", t, f"{ev.ev}/{layer}")]


def _sub(meta: dict[str, Any], key: str) -> dict[str, Any]:
    """A section of A's step metadata (a JSON object; Flower's metadata is flat)."""
    try:
        out = json.loads(str(meta[key]))
    except ValueError:
        out = None
    if not isinstance(out, dict):
        raise ProtocolError(f"malformed auxiliary-server message: {key}")
    return out


def _aux(blobs: list[bytes], meta: dict[str, Any], state: RunState
         ) -> tuple[list[bytes], dict[str, Any]]:
    """A: (set-up,) the previous round's zero tests (``labels``), a new round
    (``start``: sealed models, evaluations, triples, P's openings) or the re-shares of a
    hidden layer (``reshare``: sealed re-shares, P's next openings). Returns the label
    differences, then per evaluation A's opening and sealed output share."""
    d = _only(state, ROLE_AUX)
    aux: SecretSVAuxiliary = d["A"]
    pub: _Public = d["public"]
    n_layers = len(pub.spec.layers)
    at = 0

    def take(k: int) -> list[bytes]:
        nonlocal at
        if at + k > len(blobs):
            raise ProtocolError("malformed auxiliary-server message: too few blobs")
        got = blobs[at:at + k]
        at += k
        return got

    if meta.get("setup") is True:
        if "batches" in d:
            raise ProtocolError("a second set-up")
        batches, *data = take(1 + pub.n)
        aux.receive_data([_opened(d, _client_of(d, i)[0], data[i], "data", -1, i)
                          for i in range(pub.n)])
        aux.receive_order(batches)
        d["batches"] = True
    if "batches" not in d:
        raise ProtocolError("no set-up yet")
    parked: dict[str, Any] = d["parked"]
    diffs: list[bytes] = []
    if "labels" in meta:
        lab = _sub(meta, "labels")
        t, evs, decs = lab.get("round"), lab.get("evs"), lab.get("decs")
        if t != d["next_round"] - 1 or not isinstance(evs, list) or \
                not isinstance(decs, list) or len(evs) != len(decs):
            raise ProtocolError("malformed label round")
        for ev_id, dec in zip(evs, decs, strict=True):
            ev = parked.pop(str(ev_id), None)
            if ev is None:
                raise ProtocolError("labels of an evaluation that is not in flight")
            aux.resume(ev)
            sealed, mask_p = take(2)
            name, _key = _client_of(d, dec)
            diffs.append(aux.label_diff(_opened(d, name, sealed, "answer", t,
                                                f"{ev.ev}/{ev.layer}"), mask_p))
            d["triples"].pop(ev.ev, None)
    out: list[bytes] = []
    if "start" in meta:
        st = _sub(meta, "start")
        t, owners, keys, n_evals = st.get("round"), st.get("owners"), st.get("keys"), \
            st.get("evals")
        if t != d["next_round"] or parked or not isinstance(owners, list) or \
                not isinstance(keys, list) or len(owners) != len(keys) or \
                not isinstance(n_evals, int) or n_evals < 0:
            raise ProtocolError("malformed round")
        d["next_round"] = t + 1
        if t > 0:
            aux.end_round(t - 1)
        aux.start_round(t)
        for owner, key in zip(owners, keys, strict=True):
            name, _k = _client_of(d, owner)
            aux.receive_model(_opened(d, name, take(1)[0], "model", t, str(key)))
        for _ in range(n_evals):
            announcement, *boxes, opening = take(2 + n_layers)
            aux.open_eval(announcement)
            ev = aux.suspend()
            d["triples"][ev.ev] = [
                _opened(d, d["dealer_name"], box, "triple", t, f"{ev.mask}/{ev.group}/{k}")
                for k, box in enumerate(boxes)]
            aux.resume(ev)
            out += _aux_products(d, t, ev, opening)
    elif "reshare" in meta:
        rs = _sub(meta, "reshare")
        t, evs, decs = rs.get("round"), rs.get("evs"), rs.get("decs")
        if t != d["next_round"] - 1 or not isinstance(evs, list) or \
                not isinstance(decs, list) or len(evs) != len(decs):
            raise ProtocolError("malformed re-share round")
        for ev_id, dec in zip(evs, decs, strict=True):
            ev = parked.pop(str(ev_id), None)
            if ev is None:
                raise ProtocolError("a re-share of an evaluation that is not in flight")
            aux.resume(ev)
            sealed, opening = take(2)
            name, _key = _client_of(d, dec)
            aux.receive_share(_opened(d, name, sealed, "answer", t, f"{ev.ev}/{ev.layer}"))
            out += _aux_products(d, t, ev, opening)
    if at != len(blobs):
        raise ProtocolError("malformed auxiliary-server message: extra blobs")
    if meta.get("last") is True:
        state.done = True
    return diffs + out, {"diffs": len(diffs), "pairs": len(out) // 2}


_M = "fedsec.runtime.flower_secretsv"
handle_hello = hosted("secretsv_hello", f"{_M}:_hello")
handle_session = hosted("secretsv_session", f"{_M}:_session")
handle_aux = hosted("secretsv_aux", f"{_M}:_aux")
handle_reconstruct = hosted("secretsv_reconstruct", f"{_M}:_reconstruct")


# =================================================================== server side (P)
@dataclass(frozen=True)
class SecretSVOptions(SecSVOptions):
    """The ServerApp's validated run config for SecretSV."""

    PREFIX: ClassVar[str] = "secretsv"

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
            raise ValueError(f"The 'secretsv-rounds-path' run config names "
                             f"{self.rounds_path}, which is not valid round information: "
                             f"{exc}") from None
        for layer in pub.spec.layers:
            if layer.kind == "gru":
                raise ValueError("SecretSV evaluates dense and conv2d layers, not gru.")
        if len(roster) < pub.n + 2:
            raise ValueError(f"The roster lists {len(roster)} identities; SecretSV needs the "
                             f"{pub.n} clients, the auxiliary server and the dealer.")
        return roster, pub


@dataclass
class _Item:
    """One evaluation (round, coalition, batch group) in flight at P."""

    mask: int
    ev: Any  # P's suspended evaluation
    announcement: bytes
    triples_p: list[bytes] = field(default_factory=list)
    triples_a: list[bytes] = field(default_factory=list)
    dec: int = -1  # the client reconstructing the current layer
    to_p: bytes = b""
    to_a: bytes = b""


@dataclass
class SecretSVServerRun(SecSVServerRun):
    """P's side of one SecretSV run over a Flower grid."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.doc["protocol"] = "secretsv"

    def _hellos(self, roster: Roster, pub: _Public, nodes: list[int]
                ) -> tuple[dict[int, int], dict[int, int], dict[int, list[bytes]], int, int]:
        hellos = self.exchange("secretsv_hello", {
            nd: ([], {"public": pub.text(), "schedule": self.opts.schedule}) for nd in nodes},
            every=False)  # a stranger among the connected nodes is left out
        clients: dict[int, int] = {}  # client index -> node
        sizes: dict[int, int] = {}
        got: dict[int, list[bytes]] = {}
        aux = dealer = -1
        for nd in sorted(hellos):
            blobs, meta = hellos[nd]
            role = meta.get("role")
            if len(blobs) != 2 or role not in ROLES:
                raise RunFailed(f"node {nd}: malformed hello")
            name = ""
            for cand in roster.names:
                try:
                    read_announcement(roster, cand, blobs[1], context=_ann_context(
                        self.run_id, roster, str(role)))
                except ProtocolError:
                    continue
                name = cand
                break
            if not name or name in self.names.values():
                raise RunFailed(f"node {nd}: a {role} that is not on the roster, or an "
                                "identity already taken")
            self.names[nd] = name
            got[nd] = blobs
            if role == ROLE_AUX or role == ROLE_DEALER:
                if (aux if role == ROLE_AUX else dealer) >= 0:
                    raise RunFailed(f"node {nd}: a second {role}")
                if role == ROLE_AUX:
                    aux = nd
                else:
                    dealer = nd
                continue
            idx, size = meta.get("index"), meta.get("samples")
            if not isinstance(idx, int) or not 0 <= idx < pub.n or idx in clients or \
                    not isinstance(size, int) or size < 1:
                raise RunFailed(f"node {nd}: bad or duplicate client index {idx!r}")
            clients[idx], sizes[idx] = nd, size
        if aux < 0 or dealer < 0 or len(clients) != pub.n:
            if self.doc.get("left_out"):  # the first node that refused or stayed silent
                self.doc["failed"] = self.doc["left_out"][0]
            raise RunFailed(f"expected {pub.n} clients, an auxiliary server and a dealer; "
                            f"got clients {sorted(clients)}, "
                            f"{'an' if aux >= 0 else 'no'} auxiliary server and "
                            f"{'a' if dealer >= 0 else 'no'} dealer")
        return clients, sizes, got, aux, dealer

    def run(self) -> dict[str, Any]:
        from fedsec.runtime.flower_io import wait_for_nodes

        roster, pub = self.opts.load()
        n, n_layers = pub.n, len(pub.spec.layers)
        self.doc.update(clients=n, rounds=pub.n_rounds, roster_fingerprint=roster.fingerprint)
        self.write("waiting-for-nodes")
        wait_for_nodes(self.grid, n + 2, self.opts.wait_nodes_timeout)
        nodes = sorted(self.grid.get_node_ids())[:2 * len(roster) + 8]
        clients, sizes, hello, aux, dealer = self._hellos(roster, pub, nodes)
        order = [clients[i] for i in range(n)]
        names = [self.names[nd] for nd in order]
        self.doc["parties"] = {"clients": names, "auxiliary": self.names[aux],
                               "dealer": self.names[dealer]}
        strict = self.opts.schedule == "strict"
        if strict:
            groups, strong = [[c] for c in range(n)], True
        else:
            from fedsec.shapley.secure_game import plan_groups

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                groups, strong = plan_groups(n, n_layers)
        P = SecretSVPrincipal(pub.spec, _rounds(pub), n_clients=n,  # noqa: N806
                              space=pub.space if strict else None)
        session = P.gather([hello[nd][0] for nd in [*order, aux, dealer]])
        P.join(session)
        # every product of the run (round, coalition, batch group, layer; the batch sizes
        # from the hellos, checked against the data shares below) goes to the dealer with
        # the session: its triples come back in the same exchange
        masks = [[int(m) for m in np.argsort(popcounts(len(parts)), kind="stable")]
                 for parts, _w in pub.space.rounds]
        products = [(t, mask, g, layer) for t in range(pub.n_rounds) for mask in masks[t]
                    for g in range(len(groups)) for layer in range(n_layers)]
        requests = [P.triple_request_for(t, mask, g, layer, sum(sizes[c] for c in groups[g]))
                    for t, mask, g, layer in products]
        leader = secrets.randbelow(n)
        aux_ann = hello[aux][1]
        got = self.exchange("secretsv_session", {
            **{nd: ([session, aux_ann], {"leader": leader}) for nd in order},
            aux: ([session, *[hello[nd][1] for nd in order]], {"names": names}),
            dealer: ([session, aux_ann, *requests], {})})
        dealt = got[dealer][0]
        if len(dealt) != 2 * len(requests):
            raise RunFailed(f"{self.names[dealer]}: malformed triples")
        triples = {key: (dealt[k], dealt[len(requests) + k])
                   for k, key in enumerate(products)}
        P.receive_data([_split(got[nd], 2)[0] for nd in order])
        sealed_data = [got[nd][0][1] for nd in order]
        models: dict[int, tuple[list[bytes], list[bytes], list[int], list[str]]] = {
            0: self._models(pub, 0, leader, order, {c: (got[order[c]], 2) for c in range(n)
                                                    if c in _uploaders(pub, 0, leader)})}
        batches = P.order_batches(groups, strong=strong)
        if strict:  # refuse before any work
            P.plan_rounds()
        # every evaluation of the run, with its triples
        items: list[list[_Item]] = []
        for t in range(pub.n_rounds):
            P.start_round(t)
            mine: list[_Item] = []
            for mask in masks[t]:
                for g in range(len(groups)):
                    ann = P.announce_eval(mask, g, None)
                    if ann is None:
                        raise RunFailed(f"batch group {g} holds no sample")
                    it = _Item(mask, P.suspend(), ann)
                    if len(it.ev.rows) != sum(sizes[c] for c in groups[g]):
                        who = ", ".join(names[c] for c in groups[g])
                        raise RunFailed(f"{who}: the data shares hold another number of "
                                        "samples than the hello said")
                    it.triples_p = [triples[(t, mask, g, ly)][0] for ly in range(n_layers)]
                    it.triples_a = [triples[(t, mask, g, ly)][1] for ly in range(n_layers)]
                    mine.append(it)
            items.append(mine)
        ok: dict[tuple[int, int], NDArray[np.bool_]] = {}
        labels: tuple[int, list[_Item], list[bytes]] | None = None
        n_samples = sum(sizes.values())  # checked against the data shares above
        for t in range(pub.n_rounds):
            last = t == pub.n_rounds - 1
            P.start_round(t)
            models_p, sealed_m, owners, keys = models.pop(t)
            for blob in models_p:
                P.receive_model(blob)
            meta: dict[str, Any] = {"start": json.dumps({
                "round": t, "owners": owners, "keys": keys, "evals": len(items[t])})}
            blobs: list[bytes] = []
            if t == 0:
                meta["setup"] = True
                blobs += [batches, *sealed_data]
            blobs += self._labels(meta, labels)
            blobs += sealed_m
            for it in items[t]:
                P.resume(it.ev)
                opening = P.open_share(it.triples_p[0])
                it.ev = P.suspend()
                blobs += [it.announcement, *it.triples_a, opening]
            reply = self.exchange("secretsv_aux", {aux: (blobs, meta)})[aux]
            pairs = self._compare(P, reply, labels, ok, n_samples, len(items[t]))
            for layer in range(n_layers):
                final = layer == n_layers - 1
                per: dict[int, list[_Item]] = {}
                out: dict[int, list[bytes]] = {}
                for it, (op_a, sealed_out) in zip(items[t], pairs, strict=True):
                    P.resume(it.ev)
                    to, out_p = P.beaver(op_a)
                    it.ev = P.suspend()
                    it.dec = int(to.split(":")[1])
                    per.setdefault(it.dec, []).append(it)
                    out.setdefault(it.dec, []).extend([out_p, sealed_out])
                contents: dict[int, tuple[list[bytes], dict[str, Any]]] = {}
                uploaders = _uploaders(pub, t + 1, leader) if final and not last else []
                for c in range(n):
                    m: dict[str, Any] = {"round": t}
                    if final and last:
                        m["last"] = True
                    elif c in uploaders:
                        m["upload"] = t + 1
                    if c in per or "last" in m or "upload" in m:
                        contents[order[c]] = (out.get(c, []), m)
                answers = self.exchange("secretsv_reconstruct", contents)
                for c, mine_c in per.items():
                    blobs_c, meta_c = answers[order[c]]
                    if meta_c.get("answers") != len(mine_c) or len(blobs_c) < 2 * len(mine_c):
                        raise RunFailed(f"{names[c]}: malformed answers")
                    for j, it in enumerate(mine_c):
                        it.to_p, it.to_a = blobs_c[j], blobs_c[len(mine_c) + j]
                if uploaders:
                    models[t + 1] = self._models(pub, t + 1, leader, order, {
                        c: (answers[order[c]], 2 * len(per.get(c, []))) for c in uploaders})
                if final:
                    break
                blobs, evs, decs = [], [], []
                for it in items[t]:
                    P.resume(it.ev)
                    P.receive_share(it.to_p)
                    opening = P.open_share(it.triples_p[layer + 1])
                    it.ev = P.suspend()
                    blobs += [it.to_a, opening]
                    evs.append(it.ev.ev)
                    decs.append(it.dec)
                reply = self.exchange("secretsv_aux", {aux: (blobs, {"reshare": json.dumps({
                    "round": t, "evs": evs, "decs": decs})})})[aux]
                pairs = self._compare(P, reply, None, ok, n_samples, len(items[t]))
            masks_p = []
            for it in items[t]:
                P.resume(it.ev)
                masks_p.append(P.label_mask(it.to_p))
                it.ev = P.suspend()
            labels = (t, items[t], masks_p)
            P.end_round(t)
        meta = {"last": True}
        blobs = self._labels(meta, labels)
        reply = self.exchange("secretsv_aux", {aux: (blobs, meta)})[aux]
        self._compare(P, reply, labels, ok, n_samples, 0)
        run = _Results(_PublicRecord(n, tuple(_PublicRound(tuple(p))
                                              for p, _w in pub.space.rounds)), n_samples, ok)
        self.write("evaluating")
        result = run_rounds(cast(Any, run), "exact", 0, False, 0, None, "secretsv")
        out_doc = result.to_dict()
        for key in ("bandwidth_mbps", "time_split_seconds", "bytes_total", "bytes_by_role",
                    "messages", "seconds"):  # in-process accounting; see bytes, steps
            out_doc.pop(key, None)
        self.doc.update(out_doc)
        self.doc["fsv"] = [float(v) for v in result.fsv]
        self.doc["utilities"] = [[float(v) for v in tab] for tab in result.utilities or []]
        self.doc["status"] = "done"
        return self.doc

    @staticmethod
    def _labels(meta: dict[str, Any], labels: tuple[int, list[_Item], list[bytes]] | None
                ) -> list[bytes]:
        """The previous round's zero tests for A: each client's sealed label shares and
        P's label mask."""
        if labels is None:
            return []
        t, its, masks_p = labels
        meta["labels"] = json.dumps({"round": t, "evs": [it.ev.ev for it in its],
                                     "decs": [it.dec for it in its]})
        return [b for it, mp in zip(its, masks_p, strict=True) for b in (it.to_a, mp)]

    def _compare(self, P: SecretSVPrincipal, reply: tuple[list[bytes], dict[str, Any]],  # noqa: N803
                 labels: tuple[int, list[_Item], list[bytes]] | None,
                 ok: dict[tuple[int, int], NDArray[np.bool_]], n_samples: int, n_pairs: int
                 ) -> list[tuple[bytes, bytes]]:
        """A's reply: the zero tests' results into ``ok``; A's (opening, sealed output)
        per evaluation."""
        blobs, meta = reply
        n_diffs = len(labels[1]) if labels is not None else 0
        if meta.get("diffs") != n_diffs or meta.get("pairs") != n_pairs or \
                len(blobs) != n_diffs + 2 * n_pairs:
            raise RunFailed("auxiliary server: malformed reply")
        if labels is not None:
            t = labels[0]
            for it, diff in zip(labels[1], blobs[:n_diffs], strict=True):
                P.resume(it.ev)
                rows, right = P.compare(diff)
                acc = ok.setdefault((t, it.mask), np.zeros(n_samples, dtype=bool))
                acc[rows] = right
        rest = blobs[n_diffs:]
        return [(rest[2 * k], rest[2 * k + 1]) for k in range(n_pairs)]

    def _models(self, pub: _Public, t: int, leader: int, order: list[int],
                replies: dict[int, tuple[tuple[list[bytes], dict[str, Any]], int]]
                ) -> tuple[list[bytes], list[bytes], list[int], list[str]]:
        """The round's model shares from the uploading clients' replies (after ``skip``
        blobs each): P's, A's sealed, their owners and keys."""
        out: tuple[list[bytes], list[bytes], list[int], list[str]] = ([], [], [], [])
        for c, ((blobs, meta), skip) in sorted(replies.items()):
            want = (["global"] if c == leader else []) + (
                [f"c{c}"] if c in pub.space.rounds[t][0] else [])
            if meta.get("keys") != want or len(blobs) != skip + 2 * len(want):
                raise RunFailed(f"{self.label(order[c])}: malformed models of round {t}")
            for k, key in enumerate(want):
                out[0].append(blobs[skip + 2 * k])
                out[1].append(blobs[skip + 2 * k + 1])
                out[2].append(c)
                out[3].append(key)
        return out


def _uploaders(pub: _Public, t: int, leader: int) -> list[int]:
    parts = pub.space.rounds[t][0]
    return [c for c in range(pub.n) if c == leader or c in parts]


def _split(reply: tuple[list[bytes], dict[str, Any]], at_least: int) -> list[bytes]:
    if len(reply[0]) < at_least:
        raise ProtocolError("malformed reply")
    return reply[0]


@dataclass
class _Results:
    """The round loop's view of a finished Flower run: every coalition's right
    predictions, already computed."""

    record: Any
    n_samples: int
    ok: dict[tuple[int, int], NDArray[np.bool_]]
    acc: Accounting = field(default_factory=Accounting)

    def upload_round(self, t: int) -> None:
        pass

    def end_round(self, t: int) -> None:
        pass

    def evaluate(self, t: int, mask: int, rows: NDArray[np.int64] | None) -> NDArray[np.bool_]:
        if rows is not None or (t, mask) not in self.ok:
            raise ProtocolError("SecretSV on Flower evaluates every coalition at once")
        return self.ok.pop((t, mask))


def main(grid: Any, context: Any) -> None:
    """ServerApp entry point for ``protocol='secretsv'``: run, write the result JSON."""
    from fedsec.runtime.safetext import printable

    opts = SecretSVOptions.from_run_config(context.run_config)
    run = SecretSVServerRun(grid, opts, run_id=int(context.run_id))
    try:
        run.run()
        logger.info("fedsec: SecretSV done: fsv=%s", printable(str(run.doc.get("fsv"))))
    except Exception as err:
        run.doc.update(status="failed", error=f"{type(err).__name__}: {err}")
        logger.error("fedsec: SecretSV run failed: %s", printable(run.doc["error"]))
        raise
    finally:
        run.write()
