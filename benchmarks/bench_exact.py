"""Exact (certified) secure AUC on real scikit-learn scores, and what a finer grid costs.

Part 1 (``cases``): bundled scikit-learn data sets, a model trained on one half, its
scores on the other half split over ``--parties`` parties (round robin):

* ``digits^8``  - digits '3 vs rest', LogisticRegression ``predict_proba`` raised to the
  8th power (the issue's case; ``scores="probability"``);
* ``digits``    - the same probabilities, not raised;
* ``cancer``    - breast cancer, LogisticRegression ``decision_function`` (logits,
  ``scores="logit"``);
* ``wine``      - wine 'class 1 vs rest', GaussianNB log-odds ``log p1 - log p0`` (raw
  logits, ``scores="logit"``).

For each: scikit-learn's ``roc_auc_score`` on the pooled data, the default (N = 100) secure
AUC with its certified bound, and exact mode (semi-honest; ``--malicious`` adds malicious
mode) with its bound, rounds, final grid and costs.

Part 2 (``grid``): semi-honest cost against the grid at ``--parties`` parties on the
default preset - N in {100, 1024, 4096, 16384} - aggregator time (median of ``--reps``),
upload and download per party, rounds; exact mode's totals come from part 1.

Usage::

    .venv/bin/python benchmarks/bench_exact.py [--parties 10] [--reps 3] [--malicious]
        [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from typing import Any

import numpy as np
from sklearn.datasets import load_breast_cancer, load_digits, load_wine
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import train_test_split
from sklearn.naive_bayes import GaussianNB

from fedsec.auc.common import local_federation
from fedsec.auc.fhauc import FHAUCAggregator, FHAUCConfig, FHAUCParty, secure_auc
from fedsec.crypto.keysetup import run_key_setup
from fedsec.metrics import trapezoid_auc

GRID = (100, 1024, 4096, 16384)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def cases() -> dict[str, tuple[np.ndarray, np.ndarray, str]]:
    out: dict[str, tuple[np.ndarray, np.ndarray, str]] = {}
    x, y = load_digits(return_X_y=True)
    y = (y == 3).astype(int)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.5, random_state=0)
    p = LogisticRegression(max_iter=3000).fit(xtr, ytr).predict_proba(xte)[:, 1]
    out["digits^8"] = (yte, p ** 8, "probability")
    out["digits"] = (yte, p, "probability")
    x, y = load_breast_cancer(return_X_y=True)
    x = (x - x.mean(0)) / x.std(0)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.5, random_state=1)
    out["cancer"] = (yte, LogisticRegression(C=0.05, max_iter=2000).fit(xtr, ytr)
                     .decision_function(xte), "logit")
    x, y = load_wine(return_X_y=True)
    y = (y == 1).astype(int)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.5, random_state=2)
    lp = GaussianNB().fit(xtr, ytr).predict_log_proba(xte)
    out["wine"] = (yte, lp[:, 1] - lp[:, 0], "logit")
    return out


def split(y: np.ndarray, s: np.ndarray, parties: int) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(y[i::parties], s[i::parties]) for i in range(parties)]


def run_cases(parties: int, malicious: bool) -> list[dict[str, Any]]:
    rows = []
    for name, (y, s, kind) in cases().items():
        data = split(y, s, parties)
        ref = float(roc_auc_score(y, s))
        log(f"case {name}: default N = 100")
        d = secure_auc(data, scores=kind)
        modes = [("semi-honest", {})]
        if malicious:
            modes.append(("malicious", {"security": "malicious"}))
        for label, kw in modes:
            log(f"case {name}: exact, {label}")
            t0 = time.perf_counter()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                e = secure_auc(data, scores=kind, decision_points="exact", **kw)
            wall = time.perf_counter() - t0
            row = {"part": "cases", "case": name, "scores": kind, "security": label,
                   "samples": int(y.size), "parties": parties, "sklearn_auc": ref,
                   "default_auc": d.auc, "default_bound": d.error_bound,
                   "default_abs_error": abs(d.auc - ref),
                   "exact_auc": e.auc, "exact_bound": e.error_bound,
                   "exact_abs_error": abs(e.auc - ref),
                   "within_bound": abs(e.auc - ref) <= e.error_bound + 1e-9,
                   "target_reached": e.target_reached, "rounds": e.rounds,
                   "final_points": e.decision_points,
                   "refinement": e.extra["refinement_rounds"],
                   "upload_per_party_total": e.extra["bytes_up_per_party_total"],
                   "download_per_party_total": e.extra["bytes_down_per_party_total"],
                   "aggregator_s_total": e.extra["aggregator_seconds_total"],
                   "default_upload_per_party": d.bytes_up_per_party,
                   "default_download_per_party": d.bytes_down_per_party,
                   "default_aggregator_s": d.aggregator_seconds,
                   "wall_s": wall, "warnings": [str(w.message)[:80] for w in caught]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def run_grid(parties: int, reps: int) -> list[dict[str, Any]]:
    g = np.random.default_rng(11)
    data = [(g.integers(0, 2, 500), g.random(500)) for _ in range(parties)]
    names = [f"p{i}" for i in range(parties)]
    identities, roster = local_federation(names)
    ks, keys = run_key_setup(identities, roster, FHAUCConfig.create(2).key_spec())
    assert ks.context is not None
    rows = []
    for n in GRID:
        log(f"grid: N = {n}")
        cfg = FHAUCConfig.create(n)
        from fedsec.auc.policy import PartyPolicy

        pol = PartyPolicy(max_decision_points=max(8192, n))
        roles = [FHAUCParty(y, s, keys=k, config=cfg, policy=pol)
                 for (y, s), k in zip(data, keys, strict=True)]
        t0 = time.perf_counter()
        subs = [r.submit() for r in roles]
        submit_s = (time.perf_counter() - t0) / parties
        times = []
        for _ in range(reps):
            agg = FHAUCAggregator(ks.context, cfg, names=ks.names, session=ks.session)
            resp = agg.aggregate(subs)
            times.append(agg.timing["total_s"])
        auc = roles[0].finalize(resp)
        y = np.concatenate([a for a, _ in data])
        s = np.concatenate([b for _, b in data])
        assert abs(auc - trapezoid_auc(y, s, n)) < 1e-9
        row = {"part": "grid", "decision_points": n, "parties": parties,
               "ciphertexts_per_party": cfg.n_chunks,
               "upload_per_party": max(map(len, subs)), "download_per_party": len(resp),
               "aggregator_s": statistics.median(times), "aggregator_s_all": times,
               "party_submit_s": submit_s, "rounds": 1,
               "galois_keys": len(cfg.rotations())}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def kb(b: float) -> str:
    return f"{b / 1e6:.2f} MB" if b >= 1e6 else f"{b / 1e3:.0f} kB"


def tables(rows: list[dict[str, Any]]) -> str:
    out = ["| case | scores | mode | sklearn AUC | N=100 AUC | N=100 bound | |N=100 - sklearn| "
           "| exact AUC | exact bound | |exact - sklearn| | rounds | final points | "
           "upload/party (total) | aggregator (total) |", "|" + "---|" * 14]
    for r in rows:
        if r["part"] != "cases":
            continue
        out.append(f"| {r['case']} | {r['scores']} | {r['security']} | {r['sklearn_auc']:.6f} "
                   f"| {r['default_auc']:.6f} | {r['default_bound']:.2e} | "
                   f"{r['default_abs_error']:.2e} | {r['exact_auc']:.10f} | "
                   f"{r['exact_bound']:.1e} | {r['exact_abs_error']:.1e} | {r['rounds']} | "
                   f"{r['final_points']} | {kb(r['upload_per_party_total'])} | "
                   f"{r['aggregator_s_total'] * 1e3:.0f} ms |")
    out += ["", "| N | ciphertexts/party | upload/party | download/party | aggregator | "
            "rounds |", "|" + "---|" * 6]
    for r in rows:
        if r["part"] == "grid":
            out.append(f"| {r['decision_points']} | {r['ciphertexts_per_party']} | "
                       f"{kb(r['upload_per_party'])} | {kb(r['download_per_party'])} | "
                       f"{r['aggregator_s'] * 1e3:.0f} ms | 1 |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parties", type=int, default=10, help="parties (default 10)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions for the grid (median)")
    ap.add_argument("--malicious", action="store_true", help="exact mode in malicious mode too")
    ap.add_argument("--skip-grid", action="store_true", help="part 1 only")
    ap.add_argument("--json-out", help="also write every row to this file")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    rows = run_cases(args.parties, args.malicious)
    if not args.skip_grid:
        rows += run_grid(args.parties, args.reps)
    print()
    print(tables(rows))
    print(f"\n(total {time.perf_counter() - t0:.0f} s)")
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
