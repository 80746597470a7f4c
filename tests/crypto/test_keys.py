"""Sealed boxes: only the recipient opens them, in their context."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from fedsec.crypto.keys import PartyIdentity, open_sealed, public_key_bytes, seal_to
from fedsec.errors import ProtocolError

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


# Key set-up (signed, transcript-bound) is tested in test_keysetup.py and
# test_keysetup_attacks.py.
