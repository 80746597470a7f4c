"""Cost of malicious-aggregator FHAUC relative to semi-honest, measured side by side.

Aggregator time is deserialization + computation (``aggregator_seconds``); bytes are the
real serialized messages each party uploads and downloads. Repetitions alternate the two
modes so machine noise hits both alike; medians are reported.

Usage::

    python benchmarks/bench_malicious.py --parties 100 --decision-points 100 --reps 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from fedsec.auc.fhauc import secure_auc
from fedsec.data.datasets import synthetic_federation


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parties", type=int, default=100)
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--decision-points", type=int, default=100)
    ap.add_argument("--splits", type=int, default=None,
                    help="malicious shares per entry (default: smallest meeting the bound)")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    fed = synthetic_federation(args.parties, args.samples, auc=0.75, seed=1)
    pairs = fed.pairs()
    times: dict[str, list[float]] = {"semi-honest": [], "malicious": []}
    up: dict[str, int] = {}
    down: dict[str, int] = {}
    aucs: dict[str, float] = {}
    extra: dict[str, object] = {}
    for rep in range(args.reps):
        for mode in ("semi-honest", "malicious"):
            kw: dict[str, object] = {"splits": args.splits} if mode == "malicious" else {}
            res = secure_auc(pairs, decision_points=args.decision_points, security=mode, **kw)
            times[mode].append(res.aggregator_seconds)
            if mode == "malicious":
                extra = res.extra
            up[mode], down[mode], aucs[mode] = (res.bytes_up_per_party,
                                                res.bytes_down_per_party, res.auc)
            print(f"rep {rep + 1}/{args.reps} {mode:<11} aggregator "
                  f"{res.aggregator_seconds:.3f} s", file=sys.stderr, flush=True)
    med = {m: statistics.median(v) for m, v in times.items()}
    out = {
        "parties": args.parties, "samples": args.samples,
        "decision_points": args.decision_points, "splits": args.splits, "reps": args.reps,
        "runs": extra.get("runs"), "splits_used": extra.get("splits"),
        "cheat_bound_bits": extra.get("cheat_bound_bits"),
        "aggregator_seconds_median": med, "aggregator_seconds_all": times,
        "bytes_up_per_party": up, "bytes_down_per_party": down, "auc": aucs,
        "time_ratio": med["malicious"] / med["semi-honest"],
        "upload_ratio": up["malicious"] / up["semi-honest"],
        "download_ratio": down["malicious"] / down["semi-honest"],
    }
    print(json.dumps(out, indent=2))
    print()
    print("| mode | aggregator s (median) | upload / party | download / party |")
    print("|---|---:|---:|---:|")
    for m in ("semi-honest", "malicious"):
        print(f"| {m} | {med[m]:.3f} | {up[m]:,} B | {down[m]:,} B |")
    print(f"| ratio malicious / semi-honest | {out['time_ratio']:.2f}x | "
          f"{out['upload_ratio']:.2f}x | {out['download_ratio']:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
