"""Secure AUC with many simulated parties in one process: wall and CPU time, peak memory.

Runs :func:`fedsec.auc.fhauc.secure_auc` (key set-up and protocol) for ``PARTIES``
parties of 100 fixed-seed samples each at N = 100 and prints one line: wall and CPU
seconds, the key set-up's seconds, the aggregator's seconds, the AUC and the peak
resident memory (``ru_maxrss``). ``--profile`` prints cProfile's top functions too.

Usage::

    /usr/bin/time -v python benchmarks/bench_auc_scale.py 1000
    python benchmarks/bench_auc_scale.py 200 --profile
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import resource
import time

import numpy as np

from fedsec.auc.fhauc import secure_auc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("parties", type=int, help="number of simulated parties")
    ap.add_argument("--security", default="semi-honest",
                    choices=("semi-honest", "malicious"), help="threat model")
    ap.add_argument("--profile", action="store_true", help="also print cProfile's top 30")
    args = ap.parse_args(argv)
    g = np.random.default_rng(1)
    data = [(g.integers(0, 2, 100), g.random(100)) for _ in range(args.parties)]
    pr = cProfile.Profile() if args.profile else None
    if pr is not None:
        pr.enable()
    t0, c0 = time.perf_counter(), time.process_time()
    res = secure_auc(data, decision_points=100, security=args.security)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if pr is not None:
        pr.disable()
        out = io.StringIO()
        pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(30)
        print(out.getvalue())
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"parties={args.parties} wall={wall:.2f}s cpu={cpu:.2f}s "
          f"setup={res.setup_seconds:.2f}s agg={res.aggregator_seconds:.3f}s "
          f"auc={res.auc} maxrss={rss:.0f}MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
