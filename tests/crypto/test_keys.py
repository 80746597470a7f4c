"""Sealed boxes and key set-up: only the recipient opens, the aggregator gets public keys."""

from __future__ import annotations

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from fedsec.crypto import wire
from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.drbg import SEED_BYTES
from fedsec.crypto.keys import PartyIdentity, open_sealed, public_key_bytes, seal_to
from fedsec.crypto.keysetup import KeySetupAggregator, KeySetupParty
from fedsec.errors import ProtocolError

TEST_PRESET = "INSECURE_TEST_N4096_DEPTH1"
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


@pytest.fixture(scope="module")
def setup():
    parties = [KeySetupParty(n, allow_insecure=True) for n in NAMES]
    agg = KeySetupAggregator(preset=TEST_PRESET, rotations=[1, 2], conjugate=True,
                             allow_insecure=True)
    hellos = [p.hello() for p in parties]
    holder, request = agg.request(hellos)
    offer = parties[holder].offer(request)
    deliveries = agg.accept(offer)
    keys = [p.receive(d) for p, d in zip(parties, deliveries, strict=True)]
    return {"parties": parties, "agg": agg, "holder": holder, "request": request,
            "offer": offer, "deliveries": deliveries, "keys": keys}


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
        ct = k.context.deserialize(keys[(i + 1) % len(keys)].context.encrypt_to_bytes(x))
        np.testing.assert_allclose(k.context.decrypt(ct).real[:16], x, atol=1e-9)


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
    ct = ctx.rotate(ctx.deserialize(k.context.encrypt_to_bytes([1.0, 2.0, 3.0])), 1)
    np.testing.assert_allclose(k.context.decrypt(ct).real[:2], [2.0, 3.0], atol=1e-9)


def test_holder_is_chosen_by_the_aggregator_and_keeps_its_own_keys(setup):
    holder = setup["holder"]
    assert 0 <= holder < len(NAMES)
    deliveries = [wire.decode(d, expect="keys/deliver") for d in setup["deliveries"]]
    assert all(d.meta["holder"] == NAMES[holder] for d in deliveries)
    assert deliveries[holder].blobs == (b"",)  # nothing sealed to itself


def test_deliveries_are_not_interchangeable(setup):
    """An aggregator that redirects a sealed box to another party is caught."""
    parties, deliveries = setup["parties"], setup["deliveries"]
    holder = setup["holder"]
    others = [i for i in range(len(NAMES)) if i != holder]
    i, j = others[0], others[1]
    with pytest.raises(ProtocolError):
        parties[i].receive(deliveries[j])
    # tampered box
    msg = wire.decode(deliveries[i])
    box = bytearray(msg.blobs[0])
    box[-1] ^= 1
    with pytest.raises(ProtocolError):
        parties[i].receive(wire.encode("keys/deliver", msg.meta, [bytes(box)]))
    # the box re-labelled for another session
    meta = dict(msg.meta, session="0" * 32)
    with pytest.raises(ProtocolError):
        parties[i].receive(wire.encode("keys/deliver", meta, msg.blobs))
    # a non-holder told it is the holder
    meta = dict(msg.meta, holder=NAMES[i])
    with pytest.raises(ProtocolError, match="did not"):
        parties[i].receive(wire.encode("keys/deliver", meta, msg.blobs))


def test_offer_must_match_the_request(setup):
    parties, request = setup["parties"], setup["request"]
    agg = KeySetupAggregator(preset=TEST_PRESET, rotations=[1, 2], conjugate=True,
                             allow_insecure=True)
    with pytest.raises(ProtocolError, match="before"):
        agg.accept(setup["offer"])
    agg.request([p.hello() for p in parties])
    with pytest.raises(ProtocolError, match="does not match"):
        agg.accept(setup["offer"])  # another session
    with pytest.raises(ProtocolError):
        agg.accept(request)  # wrong kind


def test_offer_with_other_galois_keys_is_rejected():
    parties = [KeySetupParty(n, allow_insecure=True) for n in NAMES[:2]]
    agg = KeySetupAggregator(preset=TEST_PRESET, rotations=[1], conjugate=False,
                             allow_insecure=True)
    holder, request = agg.request([p.hello() for p in parties])
    msg = wire.decode(request)
    forged = wire.encode("keys/request", dict(msg.meta, rotations=[1, 4]), msg.blobs)
    with pytest.raises(ProtocolError, match="Galois"):
        agg.accept(parties[holder].offer(forged))


def test_hellos_are_validated():
    agg = KeySetupAggregator(preset=TEST_PRESET, rotations=[], conjugate=False,
                             allow_insecure=True)
    a = KeySetupParty("a", allow_insecure=True)
    with pytest.raises(ProtocolError, match="unique"):
        agg.request([a.hello(), KeySetupParty("a", allow_insecure=True).hello()])
    with pytest.raises(ProtocolError, match="malformed"):
        agg.request([wire.encode("keys/hello", {"name": "x"}, [b"short"])])
    with pytest.raises(ValueError):
        agg.request([])


def test_party_not_listed_refuses_to_offer():
    a, b = KeySetupParty("a", allow_insecure=True), KeySetupParty("b", allow_insecure=True)
    agg = KeySetupAggregator(preset=TEST_PRESET, rotations=[], conjugate=False,
                             allow_insecure=True)
    _, request = agg.request([a.hello()])
    with pytest.raises(ProtocolError, match="does not list"):
        b.offer(request)


def test_secure_parties_refuse_insecure_presets():
    a = KeySetupParty("a")  # no allow_insecure
    agg = KeySetupAggregator(preset=TEST_PRESET, rotations=[], conjugate=False,
                             allow_insecure=True)
    _, request = agg.request([a.hello()])
    with pytest.raises(ValueError, match="insecure"):
        a.offer(request)


def test_public_context_round_trips_through_bytes(setup):
    ctx = setup["agg"].context
    again = CKKSContext.from_public_bytes(ctx.public_bytes(), allow_insecure=True)
    assert again.rotations == ctx.rotations and not again.has_secret_key
