"""Attacks on the :class:`~fedsec.crypto.keysetup.VerificationCache` that the simulated
parties of one in-process key set-up share: a party must never accept, thanks to a
check another party made, anything it would have refused alone."""

from __future__ import annotations

from typing import Any

import pytest

from fedsec.crypto.identity import Identity, Roster
from fedsec.crypto.keysetup import KeySetupAggregator, KeySetupParty, KeySpec, VerificationCache
from fedsec.errors import ProtocolError, TamperingDetected
from fedsec.protocol import wire
from fedsec.testing import keysetup as harness
from fedsec.testing.keysetup import KEYSETUP_ATTACKS, play

TEST_PRESET = "INSECURE_TEST_N4096_DEPTH1_S39"
NAMES = ["hospital-a", "hospital-b", "hospital-c", "hospital-d"]
SPEC = KeySpec.create(TEST_PRESET, [8], True, allow_insecure=True)
OTHER_SPEC = KeySpec.create(TEST_PRESET, [16], True, allow_insecure=True)
WHOLE = len(NAMES)


@pytest.fixture(scope="module")
def fed() -> tuple[list[Identity], Roster]:
    ids = [Identity(n) for n in NAMES]
    return ids, Roster.of(ids)


def _parties(ids: list[Identity], roster: Roster, cache: VerificationCache, *,
             spec: KeySpec = SPEC, **kw: Any) -> dict[str, KeySetupParty]:
    return {i.name: KeySetupParty(i, roster, spec, verification_cache=cache, **kw)
            for i in ids}


def _request(parties: dict[str, KeySetupParty], roster: Roster, spec: KeySpec = SPEC,
             drop: tuple[str, ...] = ()) -> tuple[KeySetupAggregator, str, bytes]:
    agg = KeySetupAggregator(roster, spec, min_parties=2)
    hellos = [h for n, h in ((n, p.hello()) for n, p in parties.items()) if n not in drop]
    holder_idx, request = agg.request(hellos)
    return agg, agg.names[holder_idx], request


@pytest.mark.parametrize("name", sorted(KEYSETUP_ATTACKS))
def test_every_aggregator_attack_is_stopped_with_parties_sharing_a_cache(
        fed: tuple[list[Identity], Roster], name: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The dishonest aggregator's whole battery, against parties that share one cache
    (as in :func:`run_key_setup`): no party finishes with keys the attacker knows or that
    differ from its peers', and every refusal is a protocol error."""
    ids, roster = fed
    cache = VerificationCache()
    real = harness.KeySetupParty
    made: list[KeySetupParty] = []

    def shared(*args: Any, **kwargs: Any) -> KeySetupParty:
        made.append(real(*args, verification_cache=cache, **kwargs))
        return made[-1]

    monkeypatch.setattr(harness, "KeySetupParty", shared)
    out = play(ids, roster, SPEC, KEYSETUP_ATTACKS[name](), min_parties=WHOLE)
    assert not out.compromised and not out.split
    for exc in out.raised.values():
        assert isinstance(exc, ProtocolError | TamperingDetected)
    if name == "request-rotations":  # harmless: the keys come from the party's own spec
        assert out.kind == "completed"
    else:
        assert out.raised, f"{name}: nobody refused"
    assert len(made) >= len(NAMES)  # every party had the shared cache


def test_a_cached_request_still_needs_the_partys_own_hello(
        fed: tuple[list[Identity], Roster]) -> None:
    """Party A checks (and caches) a request; a party of the same run whose current
    hello is not in it (the aggregator kept an earlier hello of it, validly signed) is
    answered from the cache for the signatures but still refuses: its own hello is
    checked per party."""
    ids, roster = fed
    cache = VerificationCache()
    parties = _parties(ids, roster, cache)
    _agg, holder, request = _request(parties, roster)
    parties[holder].offer(request)  # cached
    # a second party object for one non-holder: fresh hello, same identity, same cache
    victim = next(i for i in ids if i.name != holder)
    again = KeySetupParty(victim, roster, SPEC, verification_cache=cache)
    again.hello()
    hits = cache.hits
    with pytest.raises(TamperingDetected) as exc:
        again.receive(wire.encode("keys/deliver", {}, [request, b"h", b"s", b"b"]))
    assert exc.value.check == "own-hello"
    assert cache.hits == hits + 1  # the request itself came from the cache


def test_a_party_without_its_hello_is_not_let_in_by_a_cached_request(
        fed: tuple[list[Identity], Roster]) -> None:
    ids, roster = fed
    cache = VerificationCache()
    parties = _parties(ids, roster, cache, min_parties=2)
    dropped = NAMES[-1]
    _agg, holder, request = _request(parties, roster, drop=(dropped,))
    if holder == dropped:  # pragma: no cover - the holder is among the hellos
        pytest.skip("holder dropped")
    parties[holder].offer(request)
    with pytest.raises(TamperingDetected, match="own hello"):
        parties[dropped].offer(request)


def test_a_stricter_quorum_is_not_answered_from_a_laxer_partys_check(
        fed: tuple[list[Identity], Roster]) -> None:
    """Same roster and spec, one party with quorum 2 checks a 3-hello request; a party
    whose policy needs all 4 refuses the identical bytes."""
    ids, roster = fed
    cache = VerificationCache()
    lax = _parties(ids, roster, cache, min_parties=2)
    _agg, holder, request = _request(lax, roster, drop=(NAMES[-1],))
    lax[holder].offer(request)  # accepted and cached
    strict = KeySetupParty(next(i for i in ids if i.name == holder), roster, SPEC,
                           min_parties=WHOLE, verification_cache=cache)
    strict._hello = lax[holder]._hello  # the same hello as the lax one (worst case)
    with pytest.raises(ProtocolError, match="requires at least 4"):
        strict.offer(request)


def test_a_smaller_size_limit_is_not_answered_from_a_larger_one(
        fed: tuple[list[Identity], Roster]) -> None:
    ids, roster = fed
    cache = VerificationCache()
    parties = _parties(ids, roster, cache)
    _agg, holder, request = _request(parties, roster)
    parties[holder].offer(request)
    small = KeySetupParty(next(i for i in ids if i.name == holder), roster, SPEC,
                          max_message_bytes=len(request) - 1, verification_cache=cache)
    small._hello = parties[holder]._hello
    with pytest.raises(ProtocolError):
        small.offer(request)


def test_another_spec_or_roster_is_not_answered_from_the_cache(
        fed: tuple[list[Identity], Roster]) -> None:
    ids, roster = fed
    cache = VerificationCache()
    parties = _parties(ids, roster, cache)
    _agg, holder, request = _request(parties, roster)
    parties[holder].offer(request)
    me = next(i for i in ids if i.name == holder)
    other_spec = KeySetupParty(me, roster, OTHER_SPEC, verification_cache=cache)
    other_spec._hello = parties[holder]._hello
    with pytest.raises(ProtocolError, match="spec|another"):
        other_spec.offer(request)
    other_roster = Roster.of(ids, quorum=2)
    assert other_roster.digest() != roster.digest()
    other = KeySetupParty(me, other_roster, SPEC, verification_cache=cache)
    other._hello = parties[holder]._hello
    with pytest.raises(ProtocolError, match="roster"):
        other.offer(request)


def test_equivocated_requests_and_one_bundle_are_refused_with_a_cache(
        fed: tuple[list[Identity], Roster]) -> None:
    """Two groups of parties get two different (valid) requests, and then the same
    confirmations: the cached confirmation check is keyed by the participants, and each
    party compares the confirmed transcripts with its own."""
    ids, roster = fed
    cache = VerificationCache()
    parties = _parties(ids, roster, cache, min_parties=2)
    # group 1: everyone; group 2: the same hellos but one left out
    agg1, holder1, req1 = _request(parties, roster)
    agg2 = KeySetupAggregator(roster, SPEC, min_parties=2)
    hellos = [p._hello for p in parties.values()]
    assert all(hellos)
    idx2, req2 = agg2.request([h for h in hellos if h is not None][:3])
    offer1 = parties[holder1].offer(req1)
    deliveries1 = dict(zip(agg1.names, agg1.accept(offer1), strict=True))
    confirms = {n: parties[n].receive(d) for n, d in deliveries1.items()}
    bundle = agg1.confirm(list(confirms.values()))
    # a party of group 2 has received req2 (other names) instead: its pending names
    # differ, so the same bundle is not answered from group 1's cached check
    holder2 = agg2.names[idx2]
    solo = KeySetupParty(next(i for i in ids if i.name == holder2), roster, SPEC,
                         min_parties=2, verification_cache=cache)
    solo._hello = parties[holder2]._hello
    offer2 = solo.offer(req2)
    d2 = dict(zip(agg2.names, agg2.accept(offer2), strict=True))
    solo.receive(d2[holder2])
    with pytest.raises(TamperingDetected):
        solo.finish(bundle)
    # group 1 itself finishes (honest for them)
    for n in agg1.names:
        parties[n].finish(bundle)


def test_cached_results_cannot_be_changed_by_one_party_for_the_others(
        fed: tuple[list[Identity], Roster]) -> None:
    """A checked request is shared by every party of the run: its fields are frozen
    (the position index included), so no party's code can change what another reads."""
    ids, roster = fed
    cache = VerificationCache()
    parties = _parties(ids, roster, cache)
    _agg, holder, request = _request(parties, roster)
    req = parties[holder]._checked_request(request)
    with pytest.raises((AttributeError, TypeError)):
        req.index["intruder"] = 0  # type: ignore[index]
    with pytest.raises(AttributeError):
        req.names = ()  # type: ignore[misc]
    assert parties[NAMES[0]]._checked_request(request) is req
