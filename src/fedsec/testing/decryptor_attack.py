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
from fedsec.shapley.views import ModelSpace

__all__ = ["Decryption", "AttackResult", "solve_samples"]

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
