"""Tamper battery: how often each cheating aggregator is caught, and by which check.

Four parts, every attack built from the bytes an aggregator sees (``fedsec.testing.auc``,
``fedsec.testing.keysetup``):

* **AUC level** - each attack in ``ATTACKS`` forges the start message or the answer of a
  fresh evaluation (fresh nonces, masks and shares) of one federation under fixed keys, in
  malicious mode (default keys; keys carrying a rotation by one slot for the two attacks
  that need it) and semi-honest mode. Outcomes, worst over the parties: ``detected`` (all
  raised), ``undefined`` (none accepted, some were told the AUC is undefined), accepted
  within the tolerance, accepted off by more than the tolerance, accepted off by at least
  ``SHIFT_RESOLUTION`` (what the cheating bound speaks of).
* **key set-up** - each attack in ``KEYSETUP_ATTACKS`` against a four-party roster with the
  malicious-mode quorum (the whole roster): ``detected``, ``partial`` (some parties
  finished, consistently), ``completed`` (harmless), ``split`` or ``compromised``.
* **policy** - configurations an aggregator may push (tolerance 0.3, a weak bound,
  4*10**8 decision points), against the default party policy.
* **adaptive** - the adaptive blind shift (many verdicts on one evaluation) against a party
  that verifies once (the rule) and one that verifies any number of answers.

Malicious mode must show no accepted AUC off by ``SHIFT_RESOLUTION`` and no compromised or
split key set-up; semi-honest mode is shown accepting many forgeries (its threat model).

Usage::

    python benchmarks/tamper_battery.py --trials 1000 --sh-trials 100 --keysetup-trials 20

Writes ``benchmarks/results/tamper_battery.{json,md}`` (rewritten after every row).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import sys
import time
from typing import Any

import numpy as np

from fedsec.auc.fhauc_malicious import (
    DEFAULT_RUNS,
    DEFAULT_TOLERANCE,
    SHIFT_RESOLUTION,
    MaliciousConfig,
    MaliciousParty,
)
from fedsec.auc.policy import PartyPolicy
from fedsec.crypto.identity import Identity, Roster
from fedsec.crypto.params import DEFAULT_PRESET
from fedsec.data.datasets import breast_cancer_federation
from fedsec.errors import FedsecError
from fedsec.testing.auc import (
    ATTACKS,
    Observed,
    TamperHarness,
    adaptive_blind_shift,
)
from fedsec.testing.keysetup import KEYSETUP_ATTACKS, run_attack

HERE = os.path.dirname(os.path.abspath(__file__))


class _Out:
    def __init__(self, path: str, meta: dict[str, Any], *, quiet: bool = False) -> None:
        self.path, self.meta, self.rows = path, meta, []  # type: list[dict[str, Any]]
        self.quiet = quiet
        os.makedirs(os.path.dirname(path), exist_ok=True)

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        if not self.quiet:
            print(json.dumps(row), flush=True)
        with open(self.path + ".json", "w") as fh:
            json.dump({"meta": self.meta, "rows": self.rows}, fh, indent=1)


_REASONS = (("only ", "quorum"), ("does not verify", "signature"),
            ("exceeds the limit", "size"), ("malformed", "format"))


def _reason(check: str) -> str:
    """Key set-up refusals raised as ProtocolError, named by their rule."""
    if not check.startswith("ProtocolError"):
        return check
    return "ProtocolError/" + next((r for k, r in _REASONS if k in check), "other")


def _checks(counter: collections.Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counter.most_common())


def auc_rows(out: _Out, args: argparse.Namespace, parties: list[Any], started: float) -> None:
    setups = [("malicious", args.trials, ()), ("malicious", args.trials, (1,)),
              ("semi-honest", args.sh_trials, ())]
    for security, trials, extra in setups:
        harness = TamperHarness(parties, security=security, decision_points=args.points,
                                preset=args.preset, allow_insecure=args.insecure,
                                extra_rotations=extra)
        mode = security + (" (keys with rotation 1)" if extra else "")
        for name, att in ATTACKS.items():
            if args.only and name not in args.only:
                continue
            if not harness.applicable(name):
                continue
            if extra and att.needs_rotation is None:
                continue  # the other attacks are measured on the default keys
            n = trials
            kinds: collections.Counter[str] = collections.Counter()
            checks: collections.Counter[str] = collections.Counter()
            big = 0
            worst = 0.0
            t0 = time.time()
            for i in range(n):
                t = harness.trial(name)
                kinds[t.kind] += 1
                checks.update(t.checks)
                if t.accepted:
                    worst = max(worst, t.error)
                    big += t.error >= SHIFT_RESOLUTION
                if (i + 1) % 100 == 0:
                    print(f"[{time.time() - started:7.0f}s] {mode:<11} {name:<20} "
                          f"{i + 1}/{n} {dict(kinds)}", file=sys.stderr, flush=True)
            out.add({"part": "auc", "security": mode, "attack": name,
                     "description": att.description, "trials": n,
                     "detected": kinds["detected"], "undefined": kinds["undefined"],
                     "accepted_within_tol": kinds["unchanged"],
                     "accepted_beyond_tol": kinds["changed"],
                     "accepted_beyond_resolution": big, "max_accepted_error": worst,
                     "checks": _checks(checks), "tolerance": harness.tolerance,
                     "seconds_per_trial": (time.time() - t0) / max(1, n)})


def keysetup_rows(out: _Out, args: argparse.Namespace, started: float) -> None:
    cfg = MaliciousConfig.create(args.points, preset=args.preset,
                                 allow_insecure=args.insecure)
    spec = cfg.key_spec()
    ids = [Identity(f"hospital-{c}") for c in "abcd"]
    roster = Roster.of(ids)
    for name in KEYSETUP_ATTACKS:
        if args.only and name not in args.only:
            continue
        kinds: collections.Counter[str] = collections.Counter()
        checks: collections.Counter[str] = collections.Counter()
        t0 = time.time()
        desc = ""
        for _ in range(args.keysetup_trials):
            att, res = run_attack(name, ids, roster, spec, min_parties=len(ids))
            desc = att.description
            kinds[res.kind] += 1
            checks.update(_reason(c) for c in res.checks().values())
        print(f"[{time.time() - started:7.0f}s] key set-up {name:<26} {dict(kinds)}",
              file=sys.stderr, flush=True)
        out.add({"part": "keysetup", "security": "malicious quorum (4 of 4)", "attack": name,
                 "description": desc, "trials": args.keysetup_trials,
                 "outcomes": dict(kinds), "checks": _checks(checks),
                 "seconds_per_trial": (time.time() - t0) / max(1, args.keysetup_trials)})


def policy_rows(out: _Out, args: argparse.Namespace) -> None:
    policy = PartyPolicy()
    cases: list[tuple[str, str, Any]] = [
        ("tolerance-0.3", "run config with tolerance 0.3",
         lambda: MaliciousConfig.create(args.points, tolerance=0.3, min_bound_bits=0.0,
                                        preset=args.preset, allow_insecure=args.insecure)),
        ("weak-bound", "run config with S=2, R=2 (bound < 2^-40)",
         lambda: MaliciousConfig.create(args.points, splits=2, runs=2, tolerance=1e-12,
                                        min_bound_bits=0.0, preset=args.preset,
                                        allow_insecure=args.insecure)),
        ("decision-points-4e8", "run config with 4*10**8 decision points",
         lambda: MaliciousConfig.create(4 * 10 ** 8, preset=args.preset,
                                        allow_insecure=args.insecure)),
    ]
    for name, desc, make in cases:
        try:
            policy.check_config(make())
            outcome = "accepted"
        except FedsecError as exc:
            outcome = f"{type(exc).__name__} ({getattr(exc, 'check', '')})"
        except ValueError as exc:
            outcome = f"ValueError at configuration ({str(exc)[:50]})"
        out.add({"part": "policy", "security": "malicious", "attack": name,
                 "description": desc, "trials": 1, "outcome": outcome})


class _VerifiesTwice(MaliciousParty):
    def finalize(self, response: bytes) -> float:
        self._finalized = False
        return super().finalize(response)


def adaptive_rows(out: _Out, args: argparse.Namespace, parties: list[Any],
                  started: float) -> None:
    loose = PartyPolicy(quorum=2, max_tolerance=0.4, min_bound_bits=0.0)
    for tol in args.adaptive_tol:
        h = TamperHarness(parties, security="malicious", decision_points=args.points,
                          preset=args.preset, allow_insecure=args.insecure,
                          policy=loose, tolerance=tol,
                          min_bound_bits=0.0, splits=4)
        for rule in ("one answer per evaluation", "verifies any number (pre-fix)"):
            kinds: collections.Counter[str] = collections.Counter()
            queries = []
            errs = []
            for _ in range(args.adaptive_trials):
                agg, roles = h._aggregator(), h._roles()
                start = agg.start([r.commit() for r in roles])
                subs = [r.submit(start) for r in roles]
                victim = roles[0]
                if rule.startswith("verifies"):
                    v2 = _VerifiesTwice.__new__(_VerifiesTwice)
                    v2.__dict__.update(victim.__dict__)
                    victim = v2

                def accepts(answer: bytes, v: Any = victim) -> bool:
                    try:
                        v.finalize(answer)
                    except FedsecError as exc:
                        if "already verified" in str(exc):
                            raise
                        return False
                    return True

                try:
                    forged, q = adaptive_blind_shift(agg, Observed(list(subs)), accepts,
                                                     -args.adaptive_shift)
                except FedsecError:
                    kinds["stopped at the 2nd verdict"] += 1
                    continue
                queries.append(q)
                got = []
                for r in roles[1:]:
                    try:
                        got.append(r.finalize(forged))
                    except FedsecError:
                        pass
                if got:
                    kinds["accepted by the other parties"] += 1
                    errs.append(max(abs(g - h.truth) for g in got))
                else:
                    kinds["detected"] += 1
            print(f"[{time.time() - started:7.0f}s] adaptive tol={tol:g} {rule}: {dict(kinds)}",
                  file=sys.stderr, flush=True)
            out.add({"part": "adaptive", "security": f"malicious, tolerance {tol:g}",
                     "attack": "adaptive-blind-shift", "description": rule,
                     "trials": args.adaptive_trials, "outcomes": dict(kinds),
                     "median_verdicts": float(np.median(queries)) if queries else 0.0,
                     "median_accepted_error": float(np.median(errs)) if errs else 0.0})


def write_md(out: _Out) -> str:
    m = out.meta
    lines = [f"Federation: {m['federation']}; N = {m['decision_points']}; preset {m['preset']}; "
             f"malicious defaults (R = {DEFAULT_RUNS} runs, tolerance {DEFAULT_TOLERANCE:g}, "
             "S for a 2^-40 bound); "
             f"machine: {m['machine']}. Command: `{m['command']}`", "",
             "AUC level (worst outcome over the parties of each trial; 'res' = "
             f"SHIFT_RESOLUTION {SHIFT_RESOLUTION:g}):", "",
             "| attack | mode | trials | detected | undefined | accepted, within tol | "
             "accepted, > tol | accepted, >= res | checks that fired (party count) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in out.rows:
        if r["part"] == "auc":
            lines.append(f"| {r['attack']}: {r['description']} | {r['security']} | "
                         f"{r['trials']} | {r['detected']} | {r['undefined']} | "
                         f"{r['accepted_within_tol']} | {r['accepted_beyond_tol']} | "
                         f"{r['accepted_beyond_resolution']} | {r['checks']} |")
    lines += ["", "Key set-up (four parties, quorum = whole roster):", "",
              "| attack | trials | outcomes | checks that fired (party count) |",
              "|---|---:|---|---|"]
    for r in out.rows:
        if r["part"] == "keysetup":
            oc = ", ".join(f"{k} {v}" for k, v in r["outcomes"].items())
            lines.append(f"| {r['attack']}: {r['description']} | {r['trials']} | {oc} | "
                         f"{r['checks']} |")
    lines += ["", "Configurations an aggregator pushes, against the default party policy:",
              "", "| attack | outcome |", "|---|---|"]
    for r in out.rows:
        if r["part"] == "policy":
            lines.append(f"| {r['description']} | {r['outcome']} |")
    lines += ["", "Adaptive blind shift (many verdicts on one evaluation, target shift "
              f"{m['adaptive_shift']:g}):", "",
              "| tolerance | party | trials | outcomes | median verdicts used | "
              "median accepted error |", "|---|---|---:|---|---:|---:|"]
    for r in out.rows:
        if r["part"] == "adaptive":
            oc = ", ".join(f"{k} {v}" for k, v in r["outcomes"].items())
            lines.append(f"| {r['security']} | {r['description']} | {r['trials']} | {oc} | "
                         f"{r['median_verdicts']:.0f} | {r['median_accepted_error']:.3g} |")
    text = "\n".join(lines) + "\n"
    with open(out.path + ".md", "w") as fh:
        fh.write(text)
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1000, help="trials per attack, malicious")
    ap.add_argument("--sh-trials", type=int, default=100, help="trials per attack, semi-honest")
    ap.add_argument("--keysetup-trials", type=int, default=20)
    ap.add_argument("--adaptive-trials", type=int, default=5)
    ap.add_argument("--adaptive-tol", type=float, nargs="*", default=[1e-3, 1e-6])
    ap.add_argument("--adaptive-shift", type=float, default=0.05)
    ap.add_argument("--points", type=int, default=100)
    ap.add_argument("--hospitals", type=int, default=3)
    ap.add_argument("--preset", default=DEFAULT_PRESET)
    ap.add_argument("--parts", nargs="*", default=["auc", "keysetup", "policy", "adaptive"])
    ap.add_argument("--only", nargs="*", default=None, help="attack names to run")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "tamper_battery"))
    ap.add_argument("--merge", nargs="*", default=None, metavar="JSON",
                    help="only combine earlier partial outputs (run in parallel) into --out")
    args = ap.parse_args()
    if args.merge:
        parts = [json.load(open(p)) for p in args.merge]
        merged = _Out(args.out, dict(parts[0]["meta"], command=" && ".join(
            p["meta"]["command"] for p in parts)), quiet=True)
        order = {"policy": 0, "keysetup": 1, "adaptive": 2, "auc": 3}
        modes = {"malicious": 0, "malicious (keys with rotation 1)": 1, "semi-honest": 2}
        names = list(ATTACKS)
        rows = [r for p in parts for r in p["rows"]]
        rows.sort(key=lambda r: (order[r["part"]], modes.get(r["security"], 0),
                                 names.index(r["attack"]) if r["attack"] in names else 0))
        for r in rows:
            merged.add(r)
        print(write_md(merged))
        return 0
    args.insecure = args.preset.startswith("INSECURE_TEST_")  # smoke runs only

    fed = breast_cancer_federation(args.hospitals, seed=0)
    parties = fed.pairs()
    meta = {"federation": fed.description, "decision_points": args.points,
            "preset": args.preset, "adaptive_shift": args.adaptive_shift,
            "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared), Python "
                       f"{platform.python_version()}",
            "command": "python " + " ".join(sys.argv)}
    out = _Out(args.out, meta)
    started = time.time()
    if "policy" in args.parts:
        policy_rows(out, args)
    if "keysetup" in args.parts:
        keysetup_rows(out, args, started)
    if "adaptive" in args.parts:
        adaptive_rows(out, args, parties, started)
    if "auc" in args.parts:
        auc_rows(out, args, parties, started)
    print(write_md(out))
    bad = [r for r in out.rows if r["part"] == "auc" and r["security"].startswith("malicious")
           and r["accepted_beyond_resolution"]]
    bad += [r for r in out.rows if r["part"] == "keysetup"
            and ({"split", "compromised"} & set(r["outcomes"]))]
    return 1 if bad else 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
