"""Where the FHAUC aggregator's time goes, and how long it takes, at 100 parties, N = 100.

Two modes, both for the semi-honest aggregator (default preset) and the malicious one
(its default preset and S), on fixed-seed data:

* ``profile``: cProfile over ``--reps`` calls of ``aggregate`` (after one warm-up call),
  the time split into SEAL's own load, zstd inflation, the scan for nested headers, the
  file SEAL reads from, adding the submissions, wire decoding, the computation (squares,
  rotations, masking, serializing the result) and the rest;
* ``time``: ``--reps`` calls of ``aggregate`` alternating with the SEAL rebuild of the
  papers' layout (``BaselinePaperFHAUC`` in ``bench_fhauc.py``) and the malicious
  aggregator; wall and CPU time per call, medians. One JSON line per mode.

The script uses only APIs that older fedsec trees have too, so the same file times an
earlier tree (``PYTHONPATH=<old tree>/src``) for a before/after comparison; run the two
trees alternately (``--label`` names each run).

Usage::

    python benchmarks/bench_agg_load.py time --reps 5 --label after
    python benchmarks/bench_agg_load.py profile --reps 3
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_fhauc as bf  # noqa: E402
from fedsec.auc.common import local_federation  # noqa: E402
from fedsec.auc.fhauc import FHAUCAggregator  # noqa: E402
from fedsec.auc.fhauc_malicious import (  # noqa: E402
    MaliciousAggregator,
    MaliciousConfig,
    MaliciousParty,
)
from fedsec.auc.policy import IN_PROCESS_MAX_KEY_BYTES, PartyPolicy  # noqa: E402
from fedsec.crypto.keysetup import run_key_setup  # noqa: E402
from fedsec.crypto.params import default_preset  # noqa: E402

PARTIES = 100
POINTS = 100


class SemiHonest:
    def __init__(self, setup: bf.OurSetup, data: list[Any]) -> None:
        self.ours = bf.Ours(setup, data, POINTS)
        self.ks = setup.agg

    def aggregate(self) -> dict[str, float]:
        agg = FHAUCAggregator(self.ks.context, self.ours.cfg, names=self.ours.names,
                              session=self.ks.session)
        agg.aggregate(self.ours.subs)
        return dict(agg.timing)


class Malicious:
    def __init__(self, data: list[Any]) -> None:
        cfg = MaliciousConfig.create(POINTS, preset=default_preset("malicious"))
        names = [f"party-{i}" for i in range(len(data))]
        ids, roster = local_federation(names)
        ks, keys = run_key_setup(ids, roster, cfg.key_spec())
        pol = PartyPolicy(presets=(cfg.preset,), max_key_bytes=IN_PROCESS_MAX_KEY_BYTES,
                          min_decision_points=POINTS)
        roles = [MaliciousParty(y, s, keys=k, config=cfg, identity=i, roster=roster,
                                policy=pol) for (y, s), k, i in zip(data, keys, ids,
                                                                     strict=True)]
        assert ks.context is not None
        self.make = lambda: MaliciousAggregator(ks.context, cfg, names=ks.names,
                                                session=ks.session, roster=roster)
        agg = self.make()
        start = agg.start([r.commit() for r in roles])
        self.subs = [r.submit(start) for r in roles]
        self.agg = agg
        self.splits = cfg.splits

    def aggregate(self) -> dict[str, float]:
        self.agg.aggregate(self.subs)
        return dict(self.agg.timing)


def timed(fn: Any) -> dict[str, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    extra = fn() or {}
    return {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
            **{k: v for k, v in extra.items() if isinstance(v, float)}}


def med(rows: list[dict[str, float]], key: str) -> float:
    return float(statistics.median(r[key] for r in rows))


# ---------------------------------------------------------------------- profile
def categorize(stats: pstats.Stats, total: float) -> dict[str, float]:
    """Seconds by kind of work (cProfile's view: built-ins by their own time, wire
    decoding and the computation by their cumulative time)."""
    out = {k: 0.0 for k in ("SEAL load", "zstd inflation", "nested-header scan",
                            "file for SEAL (temp file / memfd)", "adding submissions",
                            "wire decode", "computation (square, rotations, mask, "
                            "serialize)")}
    cum: dict[str, float] = {}
    for (fname, _line, func), (_cc, _nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if "_sealapi_cpp.load" in func:
            out["SEAL load"] += tt
        elif fname.endswith("sealio.py") and func in ("plain_seal_bytes", "_inflate_into",
                                                      "_inflated_size", "_outer_header"):
            out["zstd inflation"] += tt
        elif func in ("<method 'find' of 'bytes' objects>",
                      "<method 'find' of 'mmap.mmap' objects>") or \
                func in ("_ciphertext_nested_headers", "_nested_header_at"):
            out["nested-header scan"] += tt
        elif "tempfile.py" in fname or func in (
                "<built-in method posix.unlink>", "<built-in method posix.open>",
                "<built-in method io.open>", "<method 'write' of '_io.BufferedWriter' "
                "objects>", "<method 'close' of '_io.BufferedWriter' objects>",
                "<built-in method posix.ftruncate>", "<built-in method posix.close>",
                "<built-in method posix.fstat>", "<method '__exit__' of "
                "'_io._IOBase' objects>", "<built-in method posix.fdopen>") or \
                (fname.endswith("sealio.py") and func in ("load", "buffer", "_scratch",
                                                          "_load_via_tempfile")):
            out["file for SEAL (temp file / memfd)"] += tt
        elif "_sealapi_cpp.add_many" in func or "_sealapi_cpp.add_inplace" in func:
            out["adding submissions"] += tt
        if fname.endswith("wire.py") and func == "decode":
            cum["wire"] = cum.get("wire", 0.0) + ct
        if func in ("combine", "mask") and "fhauc" in fname:
            cum["compute"] = cum.get("compute", 0.0) + ct
        if "_sealapi_cpp.save" in func:
            cum["compute"] = cum.get("compute", 0.0) + ct
    out["wire decode"] = cum.get("wire", 0.0)
    out["computation (square, rotations, mask, serialize)"] = cum.get("compute", 0.0)
    out["other"] = total - sum(out.values())
    return out


def profile(impl: Any, reps: int) -> tuple[float, dict[str, float], str]:
    impl.aggregate()  # warm-up
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(reps):
        impl.aggregate()
    pr.disable()
    st = pstats.Stats(pr)
    total = sum(tt for (_cc, _nc, tt, _ct, _c) in st.stats.values())  # type: ignore[attr-defined]
    cats = {k: v / reps for k, v in categorize(st, total).items()}
    top = []
    for key in sorted(st.stats, key=lambda k: -st.stats[k][2])[:12]:  # type: ignore[attr-defined]
        tt = st.stats[key][2] / reps  # type: ignore[attr-defined]
        top.append(f"{tt * 1e3:7.1f} ms  {Path(key[0]).name}:{key[2]}")
    return total / reps, cats, "\n".join(top)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=("profile", "time"), help="what to measure")
    ap.add_argument("--reps", type=int, default=5, help="aggregate calls per measurement")
    ap.add_argument("--label", default="", help="a name for this run in the JSON output")
    ap.add_argument("--no-malicious", action="store_true", help="semi-honest only")
    args = ap.parse_args(argv)
    data = bf.party_data(PARTIES, 1000)
    semi = SemiHonest(bf.our_key_setup(PARTIES), data)
    impls: dict[str, Any] = {"semi-honest": semi}
    if args.mode == "time":
        base = bf.BaselinePaperFHAUC(data, POINTS)
        impls["baseline (papers' layout, SEAL)"] = type(
            "B", (), {"aggregate": lambda self: base.aggregate()[0]})()
    if not args.no_malicious:
        impls["malicious"] = Malicious(data)
    if args.mode == "profile":
        for name, impl in impls.items():
            per_call, cats, top = profile(impl, args.reps)
            print(json.dumps({"label": args.label, "mode": "profile", "impl": name,
                              "profiled_s_per_call": per_call,
                              "categories_s": cats}), flush=True)
            print(f"# {name}: {per_call * 1e3:.1f} ms per call under cProfile", flush=True)
            for k, v in cats.items():
                print(f"#   {k:52s} {v * 1e3:7.1f} ms  {100 * v / per_call:5.1f} %")
            print("# top functions by own time:\n" + "\n".join("#   " + t for t in
                                                            top.splitlines()), flush=True)
        return 0
    for impl in impls.values():
        impl.aggregate()  # warm-up
    rows: dict[str, list[dict[str, float]]] = {k: [] for k in impls}
    for _ in range(args.reps):
        for name, impl in impls.items():  # alternate: the same noise for each
            rows[name].append(timed(impl.aggregate))
    for name, rs in rows.items():
        print(json.dumps({"label": args.label, "mode": "time", "impl": name,
                          "reps": args.reps, "wall_s": med(rs, "wall_s"),
                          "cpu_s": med(rs, "cpu_s"),
                          "deserialize_s": med(rs, "deserialize_s"),
                          "compute_s": med(rs, "compute_s"),
                          "wall_s_all": [round(r["wall_s"], 4) for r in rs]}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
