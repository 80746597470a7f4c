"""End-to-end sealed messages between roles whose traffic passes through a relay.

Wherever one role's message to another crosses a third (Flower's SuperLink, a principal
server relaying between its auxiliary server and the clients, a PFL server relaying to
the decryptor), the relay must learn nothing it would not learn in the paper and must not
forge or replay. A **sealed message** gives that with the roster identities:

* every role makes a fresh X25519 key for the run (:class:`SealKey`, from the OS's
  randomness) and **announces** its public half signed with its Ed25519 identity, bound to
  a context the run fixes (:func:`announce` / :func:`read_announcement`): the relay
  cannot substitute its own key;
* :func:`seal` encrypts to the recipient's announced key (:func:`fedsec.crypto.keys.seal_to`:
  ephemeral X25519, HKDF-SHA256, AES-256-GCM) and signs the box with the sender's
  identity; the signed bytes name the sender, the recipient and the caller's context
  (session, protocol, round, step, index): :func:`unseal` checks all of them, so a box
  cannot be read by the relay, forged by it, or moved to another recipient, sender,
  step or run. Replays of the same box in the **same** context are the receiving
  protocol's to refuse (its request ids, :mod:`fedsec.protocol.binding`).

Layout: ``magic (4) || u16 len(sender) || sender || u16 len(recipient) || recipient ||
box || Ed25519 signature (64)``. Every decoder raises :class:`~fedsec.errors.ProtocolError`
on anything malformed.
"""

from __future__ import annotations

import struct

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from fedsec.crypto.identity import Identity, Roster, check_party_name
from fedsec.crypto.keys import check_x25519, open_sealed, public_key_bytes, seal_to
from fedsec.errors import ProtocolError

__all__ = ["SealKey", "announce", "read_announcement", "seal", "unseal", "MAX_SEALED"]

_MAGIC = b"FSB1"
_ANN = b"FSA1"
_SIG = 64
#: Largest payload :func:`unseal` accepts (a receiver's bound, not the sender's).
MAX_SEALED = 1 << 30
_SEAL_TAG = "fedsec/sealed-message/v1"
_ANN_TAG = "fedsec/seal-key/v1"


class SealKey:
    """A role's X25519 key for one run (never sent; its public half is announced)."""

    def __init__(self, private_key: X25519PrivateKey | None = None) -> None:
        self._private = private_key or X25519PrivateKey.generate()

    @classmethod
    def generate(cls) -> SealKey:
        return cls()

    @property
    def public(self) -> bytes:
        return public_key_bytes(self._private.public_key())

    def to_bytes(self) -> bytes:
        """The private key's 32 raw bytes: for the role's own node-local state only."""
        return self._private.private_bytes(serialization.Encoding.Raw,
                                           serialization.PrivateFormat.Raw,
                                           serialization.NoEncryption())

    @classmethod
    def from_bytes(cls, data: bytes) -> SealKey:
        if not isinstance(data, bytes) or len(data) != 32:
            raise ProtocolError("a seal key is 32 bytes")
        return cls(X25519PrivateKey.from_private_bytes(data))

    def open(self, box: bytes, *, context: bytes) -> bytes:
        return open_sealed(self._private, box, context=context)

    def agree(self, peer_public: bytes) -> bytes:
        """The X25519 shared secret with ``peer_public`` (``ProtocolError`` if invalid);
        derive keys from it with a KDF and a purpose label, never use it directly."""
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey

        check_x25519(peer_public, who="a peer")
        try:
            return self._private.exchange(X25519PublicKey.from_public_bytes(peer_public))
        except ValueError:
            raise ProtocolError("invalid X25519 key of a peer") from None


def _field(data: bytes, pos: int, what: str) -> tuple[bytes, int]:
    if pos + 2 > len(data):
        raise ProtocolError(f"sealed message truncated ({what})")
    (n,) = struct.unpack_from(">H", data, pos)
    pos += 2
    if n == 0 or pos + n > len(data):
        raise ProtocolError(f"sealed message truncated ({what})")
    return data[pos:pos + n], pos + n


def _name_bytes(name: str) -> bytes:
    raw = check_party_name(name).encode()
    return struct.pack(">H", len(raw)) + raw


def announce(identity: Identity, key: SealKey, *, context: bytes) -> bytes:
    """``key``'s public half, signed by ``identity`` and bound to ``context``."""
    body = _ANN + _name_bytes(identity.name) + key.public
    return body + identity.sign(_ANN_TAG, body + b"|" + bytes(context))


def read_announcement(roster: Roster, name: str, data: bytes, *, context: bytes) -> bytes:
    """The X25519 public key ``name`` announced in ``data`` for ``context``;
    ``ProtocolError`` unless ``name`` is on the roster and signed exactly this."""
    if not isinstance(data, bytes) or not data.startswith(_ANN):
        raise ProtocolError("not a seal-key announcement")
    who, pos = _field(data, len(_ANN), "name")
    if who != name.encode():
        raise ProtocolError("the seal-key announcement names another role")
    if len(data) != pos + 32 + _SIG:
        raise ProtocolError("malformed seal-key announcement")
    public = data[pos:pos + 32]
    if name not in roster:
        raise ProtocolError("the announcing role is not on the roster")
    roster.verify(name, _ANN_TAG, data[:pos + 32] + b"|" + bytes(context), data[pos + 32:])
    check_x25519(public, who=name)
    return public


def seal(identity: Identity, recipient: str, recipient_public: bytes, payload: bytes, *,
         context: bytes) -> bytes:
    """``payload`` encrypted to ``recipient`` and signed by ``identity``, for ``context``."""
    head = _MAGIC + _name_bytes(identity.name) + _name_bytes(recipient)
    bound = head + b"|" + bytes(context)
    box = seal_to(recipient_public, bytes(payload), context=bound)
    signed = head + box
    return signed + identity.sign(_SEAL_TAG, signed + b"|" + bytes(context))


def unseal(key: SealKey, roster: Roster, sender: str, recipient: str, data: bytes, *,
           context: bytes) -> bytes:
    """Open a :func:`seal` ed message that ``sender`` sent to ``recipient`` (this role)
    in ``context``; ``ProtocolError`` on anything else (another sender, recipient or
    context, a bad signature, a box the relay altered, malformed bytes)."""
    if not isinstance(data, bytes) or not data.startswith(_MAGIC):
        raise ProtocolError("not a sealed message")
    if len(data) > MAX_SEALED + 4096:
        raise ProtocolError("sealed message too large")
    who, pos = _field(data, len(_MAGIC), "sender")
    to, pos = _field(data, pos, "recipient")
    if who != sender.encode():
        raise ProtocolError("sealed message from another sender")
    if to != recipient.encode():
        raise ProtocolError("sealed message for another recipient")
    if len(data) < pos + 32 + 12 + 16 + _SIG:
        raise ProtocolError("sealed message truncated")
    if sender not in roster:
        raise ProtocolError("the sender of a sealed message is not on the roster")
    signed, sig = data[:-_SIG], data[-_SIG:]
    roster.verify(sender, _SEAL_TAG, signed + b"|" + bytes(context), sig)
    head = data[:pos]
    return key.open(data[pos:-_SIG], context=head + b"|" + bytes(context))
