"""Run independent units of work (e.g. the rounds of a secure Shapley evaluation) in parallel.

Zheng et al. (Sec. 6.2.2) notes that rounds are independent, so they can be evaluated in
parallel. :func:`map_ordered` maps a picklable, module-level function over items and returns
the results **in input order**, so a parallel run returns exactly what the sequential run
returns (given the same inputs; fresh encryption randomness is drawn inside each call
either way).

Backends:

* ``"serial"`` — in this process (the reference; what ``workers=1`` means);
* ``"process"`` — a local :class:`concurrent.futures.ProcessPoolExecutor` (the default);
* ``"ray"`` — Ray tasks, on a running cluster when ``ray_address`` is given (``ray start
  --head`` on one machine, ``ray start --address=...`` on the others) or on a local
  instance otherwise. Ray is installed with the ``flower-sim`` extra.

Each worker is pinned to one BLAS/torch thread so that ``workers`` processes use about
``workers`` cores.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

import numpy as np

__all__ = ["BACKENDS", "default_workers", "map_ordered", "shapley_in_parallel"]

T = TypeVar("T")
R = TypeVar("R")

BACKENDS: tuple[str, ...] = ("serial", "process", "ray")


def default_workers() -> int:
    """Cores this process may use (``os.sched_getaffinity`` where available)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)


def _one_thread() -> None:
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:  # pragma: no cover - torch is an extra
        pass


def _call(fn: Callable[[T], R], item: T) -> R:
    return fn(item)


def map_ordered(fn: Callable[[T], R], items: Sequence[T], *, workers: int | None = None,
                backend: str = "process", ray_address: str | None = None) -> list[R]:
    """``[fn(x) for x in items]``, computed by up to ``workers`` workers, in input order.

    Parameters
    ----------
    fn : callable
        A module-level (picklable) function of one argument.
    items : sequence
        Picklable inputs.
    workers : int, optional
        At most this many parallel workers; default :func:`default_workers`. ``1`` runs
        serially in this process whatever the backend.
    backend : {"serial", "process", "ray"}, default="process"
    ray_address : str, optional
        Address of a running Ray cluster (``backend="ray"`` only).
    """
    if backend not in BACKENDS:
        raise ValueError(f"The 'backend' parameter of map_ordered must be one of {BACKENDS}. "
                         f"Got {backend!r} instead.")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or workers < 1):
        raise ValueError(f"The 'workers' parameter of map_ordered must be an int >= 1. "
                         f"Got {workers!r} instead.")
    items = list(items)
    n = min(workers or default_workers(), max(1, len(items)))
    if backend == "serial" or n == 1:
        return [fn(x) for x in items]
    if backend == "process":
        # spawn, not fork: the parent may hold PyTorch/OpenMP or SEAL thread pools, which a
        # forked child would inherit in an undefined state
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=n, initializer=_one_thread, mp_context=ctx) as pool:
            return list(pool.map(fn, items))
    return _map_ray(fn, items, n, ray_address)


def _map_ray(fn: Callable[[T], R], items: list[T], n: int, address: str | None) -> list[R]:
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - depends on the extra
        raise RuntimeError("backend='ray' needs Ray: pip install 'fedsec[flower-sim]'.") from exc
    started = False
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"address": address} if address else {"num_cpus": n}
        ray.init(include_dashboard=False, log_to_driver=False, **kwargs)
        started = True
    try:
        remote: Any = ray.remote(num_cpus=1)(_call)
        refs = [remote.remote(fn, x) for x in items]
        out: list[R] = ray.get(refs)
        return out
    finally:
        if started:
            ray.shutdown()


# ------------------------------------------------------------------ Shapley rounds in parallel
def _protocol_fn(protocol: str) -> Callable[..., Any]:
    if protocol == "hesv":
        from fedsec.shapley.hesv import hesv_shapley
        return hesv_shapley
    if protocol == "secsv":
        from fedsec.shapley.secsv import secsv_shapley
        return secsv_shapley
    if protocol == "secretsv":
        from fedsec.shapley.secretsv import secretsv_shapley
        return secretsv_shapley
    from fedsec.shapley.fsv import federated_shapley
    from fedsec.shapley.secure_common import pooled

    def nssv(record: Any, test_sets: Any, **kwargs: Any) -> Any:
        x, y, _ = pooled(test_sets)
        return federated_shapley(record, x, y, **kwargs)
    return nssv


def _evaluate_chunk(job: tuple[str, Any, Any, dict[str, Any]]) -> Any:
    protocol, record, test_sets, kwargs = job
    return _protocol_fn(protocol)(record, test_sets, **kwargs)


def shapley_in_parallel(protocol: str, record: Any, test_sets: Any, *,
                        workers: int | None = None, backend: str = "process",
                        ray_address: str | None = None,
                        progress: Callable[[str], None] | None = None,
                        **kwargs: Any) -> Any:
    """Federated Shapley values with the rounds split over workers (Zheng et al., Sec. 6.2.2).

    The rounds of ``record`` are cut into at most ``workers`` contiguous slices
    (:meth:`~fedsec.learning.record.TrainingRecord.slice`); every slice runs the whole
    protocol (``"nssv"``, ``"hesv"``, ``"secsv"`` or ``"secretsv"``, with ``kwargs``) —
    its own key set-up included, so the parallel run sends that set-up once per slice — and
    the results are joined: per-round SSVs in order, FSV their sum, costs and accounting
    added. Estimators draw each round's coalitions from a stream derived from the round's
    position (:func:`fedsec.shapley.fsv.round_rng`), so the FSVs equal the sequential
    run's (exactly for NSSV, SecSV and SecretSV; HESV's CKKS noise may differ on
    near-tie predictions, as between two sequential runs).
    """
    from fedsec.protocol.accounting import Accounting
    from fedsec.shapley.secure_common import PROTOCOLS, SecureShapleyResult
    from fedsec.shapley.utility import SkipStats

    if protocol not in PROTOCOLS:
        raise ValueError(f"The 'protocol' parameter of shapley_in_parallel must be one of "
                         f"{PROTOCOLS}. Got {protocol!r} instead.")
    n = min(workers or default_workers(), record.n_rounds)
    if n == 1 or backend == "serial":  # in this process, with per-round progress
        return _protocol_fn(protocol)(record, test_sets, progress=progress, **kwargs)
    if progress is not None:
        progress(f"evaluating {record.n_rounds} rounds in {n} parallel workers ({backend})")
    bounds = [round(i * record.n_rounds / n) for i in range(n + 1)]
    jobs = [(protocol, record.slice(a, b), test_sets, kwargs)
            for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
    t0 = time.perf_counter()
    parts = map_ordered(_evaluate_chunk, jobs, workers=n, backend=backend,
                        ray_address=ray_address)
    if progress is not None:
        progress(f"{record.n_rounds} rounds evaluated by {len(jobs)} workers")
    ssv = np.concatenate([p.ssv for p in parts], axis=0)
    stats = SkipStats()
    acc = Accounting()
    for p in parts:
        stats.add(p.skip)
        if isinstance(p, SecureShapleyResult):
            acc.merge(p.accounting)
    utilities = None
    if all(p.utilities is not None for p in parts):
        utilities = [u for p in parts for u in p.utilities]
    first = parts[0]
    common = (ssv.sum(axis=0), ssv, first.estimator, first.budget, first.sample_skip, utilities,
              [q for p in parts for q in p.participants],
              sum(p.models_tested for p in parts), sum(p.samples_tested for p in parts),
              time.perf_counter() - t0, stats)
    if isinstance(first, SecureShapleyResult):
        return SecureShapleyResult(*common, protocol=protocol, accounting=acc)
    return type(first)(*common)
