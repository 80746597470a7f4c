"""FedAvg with recorded rounds: determinism, participation, θ_S, records as bytes."""

from __future__ import annotations

import numpy as np
import pytest

from fedsec.errors import ProtocolError
from fedsec.learning.model import aggregate
from fedsec.learning.record import TrainingRecord
from fedsec.learning.tasks import make_task

pytest.importorskip("torch", reason="training needs fedsec[learning] (torch)")
from fedsec.learning.fedavg import run_fedavg  # noqa: E402


@pytest.fixture(scope="module")
def small() -> tuple[object, object, TrainingRecord]:
    task = make_task("bank", n_samples=400, seed=1)
    fed = task.federate(4, seed=1)
    return task, fed, run_fedavg(task, fed, rounds=3, seed=2)


def test_rounds_are_recorded(small: tuple) -> None:
    task, fed, rec = small
    assert rec.n_rounds == 3 and rec.n_clients == 4
    for t, r in enumerate(rec.rounds):
        assert r.participants == (0, 1, 2, 3)
        np.testing.assert_array_equal(r.weights, [len(c.y_train) for c in fed.clients])
        # θ^{t+1} is the FedAvg aggregate of round t (as the clients receive it, float32)
        nxt = rec.rounds[t + 1].global_params if t + 1 < rec.n_rounds else rec.final_params
        agg = r.model(r.participants)
        for a, b in zip(agg, nxt, strict=True):
            np.testing.assert_array_equal(a.astype(np.float32), b)
    r = rec.rounds[1]
    # θ_∅ = θ^t, θ_{i} = θ_i, θ_S = Σ ω_{i|S} θ_i
    np.testing.assert_array_equal(r.model([])[0], r.global_params[0])
    np.testing.assert_array_equal(r.model([2])[0], r.local_params[2][0])
    want = aggregate([r.local_params[0], r.local_params[3]], r.weights[[0, 3]])
    np.testing.assert_allclose(r.model_of_mask(0b1001)[0], want[0])


def test_training_is_reproducible(small: tuple) -> None:
    task, fed, rec = small
    again = run_fedavg(task, fed, rounds=3, seed=2)
    assert again.to_bytes() == rec.to_bytes()
    other = run_fedavg(task, fed, rounds=1, seed=3)
    assert not np.array_equal(other.rounds[0].local_params[0][0],
                              rec.rounds[0].local_params[0][0])


def test_partial_participation() -> None:
    task = make_task("bank", n_samples=300, seed=0)
    fed = task.federate(5, seed=0)
    rec = run_fedavg(task, fed, rounds=4, participation=0.6, seed=0)
    sizes = {len(r.participants) for r in rec.rounds}
    assert sizes == {3}
    assert len({r.participants for r in rec.rounds}) > 1
    with pytest.raises(ValueError):
        r = rec.rounds[0]
        r.model([c for c in range(5) if c not in r.participants][:1])


def test_record_bytes_roundtrip(small: tuple) -> None:
    _, _, rec = small
    data = rec.to_bytes()
    back = TrainingRecord.from_bytes(data)
    assert back.spec == rec.spec and back.n_clients == rec.n_clients
    assert back.meta == rec.meta
    for a, b in zip(back.rounds, rec.rounds, strict=True):
        assert a.participants == b.participants
        np.testing.assert_array_equal(a.weights, b.weights)
        for x, y in zip(a.local_params, b.local_params, strict=True):
            for p, q in zip(x, y, strict=True):
                np.testing.assert_array_equal(p, q)
    assert back.to_bytes() == data


def test_record_decoding_is_defensive(small: tuple) -> None:
    _, _, rec = small
    data = rec.to_bytes()
    for bad in (b"", b"garbage", data[: len(data) // 2], data[:-7]):
        with pytest.raises(ProtocolError):
            TrainingRecord.from_bytes(bad)
    # flip bytes all over: never anything but ProtocolError (or a valid record)
    rng = np.random.default_rng(0)
    for _ in range(200):
        buf = bytearray(data)
        for pos in rng.integers(0, len(buf), size=3):
            buf[int(pos)] ^= 0xFF
        try:
            TrainingRecord.from_bytes(bytes(buf))
        except ProtocolError:
            pass


def test_federation_split(small: tuple) -> None:
    task, fed, _ = small
    assert fed.n_clients == 4
    assert sum(len(c.y_train) for c in fed.clients) == len(task.data.y_train)
    assert len(fed.y_test) == len(task.data.y_test)
    for j, c in enumerate(fed.clients):
        np.testing.assert_array_equal(fed.y_test[fed.owners == j], c.y_test)
