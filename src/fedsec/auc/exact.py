"""Exact (certified) secure AUC: refine the decision points until the certified bound is
below a target - beyond the papers.

Why
---
The papers' AUC is a trapezoid over ``N`` decision points. Every (positive, negative) pair
whose scores fall between the same two points is counted as 1/2; every other pair exactly
as the exact AUC (``sklearn.metrics.roc_auc_score``) counts it. FHAUC computes, under
encryption and next to ``num`` and ``denom``, ``B = sum_b pos_b * neg_b`` over the bins,
so every result carries a **certified** bound ``|exact - trapezoid| <= B / (2*Pos*Neg)``
(``SecureAUCResult.error_bound``; plaintext reference
:func:`fedsec.metrics.trapezoid_error_bound`). Pairs in a bin that holds a single float
value (e.g. both scores exactly 1.0) are exact ties and do not count.

A uniform grid cannot make that bound small when scores are peaked (digits scores raised to
the 8th power crowd near 0: N = 100 gives 0.864 where scikit-learn says 0.988). Exact mode
therefore **refines**: it re-grids only the bins that still hold pairs.

Protocol (``decision_points="exact"``)
--------------------------------------
1. The grid starts with :data:`INITIAL_POINTS` public points: half uniform in value, half
   uniform in the bit pattern of the float (a log-like spacing reaching down to 1e-300).
2. *Refinement round* (roles :class:`BinPairsParty`, :class:`BinPairsAggregator`, bytes
   only): every party encrypts ``dTP[b] + i*dFP[b]`` for every bin ``b`` (one slot per
   bin); the aggregator adds the parties' ciphertexts, squares, keeps ``4i*pos_b*neg_b``
   (``z**2 - conj(z**2)``: no rotation), multiplies slot ``b`` by a fresh mask
   ``r_b`` log-uniform in ``[2^-10, 1]`` (from ``secrets``, encoded at the prime the result
   is then rescaled by), adds 2^-29 noise and returns it. Each party decrypts and marks the
   bins whose value exceeds ``2^-11`` (a bin with one pair reads at least ``2^-10``).
3. Every marked bin that can still be split (it holds more than one float) is split into
   ``k`` sub-bins, uniform in the bit pattern of the float - so any bin reaches
   single-float width in a few rounds whatever its scale - plus the float right after its
   lower edge (which isolates a tie at the edge). ``k`` shares :data:`DEFAULT_MAX_POINTS`
   among the marked bins.
4. Steps 2-3 repeat until no marked bin can be split, or the point budget or
   ``max_rounds`` is reached. Then one ordinary FHAUC evaluation (semi-honest or
   malicious, new key set-up) on the final grid yields the AUC and the certified bound.
   If the bound is above ``target`` the result says so (``target_reached=False``) and a
   ``UserWarning`` is raised.

What refinement reveals
-----------------------
*To the parties*, per bin of each refinement round: whether the bin holds a pair, and the
federation's pair count in it within a factor 2^10 (the mask's spread). Nothing per party.
*To everyone, the aggregator included*: the refined grid, i.e. which score intervals hold
both a positive and a negative of the federation, at the resolution reached. With the final
AUC and bound this is the price of exactness; the default mode (fixed points) reveals none
of it. The final evaluation reveals what FHAUC reveals (see :mod:`fedsec.auc.fhauc`).

Threat model
------------
As FHAUC's. In **malicious** mode the final AUC and bound are verified as usual
(:mod:`fedsec.auc.fhauc_malicious`) - a cheating aggregator during refinement can only make
the grid worse (a larger, still certified bound) - but the refinement rounds themselves are
*not* verified: an aggregator that answers one with another ciphertext (e.g. a party's own
submission) learns, through the next public grid, which of its slots are non-zero. Exact
mode therefore raises a :class:`~fedsec.errors.PrivacyWarning` in malicious mode.
"""

from __future__ import annotations

import secrets
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from fedsec._validation import check_int, check_real
from fedsec.auc.common import (
    AGGREGATOR,
    SecureAUCResult,
    bytes_per_party,
    check_bound,
    evaluation_binding,
    local_federation,
    party_index,
    party_role,
    prepare_federation,
)
from fedsec.auc.exact_params import DEFAULT_MAX_ROUNDS, DEFAULT_TARGET
from fedsec.auc.masking import RESULT_NOISE_SD, finish_masked, masked_product
from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.dpnoise import gaussian_noise
from fedsec.crypto.keysetup import KeySpec, PartyKeys, run_key_setup
from fedsec.crypto.params import DEFAULT_PRESET, get_preset
from fedsec.errors import PrivacyWarning, ProtocolError
from fedsec.metrics import confusion_counts
from fedsec.protocol import wire
from fedsec.protocol.binding import BROADCAST
from fedsec.protocol.network import Network
from fedsec.protocol.roles import receives

__all__ = ["DEFAULT_TARGET", "DEFAULT_MAX_POINTS", "DEFAULT_MAX_ROUNDS", "INITIAL_POINTS",
           "initial_grid", "refine_grid", "refinable_bins", "BinPairsParty",
           "BinPairsAggregator", "secure_auc_exact"]

#: Most decision points of the final grid (semi-honest: 16 ciphertexts on the default ring).
DEFAULT_MAX_POINTS = 16384
#: Malicious mode's final grid costs ~32x more slots per point (splits, runs, channels).
DEFAULT_MAX_POINTS_MALICIOUS = 2048
INITIAL_POINTS = 1024
#: Sub-bins per refined bin and round (fewer final points, a few more cheap rounds).
REFINE_SPLIT = 64
#: Most bins one refinement round may carry (one ciphertext holds ``slots`` bins).
MAX_REFINE_BINS = 1 << 16
#: Masks of the refinement round are log-uniform in [2^-MASK_SPREAD_BITS, 1].
MASK_SPREAD_BITS = 10
_THRESHOLD = 2.0 ** -(MASK_SPREAD_BITS + 1)
_ONE_BITS = int(np.float64(1.0).view(np.int64))


def _bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64).view(np.int64)


def _floats(b: np.ndarray) -> np.ndarray:
    return np.asarray(b, dtype=np.int64).view(np.float64)


def initial_grid(n_points: int = INITIAL_POINTS) -> np.ndarray:
    """Half the points uniform in [0, 1], half uniform in the float's bit pattern (dense
    near 0 on a log-like scale); decreasing, from 1.0 to 0.0."""
    n = check_int(n_points, "n_points", "initial_grid", min_value=4)
    lin = np.linspace(0.0, 1.0, n // 2)
    log = _floats(np.linspace(0, _ONE_BITS, n - n // 2).astype(np.int64))
    return np.unique(np.concatenate([lin, log, [0.0, 1.0]]))[::-1].copy()


def refinable_bins(points: np.ndarray) -> np.ndarray:
    """Bins ``n >= 1`` (``[theta_n, theta_{n-1})``) holding more than one float."""
    b = _bits(points)
    out = np.zeros(points.size, dtype=bool)
    out[1:] = (b[:-1] - b[1:]) > 1
    return out


def refine_grid(points: np.ndarray, marked: np.ndarray, k: int) -> np.ndarray:
    """Split every marked, refinable bin into ``k`` parts uniform in the float's bit
    pattern, plus the float right after its lower edge. Public: a function of the grid and
    the marks only."""
    pts = np.asarray(points, dtype=np.float64)
    b = _bits(pts)
    new = [b]
    for n in np.flatnonzero(np.asarray(marked, dtype=bool) & refinable_bins(pts)):
        lo, hi = int(b[n]), int(b[n - 1])
        span = hi - lo
        if span <= k:
            new.append(np.arange(lo + 1, hi, dtype=np.int64))
        else:
            steps = lo + (np.arange(1, k, dtype=object) * span) // k
            new.append(np.asarray(steps, dtype=np.int64))
            new.append(np.asarray([lo + 1], dtype=np.int64))
    merged = np.unique(np.concatenate(new))
    return _floats(merged)[::-1].copy()


# ------------------------------------------------------------------ refinement round
@dataclass(frozen=True)
class _RoundConfig:
    points: tuple[float, ...]
    preset: str
    round: int

    def digest(self) -> str:
        import hashlib

        h = hashlib.sha256(b"fedsec/fhauc-exact/round/v1|" + self.preset.encode()
                           + b"|" + str(self.round).encode() + b"|")
        h.update(np.asarray(self.points, dtype=np.float64).tobytes())
        return h.hexdigest()[:32]


class BinPairsParty:
    """A party's side of a refinement round: encrypt per-bin class counts, read which
    bins hold pairs."""

    def __init__(self, y_true: np.ndarray, y_score: np.ndarray, *, keys: PartyKeys,
                 points: np.ndarray, round_index: int) -> None:
        if not keys.context.has_secret_key:
            raise ValueError("a party needs the CKKS secret key")
        self._keys = keys
        self._points = np.asarray(points, dtype=np.float64)
        self._cfg = _RoundConfig(tuple(self._points.tolist()), keys.context.params.name,
                                 round_index)
        self._round = int(round_index)
        self._binding = evaluation_binding(keys.session, self._cfg.digest(), "fhauc-exact",
                                           party_role(keys.name))
        self._y, self._s = y_true, y_score

    @property
    def n_chunks(self) -> int:
        return -(-self._points.size // self._keys.context.slots)

    def submit(self) -> bytes:
        tp, fp = confusion_counts(self._y, self._s, self._points)
        dtp, dfp = np.diff(tp, prepend=0), np.diff(fp, prepend=0)
        ctx, per = self._keys.context, self._keys.context.slots
        blobs = []
        for c in range(self.n_chunks):
            vec = np.zeros(per, dtype=np.complex128)
            part = slice(c * per, min((c + 1) * per, self._points.size))
            vec[:part.stop - part.start] = dtp[part] + 1j * dfp[part]
            blobs.append(ctx.encrypt_bytes(vec))
        meta = self._binding.bind({"party": self._keys.index}, step="bins", to=AGGREGATOR,
                                  round=self._round)
        return wire.encode("fhauc-exact/bins", meta, blobs)

    @receives("fhauc-exact/pairs")
    def read(self, response: bytes, max_bytes: int = 1 << 30) -> np.ndarray:
        """Which bins hold a (positive, negative) pair of the federation."""
        msg = wire.decode(response, expect="fhauc-exact/pairs", max_bytes=max_bytes)
        check_bound(self._binding, msg.meta, step="pairs", sender=AGGREGATOR,
                    round=self._round, broadcast=True, what="refinement result")
        if len(msg.blobs) != self.n_chunks:
            raise ProtocolError(f"refinement result must hold {self.n_chunks} ciphertext(s)")
        ctx = self._keys.context
        vals = np.concatenate([ctx.decrypt(ctx.deserialize(b)) for b in msg.blobs])
        vals = vals[:self._points.size]
        if np.abs(vals.real).max(initial=0.0) > 1e-3 + 1e-6 * np.abs(vals).max(initial=0.0):
            raise ProtocolError("the refinement result is not a masked pair count (check: "
                                "real-part)")
        return np.asarray(np.abs(vals.imag) > _THRESHOLD)


class BinPairsAggregator:
    """The aggregator's side of a refinement round (ciphertexts only, no rotations)."""

    def __init__(self, context: CKKSContext, *, points: np.ndarray, names: Sequence[str],
                 session: str, round_index: int) -> None:
        if context.has_secret_key:
            raise ValueError("the aggregator must not hold the secret key")
        self._context = context
        self._points = np.asarray(points, dtype=np.float64)
        self._cfg = _RoundConfig(tuple(self._points.tolist()), context.params.name,
                                 round_index)
        self._names = tuple(names)
        self._session = session
        self._round = int(round_index)
        self._binding = evaluation_binding(session, self._cfg.digest(), "fhauc-exact",
                                           AGGREGATOR)
        self._timing: dict[str, float] = {}

    @property
    def timing(self) -> dict[str, float]:
        """Seconds the last :meth:`aggregate` took (``"total_s"``)."""
        return dict(self._timing)

    @receives("fhauc-exact/bins")
    def aggregate(self, submissions: Sequence[bytes]) -> bytes:
        t0 = time.perf_counter()
        ctx = self._context
        chunks = -(-self._points.size // ctx.slots)
        per_chunk: list[list[Any]] = [[] for _ in range(chunks)]
        seen: list[int] = []
        for raw in submissions:
            msg = wire.decode(raw, expect="fhauc-exact/bins")
            idx = party_index(msg.meta, len(self._names))
            check_bound(self._binding, msg.meta, step="bins",
                        sender=party_role(self._names[idx]), round=self._round,
                        what="a submission")
            if idx in seen:
                raise ProtocolError(f"invalid or duplicate party index {idx!r}")
            if len(msg.blobs) != chunks:
                raise ProtocolError(f"a submission must hold {chunks} ciphertext(s)")
            seen.append(idx)
            for c in range(chunks):
                per_chunk[c].append(ctx.deserialize(msg.blobs[c], at_top=True,
                                                    scale=ctx.scale))
        if len(seen) != len(self._names):
            raise ProtocolError("a refinement round needs every party")
        out = []
        for cts in per_chunk:
            z = ctx.add_many(cts)
            sq = ctx.square(z)
            q = ctx.sub(sq, ctx.conjugate(sq))        # 4i * pos_b * neg_b per slot
            u = np.array([secrets.randbits(52) for _ in range(ctx.slots)], dtype=np.float64)
            r = np.exp2(-MASK_SPREAD_BITS * u / float(1 << 52))
            res = finish_masked(ctx, masked_product(ctx, q, r))
            noise = gaussian_noise(2 * ctx.slots, sigma=RESULT_NOISE_SD)
            res = ctx.add_plain(res, noise[0::2] + 1j * noise[1::2])
            out.append(ctx.serialize(res))
        self._timing = {"total_s": time.perf_counter() - t0}
        meta = self._binding.bind({}, step="pairs", to=BROADCAST, round=self._round)
        return wire.encode("fhauc-exact/pairs", meta, out)


# ------------------------------------------------------------------ in-process driver
def secure_auc_exact(parties: Sequence[tuple[ArrayLike, ArrayLike]], *,
                     final: Callable[..., SecureAUCResult], security: str,
                     target: float = DEFAULT_TARGET, max_points: int | None = None,
                     max_rounds: int = DEFAULT_MAX_ROUNDS, preset: str = DEFAULT_PRESET,
                     names: Sequence[str] | None = None,
                     progress: Callable[[str], None] | None = None,
                     allow_insecure: bool = False, network: Network | None = None,
                     **final_kwargs: Any) -> SecureAUCResult:
    """Refine the grid in refinement rounds, then run ``final`` (the semi-honest or
    malicious runner) on it. Called by ``secure_auc(decision_points="exact")``.

    Every message (both key set-ups, every round, the final evaluation) crosses
    ``network`` (default: a fresh :class:`~fedsec.protocol.network.Network`), between
    ``"aggregator"`` and ``"party:<name>"``: tests and benchmarks count, observe or
    intercept the traffic there."""
    say = progress or (lambda _msg: None)
    net = network if network is not None else Network()
    check_real(target, "target", "secure_auc", ge=0.0, lt=1.0)
    if max_points is None:
        max_points = (DEFAULT_MAX_POINTS_MALICIOUS if security == "malicious"
                      else DEFAULT_MAX_POINTS)
    check_int(max_points, "max_points", "secure_auc", min_value=INITIAL_POINTS,
              max_value=1 << 16)
    check_int(max_rounds, "max_rounds", "secure_auc", min_value=0, max_value=64)
    if security == "malicious":
        warnings.warn("decision_points='exact' in malicious mode: the final AUC and bound "
                      "are verified, the refinement rounds are not (an aggregator can use "
                      "one as a decryption oracle whose answer shows in the next grid); "
                      "see fedsec.auc.exact", PrivacyWarning, stacklevel=3)
    get_preset(preset, allow_insecure=allow_insecure)
    data, party_names = prepare_federation(parties, names, 1 << 20)
    points = initial_grid(INITIAL_POINTS)
    rounds = 0
    stats: list[dict[str, Any]] = []
    capped = max_rounds == 0
    if max_rounds > 0:
        identities, roster = local_federation(party_names)
        say(f"exact mode: key set-up for refinement ({len(data)} parties)")
        spec = KeySpec.create(preset, [], True, allow_insecure=allow_insecure)
        ks_agg, keys = run_key_setup(identities, roster, spec, network=net)
        assert ks_agg.context is not None
        on_net = [party_role(k.name) for k in keys]
        while rounds < max_rounds:
            if points.size > MAX_REFINE_BINS:
                capped = True
                break
            roles = [BinPairsParty(y, s, keys=k, points=points, round_index=rounds)
                     for (y, s), k in zip(data, keys, strict=True)]
            agg = BinPairsAggregator(ks_agg.context, points=points, names=ks_agg.names,
                                     session=ks_agg.session, round_index=rounds)
            before = dict(net.accounting.bytes_by_message)
            subs = net.gather(on_net, AGGREGATOR, [r.submit() for r in roles])
            resp = agg.aggregate(subs)
            delivered = net.broadcast(AGGREGATOR, on_net, resp)
            marks = [r.read(d) for r, d in zip(roles, delivered, strict=True)]
            if any(not np.array_equal(marks[0], m) for m in marks[1:]):
                raise ProtocolError("parties read different refinement marks")
            rounds += 1
            todo = marks[0] & refinable_bins(points)
            up, down = bytes_per_party(net.accounting, ("fhauc-exact/bins",
                                                        "fhauc-exact/pairs"), before)
            stats.append({"points": int(points.size), "marked_bins": int(marks[0].sum()),
                          "refinable_marked": int(todo.sum()),
                          "bytes_up_per_party": up,
                          "bytes_down_per_party": down,
                          "aggregator_seconds": agg.timing["total_s"]})
            say(f"refinement round {rounds}: {int(points.size)} points, "
                f"{int(todo.sum())} bins still hold pairs")
            if not todo.any():
                break
            room = max_points - points.size
            k = min(REFINE_SPLIT, room // int(todo.sum()))
            if k < 2:
                capped = True
                break
            points = refine_grid(points, todo, k)
        else:
            capped = True
    if points.size > max_points:
        capped = True
    say(f"final evaluation on {points.size} decision points")
    res = final(data, decision_points=points, preset=preset, names=party_names,
                progress=progress, allow_insecure=allow_insecure, network=net,
                **final_kwargs)
    reached = res.error_bound <= target
    if not reached:
        why = ("the point budget or round cap was hit" if capped
               else "pairs of equal scores remain within one float")
        warnings.warn(f"exact mode: the certified error bound {res.error_bound:.3g} is above "
                      f"the target {target:g} ({why}; raise max_points / max_rounds)",
                      UserWarning, stacklevel=3)
    extra = dict(res.extra)
    extra["refinement_rounds"] = stats
    extra["refinement_capped"] = capped
    extra["bytes_up_per_party_total"] = res.bytes_up_per_party + sum(
        s["bytes_up_per_party"] for s in stats)
    extra["bytes_down_per_party_total"] = res.bytes_down_per_party + sum(
        s["bytes_down_per_party"] for s in stats)
    extra["aggregator_seconds_total"] = res.aggregator_seconds + sum(
        s["aggregator_seconds"] for s in stats)
    return replace(res, decision_mode="exact", target=float(target), target_reached=reached,
                   rounds=rounds + 1, extra=extra)

