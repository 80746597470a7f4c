"""SecSV's public parameters and layout: what every role agrees on without a message.

:class:`SecSVConfig` (fixed point, BFV parameters), the Matrix Reducing geometry of each
layer (:class:`LayerPlan`; dense and conv layers, folding, the rotation layout) and P's
announced :class:`Plan`, and the encoding helpers the clients and servers share (model
diagonals, im2col). See :mod:`fedsec.shapley.secsv` for the protocol.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec.crypto import reducing as rd
from fedsec.crypto.bfv import BFV_DEFAULT, BFVParams
from fedsec.errors import ProtocolError
from fedsec.learning.model import LayerSpec, ModelSpec, Params
from fedsec.protocol import fields

__all__ = ["PROTOCOL", "ALL", "EV", "SecSVConfig", "LayerPlan", "Plan", "im2col",
           "grid_to_features"]

U64 = NDArray[np.uint64]
BoolArray = NDArray[np.bool_]
Progress = Callable[[str], None]
MAX_SAMPLES = 1 << 22
PROTOCOL = "secsv"
EV = "ev"  # the evaluation id P issues (A and the decrypting client echo it)
#: The coalition field of a derived evaluation: every coalition of the round at once.
ALL = (1 << 62) - 1
MAX_DERIVED = 16  # participants of a round for derived decryption (2^16 coalitions)
#: Coalitions × samples of one derived request's label table a client accepts (32 MiB per
#: share; ~200 MiB peak at the client): P's choice of participants and batch width is
#: bounded by the client's policy, and P decrypts per coalition beyond it.
MAX_DERIVED_LABELS = 1 << 22
DERIVED_BLOCK = 1 << 22  # int64 entries of derived sums computed at once


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
    frac_bits_hidden : int, optional
        Fractional bits of hidden layers' inputs (activations re-shared by clients).
        Default: P picks, per layer, the most the layer's bound allows (see
        :mod:`fedsec.shapley.fixed_point`; weights then carry per-layer bits too).
    weight_bits : int, default=12
        Bits of the integer aggregation weights when FedAvg's weights are not integers.
    bfv : BFVParams
        Ring degree and plaintext-prime size (sharing modulus).
    """

    frac_bits_model: int | None = None
    frac_bits_data: int | None = None
    frac_bits_hidden: int | None = None
    weight_bits: int = 12
    bfv: BFVParams = BFV_DEFAULT

    def check(self) -> SecSVConfig:
        for name in ("frac_bits_model", "frac_bits_data", "frac_bits_hidden", "weight_bits"):
            v = getattr(self, name)
            if v is None and name != "weight_bits":
                continue
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 30:
                raise ValueError(f"The '{name}' parameter of SecSVConfig must be an int in "
                                 f"1..30. Got {v!r} instead.")
        self.bfv.check()
        return self


def pow2_ceil(v: float) -> int:
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


def geometry(ls: LayerSpec) -> tuple[int, int, int]:
    """``(rows, inner, per)`` of a layer's product (see :class:`LayerPlan`)."""
    if ls.kind == "conv2d":
        c, k = ls.in_shape[0], ls.kernel
        return ls.out_channels, c * k * k, ls.out_features // ls.out_channels
    return ls.out_features, ls.in_features, 1


def layer_plan(ls: LayerSpec, fold: int) -> LayerPlan:
    rows, inner, per = geometry(ls)
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
    frac_models: tuple[int, ...]  # f_θ of each layer's weights
    frac_inputs: tuple[int, ...]  # f_x of each layer's input

    def scale(self, layer: int) -> int:
        """Fractional bits of layer ``layer``'s output (and bias): ``f_θ,l + f_x,l``."""
        return self.frac_models[layer] + self.frac_inputs[layer]

    def to_meta(self) -> dict[str, Any]:
        return {"width": self.width, "frac_models": list(self.frac_models),
                "frac_inputs": list(self.frac_inputs),
                "layers": [[lp.d_out, lp.d_in, lp.fold] for lp in self.layers]}


def fold_diagonals(diags: NDArray[Any], fold: int, slots: int) -> NDArray[Any]:
    """Stack ``fold`` consecutive diagonals into one slot vector (zero padding)."""
    d_in, seg = diags.shape
    n_ct = -(-d_in // fold)
    out = np.zeros((n_ct, slots), dtype=diags.dtype)
    padded = np.zeros((n_ct * fold, seg), dtype=diags.dtype)
    padded[:d_in] = diags
    out[:, :fold * seg] = padded.reshape(n_ct, fold * seg)
    return out


def row_period(lp: LayerPlan, width: int, slots: int) -> int:
    """``L`` of Matrix Reducing's rotation layout for this layer, or 0 for the classic
    (folded) diagonals (:func:`fedsec.crypto.reducing.rotation_period`). A public function
    of the plan: clients and servers agree on it without a message."""
    return rd.rotation_period(lp.rows, lp.inner, lp.cols(width), slots, lp.fold)


def model_rows(w: NDArray[Any], lp: LayerPlan, width: int, slots: int) -> NDArray[Any]:
    """The model's folded diagonal rows (``n_ct × slots``) in the layer's layout: the
    rotation layout where it applies (the servers then make ``L`` data plaintexts from
    one encoding, see :meth:`~fedsec.shapley.secsv.server.ServerBase.product`), else the
    classic diagonals."""
    if row_period(lp, width, slots):
        return rd.model_rows_rotated(w, lp.cols(width), slots, lp.fold)
    return fold_diagonals(rd.model_diagonals(w, lp.cols(width)), lp.fold, slots)


def model_layers(spec: ModelSpec, params: Params) -> list[tuple[NDArray[np.float64],
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


def u64(data: bytes, shape: tuple[int, ...], what: str) -> U64:
    """A blob of another role as ``uint64`` of exactly ``shape`` (``ProtocolError``)."""
    out: U64 = fields.array(data, np.uint64, shape, what=what)
    return out


def index(mask: int, batch: int, layer: int) -> tuple[int, int, int]:
    """The binding index of a message of an evaluation: ``(coalition, batch, layer)``
    (``-1`` for a layer where it does not apply)."""
    return (mask, batch, layer)


def parse_plan(meta: Mapping[str, Any], spec: ModelSpec, slots: int) -> Plan:
    """P's ``secsv/plan`` (its metadata), checked against the model and the ring
    (``ProtocolError`` otherwise)."""
    width = fields.integer(meta, "width", 1, slots)
    layers = meta.get("layers")
    if not isinstance(layers, list) or len(layers) != len(spec.layers):
        raise ProtocolError("malformed plan: layers")
    lps = []
    for lp, ls in zip(layers, spec.layers, strict=True):
        if (not isinstance(lp, list) or len(lp) != 3
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in lp)):
            raise ProtocolError("malformed plan: layer")
        d_out, d_in, fold = lp
        exp_in = ls.in_features if ls.kind != "gru" else -1
        if d_out != ls.out_features or d_in != exp_in \
                or not 1 <= fold <= geometry(ls)[1] \
                or fold * d_out * width > slots:
            raise ProtocolError("plan does not fit the model or the ring")
        lps.append(layer_plan(ls, fold))
    fracs = []
    for key in ("frac_models", "frac_inputs"):
        vs = meta.get(key)
        if not isinstance(vs, list) or len(vs) != len(lps) or not all(
                isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 30 for v in vs):
            raise ProtocolError("malformed plan: fractional bits")
        fracs.append(tuple(vs))
    return Plan(width, tuple(lps), fracs[0], fracs[1])
