"""Contribution evaluation in the clear next to seed 004 (Zheng et al., PVLDB 2023).

Regenerates, with fixed seeds:

* per task (bank, agnews, mnist, gru; n = 5 clients, T = 10 FedAvg rounds, Dirichlet(0.5)):
  the exact FSV (NSSV), and for exact/PS/GT/KS/GTG with SampleSkip off and on: the error
  ``||φ̂ − φ||_2`` to the exact FSV, the evaluation time, the share of (model, sample)
  predictions made relative to exact-without-SampleSkip (the cost that secure testing
  pays per prediction), models tested -- medians over ``--repeats`` estimator seeds, next
  to seed 004's Table 3 errors;
* SampleSkip's skipped and *wrongly* skipped shares (audit) for every task, and for the
  DNN at L = 1..10 (seed 004, Figs. 5 and 8).

Usage::

    python benchmarks/bench_shapley.py                 # ~10 min on 2 busy cores
    python benchmarks/bench_shapley.py --quick         # small smoke run

Writes ``benchmarks/results/bench_shapley.json`` and ``bench_shapley.md`` and prints the
Markdown tables.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from fedsec.learning.fedavg import run_fedavg
from fedsec.learning.model import accuracy
from fedsec.learning.tasks import make_task
from fedsec.shapley import DEFAULT_BUDGETS, federated_shapley

RESULTS = Path(__file__).resolve().parent / "results"

# Seed 004, Table 3: errors (x 10^-2) under SecSV, SampleSkip off / on.
PAPER_TABLE3 = {
    "agnews": {"exact": (0.10, 0.10), "ps": (2.00, 2.01), "gt": (3.41, 3.39),
               "ks": (17.63, 17.63)},
    "bank": {"exact": (0.09, 0.09), "ps": (1.25, 1.24), "gt": (3.40, 3.40),
             "ks": (7.67, 7.66)},
    "mnist": {"exact": (0.09, 0.64), "ps": (2.69, 2.88), "gt": (3.58, 3.80),
              "ks": (15.46, 15.65)},
    "gru": {"exact": (1.70, 1.82), "ps": (3.03, 3.25), "gt": (3.67, 3.50),
            "ks": (20.77, 20.49)},  # the paper's RNN on miRNA-mRNA
}
PAPER_NAMES = {"agnews": "AGNEWS (LOGI)", "bank": "BANK (LOGI)", "mnist": "MNIST (CNN)",
               "gru": "miRNA-mRNA (RNN)"}
METHODS = ("exact", "ps", "gt", "ks", "gtg")


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def train(name: str, args: argparse.Namespace, layers: int = 3) -> tuple[Any, Any, Any]:
    task = make_task(name, n_samples=args.samples, layers=layers, seed=args.seed)
    fed = task.federate(args.clients, seed=args.seed)
    t0 = time.perf_counter()
    rec = run_fedavg(task, fed, rounds=args.rounds, seed=args.seed)
    return task, fed, (rec, time.perf_counter() - t0)


def bench_task(name: str, args: argparse.Namespace) -> dict[str, Any]:
    say(f"{name}: training")
    task, fed, (rec, train_s) = train(name, args)
    x, y = fed.x_test, fed.y_test
    exact_runs = [federated_shapley(rec, x, y) for _ in range(args.repeats)]
    exact = exact_runs[0]
    base_time = statistics.median(r.seconds for r in exact_runs)
    out: dict[str, Any] = {
        "task": name, "model": task.spec.description, "data": task.data.description,
        "real_data": task.data.real, "train_samples": [len(c.y_train) for c in fed.clients],
        "test_samples": int(len(y)), "training_s": train_s,
        "final_accuracy": accuracy(task.spec, rec.final_params, x, y),
        "exact_fsv": exact.fsv.tolist(), "exact_s": base_time, "methods": {}}
    for method in METHODS:
        for skip in (False, True):
            say(f"{name}: {method} sample_skip={skip}")
            runs = []
            for r in range(args.repeats):
                seed = 1000 + r
                runs.append(federated_shapley(rec, x, y, estimator=method, sample_skip=skip,
                                              seed=seed))
            out["methods"][f"{method}/{'on' if skip else 'off'}"] = {
                "budget": runs[0].budget,
                "error_median": statistics.median(r.error_to(exact) for r in runs),
                "error_all": [r.error_to(exact) for r in runs],
                "seconds_median": statistics.median(r.seconds for r in runs),
                "time_vs_exact": statistics.median(r.seconds for r in runs) / base_time,
                "predictions_vs_exact": statistics.median(
                    r.samples_tested for r in runs) / exact.samples_tested,
                "models_tested_median": statistics.median(r.models_tested for r in runs),
            }
    audit = federated_shapley(rec, x, y, sample_skip=True, audit=True)
    out["sample_skip"] = audit.skip.to_dict()
    return out


SWEEP = {"ps": (5, 10, 20, 50, 100), "gt": (30, 100, 300, 1000, 3000),
         "ks": (10, 30, 100, 300, 1000), "gtg": (10, 20, 50, 100, 200)}


def bench_budgets(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Error and models tested per round vs budget (SampleSkip off)."""
    say(f"{name}: budget sweep")
    _, fed, (rec, _) = train(name, args)
    x, y = fed.x_test, fed.y_test
    exact = federated_shapley(rec, x, y)
    out: dict[str, Any] = {"task": name, "rows": []}
    for method, budgets in SWEEP.items():
        for budget in budgets:
            runs = [federated_shapley(rec, x, y, estimator=method, budget=budget, seed=2000 + r)
                    for r in range(args.repeats)]
            out["rows"].append({
                "method": method, "budget": budget,
                "error_median": statistics.median(r.error_to(exact) for r in runs),
                "models_per_round": statistics.median(r.models_tested for r in runs)
                / rec.n_rounds})
    return out


def bench_depth(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for layers in range(1, args.max_layers + 1):
        say(f"dnn L={layers}: training")
        task, fed, (rec, _) = train("dnn", args, layers=layers)
        res = federated_shapley(rec, fed.x_test, fed.y_test, sample_skip=True, audit=True)
        exact = federated_shapley(rec, fed.x_test, fed.y_test)
        rows.append({"layers": layers,
                     "final_accuracy": accuracy(task.spec, rec.final_params, fed.x_test,
                                                fed.y_test),
                     "skip_error": res.error_to(exact), **res.skip.to_dict()})
    return rows


def markdown(doc: dict[str, Any]) -> str:
    lines = []
    lines.append("### Per task: FSV, estimator errors and cost, SampleSkip off / on\n")
    for t in doc["tasks"]:
        paper = PAPER_TABLE3.get(t["task"], {})
        kind = "real" if t["real_data"] else "synthetic stand-in"
        lines.append(f"**{t['task']}** — {t['model']}; {t['data']} ({kind}); "
                     f"test samples {t['test_samples']}; final accuracy "
                     f"{t['final_accuracy']:.3f}; exact FSV "
                     f"[{', '.join(f'{v:.4f}' for v in t['exact_fsv'])}]; exact evaluation "
                     f"{t['exact_s']:.2f} s (training {t['training_s']:.1f} s)\n")
        lines.append("| method | budget/round | error ×10⁻² off / on | seed 004 Table 3 "
                     f"({PAPER_NAMES.get(t['task'], '-')}) off / on | time vs exact off / on "
                     "| predictions vs exact off / on | models tested off / on |")
        lines.append("| --- | --- | --- | --- | --- | --- | --- |")
        for m in METHODS:
            off, on = t["methods"][f"{m}/off"], t["methods"][f"{m}/on"]
            p = paper.get(m)
            ptxt = f"{p[0]:.2f} / {p[1]:.2f}" if p else "—"
            name = {"exact": "exact (NSSV)", "ps": "PS", "gt": "GT", "ks": "KS",
                    "gtg": "GTG-Shapley"}[m]
            lines.append(
                f"| {name} | {off['budget'] or '—'} | {100 * off['error_median']:.2f} / "
                f"{100 * on['error_median']:.2f} | {ptxt} | {off['time_vs_exact']:.2f}× / "
                f"{on['time_vs_exact']:.2f}× | {off['predictions_vs_exact']:.3f} / "
                f"{on['predictions_vs_exact']:.3f} | {off['models_tested_median']:.0f} / "
                f"{on['models_tested_median']:.0f} |")
        s = t["sample_skip"]
        lines.append(f"\nSampleSkip (exact): skipped {100 * s['skipped_share']:.2f} % of the "
                     f"aggregated models' predictions, wrongly skipped "
                     f"{100 * s['wrongly_skipped_share']:.4f} % ({s['wrongly_skipped']} of "
                     f"{s['aggregated_model_samples']}), max Δv {s['max_delta_v']:.4f}\n")
    for sw in doc.get("sweeps", []):
        lines.append(f"### Estimator error vs budget: {sw['task']} (SampleSkip off)\n")
        lines.append("| method | budget/round → error ×10⁻² (models tested per round, of "
                     f"{2 ** doc['clients']}) |")
        lines.append("| --- | --- |")
        for m in SWEEP:
            cells = [f"{r['budget']} → {100 * r['error_median']:.2f} "
                     f"({r['models_per_round']:.1f})" for r in sw["rows"] if r["method"] == m]
            lines.append(f"| {m.upper()} | {'; '.join(cells)} |")
        lines.append("")
    lines.append("### SampleSkip vs depth: DNN with L layers (seed 004, Fig. 8)\n")
    lines.append("| L | final accuracy | skipped % | wrongly skipped % | wrongly skipped "
                 "(count) | max Δv | FSV error ×10⁻² |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- |")
    for r in doc["depth"]:
        lines.append(f"| {r['layers']} | {r['final_accuracy']:.3f} | "
                     f"{100 * r['skipped_share']:.2f} | {100 * r['wrongly_skipped_share']:.4f}"
                     f" | {r['wrongly_skipped']} | {r['max_delta_v']:.4f} | "
                     f"{100 * r['skip_error']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=["bank", "agnews", "mnist", "gru"])
    ap.add_argument("--clients", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-layers", type=int, default=10)
    ap.add_argument("--sweep-tasks", nargs="*", default=["bank", "agnews"])
    ap.add_argument("--samples", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 2 tasks, 3 rounds, 600 samples, L <= 3, 1 repeat")
    ap.add_argument("--out", type=Path, default=RESULTS / "bench_shapley.json")
    args = ap.parse_args(argv)
    if args.quick:
        args.tasks, args.rounds, args.samples = ["bank", "digits"], 3, 600
        args.sweep_tasks = ["bank"]
        args.max_layers, args.repeats = 3, 1
    t0 = time.perf_counter()
    doc: dict[str, Any] = {
        "machine": f"{platform.processor() or platform.machine()}, "
                   f"{platform.python_version()}, numpy {np.__version__}",
        "clients": args.clients, "rounds": args.rounds, "repeats": args.repeats,
        "seed": args.seed, "budgets": DEFAULT_BUDGETS,
        "tasks": [bench_task(name, args) for name in args.tasks],
        "sweeps": [bench_budgets(name, args) for name in args.sweep_tasks],
        "depth": bench_depth(args)}
    doc["total_s"] = time.perf_counter() - t0
    md = markdown(doc)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2))
    args.out.with_suffix(".md").write_text(md)
    print(md)
    say(f"done in {doc['total_s']:.0f} s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
