"""SecretSV: seed 004's two-server baseline -- models *and* test data additively shared.

Everything is shared modulo ``2^64`` (numpy ``uint64`` arithmetic is exactly that ring):
clients split their fixed-point models and test data between the **principal server P**
and the **auxiliary server A**; aggregation ``Σ q_i θ_i`` is local on each share; every
linear layer ``W·X + b`` of two shared matrices uses a Beaver *matrix* multiplication triple
``(U, V, U·V)`` from a **dealer** (a third party that only produces correlated randomness):
the servers open ``E = W − U`` and ``F = X − V`` to each other and compute their shares of
``E·F + E·V + U·F + U·V``. As in SecSV (:mod:`fedsec.shapley.secsv`), the layer output is
reconstructed by a client chosen under Prop. 6.8's rules, who applies the activation and
re-shares (or, at the last layer, deals the zero test of its predicted labels that
SecSV uses -- :mod:`fedsec.shapley.secsv`, :func:`fedsec.crypto.sharing.zero_test_deal`
-- so that P learns which predictions are right and nothing else), so
no truncation protocol is needed and reconstruction is exact: the a-priori bound
``Σ_{i∈S} q_i (‖W_i‖_∞‖X‖_∞ + ‖b_i‖_∞)·2^{f_θ+f_x} < 2^63`` is checked before computing
(:class:`~fedsec.crypto.sharing.FixedPointOverflow` otherwise). The paper's SecretSV
truncates inside the servers and reports its error; ours has none beyond fixed point.

Threat model: semi-honest P, A, dealer and clients; no two of P, A and the dealer collude
(the dealer knows the triples, hence could unmask ``E`` and ``F``), nor either server with a
client. P learns ``Φ_S`` and the utilities -- not ``Ŷ − Y``, which the paper's step 12
would show it and which pins labels: labels are shared modulo the prime ``2^61 − 1`` and P
opens ``r·(Ŷ − Y)`` for a fresh uniform non-zero ``r`` (modulo ``2^64`` an odd ``r`` would
keep the error's 2-adic valuation); A learns uniformly random shares, ``r``, ``Y − b`` and
the opened ``E``, ``F`` (uniform, since ``U``, ``V`` are); a reconstructing client learns
one layer's output on a batch of other clients' samples, as in SecSV -- by default under
the decryption rule of :mod:`fedsec.shapley.views` (``schedule="strict"``: one-owner
batches, owners evaluate the models they know, no client's view combines into a model it
knows; runs the rule cannot place are refused up front), or Prop. 6.8 only with
``schedule="paper"`` (a :class:`~fedsec.errors.PrivacyWarning`: a client can then solve for
other clients' samples). Shares and triples come from the
operating system's CSPRNG. A fresh triple serves every product (never reused).

Replays and splices (:mod:`fedsec.shapley.binding`): SecretSV has no keys, hence no key
set-up; its session id hashes a fresh 128-bit nonce per role (clients, P, A, dealer).
Each role draws its own (:mod:`secrets`) and sends it to P in a ``secretsv/hello``; P
sends every role the list (``secretsv/session``); each role derives the session id from
that list itself and refuses to act unless its own nonce is in it -- so no role can be
put into a session it did not take part in, or an old one (the runner only relays).
Every message is bound to the session and its round, coalition, batch
group, layer and step (data, model, triple and opening shares name their recipient or
sender); each server checks what it reads against its own state: A decodes P's batch
order and each announced evaluation (fresh id, this round, rows of one group); a triple
must be of the evaluation and layer in flight and its id unused (a re-used triple would
let the other server difference two openings); an opening must be the *other* server's
(a server's own opening reflected back is refused); re-shares and label shares are taken
once per layer of the evaluation in flight. A client reconstructs each (evaluation,
layer) once, never an adjacent layer of an evaluation it served, and nothing of a round
earlier than one it served.
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
from fedsec.protocol import wire
from fedsec.protocol.accounting import Accounting
from fedsec.shapley.binding import (
    RE,
    RID,
    Context,
    ReplayRefused,
    bind,
    check_context,
    context_of,
    new_nonce,
    new_request_id,
    open_evaluation,
    request_id,
    session_from_nonces,
)
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

__all__ = ["secretsv_shapley", "Dealer"]

U64 = NDArray[np.uint64]
BoolArray = NDArray[np.bool_]
Q = sh.RING64
L = sh.LABEL_PRIME  # labels are shared modulo a prime: the zero test needs a field
_FRAC_MODEL = 20
_FRAC_DATA = 20
_FRAC_HIDDEN = 16
_MAX = 1 << 63
_MAX_ROWS = 1 << 24  # test samples per client a server accepts
PROTOCOL = "secretsv"
EV = "ev"
_NONCE_BYTES = 16
_MAX_ROLES = (1 << 16) + 3  # clients (a data share names one of 2^16) plus P, A, dealer


def _hello(role: str, nonce: bytes) -> bytes:
    """A role's fresh session nonce, for P to gather."""
    return wire.encode("secretsv/hello", {"role": role}, [nonce])


def _join(data: bytes, nonce: bytes, n_roles: int | None) -> str:
    """The session id of P's ``secretsv/session`` message (every role's nonce), derived
    here; ``ReplayRefused`` unless this role's own ``nonce`` is among them."""
    msg = wire.decode(data, expect="secretsv/session", max_bytes=64 * _MAX_ROLES)
    nonces = list(msg.blobs)
    if (n_roles is not None and len(nonces) != n_roles) or not 3 <= len(nonces) <= \
            _MAX_ROLES or any(len(v) != _NONCE_BYTES for v in nonces) \
            or len(set(nonces)) != len(nonces):
        raise ProtocolError("malformed session: nonces")
    if nonce not in nonces:
        raise ReplayRefused("a session without this role's nonce (a replayed or foreign "
                            "session)", check="session")
    return session_from_nonces(PROTOCOL, nonces)


def _need_session(session: str) -> str:
    if not session:
        raise ProtocolError("no session joined yet")
    return session


def _pow2_ceil(v: int) -> int:
    return 1 if v <= 1 else 1 << math.ceil(math.log2(v))


def _arr(data: bytes, shape: tuple[int, ...], what: str) -> U64:
    n = int(np.prod(shape))
    if len(data) != 8 * n:
        raise ProtocolError(f"malformed {what}: expected {8 * n} bytes, got {len(data)}")
    return np.frombuffer(data, dtype="<u8").astype(np.uint64).reshape(shape)


def _one_blob(data: bytes, kind: str) -> bytes:
    msg = wire.decode(data, expect=kind, max_bytes=1 << 34)
    if len(msg.blobs) != 1:
        raise ProtocolError(f"malformed {kind} message")
    return msg.blobs[0]


def _layers(spec: ModelSpec, params: Params) -> list[tuple[NDArray[np.float64],
                                                           NDArray[np.float64]]]:
    out = []
    for layer in spec.layers_of(params):
        if layer.spec.kind == "gru":
            raise ValueError("SecretSV evaluates dense and conv2d layers, not gru.")
        w, b = layer.matrix()
        out.append((np.asarray(w, np.float64), np.asarray(b, np.float64)))
    return out


class Dealer:
    """Produces Beaver matrix triples ``(U, V, U·V)`` and sends one share to each server.

    Each triple carries a fresh id and the context of the product it is for (session,
    round, coalition, batch, layer); a server uses a triple id once (a re-used triple
    would let the other server difference two openings). Like every SecretSV role, the
    dealer draws its own session nonce (:meth:`hello`) and deals only once it has joined
    a session that hashes it in (:meth:`join`)."""

    def __init__(self) -> None:
        self._rng = SystemRandomSource()
        self.nonce = new_nonce()
        self.session = ""

    def hello(self) -> bytes:
        """This dealer's fresh session nonce (``secretsv/hello``, for P)."""
        return _hello("dealer", self.nonce)

    def join(self, data: bytes) -> None:
        """Take the session P announces, if it holds this dealer's nonce."""
        if self.session:
            raise ProtocolError("already in a session")
        self.session = _join(data, self.nonce, None)

    def triple(self, d_out: int, d_in: int, m: int, acc: Accounting,
               ctx: Context | None = None) -> tuple[bytes, bytes]:
        """A triple for a ``d_out × d_in`` by ``d_in × m`` product in ``ctx`` (round,
        mask, batch, layer; the dealer's session is used)."""
        session = _need_session(self.session)
        ctx = (ctx or Context(session, PROTOCOL)).at(session=session, protocol=PROTOCOL)
        with acc.timed("share_generation"):
            u = sh.uniform_mod(Q, (d_out, d_in), self._rng)
            v = sh.uniform_mod(Q, (d_in, m), self._rng)
            c = u @ v
            parts = [sh.share(a, Q, self._rng) for a in (u, v, c)]
        meta = {"shape": [d_out, d_in, m]}
        tid = new_request_id()
        return (wire.encode("secretsv/triple", bind(meta, ctx.at(step="triple/P"), rid=tid),
                            [p[0].tobytes() for p in parts]),
                wire.encode("secretsv/triple", bind(meta, ctx.at(step="triple/A"), rid=tid),
                            [p[1].tobytes() for p in parts]))


@dataclass
class _Eval:
    """One (round, coalition, batch group) evaluation in flight at a server."""

    ctx: Context  # round, mask, batch (group); layer -1, step ""
    ev: str  # P's evaluation id
    rows: NDArray[np.int64]
    layer: int = 0  # the layer being computed (advances with each re-share)
    opened: bool = False  # this layer's triple consumed
    g: U64 | None = None  # (P) its share of r·(Ŷ − b) from the labels, until A answers
    #: per layer, the (bound, weight sum, scale bits) its output request announced
    announced: dict[int, tuple[int, int, int]] = field(default_factory=dict)


def _rows_list(value: Any, n_samples: int) -> NDArray[np.int64]:
    if not isinstance(value, list) or not 1 <= len(value) <= n_samples or not all(
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v < n_samples
            for v in value) or len(set(value)) != len(value):
        raise ProtocolError("malformed sample ids")
    return np.asarray(value, dtype=np.int64)


@dataclass
class _Server:
    """P or A: model and data shares; Beaver products on them.

    Every message a server reads is checked against its own state (see
    :mod:`fedsec.shapley.binding`): data and model shares addressed to it, of this session
    (and, for models, the current round); A's batch order and each evaluation P announces
    (fresh id, current round, rows of one announced group); per layer one fresh triple of
    this evaluation and layer, the other server's opening (never its own reflected), the
    client's re-share of this layer, and finally the label share."""

    name: str
    spec: ModelSpec
    x: U64 = field(default_factory=lambda: np.zeros((0, 0), np.uint64))
    y: U64 = field(default_factory=lambda: np.zeros(0, np.uint64))
    owner: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    xbound: dict[int, int] = field(default_factory=dict)
    models: dict[tuple[int, str], list[tuple[U64, U64]]] = field(default_factory=dict)
    bounds: dict[tuple[int, str], list[tuple[int, int]]] = field(default_factory=dict)
    n_clients: int | None = None  # when set, data shares must come from exactly these
    round: int = -1
    eval: _Eval | None = None
    order: list[NDArray[np.int64]] = field(default_factory=list)  # per group (A)
    evals_seen: set[str] = field(default_factory=set)
    triples_used: set[str] = field(default_factory=set)
    nonce: bytes = field(default_factory=new_nonce, init=False, repr=False)
    session: str = field(default="", init=False)

    @property
    def other(self) -> str:
        return "A" if self.name == "P" else "P"

    def _ctx(self, **kw: Any) -> Context:
        return Context(_need_session(self.session), PROTOCOL, **kw)

    def hello(self) -> bytes:
        """This server's fresh session nonce (``secretsv/hello``, for P)."""
        return _hello(self.name, self.nonce)

    def gather(self, hellos: Sequence[bytes]) -> bytes:
        """(P) Every other role's ``secretsv/hello``: the ``secretsv/session`` message
        for every role (their nonces and this server's)."""
        nonces = [self.nonce]
        for data in hellos:
            msg = wire.decode(data, expect="secretsv/hello", max_bytes=1 << 10)
            if len(msg.blobs) != 1 or len(msg.blobs[0]) != _NONCE_BYTES:
                raise ProtocolError("malformed hello: nonce")
            nonces.append(msg.blobs[0])
        if (self.n_clients is not None and len(nonces) != self.n_clients + 3) or len(
                set(nonces)) != len(nonces) or len(nonces) > _MAX_ROLES:
            raise ProtocolError("hellos must come from every role, once each")
        return wire.encode("secretsv/session", {}, sorted(nonces))

    def join(self, data: bytes) -> None:
        """Take the session P announces, if it holds this server's nonce."""
        if self.session:
            raise ProtocolError("already in a session")
        self.session = _join(data, self.nonce,
                             None if self.n_clients is None else self.n_clients + 3)

    def order_message(self, order: Sequence[NDArray[np.int64]]) -> bytes:
        """(P) The shuffled sample order per batch group, for A."""
        return wire.encode("secretsv/batches", bind({"order": [o.tolist() for o in order]},
                                                    self._ctx(step="batches")))

    def _need_eval(self) -> _Eval:
        if self.eval is None:
            raise ProtocolError(f"{self.name}: no evaluation in flight")
        return self.eval

    def start_round(self, t: int) -> None:
        """Accept models (and evaluations) of round ``t`` from now on."""
        self.round = t
        self.eval = None

    def receive_data(self, blobs: Sequence[bytes]) -> None:
        xs, ys, ow = [], [], []
        d = self.spec.in_features
        for data in blobs:
            msg = wire.decode(data, expect="secretsv/data", max_bytes=1 << 34)
            check_context(msg.meta, self._ctx(step=f"data/{self.name}"), what="data share")
            c, rows, bound = (msg.meta.get(k) for k in ("client", "rows", "bound"))
            if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                       for v in (c, rows, bound)) or len(msg.blobs) != 2 or c in self.xbound:
                raise ProtocolError("malformed data share")
            assert isinstance(c, int) and isinstance(rows, int) and isinstance(bound, int)
            if rows > _MAX_ROWS or not 0 < bound < _MAX or c >= (self.n_clients or 1 << 16):
                raise ProtocolError("malformed data share: client, rows or bound out of range")
            self.xbound[c] = bound
            xs.append(_arr(msg.blobs[0], (rows, d), "data share"))
            ys.append(_arr(msg.blobs[1], (rows,), "label share"))
            if rows and int(ys[-1].max()) >= L:
                raise ProtocolError("malformed data share: label share out of range")
            ow.append(np.full(rows, c, dtype=np.int64))
        if not xs or (self.n_clients is not None
                      and sorted(self.xbound) != list(range(self.n_clients))):
            raise ProtocolError("data shares must come from every client, once each")
        self.x, self.y, self.owner = np.concatenate(xs), np.concatenate(ys), np.concatenate(ow)

    def receive_model(self, data: bytes) -> None:
        msg = wire.decode(data, expect="secretsv/model", max_bytes=1 << 34)
        check_context(msg.meta, self._ctx(round=self.round, step=f"model/{self.name}"),
                      what="model share")
        rnd, key, bounds = msg.meta.get("round"), msg.meta.get("key"), msg.meta.get("bounds")
        shapes = [s for ly in self.spec.layers for s in
                  ((ly.out_features, ly.in_features), (ly.out_features,))]
        if isinstance(rnd, bool) or not isinstance(rnd, int) or not 0 <= rnd < 1 << 20 \
                or not isinstance(key, str) or not isinstance(bounds, list) or len(
                bounds) != len(self.spec.layers) or len(msg.blobs) != len(shapes):
            raise ProtocolError("malformed model share")
        if rnd != self.round:
            raise ReplayRefused("model share of another round", check="round")
        if not all(isinstance(b, list) and len(b) == 2 and all(
                isinstance(v, int) and not isinstance(v, bool) and 1 <= v < _MAX for v in b)
                for b in bounds):
            raise ProtocolError("malformed model bounds")
        arrs = [_arr(b, s, "model share") for b, s in zip(msg.blobs, shapes, strict=True)]
        self.models[(rnd, key)] = [(arrs[2 * k], arrs[2 * k + 1])
                                   for k in range(len(self.spec.layers))]
        self.bounds[(rnd, key)] = [(int(b[0]), int(b[1])) for b in bounds]

    def aggregated(self, rnd: int, keys: Sequence[str], q: Sequence[int], layer: int
                   ) -> tuple[U64, U64]:
        w = np.zeros_like(self.models[(rnd, keys[0])][layer][0])
        b = np.zeros_like(self.models[(rnd, keys[0])][layer][1])
        for k, qi in zip(keys, q, strict=True):
            wk, bk = self.models[(rnd, k)][layer]
            w = w + np.uint64(qi) * wk
            b = b + np.uint64(qi) * bk
        return w, b

    # ------------------------------------------------------------- evaluations
    def receive_order(self, data: bytes) -> None:
        """(A) P's shuffled sample order per batch group: every sample exactly once."""
        msg = wire.decode(data, expect="secretsv/batches", max_bytes=1 << 28)
        check_context(msg.meta, self._ctx(step="batches"), what="batch order")
        lists = msg.meta.get("order")
        n = len(self.y)
        if not isinstance(lists, list) or not 1 <= len(lists) <= max(n, 1):
            raise ProtocolError("malformed batch order")
        order = [_rows_list(o, n) for o in lists]
        every = np.concatenate(order)
        if len(every) != n or len(np.unique(every)) != n:
            raise ProtocolError("the batch order must hold every sample exactly once")
        self.order = order

    def announce_eval(self, mask: int, group: int, rows: NDArray[np.int64]) -> bytes:
        """(P) Start evaluating coalition ``mask`` of the current round on ``rows`` of
        group ``group``; the ``secretsv/eval`` message for A (fresh evaluation id)."""
        ctx = self._ctx(round=self.round, mask=mask, batch=group)
        ev = new_request_id()
        self.eval = _Eval(ctx, ev, rows)
        return wire.encode("secretsv/eval", bind({"rows": [int(r) for r in rows]},
                                                 ctx.at(step="eval"), rid=ev))

    def open_eval(self, data: bytes) -> None:
        """(A) Start the evaluation P announces: this session and round, a fresh id, rows
        of the announced group."""
        msg = wire.decode(data, expect="secretsv/eval", max_bytes=1 << 28)
        ctx, ev = open_evaluation(msg.meta, self._ctx(round=self.round), self.evals_seen)
        if ctx.batch >= len(self.order):
            raise ProtocolError("malformed evaluation: context")
        rows = _rows_list(msg.meta.get("rows"), len(self.y))
        if not np.isin(rows, self.order[ctx.batch]).all():
            raise ProtocolError("evaluation rows outside the announced group")
        self.evals_seen.add(ev)
        self.eval = _Eval(ctx.at(step=""), ev, rows)

    def batch_input(self) -> U64:
        """This server's share of the evaluation's input (d_in × m)."""
        out: U64 = self.x[self._need_eval().rows].T.copy()
        return out

    def open_share(self, w: U64, x: U64, triple: bytes) -> tuple[bytes, tuple[U64, U64, U64]]:
        """Beaver step 1: this server's shares of ``E = W − U`` and ``F = X − V``."""
        ev = self._need_eval()
        msg = wire.decode(triple, expect="secretsv/triple", max_bytes=1 << 34)
        check_context(msg.meta, ev.ctx.at(layer=ev.layer, step=f"triple/{self.name}"),
                      what="triple")
        tid = request_id(msg.meta, RID)
        if tid in self.triples_used or ev.opened:
            raise ReplayRefused("triple already used (a replayed triple)", check="request-id")
        if msg.meta.get("shape") != [*w.shape, x.shape[1]] or w.shape[1] != x.shape[0] \
                or len(msg.blobs) != 3:
            raise ProtocolError("triple does not fit the product")
        (d_out, d_in), m = w.shape, x.shape[1]
        u = _arr(msg.blobs[0], (d_out, d_in), "triple")
        v = _arr(msg.blobs[1], (d_in, m), "triple")
        c = _arr(msg.blobs[2], (d_out, m), "triple")
        self.triples_used.add(tid)
        ev.opened = True
        out = wire.encode("secretsv/open", bind({}, ev.ctx.at(
            layer=ev.layer, step=f"open/{self.name}"), re_=ev.ev),
            [(w - u).tobytes(), (x - v).tobytes()])
        return out, (u, v, c)

    def _opening(self, data: bytes, who: str) -> wire.Message:
        ev = self._need_eval()
        msg = wire.decode(data, expect="secretsv/open", max_bytes=1 << 34)
        check_context(msg.meta, ev.ctx.at(layer=ev.layer, step=f"open/{who}"),
                      what=f"opening of {who}")
        if request_id(msg.meta, RE) != ev.ev:
            raise ReplayRefused("opening of another evaluation", check="request-id")
        return msg

    def beaver(self, mine: bytes, theirs: bytes, uvc: tuple[U64, U64, U64], bias: U64,
               principal: bool) -> U64:
        """Beaver step 2: this server's share of ``W·X + b`` (``theirs`` must be the
        other server's opening of this evaluation and layer)."""
        u, v, c = uvc
        a = self._opening(mine, self.name)
        b = self._opening(theirs, self.other)
        if len(a.blobs) != 2 or len(b.blobs) != 2:
            raise ProtocolError("malformed opening: two blobs expected")
        e = _arr(a.blobs[0], u.shape, "opening") + _arr(b.blobs[0], u.shape, "opening")
        f = _arr(a.blobs[1], v.shape, "opening") + _arr(b.blobs[1], v.shape, "opening")
        z: U64 = e @ v + u @ f + c + bias[:, None]
        if principal:
            z = z + e @ f
        return z

    def output(self, z: U64, meta: dict[str, Any]) -> bytes:
        """This server's share of the layer output for the reconstructing client."""
        ev = self._need_eval()
        if all(isinstance(meta.get(k), int) for k in ("bound", "weight_sum", "scale_bits")):
            ev.announced[ev.layer] = (meta["bound"], meta["weight_sum"], meta["scale_bits"])
        return wire.encode("secretsv/output", bind({**meta, EV: ev.ev}, ev.ctx.at(
            layer=ev.layer, step="output")), [z.tobytes()])

    def _answer(self, data: bytes, kind: str, shape: tuple[int, ...], n_blobs: int = 1
                ) -> tuple[U64, wire.Message]:
        ev = self._need_eval()
        msg = wire.decode(data, expect=kind, max_bytes=1 << 34)
        step = kind.split("/")[1]
        check_context(msg.meta, ev.ctx.at(layer=ev.layer, step=f"{step}/{self.name}"),
                      what=kind)
        if request_id(msg.meta, RE) != ev.ev or not ev.opened:
            raise ReplayRefused(f"{kind} answers no output of this evaluation and layer",
                                check="request-id")
        if len(msg.blobs) != n_blobs:
            raise ProtocolError(f"malformed {kind} message")
        x = _arr(msg.blobs[0], shape, kind)
        ev.layer += 1
        ev.opened = False
        return x, msg

    def receive_share(self, data: bytes, d: int, m: int) -> tuple[U64, int]:
        """The client's re-share of this layer's activated output, and its bound."""
        x, msg = self._answer(data, "secretsv/reshare", (d, m))
        nb = msg.meta.get("bound")
        if isinstance(nb, bool) or not isinstance(nb, int) or not 0 < nb < _MAX:
            raise ProtocolError("malformed re-share bound")
        layer = self._need_eval().layer - 1  # the layer this re-share follows
        cap = reshare_cap(self._need_eval().announced.get(layer),
                          self.spec.layers[layer].activation, _FRAC_HIDDEN)
        if cap is not None and nb > cap:  # a bound no honest activation reaches
            raise ProtocolError("re-share bound beyond what the layer's output allows")
        return x, nb

    def label_mask(self, to_p: bytes) -> bytes:
        """(P) The client's zero-test part ``(b', g')`` (:func:`fedsec.crypto.sharing.
        zero_test_deal`, modulo the prime ``2^61 − 1``): P keeps ``g'`` and sends A
        ``f' = Y' − b'`` (uniform to A, which lacks ``b'``)."""
        ev = self._need_eval()
        m = len(ev.rows)
        b_p, msg = self._answer(to_p, "secretsv/labels", (m,), n_blobs=2)
        g_p = _arr(msg.blobs[1], (m,), "label share")
        if m and max(int(b_p.max()), int(g_p.max())) >= L:
            raise ProtocolError("malformed secretsv/labels message: share out of range")
        ev.g = g_p
        return wire.encode("secretsv/label-mask", bind({}, ev.ctx.at(
            layer=ev.layer - 1, step="label-mask"), re_=ev.ev),
            [sh.zero_test_mask(self.y[ev.rows], b_p, L).tobytes()])

    def label_diff(self, data: bytes, mask_p: bytes) -> bytes:
        """(A) Its zero-test share ``z'' = g'' − r·(Y − b)`` of ``r·(Ŷ − Y)`` for P, from
        the client's ``(r, b'', g'')`` and P's ``f'`` -- never ``Ŷ'' − Y''``, which would
        give P the exact error (and, with it, the label)."""
        ev = self._need_eval()
        m = len(ev.rows)
        r, msg = self._answer(data, "secretsv/labels", (m,), n_blobs=3)
        b_a = _arr(msg.blobs[1], (m,), "label share")
        g_a = _arr(msg.blobs[2], (m,), "label share")
        pm = wire.decode(mask_p, expect="secretsv/label-mask", max_bytes=1 << 34)
        check_context(pm.meta, ev.ctx.at(layer=ev.layer - 1, step="label-mask"),
                      what="label mask")
        if request_id(pm.meta, RE) != ev.ev:
            raise ReplayRefused("label mask of another evaluation", check="request-id")
        if len(pm.blobs) != 1:
            raise ProtocolError("malformed secretsv/label-mask message")
        f_p = _arr(pm.blobs[0], (m,), "label mask")
        if m and (int(r.min()) == 0 or max(int(r.max()), int(b_a.max()), int(g_a.max()),
                                           int(f_p.max())) >= L):
            raise ProtocolError("label shares out of range (or a zero multiplier)")
        z_a = sh.zero_test_respond(f_p, self.y[ev.rows], r, b_a, g_a, L)
        self.eval = None
        return wire.encode("secretsv/label-diff", bind({}, ev.ctx.at(
            layer=ev.layer - 1, step="label-diff"), re_=ev.ev), [z_a.tobytes()])

    def compare(self, diff_a: bytes) -> BoolArray:
        """(P) A's zero-test share: True where ``r·(Ŷ − Y) = 0`` (a right prediction).
        P learns this bit only: for a wrong one the value is uniform over ``[1, L)``."""
        ev = self._need_eval()
        msg = wire.decode(diff_a, expect="secretsv/label-diff", max_bytes=1 << 34)
        check_context(msg.meta, ev.ctx.at(layer=ev.layer - 1, step="label-diff"),
                      what="label difference")
        if request_id(msg.meta, RE) != ev.ev:
            raise ReplayRefused("label difference of another evaluation", check="request-id")
        if ev.g is None:
            raise ProtocolError("a label difference before the labels")
        if len(msg.blobs) != 1:
            raise ProtocolError("malformed label difference")
        z_a = _arr(msg.blobs[0], (len(ev.rows),), "label diff")
        if z_a.size and int(z_a.max()) >= L:
            raise ProtocolError("malformed label difference: out of range")
        out: BoolArray = sh.zero_test_open(ev.g, z_a, L)
        self.eval = None
        return out


@dataclass
class _Client:
    index: int
    n: int
    spec: ModelSpec
    x: NDArray[np.float64]
    y: NDArray[np.int64]
    rng: SystemRandomSource = field(default_factory=SystemRandomSource)
    answered: set[tuple[str, int]] = field(default_factory=set)  # (evaluation id, layer)
    seen: dict[tuple[int, int, int], set[int]] = field(default_factory=dict)
    served_round: int = 0  # the newest round served: rounds are evaluated in order
    #: its own view under the decryption rule (fedsec.shapley.views); None: Prop. 6.8
    view: ClientView | None = None
    nonce: bytes = field(default_factory=new_nonce, init=False, repr=False)
    session: str = field(default="", init=False)

    def _ctx(self, **kw: Any) -> Context:
        return Context(_need_session(self.session), PROTOCOL, **kw)

    def hello(self) -> bytes:
        """This client's fresh session nonce (``secretsv/hello``, for P)."""
        return _hello(f"client:{self.index}", self.nonce)

    def join(self, data: bytes) -> None:
        """Take the session P announces, if it holds this client's nonce."""
        if self.session:
            raise ProtocolError("already in a session")
        self.session = _join(data, self.nonce, self.n + 3)

    def share_model(self, rnd: int, key: str, params: Params, acc: Accounting
                    ) -> tuple[bytes, bytes]:
        p_blobs: list[bytes] = []
        a_blobs: list[bytes] = []
        bounds = []
        for k, (w, b) in enumerate(_layers(self.spec, params)):
            fx = _FRAC_DATA if k == 0 else _FRAC_HIDDEN
            wq = np.rint(np.ldexp(w, _FRAC_MODEL)).astype(np.int64)
            bq = np.rint(np.ldexp(b, _FRAC_MODEL + fx)).astype(np.int64)
            bounds.append([_pow2_ceil(int(np.abs(wq).sum(axis=1).max())),
                           _pow2_ceil(int(np.abs(bq).max()) if bq.size else 0)])
            with acc.timed("share_generation"):
                for arr in (wq, bq):
                    s1, s2 = sh.share(sh.to_residues(arr, Q), Q, self.rng)
                    p_blobs.append(s1.tobytes())
                    a_blobs.append(s2.tobytes())
        meta = {"round": rnd, "key": key, "bounds": bounds}
        return (wire.encode("secretsv/model", bind(meta, self._ctx(round=rnd,
                                                                  step="model/P")), p_blobs),
                wire.encode("secretsv/model", bind(meta, self._ctx(round=rnd,
                                                                  step="model/A")), a_blobs))

    def share_data(self, acc: Accounting) -> tuple[bytes, bytes]:
        xq = sh.encode_fixed(self.x, _FRAC_DATA, Q)
        bound = _pow2_ceil(int(np.abs(sh.centre(xq, Q)).max())) if xq.size else 1
        with acc.timed("share_generation"):
            x1, x2 = sh.share(xq, Q, self.rng)
            y1, y2 = sh.share(self.y.astype(np.uint64), L, self.rng)
        meta = {"client": self.index, "rows": len(self.y), "bound": bound}
        return (wire.encode("secretsv/data", bind(meta, self._ctx(step="data/P")),
                            [x1.tobytes(), y1.tobytes()]),
                wire.encode("secretsv/data", bind(meta, self._ctx(step="data/A")),
                            [x2.tobytes(), y2.tobytes()]))

    def reconstruct(self, from_p: bytes, from_a: bytes, acc: Accounting
                    ) -> tuple[bytes, bytes]:
        """Reconstruct a layer's output, check, activate and re-share (or share labels).

        Both shares must be of this session, for the layer they name, of an evaluation
        (id, layer) not answered before; this client refuses a layer of an evaluation of
        which it reconstructed the same or an adjacent layer (its own memory)."""
        a = wire.decode(from_p, expect="secretsv/output", max_bytes=1 << 34)
        b = wire.decode(from_a, expect="secretsv/output", max_bytes=1 << 34)
        if a.meta != b.meta:
            raise ProtocolError("the servers sent different requests")
        meta = a.meta
        layer, d, m, bound = (meta.get(k) for k in ("layer", "d", "m", "bound"))
        scale, wsum = meta.get("scale_bits"), meta.get("weight_sum")
        n_layers = len(self.spec.layers)
        if not all(isinstance(v, int) and not isinstance(v, bool)
                   for v in (layer, d, m, bound, scale, wsum)):
            raise ProtocolError("malformed output request")
        assert isinstance(layer, int) and isinstance(d, int) and isinstance(m, int)
        assert isinstance(bound, int) and isinstance(scale, int) and isinstance(wsum, int)
        if not 0 <= layer < n_layers or d != self.spec.layers[layer].out_features \
                or not 1 <= m <= 1 << 24 or not 0 < bound < _MAX or not 1 <= wsum <= 1 << 40 \
                or scale != _FRAC_MODEL + (_FRAC_DATA if layer == 0 else _FRAC_HIDDEN):
            raise ProtocolError("malformed output request")
        owners, mowners, previous = (meta.get("batch_owners"), meta.get("model_owners"),
                                     meta.get("previous"))
        if not (isinstance(owners, list) and isinstance(mowners, list)
                and isinstance(previous, int) and len(a.blobs) == 1 and len(b.blobs) == 1
                and all(isinstance(v, int) for v in owners + mowners)):
            raise ProtocolError("malformed output request")
        got = context_of(meta)
        ctx = check_context(meta, self._ctx(round=got.round, mask=got.mask, batch=got.batch,
                                            layer=layer, step="output"), what="output")
        if min(ctx.round, ctx.mask, ctx.batch) < 0:
            raise ProtocolError("malformed output request: context")
        local = False
        if self.view is None:
            check_decryptor(self.index, layer, n_layers, owners, mowners, previous)
        else:
            local = self.view.check_request(ctx.round, ctx.mask, meta.get("samples"), owners,
                                            m, first_layer=layer == 0)
        ev = request_id(meta, EV)
        if ctx.round < self.served_round:
            raise ReplayRefused("output of an earlier round (a replay)", check="round")
        if (ev, layer) in self.answered:
            raise ReplayRefused("output already reconstructed (a replay)", check="request-id")
        key = (ctx.round, ctx.mask, ctx.batch)
        seen = self.seen.get(key, set())
        if layer in seen:
            raise ReplayRefused("this layer of the evaluation was already reconstructed "
                                "here (a replay)", check="layer")
        if {layer - 1, layer + 1} & seen and not local:
            raise ProtocolError("refusing to reconstruct two consecutive layers "
                                "(i_{l+1} = i_l; this client did an adjacent layer)")
        p_share = _arr(a.blobs[0], (d, m), "output share")
        a_share = _arr(b.blobs[0], (d, m), "output share")
        self.answered.add((ev, layer))
        self.served_round = ctx.round
        self.seen.setdefault(key, set()).add(layer)
        with acc.timed("decryption"):
            vals = sh.reconstruct(p_share, a_share, Q)
        if vals.size and max(int(vals.max()), -int(vals.min())) > bound:  # |-2^63| wraps
            raise ProtocolError("reconstructed values exceed the announced bound")
        real = vals.astype(np.float64) / (float(wsum) * 2.0 ** scale)
        out = activate(self.spec.layers[layer].activation, real)
        if layer < n_layers - 1:
            xq = sh.encode_fixed(out, _FRAC_HIDDEN, Q)
            xb = _pow2_ceil(int(np.abs(sh.centre(xq, Q)).max())) if xq.size else 1
            with acc.timed("share_generation"):
                s1, s2 = sh.share(xq, Q, self.rng)
            m2 = {"bound": xb}
            return (wire.encode("secretsv/reshare", bind(m2, ctx.at(step="reshare/P"), re_=ev),
                                [s1.tobytes()]),
                    wire.encode("secretsv/reshare", bind(m2, ctx.at(step="reshare/A"), re_=ev),
                                [s2.tobytes()]))
        labels = np.argmax(out, axis=0).astype(np.uint64)
        with acc.timed("share_generation"):  # the zero test's correlated randomness
            to_p, to_a = sh.zero_test_deal(labels, L, self.rng)
        return (wire.encode("secretsv/labels", bind({}, ctx.at(step="labels/P"), re_=ev),
                            [v.tobytes() for v in to_p]),
                wire.encode("secretsv/labels", bind({}, ctx.at(step="labels/A"), re_=ev),
                            [v.tobytes() for v in to_a]))


@dataclass
class _Run:
    record: TrainingRecord
    acc: Accounting
    clients: list[_Client]
    P: _Server
    A: _Server
    dealer: Dealer
    groups: list[list[int]]
    strong: bool
    order: list[NDArray[np.int64]]  # per group, the shuffled sample order
    leader: int
    turn: int = 0
    sched: Scheduler | None = None  # the decryption rule (None: Prop. 6.8's schedule)

    @property
    def n_samples(self) -> int:
        return len(self.P.y)

    def upload_round(self, t: int) -> None:
        rnd = self.record.rounds[t]
        self.P.start_round(t)
        self.A.start_round(t)
        jobs = [(self.leader, "global", rnd.global_params)]
        jobs += [(c, f"c{c}", p) for c, p in zip(rnd.participants, rnd.local_params,
                                                   strict=True)]
        for owner, key, params in jobs:
            bp, ba = self.clients[owner].share_model(t, key, params, self.acc)
            self.P.receive_model(self.acc.message(f"client:{owner}", "P", "model", bp))
            self.A.receive_model(self.acc.message(f"client:{owner}", "A", "model", ba))

    def end_round(self, t: int) -> None:
        for srv in (self.P, self.A):
            for key in [k for k in srv.models if k[0] == t]:
                del srv.models[key]

    def evaluate(self, t: int, mask: int, rows: NDArray[np.int64] | None) -> BoolArray:
        rnd = self.record.rounds[t]
        if mask == 0:
            keys, q, mowners = ["global"], [1], []
        else:
            qa = integer_weights(rnd.weights)
            sel = [j for j in range(len(rnd.participants)) if mask >> j & 1]
            keys = [f"c{rnd.participants[j]}" for j in sel]
            q = [int(qa[j]) for j in sel]
            mowners = [rnd.participants[sel[0]]] if len(sel) == 1 else []
        todo = np.zeros(self.n_samples, dtype=bool)
        todo[np.arange(self.n_samples) if rows is None else rows] = True
        correct = np.zeros(self.n_samples, dtype=bool)
        n_layers = len(self.record.spec.layers)
        for g, members in enumerate(self.groups):
            brows = self.order[g][todo[self.order[g]]]
            if brows.size == 0:
                continue
            if self.sched is None:
                chain = decryptor_chain(len(self.clients), n_layers, members, mowners,
                                        self.strong, self.turn)
            else:
                chain = self.sched.chain(t, mask, brows, n_layers, self.turn)
            self.turn += 1
            self.A.open_eval(self.acc.message("P", "A", "eval",
                                              self.P.announce_eval(mask, g, brows)))
            x_p, x_a = self.P.batch_input(), self.A.batch_input()
            xb = max(self.P.xbound.get(c, 1) for c in members)
            previous, m = -1, len(brows)
            for layer, ly in enumerate(self.record.spec.layers):
                fx = _FRAC_DATA if layer == 0 else _FRAC_HIDDEN
                bound = sum(qi * (self.P.bounds[(t, k)][layer][0] * xb
                                  + self.P.bounds[(t, k)][layer][1])
                            for k, qi in zip(keys, q, strict=True))
                if bound >= _MAX:
                    raise sh.FixedPointOverflow("a linear output may exceed 2^63 in fixed "
                                                "point; SecretSV refuses rather than wrap")
                tp, ta = self.dealer.triple(ly.out_features, ly.in_features, m, self.acc,
                                            Context(self.dealer.session, PROTOCOL, t, mask,
                                                    g, layer))
                tp = self.acc.message("dealer", "P", "triple", tp)
                ta = self.acc.message("dealer", "A", "triple", ta)
                with self.acc.timed("arithmetic"):
                    wp, bp = self.P.aggregated(t, keys, q, layer)
                    wa, ba = self.A.aggregated(t, keys, q, layer)
                    op, uvc_p = self.P.open_share(wp, x_p, tp)
                    oa, uvc_a = self.A.open_share(wa, x_a, ta)
                op = self.acc.message("P", "A", "open", op)
                oa = self.acc.message("A", "P", "open", oa)
                with self.acc.timed("arithmetic"):
                    zp = self.P.beaver(op, oa, uvc_p, bp, True)
                    za = self.A.beaver(oa, op, uvc_a, ba, False)
                meta = {"layer": layer, "d": ly.out_features, "m": m, "bound": int(bound),
                        "scale_bits": _FRAC_MODEL + fx, "weight_sum": int(sum(q)),
                        "batch_owners": members, "model_owners": mowners,
                        "previous": previous}
                if self.sched is not None:  # the client checks its view per sample
                    meta["samples"] = [int(v) for v in brows]
                dec = chain[layer]
                fp = self.acc.message("P", f"client:{dec}", "output", self.P.output(zp, meta))
                fa = self.acc.message("A", f"client:{dec}", "output", self.A.output(za, meta))
                to_p, to_a = self.clients[dec].reconstruct(fp, fa, self.acc)
                to_p = self.acc.message(f"client:{dec}", "P", "share", to_p)
                to_a = self.acc.message(f"client:{dec}", "A", "share", to_a)
                previous = dec
                if layer < n_layers - 1:
                    x_p, xb = self.P.receive_share(to_p, ly.out_features, m)
                    x_a, _ = self.A.receive_share(to_a, ly.out_features, m)
                else:
                    with self.acc.timed("arithmetic"):
                        mask_p = self.acc.message("P", "A", "label-mask",
                                                  self.P.label_mask(to_p))
                        diff_a = self.acc.message("A", "P", "label-diff",
                                                  self.A.label_diff(to_a, mask_p))
                    with self.acc.timed("arithmetic"):
                        correct[brows] = self.P.compare(diff_a)
        return correct[todo] if rows is not None else correct


def open_session(acc: Accounting, clients: Sequence[_Client], P: _Server, A: _Server,
                 dealer: Dealer) -> None:
    """Relay every role's nonce to P and P's session message to every role (each role
    derives the session id and checks its own nonce is hashed into it)."""
    hellos = [acc.message(f"client:{c.index}", "P", "hello", c.hello()) for c in clients]
    hellos += [acc.message("A", "P", "hello", A.hello()),
               acc.message("dealer", "P", "hello", dealer.hello())]
    offer = P.gather(hellos)
    P.join(offer)
    for c in clients:
        c.join(acc.message("P", f"client:{c.index}", "session", offer))
    A.join(acc.message("P", "A", "session", offer))
    dealer.join(acc.message("P", "dealer", "session", offer))


def secretsv_shapley(record: TrainingRecord, test_sets: TestSets, *, estimator: str = "exact",
                     budget: int | None = None, sample_skip: bool = False, seed: int = 0,
                     schedule: str = "strict",
                     progress: Callable[[str], None] | None = None) -> SecureShapleyResult:
    """Federated Shapley values with SecretSV (seed 004's pure secret-sharing baseline).

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
                      f"all {n_layers + 2} parties of a reconstruction chain distinct (seed "
                      "004, Prop. 6.8): two clients alternate.", PrivacyWarning, stacklevel=2)
    acc = Accounting()
    t0 = time.perf_counter()
    with threadpool_limits(limits=1, user_api="blas"):
        # No keys, so no key set-up: the session is the hash of a fresh nonce per role
        # (clients, P, A, dealer, each drawing and checking its own); binding every
        # message to it stops replays from other runs (fedsec.shapley.binding)
        clients = [_Client(i, n, record.spec, x, y,
                           view=ClientView(space, i) if strict else None)
                   for i, (x, y) in enumerate(sets)]
        P = _Server("P", record.spec, n_clients=n)
        A = _Server("A", record.spec, n_clients=n)
        dealer = Dealer()
        open_session(acc, clients, P, A, dealer)
        to_p, to_a = [], []
        for c in clients:
            bp, ba = c.share_data(acc)
            to_p.append(acc.message(f"client:{c.index}", "P", "data", bp))
            to_a.append(acc.message(f"client:{c.index}", "A", "data", ba))
        P.receive_data(to_p)
        A.receive_data(to_a)
        order = [shuffle(np.flatnonzero(np.isin(P.owner, g))) for g in groups]
        A.receive_order(acc.message("P", "A", "batches", P.order_message(order)))
        run = _Run(record, acc, clients, P, A, dealer, groups, strong, order,
                   leader=secrets.randbelow(n),
                   sched=Scheduler(space, n, P.owner) if strict else None)
        if run.sched is not None and estimator == "exact" and not sample_skip:
            for t, rnd in enumerate(record.rounds):  # refuse before any work
                for o in order:
                    run.sched.plan(t, list(range(1 << len(rnd.participants))),
                                   [int(v) for v in o])
        result = run_rounds(run, estimator, budget or 0, sample_skip, seed, progress,
                            "secretsv")
    result.seconds = time.perf_counter() - t0
    result.accounting = acc
    return result
