"""What the secure Shapley protocols (HESV, SecSV, SecretSV) share: inputs and result type.

Test data are the clients' private assets (Zheng et al., Sec. 3): client ``i`` holds
``D_i = (X_i, y_i)``; the collective test set is their concatenation. Every secure protocol
takes the per-client test sets, never a pooled array, and returns a
:class:`SecureShapleyResult` — the plaintext :class:`~fedsec.shapley.fsv.ShapleyResult`
fields plus the protocol's name and its :class:`~fedsec.protocol.accounting.Accounting`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec.protocol.accounting import DEFAULT_BANDWIDTH_MBPS, Accounting
from fedsec.shapley.fsv import ShapleyResult

__all__ = ["PROTOCOLS", "SecureShapleyResult", "TestSets", "check_protocol_args", "check_test_sets",
           "pooled"]

#: ``nssv`` is the plaintext reference (:func:`fedsec.shapley.fsv.federated_shapley`).
PROTOCOLS: tuple[str, ...] = ("nssv", "hesv", "secsv", "secretsv")

#: One ``(X_i, y_i)`` per client, in client order.
TestSets = Sequence[tuple[NDArray[Any], NDArray[Any]]]


@dataclass
class SecureShapleyResult(ShapleyResult):
    """A :class:`ShapleyResult` with the protocol that produced it and what it cost."""

    protocol: str = "nssv"
    accounting: Accounting = field(default_factory=Accounting)
    bandwidth_mbps: float = DEFAULT_BANDWIDTH_MBPS
    #: SecSV and SecretSV: the fixed point the principal server chose (fractional bits of
    #: each layer's weights and inputs) and the worst-case error of the final scores it
    #: permits (a prediction can differ from the plaintext model's only where its top two
    #: scores are closer than twice that); None for the other protocols
    fixed_point: dict[str, Any] | None = None
    #: HESV: predictions decided on scores tied within the CKKS noise (a
    #: :class:`~fedsec.errors.PrecisionWarning` says so); 0 for the other protocols
    near_ties: int = 0

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["protocol"] = self.protocol
        out["fixed_point"] = self.fixed_point
        out["near_ties"] = self.near_ties
        out.update(self.accounting.to_dict(self.bandwidth_mbps))
        return out


def check_test_sets(test_sets: TestSets, n_clients: int, in_features: int, *,
                    where: str) -> list[tuple[NDArray[np.float64], NDArray[np.int64]]]:
    """Validate per-client test sets; return them as (float64 2-D, int64 1-D) arrays."""
    if isinstance(test_sets, str | bytes) or not isinstance(test_sets, Sequence):
        raise TypeError(f"The 'test_sets' parameter of {where} must be a sequence of "
                        f"(X, y) pairs, one per client. Got {type(test_sets).__name__} instead.")
    if len(test_sets) != n_clients:
        raise ValueError(f"The 'test_sets' parameter of {where} must hold one (X, y) pair per "
                         f"client ({n_clients}). Got {len(test_sets)} instead.")
    out = []
    for i, pair in enumerate(test_sets):
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise TypeError(f"test_sets[{i}] of {where} must be an (X, y) pair.")
        x = np.asarray(pair[0], dtype=np.float64)
        x = x.reshape(len(x), -1) if x.ndim != 2 else x
        y = np.asarray(pair[1])
        if y.ndim != 1 or len(y) != len(x):
            raise ValueError(f"test_sets[{i}] of {where}: y must be 1-D with one label per "
                             f"row of X ({len(x)}). Got shape {y.shape} instead.")
        if len(x) and x.shape[1] != in_features:
            raise ValueError(f"test_sets[{i}] of {where}: X must have {in_features} features. "
                             f"Got {x.shape[1]} instead.")
        if not np.isfinite(x).all():
            raise ValueError(f"test_sets[{i}] of {where}: X must be finite.")
        out.append((x, y.astype(np.int64)))
    if sum(len(y) for _, y in out) == 0:
        raise ValueError(f"The 'test_sets' parameter of {where} holds no test sample.")
    return out


def pooled(test_sets: TestSets) -> tuple[NDArray[np.float64], NDArray[np.int64],
                                         NDArray[np.int64]]:
    """The collective test set ``(X, y)`` and each row's owner (client index)."""
    xs = [np.asarray(x, dtype=np.float64).reshape(len(x), -1) for x, _ in test_sets]
    ys = [np.asarray(y).astype(np.int64) for _, y in test_sets]
    owner = np.concatenate([np.full(len(y), i, dtype=np.int64) for i, y in enumerate(ys)])
    return np.concatenate(xs), np.concatenate(ys), owner


def check_protocol_args(record: Any, estimator: str, budget: int | None, *, where: str,
                        **flags: bool) -> int | None:
    """The arguments every secure Shapley entry point shares; returns the budget in use.

    Checks that ``record`` is a :class:`~fedsec.learning.record.TrainingRecord`, the
    estimator and its budget (default :data:`~fedsec.shapley.fsv.DEFAULT_BUDGETS`), that
    each of ``flags`` is a bool, and that exact SSV is asked only of rounds small enough
    to enumerate.
    """
    from fedsec.learning.record import TrainingRecord
    from fedsec.shapley.fsv import MAX_EXACT_PLAYERS, check_estimator

    if not isinstance(record, TrainingRecord):
        raise TypeError(f"The 'record' parameter of {where} must be a TrainingRecord. "
                        f"Got {type(record).__name__} instead.")
    budget = check_estimator(estimator, budget, where)
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise TypeError(f"The '{name}' parameter of {where} must be a bool. "
                            f"Got {type(value).__name__} instead.")
    if estimator == "exact":
        for t, rnd in enumerate(record.rounds):
            if len(rnd.participants) > MAX_EXACT_PLAYERS:
                raise ValueError(f"Exact SSV enumerates 2^k subsets; round {t + 1} has "
                                 f"{len(rnd.participants)} > {MAX_EXACT_PLAYERS} "
                                 "participants.")
    return budget
