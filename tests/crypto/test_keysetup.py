"""Signed key set-up, honest runs, beyond test_keys.py: each kind of bad hello is
attributed to its sender while the others complete, the key holder re-checks every hello
the aggregator relays, party keys round-trip, key specs are bounded."""

from __future__ import annotations

import pytest

from fedsec.crypto.identity import Identity, Roster
from fedsec.crypto.keysetup import (
    KeySetupAggregator,
    KeySetupParty,
    KeySpec,
    PartyKeys,
    _hello_payload,
    run_key_setup,
)
from fedsec.errors import ProtocolError
from fedsec.protocol import wire

TEST_PRESET = "INSECURE_TEST_N4096_DEPTH1_S39"
NAMES = ["hospital-a", "hospital-b", "hospital-c", "hospital-d"]
SPEC = KeySpec.create(TEST_PRESET, [1, 2, 8], True, allow_insecure=True)


@pytest.fixture(scope="module")
def fed() -> tuple[list[Identity], Roster]:
    ids = [Identity(n) for n in NAMES]
    return ids, Roster.of(ids)


@pytest.fixture(scope="module")
def honest(fed: tuple[list[Identity], Roster]) -> tuple[KeySetupAggregator, list[PartyKeys]]:
    ids, roster = fed
    return run_key_setup(ids, roster, SPEC)


def _sk(k: PartyKeys) -> bytes:
    return wire.decode(k.context.secret_bytes()).blobs[0]


def test_party_keys_round_trip(honest: tuple[KeySetupAggregator, list[PartyKeys]]) -> None:
    k = honest[1][2]
    again = PartyKeys.from_bytes(k.to_bytes(), allow_insecure=True)
    assert (again.session, again.names, again.index, again.seed) == \
        (k.session, k.names, k.index, k.seed)
    assert _sk(again) == _sk(k)
    with pytest.raises(ProtocolError):
        PartyKeys.from_bytes(k.to_bytes()[:-1], allow_insecure=True)


def _hello_with(ident: Identity, roster: Roster, x25519: bytes, *, sig: bytes | None = None,
                name: str | None = None) -> bytes:
    nonce = b"\x07" * 16
    payload = _hello_payload(roster.digest(), SPEC.digest(), name or ident.name, x25519, nonce)
    s = sig if sig is not None else ident.sign("keys/hello", payload)
    return wire.encode("keys/hello", {"name": name or ident.name,
                                      "roster": roster.digest().hex(),
                                      "spec": SPEC.digest().hex()}, [x25519, nonce, s])


def _bad_hellos(ids: list[Identity], roster: Roster) -> dict[str, tuple[bytes, str]]:
    d = ids[3]
    good_x = KeySetupParty(d, roster, SPEC).hello()
    x = wire.decode(good_x).blobs[0]
    bad_sig = bytearray(wire.decode(good_x).blobs[2])
    bad_sig[5] ^= 1
    mallory = Identity("mallory")
    other_spec = KeySetupParty(d, roster, KeySpec.create(TEST_PRESET, [1], True,
                                                         allow_insecure=True)).hello()
    return {
        # d's own, validly signed hello with an all-zero (low-order) X25519 key
        "zero-x25519": (_hello_with(d, roster, b"\x00" * 32), "low order"),
        "bad-signature": (wire.encode("keys/hello", wire.decode(good_x).meta,
                                      [x, wire.decode(good_x).blobs[1], bytes(bad_sig)]),
                          "does not verify"),
        "unknown-name": (_hello_with(mallory, roster, x), "not on the roster"),
        "other-spec": (other_spec, "expects other keys"),
        "truncated": (good_x[:-3], "truncated"),
    }


@pytest.mark.parametrize("kind", ["zero-x25519", "bad-signature", "unknown-name",
                                  "other-spec", "truncated", "second-hello"])
def test_bad_hello_is_attributed_and_the_others_complete(
        fed: tuple[list[Identity], Roster], kind: str) -> None:
    ids, roster = fed
    parties = [KeySetupParty(i, roster, SPEC, min_parties=3) for i in ids[:3]]
    hellos = [p.hello() for p in parties]
    if kind == "second-hello":  # a replayed copy of a participant's hello
        bad, reason, pos = hellos[0], "a copy of the hello of 'hospital-a'", 3
        hellos.append(bad)
    else:
        bad, reason = _bad_hellos(ids, roster)[kind]
        pos = 1
        hellos.insert(pos, bad)
    agg = KeySetupAggregator(roster, SPEC, min_parties=3)
    holder, request = agg.request(hellos)
    assert agg.names == tuple(NAMES[:3])
    assert list(agg.rejected) == [pos] and reason in agg.rejected[pos]
    by = {p.name: p for p in parties}
    deliveries = agg.accept(by[agg.names[holder]].offer(request))
    bundle = agg.confirm([by[n].receive(d) for n, d in zip(agg.names, deliveries,
                                                            strict=True)])
    keys = [p.finish(bundle) for p in parties]
    assert len({_sk(k) for k in keys}) == 1 and keys[0].names == tuple(NAMES[:3])


@pytest.mark.parametrize("kind", ["zero-x25519", "bad-signature", "unknown-name",
                                  "other-spec"])
def test_holder_refuses_a_request_carrying_a_bad_hello(
        fed: tuple[list[Identity], Roster], kind: str) -> None:
    """The aggregator may not vouch for a hello: the key holder checks every one."""
    ids, roster = fed
    parties = [KeySetupParty(i, roster, SPEC, min_parties=2) for i in ids[:3]]
    bad, reason = _bad_hellos(ids, roster)[kind]
    raws = [p.hello() for p in parties] + [bad]
    request = wire.encode("keys/request", {}, raws)
    for p in parties:
        with pytest.raises(ProtocolError, match=reason):
            p.offer(request)


def test_only_the_transcript_holder_offers_and_roster_members_take_part(
        fed: tuple[list[Identity], Roster]) -> None:
    ids, roster = fed
    parties = [KeySetupParty(i, roster, SPEC) for i in ids]
    agg = KeySetupAggregator(roster, SPEC)
    holder, request = agg.request([p.hello() for p in parties])
    for i, p in enumerate(parties):
        if i != holder:
            with pytest.raises(ProtocolError, match="not the transcript's key holder"):
                p.offer(request)
    with pytest.raises(ValueError, match="not on the roster"):
        KeySetupParty(Identity("mallory"), roster, SPEC)
    with pytest.raises(ValueError, match="not on the roster"):
        KeySetupParty(Identity(NAMES[0]), roster, SPEC)  # right name, other key
    with pytest.raises(ValueError, match="exceeds"):
        KeySetupParty(ids[0], roster, SPEC, min_parties=5)


def test_key_spec_is_bounded_and_canonical() -> None:
    with pytest.raises(ValueError, match="at most 64"):
        KeySpec.create(TEST_PRESET, range(1, 201), True, allow_insecure=True)
    a = KeySpec.create(TEST_PRESET, [8, 1, 2, 2049, 0], True, allow_insecure=True)
    assert a.rotations == (1, 2, 8)
    assert a.digest() != KeySpec.create(TEST_PRESET, [1, 2, 8], False,
                                        allow_insecure=True).digest()
    with pytest.raises(ValueError, match="insecure"):
        KeySpec.create(TEST_PRESET, [1], True)


def test_key_setup_default_quorum_is_the_policy_rule(fed: tuple[list[Identity], Roster]
                                                     ) -> None:
    """Issue 22: KeySetupParty's default quorum is ``policy.default_quorum`` with no mode
    (the roster's quorum, else the whole roster), not a separate 2: without a quorum of
    its own a party refuses to build keys for part of the roster."""
    from fedsec.auc.policy import default_quorum

    ids, roster = fed
    parties = [KeySetupParty(i, roster, SPEC) for i in ids]
    agg = KeySetupAggregator(roster, SPEC, min_parties=2)
    holder, request = agg.request([p.hello() for p in parties[:3]])
    with pytest.raises(ProtocolError, match=f"at least {default_quorum(len(roster))}"):
        parties[holder].offer(request)
    with_q = Roster(roster.entries, quorum=3)
    relaxed = [KeySetupParty(i, with_q, SPEC) for i in ids]
    agg = KeySetupAggregator(with_q, SPEC, min_parties=3)
    holder, request = agg.request([p.hello() for p in relaxed[:3]])
    relaxed[holder].offer(request)  # the roster's stated quorum is met
