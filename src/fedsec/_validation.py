"""Input validation helpers with one uniform message style.

Messages follow scikit-learn's style: ``The 'epsilon' parameter of dpauc must be > 0.
Got -1 instead.`` Wrong types raise ``TypeError``, wrong values ``ValueError``.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["ParameterError", "check_int", "check_real", "check_choice", "check_labels_scores",
           "int_rule", "real_rule"]


class ParameterError(ValueError):
    """A value that breaks its parameter's constraint.

    ``rule`` is the constraint in words (``">= 2"``, ``"finite"``, ``"one of 'a', 'b'"``),
    so that a caller speaking of the value under another name (the command line speaks of
    ``--runs``, not ``runs``) can say the same rule without restating it.
    """

    def __init__(self, message: str, *, rule: str) -> None:
        super().__init__(message)
        self.rule = rule


def _num(v: float) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def int_rule(min_value: int | None = None, max_value: int | None = None) -> str:
    """The constraint of :func:`check_int` in words: ``"in 2..8"``, ``">= 1"``, ..."""
    if min_value is not None and max_value is not None:
        return f"in {min_value}..{max_value}"
    if min_value is not None:
        return f">= {min_value}"
    if max_value is not None:
        return f"<= {max_value}"
    return "an integer"


def real_rule(gt: float | None = None, ge: float | None = None, lt: float | None = None,
              le: float | None = None) -> str:
    """The constraint of :func:`check_real` in words: ``"> 0 and < 0.5"``, ``"finite"``."""
    parts = [f"{sym} {_num(b)}" for b, sym in ((gt, ">"), (ge, ">="), (lt, "<"), (le, "<="))
             if b is not None]
    return " and ".join(parts) if parts else "finite"


def _fail_type(name: str, owner: str, expected: str, value: Any) -> TypeError:
    return TypeError(
        f"The '{name}' parameter of {owner} must be {expected}. Got {value!r} "
        f"of type {type(value).__name__} instead."
    )


def check_int(
    value: Any, name: str, owner: str, *, min_value: int | None = None,
    max_value: int | None = None,
) -> int:
    """Return ``value`` as an int, or raise with a clear message."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _fail_type(name, owner, "an int", value)
    v = int(value)
    if min_value is not None and v < min_value:
        raise ParameterError(
            f"The '{name}' parameter of {owner} must be >= {min_value}. Got {v} instead.",
            rule=int_rule(min_value, max_value))
    if max_value is not None and v > max_value:
        raise ParameterError(
            f"The '{name}' parameter of {owner} must be <= {max_value}. Got {v} instead.",
            rule=int_rule(min_value, max_value))
    return v


def check_real(
    value: Any, name: str, owner: str, *, gt: float | None = None,
    ge: float | None = None, le: float | None = None, lt: float | None = None,
) -> float:
    """Return ``value`` as a finite float, or raise with a clear message."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _fail_type(name, owner, "a real number", value)
    v = float(value)
    if not np.isfinite(v):
        raise ParameterError(
            f"The '{name}' parameter of {owner} must be finite. Got {v} instead.",
            rule="finite")
    checks: tuple[tuple[float | None, str], ...] = ((gt, ">"), (ge, ">="), (lt, "<"), (le, "<="))
    for bound, sym in checks:
        if bound is None:
            continue
        ok = {">": v > bound, ">=": v >= bound, "<": v < bound, "<=": v <= bound}[sym]
        if not ok:
            raise ParameterError(
                f"The '{name}' parameter of {owner} must be {sym} {bound}. Got {v} instead.",
                rule=real_rule(gt, ge, lt, le))
    return v


def check_choice(value: Any, name: str, owner: str, *, choices: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``choices``, or raise with a clear message."""
    if not isinstance(value, str):
        raise _fail_type(name, owner, "a string", value)
    if value not in choices:
        rule = "one of " + ", ".join(repr(c) for c in choices)
        raise ParameterError(
            f"The '{name}' parameter of {owner} must be {rule}. Got {value!r} instead.",
            rule=rule)
    return value


def check_labels_scores(
    y_true: Any, y_score: Any, owner: str
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Validate one party's labels (0/1) and scores (finite, in [0, 1])."""
    try:
        y = np.asarray(y_true)
        s = np.asarray(y_score, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"y_true and y_score of {owner} must be numeric arrays: {exc}") from None
    if y.ndim != 1 or s.ndim != 1:
        raise ValueError(
            f"y_true and y_score of {owner} must be 1-D. Got shapes {y.shape} and {s.shape}."
        )
    if y.shape != s.shape:
        raise ValueError(
            f"y_true and y_score of {owner} must have the same length. "
            f"Got {y.shape[0]} and {s.shape[0]}."
        )
    if y.size and not np.all(np.isin(y, (0, 1))):
        bad = np.asarray(y[~np.isin(y, (0, 1))][0]).item()
        raise ValueError(f"y_true of {owner} must contain only 0 and 1. Got {bad!r}.")
    if s.size and not np.all(np.isfinite(s)):
        raise ValueError(f"y_score of {owner} must be finite. Got NaN or inf.")
    if s.size and (s.min() < 0.0 or s.max() > 1.0):
        raise ValueError(
            f"y_score of {owner} must lie in [0, 1]. Got values in [{s.min()}, {s.max()}]."
        )
    return y.astype(np.int64), s
