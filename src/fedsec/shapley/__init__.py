"""Contribution evaluation for federated learning (Zheng et al.).

In the clear (the reference every secure protocol is tested against, NSSV in the
paper): exact single-round and Federated Shapley values, SampleSkip, and the estimators
PS, GT, KS and GTG-Shapley. See :func:`federated_shapley`.
"""

from fedsec.shapley.fsv import DEFAULT_BUDGETS, ESTIMATORS, ShapleyResult, federated_shapley
from fedsec.shapley.utility import RoundGame, SkipStats

__all__ = [
    "DEFAULT_BUDGETS",
    "ESTIMATORS",
    "RoundGame",
    "ShapleyResult",
    "SkipStats",
    "federated_shapley",
]
