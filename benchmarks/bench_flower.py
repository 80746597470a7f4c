"""Flower deployment latency per protocol: exchanges, Flower's floor, loopback wall time,
and the in-process time of the same protocol on the same inputs.

Every deployment is the real thing on 127.0.0.1: a SuperLink with TLS, one SuperNode per
party, ``flwr run`` (``fedsec.runtime.local_deploy``). The floor is measured with the
``ping`` protocol (empty exchanges with the same number of SuperNodes): what one protocol
step costs when it does no work (the SuperNode's 3 s idle poll, a fresh ClientApp process
per message, Flower's hops).

    python benchmarks/bench_flower.py --repeats 3 [--only auc-malicious,ping]

Prints one JSON document and a table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

warnings.simplefilter("ignore", DeprecationWarning)

from fedsec.crypto.identity import Identity, Roster  # noqa: E402
from fedsec.data.io import load_party_csv, write_party_csv  # noqa: E402
from fedsec.runtime.local_deploy import LocalNode, run_local  # noqa: E402

NAMES = ["hospital-0", "hospital-1", "hospital-2"]


def _federation(root: Path, names: list[str]) -> tuple[Path, dict[str, Path]]:
    ids = {n: Identity.generate(n) for n in names}
    d = root / "ids"
    d.mkdir(parents=True)
    return Roster.of(list(ids.values())).save(d / "roster.json"), {
        n: ids[n].save(d / f"{n}.identity.json") for n in names}


def _csvs(root: Path) -> list[Path]:
    rng = np.random.default_rng(7)
    out = []
    for i, n in enumerate([100, 120, 130]):
        y = (rng.random(n) < 0.4).astype(int)
        s = np.clip(rng.normal(0.35 + 0.3 * y, 0.2), 0, 1)
        p = root / f"{NAMES[i]}.csv"
        write_party_csv(p, y, s)
        out.append(p)
    return out


def _auc_nodes(root: Path, extra: dict[str, Any]) -> tuple[list[LocalNode], Path]:
    roster, ids = _federation(root, NAMES)
    files = _csvs(root)
    nodes = [LocalNode(n, {"data-path": str(f), "identity-path": str(ids[n]),
                           "roster-path": str(roster), "state-dir": str(root / "state" / n),
                           "log-path": str(root / f"{n}.log"), **extra})
             for n, f in zip(NAMES, files, strict=True)]
    return nodes, roster


def _exchanges(doc: dict[str, Any]) -> int:
    return sum(1 for k, v in doc.get("timings", {}).items() if k.endswith("_s")
               and isinstance(v, (int, float)) and k not in ("aggregate_s", "total_s"))


def ping(root: Path) -> dict[str, Any]:
    nodes = [LocalNode(f"node-{i}", {"state-dir": str(root / str(i))}) for i in range(3)]
    run = run_local(nodes, {"protocol": "ping", "ping-rounds": 5, "num-nodes": 3},
                    workdir=root / "w", timeout=300)
    return {"exchanges": 5, "server_s": run.doc["total_s"], "rounds_s": run.doc["rounds_s"],
            "per_exchange_s": run.doc["median_round_s"], "inprocess_s": 0.0}


def auc(root: Path, security: str) -> dict[str, Any]:
    from fedsec.auc.fhauc import secure_auc

    nodes, roster = _auc_nodes(root, {"security": security})
    run = run_local(nodes, {"protocol": "auc", "security": security,
                            "roster-path": str(roster), "decision-points": 100},
                    workdir=root / "w", timeout=400)
    assert run.doc["status"] == "done", run.doc
    data = [load_party_csv(Path(n.node_config["data-path"])) for n in nodes]
    t0 = time.perf_counter()
    secure_auc([(d.y_true, d.y_score) for d in data], security=security)
    return {"exchanges": _exchanges(run.doc), "server_s": run.doc["timings"]["total_s"],
            "steps_s": {k: v for k, v in run.doc["timings"].items()
                        if k.endswith("_s") and k != "total_s"},
            "inprocess_s": time.perf_counter() - t0}


def dpauc(root: Path) -> dict[str, Any]:
    from fedsec.auc.dpauc import dpauc as dp

    nodes, roster = _auc_nodes(root, {"max-epsilon": 1.0})
    run = run_local(nodes, {"protocol": "dpauc", "roster-path": str(roster),
                            "dpauc-mechanism": "laplace", "dpauc-epsilon": 1.0,
                            "decision-points": 100}, workdir=root / "w", timeout=300)
    assert run.doc["status"] == "done", run.doc
    data = [load_party_csv(Path(n.node_config["data-path"])) for n in nodes]
    t0 = time.perf_counter()
    dp([(d.y_true, d.y_score) for d in data], epsilon=1.0, decision_points=100)
    return {"exchanges": _exchanges(run.doc), "server_s": run.doc["timings"]["total_s"],
            "inprocess_s": time.perf_counter() - t0}


CASES = {"ping": ping, "auc-semi-honest": lambda r: auc(r, "semi-honest"),
         "auc-malicious": lambda r: auc(r, "malicious"), "dpauc": dpauc}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default="")
    args = ap.parse_args(argv)
    chosen = [c for c in CASES if not args.only or c in args.only.split(",")]
    out: dict[str, Any] = {}
    for name in chosen:
        runs = []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory(prefix="fedsec-bench-flower-") as tmp:
                runs.append(CASES[name](Path(tmp)))
            print(f"{name}: {runs[-1]}", file=sys.stderr, flush=True)
        out[name] = {"runs": runs,
                     "median_server_s": statistics.median(r["server_s"] for r in runs),
                     "median_inprocess_s": statistics.median(r["inprocess_s"] for r in runs),
                     "exchanges": runs[0]["exchanges"]}
    print(json.dumps(out, indent=1))
    print(f"\n{'protocol':<18}{'exchanges':>10}{'ServerApp s (median)':>22}"
          f"{'in-process s':>14}", file=sys.stderr)
    for name, r in out.items():
        print(f"{name:<18}{r['exchanges']:>10}{r['median_server_s']:>22.2f}"
              f"{r['median_inprocess_s']:>14.3f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
