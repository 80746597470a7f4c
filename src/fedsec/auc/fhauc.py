"""FHAUC against a semi-honest aggregator (Baykara et al., Sec. IV-C; the conference
version's masking variant).

Roles: :class:`FHAUCParty` (``"party:<name>"``) sends one ``fhauc/submit``;
:class:`FHAUCAggregator` (``"aggregator"``) answers every party alike with one
``fhauc/result`` (recipient ``"*"``). Every message carries its binding context
(:mod:`fedsec.protocol.binding`, protocol ``"fhauc"``, bound to the key set-up session and
the configuration digest by :func:`fedsec.auc.common.evaluation_binding`).
:func:`secure_auc` is the loop over a :class:`~fedsec.protocol.network.Network` that
carries the messages and counts their bytes.

Each party sends **one** CKKS ciphertext per ``slots/4`` decision points: point ``n``
holds ``T[n] + i*F[n]`` (the trapezoid terms, :func:`fedsec.metrics.trapezoid_terms`),
``dTP[n] + i*F[n]`` (for the certified error bound) and the party's ``Pos +- 2i*Neg``. The
aggregator adds, squares, sums each slot class and masks (:meth:`FHAUCAggregator.mask`,
:mod:`fedsec.auc.masking`); parties decrypt the AUC and its certified bound, having added
noise to their counts (:meth:`FHAUCParty.submit`) that hides the mask's grid.

The threat model, the packing and its key switches, the certified error bound, the masks
and the counts' noise, and what a party learns: ``docs/protocols/secure-auc.md`` (the
documentation site's secure AUC page).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from fedsec._validation import check_int
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
    finish_auc,
    finish_error_bound,
    local_federation,
    party_index,
    party_role,
    prepare_federation,
    wants_exact,
)
from fedsec.auc.exact_params import DEFAULT_MAX_ROUNDS
from fedsec.auc.masking import (
    NUMERATOR_NOISE_FACTOR,
    Masks,
    add_result_noise,
    bound_offset,
    bound_overstatement,
    check_masking_capacity,
    count_noise,
    finish_masked,
    masked_product,
)
from fedsec.auc.policy import (
    DEFAULT_MAX_DECISION_POINTS,
    DEFAULT_MIN_DECISION_POINTS,
    IN_PROCESS_MAX_KEY_BYTES,
    PartyPolicy,
)
from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.identity import Roster
from fedsec.crypto.keysetup import KeySpec, PartyKeys, run_key_setup
from fedsec.crypto.params import DEFAULT_PRESET, default_preset, get_preset
from fedsec.errors import ProtocolError
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
    "FHAUCConfig",
    "FHAUCParty",
    "FHAUCAggregator",
    "SecureAUCResult",
    "finish_auc",
    "secure_auc",
]

Masking = Literal["single", "pair"]

#: Slots per decision point: class 0 holds ``T + iF``, class 1 ``dTP + iF`` (the bound's
#: terms); slots 2 and 3 of the first ciphertext hold the party's ``Pos +- 2i*Neg``.
POINT_STRIDE = 4
#: Most ciphertexts per party (exact mode's dense grids).
MAX_CHUNKS = 64



@dataclass(frozen=True)
class FHAUCConfig(BoundConfig):
    """Public parameters every role must agree on.

    Parameters
    ----------
    decision_points : tuple of float
        Decreasing thresholds (see :func:`fedsec.metrics.as_decision_points`).
    preset : str
        CKKS preset; ``CKKS_128_N8192_DEPTH2_S49`` (default) fits up to 4096 points.
    masking : {"single", "pair"}
        ``"single"``: parties receive ``c*num, c*denom`` (Baykara et al.). ``"pair"``: they
        receive ``num*d + denom*c, denom*d`` and ``c/d`` (Baykara et al. (FHAUC)).
    max_total_samples : int
        Upper bound on the federation's total test samples; it sizes the CKKS dynamic
        range (default 2**20 for the default preset).
    allow_insecure : bool
        Accept ``INSECURE_TEST_*`` presets (tests only).
    """

    decision_points: tuple[float, ...]
    preset: str = DEFAULT_PRESET
    masking: Masking = "single"
    max_total_samples: int = DEFAULT_MAX_TOTAL_SAMPLES
    allow_insecure: bool = False

    @classmethod
    def create(cls, decision_points: Any = 100, *, preset: str = DEFAULT_PRESET,
               masking: str = "single", max_total_samples: int = DEFAULT_MAX_TOTAL_SAMPLES,
               allow_insecure: bool = False) -> FHAUCConfig:
        """Validate and build a configuration."""
        points = as_decision_points(decision_points, max_points=MAX_DECISION_POINTS)
        params = get_preset(preset, allow_insecure=allow_insecure)
        cap = MAX_CHUNKS * (params.slots // POINT_STRIDE)
        if points.size > cap:
            raise ValueError(f"{points.size} decision points exceed the {params.slots} slots "
                             f"of {preset} times {MAX_CHUNKS} ciphertexts; use at most "
                             f"{cap} points (or a preset with more slots)")
        if masking not in ("single", "pair"):
            raise ValueError(f"The 'masking' parameter must be 'single' or 'pair'. "
                             f"Got {masking!r} instead.")
        check_int(max_total_samples, "max_total_samples", "FHAUCConfig", min_value=1,
                  max_value=DEFAULT_MAX_TOTAL_SAMPLES)
        check_masking_capacity(params, int(max_total_samples))
        return cls(tuple(float(x) for x in points), preset, masking,  # type: ignore[arg-type]
                   int(max_total_samples), allow_insecure)

    @property
    def slots(self) -> int:
        return get_preset(self.preset, allow_insecure=self.allow_insecure).slots

    @property
    def points_per_chunk(self) -> int:
        """Decision points per ciphertext (each takes :data:`POINT_STRIDE` slots)."""
        return self.slots // POINT_STRIDE

    @property
    def n_chunks(self) -> int:
        """Ciphertexts per party: one up to ``slots/4`` decision points."""
        return -(-self.n_points // self.points_per_chunk)

    def rotations(self) -> list[int]:
        """The Galois keys the aggregator needs: the class sums (multiples of
        :data:`POINT_STRIDE`) and one rotation by 2 (the denominator's class onto the
        numerator's)."""
        return sorted({2, *CKKSContext.sum_rotations(self.slots, POINT_STRIDE)})

    def key_spec(self) -> KeySpec:
        """The CKKS keys this configuration needs (each party derives them itself)."""
        return KeySpec.create(self.preset, self.rotations(), True,
                              allow_insecure=self.allow_insecure)


class FHAUCParty:
    """An input party (Baykara et al. steps 1-4 and 9).

    Parameters
    ----------
    y_true, y_score : array-like
        This party's private labels (0/1) and model scores in [0, 1].
    keys : PartyKeys
        From key set-up.
    config : FHAUCConfig
        The run configuration (in a deployment, chosen by the aggregator).
    policy : PartyPolicy, optional
        This party's own limits; the configuration and the result's participant set are
        checked against it (default :class:`~fedsec.auc.policy.PartyPolicy()`: at least
        two parties, this one among them).
    roster : Roster, optional
        The federation's roster, for its quorum.

    Notes
    -----
    Semi-honest mode trusts the aggregator to follow the protocol. A deviating aggregator
    can send a party any ciphertext instead of the masked result; the party decrypts it
    and computes a ratio of two of its slots. The checks here (the ciphertext's level, the
    same value in every slot, the participant list) stop the obvious substitutions but are
    no proof: **do not send the AUC back to a semi-honest aggregator** you do not trust
    (``share_auc`` is off by default), and use malicious mode when the aggregator may
    deviate.
    """

    def __init__(self, y_true: ArrayLike, y_score: ArrayLike, *, keys: PartyKeys,
                 config: FHAUCConfig, policy: PartyPolicy | None = None,
                 roster: Roster | None = None) -> None:
        if not keys.context.has_secret_key:
            raise ValueError("an FHAUC party needs the CKKS secret key")
        # no policy given: the caller chose the configuration itself (in a deployment the
        # node passes its own policy), so its decision points are admitted
        self._policy = policy if policy is not None else PartyPolicy(
            min_decision_points=min(DEFAULT_MIN_DECISION_POINTS, config.n_points))
        self._policy.check_config(config)
        self._config = config
        self._keys = keys
        self._roster = roster
        self._y, self._s = check_party_inputs(y_true, y_score, config.max_total_samples)
        # This party's role name (``"party:<name>"``) and its side of the binding.
        self._role = party_role(keys.name)
        self._binding = evaluation_binding(keys.session, config.digest(), "fhauc", self._role)
        #: This party's seconds by kind of work.
        self.clock = Clock()
        self._included: tuple[str, ...] = ()
        self._error_bound: float = float("nan")

    @property
    def included(self) -> tuple[str, ...]:
        """The parties the result covers (set by :meth:`finalize`)."""
        return self._included

    @property
    def error_bound(self) -> float:
        """The certified bound ``|exact AUC - trapezoid AUC|`` learnt with the AUC
        (:func:`fedsec.metrics.trapezoid_error_bound`), set by :meth:`finalize`."""
        return self._error_bound

    def terms(self) -> tuple[np.ndarray, np.ndarray]:
        """Steps 2-3: this party's trapezoid terms ``T, F`` over the decision points."""
        tp, fp = confusion_counts(self._y, self._s, self._config.points)
        return trapezoid_terms(tp, fp)

    def slot_vectors(self) -> list[np.ndarray]:
        """What this party encrypts, one vector per ciphertext: slot ``4k`` holds
        ``T[n] + i*F[n]``, slot ``4k + 1`` holds ``dTP[n] + i*F[n]`` (``dTP[n] = TP[n] -
        TP[n-1]``, the positives first counted at point ``n``) for point ``n`` = chunk
        offset + ``k``; slots 2 and 3 of the first ciphertext hold ``Pos + 2i*Neg`` and its
        conjugate."""
        cfg = self._config
        tp, fp = confusion_counts(self._y, self._s, cfg.points)
        t, f = trapezoid_terms(tp, fp)
        dtp = np.diff(tp, prepend=0)
        dtp[single_value_bins(cfg.points)] = 0   # exact ties: no error, no count
        n = self._keys.n_parties
        # the counts' noise (fedsec.auc.masking): on Pos and Neg (the
        # denominator); the same 4e on every T term (the numerator gets 4e*sum(F) =
        # 4e*Neg, e pooled); one-sided offsets on the bound terms
        e, (off_p, off_n) = self._draw_noise(n)
        pos, neg = float(tp[-1]) + e[0], float(fp[-1]) + e[1]
        t = t + NUMERATOR_NOISE_FACTOR * e[2]
        dtp_b, f_b = dtp + off_p, f + off_n
        per = cfg.points_per_chunk
        out = []
        for c in range(cfg.n_chunks):
            vec = np.zeros(cfg.slots, dtype=np.complex128)
            sl = slice(c * per, min((c + 1) * per, cfg.n_points))
            k = sl.stop - sl.start
            vec[0:POINT_STRIDE * k:POINT_STRIDE] = t[sl] + 1j * f[sl]
            vec[1:POINT_STRIDE * k:POINT_STRIDE] = dtp_b[sl] + 1j * f_b[sl]
            if c == 0:
                vec[2] = pos + 2j * neg
                vec[3] = pos - 2j * neg
            out.append(vec)
        return out

    def _draw_noise(self, n_parties: int) -> tuple[np.ndarray, tuple[float, float]]:
        """This party's share of the counts' noise (3 values) and its two bound offsets."""
        return count_noise(3, n_parties), (bound_offset(n_parties), bound_offset(n_parties))

    def submit(self) -> bytes:
        """Step 4: encrypt the slot vectors (one ciphertext per ``slots/4`` points)."""
        ctx = self._keys.context
        with self.clock("encryption"):
            blobs = [ctx.encrypt_bytes(v) for v in self.slot_vectors()]
        meta = self._binding.bind({"party": self._keys.index, "chunks": len(blobs)},
                                  step="submit", to=AGGREGATOR)
        return wire.encode("fhauc/submit", meta, blobs)

    @receives("fhauc/result")
    def finalize(self, response: bytes) -> float:
        """Step 9: decrypt the masked pair and return the global AUC."""
        return self._finalize(response, "fhauc/result")

    def _finalize(self, response: bytes, kind: str,
                  expect_parties: Sequence[int] | None = None) -> float:
        msg = wire.decode(response, expect=kind, max_bytes=self._policy.max_message_bytes)
        check_bound(self._binding, msg.meta, step="result", sender=AGGREGATOR,
                    broadcast=True, what="result")
        if len(msg.blobs) != 1:
            raise ProtocolError("result must hold one ciphertext")
        try:
            ratio = fields.real(msg.meta, "ratio", 0.0, 2.0) if "ratio" in msg.meta else 0.0
        except ProtocolError:
            raise ProtocolError("result masking does not match the configuration") from None
        if not ratio < 2.0 or (self._config.masking == "single") != (ratio == 0.0):
            raise ProtocolError("result masking does not match the configuration")
        n = self._keys.n_parties
        try:
            included = fields.integers(msg.meta, "parties", 0, n - 1, distinct=True)
        except ProtocolError:
            raise ProtocolError("result lists invalid party indices") from None
        if self._keys.index not in included:
            raise ProtocolError("the result does not include this party's submission")
        if expect_parties is not None and sorted(included) != sorted(expect_parties):
            raise ProtocolError("the result lists other parties than this party's key "
                                "switch covered")
        self._policy.check_participants(len(included), "semi-honest", n, self._roster)
        self._included = tuple(self._keys.names[i] for i in included)
        ratio = float(ratio)
        ctx = self._keys.context
        with self.clock("decryption"):
            z = ctx.decrypt(ctx.deserialize(msg.blobs[0]))
        _check_uniform_slots(z)
        denom, num, num_b = float(z[0].real), float(z[0].imag), float(z[1].imag)
        if abs(denom) < 0.25 and self._y.any() and not self._y.all():
            # this party holds both classes, so the federation does: not a real result
            raise ProtocolError("the response is not a masked FHAUC result (check: "
                                "denominator)")
        auc = finish_auc(num, denom, ratio)
        slack = bound_overstatement(abs(denom), self._config.n_points) + 1e-6
        self._error_bound = finish_error_bound(num_b, denom, -ratio, auc, slack=slack)
        return auc


def _check_uniform_slots(z: np.ndarray) -> None:
    """A genuine result holds one value in every slot of each class ``j mod 4``, and the
    same denominator in classes 0 and 1; anything else is not a result. Raises
    ``ProtocolError`` naming the check, never the values."""
    ref = max(1.0, float(np.abs(z[:POINT_STRIDE]).max()))
    tol = 1e-6 * ref
    ok = all(np.abs(z[j::POINT_STRIDE] - z[j]).max() <= tol for j in range(POINT_STRIDE))
    ok = ok and abs(z[0].real - z[1].real) <= tol
    if not ok:
        raise ProtocolError("the response is not a masked FHAUC result (check: "
                            "slot-consistency)")


class FHAUCAggregator(AggregatorInfo):
    """The aggregator (Baykara et al. steps 5-8), computing on ciphertexts only.

    Parameters
    ----------
    context : CKKSContext
        Public context from key set-up (no secret key).
    config : FHAUCConfig
    names : sequence of str
        The parties, in key set-up order.
    session : str
        The key set-up session id.
    min_parties : int
        Fewest submissions accepted (default: all parties).
    """

    def __init__(self, context: CKKSContext, config: FHAUCConfig, *, names: Sequence[str],
                 session: str, min_parties: int | None = None) -> None:
        if context.has_secret_key:
            raise ValueError("the aggregator must not hold the secret key")
        if context.params.name != config.preset:
            raise ValueError("context and configuration use different presets")
        missing = set(config.rotations()) - set(context.rotations)
        if missing or not context.conjugate_key:
            raise ValueError("the public context lacks Galois keys FHAUC needs")
        self._context = context
        self._config = config
        self._names = tuple(names)
        self._session = session
        self._binding = evaluation_binding(session, config.digest(), "fhauc", AGGREGATOR)
        #: The aggregator's seconds by kind of work (:attr:`timing` splits the last call).
        self.clock = Clock()
        self._min_parties = len(self._names) if min_parties is None else int(min_parties)
        self._timing: dict[str, float] = {}
        self.begin()

    def begin(self) -> None:
        """Start a new evaluation: forget the submissions added so far."""
        self._running = RunningSums(self._context, self._config.n_chunks)
        self._seen: list[int] = []
        self._load_s = 0.0

    def add(self, submission: bytes) -> int:
        """Check one party's submission and add it into the running sums as it arrives
        (it is not kept: memory does not grow with the parties); return its index.

        :meth:`aggregate` is this over a batch followed by :meth:`finish`; a runtime that
        receives submissions one by one calls :meth:`begin`, then this per submission."""
        t0 = time.perf_counter()
        with self.clock("other"):
            chunks = self._config.n_chunks
            msg = wire.decode(submission, expect="fhauc/submit")
            idx = party_index(msg.meta, len(self._names))
            check_bound(self._binding, msg.meta, step="submit",
                        sender=party_role(self._names[idx]), what="a submission")
            if idx in self._seen:
                raise ProtocolError(f"invalid or duplicate party index {idx!r}")
            if len(msg.blobs) != chunks:
                raise ProtocolError(f"a submission must hold {chunks} ciphertext(s)")
            ctx = self._context
            cts = [ctx.deserialize(b, at_top=True, scale=ctx.scale) for b in msg.blobs]
            self._running.add(cts)
            self._seen.append(idx)
        self._load_s += time.perf_counter() - t0
        return idx

    def finish(self) -> bytes:
        """Steps 5-8 on the submissions added since :meth:`begin`: the masked result."""
        seen = list(self._seen)
        if len(seen) < max(1, self._min_parties):
            raise ProtocolError(f"only {len(seen)} submissions; at least {self._min_parties} "
                                "are required")
        t1 = time.perf_counter()
        with self.clock("arithmetic"):
            q, rot = self.combine(self._running.sums())
            out, ratio = self.mask(q, rot)
            blob = self._context.serialize(out)
        t2 = time.perf_counter()
        self._timing = {"deserialize_s": self._load_s, "compute_s": t2 - t1,
                        "total_s": self._load_s + t2 - t1}
        self.begin()
        meta = self._binding.bind({"parties": sorted(seen), "ratio": ratio}, step="result",
                                  to=BROADCAST)
        return wire.encode("fhauc/result", meta, [blob])

    def combine(self, z: Any) -> tuple[Any, Any]:
        """Steps 5-7 on the summed ciphertext(s) (one or a list of chunk sums).

        Returns ``(Q, R)``: ``Q`` holds ``4i*num`` in class 0 (slots ``4k``), ``4i*B`` in
        class 1, ``4i*denom`` in class 2 and ``-4i*denom`` in class 3 (``B = sum dTP*F``,
        the pairs within a bin; ``denom = 2*Pos*Neg``); ``R`` is ``Q`` rotated by two slots
        (classes 0, 1 receive the denominator). Every slot of a class holds its full sum:
        no partial sums remain. Key switches: one relinearization, one conjugation, one
        rotation per doubling of the class sum (10 on the default ring) and the rotation
        by 2."""
        return combine_sums(self._context, z)

    def mask(self, q: Any, rot: Any, *, masks: Masks | None = None,
             noise: bool = True) -> tuple[Any, float]:
        """Step 8: ``d*Q + (c -+ i*d)*R`` (``-`` on even, ``+`` on odd slots), i.e. in
        class 0 ``d*denom + i*(d*num + c*denom)`` and in class 1 ``d*denom + i*(d*B -
        c*denom)``; returns the ratio ``C/K`` of the encoded integers too.

        ``d`` (and ``c`` with the pair mask; ``c = 0`` for the single mask) are drawn with
        :func:`real_mask` and encoded at the scale ``S`` of the prime the result is then
        rescaled by: ``d`` as the constant coefficient ``K = round(d*S)``, the alternating
        ``-+i*d`` as the coefficient ``-K`` of the monomial ``X^(n/2)`` (SEAL's slot order
        makes that monomial ``+-i``) - the *same* integer on both channels (a jitter
        between them would offer a party a test of the grid of its own, see the module
        docs). Classes 2 and 3 hold ``d*num + i*(d*denom + c*num)`` and ``-d*B + i*(c*B -
        d*denom)``: functions of what classes 0 and 1 reveal. The result noise
        (:data:`~fedsec.auc.masking.RESULT_NOISE_SD`, 2^-40: it floods the rescale's
        rounding; ``noise=False`` for tests) is added so that classes 2 and 3 stay exactly
        such functions of the noisy classes 0 and 1 (given ``c/d``): they are no second
        measurement. What hides the counts is the parties' noise (module docs)."""
        ctx = self._context
        m = masks if masks is not None else Masks.draw(self._config.masking)
        scale = float(ctx.rescale_prime(q))
        d_num = round(m.d_num * scale) / scale   # encodes to exactly K
        d_den = round(m.d_den * scale) / scale
        c = round(m.c * scale) / scale
        alt = np.where(np.arange(ctx.slots) % 2 == 0, 1.0, -1.0)
        out = ctx.add(masked_product(ctx, q, d_num),
                      masked_product(ctx, rot, c + alt * (-1j * d_den)))
        out = finish_masked(ctx, out)
        if noise:
            rho = m.ratio

            def pattern(e: np.ndarray) -> np.ndarray:
                ey, ex, eb = (float(v) for v in e)
                cls = [complex(ey, ex), complex(ey, eb),
                       complex(ex - rho * ey, ey + rho * (ex - rho * ey)),
                       complex(-(eb + rho * ey), rho * (eb + rho * ey) - ey)]
                return np.tile(np.asarray(cls), ctx.slots // POINT_STRIDE)

            out = add_result_noise(ctx, out, pattern, count=3)
        # the ratio of the integers actually encoded, C/K (c/d would differ by ~2^-48)
        return out, (c / d_den if c else 0.0)

    @receives("fhauc/submit")
    def aggregate(self, submissions: Sequence[bytes]) -> bytes:
        """Steps 5-8: add the submissions as they come (:meth:`add`) and return the masked
        result (:meth:`finish`)."""
        self.begin()
        for raw in submissions:
            self.add(raw)
        return self.finish()


def combine_sums(ctx: CKKSContext, z: Any) -> tuple[Any, Any]:
    """:meth:`FHAUCAggregator.combine` over ``ctx``'s public keys: deterministic, so a
    party of threshold mode recomputes exactly the aggregator's ciphertexts."""
    chunks = list(z) if isinstance(z, (list, tuple)) else [z]
    q = None
    for c in chunks:
        sq = ctx.square(c, rescale=False)   # masked at the top prime (masking docs)
        q = sq if q is None else ctx.add(q, sq)
    assert q is not None
    q = ctx.sub(q, ctx.conjugate(q))          # 4i * Im/2 of every square, per slot
    q = ctx.sum_slots(q, stride=POINT_STRIDE)
    return q, ctx.rotate(q, 2)


# ---------------------------------------------------------------------- in-process runner
def secure_auc(parties: Sequence[tuple[ArrayLike, ArrayLike]], *,
               decision_points: int | str | ArrayLike = 100,
               security: str = "semi-honest", masking: str = "single",
               preset: str | None = None, names: Sequence[str] | None = None,
               progress: Callable[[str], None] | None = None,
               allow_insecure: bool = False, scores: str = "probability",
               target: float | None = None, max_points: int | None = None,
               max_rounds: int = DEFAULT_MAX_ROUNDS, network: Network | None = None,
               keys: str = "single", **kwargs: Any) -> SecureAUCResult:
    """Run a whole federation in this process and return the secure global AUC.

    Parameters
    ----------
    parties : sequence of (y_true, y_score)
        Each party's labels (0/1) and scores (see ``scores``).
    decision_points : int, array-like or "exact"
        ``N`` uniform points (default 100), custom thresholds in [0, 1], or ``"exact"``:
        refine the points until the certified ``error_bound`` is at most ``target``
        (:mod:`fedsec.auc.exact`; reveals which score intervals hold pairs).
    security : {"semi-honest", "malicious"}
        Threat model of the aggregator (see the module docs).
    masking : {"single", "pair"}
        Semi-honest masking variant.
    progress : callable, optional
        Receives one line per protocol step.
    scores : {"probability", "logit", "range:LO:HI"}
        How to read the scores (:func:`fedsec.metrics.transform_scores`, a public
        strictly increasing map into [0, 1] that leaves the exact AUC unchanged):
        ``"probability"`` for ``predict_proba`` (a float-rounding hair outside [0, 1] is
        clipped), ``"logit"`` for ``decision_function`` of linear models and raw logits
        (sigmoid), ``"range:LO:HI"`` for scores with known bounds (affine).
    target : float
        Exact mode: the certified bound to reach (default 1e-6; 2e-5 in malicious mode,
        whose bound includes what verification admits).
    max_points, max_rounds : int, optional
        Exact mode's caps (final grid size; refinement rounds). If a cap stops refinement
        above ``target``, the result has ``target_reached=False`` and a ``UserWarning``
        says so.
    network : Network, optional
        The :class:`~fedsec.protocol.network.Network` every message crosses (key set-up
        included) between ``"aggregator"`` and ``"party:<name>"``; pass one to count the
        bytes or to observe or intercept the traffic (tests, benchmarks). Default: a fresh
        one per run.
    keys : {"single", "threshold"}
        Who holds the decryption key. ``"single"`` (default, the papers' model): every party
        holds the same key, so a party colluding with the aggregator can decrypt the
        others' submissions. ``"threshold"``: each party holds a share of a collective key
        that exists nowhere, and contributes to a decryption only of the aggregate it has
        recomputed itself (:mod:`fedsec.auc.fhauc_threshold`); both security modes, fixed
        decision points, at about 10x the bytes and a longer key set-up (default preset
        ``CKKS_128_N16384_DEPTH1_S60``).
    **kwargs
        Malicious mode's options (:func:`fedsec.auc.fhauc_malicious.secure_auc_malicious`).

    Returns
    -------
    SecureAUCResult
        ``auc`` (trapezoid over the points), ``error_bound`` (certified
        ``|exact - auc|``), costs.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> data = [(rng.integers(0, 2, 50), rng.random(50)) for _ in range(3)]
    >>> res = secure_auc(data, decision_points=50)  # doctest: +SKIP
    """
    if keys not in ("single", "threshold"):
        raise ValueError(f"The 'keys' parameter must be 'single' or 'threshold'. "
                         f"Got {keys!r} instead.")
    if keys == "threshold":
        if security not in ("semi-honest", "malicious"):
            raise ValueError(f"The 'security' parameter must be 'semi-honest' or "
                             f"'malicious'. Got {security!r} instead.")
        if wants_exact(decision_points, "secure_auc"):
            raise ValueError("keys='threshold' takes fixed decision points; exact mode's "
                             "refinement rounds are not built for it yet")
        if security == "malicious":
            from fedsec.auc.fhauc_threshold import secure_auc_threshold_malicious

            allowed = {"splits", "tolerance", "runs", "min_bound_bits"}
            if set(kwargs) - allowed:
                raise TypeError(f"unexpected arguments for threshold malicious FHAUC: "
                                f"{sorted(set(kwargs) - allowed)}")
            return secure_auc_threshold_malicious(
                apply_score_transform(parties, scores), decision_points=decision_points,
                preset=preset, names=names, progress=progress,
                allow_insecure=allow_insecure, network=network, **kwargs)
        if kwargs:
            raise TypeError(f"unexpected arguments for threshold FHAUC: {sorted(kwargs)}")
        from fedsec.auc.fhauc_threshold import secure_auc_threshold

        return secure_auc_threshold(apply_score_transform(parties, scores),
                                    decision_points=decision_points, masking=masking,
                                    preset=preset, names=names, progress=progress,
                                    allow_insecure=allow_insecure, network=network)
    preset = preset if preset is not None else default_preset(security)
    if security == "malicious":
        from fedsec.auc.fhauc_malicious import secure_auc_malicious

        result: SecureAUCResult = secure_auc_malicious(
            parties, decision_points=decision_points, preset=preset, names=names,
            progress=progress, allow_insecure=allow_insecure, scores=scores, target=target,
            max_points=max_points, max_rounds=max_rounds, network=network, **kwargs)
        return result
    if security != "semi-honest":
        raise ValueError(f"The 'security' parameter must be 'semi-honest' or 'malicious'. "
                         f"Got {security!r} instead.")
    if kwargs:
        raise TypeError(f"unexpected arguments for semi-honest FHAUC: {sorted(kwargs)}")
    parties = apply_score_transform(parties, scores)
    if wants_exact(decision_points, "secure_auc"):
        from fedsec.auc.exact import secure_auc_exact

        return secure_auc_exact(parties, final=_secure_auc_fixed, security="semi-honest",
                                target=target, max_points=max_points,
                                max_rounds=max_rounds, preset=preset, names=names,
                                progress=progress, allow_insecure=allow_insecure,
                                network=network, masking=masking)
    return _secure_auc_fixed(parties, decision_points=decision_points, masking=masking,
                             preset=preset, names=names, progress=progress,
                             allow_insecure=allow_insecure, network=network)


def _secure_auc_fixed(parties: Sequence[tuple[ArrayLike, ArrayLike]], *,
                      decision_points: Any, masking: str, preset: str,
                      names: Sequence[str] | None,
                      progress: Callable[[str], None] | None,
                      allow_insecure: bool, network: Network | None = None
                      ) -> SecureAUCResult:
    say = progress or (lambda _msg: None)
    net = network if network is not None else Network()
    before = dict(net.accounting.bytes_by_message)
    cfg = FHAUCConfig.create(decision_points, preset=preset, masking=masking,
                             allow_insecure=allow_insecure)
    data, party_names = prepare_federation(parties, names, cfg.max_total_samples)
    identities, roster = local_federation(party_names)
    say(f"key set-up: {len(data)} parties, preset {cfg.preset}")
    t0 = time.perf_counter()
    ks_agg, keys = run_key_setup(identities, roster, cfg.key_spec(), network=net)
    setup_s = time.perf_counter() - t0
    assert ks_agg.context is not None
    agg = FHAUCAggregator(ks_agg.context, cfg, names=ks_agg.names, session=ks_agg.session)
    # in one process the caller chose N for every party: its policy admits that N
    # in one process the caller chose N and the preset for every party: its policy admits them
    policy = PartyPolicy(max_decision_points=max(DEFAULT_MAX_DECISION_POINTS, cfg.n_points),
                         min_decision_points=min(DEFAULT_MIN_DECISION_POINTS, cfg.n_points),
                         presets=(cfg.preset,), max_key_bytes=IN_PROCESS_MAX_KEY_BYTES)
    roles = [FHAUCParty(y, s, keys=k, config=cfg, roster=roster, policy=policy)
             for (y, s), k in zip(data, keys, strict=True)]
    names_on_net = [party_role(k.name) for k in keys]
    say(f"parties encrypt their statistics ({cfg.n_points} decision points)")
    subs = net.gather(names_on_net, AGGREGATOR, [r.submit() for r in roles])
    say("aggregator computes on ciphertexts")
    response = agg.aggregate(subs)
    say("parties decrypt the masked result")
    delivered = net.broadcast(AGGREGATOR, names_on_net, response)
    aucs = [r.finalize(d) for r, d in zip(roles, delivered, strict=True)]
    if max(aucs) - min(aucs) > 1e-9:
        raise ProtocolError("parties decrypted different AUC values")
    bounds = [r.error_bound for r in roles]
    if max(bounds) - min(bounds) > 1e-9:
        raise ProtocolError("parties decrypted different error bounds")
    up, down = bytes_per_party(net.accounting, ("fhauc/submit", "fhauc/result"), before)
    # time: each role's own Clock, summed here (bytes: counted by the network)
    net.accounting.add_clock(agg.clock)
    for r in roles:
        net.accounting.add_clock(r.clock)
    return SecureAUCResult(
        auc=aucs[0], error_bound=bounds[0], parties=len(roles), decision_points=cfg.n_points,
        security="semi-honest", masking=cfg.masking, preset=cfg.preset,
        bytes_up_per_party=up, bytes_down_per_party=down,
        aggregator_seconds=agg.timing["total_s"],
        setup_bytes_to_aggregator=ks_agg.public_bytes_size, setup_seconds=setup_s,
        included=list(roles[0].included),
        extra={"aggregator_deserialize_s": agg.timing["deserialize_s"],
               "aggregator_compute_s": agg.timing["compute_s"],
               "key_holder": ks_agg.names[ks_agg.holder or 0]},
    )
