"""fedsec: privacy-preserving evaluation for federated learning.

Secure federated ROC-AUC under CKKS (FHAUC, semi-honest and malicious aggregator), DPAUC
baselines and their attacks, Federated Shapley values, and the plaintext reference metrics.

The one-call entry points run every party in this process, for trying things out::

    import fedsec
    result = fedsec.secure_auc([(y1, s1), (y2, s2)], security="malicious")
    result.auc, result.verified, result.cheat_bound_bits
    fedsec.secure_auc(fedsec.load_party_csvs(["a.csv", "b.csv"]))  # or DataFrames, a dict
    fedsec.secure_roc_auc_score([y1, y2], [s1, s2])  # a float, as scikit-learn's
    fedsec.dpauc([(y1, s1), (y2, s2)], epsilon=1.0).auc
    fedsec.secure_pfl("bank", clients=10, rounds=5, attack="gaussian")  # Priv-PFL
    spec = fedsec.model_spec(my_torch_sequential_or_sklearn_classifier)
    record = fedsec.TrainingRecord.from_client_models(spec, local_models, initial=theta_1)
    fedsec.secure_shapley(record, [(x1, y1), (x2, y2)], protocol="secsv").fsv

A deployment runs one party per machine (``fedsec.runtime``, on Flower). The names below are
imported on first use, so ``import fedsec`` does not load SEAL or PyTorch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from fedsec.errors import (
    FedsecError,
    PolicyViolation,
    PrivacyWarning,
    ProtocolError,
    TamperingDetected,
    UndefinedMetricError,
)

if TYPE_CHECKING:  # the real signatures for type checkers; imported lazily at run time
    from fedsec.api import (
        dpauc,
        secure_auc,
        secure_auc_malicious,
        secure_pfl,
        secure_roc_auc_score,
    )
    from fedsec.auc.common import SecureAUCResult
    from fedsec.auc.dpauc import DPAUCResult
    from fedsec.auc.policy import PartyPolicy
    from fedsec.crypto.identity import Identity, Roster
    from fedsec.data.io import PartyData, load_party_csv, load_party_csvs
    from fedsec.learning.adapters import model_params, model_spec
    from fedsec.learning.record import TrainingRecord
    from fedsec.metrics.roc import (
        confusion_counts,
        trapezoid_auc,
        trapezoid_auc_from_counts,
        uniform_decision_points,
    )
    from fedsec.pfl.balance import BalanceConfig
    from fedsec.pfl.secure.common import SecurePFLConfig
    from fedsec.pfl.secure_sim import SecurePFLRun
    from fedsec.shapley.api import secure_shapley
    from fedsec.shapley.fsv import ShapleyResult, federated_shapley
    from fedsec.shapley.secure_common import SecureShapleyResult

__version__ = "0.1.0"

#: Where each lazily imported public name lives.
_LAZY: dict[str, str] = {
    "secure_auc": "fedsec.api",
    "secure_auc_malicious": "fedsec.api",
    "secure_roc_auc_score": "fedsec.api",
    "secure_pfl": "fedsec.api",
    "SecureAUCResult": "fedsec.auc.common",
    "PartyPolicy": "fedsec.auc.policy",
    "dpauc": "fedsec.api",
    "DPAUCResult": "fedsec.auc.dpauc",
    "federated_shapley": "fedsec.shapley.fsv",
    "ShapleyResult": "fedsec.shapley.fsv",
    "secure_shapley": "fedsec.shapley.api",
    "SecureShapleyResult": "fedsec.shapley.secure_common",
    "TrainingRecord": "fedsec.learning.record",
    "model_spec": "fedsec.learning.adapters",
    "model_params": "fedsec.learning.adapters",
    "SecurePFLRun": "fedsec.pfl.secure_sim",
    "SecurePFLConfig": "fedsec.pfl.secure.common",
    "BalanceConfig": "fedsec.pfl.balance",
    "Identity": "fedsec.crypto.identity",
    "Roster": "fedsec.crypto.identity",
    "PartyData": "fedsec.data.io",
    "load_party_csv": "fedsec.data.io",
    "load_party_csvs": "fedsec.data.io",
    "confusion_counts": "fedsec.metrics.roc",
    "trapezoid_auc": "fedsec.metrics.roc",
    "trapezoid_auc_from_counts": "fedsec.metrics.roc",
    "uniform_decision_points": "fedsec.metrics.roc",
}


def __getattr__(name: str) -> Any:
    """Import the public shortcuts (``fedsec.secure_auc``) on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fedsec' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "BalanceConfig",
    "DPAUCResult",
    "FedsecError",
    "Identity",
    "PartyData",
    "PartyPolicy",
    "PolicyViolation",
    "PrivacyWarning",
    "ProtocolError",
    "Roster",
    "SecureAUCResult",
    "SecurePFLConfig",
    "SecurePFLRun",
    "SecureShapleyResult",
    "ShapleyResult",
    "TamperingDetected",
    "TrainingRecord",
    "UndefinedMetricError",
    "__version__",
    "confusion_counts",
    "dpauc",
    "federated_shapley",
    "load_party_csv",
    "load_party_csvs",
    "model_params",
    "model_spec",
    "secure_auc",
    "secure_auc_malicious",
    "secure_pfl",
    "secure_roc_auc_score",
    "secure_shapley",
    "trapezoid_auc",
    "trapezoid_auc_from_counts",
    "uniform_decision_points",
]
