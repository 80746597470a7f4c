"""Side-by-side CPU/wall timing of ``secsv_shapley`` (linearity shortcut, exact FSV) on the
BANK-shaped (M = 1,980, T = 2) and AGNEWS-shaped (M = 720, T = 10) tasks of
``bench_secsv.py``, for the SecSV speed-up work of issue 10.

Usage::

    python benchmarks/bench_secsv_speed.py --task bank --repeats 3

Prints one JSON row per run (CPU seconds via ``time.process_time``, wall seconds, FSV) and
the medians. To compare two checkouts, run it with each ``PYTHONPATH=<checkout>/src``,
alternating (the machine is shared and noisy).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).parent))
import bench_secsv as bench  # noqa: E402
from fedsec.shapley.secsv import secsv_shapley  # noqa: E402

CASES = {"bank": (1980, 2), "agnews": (720, 10)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", choices=sorted(CASES), default="bank")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--label", default="")
    ap.add_argument("--per-coalition", action="store_true",
                    help="derived_decryption=False (one decryption request per coalition)")
    args = ap.parse_args()
    m_test, rounds = CASES[args.task]
    rec, _fed, sets = bench._task(args.task, m_test, rounds)
    cpus, walls = [], []
    with threadpool_limits(limits=1):
        for _ in range(args.repeats):
            c0, w0 = time.process_time(), time.perf_counter()
            kw = {"derived_decryption": False} if args.per_coalition else {}
            res = secsv_shapley(rec, sets, **kw, schedule="paper")
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            cpus.append(cpu)
            walls.append(wall)
            print(json.dumps({"label": args.label, "task": args.task, "cpu_seconds": cpu,
                              "wall_seconds": wall, "bytes_total":
                              res.to_dict()["bytes_total"],
                              "fsv": [float(v) for v in res.fsv]}), flush=True)
    print(json.dumps({"label": args.label, "task": args.task, "repeats": args.repeats,
                      "median_cpu_seconds": statistics.median(cpus),
                      "median_wall_seconds": statistics.median(walls)}), flush=True)


if __name__ == "__main__":
    main()
