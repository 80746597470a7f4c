"""fedsec: privacy-preserving evaluation for federated learning.

Secure federated ROC-AUC under CKKS (FHAUC, semi-honest and malicious aggregator), DPAUC
baselines and their attacks, secure Shapley values and private personalised FL.
"""

from fedsec.errors import (
    FedsecError,
    PrivacyWarning,
    ProtocolError,
    TamperingDetected,
    UndefinedMetricError,
)

__version__ = "0.1.0"

__all__ = [
    "FedsecError",
    "PrivacyWarning",
    "ProtocolError",
    "TamperingDetected",
    "UndefinedMetricError",
    "__version__",
]
