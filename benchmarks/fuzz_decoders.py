"""Fuzz every fedsec decoder and protocol step that reads another role's bytes (issue 8).

The long run of the in-suite test ``tests/fuzz/test_fuzz_decoders.py``: the same harness
(``tests/fuzz/fuzz_*.py``), a fixed seed per execution, at least 50,000 executions split
across the targets by weight, then a one-key-at-a-time sweep of every metadata key. It
prints JSON and a table of executions per decoder, the exceptions seen by type, and every
violation (an exception outside the target's allowed types, a warning, a hang, a call
slower than ``--slow`` seconds, a jump of the peak memory, or a success an oracle
rejects); it exits 1 if there is any.

    python benchmarks/fuzz_decoders.py                     # 50,000 executions
    python benchmarks/fuzz_decoders.py --executions 5000   # a quick look

``--part shapley`` fuzzes the secure Shapley roles instead (HESV, SecSV, SecretSV:
``tests/fuzz/fuzz_shapley.py``, the 31 targets of ``SHAPLEY_TARGETS``, ``--executions`` of
them, then a sweep of every metadata key of one message per entry point with every sweep
value); its results go under the ``"shapley"`` key of the same JSON file, leaving the key
set-up/AUC part in place.
``--target`` (repeatable) runs only the named targets and their sweep cases, stored
under ``"shapley/<name>/<name>..."``.

    python benchmarks/fuzz_decoders.py --part shapley      # 50,000 executions
    python benchmarks/fuzz_decoders.py --part shapley --executions 20000 \
        --target SecSVClient.decrypt_all --target 'SecSV.evaluate[derived,in-flight]'

``--part pfl`` fuzzes secure Priv-PFL (``tests/fuzz/fuzz_pfl.py``: the fixed-holder key
set-up and the client, server and decryptor steps, 20 targets), then sweeps every metadata
key of one message per entry point; results under the ``"pfl"`` key. ``--minutes`` stops
the schedule after that long (the executions done are reported).

    python benchmarks/fuzz_decoders.py --part pfl --executions 200000 --minutes 15
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fuzz"))

import fuzz_pfl  # noqa: E402
import fuzz_shapley  # noqa: E402
import fuzz_targets  # noqa: E402
from fuzz_mutations import SWEEP_VALUES  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "fuzz_decoders.json"


def sweep(world: fuzz_targets.World, targets: dict[str, fuzz_targets.Target]
          ) -> tuple[int, Counter[str], list[str]]:
    """Every metadata key of one message per target dropped, or set to each sweep value
    (and, in lists, the first and last element)."""
    count, outcomes, bad = 0, Counter[str](), []
    for name, (valid, build, oracle) in fuzz_targets.meta_cases(world).items():
        for key in sorted(valid):
            variants = [{k: v for k, v in valid.items() if k != key}]
            for value in SWEEP_VALUES:
                variants.append({**valid, key: value})
                v = valid[key]
                if isinstance(v, list) and v:
                    for i in {0, len(v) - 1}:
                        variants.append({**valid, key: [*v[:i], value, *v[i + 1:]]})
            for meta in variants:
                outcome, problem, _ = fuzz_targets.execute(
                    targets[name], fuzz_targets.Case(build(meta), "sweep", oracle))
                count += 1
                outcomes[outcome] += 1
                if problem is not None:
                    bad.append(f"{name} {key}: {problem.splitlines()[0]}")
    return count, outcomes, bad


def _variants(valid: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for key in sorted(valid):
        out.append({k: v for k, v in valid.items() if k != key})
        for value in SWEEP_VALUES:
            out.append({**valid, key: value})
            v = valid[key]
            if isinstance(v, list) and v:
                for i in {0, len(v) - 1}:
                    out.append({**valid, key: [*v[:i], value, *v[i + 1:]]})
    return out


def meta_sweep(cases: dict[str, tuple[str, dict[str, Any], Any]],
               targets: dict[str, fuzz_targets.Target]) -> tuple[int, Counter[str], list[str]]:
    """A roles' metadata sweep: every valid metadata dict of ``cases``
    (:func:`fuzz_shapley.shapley_meta_cases`, :func:`fuzz_pfl.pfl_meta_cases`) with one
    key at a time replaced by hostile values, run through its target."""
    count, outcomes, bad = 0, Counter[str](), []
    for case, (name, valid, build) in cases.items():
        for meta in _variants(valid):
            outcome, problem, _ = fuzz_targets.execute(targets[name], build(meta))
            count += 1
            outcomes[outcome] += 1
            if problem is not None:
                bad.append(f"{case}: {problem.splitlines()[0]}")
    return count, outcomes, bad


def _report_part(args: argparse.Namespace, argv: list[str] | None, key: str,
                 report: Any, cases: dict[str, tuple[str, dict[str, Any], Any]],
                 targets: list[fuzz_targets.Target], t0: float, cpu0: float,
                 extra: dict[str, Any]) -> int:
    """Run a part's metadata sweep, store the part under ``key`` in ``--json``, print its
    summary and table; exit status 1 on any violation."""
    import os
    import resource

    n_sweep, sweep_outcomes, sweep_bad = meta_sweep(cases, {t.name: t for t in targets})
    part: dict[str, Any] = report.as_dict()
    part.update({
        "command": "python benchmarks/fuzz_decoders.py " + " ".join(argv or sys.argv[1:]),
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "wall_seconds": time.perf_counter() - t0,
        "cpu_seconds": time.process_time() - cpu0,
        "loadavg": os.getloadavg(),
        "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        **extra,
        "metadata_sweep": {"executions": n_sweep, "outcomes": dict(sweep_outcomes),
                           "violations": sweep_bad},
        "total_executions": report.executions + n_sweep,
    })
    doc: dict[str, Any] = {}
    if args.json.exists():
        doc = json.loads(args.json.read_text())
    doc[key] = part
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(json.dumps({k: part[k] for k in ("executions", "total_executions", "exceptions",
                                           "peak_rss_growth_mb", "seconds", "wall_seconds",
                                           "cpu_seconds", "loadavg", *extra)}
                     | {"violations": len(report.violations) + len(sweep_bad)}, indent=1))
    print()
    print(table(report))
    print(f"\nmetadata sweep: {n_sweep} executions, {dict(sweep_outcomes)}")
    violations = [f"{v.target} [{v.producer}] {v.seed}: {v.detail.splitlines()[0]}"
                  for v in report.violations] + sweep_bad
    print(f"violations: {len(violations)}")
    for line in violations[:20]:
        print("  " + line)
    return 1 if violations else 0


def main_pfl(args: argparse.Namespace, argv: list[str] | None) -> int:

    t0 = time.perf_counter()
    cpu0 = time.process_time()
    world = fuzz_pfl.build_pfl_world()
    targets = fuzz_pfl.make_pfl_targets(world)
    print(f"corpus: fixed-holder key set-up and Priv-PFL rounds, {len(world.pools.messages)} "
          f"messages, {len(targets)} targets ({world.build_seconds:.1f} s)", file=sys.stderr)
    # in slices, so that --minutes can stop the schedule between them
    total_w = sum(t.weight for t in targets)
    plan = {t.name: max(1, round(args.executions * t.weight / total_w)) for t in targets}
    slices = 20
    merged: fuzz_targets.Report | None = None
    stopped = False
    for k in range(slices):
        part_plan = {n: (v * (k + 1)) // slices - (v * k) // slices for n, v in plan.items()}
        rep = fuzz_targets.run(world, targets, executions=part_plan,
                               seed=args.seed * 1000 + k, slow_seconds=args.slow)
        if merged is None:
            merged = rep
        else:
            for n, st in rep.stats.items():
                m = merged.stats[n]
                m.executions += st.executions
                m.outcomes.update(st.outcomes)
                m.producers.update(st.producers)
                m.seconds += st.seconds
                m.max_seconds = max(m.max_seconds, st.max_seconds)
                m.noted += st.noted
                m.producer_errors += st.producer_errors
            merged.violations += rep.violations
            merged.seconds += rep.seconds
            merged.peak_rss_growth_mb = max(merged.peak_rss_growth_mb, rep.peak_rss_growth_mb)
        print(f"slice {k + 1}/{slices}: {merged.executions} executions, "
              f"{len(merged.violations)} violations", file=sys.stderr)
        if args.minutes and time.perf_counter() - t0 > 60 * args.minutes:
            stopped = k + 1 < slices
            break
    assert merged is not None
    return _report_part(args, argv, "pfl", merged, fuzz_pfl.pfl_meta_cases(world), targets,
                        t0, cpu0, {"stopped_by_time_limit": stopped})


def main_shapley(args: argparse.Namespace, argv: list[str] | None) -> int:

    t0 = time.perf_counter()
    cpu0 = time.process_time()
    world = fuzz_shapley.build_shapley_world()
    targets = fuzz_shapley.make_shapley_targets(world)
    cases = fuzz_shapley.shapley_meta_cases(world)
    if args.target:
        names = set(args.target)
        unknown = names - {t.name for t in targets}
        if unknown:
            raise SystemExit(f"unknown targets: {sorted(unknown)}")
        targets = [t for t in targets if t.name in names]
        cases = {c: v for c, v in cases.items() if v[0] in names}
    print(f"corpus: HESV, SecSV and SecretSV runs, {len(world.pools.messages)} messages, "
          f"{len(targets)} targets ({world.build_seconds:.1f} s)", file=sys.stderr)
    report = fuzz_targets.run(world, targets, executions=args.executions, seed=args.seed,
                              slow_seconds=args.slow,
                              progress=lambda line: print(line, file=sys.stderr))
    return _report_part(args, argv, "shapley" + "".join("/" + n for n in sorted(args.target)),
                        report, cases, targets, t0, cpu0, {})


def table(report: fuzz_targets.Report) -> str:
    kinds = sorted({k for s in report.stats.values() for k in s.outcomes})
    head = ["target", "executions", *kinds, "noted", "mean ms", "max ms"]
    rows = [head, ["---"] * len(head)]
    for name, s in report.stats.items():
        rows.append([name, str(s.executions), *[str(s.outcomes.get(k, 0)) for k in kinds],
                     str(len(s.noted)), f"{1000 * s.seconds / max(1, s.executions):.1f}",
                     f"{1000 * s.max_seconds:.0f}"])
    total = report.exceptions()
    rows.append(["**total**", str(report.executions),
                 *[str(total.get(k, 0) if k != "ok" else sum(
                     s.outcomes.get("ok", 0) for s in report.stats.values())) for k in kinds],
                 str(sum(len(s.noted) for s in report.stats.values())), "", ""])
    return "\n".join("| " + " | ".join(r) + " |" for r in rows)


def main_network(args: argparse.Namespace, argv: list[str] | None) -> int:
    """Every protocol fuzzed through its network (``tests/fuzz/network_worlds.py``):
    ``--executions`` mutated whole runs, spread evenly over the (role, kind) targets."""
    import os

    import network_worlds

    from fedsec.testing import netfuzz

    t0, cpu0 = time.perf_counter(), time.process_time()
    protocols = network_worlds.all_protocols()
    n_targets = 0
    for p in protocols:
        net, _ = netfuzz.record(p)
        n_targets += len(netfuzz.targets(p, net))
    per = max(1, args.executions // n_targets)
    report = netfuzz.fuzz(protocols, executions=per, seed=args.seed,
                          minutes=args.minutes or None,
                          progress=lambda line: print(line, file=sys.stderr, flush=True))
    exceptions: Counter[str] = Counter()
    for outcome in report.outcomes.values():
        exceptions.update(outcome)
    part = {"command": "python benchmarks/fuzz_decoders.py " + " ".join(argv or sys.argv[1:]),
            "machine": f"{platform.machine()}, {platform.python_version()}",
            "targets": n_targets, "executions_per_target": per,
            "executions": report.total, "outcomes": dict(exceptions),
            "per_target": {t.label: dict(c) for t, c in report.outcomes.items()},
            "violations": [f"{t.label} seed {s}: {d}" for t, s, d in report.violations],
            "wall_seconds": time.perf_counter() - t0,
            "cpu_seconds": time.process_time() - cpu0, "loadavg": os.getloadavg()}
    doc: dict[str, Any] = json.loads(args.json.read_text()) if args.json.exists() else {}
    doc["network"] = part
    args.json.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(json.dumps({k: part[k] for k in ("targets", "executions", "outcomes",
                                           "wall_seconds")}
                     | {"violations": len(report.violations)}, indent=1))
    for line in part["violations"][:20]:
        print("  " + line)
    return 1 if report.violations else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--executions", type=int, default=50_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--slow", type=float, default=10.0, help="seconds that make a call a "
                    "violation (a hard limit of 60 s stops hangs)")
    ap.add_argument("--json", type=Path, default=RESULTS)
    ap.add_argument("--part", choices=("auc", "shapley", "pfl", "network"), default="auc",
                    help="the key set-up and AUC decoders (default), the secure Shapley "
                    "roles or secure Priv-PFL (results under the JSON's 'shapley' or 'pfl' "
                    "key); 'network': every protocol fuzzed through its network, whole runs "
                    "(results under 'network')")
    ap.add_argument("--target", action="append", default=[],
                    help="--part shapley: only this target (repeat for several), e.g. "
                    "'SecSV.evaluate[derived,in-flight]'")
    ap.add_argument("--minutes", type=float, default=0.0,
                    help="--part pfl: stop the schedule after this long (0: no limit)")
    args = ap.parse_args(argv)
    if args.part == "shapley":
        return main_shapley(args, argv)
    if args.part == "pfl":
        return main_pfl(args, argv)
    if args.part == "network":
        return main_network(args, argv)

    t0 = time.perf_counter()
    world = fuzz_targets.build_world()
    targets = fuzz_targets.make_targets(world)
    print(f"corpus: 2 key set-ups, {len(world.pools.messages)} messages, "
          f"{len(targets)} targets ({world.build_seconds:.1f} s)", file=sys.stderr)
    report = fuzz_targets.run(world, targets, executions=args.executions, seed=args.seed,
                              slow_seconds=args.slow,
                              progress=lambda line: print(line, file=sys.stderr))
    n_sweep, sweep_outcomes, sweep_bad = sweep(world, {t.name: t for t in targets})
    out: dict[str, Any] = report.as_dict()
    out.update({
        "command": "python benchmarks/fuzz_decoders.py " + " ".join(argv or sys.argv[1:]),
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "wall_seconds": time.perf_counter() - t0,
        "metadata_sweep": {"executions": n_sweep, "outcomes": dict(sweep_outcomes),
                           "violations": sweep_bad},
        "total_executions": report.executions + n_sweep,
    })
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(json.dumps({k: out[k] for k in ("executions", "total_executions", "exceptions",
                                          "peak_rss_growth_mb", "seconds", "wall_seconds")}
                     | {"violations": len(report.violations) + len(sweep_bad)}, indent=1))
    print()
    print(table(report))
    print(f"\nmetadata sweep: {n_sweep} executions, {dict(sweep_outcomes)}")
    violations = [f"{v.target} [{v.producer}] {v.seed}: {v.detail.splitlines()[0]}"
                  for v in report.violations] + sweep_bad
    print(f"violations: {len(violations)}")
    for line in violations[:20]:
        print("  " + line)
    return 1 if violations else 0


if __name__ == "__main__":
    raise SystemExit(main())
