"""What a curious party can solve for from a semi-honest FHAUC result: the class counts.

A party decrypts, in slot class 0 and 1, ``Y = d*denom``, ``X = d*num + c*denom`` and
``Bm = d*B - c*denom`` (``denom = 2*Pos*Neg``; ``d = K/S`` with ``K`` an integer and
``S`` the public prime the result was rescaled by; result noise of standard deviation
``sigma``). It announces ``AUC = X/Y - c/d`` and ``bound = Bm/Y + c/d``. A candidate
denominator ``q`` in ``(Y, 2Y]`` (``d`` is in ``[1/2, 1)``) is *consistent* with

* the AUC alone: ``q*AUC`` is an integer (the numerator), to the AUC's precision;
* the whole view: also ``q*bound`` is an integer (the pairs in shared bins) and ``S*Y/q``
  is an integer (the mask's grid), each to its precision.

:func:`denominator_candidates` counts both. The issue-22 goal is that the whole view leaves
at least half of the candidates the AUC alone leaves; today it leaves about one (the truth)
from ``~10^4`` samples on. :func:`observe` runs one in-process federation and returns
party 0's view (with the truth, for the measurement).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from fedsec.auc.common import AGGREGATOR, local_federation, party_role
from fedsec.auc.fhauc import FHAUCAggregator, FHAUCConfig, FHAUCParty
from fedsec.auc.masking import RESULT_NOISE_SD
from fedsec.auc.policy import IN_PROCESS_MAX_KEY_BYTES, PartyPolicy
from fedsec.crypto.keysetup import run_key_setup
from fedsec.protocol import wire
from fedsec.protocol.network import Envelope, Network

__all__ = ["PartyView", "observe", "denominator_candidates"]


@dataclass(frozen=True)
class PartyView:
    """What party 0 decrypted (``y, x, b`` from slot classes 0 and 1), the public prime
    ``s`` and the ratio ``c/d`` it was told, what it announced, and the truth."""

    y: float
    x: float
    b: float
    s: int
    ratio: float
    auc: float
    bound: float
    true_denom: int


def observe(parties: Sequence[tuple[NDArray[np.int64], NDArray[np.float64]]], *,
            decision_points: int = 100, masking: str = "single",
            preset: str = "CKKS_128_N8192_DEPTH2_S49", allow_insecure: bool = False
            ) -> PartyView:
    """Run semi-honest FHAUC in this process and return party 0's view of the result."""
    cfg = FHAUCConfig.create(decision_points, preset=preset, masking=masking,
                             allow_insecure=allow_insecure)
    names = [f"p{i}" for i in range(len(parties))]
    identities, roster = local_federation(names)
    ks_agg, keys = run_key_setup(identities, roster, cfg.key_spec())
    assert ks_agg.context is not None
    agg = FHAUCAggregator(ks_agg.context, cfg, names=ks_agg.names, session=ks_agg.session)
    policy = PartyPolicy(max_decision_points=max(1000, cfg.n_points), presets=(cfg.preset,),
                         max_key_bytes=IN_PROCESS_MAX_KEY_BYTES)
    roles = [FHAUCParty(y, s, keys=k, config=cfg, roster=roster, policy=policy)
             for (y, s), k in zip(parties, keys, strict=True)]
    seen: list[bytes] = []

    def keep(batch: list[Envelope]) -> None:
        seen.extend(e.payload for e in batch if e.kind == "fhauc/result")

    net = Network()
    net.intercept(keep)
    subs = net.gather([party_role(n) for n in names], AGGREGATOR, [r.submit() for r in roles])
    result = net.broadcast(AGGREGATOR, [party_role(n) for n in names], agg.aggregate(subs))
    auc = roles[0].finalize(result[0])
    ctx = keys[0].context
    msg = wire.decode(seen[0])
    ct = ctx.deserialize(msg.blobs[0])
    z = ctx.decrypt(ct)
    chain = ctx.level_primes(ctx.top_parms_id)
    s = int(chain[len(ctx.level_primes(ct))])  # the prime the result was rescaled by
    y_all = np.concatenate([np.asarray(y) for y, _ in parties])
    pos = int(y_all.sum())
    return PartyView(y=float(z[0].real), x=float(z[0].imag), b=float(z[1].imag), s=s,
                     ratio=float(msg.meta.get("ratio", 0.0)), auc=auc,
                     bound=roles[0].error_bound, true_denom=2 * pos * (len(y_all) - pos))


def _near_integer(v: NDArray[np.float64], tol: NDArray[np.float64] | float) -> NDArray[np.bool_]:
    return np.abs(v - np.round(v)) <= tol


def denominator_candidates(view: PartyView, *, sigma: float = RESULT_NOISE_SD,
                           k: float = 6.0, chunk: int = 1 << 22) -> dict[str, int | bool]:
    """Count the denominators in ``(Y, 2Y]`` consistent with the AUC alone and with the
    whole view, keeping a candidate whose residuals are within ``k`` standard deviations
    of the noise (``sigma`` on each decrypted value; a deliberately generous tolerance for
    the grid, which also carries CKKS noise). Also whether the truth survives."""
    y = view.y
    lo, hi = max(1, math.floor(y)), math.ceil(2 * y)
    n_auc = n_all = 0
    truth_auc = truth_all = False
    for start in range(lo, hi + 1, chunk):
        q = np.arange(start, min(hi + 1, start + chunk), dtype=np.float64)
        # numerator q*AUC: the noise of X/Y is ~ sigma*sqrt(1+AUC^2)/Y, times q <= 2Y, and
        # the AUC is a float64 (relative error a few 1e-16 after the division)
        tol_ratio = k * sigma * q / y * 2.0 + q * 4e-15
        ok_auc = _near_integer(q * view.auc, tol_ratio)
        ok = ok_auc & _near_integer(q * view.bound, tol_ratio)
        # the grid in extended precision (S*Y has ~88 bits; float64 would round it by ~64)
        grid = np.longdouble(view.s) * np.longdouble(y) / q.astype(np.longdouble)
        # Y also carries CKKS noise: measured, the truth's grid residual reaches ~5.5 sigma
        # (3,000-sample parties), so the grid's sigma is taken 3x the result noise
        ok &= np.abs(grid - np.round(grid)) <= np.longdouble(3 * k * view.s * sigma) / q + 1e-9
        n_auc += int(ok_auc.sum())
        n_all += int(ok.sum())
        if start <= view.true_denom < start + len(q):
            i = view.true_denom - start
            truth_auc, truth_all = bool(ok_auc[i]), bool(ok[i])
    return {"window": hi - lo + 1, "auc_alone": n_auc, "whole_view": n_all,
            "truth_survives_auc": truth_auc, "truth_survives_view": truth_all}
