"""Multiparty (N-out-of-N) CKKS key generation and decryption: rounds, bytes and time.

What a party and the aggregator of shares pay for the collective keys secure AUC needs
(public key, the Galois keys of its rotations and conjugation, the relinearisation key) and
for one collective decryption, at 3, 10 and 100 parties, next to single-key generation.

Every party does the same work, so a party's time is measured on one party (median over
``--repeats``); the aggregator's time is measured on the whole stream of shares, which are
produced party by party (a generator: the aggregator holds one share at a time) and whose
production is not counted in the aggregator's time.

    python benchmarks/bench_multiparty.py [--parties 3 10 100] [--repeats 3] [--preset P]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from fedsec.auc.fhauc import FHAUCConfig  # noqa: E402
from fedsec.crypto import multiparty as M  # noqa: E402
from fedsec.crypto.ckks import CKKSContext  # noqa: E402
from fedsec.crypto.ckks_keys import CKKSKeys  # noqa: E402
from fedsec.crypto.params import get_preset  # noqa: E402
from fedsec.crypto.sealio import galois_element  # noqa: E402


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.process_time()
    out = fn()
    return out, time.process_time() - t0


class _Stream:
    """Shares of ``n`` parties, produced on demand; the time to produce them is kept out
    of the consumer's clock."""

    def __init__(self) -> None:
        self.produce = 0.0

    def make(self, parties: list[M.KeyShare], fn: Callable[[M.KeyShare], bytes]
             ) -> Iterator[bytes]:
        for p in parties:
            t0 = time.process_time()
            share = fn(p)
            self.produce += time.process_time() - t0
            yield share


def run(n_parties: int, repeats: int, preset: str | None = None) -> dict[str, Any]:
    config = FHAUCConfig.create(100) if preset is None else FHAUCConfig.create(100,
                                                                              preset=preset)
    params = get_preset(config.preset)
    rotations = config.rotations()
    nring = params.poly_modulus_degree
    elts = sorted({galois_element(r, nring) for r in rotations} | {2 * nring - 1})
    seed = os.urandom(M.crs_seed_bytes())

    # one party's work (every party does the same), medians over repeats
    per: dict[str, list[float]] = {"pk": [], "galois": [], "relin1": [], "relin2": [],
                                   "decrypt": []}
    sizes: dict[str, int] = {}
    for _ in range(repeats):
        me = M.KeyShare(params)
        pk, t = _timed(lambda me=me: me.public_key_share(seed))
        per["pk"].append(t)
        sizes["pk"] = len(pk)
        gal, t = _timed(lambda me=me: [me.galois_key_share(seed, g) for g in elts])
        per["galois"].append(t)
        sizes["galois"] = sum(len(g) for g in gal)
        (state, r1), t = _timed(lambda me=me: me.relin_round1(seed))
        per["relin1"].append(t)
        sizes["relin1"] = len(r1)
        sum1 = M.aggregate_relin_round1(params, [r1])
        r2, t = _timed(lambda me=me, state=state, sum1=sum1: me.relin_round2(state, sum1))
        per["relin2"].append(t)
        sizes["relin2"] = len(r2)
        sizes["relin_sum1 (received)"] = len(sum1)

    # the aggregator over the whole federation, shares streamed party by party
    parties = [M.KeyShare(params) for _ in range(n_parties)]
    agg: dict[str, float] = {}
    stream = _Stream()
    pk_key, t = _timed(lambda: M.aggregate_public_key(
        params, seed, stream.make(parties, lambda p: p.public_key_share(seed))))
    agg["pk"] = t - stream.produce
    stream = _Stream()
    gk, t = _timed(lambda: M.aggregate_galois_keys(
        params, seed, {g: stream.make(parties, lambda p, g=g: p.galois_key_share(seed, g))
                       for g in elts}))
    agg["galois"] = t - stream.produce
    states: list[Any] = []

    def round1(p: M.KeyShare) -> bytes:
        st, b = p.relin_round1(seed)
        states.append(st)
        return b

    stream = _Stream()
    sum1, t = _timed(lambda: M.aggregate_relin_round1(params, stream.make(parties, round1)))
    agg["relin1"] = t - stream.produce
    stream = _Stream()
    it = iter(states)
    rk, t = _timed(lambda: M.aggregate_relin_key(
        params, sum1, stream.make(parties, lambda p: p.relin_round2(next(it), sum1))))
    agg["relin2"] = t - stream.produce

    ctx = CKKSContext(CKKSKeys(params, public_key=pk_key, relin_keys=rk, galois_keys=gk,
                               rotations=rotations, conjugate=True))
    x = np.linspace(-1, 1, ctx.slots)
    ct = ctx.encrypt(x)
    prod = ctx.multiply(ctx.rotate(ct, rotations[0]), ct)
    want = np.roll(x, -rotations[0]) * x
    k = 20
    dec_share, t = _timed(lambda: parties[0].decryption_share(prod, smudging=k))
    per["decrypt"].append(t)
    sizes["decrypt"] = len(dec_share)
    stream = _Stream()
    vals, t = _timed(lambda: M.combine_decryption(
        ctx, prod, stream.make(parties, lambda p: p.decryption_share(prod, smudging=k))))
    agg["decrypt"] = t - stream.produce
    err = float(np.abs(vals.real - want).max())
    single, t_single = _timed(lambda: CKKSKeys.generate(params, rotations=rotations,
                                                        conjugate=True))
    plain = M.combine_decryption(ctx, prod, [p.decryption_share(prod, smudging=0)
                                             for p in parties])
    err0 = float(np.abs(plain.real - want).max())
    ref = CKKSContext(single)
    ref_ct = ref.encrypt(x)
    ref_err = float(np.abs(ref.decrypt(ref.multiply(ref.rotate(ref_ct, rotations[0]), ref_ct)
                                       ).real - want).max())

    return {
        "parties": n_parties, "preset": params.name, "galois_elements": len(elts),
        "party_cpu_s": {k: statistics.median(v) for k, v in per.items() if v},
        "party_bytes_sent": sizes,
        "party_total_cpu_s": sum(statistics.median(per[k])
                                 for k in ("pk", "galois", "relin1", "relin2")),
        "party_total_bytes_sent": sizes["pk"] + sizes["galois"] + sizes["relin1"]
        + sizes["relin2"],
        "aggregator_cpu_s": agg,
        "single_key_generation_cpu_s": t_single,
        "single_key_public_bytes": len(single.public_bytes()),
        "rounds": {"public key": 1, "Galois keys": 1, "relinearisation key": 2,
                   "decryption": 1},
        "decryption_smudging_bits": k,
        "rotate_multiply_decrypt_max_error": err,
        "same_without_smudging": err0,
        "same_single_key": ref_err,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parties", type=int, nargs="+", default=[3, 10, 100],
                    help="federation sizes")
    ap.add_argument("--repeats", type=int, default=3, help="repeats of one party's work")
    ap.add_argument("--preset", default=None,
                    help="CKKS preset (default: FHAUC's single-key default; threshold "
                         "mode's is CKKS_128_N16384_DEPTH1_S60)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/bench_multiparty.json"),
                    help="where to write the JSON results")
    args = ap.parse_args()
    rows = []
    for n in args.parties:
        row = run(n, args.repeats, args.preset)
        rows.append(row)
        print(json.dumps(row, indent=1), flush=True)
    out = {"command": "python benchmarks/bench_multiparty.py " + " ".join(sys.argv[1:]),
           "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
                      f"Python {platform.python_version()}",
           "load": os.getloadavg(), "rows": rows}
    Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
