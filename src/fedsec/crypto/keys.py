"""Party identities and sealed key distribution (X25519 + HKDF-SHA256 + AES-256-GCM).

As in the papers' set-up, one randomly chosen party generates the CKKS key pair and a
shared seed; they reach every other party *sealed* under that party's X25519 public key.
The aggregator relays sealed boxes it cannot open and receives public material only.

A sealed box is ``ephemeral_public_key (32) || nonce (12) || AES-GCM ciphertext``; the key
is ``HKDF(X25519(ephemeral, recipient), info=context)``, and the associated data binds the
recipient's public key and the caller's context string, so a box cannot be replayed to
another recipient or in another protocol.
"""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from fedsec.errors import ProtocolError

__all__ = ["PartyIdentity", "seal_to", "open_sealed", "public_key_bytes", "check_x25519"]

_RAW = serialization.Encoding.Raw
_PUB = serialization.PublicFormat.Raw


def public_key_bytes(key: X25519PublicKey) -> bytes:
    return key.public_bytes(_RAW, _PUB)


def _derive(shared: bytes, context: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=b"fedsec/seal/v1",
                info=context).derive(shared)


def check_x25519(public: bytes, *, who: str = "a party") -> None:
    """Raise ``ProtocolError`` unless ``public`` is a usable X25519 key (32 bytes, not a
    low-order point that makes every shared secret zero)."""
    if not isinstance(public, bytes) or len(public) != 32:
        raise ProtocolError(f"the X25519 key of {who} is not 32 bytes")
    try:
        X25519PrivateKey.generate().exchange(X25519PublicKey.from_public_bytes(public))
    except ValueError:
        raise ProtocolError(f"the X25519 key of {who} is invalid (low order)") from None


def seal_to(recipient_public: bytes, plaintext: bytes, *, context: bytes) -> bytes:
    """Encrypt ``plaintext`` so only the holder of ``recipient_public``'s key can read it."""
    try:
        recipient = X25519PublicKey.from_public_bytes(recipient_public)
    except ValueError:
        raise ProtocolError("invalid X25519 public key") from None
    eph = X25519PrivateKey.generate()
    eph_pub = public_key_bytes(eph.public_key())
    try:
        shared = eph.exchange(recipient)
    except ValueError:
        raise ProtocolError("invalid X25519 public key (low order)") from None
    key = _derive(shared, context)
    nonce = os.urandom(12)
    aad = b"fedsec/seal/v1|" + recipient_public + b"|" + context
    return eph_pub + nonce + AESGCM(key).encrypt(nonce, plaintext, aad)


def open_sealed(private_key: X25519PrivateKey, sealed: bytes, *, context: bytes) -> bytes:
    """Open a box made by :func:`seal_to`; raise ``ProtocolError`` if it was altered."""
    if len(sealed) < 32 + 12 + 16:
        raise ProtocolError("sealed box is truncated")
    try:
        eph = X25519PublicKey.from_public_bytes(sealed[:32])
    except ValueError:
        raise ProtocolError("sealed box carries an invalid ephemeral key") from None
    mine = public_key_bytes(private_key.public_key())
    try:
        shared = private_key.exchange(eph)
    except ValueError:
        raise ProtocolError("sealed box carries an invalid ephemeral key") from None
    key = _derive(shared, context)
    aad = b"fedsec/seal/v1|" + mine + b"|" + context
    try:
        return AESGCM(key).decrypt(sealed[32:44], sealed[44:], aad)
    except InvalidTag:
        raise ProtocolError("sealed box failed authentication (altered or not for us)") \
            from None


class PartyIdentity:
    """A party's name and X25519 key pair (generated locally, never sent)."""

    def __init__(self, name: str, private_key: X25519PrivateKey | None = None) -> None:
        if not isinstance(name, str) or not name or len(name) > 200:
            raise ValueError("a party name must be a non-empty string of at most 200 chars")
        self.name = name
        self._private = private_key or X25519PrivateKey.generate()

    @property
    def public_key(self) -> bytes:
        return public_key_bytes(self._private.public_key())

    def open(self, sealed: bytes, *, context: bytes) -> bytes:
        return open_sealed(self._private, sealed, context=context)
