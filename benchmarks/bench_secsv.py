"""SecSV, SecretSV and Matrix Reducing next to seed 004 (Zheng et al., PVLDB 2023).

Regenerates, with fixed seeds, on one core (BLAS limited to one thread):

* **Matrix Reducing per shape** (seed 004, Table 4): the seven ``d_out × d_in`` shapes of
  the paper's models, batch ``m = ⌊N/d_out⌋``; ms per sample of the HE computation of
  ``A·B``: ``Full`` (both encrypted, CKKS N = 4096 with the authors' primes [31, 23, 23, 31]),
  ``Half`` in the same CKKS, and ``Half`` in our BFV (N = 8192, exact mod t; includes
  encoding the plaintext share). Rows ``{shape, method: "reducing", variant,
  ms_per_sample}``; medians of ``--repeats``.
* **SecSV on the MNIST-shaped CNN** (``--cnn M``): CPU ms per sample per model tested,
  whole run and split by role (P, A, clients, P + A; :class:`RoleTimer`), FSV error to
  NSSV, bytes.
* **SecSV end to end** on the BANK-shaped (48 features, 2 classes, M = 1,980 test
  samples, T = 2) and AGNEWS-shaped (300 features, 4 classes, M = 720, T = 10) logistic
  tasks, n = 5 clients: wall seconds with and without the linearity shortcut and
  SampleSkip, the Table-2 time split, bytes, and the FSV error to NSSV; SecretSV on the
  same data. The authors' code on this machine class: 11.3 s and 296 s.

Usage::

    python benchmarks/bench_secsv.py              # ~10 min on 2 busy cores
    python benchmarks/bench_secsv.py --quick      # smaller tasks, one repeat

Writes ``benchmarks/results/bench_secsv.json`` and prints JSON rows and a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from fedsec.crypto import reducing as rd
from fedsec.crypto import sharing as sh
from fedsec.crypto.bfv import BFVContext
from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.params import CKKSParams
from fedsec.learning.fedavg import run_fedavg
from fedsec.learning.tasks import make_task
from fedsec.shapley import federated_shapley
from fedsec.shapley.secretsv import secretsv_shapley
from fedsec.shapley.secsv import secsv_shapley

SHAPES = [(4, 300), (2, 48), (64, 256), (10, 64), (32, 64), (32, 32), (2, 32)]
AUTHORS_FULL_MS = {(4, 300): 0.76, (2, 48): 0.059, (64, 256): 10.3, (10, 64): 0.41,
                   (32, 64): 1.21, (32, 32): 0.68, (2, 32): 0.040}
AUTHORS_SECSV_S = {"bank": 11.3, "agnews": 296.0}
# The authors' CKKS: ring 2^12, primes [31, 23, 23, 31], scale 2^23 (128-bit secure).
AUTHORS_CKKS = CKKSParams("BENCH_N4096_31_23", 4096, (31, 23, 23, 31), 23, 128,
                          "seed 004's public code's CKKS parameters")


def _median_time(fn: Any, repeats: int) -> float:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def bench_reducing(repeats: int, shapes: list[tuple[int, int]] | None = None, *,
                   half_pre_encoded: bool = False) -> list[dict[str, Any]]:
    """Matrix Reducing per sample for each ``(d_out, d_in)`` of ``shapes`` (default:
    :data:`SHAPES`, the paper's Table 4).

    CKKS ``half`` includes the encoding of ``B``'s diagonals in the product. With
    ``half_pre_encoded``, a ``half-pre`` row also times the product with the diagonals
    encoded beforehand, as Matrix Squaring's ``Half`` row of
    :func:`bench_hesv.bench_squaring` does.
    """
    rows = []
    ckks = CKKSContext.generate(AUTHORS_CKKS.check())
    bfv = BFVContext.from_seed(os.urandom(32))
    rng = np.random.default_rng(0)
    for d_out, d_in in SHAPES if shapes is None else shapes:
        a = rng.uniform(-1, 1, (d_out, d_in))
        # CKKS (authors' ring): m = floor(2048 / d_out)
        w = rd.grid_width(d_out, ckks.slots)
        b = rng.uniform(-1, 1, (d_in, w))
        ad, bd = rd.model_diagonals(a, w), rd.data_diagonals(b, d_out, w)
        enc_a = [ckks.encrypt(r) for r in ad]
        enc_b = [ckks.encrypt(r) for r in bd]
        full = _median_time(lambda ea=enc_a, eb=enc_b: rd.reduce_full_ckks(ckks, ea, eb),
                            repeats)
        half = _median_time(lambda ea=enc_a, b_=bd: rd.reduce_half_ckks(ckks, ea, b_),
                            repeats)
        got = rd.read_grid(ckks.decrypt(rd.reduce_full_ckks(ckks, enc_a, enc_b)).real,
                           d_out, w, w)
        err = float(np.abs(got - a @ b).max())
        rows.append({"shape": f"{d_out}x{d_in}", "method": "reducing", "variant": "full",
                     "scheme": "ckks-n4096", "m": w, "ms_per_sample": 1e3 * full / w,
                     "max_abs_error": err, "authors_ms": AUTHORS_FULL_MS[(d_out, d_in)]})
        rows.append({"shape": f"{d_out}x{d_in}", "method": "reducing", "variant": "half",
                     "scheme": "ckks-n4096", "m": w, "ms_per_sample": 1e3 * half / w})
        if half_pre_encoded:
            pts = [ckks.encode(r, parms_id=enc_a[0].parms_id()) for r in bd]
            pre = _median_time(lambda ea=enc_a, p_=pts: rd.reduce_half_ckks(ckks, ea, p_),
                               repeats)
            got = rd.read_grid(ckks.decrypt(rd.reduce_half_ckks(ckks, enc_a, pts)).real,
                               d_out, w, w)
            rows.append({"shape": f"{d_out}x{d_in}", "method": "reducing",
                         "variant": "half-pre", "scheme": "ckks-n4096", "m": w,
                         "ms_per_sample": 1e3 * pre / w,
                         "max_abs_error": float(np.abs(got - a @ b).max())})
        # BFV (ours, exact): m = floor(8192 / d_out); includes encoding the share
        wb = rd.grid_width(d_out, bfv.slots)
        t = bfv.t
        aq = sh.to_residues(np.rint(a * 2**20).astype(np.int64), t)
        enc = [bfv.to_ntt(bfv.encrypt(r)) for r in rd.model_diagonals(aq, wb)]
        share = sh.uniform_mod(t, (d_in, wb))

        def half_bfv(share: Any = share, d_out: int = d_out, wb: int = wb,
                     enc: Any = enc) -> None:
            pts = [bfv.encode_ntt(r) for r in rd.data_diagonals(share, d_out, wb)]
            bfv.from_ntt(rd.reduce_half_bfv(bfv, enc, pts))

        hb = _median_time(half_bfv, repeats)
        rows.append({"shape": f"{d_out}x{d_in}", "method": "reducing", "variant": "half",
                     "scheme": "bfv-n8192", "m": wb, "ms_per_sample": 1e3 * hb / wb})
    return rows


def _task(name: str, m_test: int, rounds: int, n: int = 5) -> tuple[Any, Any, list[Any]]:
    task = make_task(name, n_samples=m_test + 3000, n_test=m_test, seed=0)
    fed = task.federate(n, seed=0)
    rec = run_fedavg(task, fed, rounds=rounds, seed=0)
    return rec, fed, [(c.x_test, c.y_test) for c in fed.clients]


def bench_protocols(quick: bool) -> list[dict[str, Any]]:
    rows = []
    cases = [("bank", 1980, 2), ("agnews", 720, 10)]
    if quick:
        cases = [("bank", 400, 1), ("agnews", 200, 2)]
    for name, m_test, rounds in cases:
        rec, fed, sets = _task(name, m_test, rounds)
        t0 = time.perf_counter()
        nssv = federated_shapley(rec, fed.x_test, fed.y_test)
        nssv_s = time.perf_counter() - t0
        nssv_skip = federated_shapley(rec, fed.x_test, fed.y_test, sample_skip=True)
        for proto, kw in [("secsv", {"linear_shortcut": True}),
                          ("secsv", {"linear_shortcut": True, "sample_skip": True}),
                          ("secsv", {"linear_shortcut": False}),
                          ("secsv", {"linear_shortcut": False, "sample_skip": True}),
                          ("secretsv", {}), ("secretsv", {"sample_skip": True})]:
            fn = secsv_shapley if proto == "secsv" else secretsv_shapley
            t0, c0 = time.perf_counter(), time.process_time()
            res = fn(rec, sets, schedule="paper", **kw)  # the paper's configuration
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            ref = nssv_skip if kw.get("sample_skip") else nssv
            d = res.to_dict()
            rows.append({"task": name, "M": m_test, "T": rounds, "n": 5, "protocol": proto,
                         **kw, "wall_seconds": wall, "cpu_seconds": cpu,
                         "load_avg_1min": os.getloadavg()[0], "nssv_seconds": nssv_s,
                         "error_to_nssv": float(np.linalg.norm(res.fsv - nssv.fsv)),
                         "error_to_plain_same_mode": res.error_to(ref),
                         "time_split_seconds": d["time_split_seconds"],
                         "bytes_total": d["bytes_total"], "samples_tested":
                         res.samples_tested, "authors_secsv_seconds":
                         AUTHORS_SECSV_S[name] if not quick else None})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def bench_estimators() -> list[dict[str, Any]]:
    """Seed 004's Table 3 on the BANK-shaped task: SecSV + PS/GT/KS (default budgets),
    SampleSkip off and on; wall seconds and error to the exact NSSV FSV."""
    rec, fed, sets = _task("bank", 1980, 2)
    exact = federated_shapley(rec, fed.x_test, fed.y_test)
    rows = []
    for est in ("exact", "ps", "gt", "ks"):
        for skip in (False, True):
            t0, c0 = time.perf_counter(), time.process_time()
            res = secsv_shapley(rec, sets, estimator=est, sample_skip=skip, seed=1,
                                schedule="paper")
            rows.append({"task": "bank", "M": 1980, "T": 2, "protocol": "secsv",
                         "estimator": est, "sample_skip": skip,
                         "wall_seconds": time.perf_counter() - t0,
                         "cpu_seconds": time.process_time() - c0,
                         "models_tested": res.models_tested,
                         "error_to_exact_nssv": res.error_to(exact)})
            print(json.dumps(rows[-1]), flush=True)
    return rows


class RoleTimer:
    """Process CPU time of a SecSV run split by role, for :func:`bench_cnn`.

    How time is attributed (the protocol code is not changed: methods are wrapped on the
    classes, and the wrappers are removed on exit):

    * a stack of roles; every wrapped call pushes its role, and the CPU time
      (``time.process_time``, all threads; BLAS is limited to one) between two
      consecutive push/pop events is charged to the role on top of the stack -- so
      nested calls are charged to the innermost role;
    * **P**: every public method of :class:`PrincipalServer` (and the ``ServerBase``
      methods it inherits: P combines A's products, masks, plans and opens the zero
      test inside them), and any call of a method of *P's* :class:`BFVContext` made
      while no role is on the stack (none since the roles do their own work);
    * **A**: every public method of :class:`AuxiliaryServer` (and inherited
      ``ServerBase`` methods), and A's own ``BFVContext`` calls outside them (none);
    * **clients**: every public method of :class:`SecSVClient`;
    * **unattributed**: everything else -- the runner's loop over the network, the
      network's message accounting, the estimator / round loop, the key set-up's CKKS
      part and the clients' BFV key derivation (``_key_setup``: ``run_key_setup`` and
      ``BFVContext.from_seed``), and the wrappers' own overhead outside the stack.
    """

    def __init__(self) -> None:
        import fedsec.shapley.secsv as mod
        from fedsec.shapley.secsv import runner

        self.mod = mod
        self.runner = runner
        self.cpu: dict[str, float] = {"P": 0.0, "A": 0.0, "clients": 0.0,
                                      "unattributed": 0.0}
        self.stack: list[str] = []
        self.mark = 0.0
        self.owner: dict[int, str] = {}  # id(BFVContext) -> role
        self._saved: list[tuple[Any, str, Any]] = []

    def _tick(self) -> None:
        now = time.process_time()
        self.cpu[self.stack[-1] if self.stack else "unattributed"] += now - self.mark
        self.mark = now

    def _wrap(self, cls: Any, name: str, role: str | None) -> None:
        fn = cls.__dict__[name]
        timer = self

        def wrapper(obj: Any, *a: Any, **kw: Any) -> Any:
            r = role
            if r is None:  # a BFVContext method: only outside any role, for its owner
                if timer.stack:
                    return fn(obj, *a, **kw)
                r = timer.owner.get(id(obj))
                if r is None:
                    return fn(obj, *a, **kw)
            timer._tick()
            timer.stack.append(r)
            try:
                return fn(obj, *a, **kw)
            finally:
                timer._tick()
                timer.stack.pop()

        wrapper.__name__ = name
        self._saved.append((cls, name, fn))
        setattr(cls, name, wrapper)

    def __enter__(self) -> RoleTimer:
        mod = self.mod
        for cls, role in ((mod.PrincipalServer, "P"), (mod.AuxiliaryServer, "A"),
                          (mod.SecSVClient, "clients")):
            names = {k for c in cls.__mro__ if c.__module__.startswith(mod.__name__)
                     for k in c.__dict__ if not k.startswith("_") and callable(c.__dict__[k])
                     and not isinstance(c.__dict__[k], property)}
            for k in sorted(names):
                if k not in cls.__dict__:  # inherited: give this class its own wrapper
                    setattr(cls, k, getattr(cls, k))
                    self._saved.append((cls, k, None))
                self._wrap(cls, k, role)
        for k, v in list(BFVContext.__dict__.items()):
            if not k.startswith("_") and callable(v) and not isinstance(
                    v, classmethod | staticmethod | property):
                self._wrap(BFVContext, k, None)
        setup = self.runner._setup
        timer = self

        def setup_wrapper(*a: Any, **kw: Any) -> Any:
            run = setup(*a, **kw)
            timer.owner[id(run.P._bfv)] = "P"  # noqa: SLF001 - whose keys are whose
            timer.owner[id(run.A._bfv)] = "A"  # noqa: SLF001
            for c in run.clients:
                timer.owner[id(c._bfv)] = "clients"  # noqa: SLF001
            return run

        self._saved.append((self.runner, "_setup", setup))
        self.runner._setup = setup_wrapper
        self.mark = time.process_time()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._tick()
        for obj, name, fn in reversed(self._saved):
            if fn is None:
                delattr(obj, name)
            else:
                setattr(obj, name, fn)
        self._saved.clear()


def bench_cnn(m_test: int) -> dict[str, Any]:
    """MNIST-shaped CNN (conv 784->256, 256->64, 64->10, x^2), n = 5, T = 1, reduced M:
    CPU ms per (sample, model tested) of the whole run and split by role (P, A, clients,
    P + A; see :class:`RoleTimer` for what is charged where), next to the authors'
    12.4 ms (P) and 22.6 ms (P + A)."""
    import warnings

    rec, fed, sets = _task("mnist", m_test, 1)
    nssv = federated_shapley(rec, fed.x_test, fed.y_test)
    with warnings.catch_warnings(), RoleTimer() as roles:
        warnings.simplefilter("ignore")
        t0, c0 = time.perf_counter(), time.process_time()
        res = secsv_shapley(rec, sets, schedule="paper")
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    per = 1e3 / (m_test * res.models_tested)
    split = {k: v * per for k, v in roles.cpu.items()}
    split["P+A"] = split["P"] + split["A"]
    row = {"task": "mnist-cnn", "M": m_test, "T": 1, "n": 5, "protocol": "secsv",
           "linear_shortcut": True, "wall_seconds": wall, "cpu_seconds": cpu,
           "models_tested": res.models_tested,
           "ms_per_sample_per_model": cpu * per,
           "cpu_ms_per_sample_per_model_by_role": split,
           "cpu_seconds_by_role": dict(roles.cpu),
           "authors_ms_per_sample_per_model": {"P": 12.4, "P+A": 22.6},
           "targets_ms_per_sample_per_model": {"P": 1.24, "P+A": 2.26},
           "error_to_nssv": res.error_to(nssv),
           "bytes_total": res.accounting.total_bytes if res.accounting else None,
           "time_split_seconds": res.to_dict()["time_split_seconds"]}
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--skip-protocols", action="store_true")
    ap.add_argument("--cnn", type=int, default=0, metavar="M",
                    help="also time the MNIST-shaped CNN on M test samples (slow)")
    ap.add_argument("--skip-reducing", action="store_true")
    ap.add_argument("--estimators", action="store_true",
                    help="also SecSV + PS/GT/KS on the BANK-shaped task (Table 3)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" /
                                         "bench_secsv.json"))
    args = ap.parse_args()
    with threadpool_limits(limits=1):
        red = [] if args.skip_reducing else bench_reducing(1 if args.quick else args.repeats)
        for r in red:
            print(json.dumps(r), flush=True)
        protos = [] if args.skip_protocols else bench_protocols(args.quick)
        cnn = bench_cnn(args.cnn) if args.cnn else None
        ests = bench_estimators() if args.estimators else []
    out = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                       "load_avg": os.getloadavg()},
           "reducing": red, "protocols": protos, "cnn": cnn, "estimators": ests}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    if not red:
        return
    print("\n| shape | Full CKKS ms/sample (authors) | Half CKKS | Half BFV (ours, exact) |")
    print("| --- | --- | --- | --- |")
    by = {(r["shape"], r["variant"], r["scheme"]): r for r in red}
    for d_out, d_in in SHAPES:
        s = f"{d_out}x{d_in}"
        f = by[(s, "full", "ckks-n4096")]
        print(f"| {s} | {f['ms_per_sample']:.3f} ({f['authors_ms']}) | "
              f"{by[(s, 'half', 'ckks-n4096')]['ms_per_sample']:.3f} | "
              f"{by[(s, 'half', 'bfv-n8192')]['ms_per_sample']:.3f} |")
    if protos:
        print("\n| task | protocol | shortcut | SampleSkip | wall s | CPU s | authors s | error |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in protos:
            print(f"| {r['task']} M={r['M']} T={r['T']} | {r['protocol']} | "
                  f"{r.get('linear_shortcut', '-')} | {r.get('sample_skip', False)} | "
                  f"{r['wall_seconds']:.2f} | {r['cpu_seconds']:.2f} | "
                  f"{r['authors_secsv_seconds']} | "
                  f"{r['error_to_nssv']:.2e} |")


if __name__ == "__main__":
    main()
