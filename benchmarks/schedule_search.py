"""Does an exact-Shapley placement under the decryption rule exist when every client takes
part in every round? An exhaustive search per batch (one owner; FedAvg weights 1..k).

Usage::

    python benchmarks/schedule_search.py --clients 4 5 6 --steps 2000000
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from fedsec.shapley.views import ModelSpace, Scheduler


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[4, 5])
    ap.add_argument("--steps", type=int, default=2_000_000)
    args = ap.parse_args()
    for k in args.clients:
        space = ModelSpace.of([(tuple(range(k)), [float(i + 1) for i in range(k)])])
        sched = Scheduler(space, k, np.zeros(1, dtype=np.int64))  # client 0's batch
        todo = [m for m in range(1, (1 << k) - 1) if not sched.owner_local(0, m, [0])]
        todo.sort(key=lambda m: (-m.bit_count(), m))
        vecs = {m: space.coalition(0, m) for m in todo}
        start = {c: np.zeros((0, space.dim)) for c in range(k)}
        t0 = time.perf_counter()
        found = sched._search(todo, vecs, start, np.zeros(1, dtype=np.int64),  # noqa: SLF001
                              budget=args.steps)
        verdict = ("placement found" if found is not None else
                   f"none within {args.steps:,} steps" if sched._exhausted  # noqa: SLF001
                   else "no placement exists (exhaustive)")
        print(json.dumps({"clients": k, "coalitions_to_place": len(todo), "verdict": verdict,
                          "seconds": round(time.perf_counter() - t0, 1)}))


if __name__ == "__main__":
    main()
