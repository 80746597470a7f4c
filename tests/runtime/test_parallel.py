import pytest

from fedsec.runtime.parallel import map_ordered


def _square(x: int) -> int:
    return x * x


def test_process_pool_returns_the_serial_results_in_order():
    items = list(range(-3, 4))
    # spawned workers import the function by name: a library function, not a test's
    assert map_ordered(abs, items, workers=2) == [abs(x) for x in items]
    assert map_ordered(_square, items, backend="serial") == [x * x for x in items]
    assert map_ordered(abs, [], workers=2) == []


def test_bad_arguments():
    with pytest.raises(ValueError, match="backend"):
        map_ordered(_square, [1], backend="threads")
    with pytest.raises(ValueError, match="workers"):
        map_ordered(_square, [1], workers=0)


# Ray's shutdown leaves its helper processes to exit on their own.
@pytest.mark.filterwarnings("ignore::ResourceWarning",
                            "ignore::pytest.PytestUnraisableExceptionWarning")
def test_ray_backend_matches_serial():
    pytest.importorskip("ray")
    items = [-3, 1, -2, 5]
    assert map_ordered(abs, items, workers=2, backend="ray") == [abs(x) for x in items]


def test_round_costs_follow_the_coalitions_tested():
    from types import SimpleNamespace

    from fedsec.runtime.parallel import round_costs

    record = SimpleNamespace(rounds=[SimpleNamespace(participants=p)
                                     for p in [(0, 1), (0, 1, 2, 3), (2,)]])
    assert round_costs(record) == [4.0, 16.0, 2.0]
    assert round_costs(record, "ps", 1) == [4.0, 6.0, 2.0]  # budget * k + 2, at most 2^k
    assert round_costs(record, "gt", 3) == [4.0, 5.0, 2.0]


_DIES_AT_START = """
import numpy as np
from fedsec.learning.model import LayerSpec, ModelSpec
from fedsec.learning.record import RoundRecord, TrainingRecord
from fedsec.runtime.parallel import shapley_in_parallel
rng = np.random.default_rng(0)
spec = ModelSpec("t", (LayerSpec.dense(3, 2),))
p = [spec.init_params(rng) for _ in range(4)]
rnd = RoundRecord(p[0], (0, 1, 2), tuple(p[1:]), np.ones(3))
rec = TrainingRecord(spec, 3, (rnd, rnd), p[0])
sets = [(rng.normal(size=(5, 3)), rng.integers(0, 2, 5)) for _ in range(3)]
try:
    shapley_in_parallel("nssv", rec, sets, workers=2, start_method="spawn")
except RuntimeError as exc:
    print("raised:", exc)
"""


def test_a_worker_that_dies_at_start_fails_the_run_instead_of_hanging(tmp_path):
    """A script read from stdin cannot be re-imported by spawned workers: they die before
    their first round, and the parent says so (it used to wait forever)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-"], input=_DIES_AT_START, text=True,
                         capture_output=True, timeout=120, cwd=tmp_path, env=env)
    assert "raised: parallel worker fedsec-rounds-" in out.stdout
    assert "before finishing its rounds" in out.stdout
