"""Label-recovery attacks on SecSV, SecretSV (server P) and HESV (the counting client).

P replays its own arithmetic on the bytes it receives (its label shares, its batch order,
the decrypting client's last-layer message, A's answer) and intersects, per test sample,
the labels every opened value allows (``tests/shapley/label_attack.py``). Before the zero
test P opened ``Ŷ − Y``; now it opens ``r·(Ŷ − Y)``, zero or uniform non-zero. HESV's
last decryptor keeps what it decrypts: ``Y − Ŷ`` before, one correctness bit per sample
now (one-hot labels).

Usage::

    PYTHONPATH=src python benchmarks/attack_labels.py [--quick] [--label after]

To measure the protocol before the change, run it with ``PYTHONPATH=<old checkout>/src``
(the attack reads both message formats). Prints one JSON row per (task, protocol, mode).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "shapley"))
import label_attack as la  # noqa: E402

from fedsec.crypto.bfv import BFVContext  # noqa: E402
from fedsec.learning.fedavg import run_fedavg  # noqa: E402
from fedsec.learning.tasks import make_task  # noqa: E402
from fedsec.shapley import hesv  # noqa: E402
from fedsec.shapley import secretsv as ssv  # noqa: E402
from fedsec.shapley import secsv as sv  # noqa: E402
from fedsec.shapley.secsv import runner as sv_runner  # noqa: E402

# (task, test samples, rounds): the reviewer's sizes, then bench_secsv.py's BANK shape
CASES = [("bank", 200, 3), ("agnews", 200, 3), ("bank", 1980, 2)]
QUICK = [("bank", 200, 3), ("agnews", 200, 3)]



def paper(fn: Any) -> dict[str, str]:
    """The paper's schedule where the checkout has the choice (older ones run it only)."""
    import inspect

    return {"schedule": "paper"} if "schedule" in inspect.signature(fn).parameters else {}

def _hesv(rec: Any, sets: list[Any]) -> tuple[list[la.Opened], float, int]:
    seen: list[Any] = []
    saved = hesv.HESVClient
    hesv.HESVClient = la.curious_hesv_client(saved, seen)  # type: ignore[misc]
    try:
        t0 = time.perf_counter()
        res = hesv.hesv_shapley(rec, sets, **paper(hesv.hesv_shapley))
        seconds = time.perf_counter() - t0
    finally:
        hesv.HESVClient = saved  # type: ignore[misc]
    bits = hasattr(hesv, "_LABEL_LEVEL")  # the one-hot version decrypts bits
    return (la.hesv_opened(seen, [len(s[1]) for s in sets], bits), seconds,
            int(res.to_dict()["bytes_total"]))


def _run(protocol: str, rec: Any, sets: list[Any], **kw: Any) -> tuple[la.Tap, float]:
    tap = la.Tap()
    # keep every message the roles exchange (both run over a protocol Network)
    mod: Any = sv_runner if protocol == "secsv" else ssv
    name = "Network"
    saved = getattr(mod, name)
    setattr(mod, name, tap.network)
    try:
        t0 = time.perf_counter()
        if protocol == "secsv":
            sv.secsv_shapley(rec, sets, **kw, **paper(sv.secsv_shapley))
        else:
            ssv.secretsv_shapley(rec, sets, **kw, **paper(ssv.secretsv_shapley))
        return tap, time.perf_counter() - t0
    finally:
        setattr(mod, name, saved)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the reviewer's sizes only")
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    t = BFVContext(sv.SecSVConfig().bfv).t
    rows = []
    for name, m_test, rounds in QUICK if args.quick else CASES:
        task = make_task(name, n_samples=m_test + 3000, n_test=m_test, seed=0)
        fed = task.federate(5, seed=0)
        rec = run_fedavg(task, fed, rounds=rounds, seed=0)
        sets = [(c.x_test, c.y_test) for c in fed.clients]
        y = np.concatenate([s[1] for s in sets]).astype(np.int64)
        n_classes = rec.spec.layers[-1].out_features
        for protocol, mode, kw in [("secsv", "derived", {}),
                                   ("secsv", "per-coalition", {"derived_decryption": False}),
                                   ("secretsv", "-", {})]:
            tap, seconds = _run(protocol, rec, sets, **kw)
            stats = la.pin_labels(la.p_opened(tap.log, protocol, t), len(y), n_classes, y)
            row = {"label": args.label, "task": name, "test_samples": m_test,
                   "rounds": rounds, "protocol": protocol, "mode": mode,
                   "seconds": round(seconds, 2), "bytes_total": sum(tap.bytes_by_message.values()),
                   **stats}
            rows.append(row)
            print(json.dumps(row), flush=True)
        opened, seconds, nbytes = _hesv(rec, sets)
        row = {"label": args.label, "task": name, "test_samples": m_test, "rounds": rounds,
               "protocol": "hesv", "mode": "decryptor i_{L+2}", "seconds": round(seconds, 2),
               "bytes_total": nbytes, **la.pin_labels(opened, len(y), n_classes, y)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(json.dumps({"label": args.label, "machine": platform.processor() or
                      platform.machine(), "python": platform.python_version()}))
    print("\n| task | M | T | protocol | mode | values opened | in (−C, C), ≠ 0 | "
          "pinned (right) | narrowed |")
    print("| --- | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['task']} | {r['test_samples']} | {r['rounds']} | {r['protocol']} | "
              f"{r['mode']} | {r['evaluated_values']} | {r['values_inside_class_range']} | "
              f"{r['pinned']} ({r['pinned_right']}) | {r['narrowed']} |")


if __name__ == "__main__":
    main()
