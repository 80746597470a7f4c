"""A decrypting Shapley client that solves for other clients' test samples.

From the first-layer outputs it decrypted -- ``y_S = W_S x + b_S`` for coalitions ``S`` of
the run's rounds, on a sample ``x`` of another client -- and the models it knows (every
global model, its own local models, each round's aggregate), the client looks for
combinations ``Σ_S c_S y_S`` whose model ``Σ_S c_S θ_S`` it knows, and solves
``W x = Σ c_S y_S − b`` for the sample by least squares. One such combination pins ``x``
when the known ``W`` has full column rank (a conv layer over a small image, a dense layer
wider than its input); several, from several rounds, stack.

The coordinates are those of :class:`fedsec.shapley.views.ModelSpace`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec.learning.record import TrainingRecord
from fedsec.protocol import wire
from fedsec.protocol.binding import context_of
from fedsec.shapley import secsv as sv
from fedsec.shapley.secsv import runner as sv_runner
from fedsec.shapley.views import ModelSpace

__all__ = ["Decryption", "AttackResult", "SecSVSpy", "solve_samples"]

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class Decryption:
    """One first-layer output a client decrypted: ``outputs[:, j]`` is coalition
    ``mask`` of round ``round``'s output on pooled sample ``samples[j]``."""

    client: int
    round: int
    mask: int
    samples: tuple[int, ...]
    outputs: FloatArray


@dataclass
class AttackResult:
    attacked: int = 0  # (client, other client's sample) pairs with at least one output
    combinations: int = 0  # of those, how many had a known-model combination
    recovered: dict[tuple[int, int], FloatArray] = field(default_factory=dict)
    #: per view, how many independent directions of the sample its known-model
    #: equations pin (numerical rank, singular values above 1e-6 of the largest)
    pinned: dict[tuple[int, int], int] = field(default_factory=dict)


def _first_layer(record: TrainingRecord, vec: FloatArray) -> tuple[FloatArray, FloatArray]:
    """``(W, b)`` of the first layer of the model with coordinates ``vec``."""
    w: FloatArray | None = None
    b: FloatArray | None = None
    off = 0
    for rnd in record.rounds:
        terms: list[tuple[float, Any]] = [(float(vec[off]), rnd.global_params)]
        terms += [(float(vec[off + 1 + i]), p) for i, p in enumerate(rnd.local_params)]
        for coef, params in terms:
            if abs(coef) < 1e-12:
                continue
            wi, bi = record.spec.layers_of(params)[0].matrix()
            w = coef * wi if w is None else w + coef * wi
            b = coef * bi if b is None else b + coef * bi
        off += 1 + len(rnd.participants)
    assert w is not None and b is not None
    return w, b


def solve_samples(record: TrainingRecord, decryptions: Iterable[Decryption],
                  owner: NDArray[Any]) -> AttackResult:
    """Every client's best linear attack on every sample of another client it saw.

    ``record`` stands for what the attacker knows of the models: only the coordinates of
    its known space are ever read from it (the global models, its own models, the
    aggregates)."""
    space = ModelSpace.of_record(record)
    per: dict[tuple[int, int], list[tuple[FloatArray, FloatArray]]] = {}
    for d in decryptions:
        v = space.coalition(d.round, d.mask)
        for j, s in enumerate(d.samples):
            if int(owner[s]) != d.client:
                per.setdefault((d.client, int(s)), []).append((v, d.outputs[:, j]))
    out = AttackResult()
    for (c, s), obs in per.items():
        out.attacked += 1
        v = np.array([o[0] for o in obs])
        known = space.known(c)
        m = np.vstack([v, -known]).T
        _, sing, vt = np.linalg.svd(m)
        rank = int(np.sum(sing > 1e-9 * max(1.0, float(sing.max(initial=0.0)))))
        rows_w, rows_y = [], []
        for z in vt[rank:]:
            coef = z[:len(obs)]
            if np.abs(coef).max() < 1e-9:
                continue
            model = coef @ v  # lies in the client's known span
            if np.abs(model).max() < 1e-9:  # outputs that cancel: no equation
                continue
            w, b = _first_layer(record, model)
            rows_w.append(w)
            rows_y.append(sum(ci * o[1] for ci, o in zip(coef, obs, strict=True)) - b)
        if rows_w:
            out.combinations += 1
            a = np.vstack(rows_w)
            x, *_ = np.linalg.lstsq(a, np.concatenate(rows_y), rcond=None)
            out.recovered[(c, s)] = x
            sing_a = np.linalg.svd(a, compute_uv=False)
            out.pinned[(c, s)] = int(np.sum(sing_a > 1e-6 * sing_a[0]))
    return out


class SecSVSpy:
    """While active: every first-layer output a SecSV client decrypts, per coalition or
    derived, as :class:`Decryption` rows (``decs``) -- what a curious client holds. The
    samples are the ones the request names, else those of P's batch in flight (the paper's
    schedule sends no sample ids; the harness, not the client, knows them)."""

    def __init__(self) -> None:
        self.runs: list[Any] = []
        self.decs: list[Decryption] = []
        self._orig = (sv_runner._setup, sv.SecSVClient.decrypt_layer,  # noqa: SLF001
                      sv.SecSVClient._derive_labels)  # noqa: SLF001

    def __enter__(self) -> SecSVSpy:
        spy = self
        setup, layer, derive = self._orig

        def setup_spy(*a: Any, **k: Any) -> Any:
            run = setup(*a, **k)
            spy.runs.append(run)
            return run

        def rows_of(ctx: Any) -> list[int]:
            run = spy.runs[-1]
            return [int(v) for v in run.P._batches[ctx.index[1]].rows]  # noqa: SLF001

        def layer_spy(self: Any, data: bytes) -> Any:
            meta = wire.decode(data).meta
            ctx = context_of(meta)
            if meta.get("layer") != 0:
                return layer(self, data)
            got: dict[str, np.ndarray] = {}
            feats = self._features

            def grab(*a: Any) -> Any:
                out = feats(*a)
                got["v"] = out
                return out

            self._features = grab
            try:
                return layer(self, data)
            finally:
                del self._features
                if "v" in got:
                    rows = meta.get("samples") or rows_of(ctx)
                    y = got["v"].astype(np.float64) / (meta["weight_sum"]
                                                      * 2.0 ** meta["scale_bits"])
                    spy.decs.append(Decryption(self.index, ctx.round, ctx.index[0],
                                               tuple(rows), y))

        def derive_spy(self: Any, values: Any, parts: list[int], weights: list[int],
                       partner: int, d_out: int, m: int, scale: int) -> Any:
            run = spy.runs[-1]
            t = run.P._round  # noqa: SLF001
            rows = run.A._eval.rows  # noqa: SLF001 - the batch in flight (A knows it)
            me = self.index
            others = [c for c in parts if c != me]
            terms = [(0, 1)] + [(1 << parts.index(c), weights[parts.index(c)])
                                for c in others]
            if len(values) == len(others) + 2:
                pm = (1 << parts.index(me)) | (1 << parts.index(partner))
                terms.append((pm, weights[parts.index(me)] + weights[parts.index(partner)]))
            for j, (mask, q) in enumerate(terms):
                y = values[j].reshape(d_out, m).astype(np.float64) / (q * 2.0 ** scale)
                spy.decs.append(Decryption(me, t, mask, tuple(int(r) for r in rows), y))
            return derive(self, values, parts, weights, partner, d_out, m, scale)

        for owner, name, fn in ((sv_runner, "_setup", setup_spy),
                                (sv.SecSVClient, "decrypt_layer", layer_spy),
                                (sv.SecSVClient, "_derive_labels", derive_spy)):
            setattr(owner, name, fn)
        return self

    def __exit__(self, *exc: Any) -> None:
        for owner, name, fn in zip((sv_runner, sv.SecSVClient, sv.SecSVClient),
                                   ("_setup", "decrypt_layer", "_derive_labels"), self._orig,
                                   strict=True):
            setattr(owner, name, fn)
