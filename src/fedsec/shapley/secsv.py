"""SecSV (seed 004, Sec. 5, Alg. 3-4, 6-7): two servers, BFV-encrypted models, shared data.

Roles and messages (everything between roles is bytes, counted by
:class:`~fedsec.protocol.accounting.Accounting`):

* **clients** ``0..n-1`` run the authenticated key set-up (:mod:`fedsec.crypto.keysetup`,
  the principal server relays it) and derive the *same* BFV keys from its shared seed
  (:meth:`fedsec.crypto.bfv.BFVContext.from_seed`); the servers never get a secret key.
  Each client encrypts its local models (the leader also the global models) in Matrix
  Reducing layout and sends them to both servers, and splits its test data and labels into
  additive shares modulo the BFV plaintext prime ``t`` — one share to the **principal
  server P**, the other to the **auxiliary server A** (Alg. 3, step 3).
* **P and A** evaluate every layer's linear map on their own share with c2p products
  (Matrix Reducing "Half", Alg. 5); A sends its encrypted share product to P, who adds them
  (Alg. 4, steps 4-6), masks what the decryptor must not see, and sends the sum to the
  decrypting client ``i_{l+1}``. That client decrypts, centres, rescales, activates and
  re-shares the next layer's input to P and A (steps 7-9); after the last layer it deals a
  *zero test* of its predicted labels instead of sharing them (steps 11-14, departing from
  the paper, :func:`fedsec.crypto.sharing.zero_test_deal`): P gets ``(b', g')``, A gets
  ``(r, b'', g'')`` with ``r`` uniform non-zero and ``g = r·(Ŷ − b)``; P sends A
  ``f' = Y' − b'``, A returns ``g'' − r·(Y − b)``, and P opens ``r·(Ŷ − Y)`` mod ``t``:
  zero exactly for the correctly predicted samples, whose IDs ``Φ`` it records.
* **Who decrypts what** (``schedule="strict"``, the default; fedsec departs from the
  paper here): the decryption rule of :mod:`fedsec.shapley.views`. Prop. 6.8 keeps a
  client from decrypting its own model's output and its own samples, but a client also
  *knows* the global models ``θ^t``, ``θ^{t+1}`` and their combinations with its own
  model, and a first layer's output is linear in the batch: a client asked to decrypt
  ``θ^t``'s output on another client's batch (which Prop. 6.8 allows) solves for the
  batch, and then for models. So every batch has one owner; the owner evaluates the
  models it knows (``θ^t``, ``θ^{t+1}``, everybody but itself) on its own samples; every
  other coalition's first-layer output goes to a client whose whole view (every output it
  decrypted, per sample, over all rounds) then holds no combination that is a model it
  knows; later layers never go to a client that knows the model. P's
  :class:`~fedsec.shapley.views.Scheduler` places the decryptions (for exact SSVs all of
  them before any model is encrypted) and refuses the run
  (:class:`~fedsec.shapley.views.UnsafeSchedule`) when it finds no placement -- with
  every client in every round of a small federation none exists (the module
  says why); estimators with small budgets and rounds that leave clients out schedule.
  Each client keeps its own view and refuses a request that breaks the rule
  (:class:`~fedsec.errors.PolicyViolation`), so a P that schedules wrongly is stopped by
  the clients. ``schedule="paper"`` restores Prop. 6.8's schedule below, with a
  :class:`~fedsec.errors.PrivacyWarning`.
* Prop. 6.8's schedule (``schedule="paper"``): batches mix the samples of a *group* of
  clients (P shuffles each group with cryptographic randomness). Who decrypts follows
  Prop. 6.8: ``i_{l+1} ≠ i_l`` (``i_1`` are the batch's owners), no owner of the model
  under test in the chain, and ``i_{L+1}`` not a batch owner; with enough clients the
  chain is all distinct (the multi-layer level, ``n >= L + 2`` with one batch owner);
  with fewer it alternates two clients and a :class:`~fedsec.errors.PrivacyWarning` says
  so; with too few, SecSV refuses. A client refuses to decrypt a request that breaks
  these rules.
* **SampleSkip** (Alg. 6-7) runs at P exactly as :class:`~fedsec.shapley.utility.RoundGame`
  does in the clear; skipped samples are left out of the batches (or, with the linearity
  shortcut, masked with uniform noise before decryption, and their zero test voided: P
  opens uniform values there, not ``r·(0 − y)``, which would be zero where ``y = 0``).

Exactness (why BFV): products are exact modulo ``t`` (a 55-bit prime). P picks the fixed
point (``f_θ``, ``f_x``) from powers-of-two bounds every model and data owner publishes
(``secsv/bounds``: ``‖W‖_∞``, ``‖b‖_∞``, ``‖X‖_∞``; a leak of a few bits of magnitude),
leaving 3 bits of margin under ``t/2``; the exact fixed-point budget is
``Σ_{i∈S} q_i·(‖W_i‖_∞·‖X‖_∞ + ‖b_i‖_∞)·2^{f_θ+f_x} < t/2`` with integer aggregation
weights ``q_i``, checked by P *before* computing, from powers-of-two bounds the model
owners and data owners (or re-sharing clients) publish; a violation raises
:class:`~fedsec.crypto.sharing.FixedPointOverflow` instead of wrapping, and the decrypting
client checks its centred values against the bound (``ProtocolError`` otherwise).

Beyond the paper (``linear_shortcut=True``, default): the first layer is linear in the
model and ``θ_S = Σ ω_{i|S} θ_i``, so ``lin(θ_S, X) = Σ ω_{i|S} lin(θ_i, X)``: P and A compute
``n + 1`` local products per round once, and every subset's first-layer output is a
plaintext-weighted sum of ciphertexts. For one-layer (logistic) models this removes the
``2^n`` factor from the HE work. The decrypting client sees exactly what the paper's
protocol shows it (the first-layer output of ``θ_S`` on the batch, up to a public scale).

Derived decryption (``derived_decryption``, only with ``schedule="paper"``, where it is the
default for one-layer models with the shortcut, exact SSVs and no SampleSkip; the rule
refuses it -- the client would hold the global model's output on the batch, and its own
model's by subtraction, every round): one decryption request per batch and round instead of one
per coalition. P sends the batch's decrypting client ``d`` (not a batch owner) the global
model's output, ``q_i·lin(θ_i, X_b)`` of every *other* participant and, if ``d``
participates, one pair ``q_d·lin(θ_d, X_b) + q_p·lin(θ_p, X_b)`` (``p`` the first other
participant: the term list is fixed by the participants, so P's metadata alone cannot
relabel a ciphertext); ``d`` derives every
coalition's output exactly (``Σ_{i∈S} q_i·lin(θ_i, X_b)``, checked against P's bounds),
predicts, and deals the zero test of the ``2^k`` coalitions' labels (one ``b`` per sample,
a fresh ``r`` per coalition and sample), from which P opens every ``r_S·(Ŷ_S − Y)``.
What ``d`` learns is what the paper's protocol shows a client that P
picks to decrypt every coalition but ``{d}`` on batch ``b`` -- a schedule Prop. 6.8
allows (it forbids decrypting one's own samples or one's own model's *singleton*): in
particular ``d`` learns ``lin(θ_d, X_b)``, as it would in the paper by subtracting ``{p}``
from ``{d, p}``. It never receives its own singleton or its own samples, and refuses a
request that asks for either, or a label table of more than ``2^22`` coalition × sample
entries (P decrypts per coalition beyond it). P learns, per coalition and sample, whether
the prediction is right, as in the per-coalition protocol. With SampleSkip or an
estimator the mode is off (the paper would show the client fewer coalitions);
``derived_decryption=False`` restores
one request per coalition with rotating decryptors.

Folded Matrix Reducing: when a batch uses fewer than ``⌊N/d_out⌋`` columns, ``c`` diagonals
share one ciphertext (in separate slot segments), cutting model encryptions and products
by ``c``; P adds a random mask whose segments sum to 0 (and uniform noise in skipped
columns), so the decryptor learns only the segment sum — the product — as in the paper.

Rotation layout (beyond the paper; :func:`fedsec.crypto.reducing.rotation_period`): when a
layer's (folded) grid fills both BFV batching rows in whole grid rows -- MNIST CNN's
256 -> 64 layer at width 32 -- the clients encrypt the model's rows in a layout where data
plaintext ``a·L + b`` is base ``a`` with both batching rows rotated by ``b`` grid rows. A
row rotation of an NTT-form plaintext is a permutation of its coefficients, so P and A
encode and NTT one base per ``L`` plaintexts and permute for the others
(:meth:`fedsec.crypto.bfv.BFVContext.rotations_ntt`): the same plaintexts, products and
decrypted values as encoding each one; no message changes size or meaning to any role but
the (public, plan-determined) order of the inner index in the model's ciphertexts.

Convolutions (:class:`LayerPlan`, :func:`im2col`): a conv layer is the kernel matrix
(``out_channels × C·k²``, bias per channel) times the im2col patches of the batch
(``C·k² × per·m``, ``per`` output positions per sample), not the unrolled ``d_out × d_in``
matrix: a model's conv layer is ``C·k²`` diagonals instead of ``d_in`` (MNIST CNN: 49
instead of 784), and so are P's and A's products. The clients share raw inputs as for a
dense layer; im2col is a public gather, so P and A unfold their own shares (shares of the
patches, exact mod ``t``, no extra bytes). The grid has ``out_channels`` rows and
``per·width`` columns (the same slots as ``d_out × width``); the decrypting client reads it
back as the channel-major ``(C_out, H_out, W_out)`` features the next layer expects.

Threat model: semi-honest P, A and clients; P and A do not collude (with each other, or
either with a client); the clients share the BFV secret key (as the paper's leader
broadcasts it). P learns ``Φ_S`` (the ID sets) and the utilities, as the paper states, and
nothing more of the labels: the paper's P reconstructs ``Ŷ − Y``, whose non-zero values
pin labels (the sign of a binary error is the label; over rounds P pinned 128 of 200 BANK
labels), so fedsec opens ``r·(Ŷ − Y)`` instead -- for a wrong prediction uniform over
the non-zero residues mod the prime ``t``, whatever the error. A learns nothing but
ciphertexts, uniform shares, the multipliers ``r`` and ``Y − b`` (uniform: ``b'`` is
unknown to it). The predicting client receives nothing back; colluding with A it would
learn the batch's labels (it knows ``b``), with P too (it knows ``r`` and ``Ŷ``) --
collusion is outside this threat model, and before the change P alone learned them. Why
the predicting client deals the test: it is the one role that knows ``Ŷ`` and nothing of
``Y``, so SecSV needs neither a dealer nor a homomorphic product (one under A's own BFV
key would need noise flooding: A, knowing its encryption noise, could read P's multiplier
off the decrypted noise). A decrypting client learns one layer's output on a batch of
other clients' samples (and, at the last layer, predicted labels), as in the paper, but
under the decryption rule never a combination of outputs that is a model it knows (so it
cannot solve for the samples by linear algebra; the paper's assumption that a linear
layer's output with *unknown* parameters reveals neither input nor parameters remains);
under ``schedule="paper"`` it can solve for other clients' samples; BFV ciphertexts are
not circuit-private (noise is not flooded), which the paper's CKKS protocol does not
provide either. Sizes and parameters in messages are checked by their receivers;
malformed bytes raise :class:`~fedsec.errors.ProtocolError`.

Replays and splices (:mod:`fedsec.shapley.binding`): every message carries its context
(the key set-up's session, ``secsv``, round, coalition, batch, layer, step -- with the
recipient for what P and A get in different copies) and is checked by its receiver
against its own state. P issues an id per evaluation (announced to A in ``secsv/eval``)
and per decryption request; the client echoes both; P takes each answer once and only for
the evaluation and layer in flight, A takes one re-share per layer of the evaluation it
was told about, then the label share and P's label mask. A checks P's batch list (each sample
once) and each evaluation (this round, a fresh id, a batch it knows). A client answers
each request id once, refuses a round earlier than one it served, and refuses a layer of
an evaluation of which it decrypted the same or an adjacent layer (its own memory, not
P's ``previous`` claim); it cannot tell the coalition or batch P *should* ask about (it
has no schedule), so a withheld and later replayed request of another evaluation of the
current round is decrypted but its answer is refused by P and A. Binding stops genuine
bytes used out of context; it does not authenticate them (no MAC), which a malicious
server or an attacker forging metadata would need.
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

from fedsec.crypto import reducing as rd
from fedsec.crypto import sharing as sh
from fedsec.crypto.bfv import BFV_DEFAULT, BFVContext, BFVParams
from fedsec.crypto.drbg import SystemRandomSource
from fedsec.errors import PolicyViolation, PrivacyWarning, ProtocolError
from fedsec.learning.model import LayerSpec, ModelSpec, Params, activate
from fedsec.learning.record import TrainingRecord
from fedsec.protocol import wire
from fedsec.protocol.accounting import Accounting
from fedsec.shapley.binding import (
    RID,
    Answered,
    Context,
    ReplayRefused,
    Requests,
    bind,
    check_context,
    context_of,
    new_request_id,
    open_evaluation,
    request_id,
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

__all__ = ["SecSVConfig", "secsv_shapley", "SecSVClient", "PrincipalServer",
           "AuxiliaryServer"]

U64 = NDArray[np.uint64]
BoolArray = NDArray[np.bool_]
Progress = Callable[[str], None]
_MAX_SAMPLES = 1 << 22
PROTOCOL = "secsv"
EV = "ev"  # the evaluation id P issues (A and the decrypting client echo it)
#: The coalition field of a derived evaluation: every coalition of the round at once.
ALL = (1 << 62) - 1
_MAX_DERIVED = 16  # participants of a round for derived decryption (2^16 coalitions)
#: Coalitions × samples of one derived request's label table a client accepts (32 MiB per
#: share; ~200 MiB peak at the client): P's choice of participants and batch width is
#: bounded by the client's policy, and P decrypts per coalition beyond it.
_MAX_DERIVED_LABELS = 1 << 22
_DERIVED_BLOCK = 1 << 22  # int64 entries of derived sums computed at once


# ====================================================================== configuration
@dataclass(frozen=True)
class SecSVConfig:
    """Fixed-point and BFV parameters of SecSV.

    Parameters
    ----------
    frac_bits_model : int, optional
        Fractional bits of model weights (``f_θ``); biases use ``f_θ + f_x``. Default: P
        picks the largest ``f_θ + f_x`` that the clients' published coarse bounds (powers
        of two of ``‖W‖_∞``, ``‖b‖_∞`` and ``‖X‖_∞``) allow, split evenly.
    frac_bits_data : int, optional
        Fractional bits of the test data (the first layer's input ``f_x``); default as
        above.
    frac_bits_hidden : int, default=16
        Fractional bits of hidden layers' inputs (activations re-shared by clients).
    weight_bits : int, default=12
        Bits of the integer aggregation weights when FedAvg's weights are not integers.
    bfv : BFVParams
        Ring degree and plaintext-prime size (sharing modulus).
    """

    frac_bits_model: int | None = None
    frac_bits_data: int | None = None
    frac_bits_hidden: int = 16
    weight_bits: int = 12
    bfv: BFVParams = BFV_DEFAULT

    def check(self) -> SecSVConfig:
        for name in ("frac_bits_model", "frac_bits_data", "frac_bits_hidden", "weight_bits"):
            v = getattr(self, name)
            if v is None and name in ("frac_bits_model", "frac_bits_data"):
                continue
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 30:
                raise ValueError(f"The '{name}' parameter of SecSVConfig must be an int in "
                                 f"1..30. Got {v!r} instead.")
        self.bfv.check()
        return self


def _pow2_ceil(v: float) -> int:
    return 1 if v <= 1 else 1 << math.ceil(math.log2(v))


# ====================================================================== layout
@dataclass(frozen=True)
class LayerPlan:
    """A layer's Matrix Reducing geometry: ``d_out``/``d_in`` are the layer's features;
    the product is ``rows × inner`` (the model) times ``inner × (per·m)`` (the data):
    ``(d_out, d_in, 1)`` for a dense layer, and for a conv layer the kernel matrix
    (``out_channels × C·k²``) times the im2col patches (``per`` = output positions per
    sample; grid column ``j·per + p`` is position ``p`` of sample ``j``)."""

    d_out: int
    d_in: int
    fold: int
    rows: int = 0
    inner: int = 0
    per: int = 1

    def __post_init__(self) -> None:
        if self.rows == 0:  # a dense layer
            object.__setattr__(self, "rows", self.d_out)
            object.__setattr__(self, "inner", self.d_in)

    def n_cts(self) -> int:
        return -(-self.inner // self.fold)

    def cols(self, width: int) -> int:
        """Grid columns for a batch width of ``width`` samples."""
        return width * self.per


def _geometry(ls: LayerSpec) -> tuple[int, int, int]:
    """``(rows, inner, per)`` of a layer's product (see :class:`LayerPlan`)."""
    if ls.kind == "conv2d":
        c, k = ls.in_shape[0], ls.kernel
        return ls.out_channels, c * k * k, ls.out_features // ls.out_channels
    return ls.out_features, ls.in_features, 1


def _layer_plan(ls: LayerSpec, fold: int) -> LayerPlan:
    rows, inner, per = _geometry(ls)
    return LayerPlan(ls.out_features, ls.in_features, fold, rows, inner, per)


def im2col(x: NDArray[Any], ls: LayerSpec) -> NDArray[Any]:
    """The im2col patches of a conv layer's input batch ``x`` (``d_in × m``, columns are
    flattened ``(C, H, W)`` samples): ``(C·k²) × (m·per)``, column ``j·per + p`` the
    patch of output position ``p`` (row-major ``(H_out, W_out)``) of sample ``j``.
    A public gather (no arithmetic): applied to each additive share it gives shares of
    the patches, so P and A unfold their shares locally."""
    c, h, w = ls.in_shape
    k, s = ls.kernel, ls.stride
    m = x.shape[1]
    xs = np.ascontiguousarray(np.asarray(x).T).reshape(m, c, h, w)
    win = np.lib.stride_tricks.sliding_window_view(xs, (k, k), axis=(2, 3))
    win = win[:, :, ::s, ::s]  # (m, C, Ho, Wo, k, k)
    ho, wo = win.shape[2], win.shape[3]
    out: NDArray[Any] = np.ascontiguousarray(win.transpose(1, 4, 5, 0, 2, 3)).reshape(
        c * k * k, m * ho * wo)
    return out


def grid_to_features(g: NDArray[Any], lp: LayerPlan, m: int) -> NDArray[Any]:
    """A decrypted ``rows × (per·m)`` product grid as the layer's ``d_out × m`` output
    (a conv layer's output flattened channel-major, ``(C_out, H_out, W_out)``)."""
    if lp.per == 1:
        return g
    out: NDArray[Any] = g.reshape(lp.rows, m, lp.per).transpose(0, 2, 1).reshape(
        lp.d_out, m)
    return out


@dataclass(frozen=True)
class Plan:
    """What P announces: batch width, per-layer folds (public)."""

    width: int
    layers: tuple[LayerPlan, ...]
    frac_model: int
    frac_inputs: tuple[int, ...]  # f_x of each layer's input

    def to_meta(self) -> dict[str, Any]:
        return {"width": self.width, "frac_model": self.frac_model,
                "frac_inputs": list(self.frac_inputs),
                "layers": [[lp.d_out, lp.d_in, lp.fold] for lp in self.layers]}


def _fold(diags: NDArray[Any], fold: int, slots: int) -> NDArray[Any]:
    """Stack ``fold`` consecutive diagonals into one slot vector (zero padding)."""
    d_in, seg = diags.shape
    n_ct = -(-d_in // fold)
    out = np.zeros((n_ct, slots), dtype=diags.dtype)
    padded = np.zeros((n_ct * fold, seg), dtype=diags.dtype)
    padded[:d_in] = diags
    out[:, :fold * seg] = padded.reshape(n_ct, fold * seg)
    return out


def _row_period(lp: LayerPlan, width: int, slots: int) -> int:
    """``L`` of Matrix Reducing's rotation layout for this layer, or 0 for the classic
    (folded) diagonals (:func:`fedsec.crypto.reducing.rotation_period`). A public function
    of the plan: clients and servers agree on it without a message."""
    return rd.rotation_period(lp.rows, lp.inner, lp.cols(width), slots, lp.fold)


def _model_rows(w: NDArray[Any], lp: LayerPlan, width: int, slots: int) -> NDArray[Any]:
    """The model's folded diagonal rows (``n_ct × slots``) in the layer's layout: the
    rotation layout where it applies (the servers then make ``L`` data plaintexts from
    one encoding, see :meth:`_Server.product`), else the classic diagonals."""
    if _row_period(lp, width, slots):
        return rd.model_rows_rotated(w, lp.cols(width), slots, lp.fold)
    return _fold(rd.model_diagonals(w, lp.cols(width)), lp.fold, slots)


def _layers(spec: ModelSpec, params: Params) -> list[tuple[NDArray[np.float64],
                                                           NDArray[np.float64], str]]:
    out = []
    for layer in spec.layers_of(params):
        if layer.spec.kind == "gru":
            raise ValueError("SecSV evaluates dense and conv2d layers; a gru layer needs "
                             "per-step decryption and is not supported.")
        if layer.spec.kind == "conv2d":  # the kernel matrix (out_channels × C·k²), per-
            # channel bias: the product with im2col patches (see LayerPlan). Its rows'
            # l1 norms are the unrolled matrix's (every output row holds one kernel).
            w = layer.params[0].reshape(layer.spec.out_channels, -1)
            b = layer.params[1]
        else:
            w, b = layer.matrix()
        out.append((np.asarray(w, dtype=np.float64), np.asarray(b, dtype=np.float64),
                    layer.activation))
    return out


def _u64(data: bytes, shape: tuple[int, ...], what: str) -> U64:
    n = int(np.prod(shape))
    if len(data) != 8 * n:
        raise ProtocolError(f"malformed {what}: expected {8 * n} bytes, got {len(data)}")
    return np.frombuffer(data, dtype="<u8").astype(np.uint64).reshape(shape)


def _int_meta(meta: dict[str, Any], key: str, lo: int, hi: int) -> int:
    v = meta.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ProtocolError(f"malformed message: field {key!r}")
    return v


# ====================================================================== client
class SecSVClient:
    """Client ``index``: holds BFV keys, its test set and (simulated) its local models."""

    def __init__(self, index: int, n: int, bfv: BFVContext, x: NDArray[np.float64],
                 y: NDArray[np.int64], spec: ModelSpec, config: SecSVConfig, *,
                 session: str, view: ClientView | None = None) -> None:
        self.index, self.n = index, n
        #: this client's own view of the run under the decryption rule
        #: (:mod:`fedsec.shapley.views`); None under the paper's Prop. 6.8 schedule
        self.view = view
        self.bfv = bfv
        self.x, self.y = x, y
        self.spec = spec
        self.cfg = config
        self.session = session
        self.plan: Plan | None = None
        self._rng = SystemRandomSource()
        self._answered = Answered()  # decryption request ids answered (once each)
        self._seen: dict[tuple[int, int, int], set[int]] = {}  # layers decrypted per eval
        self._round = 0  # the newest round served: rounds are evaluated in order

    def _ctx(self, **kw: Any) -> Context:
        return Context(self.session, PROTOCOL, **kw)

    def receive_plan(self, data: bytes) -> None:
        msg = wire.decode(data, expect="secsv/plan", max_bytes=1 << 16)
        check_context(msg.meta, self._ctx(step="plan"), what="plan")
        width = _int_meta(msg.meta, "width", 1, self.bfv.slots)
        layers = msg.meta.get("layers")
        if not isinstance(layers, list) or len(layers) != len(self.spec.layers):
            raise ProtocolError("malformed plan: layers")
        lps = []
        for lp, ls in zip(layers, self.spec.layers, strict=True):
            if (not isinstance(lp, list) or len(lp) != 3
                    or not all(isinstance(v, int) and not isinstance(v, bool) for v in lp)):
                raise ProtocolError("malformed plan: layer")
            d_out, d_in, fold = lp
            exp_in = ls.in_features if ls.kind != "gru" else -1
            if d_out != ls.out_features or d_in != exp_in \
                    or not 1 <= fold <= _geometry(ls)[1] \
                    or fold * d_out * width > self.bfv.slots:
                raise ProtocolError("plan does not fit the model or the ring")
            lps.append(_layer_plan(ls, fold))
        fm = _int_meta(msg.meta, "frac_model", 1, 30)
        fxs = msg.meta.get("frac_inputs")
        if not isinstance(fxs, list) or len(fxs) != len(lps) or not all(
                isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 30 for v in fxs):
            raise ProtocolError("malformed plan: fractional bits")
        self.plan = Plan(width, tuple(lps), fm, tuple(fxs))

    def _need_plan(self) -> Plan:
        if self.plan is None:
            raise ProtocolError("no plan received")
        return self.plan

    def coarse_bounds(self, models: Sequence[tuple[int, str, Params]]) -> bytes:
        """Powers of two bounding ``|X_i|``, and each model's ``‖W‖_∞`` (max row ℓ1) and
        ``‖b‖_∞`` per layer (exponents only), from which P picks the fixed point."""
        def exp2(v: float) -> int:
            return -64 if v <= 0 else math.ceil(math.log2(v))

        entries = []
        for rnd, key, params in models:
            entries.append([rnd, key, [[exp2(float(np.abs(w).sum(axis=1).max())),
                                        exp2(float(np.abs(b).max()) if b.size else 0.0)]
                                       for w, b, _a in _layers(self.spec, params)]])
        xe = exp2(float(np.abs(self.x).max())) if self.x.size else -64
        return wire.encode("secsv/bounds", bind({"client": self.index, "x": xe,
                                                 "models": entries}, self._ctx(step="bounds")))

    # ------------------------------------------------------------- Alg. 3, step 3
    def encrypt_model(self, round_: int, key: str, params: Params, acc: Accounting) -> bytes:
        """Encrypt one model (every layer: folded diagonals and bias) with its bounds."""
        plan = self._need_plan()
        t, fm = self.bfv.t, plan.frac_model
        blobs: list[bytes] = []
        bounds = []
        for (w, b, _act), lp, fx in zip(_layers(self.spec, params), plan.layers,
                                        plan.frac_inputs, strict=True):
            wq = np.rint(np.ldexp(w, fm)).astype(np.int64)
            bq = np.rint(np.ldexp(b, fm + fx)).astype(np.int64)
            beta = int(np.abs(wq).sum(axis=1).max())
            gamma = int(np.abs(bq).max()) if bq.size else 0
            if max(beta, gamma) >= t // 2:
                raise sh.FixedPointOverflow("model weights exceed the fixed-point budget")
            bounds.append([_pow2_ceil(beta), _pow2_ceil(gamma)])
            cols = lp.cols(plan.width)
            rows = _model_rows(sh.to_residues(wq, t), lp, plan.width, self.bfv.slots)
            bias = np.zeros(self.bfv.slots, dtype=np.uint64)
            bias[:lp.rows * cols] = rd.bias_grid(sh.to_residues(bq, t), cols)
            with acc.timed("encryption"):
                blobs.extend(self.bfv.serialize(self.bfv.encrypt(r), ntt=True) for r in rows)
                blobs.append(self.bfv.serialize(self.bfv.encrypt(bias), ntt=True))
        return wire.encode("secsv/model", bind(
            {"round": round_, "key": key, "owner": self.index, "bounds": bounds},
            self._ctx(round=round_, step="model")), blobs)

    def share_data(self, acc: Accounting) -> tuple[bytes, bytes]:
        """Shares of ``(X_i, y_i)`` for P and A, with a power-of-two bound on ``|X_i|``."""
        t, fx = self.bfv.t, self._need_plan().frac_inputs[0]
        xq = sh.encode_fixed(self.x, fx, t)
        bound = _pow2_ceil(float(np.abs(sh.centre(xq, t)).max())) if self.x.size else 1
        with acc.timed("share_generation"):
            x1, x2 = sh.share(xq, t, self._rng)
            y1, y2 = sh.share(self.y.astype(np.uint64), t, self._rng)
        meta = {"client": self.index, "rows": int(self.x.shape[0]),
                "cols": int(self.x.shape[1]), "bound": bound}
        return (wire.encode("secsv/data", bind(meta, self._ctx(step="data/P")),
                            [x1.tobytes(), y1.tobytes()]),
                wire.encode("secsv/data", bind(meta, self._ctx(step="data/A")),
                            [x2.tobytes(), y2.tobytes()]))

    def _fresh(self, meta: dict[str, Any], ctx: Context) -> tuple[str, str]:
        """The request and evaluation ids of a decryption request this client may still
        answer: not of a round earlier than one it served, not answered before."""
        rid, ev = request_id(meta, RID), request_id(meta, EV)
        if ctx.round < self._round:
            raise ReplayRefused("decryption request of an earlier round (a replay)",
                                check="round")
        if rid in self._answered:
            raise ReplayRefused("decryption request was already answered (a replay)",
                                check="request-id")
        return rid, ev

    def _features(self, ct: Any, lp: LayerPlan, width: int, m: int, acc: Accounting
                  ) -> NDArray[np.int64]:
        """Decrypt a layer's product: the folded segments summed mod ``t``, the grid read
        back as the layer's ``d_out × m`` output, centred."""
        with acc.timed("decryption"):
            slots = self.bfv.decrypt(ct)
        with acc.timed("other"):
            t = self.bfv.t
            seg = lp.d_out * width
            parts = slots[:lp.fold * seg].reshape(lp.fold, seg)
            total = parts[0].copy()
            for p in parts[1:]:
                total = sh.add_mod(total, p, t)
            grid = rd.read_grid(total, lp.rows, lp.cols(width), lp.per * m)
            return sh.centre(grid_to_features(grid, lp, m), t)

    # ------------------------------------------------------------- Alg. 4, steps 7-11
    def _owner_local(self, meta: dict[str, Any], t: int, mask: int) -> bool:
        """A model this client knows on its own samples only (it learns nothing)."""
        if self.view is None:
            return False
        return meta.get("batch_owners") == [self.index] and self.view.knows(
            self.view.requested(t, mask))

    def decrypt_layer(self, data: bytes, acc: Accounting) -> tuple[bytes, bytes]:
        """Decrypt a layer's output, check, activate and re-share (or share labels).

        The request must be of this session, for the layer it names, with a fresh request
        id (each is answered once); this client refuses a layer of an evaluation (round,
        coalition, batch) of which it decrypted the same or an adjacent layer, from its
        own memory -- not from P's ``previous`` claim alone -- and a request of a round
        earlier than one it served (rounds are evaluated in order within a session)."""
        plan = self._need_plan()
        msg = wire.decode(data, expect="secsv/decrypt", max_bytes=1 << 24)
        meta = msg.meta
        n_layers = len(plan.layers)
        layer = _int_meta(meta, "layer", 0, n_layers - 1)
        got = context_of(meta)
        ctx = check_context(meta, self._ctx(round=got.round, mask=got.mask, batch=got.batch,
                                            layer=layer, step="decrypt"),
                            what="decryption request")
        if min(ctx.round, ctx.mask, ctx.batch) < 0:
            raise ProtocolError("malformed decryption request: context")
        rid, ev = self._fresh(meta, ctx)
        key = (ctx.round, ctx.mask, ctx.batch)
        seen = self._seen.get(key, set())
        if layer in seen:
            raise ReplayRefused("this layer of the evaluation was already decrypted here "
                                "(a replay)", check="layer")
        if {layer - 1, layer + 1} & seen and not self._owner_local(meta, ctx.round, ctx.mask):
            raise ProtocolError("refusing to decrypt two consecutive layers (i_{l+1} = i_l; "
                                "this client decrypted an adjacent layer)")
        lp = plan.layers[layer]
        m = _int_meta(meta, "m", 1, plan.width)
        owners = meta.get("batch_owners")
        mowners = meta.get("model_owners")
        if not (isinstance(owners, list) and isinstance(mowners, list)
                and all(isinstance(v, int) for v in owners + mowners)):
            raise ProtocolError("malformed decryption request: owners")
        previous = _int_meta(meta, "previous", -1, self.n - 1)
        if self.view is None:
            check_decryptor(self.index, layer, n_layers, owners, mowners, previous)
        else:
            self.view.check_request(ctx.round, ctx.mask, meta.get("samples"), owners, m,
                                    first_layer=layer == 0)
        divisor_log2 = _int_meta(meta, "scale_bits", 0, 62)
        weight_sum = _int_meta(meta, "weight_sum", 1, 1 << 40)
        bound = _int_meta(meta, "bound", 1, (self.bfv.t - 1) // 2)
        if len(msg.blobs) != 2 or len(msg.blobs[1]) != (m + 7) // 8:  # one bit per column
            raise ProtocolError("malformed decryption request: blobs")
        active_bits = np.unpackbits(np.frombuffer(msg.blobs[1], dtype=np.uint8))
        active = active_bits[:m].astype(bool)
        ct = self.bfv.deserialize(msg.blobs[0], low=True)
        t = self.bfv.t
        self._answered.once(rid, what="decryption request")
        self._round = ctx.round
        self._seen.setdefault(key, set()).add(layer)  # from here on it knows this output
        features = self._features(ct, lp, plan.width, m, acc)
        with acc.timed("other"):
            vals = features[:, active]
            if vals.size and int(np.abs(vals).max()) > bound:
                raise ProtocolError("decrypted values exceed the announced bound")
            if divisor_log2 != plan.frac_model + plan.frac_inputs[layer]:  # the plan fixes it
                raise ProtocolError("malformed decryption request: scale_bits")
            real = vals.astype(np.float64) / (float(weight_sum) * 2.0 ** divisor_log2)
            act = self.spec.layers[layer].activation
            out = activate(act, real)
        if layer < n_layers - 1:
            full = np.zeros((lp.d_out, m))
            full[:, active] = out
            xq = sh.encode_fixed(full, plan.frac_inputs[layer + 1], t)
            xb = _pow2_ceil(float(np.abs(sh.centre(xq, t)).max())) if xq.size else 1
            with acc.timed("share_generation"):
                s1, s2 = sh.share(xq, t, self._rng)
            meta2 = {"layer": layer + 1, "m": m, "bound": xb, "from": self.index, EV: ev}
            return (wire.encode("secsv/reshare", bind(meta2, ctx.at(step="reshare/P"),
                                                      re_=rid), [s1.tobytes()]),
                    wire.encode("secsv/reshare", bind(meta2, ctx.at(step="reshare/A"),
                                                      re_=rid), [s2.tobytes()]))
        labels = np.zeros(m, dtype=np.uint64)
        labels[active] = np.argmax(out, axis=0).astype(np.uint64)
        with acc.timed("share_generation"):  # the zero test's correlated randomness
            to_p, to_a = sh.zero_test_deal(labels, t, self._rng, void=~active)
        meta3 = {"m": m, "from": self.index, EV: ev}
        return (wire.encode("secsv/labels", bind(meta3, ctx.at(step="labels/P"), re_=rid),
                            [v.tobytes() for v in to_p]),
                wire.encode("secsv/labels", bind(meta3, ctx.at(step="labels/A"), re_=rid),
                            [v.tobytes() for v in to_a]))


    # ------------------------------------------------------------- derived decryption
    def _derived_request(self, meta: dict[str, Any]) -> tuple[Context, str, str]:
        got = context_of(meta)
        ctx = check_context(meta, self._ctx(round=got.round, mask=ALL, batch=got.batch,
                                            layer=0, step="decrypt-all"),
                            what="derived decryption request")
        if min(ctx.round, ctx.batch) < 0:
            raise ProtocolError("malformed derived decryption request: context")
        rid, ev = self._fresh(meta, ctx)
        if 0 in self._seen.get((ctx.round, ALL, ctx.batch), set()):
            raise ReplayRefused("this batch's outputs were already decrypted here "
                                "(a replay)", check="layer")
        return ctx, rid, ev

    def _derived_terms(self, meta: dict[str, Any]) -> tuple[list[int], list[int], int]:
        """Check the request's participants, weights and term list; ``(participants,
        weights, partner)`` (``partner`` -1 when this client does not participate).

        The term list is fixed by the participants (ascending ids, as in the round's
        record) and this client: the global model, every other participant's singleton
        in order, and, if this client participates, the pair with the first other
        participant. P's metadata alone therefore cannot relabel a ciphertext (a
        reordered list or another partner is refused); the ciphertexts themselves are
        not authenticated (see the module's threat model)."""
        parts, weights, terms = (meta.get("participants"), meta.get("weights"),
                                 meta.get("terms"))
        if not (isinstance(parts, list) and isinstance(weights, list)
                and isinstance(terms, list) and 1 <= len(parts) <= _MAX_DERIVED
                and len(weights) == len(parts)
                and all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c < self.n
                        for c in parts)
                and len(set(parts)) == len(parts) and parts == sorted(parts)
                and all(isinstance(w, int) and not isinstance(w, bool) and 1 <= w <= 1 << 40
                        for w in weights)):
            raise ProtocolError("malformed derived decryption request: participants")
        me = self.index
        want: list[list[int]] = [[]] + [[c] for c in parts if c != me]
        partner = -1
        if me in parts:
            if len(parts) < 2 or len(terms) != len(want) + 1:
                raise ProtocolError("refusing derived decryption: without a pair term "
                                    "I would decrypt my own model's output")
            pair = terms[-1]
            # the partner is fixed (the first other participant): a relabelled partner
            # would derive this client's coalitions from the wrong singleton, silently
            if not (isinstance(pair, list) and len(pair) == 2 and pair[0] == me
                    and pair[1] == want[1][0]):
                raise ProtocolError("malformed derived decryption request: pair term")
            partner = want[1][0]
            terms = terms[:-1]
        if terms != want:  # never the singleton of my own model (Prop. 6.8)
            raise ProtocolError("refusing derived decryption: the terms must be the global "
                                "model and every other participant's singleton")
        return [int(c) for c in parts], [int(w) for w in weights], partner

    def decrypt_all(self, data: bytes, acc: Accounting) -> tuple[bytes, bytes]:
        """Derived decryption of a batch (one-layer models, linear shortcut, exact SSVs).

        The request holds the global model's output on the batch, the weighted output
        ``q_i·lin(θ_i, X_b)`` of every *other* participant's model and, if this client
        participates, one pair ``q_me·lin(θ_me, X_b) + q_p·lin(θ_p, X_b)``. From these the
        client derives the exact output of every coalition of the round, predicts, and
        shares the predicted labels of all ``2^k`` coalitions with P and A. It refuses its
        own samples (it must not be a batch owner) and its own model's singleton; it
        checks every decrypted value and every derived sum against P's bounds."""
        plan = self._need_plan()
        if self.view is not None:  # it would hold the global model's output on the batch
            raise PolicyViolation("refusing derived decryption under the decryption rule",
                                  check="view")
        if len(plan.layers) != 1:
            raise ProtocolError("derived decryption is for one-layer models only")
        msg = wire.decode(data, expect="secsv/decrypt-all", max_bytes=1 << 28)
        meta = msg.meta
        ctx, rid, ev = self._derived_request(meta)
        lp = plan.layers[0]
        m = _int_meta(meta, "m", 1, plan.width)
        owners = meta.get("batch_owners")
        if not (isinstance(owners, list) and owners
                and all(isinstance(v, int) and not isinstance(v, bool) for v in owners)):
            raise ProtocolError("malformed derived decryption request: owners")
        if self.index in owners:
            raise ProtocolError("refusing to decrypt the last layer of my own samples")
        parts, weights, partner = self._derived_terms(meta)
        if (1 << len(parts)) * m > _MAX_DERIVED_LABELS:
            raise ProtocolError(f"refusing derived decryption: {1 << len(parts)} coalitions "
                                f"x {m} samples exceed {_MAX_DERIVED_LABELS} labels")
        n_terms = len(parts) + 1  # global, k - 1 or k singletons, the pair if any
        t = self.bfv.t
        bounds = meta.get("bounds")
        if not (isinstance(bounds, list) and len(bounds) == n_terms and all(
                isinstance(b, int) and not isinstance(b, bool) and 1 <= b <= (t - 1) // 2
                for b in bounds)):
            raise ProtocolError("malformed derived decryption request: bounds")
        if _int_meta(meta, "scale_bits", 0, 62) != plan.frac_model + plan.frac_inputs[0]:
            raise ProtocolError("malformed derived decryption request: scale_bits")
        if len(msg.blobs) != n_terms:
            raise ProtocolError("malformed derived decryption request: blobs")
        cts = [self.bfv.deserialize(b, low=True) for b in msg.blobs]
        self._answered.once(rid, what="decryption request")
        self._round = ctx.round
        self._seen.setdefault((ctx.round, ALL, ctx.batch), set()).add(0)
        values = np.zeros((n_terms, lp.d_out * m), dtype=np.int64)
        for j, ct in enumerate(cts):
            vals = self._features(ct, lp, plan.width, m, acc)
            with acc.timed("other"):
                if vals.size and int(np.abs(vals).max()) > bounds[j]:
                    raise ProtocolError("decrypted values exceed the announced bound")
                values[j] = vals.ravel()
        with acc.timed("other"):
            labels = self._derive_labels(values, parts, weights, partner, lp.d_out, m,
                                         plan.frac_model + plan.frac_inputs[0])
        with acc.timed("share_generation"):  # the zero test's correlated randomness
            to_p, to_a = sh.zero_test_deal(labels, t, self._rng)
        meta2 = {"m": m, "coalitions": int(labels.shape[0]), "from": self.index, EV: ev}
        return (wire.encode("secsv/labels-all", bind(meta2, ctx.at(step="labels-all/P"),
                                                     re_=rid), [v.tobytes() for v in to_p]),
                wire.encode("secsv/labels-all", bind(meta2, ctx.at(step="labels-all/A"),
                                                     re_=rid), [v.tobytes() for v in to_a]))

    def _derive_labels(self, values: NDArray[np.int64], parts: list[int],
                       weights: list[int], partner: int, d_out: int, m: int,
                       scale_bits: int) -> U64:
        """Every coalition's predicted labels (``2^k × m``) from the decrypted terms:
        term 0 is the global model (coalition 0), then the other participants'
        singletons in order, then the pair ``{me, partner}`` if present."""
        k = len(parts)
        me = self.index
        idx = {c: 1 + j for j, c in enumerate(c for c in parts if c != me)}
        coef = np.zeros((1 << k, values.shape[0]), dtype=np.int64)
        coef[0, 0] = 1
        qsum = np.zeros(1 << k, dtype=np.int64)
        qsum[0] = 1
        masks = np.arange(1 << k)
        for j, c in enumerate(parts):
            has = (masks >> j & 1).astype(bool)
            qsum[has] += weights[j]
            if c == me:  # q_me·Y_me = pair - q_p·Y_p
                coef[has, values.shape[0] - 1] += 1
                coef[has, idx[partner]] -= 1
            else:
                coef[has, idx[c]] += 1
        act = self.spec.layers[0].activation
        labels = np.zeros((1 << k, m), dtype=np.uint64)
        block = max(1, _DERIVED_BLOCK // max(1, values.shape[1]))  # bounded int64 sums
        for lo in range(0, 1 << k, block):
            # exact: |each term| <= its bound < t/2, at most k + 2 terms
            sums = coef[lo:lo + block] @ values
            if sums.size and int(np.abs(sums).max()) >= self.bfv.t // 2:
                raise ProtocolError("a derived coalition output exceeds t/2")
            for j in range(sums.shape[0]):
                s = lo + j
                real = sums[j].reshape(d_out, m).astype(np.float64) / (
                    float(qsum[s]) * 2.0 ** scale_bits)
                labels[s] = np.argmax(activate(act, real), axis=0).astype(np.uint64)
        return labels


# ====================================================================== servers
@dataclass
class _Model:
    owner: int
    bounds: list[tuple[int, int]]
    layers: list[tuple[list[Any], Any]]  # per layer: NTT diagonal cts, NTT bias ct


class _Server:
    """What P and A share: data shares, encrypted models, products on their share."""

    name = "server"

    def __init__(self, bfv: BFVContext, spec: ModelSpec, n: int, plan: Plan,
                 config: SecSVConfig, *, session: str) -> None:
        self.bfv, self.spec, self.n, self.plan, self.cfg = bfv, spec, n, plan, config
        self.session = session
        self.round = -1  # the round whose models this server accepts
        self.eval: _Eval | None = None  # the evaluation in flight
        self.x: U64 = np.zeros((0, spec.in_features), dtype=np.uint64)
        self.y: U64 = np.zeros(0, dtype=np.uint64)
        self.owner: NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self.xbound: dict[int, int] = {}
        self.models: dict[tuple[int, str], _Model] = {}
        self._plain_cache: dict[tuple[int, ...], list[Any]] = {}
        # (round, mask, layer) -> (diagonal cts, bias ct, (keys, weights) summed)
        self._agg_cache: dict[tuple[int, int, int], tuple[list[Any], Any, tuple[
            tuple[str, ...], tuple[int, ...]]]] = {}
        self._scaled: dict[tuple[int, str, int], tuple[list[Any], Any]] = {}
        self._scalars: dict[int, Any] = {}

    def scalar(self, q: int) -> Any:
        if q not in self._scalars:
            self._scalars[q] = self.bfv.scalar_ntt(q)
        return self._scalars[q]

    def scaled(self, round_: int, key: str, q: int, layer: int) -> tuple[list[Any], Any]:
        """``q·[[θ^{(l)}]]`` (``q`` is fixed per client and round: cached)."""
        ck = (round_, key, layer)
        if ck not in self._scaled:
            cts, bias = self.models[(round_, key)].layers[layer]
            if q != 1:
                s = self.scalar(q)
                cts = [self.bfv.multiply_plain(c, s) for c in cts]
                bias = self.bfv.multiply_plain(bias, s)
            self._scaled[ck] = (cts, bias)
        return self._scaled[ck]

    def new_round(self) -> None:
        self._agg_cache.clear()
        self._scaled.clear()
        self.eval = None

    def start_round(self, t: int) -> None:
        """Accept models (and evaluations) of round ``t`` from now on."""
        self.round = t

    def _ctx(self, **kw: Any) -> Context:
        return Context(self.session, PROTOCOL, **kw)

    def _need_eval(self) -> _Eval:
        if self.eval is None:
            raise ProtocolError(f"{self.name}: no evaluation in flight")
        return self.eval

    def receive_data(self, blobs: Sequence[bytes]) -> None:
        xs, ys, owners = [], [], []
        for data in blobs:
            msg = wire.decode(data, expect="secsv/data", max_bytes=8 * _MAX_SAMPLES * 4096)
            check_context(msg.meta, self._ctx(step=f"data/{self.name}"), what="data share")
            c = _int_meta(msg.meta, "client", 0, self.n - 1)
            rows = _int_meta(msg.meta, "rows", 0, _MAX_SAMPLES)
            cols = _int_meta(msg.meta, "cols", 1, 1 << 16)
            if cols != self.spec.in_features or len(msg.blobs) != 2 or c in self.xbound:
                raise ProtocolError("malformed data share")
            self.xbound[c] = _int_meta(msg.meta, "bound", 1, self.bfv.t // 2)
            x = _u64(msg.blobs[0], (rows, cols), "data share")
            y = _u64(msg.blobs[1], (rows,), "label share")
            if rows and (int(x.max()) >= self.bfv.t or int(y.max()) >= self.bfv.t):
                raise ProtocolError("share out of range")
            xs.append(x)
            ys.append(y)
            owners.append(np.full(rows, c, dtype=np.int64))
        if sorted(self.xbound) != list(range(self.n)):
            raise ProtocolError("data shares must come from every client, once each")
        self.x, self.y = np.concatenate(xs), np.concatenate(ys)
        self.owner = np.concatenate(owners)

    def receive_model(self, data: bytes) -> tuple[int, str]:
        msg = wire.decode(data, expect="secsv/model", max_bytes=1 << 31)
        check_context(msg.meta, self._ctx(round=self.round, step="model"), what="model")
        rnd = _int_meta(msg.meta, "round", 0, 1 << 20)
        if rnd != self.round:
            raise ReplayRefused("model of another round", check="round")
        key = msg.meta.get("key")
        owner = _int_meta(msg.meta, "owner", 0, self.n - 1)
        bounds = msg.meta.get("bounds")
        if not isinstance(key, str) or not isinstance(bounds, list) or len(bounds) != len(
                self.plan.layers) or key not in ("global", f"c{owner}"):
            raise ProtocolError("malformed model message")
        need = sum(lp.n_cts() + 1 for lp in self.plan.layers)
        if len(msg.blobs) != need:
            raise ProtocolError("model message has the wrong number of ciphertexts")
        layers, at, bl = [], 0, []
        for lp, bd in zip(self.plan.layers, bounds, strict=True):
            if not (isinstance(bd, list) and len(bd) == 2 and all(
                    isinstance(v, int) and 1 <= v < self.bfv.t for v in bd)):
                raise ProtocolError("malformed model bounds")
            bl.append((bd[0], bd[1]))
            cts = [self.bfv.deserialize(b, ntt=True) for b in msg.blobs[at:at + lp.n_cts()]]
            bias = self.bfv.deserialize(msg.blobs[at + lp.n_cts()], ntt=True)
            at += lp.n_cts() + 1
            layers.append((cts, bias))
        self.models[(rnd, key)] = _Model(owner, bl, layers)
        return rnd, key

    # ------------------------------------------------------------- products
    def _plains(self, layer: int, x: U64, key: tuple[int, ...] | None) -> list[Any]:
        """NTT plaintexts of the folded data diagonals of a share ``x`` (d_in × m)."""
        if key is not None and key in self._plain_cache:
            return self._plain_cache[key]
        period, steps, bases = self._bases(layer, x)
        if period:
            pts = [p for b in bases for p in self.bfv.rotations_ntt(b, steps)]
        else:
            pts = bases
        if key is not None:
            self._plain_cache[key] = pts
        return pts

    def _bases(self, layer: int, x: U64) -> tuple[int, list[int], list[Any]]:
        """``(L, steps, plaintexts)``: every data plaintext (``L = 0``, classic
        diagonals), or the ``d_in / L`` bases of the rotation layout, whose row rotations
        by ``steps`` are the others (one encoding and NTT per ``L`` plaintexts)."""
        lp = self.plan.layers[layer]
        if lp.per > 1:  # a conv layer: this share's im2col patches (local, exact mod t)
            x = im2col(x, self.spec.layers[layer])
        cols = lp.cols(self.plan.width)
        period = _row_period(lp, self.plan.width, self.bfv.slots)
        if period:
            rows = rd.data_bases_rotated(x, lp.rows, cols, self.bfv.slots, lp.fold)
            return period, [b * cols for b in range(period)], [
                self.bfv.encode_ntt(r) for r in rows]
        rows = _fold(rd.data_diagonals(x, lp.rows, cols), lp.fold, self.bfv.slots)
        return 0, [], [self.bfv.encode_ntt(r) for r in rows]

    def product(self, model: tuple[list[Any], Any], layer: int, x: U64,
                cache_key: tuple[int, ...] | None, with_bias: bool) -> Any:
        if cache_key is None and _row_period(self.plan.layers[layer], self.plan.width,
                                             self.bfv.slots):
            _p, steps, bases = self._bases(layer, x)  # one plaintext at a time
            out = self.bfv.dot_plain_rotations(model[0], bases, steps)
        else:
            out = rd.reduce_half_bfv(self.bfv, model[0], self._plains(layer, x, cache_key))
        if with_bias:
            self.bfv.add_inplace(out, model[1])
        return out

    def aggregated(self, round_: int, keys: Sequence[str], q: Sequence[int], layer: int,
                   mask: int) -> tuple[list[Any], Any]:
        """``Σ q_i [[θ_i^{(l)}]]`` (cached per round, subset and layer, with its terms)."""
        ck = (round_, mask, layer)
        terms = (tuple(keys), tuple(q))
        if ck in self._agg_cache:
            return self._agg_cache[ck][:2]
        done = self._agg_cache.get((round_, mask & (mask - 1), layer))
        if len(keys) > 1 and done is not None and done[2] == (terms[0][1:], terms[1][1:]):
            # incremental: θ_S = θ_{S \ {first}} + q_first·θ_first, one addition per
            # ciphertext instead of |S| - 1 (the cached entry's terms are checked)
            first = self.scaled(round_, keys[0], q[0], layer)
            out = ([self.bfv.add(a, b) for a, b in zip(done[0], first[0], strict=True)],
                   self.bfv.add(done[1], first[1]))
        else:
            parts = [self.scaled(round_, k, qi, layer) for k, qi in zip(keys, q, strict=True)]
            if len(parts) == 1:
                out = parts[0]
            else:
                cts = [self.bfv.add_many([p[0][u] for p in parts])
                       for u in range(len(parts[0][0]))]
                out = (cts, self.bfv.add_many([p[1] for p in parts]))
        # Drop sums no later subset builds on, in the order exact SSVs evaluate subsets
        # (by size, then by mask; utility.ascending_table): X is the subset-without-first
        # of X + 2^k for 2^k < lowbit(X) only. Their ciphertexts return to SEAL's memory
        # pool, so the next sums reuse warm memory instead of page-faulting fresh pages
        # (an addition into fresh memory measured ~5x one into reused memory). Another
        # order only loses the shortcut (the full sum is computed again), never exactness.
        now = _subset_order(mask)
        for old in [k for k in self._agg_cache if k[0] == round_ and k[1] != mask
                    and _subset_order(k[1] + ((k[1] & -k[1]) >> 1)) < now]:
            del self._agg_cache[old]
        self._agg_cache[ck] = (out[0], out[1], terms)
        return out


def _subset_order(mask: int) -> tuple[int, int]:
    """Position of a subset in :func:`fedsec.shapley.utility.ascending_table`'s order."""
    return bin(mask).count("1"), mask


@dataclass
class _Eval:
    """One (round, coalition, batch) evaluation in flight at a server."""

    ctx: Context  # round, mask, batch; layer -1, step ""
    ev: str  # P's evaluation id
    rows: NDArray[np.int64]
    layer: int = 0  # the next layer whose share this server expects
    products: set[tuple[int, str]] = field(default_factory=set)  # (P) received from A
    g: U64 | None = None  # (P) its share of r·(Ŷ − b) from the labels, until A answers
    #: (P) per layer, the (bound, weight sum, scale bits) its decryption request announced
    announced: dict[int, tuple[int, int, int]] = field(default_factory=dict)


def _rows_list(value: Any, n_samples: int, width: int) -> NDArray[np.int64]:
    if not isinstance(value, list) or not 1 <= len(value) <= width or not all(
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v < n_samples
            for v in value) or len(set(value)) != len(value):
        raise ProtocolError("malformed batch: sample ids")
    return np.asarray(value, dtype=np.int64)


class AuxiliaryServer(_Server):
    """Server A: computes its share's products and label differences for P.

    A takes its batches from P's announcement (:meth:`receive_batches`) and each
    evaluation from P's ``secsv/eval`` message (:meth:`open_eval`: this session and
    round, a fresh evaluation id, a batch it knows); it accepts one re-share per layer and
    then the label share of that evaluation only, and binds every product and label
    difference it sends P to the evaluation (see :mod:`fedsec.shapley.binding`)."""

    name = "A"

    def __init__(self, bfv: BFVContext, spec: ModelSpec, n: int, plan: Plan,
                 config: SecSVConfig, *, session: str) -> None:
        super().__init__(bfv, spec, n, plan, config, session=session)
        self.batches: list[NDArray[np.int64]] = []
        self._evals_seen: set[str] = set()

    def receive_batches(self, data: bytes) -> None:
        """P's batch composition: sample ids per batch, every sample exactly once."""
        msg = wire.decode(data, expect="secsv/batches", max_bytes=1 << 28)
        check_context(msg.meta, self._ctx(step="batches"), what="batch list")
        lists = msg.meta.get("batches")
        n_samples = len(self.y)
        if not isinstance(lists, list) or not 1 <= len(lists) <= n_samples:
            raise ProtocolError("malformed batch list")
        batches = [_rows_list(b, n_samples, self.plan.width) for b in lists]
        every = np.concatenate(batches)
        if len(every) != n_samples or len(np.unique(every)) != n_samples:
            raise ProtocolError("the batches must hold every sample exactly once")
        self.batches = batches

    def open_eval(self, data: bytes) -> None:
        """Start an evaluation P announces (its context and id; the rows of a re-packed
        batch under SampleSkip, a subset of one announced batch group)."""
        msg = wire.decode(data, expect="secsv/eval", max_bytes=1 << 24)
        ctx, ev = open_evaluation(msg.meta, self._ctx(round=self.round), self._evals_seen)
        nb = len(self.batches)
        rows_meta = msg.meta.get("rows")
        if ctx.batch < nb and rows_meta is None:
            rows = self.batches[ctx.batch]
        elif ctx.batch >= nb and rows_meta is not None:
            rows = _rows_list(rows_meta, len(self.y), self.plan.width)
        else:
            raise ProtocolError("malformed evaluation: batch")
        self._evals_seen.add(ev)
        self.eval = _Eval(ctx.at(step=""), ev, rows)

    def batch_input(self) -> U64:
        """This server's share of the evaluation's first-layer input (d_in × m)."""
        out: U64 = self.x[self._need_eval().rows].T.copy()
        return out

    def product_message(self, ct: Any, layer: int, step: str) -> bytes:
        """An encrypted share product for P, bound to the evaluation and layer."""
        ev = self._need_eval()
        return wire.encode("secsv/product", bind({}, ev.ctx.at(layer=layer, step=step),
                                                 re_=ev.ev),
                           [self.bfv.serialize(ct, ntt=True)])

    def _share(self, data: bytes, kind: str, step: str, layer: int, shape: tuple[int, ...],
               n_blobs: int = 1) -> tuple[U64, wire.Message]:
        ev = self._need_eval()
        msg = wire.decode(data, expect=kind, max_bytes=1 << 28)
        check_context(msg.meta, ev.ctx.at(layer=layer, step=step), what=kind)
        if request_id(msg.meta, EV) != ev.ev:
            raise ReplayRefused(f"{kind} of another evaluation", check="request-id")
        if layer != ev.layer:
            raise ReplayRefused(f"{kind} out of order (a duplicate or a replay)",
                                check="layer")
        if len(msg.blobs) != n_blobs or _int_meta(msg.meta, "m", 1, shape[-1]) != shape[-1]:
            raise ProtocolError(f"malformed {kind}")
        x = _u64(msg.blobs[0], shape, kind)
        if x.size and int(x.max()) >= self.bfv.t:
            raise ProtocolError("share out of range")
        ev.layer += 1
        return x, msg

    def receive_share(self, data: bytes, layer: int, d: int, m: int) -> U64:
        """The decrypting client's re-share of layer ``layer``'s activated output."""
        return self._share(data, "secsv/reshare", "reshare/A", layer, (d, m))[0]

    def label_diff(self, data: bytes, mask_p: bytes, m: int) -> bytes:
        """Alg. 4, step 12, as a zero test (:func:`fedsec.crypto.sharing.zero_test_deal`):
        from the client's ``(r, b'', g'')`` and P's ``f' = Y' − b'``, A's share
        ``z'' = g'' − r·(Y − b)`` of ``r·(Ŷ − Y)`` for P -- never ``Ŷ'' − Y''``, which
        would give P the exact error (and, with it, the label)."""
        layer = len(self.plan.layers) - 1
        return self._zero_test(data, mask_p, "secsv/labels", "labels/A", layer, (m,),
                               "secsv/label-diff", "label-diff")

    def label_diff_all(self, data: bytes, mask_p: bytes, m: int) -> bytes:
        """Derived evaluation: A's zero-test shares of ``r_S·(Ŷ_S − Y)`` for every
        coalition ``S`` of the round (the client's ``2^k × m`` table; ``k`` = this
        round's local models here)."""
        ev = self._need_eval()
        if ev.ctx.mask != ALL:
            raise ProtocolError("all-coalition labels outside a derived evaluation")
        k = sum(1 for (r, key) in self.models if r == self.round and key != "global")
        peek = wire.decode(data, expect="secsv/labels-all", max_bytes=1 << 28)
        if _int_meta(peek.meta, "coalitions", 1, 1 << _MAX_DERIVED) != 1 << k:
            raise ProtocolError("malformed secsv/labels-all: coalitions")
        return self._zero_test(data, mask_p, "secsv/labels-all", "labels-all/A", 0,
                               (1 << k, m), "secsv/label-diff-all", "label-diff-all")

    def _zero_test(self, data: bytes, mask_p: bytes, kind: str, step: str, layer: int,
                   shape: tuple[int, ...], out_kind: str, out_step: str) -> bytes:
        t, m = self.bfv.t, shape[-1]
        ev = self._need_eval()
        r, msg = self._share(data, kind, step, layer, shape, n_blobs=3)
        pm = wire.decode(mask_p, expect="secsv/label-mask", max_bytes=1 << 26)
        check_context(pm.meta, ev.ctx.at(layer=layer, step="label-mask"), what="label mask")
        if request_id(pm.meta, "re") != ev.ev:
            raise ReplayRefused("label mask of another evaluation", check="request-id")
        if len(pm.blobs) != 1 or _int_meta(pm.meta, "m", 1, m) != m:
            raise ProtocolError("malformed secsv/label-mask message")
        f_p = _u64(pm.blobs[0], (m,), "label mask")
        b_a = _u64(msg.blobs[1], (m,), "label mask share")
        g_a = _u64(msg.blobs[2], shape, "label share")
        if r.size and (int(r.min()) == 0 or max(int(f_p.max()), int(b_a.max()),
                                                int(g_a.max())) >= t):
            raise ProtocolError("label shares out of range (or a zero multiplier)")
        z_a = sh.zero_test_respond(f_p, self.y[ev.rows], r, b_a, g_a, t)
        self.eval = None
        meta: dict[str, Any] = {"m": m} if len(shape) == 1 else {"m": m,
                                                                  "coalitions": shape[0]}
        return wire.encode(out_kind, bind(meta, ev.ctx.at(layer=layer, step=out_step),
                                          re_=ev.ev), [z_a.tobytes()])


class PrincipalServer(_Server):
    """Server P: plans, combines, masks, routes decryptions, keeps Φ (see module).

    P issues an id per evaluation (announced to A) and per decryption request, accepts
    each answer once and only in the evaluation and layer it belongs to, and takes A's
    products and label difference only for the evaluation in flight."""

    name = "P"

    def __init__(self, bfv: BFVContext, spec: ModelSpec, n: int, plan: Plan,
                 config: SecSVConfig, *, session: str) -> None:
        super().__init__(bfv, spec, n, plan, config, session=session)
        self.requests = Requests()

    def open_eval(self, mask: int, batch: int, rows: NDArray[np.int64] | None) -> bytes:
        """Start evaluating coalition ``mask`` of the current round on batch ``batch``;
        the ``secsv/eval`` message for A (``rows`` only for a re-packed batch)."""
        if self.eval is not None:  # an abandoned evaluation: its requests die with it
            self.requests = Requests()
        ctx = self._ctx(round=self.round, mask=mask, batch=batch)
        ev = new_request_id()
        self.eval = _Eval(ctx, ev, np.zeros(0, dtype=np.int64))
        return wire.encode("secsv/eval", bind(
            {"rows": None if rows is None else [int(r) for r in rows]},
            ctx.at(step="eval"), rid=ev))

    def decrypt_request(self, meta: dict[str, Any], blobs: Sequence[bytes], layer: int
                        ) -> bytes:
        """A decryption request for layer ``layer`` of the evaluation, with a fresh id."""
        ev = self._need_eval()
        ctx = ev.ctx.at(layer=layer, step="decrypt")
        rid = self.requests.issue(ctx)
        if all(isinstance(meta.get(k), int) for k in ("bound", "weight_sum", "scale_bits")):
            ev.announced[layer] = (meta["bound"], meta["weight_sum"], meta["scale_bits"])
        return wire.encode("secsv/decrypt", bind({**meta, EV: ev.ev}, ctx, rid=rid), blobs)

    def receive_product(self, data: bytes, layer: int, step: str) -> bytes:
        """A's encrypted share product (serialized, NTT form) for this evaluation."""
        ev = self._need_eval()
        msg = wire.decode(data, expect="secsv/product", max_bytes=1 << 26)
        check_context(msg.meta, ev.ctx.at(layer=layer, step=step), what="product")
        if request_id(msg.meta, "re") != ev.ev:
            raise ReplayRefused("product of another evaluation", check="request-id")
        if (layer, step) in ev.products:
            raise ReplayRefused("product received twice", check="request-id")
        if len(msg.blobs) != 1:
            raise ProtocolError("malformed product: one blob expected")
        ev.products.add((layer, step))
        return msg.blobs[0]

    def _answer(self, data: bytes, kind: str, step: str, layer: int) -> wire.Message:
        ev = self._need_eval()
        msg = wire.decode(data, expect=kind, max_bytes=1 << 28)
        self.requests.answer(msg.meta, ev.ctx.at(layer=layer, step=step), what=kind)
        return msg

    def receive_share(self, data: bytes, layer: int, d: int, m: int) -> tuple[U64, int]:
        """The client's re-share of layer ``layer``'s output and its bound."""
        msg = self._answer(data, "secsv/reshare", "reshare/P", layer)
        if len(msg.blobs) != 1 or _int_meta(msg.meta, "m", 1, m) != m:
            raise ProtocolError("malformed re-share")
        b = _int_meta(msg.meta, "bound", 1, self.bfv.t // 2)
        cap = reshare_cap(self._need_eval().announced.get(layer),
                          self.spec.layers[layer].activation, self.plan.frac_inputs[layer + 1])
        if cap is not None and b > cap:  # a bound no honest activation reaches
            raise ProtocolError("re-share bound beyond what the layer's output allows")
        x = _u64(msg.blobs[0], (d, m), "re-share")
        if x.size and int(x.max()) >= self.bfv.t:
            raise ProtocolError("share out of range")
        return x, b

    def label_mask(self, to_p: bytes, brows: NDArray[np.int64], m: int) -> bytes:
        """Alg. 4, step 12, as a zero test: the client's ``(b', g')`` for P; P keeps
        ``g'`` and sends A ``f' = Y' − b'`` (uniform to A, which lacks ``b'``)."""
        layer = len(self.plan.layers) - 1
        return self._label_mask(to_p, "secsv/labels", "labels/P", layer, brows, (m,))

    def label_mask_all(self, to_p: bytes, brows: NDArray[np.int64], m: int, n_masks: int
                       ) -> bytes:
        """Derived evaluation: :meth:`label_mask` for the ``n_masks × m`` table."""
        return self._label_mask(to_p, "secsv/labels-all", "labels-all/P", 0, brows,
                                (n_masks, m))

    def _label_mask(self, to_p: bytes, kind: str, step: str, layer: int,
                    brows: NDArray[np.int64], shape: tuple[int, ...]) -> bytes:
        ev = self._need_eval()
        if ev.g is not None:
            raise ReplayRefused(f"{kind} received twice", check="step")
        t, m = self.bfv.t, shape[-1]
        msg = self._answer(to_p, kind, step, layer)
        if len(msg.blobs) != 2 or _int_meta(msg.meta, "m", 1, m) != m or len(brows) != m:
            raise ProtocolError(f"malformed {kind} message: two blobs expected")
        b_p = _u64(msg.blobs[0], (m,), "label mask share")
        g_p = _u64(msg.blobs[1], shape, "label share")
        if m and max(int(b_p.max()), int(g_p.max())) >= t:
            raise ProtocolError("share out of range")
        ev.g = g_p
        f_p = sh.zero_test_mask(self.y[brows], b_p, t)
        return wire.encode("secsv/label-mask", bind({"m": m}, ev.ctx.at(
            layer=layer, step="label-mask"), re_=ev.ev), [f_p.tobytes()])

    def compare(self, diff_a: bytes, m: int) -> BoolArray:
        """Alg. 4, steps 13-14: A's zero-test share; True where ``r·(Ŷ − Y) = 0``, i.e.
        the prediction is right. P learns this bit and nothing else: for a wrong
        prediction ``r·(Ŷ − Y)`` is uniform over the non-zero residues."""
        layer = len(self.plan.layers) - 1
        return self._correct(diff_a, "secsv/label-diff", "label-diff", layer, (m,))

    def _correct(self, diff_a: bytes, kind: str, step: str, layer: int,
                 shape: tuple[int, ...]) -> BoolArray:
        """Open the zero test (rows: coalitions, if any). Ends the evaluation."""
        ev = self._need_eval()
        dm = wire.decode(diff_a, expect=kind, max_bytes=1 << 28)
        check_context(dm.meta, ev.ctx.at(layer=layer, step=step), what="label difference")
        if request_id(dm.meta, "re") != ev.ev:
            raise ReplayRefused("label difference of another evaluation",
                                check="request-id")
        if ev.g is None:
            raise ProtocolError("a label difference before the labels")
        if len(dm.blobs) != 1:
            raise ProtocolError(f"malformed {kind} message: one blob expected")
        z_a = _u64(dm.blobs[0], shape, "label difference")
        if z_a.size and int(z_a.max()) >= self.bfv.t:
            raise ProtocolError("share out of range")
        ok: BoolArray = sh.zero_test_open(ev.g, z_a, self.bfv.t)
        self.eval = None
        return ok


    def decrypt_all_request(self, meta: dict[str, Any], blobs: Sequence[bytes]) -> bytes:
        """The derived evaluation's decryption request, with a fresh id."""
        ev = self._need_eval()
        if ev.ctx.mask != ALL:
            raise ProtocolError("a derived request outside a derived evaluation")
        ctx = ev.ctx.at(layer=0, step="decrypt-all")
        rid = self.requests.issue(ctx)
        return wire.encode("secsv/decrypt-all", bind({**meta, EV: ev.ev}, ctx, rid=rid),
                           blobs)

    def compare_all(self, diff_a: bytes, m: int, n_masks: int) -> BoolArray:
        """Derived evaluation: whether ``Ŷ_S = Y`` for every coalition (``n_masks × m``),
        by the zero test (:meth:`compare`)."""
        return self._correct(diff_a, "secsv/label-diff-all", "label-diff-all", 0,
                             (n_masks, m))


# ====================================================================== the run
@dataclass
class _Batch:
    rows: NDArray[np.int64]  # pooled sample indices, in column order
    group: int


@dataclass
class _Run:
    record: TrainingRecord
    cfg: SecSVConfig
    acc: Accounting
    clients: list[SecSVClient]
    P: PrincipalServer
    A: AuxiliaryServer
    groups: list[list[int]]
    strong: bool
    batches: list[_Batch]
    linear_shortcut: bool
    leader: int
    derived: bool = False  # derived decryption (see secsv_shapley)
    sched: Scheduler | None = None  # the decryption rule (None: Prop. 6.8's schedule)
    turn: int = 0
    lin_cache: dict[tuple[int, str, int], Any] = field(default_factory=dict)
    derived_correct: dict[int, NDArray[np.bool_]] = field(default_factory=dict)

    @property
    def n_layers(self) -> int:
        return len(self.P.plan.layers)

    @property
    def n_samples(self) -> int:
        return len(self.P.y)

    def end_round(self, t: int) -> None:
        self.lin_cache.clear()
        self.derived_correct.pop(t, None)
        for srv in (self.P, self.A):
            srv.new_round()
            for key in [k for k in srv.models if k[0] == t]:
                del srv.models[key]  # the round's encrypted models (memory)

    def _msg(self, snd: str, rcv: str, kind: str, payload: bytes) -> bytes:
        return self.acc.message(snd, rcv, kind, payload)

    # ------------------------------------------------------------- model upload
    def upload_round(self, t: int) -> None:
        rnd = self.record.rounds[t]
        self.P.start_round(t)
        self.A.start_round(t)
        jobs: list[tuple[int, str, Params]] = [(self.leader, "global", rnd.global_params)]
        jobs += [(c, f"c{c}", p) for c, p in zip(rnd.participants, rnd.local_params,
                                                   strict=True)]
        for owner, key, params in jobs:
            blob = self.clients[owner].encrypt_model(t, key, params, self.acc)
            with self.acc.timed("other"):
                self.P.receive_model(self._msg(f"client:{owner}", "P", "model", blob))
                self.A.receive_model(self._msg(f"client:{owner}", "A", "model", blob))

    # ------------------------------------------------------------- one evaluation
    def _keys_weights(self, t: int, mask: int) -> tuple[list[str], list[int], list[int]]:
        rnd = self.record.rounds[t]
        if mask == 0:
            return ["global"], [1], []
        q = integer_weights(rnd.weights, self.cfg.weight_bits)
        sel = [j for j in range(len(rnd.participants)) if mask >> j & 1]
        keys = [f"c{rnd.participants[j]}" for j in sel]
        owners = [rnd.participants[sel[0]]] if len(sel) == 1 else []
        return keys, [int(q[j]) for j in sel], owners

    def _bound(self, t: int, keys: Sequence[str], q: Sequence[int], layer: int,
               xbound: int) -> int:
        total = 0
        for k, qi in zip(keys, q, strict=True):
            beta, gamma = self.P.models[(t, k)].bounds[layer]
            total += qi * (beta * xbound + gamma)
        if total >= self.P.bfv.t // 2:
            raise sh.FixedPointOverflow(
                f"layer {layer + 1}: the linear output may reach {total:.3g} in fixed point, "
                f"beyond t/2 = {self.P.bfv.t // 2:.3g}; lower frac_bits_model/"
                f"frac_bits_hidden (SecSV refuses rather than wrap)")
        return total

    def _mask(self, lp: LayerPlan, m: int, active: BoolArray) -> U64 | None:
        """Segments summing to 0 (uniform in inactive columns) or None if not needed."""
        t = self.P.bfv.t
        hidden = not active.all()
        if lp.fold == 1 and not hidden:
            return None
        width = self.P.plan.width
        seg = lp.d_out * width
        out = np.zeros(self.P.bfv.slots, dtype=np.uint64)
        if lp.fold > 1:
            r = sh.uniform_mod(t, ((lp.fold - 1), seg))
            total = np.zeros(seg, dtype=np.uint64)
            for k in range(0, lp.fold - 1, 256):  # < 2^8 residues < 2^55 fit in uint64
                total = sh.add_mod(total, r[k:k + 256].sum(axis=0, dtype=np.uint64)
                                   % np.uint64(t), t)
            out[:(lp.fold - 1) * seg] = r.ravel()
            out[(lp.fold - 1) * seg:lp.fold * seg] = sh.sub_mod(np.zeros(seg, np.uint64),
                                                                total, t)
        if hidden:
            grid = np.zeros((lp.rows, lp.cols(width)), dtype=bool)
            grid[:, :m * lp.per] = np.repeat(~active, lp.per)[None, :]
            idx = (lp.fold - 1) * seg + np.flatnonzero(grid.ravel())
            out[idx] = sh.add_mod(out[idx], sh.uniform_mod(t, idx.size), t)
        return out

    def evaluate(self, t: int, mask: int, rows: NDArray[np.int64] | None) -> BoolArray:
        """Test ``θ_S^t`` on the pooled samples ``rows`` (all if None); True = correct."""
        if self.derived and rows is None:
            if t not in self.derived_correct:
                plan = self._derived_plan(t)
                if plan is not None:
                    self.derived_correct[t] = self._derive_round(t, plan)
            if t in self.derived_correct:
                out: BoolArray = self.derived_correct[t][mask].copy()
                return out
        keys, q, mowners = self._keys_weights(t, mask)
        m_total = len(self.P.y)
        todo = np.zeros(m_total, dtype=bool)
        todo[np.arange(m_total) if rows is None else rows] = True
        correct = np.zeros(m_total, dtype=bool)
        shortcut = self.linear_shortcut
        work: list[tuple[int, NDArray[np.int64], BoolArray]]
        if shortcut or rows is None:  # the round's fixed batches (cacheable products)
            work = [(bi, b.rows, todo[b.rows]) for bi, b in enumerate(self.batches)
                    if todo[b.rows].any()]
        else:  # SampleSkip without the shortcut: repack the samples left to test
            work = []
            width = self.P.plan.width
            for g in range(len(self.groups)):
                sel = np.concatenate([b.rows for b in self.batches if b.group == g]
                                     or [np.zeros(0, dtype=np.int64)])
                sel = sel[todo[sel]]
                for k in range(0, len(sel), width):
                    chunk = sel[k:k + width]
                    work.append((-1, chunk, np.ones(len(chunk), dtype=bool)))
        fm = self.P.plan.frac_model
        repacked = len(self.batches)  # context ids of re-packed batches follow the fixed ones
        for bi, brows, active in work:
            group = int(self.P.owner[brows[0]])
            gidx = next(g for g, members in enumerate(self.groups) if group in members)
            gowners = self.groups[gidx]
            if self.sched is None:
                chain = decryptor_chain(len(self.clients), self.n_layers, gowners, mowners,
                                        self.strong, self.turn)
            else:
                chain = self.sched.chain(t, mask, brows, self.n_layers, self.turn)
            self.turn += 1
            m = len(brows)
            xb = max(self.P.xbound.get(c, 1) for c in gowners)
            previous = -1
            if bi >= 0:
                opening = self.P.open_eval(mask, bi, None)
            else:
                opening = self.P.open_eval(mask, repacked, brows)
                repacked += 1
            self.A.open_eval(self._msg("P", "A", "eval", opening))
            x_p, x_a = self.P.x[brows].T.copy(), self.A.batch_input()
            for layer in range(self.n_layers):
                lp = self.P.plan.layers[layer]
                bound = self._bound(t, keys, q, layer, xb)
                with self.acc.timed("arithmetic"):
                    if layer == 0 and shortcut:
                        ct = self._shortcut_sum(t, keys, q, bi, x_p, x_a)
                    else:
                        ck = (0, bi) if layer == 0 and bi >= 0 else None
                        model_p = self.P.aggregated(t, keys, q, layer, mask)
                        model_a = self.A.aggregated(t, keys, q, layer, mask)
                        a_ct = self.A.product(model_a, layer, x_a, ck, False)
                        a_bytes = self._msg("A", "P", "product",
                                            self.A.product_message(a_ct, layer, "product"))
                        ct = self.P.product(model_p, layer, x_p, ck, True)
                        self.P.bfv.add_inplace(ct, self.P.bfv.deserialize(
                            self.P.receive_product(a_bytes, layer, "product"), ntt=True))
                    if not (layer == 0 and shortcut):  # the shortcut's sum is low already
                        ct = self.P.bfv.mod_switch_down(self.P.bfv.from_ntt(ct))
                    rmask = self._mask(lp, m, active)
                    if rmask is not None:
                        ct = self.P.bfv.add_plain(ct, rmask)
                    payload = self.P.bfv.serialize(ct)
                dec = chain[layer]
                meta: dict[str, Any] = {
                    "layer": layer, "m": m, "batch_owners": gowners, "model_owners": mowners,
                    "previous": previous, "scale_bits": fm + self.P.plan.frac_inputs[layer],
                    "weight_sum": int(sum(q)), "bound": bound}
                if self.sched is not None:  # the client checks its view per sample
                    meta["samples"] = [int(v) for v in brows]
                req = self.P.decrypt_request(meta, [payload, np.packbits(active).tobytes()],
                                             layer)
                to_p, to_a = self.clients[dec].decrypt_layer(
                    self._msg("P", f"client:{dec}", "decrypt", req), self.acc)
                to_p = self._msg(f"client:{dec}", "P", "share", to_p)
                to_a = self._msg(f"client:{dec}", "A", "share", to_a)
                previous = dec
                if layer < self.n_layers - 1:
                    x_p, xb = self.P.receive_share(to_p, layer, lp.d_out, m)
                    x_a = self.A.receive_share(to_a, layer, lp.d_out, m)
                else:
                    with self.acc.timed("arithmetic"):
                        mask_p = self._msg("P", "A", "label-mask",
                                           self.P.label_mask(to_p, brows, m))
                        diff_a = self.A.label_diff(to_a, mask_p, m)
                    diff_a = self._msg("A", "P", "label-diff", diff_a)
                    with self.acc.timed("arithmetic"):
                        ok = self.P.compare(diff_a, m)
                    correct[brows[active]] = ok[active]
        return correct[todo] if rows is not None else correct

    def plan_round(self, t: int) -> None:
        """Place every coalition of round ``t`` on every batch before any work (exact
        SSVs); raises :class:`~fedsec.shapley.views.UnsafeSchedule`."""
        assert self.sched is not None
        masks = list(range(1 << len(self.record.rounds[t].participants)))
        for b in self.batches:
            self.sched.plan(t, masks, [int(v) for v in b.rows])

    # ------------------------------------------------------------- derived decryption
    def _derived_plan(self, t: int) -> list[tuple[int, int]] | None:
        """Per batch, the decrypting client ``d`` (not a batch owner) and, if ``d``
        participates in round ``t``, the partner ``p`` of its pair term (else -1); None
        if some batch has no such client or the label table (``2^k`` coalitions × the
        widest batch) exceeds what a client accepts (the round then decrypts per
        coalition)."""
        parts = list(self.record.rounds[t].participants)
        widest = max((len(b.rows) for b in self.batches), default=0)
        if len(parts) > _MAX_DERIVED or (1 << len(parts)) * widest > _MAX_DERIVED_LABELS:
            return None  # the decrypting client would refuse the label table's size
        out = []
        for b in self.batches:
            owners = set(self.groups[b.group])
            eligible = [c for c in range(len(self.clients)) if c not in owners
                        and not (c in parts and len(parts) < 2)]
            if not eligible:
                return None
            d = eligible[self.turn % len(eligible)]
            others = [c for c in parts if c != d]  # ascending (RoundRecord)
            p = others[0] if d in parts else -1  # the partner the client expects
            self.turn += 1
            out.append((d, p))
        return out

    def _derive_round(self, t: int, plan: list[tuple[int, int]]) -> NDArray[np.bool_]:
        """Every coalition of round ``t`` on every batch with one decryption request per
        batch (see :meth:`SecSVClient.decrypt_all`); ``2^k × M`` correctness."""
        rnd = self.record.rounds[t]
        parts = [int(c) for c in rnd.participants]
        q = [int(v) for v in integer_weights(rnd.weights, self.cfg.weight_bits)]
        n_masks = 1 << len(parts)
        correct = np.zeros((n_masks, self.n_samples), dtype=bool)
        lp = self.P.plan.layers[0]
        scale = self.P.plan.frac_model + self.P.plan.frac_inputs[0]
        for bi, (b, (d, partner)) in enumerate(zip(self.batches, plan, strict=True)):
            gowners = self.groups[b.group]
            m = len(b.rows)
            xb = max(self.P.xbound.get(c, 1) for c in gowners)
            self.A.open_eval(self._msg("P", "A", "eval", self.P.open_eval(ALL, bi, None)))
            x_p, x_a = self.P.x[b.rows].T.copy(), self.A.batch_input()
            terms: list[tuple[list[int], list[str], list[int]]] = [([], ["global"], [1])]
            terms += [([c], [f"c{c}"], [q[j]]) for j, c in enumerate(parts) if c != d]
            if partner >= 0:
                terms.append(([d, partner], [f"c{d}", f"c{partner}"],
                              [q[parts.index(d)], q[parts.index(partner)]]))
            # every coalition's output stays below t/2 (the full one bounds them all)
            self._bound(t, [f"c{c}" for c in parts], q, 0, xb)
            blobs, bounds = [], []
            active = np.ones(m, dtype=bool)
            with self.acc.timed("arithmetic"):
                for _members, keys, qs in terms:
                    bounds.append(self._bound(t, keys, qs, 0, xb))
                    ct = self.P.bfv.add_many([self._lin_term(t, k, qi, bi, x_p, x_a)
                                              for k, qi in zip(keys, qs, strict=True)])
                    rmask = self._mask(lp, m, active)
                    if rmask is not None:
                        ct = self.P.bfv.add_plain(ct, rmask)
                    blobs.append(self.P.bfv.serialize(ct))
            req = self.P.decrypt_all_request({
                "m": m, "batch_owners": gowners, "participants": parts, "weights": q,
                "terms": [members for members, _k, _q in terms], "bounds": bounds,
                "scale_bits": scale}, blobs)
            to_p, to_a = self.clients[d].decrypt_all(
                self._msg("P", f"client:{d}", "decrypt", req), self.acc)
            to_p = self._msg(f"client:{d}", "P", "share", to_p)
            to_a = self._msg(f"client:{d}", "A", "share", to_a)
            with self.acc.timed("arithmetic"):
                mask_p = self._msg("P", "A", "label-mask",
                                   self.P.label_mask_all(to_p, b.rows, m, n_masks))
                diff_a = self._msg("A", "P", "label-diff",
                                   self.A.label_diff_all(to_a, mask_p, m))
                correct[:, b.rows] = self.P.compare_all(diff_a, m, n_masks)
        return correct

    def _shortcut_sum(self, t: int, keys: Sequence[str], q: Sequence[int], bi: int,
                      x_p: U64, x_a: U64) -> Any:
        return self.P.bfv.add_many([self._lin_term(t, k, qi, bi, x_p, x_a)
                                    for k, qi in zip(keys, q, strict=True)])

    def _lin_term(self, t: int, k: str, qi: int, bi: int, x_p: U64, x_a: U64) -> Any:
        """``q_i · lin(θ_i, X_b)`` in decryption form (cached per round, model, batch)."""
        ck = (t, k, bi)
        if ck not in self.lin_cache:  # q_i · lin(θ_i, X) once per round and batch
            a_ct = self.A.product(self.A.models[(t, k)].layers[0], 0, x_a, (0, bi),
                                  False)
            a_bytes = self._msg("A", "P", "product",
                                self.A.product_message(a_ct, 0, f"lin/{k}"))
            ct = self.P.product(self.P.models[(t, k)].layers[0], 0, x_p, (0, bi), True)
            self.P.bfv.add_inplace(ct, self.P.bfv.deserialize(
                self.P.receive_product(a_bytes, 0, f"lin/{k}"), ntt=True))
            if qi != 1:
                ct = self.P.bfv.multiply_plain(ct, self.P.scalar(qi))
            # Cached in coefficient form one prime down (what a decryption request
            # carries): every subset's sum is then additions only -- no inverse NTT
            # and no modulus switch per subset and batch.
            self.lin_cache[ck] = self.P.bfv.mod_switch_down(self.P.bfv.from_ntt(ct))
        return self.lin_cache[ck]


# ====================================================================== set-up
def _key_setup(n: int, acc: Accounting, cfg: SecSVConfig) -> tuple[list[BFVContext], str]:
    """Authenticated key set-up among the clients (P relays); BFV keys from its seed.

    The set-up is the project's CKKS one (:mod:`fedsec.crypto.keysetup`, smallest secure
    preset, no rotations); SecSV uses only its transcript-bound session and the 32-byte
    seed it delivers to the clients, from which every client derives the same BFV keys
    (the CKKS keys it also makes are unused). The relayed bytes are counted. Returns the
    clients' BFV contexts and the session id every later message is bound to.
    """
    from fedsec.auc.common import local_federation
    from fedsec.crypto.keysetup import KeySpec, run_key_setup

    names = [f"client-{i}" for i in range(n)]
    identities, roster = local_federation(names)
    spec = KeySpec.create("CKKS_128_N8192_DEPTH1", (), False)

    from fedsec.protocol.network import Network

    # what key set-up's aggregator (P) relays, counted as before: the hellos, the request,
    # the deliveries and one copy of the confirmation bundle
    steps = {"keys/hello": "keys/hellos", "keys/request": "keys/request",
             "keys/deliver": "keys/deliveries", "keys/confirmed": "keys/confirmed"}

    def count(batch: list[Any]) -> None:
        step = steps.get(batch[0].kind) if batch else None
        if step is not None:
            for env in batch[:1] if step == "keys/confirmed" else batch:
                acc.message("client" if step == "keys/hellos" else "P",
                            "P" if step == "keys/hellos" else "client", step, env.payload)

    net = Network()
    net.intercept(count)
    with acc.timed("other"):
        agg, keys = run_key_setup(identities, roster, spec, network=net)
    ctxs = []
    with acc.timed("encryption"):
        for k in keys:
            ctxs.append(BFVContext.from_seed(k.seed, params=cfg.bfv,
                                             label=k.session.encode()))
    fps = {c.public_fingerprint() for c in ctxs}
    if len(fps) != 1:  # pragma: no cover - deterministic derivation
        raise ProtocolError("clients derived different BFV keys")
    if any(k.session != agg.session for k in keys):  # pragma: no cover - set-up checks it
        raise ProtocolError("clients finished the key set-up in different sessions")
    return ctxs, agg.session


def _setup(record: TrainingRecord, sets: list[tuple[NDArray[np.float64], NDArray[np.int64]]],
           cfg: SecSVConfig, acc: Accounting, linear_shortcut: bool,
           derived: bool = False, schedule: str = "paper", exact: bool = False) -> _Run:
    n = record.n_clients
    n_layers = len(record.spec.layers)
    strict = schedule == "strict"
    if strict:  # one owner per batch: the owner evaluates the models it knows
        groups, strong = [[c] for c in range(n)], True
    else:
        groups, strong = plan_groups(n, n_layers)
    if not strong:
        warnings.warn(f"SecSV with {n} clients and a {n_layers}-layer model cannot keep "
                      f"all {n_layers + 2} parties of a decryption chain distinct (seed 004, "
                      "Prop. 6.8): two clients alternate, which leaves multi-layer "
                      "equation-solving attacks possible.", PrivacyWarning, stacklevel=3)
    ctxs, session = _key_setup(n, acc, cfg)
    public = BFVContext(cfg.bfv)
    sizes = [len(y) for _, y in sets]
    per_group = [sum(sizes[c] for c in g) for g in groups]
    cap = min(public.slots // layer.out_features for layer in record.spec.layers)
    width = _pick_width(record, per_group, cap, public.slots, derived)
    lps = [_layer_plan(ly, _fold_of(ly, width, public.slots)) for ly in record.spec.layers]
    leader = secrets.randbelow(n)
    space = ModelSpace.of_record(record)
    clients = [SecSVClient(i, n, ctxs[i], sets[i][0], sets[i][1], record.spec, cfg,
                           session=session, view=ClientView(space, i) if strict else None)
               for i in range(n)]
    # Coarse bounds (exponents) from every model and data owner -> P's fixed point
    owned: list[list[tuple[int, str, Params]]] = [[] for _ in range(n)]
    for t, rnd in enumerate(record.rounds):
        owned[leader].append((t, "global", rnd.global_params))
        for cid, params in zip(rnd.participants, rnd.local_params, strict=True):
            owned[cid].append((t, f"c{cid}", params))
    fm, fx = _pick_fixed_point(
        [acc.message(f"client:{c.index}", "P", "bounds", c.coarse_bounds(owned[c.index]))
         for c in clients], record, cfg, public.t, session=session)
    plan = Plan(width, tuple(lps), fm, (fx,) + (cfg.frac_bits_hidden,) * (len(lps) - 1))
    plan_bytes = wire.encode("secsv/plan", bind(plan.to_meta(),
                                                Context(session, PROTOCOL, step="plan")))
    for c in clients:
        c.receive_plan(acc.message("P", f"client:{c.index}", "plan", plan_bytes))
    P = PrincipalServer(public, record.spec, n, plan, cfg, session=session)
    A = AuxiliaryServer(BFVContext(cfg.bfv), record.spec, n, plan, cfg, session=session)
    to_p, to_a = [], []
    for c in clients:
        bp, ba = c.share_data(acc)
        to_p.append(acc.message(f"client:{c.index}", "P", "data", bp))
        to_a.append(acc.message(f"client:{c.index}", "A", "data", ba))
    with acc.timed("other"):
        P.receive_data(to_p)
        A.receive_data(to_a)
    batches = []
    for g, members in enumerate(groups):
        rows = shuffle(np.flatnonzero(np.isin(P.owner, members)))
        for k in range(0, len(rows), width):
            batches.append(_Batch(rows[k:k + width], g))
    # P tells A the batch composition (sample IDs per batch)
    spec_bytes = wire.encode("secsv/batches", bind(
        {"batches": [b.rows.tolist() for b in batches]},
        Context(session, PROTOCOL, step="batches")))
    with acc.timed("other"):
        A.receive_batches(acc.message("P", "A", "batches", spec_bytes))
    run = _Run(record, cfg, acc, clients, P, A, groups, strong, batches, linear_shortcut,
               leader=leader, derived=derived,
               sched=Scheduler(space, n, P.owner) if strict else None)
    if strict and exact:  # refuse before any model is encrypted
        for t in range(record.n_rounds):
            run.plan_round(t)
    return run


def _fold_of(ly: LayerSpec, width: int, slots: int) -> int:
    return max(1, min(_geometry(ly)[1], slots // (ly.out_features * width)))


def _pick_width(record: TrainingRecord, per_group: Sequence[int], cap: int, slots: int,
                derived: bool = False) -> int:
    """Batch width trading model ciphertexts (fewer with a narrow, more folded grid)
    against decryptions (more batches). Costs in units of one ciphertext's round trip
    (encrypt + two uploads) vs one decryption chain step, both measured ~10 ms : 8 ms;
    with derived decryption a batch costs ``k + 2`` ciphertext decryptions per round
    instead of ``2^k`` chain steps."""
    top = max(1, min(max(per_group), cap))
    models = sum(len(r.participants) + 1 for r in record.rounds)
    evals = sum(len(r.participants) + 2 if derived else 2 ** len(r.participants)
                for r in record.rounds)
    best, best_cost = top, math.inf
    for j in range(1, 17):
        w = max(1, -(-top // j))
        cts = sum(-(-_geometry(ly)[1] // _fold_of(ly, w, slots)) + 1
                  for ly in record.spec.layers)
        batches = sum(-(-g // w) for g in per_group if g)
        cost = 10.0 * models * cts + 8.0 * evals * batches * len(record.spec.layers)
        if cost < best_cost:
            best, best_cost = w, cost
    return best


def _pick_fixed_point(messages: Sequence[bytes], record: TrainingRecord, cfg: SecSVConfig,
                      t: int, *, session: str) -> tuple[int, int]:
    """P's choice of ``(f_θ, f_x)``: the largest total with
    ``max_t Σ_i q_i (2^{e_β,i} 2^{e_x} + 2^{e_γ,i}) · 2^{f_θ + f_x} < t/8`` (first layer;
    3 bits of margin for rounding), split evenly; configured values are kept."""
    ex = -64
    bounds: dict[tuple[int, str], tuple[int, int]] = {}
    for data in messages:
        msg = wire.decode(data, expect="secsv/bounds", max_bytes=1 << 24)
        check_context(msg.meta, Context(session, PROTOCOL, step="bounds"), what="bounds")
        x = msg.meta.get("x")
        models = msg.meta.get("models")
        if not isinstance(x, int) or not isinstance(models, list) or not -64 <= x <= 128:
            raise ProtocolError("malformed bounds message")
        ex = max(ex, x)
        for entry in models:
            try:
                rnd, key, layers = entry
                eb, eg = layers[0]
                ok = all(isinstance(v, int) and -64 <= v <= 128 for v in (rnd, eb, eg))
            except (TypeError, ValueError, IndexError, KeyError):  # KeyError: a dict
                ok = False
            if not ok or not isinstance(key, str):
                raise ProtocolError("malformed bounds message")
            bounds[(rnd, key)] = (eb, eg)
    worst = 0.0
    for ti, rnd in enumerate(record.rounds):
        q = integer_weights(rnd.weights, cfg.weight_bits)
        keys = [("global", 1)] + [(f"c{c}", int(qi)) for c, qi in zip(rnd.participants, q,
                                                                       strict=True)]
        terms = []
        for key, qi in keys:
            if (ti, key) not in bounds:
                raise ProtocolError(f"no bounds for model {key} of round {ti}")
            eb, eg = bounds[(ti, key)]
            terms.append(qi * (2.0 ** (eb + ex) + 2.0 ** eg))
        worst = max(worst, terms[0], sum(terms[1:]))  # θ^t alone; any θ_S <= the sum
    room = math.floor(math.log2(t / 8) - math.log2(max(worst, 2.0 ** -60)))
    fm = cfg.frac_bits_model if cfg.frac_bits_model is not None else \
        min(30, room - room // 2 if cfg.frac_bits_data is None else room - cfg.frac_bits_data)
    fx = cfg.frac_bits_data if cfg.frac_bits_data is not None else min(30, room - fm)
    if fm < 1 or fx < 1:
        raise sh.FixedPointOverflow(
            f"the models' and data's magnitudes leave {room} fractional bits in a "
            f"{t.bit_length()}-bit plaintext modulus; SecSV refuses rather than wrap")
    return fm, fx


# ====================================================================== entry point
def secsv_shapley(record: TrainingRecord, test_sets: TestSets, *, estimator: str = "exact",
                  budget: int | None = None, sample_skip: bool = False, seed: int = 0,
                  linear_shortcut: bool = True, derived_decryption: bool | None = None,
                  schedule: str = "strict", config: SecSVConfig | None = None,
                  progress: Progress | None = None) -> SecureShapleyResult:
    """Federated Shapley values with SecSV (seed 004, Alg. 3-4; SampleSkip Alg. 6-7).

    Parameters
    ----------
    record : TrainingRecord
        The federated training run (local models, weights, global models per round).
    test_sets : sequence of (X_i, y_i)
        Each client's private test set, in client order.
    estimator : {"exact", "ps", "gt", "ks", "gtg"}, default="exact"
        Exact SSVs or one of the estimators of :mod:`fedsec.shapley.estimators` run over
        the secure utility oracle (seed 004, Table 3).
    budget : int, optional
        Per-round budget of the estimator.
    sample_skip : bool, default=False
        SampleSkip (seed 004, Alg. 6-7) at the principal server.
    seed : int, default=0
        Seed of the estimators' sampling (public randomness).
    linear_shortcut : bool, default=True
        First layer by plaintext-weighted sums of the ``n + 1`` local products per round.
    derived_decryption : bool, optional
        One decryption request per batch and round instead of one per coalition: the
        decrypting client gets the global model's and the other participants' outputs
        (and one pair with its own model) and derives every coalition's output itself
        (see the module's threat model). Needs the linear shortcut, a one-layer model,
        exact SSVs and no SampleSkip and ``schedule='paper'``; default (None): on exactly
        then. ``True`` where it does not apply raises ``ValueError``; ``False`` decrypts
        per coalition.
    schedule : {"strict", "paper"}, default="strict"
        Who may decrypt what. ``"strict"``: the decryption rule of
        :mod:`fedsec.shapley.views` -- no client ever holds outputs from which it can
        compute a model it knows (the global models, its own, their combinations) on
        another client's samples; batch owners evaluate the models they know; a run the
        rule cannot schedule is refused (:class:`~fedsec.shapley.views.UnsafeSchedule`)
        before any model is encrypted. ``"paper"``: Prop. 6.8 only, which lets a
        decrypting client solve for other clients' test data (a
        :class:`~fedsec.errors.PrivacyWarning` says so).
    config : SecSVConfig, optional
        Fixed-point and BFV parameters.
    progress : callable, optional
        Called with a short message after every round.

    Returns
    -------
    SecureShapleyResult
    """
    where = "secsv_shapley"
    budget = check_protocol_args(record, estimator, budget, where=where,
                                 sample_skip=sample_skip, linear_shortcut=linear_shortcut)
    cfg = (config or SecSVConfig()).check()
    sets = check_test_sets(test_sets, record.n_clients, record.spec.in_features, where=where)
    derivable = (linear_shortcut and len(record.spec.layers) == 1 and estimator == "exact"
                 and not sample_skip)
    if derived_decryption is not None and not isinstance(derived_decryption, bool):
        raise TypeError(f"The 'derived_decryption' parameter of {where} must be a bool or "
                        f"None. Got {derived_decryption!r} instead.")
    if derived_decryption and not derivable:
        raise ValueError(f"The 'derived_decryption' parameter of {where} needs "
                         "linear_shortcut=True, a one-layer model, estimator='exact' and "
                         "sample_skip=False (otherwise the decrypting client would see "
                         "outputs the protocol does not show it).")
    check_schedule(schedule, where)
    if schedule == "strict":
        if derived_decryption:
            raise ValueError(f"The 'derived_decryption' parameter of {where} needs "
                             "schedule='paper': the decrypting client would hold the global "
                             "model's output on other clients' samples (it can solve for "
                             "them).")
        derivable = False
    derived = derivable if derived_decryption is None else derived_decryption
    acc = Accounting()
    t0 = time.perf_counter()
    with threadpool_limits(limits=1, user_api="blas"):
        run = _setup(record, sets, cfg, acc, linear_shortcut, derived, schedule,
                     exact=estimator == "exact" and (linear_shortcut or not sample_skip))
        result = run_rounds(run, estimator, budget or 0, sample_skip, seed, progress, "secsv")
    result.seconds = time.perf_counter() - t0
    result.accounting = acc
    return result


