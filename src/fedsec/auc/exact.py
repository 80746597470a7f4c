"""Exact (certified) secure AUC: refine the decision points until the certified bound is
below a target - beyond the papers.

Every FHAUC result carries a certified bound on ``|exact AUC - trapezoid AUC|``; a uniform
grid cannot make it small when scores are peaked, so exact mode (``decision_points="exact"``)
re-grids only the bins that still hold a (positive, negative) pair. Each refinement round
(roles :class:`BinPairsParty`, :class:`BinPairsAggregator`; BFV modulo a prime) tells the
parties, per bin, only whether it holds a pair of the federation, checked by secret canary
slots (:class:`~fedsec.errors.TamperingDetected` otherwise); the final evaluation is the
semi-honest or malicious FHAUC on the refined grid.

Why, the protocol step by step, what each role learns and the canaries' detection
probabilities: ``docs/protocols/secure-auc.md`` (the documentation site's secure AUC
page).
"""

from __future__ import annotations

import hashlib
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

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
from fedsec.auc.exact_params import DEFAULT_MAX_ROUNDS, DEFAULT_TARGET, default_target
from fedsec.crypto.bfv import BFVContext, BFVParams
from fedsec.crypto.drbg import SEED_BYTES, SeededRandomSource, SystemRandomSource
from fedsec.crypto.keysetup import KeySpec, PartyKeys, run_key_setup
from fedsec.crypto.params import DEFAULT_PRESET, get_preset
from fedsec.errors import ProtocolError, TamperingDetected
from fedsec.metrics import confusion_counts
from fedsec.protocol import wire
from fedsec.protocol.binding import BROADCAST
from fedsec.protocol.network import Network
from fedsec.protocol.roles import receives

__all__ = ["next_grid", "DEFAULT_TARGET", "DEFAULT_MAX_POINTS", "DEFAULT_MAX_ROUNDS",
           "INITIAL_POINTS", "EXACT_BFV", "MIN_CANARIES", "CANARY_MAX_COUNT", "initial_grid",
           "refine_grid", "refinable_bins", "refinement_keys", "BinPairsParty",
           "BinPairsAggregator", "secure_auc_exact"]

#: Most decision points of the final grid (semi-honest: 16 ciphertexts on the default ring).
DEFAULT_MAX_POINTS = 16384
#: Malicious mode's final grid costs ~32x more slots per point (splits, runs, channels).
DEFAULT_MAX_POINTS_MALICIOUS = 2048
INITIAL_POINTS = 1024
#: Sub-bins per refined bin and round (fewer final points, a few more cheap rounds).
REFINE_SPLIT = 64
#: Most bins one refinement round may carry.
MAX_REFINE_BINS = 1 << 16
#: Refinement rounds' BFV parameters: 8192 slots, a 41-bit batching prime ``t > 2^40``.
EXACT_BFV = BFVParams(poly_modulus_degree=8192, plain_bits=41)
#: Fewest canary slots of a refinement round (every free slot of its last ciphertext is one).
MIN_CANARIES = 256
#: A canary's non-zero pooled counts are uniform in ``[1, CANARY_MAX_COUNT]``.
CANARY_MAX_COUNT = 1 << 10
_ONE_BITS = int(np.float64(1.0).view(np.int64))
U64 = NDArray[np.uint64]


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
    round: int

    def digest(self) -> str:
        h = hashlib.sha256(b"fedsec/fhauc-exact/round/v2|bfv:"
                           + str(EXACT_BFV.poly_modulus_degree).encode() + b":"
                           + str(EXACT_BFV.plain_bits).encode() + b"|"
                           + str(self.round).encode() + b"|")
        h.update(np.asarray(self.points, dtype=np.float64).tobytes())
        return h.hexdigest()[:32]


def _chunks(n_bins: int, slots: int) -> int:
    """Ciphertexts per count vector: every bin plus at least MIN_CANARIES canaries."""
    return -(-(n_bins + MIN_CANARIES) // slots)


def _label(what: str, session: str, round_index: int, index: int = -1) -> bytes:
    return f"fedsec/fhauc-exact/v2|{what}|{session}|{round_index}|{index}".encode()


@dataclass(frozen=True)
class _Layout:
    """One round's secret slot layout (every party derives the same from the seed)."""

    bin_slots: NDArray[np.int64]      # slot of bin b
    canary_slots: NDArray[np.int64]
    canary_pos: U64                   # pooled counts every party knows
    canary_neg: U64

    @property
    def canary_pairs(self) -> NDArray[np.bool_]:
        """Which canaries hold a pair (must read non-zero; the others zero)."""
        out: NDArray[np.bool_] = (self.canary_pos > 0) & (self.canary_neg > 0)
        return out


def _layout(seed: bytes, session: str, round_index: int, n_bins: int, slots: int
            ) -> _Layout:
    total = _chunks(n_bins, slots) * slots
    src = SeededRandomSource(seed, _label("layout", session, round_index))
    # a uniform permutation (ties among 64-bit keys: probability < total^2 / 2^65)
    order = np.argsort(src.uint64(total), kind="stable").astype(np.int64)
    n_can = total - n_bins
    kinds = np.arange(n_can) % 4  # (0, 0), (p, 0), (0, n), (p, n): a quarter each
    counts = src.integers(1, CANARY_MAX_COUNT + 1, 2 * n_can).astype(np.uint64)
    zero = np.zeros(n_can, dtype=np.uint64)
    return _Layout(order[:n_bins], order[n_bins:],
                   np.where(kinds & 1, counts[:n_can], zero).astype(np.uint64),
                   np.where(kinds & 2, counts[n_can:], zero).astype(np.uint64))


def _mask_stream(seed: bytes, session: str, round_index: int, index: int, t: int,
                 n: int) -> U64:
    src = SeededRandomSource(seed, _label("mask", session, round_index, index))
    return src.integers(0, t, n).astype(np.uint64)


def _zero_sum_mask(seed: bytes, session: str, round_index: int, index: int, n_parties: int,
                   t: int, n: int) -> U64:
    """Party ``index``'s mask ``F(index) - F(index + 1 mod M)`` mod ``t``: uniform to
    anyone without the seed, and the masks of all ``M`` parties sum to zero."""
    a = _mask_stream(seed, session, round_index, index, t, n)
    b = _mask_stream(seed, session, round_index, (index + 1) % n_parties, t, n)
    out: U64 = (a + (np.uint64(t) - b)) % np.uint64(t)
    return out


def refinement_keys(keys: PartyKeys) -> BFVContext:
    """A party's BFV keys for refinement rounds, derived from the key set-up's shared seed
    (every party derives the same; the aggregator never has the seed). Derive once per
    key set-up and pass to every round's :class:`BinPairsParty`."""
    return BFVContext.from_seed(keys.seed, params=EXACT_BFV, label=b"fhauc-exact")


class BinPairsParty:
    """A party's side of a refinement round: encrypt per-bin class counts under zero-sum
    masks among canaries, check the canaries, read which bins hold pairs.

    ``bfv``: this party's :func:`refinement_keys` (derived here when not given)."""

    def __init__(self, y_true: np.ndarray, y_score: np.ndarray, *, keys: PartyKeys,
                 points: np.ndarray, round_index: int, bfv: BFVContext | None = None
                 ) -> None:
        if not isinstance(keys.seed, bytes) or len(keys.seed) != SEED_BYTES:
            raise ValueError("a party needs the key set-up's shared seed")
        self._bfv = bfv if bfv is not None else refinement_keys(keys)
        if not self._bfv.has_secret_key or self._bfv.params != EXACT_BFV:
            raise ValueError("the 'bfv' parameter must be this party's refinement_keys")
        self._keys = keys
        self._points = np.asarray(points, dtype=np.float64)
        self._cfg = _RoundConfig(tuple(self._points.tolist()), round_index)
        self._round = int(round_index)
        self._binding = evaluation_binding(keys.session, self._cfg.digest(), "fhauc-exact",
                                           party_role(keys.name))
        self._layout = _layout(keys.seed, self._binding.session, self._round,
                               self._points.size, self._bfv.slots)
        self._y, self._s = y_true, y_score

    @property
    def n_chunks(self) -> int:
        return _chunks(self._points.size, self._bfv.slots)

    def submit(self) -> bytes:
        tp, fp = confusion_counts(self._y, self._s, self._points)
        dtp, dfp = np.diff(tp, prepend=0), np.diff(fp, prepend=0)
        bfv, lay, per = self._bfv, self._layout, self._bfv.slots
        total = self.n_chunks * per
        pos = np.zeros(total, dtype=np.uint64)
        neg = np.zeros(total, dtype=np.uint64)
        pos[lay.bin_slots] = dtp.astype(np.uint64)
        neg[lay.bin_slots] = dfp.astype(np.uint64)
        if self._keys.index == 0:
            pos[lay.canary_slots] = lay.canary_pos
            neg[lay.canary_slots] = lay.canary_neg
        mask = _zero_sum_mask(self._keys.seed, self._binding.session, self._round,
                              self._keys.index, self._keys.n_parties, bfv.t, 2 * total)
        t = np.uint64(bfv.t)
        pos = (pos + mask[:total]) % t
        neg = (neg + mask[total:]) % t
        blobs = []
        for c in range(self.n_chunks):
            part = slice(c * per, (c + 1) * per)
            blobs += [bfv.serialize(bfv.encrypt(pos[part])),
                      bfv.serialize(bfv.encrypt(neg[part]))]
        meta = self._binding.bind({"party": self._keys.index}, step="bins", to=AGGREGATOR,
                                  round=self._round)
        return wire.encode("fhauc-exact/bins", meta, blobs)

    @receives("fhauc-exact/pairs")
    def read(self, response: bytes, max_bytes: int = 1 << 30) -> np.ndarray:
        """Which bins hold a (positive, negative) pair of the federation;
        ``TamperingDetected`` (check ``"canary"``) if any canary reads wrong."""
        msg = wire.decode(response, expect="fhauc-exact/pairs", max_bytes=max_bytes)
        check_bound(self._binding, msg.meta, step="pairs", sender=AGGREGATOR,
                    round=self._round, broadcast=True, what="refinement result")
        if len(msg.blobs) != self.n_chunks:
            raise ProtocolError(f"refinement result must hold {self.n_chunks} ciphertext(s)")
        bfv = self._bfv
        vals = np.concatenate([bfv.decrypt(bfv.deserialize(b, low=True, polys=3))
                               for b in msg.blobs])
        lay = self._layout
        if not np.array_equal(vals[lay.canary_slots] != 0, lay.canary_pairs):
            raise TamperingDetected("the refinement result is not the masked pooled pair "
                                    "counts (check: canary)", check="canary")
        return np.asarray(vals[lay.bin_slots] != 0)


class BinPairsAggregator:
    """The aggregator's side of a refinement round: BFV ciphertexts and public parameters
    only (no key of any kind, no rotations)."""

    def __init__(self, *, points: np.ndarray, names: Sequence[str], session: str,
                 round_index: int) -> None:
        self._bfv = BFVContext(EXACT_BFV)
        self._points = np.asarray(points, dtype=np.float64)
        self._cfg = _RoundConfig(tuple(self._points.tolist()), round_index)
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
        bfv = self._bfv
        chunks = _chunks(self._points.size, bfv.slots)
        pos: list[list[Any]] = [[] for _ in range(chunks)]
        neg: list[list[Any]] = [[] for _ in range(chunks)]
        seen: list[int] = []
        for raw in submissions:
            msg = wire.decode(raw, expect="fhauc-exact/bins")
            idx = party_index(msg.meta, len(self._names))
            check_bound(self._binding, msg.meta, step="bins",
                        sender=party_role(self._names[idx]), round=self._round,
                        what="a submission")
            if idx in seen:
                raise ProtocolError(f"invalid or duplicate party index {idx!r}")
            if len(msg.blobs) != 2 * chunks:
                raise ProtocolError(f"a submission must hold {2 * chunks} ciphertext(s)")
            seen.append(idx)
            for c in range(chunks):
                pos[c].append(bfv.deserialize(msg.blobs[2 * c]))
                neg[c].append(bfv.deserialize(msg.blobs[2 * c + 1]))
        if len(seen) != len(self._names):
            raise ProtocolError("a refinement round needs every party")
        rnd = SystemRandomSource()
        out = []
        for c in range(chunks):
            prod = bfv.multiply(bfv.add_many(pos[c]), bfv.add_many(neg[c]))
            r = rnd.integers(1, bfv.t, bfv.slots).astype(np.uint64)  # uniform non-zero
            res = bfv.mod_switch_down(bfv.multiply_plain(prod, bfv.encode(r)))
            out.append(bfv.serialize(res))
        self._timing = {"total_s": time.perf_counter() - t0}
        meta = self._binding.bind({}, step="pairs", to=BROADCAST, round=self._round)
        return wire.encode("fhauc-exact/pairs", meta, out)


def next_grid(points: np.ndarray, marks: np.ndarray, max_points: int
              ) -> tuple[np.ndarray, str]:
    """After a refinement round: the next grid and why refinement goes on or stops.

    Returns ``(points, "refine")`` with the refined grid, ``(points, "no-pair-left")``
    when no refinable bin holds a pair (the grid is final and its bound is 0), or
    ``(points, "capped")`` when the point budget leaves no room to split (final grid as
    is). Public and deterministic: every role computes the same grid from the marks."""
    todo = np.asarray(marks, dtype=bool) & refinable_bins(points)
    if not todo.any():
        return points, "no-pair-left"
    room = int(max_points) - points.size
    k = min(REFINE_SPLIT, room // int(todo.sum()))
    if k < 2:
        return points, "capped"
    return refine_grid(points, todo, k), "refine"


# ------------------------------------------------------------------ in-process driver
def secure_auc_exact(parties: Sequence[tuple[ArrayLike, ArrayLike]], *,
                     final: Callable[..., SecureAUCResult], security: str,
                     target: float | None = None, max_points: int | None = None,
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
    if target is None:
        target = default_target(security)
    check_real(target, "target", "secure_auc", ge=0.0, lt=1.0)
    if max_points is None:
        max_points = (DEFAULT_MAX_POINTS_MALICIOUS if security == "malicious"
                      else DEFAULT_MAX_POINTS)
    check_int(max_points, "max_points", "secure_auc", min_value=INITIAL_POINTS,
              max_value=1 << 16)
    check_int(max_rounds, "max_rounds", "secure_auc", min_value=0, max_value=64)
    get_preset(preset, allow_insecure=allow_insecure)
    data, party_names = prepare_federation(parties, names, 1 << 20)
    points = initial_grid(INITIAL_POINTS)
    rounds = 0
    stats: list[dict[str, Any]] = []
    capped = max_rounds == 0
    # the last round's marks cover the final grid: no refinable bin holds a pair
    no_pair_left = False
    if max_rounds > 0:
        identities, roster = local_federation(party_names)
        say(f"exact mode: key set-up for refinement ({len(data)} parties)")
        spec = KeySpec.create(preset, [], False, allow_insecure=allow_insecure)
        ks_agg, keys = run_key_setup(identities, roster, spec, network=net)
        on_net = [party_role(k.name) for k in keys]
        bfv = [refinement_keys(k) for k in keys]  # each party's own, derived once
        while rounds < max_rounds:
            if points.size > MAX_REFINE_BINS:
                capped = True
                break
            roles = [BinPairsParty(y, s, keys=k, points=points, round_index=rounds, bfv=b)
                     for (y, s), k, b in zip(data, keys, bfv, strict=True)]
            agg = BinPairsAggregator(points=points, names=ks_agg.names,
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
            points, why = next_grid(points, marks[0], max_points)
            if why == "no-pair-left":
                no_pair_left = True
                break
            if why == "capped":
                capped = True
                break
        else:
            capped = True
    if points.size > max_points:
        capped = True
    say(f"final evaluation on {points.size} decision points")
    res = final(data, decision_points=points, preset=preset, names=party_names,
                progress=progress, allow_insecure=allow_insecure, network=net,
                **final_kwargs)
    if no_pair_left:
        # The verified last round shows that every bin of the final grid holding a
        # (positive, negative) pair holds one float only: those pairs are exact ties, so
        # B = 0 and the trapezoid AUC is the exact AUC. The final evaluation's bound channel
        # reads B plus the parties' one-sided offsets (fedsec.auc.masking); the rounds
        # certify the bound itself.
        res = replace(res, error_bound=0.0)
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

