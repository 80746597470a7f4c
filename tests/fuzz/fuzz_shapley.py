"""Fuzz targets for the secure Shapley roles: HESV, SecSV and SecretSV (test-side scaffold).

:func:`build_shapley_world` plays one small honest run of each protocol step by step
(4 clients, a two-layer model ``dense(3,4,square) -> dense(4,2)``, 3 test samples per
client, one round; and for SecSV's derived decryption a one-layer record on the same data,
:func:`tiny_derived_record`) and keeps every message and every role's state between steps
(a few seconds). :func:`make_shapley_targets` turns that into :class:`~fuzz_targets.Target`
objects, one per entry point where a role consumes another role's bytes:

* **HESV** - the server's ``receive_data``, ``receive_model`` and ``step`` (each reply
  kind: activated features, predicted labels, count) and the clients' ``decrypt_layer``,
  ``count`` and ``handle``;
* **SecSV** - the client's ``receive_plan`` and ``decrypt_layer``; P's choice of the
  fixed point from the clients' bounds; P's and A's ``receive_data`` and ``receive_model``;
  inside one evaluation (messages substituted in flight), P's evaluation announcement to
  A, A's encrypted products to P, the decryption request to the client, its re-shares and
  label shares to P and A, A's label difference;
* **SecSV, derived decryption** (a one-layer model ``dense(3,2)``, participants 0, 1, 3 of
  the same 4 clients, so that one batch's decryptor does not participate) - the client's
  ``decrypt_all`` (mutated, replayed to the client that answered it, misrouted, or with
  its terms and batch owners forged as P could) and, in flight, every message of the
  derived evaluation of a round (``secsv/eval``, A's products, the ``decrypt-all``
  request, the ``labels-all`` shares, A's ``label-diff-all``); A's ``label_diff_all`` and
  P's ``compare_all`` on their own (a metadata-only change must give the honest answer);
* **SecretSV** - P's and A's ``receive_data``, ``receive_model``, ``open_share`` (the
  dealer's triple) and ``beaver`` (the other server's opening); the client's
  ``reconstruct``; inside one evaluation, every message (triples, openings, outputs,
  re-shares, label shares, A's label difference);
* **Flower runtime** - ``RecordingFedAvg.aggregate_train`` on train replies with hostile
  client ids, weights and arrays.

Producers: *outsider* (wire-level mutations of a valid message: truncation, bit flips,
length fields, kinds, versions, metadata), *meta* (one metadata key dropped or set to a
hostile value, blobs intact), *blob* (a ciphertext or share replaced by one from another
context, level or scale, zero-length, huge, or the blob count changed), *replay* (a valid
message of another step, evaluation or role -- since messages are bound to their context
(:mod:`fedsec.protocol.binding`) these are refused as ``ReplayRefused``, a
``ProtocolError``). Roles are cloned with their memory (ids issued and answered, the
evaluation in flight), and P and A are snapshotted mid-evaluation where a decoder needs
that state (a first Beaver product; just before they read a client's shares). Oracles
check what must hold when a hostile message is accepted: a client never decrypts against
Prop. 6.8's rules for itself (with derived decryption: never its own samples, never its own
model's singleton, never a batch or request twice), the HESV server's counts stay within
the batch and nothing is counted twice, a model is never stored under a key its message
does not own, and an evaluation returns one boolean per sample (a derived one, the honest
table of every coalition when only metadata changed or a message was replayed).
"""

from __future__ import annotations

import copy
import dataclasses
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from fuzz_mutations import Mutator, Pools, raw_ciphertext, transparent_ciphertext
from fuzz_targets import Case, Target, _encode_loose

from fedsec.crypto import sharing as sh
from fedsec.crypto.ckks import CKKSContext
from fedsec.errors import ProtocolError
from fedsec.learning.model import LayerSpec, ModelSpec
from fedsec.learning.record import RoundRecord, TrainingRecord
from fedsec.protocol import wire
from fedsec.protocol.accounting import Accounting, Clock
from fedsec.protocol.binding import CTX, session_from_nonces
from fedsec.protocol.binding import Context as PContext
from fedsec.protocol.network import Envelope, Network
from fedsec.shapley import secretsv as ssv
from fedsec.shapley import secsv as sv
from fedsec.shapley.hesv import HESVClient, HESVConfig, HESVServer, _key_setup
from fedsec.shapley.secure_game import check_decryptor, plan_groups

__all__ = ["ShapleyWorld", "build_shapley_world", "make_shapley_targets",
           "shapley_meta_cases", "SHAPLEY_TARGETS", "FLOWER_TARGETS", "HESV_PRESET_TEST"]

HESV_PRESET_TEST = "INSECURE_TEST_N2048_DEPTH2_S24"
N_CLIENTS = 4
MASKS = (0b0011, 0b0010)  # an aggregated model (no owner) and client 1's local model


# ---------------------------------------------------------------------- recording
class Recorder(Accounting):
    """Accounting that keeps every message in order and can substitute one in flight:
    ``swap = (kind, k, fn)`` replaces the ``k``-th message of ``kind`` by ``fn(payload)``."""

    def __init__(self, keep: bool = True) -> None:
        super().__init__()
        self.log: list[tuple[str, str, str, bytes]] = []
        self.keep = keep
        self.swap: tuple[str, int, Callable[[bytes], bytes]] | None = None
        #: several substitutions at once: ``(kind, k) -> fn``
        self.swaps: dict[tuple[str, int], Callable[[bytes], bytes]] = {}
        self._seen: dict[str, int] = {}
        self.swapped: bytes | None = None
        #: called with every message before it is delivered (e.g. to snapshot the roles)
        self.hook: Callable[[str, str, str, bytes], None] | None = None

    def message(self, sender: str, receiver: str, kind: str, payload: bytes) -> bytes:
        if self.hook is not None:
            self.hook(sender, receiver, kind, bytes(payload))
        swaps = dict(self.swaps)
        if self.swap is not None:
            swaps[(self.swap[0], self.swap[1])] = self.swap[2]
        if any(kd == kind for kd, _ in swaps):
            k = self._seen.get(kind, 0)
            self._seen[kind] = k + 1
            fn = swaps.get((kind, k))
            if fn is not None:
                payload = fn(bytes(payload))
                self.swapped = payload
                return payload  # not counted: hostile bytes may be anything
        if self.keep:
            self.log.append((sender, receiver, kind, bytes(payload)))
        return bytes(payload)

    def of(self, kind: str, sender: str | None = None, receiver: str | None = None
           ) -> list[tuple[str, str, bytes]]:
        return [(s, r, p) for s, r, k, p in self.log if k == kind
                and (sender is None or s == sender) and (receiver is None or r == receiver)]

    def __call__(self, envs: list[Envelope]) -> list[Envelope]:
        """As a network interceptor: every envelope through :meth:`message`, under the
        short kind the logs use (``decrypt``, ``share``, ``label-diff``...)."""
        return [e.with_payload(self.message(e.sender, e.recipient, short_kind(e.kind),
                                            e.payload)) for e in envs]

    intercept = __call__


#: Message kinds under the names the recorder's logs use (re-shares and label shares are
#: both "share")
_SHORT = {"secsv/decrypt-all": "decrypt", "secsv/reshare": "share", "secsv/labels": "share",
          "secsv/labels-all": "share", "secsv/label-diff-all": "label-diff",
          "secretsv/reshare": "share", "secretsv/labels": "share"}


def short_kind(kind: str) -> str:
    return _SHORT.get(kind, kind.split("/", 1)[-1])


def recorder_net(rec: Recorder) -> Network:
    """A network that passes every message through ``rec`` (SecSV's runs)."""
    net = Network()
    net.intercept(rec)
    return net


def use_recorder(run: Any, rec: Recorder) -> Recorder:
    """Let ``rec`` see (and swap) every message of ``run``: on its network (SecSV) or as
    its accounting (runs that still take one)."""
    if isinstance(getattr(run, "net", None), Network):
        run.net = recorder_net(rec)
        run._fz_recorder = rec  # noqa: SLF001
    else:
        run.acc = rec
    return rec


def recorder_of(run: Any) -> Recorder:
    rec = getattr(run, "_fz_recorder", None)
    return rec if rec is not None else run.acc


def tap(run: Any, rec: Recorder | None = None) -> Recorder:
    """Record (and let a test substitute) the messages of ``run`` from now on
    (:func:`use_recorder` with a fresh recorder unless one is given)."""
    return use_recorder(run, Recorder() if rec is None else rec)


def _tiny_record() -> tuple[TrainingRecord, list[tuple[np.ndarray, np.ndarray]]]:
    rng = np.random.default_rng(11)
    spec = ModelSpec("tiny2", (LayerSpec.dense(3, 4, "square"), LayerSpec.dense(4, 2)))
    params = [spec.init_params(rng) for _ in range(N_CLIENTS + 1)]
    rnd = RoundRecord(params[0], tuple(range(N_CLIENTS)), tuple(params[1:]),
                      np.arange(1.0, N_CLIENTS + 1.0))
    record = TrainingRecord(spec, N_CLIENTS, (rnd,), params[0])
    sets = [(rng.normal(size=(3, 3)), rng.integers(0, 2, 3).astype(np.int64))
            for _ in range(N_CLIENTS)]
    return record, sets


#: Participants of the derived-decryption record. A one-layer model groups the 4 clients
#: in pairs ({0, 1}, {2, 3}); client 2 does not participate, so the batch of {0, 1} goes
#: to client 2 without a pair term and the batch of {2, 3} to client 1 with one.
DERIVED_PARTS = (0, 1, 3)


def tiny_derived_record(sets: Sequence[tuple[np.ndarray, np.ndarray]], rounds: int = 1
                        ) -> TrainingRecord:
    """A one-layer (logistic-like) record on the tiny world's data: ``dense(3, 2)``,
    participants :data:`DERIVED_PARTS` with weights 1, 2, 3 in every round -- what
    SecSV's derived decryption applies to."""
    rng = np.random.default_rng(13)
    spec = ModelSpec("tiny1", (LayerSpec.dense(3, 2),))
    assert all(x.shape[1] == spec.in_features for x, _ in sets)
    rnds = []
    glob = spec.init_params(rng)
    for _ in range(rounds):
        local = tuple(spec.init_params(rng) for _ in DERIVED_PARTS)
        rnds.append(RoundRecord(glob, DERIVED_PARTS, local,
                                np.arange(1.0, len(DERIVED_PARTS) + 1.0)))
        glob = spec.init_params(rng)
    return TrainingRecord(spec, N_CLIENTS, tuple(rnds), glob)


# ---------------------------------------------------------------------- cloning roles
def clone_hserver(s: HESVServer) -> HESVServer:
    c = copy.copy(s)
    c._data = dict(s._data)  # noqa: SLF001
    c._models = dict(s._models)  # noqa: SLF001
    c._first = dict(s._first)  # noqa: SLF001
    c._agg = dict(s._agg)  # noqa: SLF001
    c._evals = {k: dataclasses.replace(v) for k, v in s._evals.items()}  # noqa: SLF001
    c._counts = dict(s._counts)  # noqa: SLF001
    c._pending = dict(s._pending)  # noqa: SLF001
    c._decryptions = dict(s._decryptions)  # noqa: SLF001
    c.clock = Clock()
    return c


def clone_hclient(s: HESVClient) -> HESVClient:
    c = copy.copy(s)
    c._seen = {k: set(v) for k, v in s._seen.items()}  # noqa: SLF001
    c._answered = s._answered.copy()  # noqa: SLF001
    c.clock = Clock()
    return c


def clone_sserver(s: Any) -> Any:  # noqa: SLF001 - a role's private state, copied
    """A SecSV server (P or A), with its evaluation state (ids issued and seen)."""
    c = copy.copy(s)
    for name in ("_xbound", "_models", "_plain_cache", "_agg_cache", "_scaled", "_scalars",
                 "_lin_cache", "_derived_correct"):
        if hasattr(s, name):
            setattr(c, name, dict(getattr(s, name)))
    c.clock = Clock()
    ev = s._eval  # noqa: SLF001
    if ev is not None:
        c._eval = dataclasses.replace(  # noqa: SLF001
            ev, products=set(ev.products), announced=dict(ev.announced),
            job=None if ev.job is None else dataclasses.replace(ev.job))
    if hasattr(s, "_requests"):
        c._requests = s._requests.copy()  # noqa: SLF001
    for name in ("_evals_seen", "_lin_sent"):
        if hasattr(s, name):
            setattr(c, name, set(getattr(s, name)))
    if hasattr(s, "_work"):
        c._work = list(s._work)  # noqa: SLF001
        c._found, c._table = s._found.copy(), s._table.copy()  # noqa: SLF001
    return c


def clone_sclient(x: Any) -> Any:
    """A SecSV client with its memory (requests answered, layers decrypted)."""
    c = copy.copy(x)
    c.clock = Clock()
    c._answered = x._answered.copy()  # noqa: SLF001
    c._seen = {k: set(v) for k, v in x._seen.items()}  # noqa: SLF001
    return c


def clone_srun(run: Any) -> Any:
    c = copy.copy(run)
    c.P, c.A = clone_sserver(run.P), clone_sserver(run.A)
    use_recorder(c, Recorder(keep=False))
    c.clients = [clone_sclient(x) for x in run.clients]
    return c


def clone_tserver(s: Any) -> Any:
    """A SecretSV server, with its evaluation state (its schedule shared, as before)."""
    c = copy.copy(s)
    for name in ("_xbound", "_models", "_bounds"):
        setattr(c, name, dict(getattr(s, name)))
    c._evals_seen, c._triples_used = set(s._evals_seen), set(s._triples_used)  # noqa: SLF001
    c._order = list(s._order)  # noqa: SLF001
    if s._eval is not None:  # noqa: SLF001
        c._eval = dataclasses.replace(s._eval, announced=dict(s._eval.announced))  # noqa: SLF001
    c.clock = Clock()
    return c


def clone_tclient(x: Any) -> Any:
    c = copy.copy(x)
    c._answered = set(x._answered)  # noqa: SLF001
    c._seen = {k: set(v) for k, v in x._seen.items()}  # noqa: SLF001
    c.clock = Clock()
    return c


def clone_trun(run: Any) -> Any:
    c = copy.copy(run)
    c.P, c.A = clone_tserver(run.P), clone_tserver(run.A)
    c.clients = [clone_tclient(x) for x in run.clients]
    tap(c, Recorder(keep=False))
    return c


# ---------------------------------------------------------------------- the corpus
@dataclass
class HStep:
    """The server just before ``step(sender, reply)`` of an honest evaluation."""

    server: HESVServer
    sender: int
    reply: bytes
    kind: str
    m: int


@dataclass
class HRequest:
    """A client just before it answers ``request``."""

    client: HESVClient
    request: bytes
    kind: str


@dataclass
class DRequest:
    """A derived decryption request and its client just before and just after it
    answered (the latter must refuse it again)."""

    me: int
    request: bytes
    before: Any
    after: Any


@dataclass
class DShare:
    """A derived evaluation just before P and A read the decrypting client's label
    shares (batch ``rows``, ``n_masks`` coalitions), with A's honest answer and the
    honest correctness of those rows."""

    run: Any
    to_p: bytes
    to_a: bytes
    diff_a: bytes
    rows: np.ndarray
    n_masks: int
    honest: np.ndarray  # n_masks x m
    mask_p: bytes = b""  # P's honest label mask for A (the zero test's first step)


@dataclass
class ShapleyWorld:
    record: TrainingRecord
    sets: list[tuple[np.ndarray, np.ndarray]]
    # HESV
    h_cfg: HESVConfig
    h_session: str
    h_server_empty: HESVServer
    h_server_ready: HESVServer
    h_clients: list[HESVClient]
    h_data: list[bytes]
    h_models: list[tuple[int, bytes]]
    h_steps: list[HStep]
    h_requests: list[HRequest]
    h_counts: dict[int, int]             # honest count per mask
    h_foreign_ct: list[bytes]            # other context, wrong level, wrong scale, ...
    # SecSV
    s_run: Any
    s_rec: Recorder
    s_plan: bytes
    s_bounds: list[bytes]
    s_data_p: list[bytes]
    s_data_a: list[bytes]
    s_models: list[bytes]
    s_server_p_empty: Any
    s_clients_noplan: list[Any]
    s_eval: dict[int, tuple[Recorder, np.ndarray]]   # per mask: its messages and result
    s_foreign_ct: list[bytes]
    # SecretSV
    t_run: Any
    t_data_p: list[bytes]
    t_data_a: list[bytes]
    t_models_p: list[bytes]
    t_server_empty: Any
    t_eval: dict[int, tuple[Recorder, np.ndarray]]
    t_open: tuple[Any, Any, bytes, bytes]  # P and A in a first layer, and its triples
    # SecSV with derived decryption (one-layer record, participants DERIVED_PARTS)
    d_record: TrainingRecord
    d_run: Any                         # the round's models uploaded, nothing evaluated
    d_log: Recorder                    # every message of the round's derived evaluation
    d_table: np.ndarray                # honest correctness, 2^k coalitions x samples
    d_reference: np.ndarray            # the same from per-coalition SecSV (must be equal)
    d_requests: list[DRequest]         # each decrypt-all request, the client around it
    d_at_share: list[DShare]           # P and A before they read each batch's label shares
    # the run just before P and A read a client's shares (mask MASKS[0]): run, P's, A's
    s_at_share: list[tuple[Any, bytes, bytes]] = field(default_factory=list)
    t_at_share: list[tuple[Any, bytes, bytes]] = field(default_factory=list)
    # set-up messages A reads, and empty servers of each side
    s_batches: bytes = b""
    s_server_a_empty: Any = None
    t_server_a_empty: Any = None
    t_order: bytes = b""
    t_models_a: list[bytes] = field(default_factory=list)
    t_hellos: list[bytes] = field(default_factory=list)    # every role's but P's, to P
    t_offer: bytes = b""                                   # P's session message
    pools: Pools = field(default_factory=Pools)
    build_seconds: float = 0.0


def _hesv(record: TrainingRecord, sets: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, Any]:
    cfg = HESVConfig(HESV_PRESET_TEST, batch_hint=4, allow_insecure=True)
    agg, keys = _key_setup(N_CLIENTS, cfg.key_spec(record.spec), Network())
    assert agg.context is not None
    rounds = [(r.participants, np.asarray(r.weights, dtype=np.float64)) for r in record.rounds]
    server = HESVServer(agg.context, record.spec, cfg, N_CLIENTS, rounds, agg.session)
    empty = clone_hserver(server)
    clients = [HESVClient(i, keys[i], record.spec, cfg, N_CLIENTS, *sets[i])
               for i in range(N_CLIENTS)]
    data = [c.upload_data() for c in clients]
    for i, d in enumerate(data):
        server.receive_data(i, d)
    rnd = record.rounds[0]
    models = [(0, clients[0].upload_model(0, rnd.global_params, kind="global"))]
    models += [(cid, clients[cid].upload_model(0, p))
               for cid, p in zip(rnd.participants, rnd.local_params, strict=True)]
    for cid, up in models:
        server.receive_model(cid, up)
    ready = clone_hserver(server)
    fresh_clients = [clone_hclient(c) for c in clients]
    steps: list[HStep] = []
    requests: list[HRequest] = []
    counts = {}
    for mask in MASKS:
        queue = server.start(0, mask)
        while queue:
            to, req = queue.pop()
            requests.append(HRequest(clone_hclient(clients[to]), req, wire.decode(req).kind))
            reply = clients[to].handle(req)
            msg = wire.decode(reply)
            steps.append(HStep(clone_hserver(server), to, reply, msg.kind,
                               int(msg.meta.get("m", 0) or 0)))
            nxt = server.step(to, reply)
            if nxt is not None:
                queue.append(nxt)
        counts[mask] = server._counts[(0, mask)]  # noqa: SLF001
    # ciphertexts a hostile peer may substitute
    holder = keys[0].context
    other = CKKSContext.generate("INSECURE_TEST_N4096_DEPTH2", allow_insecure=True)
    top = holder.encrypt(np.ones(4))
    low = holder.encrypt_bytes(np.ones(4), parms_id=holder.last_parms_id)
    foreign = [holder.serialize(top), low,
               holder.serialize(holder.encrypt(np.ones(4), scale=2.0 ** 30)),
               holder.serialize(holder.encrypt(np.ones(4), scale=2.0 ** 12)),
               holder.serialize(agg.context.square(agg.context.encrypt(np.ones(4)),
                                                   rescale=False)),
               other.encrypt_bytes([1.0]), b"", b"\x00" * (1 << 20),
               transparent_ciphertext(holder.serialize(top)),
               transparent_ciphertext(raw_ciphertext(holder.deserialize(low)))]
    return {"h_cfg": cfg, "h_session": agg.session, "h_server_empty": empty,
            "h_server_ready": ready, "h_clients": fresh_clients, "h_data": data,
            "h_models": models, "h_steps": steps, "h_requests": requests,
            "h_counts": counts, "h_foreign_ct": foreign}


def _share_snapshots(run: Any, clone: Callable[[Any], Any],
                     out: list[tuple[Any, bytes, bytes]]) -> Callable[[str, str, str, bytes],
                                                                      None]:
    """A recorder hook keeping ``(run, share to P, share to A)`` each time a client's
    shares are on their way (P and A have not read them yet)."""
    pending: list[bytes] = []

    def hook(sender: str, receiver: str, kind: str, payload: bytes) -> None:
        if kind != "share":
            return
        if receiver == "P":
            pending[:] = [payload]
        elif pending:
            snap = clone(run)
            out.append((snap, pending[0], payload))
    return hook


def _secsv(record: TrainingRecord, sets: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, Any]:
    rec = Recorder()
    cfg = sv.SecSVConfig().check()
    run = sv._setup(record, sets, cfg, recorder_net(rec), True)  # noqa: SLF001
    plan = rec.of("plan")[0][2]
    bounds = [p for _, _, p in rec.of("bounds")]
    data_p = [p for _, _, p in rec.of("data", receiver="P")]
    data_a = [p for _, _, p in rec.of("data", receiver="A")]
    session = run.P._b.session  # noqa: SLF001
    rounds = sv.round_infos(record, cfg)
    p_empty = sv.PrincipalServer(run.P._bfv, record.spec, N_CLIENTS, cfg, rounds,  # noqa: SLF001
                                 session=session, groups=[[c] for c in range(N_CLIENTS)],
                                 strong=True, sizes=[len(y) for _, y in sets])
    p_empty._plan = run.P.plan  # noqa: SLF001 - as after its own make_plan
    a_empty = sv.AuxiliaryServer(run.A._bfv, record.spec, N_CLIENTS, cfg, rounds,  # noqa: SLF001
                                 session=session)
    a_empty.receive_plan(plan)
    noplan = []
    for c in run.clients:
        x = copy.copy(c)
        x._plan = None  # noqa: SLF001
        noplan.append(x)
    n_log = len(rec.log)
    run.upload_round(0)
    models = [p for _, r, _k, p in rec.log[n_log:] if r == "P"]
    evals, at_share = {}, []
    for mask in MASKS:
        r2 = clone_srun(run)
        log = use_recorder(r2, Recorder())
        if mask == MASKS[0]:
            log.hook = _share_snapshots(r2, clone_srun, at_share)
        out = r2.evaluate(0, mask, None)
        evals[mask] = (log, out)
    bfv = run.P._bfv  # noqa: SLF001
    client_bfv = run.clients[0]._bfv  # noqa: SLF001
    ct = client_bfv.encrypt(np.ones(bfv.slots, dtype=np.uint64))
    foreign = [bfv.serialize(ct), bfv.serialize(ct, ntt=True),
               bfv.serialize(bfv.mod_switch_down(ct)), b"", b"\x00" * (1 << 20),
               wire.decode(models[0]).blobs[0]]
    # the same, transparent (c1 = 0: well framed, but no encryption)
    foreign += [transparent_ciphertext(b) for b in foreign[:3] + foreign[-1:]]
    return {"s_run": run, "s_rec": rec, "s_plan": plan, "s_bounds": bounds,
            "s_data_p": data_p, "s_data_a": data_a, "s_models": models,
            "s_server_p_empty": p_empty, "s_clients_noplan": noplan, "s_eval": evals,
            "s_foreign_ct": foreign, "s_at_share": at_share, "s_server_a_empty": a_empty,
            "s_batches": rec.of("batches")[0][2]}


def _secsv_derived(sets: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, Any]:
    """A derived-decryption SecSV run of round 0 (all coalitions at once, one request per
    batch), the per-coalition run of the same record as a reference, and every
    ``decrypt-all`` request with its client just before and after answering it."""
    record = tiny_derived_record(sets)
    cfg = sv.SecSVConfig().check()
    run = sv._setup(record, sets, cfg, recorder_net(Recorder(keep=False)), True,  # noqa: SLF001
                    True)
    run.upload_round(0)
    r2 = clone_srun(run)
    log = use_recorder(r2, Recorder())
    befores: list[tuple[int, bytes, Any]] = []

    def hook(sender: str, receiver: str, kind: str, payload: bytes) -> None:
        if kind == "decrypt":
            me = int(receiver.split(":")[1])
            befores.append((me, payload, clone_sclient(r2.clients[me])))

    snaps: list[tuple[Any, bytes, bytes]] = []
    share_hook = _share_snapshots(r2, clone_srun, snaps)

    def hooks(sender: str, receiver: str, kind: str, payload: bytes) -> None:
        hook(sender, receiver, kind, payload)
        share_hook(sender, receiver, kind, payload)

    log.hook = hooks
    r2.evaluate(0, 0, None)
    log.hook = None
    table = np.asarray(r2.P._derived_correct[0])  # noqa: SLF001
    requests = [DRequest(me, req, before, clone_sclient(r2.clients[me]))
                for me, req, before in befores]
    at_share = []
    for snap, to_p, to_a in snaps:
        assert snap.P._eval is not None  # noqa: SLF001
        rows = snap.P._eval.rows  # noqa: SLF001
        mask_p = clone_sserver(snap.P).label_mask_all(to_p)
        diff_a = clone_sserver(snap.A).label_diff_all(to_a, mask_p)
        at_share.append(DShare(snap, to_p, to_a, diff_a, rows, len(table),
                               table[:, rows], mask_p))
    ref = sv._setup(record, sets, cfg, None, True, False)  # noqa: SLF001
    ref.upload_round(0)
    reference = np.stack([ref.evaluate(0, mask, None) for mask in range(len(table))])
    return {"d_record": record, "d_run": run, "d_log": log, "d_table": table,
            "d_reference": reference, "d_requests": requests, "d_at_share": at_share}


def _secretsv(record: TrainingRecord, sets: list[tuple[np.ndarray, np.ndarray]]
              ) -> dict[str, Any]:
    n, n_layers = record.n_clients, len(record.spec.layers)
    groups, strong = plan_groups(n, n_layers)
    rounds = [(r.participants, np.asarray(r.weights)) for r in record.rounds]
    clients = [ssv.SecretSVClient(i, n, record.spec, x, y) for i, (x, y) in enumerate(sets)]
    P = ssv.SecretSVPrincipal(record.spec, rounds, n_clients=n)
    A = ssv.SecretSVAuxiliary(record.spec, rounds, n_clients=n)
    dealer = ssv.Dealer()
    run = ssv.SecretSVRun(record, Network(), clients, P, A, dealer, len(groups),
                          sum(len(y) for _, y in sets), leader=0)
    rec = tap(run)
    ssv.open_session(run.net, clients, P, A, dealer, record)
    empty, a_empty = clone_tserver(P), clone_tserver(A)
    names = [c.name for c in clients]
    shares = [c.share_data() for c in clients]
    data_p = run.net.gather(names, "P", [d[0] for d in shares])
    data_a = run.net.gather(names, "A", [d[1] for d in shares])
    P.receive_data(data_p)
    A.receive_data(data_a)
    order_msg = run.net.send("P", "A", P.order_batches(groups, strong=strong))
    A.receive_order(order_msg)
    n_log = len(rec.log)
    run.upload_round(0)
    models_p = [p for _, r, _k, p in rec.log[n_log:] if r == "P"]
    models_a = [p for _, r, _k, p in rec.log[n_log:] if r == "A"]
    evals, at_share = {}, []
    for mask in MASKS:
        r2 = clone_trun(run)
        log = tap(r2)
        if mask == MASKS[0]:
            log.hook = _share_snapshots(r2, clone_trun, at_share)
        out = r2.evaluate(0, mask, None)
        evals[mask] = (log, out)
    # both servers at the first product of an evaluation, and its triples (open_share/beaver)
    p_at, a_at = clone_tserver(run.P), clone_tserver(run.A)
    a_at.open_eval(p_at.announce_eval(MASKS[0], 0, None))
    tp, ta = run.dealer.triple(p_at.triple_request())
    return {"t_run": run, "t_data_p": data_p, "t_data_a": data_a, "t_models_p": models_p,
            "t_server_empty": empty, "t_eval": evals, "t_open": (p_at, a_at, tp, ta),
            "t_at_share": at_share, "t_server_a_empty": a_empty, "t_order": order_msg,
            "t_models_a": models_a,
            "t_hellos": [p for _, _, p in rec.of("hello")], "t_offer": rec.of("session")[0][2]}


def build_shapley_world() -> ShapleyWorld:
    """One honest run of HESV, SecSV and SecretSV, step by step (a few seconds)."""
    t0 = time.perf_counter()
    record, sets = _tiny_record()
    parts: dict[str, Any] = {}
    parts.update(_hesv(record, sets))
    parts.update(_secsv(record, sets))
    parts.update(_secretsv(record, sets))
    parts.update(_secsv_derived(sets))
    world = ShapleyWorld(record, sets, **parts)
    pools = world.pools
    for m in (world.h_data + [b for _, b in world.h_models] + [s.reply for s in world.h_steps]
              + [r.request for r in world.h_requests] + [world.s_plan] + world.s_bounds
              + world.s_data_p[:1] + world.s_models[:2] + world.t_data_p[:1]
              + world.t_models_p[:2] + [world.s_batches, world.t_order, world.t_offer]
              + world.t_hellos[:1]):
        pools.add_message(m)
    logs = [log for log, _ in list(world.s_eval.values()) + list(world.t_eval.values())]
    for log in logs + [world.d_log]:
        for _, _, _, p in log.log:
            if len(p) < 1 << 18:
                pools.add_message(p)
    world.build_seconds = time.perf_counter() - t0
    return world


# ---------------------------------------------------------------------- producers
class Hostile:
    """Hostile variants of one valid message: wire-level, metadata, blobs, replays."""

    def __init__(self, foreign_blobs: Sequence[bytes]) -> None:
        self.foreign = list(foreign_blobs)

    def outsider(self, m: Mutator, data: bytes) -> bytes:
        return m.mutate_many(data)

    def meta(self, m: Mutator, data: bytes) -> bytes:
        """One metadata key dropped, or set to a hostile or nudged value; blobs intact."""
        msg = wire.decode(data)
        meta = dict(msg.meta)
        keys = sorted(meta)
        r = m.rng.random()
        if keys and r < 0.25:
            del meta[m.rng.choice(keys)]
        elif keys and r < 0.85:
            k = m.rng.choice(keys)
            meta[k] = m.value(meta[k])
        else:
            meta = m.meta(meta)
        return _encode_loose(msg.kind, meta, list(msg.blobs))

    def blob(self, m: Mutator, data: bytes) -> bytes:
        """A blob replaced (another context, level or scale, empty, huge, another blob of
        the message), or the blob count changed."""
        msg = wire.decode(data)
        blobs = list(msg.blobs)
        rng = m.rng
        op = rng.randrange(6)
        if blobs and op <= 2:
            k = rng.randrange(len(blobs))
            half = len(blobs[k]) // 16 * 8
            blobs[k] = rng.choice(self.foreign + blobs) if op < 2 else \
                rng.choice((b"", b"\x00", blobs[k][:-8], blobs[k] + b"\x00" * 8,
                            rng.randbytes(len(blobs[k])),
                            bytes(len(blobs[k])),  # an all-zero share (in range)
                            bytes(half) + blobs[k][half:]))  # its first half zero
        elif op == 3 and blobs:
            del blobs[rng.randrange(len(blobs))]
        elif op == 4:
            blobs.insert(rng.randrange(len(blobs) + 1),
                         rng.choice(blobs + self.foreign) if blobs else b"x")
        else:
            blobs = blobs[::-1] if len(blobs) > 1 else blobs * 2
        return _encode_loose(msg.kind, dict(msg.meta), blobs)

    def any(self, m: Mutator, data: bytes, replays: Sequence[bytes] = ()) -> tuple[bytes, str]:
        r = m.rng.random()
        if r < 0.35:
            return self.outsider(m, data), "outsider"
        if r < 0.6:
            return self.meta(m, data), "meta"
        if r < 0.85 or not replays:
            return self.blob(m, data), "blob"
        return m.rng.choice(list(replays)), "replay"


def _ok_bools(n: int) -> Callable[[Any], str | None]:
    def check(out: Any) -> str | None:
        if not isinstance(out, np.ndarray) or out.dtype != bool or out.shape != (n,):
            return f"an evaluation returned {type(out).__name__} {getattr(out, 'shape', '')}"
        return None
    return check


def _same_message(a: bytes, b: bytes) -> bool:
    """Whether ``a`` decodes to the same message as ``b`` (a framing-neutral change)."""
    try:
        return wire.decode(a) == wire.decode(b)
    except ProtocolError:
        return False


def _in_flight_oracle(honest: np.ndarray, n: int, meta_only: bool
                      ) -> Callable[[Any], str | None]:
    """One boolean per sample; and an accepted message with the same content (a
    framing-neutral change), or a client's share whose metadata alone changed (its values
    are this run's honest ones), must not change the evaluation: SecSV and SecretSV are
    exact, so the result must be exactly the honest one."""
    shape = _ok_bools(n)

    def check(result: Any) -> str | None:
        out, same = result
        bad = shape(out)
        if bad is None and (meta_only or any(same)) and not np.array_equal(out, honest):
            return (f"an accepted {'metadata change' if meta_only else 'same message'} "
                    f"changed the result silently: {int((out != honest).sum())} of "
                    f"{len(honest)} samples differ")
        return bad
    return check


def _meta_of(data: bytes) -> dict[str, Any] | None:
    try:
        return dict(wire.decode(data).meta)
    except ProtocolError:
        return None


_HINDEX = ("mask", "owner", "batch", "layer")


def _hmeta(data: bytes) -> dict[str, Any]:
    """An HESV message's metadata with its binding context's round and index (mask,
    owner, batch, layer) as keys (absent where the context is malformed)."""
    meta = _meta_of(data) or {}
    try:
        ctx = PContext.from_meta(meta.get(CTX))
    except ProtocolError:
        return meta
    out = {**meta, "round": ctx.round}
    if len(ctx.index) == len(_HINDEX):
        out.update(zip(_HINDEX, ctx.index, strict=True))
    return out


# ---------------------------------------------------------------------- oracles
def _hesv_decrypt_oracle(before: HESVClient, request: bytes, n_layers: int
                         ) -> Callable[[Any], str | None]:
    """What a client must have refused, from the request it accepted and what it had
    decrypted before (Prop. 6.8, strong level)."""
    meta = _hmeta(request)
    key = tuple(meta.get(k) for k in ("round", "mask", "owner", "batch"))
    seen = set(before._seen.get(key, set())) if all(  # noqa: SLF001
        isinstance(v, int) for v in key) else set()
    me = before.index

    def check(_out: Any) -> str | None:
        layer = meta.get("layer")
        if meta.get("model_owner") == me:
            return "decrypted an output of its own local model"
        if meta.get("owner") == me and layer is not None:
            return "decrypted an output of its own batch"
        if seen and layer is not None:
            return f"decrypted layer {layer} after layers {sorted(seen)} of one evaluation"
        return None
    return check


def _hesv_count_oracle(before: HESVClient, request: bytes, n_layers: int
                       ) -> Callable[[Any], str | None]:
    meta = _hmeta(request)
    key = tuple(meta.get(k) for k in ("round", "mask", "owner", "batch"))
    seen = set(before._seen.get(key, set())) if all(  # noqa: SLF001
        isinstance(v, int) for v in key) else set()

    def check(out: Any) -> str | None:
        if meta.get("owner") == before.index:
            return "counted the difference of its own batch"
        if n_layers + 1 in seen:
            return "counted Y - Ŷ after seeing Ŷ"
        cnt = wire.decode(out).meta.get("count")
        m = meta.get("m")
        if not isinstance(cnt, int) or not isinstance(m, int) or not 0 <= cnt <= m:
            return f"count {cnt!r} outside 0..{m!r}"
        return None
    return check


def _hesv_step_oracle(before: HESVServer, total: int) -> Callable[[Any], str | None]:
    counts0 = dict(before._counts)  # noqa: SLF001

    def check(server: Any) -> str | None:
        for key, v in server._counts.items():  # noqa: SLF001
            if not 0 <= v <= total:
                return f"count {v} of {key} outside 0..{total}"
            if server._pending.get(key, 0) < 0:  # noqa: SLF001
                return f"{key}: more batches counted than evaluated"
            if v < counts0.get(key, 0):
                return f"count of {key} decreased"
        return None
    return check


def _stored_scales_oracle(ctx: CKKSContext, sender: int) -> Callable[[Any], str | None]:
    def check(server: Any) -> str | None:
        for b in server._data.get(sender, []):  # noqa: SLF001
            for ct in b.b:
                if ct.scale != ctx.scale or ct.parms_id() != ctx.top_parms_id:
                    return "stored a data ciphertext of another scale or level"
            if any(y.scale != ctx.scale or y.parms_id() != ctx.parms_id_at_level(1)
                   for y in b.y):  # one-hot labels, one level above the lowest
                return "stored a label ciphertext of another scale or level"
        return None
    return check


def _hesv_model_oracle(ctx: CKKSContext, sender: int, before: set[Any]
                       ) -> Callable[[Any], str | None]:
    def check(server: Any) -> str | None:
        for key, layers in server._models.items():  # noqa: SLF001
            if key in before:
                continue
            if key[1] not in (sender, "global") or (key[1] == "global" and sender != 0):
                return f"client {sender} stored a model under {key}"
            for blocks in layers:
                for cts in blocks:
                    for ct in cts:
                        if ct.scale != ctx.scale:
                            return "stored a model ciphertext of another scale"
        return None
    return check


def _decryptor_oracle(me: int, request_meta: dict[str, Any] | None, n_layers: int
                      ) -> Callable[[Any], str | None]:
    """SecSV/SecretSV: the client must refuse what the request itself shows breaks Prop.
    6.8 for it."""
    meta = request_meta or {}

    def check(_out: Any) -> str | None:
        owners, mowners = meta.get("batch_owners"), meta.get("model_owners")
        layer, prev = meta.get("layer"), meta.get("previous")
        try:
            check_decryptor(me, layer, n_layers, owners, mowners, prev)  # type: ignore[arg-type]
        except ProtocolError as exc:
            return f"decrypted against its own rule: {exc}"
        except Exception:  # noqa: BLE001 - the meta was odd; nothing to compare
            return None
        return None
    return check


def _state(role: Any, name: str) -> Any:
    """A role's state for an oracle (private where the role keeps it private)."""
    return getattr(role, f"_{name}") if hasattr(role, f"_{name}") else getattr(role, name)


def _all_clients_oracle(n: int, rows: int) -> Callable[[Any], str | None]:
    def check(server: Any) -> str | None:
        xbound, y = _state(server, "xbound"), _state(server, "y")
        if sorted(xbound) != list(range(n)) or len(y) != rows:
            return (f"accepted data shares of clients {sorted(xbound)} "
                    f"({len(y)} rows; {rows} expected)")
        return None
    return check


def _model_key_oracle(stored_before: set[Any], owner_of: Callable[[bytes], Any],
                      data: bytes) -> Callable[[Any], str | None]:
    owner = owner_of(data)

    def check(server: Any) -> str | None:
        new = set(_state(server, "models")) - stored_before
        for rnd, key in new:
            if key != "global" and key != f"c{owner}":
                return f"a model of owner {owner!r} stored under {key!r}"
            if not isinstance(rnd, int) or isinstance(rnd, bool) or rnd < 0:
                return f"a model stored for round {rnd!r}"
        return None
    return check


def _tmodel_oracle(stored_before: set[Any]) -> Callable[[Any], str | None]:
    def check(server: Any) -> str | None:
        for key in set(server._models) - stored_before:  # noqa: SLF001
            rnd, name = key
            if isinstance(rnd, bool) or not isinstance(rnd, int) or rnd < 0:
                return f"a model stored for round {rnd!r}"
            if any(b < 1 for bd in server._bounds[key] for b in bd):  # noqa: SLF001
                return f"model bounds {server._bounds[key]!r} accepted"  # noqa: SLF001
        return None
    return check


def _derived_oracle(before: Any, request: bytes) -> Callable[[Any], str | None]:
    """SecSV derived decryption: what the client must have refused, from the request's own
    metadata and the client's memory before it (Prop. 6.8: never its own samples, never
    its own model's singleton; each request id and each batch of a round once, no
    earlier round), and the shape of the label shares it sent."""
    meta = _meta_of(request) or {}
    me = before.index
    ctx = meta.get("ctx")
    rnd, batch = (ctx[2], ctx[6][1]) if isinstance(ctx, list) and len(ctx) == 7 \
        and isinstance(ctx[6], list) and len(ctx[6]) == 3 else (None, None)
    seen = before._seen.get((rnd, sv.ALL, batch), set()) if (  # noqa: SLF001
        isinstance(rnd, int) and isinstance(batch, int)) else set()
    answered = isinstance(meta.get("rid"), str) and meta["rid"] in before._answered  # noqa: SLF001
    earlier = isinstance(rnd, int) and rnd < before._round  # noqa: SLF001

    def check(out: Any) -> str | None:
        owners, terms = meta.get("batch_owners"), meta.get("terms")
        if isinstance(owners, list) and me in owners:
            return "decrypted the outputs of a batch of its own samples"
        if isinstance(terms, list) and any(isinstance(x, list) and len(x) == 1
                                           and x[0] == me for x in terms):
            return "decrypted its own model's singleton output"
        if answered:
            return "answered a request id twice"
        if 0 in seen:
            return f"decrypted batch {batch} of round {rnd} twice"
        if earlier:
            return f"decrypted a request of round {rnd} after a later round"
        parts = meta.get("participants")
        want = 1 << len(parts) if isinstance(parts, list) else None
        for data in out:
            got = wire.decode(data)
            k, m = got.meta.get("coalitions"), meta.get("m")
            if k != want or len(got.blobs) not in (2, 3) or not isinstance(m, int) \
                    or len(got.blobs[-1]) != 8 * k * m:
                return f"labels of {k!r} coalitions for {want!r} ({len(got.blobs)} blobs)"
        return None
    return check


def _derived_in_flight_oracle(table: np.ndarray, mask: int, strict: bool
                              ) -> Callable[[Any], str | None]:
    """A derived evaluation returns the mask's row of a ``2^k × M`` boolean table; an
    accepted message whose content is unchanged (a framing-neutral change), whose
    metadata alone changed (blobs intact; :func:`_forge_layout` for P's request) or that
    is a replay must leave the whole table exactly the honest one. (A blob replaced by
    another in-range ciphertext or share can shift values: BFV ciphertexts and shares
    are not authenticated.)"""
    def check(result: Any) -> str | None:
        out, got, same = result
        if not isinstance(out, np.ndarray) or out.dtype != bool or out.shape != table[0].shape:
            return f"an evaluation returned {type(out).__name__} {getattr(out, 'shape', '')}"
        if got is None or got.shape != table.shape or got.dtype != bool:
            return "no derived table of every coalition"
        if not np.array_equal(out, got[mask]):
            return "the evaluation's result is not its coalition's row of the table"
        if (strict or any(same)) and not np.array_equal(got, table):
            return (f"an accepted {'message' if strict else 'same message'} changed the "
                    f"derived table silently: {int((got != table).sum())} of {table.size} "
                    "entries differ")
        return None
    return check


def _label_diff_all_oracle(s: DShare, strict: bool) -> Callable[[Any], str | None]:
    """A's ``label-diff-all``: ``n_masks × m`` differences; a label share whose content
    is unchanged or whose metadata alone changed gives exactly A's honest answer."""
    honest = wire.decode(s.diff_a).blobs

    def check(out: Any) -> str | None:
        msg = wire.decode(out)
        if msg.meta.get("coalitions") != s.n_masks or len(msg.blobs) != 1 \
                or len(msg.blobs[0]) != 8 * s.n_masks * len(s.rows):
            return f"a label difference of {msg.meta.get('coalitions')!r} coalitions"
        if strict and msg.blobs != honest:
            return "an accepted metadata change altered A's label differences"
        return None
    return check


def _compare_all_oracle(s: DShare, strict: bool) -> Callable[[Any], str | None]:
    """P's ``compare_all``: ``n_masks × m`` booleans; with the shares' content unchanged
    (metadata alone changed), exactly the honest rows of the table."""
    def check(out: Any) -> str | None:
        if not isinstance(out, np.ndarray) or out.dtype != bool \
                or out.shape != s.honest.shape:
            return f"compare_all returned {type(out).__name__} {getattr(out, 'shape', '')}"
        if strict and not np.array_equal(out, s.honest):
            return (f"an accepted metadata change altered {int((out != s.honest).sum())} "
                    "correctness entries")
        return None
    return check


def _forge_terms(m: Mutator, meta: dict[str, Any], me: int) -> dict[str, Any]:
    """What a curious P could put in a derived request's metadata to have ``me`` decrypt
    its own singleton or its own samples (the blobs are left as they are)."""
    meta = dict(meta)
    terms = [list(x) for x in meta.get("terms", [])]
    parts = list(meta.get("participants", []))
    op = m.rng.randrange(9)
    if op == 0 and len(terms) > 1:  # another's singleton replaced by mine
        terms[m.rng.randrange(1, len(terms))] = [me]
    elif op == 1:  # mine added
        terms.insert(m.rng.randrange(1, len(terms) + 1), [me])
    elif op == 2 and terms and len(terms[-1]) == 2:  # the pair reduced to me
        terms[-1] = [me]
    elif op == 3 and terms and len(terms[-1]) == 2:  # the pair reversed or doubled
        terms[-1] = m.rng.choice(([terms[-1][1], me], [me, me], [me, terms[-1][1], me]))
    elif op == 4:  # I become a participant (or stop being one) with the same terms
        parts = parts + [me] if me not in parts else [c for c in parts if c != me]
        meta["weights"] = [1] * len(parts)
    elif op == 5:  # my samples in the batch
        meta["batch_owners"] = m.rng.choice(([me], [*meta.get("batch_owners", []), me],
                                             [me, *meta.get("batch_owners", [])]))
    elif op == 6:  # the participants reordered so that my model takes another's place
        if len(parts) > 1:
            i = m.rng.randrange(len(parts) - 1)
            parts[i], parts[i + 1] = parts[i + 1], parts[i]
    elif op == 7:  # no pair although I participate
        if me not in parts:
            parts.append(me)
            meta["weights"] = [*meta.get("weights", []), 1]
        terms = [x for x in terms if len(x) < 2]
    else:  # the pair with a partner that is not a participant (or me twice)
        if terms and len(terms[-1]) == 2:
            terms[-1] = [me, m.rng.choice([c for c in range(N_CLIENTS + 1)
                                           if c not in parts] or [me])]
    meta["terms"], meta["participants"] = terms, parts
    return meta


def _in_flight_swap(how: str, sub: float, replay: bytes, hostile: Hostile, pools: Pools,
                    raw: bool = False) -> tuple[Callable[[bytes], bytes], list[bool]]:
    """The in-flight substitution of one message (``how``: outsider, meta, blob, forged or
    replay; ``raw`` for unframed kinds) and the list that records, per substitution,
    whether the new message has the old one's content."""
    same: list[bool] = []

    def swap(old: bytes) -> bytes:
        if how == "replay":
            new = replay
        else:
            mm = Mutator(random.Random(sub), pools)  # noqa: S311 - fuzzing
            if raw:
                new = mm.mutate_many(old) if how == "outsider" else mm.rng.choice(
                    hostile.foreign + [old[:-8], old * 2])
            else:
                new = {"outsider": hostile.outsider, "meta": hostile.meta,
                       "blob": hostile.blob, "forged": _forge_layout}[how](mm, old)
        same.append(_same_message(new, old))
        return new
    return swap, same


def _forge_layout(m: Mutator, data: bytes) -> bytes:
    """P's derived request with its metadata rewritten as an in-flight forger could,
    blobs intact: the pair's partner changed to another participant, the participants
    (with their weights and singletons) consistently reordered, the weights changed, or
    the bounds raised. Accepted, none of these may change the derived table."""
    msg = wire.decode(data)
    meta = dict(msg.meta)
    parts, weights = list(meta["participants"]), list(meta["weights"])
    terms = [list(x) for x in meta["terms"]]
    pair = terms[-1] if len(terms[-1]) == 2 else None
    op = m.rng.randrange(4)
    if op == 0 and pair is not None:
        pair[1] = m.rng.choice([c for c in parts if c not in pair] or [pair[1]])
    elif op <= 1:
        perm = list(range(len(parts)))
        while perm == sorted(perm) and len(perm) > 1:
            m.rng.shuffle(perm)
        parts, weights = [parts[j] for j in perm], [weights[j] for j in perm]
        me = pair[0] if pair is not None else None
        terms = [[]] + [[c] for c in parts if c != me] + ([pair] if pair is not None else [])
    elif op == 2:
        weights = [v + m.rng.randrange(1, 4) for v in weights]
    else:
        meta["bounds"] = [b * 2 for b in meta["bounds"]]
    meta.update(participants=parts, weights=weights, terms=terms)
    return _encode_loose(msg.kind, meta, list(msg.blobs))


def derived_targets(w: ShapleyWorld, hostile: Hostile) -> list[Target]:
    """``SecSVClient.decrypt_all`` and every message of a derived evaluation in flight."""
    reqs = w.d_requests
    run = w.d_run

    def decrypt(m: Mutator) -> Case:
        r = m.rng.choice(reqs)
        client, data = r.before, r.request
        op = m.rng.random()
        if op < 0.55:
            data, name = hostile.any(m, r.request, [x.request for x in reqs if x is not r])
        elif op < 0.7:  # P's forgeries of terms, participants, owners
            meta = _forge_terms(m, dict(wire.decode(r.request).meta), r.me)
            data, name = _encode_loose("secsv/decrypt-all", meta,
                                       list(wire.decode(r.request).blobs)), "forged"
        elif op < 0.85:  # the honest request again, to the client that answered it
            client, name = r.after, "replayed"
            if m.rng.random() < 0.5:  # with a fresh id (P re-issues it)
                meta = dict(wire.decode(r.request).meta)
                meta["rid"] = m.rng.randbytes(16).hex()
                data, name = _encode_loose("secsv/decrypt-all", meta,
                                           list(wire.decode(r.request).blobs)), "re-issued"
        else:  # an honest request to another client (a batch owner or a participant)
            me = m.rng.choice([c for c in range(N_CLIENTS) if c != r.me])
            client, name = clone_sclient(run.clients[me]), "misrouted"
        return Case((client, data), name, _derived_oracle(client, data))

    dec = Target("SecSVClient.decrypt_all",
                 lambda x: clone_sclient(x[0]).decrypt_all(x[1]),
                 [("any", 1, decrypt)], allowed=(ProtocolError, sh.FixedPointOverflow),
                 weight=1.5)

    log, table = w.d_log, w.d_table
    kinds = sorted({k for _, _, k, _ in log.log})

    def call(x: tuple[int, str, int, str, float, bytes]) -> Any:
        mask, kind, k, how, sub, replay = x
        r = clone_srun(run)
        swap, same = _in_flight_swap(how, sub, replay, hostile, w.pools)
        recorder_of(r).swap = (kind, k, swap)
        out = r.evaluate(0, mask, None)
        return out, r.P._derived_correct.get(0), same  # noqa: SLF001

    def produce(m: Mutator) -> Case:
        mask = m.rng.randrange(len(table))
        kind = m.rng.choice(kinds)
        same = [p for _, _, k2, p in log.log if k2 == kind]
        k = m.rng.randrange(len(same))
        r = m.rng.random()
        how = "outsider" if r < 0.3 else "meta" if r < 0.6 else "blob" if r < 0.85 \
            else "replay"
        if kind == "decrypt" and m.rng.random() < 0.3:
            how = "forged"
        replay = m.rng.choice(same)
        oracle = _derived_in_flight_oracle(table, mask, how in ("meta", "replay", "forged"))
        return Case((mask, kind, k, how, m.rng.random(), replay), f"{kind}:{how}", oracle)

    flight = Target("SecSV.evaluate[derived,in-flight]", call, [("any", 1, produce)],
                    allowed=(ProtocolError, sh.FixedPointOverflow), weight=1.5)

    shares = w.d_at_share

    def diff_call(x: tuple[DShare, bytes]) -> Any:
        return clone_sserver(x[0].run.A).label_diff_all(x[1], x[0].mask_p)

    def diff(m: Mutator) -> Case:
        sh_ = m.rng.choice(shares)
        data, name = hostile.any(m, sh_.to_a, [sh_.to_p] + [o.to_a for o in shares
                                                            if o is not sh_])
        strict = name == "meta" or _same_message(data, sh_.to_a)
        return Case((sh_, data), name, _label_diff_all_oracle(sh_, strict))

    a_diff = Target("SecSVServer.label_diff_all", diff_call, [("any", 1, diff)], weight=0.7)

    def compare_call(x: tuple[DShare, bytes, bytes]) -> Any:
        sh_, to_p, diff_a = x
        srv = clone_sserver(sh_.run.P)
        srv.label_mask_all(to_p)
        return srv.compare_all(diff_a)

    def compare(m: Mutator) -> Case:
        sh_ = m.rng.choice(shares)
        to_p, diff_a = sh_.to_p, sh_.diff_a
        others = [o for o in shares if o is not sh_]
        if m.rng.random() < 0.5:
            to_p, name = hostile.any(m, to_p, [sh_.to_a] + [o.to_p for o in others])
            strict = name == "meta" or _same_message(to_p, sh_.to_p)
        else:
            diff_a, name = hostile.any(m, diff_a, [o.diff_a for o in others])
            strict = name == "meta" or _same_message(diff_a, sh_.diff_a)
        return Case((sh_, to_p, diff_a), name, _compare_all_oracle(sh_, strict))

    p_compare = Target("SecSVServer.compare_all", compare_call, [("any", 1, compare)],
                       weight=0.7)
    return [dec, flight, a_diff, p_compare]


def _from_a(meta: dict[str, Any]) -> dict[str, Any]:
    """P's output-request metadata as A's copy carries it (its context names A as the
    sender), where the context is well formed."""
    try:
        ctx = PContext.from_meta(meta.get(CTX))
    except ProtocolError:
        return dict(meta)
    return {**meta, CTX: ctx.at(sender="A").to_meta()}


def _batches_oracle(get: Callable[[Any], list[np.ndarray]], n: int
                    ) -> Callable[[Any], str | None]:
    """A's batches (SecSV) or batch order (SecretSV): every sample exactly once."""
    def check(server: Any) -> str | None:
        got = get(server)
        every = np.concatenate(got) if got else np.zeros(0, dtype=np.int64)
        if sorted(every.tolist()) != list(range(n)):
            return f"accepted batches holding samples {sorted(every.tolist())[:10]}..."
        return None
    return check


def _unjoined(role: Any) -> Any:
    c = copy.copy(role)
    c._binding = None  # noqa: SLF001
    return c


def _session_of(role: Any) -> str:
    b = role._binding  # noqa: SLF001
    return "" if b is None else b.session


def session_targets(w: ShapleyWorld, hostile: Hostile) -> list[Target]:
    """SecretSV's session set-up: P's ``gather`` of every role's hello, and every role's
    ``join`` of P's session message (clients, P, A, dealer; each must hold its own
    nonce in the session it takes)."""
    trun = w.t_run
    roles = [*trun.clients, trun.P, trun.A, trun.dealer]
    offer = w.t_offer
    nonces = list(wire.decode(offer).blobs)

    def join_call(x: tuple[int, bytes]) -> Any:
        role = _unjoined(roles[x[0]])
        role.join(x[1])
        return role

    def join_oracle(k: int) -> Callable[[Any], str | None]:
        def check(role: Any) -> str | None:
            if roles[k]._nonce not in nonces and _session_of(role):  # noqa: SLF001
                return "joined a session without its nonce"
            return None
        return check

    def joined(k: int, data: bytes) -> Callable[[Any], str | None]:
        def check(role: Any) -> str | None:
            try:
                got = list(wire.decode(data).blobs)
            except ProtocolError:
                return "joined a session from undecodable bytes"
            if roles[k]._nonce not in got:  # noqa: SLF001
                return "joined a session without its nonce"
            if _session_of(role) != session_from_nonces("secretsv", got):
                return "joined a session that is not the hash of the nonces it was sent"
            return join_oracle(k)(role)
        return check

    def join(m: Mutator) -> Case:
        k = m.rng.randrange(len(roles))
        op = m.rng.random()
        if op < 0.7:
            data, name = hostile.any(m, offer, w.t_hellos)
        else:  # a well-formed list: a nonce replaced, dropped, added or duplicated
            ns = list(nonces)
            j = m.rng.randrange(len(ns))
            r = m.rng.randrange(4)
            if r == 0:
                ns[j] = m.rng.randbytes(16)
            elif r == 1:
                del ns[j]
            elif r == 2:
                ns.append(m.rng.randbytes(16))
            else:
                ns.append(ns[j])
            data, name = wire.encode("secretsv/session", {}, sorted(ns)), "nonces"
        return Case((k, data), name, joined(k, data))

    def gather_call(hellos: list[bytes]) -> Any:
        return wire.decode(trun.P.gather(hellos), expect="secretsv/session")

    def gather_oracle(out: Any) -> str | None:
        got = list(out.blobs)
        if trun.P._nonce not in got or len(set(got)) != len(got) \
                or len(got) != N_CLIENTS + 3 or any(len(v) != 16 for v in got):
            return f"a session of {len(got)} nonces gathered"
        return None

    def gather(m: Mutator) -> Case:
        msgs = list(w.t_hellos)
        if m.rng.random() < 0.75:
            k = m.rng.randrange(len(msgs))
            msgs[k], name = hostile.any(m, msgs[k], msgs[:k] + msgs[k + 1:] + [offer])
        else:
            msgs, name = m.message_list(msgs), "list"
        return Case(msgs, name, gather_oracle)

    return [Target("SecretSV.join", join_call, [("any", 1, join)], weight=0.7),
            Target("SecretSVServer.gather", gather_call, [("any", 1, gather)], weight=0.5)]


# ---------------------------------------------------------------------- targets
SHAPLEY_TARGETS = (
    "HESVServer.receive_data", "HESVServer.receive_model", "HESVServer.step",
    "HESVClient.decrypt_layer", "HESVClient.count", "HESVClient.handle",
    "SecSVClient.receive_plan", "SecSVServer.receive_plan[A]", "SecSVClient.decrypt_layer",
    "secsv._pick_fixed_point",
    "SecSVServer.receive_data", "SecSVServer.receive_data[A]", "SecSVServer.receive_model",
    "SecSVServer.receive_model[A]", "SecSVServer.receive_batches", "SecSV.evaluate[in-flight]",
    "SecSVClient.decrypt_all", "SecSV.evaluate[derived,in-flight]",
    "SecSVServer.label_diff_all", "SecSVServer.compare_all",
    "SecretSVServer.receive_data", "SecretSVServer.receive_data[A]",
    "SecretSVServer.receive_model", "SecretSVServer.receive_model[A]",
    "SecretSVServer.receive_order", "SecretSVServer.gather", "SecretSV.join",
    "SecretSVServer.open_share", "SecretSVServer.beaver", "SecretSVClient.reconstruct",
    "SecretSV.evaluate[in-flight]", "RecordingFedAvg.aggregate_train",
)
FLOWER_TARGETS = {"RecordingFedAvg.aggregate_train"}  # left out without Flower installed


def make_shapley_targets(w: ShapleyWorld) -> list[Target]:
    """One :class:`Target` per entry point where a Shapley role reads another's bytes."""
    h = Hostile(w.h_foreign_ct)
    hs = Hostile(w.s_foreign_ct)
    ht = Hostile([b"", b"\x00" * 8, b"\x00" * (1 << 20)])
    n_layers = len(w.record.spec.layers)
    n_samples = sum(len(y) for _, y in w.sets)
    ctx = w.h_server_ready._ctx  # noqa: SLF001
    targets: list[Target] = []

    # -- HESV server ---------------------------------------------------------------------
    def h_data_call(x: tuple[int, bytes]) -> Any:
        server = clone_hserver(w.h_server_empty)
        server.receive_data(*x)
        return server

    def h_data(m: Mutator) -> Case:
        i = m.rng.randrange(N_CLIENTS)
        data, name = h.any(m, w.h_data[i], w.h_data[:i] + w.h_data[i + 1:])
        return Case((i, data), name, _stored_scales_oracle(ctx, i))

    targets.append(Target("HESVServer.receive_data", h_data_call, [("any", 1, h_data)],
                          weight=1.0))

    def h_model_call(x: tuple[int, bytes]) -> Any:
        server = clone_hserver(w.h_server_ready)
        server._models = {}  # noqa: SLF001
        server.receive_model(*x)
        return server

    def h_model(m: Mutator) -> Case:
        k = m.rng.randrange(len(w.h_models))
        sender, valid = w.h_models[k]
        others = [b for j, (_, b) in enumerate(w.h_models) if j != k]
        data, name = h.any(m, valid, others)
        if m.rng.random() < 0.1:  # the right bytes from the wrong client
            sender, name = m.rng.randrange(N_CLIENTS), "wrong-sender"
        return Case((sender, data), name, _hesv_model_oracle(ctx, sender, set()))

    targets.append(Target("HESVServer.receive_model", h_model_call, [("any", 1, h_model)],
                          weight=1.0))

    def h_step_call(x: tuple[int, int, bytes]) -> Any:
        k, sender, reply = x
        server = clone_hserver(w.h_steps[k].server)
        server.step(sender, reply)
        return server

    def h_step(m: Mutator) -> Case:
        k = m.rng.randrange(len(w.h_steps))
        st = w.h_steps[k]
        sender = st.sender
        data, name = h.any(m, st.reply, [s.reply for s in w.h_steps if s.reply != st.reply])
        if m.rng.random() < 0.1:
            sender, data, name = m.rng.randrange(N_CLIENTS), st.reply, "wrong-sender"
        return Case((k, sender, data), name, _hesv_step_oracle(st.server, n_samples))

    targets.append(Target("HESVServer.step", h_step_call, [("any", 1, h_step)],
                          allowed=(ProtocolError,), weight=2.0))

    # -- HESV clients --------------------------------------------------------------------
    layer_reqs = [r for r in w.h_requests if r.kind == "hesv/layer"]
    diff_reqs = [r for r in w.h_requests if r.kind == "hesv/diff"]

    def h_decrypt(m: Mutator) -> Case:
        r = m.rng.choice(layer_reqs)
        client = r.client
        data, name = h.any(m, r.request, [x.request for x in layer_reqs])
        if m.rng.random() < 0.15:  # an honest request to another client
            client, data, name = m.rng.choice(w.h_clients + [x.client for x in layer_reqs]), \
                r.request, "misrouted"
        return Case((client, data), name, _hesv_decrypt_oracle(client, data, n_layers))

    targets.append(Target("HESVClient.decrypt_layer",
                          lambda x: clone_hclient(x[0]).decrypt_layer(x[1]),
                          [("any", 1, h_decrypt)], weight=1.5))

    def h_count(m: Mutator) -> Case:
        r = m.rng.choice(diff_reqs)
        client = r.client
        data, name = h.any(m, r.request, [x.request for x in diff_reqs])
        if m.rng.random() < 0.15:
            client, data, name = m.rng.choice(w.h_clients + [x.client for x in w.h_requests]), \
                r.request, "misrouted"
        return Case((client, data), name, _hesv_count_oracle(client, data, n_layers))

    targets.append(Target("HESVClient.count", lambda x: clone_hclient(x[0]).count(x[1]),
                          [("any", 1, h_count)], weight=1.0))

    targets.append(Target("HESVClient.handle", lambda x: clone_hclient(x[0]).handle(x[1]), [
        ("foreign", 1, lambda m: (m.rng.choice(w.h_clients), m.rng.choice(w.pools.messages))),
        ("outsider", 2, lambda m: (lambda r: (r.client, m.mutate_many(r.request)))(
            m.rng.choice(w.h_requests))),
    ], weight=0.5))

    # -- SecSV clients ---------------------------------------------------------------------
    run = w.s_run

    def s_plan_call(x: tuple[int, bytes]) -> Any:
        c = copy.copy(w.s_clients_noplan[x[0]])
        c.receive_plan(x[1])
        return c

    targets.append(Target("SecSVClient.receive_plan", s_plan_call, [
        ("any", 1, lambda m: (lambda d: Case((m.rng.randrange(N_CLIENTS), d[0]), d[1]))(
            hs.any(m, w.s_plan, [w.s_bounds[0]]))),
    ], weight=0.7))

    def a_plan_call(data: bytes) -> Any:
        server = clone_sserver(w.s_server_a_empty)
        server._plan = None  # noqa: SLF001
        server.receive_plan(data)
        return server

    targets.append(Target("SecSVServer.receive_plan[A]", a_plan_call, [
        ("any", 1, lambda m: (lambda d: Case(d[0], d[1]))(
            hs.any(m, w.s_plan, [w.s_bounds[0], w.s_batches]))),
    ], weight=0.5))

    s_reqs = [(int(r.split(":")[1]), p) for log, _ in w.s_eval.values()
              for _, r, p in log.of("decrypt")]

    def s_decrypt(m: Mutator) -> Case:
        me, valid = m.rng.choice(s_reqs)
        data, name = hs.any(m, valid, [p for _, p in s_reqs])
        if m.rng.random() < 0.15:
            me, data, name = m.rng.randrange(N_CLIENTS), valid, "misrouted"
        return Case((me, data), name, _decryptor_oracle(me, _meta_of(data), n_layers))

    targets.append(Target("SecSVClient.decrypt_layer",
                          lambda x: clone_sclient(run.clients[x[0]]).decrypt_layer(x[1]),
                          [("any", 1, s_decrypt)],
                          allowed=(ProtocolError, sh.FixedPointOverflow), weight=1.5))

    def s_fixed(m: Mutator) -> Case:
        msgs = list(w.s_bounds)
        r = m.rng.random()
        if r < 0.8:
            k = m.rng.randrange(len(msgs))
            msgs[k], name = hs.any(m, msgs[k], msgs[:k] + msgs[k + 1:])
        else:
            msgs, name = m.message_list(msgs), "list"
        return Case(msgs, name)

    s_cfg = sv.SecSVConfig().check()
    targets.append(Target("secsv._pick_fixed_point", lambda msgs: sv.pick_fixed_point(
        msgs, sv.round_infos(w.record, s_cfg), s_cfg, run.P._bfv.t,  # noqa: SLF001
        w.record.spec, binding=run.P._b), [("any", 1, s_fixed)],  # noqa: SLF001
        allowed=(ProtocolError, sh.FixedPointOverflow), weight=0.7))

    # -- SecSV servers ---------------------------------------------------------------------
    def s_data_call(empty: Any) -> Callable[[list[bytes]], Any]:
        def call(msgs: list[bytes]) -> Any:
            server = clone_sserver(empty)
            server.receive_data(msgs)
            return server
        return call

    def s_data(valid: list[bytes], others: list[bytes]) -> Callable[[Mutator], Case]:
        def produce(m: Mutator) -> Case:
            msgs = list(valid)
            r = m.rng.random()
            if r < 0.75:
                k = m.rng.randrange(len(msgs))
                msgs[k], name = hs.any(m, msgs[k], msgs[:k] + msgs[k + 1:] + others)
            else:
                msgs, name = m.message_list(msgs), "list"
            return Case(msgs, name, _all_clients_oracle(N_CLIENTS, n_samples))
        return produce

    targets.append(Target("SecSVServer.receive_data", s_data_call(w.s_server_p_empty),
                          [("any", 1, s_data(w.s_data_p, w.s_data_a))], weight=1.0))
    targets.append(Target("SecSVServer.receive_data[A]", s_data_call(w.s_server_a_empty),
                          [("any", 1, s_data(w.s_data_a, w.s_data_p))], weight=0.7))

    def s_owner(data: bytes) -> Any:
        return (_meta_of(data) or {}).get("owner")

    def s_model_call(base: Any) -> Callable[[bytes], Any]:
        def call(data: bytes) -> Any:
            server = clone_sserver(base)
            if hasattr(server, "_models"):
                server._models = {}  # noqa: SLF001
            else:
                server.models = {}
            server.receive_model(data)
            return server
        return call

    def s_model(m: Mutator) -> Case:
        k = m.rng.randrange(len(w.s_models))
        data, name = hs.any(m, w.s_models[k], w.s_models[:k] + w.s_models[k + 1:])
        return Case(data, name, _model_key_oracle(set(), s_owner, data))

    targets.append(Target("SecSVServer.receive_model", s_model_call(run.P),
                          [("any", 1, s_model)], weight=0.7))
    targets.append(Target("SecSVServer.receive_model[A]", s_model_call(run.A),
                          [("any", 1, s_model)], weight=0.5))

    def s_batches_call(data: bytes) -> Any:
        server = clone_sserver(run.A)
        server._batches = []  # noqa: SLF001
        server.receive_batches(data)
        return server

    def s_batches(m: Mutator) -> Case:
        data, name = hs.any(m, w.s_batches, [w.s_plan, w.t_order])
        return Case(data, name, _batches_oracle(lambda a: a._batches, n_samples))  # noqa: SLF001

    targets.append(Target("SecSVServer.receive_batches", s_batches_call,
                          [("any", 1, s_batches)], weight=0.5))

    # -- in flight: every message of one SecSV evaluation --------------------------------
    def in_flight(evals: dict[int, tuple[Recorder, np.ndarray]], hostile: Hostile,
                  clone: Callable[[Any], Any], base: Any, raw_kinds: set[str]
                  ) -> tuple[Callable[[Any], Any], Callable[[Mutator], Case]]:
        """The ``k``-th message of a kind, mutated *in flight* (the bytes of this very
        evaluation: shares and masks are fresh in every run), or replaced by the one of
        the honest corpus run (a replay)."""
        def call(x: tuple[int, str, int, str, float, bytes]) -> Any:
            mask, kind, k, how, sub, replay = x
            r = clone(base)
            swap, same = _in_flight_swap(how, sub, replay, hostile, w.pools,
                                         raw=kind in raw_kinds)
            recorder_of(r).swap = (kind, k, swap)
            return r.evaluate(0, mask, None), same

        def produce(m: Mutator) -> Case:
            mask = m.rng.choice(MASKS)
            log, honest = evals[mask]
            kinds = sorted({k for _, _, k, _ in log.log})
            kind = m.rng.choice(kinds)
            same = [p for _, _, k2, p in log.log if k2 == kind]
            k = m.rng.randrange(len(same))
            r = m.rng.random()
            if kind in raw_kinds:
                how = "outsider" if r < 0.6 else "blob" if r < 0.8 else "replay"
            else:
                how = "outsider" if r < 0.35 else "meta" if r < 0.6 else "blob" \
                    if r < 0.85 else "replay"
            replay = m.rng.choice(same)
            oracle = _in_flight_oracle(honest, n_samples, kind == "share" and how == "meta")
            return Case((mask, kind, k, how, m.rng.random(), replay), f"{kind}:{how}", oracle)
        return call, produce

    call, produce = in_flight(w.s_eval, hs, clone_srun, run, set())  # every kind framed
    targets.append(Target("SecSV.evaluate[in-flight]", call, [("any", 1, produce)],
                          allowed=(ProtocolError, sh.FixedPointOverflow), weight=1.5))

    # -- SecSV, derived decryption ----------------------------------------------------------
    targets += derived_targets(w, hs)

    # -- SecretSV servers ------------------------------------------------------------------
    trun = w.t_run

    def t_data_call(empty: Any) -> Callable[[list[bytes]], Any]:
        def call(msgs: list[bytes]) -> Any:
            server = clone_tserver(empty)
            server.receive_data(msgs)
            return server
        return call

    def t_data(valid: list[bytes], others: list[bytes]) -> Callable[[Mutator], Case]:
        def produce(m: Mutator) -> Case:
            msgs = list(valid)
            if m.rng.random() < 0.75:
                k = m.rng.randrange(len(msgs))
                msgs[k], name = ht.any(m, msgs[k], msgs[:k] + msgs[k + 1:] + others)
            else:
                msgs, name = m.message_list(msgs), "list"
            return Case(msgs, name, _all_clients_oracle(N_CLIENTS, n_samples))
        return produce

    targets.append(Target("SecretSVServer.receive_data", t_data_call(w.t_server_empty),
                          [("any", 1, t_data(w.t_data_p, w.t_data_a))], weight=1.0))
    targets.append(Target("SecretSVServer.receive_data[A]", t_data_call(w.t_server_a_empty),
                          [("any", 1, t_data(w.t_data_a, w.t_data_p))], weight=0.7))

    def t_model_call(base: Any) -> Callable[[bytes], Any]:
        def call(data: bytes) -> Any:
            server = clone_tserver(base)
            server._models, server._bounds = {}, {}  # noqa: SLF001
            server.receive_model(data)
            return server
        return call

    def t_model(valid: list[bytes]) -> Callable[[Mutator], Case]:
        def produce(m: Mutator) -> Case:
            k = m.rng.randrange(len(valid))
            data, name = ht.any(m, valid[k], valid[:k] + valid[k + 1:])
            return Case(data, name, _tmodel_oracle(set()))
        return produce

    targets.append(Target("SecretSVServer.receive_model", t_model_call(trun.P),
                          [("any", 1, t_model(w.t_models_p))], weight=0.7))
    targets.append(Target("SecretSVServer.receive_model[A]", t_model_call(trun.A),
                          [("any", 1, t_model(w.t_models_a))], weight=0.5))

    def t_order_call(data: bytes) -> Any:
        server = clone_tserver(trun.A)
        server._order = []  # noqa: SLF001
        server.receive_order(data)
        return server

    def t_order(m: Mutator) -> Case:
        data, name = ht.any(m, w.t_order, [w.s_batches, w.t_offer])
        return Case(data, name, _batches_oracle(lambda a: a._order, n_samples))  # noqa: SLF001

    targets.append(Target("SecretSVServer.receive_order", t_order_call,
                          [("any", 1, t_order)], weight=0.5))
    targets += session_targets(w, ht)

    tp, ta = w.t_open[2], w.t_open[3]
    triples = [p for log, _ in w.t_eval.values() for _, _, p in log.of("triple")]
    targets.append(Target("SecretSVServer.open_share",
                          lambda data: clone_tserver(w.t_open[0]).open_share(data), [
                              ("any", 1, lambda m: (lambda d: Case(d[0], d[1]))(
                                  ht.any(m, m.rng.choice((tp, ta)), triples))),
                          ], weight=0.7))
    p_open, a_open = clone_tserver(w.t_open[0]), clone_tserver(w.t_open[1])
    p_open.open_share(tp)
    open_a = a_open.open_share(ta)
    opens = [p for log, _ in w.t_eval.values() for _, _, p in log.of("open")]
    targets.append(Target("SecretSVServer.beaver",
                          lambda data: clone_tserver(p_open).beaver(data), [
                              ("any", 1, lambda m: (lambda d: Case(d[0], d[1]))(
                                  ht.any(m, open_a, opens))),
                          ], weight=0.7))

    # -- SecretSV client -------------------------------------------------------------------
    outputs = []
    for log, _ in w.t_eval.values():
        ps, as_ = log.of("output", sender="P"), log.of("output", sender="A")
        for (_, r, p), (_, r2, a) in zip(ps, as_, strict=True):
            assert r == r2
            outputs.append((int(r.split(":")[1]), p, a))

    def t_reconstruct(m: Mutator) -> Case:
        me, p, a = m.rng.choice(outputs)
        which = m.rng.random()
        others = [o[1] for o in outputs]
        if which < 0.4:
            p, name = ht.any(m, p, others)
        elif which < 0.8:
            a, name = ht.any(m, a, others)
        elif which < 0.9:  # both servers agree on hostile metadata
            p, name = ht.meta(m, p), "meta-both"
            msg = wire.decode(a)
            pm = _meta_of(p)
            am = dict(msg.meta) if pm is None else _from_a(pm)
            a = _encode_loose(msg.kind, am, list(msg.blobs))
        else:
            me, name = m.rng.randrange(N_CLIENTS), "misrouted"
        return Case((me, p, a), name, _decryptor_oracle(me, _meta_of(p), n_layers))

    targets.append(Target("SecretSVClient.reconstruct",
                          lambda x: clone_tclient(trun.clients[x[0]]).reconstruct(
                              x[1], x[2]),
                          [("any", 1, t_reconstruct)], weight=1.5))

    call, produce = in_flight(w.t_eval, ht, clone_trun, trun, set())  # every kind framed
    targets.append(Target("SecretSV.evaluate[in-flight]", call, [("any", 1, produce)],
                          allowed=(ProtocolError, sh.FixedPointOverflow), weight=1.5))
    flower = flower_target(w)
    if flower is not None:
        targets.append(flower)
    return targets


# ---------------------------------------------------------------------- metadata cases
MetaBuild = Callable[[dict[str, Any]], Case]


def shapley_meta_cases(w: ShapleyWorld) -> dict[str, tuple[str, dict[str, Any], MetaBuild]]:
    """Per case: the target it runs on, the metadata of one message that target reads
    (from the honest run), and a function that rebuilds the target's input around other
    metadata (blobs intact) as a :class:`Case` with the oracle success must pass."""
    n_layers = len(w.record.spec.layers)
    n_samples = sum(len(y) for _, y in w.sets)
    ctx = w.h_server_ready._ctx  # noqa: SLF001

    def meta(data: bytes) -> dict[str, Any]:
        return dict(wire.decode(data).meta)

    def rebuild(data: bytes, m: dict[str, Any]) -> bytes:
        msg = wire.decode(data)
        return _encode_loose(msg.kind, m, list(msg.blobs))

    step = next(s for s in w.h_steps if s.kind == "hesv/activated")
    pstep = next(s for s in w.h_steps if s.kind == "hesv/predicted")
    cstep = next(s for s in w.h_steps if s.kind == "hesv/count")
    layer_req = next(r for r in w.h_requests if r.kind == "hesv/layer")
    diff_req = next(r for r in w.h_requests if r.kind == "hesv/diff")
    s_log = w.s_eval[MASKS[0]][0]
    s_me, s_req = next((int(r.split(":")[1]), p) for _, r, p in s_log.of("decrypt"))
    t_log = w.t_eval[MASKS[0]][0]
    (_, t_to, t_p), (_, _, t_a) = t_log.of("output", sender="P")[0], \
        t_log.of("output", sender="A")[0]
    t_me = int(t_to.split(":")[1])
    tp = w.t_open[2]
    sm = w.s_models[1]
    hsender, hmodel = w.h_models[1]

    def hstep(st: HStep) -> tuple[str, dict[str, Any], MetaBuild]:
        k = w.h_steps.index(st)
        return ("HESVServer.step", meta(st.reply), lambda m: Case(
            (k, st.sender, rebuild(st.reply, m)), "sweep",
            _hesv_step_oracle(st.server, n_samples)))

    def hdecrypt(m: dict[str, Any]) -> Case:
        data = rebuild(layer_req.request, m)
        return Case((layer_req.client, data), "sweep",
                    _hesv_decrypt_oracle(layer_req.client, data, n_layers))

    def hcount(m: dict[str, Any]) -> Case:
        data = rebuild(diff_req.request, m)
        return Case((diff_req.client, data), "sweep",
                    _hesv_count_oracle(diff_req.client, data, n_layers))

    def sdecrypt(m: dict[str, Any]) -> Case:
        return Case((s_me, rebuild(s_req, m)), "sweep", _decryptor_oracle(s_me, m, n_layers))

    def treconstruct(m: dict[str, Any]) -> Case:
        return Case((t_me, rebuild(t_p, m), rebuild(t_a, _from_a(m))), "sweep",
                    _decryptor_oracle(t_me, m, n_layers))

    def sderived(r: DRequest) -> tuple[str, dict[str, Any], MetaBuild]:
        def build(m: dict[str, Any]) -> Case:
            data = rebuild(r.request, m)
            return Case((r.before, data), "sweep", _derived_oracle(r.before, data))
        return "SecSVClient.decrypt_all", meta(r.request), build

    dsh = w.d_at_share[0]
    dsh_m = meta(dsh.to_a)

    def sdiff(m: dict[str, Any]) -> Case:
        data = rebuild(dsh.to_a, m)
        return Case((dsh, data), "sweep", _label_diff_all_oracle(dsh, True))

    def scompare(which: str) -> tuple[str, dict[str, Any], MetaBuild]:
        def build(m: dict[str, Any]) -> Case:
            to_p = rebuild(dsh.to_p, m) if which == "P" else dsh.to_p
            diff_a = rebuild(dsh.diff_a, m) if which == "A" else dsh.diff_a
            return Case((dsh, to_p, diff_a), "sweep", _compare_all_oracle(dsh, True))
        return "SecSVServer.compare_all", meta(dsh.to_p if which == "P" else dsh.diff_a), \
            build

    pair = next(r for r in w.d_requests if r.me in DERIVED_PARTS)
    no_pair = next(r for r in w.d_requests if r.me not in DERIVED_PARTS)

    def smodel(m: dict[str, Any]) -> Case:
        data = rebuild(sm, m)
        return Case(data, "sweep", _model_key_oracle(set(), lambda d: (
            _meta_of(d) or {}).get("owner"), data))

    return {
        "HESVServer.receive_data": ("HESVServer.receive_data", meta(w.h_data[1]), lambda m: Case(
            (1, rebuild(w.h_data[1], m)), "sweep", _stored_scales_oracle(ctx, 1))),
        "HESVServer.receive_model": ("HESVServer.receive_model", meta(hmodel), lambda m: Case(
            (hsender, rebuild(hmodel, m)), "sweep", _hesv_model_oracle(ctx, hsender, set()))),
        "HESVServer.step[activated]": hstep(step),
        "HESVServer.step[predicted]": hstep(pstep),
        "HESVServer.step[count]": hstep(cstep),
        "HESVClient.decrypt_layer": ("HESVClient.decrypt_layer", meta(layer_req.request),
                                     hdecrypt),
        "HESVClient.count": ("HESVClient.count", meta(diff_req.request), hcount),
        "SecSVClient.receive_plan": ("SecSVClient.receive_plan", meta(w.s_plan),
                                     lambda m: Case((0, rebuild(w.s_plan, m)), "sweep")),
        "SecSVClient.decrypt_layer": ("SecSVClient.decrypt_layer", meta(s_req), sdecrypt),
        "SecSVClient.decrypt_all": sderived(pair),
        "SecSVClient.decrypt_all[no pair]": sderived(no_pair),
        "SecSVServer.label_diff_all": ("SecSVServer.label_diff_all", dsh_m, sdiff),
        "SecSVServer.compare_all[labels]": scompare("P"),
        "SecSVServer.compare_all[label-diff]": scompare("A"),
        "secsv._pick_fixed_point": ("secsv._pick_fixed_point", meta(w.s_bounds[0]),
                                    lambda m: Case([rebuild(w.s_bounds[0], m),
                                                    *w.s_bounds[1:]], "sweep")),
        "SecSVServer.receive_data": ("SecSVServer.receive_data", meta(w.s_data_p[0]),
                                     lambda m: Case([rebuild(w.s_data_p[0], m),
                                                     *w.s_data_p[1:]], "sweep",
                                                    _all_clients_oracle(N_CLIENTS, n_samples))),
        "SecSVServer.receive_model": ("SecSVServer.receive_model", meta(sm), smodel),
        "SecretSVServer.receive_data": ("SecretSVServer.receive_data", meta(w.t_data_p[0]),
                                        lambda m: Case([rebuild(w.t_data_p[0], m),
                                                        *w.t_data_p[1:]], "sweep",
                                                       _all_clients_oracle(N_CLIENTS,
                                                                           n_samples))),
        "SecretSVServer.receive_model": ("SecretSVServer.receive_model", meta(w.t_models_p[1]),
                                         lambda m: Case(rebuild(w.t_models_p[1], m), "sweep",
                                                        _tmodel_oracle(set()))),
        "SecretSVServer.open_share": ("SecretSVServer.open_share", meta(tp),
                                      lambda m: Case(rebuild(tp, m), "sweep")),
        "SecretSVClient.reconstruct": ("SecretSVClient.reconstruct", meta(t_p), treconstruct),
        "SecSVServer.receive_batches": ("SecSVServer.receive_batches", meta(w.s_batches),
                                        lambda m: Case(rebuild(w.s_batches, m), "sweep")),
        "SecretSVServer.receive_order": ("SecretSVServer.receive_order", meta(w.t_order),
                                         lambda m: Case(rebuild(w.t_order, m), "sweep")),
        "SecretSVServer.gather": ("SecretSVServer.gather", meta(w.t_hellos[0]),
                                  lambda m: Case([rebuild(w.t_hellos[0], m),
                                                  *w.t_hellos[1:]], "sweep")),
    }


# ---------------------------------------------------------------------- Flower runtime
def flower_target(w: ShapleyWorld) -> Target | None:
    """``RecordingFedAvg.aggregate_train``: train replies with hostile client ids, weights
    and arrays (None without Flower installed)."""
    import contextlib
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from flwr.app import (
                Array,
                ArrayRecord,
                ConfigRecord,
                Message,
                MetricRecord,
                RecordDict,
            )
            from flwr.supercore.task_identity import TaskIdentity

            from fedsec.runtime import flower_shapley as fs
    except ImportError:  # pragma: no cover - fedsec[flower] not installed
        return None

    spec = w.record.spec
    params = [np.asarray(p) for p in w.record.rounds[0].local_params[0]]

    @contextlib.contextmanager
    def identity() -> Any:
        saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)  # noqa: SLF001
        TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
        try:
            yield
        finally:
            TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved  # noqa: SLF001

    cids: tuple[Any, ...] = (0, 1, 3, 4, -1, 2**63 - 1, 1.5, float("inf"), float("nan"), "1",
                             b"1", True, [1], None)
    weights: tuple[Any, ...] = (3, 1, 0, -1, 0.5, float("nan"), float("inf"), -float("inf"),
                                1e308, 2**62, "3", True, None)

    def arrays(m: Mutator) -> list[Any]:
        op = m.rng.randrange(9)
        ps = [p.copy() for p in params]
        if op == 0:
            ps = ps[:-1]
        elif op == 1:
            ps[0] = ps[0].ravel()
        elif op == 2:
            ps[m.rng.randrange(len(ps))].flat[0] = m.rng.choice((np.nan, np.inf, -np.inf))
        elif op == 3:
            ps = [p.astype(m.rng.choice((np.float16, np.int64, np.complex128, np.bool_)))
                  for p in ps]
        elif op == 4:
            ps.append(np.zeros(3))
        elif op == 5:
            ps = []
        return ps

    def produce(m: Mutator) -> Case:
        cid, weight = m.rng.choice(cids), m.rng.choice(weights)
        ps = arrays(m)
        with identity(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = Message(RecordDict({"config": ConfigRecord({})}), dst_node_id=5,
                          message_type="train")
            content = RecordDict()
            with contextlib.suppress(Exception):  # Flower refuses some values itself
                content["arrays"] = ArrayRecord({str(k): Array(p) for k, p in enumerate(ps)})
            with contextlib.suppress(Exception):
                content["metrics"] = MetricRecord({} if weight is None else
                                                  {"num-examples": weight})
            with contextlib.suppress(Exception):
                content[fs.FEDSEC_KEY] = ConfigRecord({} if cid is None else
                                                      {fs.CLIENT_ID: cid})
            reply = Message(content, reply_to=out)
        return Case([reply], f"cid={cid!r:.20} weight={weight!r:.20}", oracle)

    def oracle(strategy: Any) -> str | None:
        for rnd in strategy.server.rounds:
            if not all(0 <= c < N_CLIENTS for c in rnd.participants):
                return f"participants {rnd.participants} recorded"
            if not np.all(np.isfinite(rnd.weights)) or np.any(np.asarray(rnd.weights) < 0):
                return f"weights {rnd.weights} recorded"
            for local in rnd.local_params:
                if not all(np.all(np.isfinite(p)) for p in local):
                    return "a non-finite local model recorded"
        return None

    def call(replies: list[Any]) -> Any:
        import logging

        strategy = fs.RecordingFedAvg(spec, N_CLIENTS)
        strategy._keys, strategy._current = [str(k) for k in range(len(params))], params  # noqa: SLF001
        logging.getLogger("flwr").disabled = True
        try:
            with identity():
                strategy.aggregate_train(1, replies)
        finally:
            logging.getLogger("flwr").disabled = False
        return strategy

    from flwr.serverapp.exception import InconsistentMessageReplies

    # Flower's own refusal of replies without exactly one ArrayRecord and MetricRecord (an
    # AppExitException: the ServerApp exits by design) is reported, not a violation
    return Target("RecordingFedAvg.aggregate_train", call, [("any", 1, produce)],
                  noted=(InconsistentMessageReplies,), weight=0.5)
