"""Benchmark semi-honest FHAUC (issue 2) against the papers' configuration.

Measures, for parties in {5, 10, 15, 50, 100} at N = 100 decision points and for
N in {25, 50, 100, 1000, 4096} at 15 parties:

* aggregator time: deserialize + compute (``FHAUCAggregator.timing``), median over ``--reps``;
* real bytes: upload per party, download per party, and what the aggregator receives during
  key set-up (its public key material, and everything: hellos + the key holder's offer with
  the sealed boxes it relays).

The same is measured for a **baseline reimplementation of the papers' configuration with our
CKKS layer** (``BaselinePaperFHAUC`` below; not a fedsec API): CKKS_128_N16384_DEPTH4 (ring
2^14, 50-bit scale, depth 4), four ciphertexts per party (T vector, F vector, TP total, FP
total), public-key (non-seeded) encryption as in the papers' OpenFHE code; the aggregator sums
them, computes sum(T*F) with a ciphertext product and a slot sum by rotations, and 2*TP*FP,
then multiplies both by a random mask. Ours and the baseline run alternately within each
repetition (the machine is shared and noisy: medians, side by side).

Fixed seeds for the data (simulated, ``fedsec.data.synthetic.CRITEO_LIKE``); masks and keys
come from the OS as in production. Output: one JSON object per line, then a markdown table.

Usage::

    .venv/bin/python benchmarks/bench_fhauc.py [--reps 5] [--json-out FILE] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedsec.auc.common import local_federation
from fedsec.auc.fhauc import FHAUCAggregator, FHAUCConfig, FHAUCParty
from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.keysetup import KeySetupAggregator, PartyKeys, run_key_setup
from fedsec.crypto.params import DEFAULT_PRESET
from fedsec.data.synthetic import CRITEO_LIKE
from fedsec.errors import ProtocolError
from fedsec.metrics import confusion_counts, trapezoid_auc, trapezoid_terms
from fedsec.protocol import wire

PAPER_PRESET = "CKKS_128_N16384_DEPTH4"
OURS_PRESET = DEFAULT_PRESET
PARTY_SWEEP = (5, 10, 15, 50, 100)
POINT_SWEEP = (25, 50, 100, 1000, 4096)
# Issue 2's figures for the papers' OpenFHE implementation on this machine class (quoted,
# not measured here): aggregator deserialize + compute at 100 parties, N = 100; upload/party.
ISSUE_PAPER_SECONDS = 5.7
ISSUE_PAPER_UPLOAD_BYTES = 6.3e6


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def party_data(n_parties: int, samples: int, seed: int = 2024) -> list[tuple[Any, Any]]:
    """Fixed-seed simulated test sets (criteo-like scores), uneven sizes."""
    g = np.random.default_rng(seed)
    out = []
    for i in range(n_parties):
        n = int(samples * (0.5 + g.random()))
        out.append(CRITEO_LIKE.sample(n, seed=seed * 1000 + i))
    return out


def pooled_auc(data: list[tuple[Any, Any]], n_points: int) -> float:
    y = np.concatenate([d[0] for d in data])
    s = np.concatenate([d[1] for d in data])
    return trapezoid_auc(y, s, n_points)


# ---------------------------------------------------------------------- ours
@dataclass
class OurSetup:
    agg: KeySetupAggregator
    keys: list[PartyKeys]
    setup_bytes_to_aggregator: int  # hellos + offer (public material and relayed boxes)
    public_material_bytes: int


def our_key_setup(n_parties: int) -> OurSetup:
    """The real, signed key set-up (:func:`fedsec.crypto.keysetup.run_key_setup` among
    fresh local identities). ``setup_bytes_to_aggregator`` is the public key material the
    aggregator holds afterwards (the signed hellos and relayed boxes add to it)."""
    names = [f"party-{i}" for i in range(n_parties)]
    identities, roster = local_federation(names)
    agg, keys = run_key_setup(identities, roster,
                              FHAUCConfig.create(2, preset=OURS_PRESET).key_spec())
    return OurSetup(agg, keys, agg.public_bytes_size, agg.public_bytes_size)


class Ours:
    """fedsec's semi-honest FHAUC for one (parties, N) configuration."""

    name = "fedsec FHAUC"

    def __init__(self, setup: OurSetup, data: list[tuple[Any, Any]], n_points: int) -> None:
        self.setup = setup
        self.cfg = FHAUCConfig.create(n_points, preset=OURS_PRESET)
        n = len(data)
        self.roles = [FHAUCParty(y, s, keys=setup.keys[i], config=self.cfg)
                      for i, (y, s) in enumerate(data)]
        t0 = time.perf_counter()
        self.subs = [r.submit() for r in self.roles]
        self.party_submit_s = (time.perf_counter() - t0) / n
        self.names = setup.agg.names[:n]
        self.ref = pooled_auc(data, n_points)

    def aggregate(self) -> tuple[dict[str, float], int]:
        ks = self.setup.agg
        assert ks.context is not None
        agg = FHAUCAggregator(ks.context, self.cfg, names=self.names, session=ks.session)
        response = agg.aggregate(self.subs)
        auc = self.roles[0].finalize(response)
        if abs(auc - self.ref) > 1e-9 * max(self.ref, 1e-3):
            raise AssertionError(f"ours: AUC {auc} differs from the plaintext {self.ref}")
        return dict(agg.timing), len(response)

    def figures(self) -> dict[str, Any]:
        return {"upload_bytes_per_party": max(map(len, self.subs)),
                "ciphertexts_per_party": self.cfg.n_chunks,
                "setup_bytes_to_aggregator": self.setup.setup_bytes_to_aggregator,
                "public_material_bytes": self.setup.public_material_bytes,
                "party_submit_s": self.party_submit_s}


# ---------------------------------------------------------------------- baseline
def cover_rotations(n_points: int) -> list[int]:
    """Rotations 1, 2, 4, ... below the next power of two >= N: after them slot 0 holds the
    sum of slots 0..N-1 (the cheapest correct slot sum; the baseline gets only these keys)."""
    steps, s = [], 1
    while s < n_points:
        steps.append(s)
        s *= 2
    return steps


class BaselinePaperFHAUC:
    """BASELINE REIMPLEMENTATION of the papers' FHAUC configuration with fedsec's CKKS layer,
    for benchmarking only (not a fedsec API, not used by the library).

    Ring 2^14, 50-bit scale, depth 4 (``CKKS_128_N16384_DEPTH4``). Each party sends four
    ciphertexts, public-key encrypted (no seed compression): ``T``, ``F`` (vectors over the
    N points), ``TP`` and ``FP`` totals. The aggregator sums them per kind, computes
    ``num = sum_n T[n]*F[n]`` (ciphertext product, relinearize, rescale, slot sum by
    rotations) and ``den = 2*TP*FP``, multiplies both by a random mask ``c`` and returns two
    ciphertexts. The key holder decrypts ``c*num / (c*den)``.
    """

    name = "baseline (papers' configuration)"
    _keys: dict[tuple[int, ...], CKKSContext] = {}

    def __init__(self, data: list[tuple[Any, Any]], n_points: int) -> None:
        rot = tuple(cover_rotations(n_points))
        if rot not in self._keys:
            self._keys[rot] = CKKSContext.generate(PAPER_PRESET, rotations=rot, relin=True)
        self.holder = self._keys[rot]
        self.public = self.holder.public_bytes()
        self.party_ctx = CKKSContext.from_public_bytes(self.public)  # public-key encryption
        self.n_points = n_points
        t0 = time.perf_counter()
        self.subs = [self.submit(y, s) for y, s in data]
        self.party_submit_s = (time.perf_counter() - t0) / len(data)
        self.ref = pooled_auc(data, n_points)

    def submit(self, y: Any, s: Any) -> bytes:
        tp, fp = confusion_counts(y, s, self.n_points)
        t, f = trapezoid_terms(tp, fp)
        ctx = self.party_ctx
        blobs = [ctx.serialize(ctx.encrypt(v)) for v in
                 (t.astype(float), f.astype(float), [float(tp[-1])], [float(fp[-1])])]
        return wire.encode("baseline/submit", {"n_points": self.n_points}, blobs)

    def aggregate(self) -> tuple[dict[str, float], int]:
        t0 = time.perf_counter()
        ctx = CKKSContext.from_public_bytes(self.public)  # the aggregator's own context
        setup_s = time.perf_counter() - t0  # key loading: set-up, not timed below
        t0 = time.perf_counter()
        groups: list[list[Any]] = [[], [], [], []]
        for raw in self.subs:
            msg = wire.decode(raw, expect="baseline/submit")
            if len(msg.blobs) != 4:
                raise ProtocolError("baseline submission must hold 4 ciphertexts")
            for g, blob in zip(groups, msg.blobs, strict=True):
                g.append(ctx.deserialize(blob, at_top=True))
        t1 = time.perf_counter()
        t_sum, f_sum, tp_sum, fp_sum = (ctx.add_many(g) for g in groups)
        prod = ctx.multiply(t_sum, f_sum)
        for step in cover_rotations(self.n_points):
            prod = ctx.add(prod, ctx.rotate(prod, step))
        den = ctx.multiply(tp_sum, fp_sum)
        c = (1 + secrets.randbelow(1 << 20)) / float(1 << 10)
        num_m = ctx.multiply_const(prod, c, scale=ctx.scale, rescale=True)
        den_m = ctx.multiply_const(den, 2.0 * c, scale=ctx.scale, rescale=True)
        response = wire.encode("baseline/result", {}, [ctx.serialize(num_m),
                                                       ctx.serialize(den_m)])
        t2 = time.perf_counter()
        self.check(response)
        return ({"deserialize_s": t1 - t0, "compute_s": t2 - t1, "total_s": t2 - t0,
                 "key_load_s": setup_s}, len(response))

    def check(self, response: bytes) -> None:
        msg = wire.decode(response, expect="baseline/result")
        h = self.holder
        num = h.decrypt(h.deserialize(msg.blobs[0]))[0].real
        den = h.decrypt(h.deserialize(msg.blobs[1]))[0].real
        if abs(num / den - self.ref) > 1e-6:
            raise AssertionError(f"baseline: AUC {num / den} differs from {self.ref}")

    def figures(self) -> dict[str, Any]:
        return {"upload_bytes_per_party": max(map(len, self.subs)),
                "ciphertexts_per_party": 4,
                "setup_bytes_to_aggregator": len(self.public),
                "public_material_bytes": len(self.public),
                "party_submit_s": self.party_submit_s}


# ---------------------------------------------------------------------- driver
def median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def measure(sweep: str, n_parties: int, n_points: int, setup: OurSetup, reps: int,
            samples: int, baseline: bool) -> list[dict[str, Any]]:
    data = party_data(n_parties, samples)
    impls: list[Any] = [Ours(setup, data, n_points)]
    if baseline:
        impls.append(BaselinePaperFHAUC(data, n_points))
    timings: list[list[dict[str, float]]] = [[] for _ in impls]
    down = [0 for _ in impls]
    for _ in range(reps):
        for k, impl in enumerate(impls):  # alternate: same noise for both
            t, d = impl.aggregate()
            timings[k].append(t)
            down[k] = d
    rows = []
    for impl, ts, d in zip(impls, timings, down, strict=True):
        row = {"sweep": sweep, "impl": impl.name, "parties": n_parties,
               "decision_points": n_points, "reps": reps,
               "aggregator_s": median([t["total_s"] for t in ts]),
               "aggregator_deserialize_s": median([t["deserialize_s"] for t in ts]),
               "aggregator_compute_s": median([t["compute_s"] for t in ts]),
               "aggregator_s_all": [round(t["total_s"], 5) for t in ts],
               "download_bytes_per_party": d, **impl.figures()}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import tenseal

    return {"nproc": os.cpu_count(), "cpu": cpu, "python": platform.python_version(),
            "tenseal": tenseal.__version__, "numpy": np.__version__,
            "platform": platform.platform()}


def fmt_bytes(b: float) -> str:
    return f"{b / 1e6:.2f} MB" if b >= 1e6 else f"{b / 1e3:.1f} kB"


def table(rows: list[dict[str, Any]]) -> str:
    ours = {(r["sweep"], r["parties"], r["decision_points"]): r for r in rows
            if r["impl"] == Ours.name}
    base = {(r["sweep"], r["parties"], r["decision_points"]): r for r in rows
            if r["impl"] != Ours.name}
    head = ("| sweep | parties | N | aggregator ours | aggregator baseline | ratio | "
            "upload/party ours | upload/party baseline | ratio | download/party ours | "
            "download/party baseline | set-up to aggregator ours (public keys) | "
            "set-up to aggregator baseline |")
    lines = [head, "|" + "---|" * 13]
    for key, o in ours.items():
        b = base.get(key)
        cells = [key[0], str(key[1]), str(key[2]), f"{o['aggregator_s'] * 1e3:.0f} ms"]
        if b:
            cells += [f"{b['aggregator_s'] * 1e3:.0f} ms",
                      f"{b['aggregator_s'] / o['aggregator_s']:.1f}×"]
        else:
            cells += ["—", "—"]
        cells.append(fmt_bytes(o["upload_bytes_per_party"]))
        if b:
            cells += [fmt_bytes(b["upload_bytes_per_party"]),
                      f"{b['upload_bytes_per_party'] / o['upload_bytes_per_party']:.1f}×"]
        else:
            cells += ["—", "—"]
        cells.append(fmt_bytes(o["download_bytes_per_party"]))
        cells.append(fmt_bytes(b["download_bytes_per_party"]) if b else "—")
        cells.append(f"{fmt_bytes(o['setup_bytes_to_aggregator'])} "
                     f"({fmt_bytes(o['public_material_bytes'])})")
        cells.append(fmt_bytes(b["setup_bytes_to_aggregator"]) if b else "—")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(rows: list[dict[str, Any]]) -> str:
    def get(impl_is_ours: bool, sweep: str, p: int, n: int) -> dict[str, Any] | None:
        for r in rows:
            if (r["impl"] == Ours.name) == impl_is_ours and r["sweep"] == sweep and \
                    r["parties"] == p and r["decision_points"] == n:
                return r
        return None

    out = []
    o, b = get(True, "parties", 100, 100), get(False, "parties", 100, 100)
    if o:
        line = (f"100 parties, N = 100: ours {o['aggregator_s']:.3f} s aggregator, "
                f"{fmt_bytes(o['upload_bytes_per_party'])} upload/party.")
        if b:
            line += (f" Baseline (measured here) {b['aggregator_s']:.2f} s, "
                     f"{fmt_bytes(b['upload_bytes_per_party'])}: "
                     f"{b['aggregator_s'] / o['aggregator_s']:.1f}× time, "
                     f"{b['upload_bytes_per_party'] / o['upload_bytes_per_party']:.1f}× bytes.")
        line += (f" Issue's OpenFHE figure ({ISSUE_PAPER_SECONDS} s, "
                 f"{ISSUE_PAPER_UPLOAD_BYTES / 1e6:.1f} MB): "
                 f"{ISSUE_PAPER_SECONDS / o['aggregator_s']:.1f}× time, "
                 f"{ISSUE_PAPER_UPLOAD_BYTES / o['upload_bytes_per_party']:.1f}× bytes.")
        out.append(line)
    for impl_is_ours, label in ((True, "ours"), (False, "baseline")):
        hi, lo = get(impl_is_ours, "points", 15, 4096), get(impl_is_ours, "points", 15, 100)
        if hi and lo:
            out.append(f"N = 4096 vs N = 100 at 15 parties, {label}: aggregator "
                       f"{hi['aggregator_s'] / lo['aggregator_s']:.2f}×, upload "
                       f"{hi['upload_bytes_per_party'] / lo['upload_bytes_per_party']:.2f}×, "
                       f"download "
                       f"{hi['download_bytes_per_party'] / lo['download_bytes_per_party']:.2f}×.")
    return "\n".join(out)


def load_floor(reps: int = 40) -> dict[str, Any]:
    """Median time to deserialize one party's submission, ours (one seeded ciphertext,
    default preset) and the baseline's (four public-key ciphertexts, ring 2^14), and the
    best aggregator-time ratio at 100 parties if our computation took no time at all."""
    ours_ctx = CKKSContext.generate(OURS_PRESET, relin=True)
    ours_blob = ours_ctx.encrypt_bytes(np.arange(ours_ctx.slots) * 1.0)
    base_ctx = CKKSContext.from_public_bytes(
        CKKSContext.generate(PAPER_PRESET, relin=True).public_bytes())
    base_blobs = [base_ctx.serialize(base_ctx.encrypt(np.arange(100) * 1.0)),
                  base_ctx.serialize(base_ctx.encrypt(np.arange(100) * 1.0)),
                  base_ctx.serialize(base_ctx.encrypt([1.0])),
                  base_ctx.serialize(base_ctx.encrypt([1.0]))]
    t_ours, t_base = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        ours_ctx.deserialize(ours_blob, at_top=True, scale=ours_ctx.scale)
        t1 = time.perf_counter()
        for b in base_blobs:
            base_ctx.deserialize(b, at_top=True)
        t2 = time.perf_counter()
        t_ours.append(t1 - t0)
        t_base.append(t2 - t1)
    o, b = median(t_ours), median(t_base)
    row = {"sweep": "load-floor", "ours_load_per_party_s": o, "baseline_load_per_party_s": b,
           "max_ratio_at_zero_compute": b / o, "reps": reps}
    print(json.dumps(row), flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5, help="repetitions per point (median)")
    ap.add_argument("--samples", type=int, default=1000,
                    help="mean test samples per party (does not affect the aggregator)")
    ap.add_argument("--no-baseline", action="store_true", help="skip the papers' config")
    ap.add_argument("--quick", action="store_true", help="smoke run: small sweeps, 1 rep")
    ap.add_argument("--json-out", help="also write all rows and the machine to this file")
    ap.add_argument("--parties", help="comma-separated party counts of the parties sweep "
                    "(default 5,10,15,50,100)")
    ap.add_argument("--points", help="comma-separated N of the points sweep at 15 parties "
                    "(default 25,50,100,1000,4096; 'none' skips it)")
    ap.add_argument("--load-floor", action="store_true",
                    help="also measure per-party deserialization, ours vs baseline")
    args = ap.parse_args(argv)
    parties = (5, 15) if args.quick else PARTY_SWEEP
    points = (25, 100, 4096) if args.quick else POINT_SWEEP
    if args.parties:
        parties = tuple(int(x) for x in args.parties.split(","))
    if args.points:
        points = () if args.points == "none" else tuple(int(x) for x in args.points.split(","))
    reps = 1 if args.quick else args.reps
    info = machine()
    print(json.dumps({"machine": info, "reps": reps}), flush=True)
    t_start = time.perf_counter()
    setups: dict[int, OurSetup] = {}
    rows: list[dict[str, Any]] = []
    for p in sorted(set(parties) | ({15} if points else set())):
        log(f"key set-up for {p} parties")
        setups[p] = our_key_setup(p)
    for p in parties:
        log(f"parties sweep: {p} parties, N = 100")
        rows += measure("parties", p, 100, setups[p], reps, args.samples, not args.no_baseline)
    for n in points:
        log(f"points sweep: 15 parties, N = {n}")
        rows += measure("points", 15, n, setups[15], reps, args.samples, not args.no_baseline)
    if args.load_floor:
        floor = load_floor()
        rows.append(floor)
    elapsed = time.perf_counter() - t_start
    print()
    print(table([r for r in rows if r.get("sweep") != "load-floor"]))
    print()
    print(summary([r for r in rows if r.get("sweep") != "load-floor"]))
    if args.load_floor:
        print("Deserializing one party's submission: ours "
              f"{floor['ours_load_per_party_s'] * 1e3:.1f} ms, baseline "
              f"{floor['baseline_load_per_party_s'] * 1e3:.1f} ms: at most "
              f"{floor['max_ratio_at_zero_compute']:.1f}x even if our computation were free.")
    print(f"\n(total benchmark time {elapsed:.0f} s; medians of {reps} repetitions)")
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump({"machine": info, "reps": reps, "rows": rows,
                       "elapsed_s": elapsed}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
