"""A cheating aggregator, for the tamper battery (tests and ``benchmarks/tamper_battery.py``).

Each attack sees exactly what an aggregator sees - the public context, the submissions'
bytes, the honest answer's bytes and, for replay-style attacks, bytes from an earlier
evaluation under the same keys - and returns forged answer bytes. Nothing here reads a
secret key or a party's plaintext. In malicious mode parties must reject every forgery
that changes the AUC; in semi-honest mode they accept them, which is that mode's threat
model.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedsec.auc.fhauc import (
    FHAUCAggregator,
    Masks,
    finish_masked,
    masked_product,
    real_mask,
)
from fedsec.auc.fhauc_malicious import RUNS, MaliciousAggregator
from fedsec.crypto import wire

__all__ = ["ATTACKS", "Observed", "attack"]


@dataclass
class Observed:
    """What the aggregator has seen in this evaluation (and one earlier evaluation)."""

    submissions: list[bytes]
    honest_result: bytes
    foreign_submissions: list[bytes] | None = None
    foreign_result: bytes | None = None


def _rand_factor() -> float:
    """A random multiplier in [1.5, 4) (never 1: the attack must change something)."""
    return 1.5 + 2.5 * (secrets.randbelow(1 << 20) / float(1 << 20))


def _rand_const() -> float:
    return 1.0 + secrets.randbelow(1000)


# ------------------------------------------------------------------------- malicious mode
def _mal_sums(agg: MaliciousAggregator, subs: Sequence[bytes],
              rotate_first: int = 0) -> list[list[Any]]:
    """Per run, per chunk: the sum of the given submissions (no completeness check)."""
    ctx, cfg = agg.context, agg.config
    chunks = cfg.n_chunks
    out: list[list[Any]] = []
    for k in range(RUNS):
        run = []
        for c in range(chunks):
            cts = []
            for j, raw in enumerate(subs):
                ct = ctx.deserialize(wire.decode(raw).blobs[k * chunks + c])
                if rotate_first and j == 0:
                    ct = ctx.rotate(ct, rotate_first)
                cts.append(ct)
            run.append(ctx.add_many(cts))
        out.append(run)
    return out


def _mal_answer(agg: MaliciousAggregator, blobs: Sequence[bytes]) -> bytes:
    meta = {"config": agg.config.digest(), "session": agg.session,
            "parties": agg.participants}
    return wire.encode("fhauc-m/result", meta, list(blobs))


def _mal_from_sums(agg: MaliciousAggregator, sums: list[list[Any]]) -> bytes:
    return _mal_answer(agg, [agg.context.serialize(agg.compute_run(r)) for r in sums])


def _mal_channel_scale(agg: MaliciousAggregator, obs: Observed, even: float,
                       odd: float) -> bytes:
    """The honest computation, but the even (numerator) or odd (denominator) channel's mask
    multiplied by a factor."""
    sums = _mal_sums(agg, obs.submissions)
    blobs = []
    for run in sums:
        c = real_mask()
        out = agg.mask(agg.premask(run), masks=(c * even, c * odd))
        blobs.append(agg.context.serialize(out))
    return _mal_answer(agg, blobs)


def _mal_result_cts(agg: MaliciousAggregator, result: bytes) -> list[Any]:
    return [agg.context.deserialize(b) for b in wire.decode(result).blobs]


def mal_drop(agg: MaliciousAggregator, obs: Observed) -> bytes:
    return _mal_from_sums(agg, _mal_sums(agg, obs.submissions[1:]))


def mal_duplicate(agg: MaliciousAggregator, obs: Observed) -> bytes:
    return _mal_from_sums(agg, _mal_sums(agg, [*obs.submissions, obs.submissions[0]]))


def mal_substitute(agg: MaliciousAggregator, obs: Observed) -> bytes:
    assert obs.foreign_submissions is not None
    subs = [obs.foreign_submissions[0], *obs.submissions[1:]]
    return _mal_from_sums(agg, _mal_sums(agg, subs))


def mal_replay_run(agg: MaliciousAggregator, obs: Observed) -> bytes:
    blobs = wire.decode(obs.honest_result).blobs
    return _mal_answer(agg, [blobs[0]] * RUNS)


def mal_replay_old(agg: MaliciousAggregator, obs: Observed) -> bytes:
    assert obs.foreign_result is not None
    return _mal_answer(agg, wire.decode(obs.foreign_result).blobs)


def mal_subset(agg: MaliciousAggregator, obs: Observed) -> bytes:
    half = max(1, len(obs.submissions) // 2)
    return _mal_from_sums(agg, _mal_sums(agg, obs.submissions[:half]))


def mal_add_constant(agg: MaliciousAggregator, obs: Observed) -> bytes:
    ctx = agg.context
    k = _rand_const()
    vec = np.where(np.arange(ctx.slots) % 2 == 0, 1j * k, 0.0)
    out = []
    for ct in _mal_result_cts(agg, obs.honest_result):
        enc = ctx.encrypt(vec, scale=ct.scale)
        enc2, _ = ctx._align(enc, ct)
        out.append(ctx.serialize(ctx.add(ct, enc2)))
    return _mal_answer(agg, out)


def mal_scale_num(agg: MaliciousAggregator, obs: Observed) -> bytes:
    return _mal_channel_scale(agg, obs, _rand_factor(), 1.0)


def mal_scale_denom(agg: MaliciousAggregator, obs: Observed) -> bytes:
    return _mal_channel_scale(agg, obs, 1.0, _rand_factor())


def mal_swap(agg: MaliciousAggregator, obs: Observed) -> bytes:
    ctx = agg.context
    return _mal_answer(agg, [ctx.serialize(ctx.rotate(ct, 1))
                             for ct in _mal_result_cts(agg, obs.honest_result)])


def mal_permute(agg: MaliciousAggregator, obs: Observed) -> bytes:
    return _mal_from_sums(agg, _mal_sums(agg, obs.submissions, rotate_first=2))


def mal_reencrypt(agg: MaliciousAggregator, obs: Observed) -> bytes:
    ctx = agg.context
    vec = np.where(np.arange(ctx.slots) % 2 == 0, 0.9j, 1.0j)
    ref = _mal_result_cts(agg, obs.honest_result)[0]
    out = []
    for _ in range(RUNS):
        enc = ctx.encrypt(vec, scale=ref.scale)
        enc2, _ = ctx._align(enc, ref)
        out.append(ctx.serialize(enc2))
    return _mal_answer(agg, out)


# ------------------------------------------------------------------------ semi-honest mode
def _sh_sum(agg: FHAUCAggregator, subs: Sequence[bytes], rotate_first: int = 0) -> Any:
    ctx = agg.context
    cts = []
    for j, raw in enumerate(subs):
        ct = ctx.deserialize(wire.decode(raw).blobs[0])
        if rotate_first and j == 0:
            ct = ctx.rotate(ct, rotate_first)
        cts.append(ct)
    return ctx.add_many(cts)


def _sh_answer(agg: FHAUCAggregator, ct: Any, ratio: float, parties: list[int]) -> bytes:
    meta = {"config": agg.config.digest(), "session": agg.session, "parties": parties,
            "ratio": ratio}
    return wire.encode("fhauc/result", meta, [agg.context.serialize(ct)])


def _sh_meta(obs: Observed) -> tuple[float, list[int]]:
    m = wire.decode(obs.honest_result).meta
    return float(m["ratio"]), list(m["parties"])


def _sh_from(agg: FHAUCAggregator, obs: Observed, subs: Sequence[bytes],
             rotate_first: int = 0) -> bytes:
    _, parties = _sh_meta(obs)
    num, den = agg.combine(_sh_sum(agg, subs, rotate_first))
    out, ratio = agg.mask(num, den)
    return _sh_answer(agg, out, ratio, parties)


def sh_drop(agg: FHAUCAggregator, obs: Observed) -> bytes:
    return _sh_from(agg, obs, obs.submissions[1:])


def sh_duplicate(agg: FHAUCAggregator, obs: Observed) -> bytes:
    return _sh_from(agg, obs, [*obs.submissions, obs.submissions[0]])


def sh_substitute(agg: FHAUCAggregator, obs: Observed) -> bytes:
    assert obs.foreign_submissions is not None
    return _sh_from(agg, obs, [obs.foreign_submissions[0], *obs.submissions[1:]])


def sh_replay_old(agg: FHAUCAggregator, obs: Observed) -> bytes:
    assert obs.foreign_result is not None
    return obs.foreign_result


def sh_subset(agg: FHAUCAggregator, obs: Observed) -> bytes:
    return _sh_from(agg, obs, obs.submissions[:max(1, len(obs.submissions) // 2)])


def sh_add_constant(agg: FHAUCAggregator, obs: Observed) -> bytes:
    ctx = agg.context
    ratio, parties = _sh_meta(obs)
    ct = ctx.deserialize(wire.decode(obs.honest_result).blobs[0])
    enc, _ = ctx._align(ctx.encrypt(np.full(ctx.slots, 1j * _rand_const()), scale=ct.scale),
                        ct)
    return _sh_answer(agg, ctx.add(ct, enc), ratio, parties)


def _sh_scaled(agg: FHAUCAggregator, obs: Observed, num_f: float, den_f: float,
               swap: bool = False) -> bytes:
    """Redo the masking with the numerator or the denominator channel rescaled."""
    ctx = agg.context
    ratio, parties = _sh_meta(obs)
    num, den = agg.combine(_sh_sum(agg, obs.submissions))
    d = real_mask()
    if swap:  # put the numerator where the denominator goes and vice versa
        sigma = 1.0 if (agg.config.n_points - 1) % 2 == 0 else -1.0
        alt = np.where(np.arange(ctx.slots) % 2 == 0, 1.0, -1.0)
        out = ctx.add(masked_product(ctx, num, -1j * d),
                      masked_product(ctx, den, alt * (2.0 * d / sigma)))
        return _sh_answer(agg, finish_masked(ctx, out), ratio, parties)
    # the honest ratio stays in the metadata: the pair term is c = ratio * d
    out, _ = agg.mask(num, den, masks=Masks(d * num_f, d * den_f, ratio * d))
    return _sh_answer(agg, out, ratio, parties)


def sh_scale_num(agg: FHAUCAggregator, obs: Observed) -> bytes:
    return _sh_scaled(agg, obs, _rand_factor(), 1.0)


def sh_scale_denom(agg: FHAUCAggregator, obs: Observed) -> bytes:
    return _sh_scaled(agg, obs, 1.0, _rand_factor())


def sh_swap(agg: FHAUCAggregator, obs: Observed) -> bytes:
    return _sh_scaled(agg, obs, 1.0, 1.0, swap=True)


def sh_permute(agg: FHAUCAggregator, obs: Observed) -> bytes:
    return _sh_from(agg, obs, obs.submissions, rotate_first=1)


def sh_reencrypt(agg: FHAUCAggregator, obs: Observed) -> bytes:
    ctx = agg.context
    ratio, parties = _sh_meta(obs)
    ref = ctx.deserialize(wire.decode(obs.honest_result).blobs[0])
    enc, _ = ctx._align(ctx.encrypt(np.full(ctx.slots, 1.0 + (0.9 + ratio) * 1j),
                                    scale=ref.scale), ref)
    return _sh_answer(agg, enc, ratio, parties)


Attack = Callable[[Any, Observed], bytes]

#: name -> (description, malicious-mode attack, semi-honest-mode attack or None)
ATTACKS: dict[str, tuple[str, Attack, Attack | None]] = {
    "drop-party": ("drop one party's submission", mal_drop, sh_drop),
    "duplicate-party": ("count one party twice", mal_duplicate, sh_duplicate),
    "substitute-foreign": ("use one party's submission from another evaluation",
                           mal_substitute, sh_substitute),
    "replay-run": ("return run 1's answer as run 2's too", mal_replay_run, None),
    "replay-old": ("return an earlier evaluation's answer", mal_replay_old, sh_replay_old),
    "subset-answer": ("answer from half of the parties", mal_subset, sh_subset),
    "add-constant": ("add an encrypted constant to the numerator", mal_add_constant,
                     sh_add_constant),
    "scale-num": ("multiply the numerator by a random factor", mal_scale_num, sh_scale_num),
    "scale-denom": ("multiply the denominator by a random factor", mal_scale_denom,
                    sh_scale_denom),
    "swap-num-denom": ("swap numerator and denominator", mal_swap, sh_swap),
    "permute-slots": ("rotate one party's slots before aggregating", mal_permute,
                      sh_permute),
    "reencrypt-chosen": ("replace the answer by a chosen value encrypted with the public "
                         "key", mal_reencrypt, sh_reencrypt),
}


def attack(name: str, aggregator: Any, observed: Observed) -> bytes:
    """Forge an answer with attack ``name`` against either aggregator type."""
    desc, mal, sh = ATTACKS[name]
    del desc
    if isinstance(aggregator, MaliciousAggregator):
        return mal(aggregator, observed)
    if sh is None:
        raise ValueError(f"attack {name!r} has no semi-honest counterpart")
    return sh(aggregator, observed)


class TamperHarness:
    """Plays one federation repeatedly under fixed keys, letting an attack forge answers.

    Every :meth:`trial` is a fresh evaluation (fresh nonces, masks and aggregator masks);
    the previous evaluation's bytes serve replay and substitution attacks.
    """

    def __init__(self, parties: Sequence[tuple[Any, Any]], *, security: str,
                 decision_points: Any = 100, preset: str | None = None,
                 allow_insecure: bool = False, **config: Any) -> None:
        from fedsec.auc.fhauc import FHAUCConfig, run_key_setup
        from fedsec.auc.fhauc_malicious import MaliciousConfig
        from fedsec.crypto.params import DEFAULT_PRESET

        self.security = security
        self.parties = list(parties)
        names = [f"party-{i}" for i in range(len(self.parties))]
        cfg: Any
        if security == "malicious":
            cfg = MaliciousConfig.create(decision_points, preset=preset or DEFAULT_PRESET,
                                         allow_insecure=allow_insecure, **config)
        else:
            cfg = FHAUCConfig.create(decision_points, preset=preset or DEFAULT_PRESET,
                                     allow_insecure=allow_insecure, **config)
        self.config = cfg
        ks, self.keys = run_key_setup(names, preset=cfg.preset, rotations=cfg.rotations(),
                                      conjugate=True, allow_insecure=allow_insecure)
        assert ks.context is not None
        self._public = ks.context
        self._names = names
        self._session = ks.session
        self._previous: Observed | None = None
        self.last_accepted: float = float("nan")
        # An earlier evaluation under the same keys, of another model (other scores), for
        # the replay and substitution attacks.
        own = self.parties
        self.parties = [(y, np.clip(0.5 * np.asarray(s) + 0.5 * ((np.asarray(s) * 7.3) % 1.0),
                                    0.0, 1.0)) for y, s in own]
        self._evaluate(None)
        self._foreign = self._previous
        self.parties = own

    def _evaluate(self, name: str | None) -> tuple[float | Exception, float]:
        from fedsec.auc.fhauc import FHAUCAggregator, FHAUCParty
        from fedsec.auc.fhauc_malicious import MaliciousAggregator, MaliciousParty

        agg: Any
        roles: list[Any]
        if self.security == "malicious":
            agg = MaliciousAggregator(self._public, self.config, names=self._names,
                                      session=self._session)
            roles = [MaliciousParty(y, s, keys=k, config=self.config)
                     for (y, s), k in zip(self.parties, self.keys, strict=True)]
            start = agg.start([r.commit() for r in roles])
            subs = [r.submit(start) for r in roles]
        else:
            agg = FHAUCAggregator(self._public, self.config, names=self._names,
                                  session=self._session)
            roles = [FHAUCParty(y, s, keys=k, config=self.config)
                     for (y, s), k in zip(self.parties, self.keys, strict=True)]
            subs = [r.submit() for r in roles]
        honest = agg.aggregate(subs)
        prev = getattr(self, "_foreign", None)
        obs = Observed(subs, honest, prev.submissions if prev else None,
                       prev.honest_result if prev else None)
        self._previous = Observed(subs, honest)
        truth = roles[0].finalize(honest) if name is None else None
        if name is None:
            assert truth is not None
            return truth, truth
        forged = attack(name, agg, obs)
        try:
            got: float | Exception = roles[0].finalize(forged)
        except Exception as exc:  # noqa: BLE001 - every rejection counts as detection
            got = exc
        return got, float("nan")

    def trial(self, name: str, honest_auc: float, tol: float) -> str:
        """Run one attacked evaluation: ``"detected"``, ``"changed"`` or ``"unchanged"``."""
        got, _ = self._evaluate(name)
        if isinstance(got, Exception):
            return "detected"
        self.last_accepted = got
        return "changed" if abs(got - honest_auc) > tol else "unchanged"

    def honest(self) -> float:
        got, _ = self._evaluate(None)
        assert isinstance(got, float)
        return got
