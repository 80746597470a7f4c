"""Signed, transcript-bound key set-up as roles exchanging bytes (Baykara et al., Sec. IV-C-1).

The papers assume party keys certified out of band; here that is the :class:`Roster`
(identity public keys agreed out of band) and each party's Ed25519 :class:`Identity`.
Everything else travels through the aggregator, which may lie.

Rounds
------
1. **hello** - every party makes a fresh X25519 key and nonce and signs
   ``(roster digest, key spec digest, name, X25519 key, nonce)`` with its identity.
2. **request** - the aggregator checks each hello (a bad one is attributed to its sender
   and left out; the others go on), orders the valid ones by the roster and relays them all
   to the key holder. The holder's index is fixed by the hash of the hellos (the
   *transcript*), so the aggregator does not choose it.
3. **offer** - the key holder verifies every hello against the roster, checks its own hello
   is there unchanged and that the parties reach its quorum, then generates the CKKS keys
   from **its own** key spec (derived from the configuration it validated - never from a
   list sent to it) and a 32-byte shared seed. It seals the secret key and seed to each
   other party's signed X25519 key, binding each box to the transcript and to both
   identities, and signs a header holding the transcript hash, the hash of the public
   material and the hash of every box.
4. **deliver / confirm** - each party receives the relayed hellos, the signed header and
   its box; it repeats every check, opens the box and signs a *confirmation* of the full
   transcript hash (hellos + header). The key holder accepts only the header of the offer
   whose keys it holds: asked twice, it would otherwise confirm its first offer while
   holding the second's keys, and every check after it would pass.
5. **confirmed** - the aggregator relays every confirmation to every party; a party uses
   its keys only after checking that *every* participant confirmed the same transcript. An
   aggregator that showed different hellos, offers or public keys to different parties
   (equivocation) is detected here (:class:`~fedsec.errors.TamperingDetected`).

**Fixed key holder** (``KeySpec.holder``, added for Priv-PFL): the spec names the holder,
so every party checks that the offer comes from that party; the holder keeps the secret
key to itself and seals only the shared seed to the others, who receive the public key
(hashed into the signed offer header) to encrypt with. The spec digest covers the name,
so parties configured with different holders fail at the first hello.

What the aggregator learns: the public CKKS material, names, X25519 keys and sealed boxes.
It can stop the set-up (denial of service) but cannot substitute keys, insert a party,
make a party accept keys from anyone but the transcript's key holder, or replay an old
session (each party's fresh nonce and X25519 key are in the transcript).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.drbg import SEED_BYTES
from fedsec.crypto.identity import Identity, Roster, check_party_name
from fedsec.crypto.keys import check_x25519, open_sealed, public_key_bytes, seal_to
from fedsec.crypto.params import get_preset
from fedsec.errors import ProtocolError, TamperingDetected
from fedsec.protocol import fields, wire
from fedsec.protocol.network import Network
from fedsec.protocol.roles import receives

__all__ = ["KeySpec", "PartyKeys", "KeySetupParty", "KeySetupAggregator", "run_key_setup",
           "VerificationCache",
           "party_role", "AGGREGATOR",
           "PARTY_MAX_MESSAGE_BYTES", "AGGREGATOR_MAX_MESSAGE_BYTES"]

NONCE_BYTES = 16
PARTY_MAX_MESSAGE_BYTES = 64 << 20       # what a party accepts from the aggregator
AGGREGATOR_MAX_MESSAGE_BYTES = 512 << 20  # the offer carries Galois keys
_MAX_ROTATIONS = 64
_ROLE_NAME = re.compile(r"\A[A-Za-z0-9_.@+-]{1,64}\Z")


def _h(*parts: bytes) -> bytes:
    """SHA-256 over length-prefixed parts (unambiguous)."""
    h = hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "big"))
        h.update(p)
    return h.digest()


@dataclass(frozen=True)
class KeySpec:
    """The CKKS keys a protocol needs. Each party derives it from its own configuration.

    Parameters
    ----------
    preset : str
        CKKS preset name.
    rotations : tuple of int
        Left-rotation steps to create Galois keys for (at most 64, each in 1..slots-1).
    conjugate : bool
        Create the complex-conjugation key.
    """

    preset: str
    rotations: tuple[int, ...]
    conjugate: bool
    allow_insecure: bool = False
    #: Added for Priv-PFL (``fedsec.pfl.secure``). ``None`` (the default, used by FHAUC and
    #: the Shapley protocols): the transcript hash picks the key holder and every party
    #: receives the secret key. A party name: that party is the holder and the **only**
    #: holder of the secret key; every other party receives the public key (signed with
    #: the offer) and the shared seed only.
    holder: str | None = None

    @classmethod
    def create(cls, preset: str, rotations: Sequence[int], conjugate: bool, *,
               allow_insecure: bool = False, holder: str | None = None) -> KeySpec:
        params = get_preset(preset, allow_insecure=allow_insecure)
        rot = tuple(sorted({int(r) % params.slots for r in rotations} - {0}))
        if len(rot) > _MAX_ROTATIONS:
            raise ValueError(f"a key spec may ask for at most {_MAX_ROTATIONS} rotations")
        if holder is not None:
            check_party_name(holder)
        return cls(preset, rot, bool(conjugate), allow_insecure, holder)

    def digest(self) -> bytes:
        parts = [b"fedsec/keyspec/v1", self.preset.encode(),
                 ",".join(str(r) for r in self.rotations).encode(),
                 b"1" if self.conjugate else b"0"]
        if self.holder is not None:  # unchanged digest without a fixed holder
            parts.append(b"holder=" + self.holder.encode())
        return _h(*parts)

    def matches(self, ctx: CKKSContext) -> bool:
        """Whether a public context carries exactly these keys."""
        return (ctx.params.name == self.preset and tuple(ctx.rotations) == self.rotations
                and ctx.conjugate_key == self.conjugate and ctx.has_relin_keys)


@dataclass
class PartyKeys:
    """What a party holds after set-up: the CKKS secret context and the shared seed.

    ``session`` is the hash of the confirmed transcript; every later protocol message is
    bound to it. ``names`` are the set-up's participants in roster order.
    """

    session: str
    names: tuple[str, ...]
    index: int
    context: CKKSContext
    seed: bytes

    @property
    def n_parties(self) -> int:
        return len(self.names)

    @property
    def name(self) -> str:
        return self.names[self.index]

    def to_bytes(self) -> bytes:
        """Serialize for local storage (a party's own disk). Contains the SECRET KEY."""
        meta: dict[str, Any] = {"session": self.session, "names": list(self.names),
                                "index": self.index}
        if not self.context.has_secret_key:  # a party of a fixed-holder set-up
            meta["public"] = True
            return wire.encode("keys/party-state", meta, [self.context.public_bytes(),
                                                          self.seed])
        return wire.encode("keys/party-state", meta, [self.context.secret_bytes(), self.seed])

    @classmethod
    def from_bytes(cls, data: bytes, *, allow_insecure: bool = False) -> PartyKeys:
        msg = wire.decode(data, expect="keys/party-state")
        if len(msg.blobs) != 2 or len(msg.blobs[1]) != SEED_BYTES:
            raise ProtocolError("malformed party key state")
        try:
            session = fields.text(msg.meta, "session", max_length=1 << 10)
            names = msg.meta.get("names")
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise fields.malformed("names")
            index = fields.integer(msg.meta, "index", 0, len(names) - 1)
            public = fields.optional(msg.meta, "public") and fields.flag(msg.meta, "public")
        except ProtocolError:
            raise ProtocolError("malformed party key state") from None
        if public:
            ctx = CKKSContext.from_public_bytes(msg.blobs[0], allow_insecure=allow_insecure)
        else:
            ctx = CKKSContext.from_secret_bytes(msg.blobs[0], allow_insecure=allow_insecure)
        return cls(session, tuple(names), index, ctx, msg.blobs[1])


# ---------------------------------------------------------------------- message helpers
@dataclass(frozen=True)
class _Hello:
    raw: bytes
    name: str
    x25519: bytes
    nonce: bytes


def _name(meta: Any, key: str = "name") -> str | None:
    """A party name from ``meta[key]`` (``None`` if it is not one)."""
    try:
        return fields.text(meta, key, max_length=1 << 10)
    except ProtocolError:
        return None


def _hex(meta: Any, key: str) -> str | None:
    """A digest from ``meta[key]`` (``None`` if it is not one)."""
    try:
        return fields.hexid(meta, key, min_length=16, max_length=128)
    except ProtocolError:
        return None


@dataclass(frozen=True)
class _Request:
    """A checked request: its hellos in order, the transcript hash, the names and each
    name's position."""
    hellos: tuple[_Hello, ...]
    transcript: bytes
    names: tuple[str, ...]
    index: Mapping[str, int]  # read-only: one checked request is shared through the cache


def _hello_payload(roster: bytes, spec: bytes, name: str, x25519: bytes, nonce: bytes) -> bytes:
    return _h(b"hello", roster, spec, name.encode(), x25519, nonce)


def _parse_hello(raw: bytes, roster: Roster, spec: bytes, *, max_bytes: int = 1 << 16
                 ) -> _Hello:
    """Decode and verify one hello; ``ProtocolError`` names the failed rule."""
    msg = wire.decode(raw, expect="keys/hello", max_bytes=max_bytes)
    name = _name(msg.meta)
    if name is None or name not in roster:
        raise ProtocolError(f"hello from a party not on the roster ({str(name)[:64]!r})")
    if len(msg.blobs) != 3 or len(msg.blobs[0]) != 32 or len(msg.blobs[1]) != NONCE_BYTES:
        raise ProtocolError(f"malformed hello from {name!r}")
    if _hex(msg.meta, "roster") != roster.digest().hex():
        raise ProtocolError(f"{name!r} uses another roster")
    if _hex(msg.meta, "spec") != spec.hex():
        raise ProtocolError(f"{name!r} expects other keys (another configuration)")
    x_pk, nonce, sig = msg.blobs
    roster.verify(name, "keys/hello",
                  _hello_payload(roster.digest(), spec, name, x_pk, nonce), sig)
    check_x25519(x_pk, who=name)
    return _Hello(bytes(raw), name, x_pk, nonce)


def _transcript(roster: Roster, spec: bytes, hellos: Sequence[_Hello]) -> bytes:
    return _h(b"fedsec/keysetup/v2/transcript", roster.digest(), spec,
              *[h.raw for h in hellos])


def _holder_index(transcript: bytes, m: int) -> int:
    return int.from_bytes(_h(b"holder", transcript), "big") % m


def _pick_holder(spec: KeySpec, transcript: bytes, names: Sequence[str]) -> int:
    """The key holder's index: fixed by name in the spec, else by the transcript hash."""
    if spec.holder is None:
        return _holder_index(transcript, len(names))
    if spec.holder not in names:
        raise ProtocolError(f"the key holder {spec.holder!r} that the configuration names "
                            "does not take part in the key set-up")
    return list(names).index(spec.holder)


def _box_context(transcript: bytes, holder: str, recipient: str) -> bytes:
    return b"fedsec/keysetup/v2/box|" + transcript + b"|" + holder.encode() + b"|" + \
        recipient.encode()


def _check_hellos(raws: Sequence[bytes], roster: Roster, spec: bytes, min_parties: int
                  ) -> list[_Hello]:
    """Every relayed hello must verify; names unique; roster order; at least the quorum."""
    if not isinstance(raws, (list, tuple)) or len(raws) > len(roster):
        raise ProtocolError("the request lists more hellos than the roster has parties")
    hellos = [_parse_hello(r, roster, spec) for r in raws]
    names = [h.name for h in hellos]
    if len(set(names)) != len(names):
        raise ProtocolError("a party appears twice in the key set-up")
    if names != roster.order(names):
        raise ProtocolError("the hellos are not in roster order")
    if len(hellos) < min_parties:
        raise ProtocolError(f"only {len(hellos)} parties take part in key set-up; this "
                            f"party's policy requires at least {min_parties}")
    return hellos


def _parse_header(header: bytes, m: int, extra: int = 0
                  ) -> tuple[bytes, str, bytes, list[bytes]]:
    """``extra`` trailing hashes follow the boxes' (1 with a fixed holder: the public key
    the other parties receive); they are returned after the box hashes."""
    msg = wire.decode(header, expect="keys/offer-header", max_bytes=1 << 20)
    holder = _name(msg.meta, "holder")
    if holder is None or len(msg.blobs) != m + 2 + extra or \
            any(len(b) != 32 for b in msg.blobs):
        raise ProtocolError("malformed key offer header")
    return msg.blobs[0], holder, msg.blobs[1], list(msg.blobs[2:])


def _confirm_payload(name: str, final: bytes) -> bytes:
    return _h(b"confirm", name.encode(), final)


# ---------------------------------------------------------------------- simulation
class VerificationCache:
    """What the simulated parties of **one** in-process run have already checked.

    In one process every simulated party receives the same relayed hellos and the same
    bundle of confirmations, and each would decode and verify all of them: quadratic work
    in the number of parties, where a real party does a linear share. A cache shared by
    the parties of one run (:func:`run_key_setup` makes one per run and passes it to its
    parties; nothing global) remembers the *result* of a check that succeeded, keyed by
    the exact bytes checked and by everything else the check depends on (the roster's
    digest, which covers every identity key; the key spec; the party's quorum and size
    limit). A hit therefore means that these identical bytes passed these identical
    checks, so no party accepts anything it would not have accepted alone; a failed check
    is never stored and raises for every party that meets it. Checks that depend on the
    party itself (its own hello is in the transcript, the offer's transcript is the one it
    computed, its box, its keys, the confirmations name its own transcript) are never
    cached. A party running on its own machine has no cache.
    """

    def __init__(self) -> None:
        self._results: dict[tuple[Any, ...], Any] = {}
        #: Checks computed (misses) and answered from the cache (hits).
        self.misses = 0
        self.hits = 0

    def check(self, key: tuple[Any, ...], compute: Any) -> Any:
        """``compute()``'s result for ``key``, computed once (exceptions propagate and
        are not stored)."""
        try:
            out = self._results[key]
        except KeyError:
            out = compute()
            self._results[key] = out
            self.misses += 1
            return out
        self.hits += 1
        return out


# ---------------------------------------------------------------------- the party
class KeySetupParty:
    """A party's side of key set-up.

    Parameters
    ----------
    identity : Identity
        This party's long-term signing identity.
    roster : Roster
        The federation as agreed out of band.
    spec : KeySpec
        The keys this party's own configuration needs.
    min_parties : int, optional
        The fewest set-up participants this party accepts (default: the one default
        quorum rule, :func:`fedsec.auc.policy.default_quorum` with no mode: the roster's
        quorum, else the whole roster; never below 2). Runs that know their mode pass the
        party's policy's quorum.
    state : bytes, optional
        This party's set-up state from :meth:`to_bytes`, to resume it between steps
        (:meth:`from_bytes` is the usual way); without it, a fresh X25519 key and nonce.
    verification_cache : VerificationCache, optional
        Shared by the simulated parties of one in-process run (:func:`run_key_setup`):
        each distinct relayed message is then decoded and verified once for all of them.
        Never set for a party on its own machine.
    """

    def __init__(self, identity: Identity, roster: Roster, spec: KeySpec, *,
                 min_parties: int | None = None,
                 max_message_bytes: int = PARTY_MAX_MESSAGE_BYTES,
                 state: bytes | None = None,
                 verification_cache: VerificationCache | None = None) -> None:
        if not isinstance(identity, Identity) or not isinstance(roster, Roster):
            raise TypeError("KeySetupParty needs an Identity and a Roster")
        if identity.name not in roster or roster.public_key(identity.name) != \
                identity.public_key:
            raise ValueError(f"the identity {identity.name!r} is not on the roster with "
                             "this public key")
        self._identity = identity
        self._roster = roster
        self._spec = spec
        if min_parties is None:
            from fedsec.auc.policy import default_quorum  # policy imports this module
            min_parties = default_quorum(len(roster), roster.quorum)
        self._min_parties = max(2, int(min_parties))
        if self._min_parties > len(roster):
            raise ValueError(f"min_parties={self._min_parties} exceeds the roster's "
                             f"{len(roster)} parties")
        self._max_message_bytes = int(max_message_bytes)
        self._cache = verification_cache
        self._x = X25519PrivateKey.generate()
        self._nonce = secrets.token_bytes(NONCE_BYTES)
        self._hello: bytes | None = None
        # the holder's fresh keys and the offer header it signed for them
        self._own: tuple[CKKSContext, bytes, bytes] | None = None
        self._pending: PartyKeys | None = None
        self._final: bytes | None = None
        if state is not None:
            self._restore(state)

    @property
    def name(self) -> str:
        return self._identity.name

    # -------------------------------------------------------------- state on disk
    def to_bytes(self) -> bytes:
        """This party's set-up state for its own disk between steps (holds its X25519
        private key and, for the key holder and after delivery, the CKKS secret key)."""
        raw = self._x.private_bytes(serialization.Encoding.Raw,
                                    serialization.PrivateFormat.Raw,
                                    serialization.NoEncryption())
        own = b"" if self._own is None else wire.encode(
            "keys/own", {}, [self._own[0].secret_bytes(), self._own[1], self._own[2]])
        pending = self._pending.to_bytes() if self._pending is not None else b""
        return wire.encode("keys/setup-state", {"name": self.name},
                           [raw, self._nonce, self._hello or b"", own, pending,
                            self._final or b""])

    @classmethod
    def from_bytes(cls, data: bytes, *, identity: Identity, roster: Roster, spec: KeySpec,
                   min_parties: int | None = None) -> KeySetupParty:
        """The party whose state :meth:`to_bytes` saved (same identity, roster and spec)."""
        return cls(identity, roster, spec, min_parties=min_parties, state=data)

    def _restore(self, data: bytes) -> None:
        msg = wire.decode(data, expect="keys/setup-state")
        if len(msg.blobs) != 6 or _name(msg.meta) != self.name:
            raise ProtocolError("malformed key set-up state")
        try:
            self._x = X25519PrivateKey.from_private_bytes(msg.blobs[0])
        except ValueError:
            raise ProtocolError("malformed key set-up state") from None
        self._nonce = msg.blobs[1]
        self._hello = msg.blobs[2] or None
        allow_insecure = self._spec.allow_insecure
        if msg.blobs[3]:
            own = wire.decode(msg.blobs[3], expect="keys/own")
            if len(own.blobs) != 3 or len(own.blobs[1]) != SEED_BYTES:
                raise ProtocolError("malformed key set-up state")
            ctx = CKKSContext.from_secret_bytes(own.blobs[0], allow_insecure=allow_insecure)
            self._own = (ctx, own.blobs[1], own.blobs[2])
        if msg.blobs[4]:
            self._pending = PartyKeys.from_bytes(msg.blobs[4], allow_insecure=allow_insecure)
        self._final = msg.blobs[5] or None

    # -------------------------------------------------------------- round 1
    def hello(self) -> bytes:
        """A signed hello with a fresh X25519 key and nonce."""
        x_pk = public_key_bytes(self._x.public_key())
        sig = self._identity.sign("keys/hello", _hello_payload(
            self._roster.digest(), self._spec.digest(), self.name, x_pk, self._nonce))
        self._hello = wire.encode("keys/hello", {"name": self.name,
                                                 "roster": self._roster.digest().hex(),
                                                 "spec": self._spec.digest().hex()},
                                  [x_pk, self._nonce, sig])
        return self._hello

    def _checked(self, key: tuple[Any, ...], compute: Any) -> Any:
        if self._cache is None:
            return compute()
        return self._cache.check(key, compute)

    def _checked_request(self, request: bytes) -> _Request:
        """Decode a relayed request and check every hello in it (a function of its bytes
        and of this party's roster, spec, quorum and size limit only)."""
        spec = self._spec.digest()

        def compute() -> _Request:
            msg = wire.decode(request, expect="keys/request",
                              max_bytes=self._max_message_bytes)
            hellos = _check_hellos(list(msg.blobs), self._roster, spec, self._min_parties)
            names = tuple(h.name for h in hellos)
            return _Request(tuple(hellos), _transcript(self._roster, spec, hellos), names,
                            MappingProxyType({n: i for i, n in enumerate(names)}))

        out: _Request = self._checked(
            ("request", self._roster.digest(), spec, self._min_parties,
             self._max_message_bytes, bytes(request)), compute)
        return out

    def _verify_request(self, request: bytes) -> _Request:
        req = self._checked_request(request)
        if self._hello is None:
            raise ProtocolError("hello() was not called")
        me = req.index.get(self.name)
        if me is None or req.hellos[me].raw != self._hello:
            raise TamperingDetected("the key set-up does not carry this party's own hello",
                                    check="own-hello")
        return req

    # -------------------------------------------------------------- round 3 (holder)
    @receives("keys/request")
    def offer(self, request: bytes) -> bytes:
        """Generate the key set (this party is the transcript's key holder)."""
        req = self._verify_request(request)
        hellos, transcript, names = req.hellos, req.transcript, list(req.names)
        if names[_pick_holder(self._spec, transcript, names)] != self.name:
            raise ProtocolError("this party is not the transcript's key holder")
        spec = self._spec
        ctx = CKKSContext.generate(spec.preset, rotations=spec.rotations,
                                   conjugate=spec.conjugate,
                                   allow_insecure=spec.allow_insecure)
        seed = secrets.token_bytes(SEED_BYTES)
        public = ctx.public_bytes()
        if spec.holder is None:
            secret = wire.encode("keys/secret", {}, [ctx.secret_bytes(), seed])
            extra: list[bytes] = []
        else:  # the secret key stays here; the others get the public key and the seed
            secret = wire.encode("keys/seed", {}, [seed])
            extra = [ctx.public_key_bytes()]
        boxes = [b"" if h.name == self.name else
                 seal_to(h.x25519, secret, context=_box_context(transcript, self.name, h.name))
                 for h in hellos]
        header = wire.encode("keys/offer-header", {"holder": self.name},
                             [transcript, hashlib.sha256(public).digest(),
                              *[hashlib.sha256(b).digest() for b in boxes],
                              *[hashlib.sha256(b).digest() for b in extra]])
        sig = self._identity.sign("keys/offer", header)
        self._own = (ctx, seed, header)
        return wire.encode("keys/offer", {"holder": self.name},
                           [public, header, sig, *boxes, *extra])

    # -------------------------------------------------------------- round 4
    @receives("keys/deliver")
    def receive(self, delivery: bytes) -> bytes:
        """Check the relayed transcript, open this party's box; return a confirmation."""
        msg = wire.decode(delivery, expect="keys/deliver", max_bytes=self._max_message_bytes)
        fixed = self._spec.holder is not None
        if len(msg.blobs) != (5 if fixed else 4):
            raise ProtocolError("malformed key delivery")
        request, header, sig, box = msg.blobs[:4]
        req = self._verify_request(request)
        hellos, transcript, names = req.hellos, req.transcript, req.names
        m = len(hellos)
        t_hash, holder, _public_hash, box_hashes = self._checked(
            ("header", m, int(fixed), header), lambda: _parse_header(header, m, int(fixed)))
        if t_hash != transcript:
            raise TamperingDetected("the key offer belongs to another transcript",
                                    check="transcript")
        expected_holder = names[_pick_holder(self._spec, transcript, names)]
        if holder != expected_holder:
            raise TamperingDetected("the key offer comes from a party that is not the "
                                    "transcript's key holder", check="holder")
        try:
            self._roster.verify(holder, "keys/offer", header, sig)
        except ProtocolError:
            raise TamperingDetected("the key holder's signature on the offer does not "
                                    "verify", check="offer-signature") from None
        me = req.index[self.name]
        if hashlib.sha256(box).digest() != box_hashes[me]:
            raise TamperingDetected("this party's sealed box is not the one the key holder "
                                    "signed", check="box")
        if holder == self.name:
            if self._own is None or box != b"":
                raise ProtocolError("key delivery claims this party generated keys it did not")
            ctx, seed, own_header = self._own
            if header != own_header:
                # Asked twice, this party holds the keys of its latest offer only; others
                # would hold another offer's keys under one confirmed transcript.
                raise TamperingDetected("the key delivery carries an offer other than the "
                                        "one this party holds the keys of", check="holder")
            # The holder keeps only what a party needs (secret key); public keys stay out.
            ctx = CKKSContext.from_secret_bytes(ctx.secret_bytes(),
                                                allow_insecure=self._spec.allow_insecure)
        elif fixed:
            shared = msg.blobs[4]
            if hashlib.sha256(shared).digest() != box_hashes[m]:
                raise TamperingDetected("the public key delivered is not the one the key "
                                        "holder signed", check="box")
            ctx = CKKSContext.from_public_bytes(shared, allow_insecure=self._spec.allow_insecure)
            if ctx.has_secret_key or ctx.params.name != self._spec.preset:
                raise TamperingDetected("the key holder used another preset", check="spec")
            inner = wire.decode(open_sealed(self._x, box, context=_box_context(
                transcript, holder, self.name)), expect="keys/seed")
            if len(inner.blobs) != 1 or len(inner.blobs[0]) != SEED_BYTES:
                raise ProtocolError("malformed sealed seed")
            seed = inner.blobs[0]
        else:
            inner = wire.decode(open_sealed(self._x, box, context=_box_context(
                transcript, holder, self.name)), expect="keys/secret")
            if len(inner.blobs) != 2 or len(inner.blobs[1]) != SEED_BYTES:
                raise ProtocolError("malformed sealed key material")
            ctx = CKKSContext.from_secret_bytes(inner.blobs[0],
                                                allow_insecure=self._spec.allow_insecure)
            seed = inner.blobs[1]
            if ctx.params.name != self._spec.preset:
                raise TamperingDetected("the key holder used another preset", check="spec")
        final = _h(b"fedsec/keysetup/v2/final", transcript, header)
        self._final = final
        self._pending = PartyKeys(final.hex(), names, me, ctx, seed)
        sig_c = self._identity.sign("keys/confirm", _confirm_payload(self.name, final))
        return wire.encode("keys/confirm", {"name": self.name}, [final, sig_c])

    # -------------------------------------------------------------- round 5
    def unconfirmed_keys(self) -> PartyKeys:
        """The keys this party received, **before** :meth:`finish` has checked that every
        participant confirmed the same transcript.

        Only for a message that carries no data and is void if the confirmations fail:
        a signed fresh commit bound to the session (malicious FHAUC sends it with the
        confirmation to save one exchange). Never encrypt data under these keys before
        :meth:`finish`: until then the aggregator may have shown other parties other keys.
        """
        if self._pending is None or self._final is None:
            raise ProtocolError("unconfirmed_keys() before receive()")
        return self._pending

    def _checked_confirmations(self, confirmed: bytes, names: Sequence[str]
                               ) -> tuple[bytes, ...]:
        """Decode the bundle of confirmations: one per participant, in order, each signed
        by it; return the transcript hash each confirmed (a function of the bytes, the
        roster, the participants and the size limit only)."""
        msg = wire.decode(confirmed, expect="keys/confirmed",
                          max_bytes=self._max_message_bytes)
        if len(msg.blobs) != len(names):
            raise TamperingDetected("the confirmations do not cover exactly the key set-up's "
                                    "participants", check="transcript")
        finals = []
        for name, raw in zip(names, msg.blobs, strict=True):
            c = wire.decode(raw, expect="keys/confirm", max_bytes=1 << 12)
            if _name(c.meta) != name or len(c.blobs) != 2:
                raise TamperingDetected("the confirmations do not cover exactly the key "
                                        "set-up's participants", check="transcript")
            final, sig = c.blobs
            try:
                self._roster.verify(name, "keys/confirm", _confirm_payload(name, final), sig)
            except ProtocolError:
                raise TamperingDetected(f"the confirmation of {name!r} does not verify",
                                        check="transcript") from None
            finals.append(final)
        return tuple(finals)

    @receives("keys/confirmed")
    def finish(self, confirmed: bytes) -> PartyKeys:
        """Check that every participant confirmed the same transcript; return the keys."""
        if self._pending is None or self._final is None:
            raise ProtocolError("finish() before receive()")
        names = self._pending.names
        finals = self._checked(
            ("confirmed", self._roster.digest(), names, self._max_message_bytes,
             bytes(confirmed)), lambda: self._checked_confirmations(confirmed, names))
        for name, final in zip(names, finals, strict=True):
            if final != self._final:
                raise TamperingDetected(f"{name!r} saw another key set-up transcript "
                                        "(equivocation)", check="transcript")
        return self._pending


# ---------------------------------------------------------------------- the aggregator
class KeySetupAggregator:
    """The aggregator's side: relay hellos, offer and confirmations; keep public keys.

    Parameters
    ----------
    roster : Roster
        The federation's public roster (to attribute bad hellos to their senders).
    spec : KeySpec
        The keys the aggregator's own configuration needs.
    min_parties : int
        Fewest valid hellos to go on with.
    """

    def __init__(self, roster: Roster, spec: KeySpec, *, min_parties: int = 2,
                 max_message_bytes: int = AGGREGATOR_MAX_MESSAGE_BYTES) -> None:
        self._roster = roster
        self._spec = spec
        self._params = get_preset(spec.preset, allow_insecure=spec.allow_insecure)
        self._min_parties = max(2, int(min_parties))
        self._max_message_bytes = int(max_message_bytes)
        self._names: tuple[str, ...] = ()
        self._rejected: dict[int, str] = {}
        self._holder: int | None = None
        self._context: CKKSContext | None = None
        self._session: str = ""
        self._public_bytes_size = 0
        self._request: bytes | None = None
        self._header: tuple[bytes, bytes] | None = None
        self._final: bytes | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """The set-up's participants in roster order (after :meth:`request`)."""
        return self._names

    @property
    def rejected(self) -> dict[int, str]:
        """Why each hello left out by :meth:`request` was rejected, by position."""
        return dict(self._rejected)

    @property
    def holder(self) -> int | None:
        """The key holder's index in :attr:`names` (after :meth:`request`)."""
        return self._holder

    @property
    def context(self) -> CKKSContext | None:
        """The public CKKS material (no secret key), after :meth:`accept`."""
        return self._context

    @property
    def public_bytes_size(self) -> int:
        """Bytes of the public CKKS material the key holder offered."""
        return self._public_bytes_size

    @property
    def session(self) -> str:
        """The confirmed transcript's hash (after :meth:`confirm`; ``""`` before)."""
        return self._session

    @receives("keys/hello")
    def request(self, hellos: Sequence[bytes]) -> tuple[int, bytes]:
        """Check the hellos; return the key holder's index (in :attr:`names`) and its
        request. Bad hellos are left out and recorded in :attr:`rejected` (by position)."""
        valid: dict[str, _Hello] = {}
        first: dict[str, int] = {}
        self._rejected = {}
        spec = self._spec.digest()
        for i, raw in enumerate(hellos):
            try:
                h = _parse_hello(raw, self._roster, spec)
            except ProtocolError as exc:
                self._rejected[i] = str(exc)
                continue
            if h.name in first:
                # A copy is harmless; two different signed hellos (one replayed from an
                # earlier set-up) cannot be told apart, so neither is used.
                if h.raw == valid.get(h.name, h).raw and first[h.name] not in self._rejected:
                    self._rejected[i] = f"a copy of the hello of {h.name!r}"
                    continue
                self._rejected[i] = self._rejected[first[h.name]] = \
                    f"two different hellos claim to come from {h.name!r}"
                valid.pop(h.name, None)
                continue
            valid[h.name] = h
            first[h.name] = i
        if len(valid) < self._min_parties:
            raise ProtocolError(f"only {len(valid)} valid hellos; at least "
                                f"{self._min_parties} are required")
        ordered = [valid[n] for n in self._roster.order(valid)]
        self._names = tuple(h.name for h in ordered)
        transcript = _transcript(self._roster, spec, ordered)
        self._holder = _pick_holder(self._spec, transcript, self._names)
        self._transcript = transcript
        self._request = wire.encode("keys/request", {}, [h.raw for h in ordered])
        return self._holder, self._request

    @receives("keys/offer")
    def accept(self, offer: bytes) -> list[bytes]:
        """Keep the public material; return one delivery per party (in :attr:`names`)."""
        if self._holder is None or self._request is None:
            raise ProtocolError("accept() before request()")
        m = wire.decode(offer, expect="keys/offer", max_bytes=self._max_message_bytes)
        n = len(self._names)
        fixed = self._spec.holder is not None
        if len(m.blobs) != n + 3 + int(fixed):
            raise ProtocolError("the key offer does not match the request")
        public, header, sig = m.blobs[:3]
        boxes = list(m.blobs[3:3 + n])
        extra = list(m.blobs[3 + n:])
        holder = self._names[self._holder]
        t_hash, h_name, public_hash, box_hashes = _parse_header(header, n, int(fixed))
        if t_hash != self._transcript or h_name != holder:
            raise ProtocolError("the key offer does not match the request")
        self._roster.verify(holder, "keys/offer", header, sig)
        if hashlib.sha256(public).digest() != public_hash or any(
                hashlib.sha256(b).digest() != bh for b, bh in zip(boxes + extra, box_hashes,
                                                                   strict=True)):
            raise ProtocolError("the key offer's contents do not match its signed header")
        ctx = CKKSContext.from_public_bytes(public, allow_insecure=self._spec.allow_insecure)
        if not self._spec.matches(ctx) or ctx.has_secret_key:
            raise ProtocolError("the key holder generated other keys than the configuration "
                                "needs")
        self._context = ctx
        self._public_bytes_size = len(public)
        self._final = _h(b"fedsec/keysetup/v2/final", self._transcript, header)
        return [wire.encode("keys/deliver", {}, [self._request, header, sig, box, *extra])
                for box in boxes]

    @receives("keys/confirm")
    def confirm(self, confirmations: Sequence[bytes]) -> bytes:
        """Bundle every party's confirmation (in :attr:`names` order) for every party."""
        if self._final is None:
            raise ProtocolError("confirm() before accept()")
        by_name: dict[str, bytes] = {}
        for raw in confirmations:
            c = wire.decode(raw, expect="keys/confirm", max_bytes=1 << 12)
            name = _name(c.meta)
            if name is None or name not in self._names or name in by_name \
                    or len(c.blobs) != 2:
                raise ProtocolError(f"unexpected confirmation from {str(name)[:64]!r}")
            self._roster.verify(name, "keys/confirm", _confirm_payload(name, c.blobs[0]),
                                c.blobs[1])
            if c.blobs[0] != self._final:
                raise ProtocolError(f"{name!r} confirmed another transcript")
            by_name[name] = raw
        missing = [n for n in self._names if n not in by_name]
        if missing:
            raise ProtocolError(f"no confirmation from {missing}")
        self._session = self._final.hex()
        return wire.encode("keys/confirmed", {}, [by_name[n] for n in self._names])


def party_role(name: str) -> str:
    """A party's role name on the network and in message bindings: ``"party:<name>"``
    (a name with characters a role name cannot hold is replaced by its hash)."""
    if _ROLE_NAME.match(name):
        return "party:" + name
    return "party:" + hashlib.sha256(name.encode()).hexdigest()[:32]


#: The aggregator's role name.
AGGREGATOR = "aggregator"


def run_key_setup(identities: Sequence[Identity], roster: Roster, spec: KeySpec, *,
                  min_parties: int | None = None,
                  max_offer_bytes: int = AGGREGATOR_MAX_MESSAGE_BYTES,
                  party_max_message_bytes: int = PARTY_MAX_MESSAGE_BYTES,
                  network: Network | None = None
                  ) -> tuple[KeySetupAggregator, list[PartyKeys]]:
    """Play key set-up in one process; return the aggregator side and each party's keys
    (in the order of ``identities``).

    ``max_offer_bytes`` bounds the key holder's offer at the aggregator (Galois and
    relinearization keys at ring 2^15 are ~100 MB each); ``party_max_message_bytes``
    what a party accepts.

    Every message crosses ``network`` (a fresh :class:`~fedsec.protocol.network.Network`
    if none) between the roles ``"aggregator"`` and ``"party:<name>"``
    (:func:`party_role`); pass one to count the bytes or to observe or intercept the
    traffic (tests and benchmarks play a cheating aggregator there).
    """
    net = network if network is not None else Network()
    # one cache for this run's simulated parties (each distinct relayed message is
    # decoded and verified once, not once per party); it ends with the run
    cache = VerificationCache()
    parties = [KeySetupParty(i, roster, spec, min_parties=min_parties,
                             max_message_bytes=party_max_message_bytes,
                             verification_cache=cache) for i in identities]
    agg = KeySetupAggregator(roster, spec, min_parties=min_parties or 2,
                             max_message_bytes=max_offer_bytes)
    by_name = {p.name: p for p in parties}
    # 1. hello: every party to the aggregator
    hellos = net.gather([party_role(p.name) for p in parties], AGGREGATOR,
                        [p.hello() for p in parties])
    # 2. request: the aggregator relays the hellos to the transcript's key holder
    holder_idx, request = agg.request(hellos)
    holder = agg.names[holder_idx]
    got = net.send(AGGREGATOR, party_role(holder), request)
    # 3. offer: the key holder's keys and sealed boxes, to the aggregator
    offer = net.send(party_role(holder), AGGREGATOR, by_name[holder].offer(got))
    # 4. deliver / confirm
    roles = [party_role(n) for n in agg.names]
    deliveries = net.scatter(AGGREGATOR, roles, agg.accept(offer))
    del offer, got
    answers = []
    for i, n in enumerate(agg.names):
        answers.append(by_name[n].receive(deliveries[i]))
        deliveries[i] = b""  # read: dropped (each carries every hello and a key box)
    confirms = net.gather(roles, AGGREGATOR, answers)
    # 5. confirmed: every confirmation to every party
    bundles = net.broadcast(AGGREGATOR, roles, agg.confirm(confirms))
    keys = {n: by_name[n].finish(b) for n, b in zip(agg.names, bundles, strict=True)}
    left_out = [p.name for p in parties if p.name not in keys]
    if left_out:  # e.g. a hello lost or corrupted on the way: that party holds no keys
        raise ProtocolError(f"the key set-up went on without {left_out[:8]}: they hold no "
                            "keys")
    return agg, [keys[p.name] for p in parties]
