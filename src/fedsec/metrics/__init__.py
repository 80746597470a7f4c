"""Plaintext reference maths. No cryptography here; every protocol is tested against it."""

from fedsec.metrics.roc import (
    as_decision_points,
    bin_pair_counts,
    class_totals_from_terms,
    confusion_counts,
    exact_auc,
    single_value_bins,
    transform_scores,
    trapezoid_auc,
    trapezoid_auc_from_counts,
    trapezoid_error_bound,
    trapezoid_error_bound_from_counts,
    trapezoid_terms,
    uniform_decision_points,
)

__all__ = [
    "as_decision_points",
    "bin_pair_counts",
    "exact_auc",
    "single_value_bins",
    "transform_scores",
    "trapezoid_error_bound",
    "trapezoid_error_bound_from_counts",
    "class_totals_from_terms",
    "confusion_counts",
    "trapezoid_auc",
    "trapezoid_auc_from_counts",
    "trapezoid_terms",
    "uniform_decision_points",
]
