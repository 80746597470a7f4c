"""A cheating aggregator for FHAUC: the tamper battery's attacks (tests, benchmarks, demo).

Moved here from ``fedsec.testing.auc`` (the product never imports it; ``fedsec demo``
imports it on purpose). The cheating aggregator is an **interceptor** on the
:class:`~fedsec.protocol.network.Network` the roles talk over (:class:`CheatingAggregator`):
it sees every envelope the parties send to ``"aggregator"`` and rewrites, drops, reorders
or equivocates what the aggregator forwards (the start message, the answer);
:func:`tamper_steps` turns a ``tamper(step, value)`` function into such an interceptor.

Every attack is a function of the bytes an aggregator sees or holds - the public CKKS
context, the parties' commits and submissions, the honest answer and, for replay-style
attacks, the bytes of an earlier evaluation under the same keys - and returns the bytes it
forwards instead (a start message or an answer, one per party when it equivocates).
Nothing here reads a secret key, a shared seed or a party's plaintext.

Malicious mode must never accept a result that is off by more than its guarantee; semi-
honest mode accepts many forgeries, which is its threat model. :class:`TamperHarness`
plays one federation under fixed keys again and again and classifies each attacked
evaluation (:class:`Trial`).

Layout the attacks rely on (public, :mod:`fedsec.auc.fhauc_malicious`): the answer is one
ciphertext; run ``k`` lives in slot class ``2k`` (``X = c*(r0*num + r1*denom)``, the
*numerator channel*) and class ``2k + 1`` (``Y = c*r2*denom``, the *denominator channel*)
of stride ``2**ceil(log2(2R))``. Galois keys exist for rotations by multiples of the
stride only, so no operation moves a value between slot classes; the attacks that need a
rotation by 1 (:attr:`AUCAttack.needs_rotation`) apply only to keys that carry it (keys
set up for another configuration).

Blind shift
-----------
The shift that needs no secret, in this layout, multiplies every numerator channel by
``1 + gamma`` and leaves the denominator channels alone. Run ``k`` then reports
``AUC + gamma*(AUC + r1/r0)`` with ``r1/r0`` the run's secret ratio in (1/8, 2); the runs
disagree by ``gamma*(r1/r0 - r1'/r0')``, which the tolerance must catch. With a rotation
by 1 the shift ``X + beta*Y`` moves run ``k`` by ``beta*r2/r0`` (``tolerance_bound_bits``'
model). The multipliers are exact: an even/odd pattern ``a + b*sqrt(2)*(+-1)`` is the
plaintext polynomial ``a + b*(X**(n/4) - X**(3n/4))`` with integer coefficients.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedsec.auc.common import AGGREGATOR, party_role
from fedsec.auc.fhauc import FHAUCAggregator
from fedsec.auc.fhauc_malicious import MaliciousAggregator, MaliciousConfig
from fedsec.errors import FedsecError, UndefinedMetricError
from fedsec.protocol import wire
from fedsec.protocol.binding import Binding
from fedsec.protocol.network import Envelope, Interceptor, Network

__all__ = ["ATTACKS", "AUCAttack", "Observed", "TamperHarness", "Trial", "forge",
           "adaptive_blind_shift", "blind_shift", "rot_shift", "ATTACK_SCALE_BITS",
           "CheatingAggregator", "tamper_steps", "STEPS"]

#: Encoding scale (bits) of the attacker's own plaintext multipliers in malicious mode (it
#: skips the honest mask's rescale). On the default chain the product sits at 2**(61 + 36)
#: in a 139-bit modulus: room for answers up to ~2**40, and a blind-shift step of ~2e-10.
ATTACK_SCALE_BITS = 36
#: Semi-honest forgeries act on the masked answer (already at 2**66), so less room is left.
SH_ATTACK_SCALE_BITS = 20


@dataclass
class Observed:
    """What the aggregator has seen in this evaluation (and, in ``foreign``, an earlier one
    under the same keys). ``submissions[i]`` is ``None`` when party ``i`` sent none."""

    submissions: list[bytes | None]
    honest_result: bytes | None = None
    commits: list[bytes] = field(default_factory=list)
    start: bytes | None = None
    starts: list[bytes] = field(default_factory=list)
    foreign: Observed | None = None

    def present(self) -> list[bytes]:
        return [s for s in self.submissions if s is not None]


Forger = Callable[[Any, Observed], "bytes | list[bytes]"]


@dataclass(frozen=True)
class AUCAttack:
    """One attack: what the aggregator forwards instead of the honest bytes.

    ``malicious`` / ``semi_honest`` forge the answer (one message, or one per party);
    ``start`` (malicious mode) rewrites the start message. ``needs_rotation`` names a
    Galois key the attack needs that the protocol's key spec does not give.
    """

    name: str
    description: str
    malicious: Forger | None
    semi_honest: Forger | None = None
    start: Forger | None = None
    needs_rotation: int | None = None


# ------------------------------------------------------------------------- helpers
def _rand_factor() -> float:
    """A random multiplier in [1.5, 4) (never 1: the attack must change something)."""
    return 1.5 + 2.5 * (secrets.randbelow(1 << 20) / float(1 << 20))


def _rand_const() -> float:
    return 1.0 + secrets.randbelow(1000)


def _attacker_mask() -> float:
    """The attacker's own multiplicative mask, dyadic in [1/8, 1/4) (the honest answer is
    multiplied by ``c/4`` with ``c`` in [1/2, 1))."""
    return ((1 << 13) + secrets.randbelow(1 << 13)) / float(1 << 16)


def _parity(slots: int) -> np.ndarray:
    return np.where(np.arange(slots) % 2 == 0, 1.0, -1.0)


def _at(ctx: Any, ct: Any, ref: Any) -> Any:
    """``ct`` moved down to ``ref``'s modulus level (the aggregator may mod-switch)."""
    out, _ = ctx._align(ct, ref)
    return out


# --------------------------------------------------------------- malicious-mode helpers
def _config(agg: MaliciousAggregator) -> MaliciousConfig:
    """The run configuration of the aggregator the attacker plays (its own state)."""
    return agg._config  # noqa: SLF001 (the cheating aggregator reads its own state)


def _binding(agg: MaliciousAggregator) -> Binding:
    """The aggregator's side of the evaluation binding (the attacker signs as it)."""
    return agg._binding  # noqa: SLF001 (the cheating aggregator reads its own state)


def _chunk_sums(agg: MaliciousAggregator, subs: Sequence[bytes],
                rotate_first: int = 0) -> list[Any]:
    """Per chunk, the sum of the given submissions (no completeness check)."""
    ctx = agg.context
    out = []
    for c in range(_config(agg).n_chunks):
        cts = []
        for j, raw in enumerate(subs):
            ct = ctx.deserialize(wire.decode(raw).blobs[c])
            if rotate_first and j == 0:
                ct = ctx.rotate(ct, rotate_first)
            cts.append(ct)
        out.append(ctx.add_many(cts))
    return out


def _mal_answer(agg: MaliciousAggregator, ct: Any, parties: Sequence[int] | None = None
                ) -> bytes:
    return agg.result_message(agg.context.serialize(ct), parties)


def _mal_honest(agg: MaliciousAggregator, subs: Sequence[bytes],
                parties: Sequence[int] | None = None, rotate_first: int = 0) -> bytes:
    """The honest computation (the aggregator's own combine and mask) over ``subs``."""
    q = agg.combine(_chunk_sums(agg, subs, rotate_first))
    return _mal_answer(agg, agg.mask(q), parties)


def _mal_result_ct(agg: MaliciousAggregator, result: bytes) -> Any:
    return agg.context.deserialize(wire.decode(result).blobs[0])


def _even_odd_mask(agg: MaliciousAggregator, q: Any, gamma: float) -> tuple[Any, float]:
    """Mask ``q`` exactly: numerator channels by ``m*(1 + gamma)``, denominator channels by
    ``m``. Returns the ciphertext and the effective ``gamma`` (rounded to the scale)."""
    ctx = agg.context
    s = float(2 ** ATTACK_SCALE_BITS)
    m = _attacker_mask()
    a = round(m * (1.0 + gamma / 2.0) * s)
    b = round(m * gamma / 2.0 * s / math.sqrt(2.0))
    vec = (a + _parity(ctx.slots) * b * math.sqrt(2.0)) / s
    even, odd = (a + b * math.sqrt(2.0)), (a - b * math.sqrt(2.0))
    return ctx.multiply_plain(q, vec, scale=s, rescale=False), even / odd - 1.0


def _class_mask(agg: MaliciousAggregator, q: Any, factors: Sequence[float] | np.ndarray,
                m: float | None = None) -> Any:
    """Mask ``q`` with one factor per slot class (encoding error ~1e-11 relative)."""
    ctx, stride = agg.context, _config(agg).stride
    mm = _attacker_mask() if m is None else m
    vec = np.tile(np.asarray(factors, dtype=np.float64) * mm, ctx.slots // stride)
    return ctx.multiply_plain(q, vec, scale=float(2 ** ATTACK_SCALE_BITS), rescale=False)


def _participants_of(agg: MaliciousAggregator, start: bytes) -> list[int]:
    """The participant indices a start message announces (from its bytes)."""
    out = []
    for raw in wire.decode(start).blobs:
        name = wire.decode(raw).meta.get("name")
        if name in agg.names:
            out.append(agg.names.index(name))
    return sorted(out)


# ------------------------------------------------------------------ malicious attacks
def mal_drop(agg: MaliciousAggregator, obs: Observed) -> bytes:
    return _mal_honest(agg, obs.present()[1:])


def mal_duplicate(agg: MaliciousAggregator, obs: Observed) -> bytes:
    subs = obs.present()
    return _mal_honest(agg, [*subs, subs[0]])


def mal_substitute(agg: MaliciousAggregator, obs: Observed) -> bytes:
    assert obs.foreign is not None
    foreign = obs.foreign.present()
    return _mal_honest(agg, [foreign[0], *obs.present()[1:]])


def mal_replay_old(agg: MaliciousAggregator, obs: Observed) -> bytes:
    assert obs.foreign is not None and obs.foreign.honest_result is not None
    return obs.foreign.honest_result


def mal_subset(agg: MaliciousAggregator, obs: Observed) -> bytes:
    subs = obs.present()
    return _mal_honest(agg, subs[:max(1, len(subs) // 2)])


def mal_add_constant(agg: MaliciousAggregator, obs: Observed) -> bytes:
    assert obs.honest_result is not None
    ctx = agg.context
    ct = _mal_result_ct(agg, obs.honest_result)
    vec = np.where(np.arange(ctx.slots) % 2 == 0, 1j * _rand_const(), 0.0)
    return _mal_answer(agg, ctx.add(ct, _at(ctx, ctx.encrypt(vec, scale=ct.scale), ct)))


def mal_scale_num(agg: MaliciousAggregator, obs: Observed) -> bytes:
    q = agg.combine(_chunk_sums(agg, obs.present()))
    return _mal_answer(agg, _even_odd_mask(agg, q, _rand_factor() - 1.0)[0])


def mal_scale_denom(agg: MaliciousAggregator, obs: Observed) -> bytes:
    q = agg.combine(_chunk_sums(agg, obs.present()))
    return _mal_answer(agg, _even_odd_mask(agg, q, 1.0 / _rand_factor() - 1.0)[0])


def mal_scale_one_run(agg: MaliciousAggregator, obs: Observed) -> bytes:
    """Scale run 1's numerator only (the reported run)."""
    q = agg.combine(_chunk_sums(agg, obs.present()))
    factors = np.ones(_config(agg).stride)
    factors[0] = 1.0 - 0.1 * (1.0 + secrets.randbelow(8))
    return _mal_answer(agg, _class_mask(agg, q, factors))


def mal_permute(agg: MaliciousAggregator, obs: Observed) -> bytes:
    return _mal_honest(agg, obs.present(), rotate_first=_config(agg).stride)


def mal_reencrypt(agg: MaliciousAggregator, obs: Observed) -> bytes:
    """A plausible answer (AUC 0.9 in every run) encrypted with the public key."""
    assert obs.honest_result is not None
    ctx = agg.context
    ref = _mal_result_ct(agg, obs.honest_result)
    cls = np.arange(ctx.slots) % _config(agg).stride
    vec = np.where(cls < 2 * _config(agg).runs, np.where(cls % 2 == 0, 0.9j, 1.0j), 0.0)
    return _mal_answer(agg, _at(ctx, ctx.encrypt(vec * 100.0, scale=ref.scale), ref))


def mal_mix_runs(agg: MaliciousAggregator, obs: Observed) -> bytes:
    """Run 1 from this evaluation, the other runs from an earlier one (one mask)."""
    assert obs.foreign is not None
    stride, m = _config(agg).stride, _attacker_mask()
    now = agg.combine(_chunk_sums(agg, obs.present()))
    old = agg.combine(_chunk_sums(agg, obs.foreign.present()))
    keep = np.zeros(stride)
    keep[:2] = 1.0
    ctx = agg.context
    return _mal_answer(agg, ctx.add(_class_mask(agg, now, keep, m),
                                    _class_mask(agg, old, 1.0 - keep, m)))


def mal_zero(agg: MaliciousAggregator, obs: Observed) -> bytes:
    """An all-zero answer: what a federation holding one class produces."""
    assert obs.honest_result is not None
    ctx = agg.context
    ref = _mal_result_ct(agg, obs.honest_result)
    return _mal_answer(agg, _at(ctx, ctx.encrypt(np.zeros(ctx.slots), scale=ref.scale), ref))


def mal_oracle_submission(agg: MaliciousAggregator, obs: Observed) -> bytes:
    """Send a party's own submission (first chunk) back as the answer (decryption oracle)."""
    subs = obs.present()
    return _mal_answer(agg, agg.context.deserialize(wire.decode(subs[-1]).blobs[0]))


def mal_oracle_classsum(agg: MaliciousAggregator, obs: Observed) -> bytes:
    """One party's submission, imaginary parts kept and summed per slot class: it has the
    shape of an answer (purely imaginary, constant per class)."""
    ctx = agg.context
    z = ctx.deserialize(wire.decode(obs.present()[-1]).blobs[0])
    z = ctx.sub(z, ctx.conjugate(z))              # 2i * Im
    return _mal_answer(agg, ctx.sum_slots(z, stride=_config(agg).stride))


def _mal_blind_shift(gamma: Callable[[MaliciousAggregator], float]) -> Forger:
    def forge_(agg: MaliciousAggregator, obs: Observed) -> bytes:
        q = agg.combine(_chunk_sums(agg, obs.present()))
        return _mal_answer(agg, _even_odd_mask(agg, q, gamma(agg))[0])
    return forge_


def mal_rot_shift(agg: MaliciousAggregator, obs: Observed, beta: float | None = None
                  ) -> bytes:
    """``X + beta*Y`` with a rotation by 1 (keys from another key spec)."""
    ctx = agg.context
    b = -1e-3 if beta is None else beta
    q = agg.combine(_chunk_sums(agg, obs.present()))
    m = _attacker_mask()
    s = float(2 ** ATTACK_SCALE_BITS)
    base = ctx.multiply_const(q, round(m * s) / s, scale=s)
    # beta*m on even slots, ~0 on odd ones: a + b*sqrt(2)*(+-1) with a ~ b*sqrt(2)
    a = round(b * m / 2.0 * s)
    bb = round(b * m / 2.0 * s / math.sqrt(2.0))
    vec = (a + _parity(ctx.slots) * bb * math.sqrt(2.0)) / s
    shifted = ctx.multiply_plain(ctx.rotate(q, 1), vec, scale=s, rescale=False)
    return _mal_answer(agg, ctx.add(base, shifted))


def mal_swap(agg: MaliciousAggregator, obs: Observed) -> bytes:
    """Rotate the answer by one slot: numerator channels receive denominators."""
    assert obs.honest_result is not None
    ctx = agg.context
    return _mal_answer(agg, ctx.rotate(_mal_result_ct(agg, obs.honest_result), 1))


# ------------------------------------------------------------ malicious start attacks
def _start_with(agg: MaliciousAggregator, commits: Sequence[bytes]) -> bytes:
    meta = _binding(agg).bind({}, step="start", to="*")
    return wire.encode("fhauc-m/start", meta, list(commits))


def start_isolate(agg: MaliciousAggregator, obs: Observed) -> bytes:
    """Every party is told that only the last party takes part."""
    return _start_with(agg, obs.commits[-1:])


def start_drop(agg: MaliciousAggregator, obs: Observed) -> bytes:
    """Leave the first party's commit out."""
    return _start_with(agg, obs.commits[1:])


def start_equivocate(agg: MaliciousAggregator, obs: Observed) -> list[bytes]:
    """The first party sees everyone; the others a start without the last party."""
    assert obs.start is not None
    n = len(obs.commits)
    return [obs.start] + [_start_with(agg, obs.commits[:-1])] * (n - 1)


def start_replay(agg: MaliciousAggregator, obs: Observed) -> bytes:
    """An earlier evaluation's start message (valid signatures, old nonces)."""
    assert obs.foreign is not None and obs.foreign.start is not None
    return obs.foreign.start


def after_start(agg: MaliciousAggregator, obs: Observed) -> list[bytes]:
    """Answer each party from the submissions that arrived, naming the participants that
    party was shown (so the participant check alone does not decide)."""
    subs = obs.present()
    if not subs:
        return []
    q = agg.combine(_chunk_sums(agg, subs))
    ct = agg.mask(q)
    return [_mal_answer(agg, ct, _participants_of(agg, st)) for st in obs.starts]


# ------------------------------------------------------------------ semi-honest helpers
def _sh_sum(agg: FHAUCAggregator, subs: Sequence[bytes], rotate_first: int = 0) -> Any:
    ctx = agg.context
    cts = []
    for j, raw in enumerate(subs):
        ct = ctx.deserialize(wire.decode(raw).blobs[0])
        if rotate_first and j == 0:
            ct = ctx.rotate(ct, rotate_first)
        cts.append(ct)
    return ctx.add_many(cts)


def _sh_meta(obs: Observed) -> dict[str, Any]:
    assert obs.honest_result is not None
    return dict(wire.decode(obs.honest_result).meta)


def _sh_answer(agg: FHAUCAggregator, ct: Any, meta: dict[str, Any]) -> bytes:
    return wire.encode("fhauc/result", meta, [agg.context.serialize(ct)])


def _sh_honest(agg: FHAUCAggregator, obs: Observed, subs: Sequence[bytes],
               rotate_first: int = 0) -> bytes:
    """The honest computation over ``subs``, claiming the honest participant list."""
    num, den = agg.combine(_sh_sum(agg, subs, rotate_first))
    out, ratio = agg.mask(num, den)
    return _sh_answer(agg, out, dict(_sh_meta(obs), ratio=ratio))


def _sh_result_ct(agg: FHAUCAggregator, obs: Observed) -> Any:
    assert obs.honest_result is not None
    return agg.context.deserialize(wire.decode(obs.honest_result).blobs[0])


def _sh_reshape(agg: FHAUCAggregator, obs: Observed, re_f: float, im_f: float) -> bytes:
    """Scale the real (denominator) and imaginary (numerator) parts of every slot:
    ``a*w + b*conj(w)`` with dyadic ``a, b`` (exact)."""
    ctx = agg.context
    s = float(2 ** SH_ATTACK_SCALE_BITS)
    w = _sh_result_ct(agg, obs)
    a = round((re_f + im_f) / 2.0 * s) / s
    b = round((re_f - im_f) / 2.0 * s) / s
    out = ctx.add(ctx.multiply_const(w, a, scale=s), ctx.multiply_const(ctx.conjugate(w), b,
                                                                         scale=s))
    return _sh_answer(agg, out, _sh_meta(obs))


def sh_drop(agg: FHAUCAggregator, obs: Observed) -> bytes:
    return _sh_honest(agg, obs, obs.present()[1:])


def sh_duplicate(agg: FHAUCAggregator, obs: Observed) -> bytes:
    subs = obs.present()
    return _sh_honest(agg, obs, [*subs, subs[0]])


def sh_substitute(agg: FHAUCAggregator, obs: Observed) -> bytes:
    assert obs.foreign is not None
    return _sh_honest(agg, obs, [obs.foreign.present()[0], *obs.present()[1:]])


def sh_replay_old(agg: FHAUCAggregator, obs: Observed) -> bytes:
    assert obs.foreign is not None and obs.foreign.honest_result is not None
    return obs.foreign.honest_result


def sh_subset(agg: FHAUCAggregator, obs: Observed) -> bytes:
    subs = obs.present()
    return _sh_honest(agg, obs, subs[:max(1, len(subs) // 2)])


def sh_isolate(agg: FHAUCAggregator, obs: Observed) -> bytes:
    """Answer from the last party's submission alone (it learns its local AUC)."""
    return _sh_honest(agg, obs, obs.present()[-1:])


def sh_add_constant(agg: FHAUCAggregator, obs: Observed) -> bytes:
    ctx = agg.context
    ct = _sh_result_ct(agg, obs)
    enc = ctx.encrypt(np.full(ctx.slots, 1j * _rand_const()), scale=ct.scale)
    return _sh_answer(agg, ctx.add(ct, _at(ctx, enc, ct)), _sh_meta(obs))


def sh_scale_num(agg: FHAUCAggregator, obs: Observed) -> bytes:
    return _sh_reshape(agg, obs, 1.0, 1.0 / _rand_factor())


def sh_scale_denom(agg: FHAUCAggregator, obs: Observed) -> bytes:
    return _sh_reshape(agg, obs, _rand_factor(), 1.0)


def sh_swap(agg: FHAUCAggregator, obs: Observed) -> bytes:
    """``i*conj(w)``: numerator and denominator trade places."""
    ctx = agg.context
    w = ctx.conjugate(_sh_result_ct(agg, obs))
    return _sh_answer(agg, ctx.multiply_const(w, 1j, scale=float(2 ** SH_ATTACK_SCALE_BITS)),
                      _sh_meta(obs))


def sh_permute(agg: FHAUCAggregator, obs: Observed) -> bytes:
    """Rotate one submission by one decision point (:data:`~fedsec.auc.fhauc.POINT_STRIDE`
    slots: the semi-honest keys carry no rotation by 1 since the 4-slot layout, which made
    this attack raise ``ValueError`` in the battery)."""
    from fedsec.auc.fhauc import POINT_STRIDE

    return _sh_honest(agg, obs, obs.present(), rotate_first=POINT_STRIDE)


def sh_reencrypt(agg: FHAUCAggregator, obs: Observed) -> bytes:
    ctx = agg.context
    ref = _sh_result_ct(agg, obs)
    # the answer's shape: class 0 denom + i*num, class 1 denom + i*B, classes 2, 3 alike
    cls = np.array([1000.0 + 900.0j, 1000.0 + 50.0j, 900.0 + 1000.0j, 50.0 + 1000.0j])
    enc = ctx.encrypt(np.tile(cls, ctx.slots // 4), scale=ref.scale)
    return _sh_answer(agg, _at(ctx, enc, ref), dict(_sh_meta(obs), ratio=0.0))


def sh_zero(agg: FHAUCAggregator, obs: Observed) -> bytes:
    ctx = agg.context
    ref = _sh_result_ct(agg, obs)
    return _sh_answer(agg, _at(ctx, ctx.encrypt(np.zeros(ctx.slots), scale=ref.scale), ref),
                      _sh_meta(obs))


def sh_oracle_submission(agg: FHAUCAggregator, obs: Observed) -> bytes:
    subs = obs.present()
    return _sh_answer(agg, agg.context.deserialize(wire.decode(subs[-1]).blobs[0]),
                      _sh_meta(obs))


#: The constant the slot-sum oracle divides by: the victim reports ``Neg_j / R``.
ORACLE_DENOMINATOR = 4096.0


def sh_oracle_slotsum(agg: FHAUCAggregator, obs: Observed) -> bytes:
    """An answer ``R + i*Neg_j`` in classes 0 and 1, built from party ``j``'s submission
    (the last): ``Im(T + iF)`` summed over the slots of class 0 (or 1) is ``sum(F) =
    Neg_j`` (the terms telescope); only the answer's own class-sum rotations are needed.
    The party accepts it and computes ``Neg_j / R``: a decryption oracle for any linear
    function of any ciphertext under the shared key."""
    ctx = agg.context
    z = ctx.deserialize(wire.decode(obs.present()[-1]).blobs[0])
    im = ctx.sub(z, ctx.conjugate(z))                                  # 2i * F per slot
    im = ctx.multiply_const(ctx.sum_slots(im, stride=4), 0.5, scale=2.0)  # i * Neg_j
    out = ctx.add_plain(im, np.full(ctx.slots, ORACLE_DENOMINATOR))
    return _sh_answer(agg, out, _sh_meta(obs))


def _sh_blind_shift(gamma: Callable[[FHAUCAggregator], float]) -> Forger:
    def forge_(agg: FHAUCAggregator, obs: Observed) -> bytes:
        return _sh_reshape(agg, obs, 1.0, 1.0 + gamma(agg))
    return forge_


def blind_shift(gamma: float) -> AUCAttack:
    """A blind shift with a fixed ``gamma`` (numerator channels times ``1 + gamma``) in
    both modes, for measurements (``benchmarks/blind_shift_bound.py``)."""
    return AUCAttack(f"blind-shift({gamma:g})", f"numerator channels x (1 + {gamma:g})",
                     _mal_blind_shift(lambda _a: gamma), _sh_blind_shift(lambda _a: gamma))


def rot_shift(beta: float) -> AUCAttack:
    """``X + beta*Y`` (needs a rotation by one slot)."""
    return AUCAttack(f"rot-shift({beta:g})", f"X + {beta:g}*Y",
                     lambda agg, obs: mal_rot_shift(agg, obs, beta), None, needs_rotation=1)


def _neg_uniform(lo: float, hi: float) -> float:
    return -(lo + (hi - lo) * secrets.randbelow(1 << 20) / float(1 << 20))


def _tol(agg: Any) -> float:
    return float(getattr(_config(agg), "tolerance", 1e-9))


# ---------------------------------------------------------------------------- registry
def _attacks() -> dict[str, AUCAttack]:
    a = [
        AUCAttack("drop-party", "drop one party's submission from the sum", mal_drop,
                  sh_drop),
        AUCAttack("duplicate-party", "count one party's submission twice", mal_duplicate,
                  sh_duplicate),
        AUCAttack("substitute-foreign", "replace one submission by that party's submission "
                  "from an earlier evaluation", mal_substitute, sh_substitute),
        AUCAttack("replay-old", "return an earlier evaluation's answer", mal_replay_old,
                  sh_replay_old),
        AUCAttack("subset-answer", "answer from half of the parties", mal_subset, sh_subset),
        AUCAttack("add-constant", "add an encrypted constant to the numerator channels",
                  mal_add_constant, sh_add_constant),
        AUCAttack("scale-num", "multiply the numerator channels by a factor in [1.5, 4)",
                  mal_scale_num, sh_scale_num),
        AUCAttack("scale-denom", "multiply the denominator channels by a factor in [1.5, 4)",
                  mal_scale_denom, sh_scale_denom),
        AUCAttack("scale-one-run", "scale the reported run's numerator by 0.1..0.8",
                  mal_scale_one_run, None),
        AUCAttack("permute-slots", "rotate one party's submission before adding",
                  mal_permute, sh_permute),
        AUCAttack("reencrypt-chosen", "answer with chosen values encrypted under the public "
                  "key", mal_reencrypt, sh_reencrypt),
        AUCAttack("mix-runs", "run 1 from this evaluation, the others from an earlier one",
                  mal_mix_runs, None),
        AUCAttack("zero-answer", "an all-zero answer (looks like a one-class federation)",
                  mal_zero, sh_zero),
        AUCAttack("oracle-submission", "send a party's submission back as the answer",
                  mal_oracle_submission, sh_oracle_submission),
        AUCAttack("oracle-slotsum", "a well-formed answer built from one party's submission "
                  "(semi-honest: R + i*Neg_j)", mal_oracle_classsum, sh_oracle_slotsum),
        AUCAttack("blind-shift-1e-3", "numerator channels x (1 - 1e-3): a blind shift",
                  _mal_blind_shift(lambda _a: -1e-3), _sh_blind_shift(lambda _a: -1e-3)),
        AUCAttack("blind-shift-1e-6", "numerator channels x (1 - 1e-6)",
                  _mal_blind_shift(lambda _a: -1e-6), _sh_blind_shift(lambda _a: -1e-6)),
        AUCAttack("blind-shift-1e-9r", "numerator channels x (1 - 1e-9*u), u in [1, 10)",
                  _mal_blind_shift(lambda _a: _neg_uniform(1e-9, 1e-8)), None),
        AUCAttack("blind-shift-tol", "numerator channels x (1 - tolerance): a shift about "
                  "the size of the tolerance", _mal_blind_shift(lambda g: -_tol(g)), None),
        AUCAttack("start-isolate", "start message listing only the last party",
                  None, sh_isolate, start=start_isolate),
        AUCAttack("start-drop", "start message without the first party's commit",
                  None, None, start=start_drop),
        AUCAttack("start-equivocate", "different start messages to different parties",
                  None, None, start=start_equivocate),
        AUCAttack("start-replay", "an earlier evaluation's start message",
                  None, None, start=start_replay),
        AUCAttack("rot-shift", "X + beta*Y with a rotation by one slot (beta = -1e-3)",
                  mal_rot_shift, None, needs_rotation=1),
        AUCAttack("swap-num-denom", "rotate the answer by one slot", mal_swap, sh_swap,
                  needs_rotation=1),
    ]
    return {x.name: x for x in a}


#: name -> attack
ATTACKS: dict[str, AUCAttack] = _attacks()


def forge(name: str, aggregator: Any, observed: Observed) -> list[bytes] | bytes:
    """Forge the answer of attack ``name`` against either aggregator type."""
    att = ATTACKS[name]
    fn = att.malicious if isinstance(aggregator, MaliciousAggregator) else att.semi_honest
    if fn is None:
        raise ValueError(f"attack {name!r} has no answer forgery for this mode")
    return fn(aggregator, observed)


# ---------------------------------------------------------------------------- harness
@dataclass
class Trial:
    """One attacked evaluation, seen from every party.

    ``kind`` is the worst outcome over the parties: ``"changed"`` (some party accepted an
    AUC off by more than the tolerance), ``"unchanged"`` (some accepted, all within it),
    ``"undefined"`` (none accepted; some were told the AUC is undefined) or
    ``"detected"`` (every party raised). ``error`` is the largest accepted error (NaN if
    none accepted); ``checks`` names what each refusing party raised.
    """

    kind: str
    error: float
    checks: list[str]
    accepted: list[float]
    #: The certified bound each accepting party reported with its AUC (same order).
    bounds: list[float] = field(default_factory=list)


def _check_name(exc: BaseException) -> str:
    check = getattr(exc, "check", None)
    if isinstance(check, str):
        return check
    msg = str(exc)
    if "(check: " in msg:
        return msg.split("(check: ", 1)[1].split(")", 1)[0]
    if "outside [0, 1]" in msg:          # semi-honest finish_auc
        return "range"
    return type(exc).__name__


class TamperHarness:
    """Plays one federation repeatedly under fixed keys, letting an attack forge bytes.

    Every trial is a fresh evaluation (fresh nonces, masks and shares); an earlier
    evaluation of another model under the same keys serves replay and substitution.

    Parameters
    ----------
    parties : sequence of (y_true, y_score)
    security : {"malicious", "semi-honest"}
    policy : PartyPolicy, optional
        Every party's policy (default: as :func:`secure_auc_malicious` sets it).
    extra_rotations : sequence of int
        Galois keys beyond the configuration's key spec (keys set up for another
        configuration), e.g. ``(1,)`` for the attacks that rotate by one slot.
    **config
        Passed to ``MaliciousConfig.create`` / ``FHAUCConfig.create``.
    """

    def __init__(self, parties: Sequence[tuple[Any, Any]], *, security: str,
                 decision_points: Any = 100, preset: str | None = None,
                 allow_insecure: bool = False, policy: Any = None,
                 extra_rotations: Sequence[int] = (), **config: Any) -> None:
        from fedsec.auc.common import local_federation
        from fedsec.auc.fhauc import FHAUCConfig
        from fedsec.auc.fhauc_malicious import MaliciousConfig
        from fedsec.auc.policy import (
            DEFAULT_MAX_TOLERANCE,
            IN_PROCESS_MAX_KEY_BYTES,
            PartyPolicy,
        )
        from fedsec.crypto.keysetup import KeySpec, run_key_setup
        from fedsec.crypto.params import DEFAULT_PRESET, MALICIOUS_PRESET

        self.security = security
        self.parties = [(np.asarray(y), np.asarray(s)) for y, s in parties]
        names = [f"party-{i}" for i in range(len(self.parties))]
        cfg: Any
        if security == "malicious":
            cfg = MaliciousConfig.create(decision_points, preset=preset or MALICIOUS_PRESET,
                                         allow_insecure=allow_insecure, **config)
            self.policy = policy if policy is not None else PartyPolicy(
                max_tolerance=max(cfg.tolerance, DEFAULT_MAX_TOLERANCE),
                min_bound_bits=config.get("min_bound_bits", 40.0), presets=(cfg.preset,),
                max_key_bytes=IN_PROCESS_MAX_KEY_BYTES)
            self.tolerance = float(cfg.tolerance)
        elif security == "semi-honest":
            cfg = FHAUCConfig.create(decision_points, preset=preset or DEFAULT_PRESET,
                                     allow_insecure=allow_insecure, **config)
            self.policy = policy if policy is not None else PartyPolicy(
                presets=(cfg.preset,), max_key_bytes=IN_PROCESS_MAX_KEY_BYTES)
            self.tolerance = 1e-9
        else:
            raise ValueError(f"unknown security {security!r}")
        self.config = cfg
        base = cfg.key_spec()
        spec = KeySpec.create(base.preset, [*base.rotations, *extra_rotations],
                              base.conjugate, allow_insecure=allow_insecure)
        self.identities, self.roster = local_federation(names)
        ks, self.keys = run_key_setup(self.identities, self.roster, spec)
        assert ks.context is not None
        self._public = ks.context
        self._names = ks.names
        self._session = ks.session
        # An earlier evaluation under the same keys, of another model (other scores).
        own = self.parties
        self.parties = [(y, 1.0 - s) for y, s in own]
        self._foreign: Observed | None = None
        self._foreign = self._play(None)[1]
        self.parties = own
        got, _ = self._play(None)
        assert all(isinstance(g, float) for g in got)
        self.truth = float(got[0])  # type: ignore[arg-type]
        self.last_accepted = float("nan")

    def _aggregator(self) -> Any:
        from fedsec.auc.fhauc import FHAUCAggregator
        from fedsec.auc.fhauc_malicious import MaliciousAggregator

        if self.security == "malicious":
            return MaliciousAggregator(self._public, self.config, names=self._names,
                                       session=self._session, roster=self.roster)
        return FHAUCAggregator(self._public, self.config, names=self._names,
                               session=self._session)

    def _roles(self) -> list[Any]:
        from fedsec.auc.fhauc import FHAUCParty
        from fedsec.auc.fhauc_malicious import MaliciousParty

        if self.security == "malicious":
            return [MaliciousParty(y, s, keys=k, config=self.config, identity=i,
                                   roster=self.roster, policy=self.policy)
                    for (y, s), k, i in zip(self.parties, self.keys, self.identities,
                                            strict=True)]
        return [FHAUCParty(y, s, keys=k, config=self.config, policy=self.policy,
                           roster=self.roster)
                for (y, s), k in zip(self.parties, self.keys, strict=True)]

    def _play(self, attack: AUCAttack | None
              ) -> tuple[list[float | BaseException], Observed]:
        """One evaluation over a :class:`Network` whose aggregator cheats with ``attack``
        (a :class:`CheatingAggregator` interceptor); every party's outcome."""
        agg = self._aggregator()
        roles = self._roles()
        n = len(roles)
        on_net = [party_role(k.name) for k in self.keys]
        outcome: list[float | BaseException | None] = [None] * n
        obs = Observed(submissions=[], foreign=self._foreign)
        net = Network()
        net.intercept(CheatingAggregator(agg, obs, attack, self.security, on_net))
        if self.security == "malicious":
            commits = net.gather(on_net, AGGREGATOR, [r.commit() for r in roles])
            starts = _deliveries(net, on_net, agg.start(commits))
            subs: list[bytes | None] = []
            for i, r in enumerate(roles):
                try:
                    subs.append(r.submit(starts[i]) if starts[i] is not None else None)
                except FedsecError as exc:
                    outcome[i] = exc
                    subs.append(None)
        else:
            subs = [r.submit() for r in roles]
        present = [(who, s) for who, s in zip(on_net, subs, strict=True) if s is not None]
        arrived = net.gather([w for w, _ in present], AGGREGATOR, [s for _, s in present])
        try:
            honest: bytes | None = agg.aggregate(arrived)
        except FedsecError:
            honest = None
        if honest is not None or attack is not None:
            # the attacker answers even where the honest computation failed
            kind = "fhauc-m/result" if self.security == "malicious" else "fhauc/result"
            answers = _deliveries(net, on_net, honest if honest is not None
                                  else wire.encode(kind, {NO_ANSWER: True}))
        else:
            answers = [None] * n
        for i, r in enumerate(roles):
            if outcome[i] is not None or answers[i] is None:
                continue
            try:
                outcome[i] = float(r.finalize(answers[i]))
            except FedsecError as exc:
                outcome[i] = exc
        final = [o if o is not None else FedsecError("no answer") for o in outcome]
        self._last_bounds = [float(r.error_bound) for r, o in zip(roles, final, strict=True)
                             if isinstance(o, float)]
        return final, obs

    def applicable(self, name: str | AUCAttack) -> bool:
        """Whether an attack can be played in this mode with these keys."""
        att = ATTACKS[name] if isinstance(name, str) else name
        if att.needs_rotation is not None and att.needs_rotation not in self._public.rotations:
            return False
        if self.security == "malicious":
            return att.malicious is not None or att.start is not None
        return att.semi_honest is not None

    def trial(self, name: str | AUCAttack) -> Trial:
        """One attacked evaluation (an attack's name in :data:`ATTACKS`, or an attack)."""
        att = ATTACKS[name] if isinstance(name, str) else name
        if not self.applicable(att):
            raise ValueError(f"attack {att.name!r} does not apply to {self.security} mode "
                             "with these keys")
        got, _ = self._play(att)
        accepted = [g for g in got if isinstance(g, float)]
        errors = [g for g in got if not isinstance(g, float)]
        checks = [_check_name(e) for e in errors]
        err = max((abs(a - self.truth) for a in accepted), default=float("nan"))
        if accepted:
            kind = "changed" if err > self.tolerance else "unchanged"
            self.last_accepted = max(accepted, key=lambda a: abs(a - self.truth))
        elif any(isinstance(e, UndefinedMetricError) for e in errors):
            kind = "undefined"
        else:
            kind = "detected"
        return Trial(kind, err, checks, accepted, list(self._last_bounds))

    def honest(self) -> float:
        """A fresh honest evaluation (every party's AUC must agree)."""
        got, _ = self._play(None)
        vals = [g for g in got if isinstance(g, float)]
        if len(vals) != len(got):
            raise AssertionError(f"an honest evaluation failed: {got}")
        return vals[0]


# ------------------------------------------------------------ adaptive (oracle) attack
def adaptive_blind_shift(agg: MaliciousAggregator, obs: Observed,
                         accepts: Callable[[bytes], bool], shift: float, *,
                         iters: int = 48, scale_bits: int = ATTACK_SCALE_BITS
                         ) -> tuple[bytes, int]:
    """A blind shift steered by a party's verdicts on forged answers within one evaluation.

    ``accepts(answer)`` is whatever tells the aggregator that a party accepted an answer
    (no error reply, or a shared AUC). Multiplying run ``k``'s numerator channel by
    ``v_2k`` and its denominator channel by ``v_2k+1`` moves that run by ``g*w_k`` with
    ``g = v_2k/v_2k+1 - 1`` and ``w_k = AUC + r1/r0`` (secret). The accepted ``g`` form an
    interval of width ``2*tol/w_k``, whose edges bisection finds; then every run gets
    ``g_k = shift/w_k``, so all runs move by ``shift`` and agree. ``g`` is read from the
    attacker's own encoded plaintext (exact), not from the requested factors. Returns the
    final forgery and the number of verdicts used.
    """
    ctx = agg.context
    stride, runs = _config(agg).stride, _config(agg).runs
    q = agg.combine(_chunk_sums(agg, obs.present()))
    m = _attacker_mask()
    s = float(2 ** scale_bits)
    queries = 0

    def build(gammas: Sequence[float] | np.ndarray) -> tuple[bytes, np.ndarray]:
        f = np.ones(stride)
        for k, g in enumerate(gammas):
            f[2 * k] = 1.0 + g
        vec = np.tile(f * m, ctx.slots // stride)
        pt = ctx.encode(vec, scale=s, parms_id=q.parms_id())
        eff = np.asarray(ctx._encoder.decode_double(pt))[:stride]
        ans = _mal_answer(agg, ctx.multiply_plain(q, pt, rescale=False))
        return ans, eff[0:2 * runs:2] / eff[1:2 * runs:2] - 1.0

    def hit(targets: Sequence[float]) -> tuple[bytes, np.ndarray]:
        """Requested factors corrected until the effective ``g`` meet ``targets``."""
        req = np.asarray(targets, dtype=np.float64)
        ans, eff = build(req)
        for _ in range(3):
            req = req + (np.asarray(targets) - eff)
            ans, eff = build(req)
        return ans, eff

    def verdict(k: int, g: float) -> tuple[bool, float]:
        nonlocal queries
        queries += 1
        targets = [0.0] * runs
        targets[k] = g
        ans, eff = hit(targets)
        return accepts(ans), float(eff[k])

    tol = float(_config(agg).tolerance)

    def window(k: int, base: list[float]) -> tuple[float, float]:
        """Edges (effective g of run k) of the accepted interval around ``base``: its
        half-width is tol/w_k <= 8*tol (w_k > 1/8), so [0, 16*tol] brackets each edge."""
        edges = []
        for sign in (1.0, -1.0):
            lo, hi, lo_eff = 0.0, min(1.0, 16.0 * tol), base[k]
            for _ in range(iters):
                mid = (lo + hi) / 2.0
                t = list(base)
                t[k] = base[k] + sign * mid
                nonlocal queries
                queries += 1
                ans, eff = hit(t)
                if accepts(ans):
                    lo, lo_eff = mid, float(eff[k])
                else:
                    hi = mid
            edges.append(lo_eff)
        return edges[0], edges[1]

    # round 0: around no shift, the interval's width is 2*tol/w_k
    w = []
    for k in range(runs):
        up, down = window(k, [0.0] * runs)
        w.append(2.0 * tol / (up - down))
    # later rounds: around a shift that passes, the interval's centre is delta/w_k, known
    # to the attacker's arithmetic precision whatever delta is; grow delta until shift
    delta, factor = 0.0, 30.0
    while delta != shift and factor > 1.5:
        step = math.copysign(min(abs(shift), max(abs(delta), tol) * factor), shift)
        base = [step / wk for wk in w]
        if not accepts(hit(base)[0]):
            queries += 1
            factor = math.sqrt(factor)
            continue
        queries += 1
        new_w = []
        for k in range(runs):
            up, down = window(k, base)
            new_w.append(step / ((up + down) / 2.0))
        w, delta = new_w, step
    return hit([shift / wk for wk in w])[0], queries


# ------------------------------------------------------------- the network interceptors
#: Metadata flag of the placeholder a harness forwards where the honest aggregation
#: failed (the attacker still answers; without an attack nothing is delivered).
NO_ANSWER = "no-answer"


def _deliveries(net: Network, recipients: Sequence[str], payload: bytes
                ) -> list[bytes | None]:
    """One message from the aggregator to each recipient, through ``net``: what each
    receives (``None`` where the network delivered nothing)."""
    arrived = net.deliver([Envelope(AGGREGATOR, r, payload) for r in recipients])
    out: list[bytes | None] = []
    for r in recipients:
        got = [e.payload for e in arrived if e.recipient == r]
        out.append(got[0] if got else None)
    return out


class CheatingAggregator:
    """The tamper battery's aggregator as an interceptor on the parties' network.

    It records what the aggregator sees (commits, the start message, the submissions, the
    honest answer) into an :class:`Observed` and replaces what the aggregator forwards:
    ``attack.start`` rewrites the start message, ``attack.malicious`` /
    ``attack.semi_honest`` the answer (one message for every party, or one each:
    equivocation; fewer than the parties: the rest receive nothing). ``agg`` is the
    aggregator role the attacker itself runs (its public context, configuration and
    computation); nothing here touches a party.
    """

    def __init__(self, agg: Any, obs: Observed, attack: AUCAttack | None, security: str,
                 parties: Sequence[str]) -> None:
        self.agg, self.obs, self.attack, self.security = agg, obs, attack, security
        self.parties = list(parties)

    def _per_party(self, batch: list[Envelope], value: Any) -> list[Envelope]:
        per = list(value) if isinstance(value, list) else [value] * len(batch)
        return [e.with_payload(p) for e, p in zip(batch, per, strict=False) if p is not None]

    def __call__(self, batch: list[Envelope]) -> list[Envelope] | None:
        if not batch:
            return None
        kind, obs, att = batch[0].kind, self.obs, self.attack
        if kind == "fhauc-m/commit":
            obs.commits = [e.payload for e in batch]
        elif kind == "fhauc-m/start":
            obs.start = batch[0].payload
            value: Any = obs.start
            if att is not None and att.start is not None:
                value = att.start(self.agg, obs)
            out = self._per_party(batch, value)
            obs.starts = [e.payload for e in out]
            return out
        elif kind in ("fhauc-m/submit", "fhauc/submit"):
            by = {e.sender: e.payload for e in batch}
            obs.submissions = [by.get(p) for p in self.parties]
        elif kind in ("fhauc-m/result", "fhauc/result"):
            honest = batch[0].payload
            obs.honest_result = None if wire.decode(honest).meta.get(NO_ANSWER) else honest
            if att is None:
                return None
            if self.security == "malicious" and att.malicious is None:
                value = after_start(self.agg, obs)
            else:
                fn = att.malicious if self.security == "malicious" else att.semi_honest
                assert fn is not None
                value = fn(self.agg, obs)
            return self._per_party(batch, value)
        return None


#: ``kind -> (step, shape)`` of the steps a ``tamper(step, value)`` function sees:
#: ``"gather"`` (a list of what the aggregator receives), ``"scatter"`` (a list, one per
#: recipient) and ``"one"`` (bytes, or a list of one message per recipient).
STEPS: dict[str, tuple[str, str]] = {
    "keys/hello": ("keys/hellos", "gather"),
    "keys/request": ("keys/request", "one"),
    "keys/deliver": ("keys/deliveries", "scatter"),
    "keys/confirmed": ("keys/confirmed", "one"),
    "fhauc-m/start": ("start", "one"),
    "fhauc-m/submit": ("submissions", "gather"),
    "fhauc-m/result": ("result", "one"),
    "fhauc/submit": ("submissions", "gather"),
    "fhauc/result": ("result", "one"),
}


def tamper_steps(tamper: Callable[[str, Any], Any],
                 steps: dict[str, tuple[str, str]] | None = None) -> Interceptor:
    """An interceptor that lets ``tamper(step, value)`` rewrite what the aggregator
    relays (see :data:`STEPS`): ``net.intercept(tamper_steps(fn))``."""
    table = STEPS if steps is None else steps

    def fn(batch: list[Envelope]) -> list[Envelope] | None:
        if not batch or batch[0].kind not in table:
            return None
        step, shape = table[batch[0].kind]
        if shape == "gather":
            out = list(tamper(step, [e.payload for e in batch]))
            senders = [e.sender for e in batch]
            rcpt = batch[0].recipient
            return [Envelope(senders[min(i, len(senders) - 1)], rcpt, bytes(p))
                    for i, p in enumerate(out)]
        if shape == "scatter":
            out = list(tamper(step, [e.payload for e in batch]))
            if len(out) != len(batch):
                raise ValueError("one delivery per recipient")
            return [e.with_payload(p) for e, p in zip(batch, out, strict=True)]
        value = tamper(step, batch[0].payload)
        per = list(value) if isinstance(value, list) else [value] * len(batch)
        return [e.with_payload(p) for e, p in zip(batch, per, strict=True)]

    return fn
