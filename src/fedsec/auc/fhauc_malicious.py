"""FHAUC against a malicious aggregator (Baykara et al. Sec. IV-D, Baykara et al. (FHAUC)
Sec. 4.4).

The aggregator may deviate arbitrarily; parties either obtain the correct AUC or a
:class:`~fedsec.errors.TamperingDetected` error naming the failed check -- a failed
verification never returns a number. Parties sign commits (fresh nonces), mask their
statistics with zero-sum masks and secret multipliers derived from the shared seed and
every nonce, split them into ``S`` additive shares at secretly permuted positions, and run
the computation ``R`` times (default 8) packed into one ciphertext; they accept only if
every run agrees within the tolerance and every check passes.

Roles: :class:`MaliciousParty` (``"party:<name>"``) sends ``fhauc-m/commit`` and
``fhauc-m/submit``; :class:`MaliciousAggregator` (``"aggregator"``) answers every party
with ``fhauc-m/start`` and ``fhauc-m/result`` (recipient ``"*"``), bound to their context
(protocol ``"fhauc-m"``, :func:`fedsec.auc.common.evaluation_binding`).
:func:`secure_auc_malicious` is the loop over a :class:`~fedsec.protocol.network.Network`;
tests and the tamper battery play the cheating aggregator as an interceptor on it
(:mod:`fedsec.testing.auc`).

The threat model, the trust in keys and commits, the protocol and its checks, the
error-bound channel and the cheating bound: ``docs/protocols/secure-auc.md`` (the
documentation site's secure AUC page).
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
from fedsec.auc.common import (
    AGGREGATOR,
    DEFAULT_MAX_TOTAL_SAMPLES,
    MAX_DECISION_POINTS,
    AggregatorInfo,
    BoundConfig,
    RunningSums,
    SecureAUCResult,
    apply_score_transform,
    bytes_per_party,
    check_bound,
    check_party_inputs,
    evaluation_binding,
    local_federation,
    party_index,
    party_role,
    prepare_federation,
    wants_exact,
)
from fedsec.auc.exact_params import DEFAULT_MAX_ROUNDS
from fedsec.auc.masking import (
    NUMERATOR_NOISE_FACTOR,
    RESULT_NOISE_SD,
    add_result_noise,
    bound_offset,
    bound_overstatement,
    check_masking_capacity,
    count_noise,
    finish_masked,
    masked_product,
    real_mask,
)
from fedsec.auc.policy import (
    DEFAULT_MAX_DECISION_POINTS,
    DEFAULT_MAX_TOLERANCE,
    DEFAULT_MIN_BOUND_BITS,
    DEFAULT_MIN_DECISION_POINTS,
    IN_PROCESS_MAX_KEY_BYTES,
    PartyPolicy,
)
from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.drbg import SeededRandomSource, SystemRandomSource
from fedsec.crypto.identity import Identity, Roster
from fedsec.crypto.keysetup import KeySpec, PartyKeys, VerificationCache, run_key_setup
from fedsec.crypto.params import MALICIOUS_PRESET, get_preset
from fedsec.errors import ProtocolError, TamperingDetected, UndefinedMetricError
from fedsec.metrics import (
    as_decision_points,
    confusion_counts,
    single_value_bins,
    trapezoid_terms,
)
from fedsec.protocol import fields, wire
from fedsec.protocol.accounting import Clock
from fedsec.protocol.binding import BROADCAST
from fedsec.protocol.network import Network
from fedsec.protocol.roles import receives

__all__ = [
    "MaliciousConfig",
    "MaliciousParty",
    "MaliciousAggregator",
    "cheat_bound_bits",
    "permutation_bound_bits",
    "smallest_splits",
    "shift_bound",
    "secure_auc_malicious",
]

DEFAULT_RUNS = 8
MAX_RUNS = 8
DEFAULT_TOLERANCE = 3e-8
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


#: A forged AUC counts as a successful cheat when it is off by at least this much.
SHIFT_RESOLUTION = 1e-4
#: Upper bound on the density of ``r2/r0`` (numerically 2.15 for r's uniform in [1/2, 1)).
_RATIO_DENSITY = 2.5


def permutation_bound_bits(n_points: int, splits: int, runs: int = 2) -> float:
    """``-log2(C(S*N', S)**-runs)`` with ``N' = N + 1`` share groups (Sec. VI-C): the
    aggregator must find an entry's ``S`` shares among ``S*N'`` positions in every run."""
    total = splits * (n_points + 1)
    log_binom = (math.lgamma(total + 1) - math.lgamma(splits + 1)
                 - math.lgamma(total - splits + 1)) / math.log(2)
    return float(runs) * log_binom


def tolerance_bound_bits(tolerance: float, runs: int = 2,
                         resolution: float = SHIFT_RESOLUTION) -> float:
    """Bits of the blind-shift term.

    An aggregator that adds ``beta_k`` times the denominator channel to the numerator
    channel of run ``k`` (no secret needed) shifts that run's AUC by ``beta_k * r2/r0``
    with the run's secret ratio ``r2/r0`` in [1/8, 2] (density at most 2.5). All runs must
    agree within ``tolerance``; for a shift of at least ``resolution`` each further run
    lands in the window with probability at most ``4 * 2.5 * tolerance / (resolution -
    tolerance)``, so the term is ``(runs - 1)`` times that, in bits.
    """
    if tolerance >= resolution:
        return 0.0
    p = min(1.0, 4.0 * _RATIO_DENSITY * tolerance / (resolution - tolerance))
    return -(runs - 1) * math.log2(p)


def shift_bound(tolerance: float, runs: int, bits: float) -> float:
    """The tolerance term of a malicious run's certified bound: the smallest shift ``s``
    of the AUC that a blind forgery achieves in an accepted answer with probability at
    most ``2**-bits``.

    Verification accepts runs that agree within ``tolerance``; it cannot tell a forgery
    whose runs all moved by about the same amount. A blind shift moves run ``k`` by
    ``beta_k * r2/r0`` with the run's secret ratio in [1/8, 2] (density at most 2.5), so
    for a shift of ``s`` every further run lands in the window with probability at most
    ``4 * 2.5 * tolerance / (s - tolerance)`` (:func:`tolerance_bound_bits`, which is this
    function's inverse: ``tolerance_bound_bits(tolerance, runs, resolution=s) == bits``).
    Hence ``s = tolerance * (1 + 10 * 2**(bits / (runs - 1)))``: 1.58e-5 at tolerance
    3e-8 (the default), 8 runs and 40 bits; 5.26e-7 at tolerance 1e-9; ``11 * tolerance`` at 0 bits.
    Shifts of a few times the tolerance do pass now and then (measured:
    ``tests/auc/test_malicious_attacks.py``); what is certified is that none beyond ``s``
    passes except with probability ``2**-bits``.
    """
    tol = check_real(tolerance, "tolerance", "shift_bound", gt=0.0, lt=0.5)
    r = check_int(runs, "runs", "shift_bound", min_value=2)
    b = check_real(bits, "bits", "shift_bound", ge=0.0)
    return float(tol * (1.0 + 4.0 * _RATIO_DENSITY * 2.0 ** (b / (r - 1))))


def cheat_bound_bits(n_points: int, splits: int, runs: int = 2,
                     tolerance: float | None = None) -> float:
    """The weakest of the permutation, multiplier and (given ``tolerance``) blind-shift
    terms, in bits."""
    bits = min(permutation_bound_bits(n_points, splits, runs),
               runs * 3.0 * MULTIPLIER_BITS)
    if tolerance is not None:
        bits = min(bits, tolerance_bound_bits(tolerance, runs))
    return bits


def smallest_splits(n_points: int, min_bits: float, runs: int = 2) -> int | None:
    """Smallest ``S`` in 2..64 whose permutation and multiplier terms reach ``min_bits``."""
    for s in range(2, 65):
        if cheat_bound_bits(n_points, s, runs) >= min_bits:
            return s
    return None


@dataclass(frozen=True)
class MaliciousConfig(BoundConfig):
    """Public parameters of malicious-aggregator FHAUC.

    ``runs`` independent executions must agree within ``tolerance``; ``splits`` shares per
    entry hide the positions. :meth:`cheat_bound_bits` is the probability (in bits) that
    a cheating aggregator passes verification, every term included.
    """

    DIGEST_TAG: ClassVar[bytes] = b"fedsec/fhauc-malicious/config/v3|"  # v3: bound channel

    decision_points: tuple[float, ...]
    splits: int
    tolerance: float = DEFAULT_TOLERANCE
    runs: int = DEFAULT_RUNS
    preset: str = MALICIOUS_PRESET
    max_total_samples: int = DEFAULT_MAX_TOTAL_SAMPLES
    allow_insecure: bool = False

    @classmethod
    def create(cls, decision_points: Any = 100, *, splits: int | None = None,
               tolerance: float = DEFAULT_TOLERANCE, runs: int = DEFAULT_RUNS,
               min_bound_bits: float = DEFAULT_MIN_BOUND_BITS,
               preset: str = MALICIOUS_PRESET,
               max_total_samples: int = DEFAULT_MAX_TOTAL_SAMPLES,
               allow_insecure: bool = False) -> MaliciousConfig:
        """Validate parameters; refuse any whose cheating bound is weaker than
        ``min_bound_bits``. ``splits=None`` picks the smallest ``S`` that reaches it."""
        points = as_decision_points(decision_points, max_points=MAX_DECISION_POINTS)
        n = points.size
        params = get_preset(preset, allow_insecure=allow_insecure)
        check_real(tolerance, "tolerance", "MaliciousConfig", gt=0.0, lt=0.5)
        check_int(runs, "runs", "MaliciousConfig", min_value=2, max_value=MAX_RUNS)
        check_real(min_bound_bits, "min_bound_bits", "MaliciousConfig", ge=0.0)
        check_int(max_total_samples, "max_total_samples", "MaliciousConfig", min_value=1,
                  max_value=DEFAULT_MAX_TOTAL_SAMPLES)
        tol_bits = tolerance_bound_bits(tolerance, runs)
        if tol_bits < min_bound_bits:
            raise ValueError(
                f"with tolerance {tolerance:g} and {runs} runs a blind shift of the AUC by "
                f"{SHIFT_RESOLUTION:g} passes with probability up to 2^-{tol_bits:.1f}, weaker "
                f"than the required 2^-{min_bound_bits:g}; lower the tolerance or add runs")
        check_masking_capacity(params, int(max_total_samples))
        if splits is None:
            s = smallest_splits(n, min_bound_bits, runs)
            if s is None:
                raise ValueError(f"no split count up to 64 reaches a 2^-{min_bound_bits:g} "
                                 f"cheating bound with N={n}")
            splits = s
        check_int(splits, "splits", "MaliciousConfig", min_value=2, max_value=64)
        bits = cheat_bound_bits(n, splits, runs)
        if bits < min_bound_bits:
            better = smallest_splits(n, min_bound_bits, runs)
            hint = f"use --splits {better} or more" if better else "use fewer decision points"
            raise ValueError(
                f"with N={n} and S={splits} the aggregator cheats undetected with probability "
                f"2^-{bits:.1f}, weaker than the required 2^-{min_bound_bits:g}; {hint}")
        return cls(tuple(float(x) for x in points), int(splits), float(tolerance), int(runs),
                   preset, int(max_total_samples), allow_insecure)

    def cheat_bound_bits(self) -> float:
        """Every term of the bound (permutation, multipliers, blind shift), in bits."""
        return cheat_bound_bits(self.n_points, self.splits, self.runs, self.tolerance)

    def key_spec(self) -> KeySpec:
        """The CKKS keys this configuration needs (each party derives them itself)."""
        return KeySpec.create(self.preset, self.rotations(), True,
                              allow_insecure=self.allow_insecure)

    @property
    def n_positions(self) -> int:
        return self.splits * (self.n_points + 1)

    def params_slots(self) -> int:
        return get_preset(self.preset, allow_insecure=self.allow_insecure).slots

    @property
    def stride(self) -> int:
        """Slot classes per ciphertext: run ``k`` uses class ``2k`` for its share positions,
        class ``2k + 1`` for its denominator pair and class ``2*runs + 2k`` for the
        positions of its error-bound channel (a power of two >= ``4 * runs``)."""
        return 1 << (4 * self.runs - 1).bit_length()

    @property
    def positions_per_chunk(self) -> int:
        return self.params_slots() // self.stride

    @property
    def n_chunks(self) -> int:
        return -(-self.n_positions // self.positions_per_chunk)

    def rotations(self) -> list[int]:
        """Galois keys for the class sums (rotations by multiples of the stride)."""
        return CKKSContext.sum_rotations(self.params_slots(), self.stride)


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
                          nonces: Sequence[bytes], run: int,
                          purpose: str = "") -> _RunRandomness:
    """Every party derives the same set-up randomness for ``run`` (Sec. IV-D-1);
    ``purpose="bound"`` gives the independent randomness of the run's error-bound
    channel."""
    label = (b"fedsec/fhauc-malicious/v1|" + session.encode() + b"|" + cfg.digest().encode()
             + b"|" + _nonce_digest(nonces) + b"|run-" + str(run).encode())
    if purpose:
        label += b"|" + purpose.encode()
    rs = SeededRandomSource(seed, label)
    m, n = len(nonces), cfg.n_points
    r = 0.5 + 0.5 * rs.uniform(6)
    tr = (2.0 * rs.uniform(m * (n + 2)) - 1.0).reshape(m, n + 2) * ZERO_SUM_BOUND
    fr = (2.0 * rs.uniform(m * (n + 2)) - 1.0).reshape(m, n + 2) * ZERO_SUM_BOUND
    tr[-1] = -tr[:-1].sum(axis=0)
    fr[-1] = -fr[:-1].sum(axis=0)
    return _RunRandomness(r, tr, fr, rs.bits(n + 1), rs.permutation(cfg.n_positions))


def _commit_payload(session: str, config: str, name: str, nonce: bytes) -> bytes:
    return hashlib.sha256(b"fedsec/fhauc-malicious/commit/v1|" + session.encode() + b"|"
                          + config.encode() + b"|" + name.encode() + b"|" + nonce).digest()


def parse_commit(raw: bytes, *, roster: Roster | None, names: Sequence[str], session: str,
                 config: str) -> tuple[int, bytes]:
    """Check one signed commit; return ``(index in names, nonce)`` or raise
    ``ProtocolError`` naming the sender."""
    msg = wire.decode(raw, expect="fhauc-m/commit", max_bytes=1 << 12)
    try:
        name = fields.text(msg.meta, "name", choices=list(names))
    except ProtocolError:
        raise ProtocolError(f"a commit from a party outside the key set-up "
                            f"({str(msg.meta.get('name'))[:64]!r})") from None
    # a commit is addressed to the aggregator (a party checks the ones it relays)
    check_bound(evaluation_binding(session, config, "fhauc-m", AGGREGATOR), msg.meta,
                step="commit", sender=party_role(name), what=f"the commit of {name!r}")
    if len(msg.blobs) != 2 or len(msg.blobs[0]) != NONCE_BYTES:
        raise ProtocolError(f"malformed commit from {name!r}")
    if roster is not None:
        roster.verify(name, "fhauc-m/commit",
                      _commit_payload(session, config, name, msg.blobs[0]), msg.blobs[1])
    return list(names).index(name), msg.blobs[0]


class MaliciousParty:
    """An input party of malicious-aggregator FHAUC (steps 1-8 and 12, verification).

    Parameters
    ----------
    y_true, y_score : array-like
        This party's private labels and scores.
    keys : PartyKeys
        From the signed key set-up.
    config : MaliciousConfig
        The run configuration (in a deployment, chosen by the aggregator); checked against
        ``policy``.
    identity : Identity
        This party's signing identity (it signs its commit).
    roster : Roster
        The federation; every commit in the start message must verify against it.
    policy : PartyPolicy, optional
        This party's limits: quorum (default: the whole roster), tolerance ceiling,
        minimum cheating bound, decision points, presets, message sizes.
    verification_cache : VerificationCache, optional
        Shared by the simulated parties of one in-process run
        (:func:`secure_auc_malicious`): the start message that all of them receive is
        then decoded and its commits verified once (see
        :class:`~fedsec.crypto.keysetup.VerificationCache`). Never set for a party on its
        own machine.
    """

    def __init__(self, y_true: ArrayLike, y_score: ArrayLike, *, keys: PartyKeys,
                 config: MaliciousConfig, identity: Identity, roster: Roster,
                 policy: PartyPolicy | None = None, nonce: bytes | None = None,
                 verification_cache: VerificationCache | None = None) -> None:
        if not keys.context.has_secret_key:
            raise ValueError("an FHAUC party needs the CKKS secret key")
        if keys.context.params.name != config.preset:
            raise ValueError("keys and configuration use different presets")
        if identity.name != keys.name or identity.name not in roster or \
                roster.public_key(identity.name) != identity.public_key:
            raise ValueError("the identity does not match the keys and the roster")
        # no policy given: the caller chose the configuration itself (in a deployment the
        # node passes its own policy), so its decision points are admitted
        self._policy = policy if policy is not None else PartyPolicy(
            min_decision_points=min(DEFAULT_MIN_DECISION_POINTS, config.n_points))
        self._policy.check_config(config)
        self._config = config
        self._keys = keys
        self._identity = identity
        self._roster = roster
        self._y, self._s = check_party_inputs(y_true, y_score, config.max_total_samples)
        if nonce is not None and len(nonce) != NONCE_BYTES:
            raise ValueError(f"a nonce must be {NONCE_BYTES} bytes")
        # ``nonce`` lets a stateless process resume this party between steps; a new
        # evaluation must always use a fresh one (the default).
        self._nonce = nonce if nonce is not None else secrets.token_bytes(NONCE_BYTES)
        self._runs: list[_RunRandomness] | None = None
        self._bound_runs: list[_RunRandomness] = []
        self._error_bound: float = float("nan")
        self._participants: list[int] = []
        self._local = SystemRandomSource()
        self._noise: tuple[np.ndarray, tuple[float, float]] = (np.zeros(0), (0.0, 0.0))
        # This party's role name (``"party:<name>"``) and its side of the binding.
        self._role = party_role(keys.name)
        self._binding = evaluation_binding(keys.session, config.digest(), "fhauc-m", self._role)
        #: This party's seconds by kind of work.
        self.clock = Clock()
        self._verification: dict[str, Any] = {}
        self._finalized = False
        self._cache = verification_cache

    @property
    def error_bound(self) -> float:
        """The certified bound on ``|exact AUC - AUC|``; set by :meth:`finalize`.

        The sum of two terms (both in :attr:`verification`):

        * ``trapezoid_bound``: ``B/denom``, what the decision points leave out (pairs
          within one bin), computed under encryption and verified like the AUC;
        * ``shift_bound``: what verification admits,
          :func:`shift_bound(tolerance, runs, policy.min_bound_bits) <shift_bound>`. An
          accepted answer whose AUC is off by more than this term is a forgery that
          passed with probability at most ``2**-min_bound_bits`` (this party's policy;
          the configuration's permutation and multiplier terms bound the other
          forgeries). 1.58e-5 at the defaults (tolerance 3e-8, 8 runs, 40 bits).
        """
        return self._error_bound

    @property
    def verification(self) -> dict[str, Any]:
        """What :meth:`finalize` checked: the AUC of every run, the tolerance, the
        bound's runs and the two terms of :attr:`error_bound`."""
        return dict(self._verification)

    @property
    def nonce(self) -> bytes:
        return self._nonce

    def restore(self, start: bytes) -> None:
        """Re-enter the state after :meth:`submit` (for stateless runtimes). The runtime
        must also remember that this evaluation was verified once (:meth:`finalize`
        refuses a second answer only within one object)."""
        self._read_start(start)

    def commit(self) -> bytes:
        """Round 1: a signed fresh nonce that makes this evaluation's randomness new and
        proves this party takes part."""
        cfg, session, name = self._config.digest(), self._keys.session, self._keys.name
        sig = self._identity.sign("fhauc-m/commit",
                                  _commit_payload(session, cfg, name, self._nonce))
        meta = self._binding.bind({"name": name}, step="commit", to=AGGREGATOR)
        return wire.encode("fhauc-m/commit", meta, [self._nonce, sig])

    def _checked(self, key: tuple[Any, ...], compute: Any) -> Any:
        return compute() if self._cache is None else self._cache.check(key, compute)

    def _read_start(self, start: bytes) -> None:
        cfg, session = self._config.digest(), self._keys.session
        max_bytes = self._policy.max_message_bytes
        # decoding and verifying the commits depend on the bytes, the roster, the key
        # set-up's names and session, the configuration and the size limit only
        key = (self._roster.digest(), self._keys.names, session, cfg, max_bytes,
               bytes(start))
        msg = self._checked(("fhauc-m/start",) + key, lambda: wire.decode(
            start, expect="fhauc-m/start", max_bytes=max_bytes))
        check_bound(self._binding, msg.meta, step="start", sender=AGGREGATOR, broadcast=True,
                    what="start message")

        def commits() -> dict[int, bytes]:
            entries: dict[int, bytes] = {}
            for raw in msg.blobs:
                try:
                    idx, nonce = parse_commit(raw, roster=self._roster,
                                              names=self._keys.names, session=session,
                                              config=cfg)
                except ProtocolError as exc:
                    raise TamperingDetected(f"the start message carries a bad commit "
                                            f"({exc})", check="commits") from None
                if idx in entries:
                    raise TamperingDetected("the start message lists a party twice",
                                            check="commits")
                entries[idx] = nonce
            return entries

        entries: dict[int, bytes] = self._checked(("fhauc-m/commits",) + key, commits)
        me = self._keys.index
        if entries.get(me) != self._nonce:
            raise TamperingDetected("the start message does not carry this party's commit",
                                    check="nonce")
        self._policy.check_participants(len(entries), "malicious", len(self._roster),
                                        self._roster)
        self._participants = sorted(entries)
        nonces = [entries[i] for i in self._participants]
        self._runs = [derive_run_randomness(self._keys.seed, session, self._config,
                                            nonces, k) for k in range(self._config.runs)]
        self._bound_runs = [derive_run_randomness(self._keys.seed, session, self._config,
                                                  nonces, k, "bound")
                            for k in range(self._config.runs)]

    def _entries(self, rr: _RunRandomness, row: int, bound: bool = False
                 ) -> tuple[np.ndarray, np.ndarray, complex]:
        """Steps 3-5: masked T and F entries (N+1 each) and the DT + i*DF pair. With
        ``bound`` the first factor is ``dTP`` instead of ``T`` (the error-bound channel:
        ``sum dTP*F`` counts the pairs within a bin)."""
        tp, fp = confusion_counts(self._y, self._s, self._config.points)
        t_int, f_int = trapezoid_terms(tp, fp)
        noise, offsets = self._noise
        n = self._config.n_points
        if bound:
            dtp = np.diff(tp, prepend=0)
            dtp[single_value_bins(self._config.points)] = 0   # exact ties: no error
            # one-sided offsets: the bound stays certified (fedsec.auc.masking)
            t = dtp + offsets[0]
            f = f_int + offsets[1]
        else:
            # the numerator's noise: 4e on every term gives num + 4e*sum(F) = num + 4e*Neg
            # (e pooled over the parties), the same in every run
            t = t_int + NUMERATOR_NOISE_FACTOR * noise[2]
            f = f_int.astype(np.float64)
        pos, neg = float(tp[-1]) + noise[0], float(fp[-1]) + noise[1]
        r3, r4, r5, r6, r7, r8 = (float(x) for x in rr.r)
        tv = np.empty(n + 1)
        fv = np.empty(n + 1)
        tv[:n] = r3 * (t + rr.tr[row, :n])
        fv[:n] = r4 * (f + rr.fr[row, :n])
        tv[n] = r5 * (pos + rr.tr[row, n])
        fv[n] = r6 * (neg + rr.fr[row, n])
        dt = r7 * (pos + rr.tr[row, n + 1])
        df = r8 * (neg + rr.fr[row, n + 1])
        return tv, fv, complex(dt, df)

    def _positions(self, rr: _RunRandomness, row: int, bound_channel: bool = False
                   ) -> tuple[np.ndarray, complex]:
        """Steps 6-7 for one run: split every entry into shares and permute the positions."""
        cfg = self._config
        s_count = cfg.splits
        tv, fv, dpair = self._entries(rr, row, bound_channel)
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
        return permuted, dpair

    def _draw_noise(self, n_parties: int) -> tuple[np.ndarray, tuple[float, float]]:
        """This party's share of the counts' noise (Pos, Neg, the terms' shift) and its two
        bound offsets."""
        return count_noise(3, n_parties), (bound_offset(n_parties), bound_offset(n_parties))

    @receives("fhauc-m/start")
    def submit(self, start: bytes) -> bytes:
        """Round 2 (step 8): every run packed into the same ciphertext(s) - run ``k`` in
        slot class ``2k`` (positions) and ``2k + 1`` (denominator pair) - and encrypted."""
        ctx = self._keys.context
        blobs = []
        for vec in self._submission_vectors(start):
            with self.clock("encryption"):
                blobs.append(ctx.encrypt_bytes(vec))
        meta = self._binding.bind({"party": self._keys.index, "chunks": len(blobs)},
                                  step="submit", to=AGGREGATOR)
        return wire.encode("fhauc-m/submit", meta, blobs)

    def _submission_vectors(self, start: bytes) -> list[np.ndarray]:
        """The slot vectors :meth:`submit` encrypts (one per chunk)."""
        self._read_start(start)
        assert self._runs is not None
        cfg = self._config
        row = self._participants.index(self._keys.index)
        parties = len(self._participants)
        # this party's share of the counts' noise, drawn once: every run and both channels
        # see the same noisy counts, so the runs still agree (fedsec.auc.masking)
        self._noise = self._draw_noise(parties)
        with self.clock("share_generation"):
            runs = [self._positions(rr, row) for rr in self._runs]
            bruns = [self._positions(rb, row, bound_channel=True)[0]
                     for rb in self._bound_runs]
        per, stride, first_b = cfg.positions_per_chunk, cfg.stride, 2 * cfg.runs
        vecs = []
        for c in range(cfg.n_chunks):
            vec = np.zeros(cfg.params_slots(), dtype=np.complex128)
            for k, (permuted, dpair) in enumerate(runs):
                part = permuted[c * per:(c + 1) * per]
                vec[2 * k:2 * k + stride * part.size:stride] = part
                if c == 0:
                    vec[2 * k + 1] = dpair
                part_b = bruns[k][c * per:(c + 1) * per]
                j = first_b + 2 * k
                vec[j:j + stride * part_b.size:stride] = part_b
            vecs.append(vec)
        return vecs

    @receives("fhauc-m/result")
    def finalize(self, response: bytes) -> float:
        """Step 12 and verification: the AUC, or ``TamperingDetected``.

        Error messages name the failed check and never carry decrypted values; the
        per-run values stay in :attr:`verification` on this party's side. A party verifies
        **one** answer per evaluation: a second call raises ``ProtocolError`` (an
        aggregator that learns many verdicts on one evaluation's randomness can search
        for a forgery that passes, see :func:`fedsec.testing.auc.adaptive_blind_shift`).
        """
        return self._finalize(response, "fhauc-m/result")

    def _finalize(self, response: bytes, kind: str) -> float:
        if self._runs is None:
            raise ProtocolError("finalize() before submit()")
        if self._finalized:
            # Every verdict is a bit about this evaluation's secret randomness: with a few
            # hundred, an aggregator steers a blind shift through every check.
            raise ProtocolError("this party already verified an answer in this evaluation; "
                                "start a new evaluation (fresh nonce)")
        self._finalized = True
        try:
            msg = wire.decode(response, expect=kind, max_bytes=self._policy.max_message_bytes)
        except ProtocolError as exc:
            raise TamperingDetected(f"unreadable result: {exc}", check="format") from None
        check_bound(self._binding, msg.meta, step="result", sender=AGGREGATOR,
                    broadcast=True, what="result", tampering=True)
        try:
            parties = list(fields.integers(msg.meta, "parties", 0, self._keys.n_parties - 1))
        except ProtocolError:
            parties = None
        if parties != self._participants:
            raise TamperingDetected("the result does not cover exactly the parties that "
                                    "started this evaluation", check="participants")
        runs, stride = self._config.runs, self._config.stride
        if len(msg.blobs) != 1:
            raise TamperingDetected("the result must hold one ciphertext", check="format")
        ctx = self._keys.context
        tol = self._config.tolerance
        try:
            with self.clock("decryption"):
                slots = ctx.decrypt(ctx.deserialize(msg.blobs[0]))
        except ProtocolError:
            raise TamperingDetected("unreadable ciphertext", check="format") from None
        aucs = []
        bounds = []
        undefined = 0
        dens = []
        peak = max(1.0, float(np.abs(slots[:stride]).max()))
        used = set(range(2 * runs)) | {2 * runs + 2 * k for k in range(runs)}
        for j in range(stride):   # unused slot classes must be empty
            if j not in used and np.abs(slots[j::stride]).max() > 1e-6 * peak:
                raise TamperingDetected("an unused slot class is not empty",
                                        check="slot-consistency")
        for k, rr in enumerate(self._runs):
            x = slots[2 * k::stride]
            y = slots[2 * k + 1::stride]
            xb = slots[2 * runs + 2 * k::stride]
            big_x = float(x[0].imag)
            big_y = float(y[0].imag)
            big_b = float(xb[0].imag)
            scale_x = max(1.0, abs(big_x))
            scale_y = max(1.0, abs(big_y))
            scale_b = max(1.0, abs(big_b))
            if (np.abs(x.imag - big_x).max() > 1e-6 * scale_x
                    or np.abs(y.imag - big_y).max() > 1e-6 * scale_y
                    or np.abs(xb.imag - big_b).max() > 1e-6 * scale_b
                    or np.abs(x.real).max() > 1e-6 * scale_x
                    or np.abs(y.real).max() > 1e-6 * scale_y
                    or np.abs(xb.real).max() > 1e-6 * scale_b):
                raise TamperingDetected(f"run {k + 1}: the answer's slots are inconsistent",
                                        check="slot-consistency")
            dens.append(big_y / rr.r2)
            # Y = c * r2 * denom >= 1/16 when both classes exist (c >= 1/2, r2 >= 1/8)
            if abs(big_y) < 1.0 / 32.0:
                undefined += 1
                continue
            aucs.append((big_x / big_y - rr.r1 / rr.r2) * rr.r2 / rr.r0)
            rb = self._bound_runs[k]
            bounds.append((big_b / big_y - rb.r1 / rr.r2) * rr.r2 / rb.r0)
        # One mask for all runs: every run's Y / r2 is the same c * denom.
        ref = max(1.0, max(abs(d) for d in dens))
        if max(dens) - min(dens) > 1e-6 * ref:
            raise TamperingDetected("the runs' denominators disagree",
                                    check="denominator")
        both_local = bool(self._y.any() and not self._y.all())
        if undefined == runs and not both_local:
            raise UndefinedMetricError("AUC is undefined: the federation's test data hold "
                                       "only one class")
        if undefined:
            # This party holds both classes, so the federation does: a zero denominator
            # in any run is a forged answer.
            raise TamperingDetected("a run reports a zero denominator", check="denominator")
        self._verification = {"auc_runs": aucs, "tolerance": tol}
        for k, a in enumerate(aucs):
            if not -tol <= a <= 1.0 + tol:
                raise TamperingDetected(f"run {k + 1} yields an AUC outside [0, 1]",
                                        check="range")
        if max(aucs) - min(aucs) > tol:
            raise TamperingDetected(f"the {runs} runs disagree beyond the tolerance "
                                    f"{tol:g}", check="double-execution")
        auc = min(1.0, max(0.0, aucs[0]))
        # the bound channel is verified like the AUC: in range (the trapezoid counts the
        # pairs within a bin as 1/2, so B/denom <= min(auc, 1 - auc)) and the runs agree
        self._verification["bound_runs"] = bounds
        # the parties' one-sided offsets may lift B/denom above min(AUC, 1 - AUC); only
        # by this much (an upward shift loosens a bound, it never breaks it)
        lift = bound_overstatement(min(abs(d) for d in dens), self._config.n_points)
        for k, b in enumerate(bounds):
            if not -tol <= b <= min(auc, 1.0 - auc) + tol + lift:
                raise TamperingDetected(f"run {k + 1} yields an error bound outside "
                                        "[0, min(AUC, 1 - AUC)]", check="range")
        if max(bounds) - min(bounds) > tol:
            raise TamperingDetected(f"the {runs} runs' error bounds disagree beyond the "
                                    f"tolerance {tol:g}", check="double-execution")
        trapezoid = min(max(0.0, bounds[0]), max(0.0, min(auc, 1.0 - auc)))
        shift = shift_bound(tol, runs, self._policy.min_bound_bits)
        self._verification.update(trapezoid_bound=trapezoid, shift_bound=shift)
        self._error_bound = min(1.0, trapezoid + shift)
        return auc


class MaliciousAggregator(AggregatorInfo):
    """The aggregator of malicious-aggregator FHAUC (steps 9-11)."""

    def __init__(self, context: CKKSContext, config: MaliciousConfig, *,
                 names: Sequence[str], session: str, roster: Roster | None = None,
                 min_parties: int | None = None) -> None:
        if context.has_secret_key:
            raise ValueError("the aggregator must not hold the secret key")
        missing = set(config.rotations()) - set(context.rotations)
        if missing or not context.conjugate_key or context.params.name != config.preset:
            raise ValueError("the public context does not match the configuration")
        self._context = context
        self._config = config
        self._names = tuple(names)
        self._session = session
        self._binding = evaluation_binding(session, config.digest(), "fhauc-m", AGGREGATOR)
        #: The aggregator's seconds by kind of work (:attr:`timing` splits the last call).
        self.clock = Clock()
        self._roster = roster
        self._min_parties = len(self._names) if min_parties is None else int(min_parties)
        self._participants: list[int] = []
        self._rejected: dict[int, str] = {}
        self._timing: dict[str, float] = {}
        self.begin()

    @property
    def participants(self) -> list[int]:
        """The parties (indices in :attr:`names`) whose commits :meth:`start` accepted."""
        return list(self._participants)

    @property
    def rejected(self) -> dict[int, str]:
        """Why each commit left out by :meth:`start` was rejected, by position."""
        return dict(self._rejected)

    @receives("fhauc-m/commit")
    def start(self, commits: Sequence[bytes]) -> bytes:
        """Round 1: fix the participants and relay everyone's signed commit to everyone.

        A bad commit is left out and recorded in :attr:`rejected` (by position)."""
        entries: dict[int, bytes] = {}
        first: dict[int, int] = {}
        self._rejected = {}
        for pos, raw in enumerate(commits):
            try:
                idx, _nonce = parse_commit(raw, roster=self._roster, names=self._names,
                                           session=self._session, config=self._config.digest())
            except ProtocolError as exc:
                self._rejected[pos] = str(exc)
                continue
            if idx in first:
                # a copy is harmless; two different signed commits (one replayed from an
                # earlier evaluation) cannot be told apart, so neither is used
                if raw == entries.get(idx, raw) and first[idx] not in self._rejected:
                    self._rejected[pos] = f"a copy of the commit of {self._names[idx]!r}"
                    continue
                self._rejected[pos] = self._rejected[first[idx]] = \
                    f"two different commits claim to come from {self._names[idx]!r}"
                entries.pop(idx, None)
                continue
            entries[idx] = raw
            first[idx] = pos
        if len(entries) < max(2, self._min_parties):
            raise ProtocolError(f"only {len(entries)} parties committed; at least "
                                f"{max(2, self._min_parties)} are required")
        self._participants = sorted(entries)
        self.begin()
        meta = self._binding.bind({}, step="start", to=BROADCAST)
        return wire.encode("fhauc-m/start", meta, [entries[i] for i in self._participants])

    def begin(self) -> None:
        """Start collecting submissions afresh (the participants stay those of
        :meth:`start`)."""
        self._running = RunningSums(self._context, self._config.n_chunks)
        self._seen: list[int] = []
        self._load_s = 0.0

    def add(self, submission: bytes) -> int:
        """Check one participant's submission and add it into the running sums as it
        arrives (it is not kept: memory does not grow with the parties); return its index.

        :meth:`aggregate` is this over a batch followed by :meth:`finish`."""
        t0 = time.perf_counter()
        with self.clock("other"):
            chunks = self._config.n_chunks
            msg = wire.decode(submission, expect="fhauc-m/submit")
            idx = party_index(msg.meta, len(self._names))
            check_bound(self._binding, msg.meta, step="submit",
                        sender=party_role(self._names[idx]), what="a submission")
            if idx not in self._participants or idx in self._seen:
                raise ProtocolError(f"unexpected or duplicate submission from party {idx!r}")
            if len(msg.blobs) != chunks:
                raise ProtocolError(f"a submission must hold {chunks} ciphertext(s)")
            ctx = self._context
            cts = [ctx.deserialize(b, at_top=True, scale=ctx.scale) for b in msg.blobs]
            self._running.add(cts)
            self._seen.append(idx)
        self._load_s += time.perf_counter() - t0
        return idx

    def finish(self) -> bytes:
        """Steps 9-11 on the submissions added since :meth:`begin`: the masked answer."""
        if sorted(self._seen) != self._participants:
            raise ProtocolError("missing submissions: malicious FHAUC needs every party that "
                                "started (their zero-sum masks must cancel); restart with "
                                "the parties still present")
        t1 = time.perf_counter()
        with self.clock("arithmetic"):
            blob = self._context.serialize(self.mask(self.combine(self._running.sums())))
        t2 = time.perf_counter()
        self._timing = {"deserialize_s": self._load_s, "compute_s": t2 - t1,
                        "total_s": self._load_s + t2 - t1}
        self.begin()
        return self.result_message(blob)

    def combine(self, chunk_sums: Sequence[Any]) -> Any:
        """Steps 9-10 for all runs at once: slot class ``2k`` holds ``4i(r0 num + r1
        denom)`` of run ``k``, class ``2k + 1`` holds ``4i r2 denom``."""
        return combine_runs(self._context, chunk_sums, self._config.stride)

    def mask(self, q: Any, *, masks: tuple[float, float] | None = None,
             noise: bool = True) -> Any:
        """Step 11: multiply every slot by one real mask ``c`` (:func:`real_mask`), the same
        for every run, encoded at the scale of the prime the result is then rescaled by,
        then add :data:`~fedsec.auc.masking.RESULT_NOISE_SD` noise to the numerator and
        the denominator channels. ``masks`` (numerator, denominator channel) lets
        :mod:`fedsec.testing.auc` scale one channel."""
        ctx = self._context
        even = np.arange(ctx.slots) % 2 == 0
        if masks is None:
            out = finish_masked(ctx, masked_product(ctx, q, real_mask()))
        else:
            out = finish_masked(ctx, masked_product(ctx, q, np.where(even, *masks)))
        if noise:
            out = add_result_noise(ctx, out, lambda e: np.where(even, 1j * e[0], 1j * e[1]),
                                   sigma=RESULT_NOISE_SD)
        return out

    @receives("fhauc-m/submit")
    def aggregate(self, submissions: Sequence[bytes]) -> bytes:
        """Steps 9-11: add every participant's submission as it comes (:meth:`add`) and
        return the masked answer (one ciphertext, every run; :meth:`finish`)."""
        self.begin()
        for raw in submissions:
            self.add(raw)
        return self.finish()

    def result_message(self, blob: bytes, parties: Sequence[int] | None = None, *,
                       kind: str = "fhauc-m/result") -> bytes:
        """The answer message for one serialized ciphertext, bound to this evaluation
        (``parties``: the participant list it claims, default the participants)."""
        meta = self._binding.bind(
            {"parties": list(self._participants if parties is None else parties)},
            step="result", to=BROADCAST)
        return wire.encode(kind, meta, [blob])


def combine_runs(ctx: CKKSContext, chunk_sums: Sequence[Any], stride: int) -> Any:
    """:meth:`MaliciousAggregator.combine` over ``ctx``'s public keys: deterministic, so a
    party of threshold mode recomputes exactly the aggregator's ciphertext."""
    q = None
    for z in chunk_sums:
        sq = ctx.square(z, rescale=False)   # masked at the top prime (masking docs)
        q = sq if q is None else ctx.add(q, sq)
    assert q is not None
    q = ctx.sub(q, ctx.conjugate(q))          # 4i * T * F per slot
    return ctx.sum_slots(q, stride=stride)


def secure_auc_malicious(parties: Sequence[tuple[ArrayLike, ArrayLike]], *,
                         decision_points: int | str | ArrayLike = 100, splits: int | None = None,
                         tolerance: float = DEFAULT_TOLERANCE, runs: int = DEFAULT_RUNS,
                         min_bound_bits: float = DEFAULT_MIN_BOUND_BITS,
                         preset: str = MALICIOUS_PRESET, names: Sequence[str] | None = None,
                         policy: PartyPolicy | None = None,
                         progress: Callable[[str], None] | None = None,
                         allow_insecure: bool = False,
                         scores: str = "probability", target: float | None = None,
                         max_points: int | None = None,
                         max_rounds: int = DEFAULT_MAX_ROUNDS,
                         network: Network | None = None) -> SecureAUCResult:
    """Run malicious-aggregator FHAUC in one process (every party, the aggregator and a
    fresh identity per party, made here).

    ``decision_points``, ``scores``, ``target``, ``max_points`` and ``max_rounds`` are as
    in :func:`fedsec.auc.fhauc.secure_auc` (``"exact"`` refines the points; the final
    AUC, its error bound and the refinement rounds are verified: see
    :mod:`fedsec.auc.exact`). The result's ``error_bound`` is the verified trapezoid
    bound plus what verification admits (:attr:`MaliciousParty.error_bound`,
    :func:`shift_bound`; both terms in ``extra``): 1.58e-5 at the default tolerance, so
    exact mode's default target in malicious mode is 2e-5 (a target of 1e-6 needs a
    ``tolerance`` of about 1e-9, which honest runs meet from ~100 samples on).

    ``network`` is the :class:`~fedsec.protocol.network.Network` every message crosses
    (key set-up included) between ``"aggregator"`` and ``"party:<name>"``: tests,
    benchmarks and the tamper battery count, observe or rewrite the traffic there (a
    cheating aggregator is an interceptor that rewrites what the aggregator forwards:
    the start message, the submissions it computes on, the answer; one message per party
    when it equivocates). Default: a fresh one per run.
    """
    parties = apply_score_transform(parties, scores)
    # checked here so that messages name this function's arguments
    check_real(tolerance, "tolerance", "secure_auc_malicious", gt=0.0, lt=0.5)
    check_int(runs, "runs", "secure_auc_malicious", min_value=2, max_value=MAX_RUNS)
    check_real(min_bound_bits, "min_bound_bits", "secure_auc_malicious", ge=0.0)
    if splits is not None:
        check_int(splits, "splits", "secure_auc_malicious", min_value=2, max_value=64)
    if wants_exact(decision_points, "secure_auc_malicious"):
        from fedsec.auc.exact import secure_auc_exact

        return secure_auc_exact(parties, final=secure_auc_malicious, security="malicious",
                                target=target, max_points=max_points,
                                max_rounds=max_rounds, preset=preset, names=names,
                                progress=progress, allow_insecure=allow_insecure,
                                network=network, splits=splits, tolerance=tolerance,
                                runs=runs, min_bound_bits=min_bound_bits, policy=policy)
    say = progress or (lambda _msg: None)
    net = network if network is not None else Network()
    before = dict(net.accounting.bytes_by_message)
    cfg = MaliciousConfig.create(decision_points, splits=splits, tolerance=tolerance,
                                 runs=runs, min_bound_bits=min_bound_bits, preset=preset,
                                 allow_insecure=allow_insecure)
    pol = policy if policy is not None else PartyPolicy(
        max_tolerance=max(tolerance, DEFAULT_MAX_TOLERANCE), min_bound_bits=min_bound_bits,
        max_decision_points=max(DEFAULT_MAX_DECISION_POINTS, cfg.n_points),
        min_decision_points=min(DEFAULT_MIN_DECISION_POINTS, cfg.n_points),
        presets=(cfg.preset,), max_key_bytes=IN_PROCESS_MAX_KEY_BYTES)
    data, party_names = prepare_federation(parties, names, cfg.max_total_samples)
    identities, roster = local_federation(party_names)
    say(f"key set-up: {len(data)} parties, preset {cfg.preset}")
    t0 = time.perf_counter()
    ks_agg, keys = run_key_setup(identities, roster, cfg.key_spec(),
                                 min_parties=pol.required_parties("malicious", len(roster),
                                                                  roster),
                                 network=net)
    setup_s = time.perf_counter() - t0
    assert ks_agg.context is not None
    agg = MaliciousAggregator(ks_agg.context, cfg, names=ks_agg.names, session=ks_agg.session,
                              roster=roster)
    # one cache for this run's simulated parties: the start message is decoded and its
    # commits verified once, not once per party
    cache = VerificationCache()
    roles = [MaliciousParty(y, s, keys=k, config=cfg, identity=i, roster=roster, policy=pol,
                            verification_cache=cache)
             for (y, s), k, i in zip(data, keys, identities, strict=True)]
    on_net = [party_role(k.name) for k in keys]
    bits = cfg.cheat_bound_bits()
    say(f"parties commit fresh nonces (S={cfg.splits}, {cfg.runs} runs, bound 2^-{bits:.1f})")
    commits = net.gather(on_net, AGGREGATOR, [r.commit() for r in roles])
    start = net.broadcast(AGGREGATOR, on_net, agg.start(commits))
    say(f"parties mask, split, permute and encrypt {cfg.runs} runs ({cfg.n_chunks} "
        "ciphertext(s) per run)")
    subs = net.gather(on_net, AGGREGATOR,
                      [r.submit(st) for r, st in zip(roles, start, strict=True)])
    say(f"aggregator computes {cfg.runs} runs on ciphertexts")
    response = net.broadcast(AGGREGATOR, on_net, agg.aggregate(subs))
    say("parties decrypt and verify")
    aucs = [r.finalize(resp) for r, resp in zip(roles, response, strict=True)]
    if max(aucs) - min(aucs) > cfg.tolerance:
        raise TamperingDetected("parties obtained different AUC values", check="agreement")
    bounds = [r.error_bound for r in roles]
    if max(bounds) - min(bounds) > cfg.tolerance:
        raise TamperingDetected("parties obtained different error bounds", check="agreement")
    up, down = bytes_per_party(net.accounting, ("fhauc-m/commit", "fhauc-m/start",
                                                "fhauc-m/submit", "fhauc-m/result"), before)
    # time: each role's own Clock, summed here (bytes: counted by the network)
    net.accounting.add_clock(agg.clock)
    for r in roles:
        net.accounting.add_clock(r.clock)
    return SecureAUCResult(
        auc=aucs[0], error_bound=bounds[0], verified=True, cheat_bound_bits=bits,
        parties=len(roles), decision_points=cfg.n_points, security="malicious",
        masking="single", preset=cfg.preset,
        bytes_up_per_party=up, bytes_down_per_party=down,
        aggregator_seconds=agg.timing["total_s"],
        setup_bytes_to_aggregator=ks_agg.public_bytes_size, setup_seconds=setup_s,
        included=[ks_agg.names[i] for i in agg.participants],
        extra={"verified": True, "cheat_bound_bits": bits, "splits": cfg.splits,
               "runs": cfg.runs,
               "permutation_bound_bits": permutation_bound_bits(cfg.n_points, cfg.splits,
                                                                cfg.runs),
               "multiplier_bound_bits": cfg.runs * 3.0 * MULTIPLIER_BITS,
               "tolerance_bound_bits": tolerance_bound_bits(cfg.tolerance, cfg.runs),
               "shift_resolution": SHIFT_RESOLUTION,
               "tolerance": cfg.tolerance,
               "trapezoid_bound": roles[0].verification["trapezoid_bound"],
               "shift_bound": roles[0].verification["shift_bound"],
               "auc_runs": roles[0].verification.get("auc_runs"),
               "aggregator_deserialize_s": agg.timing["deserialize_s"],
               "aggregator_compute_s": agg.timing["compute_s"]},
    )
