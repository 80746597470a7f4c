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

import contextlib
import multiprocessing
import os
import pickle
import queue
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from os import _exit as _exit_now
from typing import Any, TypeVar

import numpy as np

__all__ = ["BACKENDS", "START_METHODS", "default_start_method", "default_workers", "map_ordered",
           "round_costs", "shapley_in_parallel"]

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
    """One BLAS/OpenMP thread in this worker (and one torch thread where torch is loaded:
    importing torch only to pin it would cost a worker a second or more of start-up)."""
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    from threadpoolctl import threadpool_limits
    threadpool_limits(limits=1)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def _check_pool(backend: str, workers: int | None, where: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"The 'backend' parameter of {where} must be one of {BACKENDS}. "
                         f"Got {backend!r} instead.")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or workers < 1):
        raise ValueError(f"The 'workers' parameter of {where} must be an int >= 1. "
                         f"Got {workers!r} instead.")


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
    _check_pool(backend, workers, "map_ordered")
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
    """``protocol``'s function, taking per-client test sets (NSSV on the pooled ones)."""
    from fedsec.shapley.api import protocol_function
    from fedsec.shapley.secure_common import pooled

    if protocol != "nssv":
        return protocol_function(protocol)
    federated_shapley = protocol_function(protocol)

    def nssv(record: Any, test_sets: Any, **kwargs: Any) -> Any:
        x, y, _ = pooled(test_sets)
        return federated_shapley(record, x, y, **kwargs)
    return nssv


#: A warning raised in a worker, as it travels to the parent: (category, message).
Caught = tuple[type[Warning], str]


def _caught(records: Sequence[warnings.WarningMessage]) -> list[Caught]:
    """The distinct warnings of ``records``, in order, in a picklable form."""
    out: dict[Caught, None] = {}
    for w in records:
        category = w.category
        try:
            pickle.dumps(category)
        except Exception:  # a category defined where the parent cannot import it
            category = UserWarning
        out[(category, str(w.message))] = None
    return list(out)


def _reissue(caught: Sequence[Caught]) -> None:
    """Warn once in this process for each distinct warning the workers raised."""
    for category, text in dict.fromkeys(caught):
        warnings.warn(text, category, stacklevel=3)


def _evaluate_chunk(job: tuple[str, Any, Any, dict[str, Any]]) -> tuple[Any, list[Caught]]:
    """One slice of rounds, whole protocol (the Ray backend's unit of work)."""
    protocol, record, test_sets, kwargs = job
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        result = _protocol_fn(protocol)(record, test_sets, **kwargs)
    return result, _caught(records)


def _picklable(exc: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def _round_worker(worker: int, jobs: Any, tasks: Any, results: Any) -> None:
    """A worker process: the protocol's set-up once, then the rounds ``tasks`` hands out.

    The job (protocol, record, test sets, options) comes on ``jobs``, not as the process's
    arguments: a spawned child that dies before reading its arguments would leave the
    parent blocked writing them (the parent holds the pipe's other end until it is done).

    Messages to the parent on ``results``: ``("ready", worker, seconds)`` once the set-up
    is done (seconds since the worker's imports), ``("round", worker, t, seconds)`` after
    every round, then ``("done", worker, result, played, warnings, CPU seconds)`` or
    ``("error", worker, exception, traceback, warnings)``.
    """
    from fedsec.shapley.rounds import round_source

    _one_thread()
    t0 = time.perf_counter()
    played: list[int] = []
    started = [t0]

    def source(n_rounds: int) -> Any:
        results.put(("ready", worker, time.perf_counter() - t0))
        while (t := tasks.get()) is not None:
            if not 0 <= t < n_rounds:  # pragma: no cover - the parent sends valid rounds
                raise RuntimeError(f"round {t} is not one of the record's {n_rounds}")
            played.append(t)
            started[0] = time.perf_counter()
            yield t

    def progress(_message: str) -> None:  # the protocol's line after every round
        results.put(("round", worker, played[-1], time.perf_counter() - started[0]))

    records: list[warnings.WarningMessage] = []
    try:
        protocol, record, test_sets, kwargs = pickle.loads(jobs.get())
        with warnings.catch_warnings(record=True) as records:
            warnings.simplefilter("always")
            with round_source(source):
                result = _protocol_fn(protocol)(record, test_sets, progress=progress,
                                                 **kwargs)
        results.put(("done", worker, result, played, _caught(records), time.process_time()))
    except BaseException as exc:  # noqa: BLE001 - every failure goes to the parent
        results.put(("error", worker, _picklable(exc), traceback.format_exc(),
                     _caught(records)))


def round_costs(record: Any, estimator: str = "exact", budget: int | None = None
                ) -> list[float]:
    """Estimated relative cost of every round of ``record``: the models it tests.

    ``2^k`` coalitions of its ``k`` participants for exact SSVs; for an estimator, at most
    that and about what its ``budget`` draws (``budget · k`` models for permutation
    sampling and GTG-Shapley, ``budget`` coalitions for group testing and KernelSHAP).
    """
    from fedsec.shapley.fsv import DEFAULT_BUDGETS

    out = []
    for rnd in record.rounds:
        k = len(rnd.participants)
        full = float(1 << k)
        if estimator == "exact":
            out.append(full)
            continue
        b = budget or DEFAULT_BUDGETS.get(estimator, 1)
        draws = b * k if estimator in ("ps", "gtg") else b
        out.append(min(full, float(draws + 2)))
    return out


def _stop(procs: Sequence[Any]) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=5)


def _on_message(msg: tuple[Any, ...], ready: str, timer: Any,
                parts: dict[int, tuple[Any, list[int]]], caught: list[Caught],
                progress: Callable[[str], None] | None) -> None:
    """A worker's message to the runner: progress lines, its result into ``parts`` and
    its warnings into ``caught``; its error is raised here (after the warnings so far).
    ``ready`` is the text after "worker N ready"."""
    from fedsec.shapley.rounds import format_seconds

    kind, worker = msg[0], msg[1]
    if kind == "ready":
        if progress is not None:
            progress(f"worker {worker} ready {ready}")
    elif kind == "round":
        took = timer.done(msg[3], msg[2])
        if progress is not None:
            progress(timer.line(msg[2], took, worker=worker))
    elif kind == "done":
        parts[worker] = (msg[2], msg[3])
        caught += msg[4]
        if progress is not None:
            progress(f"worker {worker} done: {len(msg[3])} rounds, "
                     f"{format_seconds(msg[5])} of CPU")
    else:  # "error": the first failure stops the run, as it would serially
        _reissue(caught + msg[4])
        raise msg[2]


def _rounds_in_processes(protocol: str, record: Any, test_sets: Any, n: int,
                         progress: Callable[[str], None] | None, kwargs: dict[str, Any]
                         ) -> tuple[list[tuple[Any, list[int]]], list[Caught]]:
    """Run ``n`` spawn workers over the rounds; return every worker's (result, rounds
    played) and the warnings they raised.

    The rounds are handed out in order (a queue), so each worker plays increasing rounds:
    the clients refuse a request for a round earlier than one they have served (replay
    protection), which rules out handing out the costliest rounds first."""
    from fedsec.shapley.rounds import RoundTimer, format_seconds

    costs = round_costs(record, kwargs.get("estimator", "exact"), kwargs.get("budget"))
    ctx = multiprocessing.get_context("spawn")
    jobs, tasks, results = ctx.Queue(), ctx.Queue(), ctx.Queue()
    job = pickle.dumps((protocol, record, list(test_sets), kwargs),
                       protocol=pickle.HIGHEST_PROTOCOL)
    for _ in range(n):  # written by the queue's thread while the workers start
        jobs.put(job)
    for t in range(record.n_rounds):
        tasks.put(t)
    for _ in range(n):
        tasks.put(None)
    procs = [ctx.Process(target=_round_worker, args=(w + 1, jobs, tasks, results),
                         name=f"fedsec-rounds-{w + 1}", daemon=True) for w in range(n)]
    timer = RoundTimer(record.n_rounds, n, costs=costs)
    parts: dict[int, tuple[Any, list[int]]] = {}
    caught: list[Caught] = []
    launched = time.perf_counter()
    try:
        for p in procs:
            p.start()
        while len(parts) < n:
            try:
                msg = results.get(timeout=1.0)
            except queue.Empty:
                dead = [p for w, p in enumerate(procs, 1)
                        if w not in parts and not p.is_alive()]
                if dead:
                    raise RuntimeError(f"parallel worker {dead[0].name} exited with code "
                                       f"{dead[0].exitcode} before finishing its rounds") from None
                continue
            setup = f" (set-up {format_seconds(msg[2])})" if msg[0] == "ready" else ""
            _on_message(msg, f"{format_seconds(time.perf_counter() - launched)} after its "
                        f"start{setup}", timer, parts, caught, progress)
    finally:
        _stop(procs)
        for q in (jobs, tasks, results):
            q.close()
            q.cancel_join_thread()  # what a dead worker left unread is dropped
    return [parts[w] for w in sorted(parts)], caught


START_METHODS: tuple[str, ...] = ("fork", "spawn")


def default_start_method() -> str:
    """``"fork"`` on Linux (one set-up, copied into every worker), else ``"spawn"``."""
    ok = sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()
    return "fork" if ok else "spawn"


def _rounds_forked(protocol: str, record: Any, test_sets: Any, n: int,
                   progress: Callable[[str], None] | None, kwargs: dict[str, Any]
                   ) -> tuple[list[tuple[Any, list[int]]], list[Caught], Any]:
    """Run the protocol's set-up once in this process, then fork ``n`` workers that take
    the rounds from a queue; return every worker's (result, rounds played), the warnings
    raised (the set-up's and the workers') and this process's own result (the set-up's
    accounting, no rounds: every worker's accounting starts from a copy of it).

    Each worker is a copy of this process after the set-up: the same keys, contexts, plans
    and uploaded test data, so a worker costs a ``fork`` instead of an interpreter start
    and a set-up of its own. What must differ between the copies does: every encryption,
    mask and share draws from the operating system (``os.urandom``, SEAL's per-encryption
    seeds) at the moment it is made, never from a stream held in a role, and each copy's
    replay watermark only sees the increasing rounds it is handed. Workers never run
    PyTorch (whose OpenMP pool does not survive a fork): secure Shapley evaluates models
    with NumPy and SEAL.
    """
    import multiprocessing.connection as mpc

    from fedsec.shapley.rounds import RoundTimer, format_seconds, round_source

    costs = round_costs(record, kwargs.get("estimator", "exact"), kwargs.get("budget"))
    ctx = multiprocessing.get_context("fork")
    tasks = ctx.SimpleQueue()  # no feeder thread: nothing of it is live at the fork
    for t in range(record.n_rounds):
        tasks.put(t)
    for _ in range(n):
        tasks.put(None)
    pipes = [ctx.Pipe(duplex=False) for _ in range(n)]  # (reader, writer) per worker
    me = [0]  # 0 in this process, the worker's number in a forked copy
    pids: list[int] = []
    played: list[int] = []
    started = [0.0]
    t0 = time.perf_counter()
    forked = [t0]

    def send(msg: tuple[Any, ...]) -> None:
        pipes[me[0] - 1][1].send(msg)

    def source(n_rounds: int) -> Any:
        setup = time.perf_counter() - t0
        sys.stdout.flush()
        sys.stderr.flush()
        forked[0] = time.perf_counter()
        for w in range(1, n + 1):
            pid = os.fork()
            if pid == 0:
                me[0] = w
                break
            pids.append(pid)
        if me[0] == 0:  # this process plays no round: it reports and joins
            if progress is not None:
                progress(f"set-up done in {format_seconds(setup)}; {n} workers forked "
                         "from it take the rounds as they free up")
            return
        _one_thread()
        for r, wr in pipes:  # keep only this worker's writer
            r.close()
            if wr is not pipes[me[0] - 1][1]:
                wr.close()
        send(("ready", me[0], 0.0))
        while (t := tasks.get()) is not None:
            if not 0 <= t < n_rounds:  # pragma: no cover - this process sends valid rounds
                raise RuntimeError(f"round {t} is not one of the record's {n_rounds}")
            played.append(t)
            started[0] = time.perf_counter()
            yield t

    def on_round(_message: str) -> None:
        if me[0]:
            send(("round", me[0], played[-1], time.perf_counter() - started[0]))

    records: list[warnings.WarningMessage] = []
    error: BaseException | None = None
    trace = ""
    result: Any = None
    try:
        with warnings.catch_warnings(record=True) as records:
            warnings.simplefilter("always")
            with round_source(source):
                result = _protocol_fn(protocol)(record, test_sets, progress=on_round,
                                                 **kwargs)
    except BaseException as exc:  # noqa: BLE001 - a worker reports it; here it is re-raised
        error, trace = exc, traceback.format_exc()
    if me[0]:  # a forked worker: report and leave without running this process's exit code
        try:
            if error is None:
                send(("done", me[0], result, played, _caught(records), time.process_time()))
            else:
                send(("error", me[0], _picklable(error), trace, _caught(records)))
        finally:
            _exit_now(0)  # no atexit handlers, no flush of the parent's buffers
    caught = _caught(records)  # the set-up's warnings
    if error is not None:
        _reap(pids, kill=True)
        _reissue(caught)
        raise error
    for _, wr in pipes:
        wr.close()
    readers: dict[Any, int] = {r: w + 1 for w, (r, _) in enumerate(pipes)}
    timer = RoundTimer(record.n_rounds, n, costs=costs)
    parts: dict[int, tuple[Any, list[int]]] = {}
    try:
        while len(parts) < n:
            # a worker that exits closes its pipe: its last message, then EOF (a worker
            # killed mid-round gives EOF without "done", below)
            ready = mpc.wait(list(readers), timeout=1.0)
            conn: Any
            for conn in ready:
                try:
                    msg: Any = conn.recv()
                except EOFError:
                    worker = readers.pop(conn)
                    if worker not in parts:
                        raise RuntimeError(f"parallel worker {worker} exited before "
                                           "finishing its rounds") from None
                    continue
                _on_message(msg, f"{format_seconds(time.perf_counter() - forked[0])} after "
                            "the fork", timer, parts, caught, progress)
    finally:
        _reap(pids, kill=len(parts) < n)
        for r, _ in pipes:
            r.close()
    return [parts[w] for w in sorted(parts)], caught, result


def _count_setup_once(joined: Any, base: Any, copies: int) -> None:
    """``joined``'s accounting holds the set-up ``copies`` times (every forked worker's
    accounting started from a copy of ``base``'s): keep it once."""
    if base is None or not hasattr(base, "accounting") or copies <= 1:
        return
    acc, b = joined.accounting, base.accounting
    extra = copies - 1
    for k, v in b.bytes_by_message.items():
        acc.bytes_by_message[k] = acc.bytes_by_message.get(k, 0) - extra * v
    for k, m in b.messages.items():
        acc.messages[k] = acc.messages.get(k, 0) - extra * m
    for kind, sec in b.seconds.items():
        acc.seconds[kind] = acc.seconds.get(kind, 0.0) - extra * sec
    for table in (acc.bytes_by_message, acc.messages):
        for k in [k for k, v in table.items() if v == 0]:
            del table[k]


def _reap(pids: Sequence[int], *, kill: bool) -> None:
    import signal

    for pid in pids:
        if kill:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def _join(protocol: str, record: Any, parts: Sequence[tuple[Any, Sequence[int]]],
          seconds: float) -> Any:
    """One result from the workers' results (each worker's rows for the rounds it played)."""
    from fedsec.protocol.accounting import Accounting
    from fedsec.shapley.secure_common import SecureShapleyResult
    from fedsec.shapley.utility import SkipStats

    n_rounds = record.n_rounds
    owner = [-1] * n_rounds
    for i, (_, played) in enumerate(parts):
        for t in played:
            if owner[t] != -1:  # pragma: no cover - each round is handed out once
                raise RuntimeError(f"round {t + 1} was evaluated twice")
            owner[t] = i
    if -1 in owner:  # pragma: no cover - every worker ran until the rounds ran out
        raise RuntimeError(f"round {owner.index(-1) + 1} was not evaluated")
    first = parts[0][0]
    ssv = np.zeros((n_rounds, record.n_clients))
    tables: list[Any] = [None] * n_rounds
    stats = SkipStats(audited=first.skip.audited)
    acc = Accounting()
    for res, played in parts:
        for j, t in enumerate(played):
            ssv[t] = res.ssv[t]
            if res.utilities is not None:
                tables[t] = res.utilities[j]
        stats.add(res.skip)
        if isinstance(res, SecureShapleyResult):
            acc.merge(res.accounting)
    utilities = tables if all(res.utilities is not None for res, _ in parts) else None
    common = (ssv.sum(axis=0), ssv, first.estimator, first.budget, first.sample_skip,
              utilities, [r.participants for r in record.rounds],
              sum(res.models_tested for res, _ in parts),
              sum(res.samples_tested for res, _ in parts), seconds, stats)
    if isinstance(first, SecureShapleyResult):
        out = SecureShapleyResult(*common, protocol=protocol, accounting=acc,
                                  fixed_point=first.fixed_point,  # one plan over the record
                                  near_ties=sum(res.near_ties for res, _ in parts))
        if protocol == "hesv" and out.near_ties:  # the workers kept theirs for the total
            from fedsec.shapley.hesv import warn_ties

            warn_ties(out.near_ties, out.samples_tested)
        return out
    return type(first)(*common)


def shapley_in_parallel(protocol: str, record: Any, test_sets: Any, *,
                        workers: int | None = None, backend: str = "process",
                        ray_address: str | None = None,
                        progress: Callable[[str], None] | None = None,
                        start_method: str | None = None,
                        **kwargs: Any) -> Any:
    """Federated Shapley values with the rounds spread over workers (Zheng et al., Sec. 6.2.2).

    With the ``"process"`` backend and ``start_method="fork"`` (the default on Linux), this
    process runs the protocol's set-up once (key set-up, contexts, test data, the
    fixed-point plan), then forks ``workers`` copies of itself that take the rounds one at
    a time from a queue as they free up; a worker costs a fork, not a set-up of its own
    (see :func:`_rounds_forked` for why the copies stay independent where they must).

    With ``start_method="spawn"`` (the default elsewhere), ``workers`` spawn processes each
    run the protocol (``"nssv"``, ``"hesv"``, ``"secsv"`` or ``"secretsv"``, with
    ``kwargs``) on the whole record: its own key set-up and test-data upload once (a run of
    its own: no keys are shared between processes, so the set-up is sent once per worker),
    then it evaluates the rounds handed out to it one at a time, in order, as workers free
    up; a worker whose set-up is slow, or whose rounds cost more, simply takes fewer rounds.
    Either way the results are joined: per-round SSVs in round order, FSV their sum, costs
    and accounting added. Every worker plans its fixed point from the whole record, as the
    sequential run does, and estimators draw each round's coalitions from a stream derived
    from the round's position (:func:`fedsec.shapley.fsv.round_rng`), so the FSVs equal the
    sequential run's (exactly for NSSV, SecSV and SecretSV; HESV's CKKS noise may differ on
    near-tie predictions, as between two sequential runs).

    The ``"ray"`` backend cuts the rounds into ``workers`` contiguous slices
    (:meth:`~fedsec.learning.record.TrainingRecord.slice`), one task each.

    ``progress`` gets a line when each worker is ready and after every round (its worker,
    its time, the rounds done and an ETA weighted by :func:`round_costs`). Warnings raised
    in the workers (e.g. a :class:`~fedsec.errors.PrivacyWarning`) are raised again here,
    each distinct one once.
    ``workers=1`` or ``backend="serial"`` runs in this process. ``start_method`` is
    ``"fork"`` or ``"spawn"`` (default :func:`default_start_method`; ``"process"`` backend
    only).
    """
    from fedsec.shapley.rounds import format_seconds
    from fedsec.shapley.secure_common import PROTOCOLS

    if protocol not in PROTOCOLS:
        raise ValueError(f"The 'protocol' parameter of shapley_in_parallel must be one of "
                         f"{PROTOCOLS}. Got {protocol!r} instead.")
    _check_pool(backend, workers, "shapley_in_parallel")
    start = default_start_method() if start_method is None else start_method
    if start not in START_METHODS or (start == "fork" and "fork" not in
                                      multiprocessing.get_all_start_methods()):
        raise ValueError(f"The 'start_method' parameter of shapley_in_parallel must be one "
                         f"of {START_METHODS} (fork where the platform has it). Got "
                         f"{start_method!r} instead.")
    n = min(workers or default_workers(), record.n_rounds)
    if n == 1 or backend == "serial":  # in this process, with per-round progress
        return _protocol_fn(protocol)(record, test_sets, progress=progress, **kwargs)
    t0 = time.perf_counter()
    if backend == "process" and start == "fork":
        if progress is not None:
            progress(f"evaluating {record.n_rounds} rounds in {n} parallel workers "
                     "(forked after one set-up; each takes rounds as it frees up)")
        parts, caught, base = _rounds_forked(protocol, record, test_sets, n, progress, kwargs)
    elif backend == "process":
        if progress is not None:
            progress(f"evaluating {record.n_rounds} rounds in {n} parallel workers "
                     f"({backend}); each worker sets up once, then takes rounds as it "
                     "frees up")
        parts, caught = _rounds_in_processes(protocol, record, test_sets, n, progress,
                                             kwargs)
    else:
        if progress is not None:
            progress(f"evaluating {record.n_rounds} rounds in {n} slices ({backend})")
        bounds = [round(i * record.n_rounds / n) for i in range(n + 1)]
        spans = [(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
        jobs = [(protocol, record.slice(a, b), test_sets, kwargs) for a, b in spans]
        out = map_ordered(_evaluate_chunk, jobs, workers=n, backend=backend,
                          ray_address=ray_address)
        parts = [(_unslice(res, a, record), list(range(a, b)))
                 for (res, _), (a, b) in zip(out, spans, strict=True)]
        caught = [c for _, cs in out for c in cs]
    seconds = time.perf_counter() - t0
    _reissue(caught)
    if progress is not None:
        progress(f"{record.n_rounds} rounds evaluated by {len(parts)} workers in "
                 f"{format_seconds(seconds)}")
    out = _join(protocol, record, parts, seconds)
    if backend == "process" and start == "fork":
        _count_setup_once(out, base, len(parts))
    return out


def _unslice(result: Any, start: int, record: Any) -> Any:
    """A slice's result with its SSV rows placed at the slice's rounds of ``record``."""
    ssv = np.zeros((record.n_rounds, record.n_clients))
    ssv[start:start + len(result.ssv)] = result.ssv
    result.ssv = ssv
    return result
