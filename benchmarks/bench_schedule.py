"""What the decryption rule costs SecSV: the same run under ``schedule="strict"`` (the
default) and ``schedule="paper"`` (per-coalition and derived decryption), interleaved.

The BANK shape (48 features, binary, M = 1,980 test samples) with 8 clients and half of
them per round (the rule cannot schedule exact Shapley values with every client in every
round: that run is refused before any model is encrypted, which the script also times).

Usage::

    python benchmarks/bench_schedule.py --repeats 3 [--rounds 2]

Prints one JSON row per run (CPU seconds via ``time.process_time``, wall seconds, the
decryption requests, the FSV's difference to the strict run's) and the medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from typing import Any

from threadpoolctl import threadpool_limits

from fedsec.learning.fedavg import run_fedavg
from fedsec.learning.tasks import make_task
from fedsec.shapley.secsv import secsv_shapley
from fedsec.shapley.views import UnsafeSchedule

MODES: dict[str, dict[str, Any]] = {
    "strict": {},
    "paper, per coalition": {"schedule": "paper", "derived_decryption": False},
    "paper, derived": {"schedule": "paper"},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    task = make_task("bank", n_samples=9900, n_test=1980, seed=0)
    fed = task.federate(8, seed=0)
    record = run_fedavg(task, fed, rounds=args.rounds, seed=0, participation=0.5)
    sets = [(c.x_test, c.y_test) for c in fed.clients]
    fed5 = task.federate(5, seed=0)
    record5 = run_fedavg(task, fed5, rounds=args.rounds, seed=0)
    sets5 = [(c.x_test, c.y_test) for c in fed5.clients]
    times: dict[str, list[float]] = {m: [] for m in MODES}
    refusal: list[float] = []
    ref = None
    for rep in range(args.repeats):
        for mode, kw in MODES.items():
            with warnings.catch_warnings(), threadpool_limits(limits=1, user_api="blas"):
                warnings.simplefilter("ignore")
                c0, t0 = time.process_time(), time.perf_counter()
                res = secsv_shapley(record, sets, **kw)
                cpu, wall = time.process_time() - c0, time.perf_counter() - t0
            if ref is None:
                ref = res.fsv
            requests = sum(c for (s, r, k), c in res.accounting.messages.items()
                           if s == "P" and r.startswith("client:") and k == "decrypt")
            times[mode].append(cpu)
            print(json.dumps({"repeat": rep, "mode": mode, "cpu_seconds": round(cpu, 3),
                              "wall_seconds": round(wall, 3), "decrypt_requests": requests,
                              "fsv_diff_to_strict": float(abs(res.fsv - ref).max())}))
        c0 = time.process_time()
        try:
            secsv_shapley(record5, sets5)
        except UnsafeSchedule:
            refusal.append(time.process_time() - c0)
    print("\nmedians (CPU s): " + ", ".join(f"{m} {statistics.median(v):.3f}"
                                             for m, v in times.items())
          + f"; 5 clients every round, refused after {statistics.median(refusal):.3f}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
