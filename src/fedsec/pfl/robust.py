"""Robust aggregators from byzfl (MIT, ``byzfl==0.0.11``, ``learning`` extra) as baselines.

byzfl's package ``__init__`` also imports its training framework, which needs torchvision
and seaborn; fedsec needs only byzfl's vector-level ``aggregators`` and ``attacks``, so
:func:`load_byzfl` imports those two sub-packages without running the package ``__init__``
when the full import is not possible.

Threat model: none of this is cryptographic; it is the robust-aggregation baseline run on
the same data and seeds as BALANCE.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["ROBUST_AGGREGATORS", "load_byzfl", "robust_aggregator"]

ROBUST_AGGREGATORS: tuple[str, ...] = ("trimmed-mean", "krum", "median")


def load_byzfl() -> tuple[types.ModuleType, types.ModuleType]:
    """byzfl's ``aggregators`` and ``attacks`` modules.

    Raises
    ------
    ModuleNotFoundError
        byzfl is not installed (``pip install 'fedsec[learning]'``).
    """
    if "byzfl.aggregators" not in sys.modules or "byzfl.attacks" not in sys.modules:
        spec = importlib.util.find_spec("byzfl")
        if spec is None or not spec.submodule_search_locations:
            raise ModuleNotFoundError("The robust baselines use byzfl: "
                                      "pip install 'fedsec[learning]' (byzfl==0.0.11).",
                                      name="byzfl")
        if "byzfl" not in sys.modules:
            # a namespace stand-in for the package, so that its __init__ (training
            # framework: torchvision, seaborn) does not run
            stub = types.ModuleType("byzfl")
            stub.__path__ = list(spec.submodule_search_locations)
            sys.modules["byzfl"] = stub
    aggregators = importlib.import_module("byzfl.aggregators")
    attacks = importlib.import_module("byzfl.attacks")
    return aggregators, attacks


def robust_aggregator(name: str, n_malicious: int
                      ) -> Callable[[NDArray[Any]], NDArray[np.float64]]:
    """A byzfl aggregator over the rows of a ``(n, d)`` array, tolerating ``n_malicious``.

    Parameters
    ----------
    name : {"trimmed-mean", "krum", "median"}
    n_malicious : int
        ``f`` given to byzfl (trimmed mean drops ``f`` values at each end per coordinate;
        Krum scores each vector by its ``n - f - 1`` nearest neighbours).
    """
    if name not in ROBUST_AGGREGATORS:
        raise ValueError(f"The 'name' parameter of robust_aggregator must be one of "
                         f"{ROBUST_AGGREGATORS}. Got {name!r} instead.")
    if isinstance(n_malicious, bool) or not isinstance(n_malicious, int) or n_malicious < 0:
        raise ValueError(f"The 'n_malicious' parameter of robust_aggregator must be an int "
                         f">= 0. Got {n_malicious!r} instead.")
    aggs, _ = load_byzfl()
    agg: Any
    if name == "trimmed-mean":
        agg = aggs.TrMean(f=n_malicious)
    elif name == "krum":
        agg = aggs.Krum(f=n_malicious)
    else:
        agg = aggs.Median()

    def run(vectors: NDArray[Any]) -> NDArray[np.float64]:
        return np.asarray(agg(np.asarray(vectors, dtype=np.float64)), dtype=np.float64)

    return run
