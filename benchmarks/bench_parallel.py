"""Rounds of a secure Shapley evaluation in parallel workers: what it costs, what it gains.

Parts:

* ``profile`` -- where a parallel run's time goes, per part: starting a spawn worker
  (interpreter + imports), pickling the record and the test sets to a worker, the
  protocol's own set-up in a worker (key set-up, contexts, the test data's upload or
  shares), and the per-round work (each round timed from the protocol's progress calls).
  One process, serially; the numbers feed the Amdahl projection for W = 4..16.
* ``speedup`` -- :func:`fedsec.runtime.parallel.shapley_in_parallel` with W = 1 (serial,
  in this process) and W = 2 (two spawn workers), interleaved, medians of ``--repeats``:
  rounds per second, speed-up over serial, efficiency (speed-up / W), wall and CPU
  seconds (children included). On a shared machine the wall-clock speed-up says how many
  free cores there were; the *critical path* (the parent's CPU seconds plus its busiest
  worker's, from the workers' own reports) is what the run takes on W free cores, and
  the *free-core* speed-up is the serial run's CPU seconds over it.

Tasks (n = 5 clients, fixed seeds):

* ``hesv-agnews``: HESV on the AGNEWS shape (logistic 4x300, M = 720), ``schedule="paper"``;
* ``secsv-bank``: SecSV on the BANK shape (logistic 2x48, M = 1,980), ``schedule="paper"``;
* ``secsv-cnn``: SecSV on the small CNN over 8x8 digits (M = 360), ``schedule="paper"``.

Usage (timings on a shared machine go under the lock)::

    flock /tmp/fedsec-bench.lock python benchmarks/bench_parallel.py --part profile
    flock /tmp/fedsec-bench.lock python benchmarks/bench_parallel.py --part speedup

Writes ``benchmarks/results/bench_parallel.json`` (one key per part) and prints Markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import resource
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

RESULTS = Path(__file__).resolve().parent / "results"
TASKS: dict[str, dict[str, Any]] = {
    "hesv-agnews": {"protocol": "hesv", "task": "agnews", "M": 720},
    "secsv-bank": {"protocol": "secsv", "task": "bank", "M": 1980},
    "secsv-cnn": {"protocol": "secsv", "task": "digits", "M": 360, "samples": 1797},
}


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _cpu() -> float:
    """CPU seconds of this process and its waited-for children."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + ch.ru_utime + ch.ru_stime


def _federation(spec: dict[str, Any], rounds: int, seed: int = 0) -> tuple[Any, Any]:
    from fedsec.learning.fedavg import run_fedavg
    from fedsec.learning.tasks import make_task

    m = spec["M"]
    task = make_task(spec["task"], n_samples=spec.get("samples", m + 3000), n_test=m,
                     seed=seed)
    fed = task.federate(5, seed=seed)
    record = run_fedavg(task, fed, rounds=rounds, seed=seed)
    return fed, record


def _kwargs(protocol: str) -> dict[str, Any]:
    return {"schedule": "paper"}


# ---------------------------------------------------------------------------- profile
def _first_upload(protocol: str) -> tuple[Any, str]:
    """The method whose first call ends the set-up (the first model's encryption)."""
    if protocol == "hesv":
        from fedsec.shapley.hesv import HESVClient
        return HESVClient, "upload_model"
    from fedsec.shapley.secsv.client import SecSVClient
    return SecSVClient, "encrypt_model"


def _spawn_seconds(module: str, repeats: int) -> float:
    """A fresh interpreter that imports ``module`` (what a spawn worker pays first)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", f"import {module}"], check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def profile(names: list[str], rounds: int, repeats: int) -> list[dict[str, Any]]:
    from fedsec.shapley.parallel import _protocol_fn

    rows = []
    for name in names:
        spec = TASKS[name]
        fed, record = _federation(spec, rounds)
        sets = [(c.x_test, c.y_test) for c in fed.clients]
        module = {"hesv": "fedsec.shapley.hesv", "secsv": "fedsec.shapley.secsv"}[
            spec["protocol"]]
        spawn = _spawn_seconds(module, repeats)
        spawn_torch = _spawn_seconds(f"{module}, torch", repeats)
        t0 = time.perf_counter()
        blob = pickle.dumps((record, sets), protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(blob)
        pickling = time.perf_counter() - t0
        fn = _protocol_fn(spec["protocol"])
        owner, method = _first_upload(spec["protocol"])
        original = getattr(owner, method)
        uploads: list[float] = []

        def timed(*a: Any, _f: Any = original, _u: list[float] = uploads, **k: Any) -> Any:
            _u.append(time.perf_counter())
            return _f(*a, **k)

        setattr(owner, method, timed)
        runs = []
        setups = []
        for _ in range(repeats):
            marks: list[float] = []
            uploads.clear()
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = fn(record, sets, progress=lambda _m, _k=marks: _k.append(time.perf_counter()),
                         **_kwargs(spec["protocol"]))
            total = time.perf_counter() - start
            split = res.accounting.to_dict()["time_split_seconds"]
            runs.append((marks, start, total, split))
            setups.append(uploads[0] - start)
        setattr(owner, method, original)
        split = runs[0][3]
        totals = [r[2] for r in runs]
        rounds_s = [statistics.median(r[0][t] - r[0][t - 1] for r in runs)
                    for t in range(1, rounds)]
        setup = statistics.median(setups)
        rounds_s.insert(0, statistics.median(r[0][0] - r[1] for r in runs) - setup)
        per_round = statistics.median(rounds_s)
        row = {"task": name, "protocol": spec["protocol"], "M": spec["M"], "T": rounds,
               "spawn_import_s": spawn, "spawn_import_with_torch_s": spawn_torch,
               "pickle_bytes": len(blob), "pickle_roundtrip_s": pickling,
               "setup_s": setup, "round_s": rounds_s, "round_median_s": per_round,
               "serial_total_s": statistics.median(totals), "time_split": split}
        rows.append(row)
        say(f"{name}: spawn+import {spawn:.2f} s ({spawn_torch:.2f} s with torch), pickle "
            f"{len(blob) / 1e6:.2f} MB in {pickling * 1e3:.0f} ms, set-up {setup:.2f} s, "
            f"round {per_round:.2f} s (rounds: "
            f"{', '.join(f'{r:.2f}' for r in rounds_s)}), serial {row['serial_total_s']:.1f} s")
    return rows


# ---------------------------------------------------------------------------- speed-up
def speedup(names: list[str], rounds: int, workers: list[int], repeats: int,
            starts: tuple[str, ...] = ("fork",)) -> list[dict[str, Any]]:
    import numpy as np

    from fedsec.runtime.parallel import shapley_in_parallel

    rows = []
    for name in names:
        spec = TASKS[name]
        fed, record = _federation(spec, rounds)
        sets = [(c.x_test, c.y_test) for c in fed.clients]
        configs = [(w, st) for w in workers for st in (starts if w > 1 else ("serial",))]
        times: dict[tuple[int, str], list[tuple[float, float, float]]] = {c: []
                                                                          for c in configs}
        ssv: dict[tuple[int, str], Any] = {}
        for _ in range(repeats):
            for w, st in configs:  # interleaved: W = 1, 2 (fork), 2 (spawn), 1, ...
                lines: list[str] = []
                c0, p0, t0 = _cpu(), time.process_time(), time.perf_counter()
                extra = {} if w == 1 else {"start_method": st}
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    res = shapley_in_parallel(spec["protocol"], record, sets, workers=w,
                                              progress=lines.append, **extra,
                                              **_kwargs(spec["protocol"]))
                wall, cpu = time.perf_counter() - t0, _cpu() - c0
                # on free cores a run takes about the parent's own CPU plus its busiest
                # worker's ("worker 2 done: 4 rounds, 11.2 s of CPU"; None if the
                # implementation does not report it)
                busiest = [_seconds(ln.split(" rounds, ")[1].removesuffix(" of CPU"))
                           for ln in lines if " done: " in ln and ln.startswith("worker ")]
                free = (time.process_time() - p0 + max(busiest)) if busiest else cpu
                times[(w, st)].append((wall, cpu, free if w > 1 else cpu))
                ssv[(w, st)] = res.ssv
                say(f"{name} W={w} ({st}): {wall:.1f} s wall, {cpu:.1f} s CPU, "
                    f"{times[(w, st)][-1][2]:.1f} s critical path")
        first = configs[0]
        base = statistics.median(t for t, _, _ in times[first])
        base_cpu = statistics.median(c for _, c, _ in times[first])
        for w, st in configs:
            wall = statistics.median(t for t, _, _ in times[(w, st)])
            cpu = statistics.median(c for _, c, _ in times[(w, st)])
            path = statistics.median(f for _, _, f in times[(w, st)])
            row = {"task": name, "protocol": spec["protocol"], "M": spec["M"], "T": rounds,
                   "W": w, "start": st, "wall_s": wall, "cpu_s": cpu,
                   "walls": [t for t, _, _ in times[(w, st)]],
                   "critical_path_cpu_s": path,
                   "rounds_per_s": rounds / wall, "speedup": base / wall,
                   "efficiency": base / wall / w,
                   "free_core_speedup": base_cpu / path,
                   "free_core_efficiency": base_cpu / path / w,
                   "max_ssv_diff_vs_serial": float(np.max(np.abs(ssv[(w, st)]
                                                                 - ssv[first])))}
            rows.append(row)
    return rows


def _seconds(text: str) -> float:
    """Inverse of :func:`fedsec.shapley.rounds.format_seconds` ("3 min 10 s" -> 190)."""
    total, parts = 0.0, text.split()
    for value, unit in zip(parts[::2], parts[1::2], strict=True):
        total += float(value) * {"h": 3600, "min": 60, "s": 1}[unit]
    return total


def table(out: dict[str, Any]) -> str:
    lines = []
    if out.get("profile"):
        lines += ["| task | spawn + import (s) | with torch (s) | pickle (MB, ms) | set-up (s) "
                  "| round (s, median) | serial total (s) |", "|---|---|---|---|---|---|---|"]
        for r in out["profile"]:
            lines.append(f"| {r['task']} T={r['T']} | {r['spawn_import_s']:.2f} | "
                         f"{r['spawn_import_with_torch_s']:.2f} | "
                         f"{r['pickle_bytes'] / 1e6:.2f}, {r['pickle_roundtrip_s'] * 1e3:.0f} | "
                         f"{r['setup_s']:.2f} | {r['round_median_s']:.2f} | "
                         f"{r['serial_total_s']:.1f} |")
        lines.append("")
    if out.get("speedup"):
        lines += ["| task | W | workers start | wall (s) | CPU (s) | rounds/s | speed-up | "
                  "efficiency | critical path (CPU s) | free-core speed-up | "
                  "free-core efficiency |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in out["speedup"]:
            lines.append(f"| {r['task']} T={r['T']} | {r['W']} | {r.get('start', 'spawn')} | "
                         f"{r['wall_s']:.1f} | "
                         f"{r['cpu_s']:.1f} | {r['rounds_per_s']:.3f} | {r['speedup']:.2f} | "
                         f"{r['efficiency']:.2f} | {r['critical_path_cpu_s']:.1f} | "
                         f"{r['free_core_speedup']:.2f} | {r['free_core_efficiency']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", nargs="+", default=["profile", "speedup"],
                    choices=["profile", "speedup"], help="which parts to run")
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS),
                    help="protocol-on-task shapes to run")
    ap.add_argument("--rounds", type=int, default=4, help="training rounds T (>= 2)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2],
                    help="worker counts W to compare (the first is the baseline)")
    ap.add_argument("--repeats", type=int, default=3, help="repeats (medians are quoted)")
    ap.add_argument("--start", nargs="+", default=["fork"], choices=["fork", "spawn"],
                    help="how parallel workers start: fork after one set-up, or spawn with "
                         "a set-up each (several: compared side by side)")
    ap.add_argument("--out", type=Path, default=RESULTS / "bench_parallel.json",
                    help="JSON file to write (parts already there are kept)")
    args = ap.parse_args()
    if args.rounds < 2:
        ap.error("--rounds must be >= 2")
    out: dict[str, Any] = {}
    if args.out.exists():
        out = json.loads(args.out.read_text())
    out["machine"] = {"platform": platform.platform(), "python": platform.python_version(),
                      "cores": os.cpu_count(), "shared": True}
    if "profile" in args.part:
        out["profile"] = profile(args.tasks, args.rounds, args.repeats)
    if "speedup" in args.part:
        out["speedup"] = speedup(args.tasks, args.rounds, args.workers, args.repeats,
                                 tuple(args.start))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1))
    print(table(out))


if __name__ == "__main__":
    main()
