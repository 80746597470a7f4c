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
from fedsec.protocol.binding import CTX, RE, RID  # noqa: E402
from fedsec.protocol.network import Network  # noqa: E402
from fedsec.shapley import secretsv as ssv  # noqa: E402
from fedsec.shapley import secsv as sv  # noqa: E402
from fedsec.shapley.secure_game import plan_groups  # noqa: E402

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
    log = fz.tap(r)
    out = r.evaluate(t, mask, None)
    return log, out


def _rounds(run: Any, clone: Callable[[Any], Any], setup: fz.Recorder | None = None) -> Run:
    setup = fz.recorder_of(run) if setup is None else setup
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


def secretsv_run(rec: TrainingRecord, sets: list[tuple[np.ndarray, np.ndarray]]
                 ) -> tuple[Any, fz.Recorder]:
    """What :func:`fedsec.shapley.secretsv.secretsv_shapley` sets up, step by step (over a
    network whose messages the returned recorder keeps)."""
    n = rec.n_clients
    groups, strong = plan_groups(n, len(rec.spec.layers))
    rounds = [(r.participants, np.asarray(r.weights)) for r in rec.rounds]
    clients = [ssv.SecretSVClient(i, n, rec.spec, x, y) for i, (x, y) in enumerate(sets)]
    P = ssv.SecretSVPrincipal(rec.spec, rounds, n_clients=n)
    A = ssv.SecretSVAuxiliary(rec.spec, rounds, n_clients=n)
    dealer = ssv.Dealer()
    run = ssv.SecretSVRun(rec, Network(), clients, P, A, dealer, len(groups),
                          sum(len(y) for _, y in sets), leader=0)
    acc = fz.tap(run)
    net = run.net
    ssv.open_session(net, clients, P, A, dealer, rec)
    names = [c.name for c in clients]
    to_p, to_a = zip(*(c.share_data() for c in clients), strict=True)
    P.receive_data(net.gather(names, "P", list(to_p)))
    A.receive_data(net.gather(names, "A", list(to_a)))
    A.receive_order(net.send("P", "A", P.order_batches(groups, strong=strong)))
    return run, acc


def secretsv_runs() -> list[Run]:
    rec, sets = record()
    out = []
    for _ in range(2):
        run, setup = secretsv_run(rec, sets)
        out.append(_rounds(run, fz.clone_trun, setup))
    return out


def splice(donor: bytes, honest: bytes) -> bytes:
    """``donor``'s content with ``honest``'s binding (context and ids): what a receiver
    without binding could not tell from the honest message."""
    d, h = wire.decode(donor), wire.decode(honest)
    meta = {k: v for k, v in d.meta.items() if k not in BINDING_KEYS}
    meta.update({k: v for k, v in h.meta.items() if k in BINDING_KEYS})
    return fz._encode_loose(d.kind, meta, list(d.blobs))  # noqa: SLF001


def nth(log: fz.Recorder, kind: str, k: int) -> tuple[str, str, bytes]:
    return log.of(kind)[k]
