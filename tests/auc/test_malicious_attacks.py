"""Issue 8: every attack on secure AUC, built from the bytes an aggregator sees, fails
against malicious mode with the check that stops it. Where cheap, the same attack is shown
succeeding against a configuration that lacks the defence (semi-honest mode, a loosened
party policy, a party that verifies twice).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from fedsec.auc.fhauc_malicious import (
    SHIFT_RESOLUTION,
    MaliciousConfig,
    MaliciousParty,
    shift_bound,
    tolerance_bound_bits,
)
from fedsec.auc.policy import PartyPolicy
from fedsec.errors import FedsecError, PolicyViolation, ProtocolError, TamperingDetected
from fedsec.testing.auc import (
    ATTACKS,
    ORACLE_DENOMINATOR,
    Observed,
    TamperHarness,
    adaptive_blind_shift,
    blind_shift,
)

TEST_PRESET = "INSECURE_TEST_N4096_DEPTH1_S50"
POINTS = 30
LOOSE = PartyPolicy(quorum=2, max_tolerance=0.4, min_bound_bits=0.0)


def _parties(seed: int = 5, n: int = 3) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        m = int(rng.integers(40, 90))
        y = (rng.random(m) < 0.5).astype(int)
        y[:2] = [0, 1]                       # every party holds both classes
        s = np.clip(np.round(0.6 * rng.random(m) + 0.3 * y, 2), 0.0, 1.0)
        out.append((y, s))
    return out


def _harness(security: str, **kw: Any) -> TamperHarness:
    return TamperHarness(_parties(), security=security, decision_points=POINTS,
                         preset=TEST_PRESET, allow_insecure=True, **kw)


@pytest.fixture(scope="module")
def mal() -> TamperHarness:
    return _harness("malicious")


@pytest.fixture(scope="module")
def mal_rot1() -> TamperHarness:
    """Keys carrying a rotation by one slot (set up for another configuration)."""
    return _harness("malicious", extra_rotations=(1,))


@pytest.fixture(scope="module")
def semi() -> TamperHarness:
    return _harness("semi-honest")


# which checks may stop each attack (every refusing party's check is one of these)
RESULT = {"denominator", "double-execution", "range", "slot-consistency"}
EXPECTED: dict[str, set[str]] = {
    "drop-party": RESULT, "duplicate-party": RESULT, "substitute-foreign": RESULT,
    "replay-old": RESULT, "subset-answer": RESULT, "add-constant": RESULT,
    "scale-num": RESULT, "scale-denom": RESULT, "scale-one-run": {"double-execution", "range"},
    "permute-slots": RESULT, "reencrypt-chosen": RESULT, "mix-runs": RESULT,
    "zero-answer": {"denominator"},
    "oracle-submission": {"slot-consistency"}, "oracle-slotsum": RESULT,
    "blind-shift-1e-3": {"double-execution"}, "blind-shift-1e-6": {"double-execution"},
    "start-isolate": {"nonce", "quorum"},      # the isolated party: quorum; others: nonce
    "start-drop": {"nonce", "quorum"},         # the dropped party: nonce; others: quorum
    "start-equivocate": {"nonce", "quorum"} | RESULT,  # the one shown everyone: RESULT
    "start-replay": {"nonce"},
    "rot-shift": {"double-execution"}, "swap-num-denom": RESULT,
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_malicious_mode_stops_the_attack(mal: TamperHarness, mal_rot1: TamperHarness,
                                         name: str) -> None:
    h = mal_rot1 if ATTACKS[name].needs_rotation else mal
    for _ in range(2):
        t = h.trial(name)
        assert t.kind == "detected", (name, t)
        assert set(t.checks) <= EXPECTED[name] and t.checks, (name, t.checks)


def test_rotation_attacks_need_a_key_the_spec_does_not_give(mal: TamperHarness) -> None:
    assert 1 not in mal.config.rotations()
    assert not mal.applicable("rot-shift") and not mal.applicable("swap-num-denom")


@pytest.mark.parametrize("name", ["blind-shift-1e-9r", "blind-shift-tol"])
def test_tiny_blind_shifts_pass_only_below_the_resolution(mal: TamperHarness,
                                                          name: str) -> None:
    """Shifts about the size of the tolerance may pass (that is what a tolerance is);
    what the bound promises is that none of SHIFT_RESOLUTION or more does."""
    for _ in range(4):
        t = mal.trial(name)
        assert t.kind == "detected" and set(t.checks) == {"double-execution"} \
            or t.error < SHIFT_RESOLUTION, t
        if t.kind != "detected":
            assert t.error < 100 * mal.config.tolerance


def _exact_auc(parties: list[tuple[np.ndarray, np.ndarray]]) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(np.concatenate([y for y, _ in parties]),
                               np.concatenate([s for _, s in parties])))


@pytest.mark.parametrize("k", [1, 2, 3, 10, 100])
def test_shifts_of_k_tolerances_are_detected_or_within_the_reported_bound(
        mal: TamperHarness, k: int) -> None:
    """Numerator channels times ``1 - k*tolerance``: every party either raises
    TamperingDetected or reports an AUC within its certified bound of the exact AUC, and
    within the bound's shift term of the honest result. Measured (100 trials each,
    tolerance 1e-7, 8 runs): k = 1 passes 85 times, k = 2 13 times (error up to 3.4
    tolerances), k >= 3 never; the shift term is 526 tolerances (2^-40)."""
    tol = mal.config.tolerance
    term = shift_bound(tol, mal.config.runs, mal.policy.min_bound_bits)
    assert term == pytest.approx(tol * (1 + 10 * 2 ** (40 / 7)))
    exact = _exact_auc(mal.parties)
    for _ in range(25):
        t = mal.trial(blind_shift(-k * tol))
        if not t.accepted:
            assert t.kind == "detected" and set(t.checks) == {"double-execution"}, t
            continue
        assert len(t.bounds) == len(t.accepted)
        assert all(abs(a - exact) <= b for a, b in zip(t.accepted, t.bounds, strict=True)), t
        assert t.error <= term
        assert all(b == pytest.approx(t.bounds[0], abs=1e-12) for b in t.bounds)


def test_honest_bound_adds_the_shift_term(mal: TamperHarness) -> None:
    """An honest malicious run reports the trapezoid bound plus what verification admits;
    the term is the inverse of the blind-shift term of the cheating bound."""
    roles = mal._roles()
    agg = mal._aggregator()
    start = agg.start([r.commit() for r in roles])
    answer = agg.aggregate([r.submit(start) for r in roles])
    auc = roles[0].finalize(answer)
    v = roles[0].verification
    cfg = mal.config
    assert v["shift_bound"] == shift_bound(cfg.tolerance, cfg.runs, 40.0)
    assert roles[0].error_bound == v["trapezoid_bound"] + v["shift_bound"]
    assert abs(auc - _exact_auc(mal.parties)) <= v["trapezoid_bound"] + 1e-9
    assert tolerance_bound_bits(cfg.tolerance, cfg.runs,
                                resolution=v["shift_bound"]) == pytest.approx(40.0)
    assert v["shift_bound"] < SHIFT_RESOLUTION
    for bad in ({"tolerance": 0.0}, {"runs": 1}, {"bits": -1.0}):
        kw: dict[str, Any] = {"tolerance": 1e-7, "runs": 8, "bits": 40.0, **bad}
        with pytest.raises(ValueError, match="parameter of shift_bound"):
            shift_bound(**kw)


def test_every_attack_is_tested() -> None:
    assert set(ATTACKS) == set(EXPECTED) | {"blind-shift-1e-9r", "blind-shift-tol"}


# ------------------------------------------------------------------ semi-honest contrast
@pytest.mark.parametrize("name", [
    "drop-party", "duplicate-party", "substitute-foreign", "replay-old", "subset-answer",
    "add-constant", "scale-num", "scale-denom", "reencrypt-chosen", "blind-shift-1e-3",
    "blind-shift-1e-6", "start-isolate", "oracle-slotsum"])
def test_semi_honest_mode_accepts_the_forgery(semi: TamperHarness, name: str) -> None:
    """The same forgeries against semi-honest mode: accepted, AUC wrong (its threat
    model, and the proof that the malicious-mode tests can fail). Semi-honest parties
    range-check the error bound, which a blind forgery such as add-constant (a random
    constant added to every slot, the bound channel included) trips now and then by
    chance (seen once in CI; 6 of 40 trials measured): a sanity check, not a guarantee,
    so such a trial is repeated (at most eight times) and the forgery must then get
    through."""
    for _ in range(8):
        t = semi.trial(name)
        if t.checks and set(t.checks) <= {"error-bound"} and t.kind == "detected":
            continue
        break
    assert t.kind == "changed" and t.error > 1e-7, (name, t)


def test_semi_honest_oracle_reads_a_partys_negative_count(semi: TamperHarness) -> None:
    """Semi-honest finalize is a decryption oracle: an answer made from the last party's
    submission (slot sums, conjugation and a plaintext constant - public operations)
    passes every check and the party reports Neg_j / R. A party that shares its AUC
    gives the aggregator Neg_j; the level is not checked, and checking it would not help
    (the aggregator can move any ciphertext down to the answer's level)."""
    t = semi.trial("oracle-slotsum")
    neg_last = int((semi.parties[-1][0] == 0).sum())
    assert t.accepted and all(a * ORACLE_DENOMINATOR == pytest.approx(neg_last, abs=1e-6)
                              for a in t.accepted)


def test_semi_honest_checks_what_it_can(semi: TamperHarness) -> None:
    assert semi.trial("oracle-submission").checks == ["slot-consistency"] * 3
    # a party holding both classes knows the federation does: a zero answer is forged
    assert semi.trial("zero-answer").kind == "detected"


# --------------------------------------------------------------- the party's own policy
def test_aggregator_pushed_tolerance_is_refused_and_would_let_forgeries_through() -> None:
    """Tolerance 0.3 (old attack 3): the default policy refuses the configuration; a
    party with its policy loosened accepts it, and a blind shift of 5e-2 then passes."""
    parties = _parties()
    cfg = MaliciousConfig.create(POINTS, tolerance=0.3, min_bound_bits=0.0, splits=4,
                                 preset=TEST_PRESET, allow_insecure=True)
    with pytest.raises(PolicyViolation) as info:
        PartyPolicy().check_config(cfg)
    assert info.value.check == "tolerance"
    h = _harness("malicious", policy=LOOSE, tolerance=0.3, min_bound_bits=0.0, splits=4)
    with pytest.raises(PolicyViolation) as info2:
        MaliciousParty(*parties[0], keys=h.keys[0], config=h.config,
                       identity=h.identities[0], roster=h.roster)
    assert info2.value.check == "tolerance"
    t = h.trial("blind-shift-1e-3")  # 1e-3 * (AUC + r1/r0) is well inside 0.3
    assert t.accepted and t.error > SHIFT_RESOLUTION


def test_weak_bound_and_sizes_are_refused() -> None:
    weak = MaliciousConfig.create(POINTS, splits=2, runs=2, tolerance=5e-10,
                                  min_bound_bits=0.0, preset=TEST_PRESET,
                                  allow_insecure=True)
    assert weak.cheat_bound_bits() < 40
    with pytest.raises(PolicyViolation) as info:
        PartyPolicy().check_config(weak)
    assert info.value.check == "cheat-bound"
    # 4*10**8 decision points (old attack 6): the configuration refuses the count before
    # allocating anything, and a party's policy refuses anything above its own limit
    with pytest.raises(ValueError, match="decision"):
        MaliciousConfig.create(4 * 10 ** 8, preset=TEST_PRESET, allow_insecure=True)
    huge = SimpleNamespace(n_points=4 * 10 ** 8, preset=TEST_PRESET, tolerance=5e-10,
                           cheat_bound_bits=lambda: 100.0)
    with pytest.raises(PolicyViolation) as info:
        PartyPolicy().check_config(huge)
    assert info.value.check == "decision-points"
    with pytest.raises(PolicyViolation) as info:
        PartyPolicy(presets=("CKKS_128_N8192_DEPTH1",)).check_config(weak)
    assert info.value.check == "preset"


def test_loosened_quorum_lets_the_aggregator_drop_a_party() -> None:
    """Only the whole-roster quorum stops a start message without one party: with
    quorum 2 the others verify an AUC of the remaining parties."""
    h = _harness("malicious", policy=LOOSE)
    t = h.trial("start-drop")
    assert t.kind == "changed" and len(t.accepted) == 2 and t.checks == ["nonce"]


def test_oversized_answer_is_refused(mal: TamperHarness) -> None:
    roles = mal._roles()
    agg = mal._aggregator()
    start = agg.start([r.commit() for r in roles])
    roles[0].submit(start)
    with pytest.raises(TamperingDetected) as info:
        roles[0].finalize(b"FSEC" + b"\x00" * (65 << 20))
    assert info.value.check == "format"


def test_config_equivocation_is_caught_by_the_commits(mal: TamperHarness) -> None:
    """One party is given another configuration; its signed commit names it."""
    other = MaliciousConfig.create(POINTS, splits=mal.config.splits + 1, min_bound_bits=0.0,
                                   preset=TEST_PRESET, allow_insecure=True)
    roles = mal._roles()
    odd = MaliciousParty(*mal.parties[0], keys=mal.keys[0], config=other,
                         identity=mal.identities[0], roster=mal.roster,
                         policy=PartyPolicy(min_bound_bits=0.0))
    agg = mal._aggregator()
    commits = [odd.commit(), *[r.commit() for r in roles[1:]]]
    with pytest.raises(ProtocolError):
        agg.start(commits)            # the honest aggregator leaves it out: no quorum
    assert list(agg.rejected) == [0]
    relayed = _start(agg, commits)    # a cheating one relays it anyway
    for r in roles[1:]:
        with pytest.raises(TamperingDetected) as info:
            r.submit(relayed)
        assert info.value.check == "commits"


def _start(agg: Any, commits: list[bytes]) -> bytes:
    from fedsec.protocol import wire
    meta = agg._binding.bind({}, step="start", to="*")  # noqa: SLF001 - plays the aggregator
    return wire.encode("fhauc-m/start", meta, commits)


# --------------------------------------------------------------------- all-zero answers
def test_zero_answer_is_tampering_for_a_party_holding_both_classes_only() -> None:
    """NOT fully stopped: a party that holds one class cannot tell a forged all-zero
    answer from a one-class federation (both decrypt to zeros); it reports 'undefined'.
    Parties holding both classes raise TamperingDetected('denominator')."""
    parties = _parties()
    parties[1] = (np.ones(30, dtype=int), np.linspace(0.0, 1.0, 30))  # positives only
    h = TamperHarness(parties, security="malicious", decision_points=POINTS,
                      preset=TEST_PRESET, allow_insecure=True)
    t = h.trial("zero-answer")
    assert t.kind == "undefined" and sorted(t.checks) == \
        ["UndefinedMetricError", "denominator", "denominator"]


# ------------------------------------------------------------------- repeated verdicts
def _evaluation(h: TamperHarness) -> tuple[Any, list[MaliciousParty], list[bytes]]:
    agg, roles = h._aggregator(), h._roles()
    start = agg.start([r.commit() for r in roles])
    return agg, roles, [r.submit(start) for r in roles]


def test_a_party_verifies_one_answer_per_evaluation(mal: TamperHarness) -> None:
    agg, roles, subs = _evaluation(mal)
    honest = agg.aggregate(subs)
    with pytest.raises(TamperingDetected):
        roles[0].finalize(b"garbage")
    with pytest.raises(ProtocolError, match="already verified"):
        roles[0].finalize(honest)
    assert abs(roles[1].finalize(honest) - mal.truth) < 1e-7


class _VerifiesTwice(MaliciousParty):
    """A party without the one-answer rule (what finalize was before issue 8)."""

    def finalize(self, response: bytes) -> float:
        self._finalized = False
        return super().finalize(response)


def test_many_verdicts_steer_a_blind_shift_through_every_check() -> None:
    """Against a party that verifies any number of answers in one evaluation, one to two
    thousand verdicts (eight runs) locate each run's window (bisection, then refinement around
    growing shifts); then a shift of -0.05 passes at every party (tolerance 1e-3; the
    one-shot bound allows it with probability <= 0.9%)."""
    h = _harness("malicious", policy=LOOSE, tolerance=1e-3, min_bound_bits=0.0, splits=4)
    agg, roles, subs = _evaluation(h)
    victim = _VerifiesTwice.__new__(_VerifiesTwice)
    victim.__dict__.update(roles[0].__dict__)

    def accepts(answer: bytes) -> bool:
        try:
            victim.finalize(answer)
        except FedsecError:
            return False
        return True

    forged, queries = adaptive_blind_shift(agg, Observed(list(subs)), accepts, -0.05,
                                           iters=40)
    assert queries < 5000
    got = [r.finalize(forged) for r in roles]          # one verdict each: all accept
    assert all(abs(g - (h.truth - 0.05)) < 1e-3 for g in got)
    # with the rule, the aggregator's second question already fails
    agg2, roles2, subs2 = _evaluation(h)

    def accepts2(answer: bytes) -> bool:
        try:
            roles2[0].finalize(answer)
        except TamperingDetected:
            return False
        return True

    with pytest.raises(ProtocolError, match="already verified"):
        adaptive_blind_shift(agg2, Observed(list(subs2)), accepts2, -0.05, iters=40)


def test_answer_from_another_session_is_refused(mal: TamperHarness,
                                                mal_rot1: TamperHarness) -> None:
    """Replay across key set-ups (same configuration, another session): the binding."""
    agg2, _, subs2 = _evaluation(mal_rot1)
    old = agg2.aggregate(subs2)
    _, roles, _ = _evaluation(mal)
    with pytest.raises(TamperingDetected) as info:
        roles[0].finalize(old)
    assert info.value.check == "binding"
