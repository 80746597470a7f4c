"""Defaults of exact mode (:mod:`fedsec.auc.exact`), importable without it."""

from __future__ import annotations

__all__ = ["DEFAULT_TARGET", "DEFAULT_MAX_ROUNDS"]

#: Default target for the certified bound.
DEFAULT_TARGET = 1e-6
#: Most refinement rounds before the final evaluation.
DEFAULT_MAX_ROUNDS = 12
