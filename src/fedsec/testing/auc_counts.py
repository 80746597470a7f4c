"""What a curious party, or the server, can solve for from an FHAUC result: the class counts.

The attack. A party decrypts, per run ``k`` (semi-honest mode has one run with
``a = b = g = 1``), ``Y = (K/S)*a*denom``, ``X = (K/S)*b*num`` and ``Xb = (K/S)*g*B`` after
removing the multiples of ``denom`` it can compute (the pair mask's ``c*denom``, malicious
mode's ``r1*denom``): ``K`` an integer, ``S`` the public prime the result was rescaled by,
``a, b, g`` known to the party, ``denom = 2*Pos*Neg``, ``num`` and ``B`` (pairs within a
bin) carrying the parties' noise and offsets (:mod:`fedsec.auc.masking`). A candidate
denominator ``q`` in ``(Y/a, 2Y/a]`` (``K/S`` is in ``[1/2, 1)``) is *consistent* with

* **the AUC alone**: ``q*AUC`` is an integer (the numerator) to the AUC's precision;
* **the whole view**: also ``S*Y/(a*q)`` is an integer (the mask's grid), ``S*X/(b*num')``
  with ``num' = round(q*AUC)`` is the same integer, and some integer ``B`` lies where the
  bound puts it, ``q*bound`` minus an offset the parties' one-sided offsets allow.

The attacker is given every advantage the measurement can give it: it adds **no** noise or
offsets of its own (:class:`QuietParty`, :class:`QuietMaliciousParty`), and it knows the
true noise scale (its tolerances are ``k`` true standard deviations, from the true counts),
so a test that rules out candidates shows up. :func:`denominator_candidates` counts both
sets (scanning the whole window, or a uniform sample of it when the window is large) and
says whether the truth survives.

The server sees what nodes share: in malicious mode the AUC rounded to
:data:`~fedsec.auc.common.SHARED_AUC_DIGITS` significant digits and the bound rounded up
to :data:`~fedsec.auc.common.SHARED_BOUND_DIGITS` (:func:`server_candidates`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec.auc.common import AGGREGATOR, local_federation, party_role, shared_result
from fedsec.auc.fhauc import FHAUCAggregator, FHAUCConfig, FHAUCParty
from fedsec.auc.fhauc_malicious import (
    MaliciousAggregator,
    MaliciousConfig,
    MaliciousParty,
)
from fedsec.auc.masking import BOUND_OFFSET_MAX, COUNT_NOISE_SD, NUMERATOR_NOISE_FACTOR
from fedsec.auc.policy import IN_PROCESS_MAX_KEY_BYTES, PartyPolicy
from fedsec.crypto.drbg import SeededRandomSource
from fedsec.crypto.keysetup import run_key_setup
from fedsec.metrics import confusion_counts, trapezoid_terms
from fedsec.protocol import wire
from fedsec.protocol.network import Network

__all__ = ["PartyView", "QuietParty", "QuietMaliciousParty", "observe", "observe_malicious",
           "denominator_candidates", "server_candidates", "federation"]


def federation(samples: int, seed: int, parties: int = 3
               ) -> list[tuple[np.ndarray, np.ndarray]]:
    """A simulated federation of ``samples`` in all (reproducible from ``seed``): balanced
    labels, scores that overlap (``0.3*y + 0.7*u``, three decimals, so there are ties)."""
    rng = SeededRandomSource(seed.to_bytes(32, "little"), b"fedsec/testing/federation")
    out = []
    n = samples // parties
    for _ in range(parties):
        y = (rng.uniform(n) < 0.5).astype(np.int64)
        s = np.round(np.clip(0.3 * y + 0.7 * rng.uniform(n), 0, 1), 3)
        out.append((y, s))
    return out


class QuietParty(FHAUCParty):
    """A party that skips its own share of the counts' noise and offsets (the attacker:
    what it adds it would only have to subtract)."""

    def _draw_noise(self, n_parties: int) -> tuple[np.ndarray, tuple[float, float]]:
        return np.zeros(3), (0.0, 0.0)


class QuietMaliciousParty(MaliciousParty):
    """:class:`QuietParty` for malicious mode."""

    def _draw_noise(self, n_parties: int) -> tuple[np.ndarray, tuple[float, float]]:
        return np.zeros(3), (0.0, 0.0)


@dataclass(frozen=True)
class PartyView:
    """What the attacking party decrypted, per run: ``y``, ``x``, ``xb`` (after removing the
    known multiples of denom) and their known factors ``a``, ``b``, ``g``; the mask prime
    ``s``; what it announced (``auc``, ``bound``); the noise scales an attacker could know
    (``sd_num``, ``sd_den``: standard deviations of num and denom from the other parties'
    noise; ``offset_max``: the most their offsets add to ``B``); and the truth."""

    y: NDArray[np.float64]
    x: NDArray[np.float64]
    xb: NDArray[np.float64]
    a: NDArray[np.float64]
    b: NDArray[np.float64]
    g: NDArray[np.float64]
    s: int
    auc: float
    bound: float
    sd_num: float
    sd_den: float
    offset_max: float
    pos: int
    neg: int
    mode: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def true_denom(self) -> int:
        return 2 * self.pos * self.neg


def _pooled(parties: Sequence[tuple[Any, Any]], points: Any) -> tuple[int, int, np.ndarray,
                                                                    np.ndarray]:
    y = np.concatenate([np.asarray(p[0]) for p in parties])
    s = np.concatenate([np.asarray(p[1], dtype=np.float64) for p in parties])
    tp, fp = confusion_counts(y, s, np.asarray(points))
    t, f = trapezoid_terms(tp, fp)
    return int(tp[-1]), int(fp[-1]), np.asarray(t, dtype=np.float64), np.asarray(
        f, dtype=np.float64)


def _federation(names: Sequence[str], spec: Any) -> tuple[Any, Any, Any, Any]:
    identities, roster = local_federation(names)
    ks_agg, keys = run_key_setup(identities, roster, spec)
    return ks_agg, keys, roster, identities


def observe(parties: Sequence[tuple[Any, Any]], *, decision_points: int = 100,
            masking: str = "single", preset: str = "CKKS_128_N8192_DEPTH1_S39",
            allow_insecure: bool = False, noise: bool = True) -> PartyView:
    """Run semi-honest FHAUC in this process (party 0 quiet) and return party 0's view.
    ``noise=False`` makes every party quiet (the control: the search must then find the
    denominator)."""
    cfg = FHAUCConfig.create(decision_points, preset=preset, masking=masking,
                             allow_insecure=allow_insecure)
    names = [f"p{i}" for i in range(len(parties))]
    ks_agg, keys, roster, _ = _federation(names, cfg.key_spec())
    agg = FHAUCAggregator(ks_agg.context, cfg, names=ks_agg.names, session=ks_agg.session)
    policy = PartyPolicy(max_decision_points=max(1000, cfg.n_points), presets=(cfg.preset,),
                         max_key_bytes=IN_PROCESS_MAX_KEY_BYTES)
    roles = [(QuietParty if i == 0 or not noise else FHAUCParty)(
        y, s, keys=k, config=cfg, roster=roster, policy=policy)
             for i, ((y, s), k) in enumerate(zip(parties, keys, strict=True))]
    seen: list[bytes] = []
    net = Network()
    net.intercept(lambda batch: seen.extend(e.payload for e in batch
                                            if e.kind == "fhauc/result"))
    subs = net.gather([party_role(n) for n in names], AGGREGATOR, [r.submit() for r in roles])
    result = net.broadcast(AGGREGATOR, [party_role(n) for n in names], agg.aggregate(subs))
    auc = roles[0].finalize(result[0])
    ctx = keys[0].context
    msg = wire.decode(seen[0])
    ct = ctx.deserialize(msg.blobs[0])
    z = ctx.decrypt(ct)
    s_prime = int(ctx.level_primes(ctx.top_parms_id)[len(ctx.level_primes(ct))])
    ratio = float(msg.meta.get("ratio", 0.0))
    pos, neg, t_all, f_all = _pooled(parties, cfg.points)
    y, x, xb = float(z[0].real), float(z[0].imag), float(z[1].imag)
    others = len(parties) - 1 if noise else 0
    sig = COUNT_NOISE_SD * math.sqrt(others / len(parties))
    off = others * BOUND_OFFSET_MAX / len(parties)
    return PartyView(
        y=np.array([y]), x=np.array([x - ratio * y]), xb=np.array([xb + ratio * y]),
        a=np.ones(1), b=np.ones(1), g=np.ones(1), s=s_prime, auc=auc,
        bound=roles[0].error_bound,
        # denom = 2*(Pos + e1)*(Neg + e2); every T gets 4*e3, so num gets 4*e3*Neg
        sd_num=NUMERATOR_NOISE_FACTOR * sig * neg,
        sd_den=2.0 * sig * math.hypot(pos, neg),
        offset_max=off * (pos + neg) + cfg.n_points * off * off, pos=pos, neg=neg,
        mode=f"semi-honest/{masking}",
        extra={"fresh": _fresh(len(parties), pos, neg, t_all, f_all)})


def observe_malicious(parties: Sequence[tuple[Any, Any]], *, decision_points: int = 100,
                      preset: str = "CKKS_128_N8192_DEPTH1_S39",
                      allow_insecure: bool = False, noise: bool = True) -> PartyView:
    """Run malicious FHAUC in this process (party 0 quiet) and return party 0's view
    (``noise=False``: every party quiet, the control)."""
    cfg = MaliciousConfig.create(decision_points, preset=preset, allow_insecure=allow_insecure,
                                 min_bound_bits=0.0)
    names = [f"p{i}" for i in range(len(parties))]
    ks_agg, keys, roster, identities = _federation(names, cfg.key_spec())
    policy = PartyPolicy(max_decision_points=max(1000, cfg.n_points), presets=(cfg.preset,),
                         max_key_bytes=IN_PROCESS_MAX_KEY_BYTES, min_bound_bits=0.0)
    roles = [(QuietMaliciousParty if i == 0 or not noise else MaliciousParty)(
        y, s, keys=k, config=cfg, identity=ident, roster=roster, policy=policy)
        for i, ((y, s), k, ident) in enumerate(zip(parties, keys, identities, strict=True))]
    agg = MaliciousAggregator(ks_agg.context, cfg, names=ks_agg.names,
                              session=ks_agg.session, roster=roster)
    seen: list[bytes] = []
    net = Network()
    net.intercept(lambda batch: seen.extend(e.payload for e in batch
                                            if e.kind == "fhauc-m/result"))
    on_net = [party_role(n) for n in names]
    commits = net.gather(on_net, AGGREGATOR, [r.commit() for r in roles])
    start = net.broadcast(AGGREGATOR, on_net, agg.start(commits))
    subs = net.gather(on_net, AGGREGATOR,
                      [r.submit(st) for r, st in zip(roles, start, strict=True)])
    result = net.broadcast(AGGREGATOR, on_net, agg.aggregate(subs))
    auc = roles[0].finalize(result[0])
    ctx = keys[0].context
    ct = ctx.deserialize(wire.decode(seen[0]).blobs[0])
    z = ctx.decrypt(ct)
    s_prime = int(ctx.level_primes(ctx.top_parms_id)[len(ctx.level_primes(ct))])
    party = roles[0]
    runs, bruns = party._runs, party._bound_runs   # the attacker's own randomness
    assert runs is not None and bruns is not None
    stride, r = cfg.stride, cfg.runs
    ys, xs, xbs, a, b, g = [], [], [], [], [], []
    for k in range(r):
        yk = float(z[2 * k + 1].imag)
        xk = float(z[2 * k].imag)
        xbk = float(z[2 * r + 2 * k].imag)
        rr, rb = runs[k], bruns[k]
        ys.append(yk)
        a.append(rr.r2)
        xs.append(xk - rr.r1 / rr.r2 * yk)
        b.append(rr.r0)
        xbs.append(xbk - rb.r1 / rr.r2 * yk)
        g.append(rb.r0)
    del stride
    pos, neg, t_all, f = _pooled(parties, cfg.points)
    others = len(parties) - 1 if noise else 0
    sig = COUNT_NOISE_SD * math.sqrt(others / len(parties))
    off = others * BOUND_OFFSET_MAX / len(parties)
    return PartyView(
        y=np.array(ys), x=np.array(xs), xb=np.array(xbs), a=np.array(a), b=np.array(b),
        g=np.array(g), s=s_prime, auc=auc, bound=party.error_bound,
        # as semi-honest: num gets 4*e*Neg, denom 2*(Pos*e2 + Neg*e1)
        sd_num=NUMERATOR_NOISE_FACTOR * sig * neg,
        sd_den=2.0 * sig * math.hypot(pos, neg),
        offset_max=off * (pos + neg) + cfg.n_points * off * off, pos=pos, neg=neg,
        mode="malicious",
        # CKKS noise differs between runs (the counts' noise does not): the spread of the
        # runs' values, which the attacker sees, measures it (twice, for margin)
        extra={"runs": r, "fresh": (
            2.0 * _spread(np.array(xs) / np.array(b)) * auc * 2.0 * pos * neg,
            2.0 * _spread(np.array(ys) / np.array(a)) * 2.0 * pos * neg)})


def _spread(v: NDArray[np.float64]) -> float:
    return float(np.std(v) / abs(np.mean(v)))


def _near_integer(v: NDArray[Any], tol: NDArray[Any] | float) -> NDArray[np.bool_]:
    return np.asarray(np.abs(v - np.round(v)) <= tol)


#: CKKS's own noise on a fresh slot at the default scale 2^39 (measured ~2^-32; twice that):
#: it is multiplied by the pooled counts like the parties' noise, and every party's
#: encryption adds it, the attacker's included. A floor under the noise scales, so the
#: no-noise control finds the truth.
FRESH_NOISE = 2.0 ** -31


def _tests(view: PartyView, q: NDArray[np.float64], k: float
           ) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    """(consistent with the AUC alone, consistent with the whole view) for candidates q."""
    auc = view.auc
    view = _with_floor(view)
    # the AUC's noise: relative sd of num and denom, both from the others' noise
    rel = math.hypot(view.sd_num / max(1.0, auc * view.true_denom),
                     view.sd_den / view.true_denom)
    tol_ratio = k * rel * max(auc, 1e-12) * q + q * 4e-15 + 1e-12
    ok_auc = _near_integer(q * auc, tol_ratio)
    ok = ok_auc.copy()
    s = np.longdouble(view.s)
    num_c = np.round(q * auc)
    for y, x, xb, a, b, g in zip(view.y, view.x, view.xb, view.a, view.b, view.g, strict=True):
        kq = s * np.longdouble(y) / (np.longdouble(a) * q.astype(np.longdouble))
        # the grid residual of the truth: K * (noise of denom) / denom
        sd_y = kq * np.longdouble(view.sd_den / view.true_denom)
        tol_y = np.minimum(np.longdouble(k) * sd_y + np.longdouble(1e-6), np.longdouble(0.5))
        ok &= np.abs(kq - np.round(kq)) <= tol_y
        kx = s * np.longdouble(x) / (np.longdouble(b) * np.maximum(num_c, 1.0
                                                                  ).astype(np.longdouble))
        sd_x = kx * np.longdouble(view.sd_num / max(1.0, auc * view.true_denom))
        tol_x = np.minimum(np.longdouble(k) * sd_x + np.longdouble(1e-6), np.longdouble(0.5))
        ok &= (np.abs(kx - np.round(kx)) <= tol_x) | (num_c < 1)
        # the bound: B' = q * bound_raw; the true B lies in [B' - offset_max, B'] (+ noise)
        b_raw = q * (xb / g) / (y / a)
        tol_b = k * float(view.extra["fresh"][0]) + 1e-6   # CKKS noise, as num's
        lo = np.ceil(b_raw - view.offset_max - tol_b)
        hi = np.floor(b_raw + tol_b)
        ok &= lo <= hi
    return ok_auc, ok


def _with_floor(view: PartyView) -> PartyView:
    from dataclasses import replace

    fl = view.extra["fresh"]
    return replace(view, sd_num=math.hypot(view.sd_num, fl[0]),
                   sd_den=math.hypot(view.sd_den, fl[1]))


def _fresh(n_parties: int, pos: int, neg: int, t: np.ndarray, f: np.ndarray,
           factor: float = 1.0) -> tuple[float, float]:
    e = FRESH_NOISE * math.sqrt(n_parties) * factor
    return (e * float(np.sqrt(np.sum(t * t) + np.sum(f * f))),
            2.0 * e * math.hypot(pos, neg))


def denominator_candidates(view: PartyView, *, k: float = 4.0, max_scan: int = 1 << 26,
                           samples: int = 1 << 23, chunk: int = 1 << 21,
                           seed: int = 0) -> dict[str, Any]:
    """Count the denominators in ``(Y/a, 2Y/a]`` consistent with the AUC alone and with the
    whole view (every candidate when the window holds at most ``max_scan``, else a uniform
    sample of ``samples``, scaled to the window), keeping a candidate whose residuals are
    within ``k`` true standard deviations. Also whether the truth survives each."""
    y0 = float(view.y[0] / view.a[0])
    lo, hi = max(1, math.floor(y0)), math.ceil(2 * y0)
    window = hi - lo + 1
    scan = window <= max_scan
    n_auc = n_all = 0
    # which candidates to test: reproducible, not a secret
    rng = SeededRandomSource(seed.to_bytes(32, "little"), b"fedsec/testing/auc-counts")
    total = window if scan else samples
    done = 0
    while done < total:
        m = min(chunk, total - done)
        if scan:
            q = np.arange(lo + done, lo + done + m, dtype=np.float64)
        else:
            q = np.floor(lo + rng.uniform(m) * window).astype(np.float64)
        a_ok, w_ok = _tests(view, q, k)
        n_auc += int(a_ok.sum())
        n_all += int(w_ok.sum())
        done += m
    t_auc, t_all = _tests(view, np.array([float(view.true_denom)]), k)
    scale = 1.0 if scan else window / samples
    return {"mode": view.mode, "pos": view.pos, "neg": view.neg, "window": window,
            "scanned": "all" if scan else samples,
            "auc_alone": n_auc * scale, "whole_view": n_all * scale,
            "kept_fraction": (n_all / n_auc) if n_auc else 1.0,
            "truth_survives_auc": bool(t_auc[0]), "truth_survives_view": bool(t_all[0])}


def server_candidates(auc: float, bound: float, true_denom: int, *,
                      span: float = 4.0, max_scan: int = 1 << 24, seed: int = 0
                      ) -> dict[str, Any]:
    """The server's search over what a node shares (:func:`fedsec.auc.common.shared_result`)
    in ``[denom/span, denom*span]`` (the server knows no ``Y``; the window is generous to
    it): consistent with the shared AUC alone, and with the shared bound as well (the true
    ``B/denom`` lies in ``(previous 2-digit value, shared bound]``)."""
    sa, sb = shared_result(auc, bound)
    lo, hi = max(2, int(true_denom / span)), int(true_denom * span)
    window = hi - lo + 1
    rng = SeededRandomSource(seed.to_bytes(32, "little"), b"fedsec/testing/auc-counts")
    q = (np.arange(lo, hi + 1, dtype=np.float64) if window <= max_scan
         else np.floor(lo + rng.uniform(max_scan) * window).astype(np.float64))
    half = 0.5 * 10.0 ** (math.floor(math.log10(sa)) - 5) if sa > 0 else 5e-7
    ok_auc = np.floor(q * (sa + half)) >= np.ceil(q * (sa - half))
    step = 10.0 ** (math.floor(math.log10(sb)) - 1) if sb > 0 else 0.0
    ok = ok_auc & (np.floor(q * sb) >= np.ceil(q * max(0.0, sb - step)))
    scale = 1.0 if window <= max_scan else window / max_scan
    return {"window": window, "auc_alone": int(ok_auc.sum()) * scale,
            "whole_view": int(ok.sum()) * scale,
            "kept_fraction": float(ok.sum() / max(1, ok_auc.sum()))}
