"""``fedsec auc`` and ``fedsec demo``: secure federated AUC from the command line."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from fedsec.crypto.params import DEFAULT_PRESET, PRESETS

__all__ = ["register"]

SECURE_PRESETS = [k for k, v in PRESETS.items() if not v.insecure]


def _fhauc_presets() -> list[str]:
    """Secure presets whose prime chain carries FHAUC's rescaled masks."""
    from fedsec.auc.common import DEFAULT_MAX_TOTAL_SAMPLES
    from fedsec.auc.masking import check_masking_capacity

    out = []
    for name in SECURE_PRESETS:
        try:
            check_masking_capacity(PRESETS[name], DEFAULT_MAX_TOTAL_SAMPLES)
        except ValueError:
            continue
        out.append(name)
    return out


def _progress(quiet: bool) -> Any:
    start = time.perf_counter()

    def say(msg: str) -> None:
        if not quiet:
            print(f"[{time.perf_counter() - start:6.2f}s] {msg}", file=sys.stderr, flush=True)
    return say


def _run(pairs: list[Any], names: list[str], args: argparse.Namespace,
         say: Any = None) -> Any:
    from fedsec.auc.fhauc import secure_auc

    kwargs: dict[str, Any] = {}
    if args.security == "malicious":
        from fedsec.auc.fhauc_malicious import DEFAULT_RUNS, DEFAULT_TOLERANCE
        from fedsec.auc.policy import DEFAULT_MIN_BOUND_BITS

        kwargs["splits"] = args.splits
        kwargs["tolerance"] = DEFAULT_TOLERANCE if args.tolerance is None else args.tolerance
        kwargs["runs"] = DEFAULT_RUNS if args.runs is None else args.runs
        kwargs["min_bound_bits"] = (DEFAULT_MIN_BOUND_BITS if args.min_bound_bits is None
                                    else args.min_bound_bits)
        if args.masking != "single":
            raise ValueError("--masking applies to --security semi-honest only")
    else:
        kwargs["masking"] = args.masking
    return secure_auc(pairs, decision_points=args.decision_points, security=args.security,
                      preset=args.preset, names=names,
                      progress=say or _progress(args.json or args.quiet), **kwargs)


def _cmd_auc(args: argparse.Namespace) -> int:
    from fedsec.data.io import load_party_csvs

    if args.decision_points < 2:
        raise ValueError(f"--decision-points must be >= 2; got {args.decision_points}")
    if args.security == "semi-honest" and any(
            v is not None for v in (args.splits, args.tolerance, args.runs,
                                    args.min_bound_bits)):
        raise ValueError("--splits, --tolerance, --runs and --min-bound-bits apply to "
                         "--security malicious only")
    parties = load_party_csvs(args.files)
    res = _run([(p.y_true, p.y_score) for p in parties], [p.name for p in parties], args)
    out = {
        "auc": res.auc,
        "parties": res.parties,
        "decision_points": res.decision_points,
        "security": res.security,
        "bytes_up_per_party": res.bytes_up_per_party,
        "bytes_down_per_party": res.bytes_down_per_party,
        "aggregator_seconds": res.aggregator_seconds,
        "setup_bytes_to_aggregator": res.setup_bytes_to_aggregator,
        "preset": res.preset,
        "included": res.included,
    }
    if res.security == "semi-honest":
        out["masking"] = res.masking
    out.update({k: v for k, v in res.extra.items() if k in
                ("verified", "cheat_bound_bits", "splits", "runs", "tolerance",
                 "permutation_bound_bits", "multiplier_bound_bits", "tolerance_bound_bits",
                 "shift_resolution")})
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"secure AUC ({res.security} aggregator): {res.auc:.10f}")
        print(f"  parties: {res.parties}   decision points: {res.decision_points}   "
              f"preset: {res.preset}")
        if "verified" in out:
            print(f"  verified: {out['verified']}   "
                  f"cheating bound: 2^-{out['cheat_bound_bits']:.1f}")
        print(f"  upload per party: {res.bytes_up_per_party:,} bytes   "
              f"download per party: {res.bytes_down_per_party:,} bytes")
        print(f"  aggregator time: {res.aggregator_seconds:.3f} s   "
              f"key material to aggregator (once): {res.setup_bytes_to_aggregator:,} bytes")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from sklearn.metrics import roc_auc_score

    from fedsec.data.datasets import breast_cancer_federation
    from fedsec.metrics import confusion_counts, trapezoid_auc_from_counts

    say = _progress(False)
    say("training a logistic-regression model on scikit-learn's breast-cancer data")
    fed = breast_cancer_federation(args.hospitals, seed=args.seed)
    print(f"federation: {fed.description}")
    for p in fed.parties:
        print(f"  {p.name}: {p.n_samples} test samples, {int(p.y_true.sum())} benign (label 1), "
              f"{int((1 - p.y_true).sum())} malignant (label 0)")
    y, s = fed.pooled()
    rows = []
    for security in ("semi-honest", "malicious"):
        ns = argparse.Namespace(decision_points=args.decision_points, security=security,
                                masking="single", splits=None, preset=args.preset,
                                json=False, quiet=False, tolerance=None, runs=None,
                                min_bound_bits=None)
        say(f"running FHAUC with a {security} aggregator")
        res = _run(fed.pairs(), [p.name for p in fed.parties], ns, say)
        rows.append((security, res))
    plain = trapezoid_auc_from_counts(*confusion_counts(y, s, args.decision_points))
    exact = roc_auc_score(y, s)
    print()
    print(f"{'method':<44}{'AUC':>14}")
    print(f"{'plaintext trapezoid, pooled data (N=' + str(args.decision_points) + ')':<44}"
          f"{plain:>14.10f}")
    for security, res in rows:
        label = f"FHAUC, {security} aggregator"
        print(f"{label:<44}{res.auc:>14.10f}   |diff| {abs(res.auc - plain):.1e}   "
              f"up {res.bytes_up_per_party / 1e3:.0f} kB/party, "
              f"aggregator {res.aggregator_seconds:.2f} s")
    print(f"{'scikit-learn roc_auc_score, pooled data':<44}{exact:>14.10f}")
    print("\nNo party's labels or scores left its process unencrypted; the aggregator saw "
          "ciphertexts and public keys only.")

    from fedsec.auc.adversary import TamperHarness
    say(f"now a cheating aggregator silently drops {fed.parties[0].name}'s submission")
    print(f"\nA cheating aggregator drops {fed.parties[0].name} and answers as if it had not:")
    for security in ("semi-honest", "malicious"):
        harness = TamperHarness(fed.pairs(), security=security,
                                decision_points=args.decision_points)
        truth = harness.truth
        outcome = harness.trial("drop-party").kind
        if outcome == "detected":
            print(f"  {security:<12} parties raise TamperingDetected - no AUC is reported")
        else:
            got = harness.last_accepted
            print(f"  {security:<12} parties accept AUC {got:.10f} (true {truth:.10f}) - "
                  "this mode trusts the aggregator to compute correctly")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("auc", help="secure federated ROC-AUC over party CSV files",
                       description="Secure federated ROC-AUC (FHAUC). One CSV per party "
                                   "with header 'label,score' (label 0/1, score in [0,1]).")
    p.add_argument("files", nargs="+", metavar="PARTY.csv")
    p.add_argument("--decision-points", "-N", type=int, default=100,
                   help="number of uniform decision points N (default 100)")
    p.add_argument("--security", choices=["semi-honest", "malicious"], default="semi-honest",
                   help="threat model of the aggregator (default semi-honest)")
    p.add_argument("--masking", choices=["single", "pair"], default="single",
                   help="semi-honest masking: single mask c (seed 000) or the (c, d) pair "
                        "(seed 001)")
    p.add_argument("--splits", "-S", type=int, default=None,
                   help="malicious mode: additive shares per statistic (default: smallest "
                        "S meeting the cheating bound)")
    p.add_argument("--tolerance", type=float, default=None,
                   help="malicious mode: how closely the runs must agree (default 1e-7; "
                        "honest runs agree to ~6e-9 at worst, ~1e-12 from 100 samples; a "
                        "looser tolerance weakens the cheating bound and is refused below "
                        "--min-bound-bits)")
    p.add_argument("--runs", type=int, default=None,
                   help="malicious mode: independent executions that must agree (2..8, "
                        "default 8; packed into the same ciphertext)")
    p.add_argument("--min-bound-bits", type=float, default=None,
                   help="malicious mode: refuse parameters whose cheating bound, blind-shift "
                        "term included, is weaker than 2^-BITS (default 40)")
    presets = _fhauc_presets()
    p.add_argument("--preset", choices=presets, default=DEFAULT_PRESET,
                   help=f"CKKS parameter preset (128-bit secure presets whose prime chain "
                        f"holds FHAUC's rescaled masks). The default {DEFAULT_PRESET} "
                        "(ring 2^13, fresh scale 2^49, masks encoded at a 35-bit prime) "
                        "gives ~1e-11 relative precision from 100 samples on, ~1e-9 at worst "
                        "for one sample of each class; CKKS_128_N16384_DEPTH4 (the papers' "
                        "ring 2^14) costs about 3x")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    p.set_defaults(func=_cmd_auc)

    d = sub.add_parser("demo", help="secure AUC on a realistic federation (breast cancer)")
    d.add_argument("--hospitals", type=int, default=5)
    d.add_argument("--decision-points", "-N", type=int, default=100)
    d.add_argument("--preset", choices=presets, default=DEFAULT_PRESET)
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(func=_cmd_demo)
