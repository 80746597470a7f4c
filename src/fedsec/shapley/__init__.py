"""Contribution evaluation for federated learning (Zheng et al.).

One entry point, :func:`secure_shapley`, runs any protocol on the same inputs (a
:class:`~fedsec.learning.record.TrainingRecord` and each client's own test data) and
returns a :class:`SecureShapleyResult`:

* in the clear (NSSV in the paper, the reference every secure protocol is tested
  against): exact single-round and Federated Shapley values, SampleSkip, and the
  estimators PS, GT, KS and GTG-Shapley (:func:`federated_shapley`);
* securely: :func:`hesv_shapley` (CKKS), :func:`secsv_shapley` (BFV with an auxiliary
  server) and :func:`secretsv_shapley` (additive secret sharing).

The secure protocols are imported on first use, so ``import fedsec.shapley`` does not load
SEAL.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from fedsec.shapley.api import secure_shapley
from fedsec.shapley.fsv import DEFAULT_BUDGETS, ESTIMATORS, ShapleyResult, federated_shapley
from fedsec.shapley.secure_common import PROTOCOLS, SecureShapleyResult
from fedsec.shapley.utility import RoundGame, SkipStats

if TYPE_CHECKING:
    from fedsec.shapley.hesv import hesv_shapley
    from fedsec.shapley.secretsv import secretsv_shapley
    from fedsec.shapley.secsv import secsv_shapley

_LAZY: dict[str, str] = {
    "hesv_shapley": "fedsec.shapley.hesv",
    "secsv_shapley": "fedsec.shapley.secsv",
    "secretsv_shapley": "fedsec.shapley.secretsv",
}


def __getattr__(name: str) -> Any:
    """Import the secure protocols (``fedsec.shapley.secsv_shapley``) on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fedsec.shapley' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "DEFAULT_BUDGETS",
    "ESTIMATORS",
    "PROTOCOLS",
    "RoundGame",
    "SecureShapleyResult",
    "ShapleyResult",
    "SkipStats",
    "federated_shapley",
    "hesv_shapley",
    "secretsv_shapley",
    "secsv_shapley",
    "secure_shapley",
]
