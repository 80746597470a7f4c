"""What SecSV and SecretSV share: Prop. 6.8's decryptor rules, integer aggregation
weights, the secure utility oracle with SampleSkip (Alg. 6-7) and the round loop.

Both protocols import this module, never each other.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from fedsec.crypto.drbg import SystemRandomSource
from fedsec.errors import ProtocolError
from fedsec.learning.model import activation_bound
from fedsec.learning.record import TrainingRecord
from fedsec.metrics.shapley import shapley_values
from fedsec.protocol.accounting import Accounting
from fedsec.shapley.fsv import round_rng
from fedsec.shapley.rounds import RoundTimer, rounds_to_play
from fedsec.shapley.secure_common import SecureShapleyResult
from fedsec.shapley.utility import SkipStats, ascending_table, find_skippable

__all__ = ["integer_weights", "plan_groups", "decryptor_chain", "check_decryptor",
           "reshare_cap",
           "SecureRun", "SecureRoundGame", "run_rounds", "shuffle"]

BoolArray = NDArray[np.bool_]
Progress = Callable[[str], None]


class SecureRun(Protocol):
    """What the round loop needs from a protocol run."""

    record: TrainingRecord

    @property
    def acc(self) -> Accounting: ...

    @property
    def n_samples(self) -> int: ...

    def upload_round(self, t: int) -> None: ...

    def end_round(self, t: int) -> None: ...

    def evaluate(self, t: int, mask: int, rows: NDArray[np.int64] | None) -> BoolArray: ...


def integer_weights(weights: NDArray[Any], bits: int = 12) -> NDArray[np.int64]:
    """Integer aggregation weights ``q_i`` with ``q_i / Σ_S q = ω_{i|S}``: FedAvg's own
    weights divided by their gcd when they are integers (exact), else ``ω`` rounded to
    ``bits`` bits relative to the largest."""
    w = np.asarray(weights, dtype=np.float64)
    if w.size and np.all(w == np.rint(w)) and w.max() < 2**20:
        ints = w.astype(np.int64)
        g = math.gcd(*[int(v) for v in ints if v]) or 1
        return ints // g
    top = float(w.max()) if w.size else 1.0
    out: NDArray[np.int64] = np.maximum(np.rint(w / top * 2**bits),
                                        (w > 0).astype(np.float64)).astype(np.int64)
    return out




def reshare_cap(announced: tuple[int, int, int] | None, activation: str,
                frac_next: int) -> int | None:
    """The largest re-share bound an honest client can announce for a layer whose
    decryption request announced ``(bound, weight_sum, scale_bits)``: the activation's
    largest output over ``|y| <= bound / (weight_sum·2^scale_bits)`` in fixed point at
    ``frac_next`` bits, rounded up to a power of two (the client's own rounding). None
    when nothing was announced or the cap is beyond any ring the protocols use."""
    if announced is None:
        return None
    bound, wsum, scale = announced
    if wsum < 1:
        return None
    top = activation_bound(activation, bound / (wsum * 2.0 ** scale)) * 2.0 ** frac_next
    if not math.isfinite(top) or top >= 2.0 ** 62:
        return None
    v = top * (1.0 + 1e-9) + 1.0
    return 1 if v <= 1 else 1 << math.ceil(math.log2(v))


# ====================================================================== Prop. 6.8
def plan_groups(n: int, n_layers: int) -> tuple[list[list[int]], bool]:
    """Partition clients into batch-owner groups; return ``(groups, strong)``.

    A group leaves enough clients outside it (and outside a model owner) for a decryptor
    chain: ``L`` distinct ones for the multi-layer level (``strong``), two alternating ones
    otherwise (one for ``L = 1``). Raises ``ValueError`` when not even that is possible.
    """
    need_strong = n_layers
    need_weak = min(n_layers, 2)
    g = n - 1 - need_strong
    strong = g >= 1
    if not strong:
        g = n - 1 - need_weak
        if g < 1:
            raise ValueError(
                f"SecSV needs at least {need_weak + 2} clients for a {n_layers}-layer model "
                f"(a batch owner, a model owner and {need_weak} decrypting client(s) that "
                f"are neither; Zheng et al., Prop. 6.8). Got {n} clients instead.")
    clients = list(range(n))
    return [clients[k:k + g] for k in range(0, n, g)], strong


def decryptor_chain(n: int, n_layers: int, batch_owners: Sequence[int],
                    model_owners: Sequence[int], strong: bool, turn: int = 0) -> list[int]:
    """``i_2 .. i_{L+1}`` for one batch and model under Prop. 6.8's rules (see module)."""
    eligible = [c for c in range(n) if c not in set(batch_owners) | set(model_owners)]
    need = n_layers if strong else min(n_layers, 2)
    if len(eligible) < need:
        raise ValueError("not enough clients outside the batch's and the model's owners to "
                         "decrypt (Zheng et al., Prop. 6.8)")
    start = turn % len(eligible)
    picked = [eligible[(start + k) % len(eligible)] for k in range(need)]
    return [picked[k % need] for k in range(n_layers)]


def check_decryptor(me: int, layer: int, n_layers: int, batch_owners: Sequence[int],
                    model_owners: Sequence[int], previous: int) -> None:
    """A client's own check of a decryption request (raises ``ProtocolError``)."""
    if me in model_owners:
        raise ProtocolError("refusing to decrypt: I own the model under test")
    if layer == 0 and me in batch_owners:
        raise ProtocolError("refusing to decrypt: I own samples of this batch (i_2 = i_1)")
    if layer == n_layers - 1 and me in batch_owners:
        raise ProtocolError("refusing to decrypt the last layer of my own samples")
    if me == previous:
        raise ProtocolError("refusing to decrypt two consecutive layers (i_{l+1} = i_l)")




@dataclass
class SecureRoundGame:
    """Utility oracle of round ``t`` over a secure protocol, with SampleSkip at the
    principal server (mirrors :class:`~fedsec.shapley.utility.RoundGame` exactly)."""

    run: SecureRun
    t: int
    sample_skip: bool
    models_tested: int = 0
    samples_tested: int = 0
    stats: SkipStats = field(default_factory=SkipStats)
    _values: dict[int, float] = field(default_factory=dict)
    _correct: dict[int, BoolArray] = field(default_factory=dict)
    _started: bool = False

    @property
    def k(self) -> int:
        return len(self.run.record.rounds[self.t].participants)

    def value(self, mask: int) -> float:
        full = (1 << self.k) - 1
        if not 0 <= mask <= full:
            raise ValueError(f"mask must lie in 0..{full}. Got {mask} instead.")
        if mask in self._values:
            return self._values[mask]
        if self.sample_skip and not self._started:
            self._started = True
            for j in range(self.k):
                self.value(1 << j)
        m = self.run.n_samples
        if mask == 0 or mask.bit_count() == 1 or not self.sample_skip:
            ok = self.run.evaluate(self.t, mask, None)
            self.samples_tested += m
        else:
            with self.run.acc.timed("other"):
                skip = self.find_skippable(mask)
            rows = np.flatnonzero(~skip)
            ok = skip.copy()
            if rows.size:
                ok[rows] = self.run.evaluate(self.t, mask, rows)
            self.samples_tested += int(rows.size)
            self.stats.skipped += int(skip.sum())
            self.stats.slots += m
        self.models_tested += 1
        if mask != 0:
            self._correct[mask] = ok
        v = float(ok.mean())
        self._values[mask] = v
        return v

    def find_skippable(self, mask: int) -> BoolArray:
        return find_skippable(self._correct, mask, self.run.n_samples)

    def table(self) -> NDArray[np.float64]:
        return ascending_table(self.value, self.k)




def shuffle(rows: NDArray[np.int64]) -> NDArray[np.int64]:
    if rows.size < 2:
        return rows
    out: NDArray[np.int64] = rows[SystemRandomSource().permutation(rows.size)]
    return out





def run_rounds(run: SecureRun, estimator: str, budget: int, sample_skip: bool, seed: int,
               progress: Progress | None, protocol: str) -> SecureShapleyResult:
    """Every round: upload, exact table or estimator over :class:`SecureRoundGame`.

    The rounds are those of :func:`~fedsec.shapley.rounds.rounds_to_play` (all, in order,
    unless a parallel worker is handed them one at a time); ``progress`` gets one line per
    round with its time, the time elapsed and an ETA."""
    from fedsec.shapley.estimators import (
        group_testing,
        gtg_shapley,
        kernel_shap,
        permutation_sampling,
    )

    record = run.record
    n, t_rounds = record.n_clients, record.n_rounds
    ssv = np.zeros((t_rounds, n))
    tables: list[NDArray[np.float64]] = []
    stats = SkipStats()
    models = samples = 0
    timer = RoundTimer(t_rounds)
    for t in rounds_to_play(record):
        rnd = record.rounds[t]
        timer.round_started()
        run.upload_round(t)
        game = SecureRoundGame(run, t, sample_skip)
        if estimator == "exact":
            table = game.table()
            phi = shapley_values(table)
            tables.append(table)
        else:
            fn = {"ps": permutation_sampling, "gt": group_testing, "ks": kernel_shap,
                  "gtg": gtg_shapley}[estimator]
            phi = fn(game, budget, round_rng(seed, record, t))
        for j, c in enumerate(rnd.participants):
            ssv[t, c] = phi[j]
        models += game.models_tested
        samples += game.samples_tested
        stats.add(game.stats)
        run.end_round(t)
        took = timer.done()
        if progress is not None:
            progress(timer.line(t, took, f"{game.models_tested} models tested"))
    return SecureShapleyResult(ssv.sum(axis=0), ssv, estimator, budget or None, sample_skip,
                               tables if estimator == "exact" else None,
                               [r.participants for r in record.rounds], models, samples, 0.0,
                               stats, protocol=protocol)
