"""Tamper battery: how often each cheating aggregator is caught.

For every attack in ``fedsec.auc.adversary.ATTACKS`` this runs fresh evaluations (fresh
nonces and masks each time) of one fixed federation under fixed keys, lets the attack forge
the aggregator's answer from the bytes an aggregator sees, and records what the parties
did: ``detected`` (they raised), ``changed`` (they accepted a wrong AUC) or ``unchanged``
(they accepted and the AUC was still right). Malicious mode must show ``changed = 0``;
semi-honest mode is shown accepting the attacks, which is its threat model.

Usage::

    python benchmarks/tamper_battery.py --trials 1000 --sh-trials 100

Writes ``benchmarks/results/tamper_battery.{json,md}``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time

import numpy as np

from fedsec.auc.adversary import ATTACKS, TamperHarness
from fedsec.crypto.params import DEFAULT_PRESET
from fedsec.data.datasets import breast_cancer_federation

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1000, help="trials per attack, malicious")
    ap.add_argument("--sh-trials", type=int, default=100, help="trials per attack, semi-honest")
    ap.add_argument("--decision-points", type=int, default=100)
    ap.add_argument("--hospitals", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "tamper_battery"))
    args = ap.parse_args()

    fed = breast_cancer_federation(args.hospitals, seed=0)
    parties = fed.pairs()
    rows = []
    started = time.time()
    for security, trials in (("malicious", args.trials), ("semi-honest", args.sh_trials)):
        harness = TamperHarness(parties, security=security,
                                decision_points=args.decision_points)
        truth = harness.honest()
        tol = getattr(harness.config, "tolerance", 1e-5)
        for name, (desc, _mal, sh) in ATTACKS.items():
            if security == "semi-honest" and sh is None:
                continue
            counts: collections.Counter[str] = collections.Counter()
            t0 = time.time()
            for i in range(trials):
                counts[harness.trial(name, truth, tol)] += 1
                if (i + 1) % 100 == 0:
                    print(f"[{time.time() - started:7.0f}s] {security:<11} {name:<20} "
                          f"{i + 1}/{trials} {dict(counts)}", file=sys.stderr, flush=True)
            row = {"security": security, "attack": name, "description": desc,
                   "trials": trials, "detected": counts["detected"],
                   "accepted_changed": counts["changed"],
                   "accepted_unchanged": counts["unchanged"],
                   "seconds_per_trial": (time.time() - t0) / max(1, trials)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    meta = {"federation": fed.description, "decision_points": args.decision_points,
            "preset": DEFAULT_PRESET, "tolerance": 1e-5,
            "command": "python " + " ".join(sys.argv)}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out + ".json", "w") as fh:
        json.dump({"meta": meta, "rows": rows}, fh, indent=2)
    lines = [f"Federation: {fed.description}; N = {args.decision_points}; default "
             f"parameters ({DEFAULT_PRESET}, S chosen for a 2^-40 bound, tolerance "
             f"1e-5). Command: `{meta['command']}`", "",
             "| attack | mode | trials | detected | accepted, AUC wrong | accepted, AUC "
             "right |", "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['description']} | {r['security']} | {r['trials']} | "
                     f"{r['detected']} | {r['accepted_changed']} | "
                     f"{r['accepted_unchanged']} |")
    with open(args.out + ".md", "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    bad = [r for r in rows if r["security"] == "malicious" and r["accepted_changed"]]
    return 1 if bad else 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
