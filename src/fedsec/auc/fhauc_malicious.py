"""FHAUC against a malicious aggregator (seed 000 Sec. IV-D, seed 001 Sec. 4.4).

Threat model
------------
Parties are semi-honest and hold the CKKS secret key; the aggregator may deviate
arbitrarily: drop, duplicate, replay or substitute submissions, answer from a subset, add
or multiply by chosen values, permute slots, re-encrypt values with the public key. It does
not collude with a party. Parties either obtain the correct AUC or a
:class:`~fedsec.errors.TamperingDetected` error that names the failed check; a failed
verification never returns a number. (A malicious aggregator can always refuse to answer;
that is denial of service, not a wrong result.)

Protocol (two independent runs, each with fresh shared randomness)
------------------------------------------------------------------
Set-up per run, derived from the shared seed and every party's fresh nonce (so the
aggregator cannot force the randomness of an earlier evaluation): multipliers
``r3..r8``; zero-sum masks ``tr, fr`` (one row per party, the last row minus the sum of the
others); random bits ``b``; a permutation ``pi`` of the ``S*(N+1)`` share positions.

Each party masks its trapezoid terms (``N`` terms with the origin, plus the totals entry
``r5*(Pos+tr), r6*(Neg+fr)``) and the denominator pair ``DT = r7*(Pos+tr)``,
``DF = r8*(Neg+fr)``; splits every entry into ``S`` additive shares of ``T`` or of ``F``
according to ``b`` (the other factor is repeated), permutes the ``S*(N+1)`` positions by
``pi`` and packs position ``i`` as ``T + iF`` into even slot ``2i`` (continuing in further
ciphertexts when the slots run out) and ``DT + i*DF`` into slot 1. The aggregator sums the
parties, squares (``Im(z**2) = 2*T*F``), keeps ``4i*T*F``, and sums the even and the odd
slots separately: even slots then hold ``r0*num + r1*denom``, odd slots ``r2*denom``
(``r0 = r3*r4``, ``r1 = r5*r6/2``, ``r2 = r7*r8/2``), which it masks with its own ``c``
(one real mask per run, encoded at the prime the result is then rescaled by, plus 2^-32
Gaussian result noise: :mod:`fedsec.auc.fhauc` explains both). Parties recover
``AUC = (X/Y - r1/r2) * r2/r0`` for each run and accept only if both runs agree within the
tolerance (five decimal places by default, seed 000 Sec. VI-D), each lies in [0, 1], and
every slot of each answer is consistent.

What parties see: per run ``X = c*(r0*num + r1*denom)`` and ``Y = c*r2*denom`` (times ``i``,
in every even and odd slot). They know ``r0, r1, r2``, so this is ``c*num`` and ``c*denom``
- the semi-honest single mask's information, twice with independent ``c``: the AUC to its
computed precision, the magnitude of denom within a factor of 2, and what the grid of the
masks ``K/S`` adds (see *What a party learns* in :mod:`fedsec.auc.fhauc`; the two runs give
two independent grid tests, and the noise here is larger: CKKS noise grows with the 2^12
zero-sum masks). Measured (``benchmarks/bench_precision.py``, default preset, 20 runs): the
two runs disagree by at most 6e-9 for one positive and one negative sample, 8e-10 for five
samples, 2e-12 from 100 samples on; each run's AUC is within 1.2e-8 relative of the
plaintext trapezoid.

Cheating bound (seed 000 Sec. VI-C): an aggregator must locate the ``S`` shares of an entry
among the ``S*(N+1)`` positions in both runs, ``(S!(SN'-S)!/(SN')!)**2`` with ``N' = N+1``.
The multiplier-guessing term is ``2**-(6*52)`` for our six 52-bit random multipliers per
run. Because the runs are compared within a tolerance rather than exactly, a blind shift of
the AUC that is proportional to the secret multipliers passes with probability about the
tolerance itself (``tolerance_bound_bits``); tighten ``tolerance`` (the runs agree to ~1e-8
at worst, see above) to strengthen it.
"""

from __future__ import annotations

import hashlib
import math
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike

from fedsec._validation import check_int, check_real
from fedsec.auc.fhauc import (
    DEFAULT_MAX_TOTAL_SAMPLES,
    BoundConfig,
    SecureAUCResult,
    _check_party_inputs,
    add_result_noise,
    check_masking_capacity,
    finish_masked,
    masked_product,
    prepare_federation,
    real_mask,
    run_key_setup,
)
from fedsec.crypto import wire
from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.drbg import SeededRandomSource, SystemRandomSource
from fedsec.crypto.keysetup import PartyKeys
from fedsec.crypto.params import DEFAULT_PRESET, get_preset
from fedsec.errors import ProtocolError, TamperingDetected, UndefinedMetricError
from fedsec.metrics import as_decision_points, confusion_counts, trapezoid_terms

__all__ = [
    "MaliciousConfig",
    "MaliciousParty",
    "MaliciousAggregator",
    "cheat_bound_bits",
    "permutation_bound_bits",
    "smallest_splits",
    "secure_auc_malicious",
]

RUNS = 2
# Magnitudes of the zero-sum masks and of the random shares. Both are hidden under
# encryption, so their size protects nothing by itself; they must (a) make any dropped,
# duplicated or foreign contribution shift the AUC by a random, run-dependent amount far
# above the tolerance, and (b) stay small enough that cancelling them leaves no visible
# error: SEAL encodes in double precision, so a slot of magnitude V carries an absolute
# error near V * 2**-53 that products with other slots amplify.
ZERO_SUM_BOUND = 2.0 ** 12
SHARE_SUM_BOUND = 2.0 ** 10
MULTIPLIER_BITS = 52
NONCE_BYTES = 16


def permutation_bound_bits(n_points: int, splits: int) -> float:
    """``-log2((S!(SN'-S)!/(SN')!)**2)`` with ``N' = N + 1`` share groups (Sec. VI-C)."""
    total = splits * (n_points + 1)
    log_binom = (math.lgamma(total + 1) - math.lgamma(splits + 1)
                 - math.lgamma(total - splits + 1)) / math.log(2)
    return 2.0 * log_binom


def tolerance_bound_bits(tolerance: float) -> float:
    """Bits of the blind-shift term: the two runs must agree within ``tolerance``."""
    return -math.log2(2.0 * tolerance)


def cheat_bound_bits(n_points: int, splits: int) -> float:
    """The Sec. VI-C bound in bits: the weaker of the permutation and multiplier terms."""
    return min(permutation_bound_bits(n_points, splits), 6.0 * MULTIPLIER_BITS)


def smallest_splits(n_points: int, min_bits: float) -> int | None:
    """Smallest ``S`` in 2..64 whose cheating bound reaches ``min_bits``."""
    for s in range(2, 65):
        if cheat_bound_bits(n_points, s) >= min_bits:
            return s
    return None


@dataclass(frozen=True)
class MaliciousConfig(BoundConfig):
    """Public parameters of malicious-aggregator FHAUC."""

    DIGEST_TAG: ClassVar[bytes] = b"fedsec/fhauc-malicious/config/v1|"

    decision_points: tuple[float, ...]
    splits: int
    tolerance: float = 1e-5
    min_bound_bits: float = 40.0
    preset: str = DEFAULT_PRESET
    max_total_samples: int = DEFAULT_MAX_TOTAL_SAMPLES
    allow_insecure: bool = False

    @classmethod
    def create(cls, decision_points: Any = 100, *, splits: int | None = None,
               tolerance: float = 1e-5, min_bound_bits: float = 40.0,
               preset: str = DEFAULT_PRESET,
               max_total_samples: int = DEFAULT_MAX_TOTAL_SAMPLES,
               allow_insecure: bool = False) -> MaliciousConfig:
        """Validate parameters; refuse splits whose cheating bound is too weak.

        ``splits=None`` picks the smallest ``S`` meeting ``min_bound_bits``.
        """
        points = as_decision_points(decision_points)
        n = points.size
        params = get_preset(preset, allow_insecure=allow_insecure)
        check_real(tolerance, "tolerance", "MaliciousConfig", gt=0.0, lt=0.5)
        check_real(min_bound_bits, "min_bound_bits", "MaliciousConfig", ge=0.0)
        check_int(max_total_samples, "max_total_samples", "MaliciousConfig", min_value=1,
                  max_value=DEFAULT_MAX_TOTAL_SAMPLES)
        check_masking_capacity(params, int(max_total_samples))
        if splits is None:
            s = smallest_splits(n, min_bound_bits)
            if s is None:
                raise ValueError(f"no split count up to 64 reaches a 2^-{min_bound_bits:g} "
                                 f"cheating bound with N={n}")
            splits = s
        check_int(splits, "splits", "MaliciousConfig", min_value=2, max_value=64)
        bits = cheat_bound_bits(n, splits)
        if bits < min_bound_bits:
            better = smallest_splits(n, min_bound_bits)
            hint = f"use --splits {better} or more" if better else "use fewer decision points"
            raise ValueError(
                f"with N={n} and S={splits} the aggregator cheats undetected with probability "
                f"2^-{bits:.1f}, weaker than the required 2^-{min_bound_bits:g}; {hint}")
        return cls(tuple(float(x) for x in points), int(splits), float(tolerance),
                   float(min_bound_bits), preset, int(max_total_samples), allow_insecure)

    @property
    def n_positions(self) -> int:
        return self.splits * (self.n_points + 1)

    def params_slots(self) -> int:
        return get_preset(self.preset, allow_insecure=self.allow_insecure).slots

    @property
    def n_chunks(self) -> int:
        half = self.params_slots() // 2
        return -(-self.n_positions // half)

    def rotations(self) -> list[int]:
        return CKKSContext.sum_rotations(self.params_slots())


@dataclass
class _RunRandomness:
    r: np.ndarray          # r3..r8
    tr: np.ndarray         # (parties, N + 2)
    fr: np.ndarray
    bits: np.ndarray       # (N + 1,)
    perm: np.ndarray       # (S * (N + 1),)

    @property
    def r0(self) -> float:
        return float(self.r[0] * self.r[1])

    @property
    def r1(self) -> float:
        return float(self.r[2] * self.r[3] / 2.0)

    @property
    def r2(self) -> float:
        return float(self.r[4] * self.r[5] / 2.0)


def _nonce_digest(nonces: Sequence[bytes]) -> bytes:
    h = hashlib.sha256(b"fedsec/fhauc-malicious/nonces/v1")
    for n in nonces:
        h.update(len(n).to_bytes(2, "big") + n)
    return h.digest()


def derive_run_randomness(seed: bytes, session: str, cfg: MaliciousConfig,
                          nonces: Sequence[bytes], run: int) -> _RunRandomness:
    """Every party derives the same set-up randomness for ``run`` (Sec. IV-D-1)."""
    label = (b"fedsec/fhauc-malicious/v1|" + session.encode() + b"|" + cfg.digest().encode()
             + b"|" + _nonce_digest(nonces) + b"|run-" + str(run).encode())
    rs = SeededRandomSource(seed, label)
    m, n = len(nonces), cfg.n_points
    r = 0.5 + 0.5 * rs.uniform(6)
    tr = (2.0 * rs.uniform(m * (n + 2)) - 1.0).reshape(m, n + 2) * ZERO_SUM_BOUND
    fr = (2.0 * rs.uniform(m * (n + 2)) - 1.0).reshape(m, n + 2) * ZERO_SUM_BOUND
    tr[-1] = -tr[:-1].sum(axis=0)
    fr[-1] = -fr[:-1].sum(axis=0)
    return _RunRandomness(r, tr, fr, rs.bits(n + 1), rs.permutation(cfg.n_positions))


class MaliciousParty:
    """An input party of malicious-aggregator FHAUC (steps 1-8 and 12, verification)."""

    def __init__(self, y_true: ArrayLike, y_score: ArrayLike, *, keys: PartyKeys,
                 config: MaliciousConfig, nonce: bytes | None = None) -> None:
        if not keys.context.has_secret_key:
            raise ValueError("an FHAUC party needs the CKKS secret key")
        if keys.context.params.name != config.preset:
            raise ValueError("keys and configuration use different presets")
        self.config = config
        self.keys = keys
        self._y, self._s = _check_party_inputs(y_true, y_score, config.max_total_samples)
        if nonce is not None and len(nonce) != NONCE_BYTES:
            raise ValueError(f"a nonce must be {NONCE_BYTES} bytes")
        # ``nonce`` lets a stateless process resume this party between steps; a new
        # evaluation must always use a fresh one (the default).
        self._nonce = nonce if nonce is not None else secrets.token_bytes(NONCE_BYTES)
        self._runs: list[_RunRandomness] | None = None
        self._participants: list[int] = []
        self._local = SystemRandomSource()
        self.verification: dict[str, Any] = {}

    @property
    def nonce(self) -> bytes:
        return self._nonce

    def restore(self, start: bytes) -> None:
        """Re-enter the state after :meth:`submit` (for stateless runtimes)."""
        self._read_start(start)

    def commit(self) -> bytes:
        """Round 1: a fresh nonce that makes this evaluation's randomness new."""
        meta = {"config": self.config.digest(), "session": self.keys.session,
                "party": self.keys.index}
        return wire.encode("fhauc-m/commit", meta, [self._nonce])

    def _read_start(self, start: bytes) -> None:
        msg = wire.decode(start, expect="fhauc-m/start")
        if msg.meta.get("config") != self.config.digest() or \
                msg.meta.get("session") != self.keys.session:
            raise ProtocolError("start message belongs to another configuration or session")
        parts = msg.meta.get("parties")
        if not isinstance(parts, list) or len(parts) != len(msg.blobs) or \
                len(set(parts)) != len(parts) or \
                not all(isinstance(p, int) and 0 <= p < self.keys.n_parties for p in parts):
            raise ProtocolError("malformed participant list")
        me = self.keys.index
        if me not in parts or msg.blobs[parts.index(me)] != self._nonce:
            raise TamperingDetected("the start message does not carry this party's nonce",
                                    check="nonce")
        self._participants = [int(p) for p in parts]
        self._runs = [derive_run_randomness(self.keys.seed, self.keys.session, self.config,
                                            msg.blobs, k) for k in range(RUNS)]

    def _entries(self, rr: _RunRandomness, row: int) -> tuple[np.ndarray, np.ndarray,
                                                             complex]:
        """Steps 3-5: masked T and F entries (N+1 each) and the DT + i*DF pair."""
        tp, fp = confusion_counts(self._y, self._s, self.config.points)
        t, f = trapezoid_terms(tp, fp)
        pos, neg = float(tp[-1]), float(fp[-1])
        r3, r4, r5, r6, r7, r8 = (float(x) for x in rr.r)
        n = self.config.n_points
        tv = np.empty(n + 1)
        fv = np.empty(n + 1)
        tv[:n] = r3 * (t + rr.tr[row, :n])
        fv[:n] = r4 * (f + rr.fr[row, :n])
        tv[n] = r5 * (pos + rr.tr[row, n])
        fv[n] = r6 * (neg + rr.fr[row, n])
        dt = r7 * (pos + rr.tr[row, n + 1])
        df = r8 * (neg + rr.fr[row, n + 1])
        return tv, fv, complex(dt, df)

    def _pack(self, rr: _RunRandomness, row: int) -> list[bytes]:
        """Steps 6-8: split, permute, pack and encrypt one run."""
        cfg = self.config
        s_count = cfg.splits
        tv, fv, dpair = self._entries(rr, row)
        bound = SHARE_SUM_BOUND / (len(self._participants) * s_count)
        rnd = (2.0 * self._local.uniform((cfg.n_points + 1) * (s_count - 1)) - 1.0) * bound
        rnd = rnd.reshape(cfg.n_points + 1, s_count - 1)
        split_t = rr.bits == 0
        target = np.where(split_t, tv, fv)
        shares = np.concatenate([rnd, (target - rnd.sum(axis=1))[:, None]], axis=1)
        t_all = np.where(split_t[:, None], shares, tv[:, None])  # (N+1, S)
        f_all = np.where(split_t[:, None], fv[:, None], shares)
        flat = (t_all + 1j * f_all).reshape(-1)
        permuted = np.empty_like(flat)
        permuted[rr.perm] = flat
        half = cfg.params_slots() // 2
        ctx = self.keys.context
        blobs = []
        for c in range(cfg.n_chunks):
            vec = np.zeros(2 * half, dtype=np.complex128)
            part = permuted[c * half:(c + 1) * half]
            vec[0:2 * part.size:2] = part
            if c == 0:
                vec[1] = dpair
            blobs.append(ctx.encrypt_to_bytes(vec))
        return blobs

    def submit(self, start: bytes) -> bytes:
        """Rounds 2: both runs' ciphertexts, after checking the start message."""
        self._read_start(start)
        assert self._runs is not None
        row = self._participants.index(self.keys.index)
        blobs = [b for rr in self._runs for b in self._pack(rr, row)]
        meta = {"config": self.config.digest(), "session": self.keys.session,
                "party": self.keys.index, "chunks": self.config.n_chunks}
        return wire.encode("fhauc-m/submit", meta, blobs)

    def finalize(self, response: bytes) -> float:
        """Step 12 and verification: the AUC, or ``TamperingDetected``."""
        if self._runs is None:
            raise ProtocolError("finalize() before submit()")
        try:
            msg = wire.decode(response, expect="fhauc-m/result")
        except ProtocolError as exc:
            raise TamperingDetected(f"unreadable result: {exc}", check="format") from None
        if msg.meta.get("config") != self.config.digest() or \
                msg.meta.get("session") != self.keys.session:
            raise TamperingDetected("result belongs to another configuration or session",
                                    check="binding")
        if msg.meta.get("parties") != self._participants:
            raise TamperingDetected("the result does not cover exactly the parties that "
                                    "started this evaluation", check="participants")
        if len(msg.blobs) != RUNS:
            raise TamperingDetected("the result must hold one ciphertext per run",
                                    check="format")
        ctx = self.keys.context
        tol = self.config.tolerance
        aucs = []
        undefined = 0
        for k, (rr, blob) in enumerate(zip(self._runs, msg.blobs, strict=True)):
            try:
                slots = ctx.decrypt(ctx.deserialize(blob))
            except ProtocolError as exc:
                raise TamperingDetected(f"run {k + 1}: unreadable ciphertext ({exc})",
                                        check="format") from None
            x = slots[0::2]
            y = slots[1::2]
            big_x = float(x[0].imag)
            big_y = float(y[0].imag)
            scale_x = max(1.0, abs(big_x))
            scale_y = max(1.0, abs(big_y))
            if (np.abs(x.imag - big_x).max() > 1e-6 * scale_x
                    or np.abs(y.imag - big_y).max() > 1e-6 * scale_y
                    or np.abs(x.real).max() > 1e-6 * scale_x
                    or np.abs(y.real).max() > 1e-6 * scale_y):
                raise TamperingDetected(f"run {k + 1}: the answer's slots are inconsistent",
                                        check="slot-consistency")
            # Y = c * r2 * denom >= 1/16 when both classes exist (c >= 1/2, r2 >= 1/8)
            if abs(big_y) < 1.0 / 32.0:
                undefined += 1
                continue
            aucs.append((big_x / big_y - rr.r1 / rr.r2) * rr.r2 / rr.r0)
        if undefined == RUNS:
            raise UndefinedMetricError("AUC is undefined: the federation's test data hold "
                                       "only one class")
        if undefined:
            raise TamperingDetected("one run reports a zero denominator and the other not",
                                    check="double-execution")
        self.verification = {"auc_runs": aucs, "tolerance": tol}
        for k, a in enumerate(aucs):
            if not -tol <= a <= 1.0 + tol:
                raise TamperingDetected(f"run {k + 1} yields AUC {a:.6g}, outside [0, 1]",
                                        check="range")
        if abs(aucs[0] - aucs[1]) > tol:
            raise TamperingDetected(
                f"the two runs disagree: {aucs[0]:.8f} vs {aucs[1]:.8f} "
                f"(tolerance {tol:g})", check="double-execution")
        return min(1.0, max(0.0, aucs[0]))


class MaliciousAggregator:
    """The aggregator of malicious-aggregator FHAUC (steps 9-11)."""

    def __init__(self, context: CKKSContext, config: MaliciousConfig, *,
                 names: Sequence[str], session: str, min_parties: int | None = None) -> None:
        if context.has_secret_key:
            raise ValueError("the aggregator must not hold the secret key")
        missing = set(config.rotations()) - set(context.rotations)
        if missing or not context.conjugate_key or context.params.name != config.preset:
            raise ValueError("the public context does not match the configuration")
        self.context = context
        self.config = config
        self.names = tuple(names)
        self.session = session
        self.min_parties = len(self.names) if min_parties is None else int(min_parties)
        self.participants: list[int] = []
        self.timing: dict[str, float] = {}

    def start(self, commits: Sequence[bytes]) -> bytes:
        """Round 1: fix the participants and relay everyone's nonce to everyone."""
        entries: dict[int, bytes] = {}
        for raw in commits:
            msg = wire.decode(raw, expect="fhauc-m/commit")
            if msg.meta.get("config") != self.config.digest() or \
                    msg.meta.get("session") != self.session:
                raise ProtocolError("a commit belongs to another configuration or session")
            idx = msg.meta.get("party")
            if not isinstance(idx, int) or not 0 <= idx < len(self.names) or idx in entries \
                    or len(msg.blobs) != 1 or len(msg.blobs[0]) != NONCE_BYTES:
                raise ProtocolError(f"invalid or duplicate commit from party {idx!r}")
            entries[idx] = msg.blobs[0]
        if len(entries) < max(1, self.min_parties):
            raise ProtocolError(f"only {len(entries)} parties committed; at least "
                                f"{self.min_parties} are required")
        self.participants = sorted(entries)
        meta = {"config": self.config.digest(), "session": self.session,
                "parties": self.participants}
        return wire.encode("fhauc-m/start", meta, [entries[i] for i in self.participants])

    def _load(self, submissions: Sequence[bytes]) -> list[list[Any]]:
        """Return ``[run][chunk] -> list of ciphertexts`` over the participants."""
        chunks = self.config.n_chunks
        per_run: list[list[list[Any]]] = [[[] for _ in range(chunks)] for _ in range(RUNS)]
        seen = []
        for raw in submissions:
            msg = wire.decode(raw, expect="fhauc-m/submit")
            idx = msg.meta.get("party")
            if msg.meta.get("config") != self.config.digest() or \
                    msg.meta.get("session") != self.session:
                raise ProtocolError("a submission belongs to another configuration or session")
            if idx not in self.participants or idx in seen:
                raise ProtocolError(f"unexpected or duplicate submission from party {idx!r}")
            if len(msg.blobs) != RUNS * chunks:
                raise ProtocolError(f"a submission must hold {RUNS * chunks} ciphertexts")
            seen.append(idx)
            for k in range(RUNS):
                for c in range(chunks):
                    per_run[k][c].append(self.context.deserialize(
                        msg.blobs[k * chunks + c], at_top=True, scale=self.context.scale))
        if sorted(seen) != self.participants:
            raise ProtocolError("missing submissions: malicious FHAUC needs every party that "
                                "started (their zero-sum masks must cancel); restart with "
                                "the parties still present")
        return [[self.context.add_many(c) for c in run] for run in per_run]

    def premask(self, chunk_sums: Sequence[Any]) -> Any:
        """Steps 9-10 for one run: even slots ``4i(r0 num + r1 denom)``, odd
        ``4i r2 denom``."""
        ctx = self.context
        q = None
        for z in chunk_sums:
            sq = ctx.square(z)
            q = sq if q is None else ctx.add(q, sq)
        assert q is not None
        q = ctx.sub(q, ctx.conjugate(q))          # 4i * T * F per slot
        return ctx.sum_slots(q, stride=2)

    def mask(self, q: Any, *, masks: tuple[float, float] | None = None,
             noise: bool = True) -> Any:
        """Step 11: multiply every slot by one real mask ``c`` (:func:`real_mask`) encoded
        at the scale of the prime the result is then rescaled by, then add
        :data:`~fedsec.auc.fhauc.RESULT_NOISE_SD` noise to both values. ``masks`` (even,
        odd) lets :mod:`fedsec.auc.adversary` scale one channel."""
        ctx = self.context
        even = np.arange(ctx.slots) % 2 == 0
        if masks is None:
            out = finish_masked(ctx, masked_product(ctx, q, real_mask()))
        else:
            out = finish_masked(ctx, masked_product(ctx, q, np.where(even, *masks)))
        if noise:
            out = add_result_noise(ctx, out, lambda e: np.where(even, 1j * e[0], 1j * e[1]))
        return out

    def compute_run(self, chunk_sums: Sequence[Any]) -> Any:
        """Steps 9-11 for one run: even slots ``c*(r0 num + r1 denom)``, odd
        ``c*r2 denom`` (times ``i``)."""
        return self.mask(self.premask(chunk_sums))

    def aggregate(self, submissions: Sequence[bytes]) -> bytes:
        t0 = time.perf_counter()
        sums = self._load(submissions)
        t1 = time.perf_counter()
        blobs = [self.context.serialize(self.compute_run(run)) for run in sums]
        t2 = time.perf_counter()
        self.timing = {"deserialize_s": t1 - t0, "compute_s": t2 - t1, "total_s": t2 - t0}
        meta = {"config": self.config.digest(), "session": self.session,
                "parties": self.participants}
        return wire.encode("fhauc-m/result", meta, blobs)


def secure_auc_malicious(parties: Sequence[tuple[ArrayLike, ArrayLike]], *,
                         decision_points: Any = 100, splits: int | None = None,
                         tolerance: float = 1e-5, min_bound_bits: float = 40.0,
                         preset: str = DEFAULT_PRESET, names: Sequence[str] | None = None,
                         progress: Callable[[str], None] | None = None,
                         allow_insecure: bool = False,
                         tamper: Callable[[str, Any], Any] | None = None) -> SecureAUCResult:
    """Run malicious-aggregator FHAUC in one process.

    ``tamper(step, value)`` (tests and the tamper battery) may rewrite what the aggregator
    forwards: it is called with ``("start", bytes)``, ``("submissions", list[bytes])`` and
    ``("result", bytes)`` and returns the replacement.
    """
    say = progress or (lambda _msg: None)
    cfg = MaliciousConfig.create(decision_points, splits=splits, tolerance=tolerance,
                                 min_bound_bits=min_bound_bits, preset=preset,
                                 allow_insecure=allow_insecure)
    data, party_names = prepare_federation(parties, names, cfg.max_total_samples)
    say(f"key set-up: {len(data)} parties, preset {cfg.preset}")
    t0 = time.perf_counter()
    ks_agg, keys = run_key_setup(party_names, preset=cfg.preset, rotations=cfg.rotations(),
                                 conjugate=True, allow_insecure=allow_insecure)
    setup_s = time.perf_counter() - t0
    assert ks_agg.context is not None
    agg = MaliciousAggregator(ks_agg.context, cfg, names=party_names, session=ks_agg.session)
    roles = [MaliciousParty(y, s, keys=k, config=cfg)
             for (y, s), k in zip(data, keys, strict=True)]
    edit = tamper or (lambda _step, value: value)
    say(f"parties commit fresh nonces (S={cfg.splits}, bound 2^-"
        f"{cheat_bound_bits(cfg.n_points, cfg.splits):.1f})")
    start = edit("start", agg.start([r.commit() for r in roles]))
    say(f"parties mask, split, permute and encrypt two runs ({cfg.n_chunks} ciphertext(s) "
        "per run)")
    subs = edit("submissions", [r.submit(start) for r in roles])
    say("aggregator computes both runs on ciphertexts")
    response = edit("result", agg.aggregate(subs))
    say("parties decrypt and verify")
    aucs = [r.finalize(response) for r in roles]
    if max(aucs) - min(aucs) > cfg.tolerance:
        raise TamperingDetected("parties obtained different AUC values", check="agreement")
    bits = cheat_bound_bits(cfg.n_points, cfg.splits)
    return SecureAUCResult(
        auc=aucs[0], parties=len(roles), decision_points=cfg.n_points, security="malicious",
        masking="single", preset=cfg.preset,
        bytes_up_per_party=max(len(s) for s in subs) + max(len(r.commit()) for r in roles[:1]),
        bytes_down_per_party=len(response) + len(start),
        aggregator_seconds=agg.timing["total_s"],
        setup_bytes_to_aggregator=ks_agg.public_bytes_size, setup_seconds=setup_s,
        included=[party_names[i] for i in agg.participants],
        extra={"verified": True, "cheat_bound_bits": bits, "splits": cfg.splits,
               "permutation_bound_bits": permutation_bound_bits(cfg.n_points, cfg.splits),
               "multiplier_bound_bits": 6.0 * MULTIPLIER_BITS,
               "tolerance_bound_bits": tolerance_bound_bits(cfg.tolerance),
               "tolerance": cfg.tolerance,
               "auc_runs": roles[0].verification.get("auc_runs"),
               "aggregator_deserialize_s": agg.timing["deserialize_s"],
               "aggregator_compute_s": agg.timing["compute_s"]},
    )
