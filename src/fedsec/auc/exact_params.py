"""Defaults of exact mode (:mod:`fedsec.auc.exact`), importable without it."""

from __future__ import annotations

__all__ = ["DEFAULT_TARGET", "DEFAULT_TARGET_MALICIOUS", "DEFAULT_MAX_ROUNDS", "default_target"]

#: Default target for the certified bound.
DEFAULT_TARGET = 1e-6
#: Malicious mode's default: its certified bound includes what verification admits
#: (fedsec.auc.fhauc_malicious.shift_bound, 1.58e-5 at the default tolerance).
DEFAULT_TARGET_MALICIOUS = 2e-5


def default_target(security: str) -> float:
    """Exact mode's default target for ``security``."""
    return DEFAULT_TARGET_MALICIOUS if security == "malicious" else DEFAULT_TARGET
#: Most refinement rounds before the final evaluation.
DEFAULT_MAX_ROUNDS = 12
