"""Bring your own model: :class:`~fedsec.learning.model.ModelSpec` and parameters from a
PyTorch ``nn.Sequential`` or a fitted scikit-learn classifier.

The secure Shapley protocols evaluate a model given as linear layers with activations
between them (:mod:`fedsec.learning.model`). :func:`model_spec` reads that architecture from
a model you trained yourself, and :func:`model_params` its parameters, in the spec's order,
so that ``fedsec.learning.forward(spec, params, x)`` gives the same predictions (arg-max
of the scores) as your model::

    spec = model_spec(net, in_shape=(1, 8, 8))     # torch nn.Sequential
    params = model_params(net)
    spec = model_spec(clf)                         # fitted sklearn LogisticRegression
    params = model_params(clf)

Supported:

* **PyTorch** ``nn.Sequential`` (nested ones are flattened) of ``nn.Linear``,
  ``nn.Conv2d`` (no padding, square kernel, the same stride both ways, no dilation or
  groups), the activations ``nn.ReLU``, ``nn.Sigmoid``, ``nn.Tanh`` (each right after a
  linear layer: it is folded into that layer's :class:`~fedsec.learning.model.LayerSpec`),
  ``nn.Flatten`` / ``nn.Unflatten`` (shape only), ``nn.Identity`` and ``nn.Dropout``
  (nothing at evaluation), and ``nn.Softmax`` / ``nn.LogSoftmax`` as the last module
  (dropped: they do not change the arg-max). A layer without bias gets a zero bias.
  A convolution needs the input shape: pass ``in_shape=(C, H, W)``. fedsec's own
  :class:`~fedsec.learning.torch_net.SpecNet` is accepted too.
* **scikit-learn**: ``LogisticRegression`` (and the other linear classifiers
  ``LogisticRegressionCV``, ``SGDClassifier``, ``LinearSVC``, ``RidgeClassifier``,
  ``Perceptron``) and ``MLPClassifier`` (activations ``identity``, ``logistic``, ``tanh``,
  ``relu``). A binary classifier has one score ``z``; fedsec models two classes with two
  scores, so the output layer becomes ``[0, z]``: its arg-max (ties to class 0) is exactly
  scikit-learn's ``z > 0`` rule. Labels must be ``0..K-1`` (``clf.classes_``): encode
  others with ``np.searchsorted(clf.classes_, y)`` before fitting.

Labels in fedsec are the index of the largest score, ``0..n_classes-1``.

PyTorch and scikit-learn are imported only when a model of theirs is passed (PyTorch is the
``learning`` extra).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec.learning.model import LayerSpec, ModelSpec, Params

__all__ = ["model_spec", "model_params", "as_params", "SUPPORTED_TORCH", "SUPPORTED_SKLEARN"]

#: The PyTorch modules :func:`model_spec` reads.
SUPPORTED_TORCH: tuple[str, ...] = (
    "Linear", "Conv2d", "ReLU", "Sigmoid", "Tanh", "Flatten", "Unflatten", "Identity",
    "Dropout", "Softmax (last)", "LogSoftmax (last)")
#: The scikit-learn estimators :func:`model_spec` reads (fitted).
SUPPORTED_SKLEARN: tuple[str, ...] = (
    "LogisticRegression", "LogisticRegressionCV", "SGDClassifier", "LinearSVC",
    "RidgeClassifier", "Perceptron", "MLPClassifier")
_LINEAR_SKLEARN = SUPPORTED_SKLEARN[:-1]

_TORCH_ACTIVATIONS = {"ReLU": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh"}
_MLP_ACTIVATIONS = {"identity": "identity", "logistic": "sigmoid", "tanh": "tanh",
                    "relu": "relu"}
_SUPPORTED = (f"a PyTorch nn.Sequential of {', '.join(SUPPORTED_TORCH)}, or a fitted "
              f"scikit-learn {', '.join(SUPPORTED_SKLEARN)}")


# ---------------------------------------------------------------------- which library
def is_torch_module(obj: Any) -> bool:
    """Whether ``obj`` is a PyTorch module (without importing PyTorch)."""
    torch = sys.modules.get("torch")  # a torch object implies torch is imported
    return torch is not None and isinstance(obj, torch.nn.Module)


def is_sklearn_estimator(obj: Any) -> bool:
    """Whether ``obj`` is a scikit-learn object (without importing scikit-learn)."""
    return "sklearn" in sys.modules and type(obj).__module__.startswith("sklearn.")


def _unsupported(obj: Any, where: str) -> TypeError:
    return TypeError(f"The 'model' parameter of {where} must be {_SUPPORTED}. "
                     f"Got {type(obj).__name__} instead.")


def model_spec(model: Any, *, in_shape: Sequence[int] | None = None,
               name: str | None = None) -> ModelSpec:
    """The :class:`~fedsec.learning.model.ModelSpec` of a PyTorch or scikit-learn model.

    Parameters
    ----------
    model : torch.nn.Sequential or fitted scikit-learn classifier
        See the module docstring for the supported layers and estimators.
    in_shape : tuple of int, optional
        The shape of one input sample: ``(C, H, W)`` for a network that starts with a
        convolution (required there), else the number of features (checked).
    name : str, optional
        The spec's name (default: the model's class name).

    Returns
    -------
    ModelSpec

    Raises
    ------
    TypeError
        For an unsupported model, layer or estimator (the message names it and lists what
        is supported).
    ValueError
        For a supported layer in a configuration the protocols cannot evaluate (e.g. a
        padded convolution), an unfitted estimator or labels other than ``0..K-1``.
    """
    shape = _check_in_shape(in_shape)
    if is_torch_module(model):
        from fedsec.learning.torch_net import SpecNet

        if isinstance(model, SpecNet) and name is None:
            return model.spec
        specs = _torch_specs(model, shape)
        label = name or type(model).__name__
        return ModelSpec(label, tuple(specs), f"from PyTorch {type(model).__name__}")
    if is_sklearn_estimator(model):
        specs = _sklearn_specs(model)
        if shape is not None and int(np.prod(shape)) != specs[0].in_features:
            raise ValueError(f"The 'in_shape' parameter of model_spec must hold "
                             f"{specs[0].in_features} features for this "
                             f"{type(model).__name__}. Got {shape} instead.")
        label = name or type(model).__name__
        return ModelSpec(label, tuple(specs), f"from scikit-learn {type(model).__name__}")
    raise _unsupported(model, "model_spec")


def model_params(model: Any) -> Params:
    """The parameters of a PyTorch or scikit-learn model, in :func:`model_spec`'s order.

    Parameters
    ----------
    model : torch.nn.Sequential or fitted scikit-learn classifier

    Returns
    -------
    list of numpy.ndarray
        ``[W_1, b_1, W_2, b_2, ...]`` with ``W`` of shape ``(out, in)`` (``(O, C, k, k)``
        for a convolution); PyTorch parameters keep their dtype, scikit-learn's are
        float64.
    """
    if is_torch_module(model):
        return _torch_params(model)
    if is_sklearn_estimator(model):
        return _sklearn_params(model)
    raise _unsupported(model, "model_params")


def as_params(model: Any, spec: ModelSpec, *, what: str = "model") -> Params:
    """One model's parameters for ``spec`` from whatever form the user holds them in.

    Accepts a parameter list (numpy arrays or tensors, in the spec's order), a PyTorch
    ``state_dict`` (values in order; a missing bias is an error), a PyTorch module or a
    fitted scikit-learn classifier (:func:`model_params`). Shapes are checked against
    ``spec``; values are returned as float numpy arrays.
    """
    if is_torch_module(model) or is_sklearn_estimator(model):
        params = model_params(model)
    elif isinstance(model, Mapping):
        params = [_to_numpy(v, what) for v in model.values()]
    elif isinstance(model, Sequence) and not isinstance(model, str | bytes):
        params = [_to_numpy(v, what) for v in model]
    else:
        hint = (" (one array is not a model: a model is the list [W_1, b_1, ...])"
                if isinstance(model, np.ndarray) else "")
        raise TypeError(f"{what} must be a list of parameter arrays, a state dict, a PyTorch "
                        f"module or a fitted scikit-learn classifier. Got "
                        f"{type(model).__name__} instead{hint}.")
    try:
        spec.check_params(params)
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None
    out: Params = []
    for p in params:
        arr = np.asarray(p)
        if arr.dtype.kind != "f":
            arr = arr.astype(np.float64)
        if not np.isfinite(arr).all():
            raise ValueError(f"{what}: parameters must be finite.")
        out.append(arr)
    return out


def _to_numpy(value: Any, what: str) -> NDArray[Any]:
    if _is_torch_tensor(value):
        arr: NDArray[Any] = value.detach().cpu().numpy().copy()
        return arr
    try:
        return np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what}: a parameter is not an array ({exc}).") from None


def _is_torch_tensor(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _check_in_shape(in_shape: Sequence[int] | None) -> tuple[int, ...] | None:
    if in_shape is None:
        return None
    if isinstance(in_shape, int | np.integer):
        in_shape = (int(in_shape),)
    try:
        shape = tuple(int(v) for v in in_shape)
    except (TypeError, ValueError):
        raise TypeError(f"The 'in_shape' parameter of model_spec must be a tuple of ints. "
                        f"Got {in_shape!r} instead.") from None
    if len(shape) not in (1, 3) or any(v < 1 for v in shape):
        raise ValueError(f"The 'in_shape' parameter of model_spec must be (features,) or "
                         f"(C, H, W) with positive sizes. Got {in_shape!r} instead.")
    return shape


# ---------------------------------------------------------------------- PyTorch
def _leaves(module: Any) -> list[Any]:
    """The modules of a (nested) ``nn.Sequential``, in order."""
    import torch.nn as nn

    if isinstance(module, nn.Sequential):
        return [leaf for child in module for leaf in _leaves(child)]
    return [module]


def _torch_specs(model: Any, in_shape: tuple[int, ...] | None) -> list[LayerSpec]:
    import torch.nn as nn

    from fedsec.learning.torch_net import SpecNet

    if isinstance(model, SpecNet):
        return list(model.spec.layers)
    if not isinstance(model, nn.Sequential):
        raise TypeError(f"The 'model' parameter of model_spec must be an nn.Sequential (or "
                        f"fedsec's SpecNet): a custom forward() cannot be read. Got "
                        f"{type(model).__name__} instead.")
    mods = _leaves(model)
    specs: list[LayerSpec] = []
    shape = in_shape
    for pos, mod in enumerate(mods):
        kind = type(mod).__name__
        where = f"layer {pos} ({kind})"
        if isinstance(mod, nn.Linear):
            if shape is None:
                shape = (mod.in_features,)
            if len(shape) != 1:
                raise ValueError(f"{where} gets an input of shape {shape}: put an "
                                 "nn.Flatten() before it (nn.Linear acts on the last axis).")
            if shape[0] != mod.in_features:
                raise ValueError(f"{where} takes {mod.in_features} features but its input "
                                 f"has {shape[0]}.")
            specs.append(LayerSpec.dense(mod.in_features, mod.out_features))
            shape = (mod.out_features,)
        elif isinstance(mod, nn.Conv2d):
            spec = _conv_spec(mod, shape, where)
            specs.append(spec)
            shape = spec.out_shape
        elif kind in _TORCH_ACTIVATIONS and type(mod) in (nn.ReLU, nn.Sigmoid, nn.Tanh):
            if not specs:
                raise ValueError(f"{where}: an activation must follow a linear layer "
                                 "(nn.Linear or nn.Conv2d).")
            if specs[-1].activation != "identity":
                raise ValueError(f"{where}: two activations after one linear layer "
                                 f"({specs[-1].activation}, then {kind}) are not supported.")
            specs[-1] = _with_activation(specs[-1], _TORCH_ACTIVATIONS[kind])
        elif isinstance(mod, nn.Flatten):
            if (mod.start_dim, mod.end_dim) != (1, -1):
                raise ValueError(f"{where}: only nn.Flatten(start_dim=1, end_dim=-1) is "
                                 f"supported. Got start_dim={mod.start_dim}, "
                                 f"end_dim={mod.end_dim}.")
            if shape is not None:
                shape = (int(np.prod(shape)),)
        elif isinstance(mod, nn.Unflatten):
            sizes = tuple(int(v) for v in mod.unflattened_size)
            if mod.dim not in (1, -1) or shape is None or len(shape) != 1 or (
                    int(np.prod(sizes)) != shape[0]) or len(sizes) not in (1, 3):
                raise ValueError(f"{where}: only nn.Unflatten(1, (C, H, W)) of a flat input "
                                 f"of the same size is supported (input shape {shape}).")
            shape = sizes
        elif isinstance(mod, nn.Identity | nn.Dropout):
            continue
        elif isinstance(mod, nn.Softmax | nn.LogSoftmax):
            if pos != len(mods) - 1 or mod.dim not in (None, 1, -1):
                raise ValueError(f"{where}: soft-max is supported only as the last module, "
                                 "over the class axis (it does not change the arg-max and is "
                                 "dropped).")
        else:
            raise TypeError(f"{where} is not supported. Supported PyTorch modules: "
                            f"{', '.join(SUPPORTED_TORCH)}.")
    if not specs:
        raise ValueError("The 'model' parameter of model_spec has no nn.Linear or nn.Conv2d "
                         "layer.")
    return specs


def _with_activation(spec: LayerSpec, activation: str) -> LayerSpec:
    d = spec.to_dict()
    d["activation"] = activation
    return LayerSpec.from_dict(d)


def _conv_spec(mod: Any, shape: tuple[int, ...] | None, where: str) -> LayerSpec:
    k = tuple(mod.kernel_size)
    s = tuple(mod.stride)
    pad = mod.padding
    if pad not in ("valid", (0, 0), 0):
        raise ValueError(f"{where}: padding={pad!r} is not supported; the protocols evaluate "
                         "convolutions without padding (pad the inputs instead).")
    if k[0] != k[1]:
        raise ValueError(f"{where}: only square kernels are supported. Got {k}.")
    if s[0] != s[1]:
        raise ValueError(f"{where}: only equal strides are supported. Got {s}.")
    if tuple(mod.dilation) != (1, 1) or mod.groups != 1:
        raise ValueError(f"{where}: dilation and groups are not supported.")
    if shape is None:
        raise ValueError(f"{where} needs the input shape: pass in_shape=(C, H, W) to "
                         "model_spec.")
    if len(shape) != 3:
        raise ValueError(f"{where} gets an input of shape {shape}; it needs (C, H, W) "
                         "(nn.Unflatten(1, (C, H, W)) after a flat layer).")
    if shape[0] != mod.in_channels:
        raise ValueError(f"{where} takes {mod.in_channels} channels but its input has "
                         f"{shape[0]}.")
    c, h, w = shape
    return LayerSpec.conv2d((c, h, w), mod.out_channels, int(k[0]), int(s[0]))


def _torch_params(model: Any) -> Params:
    import torch.nn as nn

    from fedsec.learning.torch_net import SpecNet, get_params

    if isinstance(model, SpecNet):
        return get_params(model)
    _torch_specs_checked_types(model)
    out: Params = []
    for mod in _leaves(model):
        if isinstance(mod, nn.Linear | nn.Conv2d):
            w = mod.weight.detach().cpu().numpy().copy()
            if mod.bias is None:
                b = np.zeros(w.shape[0], dtype=w.dtype)
            else:
                b = mod.bias.detach().cpu().numpy().copy()
            out += [w, b]
    return out


def _torch_specs_checked_types(model: Any) -> None:
    """Refuse what :func:`model_spec` refuses on module types (shapes need ``in_shape``)."""
    import torch.nn as nn

    if not isinstance(model, nn.Sequential):
        raise TypeError(f"The 'model' parameter of model_params must be an nn.Sequential (or "
                        f"fedsec's SpecNet). Got {type(model).__name__} instead.")
    allowed = (nn.Linear, nn.Conv2d, nn.ReLU, nn.Sigmoid, nn.Tanh, nn.Flatten, nn.Unflatten,
               nn.Identity, nn.Dropout, nn.Softmax, nn.LogSoftmax)
    for pos, mod in enumerate(_leaves(model)):
        if not isinstance(mod, allowed):
            raise TypeError(f"layer {pos} ({type(mod).__name__}) is not supported. Supported "
                            f"PyTorch modules: {', '.join(SUPPORTED_TORCH)}.")


# ---------------------------------------------------------------------- scikit-learn
def _sklearn_kind(model: Any) -> str:
    from sklearn import linear_model, svm
    from sklearn.neural_network import MLPClassifier

    if isinstance(model, MLPClassifier):
        return "mlp"
    linear = tuple(getattr(linear_model, n, None) or getattr(svm, n) for n in _LINEAR_SKLEARN)
    if isinstance(model, linear):
        return "linear"
    raise TypeError(f"scikit-learn {type(model).__name__} is not supported. Supported "
                    f"estimators: {', '.join(SUPPORTED_SKLEARN)} (fitted).")


def _check_classes(model: Any) -> int:
    classes = getattr(model, "classes_", None)
    if classes is None:
        raise ValueError(f"This {type(model).__name__} is not fitted: call fit() first.")
    classes = np.asarray(classes)
    k = len(classes)
    if classes.ndim != 1 or k < 2 or classes.dtype.kind not in "iub" or not np.array_equal(
            classes.astype(np.int64), np.arange(k)):
        raise ValueError(f"{type(model).__name__}.classes_ must be 0..K-1 (fedsec's labels "
                         f"are score indices). Got {classes.tolist()!r}: fit on "
                         "np.searchsorted(classes, y) instead.")
    return k


def _sklearn_layers(model: Any) -> list[tuple[NDArray[np.float64], NDArray[np.float64], str]]:
    """``(W (out, in), b, activation)`` per layer, the binary output expanded to 2 scores."""
    kind = _sklearn_kind(model)
    k = _check_classes(model)
    if kind == "linear":
        if not hasattr(model, "coef_"):
            raise ValueError(f"This {type(model).__name__} is not fitted: call fit() first.")
        coef = np.asarray(model.coef_, dtype=np.float64)
        if coef.ndim == 1:
            coef = coef[None, :]
        b = np.broadcast_to(np.asarray(model.intercept_, dtype=np.float64),
                            (coef.shape[0],)).copy()
        layers = [(coef, b, "identity")]
    else:
        if getattr(model, "out_activation_", None) not in ("softmax", "logistic"):
            raise ValueError(f"MLPClassifier output {getattr(model, 'out_activation_', None)!r}"
                             " is not supported (fit a single-label classifier).")
        if model.out_activation_ == "logistic" and k != 2:
            raise ValueError("A multi-label MLPClassifier is not supported.")
        act = _MLP_ACTIVATIONS.get(model.activation)
        if act is None:
            raise ValueError(f"MLPClassifier activation {model.activation!r} is not supported; "
                             f"use one of {sorted(_MLP_ACTIVATIONS)}.")
        coefs, ints = model.coefs_, model.intercepts_
        layers = [(np.asarray(w, dtype=np.float64).T.copy(), np.asarray(b, dtype=np.float64),
                   act if j < len(coefs) - 1 else "identity")
                  for j, (w, b) in enumerate(zip(coefs, ints, strict=True))]
    w, b, act = layers[-1]
    if k == 2 and w.shape[0] == 1:  # one score z; predict(x) = (z > 0): scores [0, z]
        layers[-1] = (np.vstack([np.zeros_like(w), w]), np.concatenate([[0.0], b]), act)
    elif w.shape[0] != k:
        raise ValueError(f"{type(model).__name__} has {w.shape[0]} outputs for {k} classes.")
    return layers


def _sklearn_specs(model: Any) -> list[LayerSpec]:
    return [LayerSpec.dense(w.shape[1], w.shape[0], act) for w, _, act in _sklearn_layers(model)]


def _sklearn_params(model: Any) -> Params:
    out: Params = []
    for w, b, _ in _sklearn_layers(model):
        out += [w, b]
    return out
