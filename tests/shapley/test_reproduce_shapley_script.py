"""The helpers of ``benchmarks/reproduce_shapley.py`` (Figs. 6-7, merging of sections)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "reproduce_shapley.py"


@pytest.fixture(scope="module")
def script() -> ModuleType:
    pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("reproduce_shapley", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["reproduce_shapley"] = module
    spec.loader.exec_module(module)
    return module


def test_subset_keeps_each_clients_share_and_order(script: ModuleType) -> None:
    rng = np.random.default_rng(0)
    sets = [(rng.normal(size=(n, 3)), np.arange(n)) for n in (10, 40, 1)]
    got = script._subset(sets, 0.25)
    assert [len(y) for _, y in got] == [2, 10, 1]  # rounded, at least one sample
    for (x, y), (x0, y0) in zip(got, sets, strict=True):
        assert np.array_equal(y, y0[:len(y)]) and np.array_equal(x, x0[:len(y)])


def test_merged_replaces_per_task_and_keeps_the_rest(script: ModuleType) -> None:
    old = [{"task": "bank", "v": 1}, {"task": "agnews", "v": 2}]
    new = [{"task": "agnews", "v": 3}, {"task": "gru", "v": 4}]
    assert script._merged(old, new) == [{"task": "bank", "v": 1}, {"task": "agnews", "v": 3},
                                        {"task": "gru", "v": 4}]
    assert script._merged({"bank": 1, "mnist": 2}, {"mnist": 5}) == {"bank": 1, "mnist": 5}
    cnn = {"M": 1000, "rows": []}
    assert script._merged({"M": 5, "T": 1, "rows": [1]}, cnn) == cnn  # a whole section
    assert script._merged(None, new) == new


def test_protocol_runs_time_every_protocol_against_nssv(script: ModuleType) -> None:
    from fedsec.learning.fedavg import run_fedavg
    from fedsec.learning.tasks import make_task

    task = make_task("bank", n_samples=400, n_test=60, seed=0)
    fed = task.federate(3, alpha=0.5, seed=0)
    record = run_fedavg(task, fed, rounds=1, seed=0)
    sets = [(c.x_test, c.y_test) for c in fed.clients]
    args = argparse.Namespace(repeats=1)
    pt = script._protocol_runs(record, sets, ["SecSV", "SecSV+SampleSkip"], args)
    assert pt["M"] == 60
    assert pt["SecSV"]["error"] < 1e-9  # SecSV is exact on a logistic model
    assert pt["SecSV+SampleSkip"]["error"] < 1e-9  # never wrongly skipped (linear)
    assert pt["SecSV+SampleSkip"]["samples_tested"] < pt["SecSV"]["samples_tested"]
    assert pt["skip_speedup_cpu"] == pytest.approx(
        pt["SecSV"]["cpu_seconds"] / pt["SecSV+SampleSkip"]["cpu_seconds"])
    assert "HESV" not in pt and "secsv_vs_hesv_cpu" not in pt


def test_every_option_has_help(script: ModuleType) -> None:
    source = SCRIPT.read_text()
    assert source.count("ap.add_argument(") == source.count("help=")
