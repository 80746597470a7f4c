"""Progress lines and ETAs of round loops (fedsec.shapley.rounds)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fedsec.shapley.rounds import RoundTimer, format_seconds, round_source, rounds_to_play


def test_format_seconds() -> None:
    assert format_seconds(41.24) == "41.2 s"
    assert format_seconds(190) == "3 min 10 s"
    assert format_seconds(3900) == "1 h 5 min"


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_serial_eta_is_mean_round_time_times_rounds_left() -> None:
    clock = _Clock()
    timer = RoundTimer(4, clock=clock)
    assert timer.eta() is None
    clock.now = 5.0  # set-up
    timer.round_started()
    clock.now = 15.0
    assert timer.done() == 10.0
    clock.now = 45.0
    assert timer.done() == 30.0
    assert timer.eta() == pytest.approx(2 * 20.0)
    assert timer.line(1, 30.0, "7 models tested") == (
        "round 2/4 done (30.0 s): 7 models tested; elapsed 45.0 s, ETA 40.0 s")


def test_parallel_eta_divides_by_the_workers_still_busy() -> None:
    clock = _Clock()
    timer = RoundTimer(16, workers=4, clock=clock)
    clock.now = 41.2
    timer.done(41.2)
    assert timer.eta() == pytest.approx(41.2 * 15 / 4)
    assert timer.line(2, 41.2, worker=2) == (
        "round 3/16 done (worker 2, 41.2 s); 1/16 done in 41.2 s, ETA 2 min 34 s")  # 154.5 s
    for _ in range(13):
        timer.done(41.2)
    assert timer.eta() == pytest.approx(41.2)  # two left, two workers: one round's time
    timer.done(41.2)
    timer.done(41.2)
    assert timer.eta() == 0.0 and "ETA" not in timer.line(0, 41.2, worker=1)


def test_rounds_to_play_defaults_to_all_in_order() -> None:
    record = SimpleNamespace(n_rounds=3)
    assert list(rounds_to_play(record)) == [0, 1, 2]
    with round_source(lambda n: iter(range(n - 1, -1, -1))):
        assert list(rounds_to_play(record)) == [2, 1, 0]
    assert list(rounds_to_play(record)) == [0, 1, 2]


def test_eta_weighs_the_rounds_left_by_their_cost() -> None:
    clock = _Clock()
    timer = RoundTimer(3, costs=[1.0, 4.0, 1.0], clock=clock)
    timer.done(10.0, 0)  # 10 s per unit of cost: 5 units left
    assert timer.eta() == pytest.approx(50.0)
    with pytest.raises(ValueError, match="costs"):
        RoundTimer(3, costs=[1.0, 0.0, 1.0])
