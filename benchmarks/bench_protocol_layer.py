"""The protocol layer's cost, side by side with an older tree: results, bytes and time.

Runs the benchmarks' default cases -- secure AUC (semi-honest and malicious, 3 parties x
1,000 samples, 100 points, default preset), SecSV on the BANK-shaped task (M = 1,980,
T = 2, 5 clients, the paper's schedule, linearity shortcut) and secure Priv-PFL (K = 10,
the 650-parameter digits model, default preset, one round) -- each in a fresh process,
alternating between this tree and ``--base`` (any checkout of fedsec, e.g. a ``git
worktree`` of an older commit) for ``--repeats`` rounds, and prints per case:

* whether the results are bit-identical (AUC and error bound as float hex -- fresh masks
  and CKKS noise make them differ run to run in the last bits, so the spread over the base
  runs and the new runs' distance to the first base run are reported too; the FSVs'
  SHA-256; PFL's accepted sets, validity, sign evaluations and checked pairs -- the
  personalised models carry fresh CKKS noise, so they are compared to the plaintext
  reference by ``bench_ppfl.py`` instead);
* bytes (identical counts expected up to the binding's metadata);
* CPU seconds of the run (median over repeats) and the ratio new/base.

    python benchmarks/bench_protocol_layer.py --base /path/to/old/checkout --repeats 3
    python benchmarks/bench_protocol_layer.py --base ../base --case auc --quick
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CASES = ("auc", "auc-malicious", "secsv-bank", "pfl-k10")


def _auc(security: str, quick: bool) -> dict[str, Any]:
    import numpy as np

    from fedsec import secure_auc

    rng = np.random.default_rng(0)
    n = 200 if quick else 1000
    parties = []
    for _ in range(3):
        y = rng.integers(0, 2, n)
        parties.append((y, np.clip(0.3 * y + rng.random(n) * 0.7, 0, 1)))
    t0, c0 = time.perf_counter(), time.process_time()
    r = secure_auc(parties, decision_points=100, security=security)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"result": {"auc": float(r.auc).hex(), "error_bound": float(r.error_bound).hex()},
            "bytes": {"up_per_party": r.bytes_up_per_party,
                      "down_per_party": r.bytes_down_per_party,
                      "setup_to_aggregator": r.setup_bytes_to_aggregator},
            "cpu_s": cpu, "wall_s": wall}


def _secsv(quick: bool) -> dict[str, Any]:
    from fedsec.learning.fedavg import run_fedavg
    from fedsec.learning.tasks import make_task
    from fedsec.shapley.secsv import secsv_shapley

    m_test, rounds = (400, 1) if quick else (1980, 2)
    task = make_task("bank", n_samples=m_test + 3000, n_test=m_test, seed=0)
    fed = task.federate(5, seed=0)
    rec = run_fedavg(task, fed, rounds=rounds, seed=0)
    sets = [(c.x_test, c.y_test) for c in fed.clients]
    t0, c0 = time.perf_counter(), time.process_time()
    res = secsv_shapley(rec, sets, schedule="paper", linear_shortcut=True)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"result": {"fsv_sha256": hashlib.sha256(res.fsv.tobytes()).hexdigest()},
            "bytes": {"total": res.to_dict()["bytes_total"]}, "cpu_s": cpu, "wall_s": wall}


def _pfl(quick: bool) -> dict[str, Any]:
    import numpy as np

    from fedsec.pfl.secure import SecurePFLConfig, SecurePFLSession

    k, d = (6, 100) if quick else (10, 650)
    rng = np.random.default_rng(650 + k)
    base = rng.normal(size=d) / np.sqrt(d)
    w = base + 0.2 * rng.normal(size=(k, d)) / np.sqrt(d) * rng.uniform(0.2, 1.5, (k, 1))
    sig = rng.uniform(0.1, 0.5, size=k)
    b = float(np.median(np.linalg.norm(w, axis=1)))
    config = SecurePFLConfig()
    session = SecurePFLSession.create(k, config)
    t0, c0 = time.perf_counter(), time.process_time()
    r = session.run_round(w, sig, alpha=0.5, norm_bound=b, round_index=0)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"result": {"accepted": [sorted(int(j) for j in a) for a in r.selection.accepted],
                       "valid": [bool(v) for v in r.valid],
                       "sign_evaluations": int(r.sign_evaluations),
                       "pairs_checked": int(r.pairs_checked)},
            "bytes": {"up_per_client": int(np.median(r.bytes_up)),
                      "down_per_client": int(np.median(r.bytes_down)),
                      "server_in": int(r.server_bytes_in),
                      "decryptor_in": int(r.decryptor_bytes_in)},
            "cpu_s": cpu, "wall_s": wall}


def worker(case: str, quick: bool) -> dict[str, Any]:
    if case == "auc":
        return _auc("semi-honest", quick)
    if case == "auc-malicious":
        return _auc("malicious", quick)
    if case == "secsv-bank":
        return _secsv(quick)
    if case == "pfl-k10":
        return _pfl(quick)
    raise ValueError(case)


def _run(tree: Path, case: str, quick: bool) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(tree / "src"), OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", case]
    if quick:
        cmd.append("--quick")
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", type=Path, help="the older checkout to compare with")
    ap.add_argument("--case", action="append", choices=CASES)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--worker", choices=CASES, help=argparse.SUPPRESS)
    ap.add_argument("--json-out")
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(a.worker, a.quick)))
        return
    if a.base is None:
        ap.error("--base is required")
    rows = []
    for case in a.case or CASES:
        runs: dict[str, list[dict[str, Any]]] = {"base": [], "new": []}
        for _ in range(a.repeats):
            for label, tree in (("base", a.base.resolve()), ("new", ROOT)):
                runs[label].append(_run(tree, case, a.quick))
        b, n = runs["base"], runs["new"]
        cpu_b = statistics.median(r["cpu_s"] for r in b)
        cpu_n = statistics.median(r["cpu_s"] for r in n)
        row = {"case": case, "repeats": a.repeats, "quick": a.quick,
               "identical_results": all(r["result"] == b[0]["result"] for r in b + n),
               "base_results_stable": all(r["result"] == b[0]["result"] for r in b),
               "bytes_base": b[0]["bytes"], "bytes_new": n[0]["bytes"],
               "cpu_s_base": cpu_b, "cpu_s_new": cpu_n, "cpu_ratio_new_over_base":
               cpu_n / cpu_b,
               "wall_s_base": statistics.median(r["wall_s"] for r in b),
               "wall_s_new": statistics.median(r["wall_s"] for r in n),
               "load_avg_1min": os.getloadavg()[0],
               "results_base": [r["result"] for r in b], "results_new": [r["result"] for r in n]}
        if case.startswith("auc"):  # fresh masks and noise: not bit-identical run to run
            ref = float.fromhex(b[0]["result"]["auc"])
            row["auc_spread_base"] = max(abs(float.fromhex(r["result"]["auc"]) - ref)
                                         for r in b)
            row["auc_spread_new_vs_base"] = max(abs(float.fromhex(r["result"]["auc"]) - ref)
                                                for r in n)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\n{'case':<15}{'same result':>12}{'cpu base':>10}{'cpu new':>10}{'ratio':>8}  bytes")
    for r in rows:
        byt = ", ".join(f"{k} {r['bytes_base'][k]}->{r['bytes_new'].get(k)}"
                        for k in r["bytes_base"])
        print(f"{r['case']:<15}{str(r['identical_results']):>12}{r['cpu_s_base']:>10.2f}"
              f"{r['cpu_s_new']:>10.2f}{r['cpu_ratio_new_over_base']:>8.3f}  {byt}")
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
