"""The decryption rule (fedsec.shapley.views): what a decrypting client may see.

Each attack here is the linear algebra a decrypting client would run; the rule must refuse
the decryption that would complete it, and a schedule built by the rule must leave every
client unable to compute any known model's output on another client's sample.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedsec.errors import PolicyViolation
from fedsec.shapley.views import ClientView, ModelSpace, Scheduler, UnsafeSchedule


def _space(k: int, rounds: int = 1, n: int | None = None) -> ModelSpace:
    n = k if n is None else n
    w = [float(v) for v in range(1, k + 1)]
    return ModelSpace.of([(tuple(range(k)) if n == k else tuple(range(1, k + 1)), w)
                          for _ in range(rounds)])


def _mask(*members: int) -> int:
    return sum(1 << j for j in members)


def test_global_and_full_models_are_known_to_everybody() -> None:
    sp = _space(5)
    for c in range(5):
        view = ClientView(sp, c)
        assert view.knows(sp.coalition(0, 0))  # θ^t
        assert view.knows(sp.coalition(0, (1 << 5) - 1))  # θ^{t+1}
        assert view.knows(sp.coalition(0, _mask(c)))  # its own model
        everyone_else = _mask(*[j for j in range(5) if j != c])
        assert view.knows(sp.coalition(0, everyone_else))  # θ^{t+1} − ω_c θ_c
        assert not view.knows(sp.coalition(0, _mask((c + 1) % 5)))


def test_known_model_output_on_other_samples_is_refused() -> None:
    sp = _space(5)
    owner = np.array([2] * 4)
    view = ClientView(sp, 0)
    with pytest.raises(PolicyViolation):
        view.check(sp.coalition(0, 0), [0, 1, 2, 3], owner, first_layer=True, blinded=False)
    # blinded outputs of known models are refused too (a bit per sample of a known model)
    with pytest.raises(PolicyViolation):
        view.check(sp.coalition(0, 0), [0, 1], owner, first_layer=False, blinded=True)


def test_linear_combination_attack_is_refused() -> None:
    """{1} and {1, 3} give W_3 X by subtraction; with W_3 unknown that is allowed, but
    adding {3, 4} and {4} ... until the span meets the known models is not."""
    sp = _space(5)
    owner = np.array([2, 2, 2])
    view = ClientView(sp, 0)
    rows = [0, 1, 2]
    accepted = []
    for m in [_mask(1), _mask(1, 3), _mask(3, 4), _mask(4), _mask(2), _mask(1, 2)]:
        if view.refusal(sp.coalition(0, m), rows, owner, first_layer=True,
                        blinded=False) is None:
            view.record(sp.coalition(0, m), rows, owner, first_layer=True, blinded=False)
            accepted.append(m)
    # client 0 knows e_0 and ω: at most 5 - 2 = 3 independent coalitions per sample
    assert np.linalg.matrix_rank(np.array([sp.coalition(0, m) for m in accepted])) <= 3
    assert _mask(2) not in accepted or _mask(1, 2) not in accepted
    assert view.solvable_rank(0) == 0
    # the brute-force check: no combination of accepted outputs is a known model
    d = np.array([sp.coalition(0, m) for m in accepted])
    k = sp.known(0)
    assert np.linalg.matrix_rank(np.vstack([d, k])) == (np.linalg.matrix_rank(d)
                                                       + np.linalg.matrix_rank(k))


def test_own_samples_only_with_known_models() -> None:
    sp = _space(4)
    owner = np.array([1, 1])
    view = ClientView(sp, 1)
    view.check(sp.coalition(0, 0), [0, 1], owner, first_layer=True, blinded=False)
    view.check(sp.coalition(0, 15), [0, 1], owner, first_layer=True, blinded=False)
    with pytest.raises(PolicyViolation):  # another client's model on its own data
        view.check(sp.coalition(0, _mask(2)), [0, 1], owner, first_layer=True,
                   blinded=False)
    with pytest.raises(PolicyViolation):  # mixed batches
        ClientView(sp, 1).check(sp.coalition(0, 0), [0, 1], np.array([1, 2]),
                                first_layer=True, blinded=False)


def test_across_rounds_the_samples_accumulate() -> None:
    """The same samples in two rounds: each round's span is checked together."""
    sp = _space(4, rounds=2)
    owner = np.array([3])
    view = ClientView(sp, 0)
    taken = 0
    for t in range(2):
        for m in range(1, 15):
            v = sp.coalition(t, m)
            if view.refusal(v, [0], owner, first_layer=True, blinded=False) is None:
                view.record(v, [0], owner, first_layer=True, blinded=False)
                taken += 1
    assert taken >= 2 * (4 - 2)
    assert view.solvable_rank(0) == 0
    assert view.solvable_rank(0) == 0


def _run_schedule(sp: ModelSpace, n: int, owner: np.ndarray, rounds: int,
                  masks_of: object = None) -> tuple[int, int]:
    """Schedule every coalition of every round on each owner's samples, replaying each
    placement through the chosen client's own view (as the clients would check it).
    Returns (placed, refused)."""
    sched = Scheduler(sp, n, owner)
    views = [ClientView(sp, c) for c in range(n)]
    placed = refused = 0
    for t in range(rounds):
        k = len(sp.rounds[t][0])
        for b in sorted(set(owner.tolist())):
            rows = [int(s) for s in np.flatnonzero(owner == b)]
            for m in range(1 << k):
                try:
                    c = sched.first(t, m, rows, turn=m)
                except UnsafeSchedule:
                    refused += 1
                    continue
                views[c].check(sp.coalition(t, m), rows, owner[rows], first_layer=True,
                               blinded=False)
                placed += 1
    assert sched.solvable() == 0
    for c, view in enumerate(views):
        for s in np.flatnonzero(owner != c):
            assert view.solvable_rank(int(s)) == 0
    return placed, refused


@pytest.mark.parametrize("k", [3, 5, 8])
def test_online_schedule_never_lets_a_view_solve(k: int) -> None:
    """Whatever the scheduler places (3 rounds, every client's samples), no client's
    accumulated view computes a known model's output; what it cannot place it refuses."""
    sp = _space(k, rounds=3)
    owner = np.arange(2 * k) % k
    placed, refused = _run_schedule(sp, k, owner, 3)
    assert placed > 0
    assert refused > 0  # every client in every round: some coalitions have no decryptor


def test_schedule_with_clients_outside_the_round() -> None:
    """Four of eight clients train per round: the others add room; every coalition is
    placed and every view stays clean."""
    w = (1.0, 2.0, 3.0, 4.0)
    sp = ModelSpace.of([((0, 1, 2, 3), w), ((4, 5, 6, 7), w), ((0, 2, 4, 6), w)])
    owner = np.arange(16) % 8
    placed, refused = _run_schedule(sp, 8, owner, 3)
    assert refused == 0 and placed == 3 * 8 * 16


def test_exact_plan_refuses_before_any_work() -> None:
    sp = _space(5)
    sched = Scheduler(sp, 5, np.zeros(3, dtype=np.int64))
    with pytest.raises(UnsafeSchedule, match="schedule='paper'"):
        sched.plan(0, list(range(32)), [0, 1, 2])


def test_owner_evaluates_the_models_it_knows() -> None:
    sp = _space(5)
    sched = Scheduler(sp, 5, np.array([2, 2]))
    assert sched.first(0, 0, [0, 1]) == 2  # θ^t
    assert sched.first(0, 31, [0, 1]) == 2  # θ^{t+1}
    assert sched.first(0, 31 & ~(1 << 2), [0, 1]) == 2  # everybody but the owner
    assert sched.first(0, 1 << 3, [0, 1]) != 2


def test_the_paper_schedule_fails_the_rule() -> None:
    """Prop. 6.8 alone lets a client decrypt the global model on another's batch."""
    sp = _space(5)
    view = ClientView(sp, 1)
    assert view.refusal(sp.coalition(0, 0), [0], np.array([0]), first_layer=True,
                        blinded=False) is not None


def test_blinded_outputs_do_not_accumulate() -> None:
    sp = _space(5)
    owner = np.array([4, 4])
    view = ClientView(sp, 0)
    for m in range(1, 31):
        v = sp.coalition(0, m)
        if not view.knows(v):
            view.check(v, [0, 1], owner, first_layer=True, blinded=True)
    assert view.solvable_rank(0) == 0
