"""Run independent units of work (e.g. the rounds of a secure Shapley evaluation) in parallel.

Seed 004 (Sec. 6.2.2) notes that rounds are independent, so they can be evaluated in
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

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

__all__ = ["BACKENDS", "default_workers", "map_ordered"]

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
        with ProcessPoolExecutor(max_workers=n, initializer=_one_thread) as pool:
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
