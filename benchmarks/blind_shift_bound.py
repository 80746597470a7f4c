"""Blind-shift term of the malicious-FHAUC bound, measured at a loose tolerance.

``tolerance_bound_bits(tol, runs)`` claims that a blind shift of the AUC by at least
``res`` passes verification with probability at most ``(10*tol/(res - tol))**(runs-1)``.
At the default tolerance (5e-10) passes are unobservable, so this measures at tol = 1e-3
(``MaliciousConfig.create(min_bound_bits=0)``, a loosened ``PartyPolicy``) with res = 0.05
and 0.1, where the formula predicts rates of a few percent.

Two blind shifts, both without any secret:

* **scale** - numerator channels times ``1 + g`` (the one the spec's Galois keys allow):
  run ``k`` reports ``AUC + g*(AUC + r1/r0)``;
* **X + bY** - needs a rotation by one slot (keys set up for another configuration): run
  ``k`` reports ``AUC + b*r2/r0``.

An attack *succeeds* when every check passes and the reported AUC is off by at least
``res``. For each setting the best fixed ``g`` (or ``b``) over a grid is used.

Part 1 simulates the acceptance rule (the parties' checks on the per-run AUCs) over 10^6
draws of the secret multipliers (uniform in [1/2, 1), as ``derive_run_randomness`` draws
them). Part 2 plays the real protocol (CKKS, every check) with that best ``g``.

Usage::

    python benchmarks/blind_shift_bound.py --mc 1000000 --trials 2000 3000

Writes ``benchmarks/results/blind_shift_bound.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Any

import numpy as np

from fedsec.auc.fhauc_malicious import derive_run_randomness, tolerance_bound_bits
from fedsec.auc.policy import PartyPolicy
from fedsec.data.datasets import breast_cancer_federation
from fedsec.testing.auc import TamperHarness, blind_shift, rot_shift

HERE = os.path.dirname(os.path.abspath(__file__))
TOL = 1e-3
GRID = np.linspace(0.2, 3.0, 57)  # target shifts, in units of res


def formula(tol: float, res: float, runs: int) -> float:
    return 2.0 ** -tolerance_bound_bits(tol, runs, resolution=res)


def _ratios(rng: np.random.Generator, n: int, runs: int) -> tuple[np.ndarray, np.ndarray]:
    r = 0.5 + 0.5 * rng.random((n, runs, 6))
    r0 = r[..., 0] * r[..., 1]
    return r[..., 2] * r[..., 3] / 2.0 / r0, r[..., 4] * r[..., 5] / 2.0 / r0


def simulate(auc: float, tol: float, res: float, runs: int, n: int, seed: int
             ) -> dict[str, Any]:
    """Best success rate of each blind shift over the grid (the parties' checks applied
    to the per-run AUCs)."""
    rng = np.random.default_rng(seed)
    r10, r20 = _ratios(rng, n, runs)
    out: dict[str, Any] = {}
    for variant, w in (("scale", auc + r10), ("X+bY", r20)):
        best = (0.0, 0.0)
        for t in GRID * res:
            a = auc - t * w                                   # downward: stays <= 1
            ok = (a.max(axis=1) - a.min(axis=1) <= tol) & (a.min(axis=1) >= -tol)
            rate = float((ok & (np.abs(a[:, 0] - auc) >= res)).mean())
            best = max(best, (rate, float(t)))
        out[variant] = {"rate": best[0], "factor": -best[1], "draws": n}
    return out


def check_distribution(n: int = 400) -> dict[str, float]:
    """The protocol's own r1/r0 (derive_run_randomness) against the simulation's."""
    from fedsec.auc.fhauc_malicious import MaliciousConfig

    cfg = MaliciousConfig.create(10, splits=2, min_bound_bits=0.0, tolerance=1e-3, runs=2)
    got = []
    for i in range(n):
        rr = derive_run_randomness(i.to_bytes(32, "big"), "s", cfg, [b"\x00" * 16] * 2, 0)
        got.append(rr.r1 / rr.r0)
    sim, _ = _ratios(np.random.default_rng(0), 200_000, 1)
    q = [0.1, 0.5, 0.9]
    return {"protocol_quantiles": list(np.quantile(got, q)),
            "simulated_quantiles": list(np.quantile(sim[:, 0], q))}


def play(parties: Any, runs: int, res: float, factor: float, trials: int, variant: str,
         preset: str, points: int, started: float) -> dict[str, Any]:
    loose = PartyPolicy(quorum=2, max_tolerance=0.4, min_bound_bits=0.0)
    extra = (1,) if variant == "X+bY" else ()
    h = TamperHarness(parties, security="malicious", decision_points=points, preset=preset,
                      allow_insecure=preset.startswith("INSECURE_TEST_"), policy=loose,
                      tolerance=TOL, runs=runs, min_bound_bits=0.0, splits=4,
                      extra_rotations=extra)
    att = blind_shift(factor) if variant == "scale" else rot_shift(factor)
    passed = success = 0
    for i in range(trials):
        t = h.trial(att)
        if t.accepted:
            passed += 1
            success += t.error >= res
        if (i + 1) % 500 == 0:
            print(f"[{time.time() - started:6.0f}s] R={runs} res={res} {variant}: "
                  f"{i + 1}/{trials} success {success}", file=sys.stderr, flush=True)
    return {"trials": trials, "accepted": passed, "success": success,
            "rate": success / trials, "truth": h.truth}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mc", type=int, default=1_000_000, help="simulated draws per setting")
    ap.add_argument("--trials", type=int, nargs=3, default=[2000, 3000, 1500],
                    help="protocol trials: R=2 scale, R=3 scale, R=2 X+bY")
    ap.add_argument("--points", type=int, default=100)
    ap.add_argument("--preset", default="INSECURE_TEST_N4096_DEPTH1_S39")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "blind_shift_bound"))
    args = ap.parse_args()
    started = time.time()
    fed = breast_cancer_federation(3, seed=0)
    parties = fed.pairs()
    probe = TamperHarness(parties, security="malicious", decision_points=args.points,
                          preset=args.preset, allow_insecure=args.preset.startswith(
                              "INSECURE_TEST_"), min_bound_bits=0.0)
    auc = probe.truth
    rows = []
    for runs in (2, 3, 4):
        for res in (0.05, 0.1):
            sim = simulate(auc, TOL, res, runs, args.mc, seed=runs * 10 + int(res * 100))
            rows.append({"runs": runs, "res": res, "formula": formula(TOL, res, runs),
                         "sim_scale": sim["scale"], "sim_xby": sim["X+bY"]})
            print(json.dumps(rows[-1]), flush=True)
    plays = []
    for (runs, res, variant), n in zip([(2, 0.1, "scale"), (3, 0.05, "scale"),
                                        (2, 0.1, "X+bY")], args.trials, strict=True):
        row = next(r for r in rows if r["runs"] == runs and r["res"] == res)
        factor = row["sim_scale" if variant == "scale" else "sim_xby"]["factor"]
        p = play(parties, runs, res, factor, n, variant, args.preset, args.points, started)
        p.update({"runs": runs, "res": res, "variant": variant, "factor": factor,
                  "formula": row["formula"],
                  "simulated": row["sim_scale" if variant == "scale" else "sim_xby"]["rate"]})
        plays.append(p)
        print(json.dumps(p), flush=True)
    dist = check_distribution()
    meta = {"federation": fed.description, "auc": auc, "tolerance": TOL,
            "preset": args.preset, "decision_points": args.points,
            "command": "python " + " ".join(sys.argv), "r1_over_r0": dist}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out + ".json", "w") as fh:
        json.dump({"meta": meta, "simulated": rows, "protocol": plays}, fh, indent=1)

    def se(rate: float, n: int) -> float:
        return math.sqrt(max(rate * (1 - rate), 1e-12) / n)

    lines = [f"Federation: {fed.description} (AUC {auc:.4f}); tolerance {TOL:g}; "
             f"N = {args.points}; preset {args.preset}. Command: `{meta['command']}`", "",
             "Simulated acceptance rule (best fixed factor over a grid; "
             f"{args.mc:,} draws each):", "",
             "| runs | shift >= | formula (10*tol/(res-tol))^(R-1) | scale: rate (factor) | "
             "X + bY: rate (factor) |", "|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['runs']} | {r['res']:g} | {r['formula']:.3g} | "
                     f"{r['sim_scale']['rate']:.3g} ({r['sim_scale']['factor']:.3g}) | "
                     f"{r['sim_xby']['rate']:.3g} ({r['sim_xby']['factor']:.3g}) |")
    lines += ["", "Real protocol (CKKS, every party check), same factors:", "",
              "| runs | shift >= | attack | trials | accepted | accepted and off by >= shift "
              "| rate +- s.e. | simulated | formula |", "|---:|---:|---|---:|---:|---:|---:|"
              "---:|---:|"]
    for p in plays:
        lines.append(f"| {p['runs']} | {p['res']:g} | {p['variant']} ({p['factor']:.3g}) | "
                     f"{p['trials']} | {p['accepted']} | {p['success']} | {p['rate']:.4f} +- "
                     f"{se(p['rate'], p['trials']):.4f} | {p['simulated']:.4f} | "
                     f"{p['formula']:.4f} |")
    q = dist
    lines += ["", "r1/r0 quantiles (10/50/90%): protocol "
              + ", ".join(f"{x:.3f}" for x in q["protocol_quantiles"]) + "; simulation "
              + ", ".join(f"{x:.3f}" for x in q["simulated_quantiles"]) + "."]
    text = "\n".join(lines) + "\n"
    with open(args.out + ".md", "w") as fh:
        fh.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
