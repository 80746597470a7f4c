"""Which rounds a Shapley evaluation plays, and how far along it is.

Every protocol's round loop (NSSV, HESV, SecSV, SecretSV) walks :func:`rounds_to_play`:
``0 .. T-1`` in order, unless a parallel runner (:mod:`fedsec.shapley.parallel`) has
installed a :func:`round_source` in a worker process, which then hands that worker one round
at a time until none are left. A worker therefore runs its protocol's set-up once (over the
whole record, exactly as the sequential run does) and plays whichever rounds it is given.

:class:`RoundTimer` turns the rounds done so far into progress lines with the elapsed time
and an estimate of the time left (ETA).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

__all__ = ["RoundTimer", "format_seconds", "in_worker", "round_source", "rounds_to_play"]

#: A callable ``source(n_rounds) -> iterator of round indices`` installed by a runner.
RoundSource = Callable[[int], Iterator[int]]

_SOURCE: ContextVar[RoundSource | None] = ContextVar("fedsec_round_source", default=None)


def rounds_to_play(record: Any) -> Iterator[int]:
    """The indices of the rounds of ``record`` this call evaluates, in the order played.

    All of them, in order, unless a :func:`round_source` is installed (a parallel worker).
    """
    source = _SOURCE.get()
    if source is None:
        return iter(range(record.n_rounds))
    return source(record.n_rounds)


def in_worker() -> bool:
    """Whether a parallel runner's :func:`round_source` is installed (this call plays
    only some of the rounds: run-wide reports are the runner's to make)."""
    return _SOURCE.get() is not None


@contextmanager
def round_source(source: RoundSource) -> Iterator[None]:
    """Within the block, protocol round loops play the rounds ``source`` hands out."""
    token = _SOURCE.set(source)
    try:
        yield
    finally:
        _SOURCE.reset(token)


def format_seconds(seconds: float) -> str:
    """``"41.2 s"``, ``"3 min 10 s"`` or ``"1 h 5 min"``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    s = int(round(seconds))
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


class RoundTimer:
    """Elapsed time and ETA of an evaluation of ``n_rounds`` rounds by ``workers`` workers.

    The ETA is the mean time of the rounds done so far times the rounds left, divided by
    the workers that can still be busy (``min(workers, rounds left)``); with ``costs``
    (an estimate per round, e.g. the models it tests), the time per unit of cost of the
    rounds done times the cost of the rounds left.

    Parameters
    ----------
    n_rounds : int
        Rounds to evaluate.
    workers : int, default=1
        Workers evaluating them at once.
    costs : sequence of float, optional
        Relative cost of every round (default: all equal).
    clock : callable, optional
        Seconds (default :func:`time.perf_counter`).
    """

    def __init__(self, n_rounds: int, workers: int = 1, *,
                 costs: Sequence[float] | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.n_rounds, self.workers, self._clock = n_rounds, max(1, workers), clock
        self.costs = [1.0] * n_rounds if costs is None else [float(c) for c in costs]
        if len(self.costs) != n_rounds or min(self.costs, default=1.0) <= 0:
            raise ValueError(f"The 'costs' parameter of RoundTimer must hold {n_rounds} "
                             f"positive numbers. Got {costs!r} instead.")
        self.start = clock()
        self.durations: list[float] = []
        self._done_cost = 0.0
        self._last = self.start

    def round_started(self) -> None:
        """Mark the start of the next round (serial loops: after the set-up)."""
        self._last = self._clock()

    def done(self, seconds: float | None = None, t: int | None = None) -> float:
        """Count round ``t`` (or one more round) done, timed since the last mark unless
        ``seconds``."""
        now = self._clock()
        took = now - self._last if seconds is None else seconds
        self.durations.append(took)
        self._done_cost += self.costs[t] if t is not None else sum(self.costs) / self.n_rounds
        self._last = now
        return took

    @property
    def elapsed(self) -> float:
        return self._clock() - self.start

    def eta(self) -> float | None:
        """Seconds left (None before the first round is done)."""
        if not self.durations:
            return None
        left = self.n_rounds - len(self.durations)
        if left <= 0:
            return 0.0
        per_cost = sum(self.durations) / self._done_cost
        left_cost = max(0.0, sum(self.costs) - self._done_cost)
        return per_cost * left_cost / min(self.workers, left)

    def line(self, t: int, took: float, what: str = "", worker: int | None = None) -> str:
        """``round 3/16 done (worker 2, 41.2 s): 31 models tested; 5/16 done in 2 min 3 s,
        ETA 3 min 10 s`` (the worker and the count of rounds done only in parallel runs)."""
        who = f"worker {worker}, " if worker is not None else ""
        head = f"round {t + 1}/{self.n_rounds} done ({who}{format_seconds(took)})"
        if what:
            head += f": {what}"
        count = len(self.durations)
        tally = f"{count}/{self.n_rounds} done in " if worker is not None else "elapsed "
        tail = f"{tally}{format_seconds(self.elapsed)}"
        eta = self.eta()
        if eta is not None and count < self.n_rounds:
            tail += f", ETA {format_seconds(eta)}"
        return f"{head}; {tail}"
