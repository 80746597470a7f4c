"""Party-side policy: the configuration and the participant set are the party's call."""

from __future__ import annotations

import pytest

from fedsec.auc.common import local_federation
from fedsec.auc.fhauc import FHAUCConfig
from fedsec.auc.fhauc_malicious import MaliciousConfig, tolerance_bound_bits
from fedsec.auc.policy import PartyPolicy
from fedsec.crypto.identity import Roster
from fedsec.errors import PolicyViolation, ProtocolError

TEST_PRESET = "INSECURE_TEST_N4096_DEPTH1_S39"


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


# ------------------------------------------------- issue 22: presets, key cap, quorum
def test_one_default_quorum_rule():
    """One rule (``default_quorum``) for key set-up and both evaluation modes: the
    roster's quorum if stated, else the whole roster, except 2 for semi-honest
    evaluation; key set-up with no mode takes the strict branch."""
    from fedsec.auc.policy import default_quorum

    assert default_quorum(5) == 5 and default_quorum(5, security="malicious") == 5
    assert default_quorum(5, security="semi-honest") == 2
    assert default_quorum(5, 3) == default_quorum(5, 3, "semi-honest") == 3
    assert default_quorum(5, 1) == 2
    _, roster = local_federation(["a", "b", "c"])
    for security in ("malicious", "semi-honest"):
        assert PartyPolicy().required_parties(security, 3, roster) == \
            default_quorum(3, None, security)


def test_preset_defaults_to_the_protocols_own():
    """A server cannot make a party build ring-2^14/2^15 keys: only the protocol's default
    preset unless the party lists others, and a cap on key material checked before any
    key is built (ring 2^15 is over it even when listed)."""
    import time

    from fedsec.auc.policy import DEFAULT_MAX_KEY_BYTES, estimated_key_bytes
    from fedsec.crypto.params import DEFAULT_PRESET

    big = "CKKS_128_N32768_DEPTH1_S50"
    mid = "CKKS_128_N16384_DEPTH4"
    PartyPolicy().check_config(FHAUCConfig.create(100))
    PartyPolicy().check_config(MaliciousConfig.create(100))
    t0 = time.perf_counter()
    for cfg in (FHAUCConfig.create(100, preset=big), MaliciousConfig.create(100, preset=big),
                FHAUCConfig.create(100, preset=mid)):
        with pytest.raises(PolicyViolation) as info:
            PartyPolicy().check_config(cfg)
        assert info.value.check == "preset" and DEFAULT_PRESET in str(info.value)
    # listed: the papers' ring fits the cap, ring 2^15 does not (checked in milliseconds,
    # before any key exists)
    PartyPolicy(presets=(DEFAULT_PRESET, mid)).check_config(FHAUCConfig.create(100,
                                                                              preset=mid))
    with pytest.raises(PolicyViolation) as info:
        PartyPolicy(presets=(big,), max_key_bytes=64 << 20).check_config(
            FHAUCConfig.create(100, preset=big))
    assert info.value.check == "key-size" and "MiB" in str(info.value)
    assert time.perf_counter() - t0 < 5.0
    # ring 2^15 with the deep chain: over the default cap with relin + one rotation
    assert estimated_key_bytes("CKKS_128_N32768_DEPTH19", 2) > DEFAULT_MAX_KEY_BYTES
    PartyPolicy(presets=(big,), max_key_bytes=8 << 30).check_config(
        FHAUCConfig.create(100, preset=big))
    with pytest.raises(PolicyViolation) as info:
        PartyPolicy(max_key_bytes=1 << 20).check_config(FHAUCConfig.create(100))
    assert info.value.check == "key-size"
    # test presets stay usable in tests (allow_insecure), never from the CLI or Flower
    PartyPolicy().check_config(FHAUCConfig.create(10, preset=TEST_PRESET,
                                                  allow_insecure=True))
    with pytest.raises(TypeError):
        PartyPolicy(presets=DEFAULT_PRESET)  # type: ignore[arg-type]


def test_decision_points_below_the_policy_floor_are_refused():
    """Issue 22: a server that asks for very few decision points reads pooled confusion
    counts from the AUC and its bound; a party refuses N below its floor (default 10)."""
    from fedsec.auc.policy import DEFAULT_MIN_DECISION_POINTS

    few = FHAUCConfig.create(3, preset=TEST_PRESET, allow_insecure=True)
    with pytest.raises(PolicyViolation) as info:
        PartyPolicy().check_config(few)
    assert info.value.check == "decision-points" and "minimum of 10" in str(info.value)
    assert DEFAULT_MIN_DECISION_POINTS == 10
    PartyPolicy().check_config(FHAUCConfig.create(10, preset=TEST_PRESET,
                                                  allow_insecure=True))
    PartyPolicy(min_decision_points=3).check_config(few)
    with pytest.raises(PolicyViolation):
        PartyPolicy(min_decision_points=50).check_config(
            MaliciousConfig.create(20, preset=TEST_PRESET, allow_insecure=True,
                                   min_bound_bits=0.0))
    with pytest.raises(ValueError):
        PartyPolicy(min_decision_points=0)
