"""SecSV with and without SampleSkip, side by side per task (Zheng et al., Table 2's
SampleSkip speed-ups: BANK 1.7x, AGNEWS 1.7x, CNN 3.7x).

Each task runs SecSV in its fastest default configuration (``schedule="paper"``, the
linearity shortcut; derived decryption for the one-layer models) without SampleSkip and
with it, interleaved (off, on, off, on, ...), and reports medians of CPU
(``time.process_time``) and wall seconds, the speed-up off/on, the share of
(aggregated model, sample) predictions SampleSkip skipped, the decryption requests, and
the per-part time split (:meth:`fedsec.protocol.accounting.Accounting.split`) of the
median run, next to the paper's ratio.

Tasks: BANK-shaped logistic (M = 1,980, T = 2), AGNEWS-shaped logistic (M = 720,
T = 10), and the MNIST CNN (conv 784->256, 256->64, 64->10, x^2) on M = 640 test
samples, valued on the last round of a 50-round training (``--cnn-rounds``; its models
predict well enough for SampleSkip to skip -- after one round almost nothing is
skippable, as the paper's trained models are).

Usage::

    python benchmarks/bench_sampleskip.py --repeats 3
    python benchmarks/bench_sampleskip.py --tasks cnn --repeats 3 --out cnn.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).parent))
import bench_secsv as bench  # noqa: E402
from fedsec.shapley import federated_shapley  # noqa: E402
from fedsec.shapley.secsv import SecSVConfig, secsv_shapley  # noqa: E402

PAPER = {"bank": 1.7, "agnews": 1.7, "cnn": 3.7}


def _record(task: str, m_cnn: int, t_cnn: int) -> tuple[Any, list[Any], Any, Any]:
    if task == "cnn":
        rec, fed, sets = bench._task("mnist", m_cnn, t_cnn)  # noqa: SLF001
        rec = dataclasses.replace(rec, rounds=rec.rounds[-1:])  # the last round
    else:
        m, t = {"bank": (1980, 2), "agnews": (720, 10)}[task]
        rec, fed, sets = bench._task(task, m, t)  # noqa: SLF001
    return rec, sets, fed.x_test, fed.y_test


def _run(rec: Any, sets: list[Any], skip: bool, cfg: SecSVConfig) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # schedule='paper' warns (PrivacyWarning)
        c0, w0 = time.process_time(), time.perf_counter()
        res = secsv_shapley(rec, sets, sample_skip=skip, schedule="paper", config=cfg)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    acc = res.accounting
    assert acc is not None
    reqs: dict[str, int] = {}
    for (snd, _r, kind), count in acc.messages.items():
        if snd == "P" and "decrypt" in kind:
            reqs[kind] = reqs.get(kind, 0) + count
    return {"cpu_seconds": cpu, "wall_seconds": wall, "fsv": [float(v) for v in res.fsv],
            "samples_tested": res.samples_tested, "skipped_share": res.skip.skipped_share,
            "split_seconds": acc.split(), "bytes_total": acc.total_bytes,
            "decrypt_requests": reqs}


#: Where a run's time goes (cumulative seconds under cProfile, one run per mode).
PARTS = {
    "key set-up": ("runner.py", "_key_setup"),
    "model encryption (clients)": ("client.py", "encrypt_model"),
    "models loaded (P, A)": ("server.py", "receive_model"),
    "data shares": ("client.py", "share_data"),
    "A's products": ("auxiliary.py", "products"),
    "P: first layer (cached products, sums)": ("principal.py", "decrypt_all_request"),
    "P: per-coalition requests": ("principal.py", "decrypt_request"),
    "client: per-coalition decryption": ("client.py", "decrypt_layer"),
    "client: derived decryption (all)": ("client.py", "decrypt_all"),
    "  of which: derive 2^k labels": ("client.py", "_derive_labels"),
    "  of which: deal 2^k zero tests": ("sharing.py", "zero_test_deal"),
    "P/A: open 2^k zero tests": ("auxiliary.py", "label_diff_all"),
    "P: compare (all)": ("principal.py", "compare_all"),
    "SampleSkip search (P)": ("utility.py", "find_skippable"),
}


def breakdown(rec: Any, sets: list[Any], skip: bool, cfg: SecSVConfig) -> dict[str, float]:
    """CPU seconds per phase (upload, the full-set evaluations, the aggregated
    coalitions' evaluations, the rest) and cumulative seconds per part (:data:`PARTS`)
    of one run under cProfile (which inflates small calls: read the shares)."""
    import cProfile
    import pstats

    from fedsec.shapley.secsv import runner

    phases = {"upload (encrypt + load models)": 0.0, "evaluate: global + singletons "
              "(all samples)": 0.0, "evaluate: aggregated coalitions (SampleSkip's)": 0.0}
    run_cls = runner._Run  # noqa: SLF001
    orig_eval, orig_up = run_cls.evaluate, run_cls.upload_round

    def evaluate(self: Any, t: int, mask: int, rows: Any) -> Any:
        c0 = time.process_time()
        try:
            return orig_eval(self, t, mask, rows)
        finally:
            key = "evaluate: global + singletons (all samples)" if mask.bit_count() < 2 \
                else "evaluate: aggregated coalitions (SampleSkip's)"
            phases[key] += time.process_time() - c0

    def upload(self: Any, t: int) -> None:
        c0 = time.process_time()
        orig_up(self, t)
        phases["upload (encrypt + load models)"] += time.process_time() - c0

    prof = cProfile.Profile()
    run_cls.evaluate, run_cls.upload_round = evaluate, upload  # type: ignore[method-assign]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            c0 = time.process_time()
            prof.enable()
            secsv_shapley(rec, sets, sample_skip=skip, schedule="paper", config=cfg)
            prof.disable()
            cpu = time.process_time() - c0
    finally:
        run_cls.evaluate, run_cls.upload_round = orig_eval, orig_up  # type: ignore[method-assign]
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    total = max(v[3] for v in stats.values())
    out = {"cpu (profiled run)": cpu, **{f"phase cpu: {k}": v for k, v in phases.items()},
           "phase cpu: set-up and the rest": cpu - sum(phases.values()),
           "total (profiled)": total}
    for part, (fname, func) in PARTS.items():
        out[part] = sum(v[3] for (f, _ln, fn), v in stats.items()
                        if fn == func and f.endswith(fname))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", nargs="+", choices=sorted(PAPER), default=sorted(PAPER),
                    help="tasks to time (default: all three)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="runs per mode, interleaved off/on (default 3)")
    ap.add_argument("--cnn-samples", type=int, default=640,
                    help="test samples M of the CNN task (default 640)")
    ap.add_argument("--cnn-rounds", type=int, default=50,
                    help="FedAvg rounds trained before the CNN's last round is valued "
                         "(default 50)")
    ap.add_argument("--cnn-frac-bits-hidden", type=int, default=10,
                    help="fractional bits of the CNN's hidden-layer inputs (default 10: "
                         "the trained model's layer 3 overflows at 12)")
    ap.add_argument("--breakdown", action="store_true",
                    help="also profile one run per mode: seconds per part of the protocol")
    ap.add_argument("--out", default="", help="write the rows as JSON to this file")
    args = ap.parse_args()
    rows = []
    with threadpool_limits(limits=1):
        for task in args.tasks:
            rec, sets, x, y = _record(task, args.cnn_samples, args.cnn_rounds)
            # the trained CNN's hidden layers need a smaller hidden fixed point
            cfg = SecSVConfig(frac_bits_hidden=args.cnn_frac_bits_hidden) \
                if task == "cnn" else SecSVConfig()
            plain = federated_shapley(rec, x, y, sample_skip=True)
            runs: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
            for _ in range(args.repeats):
                for skip in (False, True):
                    r = _run(rec, sets, skip, cfg)
                    runs[skip].append(r)
                    print(json.dumps({"task": task, "sample_skip": skip,
                                      "cpu_seconds": r["cpu_seconds"],
                                      "wall_seconds": r["wall_seconds"]}), flush=True)
            med = {}
            for skip in (False, True):
                cpus = [r["cpu_seconds"] for r in runs[skip]]
                mid = sorted(runs[skip], key=lambda r: r["cpu_seconds"])[len(cpus) // 2]
                med[skip] = {"median_cpu_seconds": statistics.median(cpus),
                             "median_wall_seconds": statistics.median(
                                 [r["wall_seconds"] for r in runs[skip]]),
                             "cpu_runs": cpus, "median_run": mid}
            on = med[True]["median_run"]
            row = {"task": task, "M": len(y), "T": rec.n_rounds, "n": rec.n_clients,
                   "off": med[False], "on": med[True],
                   "speedup_cpu": med[False]["median_cpu_seconds"]
                   / med[True]["median_cpu_seconds"],
                   "speedup_wall": med[False]["median_wall_seconds"]
                   / med[True]["median_wall_seconds"],
                   "paper_speedup": PAPER[task],
                   "skipped_share": on["skipped_share"],
                   "plain_skipped_share": plain.skip.skipped_share,
                   "samples_tested_on_plain": [on["samples_tested"], plain.samples_tested],
                   "fsv_on_minus_plain_skip": max(abs(a - b) for a, b in zip(
                       on["fsv"], plain.fsv, strict=True))}
            if args.breakdown:
                row["breakdown_off"] = breakdown(rec, sets, False, cfg)
                row["breakdown_on"] = breakdown(rec, sets, True, cfg)
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k not in ("off", "on")}),
                  flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
