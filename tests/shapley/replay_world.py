"""Honest SecSV and SecretSV runs to replay from (test-side scaffold of test_replay.py).

Five clients, a three-layer model ``dense(3,4,square) -> dense(4,4,square) -> dense(4,2)``
(two re-shares of the same shape, so a share of one layer fits another), three test
samples each, two rounds. For each protocol: two runs (two sessions) and, per run, the
roles just before round 0 and round 1 are evaluated; honest evaluations are recorded
message by message (:class:`fuzz_shapley.Recorder`) for the donors of every replay.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
import fuzz_shapley as fz  # noqa: E402

from fedsec.learning.model import LayerSpec, ModelSpec  # noqa: E402
from fedsec.learning.record import RoundRecord, TrainingRecord  # noqa: E402
from fedsec.protocol import wire  # noqa: E402
from fedsec.shapley import secretsv as ssv  # noqa: E402
from fedsec.shapley import secsv as sv  # noqa: E402
from fedsec.shapley.binding import CTX, RE, RID  # noqa: E402
from fedsec.shapley.secure_game import plan_groups, shuffle  # noqa: E402

N = 5
MAIN, OTHER_MASK = 0b00011, 0b00101
# the binding, and the "layer" field a request repeats from its context
BINDING_KEYS = (CTX, RID, RE, "ev", "layer")


def record() -> tuple[TrainingRecord, list[tuple[np.ndarray, np.ndarray]]]:
    rng = np.random.default_rng(5)
    spec = ModelSpec("tiny3", (LayerSpec.dense(3, 4, "square"), LayerSpec.dense(4, 4, "square"),
                               LayerSpec.dense(4, 2)))
    rounds = []
    for _ in range(2):
        params = [spec.init_params(rng) for _ in range(N + 1)]
        rounds.append(RoundRecord(params[0], tuple(range(N)), tuple(params[1:]),
                                  np.arange(1.0, N + 1.0)))
    rec = TrainingRecord(spec, N, tuple(rounds), rounds[-1].global_params)
    sets = [(rng.normal(size=(3, 3)), rng.integers(0, 2, 3).astype(np.int64))
            for _ in range(N)]
    return rec, sets


@dataclass
class Run:
    """One protocol run: the roles ready to evaluate round 0 / round 1."""

    before: dict[int, Any]  # round -> the run just before its evaluations
    setup: fz.Recorder  # the set-up's messages and every model upload
    logs: dict[tuple[int, int], tuple[fz.Recorder, np.ndarray]] = field(default_factory=dict)


def _evaluate(base: Any, clone: Callable[[Any], Any], t: int, mask: int
              ) -> tuple[fz.Recorder, np.ndarray]:
    r = clone(base)
    log = fz.use_recorder(r, fz.Recorder())
    out = r.evaluate(t, mask, None)
    return log, out


def _rounds(run: Any, clone: Callable[[Any], Any]) -> Run:
    setup = fz.recorder_of(run)
    run.upload_round(0)
    r0 = clone(run)
    run.end_round(0)
    run.upload_round(1)
    out = Run({0: r0, 1: clone(run)}, setup)
    for t, mask in ((0, MAIN), (0, OTHER_MASK), (1, MAIN)):
        out.logs[(t, mask)] = _evaluate(out.before[t], clone, t, mask)
    return out


def secsv_runs() -> list[Run]:
    rec, sets = record()
    runs = []
    for _ in range(2):
        log = fz.Recorder()
        run = sv._setup(rec, sets, sv.SecSVConfig().check(), fz.recorder_net(log),  # noqa: SLF001
                        True)
        run._fz_recorder = log  # noqa: SLF001 - the set-up's messages (fz.recorder_of)
        runs.append(_rounds(run, fz.clone_srun))
    return runs


def secretsv_run(rec: TrainingRecord, sets: list[tuple[np.ndarray, np.ndarray]]) -> Any:
    """What :func:`fedsec.shapley.secretsv.secretsv_shapley` sets up, step by step."""
    n, acc = rec.n_clients, fz.Recorder()
    groups, strong = plan_groups(n, len(rec.spec.layers))
    clients = [ssv._Client(i, n, rec.spec, x, y)  # noqa: SLF001
               for i, (x, y) in enumerate(sets)]
    P = ssv._Server("P", rec.spec, n_clients=n)  # noqa: SLF001
    A = ssv._Server("A", rec.spec, n_clients=n)  # noqa: SLF001
    dealer = ssv.Dealer()
    ssv.open_session(acc, clients, P, A, dealer)
    to_p, to_a = zip(*(c.share_data(acc) for c in clients), strict=True)
    P.receive_data([acc.message(f"client:{i}", "P", "data", d) for i, d in enumerate(to_p)])
    A.receive_data([acc.message(f"client:{i}", "A", "data", d) for i, d in enumerate(to_a)])
    order = [shuffle(np.flatnonzero(np.isin(P.owner, g))) for g in groups]
    A.receive_order(acc.message("P", "A", "batches", P.order_message(order)))
    return ssv._Run(rec, acc, clients, P, A, dealer, groups,  # noqa: SLF001
                    strong, order, leader=0)


def secretsv_runs() -> list[Run]:
    rec, sets = record()
    return [_rounds(secretsv_run(rec, sets), fz.clone_trun) for _ in range(2)]


def splice(donor: bytes, honest: bytes) -> bytes:
    """``donor``'s content with ``honest``'s binding (context and ids): what a receiver
    without binding could not tell from the honest message."""
    d, h = wire.decode(donor), wire.decode(honest)
    meta = {k: v for k, v in d.meta.items() if k not in BINDING_KEYS}
    meta.update({k: v for k, v in h.meta.items() if k in BINDING_KEYS})
    return fz._encode_loose(d.kind, meta, list(d.blobs))  # noqa: SLF001


def nth(log: fz.Recorder, kind: str, k: int) -> tuple[str, str, bytes]:
    return log.of(kind)[k]
