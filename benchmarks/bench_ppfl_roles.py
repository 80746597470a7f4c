"""Secure Priv-PFL: per-role time and bytes of one round, for comparing two versions.

Runs :class:`fedsec.pfl.secure.SecurePFLSession` rounds (the models, bound and sigmas of
``bench_ppfl.py``) and times every public method of the three roles (clients, server,
decryptor; outermost calls only), so the same script measures any version of the module
that has those classes: run it once per version (``PYTHONPATH`` pointing at each tree),
alternating, one process per run. Prints one JSON object: per-role seconds (median over
the rounds), per-method seconds (summed over the clients for client methods), per-step seconds as
:class:`~fedsec.pfl.secure.SecureRound` reports them, and the bytes of the last round.

Usage (old = a checkout of another version in /tmp/pfl-old)::

    for i in 1 2 3; do
      for tree in /tmp/pfl-old src; do
        flock /tmp/fedsec-bench.lock env PYTHONPATH=$tree python \
            benchmarks/bench_ppfl_roles.py --k 30 --model mnist-cnn --rounds 3
      done
    done
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from typing import Any

import numpy as np

import fedsec.pfl.secure as sec
from fedsec.learning.tasks import task_spec

MODELS = {"digits-logistic": 650, "mnist-logistic": 7850,
          "mnist-cnn": task_spec("mnist").n_params()}
ROLES = {"client": sec.SecurePFLClient, "server": sec.SecurePFLServer,
         "decryptor": sec.SecurePFLDecryptor}


def _models(k: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray, float]:
    """The models of ``bench_ppfl.py`` (same seeds)."""
    rng = np.random.default_rng(seed)
    base = rng.normal(size=d) / np.sqrt(d)
    w = base + 0.2 * rng.normal(size=(k, d)) / np.sqrt(d) * rng.uniform(0.2, 1.5, (k, 1))
    sig = rng.uniform(0.1, 0.5, size=k)
    return w, sig, float(np.median(np.linalg.norm(w, axis=1)))


def _instrument(spent: dict[str, float], calls: dict[str, int]) -> None:
    depth: dict[str, int] = defaultdict(int)
    for role, cls in ROLES.items():
        for name, fn in list(vars(cls).items()):
            if name.startswith("_") or not callable(fn) or isinstance(fn, (staticmethod,
                                                                             classmethod)):
                continue

            def wrap(f: Any, role: str = role, name: str = name) -> Any:
                @functools.wraps(f)
                def timed(*a: Any, **kw: Any) -> Any:
                    depth[role] += 1
                    t0 = time.perf_counter()
                    try:
                        return f(*a, **kw)
                    finally:
                        depth[role] -= 1
                        if depth[role] == 0:
                            dt = time.perf_counter() - t0
                            spent[role] += dt
                            spent[f"{role}.{name}"] += dt
                            calls[f"{role}.{name}"] += 1
                return timed

            setattr(cls, name, wrap(fn))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=30)
    ap.add_argument("--model", default="mnist-cnn", choices=list(MODELS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="insecure test preset (smoke)")
    a = ap.parse_args(argv)
    cfg = (sec.SecurePFLConfig(preset="INSECURE_TEST_N4096_DEPTH19", allow_insecure=True)
           if a.quick else sec.SecurePFLConfig())
    d = MODELS[a.model]
    w, sig, b = _models(a.k, d, a.seed + d + a.k)
    t0 = time.perf_counter()
    session = sec.SecurePFLSession.create(a.k, cfg)
    setup = time.perf_counter() - t0
    per_round: list[dict[str, float]] = []
    steps: list[dict[str, float]] = []
    r = None
    spent: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    _instrument(spent, calls)
    for t in range(a.rounds):
        spent.clear()
        r = session.run_round(w, sig, alpha=0.5, norm_bound=b, round_index=t)
        per_round.append(dict(spent))
        steps.append(r.seconds)
    assert r is not None
    out = {"module": sec.__file__, "K": a.k, "model": a.model, "d": d,
           "rounds": a.rounds, "setup_seconds": setup,
           "role_seconds": {k: statistics.median(x.get(k, 0.0) for x in per_round)
                            for k in ROLES},
           "step_seconds": {k: statistics.median(x[k] for x in steps) for k in steps[0]},
           "method_seconds": {k: statistics.median(x.get(k, 0.0) for x in per_round)
                              for k in sorted(per_round[0]) if k not in ROLES},
           "bytes_up_per_client": int(np.median(r.bytes_up)),
           "bytes_down_per_client": int(np.median(r.bytes_down)),
           "server_bytes_in": int(r.server_bytes_in),
           "decryptor_bytes_in": int(r.decryptor_bytes_in),
           "valid": int(r.valid.sum()), "accepted_pairs": sum(len(x) for x in
                                                              r.selection.accepted),
           "load": os.getloadavg(), "python": sys.version.split()[0]}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
