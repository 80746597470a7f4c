"""How many class-count denominators survive a curious party's view of FHAUC (issue 22).

For federations of 3 parties and several sizes, one in-process run per mode; party 0 (the
attacker: it adds no noise of its own and is told the true noise scale) searches the
denominators ``q`` in ``(Y, 2Y]`` (``fedsec.testing.auc_counts``) and counts those
consistent with the AUC alone and with its whole view (the error bound and the mask's
grid too); windows above 2^26 candidates are sampled uniformly (2^23 draws) and the counts
scaled. The server's view (what a node shares in malicious mode: the AUC to 6 digits, the
bound up to 2) is searched in ``[denom/4, 4*denom]``. ``--control`` also runs every party
without noise: the search must then find the denominator. Goal: the whole view keeps at
least half of what the AUC alone keeps.

    python benchmarks/attack_auc_counts.py --sizes 1000 10000 100000 1000000 --control
"""

from __future__ import annotations

import argparse
import json
import time

from fedsec.testing.auc_counts import (
    denominator_candidates,
    federation,
    observe,
    observe_malicious,
    server_candidates,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000],
                    help="samples in the whole federation (3 parties)")
    ap.add_argument("--modes", nargs="+", default=["single", "pair", "malicious"],
                    choices=["single", "pair", "malicious"])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--control", action="store_true",
                    help="also run without the parties' noise (the search must then win)")
    ap.add_argument("--json-out")
    a = ap.parse_args()
    rows = []
    for size in a.sizes:
        for run in range(a.runs):
            parties = federation(size, 1000 * size + run)
            for mode in a.modes:
                for noise in ([True, False] if a.control else [True]):
                    t0 = time.perf_counter()
                    view = (observe_malicious(parties, noise=noise) if mode == "malicious"
                            else observe(parties, masking=mode, noise=noise))
                    row = {"samples": size, "run": run, "parties_noise": noise,
                           **denominator_candidates(view)}
                    if noise and mode == "malicious":
                        row["server"] = server_candidates(view.auc, view.bound,
                                                          view.true_denom)
                    row["seconds"] = round(time.perf_counter() - t0, 1)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    if a.json_out:
        with open(a.json_out, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
