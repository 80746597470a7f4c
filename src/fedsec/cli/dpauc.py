"""``fedsec dpauc``, ``fedsec attack dpauc-counts`` and ``fedsec reproduce``.

``dpauc`` runs the differentially private baselines over party CSV files (one party per file)
and reports the mean and standard deviation of the AUC over independent runs; ``attack
dpauc-counts`` plays the semi-honest aggregator of Baykara et al. (FHAUC), App. B.2, against
each party's
submission; ``reproduce`` regenerates the DPAUC report (``benchmarks/reproduce_dpauc.py``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from fedsec._validation import check_int, check_real
from fedsec.auc.attacks import estimate_party_counts
from fedsec.auc.dpauc import MECHANISMS, DPAUCClient, RRClient, dpauc
from fedsec.cli.common import add_party_file_options, arg_type, load_party_files

__all__ = ["register"]

_DEFAULT_DELTA = 1e-6


_EPSILON_HINT = (" (an infinite budget is no privacy: 'fedsec auc' computes the AUC "
                 "without noise, and without revealing it)")


def _add_privacy_args(p: argparse.ArgumentParser, default_points: int) -> None:
    add_party_file_options(p)
    p.add_argument("--epsilon", required=True,
                   type=arg_type(check_real, "--epsilon", gt=0.0, hint=_EPSILON_HINT),
                   help="total privacy budget of one evaluation, per party (finite, > 0)")
    p.add_argument("--decision-points", "-N",
                   type=arg_type(check_int, "--decision-points", min_value=1),
                   default=default_points, help=f"number N of uniform thresholds "
                   f"(default {default_points})")
    p.add_argument("--mechanism", choices=MECHANISMS, default="laplace",
                   help="laplace: DPAUC_Lap, Laplace noise on every TP/FP/TN/FN; gaussian: "
                        "analytic Gaussian noise on the same statistics (needs --delta); rr: "
                        "DPAUC_RR, labels flipped by randomized response, then debiased "
                        "(default laplace)")
    p.add_argument("--delta", type=arg_type(check_real, "--delta", gt=0.0, lt=1.0), default=None,
                   help="delta of the Gaussian mechanism (default 1e-6)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


def register(subparsers: Any) -> None:
    """Add the ``dpauc``, ``attack`` and ``reproduce`` sub-commands."""
    p = subparsers.add_parser(
        "dpauc", help="differentially private AUC baselines (DPAUC_Lap, Gaussian, RR)",
        description="Differentially private federated AUC (DPAUC: Sun et al.). Plays every "
                    "party and the server in one process. Every run is an independent "
                    "evaluation and spends --epsilon again. The noise comes from the "
                    "operating system's cryptographic generator and cannot be seeded: two "
                    "runs differ by design. Under heavy noise an estimate can fall outside "
                    "[0, 1]; --clip clips every run's estimate into [0, 1].",
        epilog="fedsec dpauc has no --seed: it uses no simulated data, and DP noise must "
               "never be reproducible (a seeded noise is no privacy). Seeds drive simulated "
               "data only, e.g. 'fedsec reproduce --seed'.")
    _add_privacy_args(p, 100)
    p.add_argument("--runs", type=arg_type(check_int, "--runs", min_value=1), default=1,
                   help="independent runs to average (default 1); each spends --epsilon")
    p.add_argument("--score-epsilon", type=arg_type(check_real, "--score-epsilon", gt=0.0),
                   default=None,
                   help="rr only: Laplace noise on scores with this epsilon")
    p.add_argument("--clip", action="store_true",
                   help="clip every run's estimate into [0, 1] (post-processing: no privacy "
                        "cost, but biased; the papers report unclipped estimates)")
    p.set_defaults(func=_cmd_dpauc)

    a = subparsers.add_parser("attack", help="attacks on privacy-preserving AUC baselines",
                              description="Attacks that show what the DP baselines leak.")
    asub = a.add_subparsers(dest="attack", metavar="ATTACK")
    c = asub.add_parser(
        "dpauc-counts", help="estimate each party's sample counts from its DPAUC submission",
        description="Semi-honest aggregator of Baykara et al. (FHAUC) App. B.2: average "
                    "TP+FN and FP+TN over "
                    "all decision points of one party's noisy statistics.")
    _add_privacy_args(c, 100)
    c.set_defaults(func=_cmd_attack_counts)
    a.set_defaults(func=lambda args: _usage(a))

    r = subparsers.add_parser(
        "reproduce", help="regenerate the DPAUC reproduction report",
        description="Runs benchmarks/reproduce_dpauc.py (needs a source checkout).")
    r.add_argument("--script", default=None, help="path to reproduce_dpauc.py (default: "
                   "benchmarks/reproduce_dpauc.py of this checkout)")
    r.add_argument("--quick", action="store_true",
                   help="small smoke run (minutes), not the report's sizes")
    r.add_argument("--out", default=None, metavar="DIR",
                   help="where the report, JSON and plots go (default: benchmarks/results)")
    r.add_argument("--seed", type=arg_type(check_int, "--seed", min_value=0), default=None,
                   help="base seed of the simulated data and party splits (default: the "
                        "script's); DP noise is never seeded")
    r.set_defaults(func=_cmd_reproduce)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _cmd_dpauc(args: argparse.Namespace) -> int:
    mech: str = args.mechanism
    if args.score_epsilon is not None and mech != "rr":
        raise ValueError("--score-epsilon applies only to --mechanism rr")
    if args.delta is not None and mech != "gaussian":
        raise ValueError("--delta applies only to --mechanism gaussian")
    args.delta = _DEFAULT_DELTA if args.delta is None else args.delta
    parties = load_party_files(args)
    data = [(p.y_true, p.y_score) for p in parties]
    aucs: list[float] = []
    # warnings are printed once each, by fedsec.cli
    for _ in range(args.runs):
        res = dpauc(data, epsilon=args.epsilon, decision_points=args.decision_points,
                    mechanism=mech, delta=args.delta if mech == "gaussian" else None,
                    score_epsilon=args.score_epsilon, clip=args.clip)
        aucs.append(res.auc)
    arr = np.asarray(aucs)
    per_run = args.epsilon + (args.score_epsilon or 0.0)
    mean = float(arr.mean())
    std = float(arr.std(ddof=1)) if arr.size > 1 else None
    out = {
        "mechanism": mech,
        "epsilon": args.epsilon,
        "delta": args.delta if mech == "gaussian" else 0.0,
        "decision_points": args.decision_points,
        "runs": args.runs,
        "parties": len(parties),
        "samples": sum(p.n_samples for p in parties),
        "clip": args.clip,
        "mean": mean,
        "std": std,
        "aucs": [float(x) for x in arr],
        "epsilon_spent_per_party": per_run * args.runs,
    }
    if not 0.0 <= mean <= 1.0:
        print(f"fedsec: warning: the mean AUC estimate {mean:.6g} is outside [0, 1]: the DP "
              "noise swamps these statistics (small data, small epsilon or many decision "
              "points); --clip clips every run into [0, 1], but the estimate stays "
              "unreliable", file=sys.stderr)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"DPAUC ({mech}, epsilon={args.epsilon}, N={args.decision_points}, "
              f"{len(parties)} parties, {out['samples']} samples"
              f"{', clipped to [0, 1]' if args.clip else ''})")
        if std is None:
            print(f"AUC = {mean:.6f} (one run: no spread to report; --runs R > 1 gives a mean "
                  "and standard deviation, each run spending epsilon again)")
        else:
            print(f"AUC = {mean:.6f} +- {std:.6f} (mean +- standard deviation over "
                  f"{args.runs} runs)")
        print(f"privacy spent per party: epsilon = {out['epsilon_spent_per_party']:g}"
              + (f", delta = {args.delta * args.runs:g}" if mech == "gaussian" else ""))
    return 0


def _cmd_attack_counts(args: argparse.Namespace) -> int:
    if args.delta is not None and args.mechanism != "gaussian":
        raise ValueError("--delta applies only to --mechanism gaussian")
    args.delta = _DEFAULT_DELTA if args.delta is None else args.delta
    parties = load_party_files(args, require_both_classes=False)
    rows: list[dict[str, Any]] = []
    # warnings are printed once each, by fedsec.cli
    for p in parties:
        client: DPAUCClient | RRClient
        if args.mechanism == "rr":
            client = RRClient(p.y_true, p.y_score, epsilon=args.epsilon,
                              decision_points=args.decision_points)
        else:
            client = DPAUCClient(
                p.y_true, p.y_score, epsilon=args.epsilon,
                decision_points=args.decision_points, mechanism=args.mechanism,
                delta=args.delta if args.mechanism == "gaussian" else None)
        est = estimate_party_counts(client.submit())
        pos = int(p.y_true.sum())
        true = {"total": p.n_samples, "positives": pos, "negatives": p.n_samples - pos}
        guess = {"total": est.total, "positives": est.positives, "negatives": est.negatives}
        rows.append({
            "name": p.name,
            **true,
            "estimated_total": guess["total"],
            "estimated_positives": guess["positives"],
            "estimated_negatives": guess["negatives"],
            "error_total": guess["total"] - true["total"],
            "error_positives": guess["positives"] - true["positives"],
            "error_negatives": guess["negatives"] - true["negatives"],
            "expected_error_std_total": est.total_std,
            "expected_error_std_class": est.positives_std,
        })
    out = {"attack": "dpauc-counts", "mechanism": args.mechanism, "epsilon": args.epsilon,
           "decision_points": args.decision_points, "parties": rows}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"Count leakage from DPAUC ({args.mechanism}, epsilon={args.epsilon}, "
          f"N={args.decision_points}); expected error std: total "
          f"{rows[0]['expected_error_std_total']:.1f}, per class "
          f"{rows[0]['expected_error_std_class']:.1f} samples")
    print(f"{'party':<24}{'total':>10}{'est.':>12}{'pos':>10}{'est.':>12}{'neg':>10}{'est.':>12}")
    for r in rows:
        print(f"{r['name']:<24}{r['total']:>10}{r['estimated_total']:>12.1f}"
              f"{r['positives']:>10}{r['estimated_positives']:>12.1f}"
              f"{r['negatives']:>10}{r['estimated_negatives']:>12.1f}")
    return 0


def _find_script(explicit: str | None) -> Path:
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file")
        return path
    candidates = [Path.cwd() / "benchmarks" / "reproduce_dpauc.py",
                  Path(__file__).resolve().parents[3] / "benchmarks" / "reproduce_dpauc.py"]
    for c in candidates:
        if c.is_file():
            return c
    raise FileNotFoundError(
        "benchmarks/reproduce_dpauc.py not found; run from a source checkout or pass --script")


def _cmd_reproduce(args: argparse.Namespace) -> int:
    path = _find_script(args.script)
    argv: list[str] = []
    if args.quick:
        argv.append("--quick")
    if args.out is not None:
        argv += ["--out", args.out]
    if args.seed is not None:
        argv += ["--seed", str(args.seed)]
    spec = importlib.util.spec_from_file_location("fedsec_reproduce_dpauc", path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"{path}: cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    code: int = module.main(argv)
    return code
