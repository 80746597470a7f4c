"""Utilities ``v(θ_S^t)`` of one round, tested on the collective test set (Zheng et al., Sec. 3).

:class:`RoundGame` is the utility oracle of round ``t``: ``value(mask)`` returns the
accuracy of ``θ_S^t`` on the collective test set, where bit ``j`` of ``mask`` selects the
``j``-th participant of ``I^t``. ``v(∅)`` is the accuracy of the global model ``θ^t``.
Values are cached, and the oracle counts what it costs: models tested and (model, sample)
predictions made.

With ``sample_skip=True`` it follows SampleSkip (Zheng et al., Algorithms 6 and 7):

* every local model ``θ_i^t`` is tested on the whole test set first, giving the ID set
  ``Φ_{{i}}`` of samples it predicts correctly (Alg. 6, steps 2-4);
* for an aggregated model ``θ_S^t`` (``|S| >= 2``), FindSkippable (Alg. 7) unions
  ``Φ_{S'} ∩ Φ_{S∖S'}`` over every split of ``S`` into two non-empty parts whose ID sets
  are already known; those samples ``Ψ_S`` are *skipped* and counted as correct, and the
  model is tested only on the others (Alg. 6, steps 8-12); ``Φ_S`` (including ``Ψ_S``) is
  recorded for later splits.

Exact tables (:meth:`RoundGame.table`) evaluate subsets in ascending order of size, as
Alg. 6 does, so every split's ID sets exist. Estimators ask for subsets in their own
order; SampleSkip then uses whatever ID sets exist (Alg. 7, step 3).

``audit=True`` additionally tests every aggregated model on its skipped samples -- work
the protocol does not do -- to count *wrongly* skipped samples (skipped, yet mispredicted
by ``θ_S^t``); these counts are not included in the cost counters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec.learning.model import ModelSpec, predict
from fedsec.learning.record import RoundRecord
from fedsec.metrics.shapley import popcounts

__all__ = ["RoundGame", "SkipStats", "ascending_table", "find_skippable"]

BoolArray = NDArray[np.bool_]


@dataclass
class SkipStats:
    """SampleSkip bookkeeping over the aggregated models (``|S| >= 2``) tested.

    ``skipped`` and ``wrong`` count (model, sample) pairs; ``slots`` is the number of
    aggregated models tested times the test-set size ``M`` (the denominator of the shares).
    ``max_delta`` is the largest ``Δv_S = v̂(θ_S) − v(θ_S)`` seen (audit only).
    """

    skipped: int = 0
    wrong: int = 0
    slots: int = 0
    audited: bool = False
    max_delta: float = 0.0

    @property
    def skipped_share(self) -> float:
        return self.skipped / self.slots if self.slots else 0.0

    @property
    def wrong_share(self) -> float:
        return self.wrong / self.slots if self.slots else 0.0

    def add(self, other: SkipStats) -> None:
        self.skipped += other.skipped
        self.wrong += other.wrong
        self.slots += other.slots
        self.audited = self.audited or other.audited
        self.max_delta = max(self.max_delta, other.max_delta)

    def to_dict(self) -> dict[str, Any]:
        return {"skipped": self.skipped, "wrongly_skipped": self.wrong,
                "aggregated_model_samples": self.slots, "skipped_share": self.skipped_share,
                "wrongly_skipped_share": self.wrong_share if self.audited else None,
                "max_delta_v": self.max_delta if self.audited else None}


@dataclass
class RoundGame:
    """Utility oracle of one round (see the module docstring)."""

    spec: ModelSpec
    round: RoundRecord
    x: NDArray[np.float64]
    y: NDArray[np.int64]
    sample_skip: bool = False
    audit: bool = False
    models_tested: int = 0
    samples_tested: int = 0
    stats: SkipStats = field(default_factory=SkipStats)
    _values: dict[int, float] = field(default_factory=dict)
    _correct: dict[int, BoolArray] = field(default_factory=dict)
    _started: bool = False

    def __post_init__(self) -> None:
        if len(self.x) != len(self.y) or len(self.y) == 0:
            raise ValueError("The test set must be non-empty with one label per sample.")
        self.stats.audited = self.audit

    @property
    def k(self) -> int:
        """Number of participants ``|I^t|``."""
        return len(self.round.participants)

    @property
    def full(self) -> int:
        return (1 << self.k) - 1

    def _test(self, mask: int, rows: NDArray[np.int64] | None) -> BoolArray:
        params = self.round.model_of_mask(mask)
        xs = self.x if rows is None else self.x[rows]
        ys = self.y if rows is None else self.y[rows]
        ok: BoolArray = predict(self.spec, params, xs) == ys
        return ok

    def value(self, mask: int) -> float:
        """``v(θ_S^t)`` for the participants selected by ``mask`` (cached)."""
        if not 0 <= mask <= self.full:
            raise ValueError(f"mask must lie in 0..{self.full}. Got {mask} instead.")
        if mask in self._values:
            return self._values[mask]
        if self.sample_skip and not self._started:
            self._started = True
            for j in range(self.k):  # Alg. 6, steps 2-4: every local model, all samples
                self.value(1 << j)
        m = len(self.y)
        size = mask.bit_count()
        if mask == 0 or size == 1 or not self.sample_skip:
            ok = self._test(mask, None)
            self.samples_tested += m
        else:
            skip = self.find_skippable(mask)
            rows = np.flatnonzero(~skip)
            ok = skip.copy()
            if rows.size:
                ok[rows] = self._test(mask, rows)
            self.samples_tested += int(rows.size)
            n_skip = int(skip.sum())
            self.stats.skipped += n_skip
            self.stats.slots += m
            if self.audit and n_skip:
                truth = self._test(mask, np.flatnonzero(skip))
                wrong = int((~truth).sum())
                self.stats.wrong += wrong
                self.stats.max_delta = max(self.stats.max_delta, wrong / m)
        self.models_tested += 1
        if mask != 0:
            self._correct[mask] = ok
        value = float(ok.mean())
        self._values[mask] = value
        return value

    def find_skippable(self, mask: int) -> BoolArray:
        """Alg. 7 over the ID sets recorded so far (:func:`find_skippable`)."""
        return find_skippable(self._correct, mask, len(self.y))

    def table(self) -> NDArray[np.float64]:
        """All ``2^k`` utilities, evaluated in ascending order of coalition size."""
        return ascending_table(self.value, self.k)


def find_skippable(correct: dict[int, BoolArray], mask: int, m: int) -> BoolArray:
    """Alg. 7: ``Ψ_S = ∪ Φ_{S'} ∩ Φ_{S∖S'}`` over the splits of ``S`` (``mask``) whose ID
    sets ``correct[·]`` (boolean over the ``m`` samples) are already known."""
    skip = np.zeros(m, dtype=bool)
    low = mask & -mask
    sub = (mask - 1) & mask
    while sub:  # proper non-empty submasks; each split once (S' holds the lowest bit)
        if sub & low:
            a, b = correct.get(sub), correct.get(mask ^ sub)
            if a is not None and b is not None:
                skip |= a & b
        sub = (sub - 1) & mask
    return skip


def ascending_table(value: Callable[[int], float], k: int) -> NDArray[np.float64]:
    """``[value(mask) for mask in 0..2^k-1]``, called in ascending order of coalition size
    (as Alg. 6 needs, so that every split's ID sets exist)."""
    order = np.argsort(popcounts(k), kind="stable")
    return np.array([value(int(mask)) for mask in order])[np.argsort(order)]
