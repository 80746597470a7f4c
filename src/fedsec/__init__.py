"""fedsec: privacy-preserving evaluation for federated learning.

Secure federated ROC-AUC under CKKS (FHAUC, semi-honest and malicious aggregator), DPAUC
baselines and their attacks, secure Shapley values and private personalised FL.
"""

from typing import Any

from fedsec.errors import (
    FedsecError,
    PrivacyWarning,
    ProtocolError,
    TamperingDetected,
    UndefinedMetricError,
)

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """Lazy top-level shortcuts (``fedsec.secure_auc``) without importing SEAL eagerly."""
    if name == "secure_auc":
        from fedsec.auc.fhauc import secure_auc

        return secure_auc
    raise AttributeError(f"module 'fedsec' has no attribute {name!r}")


__all__ = [
    "FedsecError",
    "PrivacyWarning",
    "ProtocolError",
    "TamperingDetected",
    "UndefinedMetricError",
    "__version__",
    "secure_auc",
]
