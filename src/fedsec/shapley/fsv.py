"""Federated Shapley values in the clear (NSSV, Zheng et al.): exact, SampleSkip, estimators.

For every round ``t`` the single-round Shapley values (SSV) of the participants are
computed from the utilities ``v(θ_S^t)`` (clients outside ``I^t`` get 0), and each
client's Federated Shapley Value is the sum over rounds, ``φ_i = Σ_t φ_i^t``.

:func:`federated_shapley` is the one entry point::

    result = federated_shapley(record, x_test, y_test)                       # exact
    result = federated_shapley(record, x_test, y_test, sample_skip=True)     # Alg. 6-7
    approx = federated_shapley(record, x_test, y_test, estimator="ps", budget=20, seed=1)
    approx.error_to(result)   # Euclidean distance to the exact FSV, as Zheng et al. measures
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from threadpoolctl import threadpool_limits

from fedsec.learning.record import TrainingRecord
from fedsec.metrics.shapley import shapley_values
from fedsec.shapley.estimators import (
    group_testing,
    gtg_shapley,
    kernel_shap,
    permutation_sampling,
)
from fedsec.shapley.rounds import RoundTimer, rounds_to_play
from fedsec.shapley.utility import RoundGame, SkipStats

__all__ = ["ESTIMATORS", "DEFAULT_BUDGETS", "ShapleyResult", "federated_shapley"]

FloatArray = NDArray[np.float64]
Progress = Callable[[str], None]

#: ``exact`` plus the estimators' short names (Zheng et al.'s PS, GT, KS; GTG-Shapley).
ESTIMATORS: tuple[str, ...] = ("exact", "ps", "gt", "ks", "gtg")
#: Per-round budgets used when none is given: permutations (ps, gtg) or sampled
#: coalitions (gt, ks).
DEFAULT_BUDGETS: dict[str, int] = {"ps": 10, "gt": 30, "ks": 10, "gtg": 20}
MAX_EXACT_PLAYERS = 16


@dataclass
class ShapleyResult:
    """FSVs, per-round SSVs and what computing them cost."""

    fsv: FloatArray
    ssv: FloatArray  # (T, n)
    estimator: str
    budget: int | None
    sample_skip: bool
    utilities: list[FloatArray] | None  # exact only: per round, indexed by mask over I^t
    participants: list[tuple[int, ...]]
    models_tested: int
    samples_tested: int
    seconds: float
    skip: SkipStats = field(default_factory=SkipStats)

    def error_to(self, exact: ShapleyResult | FloatArray) -> float:
        """Euclidean distance ``||φ̂ − φ||_2`` to the exact FSV (Zheng et al.'s error)."""
        ref = exact.fsv if isinstance(exact, ShapleyResult) else np.asarray(exact)
        return float(np.linalg.norm(self.fsv - ref))

    def to_dict(self) -> dict[str, Any]:
        return {"estimator": self.estimator, "budget": self.budget,
                "sample_skip": self.sample_skip, "fsv": self.fsv.tolist(),
                "ssv": self.ssv.tolist(), "participants": [list(p) for p in self.participants],
                "models_tested": self.models_tested, "samples_tested": self.samples_tested,
                "seconds": self.seconds, "sample_skip_stats":
                    self.skip.to_dict() if self.sample_skip else None}


def check_estimator(estimator: str, budget: int | None, where: str) -> int | None:
    """Validate an estimator name and its per-round budget; the budget in use (``None`` for
    ``exact``, :data:`DEFAULT_BUDGETS` when not given)."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"The 'estimator' parameter of {where} must be one of {ESTIMATORS}. "
                         f"Got {estimator!r} instead.")
    if estimator == "exact":
        return None
    budget = DEFAULT_BUDGETS[estimator] if budget is None else budget
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ValueError(f"The 'budget' parameter of {where} must be an int >= 1. "
                         f"Got {budget!r} instead.")
    return budget


def round_rng(seed: int, record: TrainingRecord, t: int) -> np.random.Generator:
    """The estimators' sampling stream of round ``t`` of ``record``: derived from the seed
    and the round's position in the whole run, so evaluating rounds separately (in
    parallel, or a slice of the record) samples exactly what one pass over all rounds does.
    Public randomness (coalitions to evaluate), not a secret."""
    return np.random.default_rng(np.random.SeedSequence([seed, 0x5A9, record.first_round + t]))


def _round_ssv(game: RoundGame, estimator: str, budget: int, rng: np.random.Generator
               ) -> tuple[FloatArray, FloatArray | None]:
    if estimator == "exact":
        table = game.table()
        return shapley_values(table), table
    fn = {"ps": permutation_sampling, "gt": group_testing, "ks": kernel_shap,
          "gtg": gtg_shapley}[estimator]
    return fn(game, budget, rng), None


def _rounds(record: TrainingRecord, x: FloatArray, y: NDArray[np.int64], estimator: str,
            budget: int, sample_skip: bool, audit: bool, seed: int,
            ssv: FloatArray, tables: list[FloatArray], stats: SkipStats, counts: list[int],
            progress: Progress | None) -> None:
    timer = RoundTimer(record.n_rounds)
    for t in rounds_to_play(record):
        rnd = record.rounds[t]
        timer.round_started()
        if estimator == "exact" and len(rnd.participants) > MAX_EXACT_PLAYERS:
            raise ValueError(f"Exact SSV enumerates 2^k subsets; round {t + 1} has "
                             f"{len(rnd.participants)} > {MAX_EXACT_PLAYERS} participants.")
        game = RoundGame(record.spec, rnd, x, y, sample_skip=sample_skip, audit=audit)
        phi, table = _round_ssv(game, estimator, budget, round_rng(seed, record, t))
        for j, c in enumerate(rnd.participants):
            ssv[t, c] = phi[j]
        if table is not None:
            tables.append(table)
        counts[0] += game.models_tested
        counts[1] += game.samples_tested
        stats.add(game.stats)
        took = timer.done()
        if progress is not None:
            progress(timer.line(t, took, f"{game.models_tested} models tested"))


def federated_shapley(record: TrainingRecord, x_test: NDArray[Any], y_test: NDArray[Any], *,
                      estimator: str = "exact", budget: int | None = None,
                      sample_skip: bool = False, audit: bool = False, seed: int = 0,
                      progress: Progress | None = None) -> ShapleyResult:
    """Federated Shapley values of the clients of ``record`` on a collective test set.

    Parameters
    ----------
    record : TrainingRecord
        Rounds of federated training (:func:`fedsec.learning.fedavg.run_fedavg` or the
        Flower recording strategy).
    x_test, y_test : array-like
        The collective test set ``D = (D_1, ..., D_n)``; utility is accuracy on it.
    estimator : {"exact", "ps", "gt", "ks", "gtg"}, default="exact"
    budget : int, optional
        Per-round budget of the estimator (:data:`DEFAULT_BUDGETS`); ignored by ``exact``.
    sample_skip : bool, default=False
        Skip samples as SampleSkip does (Zheng et al., Alg. 6-7).
    audit : bool, default=False
        With ``sample_skip``: also count wrongly skipped samples (extra, uncounted work).
    seed : int, default=0
        Seed of the estimators' sampling.
    progress : callable, optional
        Called with a short message after every round.
    """
    budget = check_estimator(estimator, budget, "federated_shapley")
    x = np.asarray(x_test, dtype=np.float64).reshape(len(x_test), -1)
    y = np.asarray(y_test).astype(np.int64)
    if x.shape[1] != record.spec.in_features:
        raise ValueError(f"x_test must have {record.spec.in_features} features. "
                         f"Got {x.shape[1]} instead.")
    n, t_rounds = record.n_clients, record.n_rounds
    ssv = np.zeros((t_rounds, n))
    tables: list[FloatArray] = []
    counts = [0, 0]  # models tested, (model, sample) predictions
    stats = SkipStats(audited=audit and sample_skip)
    t0 = time.perf_counter()
    with threadpool_limits(limits=1, user_api="blas"):
        # Small matrix products: one BLAS thread is several times faster than contending
        # threads on a busy machine, and gives the same sums everywhere.
        _rounds(record, x, y, estimator, budget or 0, sample_skip, audit, seed, ssv, tables,
                stats, counts, progress)
    seconds = time.perf_counter() - t0
    return ShapleyResult(ssv.sum(axis=0), ssv, estimator, budget, sample_skip,
                         tables if estimator == "exact" else None,
                         [r.participants for r in record.rounds], counts[0], counts[1], seconds,
                         stats)
