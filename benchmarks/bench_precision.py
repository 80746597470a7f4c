"""CKKS error of honest FHAUC runs against the plaintext trapezoid (``fedsec.metrics``).

For each federation size (from one positive and one negative sample up to near
``max_total_samples`` = 2^20), each decision-point count and each mode (semi-honest with the
single and the pair mask, malicious), the federation is evaluated ``--reps`` times under one
key set-up; every evaluation draws fresh masks (and, in malicious mode, fresh run
randomness). Reported per row: median and max relative error ``|auc - ref| / ref``, max
absolute error, and in malicious mode the largest disagreement between the two runs (what
the verification tolerance must stay above).

The error is mostly the parties' counts' noise (issue 22, ``fedsec.auc.masking``): relative
~2^-28 / min(Pos, Neg), the same in every malicious run; plus CKKS noise, which differs
between malicious runs (the run gap the tolerance must stay above). Both channels carry the
same mask integer, so masks cancel exactly; the pair mask publishes the encoded ratio.

Data: fixed seeds (simulated scores, two overlapping classes); masks and keys from the OS.

Usage::

    .venv/bin/python benchmarks/bench_precision.py [--reps 20] [--preset NAME] [--quick]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from fedsec.auc.common import local_federation
from fedsec.auc.fhauc import FHAUCAggregator, FHAUCConfig, FHAUCParty
from fedsec.auc.fhauc_malicious import (
    MaliciousAggregator,
    MaliciousConfig,
    MaliciousParty,
)
from fedsec.auc.policy import PartyPolicy
from fedsec.crypto.keysetup import run_key_setup
from fedsec.crypto.params import DEFAULT_PRESET, MALICIOUS_PRESET
from fedsec.metrics import confusion_counts, trapezoid_auc_from_counts

Federation = list[tuple[np.ndarray, np.ndarray]]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def federation(kind: str, seed: int = 7) -> Federation:
    """Fixed-seed federations; ``kind`` names the total size."""
    g = np.random.default_rng(seed)
    if kind == "1+1":  # one positive, one negative, tied: denom = 2 (the worst case), AUC 1/2
        return [(np.array([1]), np.array([0.5])), (np.array([0]), np.array([0.5]))]
    if kind == "3+2":
        return [(np.array([1, 0, 1]), np.array([0.9, 0.4, 0.35])),
                (np.array([1, 0]), np.array([0.2, 0.6]))]
    total = {"100": 100, "10^4": 10_000, "2^20-2": (1 << 20) - 2}[kind]
    parties = 4
    out = []
    for i in range(parties):
        n = total // parties + (1 if i < total % parties else 0)
        y = (g.random(n) < 0.4).astype(np.int64)
        s = np.clip(0.25 * y + 0.75 * g.random(n), 0.0, 1.0)
        out.append((y, s))
    return out


def reference(data: Federation, n_points: int) -> float:
    y = np.concatenate([a for a, _ in data])
    s = np.concatenate([b for _, b in data])
    return trapezoid_auc_from_counts(*confusion_counts(y, s, n_points))


class Runner:
    """One key set-up per mode, reused for every evaluation."""

    def __init__(self, preset: str, n_parties: int, mpreset: str) -> None:
        self.preset = preset
        self.mpreset = mpreset
        self.names = [f"p{i}" for i in range(n_parties)]
        insecure = preset.startswith("INSECURE_")
        self.ids, self.roster = local_federation(self.names)
        spec = FHAUCConfig.create(2, preset=preset, allow_insecure=insecure).key_spec()
        self.ks, self.keys = run_key_setup(self.ids, self.roster, spec)
        mspec = MaliciousConfig.create(2, preset=mpreset, allow_insecure=insecure).key_spec()
        self.mks, self.mkeys = run_key_setup(self.ids, self.roster, mspec)
        self.insecure = insecure

    def semi_honest(self, data: Federation, n_points: int, masking: str) -> Callable[[], float]:
        cfg = FHAUCConfig.create(n_points, preset=self.preset, masking=masking,
                                 allow_insecure=self.insecure)
        names = self.names[:len(data)]
        roles = [FHAUCParty(y, s, keys=self.keys[i], config=cfg)
                 for i, (y, s) in enumerate(data)]
        subs = [r.submit() for r in roles]
        assert self.ks.context is not None
        ctx = self.ks.context

        def once() -> float:
            agg = FHAUCAggregator(ctx, cfg, names=names, session=self.ks.session)
            return roles[0].finalize(agg.aggregate(subs))
        return once

    def malicious(self, data: Federation, n_points: int) -> Callable[[], tuple[float, float]]:
        # a tolerance far above any error (and no bound) so that every gap is observed
        cfg = MaliciousConfig.create(n_points, preset=self.mpreset, tolerance=0.49,
                                     min_bound_bits=0.0, allow_insecure=self.insecure)
        policy = PartyPolicy(max_tolerance=0.49, min_bound_bits=0.0, quorum=2)
        assert self.mks.context is not None
        ctx = self.mks.context
        n = len(data)

        def once() -> tuple[float, float]:
            agg = MaliciousAggregator(ctx, cfg, names=self.mks.names, session=self.mks.session,
                                      roster=self.roster, min_parties=n)
            roles = [MaliciousParty(y, s, keys=self.mkeys[i], config=cfg,
                                    identity=self.ids[i], roster=self.roster, policy=policy)
                     for i, (y, s) in enumerate(data)]
            start = agg.start([r.commit() for r in roles])
            response = agg.aggregate([r.submit(start) for r in roles])
            roles[0].finalize(response)
            runs = [float(a) for a in roles[0].verification["auc_runs"]]
            return runs[0], max(runs) - min(runs)
        return once


def measure(runner: Runner, kind: str, data: Federation, n_points: int, mode: str,
            reps: int) -> dict[str, Any]:
    ref = reference(data, n_points)
    pos = int(sum(int(y.sum()) for y, _ in data))
    neg = int(sum(int(y.size) for y, _ in data)) - pos
    errs: list[float] = []
    gaps: list[float] = []
    t0 = time.perf_counter()
    if mode == "malicious":
        mal = runner.malicious(data, n_points)
        for _ in range(reps):
            a, gap = mal()   # run 1's AUC and the largest gap between all runs
            errs.append(abs(a - ref))
            gaps.append(gap)
    else:
        sh = runner.semi_honest(data, n_points, mode.split("/")[1])
        for _ in range(reps):
            errs.append(abs(sh() - ref))
    rel = [e / ref for e in errs]
    row: dict[str, Any] = {
        "federation": kind, "pos": pos, "neg": neg, "denom": 2 * pos * neg,
        "decision_points": n_points, "mode": mode, "reps": reps, "auc": ref,
        "rel_err_median": statistics.median(rel), "rel_err_max": max(rel),
        "abs_err_max": max(errs), "seconds": time.perf_counter() - t0,
    }
    if gaps:
        row["run_gap_max"] = max(gaps)
        row["run_gap_median"] = statistics.median(gaps)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--preset", default=DEFAULT_PRESET, help="semi-honest mode's preset")
    ap.add_argument("--malicious-preset", default=MALICIOUS_PRESET)
    ap.add_argument("--quick", action="store_true", help="3 reps, no 2^20 federation")
    ap.add_argument("--json-out", default=None)
    args = ap.parse_args()
    reps = 3 if args.quick else args.reps
    kinds = ["1+1", "3+2", "100", "10^4"] + ([] if args.quick else ["2^20-2"])
    modes = ["semi-honest/single", "semi-honest/pair", "malicious"]
    runner = Runner(args.preset, 4, args.malicious_preset)
    rows = []
    for kind in kinds:
        data = federation(kind)
        for n_points in (100, 4096 if not args.preset.startswith("INSECURE_") else 2048):
            for mode in modes:
                if mode == "malicious" and n_points > 100:
                    continue  # 2*(N+1)*S shares: many ciphertexts; N=100 shows the error
                row = measure(runner, kind, data, n_points, mode, reps)
                rows.append(row)
                print(json.dumps(row), flush=True)
                log(f"{kind:>7} N={n_points:<5} {mode:<19} median {row['rel_err_median']:.2e}"
                    f"  max {row['rel_err_max']:.2e}  ({row['seconds']:.1f} s)")
    meta = {"preset": args.preset, "malicious_preset": args.malicious_preset, "reps": reps,
            "machine": platform.platform(),
            "python": platform.python_version(), "command": "python " + " ".join(sys.argv)}
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump({"meta": meta, "rows": rows}, fh, indent=2)
    print()
    print(f"Presets {args.preset} (semi-honest), {args.malicious_preset} (malicious), {reps} "
          "evaluations per row (malicious: every run counts), error vs the plaintext "
          "trapezoid; every party adds the counts' noise (fedsec.auc.masking).")
    print()
    print("| federation | Pos x Neg | N | mode | median rel. err | max rel. err | "
          "max run gap |")
    print("|---|---:|---:|---|---:|---:|---:|")
    for r in rows:
        gap = f"{r['run_gap_max']:.1e}" if "run_gap_max" in r else ""
        print(f"| {r['federation']} | {r['pos']} x {r['neg']} | {r['decision_points']} | "
              f"{r['mode']} | {r['rel_err_median']:.1e} | {r['rel_err_max']:.1e} | {gap} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
