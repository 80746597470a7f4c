"""DPAUC baselines (Sun et al.): Laplace / Gaussian noise on local statistics, randomized response.

Roles exchange bytes, as every fedsec protocol does::

    client = DPAUCClient(y_true, y_score, epsilon=1.0, decision_points=100)
    submission: bytes = client.submit()           # noisy TP, FP, TN, FN at every point
    result = DPAUCServer().aggregate([submission, ...])
    result.auc

In :func:`dpauc` the roles first make a **session** (protocol ``"dpauc"``): every party
sends a fresh nonce (``dpauc/hello``), the aggregator adds its own and returns them all
(``dpauc/session``); each party checks that its nonce is in and binds its submission
(``dpauc/submit``) to ``SHA-256`` of the nonces, its role and the aggregator
(:mod:`fedsec.protocol.binding`). The aggregator then accepts one submission per party
that said hello, of this session only: a submission replayed from another evaluation, or
counted twice, is refused. Nothing is signed (DPAUC has no identities): the binding stops
replays of genuine bytes, not a party that lies.

Mechanisms
----------
``"laplace"`` (DPAUC_Lap, Sun et al.): every one of the ``4N`` local statistics gets
Laplace noise of scale ``1/eps'`` with ``eps = 4 N eps'``, i.e. scale ``4N/eps``. This is the
paper's accounting (sensitivity 1 per statistic, sequential composition over all of them) and
what Baykara et al. evaluate.

``"gaussian"``: the analytic Gaussian mechanism (Balle & Wang 2018) on the whole vector of
``4N`` statistics. Changing one label moves exactly two statistics by 1 at every point (TP and
FN swap with FP and TN), so the L2 sensitivity under label-DP is ``sqrt(2N)``; the guarantee is
``(eps, delta)``-label-DP per party and evaluation.

``"rr"`` (DPAUC_RR, Sun et al.): each client flips its labels once by randomized response with
flip probability ``rho = 1/(1+e**eps)`` and sends the exact statistics of the flipped labels.
The server computes the AUC of the flipped labels and debiases it (Menon et al. 2015, see
:func:`debias_rr_auc`). Optional Laplace noise on the scores (``score_epsilon``) reproduces
Sun et al. Table 3. Exact counts per point reveal each party's score histogram (Sun et al.
Sec. "Utility and Privacy Analysis"), hence a :class:`PrivacyWarning` without score noise.

The server turns the aggregated statistics into ``TPR = TP/(TP+FN)`` and
``FPR = FP/(FP+TN)`` per point (Sun et al. step 5) and applies the trapezoid rule with the same
conventions as :mod:`fedsec.metrics.roc` (origin prepended, points in decreasing order): with
zero noise the result equals :func:`fedsec.metrics.trapezoid_auc` exactly. Noisy rates are not
clipped or made monotone -- the papers report the raw estimator, which is why small test sets
give AUCs far outside ``[0, 1]``.
"""

from __future__ import annotations

import math
import re
import struct
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from fedsec._validation import check_int, check_labels_scores, check_real
from fedsec.crypto.dpnoise import (
    PrivacyAccountant,
    analytic_gaussian_sigma,
    gaussian_noise,
    laplace_noise,
    secure_bernoulli,
)
from fedsec.errors import PrivacyWarning, ProtocolError, UndefinedMetricError
from fedsec.metrics.roc import as_decision_points, confusion_counts
from fedsec.protocol import fields, wire
from fedsec.protocol.binding import (
    Binding,
    check_nonce,
    context_of,
    new_nonce,
    session_from_nonces,
)
from fedsec.protocol.network import Network
from fedsec.protocol.roles import receives

__all__ = [
    "Mechanism",
    "MECHANISMS",
    "DPAUCClient",
    "RRClient",
    "DPAUCServer",
    "DPAUCResult",
    "PartyStatistics",
    "dpauc",
    "noisy_trapezoid_auc",
    "rr_flip_probability",
    "debias_rr_auc",
    "laplace_scale",
    "gaussian_sigma",
    "local_statistics",
    "perturb_statistics",
    "parse_submission",
    "WEAK_EPSILON",
    "Submission",
    "simulate_dpauc_runs",
]

#: A DPAUC mechanism: Laplace or Gaussian noise on the counts, or randomized response.
Mechanism = Literal["laplace", "gaussian", "rr"]
#: The mechanisms :func:`dpauc` accepts.
MECHANISMS: tuple[str, ...] = ("laplace", "gaussian", "rr")
FloatArray = NDArray[np.float64]

#: Total epsilon above which a :class:`PrivacyWarning` is issued (Sun et al. uses at most 8).
WEAK_EPSILON = 10.0

_MAGIC = b"FDPA"
_VERSION = 1
_KINDS: dict[str, int] = {"laplace": 1, "gaussian": 2, "rr": 3}
_KIND_NAMES = {v: k for k, v in _KINDS.items()}
_HEADER = struct.Struct(">4sBBIdd")  # magic, version, kind, N, epsilon, delta
_MAX_POINTS = 1 << 16
#: The binding protocol name; the aggregator's role name.
PROTOCOL = "dpauc"
AGGREGATOR = "aggregator"
#: Most parties one DPAUC session admits.
_MAX_PARTIES = 1 << 16
_ROLE_RE = r"party:[A-Za-z0-9_.@+-]{1,64}"
#: Largest statistic accepted (a count plus noise): far below it, the sums and rates of any
#: number of parties stay finite.
_MAX_ABS_STATISTIC = 1e150


def _check_mechanism(mechanism: Any, owner: str) -> str:
    if mechanism not in MECHANISMS:
        raise ValueError(
            f"The 'mechanism' parameter of {owner} must be one of {list(MECHANISMS)}. "
            f"Got {mechanism!r} instead."
        )
    return str(mechanism)


def _check_epsilon(epsilon: Any, owner: str, name: str = "epsilon") -> float:
    eps = check_real(epsilon, name, owner, gt=0.0)
    if eps > WEAK_EPSILON:
        warnings.warn(
            f"{name}={eps} is a weak privacy guarantee (> {WEAK_EPSILON}).",
            PrivacyWarning,
            stacklevel=3,
        )
    return eps


def laplace_scale(*, epsilon: float, n_points: int) -> float:
    """Laplace scale of DPAUC_Lap: ``1/eps'`` with ``eps' = eps / (4 N)`` (Sun et al.)."""
    eps = check_real(epsilon, "epsilon", "laplace_scale", gt=0.0)
    n = check_int(n_points, "n_points", "laplace_scale", min_value=1)
    return 4.0 * n / eps


def gaussian_sigma(*, epsilon: float, delta: float, n_points: int) -> float:
    """Per-statistic sigma of the Gaussian variant: analytic Gaussian, L2 sensitivity sqrt(2N)."""
    n = check_int(n_points, "n_points", "gaussian_sigma", min_value=1)
    return analytic_gaussian_sigma(epsilon=epsilon, delta=delta, sensitivity=math.sqrt(2.0 * n))


def rr_flip_probability(epsilon: float) -> float:
    """Randomized-response flip probability ``1 / (1 + e**eps)``."""
    eps = check_real(epsilon, "epsilon", "rr_flip_probability", gt=0.0)
    return 1.0 / (1.0 + math.exp(min(eps, 700.0)))


@dataclass(frozen=True)
class PartyStatistics:
    """One party's ``TP, FP, TN, FN`` at every decision point (exact or noisy)."""

    points: FloatArray
    tp: FloatArray
    fp: FloatArray
    tn: FloatArray
    fn: FloatArray

    def stacked(self) -> FloatArray:
        """Array of shape (4, N): rows TP, FP, TN, FN."""
        return np.vstack([self.tp, self.fp, self.tn, self.fn])


def local_statistics(y_true: Any, y_score: Any, decision_points: Any = 100) -> PartyStatistics:
    """Exact ``TP, FP, TN, FN`` of one party (Sun et al. step 2)."""
    points = as_decision_points(decision_points)
    y, s = check_labels_scores(y_true, y_score, "local_statistics")
    tp, fp = confusion_counts(y, s, points)
    n_pos = int(y.sum())
    n_neg = int(y.size - n_pos)
    return PartyStatistics(
        points=points,
        tp=tp.astype(np.float64),
        fp=fp.astype(np.float64),
        tn=(n_neg - fp).astype(np.float64),
        fn=(n_pos - tp).astype(np.float64),
    )


def perturb_statistics(
    stats: FloatArray, *, mechanism: str, epsilon: float, delta: float = 0.0
) -> FloatArray:
    """Add DPAUC noise to an array of statistics whose last axis has length ``N``.

    ``stats`` has shape ``(..., 4, N)`` (any leading axes: runs, parties); noise is drawn
    independently for every entry from :mod:`fedsec.crypto.dpnoise`.
    """
    arr = np.asarray(stats, dtype=np.float64)
    n_points = arr.shape[-1]
    if mechanism == "laplace":
        noise = laplace_noise(arr.size, scale=laplace_scale(epsilon=epsilon, n_points=n_points))
    elif mechanism == "gaussian":
        sigma = gaussian_sigma(epsilon=epsilon, delta=delta, n_points=n_points)
        noise = gaussian_noise(arr.size, sigma=sigma)
    else:
        raise ValueError(f"perturb_statistics: no additive noise for mechanism {mechanism!r}")
    return arr + noise.reshape(arr.shape)


def noisy_trapezoid_auc(tp: Any, fp: Any, tn: Any, fn: Any) -> float:
    """Trapezoid AUC from (possibly noisy, real-valued) aggregated statistics.

    ``TPR = TP/(TP+FN)`` and ``FPR = FP/(FP+TN)`` at every point (Sun et al. step 5), then
    ``sum_n (FPR[n] - FPR[n-1]) (TPR[n] + TPR[n-1]) / 2`` with ``TPR[-1] = FPR[-1] = 0``,
    the conventions of :func:`fedsec.metrics.trapezoid_auc_from_counts`.

    Raises
    ------
    UndefinedMetricError
        If a denominator ``TP+FN`` or ``FP+TN`` is exactly zero at some point, or so
        close to zero that a rate or the AUC overflows (never ``inf`` or ``nan``).
    """
    arrs = [np.asarray(a, dtype=np.float64) for a in (tp, fp, tn, fn)]
    if any(a.ndim != 1 or a.shape != arrs[0].shape for a in arrs) or arrs[0].size == 0:
        raise ValueError("tp, fp, tn and fn must be non-empty 1-D arrays of the same length.")
    tp_a, fp_a, tn_a, fn_a = arrs
    pos = tp_a + fn_a
    neg = fp_a + tn_a
    if np.any(pos == 0) or np.any(neg == 0):
        raise UndefinedMetricError(
            "AUC is undefined: TP+FN or FP+TN is zero at some decision point "
            "(one class is absent)."
        )
    with np.errstate(over="ignore", invalid="ignore"):
        tpr = np.concatenate(([0.0], tp_a / pos))
        fpr = np.concatenate(([0.0], fp_a / neg))
        auc = float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1])) / 2.0)
    if not math.isfinite(auc):
        raise UndefinedMetricError(
            "AUC is undefined: a rate TP/(TP+FN) or FP/(FP+TN) overflows (a denominator is "
            "nearly zero at some decision point)."
        )
    return auc


def _noisy_auc_batch(tp: FloatArray, fp: FloatArray, tn: FloatArray, fn: FloatArray) -> FloatArray:
    """Vectorised :func:`noisy_trapezoid_auc` over leading axes (used by simulations)."""
    tpr = tp / (tp + fn)
    fpr = fp / (fp + tn)
    zeros = np.zeros(tpr.shape[:-1] + (1,))
    tpr = np.concatenate([zeros, tpr], axis=-1)
    fpr = np.concatenate([zeros, fpr], axis=-1)
    out: FloatArray = np.sum(np.diff(fpr, axis=-1) * (tpr[..., 1:] + tpr[..., :-1]), axis=-1) / 2
    return out


def debias_rr_auc(noisy_auc: float, *, noisy_prior: float, epsilon: float) -> float:
    """Debias an AUC computed on randomized-response labels (Menon et al. 2015).

    With symmetric flip rate ``rho = 1/(1+e**eps)`` and true prior ``pi`` (estimated from the
    flipped prior as ``pi = (pi_noisy - rho) / (1 - 2 rho)``), the flipped positives are a
    mixture ``(1-a) P + a N`` and the flipped negatives ``b P + (1-b) N`` with
    ``a = (1-pi) rho / pi_noisy`` and ``b = pi rho / (1 - pi_noisy)``. Because the
    (tie-corrected) AUC is bilinear in the two class distributions,
    ``AUC_noisy = (1-a-b) AUC + (a+b)/2``, hence ``AUC = (AUC_noisy - (a+b)/2) / (1-a-b)``.
    This holds for the binned trapezoid AUC as well as the exact one.

    Parameters
    ----------
    noisy_auc : float
        AUC of the flipped labels.
    noisy_prior : float
        Fraction of flipped labels equal to 1, in ``[0, 1]``.
    epsilon : float
        The randomized-response epsilon.

    Raises
    ------
    ValueError
        If ``noisy_prior`` lies outside ``[0, 1]`` or an argument is not finite.
    UndefinedMetricError
        If the debiased AUC is undefined: the flipped prior is ``0`` or ``1`` (one flipped
        class is empty), the estimated true prior is ``<= 0`` or ``>= 1`` (the flipped labels
        are consistent with one true class only), ``epsilon`` is so small that ``1 - 2 rho``
        rounds to zero, the gain ``1 - a - b`` is not positive, or the estimate overflows.
        Never a number: each of these would make it infinite or meaningless.
    """
    owner = "debias_rr_auc"
    auc_n = check_real(noisy_auc, "noisy_auc", owner)
    pi_n = check_real(noisy_prior, "noisy_prior", owner, ge=0.0, le=1.0)
    rho = rr_flip_probability(epsilon)
    if pi_n <= 0.0 or pi_n >= 1.0:
        raise UndefinedMetricError(
            "AUC is undefined: every flipped label is "
            f"{'negative' if pi_n <= 0.0 else 'positive'} (flipped prior {pi_n:g})."
        )
    spread = 1.0 - 2.0 * rho
    if spread <= 0.0:  # epsilon so small that every label is a coin flip
        raise UndefinedMetricError("AUC cannot be debiased: the flipped labels carry no "
                                   f"information about the true ones (epsilon {epsilon:g}).")
    pi = (pi_n - rho) / spread
    if not 0.0 < pi < 1.0:
        raise UndefinedMetricError(
            f"AUC is undefined: the estimated true prior is {pi:.3g}, outside (0, 1) (flipped "
            f"prior {pi_n:.3g}, flip probability {rho:.3g}): the flipped labels are "
            "consistent with one true class only."
        )
    a = (1.0 - pi) * rho / pi_n
    b = pi * rho / (1.0 - pi_n)
    gain = 1.0 - a - b
    if not gain > 0.0:
        raise UndefinedMetricError(
            "AUC cannot be debiased: the flipped labels carry no information about the true "
            f"ones (estimated prior {pi:.3g}, flip probability {rho:.3g})."
        )
    auc = (auc_n - (a + b) / 2.0) / gain
    if not math.isfinite(auc):
        raise UndefinedMetricError(
            f"AUC cannot be debiased: the estimate overflows (gain {gain:.3g})."
        )
    return auc


# ----------------------------------------------------------------------------- messages


def _encode(kind: str, epsilon: float, delta: float, stats: PartyStatistics) -> bytes:
    n = stats.points.size
    header = _HEADER.pack(_MAGIC, _VERSION, _KINDS[kind], n, epsilon, delta)
    body = np.concatenate([stats.points, stats.stacked().ravel()]).astype(">f8").tobytes()
    return header + body


@dataclass(frozen=True)
class Submission:
    """A parsed client submission: what the aggregator sees."""

    mechanism: str
    epsilon: float
    delta: float
    stats: PartyStatistics


def parse_submission(data: bytes) -> Submission:
    """Parse one client message defensively.

    Raises
    ------
    ProtocolError
        On a foreign, truncated, oversized or inconsistent message.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ProtocolError(f"DPAUC submission must be bytes, got {type(data).__name__}")
    buf = bytes(data)
    if len(buf) < _HEADER.size:
        raise ProtocolError(f"DPAUC submission truncated: {len(buf)} bytes < header")
    magic, version, kind, n, eps, dlt = _HEADER.unpack_from(buf)
    if magic != _MAGIC:
        raise ProtocolError("not a DPAUC submission (bad magic)")
    if version != _VERSION:
        raise ProtocolError(f"unsupported DPAUC message version {version}")
    if kind not in _KIND_NAMES:
        raise ProtocolError(f"unknown DPAUC mechanism code {kind}")
    if not 2 <= n <= _MAX_POINTS:
        raise ProtocolError(f"DPAUC submission has an invalid number of points: {n}")
    expected = _HEADER.size + 8 * 5 * n
    if len(buf) != expected:
        raise ProtocolError(
            f"DPAUC submission has {len(buf)} bytes, expected {expected} for {n} points"
        )
    if not (math.isfinite(eps) and eps > 0) or not (math.isfinite(dlt) and 0 <= dlt < 1):
        raise ProtocolError("DPAUC submission carries invalid privacy parameters")
    body = np.frombuffer(buf, dtype=">f8", offset=_HEADER.size).astype(np.float64)
    if not np.all(np.isfinite(body)):
        raise ProtocolError("DPAUC submission contains non-finite values")
    if np.any(np.abs(body) > _MAX_ABS_STATISTIC):
        raise ProtocolError("DPAUC submission contains values too large to aggregate")
    points = body[:n]
    rows = body[n:].reshape(4, n)
    if _KIND_NAMES[kind] == "rr":
        if np.any(rows < 0):
            raise ProtocolError("DPAUC_RR submission contains negative counts")
        # exact counts of one set of labels: the class totals are the same at every point
        # (else the flipped prior, taken at the first point, would be arbitrary)
        pos, neg = rows[0] + rows[3], rows[1] + rows[2]
        if np.any(pos != pos[0]) or np.any(neg != neg[0]):
            raise ProtocolError("DPAUC_RR submission's class totals (TP+FN, FP+TN) differ "
                                "between decision points")
    if np.any(np.diff(points) >= 0) or points[0] > 1 or points[-1] < 0:
        raise ProtocolError("DPAUC submission has invalid decision points")
    stats = PartyStatistics(points, rows[0].copy(), rows[1].copy(), rows[2].copy(),
                            rows[3].copy())
    return Submission(_KIND_NAMES[kind], float(eps), float(dlt), stats)


# ----------------------------------------------------------------------------- roles
class _Party:
    """A DPAUC party's side of the session (nonces, binding); its data in subclasses.

    Used alone (no :meth:`hello`), :meth:`submit` returns the bare statistics message
    (:func:`parse_submission`); after :meth:`hello` and :meth:`join` it returns a
    ``dpauc/submit`` message bound to the session, for the aggregator's role only (a
    replay into another evaluation or a message from another party is refused).
    """

    _nonce: bytes | None = None
    _role: str = ""
    _binding: Binding | None = None

    def hello(self, role: str) -> bytes:
        """This party's fresh nonce for the session, under its role name
        (``"party:<name>"``)."""
        if not isinstance(role, str) or not re.fullmatch(_ROLE_RE, role):
            raise ValueError(f"not a party role name: {role!r}")
        self._nonce, self._role, self._binding = new_nonce(), role, None
        return wire.encode("dpauc/hello", {"role": role}, [self._nonce])

    @receives("dpauc/session")
    def join(self, session: bytes) -> None:
        """Check that the session carries this party's nonce and bind to it."""
        if self._nonce is None:
            raise ProtocolError("join() before hello()")
        msg = wire.decode(session, expect="dpauc/session", max_bytes=1 << 22)
        nonces = fields.blobs(msg.blobs, least=2, most=_MAX_PARTIES + 1)
        if any(len(n) != 16 for n in nonces) or len(set(nonces)) != len(nonces):
            raise ProtocolError("malformed message: field 'nonces'")
        check_nonce(self._nonce, nonces)
        self._binding = Binding(session_from_nonces(PROTOCOL, nonces), PROTOCOL, self._role)

    def _message(self, body: bytes) -> bytes:
        if self._binding is None:
            return body
        meta = self._binding.bind({}, step="submit", to=AGGREGATOR)
        return wire.encode("dpauc/submit", meta, [body])




class DPAUCClient(_Party):
    """A party of DPAUC_Lap (or its Gaussian variant).

    Every :meth:`submit` draws fresh noise and spends ``epsilon`` (and ``delta``) of the
    party's budget, recorded in ``accountant``.

    Parameters
    ----------
    y_true, y_score : array-like of shape (n,)
        The party's private labels (0/1) and scores in ``[0, 1]``.
    epsilon : float
        Total privacy budget of one evaluation, keyword-only (``> 0``).
    decision_points : int or array-like, default=100
        ``N`` uniform points or custom thresholds (:func:`fedsec.metrics.as_decision_points`).
    mechanism : {"laplace", "gaussian"}, default="laplace"
    delta : float, optional
        Required for ``"gaussian"``, in ``(0, 1)``.
    accountant : PrivacyAccountant, optional
        Charged on every submission; a new unlimited one is created if omitted.
    """

    def __init__(
        self, y_true: Any, y_score: Any, *, epsilon: float, decision_points: Any = 100,
        mechanism: str = "laplace", delta: float | None = None,
        accountant: PrivacyAccountant | None = None,
    ) -> None:
        owner = "DPAUCClient"
        mech = _check_mechanism(mechanism, owner)
        if mech == "rr":
            raise ValueError("Use RRClient for mechanism='rr'.")
        self._epsilon = _check_epsilon(epsilon, owner)
        if mech == "gaussian":
            if delta is None:
                raise ValueError(f"The 'delta' parameter of {owner} is required for the "
                                 "Gaussian mechanism.")
            self._delta = check_real(delta, "delta", owner, gt=0.0, lt=1.0)
        else:
            if delta not in (None, 0, 0.0):
                raise ValueError(f"The 'delta' parameter of {owner} must be None for the "
                                 f"Laplace mechanism. Got {delta!r} instead.")
            self._delta = 0.0
        self._mechanism = mech
        self._accountant = accountant if accountant is not None else PrivacyAccountant()
        self._stats = local_statistics(y_true, y_score, decision_points)

    @property
    def epsilon(self) -> float:
        """The privacy budget one :meth:`submit` spends."""
        return self._epsilon

    @property
    def delta(self) -> float:
        """The ``delta`` one :meth:`submit` spends (``0.0`` for Laplace)."""
        return self._delta

    @property
    def mechanism(self) -> str:
        """``"laplace"`` or ``"gaussian"``."""
        return self._mechanism

    @property
    def accountant(self) -> PrivacyAccountant:
        """The accountant every :meth:`submit` charges."""
        return self._accountant

    def submit(self) -> bytes:
        """Noisy ``TP, FP, TN, FN`` at every point, serialized (Sun et al. step 3)."""
        self._accountant.spend(self._epsilon, self._delta, label=f"dpauc-{self._mechanism}")
        noisy = perturb_statistics(self._stats.stacked(), mechanism=self._mechanism,
                                   epsilon=self._epsilon, delta=self._delta)
        s = PartyStatistics(self._stats.points, *noisy)
        return self._message(_encode(self._mechanism, self._epsilon, self._delta, s))


class RRClient(_Party):
    """A party of DPAUC_RR: labels flipped once by randomized response at construction.

    The flipped labels are reused by every :meth:`submit` (post-processing: no further
    privacy cost), as Sun et al. prescribes. ``epsilon`` is charged once, at construction, plus
    ``score_epsilon`` when scores are perturbed.

    Parameters
    ----------
    y_true, y_score : array-like of shape (n,)
    epsilon : float
        Randomized-response epsilon (label-DP), keyword-only.
    decision_points : int or array-like, default=200
        Sun et al. Table 1 uses 200.
    score_epsilon : float, optional
        If given, each score gets ``Laplace(1/score_epsilon)`` noise (sensitivity 1) and is
        clipped to ``[0, 1]`` (Sun et al. Table 3). Without it the statistics expose the
        party's score histogram and a :class:`PrivacyWarning` is issued.
    accountant : PrivacyAccountant, optional
    """

    def __init__(
        self, y_true: Any, y_score: Any, *, epsilon: float, decision_points: Any = 200,
        score_epsilon: float | None = None, accountant: PrivacyAccountant | None = None,
    ) -> None:
        owner = "RRClient"
        self._epsilon = _check_epsilon(epsilon, owner)
        y, s = check_labels_scores(y_true, y_score, owner)
        points = as_decision_points(decision_points)
        self._accountant = accountant if accountant is not None else PrivacyAccountant()
        self._accountant.spend(self._epsilon, label="rr-labels")
        if score_epsilon is None:
            warnings.warn(
                "DPAUC_RR without score noise sends exact counts per decision point, which "
                "reveal the party's score histogram; pass score_epsilon to perturb scores.",
                PrivacyWarning, stacklevel=2,
            )
        else:
            se = _check_epsilon(score_epsilon, owner, "score_epsilon")
            self._accountant.spend(se, label="rr-scores")
            s = np.clip(s + laplace_noise(s.size, scale=1.0 / se), 0.0, 1.0)
        flip = secure_bernoulli(y.size, p=rr_flip_probability(self._epsilon))
        self._flipped_labels: NDArray[np.int64] = np.where(flip, 1 - y, y).astype(np.int64)
        self._stats = local_statistics(self._flipped_labels, s, points)

    @property
    def epsilon(self) -> float:
        """The randomized-response epsilon (charged once, at construction)."""
        return self._epsilon

    @property
    def accountant(self) -> PrivacyAccountant:
        """The accountant charged at construction."""
        return self._accountant

    def submit(self) -> bytes:
        """Exact statistics of the flipped labels, serialized."""
        return self._message(_encode("rr", self._epsilon, 0.0, self._stats))


@dataclass(frozen=True)
class DPAUCResult:
    """What the DPAUC server learns and reports.

    Attributes
    ----------
    auc : float
        The estimate (debiased for ``"rr"``); may lie outside ``[0, 1]`` under heavy noise.
    mechanism, epsilon, delta : the parameters the parties used.
    n_parties : int
    points : ndarray
        Decision points.
    tpr, fpr : ndarray
        The (noisy) ROC points the server computed.
    noisy_auc : float
        For ``"rr"``: the AUC of the flipped labels before debiasing; else the raw estimate.
    raw_auc : float
        The estimate before clipping (equal to ``auc`` unless ``clip`` changed it).
    clipped : bool
        Whether ``auc`` was clipped into ``[0, 1]`` (``clip=True`` and the raw estimate fell
        outside).
    """

    auc: float
    mechanism: str
    epsilon: float
    delta: float
    n_parties: int
    points: FloatArray
    tpr: FloatArray
    fpr: FloatArray
    noisy_auc: float
    raw_auc: float = math.nan
    clipped: bool = False


class DPAUCServer:
    """The DPAUC aggregator (Sun et al. steps 4-6, plus RR debiasing).

    Used alone, :meth:`aggregate` takes the parties' bare statistics messages. After
    :meth:`open_session` it takes only ``dpauc/submit`` messages bound to that session,
    one from each party that said hello.
    """

    def __init__(self) -> None:
        self._binding: Binding | None = None
        self._roles: tuple[str, ...] = ()

    @receives("dpauc/hello")
    def open_session(self, hellos: Sequence[bytes]) -> bytes:
        """Every party's nonce and this aggregator's: the session every submission is
        bound to (``SHA-256`` of the sorted nonces). Returns the message for every party."""
        if not 1 <= len(hellos) <= _MAX_PARTIES:
            raise ProtocolError("a DPAUC session needs 1 to 65536 parties")
        roles: list[str] = []
        nonces = [new_nonce()]
        for raw in hellos:
            msg = wire.decode(raw, expect="dpauc/hello", max_bytes=1 << 10)
            role = fields.text(msg.meta, "role", pattern=_ROLE_RE)
            (nonce,) = fields.blobs(msg.blobs, 1)
            if len(nonce) != 16 or nonce in nonces or role in roles:
                raise ProtocolError(f"a repeated or malformed hello ({role!r})")
            roles.append(role)
            nonces.append(nonce)
        self._roles = tuple(roles)
        self._binding = Binding(session_from_nonces(PROTOCOL, nonces), PROTOCOL, AGGREGATOR)
        return wire.encode("dpauc/session", {}, nonces)

    def _unwrap(self, submissions: Sequence[bytes]) -> list[bytes]:
        """The statistics messages inside bound submissions (one per party)."""
        if self._binding is None:
            return list(submissions)
        out: list[bytes] = []
        seen: set[str] = set()
        for raw in submissions:
            msg = wire.decode(raw, expect="dpauc/submit", max_bytes=1 << 24)
            sender = context_of(msg.meta).sender
            if sender not in self._roles or sender in seen:
                raise ProtocolError(f"a submission from an unexpected or repeated party "
                                    f"({sender[:64]!r})")
            self._binding.check(msg.meta, step="submit", sender=sender, what="submission")
            seen.add(sender)
            (body,) = fields.blobs(msg.blobs, 1)
            out.append(body)
        return out

    @receives("dpauc/submit")
    def aggregate(self, submissions: Sequence[bytes], *, clip: bool = False) -> DPAUCResult:
        """Sum the parties' statistics and compute the (debiased) trapezoid AUC.

        With ``clip=True`` an estimate outside ``[0, 1]`` is clipped into it: post-processing,
        so it costs no privacy, but it biases the estimator (the papers report it unclipped).

        Raises
        ------
        ProtocolError
            If a message is malformed or the parties disagree on mechanism, epsilon or points.
        UndefinedMetricError
            If a class is absent; for ``"rr"``, also if the flipped prior rounds to 0 or 1
            or the debiased estimate is undefined (:func:`debias_rr_auc`).
        """
        if len(submissions) == 0:
            raise ProtocolError("DPAUCServer.aggregate needs at least one submission")
        parsed = [parse_submission(b) for b in self._unwrap(submissions)]
        first = parsed[0]
        for i, p in enumerate(parsed[1:], start=2):
            if (p.mechanism, p.epsilon, p.delta) != (first.mechanism, first.epsilon, first.delta):
                raise ProtocolError(f"submission {i} uses different privacy parameters")
            if not np.array_equal(p.stats.points, first.stats.points):
                raise ProtocolError(f"submission {i} uses different decision points")
        total = np.sum([p.stats.stacked() for p in parsed], axis=0)
        tp, fp, tn, fn = total
        noisy = noisy_trapezoid_auc(tp, fp, tn, fn)
        auc = noisy
        if first.mechanism == "rr":
            auc = debias_rr_auc(noisy, noisy_prior=_rr_prior(tp, fp, tn, fn),
                                epsilon=first.epsilon)
        raw = auc
        if clip:
            auc = min(1.0, max(0.0, auc))
        return DPAUCResult(
            auc=auc, mechanism=first.mechanism, epsilon=first.epsilon, delta=first.delta,
            n_parties=len(parsed), points=first.stats.points.copy(),
            tpr=tp / (tp + fn), fpr=fp / (fp + tn), noisy_auc=noisy, raw_auc=raw,
            clipped=auc != raw,
        )


def _rr_prior(tp: FloatArray, fp: FloatArray, tn: FloatArray, fn: FloatArray) -> float:
    """The flipped prior ``pos / (pos + neg)`` of aggregated DPAUC_RR counts.

    Counts of flipped labels have the same ``pos = TP+FN`` and ``neg = FP+TN`` at every
    point; the prior is taken at the first. Both are positive here
    (:func:`noisy_trapezoid_auc` has refused a zero), but the ratio can still round to
    exactly 0 or 1 (a denormal count, or counts ``2**53`` apart): :func:`debias_rr_auc` then
    raises :class:`UndefinedMetricError`.
    """
    pos = float(tp[0] + fn[0])
    neg = float(fp[0] + tn[0])
    total = pos + neg
    if not (pos > 0.0 and neg > 0.0 and math.isfinite(total)):
        raise UndefinedMetricError(
            "AUC is undefined: the flipped labels of one class are absent or their count "
            "is not finite."
        )
    return pos / total


def dpauc(
    parties: Sequence[tuple[Any, Any]], *, epsilon: float, decision_points: Any = 100,
    mechanism: str = "laplace", delta: float | None = None,
    score_epsilon: float | None = None, clip: bool = False, network: Network | None = None,
) -> DPAUCResult:
    """Run one DPAUC evaluation over in-process parties (one call, roles and bytes inside).

    The parties (``"party:party-<i>"``) and the aggregator (``"aggregator"``) exchange
    nothing but bytes, through ``network`` (default: a fresh
    :class:`~fedsec.protocol.network.Network`; pass one to count or intercept them).

    The noise (Laplace, Gaussian, label flips, score noise) always comes from the operating
    system's cryptographic generator (:mod:`fedsec.crypto.dpnoise`); it cannot be seeded, so
    two calls give different estimates by design.

    Parameters
    ----------
    parties : sequence of (y_true, y_score)
    epsilon : float
        Per-party privacy budget of this evaluation (keyword-only). Parties hold disjoint data,
        so by parallel composition the federation spends ``epsilon`` as well.
    decision_points : int or array-like, default=100
    mechanism : {"laplace", "gaussian", "rr"}, default="laplace"
    delta : float, optional
        For ``"gaussian"``.
    score_epsilon : float, optional
        For ``"rr"``: Laplace noise on scores (see :class:`RRClient`).
    clip : bool, default=False
        Clip the estimate into ``[0, 1]`` (post-processing, no privacy cost). Under heavy
        noise the raw estimate can lie far outside; ``result.raw_auc`` keeps it.
    network : Network, optional
        The network the submissions cross (tests and benchmarks observe or intercept it).

    Returns
    -------
    DPAUCResult

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 2, 20000); s = np.clip(0.3 * y + rng.random(20000) * 0.7, 0, 1)
    >>> r = dpauc([(y[:10000], s[:10000]), (y[10000:], s[10000:])], epsilon=8.0)
    >>> abs(r.auc - 0.8) < 0.1
    True
    """
    owner = "dpauc"
    mech = _check_mechanism(mechanism, owner)
    check_real(epsilon, "epsilon", owner, gt=0.0)
    if mech == "gaussian":
        if delta is None:
            raise ValueError("The 'delta' parameter of dpauc is required for "
                             "mechanism='gaussian'.")
        check_real(delta, "delta", owner, gt=0.0, lt=1.0)
    elif delta not in (None, 0, 0.0):
        raise ValueError(f"The 'delta' parameter of dpauc applies only to "
                         f"mechanism='gaussian'. Got {delta!r} instead.")
    if score_epsilon is not None:
        if mech != "rr":
            raise ValueError("The 'score_epsilon' parameter of dpauc applies only to "
                             "mechanism='rr'.")
        check_real(score_epsilon, "score_epsilon", owner, gt=0.0)
    if not isinstance(clip, bool):
        raise TypeError(f"The 'clip' parameter of dpauc must be a bool. Got {clip!r} instead.")
    if isinstance(parties, (str, bytes)) or not isinstance(parties, Sequence):
        raise TypeError("The 'parties' parameter of dpauc must be a sequence of (y_true, "
                        f"y_score) pairs. Got {type(parties).__name__} instead.")
    if len(parties) == 0:
        raise ValueError("The 'parties' parameter of dpauc must not be empty.")
    checked = []
    for i, pair in enumerate(parties):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"The 'parties' parameter of dpauc must hold (y_true, y_score) "
                            f"pairs. Got {type(pair).__name__} for party {i + 1} instead.")
        checked.append(check_labels_scores(pair[0], pair[1], f"dpauc (party {i + 1})"))
    as_decision_points(decision_points)
    net = network if network is not None else Network()
    roles: list[DPAUCClient | RRClient] = []
    for y, s in checked:
        if mech == "rr":
            c: DPAUCClient | RRClient = RRClient(
                y, s, epsilon=epsilon, decision_points=decision_points,
                score_epsilon=score_epsilon)
        else:
            if score_epsilon is not None:
                raise ValueError("score_epsilon applies only to mechanism='rr'.")
            c = DPAUCClient(y, s, epsilon=epsilon, decision_points=decision_points,
                            mechanism=mech, delta=delta)
        roles.append(c)
    names = [f"party:party-{i}" for i in range(len(roles))]
    server = DPAUCServer()
    # a fresh session from everyone's nonce: every submission is bound to it
    hellos = net.gather(names, AGGREGATOR, [c.hello(n) for c, n in zip(roles, names,
                                                                         strict=True)])
    session = net.broadcast(AGGREGATOR, names, server.open_session(hellos))
    for c, msg in zip(roles, session, strict=True):
        c.join(msg)
    # Sun et al. step 3: every party sends its (noisy) statistics; steps 4-6: the aggregator
    subs = net.gather(names, AGGREGATOR, [c.submit() for c in roles])
    return server.aggregate(subs, clip=clip)


def simulate_dpauc_runs(
    party_stats: Sequence[PartyStatistics], *, epsilon: float, runs: int,
    mechanism: str = "laplace", delta: float = 0.0, chunk: int = 4_000_000,
) -> FloatArray:
    """AUC of ``runs`` independent DPAUC evaluations, vectorised (benchmarks only).

    Draws exactly the noise the clients would (same sampler, same scale, one independent draw
    per party, statistic and point) and applies the same estimator, without building messages.
    Used by the reproduction, where the number of evaluations (up to 100 runs x 1,000 parties)
    makes one message per party and run needlessly slow.
    """
    r = check_int(runs, "runs", "simulate_dpauc_runs", min_value=1)
    exact = np.stack([p.stacked() for p in party_stats])  # (K, 4, N)
    per_run = exact.size
    batch = max(1, min(r, chunk // max(per_run, 1)))
    out: list[FloatArray] = []
    done = 0
    while done < r:
        m = min(batch, r - done)
        noisy = perturb_statistics(np.broadcast_to(exact, (m,) + exact.shape),
                                   mechanism=mechanism, epsilon=epsilon, delta=delta)
        agg = noisy.sum(axis=1)  # (m, 4, N)
        out.append(_noisy_auc_batch(agg[:, 0], agg[:, 1], agg[:, 2], agg[:, 3]))
        done += m
    return np.concatenate(out)

