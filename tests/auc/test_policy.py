"""Party-side policy: the configuration and the participant set are the party's call."""

from __future__ import annotations

import pytest

from fedsec.auc.common import local_federation
from fedsec.auc.fhauc import FHAUCConfig
from fedsec.auc.fhauc_malicious import MaliciousConfig, tolerance_bound_bits
from fedsec.auc.policy import PartyPolicy
from fedsec.crypto.identity import Roster
from fedsec.errors import PolicyViolation, ProtocolError

TEST_PRESET = "INSECURE_TEST_N4096_DEPTH1"


def test_default_quorum_is_whole_roster_in_malicious_and_two_in_semi_honest():
    ids, roster = local_federation(["a", "b", "c", "d"])
    pol = PartyPolicy()
    assert pol.required_parties("malicious", len(roster), roster) == 4
    assert pol.required_parties("semi-honest", len(roster), roster) == 2
    with_q = Roster(roster.entries, quorum=3)
    assert pol.required_parties("malicious", 4, with_q) == 3
    assert PartyPolicy(quorum=2).required_parties("malicious", 4, roster) == 2
    with pytest.raises(PolicyViolation) as info:
        pol.check_participants(3, "malicious", 4, roster)
    assert info.value.check == "quorum" and isinstance(info.value, ProtocolError)
    pol.check_participants(4, "malicious", 4, roster)


def test_singleton_never_accepted():
    with pytest.raises(ValueError):
        PartyPolicy(quorum=1)
    with pytest.raises(PolicyViolation):
        PartyPolicy().check_participants(1, "semi-honest", 2)
    ids, roster = local_federation(["a", "b"])
    with pytest.raises(ValueError):
        Roster(roster.entries, quorum=1)


def test_loose_tolerance_and_weak_bounds_are_refused():
    loose = MaliciousConfig.create(20, tolerance=1e-3, min_bound_bits=0.0, preset=TEST_PRESET,
                                   allow_insecure=True)
    with pytest.raises(PolicyViolation) as info:
        PartyPolicy().check_config(loose)
    assert info.value.check == "tolerance"
    # under the ceiling, but a bound (tolerance term included) below the party's minimum
    weak = MaliciousConfig.create(20, tolerance=1e-7, runs=2, min_bound_bits=0.0,
                                  preset=TEST_PRESET, allow_insecure=True)
    assert weak.cheat_bound_bits() == pytest.approx(tolerance_bound_bits(1e-7, 2))
    with pytest.raises(PolicyViolation) as info:
        PartyPolicy().check_config(weak)
    assert info.value.check == "cheat-bound"
    PartyPolicy().check_config(MaliciousConfig.create(20, preset=TEST_PRESET,
                                                      allow_insecure=True))


def test_decision_points_and_presets_are_bounded():
    big = FHAUCConfig.create(2000, preset=TEST_PRESET, allow_insecure=True)
    with pytest.raises(PolicyViolation) as info:
        PartyPolicy(max_decision_points=1000).check_config(big)
    assert info.value.check == "decision-points"
    with pytest.raises(PolicyViolation) as info:
        PartyPolicy(presets=("CKKS_128_N16384_DEPTH4",)).check_config(big)
    assert info.value.check == "preset"


def test_config_refuses_what_its_own_bound_does_not_allow():
    with pytest.raises(ValueError, match="blind shift"):
        MaliciousConfig.create(20, tolerance=1e-3, preset=TEST_PRESET, allow_insecure=True)
    with pytest.raises(ValueError, match="blind shift"):
        MaliciousConfig.create(20, tolerance=5e-10, runs=2, preset=TEST_PRESET,
                               allow_insecure=True)


def test_tolerance_term_grows_with_runs_and_shrinks_with_tolerance():
    assert tolerance_bound_bits(5e-10, 4) > 40.0 > tolerance_bound_bits(5e-10, 2)
    assert tolerance_bound_bits(1e-12, 2) > tolerance_bound_bits(1e-9, 2)
    assert tolerance_bound_bits(1e-4, 4) == 0.0
