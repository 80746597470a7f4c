"""Models as a sequence of linear layers with activations between them (Zheng et al., Sec. 2).

A model is described by a :class:`ModelSpec` (architecture only, no numbers, serialisable
as JSON) and its parameters θ, a list of numpy arrays in the same order as PyTorch's
``module.parameters()`` for the equivalent network (:mod:`fedsec.learning.torch_net`).

Every layer is a *linear* function of its input and of its parameters; the non-linear
activation that follows it is a separate, named step. This is the split the secure
protocols of Zheng et al. need: servers evaluate the linear parts (as matrices) under
encryption, clients apply activations in the clear. :meth:`ModelSpec.layers` turns
parameters into :class:`LinearLayer` objects; :meth:`LinearLayer.matrix` gives the
explicit ``(d_out, d_in)`` weight matrix and bias of the linear map:

* ``dense`` -- ``y = W x + b`` (``nn.Linear``);
* ``conv2d`` -- a convolution without padding (``nn.Conv2d``) is linear in its input; its
  matrix is the unrolled (Toeplitz) form over the flattened ``(C, H, W)`` input, and the
  output is flattened channel-major, as ``torch.flatten`` does;
* ``gru`` -- the recurrent cell (``nn.GRU``, one layer, ``batch_first``) is a linear map
  applied at every time step to ``[x_t; h_{t-1}]`` (block-diagonal
  ``[[W_ih, 0], [0, W_hh]]``, bias ``[b_ih; b_hh]``), followed by the GRU gate
  activation (``gru-cell``), which needs ``h_{t-1}`` and yields ``h_t``. The layer outputs
  the last hidden state.

:func:`forward` evaluates a model from these pieces in numpy (float64) and matches
PyTorch's forward pass (tested). Aggregation (:func:`aggregate`) is the weighted average
of parameters that FedAvg uses, so ``θ_S = Σ_{i∈S} ω_{i|S} θ_i``.

Nothing here imports PyTorch.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "ACTIVATIONS",
    "LayerSpec",
    "LinearLayer",
    "ModelSpec",
    "Params",
    "activate",
    "aggregate",
    "forward",
    "predict",
    "accuracy",
]

FloatArray = NDArray[np.float64]
Params = list[NDArray[Any]]

#: Activation names usable between layers (``identity`` after the output layer: the
#: arg-max of the scores is what counts, and soft-max would not change it).
ACTIVATIONS: tuple[str, ...] = ("identity", "relu", "square", "sigmoid", "tanh")
LAYER_KINDS: tuple[str, ...] = ("dense", "conv2d", "gru")


def activate(name: str, y: FloatArray) -> FloatArray:
    """Apply the named element-wise activation to ``y``."""
    if name == "identity":
        return y
    if name == "relu":
        return np.maximum(y, 0.0)
    if name == "square":
        return y * y
    if name == "sigmoid":
        return _sigmoid(y)
    if name == "tanh":
        return np.tanh(y)
    raise ValueError(f"Unknown activation {name!r}; expected one of {ACTIVATIONS}.")


def activation_bound(name: str, bound: float) -> float:
    """The largest ``|activate(name, y)|`` over ``|y| <= bound``."""
    if name in ("identity", "relu"):
        return float(bound)
    if name == "square":
        return float(bound) ** 2
    if name in ("sigmoid", "tanh"):
        return 1.0
    raise ValueError(f"Unknown activation {name!r}; expected one of {ACTIVATIONS}.")


def _sigmoid(y: FloatArray) -> FloatArray:
    out: FloatArray = 0.5 * (1.0 + np.tanh(0.5 * y))  # stable for large |y|
    return out


@dataclass(frozen=True)
class LayerSpec:
    """One linear layer and the activation that follows it.

    Parameters
    ----------
    kind : {"dense", "conv2d", "gru"}
    in_features, out_features : int
        Flattened input and output sizes (derived for ``conv2d`` and ``gru``).
    activation : str
        One of :data:`ACTIVATIONS`, applied to the layer's output.
    in_shape : tuple of int
        ``conv2d``: ``(C, H, W)``; ``gru``: ``(steps, input_size)``; empty for ``dense``.
    out_channels, kernel, stride : int
        ``conv2d`` only (no padding, square kernel).
    hidden : int
        ``gru`` only: hidden size.
    """

    kind: str
    in_features: int
    out_features: int
    activation: str = "identity"
    in_shape: tuple[int, ...] = ()
    out_channels: int = 0
    kernel: int = 0
    stride: int = 1
    hidden: int = 0

    def __post_init__(self) -> None:
        if self.kind not in LAYER_KINDS:
            raise ValueError(f"Unknown layer kind {self.kind!r}; expected one of {LAYER_KINDS}.")
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"Unknown activation {self.activation!r}; expected one of {ACTIVATIONS}."
            )
        if self.in_features < 1 or self.out_features < 1:
            raise ValueError("Layer sizes must be >= 1.")

    # ---------------------------------------------------------------- constructors
    @classmethod
    def dense(cls, in_features: int, out_features: int, activation: str = "identity"
              ) -> LayerSpec:
        """A fully connected layer ``y = W x + b``."""
        return cls("dense", int(in_features), int(out_features), activation)

    @classmethod
    def conv2d(cls, in_shape: tuple[int, int, int], out_channels: int, kernel: int,
               stride: int = 1, activation: str = "identity") -> LayerSpec:
        """A 2-D convolution without padding over a ``(C, H, W)`` input."""
        c, h, w = (int(v) for v in in_shape)
        ho, wo = (h - kernel) // stride + 1, (w - kernel) // stride + 1
        if ho < 1 or wo < 1:
            raise ValueError(f"Kernel {kernel} does not fit the input shape {in_shape}.")
        return cls("conv2d", c * h * w, int(out_channels) * ho * wo, activation,
                   in_shape=(c, h, w), out_channels=int(out_channels), kernel=int(kernel),
                   stride=int(stride))

    @classmethod
    def gru(cls, steps: int, input_size: int, hidden: int, activation: str = "identity"
            ) -> LayerSpec:
        """A one-layer GRU over ``steps`` time steps; outputs the last hidden state."""
        return cls("gru", int(steps) * int(input_size), int(hidden), activation,
                   in_shape=(int(steps), int(input_size)), hidden=int(hidden))

    # ---------------------------------------------------------------- parameters
    def param_shapes(self) -> list[tuple[int, ...]]:
        """Shapes of this layer's parameters, in PyTorch's order."""
        if self.kind == "dense":
            return [(self.out_features, self.in_features), (self.out_features,)]
        if self.kind == "conv2d":
            c = self.in_shape[0]
            return [(self.out_channels, c, self.kernel, self.kernel), (self.out_channels,)]
        h, d = self.hidden, self.in_shape[1]
        return [(3 * h, d), (3 * h, h), (3 * h,), (3 * h,)]

    def fan_in(self) -> int:
        if self.kind == "dense":
            return self.in_features
        if self.kind == "conv2d":
            return self.in_shape[0] * self.kernel * self.kernel
        return self.hidden

    @property
    def out_shape(self) -> tuple[int, ...]:
        """``(C_out, H_out, W_out)`` for ``conv2d``; ``(out_features,)`` otherwise."""
        if self.kind == "conv2d":
            _, h, w = self.in_shape
            k, s = self.kernel, self.stride
            return (self.out_channels, (h - k) // s + 1, (w - k) // s + 1)
        return (self.out_features,)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "in_features": self.in_features,
                "out_features": self.out_features, "activation": self.activation,
                "in_shape": list(self.in_shape), "out_channels": self.out_channels,
                "kernel": self.kernel, "stride": self.stride, "hidden": self.hidden}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LayerSpec:
        return cls(kind=str(d["kind"]), in_features=int(d["in_features"]),
                   out_features=int(d["out_features"]), activation=str(d["activation"]),
                   in_shape=tuple(int(v) for v in d.get("in_shape", ())),
                   out_channels=int(d.get("out_channels", 0)), kernel=int(d.get("kernel", 0)),
                   stride=int(d.get("stride", 1)), hidden=int(d.get("hidden", 0)))


@dataclass(frozen=True)
class LinearLayer:
    """A layer of a concrete model: its spec and its parameters (numpy, float64)."""

    spec: LayerSpec
    params: tuple[FloatArray, ...]

    @property
    def activation(self) -> str:
        return self.spec.activation

    # ---------------------------------------------------------------- matrix form
    def matrix(self) -> tuple[FloatArray, FloatArray]:
        """The linear map as an explicit ``(d_out, d_in)`` matrix and a ``d_out`` bias.

        For ``gru`` this is the per-time-step map on ``[x_t; h_{t-1}]``
        (``d_in = input_size + hidden``, ``d_out = 6 * hidden``).
        """
        sp = self.spec
        if sp.kind == "dense":
            return self.params[0], self.params[1]
        if sp.kind == "conv2d":
            # Column j of the matrix is the layer's response to the j-th unit input.
            eye = np.eye(sp.in_features).reshape((sp.in_features, *sp.in_shape))
            cols = _conv_linear(eye, self.params[0], sp.stride)
            w = cols.reshape(sp.in_features, sp.out_features).T.copy()
            b = np.repeat(self.params[1], sp.out_features // sp.out_channels)
            return w, b
        w_ih, w_hh, b_ih, b_hh = self.params
        h3, d = w_ih.shape
        w = np.zeros((2 * h3, d + sp.hidden))
        w[:h3, :d] = w_ih
        w[h3:, d:] = w_hh
        return w, np.concatenate([b_ih, b_hh])

    # ---------------------------------------------------------------- evaluation
    def linear(self, x: FloatArray) -> FloatArray:
        """The linear part on a batch ``x`` of shape ``(m, in_features)`` (not for gru)."""
        sp = self.spec
        if sp.kind == "dense":
            out: FloatArray = x @ self.params[0].T + self.params[1]
            return out
        if sp.kind == "conv2d":
            xs = x.reshape((x.shape[0], *sp.in_shape))
            y = _conv_linear(xs, self.params[0], sp.stride)
            y += self.params[1][None, :, None, None]
            return y.reshape(x.shape[0], sp.out_features)
        raise ValueError("A gru layer is evaluated step by step: use LinearLayer.apply.")

    def apply(self, x: FloatArray) -> FloatArray:
        """Linear part, then the activation (the whole recurrence for ``gru``)."""
        if self.spec.kind != "gru":
            return activate(self.activation, self.linear(x))
        steps, d = self.spec.in_shape
        hid = self.spec.hidden
        w, b = self.matrix()
        xs = x.reshape(x.shape[0], steps, d)
        h = np.zeros((x.shape[0], hid))
        for t in range(steps):
            z = np.concatenate([xs[:, t, :], h], axis=1) @ w.T + b  # linear map, step t
            h = gru_cell(z, h)  # the activation a client applies
        return activate(self.activation, h)


def gru_cell(z: FloatArray, h_prev: FloatArray) -> FloatArray:
    """GRU gate activation (PyTorch's equations) from the step's linear output.

    ``z = [W_ih x_t + b_ih; W_hh h_{t-1} + b_hh]`` with gates in the order r, z, n.
    """
    hid = h_prev.shape[1]
    gi, gh = z[:, : 3 * hid], z[:, 3 * hid:]
    r = _sigmoid(gi[:, :hid] + gh[:, :hid])
    u = _sigmoid(gi[:, hid: 2 * hid] + gh[:, hid: 2 * hid])
    n = np.tanh(gi[:, 2 * hid:] + r * gh[:, 2 * hid:])
    out: FloatArray = (1.0 - u) * n + u * h_prev
    return out


def _conv_linear(x: FloatArray, weight: FloatArray, stride: int) -> FloatArray:
    """Cross-correlation without padding: ``x`` (m, C, H, W), ``weight`` (O, C, k, k)."""
    o, c, k, _ = weight.shape
    win = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))
    win = win[:, :, ::stride, ::stride]  # (m, C, Ho, Wo, k, k)
    m, _, ho, wo = win.shape[:4]
    cols = np.ascontiguousarray(win.transpose(0, 2, 3, 1, 4, 5)).reshape(m * ho * wo, c * k * k)
    y = cols @ weight.reshape(o, c * k * k).T  # im2col: one matrix product
    out: FloatArray = y.reshape(m, ho, wo, o).transpose(0, 3, 1, 2)
    return out


@dataclass(frozen=True)
class ModelSpec:
    """A model architecture: layers in order, the number of input features and classes."""

    name: str
    layers: tuple[LayerSpec, ...]
    description: str = ""
    _shapes: tuple[tuple[int, ...], ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.layers:
            raise ValueError("A model needs at least one layer.")
        for a, b in zip(self.layers, self.layers[1:], strict=False):
            if a.out_features != b.in_features:
                raise ValueError(
                    f"Layer sizes do not chain: {a.kind} outputs {a.out_features}, "
                    f"next {b.kind} takes {b.in_features}."
                )
        shapes = tuple(s for layer in self.layers for s in layer.param_shapes())
        object.__setattr__(self, "_shapes", shapes)

    @property
    def in_features(self) -> int:
        return self.layers[0].in_features

    @property
    def n_classes(self) -> int:
        return self.layers[-1].out_features

    def param_shapes(self) -> list[tuple[int, ...]]:
        return list(self._shapes)

    def n_params(self) -> int:
        return int(sum(int(np.prod(s)) for s in self._shapes))

    def init_params(self, rng: np.random.Generator) -> Params:
        """PyTorch-style initialisation ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` (He-uniform
        ``U(-sqrt(6/fan_in), sqrt(6/fan_in))`` for the weights of ReLU layers), float32,
        from a seeded generator (so that runs are reproducible without torch's global RNG).
        """
        out: Params = []
        for layer in self.layers:
            bound = 1.0 / np.sqrt(layer.fan_in())
            for j, shape in enumerate(layer.param_shapes()):
                if layer.activation == "relu" and j == 0:  # He init keeps deep ReLU nets
                    bound = np.sqrt(6.0 / layer.fan_in())    # trainable (depth experiment)
                    out.append(rng.uniform(-bound, bound, size=shape).astype(np.float32))
                    bound = 1.0 / np.sqrt(layer.fan_in())
                    continue
                out.append(rng.uniform(-bound, bound, size=shape).astype(np.float32))
        return out

    def check_params(self, params: Sequence[NDArray[Any]]) -> None:
        """Raise ``ValueError`` unless ``params`` have this spec's shapes."""
        got = [tuple(np.shape(p)) for p in params]
        if got != list(self._shapes):
            raise ValueError(f"Parameters of {self.name} must have shapes {list(self._shapes)}. "
                             f"Got {got} instead.")

    def layers_of(self, params: Sequence[NDArray[Any]]) -> list[LinearLayer]:
        """The model's layers with parameters ``params`` (as float64)."""
        self.check_params(params)
        it = iter(params)
        out = []
        for layer in self.layers:
            ps = tuple(np.asarray(next(it), dtype=np.float64) for _ in layer.param_shapes())
            out.append(LinearLayer(layer, ps))
        return out

    @classmethod
    def from_torch(cls, module: Any, *, in_shape: Sequence[int] | None = None) -> ModelSpec:
        """The spec of a PyTorch ``nn.Sequential``
        (:func:`fedsec.learning.adapters.model_spec`; ``in_shape=(C, H, W)`` for a network
        that starts with a convolution)."""
        from fedsec.learning.adapters import is_torch_module, model_spec

        if not is_torch_module(module):
            raise TypeError(f"The 'module' parameter of ModelSpec.from_torch must be a "
                            f"PyTorch nn.Sequential. Got {type(module).__name__} instead.")
        return model_spec(module, in_shape=in_shape)

    @classmethod
    def from_sklearn(cls, estimator: Any) -> ModelSpec:
        """The spec of a fitted scikit-learn ``LogisticRegression``, ``MLPClassifier`` or
        other linear classifier (:func:`fedsec.learning.adapters.model_spec`)."""
        from fedsec.learning.adapters import is_sklearn_estimator, model_spec

        if not is_sklearn_estimator(estimator):
            raise TypeError(f"The 'estimator' parameter of ModelSpec.from_sklearn must be a "
                            f"fitted scikit-learn classifier. Got {type(estimator).__name__} "
                            "instead.")
        return model_spec(estimator)

    def to_json(self) -> str:
        return json.dumps({"name": self.name, "description": self.description,
                           "layers": [layer.to_dict() for layer in self.layers]},
                          sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ModelSpec:
        d = json.loads(text)
        return cls(name=str(d["name"]), description=str(d.get("description", "")),
                   layers=tuple(LayerSpec.from_dict(x) for x in d["layers"]))


def forward(spec: ModelSpec, params: Sequence[NDArray[Any]], x: NDArray[Any]) -> FloatArray:
    """Scores ``f_θ(X)`` of shape ``(m, n_classes)`` for a batch ``x`` of shape
    ``(m, in_features)``: each layer's linear map, then its activation."""
    h = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    if h.shape[1] != spec.in_features:
        raise ValueError(f"Inputs of {spec.name} must have {spec.in_features} features. "
                         f"Got {h.shape[1]} instead.")
    for layer in spec.layers_of(params):
        h = layer.apply(h)
    return h


def predict(spec: ModelSpec, params: Sequence[NDArray[Any]], x: NDArray[Any]
            ) -> NDArray[np.int64]:
    """Predicted labels ``argmax_j f_θ(x)[j]``."""
    labels: NDArray[np.int64] = np.argmax(forward(spec, params, x), axis=1).astype(np.int64)
    return labels


def accuracy(spec: ModelSpec, params: Sequence[NDArray[Any]], x: NDArray[Any],
             y: NDArray[Any]) -> float:
    """Share of samples predicted correctly (the utility ``v`` of Zheng et al.)."""
    y = np.asarray(y)
    if y.size == 0:
        raise ValueError("accuracy needs at least one sample.")
    return float(np.mean(predict(spec, params, x) == y))


def aggregate(models: Sequence[Sequence[NDArray[Any]]], weights: Sequence[float] | NDArray[Any]
              ) -> list[FloatArray]:
    """Weighted average ``Σ_i ω_i θ_i / Σ_i ω_i`` of parameter lists (float64).

    This is FedAvg's aggregation and the paper's ``θ_S`` with ``ω_{i|S} = ω_i / Σ_{j∈S} ω_j``.
    """
    w = np.asarray(weights, dtype=np.float64)
    if len(models) == 0 or w.shape != (len(models),):
        raise ValueError("aggregate needs one weight per model and at least one model.")
    if np.any(w < 0) or not np.isfinite(w).all() or w.sum() <= 0:
        raise ValueError("Aggregation weights must be finite, >= 0 and not all 0.")
    w = w / w.sum()
    out = [np.zeros(np.shape(p), dtype=np.float64) for p in models[0]]
    for wi, model in zip(w, models, strict=True):
        if len(model) != len(out):
            raise ValueError("All models must have the same number of parameter arrays.")
        for acc, p in zip(out, model, strict=True):
            acc += wi * np.asarray(p, dtype=np.float64)
    return out
