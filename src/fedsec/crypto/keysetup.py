"""Key set-up as roles exchanging bytes (seed 000, Sec. IV-C-1).

1. Every party sends :meth:`KeySetupParty.hello` (its name and X25519 public key).
2. The aggregator picks a key holder uniformly at random (``secrets``) and sends it
   :meth:`KeySetupAggregator.request`.
3. The key holder generates the CKKS keys and a 32-byte shared seed, and answers with
   :meth:`KeySetupParty.offer`: public material for the aggregator plus one sealed box per
   other party holding the secret key and the seed.
4. :meth:`KeySetupAggregator.accept` keeps the public material and returns one delivery
   message per party; :meth:`KeySetupParty.receive` opens it.

The aggregator sees public keys and sealed boxes only.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from fedsec.crypto import wire
from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.drbg import SEED_BYTES
from fedsec.crypto.keys import PartyIdentity, seal_to
from fedsec.crypto.params import get_preset
from fedsec.errors import ProtocolError

__all__ = ["PartyKeys", "KeySetupParty", "KeySetupAggregator"]


@dataclass
class PartyKeys:
    """What a party holds after set-up: the CKKS secret context and the shared seed."""

    session: str
    names: tuple[str, ...]
    index: int
    context: CKKSContext
    seed: bytes

    @property
    def n_parties(self) -> int:
        return len(self.names)

    def to_bytes(self) -> bytes:
        """Serialize for local storage (a party's own disk). Contains the SECRET KEY."""
        meta = {"session": self.session, "names": list(self.names), "index": self.index}
        return wire.encode("keys/party-state", meta, [self.context.secret_bytes(), self.seed])

    @classmethod
    def from_bytes(cls, data: bytes, *, allow_insecure: bool = False) -> PartyKeys:
        msg = wire.decode(data, expect="keys/party-state")
        if len(msg.blobs) != 2 or len(msg.blobs[1]) != SEED_BYTES:
            raise ProtocolError("malformed party key state")
        ctx = CKKSContext.from_secret_bytes(msg.blobs[0], allow_insecure=allow_insecure)
        names = tuple(str(n) for n in msg.meta.get("names", []))
        return cls(str(msg.meta.get("session", "")), names, int(msg.meta.get("index", -1)),
                   ctx, msg.blobs[1])


def _box_context(session: str, name: str) -> bytes:
    return f"fedsec/keysetup/v1|{session}|{name}".encode()


class KeySetupParty:
    """A party's side of key set-up."""

    def __init__(self, name: str, *, allow_insecure: bool = False) -> None:
        self.identity = PartyIdentity(name)
        self._allow_insecure = allow_insecure
        self._own: PartyKeys | None = None

    def to_bytes(self) -> bytes:
        """Serialize this party's set-up state for its own disk (holds its X25519 private
        key and, for the key holder, the CKKS secret key) between protocol steps."""
        from cryptography.hazmat.primitives import serialization

        raw = self.identity._private.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
            serialization.NoEncryption())
        own = self._own.to_bytes() if self._own is not None else b""
        return wire.encode("keys/setup-state", {"name": self.name}, [raw, own])

    @classmethod
    def from_bytes(cls, data: bytes, *, allow_insecure: bool = False) -> KeySetupParty:
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

        msg = wire.decode(data, expect="keys/setup-state")
        if len(msg.blobs) != 2:
            raise ProtocolError("malformed key set-up state")
        out = cls.__new__(cls)
        out.identity = PartyIdentity(str(msg.meta.get("name", "")),
                                     X25519PrivateKey.from_private_bytes(msg.blobs[0]))
        out._allow_insecure = allow_insecure
        out._own = PartyKeys.from_bytes(msg.blobs[1], allow_insecure=allow_insecure) \
            if msg.blobs[1] else None
        return out

    @property
    def name(self) -> str:
        return self.identity.name

    def hello(self) -> bytes:
        return wire.encode("keys/hello", {"name": self.name}, [self.identity.public_key])

    def offer(self, request: bytes) -> bytes:
        """Generate the key set (this party was chosen as key holder)."""
        msg = wire.decode(request, expect="keys/request")
        try:
            session = str(msg.meta["session"])
            names = [str(n) for n in msg.meta["names"]]
            preset = str(msg.meta["preset"])
            rotations = [int(r) for r in msg.meta["rotations"]]
            conjugate = bool(msg.meta["conjugate"])
        except (KeyError, TypeError, ValueError):
            raise ProtocolError("malformed key request") from None
        if len(names) != len(msg.blobs) or self.name not in names:
            raise ProtocolError("key request does not list this party")
        params = get_preset(preset, allow_insecure=self._allow_insecure)
        ctx = CKKSContext.generate(params, rotations=rotations, conjugate=conjugate,
                                   allow_insecure=self._allow_insecure)
        seed = secrets.token_bytes(SEED_BYTES)
        secret = wire.encode("keys/secret", {"session": session}, [ctx.secret_bytes(), seed])
        boxes = []
        for name, pk in zip(names, msg.blobs, strict=True):
            boxes.append(b"" if name == self.name else
                         seal_to(pk, secret, context=_box_context(session, name)))
        self._own = PartyKeys(session, tuple(names), names.index(self.name), ctx, seed)
        return wire.encode("keys/offer", {"session": session, "holder": self.name},
                           [ctx.public_bytes(), *boxes])

    def receive(self, delivery: bytes) -> PartyKeys:
        """Open this party's delivery and return its keys."""
        msg = wire.decode(delivery, expect="keys/deliver")
        session = str(msg.meta.get("session", ""))
        names = tuple(str(n) for n in msg.meta.get("names", []))
        if self.name not in names or len(msg.blobs) != 1:
            raise ProtocolError("key delivery is not addressed to this party")
        if msg.meta.get("holder") == self.name:
            if self._own is None or self._own.session != session:
                raise ProtocolError("key delivery claims this party generated keys it did not")
            return self._own
        inner = wire.decode(self.identity.open(msg.blobs[0],
                                               context=_box_context(session, self.name)),
                            expect="keys/secret")
        if inner.meta.get("session") != session or len(inner.blobs) != 2:
            raise ProtocolError("sealed key material belongs to another session")
        ctx = CKKSContext.from_secret_bytes(inner.blobs[0], allow_insecure=self._allow_insecure)
        seed = inner.blobs[1]
        if len(seed) != SEED_BYTES:
            raise ProtocolError("shared seed has the wrong length")
        return PartyKeys(session, names, names.index(self.name), ctx, seed)


class KeySetupAggregator:
    """The aggregator's side: choose the key holder, relay sealed boxes, keep public keys."""

    def __init__(self, *, preset: str, rotations: Sequence[int], conjugate: bool,
                 allow_insecure: bool = False) -> None:
        self.params = get_preset(preset, allow_insecure=allow_insecure)
        self.rotations = [int(r) for r in rotations]
        self.conjugate = bool(conjugate)
        self._allow_insecure = allow_insecure
        self.session = secrets.token_hex(16)
        self.names: tuple[str, ...] = ()
        self.holder: int | None = None
        self.context: CKKSContext | None = None
        self.public_bytes_size = 0

    def request(self, hellos: Sequence[bytes]) -> tuple[int, bytes]:
        """Pick the key holder at random; return its index and the request for it."""
        if len(hellos) < 1:
            raise ValueError("key set-up needs at least one party")
        names, pks = [], []
        for h in hellos:
            m = wire.decode(h, expect="keys/hello")
            if len(m.blobs) != 1 or len(m.blobs[0]) != 32:
                raise ProtocolError("malformed hello")
            names.append(str(m.meta.get("name", "")))
            pks.append(m.blobs[0])
        if len(set(names)) != len(names) or any(not n for n in names):
            raise ProtocolError("party names must be unique and non-empty")
        self.names = tuple(names)
        self.holder = secrets.randbelow(len(names))
        meta = {"session": self.session, "names": names, "preset": self.params.name,
                "rotations": self.rotations, "conjugate": self.conjugate}
        return self.holder, wire.encode("keys/request", meta, pks)

    def accept(self, offer: bytes) -> list[bytes]:
        """Keep the public material; return one delivery message per party (in order)."""
        if self.holder is None:
            raise ProtocolError("accept() before request()")
        m = wire.decode(offer, expect="keys/offer")
        if m.meta.get("session") != self.session or m.meta.get("holder") != \
                self.names[self.holder] or len(m.blobs) != len(self.names) + 1:
            raise ProtocolError("key offer does not match the request")
        self.context = CKKSContext.from_public_bytes(m.blobs[0],
                                                     allow_insecure=self._allow_insecure)
        if self.context.params.name != self.params.name:
            raise ProtocolError("key holder used other parameters than requested")
        if set(self.context.rotations) != {r % self.params.slots for r in self.rotations} - {0}:
            raise ProtocolError("key holder generated other Galois keys than requested")
        self.public_bytes_size = len(m.blobs[0])
        out = []
        meta = {"session": self.session, "names": list(self.names),
                "holder": self.names[self.holder]}
        for box in m.blobs[1:]:
            out.append(wire.encode("keys/deliver", meta, [box]))
        return out
