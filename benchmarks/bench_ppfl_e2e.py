"""Encrypted BALANCE (Priv-PFL, seed 002) end to end against plaintext BALANCE, per attack.

For no attack and each chosen attack, trains server-assisted BALANCE with the encrypted
selection and aggregation of :mod:`fedsec.pfl.secure` (one key set-up shared by all runs)
and, with the same seeds and the same public norm clipping, the plaintext BALANCE
(:func:`fedsec.pfl.secure_sim.run_secure_pfl` with ``compare=True``). Reports per attack:

* agreement: ordered pairs compared over all rounds, pairs decided differently from the
  exact plaintext Algorithm 1 on the same uploads, how many of those lie within
  ``2^-alpha`` of the boundary (relative to the comparison's scale), how many outside
  (must be 0), clients whose validity differs from the norm rule, the largest Eq. 2 CKKS
  error;
* benign clients' final mean / worst accuracy, encrypted vs plaintext, and the share of
  (benign, malicious) pairs accepted in the last round;
* per-round protocol time (median over rounds: distances, comparison, aggregation, total),
  bytes each client sends / receives per round, bytes the server receives; key set-up time
  and bytes.

Usage::

    python benchmarks/bench_ppfl_e2e.py                      # see BENCHMARKS.md for sizes
    python benchmarks/bench_ppfl_e2e.py --quick              # smoke run, insecure preset

Writes ``benchmarks/results/<name>.json`` and ``<name>.md`` (``--name``, default
``bench_ppfl_e2e``; not with ``--quick``) and prints the Markdown.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from fedsec.learning.tasks import make_task
from fedsec.pfl.balance import BalanceConfig
from fedsec.pfl.secure import SecurePFLConfig, SecurePFLSession
from fedsec.pfl.secure_sim import SecurePFLRun, attacker_roles, run_secure_pfl

RESULTS = Path(__file__).resolve().parent / "results"
ATTACKS = ("none", "gaussian", "sign-flip", "alie", "balance-edge", "ipm", "label-flip",
           "min-max")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _median(rows: list[dict[str, float]], key: str) -> float:
    vals = [float(r[key]) for r in rows if key in r]
    return statistics.median(vals) if vals else float("nan")


def row(r: SecurePFLRun) -> dict[str, Any]:
    ag = r.agreement_totals()
    acc = r.accuracy_comparison()
    assert ag is not None and acc is not None and r.plaintext is not None
    secs = [d.seconds for d in r.details]
    by = r.bytes_per_client()
    return {
        "attack": r.run.attack, "agreement": ag, "accuracy": acc,
        "malicious_accepted_secure": r.run.malicious_accepted_share(),
        "malicious_accepted_plaintext": r.plaintext.malicious_accepted_share(),
        "invalid": sorted({i for d in r.details for i in d.invalid}),
        "round_seconds": {k: _median(secs, k) for k in
                          ("distances", "comparison", "aggregation", "total")},
        "all_round_seconds": secs,
        "bytes_per_client": by,
        "checks": [d.checks for d in r.details],
        "sign_evaluations": [d.sign_evaluations for d in r.details],
        "norm_bounds": [d.norm_bound for d in r.details],
        "secure_mean_per_round": [r.run.benign_mean(t) for t in range(len(r.run.accuracy))],
        "plaintext_mean_per_round": [r.plaintext.benign_mean(t)
                                     for t in range(len(r.plaintext.accuracy))],
        "wall_seconds": r.run.seconds,
    }


def _pct(v: float) -> str:
    return "—" if v != v else f"{100 * v:.0f} %"


def markdown(res: dict[str, Any]) -> str:
    c = res["config"]
    lines = [
        f"`{c['task']}` ({c['model']}, {c['params']:,} parameters), K = {c['clients']}, "
        f"{c['malicious']} malicious, T = {c['rounds']} rounds, Dirichlet({c['alpha']}), "
        f"seed {c['seed']}; {c['preset']}, sign alpha = {c['sign_alpha']}; norm bound "
        f"{c['norm_factor']} x median of the published norms"
        + ("; attackers unclipped" if c["unclipped_attackers"] else "") + ".",
        "",
        "| attack | pairs | differ | within 2^-α | outside | Eq. 2 max error | "
        "secure mean / worst | plaintext mean / worst | mal. accepted (secure / plain) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in res["rows"]:
        ag, acc = r["agreement"], r["accuracy"]
        lines.append(
            f"| {r['attack']} | {ag['pairs']} | {ag['differing']} | {ag['in_band']} | "
            f"{ag['outside_band']} | {ag['eq2_noise']:.1e} | {acc['secure_mean']:.3f} / "
            f"{acc['secure_worst']:.3f} | {acc['plaintext_mean']:.3f} / "
            f"{acc['plaintext_worst']:.3f} | {_pct(r['malicious_accepted_secure'])} / "
            f"{_pct(r['malicious_accepted_plaintext'])} |")
    lines += ["", "Per round (median over the rounds of each run), seconds and bytes:", "",
              "| attack | distances | comparison | aggregation | total | Algorithm 1 checks "
              "(mean) | up / client | down / client | server in |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in res["rows"]:
        s, b = r["round_seconds"], r["bytes_per_client"]
        lines.append(
            f"| {r['attack']} | {s['distances']:.1f} | {s['comparison']:.1f} | "
            f"{s['aggregation']:.1f} | {s['total']:.1f} | "
            f"{statistics.fmean(r['checks']):.0f} | {b['up'] / 1e6:.2f} MB | "
            f"{b['down'] / 1e6:.2f} MB | {b['server_in'] / 1e6:.1f} MB |")
    ks = res["key_setup"]
    lines += ["", f"Key set-up (once, shared by all runs): {ks['seconds']:.1f} s; "
              + ", ".join(f"{k} {v}" if "count" in k else f"{k} {v / 1e6:.1f} MB"
                          for k, v in ks["bytes"].items()) + ".",
              "", f"Machine: {res['machine']}; peak RSS {res['max_rss_mb']:.0f} MB; wall time "
              f"{res['seconds'] / 60:.1f} min."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: insecure test preset, 6 clients, 2 rounds, 3 attacks")
    ap.add_argument("--task", default="dnn")
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--samples", type=int, default=None)
    ap.add_argument("--clients", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--malicious", type=float, default=0.2)
    ap.add_argument("--alpha", type=float, default=0.5, help="Dirichlet concentration")
    ap.add_argument("--attacks", default=",".join(ATTACKS[:5]))
    ap.add_argument("--preset", default="CKKS_128_N32768_DEPTH19")
    ap.add_argument("--sign-alpha", type=int, default=8)
    ap.add_argument("--norm-factor", type=float, default=1.25)
    ap.add_argument("--unclipped-attackers", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--name", default="bench_ppfl_e2e",
                    help="stem of the result files (default bench_ppfl_e2e)")
    args = ap.parse_args()
    start = time.perf_counter()
    attacks = [a.strip() for a in args.attacks.split(",") if a.strip()]
    preset, insecure = args.preset, False
    if args.quick:
        args.clients, args.rounds, args.samples = 6, 2, args.samples or 400
        args.task, args.layers = "bank", 1
        attacks = ["none", "gaussian", "balance-edge"]
        preset, insecure = "INSECURE_TEST_N4096_DEPTH16", True
    task = make_task(args.task, layers=args.layers, n_samples=args.samples, seed=args.seed)
    fed = task.federate(args.clients, alpha=args.alpha, seed=args.seed)
    cfg = SecurePFLConfig(preset=preset, sign_alpha=args.sign_alpha, allow_insecure=insecure)
    log(f"key set-up: {args.clients} clients, {preset}")
    t0 = time.perf_counter()
    session = SecurePFLSession.create(args.clients, cfg, clients=attacker_roles(
        args.clients, args.malicious, args.seed,
        unclipped_attackers=bool(args.unclipped_attackers)))
    setup_s = time.perf_counter() - t0
    log(f"key set-up done: {setup_s:.1f}s")
    rows = []
    key_bytes: dict[str, int] = {}
    malicious = 0
    next_round = 0
    for attack in attacks:
        r = run_secure_pfl(task, fed, rounds=args.rounds,
                           attack=None if attack == "none" else attack,
                           malicious=args.malicious, balance=BalanceConfig(), config=cfg,
                           norm_factor=args.norm_factor,
                           unclipped_attackers=args.unclipped_attackers, seed=args.seed,
                           session=session, first_round=next_round,
                           progress=lambda m: log(f"  {m}"))
        next_round = r.next_round
        key_bytes = key_bytes or r.key_setup_bytes
        malicious = len(r.run.malicious)
        rows.append(row(r))
        ag = rows[-1]["agreement"]
        log(f"{attack}: {ag['differing']} differing ({ag['in_band']} in band, "
            f"{ag['outside_band']} outside); secure {rows[-1]['accuracy']['secure_mean']:.3f}"
            f" plaintext {rows[-1]['accuracy']['plaintext_mean']:.3f}")
    res = {
        "config": {"task": args.task, "layers": args.layers, "model": task.spec.description,
                   "params": task.spec.n_params(), "samples": args.samples,
                   "clients": args.clients, "malicious": malicious,
                   "malicious_share": args.malicious, "rounds": args.rounds,
                   "alpha": args.alpha, "seed": args.seed, "preset": preset,
                   "sign_alpha": args.sign_alpha, "norm_factor": args.norm_factor,
                   "unclipped_attackers": args.unclipped_attackers,
                   "balance": BalanceConfig().to_dict()},
        "key_setup": {"seconds": setup_s, "bytes": key_bytes},
        "rows": rows,
        "machine": f"{platform.machine()}, {platform.python_version()}, "
                   f"{platform.processor() or 'cpu'}",
        "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "seconds": time.perf_counter() - start,
    }
    md = markdown(res)
    if not args.quick:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{args.name}.json").write_text(json.dumps(res, indent=1))
        (args.out / f"{args.name}.md").write_text(md + "\n")
    print(json.dumps({k: res[k] for k in ("config", "seconds")}))
    print(md)


if __name__ == "__main__":
    main()
