"""How SecSV's fixed point should split each layer's room between weights and inputs.

SecSV computes every layer ``Σ_i q_i (W_i^q x^q + b_i^q)`` exactly in fixed point and the
decrypting client divides by ``Σ q_i · 2^(f_θ+f_x)``, activates and re-encodes; only the
rounding of weights (``f_θ``), inputs (``f_x``) and biases separates its predictions from
the plaintext model's. This script replays that arithmetic in the clear (no encryption:
the protocol's result is bit-for-bit this one) for every coalition model of every round
of the MNIST CNN trained by FedAvg, with the room P's plan gives each layer
(:func:`fedsec.shapley.fixed_point.choose` from the bounds the clients publish), and
counts the predictions that differ from the float model's, for several splits of the room
(``f_θ - f_x`` per layer).

Usage::

    PYTHONPATH=src .venv/bin/python benchmarks/fixed_point_split.py --rounds 16
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from fedsec.crypto.bfv import BFV_DEFAULT
from fedsec.learning.fedavg import run_fedavg
from fedsec.learning.model import activate, forward
from fedsec.learning.tasks import make_task
from fedsec.shapley import fixed_point as fp
from fedsec.shapley.secure_game import integer_weights


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=16, help="FedAvg rounds T")
    ap.add_argument("--samples", type=int, default=2000, help="MNIST images used")
    ap.add_argument("--plain-bits", type=int, default=BFV_DEFAULT.plain_bits,
                    help="bits of the BFV plaintext prime")
    ap.add_argument("--skews", default="0,0,0;0,4,4;0,-4,-4;0,8,0;0,0,8",
                    help="splits to try: f_θ - f_x per layer, ';' between splits")
    args = ap.parse_args()
    task = make_task("mnist", n_samples=args.samples, seed=0)
    fed = task.federate(5, alpha=0.5, seed=0)
    rec = run_fedavg(task, fed, rounds=args.rounds, seed=0)
    spec = rec.spec
    sets = [(c.x_test, c.y_test) for c in fed.clients]
    pubs = []
    for i, (x, _y) in enumerate(sets):
        mine = [(t, "global", r.global_params) for t, r in enumerate(rec.rounds)]
        mine += [(t, f"c{i}", p) for t, r in enumerate(rec.rounds)
                 for c, p in zip(r.participants, r.local_params, strict=True) if c == i]
        pubs.append(fp.publish(spec, mine, [], x))
    keys = [[("global", 1)] + [(f"c{c}", int(q)) for c, q in zip(
        r.participants, integer_weights(np.asarray(r.weights)), strict=True)]
        for r in rec.rounds]
    per_round, ex, acts = fp.read(pubs, keys, len(spec.layers))
    auto = fp.choose(spec, per_round, ex, acts, math.log2(2.0 ** args.plain_bits / 8),
                     protocol="SecSV")
    rooms = [math.floor(h) for h in auto.headroom]
    x_all = np.concatenate([x for x, _ in sets])
    print(f"MNIST CNN, T = {args.rounds}, {len(x_all)} test samples, t = 2^{args.plain_bits}"
          f"; room f_θ + f_x per layer {rooms}; input bounds {auto.input_bounds}")

    def fixed_forward(plan: fp.FixedPointPlan, models: list, q: list[int]) -> np.ndarray:
        h = x_all
        for layer in range(len(spec.layers)):
            fm, fx = plan.model[layer], plan.inputs[layer]
            hq = np.rint(np.ldexp(h, fx))
            acc = 0.0
            for params, qi in zip(models, q, strict=True):
                w, b = spec.layers_of(params)[layer].matrix()
                acc = acc + qi * (hq @ np.rint(np.ldexp(w, fm)).T
                                  + np.rint(np.ldexp(b, fm + fx)))
            h = activate(spec.layers[layer].activation, acc / (sum(q) * 2.0 ** (fm + fx)))
        return h

    plans = {"chosen": auto}
    for skew in args.skews.split(";"):
        offs = [int(v) for v in skew.split(",")]
        ms = tuple(min(30, (r + o + 1) // 2) for r, o in zip(rooms, offs, strict=True))
        plans[f"f_θ - f_x = {skew}"] = fp.FixedPointPlan(
            ms, tuple(min(30, r - m) for r, m in zip(rooms, ms, strict=True)))
    for name, plan in plans.items():
        flips = total = 0
        for rnd in rec.rounds:
            qs = integer_weights(np.asarray(rnd.weights))
            k = len(rnd.participants)
            for mask in range(1, 1 << k):
                sel = [j for j in range(k) if mask >> j & 1]
                got = fixed_forward(plan, [rnd.local_params[j] for j in sel],
                                    [int(qs[j]) for j in sel])
                ref = forward(spec, rnd.model_of_mask(mask), x_all)
                flips += int((got.argmax(1) != ref.argmax(1)).sum())
                total += len(x_all)
        print(f"{name:>24}: weights {plan.model}, inputs {plan.inputs}: "
              f"{flips} of {total} predictions differ from the float model's")


if __name__ == "__main__":
    main()
