"""One homomorphic sign over every slot at the secure ring-2^15 preset, alpha = 8, 10, 12.

For each precision: time of one :func:`fedsec.crypto.sign.sign_encrypted` over all 16,384
slots (median of ``--repeats``), depth used, levels left, ciphertext products, max error
``|F(x) - sign(x)|`` over the slots, count of wrong signs, and the CKKS part of the error
(distance to the floating-point composite polynomial). Inputs: random signs, magnitudes in
``[2^-alpha, 1]`` — half log-uniform, half uniform — with ``+-2^-alpha`` and ``+-1`` in the
first slots (fixed seed; simulated data). The input ciphertext is fresh (top level), the
evaluator is the public-key-only context a server holds. Each repeat times the evaluation
on the full chain and then with ``keep_levels=0`` (input first dropped to exactly the
depth: a result that is only decrypted), interleaved so both see the same machine load.

Wall-clock and CPU time (``time.process_time``; SEAL runs single-threaded here) are both
reported: on a shared machine the CPU time is the one-core figure. Side by side in the same
run: one ciphertext product (multiply + relinearize + rescale) at
the top level, and (``--naive``, alpha 8 only: the naive path needs depth 14) the same
composite polynomial through the pre-existing power-basis ``CKKSContext.polyval``, which
forces scales to match instead of tracking them.

Usage::

    PYTHONPATH=src .venv/bin/python benchmarks/bench_sign.py [--repeats 3] [--naive]
        [--preset CKKS_128_N32768_DEPTH19] [--json benchmarks/results/bench_sign.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from typing import Any

import numpy as np
from numpy.polynomial import chebyshev as C

from fedsec.crypto import sign
from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.params import get_preset


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def inputs(alpha: int, n: int, seed: int) -> np.ndarray:
    g = np.random.default_rng(seed)
    lo = 2.0 ** -alpha
    half = n // 2
    mag = np.concatenate([np.exp(g.uniform(math.log(lo), 0.0, half)),
                          g.uniform(lo, 1.0, n - half)])
    x = mag * g.choice([-1.0, 1.0], n)
    x[:4] = [lo, -lo, 1.0, -1.0]
    return x


class Counting:
    """Counts ciphertext products on a context (wraps ``multiply`` and ``square``)."""

    def __init__(self, ctx: CKKSContext) -> None:
        self.n = 0
        mul, sq = ctx.multiply, ctx.square

        def multiply(*a: Any, **k: Any) -> Any:
            self.n += 1
            return mul(*a, **k)

        def square(*a: Any, **k: Any) -> Any:
            self.n += 1
            return sq(*a, **k)

        ctx.multiply = multiply  # type: ignore[method-assign]
        ctx.square = square  # type: ignore[method-assign]


def naive_composite(ctx: CKKSContext, ct: Any, alpha: int) -> Any:
    """The same composite polynomial through the power-basis ``polyval`` (forced scales)."""
    s = sign.sign_approximation(alpha)
    y = ctx.multiply_const(ct, 1.0 / s.upper, scale=ctx.scale, rescale=True)
    for c in s.stages:
        y = ctx.polyval(y, list(C.cheb2poly(c)))
    return y


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="CKKS_128_N32768_DEPTH19")
    ap.add_argument("--alphas", type=int, nargs="+", default=list(sign.SUPPORTED_ALPHAS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--naive", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    params = get_preset(args.preset, allow_insecure=True)
    t0 = time.perf_counter()
    owner = CKKSContext.generate(params, allow_insecure=True)
    keygen = time.perf_counter() - t0
    server = CKKSContext.from_public_bytes(owner.public_bytes(), allow_insecure=True)
    counter = Counting(server)
    log(f"{params.name}: key generation {keygen:.1f} s, {params.slots} slots")

    x1 = inputs(8, params.slots, 1)
    a, b = server.encrypt(x1), server.encrypt(x1[::-1].copy())
    prod_times, prod_cpu = [], []
    for _ in range(max(5, args.repeats)):
        t, c = time.perf_counter(), time.process_time()
        server.multiply(a, b)
        prod_times.append(time.perf_counter() - t)
        prod_cpu.append(time.process_time() - c)
    top_product = statistics.median(prod_times)
    top_product_cpu = statistics.median(prod_cpu)
    log(f"one top-level product: {top_product:.3f} s (CPU {top_product_cpu:.3f} s)")

    rows: list[dict[str, Any]] = []
    for alpha in args.alphas:
        x = inputs(alpha, params.slots, 100 + alpha)
        ct = server.deserialize(owner.encrypt_bytes(x))
        times, times0, cpu, cpu0 = [], [], [], []
        out = out0 = None
        for _ in range(args.repeats):  # interleaved: full chain, then dropped to the depth
            counter.n = 0
            t, c = time.perf_counter(), time.process_time()
            out = sign.sign_encrypted(server, ct, alpha)
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
            products = counter.n
            t, c = time.perf_counter(), time.process_time()
            out0 = sign.sign_encrypted(server, ct, alpha, keep_levels=0)
            times0.append(time.perf_counter() - t)
            cpu0.append(time.process_time() - c)
        assert out is not None and out0 is not None
        v = owner.decrypt(out).real
        v0 = owner.decrypt(out0).real
        ref = sign.sign_plain(x, alpha)
        row = {
            "alpha": alpha,
            "degrees": list(sign.SIGN_DEGREES[alpha]),
            "seconds_median": statistics.median(times),
            "seconds_all": times,
            "cpu_seconds_median": statistics.median(cpu),
            "cpu_seconds_keep0_median": statistics.median(cpu0),
            "seconds_keep0_median": statistics.median(times0),
            "seconds_keep0_all": times0,
            "speedup_keep0": statistics.median(t1 / t0 for t1, t0 in zip(times, times0,
                                                                           strict=True)),
            "keep0_max_error": float(np.max(np.abs(v0 - np.sign(x)))),
            "keep0_wrong_signs": int(np.count_nonzero(np.sign(v0) != np.sign(x))),
            "depth": server.level_of(ct) - server.level_of(out),
            "levels_left": server.level_of(out),
            "products": products,
            "max_error": float(np.max(np.abs(v - np.sign(x)))),
            "bound_plain": sign.sign_error_bound(alpha),
            "target_2^(1-alpha)": 2.0 ** (1 - alpha),
            "wrong_signs": int(np.count_nonzero(np.sign(v) != np.sign(x))),
            "max_ckks_noise": float(np.max(np.abs(v - ref))),
            "slots": params.slots,
        }
        rows.append(row)
        log(json.dumps(row))

    naive = None
    if args.naive and 8 in args.alphas:
        x = inputs(8, params.slots, 108)
        ct = server.deserialize(owner.encrypt_bytes(x))
        t = time.perf_counter()
        try:
            out = naive_composite(server, ct, 8)
            v = owner.decrypt(out).real
            naive = {"alpha": 8, "seconds": time.perf_counter() - t,
                     "depth": server.level_of(ct) - server.level_of(out),
                     "max_error": float(np.max(np.abs(v - np.sign(x)))),
                     "wrong_signs": int(np.count_nonzero(np.sign(v) != np.sign(x)))}
        except Exception as exc:  # report how it fails, e.g. a scale SEAL refuses
            naive = {"alpha": 8, "error": f"{type(exc).__name__}: {exc}"}
        log(json.dumps(naive))

    result = {"preset": params.name, "poly_modulus_degree": params.poly_modulus_degree,
              "keygen_seconds": keygen, "top_product_seconds": top_product,
              "top_product_cpu_seconds": top_product_cpu,
              "repeats": args.repeats, "rows": rows, "naive_polyval": naive,
              "machine": platform.platform(), "python": platform.python_version(),
              "load_average_at_end": list(os.getloadavg())}
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    print()
    print("| alpha | degrees | depth | levels left | products | wall (CPU), median "
          "| keep_levels=0: wall (CPU) | max error | plain bound | 2^(1-alpha) | wrong signs "
          "| CKKS noise |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['alpha']} | {{{','.join(map(str, r['degrees']))}}} | {r['depth']} "
              f"| {r['levels_left']} | {r['products']} | {r['seconds_median']:.2f} s "
              f"({r['cpu_seconds_median']:.2f} s) | {r['seconds_keep0_median']:.2f} s "
              f"({r['cpu_seconds_keep0_median']:.2f} s) "
              f"| {r['max_error']:.3e} | {r['bound_plain']:.3e} | {r['target_2^(1-alpha)']:.3e} "
              f"| {r['wrong_signs']} / {r['slots']} | {r['max_ckks_noise']:.1e} |")


if __name__ == "__main__":
    main()
