"""Fixed point that fits the run: fractional bits per layer from the models' and data's bounds.

SecSV (BFV plaintexts modulo a prime ``t``) and SecretSV (shares modulo ``2^64``) compute
each linear layer ``Σ_{i∈S} q_i (W_i x + b_i)`` exactly in fixed point: model weights carry
``f_θ`` fractional bits, the layer's input ``f_x``, biases ``f_θ + f_x``. The result must stay
below the modulus' half, or it wraps and the prediction is garbage; both protocols refuse a
layer whose a-priori bound reaches it. Fixed scales (the paper's) overflow on models trained
longer or without regularisation, so the principal server chooses the scales **per layer**,
before any model is encrypted, from what the clients publish (:func:`magnitudes`): powers of
two of each model's ``‖W‖_∞`` (max row ℓ1) and ``‖b‖_∞`` per layer, of ``‖X_i‖_∞``, and of
the largest input each hidden layer receives when the client runs the models it knows (its
own local models and the global models) on its own test data.

Bound of layer ``l``'s input for a coalition model ``θ_S`` (a convex combination of the
round's models): the layer-0 input is ``‖X‖``; a hidden layer's is the smaller of

* the **rigorous chain** ``act(max_i (‖W_i‖ H_{l-1} + ‖b_i‖))`` (a convex combination's
  row-ℓ1 norm and bias are at most the largest of its parts'), and
* the **observed** bound: ``2^MARGIN_BITS`` times the largest power of two the clients
  published for that layer in that round (coalition models lie between the models the
  clients ran, so their activations are close; the margin covers the rest).

Then ``f_θ,l + f_x,l = ⌊log2(budget / worst_l)⌋`` with ``worst_l`` the largest over rounds of
``Σ_i q_i (‖W_i‖ H_l + ‖b_i‖)`` (any coalition's weighted sum is at most the sum over all
participants, the global model alone has weight 1), split evenly (``f_θ`` takes the odd
bit), at most 30 each. The protocol's run-time check against the actual re-shared bounds
stays: if a coalition model's activations exceed the observed bound by more than the
margin, the run is refused (never wrapped), naming the layer, the round and the levers.

:func:`logit_error_bound` states the worst-case error of the final scores this plan
permits (rounding of weights, inputs and biases, propagated through the layers); a
prediction can differ from the plaintext model's only where its top two scores are closer
than twice that bound.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec.crypto.sharing import FixedPointOverflow
from fedsec.errors import ProtocolError
from fedsec.learning.model import LayerSpec, ModelSpec, activate, activation_bound

__all__ = ["MARGIN_BITS", "FixedPointPlan", "exp2", "input_exponents", "choose",
           "logit_error_bound", "publish", "read"]

#: Headroom (bits) over the largest hidden-layer input the clients observed.
MARGIN_BITS = 3
MAX_FRAC = 30
#: Below this many fractional bits a layer is refused: its rounding would swamp the model.
MIN_FRAC = 2
LEVERS = ("clipping or regularising the model weights, fewer pinned fractional bits "
          "(--frac-bits), or the largest plaintext modulus (--plain-bits 59, the default)")


def exp2(v: float) -> int:
    """The smallest ``e`` with ``2^e >= v`` (``-64`` for ``v <= 0``)."""
    return -64 if v <= 0 else max(-64, min(128, math.ceil(math.log2(v))))


def input_exponents(spec: ModelSpec, params: Sequence[NDArray[Any]], x: NDArray[Any]
                    ) -> list[int]:
    """Powers of two bounding the input of every hidden layer (layers ``1..L-1``) when
    the model ``params`` runs on ``x`` (rows are samples); ``-64`` where ``x`` is empty."""
    h = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    out = []
    layers = spec.layers_of(params)
    for layer in layers[:-1]:
        h = layer.apply(h) if layer.spec.kind == "gru" else activate(
            layer.activation, layer.linear(h))
        out.append(exp2(float(np.abs(h).max())) if h.size else -64)
    return out


def fan_in(ls: LayerSpec) -> int:
    """Inputs of one output of the layer (a conv kernel's ``C·k²``)."""
    return ls.kernel * ls.kernel * ls.in_shape[0] if ls.kind == "conv2d" else ls.in_features


@dataclass(frozen=True)
class FixedPointPlan:
    """Fractional bits per layer: ``model[l]`` of the weights (``f_θ,l``), ``inputs[l]`` of
    the layer's input (``f_x,l``); biases carry ``model[l] + inputs[l]``. ``headroom[l]``
    is ``log2(budget / worst_l)`` (before flooring); ``input_bounds[l]`` the bound used."""

    model: tuple[int, ...]
    inputs: tuple[int, ...]
    headroom: tuple[float, ...] = ()
    input_bounds: tuple[float, ...] = ()
    #: the largest ``(‖W‖_∞, ‖b‖_∞)`` per layer over the run's models (powers of two)
    norms: tuple[tuple[float, float], ...] = ()

    def scale(self, layer: int) -> int:
        return self.model[layer] + self.inputs[layer]

    def summary(self, spec: ModelSpec) -> dict[str, Any]:
        """What a result reports: the bits per layer and, where the bounds are known, the
        worst-case error of the final scores (:func:`logit_error_bound`)."""
        out: dict[str, Any] = {"frac_model": list(self.model), "frac_inputs": list(self.inputs)}
        if self.norms and self.input_bounds:
            out["score_error_bound"] = logit_error_bound(spec, self, self.norms)
        return out


def choose(spec: ModelSpec, rounds: Sequence[Sequence[tuple[int, Sequence[tuple[int, int]]]]],
           x_exp: int, acts: dict[tuple[int, int], int], budget_bits: float, *,
           protocol: str, frac_model: int | None = None, frac_data: int | None = None,
           frac_hidden: int | None = None) -> FixedPointPlan:
    """The per-layer fractional bits of a run.

    Parameters
    ----------
    spec : ModelSpec
    rounds : per round, the ``(q_i, [(e_β, e_γ) per layer])`` of its models: first the
        global model (``q = 1``), then each participant with its integer weight.
    x_exp : exponent bounding ``‖X‖_∞`` over every client's data.
    acts : ``{(round, layer): e}``, the largest published exponent of layer ``layer``'s
        input (``layer >= 1``); missing entries fall back to the rigorous chain.
    budget_bits : ``log2`` of the largest value a layer's output may reach (with the
        protocol's rounding margin already taken off).
    protocol : the name used in errors.
    frac_model, frac_data, frac_hidden : pinned values (None: chosen).
    """
    try:
        return _choose(spec, rounds, x_exp, acts, budget_bits, protocol, frac_model,
                       frac_data, frac_hidden)
    except FixedPointOverflow:
        raise
    except (OverflowError, ValueError) as exc:  # published magnitudes beyond any float
        raise FixedPointOverflow(f"{protocol}: the published magnitudes of the models and "
                                 f"data exceed any fixed point ({type(exc).__name__}); "
                                 f"{protocol} refuses. Levers: {LEVERS}.") from None


def _choose(spec: ModelSpec, rounds: Sequence[Sequence[tuple[int, Sequence[tuple[int, int]]]]],
            x_exp: int, acts: dict[tuple[int, int], int], budget_bits: float, protocol: str,
            frac_model: int | None, frac_data: int | None, frac_hidden: int | None
            ) -> FixedPointPlan:
    n_layers = len(spec.layers)
    worst = [0.0] * n_layers
    worst_round = [0] * n_layers
    bounds = [0.0] * n_layers
    w_norm = [0.0] * n_layers
    b_norm = [0.0] * n_layers
    for t, models in enumerate(rounds):
        h = 2.0 ** x_exp
        for layer in range(n_layers):
            if layer > 0:  # h still bounds the previous layer's input
                chain = activation_bound(spec.layers[layer - 1].activation, max(
                    2.0 ** eb[layer - 1][0] * h + 2.0 ** eb[layer - 1][1]
                    for _q, eb in models))
                seen = acts.get((t, layer))
                h = chain if seen is None else min(chain, 2.0 ** (seen + MARGIN_BITS))
            glob = 2.0 ** models[0][1][layer][0] * h + 2.0 ** models[0][1][layer][1]
            total = sum(q * (2.0 ** eb[layer][0] * h + 2.0 ** eb[layer][1])
                        for q, eb in models[1:])
            w = max(glob, total)
            w_norm[layer] = max(w_norm[layer], max(2.0 ** eb[layer][0] for _q, eb in models))
            b_norm[layer] = max(b_norm[layer], max(2.0 ** eb[layer][1] for _q, eb in models))
            if w > worst[layer]:
                worst[layer], worst_round[layer] = w, t
            bounds[layer] = max(bounds[layer], h)
    fm: list[int] = []
    fx: list[int] = []
    room_log = []
    for layer in range(n_layers):
        room_f = budget_bits - math.log2(max(worst[layer], 2.0 ** -60))
        room = math.floor(room_f)
        room_log.append(room_f)
        pin_x = frac_data if layer == 0 else frac_hidden
        if frac_model is not None and pin_x is not None:
            m, xb = frac_model, pin_x
        elif frac_model is not None:
            m, xb = frac_model, min(MAX_FRAC, room - frac_model)
        elif pin_x is not None:
            m, xb = min(MAX_FRAC, room - pin_x), pin_x
        else:  # split evenly: on the MNIST CNN trained for T = 16 rounds, the even
            # split changed 4 of 198,400 coalition predictions, 4 more bits to the weights
            # 28, 4 more to the inputs 7 (benchmarks/fixed_point_split.py)
            m = min(MAX_FRAC, room - room // 2)
            xb = min(MAX_FRAC, room - m)
        pinned = frac_model is not None and pin_x is not None  # kept; checked at run time
        if not pinned and (m < MIN_FRAC or xb < MIN_FRAC):
            raise FixedPointOverflow(
                f"{protocol}: layer {layer + 1} in round {worst_round[layer] + 1}: the models' "
                f"and data's magnitudes (a linear output up to {worst[layer]:.3g} in real "
                f"units) leave {room} fractional bits (f_θ + f_x) within the modulus, and "
                f"{protocol} refuses rather than wrap"
                + (f" (pinned: f_θ = {frac_model}, f_x = {pin_x})"
                   if frac_model is not None or pin_x is not None else "")
                + f". Levers: {LEVERS}.")
        fm.append(m)
        fx.append(xb)
    return FixedPointPlan(tuple(fm), tuple(fx), tuple(room_log), tuple(bounds),
                          tuple(zip(w_norm, b_norm, strict=True)))


def logit_error_bound(spec: ModelSpec, plan: FixedPointPlan,
                      norms: Sequence[tuple[float, float]]) -> float:
    """Worst-case absolute error of the final scores under ``plan``: per layer, the
    weights' rounding (``2^-(f_θ+1)`` each, times the ℓ1 of a row's inputs), the input's
    (``2^-(f_x+1)`` times ``‖W‖``) and the bias' (``2^-(f_θ+f_x+1)``), plus the incoming
    error times ``‖W‖``, through the activation's Lipschitz constant on its range.
    ``norms`` are the largest ``(‖W‖_∞, ‖b‖_∞)`` per layer of any model of the run."""
    err = 0.0
    for layer, ls in enumerate(spec.layers):
        w_norm = norms[layer][0]
        h = plan.input_bounds[layer] if plan.input_bounds else 1.0
        lin = (w_norm * (err + 2.0 ** -(plan.inputs[layer] + 1))
               + fan_in(ls) * (h + err) * 2.0 ** -(plan.model[layer] + 1)
               + 2.0 ** -(plan.scale(layer) + 1))
        if layer == len(spec.layers) - 1:
            return lin
        out = w_norm * h + norms[layer][1]
        lip = {"identity": 1.0, "relu": 1.0, "sigmoid": 0.25, "tanh": 1.0}.get(
            ls.activation, 2.0 * out + lin)  # square: |a² - b²| <= (2|a| + |a-b|)|a-b|
        err = lip * lin
    return err


# ------------------------------------------------------------------ what clients publish
def publish(spec: ModelSpec, models: Sequence[tuple[int, str, Sequence[NDArray[Any]]]],
            known: Sequence[tuple[int, Sequence[NDArray[Any]]]], x: NDArray[Any]
            ) -> dict[str, Any]:
    """A client's published magnitudes (exponents only): ``x`` for ``‖X_i‖_∞``;
    ``models``: per model it uploads ``[round, key, [[e(‖W‖_∞), e(‖b‖_∞)] per layer]]``
    (the linear map of each layer: a conv layer's kernel matrix has the unrolled
    matrix's row ℓ1 norms); ``acts``: per round, the largest input of each hidden layer
    over the models it ran on its own data (``models`` and ``known``, e.g. the public
    global models)."""
    entries = []
    acts: dict[int, list[int]] = {}

    def seen(rnd: int, params: Sequence[NDArray[Any]]) -> None:
        if len(spec.layers) > 1:
            e = input_exponents(spec, params, x)
            acts[rnd] = [max(a, b) for a, b in zip(acts.get(rnd, e), e, strict=True)]

    for rnd, key, params in models:
        norms = []
        for layer in spec.layers_of(params):
            if layer.spec.kind == "conv2d":  # the kernel matrix: the unrolled one's norms
                w, b = layer.params[0].reshape(layer.spec.out_channels, -1), layer.params[1]
            else:
                w, b = layer.matrix()
            norms.append([exp2(float(np.abs(w).sum(axis=1).max())),
                          exp2(float(np.abs(b).max()) if b.size else 0.0)])
        entries.append([rnd, key, norms])
        seen(rnd, params)
    for rnd, params in known:
        seen(rnd, params)
    return {"x": exp2(float(np.abs(x).max())) if x.size else -64, "models": entries,
            "acts": [[rnd, e] for rnd, e in sorted(acts.items())]}


def read(published: Sequence[Any], rounds: Sequence[Sequence[tuple[str, int]]],
         n_layers: int) -> tuple[list[list[tuple[int, list[tuple[int, int]]]]], int,
                                 dict[tuple[int, int], int]]:
    """The clients' :func:`publish` dicts (another role's bytes: ``ProtocolError`` on
    anything malformed) as :func:`choose`'s ``rounds``, ``x_exp`` and ``acts``;
    ``rounds[t]`` lists the round's ``(key, q)``, the global model first."""
    ex = -64
    bounds: dict[tuple[int, str], list[tuple[int, int]]] = {}
    acts: dict[tuple[int, int], int] = {}

    def exponent(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or not -64 <= v <= 128:
            raise ProtocolError("malformed bounds")
        return v

    for pub in published:
        if not isinstance(pub, dict):
            raise ProtocolError("malformed bounds")
        models, seen = pub.get("models"), pub.get("acts", [])
        if not isinstance(models, list) or not isinstance(seen, list):
            raise ProtocolError("malformed bounds")
        ex = max(ex, exponent(pub.get("x")))
        for entry in models:
            if not isinstance(entry, list) or len(entry) != 3 or not isinstance(
                    entry[1], str) or not isinstance(entry[2], list) or len(
                    entry[2]) != n_layers:
                raise ProtocolError("malformed bounds")
            pairs = []
            for pair in entry[2]:
                if not isinstance(pair, list) or len(pair) != 2:
                    raise ProtocolError("malformed bounds")
                pairs.append((exponent(pair[0]), exponent(pair[1])))
            bounds[(exponent(entry[0]), entry[1])] = pairs
        for entry in seen:
            if not isinstance(entry, list) or len(entry) != 2 or not isinstance(
                    entry[1], list) or len(entry[1]) != n_layers - 1:
                raise ProtocolError("malformed bounds")
            rnd = exponent(entry[0])
            for layer, e in enumerate(entry[1], start=1):
                acts[(rnd, layer)] = max(acts.get((rnd, layer), -64), exponent(e))
    per_round = []
    for t, keys in enumerate(rounds):
        models_t = []
        for key, q in keys:
            if (t, key) not in bounds:
                raise ProtocolError(f"no bounds for model {key} of round {t}")
            models_t.append((q, bounds[(t, key)]))
        per_round.append(models_t)
    return per_round, ex, acts
