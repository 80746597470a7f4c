"""FHAUC against a semi-honest aggregator (seed 000 Sec. IV-C; masking variant of seed 001).

Threat model
------------
Parties follow the protocol and hold the CKKS secret key (the papers' setting); the
aggregator follows the protocol too but tries to learn from what it sees. It sees only
ciphertexts and public keys, so it learns nothing about any party's labels or scores
(semantic security of CKKS). Parties learn the global AUC and the masked numerator and
denominator (``c*num``, ``c*denom``) - nothing about any single party. The aggregator must
not collude with a party: a party's secret key decrypts every submission. A *malicious*
aggregator can change the result undetected in this mode (drop a party, rescale, replay):
use :mod:`fedsec.auc.fhauc_malicious` when that matters.

Packing (what makes it cheap)
-----------------------------
The paper sends four ciphertexts per party. Here each party sends **one** CKKS ciphertext
whose slot ``n`` holds the complex number ``T[n] + i*F[n]`` (the trapezoid terms of
:func:`fedsec.metrics.trapezoid_terms`, ``n = 0..N-1``). The aggregator

1. adds the parties' ciphertexts: ``Z = sum_m Z_m`` (slot-wise ``T + iF`` of the federation);
2. squares ``Z``: ``Im(Z[n]**2) = 2*T[n]*F[n]``; ``Z**2 - conj(Z**2)`` keeps ``4i*T*F`` and
   a full slot sum gives ``4i*num`` in every slot;
3. recovers the class totals from the same ciphertext, without extra uploads: the even and
   odd slot sums ``E, O`` of ``Z`` give ``Neg = Im(E + O)`` and ``Pos = ±Re(E - O)`` (the
   terms telescope, see :func:`fedsec.metrics.class_totals_from_terms`), and one product
   gives ``±4i*Pos*Neg`` with a sign alternating between even and odd slots;
4. masks with exact constants and returns one ciphertext whose every slot holds
   ``d*denom + i*(d*num + c*denom)`` (``c = 0`` with the single mask of seed 000).

What parties see: with the single mask every slot holds ``d*denom + i*d*num``. With the
``pair`` mask slot 0 holds the paper's ``d*denom`` and ``d*num + c*denom``, while odd slots
hold ``d*num - c*denom``; given ``c/d`` (which the paper also reveals) this is the same
information as the paper's triple. Decrypted CKKS noise is not flooded: its low-order bits
depend, very weakly, on intermediate values; the papers do not flood either.

All constants are exactly representable (dyadic masks, a real constant, and ``X^(n/2)``,
which SEAL's slot order evaluates to ``±i`` alternating), so CKKS adds only its own noise:
about 1e-10 relative error on the AUC. Thousands of decision points cost the same as a
hundred (one ciphertext up to ``N = slots``).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from fedsec._validation import check_int
from fedsec.auc.common import (
    DEFAULT_MAX_TOTAL_SAMPLES,
    MAX_DECISION_POINTS,
    BoundConfig,
    SecureAUCResult,
    check_party_inputs,
    finish_auc,
    local_federation,
    prepare_federation,
)
from fedsec.auc.policy import PartyPolicy
from fedsec.crypto import wire
from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.identity import Roster
from fedsec.crypto.keysetup import KeySpec, PartyKeys, run_key_setup
from fedsec.crypto.params import DEFAULT_PRESET, get_preset
from fedsec.errors import ProtocolError
from fedsec.metrics import as_decision_points, confusion_counts, trapezoid_terms

__all__ = [
    "FHAUCConfig",
    "FHAUCParty",
    "FHAUCAggregator",
    "SecureAUCResult",
    "finish_auc",
    "secure_auc",
]

Masking = Literal["single", "pair"]
MASK_BITS = 14  # random bits of each multiplicative mask (dyadic, so encoding is exact)
CONST_SCALE = 2.0 ** 16  # encoding scale of the masks; budgeted in the preset's modulus


@dataclass(frozen=True)
class FHAUCConfig(BoundConfig):
    """Public parameters every role must agree on.

    Parameters
    ----------
    decision_points : tuple of float
        Decreasing thresholds (see :func:`fedsec.metrics.as_decision_points`).
    preset : str
        CKKS preset; ``CKKS_128_N8192_DEPTH1`` (default) fits up to 4096 points.
    masking : {"single", "pair"}
        ``"single"``: parties receive ``c*num, c*denom`` (seed 000). ``"pair"``: they
        receive ``num*d + denom*c, denom*d`` and ``c/d`` (seed 001).
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
        if points.size > params.slots:
            raise ValueError(f"{points.size} decision points exceed the {params.slots} slots "
                             f"of {preset}; use at most {params.slots} points")
        if masking not in ("single", "pair"):
            raise ValueError(f"The 'masking' parameter must be 'single' or 'pair'. "
                             f"Got {masking!r} instead.")
        check_int(max_total_samples, "max_total_samples", "FHAUCConfig", min_value=1,
                  max_value=DEFAULT_MAX_TOTAL_SAMPLES)
        return cls(tuple(float(x) for x in points), preset, masking,  # type: ignore[arg-type]
                   int(max_total_samples), allow_insecure)

    def rotations(self) -> list[int]:
        """The Galois keys the aggregator needs: powers of two below the slot count."""
        return CKKSContext.sum_rotations(get_preset(self.preset,
                                                    allow_insecure=self.allow_insecure).slots)

    def key_spec(self) -> KeySpec:
        """The CKKS keys this configuration needs (each party derives them itself)."""
        return KeySpec.create(self.preset, self.rotations(), True,
                              allow_insecure=self.allow_insecure)


class FHAUCParty:
    """An input party (seed 000 steps 1-4 and 9).

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
        self.policy = policy if policy is not None else PartyPolicy()
        self.policy.check_config(config)
        self.config = config
        self.keys = keys
        self.roster = roster
        self._y, self._s = check_party_inputs(y_true, y_score, config.max_total_samples)
        self.included: tuple[str, ...] = ()

    def terms(self) -> tuple[np.ndarray, np.ndarray]:
        """Steps 2-3: this party's trapezoid terms ``T, F`` over the decision points."""
        tp, fp = confusion_counts(self._y, self._s, self.config.points)
        return trapezoid_terms(tp, fp)

    def submit(self) -> bytes:
        """Step 4: encrypt ``T + iF`` into one ciphertext."""
        t, f = self.terms()
        blob = self.keys.context.encrypt_to_bytes(t.astype(np.float64) + 1j * f)
        meta = {"config": self.config.digest(), "session": self.keys.session,
                "party": self.keys.index}
        return wire.encode("fhauc/submit", meta, [blob])

    def finalize(self, response: bytes) -> float:
        """Step 9: decrypt the masked pair and return the global AUC."""
        msg = wire.decode(response, expect="fhauc/result",
                          max_bytes=self.policy.max_message_bytes)
        if msg.meta.get("config") != self.config.digest() or \
                msg.meta.get("session") != self.keys.session:
            raise ProtocolError("result belongs to another configuration or session")
        if len(msg.blobs) != 1:
            raise ProtocolError("result must hold one ciphertext")
        ratio = msg.meta.get("ratio", 0.0)
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or \
                not np.isfinite(ratio) or (self.config.masking == "single") != (ratio == 0.0):
            raise ProtocolError("result masking does not match the configuration")
        included = msg.meta.get("parties", [])
        n = self.keys.n_parties
        if not isinstance(included, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n
                for i in included) or len(set(included)) != len(included):
            raise ProtocolError("result lists invalid party indices")
        if self.keys.index not in included:
            raise ProtocolError("the result does not include this party's submission")
        self.policy.check_participants(len(included), "semi-honest", n, self.roster)
        self.included = tuple(self.keys.names[i] for i in included)
        ratio = float(ratio)
        ctx = self.keys.context
        z = ctx.decrypt(ctx.deserialize(msg.blobs[0]))
        _check_uniform_slots(z, single=self.config.masking == "single")
        denom, num = float(z[0].real), float(z[0].imag)
        return finish_auc(num, denom, ratio)


def _check_uniform_slots(z: np.ndarray, *, single: bool) -> None:
    """A genuine result holds one value in every even and one in every odd slot (and the
    same in both with single masking); anything else is not a result. Raises
    ``ProtocolError`` naming the check, never the values."""
    even, odd = z[0::2], z[1::2]
    ref = max(1.0, float(np.abs(z[:2]).max()))
    tol = 1e-6 * ref
    ok = (np.abs(even - even[0]).max() <= tol and np.abs(odd - odd[0]).max() <= tol
          and abs(even[0].real - odd[0].real) <= tol)
    if single:
        ok = ok and abs(even[0] - odd[0]) <= tol
    if not ok:
        raise ProtocolError("the response is not a masked FHAUC result (check: "
                            "slot-consistency)")


def _dyadic_mask() -> tuple[float, int]:
    """A random mask in [1/2, 1) with MASK_BITS random bits, from ``secrets``."""
    k = (1 << (MASK_BITS - 1)) + secrets.randbelow(1 << (MASK_BITS - 1))
    return k / float(1 << MASK_BITS), k


class FHAUCAggregator:
    """The aggregator (seed 000 steps 5-8), computing on ciphertexts only.

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
        self.context = context
        self.config = config
        self.names = tuple(names)
        self.session = session
        self.min_parties = len(self.names) if min_parties is None else int(min_parties)
        self.timing: dict[str, float] = {}

    def _load(self, submissions: Sequence[bytes]) -> tuple[list[Any], list[int]]:
        cts, seen = [], []
        for raw in submissions:
            msg = wire.decode(raw, expect="fhauc/submit")
            if msg.meta.get("config") != self.config.digest() or \
                    msg.meta.get("session") != self.session:
                raise ProtocolError("a submission belongs to another configuration or session")
            idx = msg.meta.get("party")
            if not isinstance(idx, int) or not 0 <= idx < len(self.names) or idx in seen:
                raise ProtocolError(f"invalid or duplicate party index {idx!r}")
            if len(msg.blobs) != 1:
                raise ProtocolError("a submission must hold one ciphertext")
            cts.append(self.context.deserialize(msg.blobs[0], at_top=True,
                                                scale=self.context.scale))
            seen.append(idx)
        if len(cts) < max(1, self.min_parties):
            raise ProtocolError(f"only {len(cts)} submissions; at least {self.min_parties} "
                                "are required")
        return cts, seen

    def combine(self, z: Any) -> tuple[Any, Any]:
        """Steps 5-7 on the summed ciphertext: ``(4i*num in every slot, ±4i*Pos*Neg)``."""
        ctx = self.context
        q = ctx.square(z)
        q = ctx.sub(q, ctx.conjugate(q))          # 4i * T * F per slot
        num = ctx.sum_slots(q)                    # 4i * num everywhere
        w = ctx.sum_slots(z, stride=2)            # even slots: E, odd slots: O
        r = ctx.rotate(w, 1)
        a = ctx.add(w, r)
        b = ctx.sub(w, r)
        a = ctx.sub(a, ctx.conjugate(a))          # 2i * Neg
        b = ctx.add(b, ctx.conjugate(b))          # 2 * Re(E - O) * (-1)^j
        den = ctx.multiply(a, b)                  # 4i * sigma * Pos * Neg * (-1)^j
        return num, den

    def mask(self, num: Any, den: Any) -> tuple[Any, float]:
        """Step 8: ``d*denom + i*(d*num + c*denom)`` in every slot; returns ``c/d`` too."""
        ctx = self.context
        n_pts = self.config.n_points
        sigma = 1.0 if (n_pts - 1) % 2 == 0 else -1.0
        d, _ = _dyadic_mask()
        out = ctx.multiply_const(num, d / 4.0, scale=CONST_SCALE)  # i*d*num
        # X^(n/2) evaluates to +i on even and -i on odd slots: it undoes the alternation.
        jpat = np.where(np.arange(ctx.slots) % 2 == 0, 1.0, -1.0) * 1j * (-d / (2.0 * sigma))
        jpt = ctx.encode(jpat, scale=CONST_SCALE, parms_id=den.parms_id())
        out = ctx.add(out, ctx.multiply_plaintext(den, jpt))        # + d*denom
        ratio = 0.0
        if self.config.masking == "pair":
            c, _ = _dyadic_mask()
            alt = ctx.multiply_const(den, c / (2.0 * sigma), scale=CONST_SCALE)
            out = ctx.add(out, alt)  # + i*c*denom on even slots (slot 0 is read)
            ratio = c / d
        return out, ratio

    def aggregate(self, submissions: Sequence[bytes]) -> bytes:
        """Steps 5-8: combine the submissions and return the masked result."""
        t0 = time.perf_counter()
        cts, idx = self._load(submissions)
        t1 = time.perf_counter()
        z = self.context.add_many(cts)
        num, den = self.combine(z)
        out, ratio = self.mask(num, den)
        blob = self.context.serialize(out)
        t2 = time.perf_counter()
        self.timing = {"deserialize_s": t1 - t0, "compute_s": t2 - t1, "total_s": t2 - t0}
        meta = {"config": self.config.digest(), "session": self.session,
                "parties": sorted(idx), "ratio": ratio}
        return wire.encode("fhauc/result", meta, [blob])


# ---------------------------------------------------------------------- in-process runner
def secure_auc(parties: Sequence[tuple[ArrayLike, ArrayLike]], *, decision_points: Any = 100,
               security: str = "semi-honest", masking: str = "single",
               preset: str = DEFAULT_PRESET, names: Sequence[str] | None = None,
               progress: Callable[[str], None] | None = None,
               allow_insecure: bool = False, **kwargs: Any) -> SecureAUCResult:
    """Run a whole federation in this process and return the secure global AUC.

    Parameters
    ----------
    parties : sequence of (y_true, y_score)
        Each party's labels (0/1) and scores in [0, 1].
    decision_points : int or array-like
        ``N`` uniform points (default 100) or custom thresholds.
    security : {"semi-honest", "malicious"}
        Threat model of the aggregator (see the module docs).
    masking : {"single", "pair"}
        Semi-honest masking variant.
    progress : callable, optional
        Receives one line per protocol step.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> data = [(rng.integers(0, 2, 50), rng.random(50)) for _ in range(3)]
    >>> res = secure_auc(data, decision_points=50)  # doctest: +SKIP
    """
    if security == "malicious":
        from fedsec.auc.fhauc_malicious import secure_auc_malicious

        result: SecureAUCResult = secure_auc_malicious(
            parties, decision_points=decision_points, preset=preset, names=names,
            progress=progress, allow_insecure=allow_insecure, **kwargs)
        return result
    if security != "semi-honest":
        raise ValueError(f"The 'security' parameter must be 'semi-honest' or 'malicious'. "
                         f"Got {security!r} instead.")
    if kwargs:
        raise TypeError(f"unexpected arguments for semi-honest FHAUC: {sorted(kwargs)}")
    say = progress or (lambda _msg: None)
    cfg = FHAUCConfig.create(decision_points, preset=preset, masking=masking,
                             allow_insecure=allow_insecure)
    data, party_names = prepare_federation(parties, names, cfg.max_total_samples)
    identities, roster = local_federation(party_names)
    say(f"key set-up: {len(data)} parties, preset {cfg.preset}")
    t0 = time.perf_counter()
    ks_agg, keys = run_key_setup(identities, roster, cfg.key_spec())
    setup_s = time.perf_counter() - t0
    assert ks_agg.context is not None
    agg = FHAUCAggregator(ks_agg.context, cfg, names=ks_agg.names, session=ks_agg.session)
    roles = [FHAUCParty(y, s, keys=k, config=cfg, roster=roster)
             for (y, s), k in zip(data, keys, strict=True)]
    say(f"parties encrypt their statistics ({cfg.n_points} decision points)")
    subs = [r.submit() for r in roles]
    say("aggregator computes on ciphertexts")
    response = agg.aggregate(subs)
    say("parties decrypt the masked result")
    aucs = [r.finalize(response) for r in roles]
    if max(aucs) - min(aucs) > 1e-9:
        raise ProtocolError("parties decrypted different AUC values")
    return SecureAUCResult(
        auc=aucs[0], parties=len(roles), decision_points=cfg.n_points,
        security="semi-honest", masking=cfg.masking, preset=cfg.preset,
        bytes_up_per_party=max(len(s) for s in subs), bytes_down_per_party=len(response),
        aggregator_seconds=agg.timing["total_s"],
        setup_bytes_to_aggregator=ks_agg.public_bytes_size, setup_seconds=setup_s,
        included=list(roles[0].included),
        extra={"aggregator_deserialize_s": agg.timing["deserialize_s"],
               "aggregator_compute_s": agg.timing["compute_s"],
               "key_holder": ks_agg.names[ks_agg.holder or 0]},
    )
