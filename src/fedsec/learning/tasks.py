"""The learning tasks of Zheng et al. on data that ships, split over clients by Dirichlet(0.5).

=============  ==========================================================  =============
name           model (Zheng et al. shape)                                      data
=============  ==========================================================  =============
``bank``       logistic classifier 2x48                                    synthetic
                                                                           stand-in
``agnews``     logistic classifier 4x300                                   synthetic
                                                                           stand-in
``mnist``      CNN: Conv2d(1,4,k=7,s=3) -> x² -> Linear(256,64) -> x²      real MNIST,
               -> Linear(64,10)                                            5,000 images
``digits``     the same CNN scaled to 8x8: Conv2d(1,4,k=3,s=1) -> x²       real sklearn
               -> Linear(144,32) -> x² -> Linear(32,10)                    digits
``gru``        GRU(8 -> 16) over the 8 rows of a digit -> Linear(16,10)    real sklearn
               (a small recurrent task; Zheng et al. used an RNN on             digits
               miRNA-mRNA, which does not ship)
``dnn``        L dense layers (L-2 hidden of width 64, ReLU); L=1 is       real MNIST
               logistic regression (Zheng et al., Fig. 8)
=============  ==========================================================  =============

:func:`make_task` returns a :class:`Task`: the model spec, local-training settings and the
data; :meth:`Task.federate` splits it over ``n`` clients (the same per-label Dirichlet
proportions for training and test data, as the paper).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from fedsec._validation import check_int, check_real
from fedsec.data.learning_sets import (
    LabelledData,
    agnews_like,
    bank_like,
    digits_8x8,
    mnist_5k,
)
from fedsec.data.splits import dirichlet_train_test_split
from fedsec.learning.model import LayerSpec, ModelSpec

__all__ = ["TASKS", "Task", "Federation", "ClientData", "make_task", "task_spec"]

#: The task names :func:`make_task` accepts.
TASKS: tuple[str, ...] = ("bank", "agnews", "mnist", "digits", "gru", "dnn")


@dataclass(frozen=True)
class LocalTraining:
    """Local SGD settings of a task (mirrors :class:`fedsec.learning.torch_net.TrainConfig`,
    kept here so that this module does not need torch)."""

    epochs: int = 1
    batch_size: int = 32
    lr: float = 0.05
    momentum: float = 0.0
    weight_decay: float = 0.0
    grad_clip: float = 0.0


@dataclass(frozen=True)
class ClientData:
    """One client's training and test samples."""

    x_train: NDArray[np.float64]
    y_train: NDArray[np.int64]
    x_test: NDArray[np.float64]
    y_test: NDArray[np.int64]


@dataclass(frozen=True)
class Federation:
    """A task's data split over clients; the collective test set is the clients' test sets
    concatenated in client order (``owners`` says whose each sample is)."""

    clients: tuple[ClientData, ...]
    x_test: NDArray[np.float64]
    y_test: NDArray[np.int64]
    owners: NDArray[np.int64]

    @property
    def n_clients(self) -> int:
        return len(self.clients)


@dataclass(frozen=True)
class Task:
    """A model spec, its local-training settings and its data."""

    name: str
    spec: ModelSpec
    training: LocalTraining
    data: LabelledData

    def federate(self, n_clients: int = 5, *, alpha: float = 0.5, seed: int = 0) -> Federation:
        """Split training and test data over ``n_clients`` by per-label Dirichlet(alpha)."""
        n = check_int(n_clients, "n_clients", "Task.federate", min_value=1, max_value=64)
        a = check_real(alpha, "alpha", "Task.federate", gt=0.0)
        d = self.data
        train, test = dirichlet_train_test_split(d.y_train, d.y_test, n, alpha=a, seed=seed,
                                                 min_train=max(2, len(d.y_train) // (20 * n)))
        clients = tuple(ClientData(d.x_train[tr], d.y_train[tr], d.x_test[te], d.y_test[te])
                        for tr, te in zip(train, test, strict=True))
        owners = np.concatenate([np.full(len(te), j, np.int64) for j, te in enumerate(test)])
        order = np.concatenate(test)
        return Federation(clients, d.x_test[order], d.y_test[order], owners)


def _cnn28() -> ModelSpec:
    return ModelSpec("mnist-cnn", (
        LayerSpec.conv2d((1, 28, 28), 4, kernel=7, stride=3, activation="square"),
        LayerSpec.dense(256, 64, "square"),
        LayerSpec.dense(64, 10),
    ), "Zheng et al.'s MNIST CNN")


def _cnn8() -> ModelSpec:
    return ModelSpec("digits-cnn", (
        LayerSpec.conv2d((1, 8, 8), 4, kernel=3, stride=1, activation="square"),
        LayerSpec.dense(144, 32, "square"),
        LayerSpec.dense(32, 10),
    ), "Zheng et al.'s CNN scaled to 8x8 digits")


def _dnn(layers: int, d_in: int, n_classes: int, width: int = 64) -> ModelSpec:
    if layers == 1:
        return ModelSpec("dnn-1", (LayerSpec.dense(d_in, n_classes),), "DNN, L=1 (logistic)")
    body = [LayerSpec.dense(d_in, width, "relu")]
    body += [LayerSpec.dense(width, width, "relu") for _ in range(layers - 2)]
    body.append(LayerSpec.dense(width, n_classes))
    return ModelSpec(f"dnn-{layers}", tuple(body), f"DNN, L={layers}, width {width}, ReLU")


def task_spec(name: str, *, layers: int = 3) -> ModelSpec:
    """The model spec of a task (no data loaded)."""
    if name == "bank":
        return ModelSpec("bank-logistic", (LayerSpec.dense(48, 2),), "logistic 2x48")
    if name == "agnews":
        return ModelSpec("agnews-logistic", (LayerSpec.dense(300, 4),), "logistic 4x300")
    if name == "mnist":
        return _cnn28()
    if name == "digits":
        return _cnn8()
    if name == "gru":
        return ModelSpec("digits-gru", (LayerSpec.gru(8, 8, 16), LayerSpec.dense(16, 10)),
                         "GRU(8->16) over digit rows, Linear(16,10)")
    if name == "dnn":
        return _dnn(layers, 784, 10)
    raise ValueError(f"The 'task' parameter must be one of {TASKS}. Got {name!r} instead.")


_TRAINING: dict[str, LocalTraining] = {
    "bank": LocalTraining(epochs=1, batch_size=32, lr=0.05),
    "agnews": LocalTraining(epochs=1, batch_size=32, lr=0.02),
    "mnist": LocalTraining(epochs=1, batch_size=32, lr=0.02, grad_clip=5.0),
    "digits": LocalTraining(epochs=2, batch_size=16, lr=0.1, grad_clip=5.0),
    "gru": LocalTraining(epochs=1, batch_size=16, lr=0.5, grad_clip=5.0),
    "dnn": LocalTraining(epochs=1, batch_size=32, lr=0.05, momentum=0.9, grad_clip=5.0),
}

_DATA: dict[str, Callable[..., LabelledData]] = {
    "bank": bank_like, "agnews": agnews_like, "mnist": mnist_5k, "digits": digits_8x8,
    "gru": digits_8x8, "dnn": mnist_5k,
}


def make_task(name: str, *, n_samples: int | None = None, n_test: int | None = None,
              layers: int = 3, seed: int = 0) -> Task:
    """Load a task's data and model spec.

    Parameters
    ----------
    name : {"bank", "agnews", "mnist", "digits", "gru", "dnn"}
    n_samples : int, optional
        Use only this many samples in total (train + test); default: the task's full size
        (5,000 for bank, agnews, mnist and dnn; 1,797 for digits and gru).
    n_test : int, optional
        Test samples (default: 20 % of the samples).
    layers : int, default=3
        Number of layers ``L`` of the ``dnn`` task (1..10 in Zheng et al., Fig. 8).
    seed : int, default=0
        Data generation and train/test split.
    """
    spec = task_spec(name, layers=check_int(layers, "layers", "make_task", min_value=1,
                                            max_value=64))
    loader = _DATA[name]
    total = n_samples
    if total is None:
        total = 1797 if name in ("digits", "gru") else 5000
    total = check_int(total, "n_samples", "make_task", min_value=20)
    test = n_test if n_test is not None else max(1, total // 5)
    test = check_int(test, "n_test", "make_task", min_value=1, max_value=total - 10)
    data = loader(n_samples=total, n_test=test, seed=seed)
    return Task(name, spec, _TRAINING[name], data)
