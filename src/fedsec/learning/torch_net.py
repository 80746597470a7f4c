"""PyTorch networks built from a :class:`~fedsec.learning.model.ModelSpec`, and local training.

Requires the ``learning`` extra (``torch==2.13.0``, CPU build). Parameters cross this
boundary as numpy arrays in PyTorch's ``parameters()`` order, so the numpy forward pass of
:mod:`fedsec.learning.model` evaluates exactly the network trained here.

Training is reproducible: initial parameters come from a seeded numpy generator
(:meth:`ModelSpec.init_params`) and mini-batch order from a seeded ``torch.Generator``;
PyTorch's global random state is never used.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

from fedsec.learning.model import LayerSpec, ModelSpec, Params

__all__ = ["TrainConfig", "SpecNet", "build_net", "get_params", "set_params", "train_local"]


class _Square(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * x


def _activation(name: str) -> nn.Module:
    return {"identity": nn.Identity(), "relu": nn.ReLU(), "square": _Square(),
            "sigmoid": nn.Sigmoid(), "tanh": nn.Tanh()}[name]


class _Layer(nn.Module):
    """One spec layer: reshape its flat input, apply the torch op, flatten, activate."""

    def __init__(self, spec: LayerSpec) -> None:
        super().__init__()
        self.spec = spec
        self.op: nn.Module
        if spec.kind == "dense":
            self.op = nn.Linear(spec.in_features, spec.out_features)
        elif spec.kind == "conv2d":
            self.op = nn.Conv2d(spec.in_shape[0], spec.out_channels, spec.kernel,
                                stride=spec.stride)
        else:
            self.op = nn.GRU(spec.in_shape[1], spec.hidden, num_layers=1, batch_first=True)
        self.act = _activation(spec.activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sp = self.spec
        if sp.kind == "dense":
            y = self.op(x)
        elif sp.kind == "conv2d":
            y = torch.flatten(self.op(x.reshape(x.shape[0], *sp.in_shape)), 1)
        else:
            _, h_last = self.op(x.reshape(x.shape[0], *sp.in_shape))
            y = h_last[0]
        out: torch.Tensor = self.act(y)
        return out


class SpecNet(nn.Module):
    """The PyTorch network of a :class:`ModelSpec` (inputs flattened to ``in_features``)."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.spec = spec
        self.body = nn.ModuleList(_Layer(layer) for layer in spec.layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.body:
            x = layer(x)
        return x


def build_net(spec: ModelSpec, params: Sequence[NDArray[Any]] | None = None) -> SpecNet:
    """A :class:`SpecNet`, loaded with ``params`` if given."""
    net = SpecNet(spec)
    if params is not None:
        set_params(net, params)
    return net


def get_params(net: nn.Module) -> Params:
    """The network's parameters as float32 numpy arrays (``parameters()`` order)."""
    return [p.detach().cpu().numpy().astype(np.float32, copy=True) for p in net.parameters()]


def set_params(net: nn.Module, params: Sequence[NDArray[Any]]) -> None:
    """Copy ``params`` into the network (shapes checked)."""
    ps = list(net.parameters())
    if len(ps) != len(params):
        raise ValueError(f"Expected {len(ps)} parameter arrays. Got {len(params)} instead.")
    with torch.no_grad():
        for p, v in zip(ps, params, strict=True):
            arr = np.asarray(v)
            if tuple(arr.shape) != tuple(p.shape):
                raise ValueError(f"Parameter shape {tuple(arr.shape)} does not match "
                                 f"{tuple(p.shape)}.")
            p.copy_(torch.as_tensor(arr, dtype=p.dtype))


@dataclass(frozen=True)
class TrainConfig:
    """Local training: ``epochs`` passes of mini-batch SGD with cross-entropy loss."""

    epochs: int = 1
    batch_size: int = 32
    lr: float = 0.05
    momentum: float = 0.0
    weight_decay: float = 0.0
    grad_clip: float = 0.0  # max gradient norm; 0 = no clipping

    def to_dict(self) -> dict[str, float]:
        return {"epochs": self.epochs, "batch_size": self.batch_size, "lr": self.lr,
                "momentum": self.momentum, "weight_decay": self.weight_decay,
                "grad_clip": self.grad_clip}


def train_local(spec: ModelSpec, params: Sequence[NDArray[Any]], x: NDArray[Any],
                y: NDArray[Any], config: TrainConfig, seed: int | Sequence[int]) -> Params:
    """Train from ``params`` on one client's data; return the local model θ_i (float32).

    ``seed`` (an int or a sequence of ints, e.g. ``(run_seed, client, round)``) fixes the
    mini-batch order. A client without data returns ``params`` unchanged.
    """
    if len(x) == 0:
        return [np.asarray(p, dtype=np.float32).copy() for p in params]
    with _one_thread():
        return _train(spec, params, x, y, config, seed)


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Train on one intra-op thread: the models are small, so more threads only contend
    (60x slower on a loaded 2-core machine), and one thread makes the floating-point
    reduction order -- hence the trained model -- the same on every machine setting."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _train(spec: ModelSpec, params: Sequence[NDArray[Any]], x: NDArray[Any],
           y: NDArray[Any], config: TrainConfig, seed: int | Sequence[int]) -> Params:
    net = build_net(spec, params)
    net.train()
    xt = torch.as_tensor(np.asarray(x, dtype=np.float32)).reshape(len(x), -1)
    yt = torch.as_tensor(np.asarray(y, dtype=np.int64))
    entropy = np.random.SeedSequence(seed).generate_state(2, dtype=np.uint64)
    gen = torch.Generator().manual_seed(int(entropy[0] % (2**63)))
    opt = torch.optim.SGD(net.parameters(), lr=config.lr, momentum=config.momentum,
                          weight_decay=config.weight_decay)
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(config.epochs):
        order = torch.randperm(len(xt), generator=gen)
        for start in range(0, len(xt), config.batch_size):
            idx = order[start:start + config.batch_size]
            opt.zero_grad()
            loss = loss_fn(net(xt[idx]), yt[idx])
            loss.backward()
            if config.grad_clip > 0:
                nn.utils.clip_grad_norm_(net.parameters(), config.grad_clip)
            opt.step()
    return get_params(net)
