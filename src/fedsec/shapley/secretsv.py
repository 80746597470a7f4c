"""SecretSV: Zheng et al.'s two-server baseline -- models *and* test data additively shared.

Everything is shared modulo ``2^64`` between the principal server P and the auxiliary
server A; every linear layer of two shared matrices uses a Beaver matrix triple from a
dealer; a client chosen under the decryption rule (:mod:`fedsec.shapley.views`)
reconstructs each layer's output, activates and re-shares it, and at the last layer deals
the zero test of its predictions (as SecSV, :func:`fedsec.crypto.sharing.zero_test_deal`),
so that P learns which predictions are right and nothing else. Reconstruction is exact: the
fixed-point budget is checked before computing
(:class:`~fedsec.crypto.sharing.FixedPointOverflow` otherwise).

Roles: :class:`SecretSVClient`, :class:`SecretSVPrincipal` (P), :class:`SecretSVAuxiliary`
(A), what both servers do (:class:`SecretSVServer`) and the :class:`Dealer`;
:func:`secretsv_shapley` runs every role in one process over a
:class:`~fedsec.protocol.network.Network`, relaying bytes only. SecretSV has no keys: its
session id hashes a fresh nonce of every role (:func:`fedsec.protocol.binding.session_from_nonces`).

The sharing and fixed point, the threat model, the roles and steps, replays and splices in
detail: ``docs/protocols/secretsv.md`` (the documentation site's SecretSV page).
"""

from __future__ import annotations

import math
import secrets
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from threadpoolctl import threadpool_limits

from fedsec.crypto import sharing as sh
from fedsec.crypto.drbg import SystemRandomSource
from fedsec.errors import PrivacyWarning, ProtocolError
from fedsec.learning.model import ModelSpec, Params, activate
from fedsec.learning.record import TrainingRecord
from fedsec.protocol import fields, wire
from fedsec.protocol.accounting import Accounting, Clock
from fedsec.protocol.binding import (
    RE,
    RID,
    Binding,
    Context,
    ReplayRefused,
    check_nonce,
    context_of,
    new_nonce,
    new_request_id,
    request_id,
    session_from_nonces,
)
from fedsec.protocol.network import Network
from fedsec.protocol.roles import receives
from fedsec.shapley import fixed_point as fp
from fedsec.shapley.secure_common import (
    SecureShapleyResult,
    TestSets,
    check_protocol_args,
    check_test_sets,
)
from fedsec.shapley.secure_game import (
    check_decryptor,
    decryptor_chain,
    integer_weights,
    plan_groups,
    reshare_cap,
    run_rounds,
    shuffle,
)
from fedsec.shapley.views import ClientView, ModelSpace, Scheduler, check_schedule

__all__ = ["secretsv_shapley", "SecretSVClient", "SecretSVServer", "SecretSVPrincipal",
           "SecretSVAuxiliary", "Dealer", "SecretSVRun",
           "open_session"]

U64 = NDArray[np.uint64]
BoolArray = NDArray[np.bool_]
Rounds = Sequence[tuple[Sequence[int], Any]]
Q = sh.RING64
L = sh.LABEL_PRIME  # labels are shared modulo a prime: the zero test needs a field
_MAX = 1 << 63
#: log2 of the largest fixed-point layer output P plans for (3 bits under 2^63)
_BUDGET_BITS = 60.0
_MAX_ROWS = 1 << 24  # test samples per client a server accepts
_MAX_DIM = 1 << 24  # a triple's dimensions the dealer accepts ...
_MAX_TRIPLE = 1 << 28  # ... and its entries in all
PROTOCOL = "secretsv"
EV = "ev"
_NONCE_BYTES = 16
_MAX_ROLES = (1 << 16) + 3  # clients (a data share names one of 2^16) plus P, A, dealer
_MAX_MASK = (1 << 62) - 1
_KEY = r"global|c[0-9]{1,5}"  # a model: the global one, or client i's local one


def _hello(nonce: bytes, meta: dict[str, Any] | None = None) -> bytes:
    """A role's fresh session nonce (a client's: with its published bounds), for P."""
    return wire.encode("secretsv/hello", meta or {}, [nonce])


def _plan_of(meta: dict[str, Any], spec: ModelSpec | None) -> fp.FixedPointPlan | None:
    """The fixed point P chose (in its ``secretsv/session`` message), checked against the
    model; None for a role without a model (the dealer)."""
    if spec is None:
        return None
    fracs = []
    for key in ("frac_models", "frac_inputs"):
        vs = meta.get(key)
        if not isinstance(vs, list) or len(vs) != len(spec.layers) or not all(
                isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= fp.MAX_FRAC
                for v in vs):
            raise ProtocolError("malformed session: fractional bits")
        fracs.append(tuple(vs))
    return fp.FixedPointPlan(fracs[0], fracs[1])


def _join(data: bytes, nonce: bytes, n_roles: int | None, me: str,
          spec: ModelSpec | None = None) -> tuple[Binding, fp.FixedPointPlan | None]:
    """This role's binding in the session of P's ``secretsv/session`` message (every
    role's nonce), derived here, and the fixed point P chose; ``ReplayRefused`` unless
    its own ``nonce`` is among them."""
    msg = wire.decode(data, expect="secretsv/session", max_bytes=64 * _MAX_ROLES)
    nonces = list(msg.blobs)
    if (n_roles is not None and len(nonces) != n_roles) or not 3 <= len(nonces) <= \
            _MAX_ROLES or any(len(v) != _NONCE_BYTES for v in nonces) \
            or len(set(nonces)) != len(nonces):
        raise ProtocolError("malformed session: nonces")
    check_nonce(nonce, nonces)
    return (Binding(session_from_nonces(PROTOCOL, nonces), PROTOCOL, me),
            _plan_of(msg.meta, spec))


def _need(binding: Binding | None) -> Binding:
    if binding is None:
        raise ProtocolError("no session joined yet")
    return binding


def _pow2_ceil(v: int) -> int:
    return 1 if v <= 1 else 1 << math.ceil(math.log2(v))


def _u64(data: bytes, shape: tuple[int, ...], what: str) -> U64:
    out: U64 = fields.array(data, np.uint64, shape, what=what)
    return out


def _index(ctx: Context) -> tuple[int, int, int]:
    """A context's index ``(coalition, batch group, layer)`` (layer -1: the evaluation)."""
    if len(ctx.index) != 3 or ctx.index[0] < 0 or ctx.index[1] < 0:
        raise fields.malformed("index")
    mask, group, layer = ctx.index
    return mask, group, layer


def _layers(spec: ModelSpec, params: Params) -> list[tuple[NDArray[np.float64],
                                                           NDArray[np.float64]]]:
    out = []
    for layer in spec.layers_of(params):
        if layer.spec.kind == "gru":
            raise ValueError("SecretSV evaluates dense and conv2d layers, not gru.")
        w, b = layer.matrix()
        out.append((np.asarray(w, np.float64), np.asarray(b, np.float64)))
    return out


def _client_name(i: int) -> str:
    return f"client:{i}"


# ====================================================================== dealer
class _SessionMember:
    """A role that joins P's session: sends its fresh nonce, takes the session if its
    nonce is in it (``_session_roles()``: how many nonces the session must hold, if known)."""

    _nonce: bytes
    _binding: Binding | None
    _fixed_point: fp.FixedPointPlan | None = None
    _model_spec: ModelSpec | None = None

    @property
    def fixed_point(self) -> fp.FixedPointPlan | None:
        """The per-layer fractional bits of the session (P's choice; None for the
        dealer and before the session)."""
        return self._fixed_point

    @property
    def name(self) -> str:
        raise NotImplementedError

    def _session_roles(self) -> int | None:
        raise NotImplementedError

    def hello(self) -> bytes:
        """This role's fresh session nonce (``secretsv/hello``, for P)."""
        return _hello(self._nonce)

    @receives("secretsv/session")
    def join(self, data: bytes) -> None:
        """Take the session P announces, if it holds this role's nonce."""
        if self._binding is not None:
            raise ProtocolError("already in a session")
        self._binding, plan = _join(data, self._nonce, self._session_roles(), self.name,
                                    self._model_spec)
        mine = self._fixed_point  # P's own choice (with its bounds) stands if announced
        if plan is not None and (mine is None or (mine.model, mine.inputs) != (
                plan.model, plan.inputs)):
            self._fixed_point = plan

    def _plan(self) -> fp.FixedPointPlan:
        if self._fixed_point is None:
            raise ProtocolError("no session joined yet")
        return self._fixed_point


class Dealer(_SessionMember):
    """Produces Beaver matrix triples ``(U, V, U·V)`` and sends one share to each server.

    Each triple answers P's request for one product (its round, coalition, batch group and
    layer) and carries a fresh id; a server uses a triple id once (a re-used triple would
    let the other server difference two openings). Like every SecretSV role, the dealer
    draws its own session nonce (:meth:`hello`) and deals only once it has joined a
    session that hashes it in (:meth:`join`)."""

    def __init__(self) -> None:
        self._rng = SystemRandomSource()
        self._nonce = new_nonce()
        self._binding: Binding | None = None
        #: the dealer's seconds by kind of work
        self.clock = Clock()

    @property
    def name(self) -> str:
        return "dealer"

    def _session_roles(self) -> int | None:
        return None
    @receives("secretsv/triple-request")
    def triple(self, request: bytes) -> tuple[bytes, bytes]:
        """P's request for a triple of a ``d_out × d_in`` by ``d_in × m`` product: the
        ``secretsv/triple`` shares for P and for A (same id and context)."""
        b = _need(self._binding)
        msg = wire.decode(request, expect="secretsv/triple-request", max_bytes=1 << 12)
        ctx = b.check(msg.meta, step="triple-request", sender="P",
                      round=context_of(msg.meta).round, index=None, what="triple request")
        _index(ctx)
        d_out, d_in, m = fields.integers(msg.meta, "shape", 1, _MAX_DIM, length=3)
        if d_out * d_in + d_in * m + d_out * m > _MAX_TRIPLE:
            raise fields.malformed("shape")
        with self.clock("share_generation"):
            u = sh.uniform_mod(Q, (d_out, d_in), self._rng)
            v = sh.uniform_mod(Q, (d_in, m), self._rng)
            c = u @ v
            parts = [sh.share(a, Q, self._rng) for a in (u, v, c)]
        meta = {"shape": [d_out, d_in, m]}
        tid = new_request_id()
        return tuple(  # type: ignore[return-value]
            wire.encode("secretsv/triple", b.bind(meta, step="triple", to=to,
                                                  round=ctx.round, index=ctx.index, rid=tid),
                        [p[k].tobytes() for p in parts])
            for k, to in enumerate(("P", "A")))


# ====================================================================== servers
@dataclass
class _Eval:
    """One (round, coalition, batch group) evaluation in flight at a server."""

    round: int
    mask: int
    group: int
    ev: str  # P's evaluation id
    rows: NDArray[np.int64]
    chain: list[int]  # the reconstructing client of each layer
    owners: list[int]  # the batch group's clients
    mowners: list[int]  # the owner of the model under test (a local model), or none
    keys: list[str]  # the models aggregated ...
    q: list[int]  # ... with these integer weights
    x: U64  # this server's share of the current layer's input (d_in × m)
    xb: int  # its bound
    layer: int = 0  # the layer being computed (advances with each re-share)
    opened: bool = False  # this layer's triple consumed
    uvc: tuple[U64, U64, U64] | None = None  # this layer's triple shares
    ef: tuple[U64, U64] | None = None  # this server's shares of E and F
    wb: tuple[U64, U64] | None = None  # its aggregated model share (W, b) of this layer
    g: U64 | None = None  # (P) its share of r·(Ŷ − b) from the labels, until A answers
    #: per layer, the (bound, weight sum, scale bits) its output request announced
    announced: dict[int, tuple[int, int, int]] = field(default_factory=dict)

    def index(self, layer: int | None = None) -> tuple[int, int, int]:
        return (self.mask, self.group, self.layer if layer is None else layer)


class SecretSVServer(_SessionMember):
    """What P and A share (:class:`SecretSVPrincipal`, :class:`SecretSVAuxiliary`): model
    and data shares, and the Beaver products on them.

    Every message a server reads is checked against its own state (see the module
    docstring): data and model shares addressed to it, of this session (and, for models,
    the current round); A's batch order and each evaluation P announces (fresh id,
    current round, rows of one announced group); per layer one fresh triple of this
    evaluation and layer, the other server's opening (never its own reflected), the
    asked client's re-share of this layer, and finally the label share.

    Parameters
    ----------
    name : {"P", "A"}
    spec : ModelSpec
    rounds : sequence of (participants, weights)
        ``I^t`` and FedAvg's weights (public training metadata): which models a coalition
        aggregates, with which integer weights.
    n_clients : int, optional
        When set, data shares must come from exactly these clients.
    space : ModelSpace, optional
        The decryption rule of :mod:`fedsec.shapley.views` (``schedule="strict"``): P
        schedules the reconstructions by it, and both servers send the reconstructing
        client the sample ids (it checks its own view). None: Prop. 6.8's chains.
    """

    def __init__(self, name: str, spec: ModelSpec, rounds: Rounds = (), *,
                 n_clients: int | None = None, space: ModelSpace | None = None) -> None:
        if name not in ("P", "A"):
            raise ValueError(f"The 'name' parameter of SecretSVServer must be 'P' or 'A'. "
                             f"Got {name!r} instead.")
        self._name = name
        self._spec = self._model_spec = spec
        self._rounds = [(tuple(int(c) for c in p), np.asarray(w)) for p, w in rounds]
        self._n = n_clients
        self._nonce = new_nonce()
        self._binding: Binding | None = None
        self._x: U64 = np.zeros((0, 0), np.uint64)
        self._y: U64 = np.zeros(0, np.uint64)
        self._owner: NDArray[np.int64] = np.zeros(0, np.int64)
        self._xbound: dict[int, int] = {}
        self._models: dict[tuple[int, str], list[tuple[U64, U64]]] = {}
        self._bounds: dict[tuple[int, str], list[tuple[int, int]]] = {}
        self._round = -1
        self._eval: _Eval | None = None
        self._order: list[NDArray[np.int64]] = []  # per batch group, the shuffled rows
        self._groups: list[list[int]] = []
        self._strong = True
        self._space = space
        self._sched: Scheduler | None = None  # (P) the decryption rule; None: Prop. 6.8
        self._turn = 0  # (P) rotates the reconstructing clients
        self._evals_seen: set[str] = set()
        self._triples_used: set[str] = set()
        #: this server's seconds by kind of work
        self.clock = Clock()

    # ------------------------------------------------------------- session
    @property
    def name(self) -> str:
        return self._name

    @property
    def _other(self) -> str:
        return "A" if self._name == "P" else "P"

    @property
    def _b(self) -> Binding:
        return _need(self._binding)

    def _n_roles(self) -> int | None:
        return None if self._n is None else self._n + 3

    def _session_roles(self) -> int | None:
        return self._n_roles()

    # ------------------------------------------------------------- shares
    @receives("secretsv/data")
    def receive_data(self, blobs: Sequence[bytes]) -> None:
        """Every client's share of its test data and labels (once each)."""
        with self.clock("other"):
            self._receive_data(blobs)

    def _receive_data(self, blobs: Sequence[bytes]) -> None:
        xs, ys, ow = [], [], []
        d = self._spec.in_features
        xbound: dict[int, int] = {}
        for data in blobs:
            msg = wire.decode(data, expect="secretsv/data", max_bytes=1 << 34)
            c = fields.integer(msg.meta, "client", 0, (self._n or 1 << 16) - 1,
                               what="data share")
            self._b.check(msg.meta, step="data", sender=_client_name(c), what="data share")
            rows = fields.integer(msg.meta, "rows", 0, _MAX_ROWS, what="data share")
            bound = fields.integer(msg.meta, "bound", 1, _MAX - 1, what="data share")
            if len(msg.blobs) != 2 or c in xbound:
                raise ProtocolError("malformed data share")
            xbound[c] = bound
            xs.append(_u64(msg.blobs[0], (rows, d), "data share"))
            ys.append(fields.array(msg.blobs[1], np.uint64, (rows,), hi=L - 1,
                                   what="data share: label share"))
            ow.append(np.full(rows, c, dtype=np.int64))
        if not xs or (self._n is not None and sorted(xbound) != list(range(self._n))):
            raise ProtocolError("data shares must come from every client, once each")
        self._xbound = xbound
        self._x, self._y, self._owner = np.concatenate(xs), np.concatenate(ys), \
            np.concatenate(ow)

    def start_round(self, t: int) -> None:
        """Accept models (and evaluations) of round ``t`` from now on."""
        self._round = t
        self._eval = None

    def end_round(self, t: int) -> None:
        """Drop the model shares of round ``t``."""
        for key in [k for k in self._models if k[0] == t]:
            del self._models[key]

    @receives("secretsv/model")
    def receive_model(self, data: bytes) -> None:
        """A client's share of a model of the current round (the global model, or its own
        local model), with the model's bounds."""
        with self.clock("other"):
            msg = wire.decode(data, expect="secretsv/model", max_bytes=1 << 34)
            sender = context_of(msg.meta).sender
            key = fields.text(msg.meta, "key", pattern=_KEY, what="model share")
            if key != "global" and sender != _client_name(int(key[1:])):
                raise ReplayRefused("model share of another client's model", check="sender")
            if not sender.startswith("client:"):
                raise ReplayRefused("model share from a role that is no client",
                                    check="sender")
            self._b.check(msg.meta, step="model", sender=sender, round=self._round,
                          what="model share")
            shapes = [s for ly in self._spec.layers for s in
                      ((ly.out_features, ly.in_features), (ly.out_features,))]
            bounds = msg.meta.get("bounds")
            if not isinstance(bounds, list) or len(bounds) != len(self._spec.layers) \
                    or len(msg.blobs) != len(shapes):
                raise ProtocolError("malformed model share")
            pairs = [fields.integers({"bounds": b}, "bounds", 1, _MAX - 1, length=2,
                                     what="model bounds") for b in bounds]
            arrs = [_u64(b, s, "model share") for b, s in zip(msg.blobs, shapes, strict=True)]
            self._models[(self._round, key)] = [(arrs[2 * k], arrs[2 * k + 1])
                                                for k in range(len(self._spec.layers))]
            self._bounds[(self._round, key)] = [(int(b[0]), int(b[1])) for b in pairs]

    def _rows(self, meta: dict[str, Any]) -> NDArray[np.int64]:
        n = len(self._y)
        return np.asarray(fields.integers(meta, "rows", 0, n - 1, min_length=1,
                                          max_length=n, distinct=True, what="sample ids"),
                          dtype=np.int64)

    # ------------------------------------------------------------- evaluations
    def _coalition(self, mask: int) -> tuple[list[str], list[int], list[int]]:
        """The models coalition ``mask`` of the current round aggregates, their integer
        weights, and the owner of the model when it is one client's local model."""
        if not 0 <= self._round < len(self._rounds):
            raise ProtocolError(f"{self._name}: no round in progress")
        parts, weights = self._rounds[self._round]
        if mask >> len(parts):
            raise ProtocolError("malformed evaluation: coalition")
        if mask == 0:
            return ["global"], [1], []
        qa = integer_weights(weights)
        sel = [j for j in range(len(parts)) if mask >> j & 1]
        mowners = [parts[sel[0]]] if len(sel) == 1 else []
        return [f"c{parts[j]}" for j in sel], [int(qa[j]) for j in sel], mowners

    def _start(self, mask: int, group: int, ev: str, rows: NDArray[np.int64],
               chain: list[int], owners: list[int]) -> _Eval:
        keys, q, mowners = self._coalition(mask)
        xb = max(self._xbound.get(c, 1) for c in owners)
        x: U64 = self._x[rows].T.copy()
        return _Eval(self._round, mask, group, ev, rows, chain, owners, mowners, keys, q,
                     x, xb)

    def suspend(self) -> _Eval:
        """Take the evaluation in flight out of this server (to keep several in flight at
        once, as a deployment batching every evaluation of a round does); changes no
        message. :meth:`resume` puts it back."""
        ev = self._need_eval()
        self._eval = None
        return ev

    def resume(self, ev: _Eval) -> None:
        """Put a suspended evaluation back in flight (none may be in flight)."""
        if self._eval is not None:
            raise ProtocolError(f"{self._name}: an evaluation is already in flight")
        self._eval = ev

    def _need_eval(self) -> _Eval:
        if self._eval is None:
            raise ProtocolError(f"{self._name}: no evaluation in flight")
        return self._eval

    def _aggregated(self, ev: _Eval) -> tuple[U64, U64]:
        first = self._models.get((ev.round, ev.keys[0]))
        if first is None or any((ev.round, k) not in self._models for k in ev.keys):
            raise ProtocolError(f"{self._name}: a model of the coalition is missing")
        w = np.zeros_like(first[ev.layer][0])
        b = np.zeros_like(first[ev.layer][1])
        for k, qi in zip(ev.keys, ev.q, strict=True):
            wk, bk = self._models[(ev.round, k)][ev.layer]
            w = w + np.uint64(qi) * wk
            b = b + np.uint64(qi) * bk
        return w, b

    def _bound(self, ev: _Eval) -> int:
        """The a-priori bound of this layer's output in fixed point."""
        bound = sum(qi * (self._bounds[(ev.round, k)][ev.layer][0] * ev.xb
                          + self._bounds[(ev.round, k)][ev.layer][1])
                    for k, qi in zip(ev.keys, ev.q, strict=True))
        if bound >= _MAX:
            raise sh.FixedPointOverflow(
                f"SecretSV: layer {ev.layer + 1} in round {ev.round + 1}: a linear output "
                f"may exceed 2^63 in fixed point (a coalition model's activations beyond "
                f"what the clients observed); SecretSV refuses rather than wrap. Levers: "
                f"clipping or regularising the model weights")
        return int(bound)

    @receives("secretsv/triple")
    def open_share(self, triple: bytes) -> bytes:
        """Beaver step 1: this server's shares of ``E = W − U`` and ``F = X − V`` for the
        current layer (its aggregated model share ``W``, its input share ``X``), with the
        dealer's ``triple``; the ``secretsv/open`` message for the other server."""
        ev = self._need_eval()
        msg = wire.decode(triple, expect="secretsv/triple", max_bytes=1 << 34)
        self._b.check(msg.meta, step="triple", sender="dealer", round=ev.round,
                      index=ev.index(), what="triple")
        tid = request_id(msg.meta, RID)
        if tid in self._triples_used or ev.opened:
            raise ReplayRefused("triple already used (a replayed triple)", check="request-id")
        self._bound(ev)  # refuse before computing
        with self.clock("arithmetic"):
            w, bias = self._aggregated(ev)
        x = ev.x
        if msg.meta.get("shape") != [*w.shape, x.shape[1]] or w.shape[1] != x.shape[0] \
                or len(msg.blobs) != 3:
            raise ProtocolError("triple does not fit the product")
        (d_out, d_in), m = w.shape, x.shape[1]
        u = _u64(msg.blobs[0], (d_out, d_in), "triple")
        v = _u64(msg.blobs[1], (d_in, m), "triple")
        c = _u64(msg.blobs[2], (d_out, m), "triple")
        self._triples_used.add(tid)
        ev.opened = True
        with self.clock("arithmetic"):
            e, f = w - u, x - v
        ev.uvc, ev.ef, ev.wb = (u, v, c), (e, f), (w, bias)
        return wire.encode("secretsv/open", self._b.bind(
            {}, step="open", to=self._other, round=ev.round, index=ev.index(), re_=ev.ev),
            [e.tobytes(), f.tobytes()])

    @receives("secretsv/open")
    def beaver(self, theirs: bytes) -> tuple[str, bytes]:
        """Beaver step 2: this server's share of ``W·X + b`` from the other server's
        opening of this evaluation and layer; returns the reconstructing client's name and
        the ``secretsv/output`` message for it."""
        ev = self._need_eval()
        msg = wire.decode(theirs, expect="secretsv/open", max_bytes=1 << 34)
        self._b.check(msg.meta, step="open", sender=self._other, round=ev.round,
                      index=ev.index(), what=f"opening of {self._other}")
        if request_id(msg.meta, RE) != ev.ev:
            raise ReplayRefused("opening of another evaluation", check="request-id")
        if ev.uvc is None or ev.ef is None or ev.wb is None or not ev.opened:
            raise ProtocolError("an opening before this server's own")
        if len(msg.blobs) != 2:
            raise ProtocolError("malformed opening: two blobs expected")
        u, v, c = ev.uvc
        with self.clock("arithmetic"):
            e = ev.ef[0] + _u64(msg.blobs[0], u.shape, "opening")
            f = ev.ef[1] + _u64(msg.blobs[1], v.shape, "opening")
            z: U64 = e @ v + u @ f + c + ev.wb[1][:, None]
            if self._name == "P":
                z = z + e @ f
        ev.uvc = ev.ef = ev.wb = None
        return self._output(ev, z)

    def _output(self, ev: _Eval, z: U64) -> tuple[str, bytes]:
        layer = ev.layer
        ly = self._spec.layers[layer]
        bound = self._bound(ev)
        wsum, scale = int(sum(ev.q)), self._plan().scale(layer)
        meta: dict[str, Any] = {
            "layer": layer, "d": ly.out_features, "m": len(ev.rows), "bound": bound,
            "scale_bits": scale, "weight_sum": wsum, "batch_owners": ev.owners,
            "model_owners": ev.mowners, "previous": ev.chain[layer - 1] if layer else -1}
        if self._space is not None:
            meta["samples"] = [int(v) for v in ev.rows]  # the client checks its view
        meta[EV] = ev.ev
        ev.announced[layer] = (bound, wsum, scale)
        to = _client_name(ev.chain[layer])
        return to, wire.encode("secretsv/output", self._b.bind(
            meta, step="output", to=to, round=ev.round, index=ev.index()), [z.tobytes()])

    def _answer(self, data: bytes, kind: str, shape: tuple[int, ...], n_blobs: int = 1
                ) -> tuple[U64, wire.Message]:
        """The asked client's answer to this layer's output (a re-share or label shares);
        the layer is done."""
        ev = self._need_eval()
        msg = wire.decode(data, expect=kind, max_bytes=1 << 34)
        self._b.check(msg.meta, step=kind.split("/")[1],
                      sender=_client_name(ev.chain[ev.layer]), round=ev.round,
                      index=ev.index(), what=kind)
        if request_id(msg.meta, RE) != ev.ev or not ev.opened:
            raise ReplayRefused(f"{kind} answers no output of this evaluation and layer",
                                check="request-id")
        if len(msg.blobs) != n_blobs:
            raise ProtocolError(f"malformed {kind} message")
        x = _u64(msg.blobs[0], shape, kind)
        ev.layer += 1
        ev.opened = False
        return x, msg

    @receives("secretsv/reshare")
    def receive_share(self, data: bytes) -> None:
        """The client's re-share of this layer's activated output (the next layer's input)
        and its bound."""
        ev = self._need_eval()
        layer = ev.layer  # the layer this re-share follows
        if layer >= len(self._spec.layers) - 1:
            raise ProtocolError("a re-share after the last layer")
        x, msg = self._answer(data, "secretsv/reshare",
                              (self._spec.layers[layer].out_features, len(ev.rows)))
        nb = fields.integer(msg.meta, "bound", 1, _MAX - 1, what="re-share")
        cap = reshare_cap(ev.announced.get(layer), self._spec.layers[layer].activation,
                          self._plan().inputs[layer + 1])
        if cap is not None and nb > cap:  # a bound no honest activation reaches
            raise ProtocolError("re-share bound beyond what the layer's output allows")
        ev.x, ev.xb = x, nb

    def _last(self, ev: _Eval) -> None:
        if ev.layer != len(self._spec.layers) - 1:
            raise ProtocolError("label shares before the last layer")


class SecretSVPrincipal(SecretSVServer):
    """The principal server P: gathers the session, orders the batches, schedules the
    reconstructions, announces each evaluation, asks the dealer for triples, and learns
    which predictions are right (the zero test) -- see :class:`SecretSVServer`."""

    def __init__(self, spec: ModelSpec, rounds: Rounds = (), *, n_clients: int | None = None,
                 space: ModelSpace | None = None) -> None:
        super().__init__("P", spec, rounds, n_clients=n_clients, space=space)

    @receives("secretsv/hello")
    def gather(self, hellos: Sequence[bytes]) -> bytes:
        """(P) Every other role's ``secretsv/hello``: the ``secretsv/session`` message
        for every role (their nonces and this server's)."""
        nonces = [self._nonce]
        published = []
        for data in hellos:
            msg = wire.decode(data, expect="secretsv/hello", max_bytes=1 << 24)
            if len(msg.blobs) != 1 or len(msg.blobs[0]) != _NONCE_BYTES:
                raise ProtocolError("malformed hello: nonce")
            nonces.append(msg.blobs[0])
            if "bounds" in msg.meta:
                published.append(msg.meta["bounds"])
        n_roles = self._n_roles()
        if (n_roles is not None and len(nonces) != n_roles) or len(
                set(nonces)) != len(nonces) or len(nonces) > _MAX_ROLES:
            raise ProtocolError("hellos must come from every role, once each")
        if self._n is not None and len(published) != self._n:
            raise ProtocolError("every client's hello must carry its bounds")
        keys = []
        for parts, weights in self._rounds:
            q = integer_weights(weights)
            keys.append([("global", 1)] + [(f"c{c}", int(qi)) for c, qi in zip(
                parts, q, strict=True)])
        per_round, ex, acts = fp.read(published, keys, len(self._spec.layers))
        plan = self._fixed_point = fp.choose(self._spec, per_round, ex, acts, _BUDGET_BITS,
                                             protocol="SecretSV")
        return wire.encode("secretsv/session", {"frac_models": list(plan.model),
                                                "frac_inputs": list(plan.inputs)},
                           sorted(nonces))

    # ------------------------------------------------------------- batches (P, A)
    def order_batches(self, groups: Sequence[Sequence[int]], *, strong: bool = True
                      ) -> bytes:
        """(P) Shuffle each batch group's samples (``groups`` of clients) and make the
        schedule of reconstructions (the decryption rule, or Prop. 6.8's chains, ``strong``
        or not). The ``secretsv/batches`` message for A."""
        self._groups = [list(g) for g in groups]
        self._strong = strong
        self._order = [shuffle(np.flatnonzero(np.isin(self._owner, g))) for g in groups]
        if self._space is not None:
            self._sched = Scheduler(self._space, len(self._xbound), self._owner)
        meta = self._b.bind({"order": [o.tolist() for o in self._order]}, step="batches",
                            to="A")
        return wire.encode("secretsv/batches", meta)

    def plan_rounds(self) -> None:
        """(P, decryption rule) Place every coalition of every round on every batch before
        any work (exact SSVs); raises :class:`~fedsec.shapley.views.UnsafeSchedule`."""
        if self._sched is None:
            return
        for t, (parts, _) in enumerate(self._rounds):
            for o in self._order:
                self._sched.plan(t, list(range(1 << len(parts))), [int(v) for v in o])

    def announce_eval(self, mask: int, group: int, rows: NDArray[np.int64] | None
                      ) -> bytes | None:
        """(P) Start evaluating coalition ``mask`` of the current round on batch group
        ``group`` (its samples among ``rows``, or all): choose who reconstructs each layer
        and return the ``secretsv/eval`` message for A (fresh evaluation id), or None when
        the group has no such sample."""
        n_layers = len(self._spec.layers)
        order = self._order[group]
        if rows is not None:
            todo = np.zeros(len(self._y), dtype=bool)
            todo[rows] = True
            order = order[todo[order]]
        if order.size == 0:
            return None
        members = self._groups[group]
        _, _, mowners = self._coalition(mask)
        n = len(self._xbound)
        if self._sched is None:
            chain = decryptor_chain(n, n_layers, members, mowners, self._strong, self._turn)
        else:
            chain = self._sched.chain(self._round, mask, order, n_layers, self._turn)
        self._turn += 1
        ev = new_request_id()
        self._eval = self._start(mask, group, ev, order, [int(c) for c in chain], members)
        meta = {"rows": [int(r) for r in order], "chain": self._eval.chain,
                "owners": members}
        return wire.encode("secretsv/eval", self._b.bind(
            meta, step="eval", to="A", round=self._round, index=(mask, group, -1), rid=ev))

    def triple_request(self) -> bytes:
        """(P) Ask the dealer for the triple of the current layer's product."""
        ev = self._need_eval()
        return self.triple_request_for(ev.round, ev.mask, ev.group, ev.layer, len(ev.rows))

    def triple_request_for(self, t: int, mask: int, group: int, layer: int, m: int) -> bytes:
        """(P) The triple request of ``layer`` for coalition ``mask`` of round ``t`` on
        batch group ``group`` of ``m`` samples, before that evaluation starts (a deployment
        asks the dealer for every triple of a run at once); the servers check the
        triple against the evaluation when they use it."""
        if not 0 <= layer < len(self._spec.layers) or t < 0 or mask < 0 or group < 0 \
                or m < 1:
            raise ValueError("no such product")
        ly = self._spec.layers[layer]
        meta = {"shape": [ly.out_features, ly.in_features, m]}
        return wire.encode("secretsv/triple-request", self._b.bind(
            meta, step="triple-request", to="dealer", round=t, index=(mask, group, layer)))

    @receives("secretsv/labels")
    def label_mask(self, to_p: bytes) -> bytes:
        """The client's zero-test part ``(b', g')`` (:func:`fedsec.crypto.sharing.
        zero_test_deal`, modulo the prime ``2^61 − 1``): P keeps ``g'`` and sends A
        ``f' = Y' − b'`` (uniform to A, which lacks ``b'``)."""
        ev = self._need_eval()
        self._last(ev)
        m = len(ev.rows)
        b_p, msg = self._answer(to_p, "secretsv/labels", (m,), n_blobs=2)
        g_p = _u64(msg.blobs[1], (m,), "label share")
        if m and max(int(b_p.max()), int(g_p.max())) >= L:
            raise ProtocolError("malformed secretsv/labels message: share out of range")
        ev.g = g_p
        with self.clock("arithmetic"):
            f_p = sh.zero_test_mask(self._y[ev.rows], b_p, L)
        return wire.encode("secretsv/label-mask", self._b.bind(
            {}, step="label-mask", to="A", round=ev.round, index=ev.index(ev.layer - 1),
            re_=ev.ev), [f_p.tobytes()])

    @receives("secretsv/label-diff")
    def compare(self, diff_a: bytes) -> tuple[NDArray[np.int64], BoolArray]:
        """A's zero-test share: the evaluation's sample ids and, for each, True where
        ``r·(Ŷ − Y) = 0`` (a right prediction). P learns this bit only: for a wrong one
        the value is uniform over ``[1, L)``."""
        ev = self._need_eval()
        msg = wire.decode(diff_a, expect="secretsv/label-diff", max_bytes=1 << 34)
        self._b.check(msg.meta, step="label-diff", sender="A", round=ev.round,
                      index=ev.index(ev.layer - 1), what="label difference")
        if request_id(msg.meta, RE) != ev.ev:
            raise ReplayRefused("label difference of another evaluation", check="request-id")
        if ev.g is None:
            raise ProtocolError("a label difference before the labels")
        if len(msg.blobs) != 1:
            raise ProtocolError("malformed label difference")
        z_a = _u64(msg.blobs[0], (len(ev.rows),), "label diff")
        if z_a.size and int(z_a.max()) >= L:
            raise ProtocolError("malformed label difference: out of range")
        with self.clock("arithmetic"):
            out: BoolArray = sh.zero_test_open(ev.g, z_a, L)
        self._eval = None
        return ev.rows, out


class SecretSVAuxiliary(SecretSVServer):
    """The auxiliary server A: follows P's batch order and evaluations and answers the
    zero test -- see :class:`SecretSVServer`."""

    def __init__(self, spec: ModelSpec, rounds: Rounds = (), *, n_clients: int | None = None,
                 space: ModelSpace | None = None) -> None:
        super().__init__("A", spec, rounds, n_clients=n_clients, space=space)

    @receives("secretsv/batches")
    def receive_order(self, data: bytes) -> None:
        """(A) P's shuffled sample order per batch group: every sample exactly once."""
        msg = wire.decode(data, expect="secretsv/batches", max_bytes=1 << 28)
        self._b.check(msg.meta, step="batches", sender="P", what="batch order")
        lists = msg.meta.get("order")
        n = len(self._y)
        if not isinstance(lists, list) or not 1 <= len(lists) <= max(n, 1):
            raise ProtocolError("malformed batch order")
        order = [self._rows({"rows": o}) for o in lists]
        every = np.concatenate(order)
        if len(every) != n or len(np.unique(every)) != n:
            raise ProtocolError("the batch order must hold every sample exactly once")
        self._order = order

    @receives("secretsv/eval")
    def open_eval(self, data: bytes) -> None:
        """(A) Start the evaluation P announces: this session and round, a fresh id, rows
        of the announced group, its reconstructing clients."""
        msg = wire.decode(data, expect="secretsv/eval", max_bytes=1 << 28)
        ctx = self._b.check(msg.meta, step="eval", sender="P", round=self._round,
                            index=None, what="evaluation")
        mask, group, layer = _index(ctx)
        if layer != -1 or group >= len(self._order):
            raise ProtocolError("malformed evaluation: context")
        ev = request_id(msg.meta, RID)
        if ev in self._evals_seen:
            raise ReplayRefused("evaluation already opened (a replayed announcement)",
                                check="request-id")
        rows = self._rows(msg.meta)
        if not np.isin(rows, self._order[group]).all():
            raise ProtocolError("evaluation rows outside the announced group")
        n = len(self._xbound)
        chain = fields.integers(msg.meta, "chain", 0, n - 1,
                                length=len(self._spec.layers), what="evaluation")
        owners = fields.integers(msg.meta, "owners", 0, n - 1, min_length=1, max_length=n,
                                 distinct=True, what="evaluation")
        if not np.isin(self._owner[rows], owners).all():
            raise ProtocolError("evaluation rows of clients outside its owners")
        new = self._start(mask, group, ev, rows, list(chain), list(owners))
        self._evals_seen.add(ev)
        self._eval = new

    @receives("secretsv/labels", "secretsv/label-mask")
    def label_diff(self, data: bytes, mask_p: bytes) -> bytes:
        """Its zero-test share ``z'' = g'' − r·(Y − b)`` of ``r·(Ŷ − Y)`` for P, from the
        client's ``(r, b'', g'')`` and P's ``f'`` -- never ``Ŷ'' − Y''``, which would give
        P the exact error (and, with it, the label)."""
        ev = self._need_eval()
        self._last(ev)
        m = len(ev.rows)
        r, msg = self._answer(data, "secretsv/labels", (m,), n_blobs=3)
        b_a = _u64(msg.blobs[1], (m,), "label share")
        g_a = _u64(msg.blobs[2], (m,), "label share")
        pm = wire.decode(mask_p, expect="secretsv/label-mask", max_bytes=1 << 34)
        self._b.check(pm.meta, step="label-mask", sender="P", round=ev.round,
                      index=ev.index(ev.layer - 1), what="label mask")
        if request_id(pm.meta, RE) != ev.ev:
            raise ReplayRefused("label mask of another evaluation", check="request-id")
        if len(pm.blobs) != 1:
            raise ProtocolError("malformed secretsv/label-mask message")
        f_p = _u64(pm.blobs[0], (m,), "label mask")
        if m and (int(r.min()) == 0 or max(int(r.max()), int(b_a.max()), int(g_a.max()),
                                           int(f_p.max())) >= L):
            raise ProtocolError("label shares out of range (or a zero multiplier)")
        with self.clock("arithmetic"):
            z_a = sh.zero_test_respond(f_p, self._y[ev.rows], r, b_a, g_a, L)
        self._eval = None
        return wire.encode("secretsv/label-diff", self._b.bind(
            {}, step="label-diff", to="P", round=ev.round, index=ev.index(ev.layer - 1),
            re_=ev.ev), [z_a.tobytes()])


# ====================================================================== client
class SecretSVClient(_SessionMember):
    """A client: shares its test data and models between P and A, and reconstructs the
    layer outputs it is asked to (under Prop. 6.8's rules or its own view).

    Parameters
    ----------
    index : int
        This client's id (position in the record).
    n_clients : int
    spec : ModelSpec
    x, y : arrays
        This client's test data.
    view : ClientView, optional
        Its own view under the decryption rule (:mod:`fedsec.shapley.views`); None:
        Prop. 6.8's checks only.
    """

    def __init__(self, index: int, n_clients: int, spec: ModelSpec, x: NDArray[np.float64],
                 y: NDArray[np.int64], *, view: ClientView | None = None) -> None:
        self._index = index
        self._n = n_clients
        self._spec = self._model_spec = spec
        self._x, self._y = x, y
        self._view = view
        self._rng = SystemRandomSource()
        self._answered: set[tuple[str, int]] = set()  # (evaluation id, layer)
        self._seen: dict[tuple[int, int, int], set[int]] = {}
        self._served_round = 0  # the newest round served: rounds are evaluated in order
        self._nonce = new_nonce()
        self._binding: Binding | None = None
        #: this client's seconds by kind of work
        self.clock = Clock()

    @property
    def index(self) -> int:
        return self._index

    @property
    def name(self) -> str:
        """This client's role name on the network (``"client:<index>"``)."""
        return _client_name(self._index)

    def _session_roles(self) -> int | None:
        return self._n + 3

    def hello(self, models: Sequence[tuple[int, str, Params]] = (),
              known: Sequence[tuple[int, Params]] = ()) -> bytes:
        """This client's fresh session nonce with its published bounds: powers of two of
        ``‖X_i‖_∞``, of each model's weights and biases (``models``: ``(round, key,
        params)`` it will share, with ``"global"`` for the global model) and of the hidden
        layers' inputs when it runs them and ``known`` models (``(round, params)``) on its
        own data (:func:`fedsec.shapley.fixed_point.publish`), from which P picks the fixed
        point."""
        return _hello(self._nonce, {"bounds": fp.publish(self._spec, models, known,
                                                         self._x)})

    def share_model(self, rnd: int, key: str, params: Params) -> tuple[bytes, bytes]:
        """Shares of a model of round ``rnd`` (``key``: ``"global"`` or ``"c<index>"``,
        its own local model) for P and A, with its fixed-point bounds."""
        b = _need(self._binding)
        p_blobs: list[bytes] = []
        a_blobs: list[bytes] = []
        bounds = []
        for k, (w, bias) in enumerate(_layers(self._spec, params)):
            fm, fx = self._plan().model[k], self._plan().inputs[k]
            wq = np.rint(np.ldexp(w, fm)).astype(np.int64)
            bq = np.rint(np.ldexp(bias, fm + fx)).astype(np.int64)
            bounds.append([_pow2_ceil(int(np.abs(wq).sum(axis=1).max())),
                           _pow2_ceil(int(np.abs(bq).max()) if bq.size else 0)])
            with self.clock("share_generation"):
                for arr in (wq, bq):
                    s1, s2 = sh.share(sh.to_residues(arr, Q), Q, self._rng)
                    p_blobs.append(s1.tobytes())
                    a_blobs.append(s2.tobytes())
        meta = {"key": key, "bounds": bounds}
        return (wire.encode("secretsv/model", b.bind(meta, step="model", to="P", round=rnd),
                            p_blobs),
                wire.encode("secretsv/model", b.bind(meta, step="model", to="A", round=rnd),
                            a_blobs))

    def share_data(self) -> tuple[bytes, bytes]:
        """Shares of its test data (fixed point, modulo ``2^64``) and labels (modulo the
        label prime) for P and A."""
        b = _need(self._binding)
        xq = sh.encode_fixed(self._x, self._plan().inputs[0], Q)
        bound = _pow2_ceil(int(np.abs(sh.centre(xq, Q)).max())) if xq.size else 1
        with self.clock("share_generation"):
            x1, x2 = sh.share(xq, Q, self._rng)
            y1, y2 = sh.share(self._y.astype(np.uint64), L, self._rng)
        meta = {"client": self._index, "rows": len(self._y), "bound": bound}
        return (wire.encode("secretsv/data", b.bind(meta, step="data", to="P"),
                            [x1.tobytes(), y1.tobytes()]),
                wire.encode("secretsv/data", b.bind(meta, step="data", to="A"),
                            [x2.tobytes(), y2.tobytes()]))

    def _request(self, from_p: bytes, from_a: bytes) -> tuple[Context, dict[str, Any],
                                                               bytes, bytes]:
        """The output request both servers sent (the same but for the sender)."""
        b = _need(self._binding)
        a = wire.decode(from_p, expect="secretsv/output", max_bytes=1 << 34)
        o = wire.decode(from_a, expect="secretsv/output", max_bytes=1 << 34)
        got = context_of(a.meta)
        ctx = b.check(a.meta, step="output", sender="P", round=got.round, index=None,
                      what="output")
        ctx_a = b.check(o.meta, step="output", sender="A", round=got.round, index=None,
                        what="output")
        rest = {k: v for k, v in a.meta.items() if k != "ctx"}
        if ctx_a.at(sender="P") != ctx or rest != {k: v for k, v in o.meta.items()
                                                   if k != "ctx"}:
            raise ProtocolError("the servers sent different requests")
        if len(a.blobs) != 1 or len(o.blobs) != 1:
            raise ProtocolError("malformed output request")
        return ctx, rest, a.blobs[0], o.blobs[0]

    @receives("secretsv/output")
    def reconstruct(self, from_p: bytes, from_a: bytes) -> tuple[bytes, bytes]:
        """Reconstruct a layer's output, check, activate and re-share (or share labels).

        Both shares must be of this session, for the layer they name, of an evaluation
        (id, layer) not answered before; this client refuses a layer of an evaluation of
        which it reconstructed the same or an adjacent layer (its own memory)."""
        ctx, meta, blob_p, blob_a = self._request(from_p, from_a)
        n_layers = len(self._spec.layers)
        what = "output request"
        layer = fields.integer(meta, "layer", 0, n_layers - 1, what=what)
        d = fields.integer(meta, "d", 1, 1 << 24, what=what)
        m = fields.integer(meta, "m", 1, 1 << 24, what=what)
        bound = fields.integer(meta, "bound", 1, _MAX - 1, what=what)
        wsum = fields.integer(meta, "weight_sum", 1, 1 << 40, what=what)
        scale = fields.integer(meta, "scale_bits", 0, 64, what=what)
        if d != self._spec.layers[layer].out_features \
                or scale != self._plan().scale(layer):
            raise ProtocolError("malformed output request")
        owners = list(fields.integers(meta, "batch_owners", 0, self._n - 1, what=what))
        mowners = list(fields.integers(meta, "model_owners", 0, self._n - 1, what=what))
        previous = fields.integer(meta, "previous", -1, self._n - 1, what=what)
        mask, group, ctx_layer = _index(ctx)
        if ctx.round < 0 or ctx_layer != layer:
            raise ProtocolError("malformed output request: context")
        local = False
        if self._view is None:
            check_decryptor(self._index, layer, n_layers, owners, mowners, previous)
        else:
            local = self._view.check_request(ctx.round, mask, meta.get("samples"), owners,
                                             m, first_layer=layer == 0)
        ev = request_id(meta, EV)
        if ctx.round < self._served_round:
            raise ReplayRefused("output of an earlier round (a replay)", check="round")
        if (ev, layer) in self._answered:
            raise ReplayRefused("output already reconstructed (a replay)", check="request-id")
        key = (ctx.round, mask, group)
        seen = self._seen.get(key, set())
        if layer in seen:
            raise ReplayRefused("this layer of the evaluation was already reconstructed "
                                "here (a replay)", check="layer")
        if {layer - 1, layer + 1} & seen and not local:
            raise ProtocolError("refusing to reconstruct two consecutive layers "
                                "(i_{l+1} = i_l; this client did an adjacent layer)")
        p_share = _u64(blob_p, (d, m), "output share")
        a_share = _u64(blob_a, (d, m), "output share")
        self._answered.add((ev, layer))
        self._served_round = ctx.round
        self._seen.setdefault(key, set()).add(layer)
        with self.clock("decryption"):
            vals = sh.reconstruct(p_share, a_share, Q)
        if vals.size and max(int(vals.max()), -int(vals.min())) > bound:  # |-2^63| wraps
            raise ProtocolError("reconstructed values exceed the announced bound")
        real = vals.astype(np.float64) / (float(wsum) * 2.0 ** scale)
        out = activate(self._spec.layers[layer].activation, real)
        b = _need(self._binding)
        if layer < n_layers - 1:
            xq = sh.encode_fixed(out, self._plan().inputs[layer + 1], Q)
            xb = _pow2_ceil(int(np.abs(sh.centre(xq, Q)).max())) if xq.size else 1
            with self.clock("share_generation"):
                s1, s2 = sh.share(xq, Q, self._rng)
            return tuple(  # type: ignore[return-value]
                wire.encode("secretsv/reshare", b.bind(
                    {"bound": xb}, step="reshare", to=to, round=ctx.round, index=ctx.index,
                    re_=ev), [s.tobytes()]) for to, s in (("P", s1), ("A", s2)))
        labels = np.argmax(out, axis=0).astype(np.uint64)
        with self.clock("share_generation"):  # the zero test's correlated randomness
            to_p, to_a = sh.zero_test_deal(labels, L, self._rng)
        return tuple(  # type: ignore[return-value]
            wire.encode("secretsv/labels", b.bind(
                {}, step="labels", to=to, round=ctx.round, index=ctx.index, re_=ev),
                [v.tobytes() for v in vs]) for to, vs in (("P", to_p), ("A", to_a)))


# ====================================================================== runner
def open_session(net: Network, clients: Sequence[SecretSVClient], P: SecretSVPrincipal,
                 A: SecretSVAuxiliary, dealer: Dealer, record: TrainingRecord) -> None:
    """Every role's nonce to P (a client's with the bounds of the models it holds in
    ``record``: its own local models and the global models), P's session message with
    the fixed point to every role (each role derives the session id and checks that its
    own nonce is hashed into it)."""
    others: list[SecretSVClient | SecretSVAuxiliary | Dealer] = [*clients, A, dealer]
    names = [r.name for r in others]
    hellos = []
    for r in others:
        if isinstance(r, SecretSVClient):
            mine = [(t, "global", rnd.global_params) for t, rnd in enumerate(record.rounds)]
            mine += [(t, f"c{r.index}", p) for t, rnd in enumerate(record.rounds)
                     for c, p in zip(rnd.participants, rnd.local_params, strict=True)
                     if c == r.index]
            hellos.append(r.hello(mine))
        else:
            hellos.append(r.hello())
    offer = P.gather(net.gather(names, "P", hellos))
    P.join(offer)
    for role, data in zip(others, net.broadcast("P", names, offer), strict=True):
        role.join(data)


@dataclass
class SecretSVRun:
    """The in-process run of :func:`secretsv_shapley` after the set-up: the round loop of
    :func:`fedsec.shapley.secure_game.run_rounds` calls :meth:`upload_round`,
    :meth:`evaluate` and :meth:`end_round`; each relays bytes between the roles over
    ``net`` in the order of the protocol's steps."""

    record: TrainingRecord
    net: Network
    clients: list[SecretSVClient]
    P: SecretSVPrincipal
    A: SecretSVAuxiliary
    dealer: Dealer
    n_groups: int
    n_samples: int
    leader: int  # the client that shares the global model (every client knows it)
    #: the round loop's own seconds (SampleSkip's search at P)
    acc: Accounting = field(default_factory=Accounting)

    def upload_round(self, t: int) -> None:
        rnd = self.record.rounds[t]
        self.P.start_round(t)
        self.A.start_round(t)
        jobs = [(self.leader, "global", rnd.global_params)]
        jobs += [(c, f"c{c}", p) for c, p in zip(rnd.participants, rnd.local_params,
                                                   strict=True)]
        for owner, key, params in jobs:
            client = self.clients[owner]
            to_p, to_a = self.net.scatter(client.name, ["P", "A"],
                                          list(client.share_model(t, key, params)))
            self.P.receive_model(to_p)
            self.A.receive_model(to_a)

    def end_round(self, t: int) -> None:
        self.P.end_round(t)
        self.A.end_round(t)

    def evaluate(self, t: int, mask: int, rows: NDArray[np.int64] | None) -> BoolArray:
        """Test coalition ``mask`` of round ``t`` on every batch group (on ``rows`` only,
        or all samples): which predictions are right (P's result)."""
        net, P, A = self.net, self.P, self.A
        clients = {c.name: c for c in self.clients}
        correct = np.zeros(self.n_samples, dtype=bool)
        n_layers = len(self.record.spec.layers)
        for g in range(self.n_groups):
            announcement = P.announce_eval(mask, g, rows)
            if announcement is None:
                continue
            A.open_eval(net.send("P", "A", announcement))
            for layer in range(n_layers):
                # Beaver: the dealer's triple, both servers open, each its share of W·X + b
                request = net.send("P", "dealer", P.triple_request())
                tp, ta = net.scatter("dealer", ["P", "A"], list(self.dealer.triple(request)))
                op, oa = P.open_share(tp), A.open_share(ta)
                op = net.send("P", "A", op)
                oa = net.send("A", "P", oa)
                to, out_p = P.beaver(oa)
                to_a, out_a = A.beaver(op)
                # the reconstructing client: re-shares the activated output, or labels
                out_p = net.send("P", to, out_p)
                out_a = net.send("A", to_a, out_a)
                client = clients[to]
                to_p, to_a2 = net.scatter(to, ["P", "A"],
                                          list(client.reconstruct(out_p, out_a)))
                if layer < n_layers - 1:
                    P.receive_share(to_p)
                    A.receive_share(to_a2)
                else:  # the zero test: P learns which predictions are right
                    mask_p = net.send("P", "A", P.label_mask(to_p))
                    diff_a = net.send("A", "P", A.label_diff(to_a2, mask_p))
                    batch_rows, ok = P.compare(diff_a)
                    correct[batch_rows] = ok
        return correct[rows] if rows is not None else correct

    def clocks(self) -> list[Clock]:
        """Every role's clock."""
        return [self.P.clock, self.A.clock, self.dealer.clock,
                *(c.clock for c in self.clients)]


def secretsv_shapley(record: TrainingRecord, test_sets: TestSets, *, estimator: str = "exact",
                     budget: int | None = None, sample_skip: bool = False, seed: int = 0,
                     schedule: str = "strict",
                     progress: Callable[[str], None] | None = None,
                     network: Network | None = None) -> SecureShapleyResult:
    """Federated Shapley values with SecretSV (Zheng et al.'s pure secret-sharing baseline).

    Parameters
    ----------
    record : TrainingRecord
        The federated training run.
    test_sets : sequence of (X_i, y_i)
        Each client's private test set, in client order.
    estimator : {"exact", "ps", "gt", "ks", "gtg"}, default="exact"
    budget : int, optional
        Per-round budget of the estimator.
    sample_skip : bool, default=False
        SampleSkip (Alg. 6-7) at P.
    seed : int, default=0
        Seed of the estimators' sampling.
    schedule : {"strict", "paper"}, default="strict"
        Who may reconstruct what: the decryption rule of :mod:`fedsec.shapley.views`
        (runs it cannot schedule are refused up front) or Prop. 6.8 only (a
        :class:`~fedsec.errors.PrivacyWarning` says what leaks); see
        :func:`fedsec.shapley.secsv.secsv_shapley`.
    progress : callable, optional
        Called with a short message after every round.
    network : Network, optional
        The :class:`~fedsec.protocol.network.Network` every message crosses (default: a
        fresh one). Pass your own to observe or intercept the traffic between the roles
        (tests, benchmarks, a demonstration of an attack).

    Returns
    -------
    SecureShapleyResult
    """
    where = "secretsv_shapley"
    budget = check_protocol_args(record, estimator, budget, where=where,
                                 sample_skip=sample_skip)
    sets = check_test_sets(test_sets, record.n_clients, record.spec.in_features, where=where)
    for layer in record.spec.layers:
        if layer.kind == "gru":
            raise ValueError("SecretSV evaluates dense and conv2d layers, not gru.")
    n, n_layers = record.n_clients, len(record.spec.layers)
    check_schedule(schedule, where)
    strict = schedule == "strict"
    space = ModelSpace.of_record(record)
    if strict:  # one owner per batch: the owner evaluates the models it knows
        groups, strong = [[c] for c in range(n)], True
    else:
        groups, strong = plan_groups(n, n_layers)
    if not strong:
        warnings.warn(f"SecretSV with {n} clients and a {n_layers}-layer model cannot keep "
                      f"all {n_layers + 2} parties of a reconstruction chain distinct (Zheng "
                      "et al., Prop. 6.8): two clients alternate.", PrivacyWarning, stacklevel=2)
    t0 = time.perf_counter()
    net = Network() if network is None else network
    rounds = [(r.participants, np.asarray(r.weights)) for r in record.rounds]
    with threadpool_limits(limits=1, user_api="blas"):
        # No keys, so no key set-up: the session is the hash of a fresh nonce per role
        # (clients, P, A, dealer, each drawing and checking its own); binding every
        # message to it stops replays from other runs (fedsec.protocol.binding)
        clients = [SecretSVClient(i, n, record.spec, x, y,
                                  view=ClientView(space, i) if strict else None)
                   for i, (x, y) in enumerate(sets)]
        P = SecretSVPrincipal(record.spec, rounds, n_clients=n,
                              space=space if strict else None)
        A = SecretSVAuxiliary(record.spec, rounds, n_clients=n,
                              space=space if strict else None)
        dealer = Dealer()
        open_session(net, clients, P, A, dealer, record)
        names = [c.name for c in clients]
        shares = [c.share_data() for c in clients]
        P.receive_data(net.gather(names, "P", [s[0] for s in shares]))
        A.receive_data(net.gather(names, "A", [s[1] for s in shares]))
        A.receive_order(net.send("P", "A", P.order_batches(groups, strong=strong)))
        if strict and estimator == "exact" and not sample_skip:
            P.plan_rounds()  # refuse before any work
        run = SecretSVRun(record, net, clients, P, A, dealer, len(groups),
                          sum(len(y) for _, y in sets), leader=secrets.randbelow(n))
        result = run_rounds(run, estimator, budget or 0, sample_skip, seed, progress,
                            "secretsv")
    result.seconds = time.perf_counter() - t0
    for clock in run.clocks():
        net.accounting.add_clock(clock)
    net.accounting.add_clock(run.acc.seconds)
    result.accounting = net.accounting
    if P.fixed_point is not None:
        result.fixed_point = P.fixed_point.summary(record.spec)
    return result
