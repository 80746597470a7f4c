"""The FHAUC journal paper's timing figures and communication table, regenerated beside the
paper's own numbers.

* **Fig. 2**: the aggregator's time against the number of decision points ``N`` at 15
  parties, semi-honest and malicious (the paper's ``S = 4``).
* **Fig. 3**: the aggregator's time against the number of parties at ``N = 100``, both modes.
* **Table III**: client-side and server-side communication at 5, 10 and 15 clients, both
  modes (client side: what one party sends and receives in the evaluation; server side:
  what the aggregator sends and receives in all).

The paper prints its figures as plots; its text gives the anchors quoted beside ours:
0.68 s (semi-honest) and 1.64 s (malicious) at 100 parties and ``N = 100`` (OpenFHE, ring
2^14, the authors' machine), "logarithmic" in ``N`` and "linear" in the parties, malicious
"almost double"; Table III's bytes are printed in full. Ours: fedsec's defaults (semi-honest
``CKKS_128_N8192_DEPTH1_S39``; malicious ``CKKS_128_N16384_DEPTH1_S50`` at ``S = 4``),
aggregator time = deserialization + computation (``SecureAUCResult.aggregator_seconds``),
median of ``--reps``; bytes counted by the network. A different machine and library: the
ratios are what carries over, and ``bench_fhauc.py`` compares against the papers' layout
rebuilt on the same CKKS library.

    python benchmarks/reproduce_fhauc_figures.py [--reps 3] [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from fedsec.auc.fhauc import secure_auc  # noqa: E402
from fedsec.protocol.network import Network  # noqa: E402

#: Table III of the paper (MB): (setting, clients) -> (client side, server side).
PAPER_TABLE_III = {
    ("semi-honest", 5): (6.81, 34.05), ("semi-honest", 10): (6.81, 68.10),
    ("semi-honest", 15): (6.81, 102.15), ("malicious", 5): (13.62, 68.10),
    ("malicious", 10): (13.62, 136.20), ("malicious", 15): (13.62, 204.30),
}
#: The paper's text: aggregator seconds at 100 parties, N = 100.
PAPER_AT_100 = {"semi-honest": 0.68, "malicious": 1.64}
EVAL_KINDS = ("fhauc/", "fhauc-m/")


def _data(parties: int, samples: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(parties):
        y = rng.integers(0, 2, samples)
        out.append((y, np.clip(0.3 * y + 0.7 * rng.random(samples), 0.0, 1.0)))
    return out


def _run(mode: str, parties: int, points: int, samples: int, seed: int
         ) -> tuple[float, dict[str, int]]:
    net = Network()
    kwargs: dict[str, Any] = {"splits": 4} if mode == "malicious" else {}
    res = secure_auc(_data(parties, samples, seed), decision_points=points, security=mode,
                     network=net, **kwargs)
    client = server = 0
    for (src, dst, kind), b in net.accounting.bytes_by_message.items():
        if not kind.startswith(EVAL_KINDS):
            continue
        if "aggregator" in (src, dst):
            server += b
        if "party:party-0" in (src, dst):
            client += b
    return res.aggregator_seconds, {"client": client, "server": server}


def _sweep(label: str, cases: list[tuple[int, int]], reps: int, samples: int
           ) -> list[dict[str, Any]]:
    rows = []
    for parties, points in cases:
        for mode in ("semi-honest", "malicious"):
            times = []
            for r in range(reps):
                t, _ = _run(mode, parties, points, samples, seed=r)
                times.append(t)
            row = {"figure": label, "mode": mode, "parties": parties, "decision_points": points,
                   "aggregator_s_median": statistics.median(times), "aggregator_s": times}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3, help="runs per point (median)")
    ap.add_argument("--samples", type=int, default=200, help="test samples per party")
    ap.add_argument("--quick", action="store_true", help="small sweeps, one run each")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/fhauc_figures.json"),
                    help="where to write the JSON rows")
    args = ap.parse_args()
    reps = 1 if args.quick else args.reps
    points = [10, 100, 1000] if args.quick else [10, 50, 100, 500, 1000, 2000, 4000]
    parties = [5, 15] if args.quick else [5, 10, 15, 25, 50, 100]
    t0 = time.perf_counter()
    fig2 = _sweep("fig2", [(15, n) for n in points], reps, args.samples)
    fig3 = _sweep("fig3", [(p, 100) for p in parties], reps, args.samples)
    table = []
    for mode in ("semi-honest", "malicious"):
        for clients in (5, 10, 15):
            _, b = _run(mode, clients, 100, args.samples, seed=0)
            paper = PAPER_TABLE_III[(mode, clients)]
            row = {"table": "III", "mode": mode, "clients": clients,
                   "client_mb": b["client"] / 1e6, "server_mb": b["server"] / 1e6,
                   "paper_client_mb": paper[0], "paper_server_mb": paper[1]}
            table.append(row)
            print(json.dumps(row), flush=True)
    out = {"command": "python benchmarks/reproduce_fhauc_figures.py " + " ".join(sys.argv[1:]),
           "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
                      f"Python {platform.python_version()}",
           "load": os.getloadavg(), "seconds": time.perf_counter() - t0,
           "paper_at_100_parties": PAPER_AT_100, "fig2": fig2, "fig3": fig3, "table3": table}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print("\nFig. 2 (15 parties): aggregator s, semi-honest / malicious (S = 4)")
    for n in points:
        sh = next(r for r in fig2 if r["decision_points"] == n and r["mode"] == "semi-honest")
        ml = next(r for r in fig2 if r["decision_points"] == n and r["mode"] == "malicious")
        print(f"  N = {n:5d}: {sh['aggregator_s_median']:.3f} / {ml['aggregator_s_median']:.3f}"
              f"  (x{ml['aggregator_s_median'] / sh['aggregator_s_median']:.2f})")
    print("Fig. 3 (N = 100): aggregator s, semi-honest / malicious; the paper at 100 parties: "
          f"{PAPER_AT_100['semi-honest']} / {PAPER_AT_100['malicious']}")
    for p in parties:
        sh = next(r for r in fig3 if r["parties"] == p and r["mode"] == "semi-honest")
        ml = next(r for r in fig3 if r["parties"] == p and r["mode"] == "malicious")
        print(f"  {p:4d} parties: {sh['aggregator_s_median']:.3f} / "
              f"{ml['aggregator_s_median']:.3f}")
    print("Table III (MB): client side, server side - ours | the paper's")
    for row in table:
        print(f"  {row['mode']:11s} {row['clients']:3d} clients: {row['client_mb']:.3f}, "
              f"{row['server_mb']:.3f} | {row['paper_client_mb']}, {row['paper_server_mb']}")


if __name__ == "__main__":
    main()
