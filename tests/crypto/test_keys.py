"""Sealed boxes and the signed key set-up: only the recipient opens, the aggregator gets
public keys, every party ends with the same keys. Attacks: test_keysetup_attacks.py."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.drbg import SEED_BYTES
from fedsec.crypto.identity import Identity, Roster
from fedsec.crypto.keys import PartyIdentity, open_sealed, public_key_bytes, seal_to
from fedsec.crypto.keysetup import KeySetupAggregator, KeySetupParty, KeySpec
from fedsec.errors import ProtocolError, TamperingDetected
from fedsec.protocol import wire

TEST_PRESET = "INSECURE_TEST_N4096_DEPTH1_S39"
CTX = b"fedsec/test|session-1|bob"
SECRET = b"the CKKS secret key and the shared seed" * 10


@pytest.fixture(scope="module")
def bob():
    return PartyIdentity("bob")


def test_sealed_box_opens_for_its_recipient_and_context(bob):
    box = seal_to(bob.public_key, SECRET, context=CTX)
    assert bob.open(box, context=CTX) == SECRET
    assert SECRET not in box
    assert len(box) == 32 + 12 + len(SECRET) + 16
    # fresh ephemeral key and nonce each time
    assert seal_to(bob.public_key, SECRET, context=CTX) != box


def test_sealed_box_does_not_open_for_others(bob):
    box = seal_to(bob.public_key, SECRET, context=CTX)
    eve = PartyIdentity("eve")
    with pytest.raises(ProtocolError, match="authentication"):
        eve.open(box, context=CTX)
    with pytest.raises(ProtocolError, match="authentication"):
        bob.open(box, context=b"fedsec/test|session-2|bob")
    with pytest.raises(ProtocolError):
        open_sealed(X25519PrivateKey.generate(), box, context=CTX)


def test_tampered_box_raises(bob):
    box = seal_to(bob.public_key, SECRET, context=CTX)
    # ephemeral key, nonce, ciphertext body and tag
    for pos in (0, 31, 32, 43, 44, len(box) // 2, len(box) - 16, len(box) - 1):
        bad = bytearray(box)
        bad[pos] ^= 0x01
        with pytest.raises(ProtocolError):
            bob.open(bytes(bad), context=CTX)
    for n in (0, 10, 59, len(box) - 1):
        with pytest.raises(ProtocolError):
            bob.open(box[:n], context=CTX)
    with pytest.raises(ProtocolError):
        bob.open(box + b"\x00", context=CTX)


def test_seal_to_rejects_bad_public_key():
    with pytest.raises(ProtocolError, match="X25519"):
        seal_to(b"short", SECRET, context=CTX)


def test_identity_validates_name_and_keeps_private_key():
    with pytest.raises(ValueError):
        PartyIdentity("")
    with pytest.raises(ValueError):
        PartyIdentity("x" * 201)
    p = PartyIdentity("alice")
    assert len(p.public_key) == 32
    assert p.public_key == public_key_bytes(p._private.public_key())


# ---------------------------------------------------------------- key set-up
NAMES = ["hospital-a", "hospital-b", "hospital-c", "hospital-d"]


def spec(rotations=(1, 2), conjugate=True):
    return KeySpec.create(TEST_PRESET, rotations, conjugate, allow_insecure=True)


@pytest.fixture(scope="module")
def setup():
    identities = [Identity(n) for n in NAMES]
    roster = Roster.of(identities)
    parties = [KeySetupParty(i, roster, spec()) for i in identities]
    agg = KeySetupAggregator(roster, spec())
    hellos = [p.hello() for p in parties]
    holder, request = agg.request(hellos)
    offer = parties[holder].offer(request)
    deliveries = agg.accept(offer)
    confirms = [p.receive(d) for p, d in zip(parties, deliveries, strict=True)]
    confirmed = agg.confirm(confirms)
    keys = [p.finish(confirmed) for p in parties]
    return {"identities": identities, "roster": roster, "parties": parties, "agg": agg,
            "holder": holder, "request": request, "offer": offer, "hellos": hellos,
            "deliveries": deliveries, "confirms": confirms, "confirmed": confirmed,
            "keys": keys}


def test_every_party_gets_the_same_secret_key_and_seed(setup):
    keys = setup["keys"]
    assert [k.index for k in keys] == list(range(len(NAMES)))
    assert all(k.names == tuple(NAMES) for k in keys)
    assert len({k.session for k in keys}) == 1 and keys[0].session == setup["agg"].session
    assert len({k.seed for k in keys}) == 1 and len(keys[0].seed) == SEED_BYTES
    sk_blobs = {wire.decode(k.context.secret_bytes()).blobs[0] for k in keys}
    assert len(sk_blobs) == 1
    # functionally too: any party decrypts any other's ciphertext
    x = np.linspace(-1, 1, 16)
    for i, k in enumerate(keys):
        ct = k.context.deserialize(keys[(i + 1) % len(keys)].context.encrypt_bytes(x))
        # fresh noise at scale 2^39: ~2e-10 a slot
        np.testing.assert_allclose(k.context.decrypt(ct).real[:16], x, atol=1e-7)


def test_aggregator_context_has_public_material_only(setup):
    agg = setup["agg"]
    ctx = agg.context
    assert ctx is not None and not ctx.has_secret_key
    with pytest.raises(ValueError, match="no secret key"):
        ctx.secret_bytes()
    with pytest.raises(ValueError, match="no secret key"):
        ctx.decrypt(ctx.encrypt([1.0]))
    assert ctx.rotations == (1, 2) and ctx.conjugate_key
    assert agg.public_bytes_size == len(wire.decode(setup["offer"]).blobs[0])
    # and it can compute on what parties send
    k = setup["keys"][0]
    ct = ctx.rotate(ctx.deserialize(k.context.encrypt_bytes([1.0, 2.0, 3.0])), 1)
    # key switching adds ~2^17 at scale 2^39 (FHAUC rotates only at 2^78)
    np.testing.assert_allclose(k.context.decrypt(ct).real[:2], [2.0, 3.0], atol=1e-5)


def test_holder_is_fixed_by_the_transcript(setup):
    """The aggregator does not choose the key holder: any other party refuses to offer."""
    holder, request, parties = setup["holder"], setup["request"], setup["parties"]
    for i, p in enumerate(parties):
        if i != holder:
            with pytest.raises(ProtocolError, match="key holder"):
                p.offer(request)
    deliveries = [wire.decode(d, expect="keys/deliver") for d in setup["deliveries"]]
    assert deliveries[holder].blobs[3] == b""  # nothing sealed to itself
    assert all(len(d.blobs[3]) > 0 for i, d in enumerate(deliveries) if i != holder)


def test_deliveries_are_not_interchangeable(setup):
    """A box redirected to another party, or altered, is caught before it is opened."""
    parties, deliveries, holder = setup["parties"], setup["deliveries"], setup["holder"]
    others = [i for i in range(len(NAMES)) if i != holder]
    i, j = others[0], others[1]
    with pytest.raises(TamperingDetected) as info:
        parties[i].receive(deliveries[j])
    assert info.value.check == "box"
    msg = wire.decode(deliveries[i])
    box = bytearray(msg.blobs[3])
    box[-1] ^= 1
    with pytest.raises(TamperingDetected):
        parties[i].receive(wire.encode("keys/deliver", msg.meta, [*msg.blobs[:3], bytes(box)]))


def test_confirmations_cover_every_participant(setup):
    parties, confirmed = setup["parties"], setup["confirmed"]
    msg = wire.decode(confirmed)
    short = wire.encode("keys/confirmed", {}, msg.blobs[:-1])
    with pytest.raises(TamperingDetected, match="participants"):
        parties[0].finish(short)
    swapped = wire.encode("keys/confirmed", {}, [msg.blobs[1], msg.blobs[0], *msg.blobs[2:]])
    with pytest.raises(TamperingDetected):
        parties[0].finish(swapped)


def test_aggregator_checks_the_offer_and_confirmations(setup):
    roster = setup["roster"]
    agg = KeySetupAggregator(roster, spec())
    with pytest.raises(ProtocolError, match="before"):
        agg.accept(setup["offer"])
    with pytest.raises(ProtocolError, match="before"):
        agg.confirm(setup["confirms"])
    fresh = [KeySetupParty(i, roster, spec()) for i in setup["identities"]]
    agg.request([p.hello() for p in fresh])
    with pytest.raises(ProtocolError, match="does not match"):
        agg.accept(setup["offer"])  # another session's offer
    with pytest.raises(ProtocolError):
        agg.accept(setup["request"])  # wrong kind


def test_aggregator_refuses_other_keys_than_its_spec(setup):
    roster, identities = setup["roster"], setup["identities"]
    other = spec(rotations=(1,), conjugate=False)
    parties = [KeySetupParty(i, roster, other) for i in identities]
    agg = KeySetupAggregator(roster, other)
    holder, request = agg.request([p.hello() for p in parties])
    offer = parties[holder].offer(request)
    strict = copy.copy(agg)  # the same request, under a stricter spec
    strict._spec = spec()  # noqa: SLF001 - expects (1, 2) + conjugation
    with pytest.raises(ProtocolError, match="other keys"):
        strict.accept(offer)


def test_hellos_are_attributed_and_the_others_go_on(setup):
    roster, identities = setup["roster"], setup["identities"]
    parties = [KeySetupParty(i, roster, spec()) for i in identities]
    hellos = [p.hello() for p in parties]
    agg = KeySetupAggregator(roster, spec())
    bad = wire.decode(hellos[1])
    zero_key = wire.encode("keys/hello", bad.meta, [bytes(32), *bad.blobs[1:]])
    _, _ = agg.request([hellos[0], zero_key, hellos[2], hellos[3], hellos[0]])
    assert set(agg.rejected) == {1, 4}
    assert agg.names == (NAMES[0], NAMES[2], NAMES[3])
    with pytest.raises(ProtocolError, match="valid hellos"):
        KeySetupAggregator(roster, spec(), min_parties=4).request(hellos[:3])


def test_party_policy_quorum_and_roster_membership(setup):
    roster, identities = setup["roster"], setup["identities"]
    strict = [KeySetupParty(i, roster, spec(), min_parties=4) for i in identities]
    agg = KeySetupAggregator(roster, spec())
    holder, request = agg.request([p.hello() for p in strict[:3]])
    with pytest.raises(ProtocolError, match="at least 4"):
        strict[holder].offer(request)
    outsider = Identity("mallory")
    with pytest.raises(ValueError, match="not on the roster"):
        KeySetupParty(outsider, roster, spec())
    impostor = Identity(NAMES[0])  # right name, other key
    with pytest.raises(ValueError, match="not on the roster"):
        KeySetupParty(impostor, roster, spec())


def test_state_survives_a_restart_between_every_step():
    """Stateless runtimes save the party between steps (X25519 key, then secrets)."""
    identities = [Identity(n) for n in NAMES[:3]]
    roster = Roster.of(identities)
    sp = spec()

    by_name = {i.name: i for i in identities}

    def reload(p):
        return KeySetupParty.from_bytes(p.to_bytes(), identity=by_name[p.name], roster=roster,
                                        spec=sp)

    parties = [KeySetupParty(i, roster, sp) for i in identities]
    agg = KeySetupAggregator(roster, sp)
    hellos = [p.hello() for p in parties]
    parties = [reload(p) for p in parties]
    holder, request = agg.request(hellos)
    offer = parties[holder].offer(request)
    parties = [reload(p) for p in parties]
    confirms = [p.receive(d) for p, d in zip(parties, agg.accept(offer), strict=True)]
    parties = [reload(p) for p in parties]
    keys = [p.finish(agg.confirm(confirms)) for p in parties]
    assert len({k.seed for k in keys}) == 1 and keys[0].session == agg.session
    with pytest.raises(ProtocolError):
        KeySetupParty.from_bytes(parties[0].to_bytes(), identity=identities[1],
                                 roster=roster, spec=sp)


def test_secure_parties_refuse_insecure_presets():
    with pytest.raises(ValueError, match="insecure"):
        KeySpec.create(TEST_PRESET, [1], True)


def test_public_context_round_trips_through_bytes(setup):
    ctx = setup["agg"].context
    again = CKKSContext.from_public_bytes(ctx.public_bytes(), allow_insecure=True)
    assert again.rotations == ctx.rotations and not again.has_secret_key
