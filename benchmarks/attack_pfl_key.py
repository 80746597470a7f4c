"""The Priv-PFL key-recovery attack at the default parameters (``CKKS_128_N32768_DEPTH19``).

Against the protocol of Cui et al. as first built, one client uploaded the ciphertext
``(0, c)`` with published norm 0, accepted nobody, and its "result" was ``c·s + e'``:
rounding gave every coefficient of the decryptor's secret key (32,768 of 32,768). Now a
client controls only its plaintext (it one-time pads it; the decryptor makes every
ciphertext): this script plays the same client with the same polynomial ``c`` as its
plaintext, correctly padded, sealed and signed, in three variants (norm 0, a large
plausible norm, two Sybils accepting each other), runs the rounding attack on what it opens
and reports the share of key coefficients it gets right (a third is what guessing 0
everywhere gives: SEAL's ternary key) and the noise beside its own plaintext.

Usage::

    python benchmarks/attack_pfl_key.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "pfl"))
import test_secure_attacks as ta  # noqa: E402

from fedsec.crypto.rawpoly import secret_key_coeffs  # noqa: E402
from fedsec.pfl.secure import SecurePFLConfig, SecurePFLSession  # noqa: E402
from fedsec.protocol import wire  # noqa: E402
from fedsec.testing.pfl import plaintext_upload  # noqa: E402


def run(session: SecurePFLSession, variant: str, t: int, c: int = 1 << 20) -> dict[str, Any]:
    t0 = time.perf_counter()
    w = ta._models(17)  # noqa: SLF001
    ups = ta._uploads(session, w, t)  # noqa: SLF001
    chosen = ta._chosen_plaintext(session, c)  # noqa: SLF001
    attackers = [1, 2] if variant == "sybils" else [1]
    norm = {"norm-0": 0.0, "plausible-norm": 0.9 * ta.B, "sybils": 0.0}[variant]
    for a in attackers:
        ups[a] = plaintext_upload(session.clients[a], chosen, d=ta.D, claimed_norm=norm,
                                  norm_bound=ta.B, sigma=0.5, round_index=t)
    ta._to_compare(session, ups, t)  # noqa: SLF001
    srv, dec = session.server, session.decryptor
    accepted = [frozenset() for _ in range(ta.K)]
    if variant == "sybils":
        accepted[1], accepted[2] = frozenset({2}), frozenset({1})
    sel = type("S", (), {"accepted": tuple(accepted)})
    reqs = srv.aggregate(sel, 0.5)  # type: ignore[arg-type]
    results = {a: srv.deliver(a, dec.unmask_for_client(reqs[a])) for a in attackers}
    row: dict[str, Any] = {"variant": variant, "ring": session.server._enc.n,
                           "attacker_valid": bool(srv.validity()[1])}
    if wire.decode(results[1]).meta.get("own") is True:
        row.update(decrypted=False, key_coefficients_right=None)
    else:
        expect = ta._to_level0(session, chosen[0])  # noqa: SLF001
        opened = ta._opened_result(session, 1, t, results[1])  # noqa: SLF001
        noise = ta._coeffs(dec._ctx, opened, 0) - ta._coeffs(dec._ctx, expect, 0)  # noqa: SLF001
        frac = ta._rounding_attack(session, opened, expect, c)  # noqa: SLF001
        sk = secret_key_coeffs(dec._ctx)  # noqa: SLF001
        row.update(decrypted=True, key_coefficients_right=round(frac, 4),
                   key_zero_share=round(float(np.mean(sk == 0)), 4),
                   noise_max_abs=int(np.abs(noise).max()), c=c)
    row["seconds"] = round(time.perf_counter() - t0, 1)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    t0 = time.perf_counter()
    session = SecurePFLSession.create(ta.K, SecurePFLConfig())  # the default: 128-bit, 2^15
    print(f"session set up in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    rows = [run(session, v, t) for t, v in enumerate(("norm-0", "plausible-norm", "sybils"),
                                                      start=1)]
    for r in rows:
        print(json.dumps(r))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
