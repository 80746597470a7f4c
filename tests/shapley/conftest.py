"""Small trained federations shared by the Shapley tests (seconds to train)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from fedsec.learning.record import TrainingRecord
from fedsec.learning.tasks import Federation, Task, make_task


@dataclass
class Trained:
    task: Task
    fed: Federation
    record: TrainingRecord

    @property
    def x(self) -> np.ndarray:
        return self.fed.x_test

    @property
    def y(self) -> np.ndarray:
        return self.fed.y_test


def _train(name: str, n_samples: int, clients: int, rounds: int, seed: int,
           participation: float = 1.0) -> Trained:
    pytest.importorskip("torch", reason="training needs fedsec[learning] (torch)")
    from fedsec.learning.fedavg import run_fedavg

    task = make_task(name, n_samples=n_samples, seed=seed)
    fed = task.federate(clients, seed=seed)
    return Trained(task, fed, run_fedavg(task, fed, rounds=rounds, seed=seed,
                                         participation=participation))


@pytest.fixture(scope="session")
def agnews_small() -> Trained:
    """A 4-class logistic classifier, 5 clients, 3 rounds."""
    return _train("agnews", 600, 5, 3, seed=0)


@pytest.fixture(scope="session")
def digits_small() -> Trained:
    """The (8x8) CNN with x² activations: non-linear, 4 clients, 3 rounds."""
    return _train("digits", 700, 4, 3, seed=0)
