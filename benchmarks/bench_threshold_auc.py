"""Threshold-key secure AUC: the collective key set-up as roles, and one evaluation in
threshold mode next to single-key mode.

Three parts, at each federation size of ``--parties``:

* **set-up**: the collective key set-up played role by role (``fedsec.crypto.collective``);
  per party: rounds, bytes sent and received (counted by the network), CPU seconds (the
  median party); the aggregator's CPU seconds.
* **evaluation**: ``secure_auc(..., keys="single")`` and ``keys="threshold"``, each in both
  security modes, on the same data (``--samples`` per party, 100 decision points),
  interleaved, ``--repeats`` times:
  wall seconds of the whole run and of the evaluation after set-up, bytes per party, the
  error against the plaintext trapezoid.
* **margin**: the aggregate's data-independent noise ``B`` (zero statistics, real collective
  keys, decrypted with the sum of the shares) and the smudging's statistical margin
  ``k - log2 B - log2 n``.

    python benchmarks/bench_threshold_auc.py [--parties 3 10] [--repeats 3] [--samples 100]
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
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from fedsec.auc.common import local_federation  # noqa: E402
from fedsec.auc.fhauc import FHAUCConfig, secure_auc  # noqa: E402
from fedsec.auc.fhauc_threshold import THRESHOLD_PRESET, switch_smudging_bits  # noqa: E402
from fedsec.crypto.collective import (  # noqa: E402
    CollectiveKeyAggregator,
    CollectiveKeyParty,
)
from fedsec.crypto.keysetup import KeySpec, party_role, run_key_setup  # noqa: E402
from fedsec.metrics import trapezoid_auc  # noqa: E402
from fedsec.protocol.network import Network  # noqa: E402
from fedsec.testing.multiparty import aggregate_noise_bits  # noqa: E402

AGG = "aggregator"


def setup(n: int, preset: str) -> dict[str, Any]:
    """The collective set-up role by role, timed per call."""
    names = [f"p{i:03d}" for i in range(n)]
    ids, roster = local_federation(names)
    cfg = FHAUCConfig.create(100, preset=preset)
    net = Network()
    _, result = run_key_setup(ids, roster, KeySpec.create(preset, [], False), network=net)
    before = dict(net.accounting.bytes_by_message)
    parties = [CollectiveKeyParty(i, roster, cfg.key_spec(), k)
               for i, k in zip(ids, result, strict=True)]
    agg = CollectiveKeyAggregator(roster, cfg.key_spec(), names=result[0].names,
                                  result_session=result[0].session)
    roles = [party_role(p.name) for p in parties]
    party_s = [0.0] * n
    agg_s = 0.0

    def each(fn_name: str, inputs: list[bytes] | None) -> list[bytes]:
        out = []
        for i, p in enumerate(parties):
            t0 = time.process_time()
            out.append(getattr(p, fn_name)() if inputs is None
                       else getattr(p, fn_name)(inputs[i]))
            party_s[i] += time.process_time() - t0
        return out

    def agg_call(fn_name: str, msgs: list[bytes]) -> bytes:
        nonlocal agg_s
        t0 = time.process_time()
        out = getattr(agg, fn_name)(msgs)
        agg_s += time.process_time() - t0
        return out

    commits = net.gather(roles, AGG, each("commit", None))
    relayed = net.broadcast(AGG, roles, agg_call("commits", commits))
    reveals = net.gather(roles, AGG, each("reveal", relayed))
    del relayed
    sums = net.broadcast(AGG, roles, agg_call("reveals", reveals))
    del reveals
    relin2 = net.gather(roles, AGG, each("relin", sums))
    del sums
    keys = net.broadcast(AGG, roles, agg_call("relin_keys", relin2))
    del relin2
    checks = net.gather(roles, AGG, each("check", keys))
    del keys
    done = net.broadcast(AGG, roles, agg_call("confirm", checks))
    t0 = time.process_time()
    for i, p in enumerate(parties):
        t0 = time.process_time()
        p.finish(done[i])
        party_s[i] += time.process_time() - t0
    sent = recv = 0
    for (src, dst, kind), b in net.accounting.bytes_by_message.items():
        if not kind.startswith("mpkeys/"):
            continue
        b -= before.get((src, dst, kind), 0)
        if src == roles[0]:
            sent += b
        if dst == roles[0]:
            recv += b
    return {"parties": n, "preset": preset, "party_rounds": 5,
            "party_sent_mb": sent / 1e6, "party_received_mb": recv / 1e6,
            "party_cpu_s_median": statistics.median(party_s),
            "aggregator_cpu_s": agg_s}


def evaluation(n: int, repeats: int, samples: int) -> dict[str, Any]:
    rng = np.random.default_rng(n)
    data = [(rng.integers(0, 2, samples), rng.random(samples)) for _ in range(n)]
    y = np.concatenate([d[0] for d in data])
    s = np.concatenate([d[1] for d in data])
    want = trapezoid_auc(y, s, 100)
    modes = [(k, sec) for sec in ("semi-honest", "malicious") for k in ("single", "threshold")]
    runs: dict[str, list[dict[str, float]]] = {f"{k}/{sec}": [] for k, sec in modes}
    for _ in range(repeats):
        for keys, security in modes:  # interleaved
            mode = f"{keys}/{security}"
            t0 = time.perf_counter()
            r = secure_auc(data, decision_points=100, keys=keys, security=security)
            wall = time.perf_counter() - t0
            runs[mode].append({"wall_s": wall, "evaluation_s": wall - r.setup_seconds,
                               "setup_s": r.setup_seconds,
                               "up_kb": r.bytes_up_per_party / 1e3,
                               "down_kb": r.bytes_down_per_party / 1e3,
                               "rel_error": abs(r.auc - want) / want,
                               "preset": r.preset})
    out: dict[str, Any] = {"parties": n, "samples_per_party": samples}
    for mode, rows in runs.items():
        out[mode] = {k: (statistics.median(r[k] for r in rows) if k != "preset"
                         else rows[0][k]) for k in rows[0]}
        out[mode]["max_rel_error"] = max(r["rel_error"] for r in rows)
    return out


def margin(n: int, preset: str) -> dict[str, Any]:
    from fedsec.crypto.collective import run_collective_key_setup

    names = [f"p{i:03d}" for i in range(n)]
    ids, roster = local_federation(names)
    cfg = FHAUCConfig.create(100, preset=preset)
    _, result = run_key_setup(ids, roster, KeySpec.create(preset, [], False))
    cagg, keys = run_collective_key_setup(ids, roster, cfg.key_spec(), result)
    ctx = cagg.context
    noise_bits = aggregate_noise_bits(ctx, [k.share for k in keys])
    k = switch_smudging_bits(ctx.params, n)
    nring = ctx.params.poly_modulus_degree
    return {"parties": n, "preset": preset, "noise_bits": noise_bits, "smudging_bits": k,
            "margin_bits": k - noise_bits - math.log2(nring)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parties", type=int, nargs="+", default=[3, 10],
                    help="federation sizes")
    ap.add_argument("--repeats", type=int, default=3, help="evaluations per mode")
    ap.add_argument("--samples", type=int, default=100, help="test samples per party")
    ap.add_argument("--preset", default=THRESHOLD_PRESET, help="the collective keys' preset")
    ap.add_argument("--parts", nargs="+", default=["setup", "evaluation", "margin"],
                    choices=["setup", "evaluation", "margin"], help="what to measure")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/bench_threshold_auc.json"),
                    help="where to write the JSON results")
    args = ap.parse_args()
    out: dict[str, Any] = {
        "command": "python benchmarks/bench_threshold_auc.py " + " ".join(sys.argv[1:]),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
                   f"Python {platform.python_version()}",
        "load": os.getloadavg(), "setup": [], "evaluation": [], "margin": []}
    for n in args.parties:
        for part in ("setup", "evaluation", "margin"):
            if part in args.parts:
                row = (setup(n, args.preset) if part == "setup" else
                       evaluation(n, args.repeats, args.samples) if part == "evaluation"
                       else margin(n, args.preset))
                out[part].append(row)
                print(part, json.dumps(row), flush=True)
                Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
