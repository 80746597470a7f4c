"""HESV: Federated Shapley values with one server and CKKS only (Zheng et al., PVLDB 2023,
Alg. 1-2).

Roles: :class:`HESVClient` (``"client:<i>"``: uploads its encrypted test data and models,
decrypts the layer outputs the decryption rule assigns it, counts correct predictions) and
:class:`HESVServer` (``"server"``: never holds a secret key; evaluates every coalition's
model on the encrypted batches with homomorphic matrix products, :mod:`fedsec.crypto.matmul`).
Keys come from the signed key set-up (:mod:`fedsec.crypto.keysetup`); the server gets the
public, relinearization and one conjugation key. :func:`hesv_shapley` runs every role in one
process over a :class:`~fedsec.protocol.network.Network`, relaying bytes only; each role
times its own work (its ``clock``) and the network counts the bytes.

Beyond the paper: labels travel one-hot and the counting client opens only the correctness
bit of each prediction; a first layer's products are computed once per round (the linearity
shortcut); who decrypts what follows the decryption rule of :mod:`fedsec.shapley.views` by
default (``schedule="strict"``).

The roles and steps in detail, the label product, the linearity shortcut, the threat model
and the decryption chain, replays and splices, the layouts and presets:
``docs/protocols/hesv.md`` (the documentation site's HESV page).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec.crypto.ckks import Ciphertext, CKKSContext, refuse_transparent
from fedsec.crypto.identity import Identity, Roster
from fedsec.crypto.keysetup import KeySetupAggregator, KeySetupParty, KeySpec, PartyKeys
from fedsec.crypto.matmul import (
    FoldedPlan,
    SquaringPlan,
    matrix_product,
    plan_folded,
    plan_squaring,
)
from fedsec.crypto.params import get_preset
from fedsec.errors import PolicyViolation, PrecisionWarning, PrivacyWarning, ProtocolError
from fedsec.learning.model import LinearLayer, ModelSpec, activate
from fedsec.learning.record import TrainingRecord
from fedsec.metrics.shapley import popcounts, shapley_values
from fedsec.protocol import fields, wire
from fedsec.protocol.accounting import Clock
from fedsec.protocol.binding import (
    RE,
    RID,
    Answered,
    Binding,
    ReplayRefused,
    context_of,
    new_request_id,
    request_id,
)
from fedsec.protocol.network import Network
from fedsec.protocol.roles import receives
from fedsec.shapley.estimators import (
    group_testing,
    gtg_shapley,
    kernel_shap,
    permutation_sampling,
)
from fedsec.shapley.fsv import round_rng
from fedsec.shapley.rounds import RoundTimer, in_worker, rounds_to_play
from fedsec.shapley.secure_common import (
    SecureShapleyResult,
    TestSets,
    check_protocol_args,
    check_test_sets,
)
from fedsec.shapley.views import (
    ClientView,
    ModelSpace,
    Scheduler,
    UnsafeSchedule,
    check_schedule,
)

__all__ = ["HESV_PRESET", "HESV_PRECISE_PRESET", "default_preset", "HESVConfig", "HESVClient",
           "HESVServer", "LayerPlan", "chain_start", "decryptor_chain", "security_level",
           "hesv_shapley"]

HESV_PRESET = "CKKS_128_N4096_DEPTH2_S24"
#: Multi-layer models' default: their re-encrypted activations need more precision than
#: 2^24 (the MNIST CNN trained 16 rounds: FSV error 1.1e-3 at 2^24, ring 2^12).
HESV_PRECISE_PRESET = "CKKS_128_N8192_DEPTH2_S40"


def default_preset(spec: ModelSpec) -> str:
    """HESV's preset for a model: the paper's ring 2^12 and scale 2^24 for one-layer
    models, ring 2^13 and scale 2^40 for deeper ones."""
    return HESV_PRESET if len(spec.layers) == 1 else HESV_PRECISE_PRESET
#: The protocol name every HESV message's binding context carries.
PROTOCOL = "hesv"
#: The server's role name on the network (clients are ``"client:<i>"``).
SERVER = "server"
#: The kinds of a client's replies to the server's requests.
_REPLIES = ("hesv/activated", "hesv/predicted", "hesv/count")
_MAX_MASK = (1 << 62) - 1
FloatArray = NDArray[np.float64]
Progress = Callable[[str], None]
#: Largest message a client accepts from the server, and the server from a client.
MAX_MESSAGE_BYTES = 256 << 20
#: Costs (ms) for choosing layouts: HESV charges each output ciphertext its transfer and
#: decryption.
_HESV_COSTS = {"mul": 0.25, "relin": 1.8, "rot": 2.1, "rescale": 0.5, "enc": 1.8, "out": 6.0}
#: Costs (ms) for the layers after the first, whose inputs a client re-encrypts for every
#: coalition and batch: measured one by one on this machine class (N = 4096, three
#: primes): "enc" = encrypt + serialize + the server's load; "out" = serialize + load +
#: decrypt of an output; "rescale" twice (weighted models); "agg" = aggregating one model
#: ciphertext per coalition (additions of about 2.5 pre-weighted terms, from the measured
#: 0.03 ms per addition), spread over all test samples.
_HIDDEN_COSTS = {"mul": 0.16, "relin": 0.7, "rot": 0.71, "rescale": 0.4, "enc": 1.55,
                 "out": 0.8, "agg": 0.08}
_MAX_BATCHES = 1 << 16
#: Labels and predictions travel one-hot, one ciphertext per class, one level above the
#: lowest: the server's product ``Σ_c [[Y_c]]·[[Ŷ_c]]`` (rescaled once) lands at the lowest.
_LABEL_LEVEL = 1


#: A batch whose every row of scores spans at most ``TIE_TOLERANCE`` is scored by a model
#: that ties every class (e.g. a zero-initialised one): above the CKKS noise of HESV's
#: scores (absolute, from its 2^24 scale over a product with the data and the sums: up to
#: 4e-4 measured on a zero model with features up to 9).
TIE_TOLERANCE = 2.0 ** -10


def tie_break(h: NDArray[np.float64]) -> tuple[NDArray[np.int64], int]:
    """Predicted labels from decrypted scores ``h`` (``m × classes``) as the plaintext
    model decides them, and how many were decided as exact ties. ``np.argmax`` takes the
    first of exactly tied scores; a model that ties every class on every sample (a
    zero-initialised model: the empty coalition of the first round) would otherwise
    predict by CKKS noise, at random. So when every row of the batch spans at most
    :data:`TIE_TOLERANCE`, every prediction is the first class; otherwise the argmax of
    the decrypted scores (two scores within the CKKS noise, ~1e-4, may then be ordered
    differently from the plaintext model's)."""
    if h.size and float((h.max(axis=1) - h.min(axis=1)).max()) <= TIE_TOLERANCE:
        return np.zeros(len(h), dtype=np.int64), len(h)
    labels: NDArray[np.int64] = np.argmax(h, axis=1).astype(np.int64)
    return labels, 0


def warn_ties(ties: int, predictions: int, *, stacklevel: int = 2) -> None:
    """The :class:`~fedsec.errors.PrecisionWarning` of a run with ``ties`` predictions
    decided by :func:`tie_break`."""
    warnings.warn(f"HESV: {ties} of {predictions} predictions came from a model that "
                  f"scored every class within the CKKS noise ({TIE_TOLERANCE:.1e}) on a "
                  "whole batch (e.g. a zero-initialised model) and were decided as exact "
                  "ties (the first class, as the plaintext model decides them); if such a "
                  "model's plaintext scores differ by less than that, the FSV may differ "
                  "from NSSV's.", PrecisionWarning, stacklevel=stacklevel + 1)


def _label_cts(n_classes: int, complex_packing: bool) -> int:
    """Label ciphertexts per batch: one for two classes, where the server squares
    ``Y − Ŷ`` (for ``y, ŷ ∈ {0, 1}`` the square is ``1 − [right]``, a bit too); else one
    per pair of classes with complex packing (class ``2k`` real, ``2k + 1`` imaginary),
    one per class without."""
    if n_classes == 2:
        return 1
    return -(-n_classes // 2) if complex_packing else n_classes


# ---------------------------------------------------------------------- Prop. 6.8
def _chain_search(n: int, layers: int, owner: int, model_owner: int | None, strong: bool,
                  start: int) -> tuple[int, ...] | None:
    """Depth-first search for ``(i_2, ..., i_{L+2})``; candidates in a rotated order
    (``start``) so that decryption work spreads over the clients."""
    order = [(start + k) % n for k in range(n)]
    chain: list[int] = [owner]

    def ok(c: int, pos: int) -> bool:  # pos = index in (i_1, ..., i_{L+2}) minus 1
        if pos <= layers:  # decrypts the output of layer pos
            if c == chain[-1] or c == model_owner:
                return False
            if pos == layers and c == owner:
                return False
            return not (strong and c in chain)
        return c != chain[-1] and c != owner  # i_{L+2}

    def dfs(pos: int) -> bool:
        if pos > layers + 1:
            return True
        for c in order:
            if ok(c, pos):
                chain.append(c)
                if dfs(pos + 1):
                    return True
                chain.pop()
        return False

    return tuple(chain[1:]) if dfs(1) else None


def decryptor_chain(n: int, layers: int, batch_owner: int, model_owner: int | None, *,
                    level: str = "strong", start: int = 0) -> tuple[int, ...]:
    """Decryptors ``(i_2, ..., i_{L+2})`` for one evaluation under Prop. 6.8's rules.

    Parameters
    ----------
    n : int
        Number of clients (all hold the secret key).
    layers : int
        ``L``, the model's linear layers.
    batch_owner : int
        ``i_1``, the client whose test samples form the batch.
    model_owner : int or None
        The client whose *local* model is tested, or None (global or aggregated model).
    level : {"strong", "weak"}
    start : int
        Rotates the preference order (spreads decryption work).

    Raises
    ------
    ValueError
        When no chain satisfies the rules.
    """
    if level not in ("strong", "weak"):
        raise ValueError(f"The 'level' parameter of decryptor_chain must be 'strong' or "
                         f"'weak'. Got {level!r} instead.")
    chain = _chain_search(n, layers, batch_owner, model_owner, level == "strong", start % n)
    if chain is None:
        raise ValueError(f"No decryptor chain satisfies Prop. 6.8 ({level} level) with {n} "
                         f"clients and {layers} layers.")
    return chain


def chain_start(t: int, mask: int, owner: int, batch: int, n: int) -> int:
    """The public rotation of one evaluation's decryptor chain (server and clients
    derive the same chain from it, so a client can check it is the member asked)."""
    return (mask * 7 + batch * 3 + t + owner) % n


def security_level(n: int, layers: int) -> str:
    """The level HESV can guarantee for every (batch, model) pair: ``"strong"`` when
    ``n >= L + 2``, ``"weak"`` when the weak rules can always be met (``n >= 4`` suffices),
    else ``ValueError``."""
    for level in ("strong", "weak"):
        if all(_chain_search(n, layers, b, j, level == "strong", 0) is not None
               for b in range(n) for j in [None, *range(n)]):
            return level
    raise ValueError(f"HESV needs more clients: with {n} clients and {layers} layers no "
                     "decryptor chain satisfies Prop. 6.8 (i_(l+1) != i_l, no model owner "
                     "decrypts, i_(L+1) != the batch owner); the paper requires n >= 4.")


# ---------------------------------------------------------------------- layer layouts
@dataclass(frozen=True)
class LayerPlan:
    """One linear layer as a matrix product ``A (d_out x d_in+1) @ B``.

    Dense layers: ``A = [W | b]``, ``B = [X^T; 1]`` (a column per sample). Convolutions:
    ``A = [kernel as O x (C k k) | b]`` and ``B`` the patches of every sample (im2col, a
    column per output position), so ``cols`` columns per sample.
    """

    spec_kind: str
    plan: SquaringPlan | FoldedPlan
    cols: int
    activation: str
    in_shape: tuple[int, ...] = ()
    kernel: int = 0
    stride: int = 1
    out_hw: tuple[int, int] = (0, 0)

    @property
    def capacity(self) -> int:
        """Samples per product (a batch is split into chunks of this size)."""
        return self.plan.capacity // self.cols

    def chunks(self, m: int) -> list[tuple[int, int]]:
        """``(start, stop)`` sample ranges of the products a batch of ``m`` needs."""
        c = self.capacity
        return [(a, min(a + c, m)) for a in range(0, m, c)]

    def encode_inputs(self, x: FloatArray) -> list[Any]:
        """Operand vectors of every chunk of a batch, chunk after chunk."""
        out: list[Any] = []
        for a, b in self.chunks(len(x)):
            out.extend(self.plan.encode_b(self.inputs(x[a:b])))
        return out

    def decode_outputs(self, vals: Sequence[Any], m: int) -> FloatArray:
        """The layer's output (m x out_features) from every chunk's decrypted outputs."""
        j = self.plan.row_blocks
        parts = []
        for k, (a, b) in enumerate(self.chunks(m)):
            y = self.plan.decode(vals[k * j:(k + 1) * j], (b - a) * self.cols)
            parts.append(self.outputs(y, b - a))
        return np.vstack(parts)

    def matrix(self, layer: LinearLayer) -> FloatArray:
        p = layer.params
        w = p[0].reshape(p[0].shape[0], -1)
        out: FloatArray = np.hstack([w, p[1].reshape(-1, 1)])
        return out

    def inputs(self, x: FloatArray) -> FloatArray:
        """``B`` for a batch ``x`` (m x in_features)."""
        m = len(x)
        if self.spec_kind == "dense":
            cols = x.T
        else:
            c, h, w = self.in_shape
            k, s = self.kernel, self.stride
            xs = x.reshape(m, c, h, w)
            win = np.lib.stride_tricks.sliding_window_view(xs, (k, k), axis=(2, 3))
            win = win[:, :, ::s, ::s]  # (m, C, Ho, Wo, k, k)
            ho, wo = win.shape[2:4]
            cols = np.ascontiguousarray(win.transpose(1, 4, 5, 0, 2, 3)).reshape(
                c * k * k, m * ho * wo)
        out: FloatArray = np.vstack([cols, np.ones((1, cols.shape[1]))])
        return out

    def outputs(self, y: FloatArray, m: int) -> FloatArray:
        """The layer's output (m x out_features) from ``A B``."""
        if self.spec_kind == "dense":
            return np.ascontiguousarray(y.T)
        ho, wo = self.out_hw
        o = y.shape[0]
        out: FloatArray = y.reshape(o, m, ho, wo).transpose(1, 0, 2, 3).reshape(m, -1)
        return out


def _first_layer_cost(p: SquaringPlan, cols: int, batch_hint: int) -> float:
    """Modelled cost of a first layer under the shortcut, per model and round: encrypting
    the model, then products with every owner's chunks (about 5 owners) and sending each
    output to about 5 coalitions' decryptors per model."""
    c = _HESV_COSTS
    chunks = math.ceil(batch_hint * cols / p.capacity)
    arith = p.cost({**c, "out": 0.0}) * p.capacity
    return p.row_blocks * p.a_count * c["enc"] + 5 * chunks * (arith + 5 * p.row_blocks
                                                                * c["out"])


def _hidden_cost(p: SquaringPlan | FoldedPlan, batch_hint: int, n_clients: int = 5) -> float:
    """Modelled cost per sample of a layer after the first (re-encrypted inputs): the
    products a batch of ``batch_hint`` samples needs (padding included) and the
    per-coalition aggregation of the model's ciphertexts, spread over every client's
    samples."""
    c = _HIDDEN_COSTS
    chunks = math.ceil(batch_hint / p.capacity)
    per_product = p.cost(c, encrypt_b=True) * p.capacity
    agg = p.row_blocks * p.a_count * c["agg"] / n_clients
    return (chunks * per_product + agg) / batch_hint


def _hidden_candidates(d_out: int, d_in: int, slots: int, packed: bool
                       ) -> list[SquaringPlan | FoldedPlan]:
    """Rotation-free squares and folded layouts (whose outputs hold exactly ``A B``)."""
    out: list[SquaringPlan | FoldedPlan] = []
    for d in range(1, math.isqrt(slots) + 1):
        try:
            out.append(plan_squaring(d_out, d_in, slots, block=d, rotations=False,
                                     packed=packed))
        except ValueError:
            continue
    rows_options = sorted({math.ceil(d_out / j) for j in range(1, d_out + 1)})
    g = 1
    while g <= slots:
        for rows in rows_options:
            if rows * g <= slots:
                out.append(plan_folded(d_out, d_in, slots, rows=rows, groups=g,
                                       packed=packed))
        g *= 2
    return out


def _layer_plans(spec: ModelSpec, slots: int, batch_hint: int, packed: bool,
                 first_rotations: bool = False) -> list[LayerPlan]:
    plans = []
    for index, layer in enumerate(spec.layers):
        if layer.kind == "dense":
            d_out, d_in, cols = layer.out_features, layer.in_features + 1, 1
            extra: dict[str, Any] = {}
        elif layer.kind == "conv2d":
            c, ho_wo = layer.in_shape[0], layer.out_shape[1:]
            d_out, d_in = layer.out_channels, c * layer.kernel ** 2 + 1
            cols = int(ho_wo[0] * ho_wo[1])
            extra = {"in_shape": layer.in_shape, "kernel": layer.kernel,
                     "stride": layer.stride, "out_hw": (int(ho_wo[0]), int(ho_wo[1]))}
        else:
            raise ValueError(f"HESV evaluates dense and conv2d layers; {spec.name} has a "
                             f"{layer.kind} layer.")
        best: tuple[float, SquaringPlan | FoldedPlan] | None = None
        if index > 0 and cols == 1:
            # inputs re-encrypted per coalition and batch: squares or the folded layout
            for cand in _hidden_candidates(d_out, d_in, slots, packed):
                if len(cand.rotations()) > 24:
                    continue
                cost = _hidden_cost(cand, max(1, batch_hint))
                if best is None or cost < best[0]:
                    best = (cost, cand)
            if best is None:  # pragma: no cover - the folded layout always fits
                raise ValueError(f"no layout for a {layer.kind} layer of {spec.name}")
            plans.append(LayerPlan(layer.kind, best[1], cols, layer.activation, **extra))
            continue
        rotate = first_rotations and index == 0
        for d in range(1, math.isqrt(slots) + 1):
            try:
                p = plan_squaring(d_out, d_in, slots, block=d, rotations=rotate,
                                  packed=packed)
            except ValueError:
                continue
            used = min(p.capacity, max(cols, batch_hint * cols))
            if used < cols or len(p.rotations()) > 24:
                continue
            if rotate:
                cost = _first_layer_cost(p, cols, batch_hint)
            else:
                cost = p.cost(_HESV_COSTS, encrypt_b=True) * p.capacity / used
            if best is None or cost < best[0]:
                best = (cost, p)
        if best is None:
            raise ValueError(f"a {layer.kind} layer of {spec.name} does not fit one "
                             "ciphertext per sample")
        plans.append(LayerPlan(layer.kind, best[1], cols, layer.activation, **extra))
    return plans


@dataclass(frozen=True)
class HESVConfig:
    """What every role derives from the model spec and its own settings."""

    preset: str = HESV_PRESET
    linear_shortcut: bool = True
    batch_hint: int = 1024
    allow_insecure: bool = False
    complex_packing: bool = True

    def slots(self) -> int:
        return get_preset(self.preset, allow_insecure=self.allow_insecure).slots

    def plans(self, spec: ModelSpec) -> list[LayerPlan]:
        return _layer_plans(spec, self.slots(), self.batch_hint, self.complex_packing,
                            self.linear_shortcut)

    def batch_size(self, spec: ModelSpec) -> int:
        """Samples per batch: one batch is one label ciphertext; layers whose products
        hold fewer samples split it into chunks."""
        return max(1, min(self.batch_hint, self.slots()))

    def key_spec(self, spec: ModelSpec) -> KeySpec:
        rot = sorted({r for p in self.plans(spec) for r in p.plan.rotations()})
        return KeySpec.create(self.preset, rot, self.complex_packing,
                              allow_insecure=self.allow_insecure)


# ---------------------------------------------------------------------- messages
def _cts(ctx: CKKSContext, blobs: Sequence[bytes]) -> list[Ciphertext]:
    return [ctx.deserialize(b) for b in blobs]


# ---------------------------------------------------------------------- client
class HESVClient:
    """A client: encrypts its data and models, decrypts what Prop. 6.8 allows it to.

    Parameters
    ----------
    index : int
        This client's id (position in the record).
    keys : PartyKeys
        From the key set-up (holds the secret key).
    spec : ModelSpec
    config : HESVConfig
    n_clients : int
    x, y : arrays
        This client's test data.
    level : {"strong", "weak"}
        The rules this client enforces on what it decrypts.
    """

    def __init__(self, index: int, keys: PartyKeys, spec: ModelSpec, config: HESVConfig,
                 n_clients: int, x: FloatArray, y: NDArray[np.int64], *,
                 level: str = "strong", view: ClientView | None = None) -> None:
        self._index = index
        #: this client's own view under the decryption rule (fedsec.shapley.views); None
        #: under the paper's Prop. 6.8 schedule
        self._view = view
        self._keys = keys
        self._ctx = keys.context
        self._binding = Binding(keys.session, PROTOCOL, f"client:{index}")
        self._spec = spec
        self._config = config
        self._n_clients = n_clients
        self._plans = config.plans(spec)
        self._batch = config.batch_size(spec)
        self._x, self._y = x, y
        self._level = level
        self._seen: dict[tuple[int, int, int, int], set[int]] = {}
        self._answered = Answered()  # request ids answered (each once)
        self._round = 0  # the newest round asked about: rounds are evaluated in order
        self._ties = 0
        #: this client's seconds by kind of work
        self.clock = Clock()

    @property
    def index(self) -> int:
        """This client's id."""
        return self._index

    @property
    def ties(self) -> int:
        """Predictions this client made on scores tied within the CKKS noise
        (:func:`tie_break`): decided as exact ties."""
        return self._ties

    @property
    def name(self) -> str:
        """This client's role name on the network (``"client:<index>"``)."""
        return self._binding.me

    def handle(self, request: bytes) -> bytes:
        """Answer a server request (a layer output or a label difference)."""
        kind = wire.peek_kind(request)
        if kind == "hesv/diff":
            return self.count(request)
        if kind == "hesv/layer":
            return self.decrypt_layer(request)
        raise ProtocolError(f"a client answers no {kind[:40]!r} message")

    def _request(self, msg: wire.Message, step: str, layer_hi: int
                 ) -> tuple[int, int, int, int, int]:
        """A server request's context, checked (this session, from the server, to this
        client, of this step): ``(round, mask, owner, batch, layer)``."""
        ctx = context_of(msg.meta)
        self._binding.check(msg.meta, step=step, sender=SERVER, round=ctx.round, index=None,
                            what=f"{step} request")
        mask, owner, batch, layer = fields.integers({"index": list(ctx.index)}, "index", 0,
                                                    _MAX_MASK, length=4)
        if (ctx.round < 0 or owner >= self._n_clients or batch > _MAX_BATCHES
                or not 1 <= layer <= layer_hi):
            raise fields.malformed("index")
        return ctx.round, mask, owner, batch, layer

    def _check_chain(self, t: int, mask: int, owner: int, batch: int, mowner: int | None,
                     position: int) -> None:
        """The request is of the current round or a newer one, this client is the chain's
        member for it (the chain both sides derive, Prop. 6.8), and its id is fresh."""
        if t < self._round:
            raise ReplayRefused("request of an earlier round (a replay)", check="round")
        try:
            chain = decryptor_chain(self._n_clients, len(self._plans), owner, mowner,
                                    level=self._level,
                                    start=chain_start(t, mask, owner, batch, self._n_clients))
        except ValueError:
            raise ProtocolError("no decryptor chain for this request") from None
        if chain[position] != self.index:
            raise self._refuse("it is not the chain's decryptor for this step (misrouted)")

    def _one_hot(self, labels: NDArray[np.int64], *, conj: bool = False) -> list[bytes]:
        """``[[1{labels = c}]]`` for every class ``c``, one level above the lowest; with
        complex packing two classes per ciphertext, ``[[1{·= 2k} ± i·1{·= 2k+1}]]`` (``−``
        for ``conj``: the predictions, so that the server's product sums the pair in its
        real part). Two classes: ``[[labels]]``."""
        pid = self._ctx.parms_id_at_level(_LABEL_LEVEL)
        nc = self._spec.layers[-1].out_features
        if nc == 2:
            return [self._ctx.encrypt_bytes(labels.astype(np.float64), parms_id=pid)]
        hot = [(labels == c).astype(np.float64) for c in range(nc)]
        if not self._config.complex_packing:
            return [self._ctx.encrypt_bytes(h, parms_id=pid) for h in hot]
        sign = -1.0 if conj else 1.0
        return [self._ctx.encrypt_bytes(
                    hot[c] + 1j * sign * (hot[c + 1] if c + 1 < nc else 0.0 * hot[c]),
                    parms_id=pid)
            for c in range(0, nc, 2)]

    def upload_data(self) -> bytes:
        """Encrypted batches ``[[X^(1)]]`` (Matrix-Squaring operands) and one-hot labels
        (one ciphertext per class)."""
        with self.clock("encryption"):
            plan = self._plans[0]
            blobs: list[bytes] = []
            sizes = []
            for start in range(0, len(self._y), self._batch):
                xb = self._x[start:start + self._batch]
                yb = np.asarray(self._y[start:start + self._batch], dtype=np.int64)
                for v in plan.encode_inputs(xb):
                    blobs.append(self._ctx.encrypt_bytes(v))
                blobs.extend(self._one_hot(yb))
                sizes.append(len(yb))
            meta = self._binding.bind({"sizes": sizes}, step="data", to=SERVER)
            return wire.encode("hesv/data", meta, blobs)

    def upload_model(self, round_index: int, params: Sequence[NDArray[Any]], *,
                     kind: str = "local") -> bytes:
        """Encrypted ``θ`` (every layer as Matrix-Squaring operands)."""
        with self.clock("encryption"):
            blobs: list[bytes] = []
            for lp, layer in zip(self._plans, self._spec.layers_of(params), strict=True):
                for vecs in lp.plan.encode_a(lp.matrix(layer)):
                    blobs.extend(self._ctx.encrypt_bytes(v) for v in vecs)
            meta = self._binding.bind({"kind": kind}, step="model", to=SERVER,
                                      round=round_index)
            return wire.encode("hesv/model", meta, blobs)

    def _refuse(self, why: str) -> PolicyViolation:
        return PolicyViolation(f"{self.name} refuses to decrypt: {why}", check="decryptor")

    @staticmethod
    def _model_owner(meta: dict[str, Any]) -> int | None:
        if meta.get("model_owner") is None:
            return None
        return fields.integer(meta, "model_owner", 0, _MAX_MASK)

    @receives("hesv/layer")
    def decrypt_layer(self, request: bytes) -> bytes:
        """Decrypt ``[[Ŷ^(l)]]``; return ``[[X^(l+1)]]`` or, after the last layer, the
        encrypted predicted labels."""
        msg = wire.decode(request, expect="hesv/layer", max_bytes=MAX_MESSAGE_BYTES)
        n_layers = len(self._plans)
        t, mask, owner, batch, layer = self._request(msg, "layer", n_layers)
        m = fields.integer(msg.meta, "m", 1, self._batch)
        mowner = self._model_owner(msg.meta)
        key = (t, mask, owner, batch)
        seen = self._seen.setdefault(key, set())
        if self._view is not None:  # the decryption rule on its own view
            if t < self._round:
                raise ReplayRefused("request of an earlier round (a replay)", check="round")
            v = self._view.requested(t, mask)
            local = owner == self._index and self._view.knows(v)
            if not local and (layer - 1 in seen or (self._level == "strong" and seen)):
                raise self._refuse("it decrypted another layer of the same evaluation")
            self._view.check(v, [owner * _MAX_BATCHES + batch], [owner],
                             first_layer=layer == 1, blinded=False)
        else:
            # Prop. 6.8, as far as this client is concerned
            if mowner == self._index:
                raise self._refuse("the model under test is its own local model")
            if owner == self._index and (layer in (1, n_layers) or self._level == "strong"):
                raise self._refuse("it owns the batch (it would see its own input's output "
                                   "or its predicted labels)")
            if layer - 1 in seen or (self._level == "strong" and seen):
                raise self._refuse("it decrypted another layer of the same evaluation")
            self._check_chain(t, mask, owner, batch, mowner, layer - 1)
        rid = request_id(msg.meta, RID)
        lp = self._plans[layer - 1]
        if len(msg.blobs) != lp.plan.row_blocks * len(lp.chunks(m)):
            raise ProtocolError("layer output has the wrong number of ciphertexts")
        with self.clock("decryption"):
            cts = _cts(self._ctx, msg.blobs)
            self._answered.once(rid, what="layer request")
            self._round = t
            seen.add(layer)  # from here on this client knows Ŷ^(l)
            vals = [self._ctx.decrypt(c).real for c in cts]
        with self.clock("other"):
            h = activate(lp.activation, lp.decode_outputs(vals, m))
        if not np.isfinite(h).all():
            raise ProtocolError("the decrypted layer output is not finite")
        index = (mask, owner, batch, layer)
        if layer < n_layers:
            nxt = self._plans[layer]
            with self.clock("other"):
                vecs = nxt.encode_inputs(h)
            with self.clock("encryption"):
                try:
                    blobs = [self._ctx.encrypt_bytes(v) for v in vecs]
                except ValueError:  # SEAL: beyond what the parameters can encode
                    raise ProtocolError("the decrypted layer output is out of range") from None
            meta = self._binding.bind({}, step="activated", to=SERVER, round=t, index=index,
                                      re_=rid)
            return wire.encode("hesv/activated", meta, blobs)
        labels, ties = tie_break(h)
        self._ties += ties
        seen.add(n_layers + 1)  # knows the predictions: may not also see which are right
        with self.clock("encryption"):
            blobs = self._one_hot(labels, conj=True)
        meta = self._binding.bind({}, step="predicted", to=SERVER, round=t, index=index,
                                  re_=rid)
        return wire.encode("hesv/predicted", meta, blobs)

    @receives("hesv/diff")
    def count(self, request: bytes) -> bytes:
        """Decrypt ``[[Σ_c Y_c·Ŷ_c]]`` (1 where a prediction is right, 0 where it is wrong,
        up to CKKS noise) and return how many predictions are correct. Values that are not
        near 0 or 1 are refused: this client decrypts bits, never label differences."""
        msg = wire.decode(request, expect="hesv/diff", max_bytes=MAX_MESSAGE_BYTES)
        n_layers = len(self._plans)
        t, mask, owner, batch, layer = self._request(msg, "diff", n_layers + 1)
        if layer != n_layers + 1:
            raise fields.malformed("index")
        m = fields.integer(msg.meta, "m", 1, self._batch)
        if owner == self._index:
            raise self._refuse("it owns the batch (which predictions are right would "
                               "reveal its predicted labels)")
        if len(self._seen.get((t, mask, owner, batch), set()) & {n_layers + 1}):
            raise self._refuse("it knows the predicted labels (which are right would "
                               "reveal Y)")
        mowner = self._model_owner(msg.meta)
        if self._view is None:
            self._check_chain(t, mask, owner, batch, mowner, n_layers)
        elif t < self._round:
            raise ReplayRefused("request of an earlier round (a replay)", check="round")
        rid = request_id(msg.meta, RID)
        if len(msg.blobs) != 1:
            raise ProtocolError("a correctness message holds one ciphertext")
        with self.clock("decryption"):
            ct = self._ctx.deserialize(msg.blobs[0])
            self._answered.once(rid, what="difference request")
            self._round = t
            bits = self._ctx.decrypt(ct).real[:m]
        right = np.rint(bits)
        if not (np.all((right == 0) | (right == 1)) and np.all(np.abs(bits - right) < 0.25)):
            raise ProtocolError("the correctness values are not bits")
        if self._spec.layers[-1].out_features == 2:  # the server sent (Y − Ŷ)² = 1 − right
            right = 1 - right
        cnt = int(right.sum())
        meta = self._binding.bind({"count": cnt}, step="count", to=SERVER, round=t,
                                  index=(mask, owner, batch, layer), re_=rid)
        return wire.encode("hesv/count", meta)


# ---------------------------------------------------------------------- server
@dataclass
class _Eval:
    """One (round, coalition, batch) evaluation in flight."""

    t: int
    mask: int
    owner: int
    batch: int
    m: int
    chain: tuple[int, ...]
    model_owner: int | None
    layer: int = 1
    rid: str = ""  # the id of the request in flight (its answer must echo it)


@dataclass
class _Batch:
    m: int
    b: list[Ciphertext]
    y: list[Ciphertext]  # one-hot, one per class


class HESVServer:
    """The server: aggregates encrypted models and evaluates them (Alg. 1-2).

    Parameters
    ----------
    context : CKKSContext
        The public context from the key set-up (no secret key).
    spec : ModelSpec
    config : HESVConfig
    n_clients : int
    rounds : list of (participants, weights)
        ``I^t`` and FedAvg's ``ω_i^t`` (public training metadata).
    session : str
        The key set-up's session id.
    level : {"strong", "weak"}
    """

    def __init__(self, context: CKKSContext, spec: ModelSpec, config: HESVConfig,
                 n_clients: int, rounds: Sequence[tuple[tuple[int, ...], FloatArray]],
                 session: str, *, level: str = "strong", strict: bool = False) -> None:
        if context.has_secret_key:
            raise ValueError("the server's context must not hold the secret key")
        self._ctx = context
        self._spec = spec
        self._config = config
        self._n = n_clients
        self._rounds = list(rounds)
        self._binding = Binding(session, PROTOCOL, SERVER)
        self._level = level
        #: the decryption rule (fedsec.shapley.views); made once the test data are in
        self._strict = strict
        self._sched: Scheduler | None = None
        self._sid: dict[tuple[int, int], int] = {}
        self._turn = 0
        self._plans = config.plans(spec)
        self._batch = config.batch_size(spec)
        first = self._plans[0].plan
        if not isinstance(first, SquaringPlan):  # pragma: no cover - planner invariant
            raise ValueError("the first layer is laid out as Matrix-Squaring squares")
        # With a rotate-and-sum (first layer, shortcut only), slots outside each tile's
        # first rows*d hold partial sums: the weighting zeroes them before anyone decrypts.
        self._valid_slots: FloatArray | None = None
        if first.fold > 1:
            if not config.linear_shortcut:  # pragma: no cover - plans never do this
                raise ValueError("rotating first layers need the shortcut's weighting")
            v = np.zeros(first.slots)
            for tile in range(first.tiles):
                v[tile * first.block ** 2:tile * first.block ** 2 + first.rows * first.block] = 1
            self._valid_slots = v
        self._data: dict[int, list[_Batch]] = {}
        self._models: dict[tuple[int, int | str], list[list[list[Ciphertext]]]] = {}
        self._first: dict[tuple[int, int | str, int, int], list[Ciphertext]] = {}
        self._agg: dict[tuple[int, int], list[list[list[Ciphertext]]]] = {}
        self._weighted: dict[tuple[int, int | str], tuple[list[list[list[Ciphertext]]],
                                                          list[list[list[Ciphertext]]]]] = {}
        self._evals: dict[tuple[int, int, int, int], _Eval] = {}
        self._counts: dict[tuple[int, int], int] = {}
        self._pending: dict[tuple[int, int], int] = {}
        self.clock = Clock()
        self._decryptions: dict[int, int] = dict.fromkeys(range(n_clients), 0)

    # ------------------------------------------------------------ uploads
    def _decode(self, data: bytes, kind: str, sender: int) -> wire.Message:
        msg = wire.decode(data, expect=kind, max_bytes=MAX_MESSAGE_BYTES)
        self._binding.check(msg.meta, step=kind.split("/")[1], sender=f"client:{sender}",
                            what=f"{kind} message")
        return msg

    @receives("hesv/data")
    def receive_data(self, sender: int, data: bytes) -> None:
        """Store client ``sender``'s encrypted test batches."""
        with self.clock("other"):
            msg = self._decode(data, "hesv/data", sender)
            sizes = fields.integers(msg.meta, "sizes", 1, self._batch,
                                    max_length=_MAX_BATCHES, what="test-data upload")
            lp = self._plans[0]
            nc = _label_cts(self._spec.layers[-1].out_features, self._config.complex_packing)
            if len(msg.blobs) != sum(len(lp.chunks(m)) * lp.plan.b_count + nc for m in sizes):
                raise ProtocolError("malformed test-data upload")
            batches, pos = [], 0
            for m in sizes:
                size = len(lp.chunks(m)) * lp.plan.b_count
                cts = [self._ctx.deserialize(b, at_top=True, scale=self._ctx.scale)
                       for b in msg.blobs[pos:pos + size]]
                ys = [self._label_ct(b) for b in msg.blobs[pos + size:pos + size + nc]]
                pos += size + nc
                batches.append(_Batch(m, cts, ys))
            self._data[sender] = batches

    def _label_ct(self, blob: bytes) -> Ciphertext:
        """One-hot labels travel one level above the lowest (their product is rescaled)."""
        ct = self._ctx.deserialize(blob, scale=self._ctx.scale)  # fresh: the context's scale
        if ct.parms_id() != self._ctx.parms_id_at_level(_LABEL_LEVEL):
            raise ProtocolError("label ciphertext is not at the label level")
        return ct

    @receives("hesv/model")
    def receive_model(self, sender: int, data: bytes) -> None:
        """Store an encrypted local (or, from client 0, global) model of a round."""
        with self.clock("other"):
            self._receive_model(sender, data)

    def _receive_model(self, sender: int, data: bytes) -> None:
        msg = wire.decode(data, expect="hesv/model", max_bytes=MAX_MESSAGE_BYTES)
        t = context_of(msg.meta).round
        if not 0 <= t < len(self._rounds):
            raise fields.malformed("round")
        self._binding.check(msg.meta, step="model", sender=f"client:{sender}", round=t,
                            what="hesv/model message")
        kind = msg.meta.get("kind")
        if kind == "global" and sender == 0:
            key: int | str = "global"
        elif kind == "local" and sender in self._rounds[t][0]:
            key = sender
        else:
            raise ProtocolError("model upload of an unexpected kind or client")
        need = [lp.plan.row_blocks * lp.plan.a_count for lp in self._plans]
        if len(msg.blobs) != sum(need):
            raise ProtocolError("model upload has the wrong number of ciphertexts")
        cts = [self._ctx.deserialize(b, at_top=True, scale=self._ctx.scale) for b in msg.blobs]
        layers, pos = [], 0
        for lp in self._plans:
            blocks = []
            for _ in range(lp.plan.row_blocks):
                blocks.append(cts[pos:pos + lp.plan.a_count])
                pos += lp.plan.a_count
            layers.append(blocks)
        self._models[(t, key)] = layers

    # ------------------------------------------------------------ arithmetic
    def _weights(self, t: int, mask: int) -> list[tuple[int, float]]:
        parts, w = self._rounds[t]
        sel = [j for j in range(len(parts)) if mask >> j & 1]
        total = float(sum(w[j] for j in sel))
        return [(parts[j], float(w[j]) / total) for j in sel]

    def _scaled(self, ct: Ciphertext, weight: float) -> Ciphertext:
        # encoded at exactly the prime the rescale divides by: the scale is unchanged
        return self._ctx.multiply_const(ct, weight, scale=float(self._ctx.rescale_prime(ct)),
                                       rescale=True)

    def _combine(self, terms: list[tuple[float, list[Ciphertext]]], *,
                 mask: FloatArray | None = None) -> list[Ciphertext]:
        if mask is not None:  # weights and the mask of the valid slots in one product
            out = []
            for k in range(len(terms[0][1])):
                out.append(self._ctx.add_many([self._ctx.multiply_plain(
                    cts[k], w * mask, scale=float(self._ctx.rescale_prime(cts[k])),
                    rescale=True)
                    for w, cts in terms]))
            return out
        if len(terms) == 1:
            return terms[0][1]
        out = []
        for k in range(len(terms[0][1])):
            out.append(self._ctx.add_many([self._scaled(cts[k], w) for w, cts in terms]))
        return out

    def _weighted_model(self, t: int, key: int | str) -> list[list[list[Ciphertext]]]:
        """Model ``key`` of round ``t``, its layers after the first multiplied by its share
        ``w_i / W_t`` of the round's FedAvg weight (the global model: 1), encoded at scale
        ``q`` and not rescaled. Once per model upload: the stored copy of those layers is
        released (nothing else reads them); the first layer stays as uploaded (index 0 of
        the result is empty)."""
        layers = self._models[(t, key)]
        hit = self._weighted.get((t, key))
        if hit is not None and hit[0] is layers:
            return hit[1]
        if key == "global":
            weight = 1.0
        else:
            parts, w = self._rounds[t]
            weight = float(w[parts.index(int(key))]) / float(np.sum(w))
        out: list[list[list[Ciphertext]]] = [[]]
        for li in range(1, len(layers)):
            out.append([[self._ctx.multiply_const(ct, weight,
                                                 scale=float(self._ctx.rescale_prime(ct)))
                         for ct in block] for block in layers[li]])
            layers[li] = []
        self._weighted[(t, key)] = (layers, out)
        return out

    def _model_layer(self, t: int, mask: int, layer: int) -> list[list[Ciphertext]]:
        """``[[θ_S^(l)]]`` times the last prime ``q`` (aggregated once per coalition).

        The weights are encoded at scale ``q`` and *not* rescaled: the product with the
        data is rescaled twice instead (see :meth:`_product`), so the rounding of a rescale
        never lands on the model's parameters -- it would be multiplied by every input.

        The first layer (paper path only: the shortcut never aggregates it) is weighted
        per coalition by ``ω_{i|S}``. Layers after the first are weighted once per round
        by ``w_i / W_t`` (:meth:`_weighted_model`), and a coalition's sum is renormalised to
        ``ω_{i|S} = w_i / W_S`` for free, by recording its CKKS scale divided by
        ``W_t / W_S`` (the ciphertext is untouched: no level used) -- additions only per
        coalition instead of ``|S|`` plaintext products per ciphertext. The price: the
        last rescale's rounding on these layers' outputs is scaled by ``W_t / W_S`` too
        (kept off the first layer, whose outputs are the logistic models' scores)."""
        key = (t, mask)
        if key not in self._agg:
            self._agg = {}  # one coalition at a time
            if mask == 0:
                ws: list[tuple[float, int | str]] = [(1.0, "global")]
                factor = 1.0
            else:
                ws = [(w, c) for c, w in self._weights(t, mask)]
                parts, w_all = self._rounds[t]
                factor = float(np.sum(w_all)) / float(sum(
                    w_all[j] for j in range(len(parts)) if mask >> j & 1))
            agg: list[list[list[Ciphertext]]] = []
            for li, lp in enumerate(self._plans):
                blocks: list[list[Ciphertext]] = []
                if li == 0:
                    if not self._config.linear_shortcut:
                        for j in range(lp.plan.row_blocks):
                            blocks.append([self._ctx.add_many([self._ctx.multiply_const(
                                self._models[(t, c)][0][j][k], w, scale=float(
                                    self._ctx.rescale_prime(self._models[(t, c)][0][j][k])))
                                for w, c in ws]) for k in range(lp.plan.a_count)])
                    agg.append(blocks)
                    continue
                models = [self._weighted_model(t, c) for _, c in ws]
                for j in range(lp.plan.row_blocks):
                    row = []
                    for k in range(lp.plan.a_count):
                        ct = self._ctx.add_many([m[li][j][k] for m in models])  # a new object
                        ct.scale = float(ct.scale) / factor
                        row.append(ct)
                    blocks.append(row)
                agg.append(blocks)
            self._agg[key] = agg
        return self._agg[key][layer - 1]

    def _product(self, layer: int, model: list[list[Ciphertext]], b: list[Ciphertext], *,
                 weighted: bool = False) -> list[Ciphertext]:
        """Every chunk's product, chunk after chunk (rescaled once more for a
        :meth:`_model_layer` model)."""
        plan = self._plans[layer - 1].plan
        per = plan.b_count
        out: list[Ciphertext] = []
        for k in range(len(b) // per):
            outs = matrix_product(self._ctx, plan, model, b[k * per:(k + 1) * per])
            out.extend(self._ctx.rescale(o) for o in outs) if weighted else out.extend(outs)
        return out

    def _first_layer(self, t: int, mask: int, owner: int, batch: int) -> list[Ciphertext]:
        data = self._data[owner][batch]
        if not self._config.linear_shortcut:
            return self._product(1, self._model_layer(t, mask, 1), data.b, weighted=True)

        def local(key: int | str) -> list[Ciphertext]:
            k = (t, key, owner, batch)
            if k not in self._first:
                self._first[k] = self._product(1, self._models[(t, key)][0], data.b)
            return self._first[k]

        valid = self._valid_slots
        if mask == 0:
            return local("global") if valid is None else self._combine(
                [(1.0, local("global"))], mask=valid)
        return self._combine([(w, local(c)) for c, w in self._weights(t, mask)], mask=valid)

    # ------------------------------------------------------------ Alg. 2
    def _model_owner(self, t: int, mask: int) -> int | None:
        if mask and mask & (mask - 1) == 0:
            return self._rounds[t][0][mask.bit_length() - 1]
        return None

    def start(self, t: int, mask: int) -> list[tuple[int, bytes]]:
        """Begin testing ``θ_S^t`` on every batch: ``(recipient, request)`` pairs."""
        out = []
        self._counts[(t, mask)] = 0
        self._pending[(t, mask)] = 0
        mowner = self._model_owner(t, mask)
        for owner in sorted(self._data):
            for k, b in enumerate(self._data[owner]):
                if self._strict:
                    chain = self._strict_chain(t, mask, owner, k)
                else:
                    salt = chain_start(t, mask, owner, k, self._n)
                    chain = decryptor_chain(self._n, len(self._plans), owner, mowner,
                                            level=self._level, start=salt)
                ev = _Eval(t, mask, owner, k, b.m, chain, mowner)
                self._evals[(t, mask, owner, k)] = ev
                self._pending[(t, mask)] += 1
                with self.clock("arithmetic"), refuse_transparent():
                    cts = self._first_layer(t, mask, owner, k)
                out.append(self._layer_request(ev, cts))
        return out

    def scheduler(self) -> Scheduler:
        """The decryption rule's scheduler over the batches received (one id each)."""
        if self._sched is None:
            keys = [(o, k) for o in sorted(self._data) for k in range(len(self._data[o]))]
            self._sid = {key: i for i, key in enumerate(keys)}
            space = ModelSpace.of((p, w) for p, w in self._rounds)
            self._sched = Scheduler(space, self._n, np.array([o for o, _ in keys],
                                                           dtype=np.int64))
        return self._sched

    def plan_round(self, t: int) -> None:
        """Place every coalition of round ``t`` on every batch before any work (exact
        SSVs); raises :class:`~fedsec.shapley.views.UnsafeSchedule`."""
        sched = self.scheduler()
        masks = list(range(1 << len(self._rounds[t][0])))
        for sid in self._sid.values():
            sched.plan(t, masks, [sid])

    def _strict_chain(self, t: int, mask: int, owner: int, batch: int) -> tuple[int, ...]:
        sched = self.scheduler()
        self._turn += 1
        chain = sched.chain(t, mask, [self._sid[(owner, batch)]], len(self._plans),
                            self._turn)
        last = chain[-1]
        for k in range(self._n):  # i_{L+2}: neither the owner nor who knows the labels
            c = (self._turn + k) % self._n
            if c not in (owner, last):
                return (*chain, c)
        raise UnsafeSchedule("no client may count the predictions")  # n < 3

    def _request(self, kind: str, ev: _Eval, to: int, cts: list[Ciphertext]
                 ) -> tuple[int, bytes]:
        """A request to client ``to`` (a fresh id), for the evaluation's current layer."""
        with self.clock("other"):
            ev.rid = new_request_id()
            meta = self._binding.bind({"m": ev.m, "model_owner": ev.model_owner},
                                      step=kind.split("/")[1], to=f"client:{to}", round=ev.t,
                                      index=(ev.mask, ev.owner, ev.batch, ev.layer),
                                      rid=ev.rid)
            msg = wire.encode(kind, meta, [self._ctx.serialize(c) for c in cts])
        self._decryptions[to] += 1
        return to, msg

    def _layer_request(self, ev: _Eval, cts: list[Ciphertext]) -> tuple[int, bytes]:
        return self._request("hesv/layer", ev, ev.chain[ev.layer - 1], cts)

    def _eval_of(self, msg: wire.Message, sender: int) -> _Eval:
        """The evaluation in flight a reply names, checked: this session, from ``sender``
        to the server, the step its kind names; the client asked; the layer in flight;
        the id of the request in flight."""
        if msg.kind not in _REPLIES:
            raise ProtocolError(f"unexpected {msg.kind!r} reply")
        ctx = self._binding.check(msg.meta, step=msg.kind.split("/")[1],
                                  sender=f"client:{sender}", round=context_of(msg.meta).round,
                                  index=None, what="reply")
        mask, owner, batch, layer = fields.integers({"index": list(ctx.index)}, "index", 0,
                                                    _MAX_MASK, length=4)
        ev = self._evals.get((ctx.round, mask, owner, batch))
        if ev is None:
            raise ProtocolError("reply to no evaluation in flight")
        expected = ev.chain[ev.layer - 1] if msg.kind != "hesv/count" else ev.chain[-1]
        if sender != expected:
            raise ProtocolError("reply from a client that was not asked")
        if layer != ev.layer:
            raise ReplayRefused("reply to another layer of this evaluation (a replay)",
                                check="layer")
        if request_id(msg.meta, RE) != ev.rid:
            raise ReplayRefused("reply to a request not in flight (stale or duplicated "
                                "request id)", check="request-id")
        return ev

    @receives(*_REPLIES)
    def step(self, sender: int, reply: bytes) -> tuple[int, bytes] | None:
        """Process a client's reply; return the next request, or None when a batch's
        count is in."""
        with self.clock("other"):
            msg = wire.decode(reply, max_bytes=MAX_MESSAGE_BYTES)
            ev = self._eval_of(msg, sender)
        n_layers = len(self._plans)
        if msg.kind == "hesv/activated" and ev.layer < n_layers:
            lp = self._plans[ev.layer]
            if len(msg.blobs) != lp.plan.b_count * len(lp.chunks(ev.m)):
                raise ProtocolError("activated features have the wrong number of ciphertexts")
            with self.clock("other"):
                b = [self._ctx.deserialize(x, at_top=True, scale=self._ctx.scale)
                     for x in msg.blobs]
            ev.layer += 1
            with self.clock("arithmetic"), refuse_transparent():
                cts = self._product(ev.layer, self._model_layer(ev.t, ev.mask, ev.layer), b,
                                    weighted=True)
            return self._layer_request(ev, cts)
        if msg.kind == "hesv/predicted" and ev.layer == n_layers:
            if len(msg.blobs) != _label_cts(self._spec.layers[-1].out_features,
                                            self._config.complex_packing):
                raise ProtocolError("predicted labels must be one ciphertext per class")
            with self.clock("other"):
                pred = [self._label_ct(b) for b in msg.blobs]
            ys = self._data[ev.owner][ev.batch].y
            with self.clock("arithmetic"):
                if len(pred) == 1:  # two classes: (Y − Ŷ)², 0 where right, else 1
                    diff = self._ctx.square(self._ctx.sub(ys[0], pred[0]))
                elif self._spec.layers[-1].out_features > len(pred):  # complex pairs
                    # (y + i y')(ŷ − i ŷ') = y ŷ + y' ŷ' + i (y' ŷ − y ŷ'): the imaginary
                    # part would show a wrong pair's labels; w + conj(w) keeps twice the
                    # real part only (halved for free). Conjugated before the rescale:
                    # at the lowest level the key switch's noise reaches the bit.
                    w = self._ctx.add_many([self._ctx.multiply(y, p, rescale=False)
                                           for y, p in zip(ys, pred, strict=True)])
                    diff = self._ctx.with_value_factor(self._ctx.rescale(
                        self._ctx.add(w, self._ctx.conjugate(w))), 0.5)
                else:  # Σ_c Y_c·Ŷ_c: 1 where right, else 0
                    diff = self._ctx.add_many([self._ctx.multiply(y, p) for y, p in zip(
                        ys, pred, strict=True)])
            ev.layer += 1
            return self._request("hesv/diff", ev, ev.chain[-1], [diff])
        if msg.kind == "hesv/count" and ev.layer == n_layers + 1:
            cnt = fields.integer(msg.meta, "count", 0, ev.m)
            self._counts[(ev.t, ev.mask)] += cnt
            self._pending[(ev.t, ev.mask)] -= 1
            del self._evals[(ev.t, ev.mask, ev.owner, ev.batch)]
            return None
        raise ProtocolError(f"unexpected {msg.kind!r} reply at this step")

    def utility(self, t: int, mask: int) -> float:
        """``v(θ_S^t)`` once every batch's count is in."""
        if self._pending.get((t, mask)) != 0:
            raise ProtocolError("not every batch of this coalition has been counted")
        total = sum(b.m for bs in self._data.values() for b in bs)
        return self._counts[(t, mask)] / total

    def end_round(self, t: int) -> None:
        """Drop a round's products and models (memory)."""
        self._first = {k: v for k, v in self._first.items() if k[0] != t}
        self._agg = {}
        self._models = {k: v for k, v in self._models.items() if k[0] != t}
        self._weighted = {k: v for k, v in self._weighted.items() if k[0] != t}


# ---------------------------------------------------------------------- driver
def _key_setup(n: int, spec: KeySpec, net: Network) -> tuple[KeySetupAggregator,
                                                             list[PartyKeys]]:
    """The signed key set-up (the server relays), every message over ``net``."""
    identities = [Identity(f"client-{i}") for i in range(n)]
    roster = Roster.of(identities)
    parties = [KeySetupParty(i, roster, spec, min_parties=n) for i in identities]
    agg = KeySetupAggregator(roster, spec, min_parties=n)
    names = [f"client:{i}" for i in range(n)]
    holder, request = agg.request(net.gather(names, SERVER, [p.hello() for p in parties]))
    by_name = {p.name: (i, p) for i, p in enumerate(parties)}
    hi, hp = by_name[agg.names[holder]]
    request = net.send(SERVER, names[hi], request)
    deliveries = agg.accept(net.send(names[hi], SERVER, hp.offer(request)))
    order = [by_name[name][0] for name in agg.names]
    got = net.scatter(SERVER, [names[i] for i in order], deliveries)
    confirms = net.gather([names[i] for i in order], SERVER,
                          [parties[i].receive(d) for i, d in zip(order, got, strict=True)])
    confirmed = agg.confirm(confirms)
    got = net.broadcast(SERVER, [names[i] for i in order], confirmed)
    keys = {i: parties[i].finish(c) for i, c in zip(order, got, strict=True)}
    return agg, [keys[i] for i in range(n)]


class _SecureGame:
    def __init__(self, k: int, value: Callable[[int], float]) -> None:
        self._k = k
        self._value = value
        self.cache: dict[int, float] = {}

    @property
    def k(self) -> int:
        return self._k

    def value(self, mask: int) -> float:
        if mask not in self.cache:
            self.cache[mask] = self._value(mask)
        return self.cache[mask]


def hesv_shapley(record: TrainingRecord, test_sets: TestSets, *, estimator: str = "exact",
                 budget: int | None = None, seed: int = 0, linear_shortcut: bool = True,
                 preset: str | None = None, allow_insecure: bool = False,
                 complex_packing: bool = True, schedule: str = "strict",
                 progress: Progress | None = None, network: Network | None = None
                 ) -> SecureShapleyResult:
    """Federated Shapley values by HESV (Zheng et al., Alg. 1-2), every role in one process.

    Parameters
    ----------
    record : TrainingRecord
        The rounds of federated training (local models stay with their clients: each
        client encrypts its own).
    test_sets : sequence of (X_i, y_i)
        Each client's private test data, in client order.
    estimator : {"exact", "ps", "gt", "ks", "gtg"}, default="exact"
        Exact SSVs (all coalitions) or one of Zheng et al.'s estimators over the secure utility.
    budget : int, optional
        The estimator's per-round budget (:data:`fedsec.shapley.fsv.DEFAULT_BUDGETS`).
    seed : int, default=0
        Seed of the estimators' coalition sampling (not a secret).
    linear_shortcut : bool, default=True
        Derive every coalition's first-layer output from the local models' products
        (see the module docstring).
    preset : str, optional
        The CKKS preset. Default: :func:`default_preset` (``"CKKS_128_N4096_DEPTH2_S24"``,
        the paper's ring, for one-layer models; ``"CKKS_128_N8192_DEPTH2_S40"`` for deeper
        ones).
    allow_insecure : bool, default=False
        Accept ``INSECURE_TEST_*`` presets (tests only).
    complex_packing : bool, default=True
        Two product terms per ciphertext in the complex slots (half the ciphertexts,
        encryptions and products; :func:`fedsec.crypto.matmul.plan_squaring`).
    schedule : {"strict", "paper"}, default="strict"
        Who may decrypt what: the decryption rule of :mod:`fedsec.shapley.views` (a run
        it cannot schedule is refused before any model is encrypted) or Prop. 6.8 only
        (a :class:`~fedsec.errors.PrivacyWarning` says what leaks); see
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
        ``protocol="hesv"``, the FSVs and the accounting (bytes per message, time split).

    Warns
    -----
    PrivacyWarning
        With fewer than ``L + 2`` clients (the weaker level of Prop. 6.8).
    """
    import time

    where = "hesv_shapley"
    budget = check_protocol_args(record, estimator, budget, where=where,
                                 linear_shortcut=linear_shortcut)
    spec = record.spec
    preset = default_preset(spec) if preset is None else preset
    get_preset(preset, allow_insecure=allow_insecure)
    n = record.n_clients
    sets = check_test_sets(test_sets, n, spec.in_features, where=where)
    n_layers = len(spec.layers)
    check_schedule(schedule, where)
    strict = schedule == "strict"
    level = "strong" if strict else security_level(n, n_layers)
    if level == "weak":
        warnings.warn(f"HESV with {n} clients and {n_layers} layers meets only the weak "
                      f"level of Prop. 6.8 (n >= {n_layers + 2} defeats multi-layer "
                      "equation-solving attacks too)", PrivacyWarning, stacklevel=2)
    if not isinstance(complex_packing, bool):
        raise TypeError(f"The 'complex_packing' parameter of {where} must be a bool. "
                        f"Got {complex_packing!r} instead.")
    config = HESVConfig(preset, linear_shortcut, allow_insecure=allow_insecure,
                        batch_hint=max(len(y) for _, y in sets),
                        complex_packing=complex_packing)
    t0 = time.perf_counter()
    net = Network() if network is None else network
    setup = Clock()
    with setup("other"):  # Alg. 1, steps 1-2: the clients' key set-up, relayed by the server
        agg, keys = _key_setup(n, config.key_spec(spec), net)
    server_ctx = agg.context
    if server_ctx is None:  # pragma: no cover - set once confirm() succeeded
        raise ProtocolError("key set-up did not complete")
    rounds = [(r.participants, np.asarray(r.weights, dtype=np.float64)) for r in record.rounds]
    server = HESVServer(server_ctx, spec, config, n, rounds, agg.session, level=level,
                        strict=strict)
    space = ModelSpace.of_record(record)
    clients = [HESVClient(i, keys[i], spec, config, n, x, y, level=level,
                          view=ClientView(space, i) if strict else None)
               for i, (x, y) in enumerate(sets)]
    for i, c in enumerate(clients):  # step 3: test data, once
        if len(sets[i][1]):
            server.receive_data(i, net.send(c.name, SERVER, c.upload_data()))
    if strict and estimator == "exact":  # refuse before any model is encrypted
        for t in range(record.n_rounds):
            server.plan_round(t)

    def run(t: int, mask: int) -> float:  # Alg. 2: test θ_S^t on every batch
        queue = server.start(t, mask)
        while queue:
            to, req = queue.pop()
            client = clients[to]
            reply = client.handle(net.send(SERVER, client.name, req))
            nxt = server.step(to, net.send(client.name, SERVER, reply))
            if nxt is not None:
                queue.append(nxt)
        return server.utility(t, mask)

    ssv = np.zeros((record.n_rounds, n))
    tables: list[FloatArray] = []
    models_tested = samples = 0
    total = sum(len(y) for _, y in sets)
    timer = RoundTimer(record.n_rounds)
    for t in rounds_to_play(record):  # step 3: every round's models
        rnd = record.rounds[t]
        timer.round_started()
        ups = [(0, clients[0].upload_model(t, rnd.global_params, kind="global"))]
        ups += [(cid, clients[cid].upload_model(t, p, kind="local"))
                for cid, p in zip(rnd.participants, rnd.local_params, strict=True)]
        for cid, up in ups:
            server.receive_model(cid, net.send(clients[cid].name, SERVER, up))
        k = len(rnd.participants)

        def value(mask: int, t: int = t) -> float:
            return run(t, mask)

        game = _SecureGame(k, value)
        if estimator == "exact":
            order = np.argsort(popcounts(k), kind="stable")
            table = np.zeros(1 << k)
            for mask in order:
                table[int(mask)] = game.value(int(mask))
            phi = shapley_values(table)
            tables.append(table)
        else:
            fn = {"ps": permutation_sampling, "gt": group_testing, "ks": kernel_shap,
                  "gtg": gtg_shapley}[estimator]
            phi = fn(game, int(budget or 1), round_rng(seed, record, t))
        for j, cid in enumerate(rnd.participants):
            ssv[t, cid] = phi[j]
        models_tested += len(game.cache)
        samples += len(game.cache) * total
        server.end_round(t)
        took = timer.done()
        if progress is not None:
            progress(timer.line(t, took, f"{len(game.cache)} models tested"))
    acc = net.accounting
    for clock in (setup, server.clock, *(c.clock for c in clients)):
        acc.add_clock(clock)
    ties = sum(c.ties for c in clients)
    if ties and not in_worker():  # a parallel runner warns once with every worker's
        warn_ties(ties, samples, stacklevel=3)
    seconds = time.perf_counter() - t0
    return SecureShapleyResult(ssv.sum(axis=0), ssv, estimator, budget, False,
                               tables if estimator == "exact" else None,
                               [r.participants for r in record.rounds], models_tested,
                               samples, seconds, protocol="hesv", accounting=acc,
                               near_ties=ties)
