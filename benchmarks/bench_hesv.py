"""HESV and Matrix Squaring next to seed 004 (Zheng et al., PVLDB 2023).

Parts (fixed seeds, preset ``CKKS_128_N4096_DEPTH2_S24``: the authors' ring 2^12):

* ``squaring`` -- Matrix Squaring per sample (server HE work only: products,
  relinearization, rotations, rescale; not encryption) for the seven shapes of seed 004's
  Table 4, "Full" (encrypted x encrypted) and "Half" (encrypted x plaintext), as
  JSON rows ``{shape, method, variant, ms_per_sample, ...}``:

  - ``squaring-per-block``: the paper's layout (one 45x45 square, batch
    ``m = min(d_in, 45)``), each column block rotated-and-summed separately (the authors'
    code);
  - ``squaring``: the same layout in the efficient form (all blocks added, one
    relinearization and one rotate-and-sum);
  - ``squaring-tiled``: our cost-chosen block order with several squares per ciphertext;
  - ``squaring-tiled-packed``: the same with complex packing.

* ``hesv`` -- the whole protocol (key set-up, uploads, Alg. 1-2, SSV/FSV) on the
  BANK-shaped (logistic 2x48, M = 1,980, T = 2) and AGNEWS-shaped (4x300, M = 720,
  T = 10) tasks, n = 5, with and without the linearity shortcut; the error to NSSV.
* ``cnn`` -- the MNIST CNN, per sample per model tested (total time / (models x M)).

Times are **CPU seconds of this process** (``time.process_time``; one thread), so that
they measure one core even on a shared machine; wall-clock times are reported too.

Usage::

    python benchmarks/bench_hesv.py                      # all parts
    python benchmarks/bench_hesv.py --part squaring --repeats 5
    python benchmarks/bench_hesv.py --part hesv --tasks bank

Writes ``benchmarks/results/bench_hesv.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from fedsec.crypto.ckks import CKKSContext  # noqa: E402
from fedsec.crypto.matmul import plan_squaring, squaring_product  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
PRESET = "CKKS_128_N4096_DEPTH2_S24"
SHAPES = [(4, 300), (2, 48), (64, 256), (10, 64), (32, 64), (32, 32), (2, 32)]
#: seed 004 / issue 10: the authors' Matrix Squaring, Full, ms per sample (their code).
PAPER_SQUARING_FULL = {"4x300": 2.27, "2x48": 1.02, "64x256": 15.3, "10x64": 1.16,
                       "32x64": 2.54, "32x32": 1.36, "2x32": 0.195}
#: issue 10: the authors' HESV on this machine class, one core (seconds; CNN ms/sample/model)
PAPER_HESV = {"bank": 100.7, "agnews": 423.0, "mnist_ms_per_sample_model": 75.0}
TASKS = {"bank": {"M": 1980, "T": 2}, "agnews": {"M": 720, "T": 10}}


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _time(fn: Any, repeats: int) -> tuple[float, float]:
    cpu, wall = [], []
    for _ in range(repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return statistics.median(cpu), statistics.median(wall)


def bench_squaring(repeats: int, shapes: list[tuple[int, int]] | None = None, *,
                   half_with_encoding: bool = False) -> list[dict[str, Any]]:
    """Matrix Squaring per sample for each ``(d_out, d_in)`` of ``shapes`` (default:
    :data:`SHAPES`, the paper's Table 4).

    ``Half`` times the product with ``B`` pre-encoded as plaintexts. With
    ``half_with_encoding``, a ``Half+enc`` row also times the encoding of ``B``'s vectors
    (the CKKS encode of :meth:`SquaringPlan.encode_b`'s output) inside the product, as
    Matrix Reducing's ``Half`` row of :func:`bench_secsv.bench_reducing` does.
    """
    rows = []
    rng = np.random.default_rng(0)
    for d_out, d_in in SHAPES if shapes is None else shapes:
        shape = f"{d_out}x{d_in}"
        variants = {
            "squaring-per-block": (plan_squaring(d_out, d_in, 2048, tiled=False), True),
            "squaring": (plan_squaring(d_out, d_in, 2048, tiled=False), False),
            "squaring-tiled": (plan_squaring(d_out, d_in, 2048), False),
            "squaring-tiled-packed": (plan_squaring(d_out, d_in, 2048, packed=True), False),
        }
        for method, (plan, per_block) in variants.items():
            ctx = CKKSContext.generate(PRESET, rotations=plan.rotations(),
                                       conjugate=plan.packed)
            m = min(plan.capacity, d_in) if method.startswith("squaring-per") or \
                method == "squaring" else plan.capacity
            a = rng.uniform(-1, 1, size=(d_out, d_in))
            b = rng.uniform(-1, 1, size=(d_in, m))
            enc_a = [[ctx.encrypt(v) for v in vs] for vs in plan.encode_a(a)]
            bv = plan.encode_b(b)
            enc_b = [ctx.encrypt(v) for v in bv]
            like = enc_a[0][0]
            plain_b = [ctx.encode(v, scale=like.scale, parms_id=like.parms_id()) for v in bv]
            for variant, operands, plain in (("Full", enc_b, False), ("Half", plain_b, True)):
                run = functools.partial(squaring_product, ctx, plan, enc_a, operands,
                                        plain_b=plain, per_block=per_block)
                out = squaring_product(ctx, plan, enc_a, operands, plain_b=plain,
                                       per_block=per_block)
                err = float(np.abs(plan.decode([ctx.decrypt(o) for o in out], m)
                                   - a @ b).max())
                cpu, wall = _time(run, repeats)
                row = {"shape": shape, "method": method, "variant": variant,
                       "ms_per_sample": 1e3 * cpu / m, "wall_ms_per_sample": 1e3 * wall / m,
                       "batch": m, "plan": plan.to_dict(), "max_abs_error": err,
                       "paper_ms_per_sample": PAPER_SQUARING_FULL[shape]
                       if variant == "Full" else None}
                rows.append(row)
                say(f"{shape} {method} {variant}: {row['ms_per_sample']:.4f} ms/sample "
                    f"(batch {m}, err {err:.1e})")
            if half_with_encoding:
                def encode_then_multiply(plan: Any = plan, enc_a: Any = enc_a, bv: Any = bv,
                                         per_block: bool = per_block, like: Any = like,
                                         ctx: Any = ctx) -> Any:
                    pts = [ctx.encode(v, scale=like.scale, parms_id=like.parms_id())
                           for v in bv]
                    return squaring_product(ctx, plan, enc_a, pts, plain_b=True,
                                            per_block=per_block)
                cpu, wall = _time(encode_then_multiply, repeats)
                rows.append({"shape": shape, "method": method, "variant": "Half+enc",
                             "ms_per_sample": 1e3 * cpu / m,
                             "wall_ms_per_sample": 1e3 * wall / m, "batch": m,
                             "plan": plan.to_dict(), "paper_ms_per_sample": None})
    return rows


def _federation(name: str, m: int, rounds: int, seed: int = 0) -> tuple[Any, Any, Any]:
    from fedsec.learning.fedavg import run_fedavg
    from fedsec.learning.tasks import make_task

    task = make_task(name, n_samples=m + 3000, n_test=m, seed=seed)
    fed = task.federate(5, seed=seed)
    record = run_fedavg(task, fed, rounds=rounds, seed=seed)
    return task, fed, record


def bench_hesv(tasks: list[str], shortcut_modes: list[bool]) -> list[dict[str, Any]]:
    from fedsec.shapley.fsv import federated_shapley
    from fedsec.shapley.hesv import hesv_shapley

    rows = []
    for name in tasks:
        size = TASKS[name]
        _, fed, record = _federation(name, size["M"], size["T"])
        sets = [(c.x_test, c.y_test) for c in fed.clients]
        ref = federated_shapley(record, fed.x_test, fed.y_test)
        for shortcut in shortcut_modes:
            c0, w0 = time.process_time(), time.perf_counter()
            res = hesv_shapley(record, sets, linear_shortcut=shortcut, schedule="paper")
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            row = {"task": name, "M": size["M"], "T": size["T"], "n": 5,
                   "linear_shortcut": shortcut, "cpu_seconds": cpu, "wall_seconds": wall,
                   "error_to_nssv": res.error_to(ref), "models_tested": res.models_tested,
                   "paper_hesv_seconds": PAPER_HESV[name],
                   "speedup_vs_paper": PAPER_HESV[name] / cpu,
                   "nssv_seconds": ref.seconds, **res.accounting.to_dict()}
            rows.append(row)
            say(f"{name} shortcut={shortcut}: {cpu:.1f} s CPU ({wall:.1f} s wall), "
                f"error {row['error_to_nssv']:.2e}, {PAPER_HESV[name] / cpu:.1f}x the paper")
    return rows


def bench_cnn(m: int, shortcut_modes: list[bool]) -> list[dict[str, Any]]:
    from fedsec.shapley.fsv import federated_shapley
    from fedsec.shapley.hesv import hesv_shapley

    _, fed, record = _federation("mnist", m, 1)
    sets = [(c.x_test, c.y_test) for c in fed.clients]
    ref = federated_shapley(record, fed.x_test, fed.y_test)
    rows = []
    for shortcut in shortcut_modes:
        c0, w0 = time.process_time(), time.perf_counter()
        res = hesv_shapley(record, sets, linear_shortcut=shortcut, schedule="paper")
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        per = 1e3 * cpu / (res.models_tested * m)
        rows.append({"task": "mnist", "M": m, "T": 1, "n": 5, "linear_shortcut": shortcut,
                     "cpu_seconds": cpu, "wall_seconds": wall,
                     "ms_per_sample_per_model": per,
                     "paper_ms_per_sample_per_model": PAPER_HESV["mnist_ms_per_sample_model"],
                     "error_to_nssv": res.error_to(ref), "models_tested": res.models_tested,
                     **res.accounting.to_dict()})
        say(f"mnist shortcut={shortcut}: {per:.1f} ms per sample per model "
            f"({cpu:.1f} s CPU, {wall:.1f} s wall), error {res.error_to(ref):.2e}")
    return rows


def table(out: dict[str, Any]) -> str:
    lines = []
    if out.get("squaring"):
        lines += ["| shape | variant | paper (authors' code) | per-block | squaring | tiled | "
                  "tiled+packed |", "|---|---|---|---|---|---|---|"]
        by = {(r["shape"], r["variant"], r["method"]): r for r in out["squaring"]}
        for d_out, d_in in SHAPES:
            s = f"{d_out}x{d_in}"
            for v in ("Full", "Half"):
                paper = f"{PAPER_SQUARING_FULL[s]:.3f}" if v == "Full" else "-"
                cells = [f"{by[(s, v, m)]['ms_per_sample']:.4f}" for m in (
                    "squaring-per-block", "squaring", "squaring-tiled", "squaring-tiled-packed")]
                lines.append(f"| {s} | {v} | {paper} | " + " | ".join(cells) + " |")
        lines.append("")
    runs = out.get("hesv", []) + out.get("cnn", [])
    if runs:
        lines += ["| task | M | T | shortcut | CPU s | wall s | paper s | x faster | "
                  "error vs NSSV |", "|---|---|---|---|---|---|---|---|---|"]
        for r in runs:
            if r["task"] == "mnist":
                lines.append(f"| mnist (ms/sample/model) | {r['M']} | 1 | "
                             f"{r['linear_shortcut']} | {r['ms_per_sample_per_model']:.1f} | "
                             f"{r['wall_seconds']:.1f} s | 75 | "
                             f"{75 / r['ms_per_sample_per_model']:.2f} | "
                             f"{r['error_to_nssv']:.2e} |")
            else:
                lines.append(f"| {r['task']} | {r['M']} | {r['T']} | {r['linear_shortcut']} | "
                             f"{r['cpu_seconds']:.1f} | {r['wall_seconds']:.1f} | "
                             f"{r['paper_hesv_seconds']} | {r['speedup_vs_paper']:.1f} | "
                             f"{r['error_to_nssv']:.2e} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", choices=["all", "squaring", "hesv", "cnn"], default="all")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tasks", nargs="+", default=["bank", "agnews"], choices=list(TASKS))
    ap.add_argument("--shortcut", choices=["both", "on", "off"], default="both")
    ap.add_argument("--cnn-samples", type=int, default=100)
    ap.add_argument("--out", default=str(RESULTS / "bench_hesv.json"))
    args = ap.parse_args()
    modes = {"both": [True, False], "on": [True], "off": [False]}[args.shortcut]
    out: dict[str, Any] = {"machine": platform.platform(), "python": platform.python_version(),
                           "preset": PRESET, "load_average": os.getloadavg(),
                           "command": " ".join(sys.argv)}
    if args.part in ("all", "squaring"):
        out["squaring"] = bench_squaring(args.repeats)
    if args.part in ("all", "hesv"):
        out["hesv"] = bench_hesv(args.tasks, modes)
    if args.part in ("all", "cnn"):
        out["cnn"] = bench_cnn(args.cnn_samples, modes)
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    print(table(out))


if __name__ == "__main__":
    main()
