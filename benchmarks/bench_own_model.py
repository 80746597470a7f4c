"""Time ``fedsec.secure_shapley`` on the models of docs/shapley-own-model.md.

A user's own scikit-learn logistic regression (3 clients, 2 rounds, 90 test samples) and
PyTorch ``nn.Sequential`` (Linear 6-8, ReLU, Linear 8-2; 4 clients, 2 rounds, 100 test
samples), valued by every protocol with ``schedule="paper"``; median wall and CPU seconds
over ``--repeat`` runs, interleaved, and the largest FSV difference from NSSV over the runs.
The test data are used as generated (near-ties included); ``min margin`` is the smallest gap
between the top two scores over every coalition's model and test sample, below which
HESV's approximate scores may flip a prediction.

    python benchmarks/bench_own_model.py --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "shapley"))

import fedsec  # noqa: E402
from fedsec.errors import PrivacyWarning  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per protocol and model")
    args = parser.parse_args()
    import test_secure_api as worlds  # the tests' user-trained models

    models = {"sklearn-logistic": worlds.sklearn_run(3, [(0, 1, 2)] * 2, m_test=30),
              "torch-sequential": worlds.torch_run()}
    print("| model | min margin | protocol | wall s (median) | CPU s (median) | "
          "max abs FSV error |")
    print("|---|---|---|---|---|---|")
    for name, (rec, test) in models.items():
        ref = fedsec.secure_shapley(rec, test, protocol="nssv").fsv
        margin = _min_margin(rec, test)
        times: dict[str, list[tuple[float, float, float]]] = {}
        for _ in range(args.repeat):
            for protocol in ("hesv", "secsv", "secretsv"):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", PrivacyWarning)
                    w0, c0 = time.perf_counter(), time.process_time()
                    res = fedsec.secure_shapley(rec, test, protocol=protocol,
                                                schedule="paper")
                    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
                times.setdefault(protocol, []).append(
                    (wall, cpu, float(np.abs(res.fsv - ref).max())))
        for protocol, runs in times.items():
            print(f"| {name} | {margin:.1e} | {protocol} | "
                  f"{statistics.median(r[0] for r in runs):.2f} | "
                  f"{statistics.median(r[1] for r in runs):.2f} | "
                  f"{max(r[2] for r in runs):.1e} |")


def _min_margin(rec, test) -> float:  # type: ignore[no-untyped-def]
    x = np.concatenate([a for a, _ in test])
    out = np.inf
    for rnd in rec.rounds:
        for mask in range(1 << len(rnd.participants)):
            s = np.sort(fedsec.learning.forward(rec.spec, rnd.model_of_mask(mask), x))
            out = min(out, float((s[:, -1] - s[:, -2]).min()))
    return out


if __name__ == "__main__":
    main()
