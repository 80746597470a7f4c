"""``fedsec auc``, ``fedsec check`` and ``fedsec demo``: secure federated AUC from the
command line.

``fedsec auc`` plays every party, the key holder and the aggregator in one process: a way to
try the protocols on real files. A deployment runs one party per machine
(docs/run-across-machines.md). The party-file options (:func:`add_party_file_options`) are
shared with ``fedsec dpauc`` and ``fedsec attack``; the file rules are in :mod:`fedsec.data.io`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from fedsec._validation import check_int, check_real
from fedsec.auc.exact import INITIAL_POINTS
from fedsec.auc.fhauc_malicious import MAX_RUNS
from fedsec.cli.common import (
    add_party_file_options,
    arg_type,
    load_party_files,
    points_arg,
    scores_arg,
)
from fedsec.cli.common import progress_printer as _progress
from fedsec.crypto.params import DEFAULT_PRESET, MALICIOUS_PRESET, PRESETS

__all__ = ["register", "check_limits"]

SECURE_PRESETS = [k for k, v in PRESETS.items() if not v.insecure]


# ------------------------------------------------------------------ limits
def check_limits(n_points: int | str, total_samples: int, preset: str, security: str
                 ) -> None:
    """Refuse sizes the secure AUC cannot take, naming the option or preset that lifts the
    limit (``ValueError``, exit status 2)."""
    from fedsec.auc.common import DEFAULT_MAX_TOTAL_SAMPLES, MAX_DECISION_POINTS

    if n_points == "exact":  # exact mode sizes its own grid (--max-points)
        n_points = 2
    assert isinstance(n_points, int)
    if n_points < 2:
        raise ValueError(f"--decision-points must be >= 2; got {n_points}")
    if n_points > MAX_DECISION_POINTS:
        raise ValueError(
            f"--decision-points {n_points} exceeds {MAX_DECISION_POINTS}, the most the secure "
            "AUC takes (no option lifts this); use --decision-points exact, which refines the "
            "grid only where pairs of both classes fall")
    if total_samples > DEFAULT_MAX_TOTAL_SAMPLES:
        raise ValueError(
            f"the federation holds {total_samples:,} samples; the secure AUC is sized for at "
            f"most {DEFAULT_MAX_TOTAL_SAMPLES:,} (2^20) in all -- the masked result must fit "
            "the last prime of every preset, and no option of fedsec auc lifts this limit: "
            "evaluate on a random subsample")


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
    if args.keys != "single":
        kwargs["keys"] = args.keys
    if args.decision_points == "exact":
        if args.target is not None:
            kwargs["target"] = args.target
        if args.max_points is not None:
            kwargs["max_points"] = args.max_points
        if args.max_rounds is not None:
            kwargs["max_rounds"] = args.max_rounds
    elif any(v is not None for v in (args.target, args.max_points, args.max_rounds)):
        raise ValueError("--target, --max-points and --max-rounds apply to "
                         "--decision-points exact only")
    return secure_auc(pairs, decision_points=args.decision_points, security=args.security,
                      preset=args.preset, names=names, scores=args.scores,
                      progress=say or _progress(args.json or args.quiet), **kwargs)


def _cmd_auc(args: argparse.Namespace) -> int:
    if args.security == "semi-honest" and any(
            v is not None for v in (args.splits, args.tolerance, args.runs,
                                    args.min_bound_bits)):
        raise ValueError("--splits, --tolerance, --runs and --min-bound-bits apply to "
                         "--security malicious only")
    check_limits(args.decision_points, 0, args.preset, args.security)
    if len(args.files) < 2:
        raise ValueError(f"a federation needs at least 2 parties; got {len(args.files)} "
                         "party file (one party's AUC needs no secure protocol: compute it "
                         "locally)")
    parties = load_party_files(args, any_finite=args.scores != "probability")
    check_limits(args.decision_points, sum(p.n_samples for p in parties), args.preset,
                 args.security)
    res = _run([(p.y_true, p.y_score) for p in parties], [p.name for p in parties], args)
    out = {
        "auc": res.auc,
        "parties": res.parties,
        "decision_points": res.decision_points,
        "decision_mode": res.decision_mode,
        "error_bound": res.error_bound,
        "target": res.target,
        "target_reached": res.target_reached,
        "rounds": res.rounds,
        "scores": args.scores,
        "security": res.security,
        "bytes_up_per_party": res.bytes_up_per_party,
        "bytes_down_per_party": res.bytes_down_per_party,
        "aggregator_seconds": res.aggregator_seconds,
        "setup_bytes_to_aggregator": res.setup_bytes_to_aggregator,
        "preset": res.preset,
        "included": res.included,
        "keys": res.extra.get("keys", "single"),
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
        keys = ", threshold keys" if out["keys"] == "threshold" else ""
        print(f"secure AUC ({res.security} aggregator{keys}): {res.auc:.10f}")
        if res.decision_mode == "exact":
            print(f"  exact mode: {res.decision_points} refined decision points after "
                  f"{res.rounds} secure rounds; certified |AUC - exact AUC| <= "
                  f"{res.error_bound:.3g} (target {res.target:g}"
                  f"{'' if res.target_reached else ', NOT reached: raise --max-points'})")
        else:
            print(f"  trapezoid ROC-AUC over {res.decision_points} uniform decision points; "
                  f"certified |AUC - exact AUC| <= {res.error_bound:.3g} "
                  "(--decision-points exact to shrink it)")
        print(f"  parties: {res.parties} ({', '.join(res.included)})   preset: {res.preset}")
        if "verified" in out:
            print(f"  verified: {out['verified']}   "
                  f"cheating bound: 2^-{out['cheat_bound_bits']:.1f}")
        print(f"  upload per party: {res.bytes_up_per_party:,} bytes   "
              f"download per party: {res.bytes_down_per_party:,} bytes")
        print(f"  aggregator time: {res.aggregator_seconds:.3f} s   "
              f"key material to aggregator (once): {res.setup_bytes_to_aggregator:,} bytes")
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    """Validate party files locally: no protocol, nothing leaves the machine."""
    from fedsec.auc.common import DEFAULT_MAX_TOTAL_SAMPLES
    from fedsec.data.io import PartyFileError, party_names

    names = args.names if args.names is not None else party_names(args.files)
    if len(names) != len(args.files):
        raise ValueError(f"{len(names)} names (--name) for {len(args.files)} party files; "
                         "give one --name per file, in the same order")
    reports: list[dict[str, Any]] = []
    failed = 0
    for path, name in zip(args.files, names, strict=True):
        ns = argparse.Namespace(**{**vars(args), "files": [path], "names": [name]})
        try:
            (party,) = load_party_files(ns, require_both_classes=False)
        except (PartyFileError, OSError, ValueError) as exc:
            failed += 1
            reports.append({"file": path, "ok": False, "error": str(exc)})
            continue
        info = party.info
        assert info is not None
        pos = party.n_positives
        reports.append({
            "file": path, "ok": True, "name": party.name, "rows": party.n_samples,
            "positives": pos, "negatives": party.n_samples - pos,
            "label_column": info.label_column, "score_column": info.score_column,
            "label_values": info.label_values,
            "score_min": float(party.y_score.min()), "score_max": float(party.y_score.max()),
            "clipped_scores": info.clipped_scores, "encoding": info.encoding,
            "compressed": info.compressed, "delimiter": info.delimiter,
            "ignored_columns": list(info.ignored_columns),
            "notes": _check_notes(party.n_samples, pos, DEFAULT_MAX_TOTAL_SAMPLES),
        })
    fed = _federation_summary(reports, failed, DEFAULT_MAX_TOTAL_SAMPLES)
    if args.json:
        print(json.dumps({"files": reports, "federation": fed,
                          "ok": failed == 0 and fed["ok"]}, indent=2))
    else:
        for r in reports:
            if not r["ok"]:
                print(f"{r['file']}: INVALID")
                print(f"  {r['error']}")
                continue
            print(f"{r['file']}: OK (party name {r['name']})")
            print(f"  rows: {r['rows']}   positives: {r['positives']}   "
                  f"negatives: {r['negatives']}")
            labels = ", ".join(f"{k!r} -> {'positive' if v else 'negative'}"
                               for k, v in r["label_values"].items())
            print(f"  labels (column {r['label_column']!r}): {labels}")
            clip = (f"; {r['clipped_scores']} clipped into [0, 1] (float rounding)"
                    if r["clipped_scores"] else "")
            print(f"  scores (column {r['score_column']!r}): min {r['score_min']:.6g}, "
                  f"max {r['score_max']:.6g}{clip}")
            ignored = ", ".join(repr(c) if c else "(unnamed)" for c in r["ignored_columns"])
            print(f"  file: {r['encoding']}, {r['delimiter']}-delimited"
                  f"{', gzip' if r['compressed'] else ''}"
                  f"{'; ignored columns: ' + ignored if ignored else ''}")
            for note in r["notes"]:
                print(f"  note: {note}")
        print(f"federation{' (valid files only)' if failed else ''}: {fed['parties']} "
              f"{'party' if fed['parties'] == 1 else 'parties'}, "
              f"{fed['samples']:,} samples of the {fed['max_samples']:,} (2^20) the secure "
              f"AUC takes, {fed['positives']:,} positive / {fed['negatives']:,} negative"
              + ("" if fed["checked"] else " (per-file checks only: the federation-level "
                 "checks need two or more party files)"))
        for problem in fed["problems"]:
            print(f"  REFUSED by fedsec auc: {problem}")
        if fed["checked"] and fed["ok"] and not failed:
            print("  OK: fedsec auc accepts these files as one federation")
        if failed:
            print(f"{failed} of {len(reports)} file(s) invalid", file=sys.stderr)
    if failed:
        return 2
    return 0 if fed["ok"] else fed["exit"]


def _federation_summary(reports: list[dict[str, Any]], failed: int, max_total: int
                        ) -> dict[str, Any]:
    """The federation-level checks of ``fedsec auc`` over the valid files: at least two
    parties, at most ``max_total`` samples in all, both classes present. With one file
    (a party checking its own data) only the counts are reported."""
    valid = [r for r in reports if r["ok"]]
    parties = len(reports)
    samples = sum(r["rows"] for r in valid)
    pos = sum(r["positives"] for r in valid)
    problems: list[str] = []
    code = 0
    checked = parties >= 2
    if checked:
        if samples > max_total:
            problems.append(f"the federation holds {samples:,} samples, more than the "
                            f"{max_total:,} (2^20) the secure AUC is sized for; evaluate on "
                            "a random subsample")
            code = 2
        if not failed and (pos == 0 or pos == samples):
            problems.append("the federation holds one class only: the AUC is undefined "
                            "(fedsec auc exits with status 5)")
            code = code or 5
    return {"parties": parties, "valid_files": len(valid), "samples": samples,
            "positives": pos, "negatives": samples - pos, "max_samples": max_total,
            "checked": checked, "problems": problems, "ok": not problems, "exit": code}


def _check_notes(n: int, pos: int, max_total: int) -> list[str]:
    notes = []
    if pos in (0, n):
        notes.append("this party holds one class only: valid, but the federation as a whole "
                     "needs both")
    if n > max_total:
        notes.append(f"more than the {max_total:,} samples the secure AUC is sized for")
    return notes


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
                                scores="probability", target=None, max_points=None,
                                max_rounds=None,
                                masking="single", splits=None, preset=args.preset,
                                json=False, quiet=False, tolerance=None, runs=None,
                                min_bound_bits=None, keys="single")
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

    from fedsec.testing.auc import TamperHarness
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
    """Add the ``auc``, ``check`` and ``demo`` sub-commands."""
    p = sub.add_parser(
        "auc", help="secure federated ROC-AUC over party CSV files (all parties in this "
                    "process)",
        description="Secure federated ROC-AUC (FHAUC: Baykara, Unal and Akgun). One CSV "
                    "file per party. This command plays every party, the key holder and the "
                    "aggregator in one process, for trying things out; a real deployment "
                    "runs one party per machine on Flower (docs/run-across-machines.md). "
                    "The AUC is the trapezoid rule over N uniform decision points, an "
                    "approximation of the exact ROC-AUC that scikit-learn computes on the "
                    "pooled data.")
    add_party_file_options(p)
    p.add_argument("--decision-points", "-N", type=points_arg, default=100,
                   metavar="N|exact",
                   help="number of uniform decision points N (default 100; at most 65536; "
                        "parties on Flower accept at most their policy's max-decision-points, "
                        "8192 by default; more than the preset's slots take several "
                        "ciphertexts), or 'exact': refine "
                        "the points until the certified error bound is at most --target")
    p.add_argument("--scores", type=scores_arg, default="probability",
                   metavar="probability|logit|range:LO:HI",
                   help="how to read the scores: 'probability' for predict_proba (default; "
                        "a float-rounding hair outside [0, 1] is clipped), 'logit' for "
                        "decision_function of linear models and raw logits (sigmoid), "
                        "'range:LO:HI' for scores known to lie in [LO, HI] (affine). Each is "
                        "a public increasing map into [0, 1]; the exact AUC is unchanged")
    p.add_argument("--target", type=arg_type(check_real, "--target", gt=0.0, lt=0.5), default=None,
                   help="exact mode: largest acceptable certified error bound (default 1e-6)")
    p.add_argument("--max-points",
                   type=arg_type(check_int, "--max-points", min_value=INITIAL_POINTS),
                   default=None,
                   help="exact mode: most decision points the refined grid may have "
                        "(default 16384 semi-honest, 2048 malicious)")
    p.add_argument("--max-rounds",
                   type=arg_type(check_int, "--max-rounds", min_value=1, max_value=64),
                   default=None,
                   help="exact mode: most refinement rounds (default as in "
                        "fedsec.auc.exact)")
    p.add_argument("--security", choices=["semi-honest", "malicious"], default="semi-honest",
                   help="threat model of the aggregator (default semi-honest)")
    p.add_argument("--keys", choices=["single", "threshold"], default="single",
                   help="who holds the decryption key: every party the same one (single, "
                        "default) or each party a share of a collective key that exists "
                        "nowhere (threshold; fixed decision points)")
    p.add_argument("--masking", choices=["single", "pair"], default="single",
                   help="semi-honest masking: single mask c (journal version) or the (c, d) "
                        "pair (conference version)")
    p.add_argument("--splits", "-S",
                   type=arg_type(check_int, "--splits", min_value=2, max_value=64), default=None,
                   help="malicious mode: additive shares per statistic (default: smallest "
                        "S meeting the cheating bound)")
    p.add_argument("--tolerance", type=arg_type(check_real, "--tolerance", gt=0.0, lt=0.5),
                   default=None,
                   help="malicious mode: how closely the runs must agree (default 1e-7; "
                        "honest runs agree to ~6e-9 at worst, ~1e-12 from 100 samples; a "
                        "looser tolerance weakens the cheating bound and is refused below "
                        "--min-bound-bits)")
    p.add_argument("--runs", type=arg_type(check_int, "--runs", min_value=2, max_value=MAX_RUNS),
                   default=None,
                   help="malicious mode: independent executions that must agree (2..8, "
                        "default 8; packed into the same ciphertext)")
    p.add_argument("--min-bound-bits", type=arg_type(check_real, "--min-bound-bits", ge=0.0),
                   default=None,
                   help="malicious mode: refuse parameters whose cheating bound, blind-shift "
                        "term included, is weaker than 2^-BITS (default 40)")
    presets = _fhauc_presets()
    p.add_argument("--preset", choices=presets, default=None,
                   help=f"CKKS parameter preset (128-bit secure presets whose prime chain "
                        f"holds FHAUC's masked result). Default: {DEFAULT_PRESET} in "
                        "semi-honest mode (ring 2^13, 4096 slots, fresh scale 2^39, masks at "
                        "a 48-bit prime; ~1e-9 relative precision at 100 samples, ~1e-12 at "
                        f"10^4), {MALICIOUS_PRESET} in malicious mode (ring 2^14)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    p.set_defaults(func=_cmd_auc)

    c = sub.add_parser(
        "check", help="validate party files and their federation locally (counts only, no "
                  "protocol)",
        description="Read party files with the rules and options of 'fedsec auc' and print "
                    "what was read: rows, class counts, how labels were mapped, the score "
                    "range, the encoding and delimiter; then, for two or more files, whether "
                    "'fedsec auc' accepts them as one federation (at most 2^20 samples in "
                    "all, both classes present). Nothing leaves this machine. Exit status 0 "
                    "if every file is valid and the federation is accepted, 2 for an "
                    "invalid file or too many samples, 5 if the federation holds one class "
                    "only.")
    add_party_file_options(c, files_help="party files to check (.csv or .csv.gz)")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.set_defaults(func=_cmd_check)

    d = sub.add_parser("demo", help="secure AUC on a realistic federation (breast cancer)",
                       description="Train a logistic regression on scikit-learn's "
                                   "breast-cancer data, split its test set over hospitals "
                                   "and run both FHAUC modes, then a cheating aggregator.")
    d.add_argument("--hospitals",
                   type=arg_type(check_int, "--hospitals", min_value=2, max_value=50), default=5,
                   help="number of hospitals (parties) (default 5)")
    d.add_argument("--decision-points", "-N",
                   type=arg_type(check_int, "--decision-points", min_value=2, max_value=4096),
                   default=100,
                   help="number of uniform decision points N (default 100)")
    d.add_argument("--preset", choices=presets, default=None,
                   help=f"CKKS parameter preset (default {DEFAULT_PRESET} semi-honest, "
                        f"{MALICIOUS_PRESET} malicious)")
    d.add_argument("--seed", type=arg_type(check_int, "--seed", min_value=0), default=0,
                   help="seed of the data split and the model training (default 0)")
    d.set_defaults(func=_cmd_demo)
