"""Secure Priv-PFL (fedsec.pfl.secure): one selection + aggregation round, timed.

For K in {10, 20, 30} clients and three model sizes -- the digits logistic regression
(64*10 + 10 = 650 parameters), the MNIST logistic regression (784*10 + 10 = 7,850) and
the MNIST CNN of ``fedsec.learning.tasks`` (17,298) -- runs :class:`SecurePFLSession`
rounds at the 128-bit preset ``CKKS_128_N32768_DEPTH19`` with ``alpha = 8`` and reports:

* wall time split into upload (clients' encryption), distances (Gram entries, constant-term
  extraction and the decryptor's refresh), comparison (mask removal, the SIMD sign
  evaluation, Algorithm 1's revealed bits) and aggregation (Eq. 2, masks, decryption,
  sealing, clients' decoding) -- every role runs in this one process, one after the other;
* bytes per client (upload, result), bytes the server and the decryptor receive;
* the key set-up: offer size, relinearization and Galois key sizes, set-up time;
* **per-pair vs batched** comparison: batched is measured (one sign evaluation for all
  K (K - 1) margins); per-pair is *computed* as ``pairs_checked x`` the measured time of one
  sign evaluation (a per-pair design evaluates one sign per Ineq. 1 check; SIMD slots make
  each such evaluation cost the same as the batched one).

Models: a shared random direction plus per-client noise (seeded), norm bound B = the median
client norm (about half the clients clip), sigma_i ~ U[0.1, 0.5] (seed 002's range).

Usage::

    flock /tmp/fedsec-bench.lock python benchmarks/bench_ppfl.py            # full
    flock /tmp/fedsec-bench.lock python benchmarks/bench_ppfl.py --ks 30 --models mnist-cnn \
        --alpha 12 --out benchmarks/results/bench_ppfl_a12.json
    flock /tmp/fedsec-bench.lock python benchmarks/bench_ppfl.py --comparison blinded \
        --out benchmarks/results/bench_ppfl_blinded.json
    python benchmarks/bench_ppfl.py --quick   # insecure test preset, K = 4, 6 (smoke)

Writes ``benchmarks/results/bench_ppfl.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from fedsec.crypto.sign import step_encrypted
from fedsec.learning.tasks import task_spec
from fedsec.pfl.balance import personalise
from fedsec.pfl.secure import BLINDED_BAND, SecurePFLConfig, SecurePFLSession, clip_to_norm
from fedsec.pfl.selection import PlaintextOracle, brute_force_selection, ineq1_margin

MODELS = {"digits-logistic": 650, "mnist-logistic": 7850,
          "mnist-cnn": task_spec("mnist").n_params()}


def _models(k: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray, float]:
    rng = np.random.default_rng(seed)
    base = rng.normal(size=d) / np.sqrt(d)
    w = base + 0.2 * rng.normal(size=(k, d)) / np.sqrt(d) * rng.uniform(0.2, 1.5, (k, 1))
    sig = rng.uniform(0.1, 0.5, size=k)
    b = float(np.median(np.linalg.norm(w, axis=1)))
    return w, sig, b


def _sign_seconds(session: SecurePFLSession, repeats: int) -> float:
    """Median time of one homomorphic comparison over all slots (per-pair cost)."""
    srv = session.server
    ctx = session.decryptor._ctx  # noqa: SLF001
    from fedsec.pfl.secure.common import _fresh_level
    level = _fresh_level(session.config.sign_alpha) - 1
    ct = ctx.encrypt(ctx.encode(np.linspace(-0.9, 0.9, ctx.slots),
                                          parms_id=ctx.parms_id_at_level(level)))
    ct = srv._ctx.deserialize(ctx.serialize(ct))  # noqa: SLF001
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step_encrypted(srv._ctx, ct, session.config.sign_alpha, keep_levels=1)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run(ks: list[int], models: dict[str, int], config: SecurePFLConfig, repeats: int,
        seed: int) -> dict[str, Any]:
    out: dict[str, Any] = {"preset": config.preset, "sign_alpha": config.sign_alpha,
                           "comparison": config.comparison,
                           "repeats": repeats, "rows": [], "setup": []}
    for k in ks:
        t0 = time.perf_counter()
        session = SecurePFLSession.create(k, config)
        setup_s = time.perf_counter() - t0
        out["setup"].append({"K": k, "seconds": setup_s, **session.key_setup_bytes})
        print(f"K={k}: key set-up {setup_s:.1f} s {session.key_setup_bytes}", flush=True)
        sign_s = _sign_seconds(session, repeats)
        rnd = 0
        for name, d in models.items():
            w, sig, b = _models(k, d, seed + d + k)
            runs = []
            for _ in range(repeats):
                r = session.run_round(w, sig, alpha=0.5, norm_bound=b, round_index=rnd)
                rnd += 1
                runs.append(r)
                print(f"  {name} d={d}: {r.seconds}", flush=True)
            med = {key: statistics.median(x.seconds[key] for x in runs)
                   for key in runs[0].seconds}
            r = runs[-1]
            # against the plaintext reference on the same clipped models
            wc = np.array([clip_to_norm(x, b) for x in w])
            ref = brute_force_selection(k, PlaintextOracle(wc, sig))
            band = (BLINDED_BAND if config.comparison == "blinded"
                    else 2.0 ** -config.sign_alpha) * r.margin_scale
            near = {(i, j) for i in range(k) for j in range(k)
                    if i != j and abs(ineq1_margin(wc[i], wc[j], sig[i])) < band}
            differ = {(i, j) for i in range(k) for j in range(k) if i != j
                      and (j in r.selection.accepted[i]) != (j in ref.accepted[i])}
            # error of the margins x = m / M as they reach the comparison (all roles are
            # in this process: decrypt the server's unmasked margins with the key)
            xs = np.concatenate([session.decryptor._ctx.decrypt(c).real
                                 for c in session.server._margins])
            x_ref = np.array([ineq1_margin(wc[i], wc[j], sig[i]) for i in range(k)
                              for j in range(k) if i != j]) / r.margin_scale
            margin_err = float(np.abs(xs[:x_ref.size] - x_ref).max())
            exp = np.array([personalise(wc[i], [wc[j] for j in sorted(r.selection.accepted[i])],
                                        0.5) for i in range(k)])
            row = {"K": k, "model": name, "d": d, "seconds": med,
                   "bytes_up_per_client": int(np.median(r.bytes_up)),
                   "bytes_down_per_client": int(np.median(r.bytes_down)),
                   "server_bytes_in": r.server_bytes_in,
                   "decryptor_bytes_in": r.decryptor_bytes_in,
                   "sign_evaluations": r.sign_evaluations, "pairs_checked": r.pairs_checked,
                   "all_pairs": k * (k - 1), "valid": int(r.valid.sum()),
                   "sign_eval_seconds": sign_s,
                   "pairs_near_boundary": len(near), "pairs_differing": len(differ),
                   "pairs_differing_outside_band": len(differ - near),
                   "accepted_pairs": sum(len(x) for x in r.selection.accepted),
                   "eq2_max_abs_error": float(np.abs(r.personalised - exp).max()),
                   "norm_bound": b, "margin_max_abs_error": margin_err,
                   "norm_check_max_error": float(session.decryptor.norm_errors().max()),
                   "per_pair_comparison_seconds_computed": sign_s * r.pairs_checked}
            out["rows"].append(row)
        del session
    return out


def table(res: dict[str, Any]) -> str:
    lines = ["| K | model | d | upload s | distances s | comparison s | aggregation s | "
             "total s | up / client | down / client | server in | decryptor in | "
             "pairs checked / K(K-1) | per-pair comparison s (computed) | accepted | "
             "differ from plaintext (near boundary) | Eq. 2 max err / B | margin err |",
             "|" + "---|" * 19]
    for r in res["rows"]:
        s = r["seconds"]
        lines.append(
            f"| {r['K']} | {r['model']} | {r['d']:,} | {s['upload']:.2f} | "
            f"{s['distances']:.2f} | {s['comparison']:.2f} | {s['aggregation']:.2f} | "
            f"{s['total']:.2f} | {r['bytes_up_per_client'] / 2**20:.2f} MiB | "
            f"{r['bytes_down_per_client'] / 2**20:.2f} MiB | "
            f"{r['server_bytes_in'] / 2**20:.1f} MiB | "
            f"{r['decryptor_bytes_in'] / 2**20:.1f} MiB | "
            f"{r['pairs_checked']} / {r['all_pairs']} | "
            f"{r['per_pair_comparison_seconds_computed']:.0f} | {r['accepted_pairs']} | "
            f"{r['pairs_differing']} ({r['pairs_near_boundary']}) | "
            f"{r['eq2_max_abs_error'] / r['norm_bound']:.1e} | "
            f"{r['margin_max_abs_error']:.1e} |")
    lines += ["", "| K | key set-up s | offer | relin keys | Galois keys (1: conjugation) | "
              "public key to each client |", "|---|---|---|---|---|---|"]
    for s in res["setup"]:
        lines.append(f"| {s['K']} | {s['seconds']:.1f} | {s['offer'] / 2**20:.1f} MiB | "
                     f"{s['relin_keys'] / 2**20:.1f} MiB | {s['galois_keys'] / 2**20:.1f} MiB"
                     f" | {s['client_delivery'] / 2**20:.1f} MiB |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--ks", type=int, nargs="+", default=[10, 20, 30])
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--alpha", type=int, default=8, help="sign precision (8, 10, 12)")
    ap.add_argument("--comparison", default="polynomial", choices=["polynomial", "blinded"])
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "bench_ppfl.json"))
    a = ap.parse_args(argv)
    if a.quick:
        config = SecurePFLConfig(preset="INSECURE_TEST_N4096_DEPTH19", allow_insecure=True,
                                 sign_alpha=a.alpha, comparison=a.comparison)
        ks, repeats = [4, 6], 1
    else:
        config = SecurePFLConfig(sign_alpha=a.alpha, comparison=a.comparison)
        ks, repeats = a.ks, a.repeats
    models = {m: MODELS[m] for m in a.models}
    res = run(ks, models, config, repeats, a.seed)
    res["machine"] = {"platform": platform.platform(), "python": sys.version.split()[0],
                      "cpus": os.cpu_count(), "load": os.getloadavg()}
    res["command"] = " ".join(["python", "benchmarks/bench_ppfl.py", *(argv or sys.argv[1:])])
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    if not a.quick:
        Path(a.out).write_text(json.dumps(res, indent=1))
    print(table(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
