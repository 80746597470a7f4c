"""What every FHAUC variant shares: bound configurations, input checks, the result type,
the final division and the in-process federation helpers.

Both :mod:`fedsec.auc.fhauc` (semi-honest) and :mod:`fedsec.auc.fhauc_malicious` import
this module; neither imports the other.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from decimal import ROUND_CEILING, Decimal
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike

from fedsec._validation import check_int, check_labels_scores, check_real
from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.identity import Identity, Roster
from fedsec.crypto.keysetup import AGGREGATOR, party_role
from fedsec.errors import ProtocolError, UndefinedMetricError
from fedsec.protocol import fields
from fedsec.protocol.accounting import Accounting
from fedsec.protocol.binding import Binding, ReplayRefused

__all__ = ["AggregatorInfo", "BoundConfig", "RunningSums", "SecureAUCResult", "check_party_inputs",
           "prepare_federation",
           "finish_auc", "finish_error_bound", "apply_score_transform", "local_federation",
           "DEFAULT_MAX_TOTAL_SAMPLES", "AGGREGATOR", "party_role", "evaluation_binding",
           "check_bound", "party_index", "bytes_per_party",
           "MAX_DECISION_POINTS", "shared_result", "SHARED_AUC_DIGITS",
           "SHARED_BOUND_DIGITS"]

DEFAULT_MAX_TOTAL_SAMPLES = 1 << 20
#: No configuration takes more decision points than this (checked before allocating).
MAX_DECISION_POINTS = 1 << 16


class BoundConfig:
    """What every FHAUC configuration shares: its decision points and a digest that binds
    each protocol message to the exact configuration. Subclasses are frozen dataclasses."""

    # v2: the 4-slot layout with the error-bound channel; v1 parties and
    # aggregators cannot be mixed with v2 ones, and the digest binding says so
    DIGEST_TAG: ClassVar[bytes] = b"fedsec/fhauc/config/v2|"
    decision_points: tuple[float, ...]

    @property
    def n_points(self) -> int:
        return len(self.decision_points)

    @property
    def points(self) -> np.ndarray:
        return np.asarray(self.decision_points, dtype=np.float64)

    @functools.cached_property
    def _digest(self) -> str:
        blob = json.dumps(asdict(self), sort_keys=True).encode()  # type: ignore[call-overload]
        return hashlib.sha256(self.DIGEST_TAG + blob).hexdigest()[:32]

    def digest(self) -> str:
        """A short hash of the configuration (cached: it hashes every decision point)."""
        return self._digest


def check_party_inputs(y_true: ArrayLike, y_score: ArrayLike, max_total: int,
                       owner: str = "the party") -> tuple[np.ndarray, np.ndarray]:
    y, s = check_labels_scores(y_true, y_score, owner)
    if y.size > max_total:
        raise ValueError(f"a party holds {y.size} samples, more than max_total_samples="
                         f"{max_total} that the CKKS parameters are sized for")
    return y, s


@dataclass
class SecureAUCResult:
    """The AUC, how far it may be from the exact AUC, and what it cost.

    Attributes
    ----------
    auc : float
        The trapezoid AUC over the decision points (the papers' quantity).
    error_bound : float
        Certified bound on ``|exact AUC - auc|``, where the exact AUC is what
        ``sklearn.metrics.roc_auc_score`` prints on the pooled data: the share of
        (positive, negative) pairs whose scores fall between the same two decision points,
        halved (:func:`fedsec.metrics.trapezoid_error_bound`). Computed under encryption
        with the AUC; parties learn it and nothing per party.
    verified : bool
        True when malicious-mode verification passed (semi-honest mode: False).
    cheat_bound_bits : float or None
        Malicious mode: ``-log2`` of the probability that a cheating aggregator passes.
    decision_mode : str
        ``"fixed"`` (the points given) or ``"exact"`` (refined until ``error_bound`` is
        at most ``target``).
    target : float or None
        Exact mode's target for ``error_bound``.
    target_reached : bool
        False when exact mode stopped at its cap with ``error_bound > target`` (a
        ``UserWarning`` says so too). Always True in fixed mode.
    rounds : int
        Secure evaluations run (exact mode refines over several).
    """

    auc: float
    parties: int
    decision_points: int
    security: str
    masking: str
    preset: str
    bytes_up_per_party: int
    bytes_down_per_party: int
    aggregator_seconds: float
    setup_bytes_to_aggregator: int
    setup_seconds: float
    included: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    error_bound: float = float("nan")
    verified: bool = False
    cheat_bound_bits: float | None = None
    decision_mode: str = "fixed"
    target: float | None = None
    target_reached: bool = True
    rounds: int = 1

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_dict(self) -> dict[str, Any]:
        """Every field as plain JSON-ready Python values."""
        return asdict(self)

    def to_json(self, **kwargs: Any) -> str:
        """:meth:`to_dict` as JSON (``kwargs`` go to :func:`json.dumps`)."""
        return json.dumps(self.to_dict(), default=float, **kwargs)


def prepare_federation(parties: Sequence[tuple[ArrayLike, ArrayLike]],
                       names: Sequence[str] | None, max_total: int
                       ) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[str]]:
    """Validate every party's data and the federation as a whole; name the parties."""
    data = [check_party_inputs(y, s, max_total, f"party {i}")
            for i, (y, s) in enumerate(parties)]
    if len(data) < 2:
        raise ValueError(f"a federation needs at least 2 parties; got {len(data)} (one "
                         "party's AUC needs no secure protocol)")
    total = sum(int(y.size) for y, _ in data)
    pos = sum(int(y.sum()) for y, _ in data)
    if total > max_total:
        raise ValueError(f"the federation holds {total} samples, more than "
                         f"max_total_samples={max_total}")
    if pos == 0 or pos == total:
        raise UndefinedMetricError("AUC is undefined: the federation's data hold only one class")
    party_names = list(names) if names is not None else [f"party-{i}" for i in range(len(data))]
    if len(party_names) != len(data):
        raise ValueError(f"{len(party_names)} names for {len(data)} parties")
    return data, party_names


def wants_exact(decision_points: Any, where: str) -> bool:
    """Check the ``decision_points`` argument of an entry point; True for ``"exact"``."""
    if isinstance(decision_points, str):
        if decision_points != "exact":
            raise ValueError(f"The 'decision_points' parameter of {where} must be an int, a "
                             f"sequence of numbers or 'exact'. Got {decision_points!r} instead.")
        return True
    if isinstance(decision_points, int | np.integer) and not isinstance(decision_points, bool):
        check_int(int(decision_points), "decision_points", where, min_value=2)
    return False


def apply_score_transform(parties: Sequence[tuple[ArrayLike, ArrayLike]], scores: str
                          ) -> list[tuple[ArrayLike, np.ndarray]]:
    """Each party maps its own scores into [0, 1] with the declared public transform
    (:func:`fedsec.metrics.transform_scores`); errors name the party."""
    from fedsec.metrics.roc import _parse_scores, transform_scores

    _parse_scores(scores)
    out = []
    for i, (y, s) in enumerate(parties):
        try:
            out.append((y, transform_scores(s, scores)))
        except ValueError as exc:
            raise ValueError(f"party {i}: {exc}") from None
    return out


def local_federation(names: Sequence[str], *, quorum: int | None = None
                     ) -> tuple[list[Identity], Roster]:
    """Fresh identities for parties simulated in one process, and their roster.

    In a deployment each party makes its identity on its own machine
    (``fedsec identity init``) and the roster is agreed out of band.
    """
    identities = [Identity(n) for n in names]
    return identities, Roster.of(identities, quorum=quorum)


def finish_error_bound(num_b: float, denom: float, ratio: float, auc: float,
                       slack: float = 1e-6) -> float:
    """``B/denom`` from the masked bound channel ``num_b/denom - ratio``.

    ``B/denom = sum(dTP*F) / (2*Pos*Neg)`` bounds ``|exact - trapezoid|`` and can never
    exceed ``min(auc, 1 - auc)`` (the trapezoid counts those pairs as 1/2): anything else
    is not a result. Error messages carry no decrypted values."""
    bound = num_b / denom - ratio
    if not -slack <= bound <= min(auc, 1.0 - auc) + slack:
        raise ProtocolError("the response is not a masked FHAUC result (check: "
                            "error-bound)")
    return min(max(0.0, bound), max(0.0, min(auc, 1.0 - auc)))


def finish_auc(num: float, denom: float, ratio: float) -> float:
    """``num/denom - ratio`` with the checks every FHAUC variant needs.

    Error messages never carry decrypted values (they may travel to the aggregator).
    """
    # denom = d * 2 * Pos * Neg >= 1 when both classes exist (d >= 1/2); CKKS noise ~1e-9
    if abs(denom) < 0.25:
        raise UndefinedMetricError("AUC is undefined: the federation's test data hold only "
                                   "one class")
    auc = num / denom - ratio
    if not -1e-6 <= auc <= 1.0 + 1e-6:
        raise ProtocolError("the decrypted AUC is outside [0, 1]: the federation exceeds "
                            "max_total_samples or the response is corrupt")
    return min(1.0, max(0.0, auc))


#: Significant digits of the AUC, and of its error bound, that a node shares by default.
SHARED_AUC_DIGITS = 6
SHARED_BOUND_DIGITS = 2


def _ceil_significant(x: float, digits: int) -> float:
    """The smallest float ``>= x`` that has at most ``digits`` significant decimal digits
    (up to the float nearest that decimal)."""
    if x == 0.0:
        return 0.0
    exponent = math.floor(math.log10(x)) - digits + 1
    up = float(Decimal(x).quantize(Decimal(1).scaleb(exponent), rounding=ROUND_CEILING))
    return up if up >= x else math.nextafter(up, math.inf)


def shared_result(auc: float, bound: float, digits: int = SHARED_AUC_DIGITS, *,
                  bound_digits: int = SHARED_BOUND_DIGITS) -> tuple[float, float]:
    """The AUC and its certified error bound as a node shares them (with the aggregator
    or anyone else): the AUC rounded to ``digits`` significant digits, the bound rounded
    *up* to ``bound_digits`` significant digits after adding what rounding the AUC moved.

    Why round: at full precision the two numbers pin the federation's class counts. The
    AUC is ``num/denom`` and the bound ``B/denom`` over the same denominator
    ``denom = 2*Pos*Neg``; whoever holds both to ~1e-16 keeps the candidates ``q`` for
    which ``q*AUC`` and ``q*bound`` are (nearly) whole numbers, and at 3,000 to 100,000
    samples exactly one candidate is left: the true ``2*Pos*Neg``, hence in a two-party
    federation the other party's class counts. Six significant digits of the AUC are
    below the precision any user needs (the trapezoid's own error is usually larger) and
    leave every denominator within ``1e-6`` relative of a fraction; a bound needs only
    about two digits to say how far the AUC may be off.

    The rounded pair is still a certified statement: if ``|exact - auc| <= bound`` then
    ``|exact - shared_auc| <= shared_bound``, because the shared bound adds
    ``|auc - shared_auc|`` before rounding up.

    Parameters
    ----------
    auc : float
        The AUC, in ``[0, 1]``.
    bound : float
        Its certified error bound, ``>= 0``.
    digits : int, default=6
        Significant digits of the shared AUC, 1 to 17.
    bound_digits : int, default=2
        Significant digits of the shared bound (rounded up), 1 to 17.

    Returns
    -------
    (float, float)
        ``(shared_auc, shared_bound)``.

    Examples
    --------
    >>> shared_result(0.8765432109876, 3.21e-7)
    (0.876543, 5.4e-07)
    """
    owner = "shared_result"
    a = check_real(auc, "auc", owner, ge=0.0, le=1.0)
    b = check_real(bound, "bound", owner, ge=0.0)
    d = check_int(digits, "digits", owner, min_value=1, max_value=17)
    bd = check_int(bound_digits, "bound_digits", owner, min_value=1, max_value=17)
    shared_auc = min(1.0, max(0.0, float(f"{a:.{d}g}")))
    moved = abs(a - shared_auc)
    # one ulp up covers the half ulp that the float sum may have rounded down
    widened = b + moved if moved == 0.0 else math.nextafter(b + moved, math.inf)
    return shared_auc, _ceil_significant(widened, bd)


# ---------------------------------------------------------------- binding and accounting
def evaluation_binding(keys_session: str, config_digest: str, protocol: str,
                       me: str) -> Binding:
    """One role's :class:`~fedsec.protocol.binding.Binding` for an evaluation of
    ``protocol`` (``"fhauc"``, ``"fhauc-m"``, ``"fhauc-exact"``) under the keys of
    ``keys_session`` with the configuration ``config_digest``: the binding's session is
    the hash of both, so a message of another key set-up *or* another configuration is
    "another session" (a replay or a splice)."""
    h = hashlib.sha256(b"fedsec/auc/session|" + protocol.encode() + b"|"
                       + keys_session.encode() + b"|" + config_digest.encode())
    return Binding(h.hexdigest(), protocol, me)


def check_bound(binding: Binding, meta: Any, *, step: str, sender: str, what: str,
                round: int = -1, broadcast: bool = False,
                tampering: bool = False) -> None:
    """``binding.check`` with AUC's words: ``"<what> belongs to another configuration or
    session"`` (a :class:`~fedsec.protocol.binding.ReplayRefused`, or with ``tampering``
    a :class:`~fedsec.errors.TamperingDetected` whose check is ``"binding"``)."""
    from fedsec.errors import TamperingDetected

    try:
        binding.check(meta, step=step, sender=sender, round=round, broadcast=broadcast,
                      what=what)
    except ReplayRefused as exc:
        text = f"{what} belongs to another configuration or session (check: {exc.check})"
        if tampering:
            raise TamperingDetected(text, check="binding") from None
        raise ReplayRefused(text, check=exc.check) from None
    except ProtocolError as exc:
        if tampering:
            raise TamperingDetected(f"{what}: {exc}", check="binding") from None
        raise


def party_index(meta: Any, n: int) -> int:
    """The ``party`` field of a submission: an index into the key set-up's names."""
    try:
        return fields.integer(meta, "party", 0, n - 1)
    except ProtocolError:
        raise ProtocolError(f"invalid or duplicate party index "
                            f"{str(meta.get('party'))[:32]!r}") from None


def bytes_per_party(acc: Accounting, kinds: Sequence[str],
                    since: dict[tuple[str, str, str], int] | None = None) -> tuple[int, int]:
    """The most bytes one party sent to the aggregator, and received from it, in messages
    of ``kinds`` (counted by the network; ``since``: a copy of ``bytes_by_message`` taken
    before the evaluation, whose bytes are not counted)."""
    up: dict[str, int] = {}
    down: dict[str, int] = {}
    base = since or {}
    for key, total in acc.bytes_by_message.items():
        snd, rcv, kind = key
        n = total - base.get(key, 0)
        if kind not in kinds or n <= 0:
            continue
        if rcv == AGGREGATOR and snd != AGGREGATOR:
            up[snd] = up.get(snd, 0) + n
        elif snd == AGGREGATOR and rcv != AGGREGATOR:
            down[rcv] = down.get(rcv, 0) + n
    return max(up.values(), default=0), max(down.values(), default=0)


# re-exported for the AUC roles
_ = (AGGREGATOR, party_role)


class RunningSums:
    """Per-chunk running sums of the parties' ciphertexts: an aggregator adds each
    submission's ciphertexts as it arrives and keeps none of them, so its memory does not
    grow with the number of parties.

    Parameters
    ----------
    context : CKKSContext
        The aggregator's public context (additions only).
    chunks : int
        Ciphertexts per submission.
    """

    def __init__(self, context: CKKSContext, chunks: int) -> None:
        self._context = context
        self._sums: list[Any] = [None] * int(chunks)
        #: Submissions added so far.
        self.count = 0
        self._failed = False

    def add(self, ciphertexts: Sequence[Any]) -> None:
        """Add one submission's ciphertexts (one per chunk, already checked)."""
        if len(ciphertexts) != len(self._sums):
            raise ValueError("one ciphertext per chunk")
        if self._failed:
            raise ProtocolError("an earlier submission could not be added")
        try:
            for c, ct in enumerate(ciphertexts):
                if self._sums[c] is None:
                    self._sums[c] = ct
                else:
                    self._context.add_inplace(self._sums[c], ct)
        except BaseException:
            self._failed = True  # some chunks hold it, others not: unusable
            raise
        self.count += 1

    def sums(self) -> list[Any]:
        """The sum per chunk (``ProtocolError`` if nothing was added; a single
        submission is returned as its own sum, checked as any sum)."""
        if self._failed:
            raise ProtocolError("an earlier submission could not be added")
        if self.count == 0:
            raise ProtocolError("no submissions")
        if self.count == 1:
            return [self._context.add_many([ct]) for ct in self._sums]
        return list(self._sums)


class AggregatorInfo:
    """What an AUC aggregator reports (read-only): its public context, the parties, the
    session and the timing of its last aggregation."""

    _context: CKKSContext
    _names: tuple[str, ...]
    _session: str
    _timing: dict[str, float]

    @property
    def context(self) -> CKKSContext:
        """The public CKKS context it computes with (no secret key)."""
        return self._context

    @property
    def names(self) -> tuple[str, ...]:
        """The parties, in key set-up order."""
        return self._names

    @property
    def session(self) -> str:
        """The key set-up session id."""
        return self._session

    @property
    def timing(self) -> dict[str, float]:
        """Seconds the last :meth:`aggregate` took, by step (``"total_s"``)."""
        return dict(self._timing)
