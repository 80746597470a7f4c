"""Exceptions and warnings shared by every layer of fedsec."""

from __future__ import annotations

__all__ = [
    "FedsecError",
    "ProtocolError",
    "TamperingDetected",
    "PolicyViolation",
    "UndefinedMetricError",
    "PrivacyWarning",
]


class FedsecError(Exception):
    """Base class of fedsec's own errors."""


class ProtocolError(FedsecError):
    """A message is malformed, truncated, oversized, foreign or out of order."""


class TamperingDetected(FedsecError):
    """Verification of a protocol result failed: the aggregator deviated.

    Raised instead of returning a number. ``check`` names the check that failed.
    """

    def __init__(self, message: str, *, check: str) -> None:
        super().__init__(message)
        self.check = check


class PolicyViolation(ProtocolError):
    """A configuration or participant set that the party's own policy refuses.

    ``check`` names the rule (``quorum``, ``tolerance``, ``cheat-bound``, ``preset``,
    ``decision-points``); the message never carries private data.
    """

    def __init__(self, message: str, *, check: str) -> None:
        super().__init__(message)
        self.check = check


class UndefinedMetricError(FedsecError, ValueError):
    """The requested metric is undefined for these data (e.g. AUC with one class)."""


class PrivacyWarning(UserWarning):
    """A choice that weakens privacy, e.g. revealing a ROC curve or a tiny epsilon budget."""


class PrecisionWarning(UserWarning):
    """A result that may differ from the plaintext reference beyond its usual error, e.g.
    predictions decided on scores closer than the encryption's noise."""
