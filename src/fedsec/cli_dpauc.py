"""``fedsec dpauc``, ``fedsec attack dpauc-counts`` and ``fedsec reproduce``.

``dpauc`` runs the differentially private baselines over party CSV files (one party per file)
and reports the mean and standard deviation of the AUC over independent runs; ``attack
dpauc-counts`` plays the semi-honest aggregator of seed 001 App. B.2 against each party's
submission; ``reproduce`` regenerates the DPAUC report (``benchmarks/reproduce_dpauc.py``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from fedsec.auc.attacks import estimate_party_counts
from fedsec.auc.dpauc import MECHANISMS, DPAUCClient, RRClient, dpauc
from fedsec.data.io import load_party_csv, load_party_csvs
from fedsec.errors import PrivacyWarning

__all__ = ["register"]


@contextmanager
def _report_privacy_warnings() -> Iterator[None]:
    """Print each distinct PrivacyWarning once on stderr instead of raising/repeating it."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PrivacyWarning)
        yield
    seen: set[str] = set()
    for w in caught:
        msg = str(w.message)
        if issubclass(w.category, PrivacyWarning) and msg not in seen:
            seen.add(msg)
            print(f"fedsec: privacy warning: {msg}", file=sys.stderr)
        elif not issubclass(w.category, PrivacyWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _positive_float(name: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number; got {text!r}") from None
        if not math.isfinite(v) or v <= 0:
            raise argparse.ArgumentTypeError(f"{name} must be > 0; got {text!r}")
        return v
    return parse


def _positive_int(name: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer; got {text!r}") from None
        if v < 1:
            raise argparse.ArgumentTypeError(f"{name} must be >= 1; got {text!r}")
        return v
    return parse


def _add_privacy_args(p: argparse.ArgumentParser, default_points: int) -> None:
    p.add_argument("parties", nargs="+", metavar="PARTY.csv",
                   help="one CSV file per party with header label,score")
    p.add_argument("--epsilon", required=True, type=_positive_float("--epsilon"),
                   help="total privacy budget of one evaluation, per party")
    p.add_argument("--decision-points", type=_positive_int("--decision-points"),
                   default=default_points, help=f"number N of uniform thresholds "
                   f"(default {default_points})")
    p.add_argument("--mechanism", choices=MECHANISMS, default="laplace")
    p.add_argument("--delta", type=_positive_float("--delta"), default=1e-6,
                   help="delta of the Gaussian mechanism (default 1e-6)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


def register(subparsers: Any) -> None:
    """Add the ``dpauc``, ``attack`` and ``reproduce`` sub-commands."""
    p = subparsers.add_parser(
        "dpauc", help="differentially private AUC baselines (DPAUC_Lap, Gaussian, RR)",
        description="Differentially private federated AUC (seed 003). Every run is an "
                    "independent evaluation and spends --epsilon again.")
    _add_privacy_args(p, 100)
    p.add_argument("--runs", type=_positive_int("--runs"), default=1,
                   help="independent runs to average (default 1)")
    p.add_argument("--score-epsilon", type=_positive_float("--score-epsilon"), default=None,
                   help="rr only: Laplace noise on scores with this epsilon")
    p.set_defaults(func=_cmd_dpauc)

    a = subparsers.add_parser("attack", help="attacks on privacy-preserving AUC baselines")
    asub = a.add_subparsers(dest="attack", metavar="ATTACK")
    c = asub.add_parser(
        "dpauc-counts", help="estimate each party's sample counts from its DPAUC submission",
        description="Semi-honest aggregator of seed 001 App. B.2: average TP+FN and FP+TN over "
                    "all decision points of one party's noisy statistics.")
    _add_privacy_args(c, 100)
    c.set_defaults(func=_cmd_attack_counts)
    a.set_defaults(func=lambda args: _usage(a))

    r = subparsers.add_parser(
        "reproduce", help="regenerate the DPAUC reproduction report",
        description="Runs benchmarks/reproduce_dpauc.py (needs a source checkout).")
    r.add_argument("--script", default=None, help="path to reproduce_dpauc.py")
    r.add_argument("rest", nargs=argparse.REMAINDER,
                   help="arguments passed to the script (e.g. --quick, --out DIR)")
    r.set_defaults(func=_cmd_reproduce)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _cmd_dpauc(args: argparse.Namespace) -> int:
    parties = load_party_csvs(args.parties)
    data = [(p.y_true, p.y_score) for p in parties]
    mech: str = args.mechanism
    if args.score_epsilon is not None and mech != "rr":
        raise ValueError("--score-epsilon applies only to --mechanism rr")
    aucs: list[float] = []
    with _report_privacy_warnings():
        for _ in range(args.runs):
            res = dpauc(data, epsilon=args.epsilon, decision_points=args.decision_points,
                        mechanism=mech, delta=args.delta if mech == "gaussian" else None,
                        score_epsilon=args.score_epsilon)
            aucs.append(res.auc)
    arr = np.asarray(aucs)
    per_run = args.epsilon + (args.score_epsilon or 0.0)
    out = {
        "mechanism": mech,
        "epsilon": args.epsilon,
        "delta": args.delta if mech == "gaussian" else 0.0,
        "decision_points": args.decision_points,
        "runs": args.runs,
        "parties": len(parties),
        "samples": sum(p.n_samples for p in parties),
        "mean": float(arr.mean()),
        "std": float(arr.std(ddof=1)) if arr.size > 1 else 0.0,
        "aucs": [float(x) for x in arr],
        "epsilon_spent_per_party": per_run * args.runs,
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"DPAUC ({mech}, epsilon={args.epsilon}, N={args.decision_points}, "
              f"{len(parties)} parties, {out['samples']} samples)")
        print(f"AUC = {out['mean']:.6f} +- {out['std']:.6f} over {args.runs} run(s)")
        print(f"privacy spent per party: epsilon = {out['epsilon_spent_per_party']:g}"
              + (f", delta = {args.delta * args.runs:g}" if mech == "gaussian" else ""))
    return 0


def _cmd_attack_counts(args: argparse.Namespace) -> int:
    if not args.parties:
        raise ValueError("at least one party file is required")
    parties = [load_party_csv(p) for p in args.parties]
    rows: list[dict[str, Any]] = []
    with _report_privacy_warnings():
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
                  Path(__file__).resolve().parents[2] / "benchmarks" / "reproduce_dpauc.py"]
    for c in candidates:
        if c.is_file():
            return c
    raise FileNotFoundError(
        "benchmarks/reproduce_dpauc.py not found; run from a source checkout or pass --script")


def _cmd_reproduce(args: argparse.Namespace) -> int:
    path = _find_script(args.script)
    spec = importlib.util.spec_from_file_location("fedsec_reproduce_dpauc", path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"{path}: cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    code: int = module.main(list(args.rest))
    return code
