"""How many class-count denominators survive a curious party's view of semi-honest FHAUC.

For federations of 3 parties and several sizes, one in-process run each; party 0 searches
every denominator ``q`` in ``(Y, 2Y]`` (``fedsec.testing.auc_counts``) and counts those
consistent with the AUC alone and with its whole view (the error bound and the mask's
grid too). Issue 22's goal: the whole view keeps at least half of what the AUC alone keeps.

    python benchmarks/attack_auc_counts.py --sizes 300 3000 30000 --runs 3
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from fedsec.testing.auc_counts import denominator_candidates, observe


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[300, 3000, 30000],
                    help="samples in the whole federation (3 parties)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--masking", default="single", choices=["single", "pair"])
    ap.add_argument("--json-out")
    a = ap.parse_args()
    rows = []
    rng = np.random.default_rng(0)
    for size in a.sizes:
        for run in range(a.runs):
            parties = []
            for _ in range(3):
                y = rng.integers(0, 2, size // 3)
                s = np.round(np.clip(0.3 * y + 0.7 * rng.random(size // 3), 0, 1), 3)
                parties.append((y, s))
            t0 = time.perf_counter()
            view = observe(parties, masking=a.masking)
            row = {"samples": size, "run": run, "masking": a.masking,
                   **denominator_candidates(view), "seconds": time.perf_counter() - t0}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if a.json_out:
        with open(a.json_out, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
