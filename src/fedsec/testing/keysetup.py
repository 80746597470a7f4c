"""A cheating aggregator during signed key set-up (tests and ``benchmarks/tamper_battery``).

Moved here from ``fedsec.testing.keysetup``: the product never imports it. The
honest parties run their :class:`~fedsec.crypto.keysetup.KeySetupParty` roles behind a
:class:`~fedsec.protocol.network.Network` (``"party:<name>"``); the attack *is* the
aggregator role (``"aggregator"``), so every byte it relays crosses that network and is
counted there.

Each attack rewrites only what an aggregator relays - hellos, the key request, the key
holder's offer turned into deliveries, the confirmation bundles - or sends bytes it made
itself (its own CKKS keys, its own X25519 and Ed25519 keys, messages of an earlier
session). :func:`play` runs every party's steps independently, so one party's refusal does
not hide what the others would do, and returns a :class:`KeySetupOutcome`: which parties
finished, which raised (and which check), and whether the attacker ended up holding the
secret key or seed of a finished party (``compromised``) or the finished parties hold
different keys (``split``).

Nothing here reads a party's X25519 or CKKS secret; the attacker's knowledge is what it
generated itself or could open with its own keys.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.drbg import SEED_BYTES
from fedsec.crypto.identity import Identity, Roster
from fedsec.crypto.keys import open_sealed, public_key_bytes, seal_to
from fedsec.crypto.keysetup import (
    AGGREGATOR,
    KeySetupAggregator,
    KeySetupParty,
    KeySpec,
    PartyKeys,
    _box_context,
    _Hello,
    _holder_index,
    _parse_hello,
    _transcript,
    party_role,
)
from fedsec.errors import FedsecError, ProtocolError
from fedsec.protocol import wire
from fedsec.protocol.network import Network

__all__ = ["KeySetupAttack", "KeySetupOutcome", "KeySetupScene", "KEYSETUP_ATTACKS", "play",
           "run_attack"]


def _secret_blob(ctx: CKKSContext) -> bytes:
    return wire.decode(ctx.secret_bytes()).blobs[0]


@dataclass
class KeySetupOutcome:
    """What every party did, and what the attacker holds."""

    names: tuple[str, ...]
    finished: dict[str, PartyKeys]
    raised: dict[str, BaseException]
    attacker_secrets: list[bytes] = field(default_factory=list)
    attacker_seeds: list[bytes] = field(default_factory=list)
    public: CKKSContext | None = None

    @property
    def compromised(self) -> bool:
        """A finished party holds a secret key or seed the attacker knows."""
        return any(_secret_blob(k.context) in self.attacker_secrets
                   or k.seed in self.attacker_seeds for k in self.finished.values())

    @property
    def split(self) -> bool:
        """Finished parties disagree on the session, the secret key or the seed."""
        keys = list(self.finished.values())
        return len({(k.session, _secret_blob(k.context), k.seed) for k in keys}) > 1

    @property
    def kind(self) -> str:
        """``compromised``, ``split``, ``completed`` (every party finished with the same
        keys), ``partial`` (some finished, consistently; the rest did not),
        ``detected`` (nobody finished and some party raised) or ``stalled``."""
        if self.compromised:
            return "compromised"
        if self.split:
            return "split"
        if self.finished and len(self.finished) == len(self.names):
            return "completed"
        if self.finished:
            return "partial"
        return "detected" if self.raised else "stalled"

    def checks(self) -> dict[str, str]:
        """Per refusing party: the check name (``TamperingDetected``) or the exception
        type and the start of its message (``ProtocolError``)."""
        out = {}
        for name, exc in self.raised.items():
            check = getattr(exc, "check", None)
            out[name] = check if isinstance(check, str) else \
                f"{type(exc).__name__}: {str(exc)[:60]}"
        return out


class KeySetupScene:
    """Every party's key set-up role, reached only through bytes; refusals are recorded."""

    def __init__(self, identities: Sequence[Identity], roster: Roster, spec: KeySpec, *,
                 min_parties: int | None = None, network: Network | None = None) -> None:
        self.network = network if network is not None else Network()
        self.roster = roster
        self.spec = spec
        self.min_parties = min_parties
        self.parties = {i.name: KeySetupParty(i, roster, spec, min_parties=min_parties)
                        for i in identities}
        self.raised: dict[str, BaseException] = {}
        self.finished: dict[str, PartyKeys] = {}

    def call(self, name: str, step: str, data: bytes) -> Any:
        """Send ``data`` to party ``name``'s ``step``; ``None`` if it refuses (or refused
        before)."""
        if name in self.raised or name not in self.parties:
            return None
        role = party_role(name)
        try:
            out = getattr(self.parties[name], step)(self.network.send(AGGREGATOR, role, data))
        except FedsecError as exc:
            self.raised[name] = exc
            return None
        if step == "finish":
            self.finished[name] = out
            return out
        return self.network.send(role, AGGREGATOR, out)

    def hellos(self) -> list[bytes]:
        return self.network.gather([party_role(n) for n in self.parties], AGGREGATOR,
                                   [p.hello() for p in self.parties.values()])


class KeySetupAttack:
    """An aggregator's behaviour in key set-up; the defaults relay honestly.

    Hooks see the honest :class:`KeySetupAggregator` (the attacker's own book-keeping) and
    return what is sent on.
    """

    name = "honest"
    description = "relay every message unchanged"

    def __init__(self) -> None:
        self.secrets: list[bytes] = []
        self.seeds: list[bytes] = []

    def prepare(self, scene: KeySetupScene, identities: Sequence[Identity]) -> None:
        """Runs before the scene starts (e.g. to record an earlier session)."""

    def hellos(self, scene: KeySetupScene, hellos: list[bytes]) -> list[bytes]:
        return hellos

    def request(self, scene: KeySetupScene, agg: KeySetupAggregator, holder: str,
                request: bytes) -> tuple[str, bytes]:
        """Return (party to ask for the offer, request bytes)."""
        return holder, request

    def deliveries(self, scene: KeySetupScene, agg: KeySetupAggregator,
                   ask: Callable[[bytes], bytes | None], request: bytes
                   ) -> dict[str, bytes]:
        offer = ask(request)
        if offer is None:
            return {}
        try:
            return dict(zip(agg.names, agg.accept(offer), strict=True))
        except ProtocolError:
            return {}

    def confirmed(self, scene: KeySetupScene, agg: KeySetupAggregator,
                  confirms: dict[str, bytes]) -> dict[str, bytes]:
        try:
            bundle = agg.confirm(list(confirms.values()))
        except ProtocolError:
            # the aggregator's own check failed; relay what it has anyway
            bundle = wire.encode("keys/confirmed", {}, [confirms[n] for n in agg.names
                                                        if n in confirms])
        return {n: bundle for n in confirms}


def play(identities: Sequence[Identity], roster: Roster, spec: KeySpec,
         attack: KeySetupAttack | None = None, *, min_parties: int | None = None
         ) -> KeySetupOutcome:
    """Run key set-up with every party honest and the aggregator playing ``attack``."""
    att = attack or KeySetupAttack()
    scene = KeySetupScene(identities, roster, spec, min_parties=min_parties)
    att.prepare(scene, identities)
    names = tuple(scene.parties)
    agg = KeySetupAggregator(roster, spec, min_parties=2)
    out = KeySetupOutcome(names, scene.finished, scene.raised, att.secrets, att.seeds)
    try:
        holder_idx, request = agg.request(att.hellos(scene, scene.hellos()))
    except ProtocolError:
        return out
    holder, req = att.request(scene, agg, agg.names[holder_idx], request)

    def ask(data: bytes) -> bytes | None:
        result: bytes | None = scene.call(holder, "offer", data)
        return result

    deliveries = att.deliveries(scene, agg, ask, req)
    confirms = {}
    for name, d in deliveries.items():
        c = scene.call(name, "receive", d)
        if c is not None:
            confirms[name] = c
    for name, bundle in att.confirmed(scene, agg, confirms).items():
        scene.call(name, "finish", bundle)
    out.public = agg.context
    return out


# ---------------------------------------------------------------------- helpers
def _request_hellos(request: bytes) -> list[bytes]:
    return list(wire.decode(request, expect="keys/request").blobs)


def _hello_name(raw: bytes) -> str:
    return str(wire.decode(raw).meta.get("name"))


def _hello_x25519(raw: bytes) -> bytes:
    return wire.decode(raw).blobs[0]


def _with_x25519(raw: bytes, x25519: bytes) -> bytes:
    msg = wire.decode(raw)
    return wire.encode(msg.kind, msg.meta, [x25519, *msg.blobs[1:]])


def _unchecked(raws: Sequence[bytes]) -> list[_Hello]:
    """Hellos as the transcript sees them, without verifying them (the attacker's view)."""
    out = []
    for r in raws:
        msg = wire.decode(r)
        out.append(_Hello(r, str(msg.meta.get("name")), msg.blobs[0], msg.blobs[1]))
    return out


def _holder_of(scene: KeySetupScene, raws: Sequence[bytes]) -> tuple[bytes, str]:
    """The transcript hash of a request's hellos and its key holder's name."""
    hellos = _unchecked(raws)
    t = _transcript(scene.roster, scene.spec.digest(), hellos)
    return t, hellos[_holder_index(t, len(hellos))].name


def _offer_parts(offer: bytes) -> tuple[bytes, bytes, bytes, list[bytes]]:
    msg = wire.decode(offer, expect="keys/offer")
    public, header, sig, *boxes = msg.blobs
    return public, header, sig, list(boxes)


def _deliver(request: bytes, header: bytes, sig: bytes, box: bytes) -> bytes:
    return wire.encode("keys/deliver", {}, [request, header, sig, box])


def _honest_session(identities: Sequence[Identity], roster: Roster, spec: KeySpec,
                    min_parties: int | None) -> dict[str, Any]:
    """An earlier, honest session among the same identities; every byte recorded."""
    rec: dict[str, Any] = {}

    class Recorder(KeySetupAttack):
        def request(self, scene: KeySetupScene, agg: KeySetupAggregator, holder: str,
                    request: bytes) -> tuple[str, bytes]:
            rec["request"] = request
            rec["hellos"] = dict(zip(agg.names, _request_hellos(request), strict=True))
            return holder, request

        def deliveries(self, scene: KeySetupScene, agg: KeySetupAggregator,
                       ask: Callable[[bytes], bytes | None], request: bytes
                       ) -> dict[str, bytes]:
            rec["deliveries"] = super().deliveries(scene, agg, ask, request)
            return dict(rec["deliveries"])

        def confirmed(self, scene: KeySetupScene, agg: KeySetupAggregator,
                      confirms: dict[str, bytes]) -> dict[str, bytes]:
            rec["confirms"] = dict(confirms)
            out = super().confirmed(scene, agg, confirms)
            rec["confirmed"] = next(iter(out.values()))
            return out

    res = play(identities, roster, spec, Recorder(), min_parties=min_parties)
    if res.kind != "completed":
        raise RuntimeError("the recorded earlier session did not complete")
    return rec


# ---------------------------------------------------------------------- the attacks
class ForgedDelivery(KeySetupAttack):
    """The aggregator makes its own CKKS keys and seed, seals them to every party's
    X25519 key from the hellos and names a key holder; it signs with its own Ed25519
    key (it has no roster identity). ``holder="transcript"`` names the transcript's
    holder, ``"other"`` another party."""

    def __init__(self, holder: str = "transcript") -> None:
        super().__init__()
        self.which = holder
        self.name = "forged-delivery" if holder == "transcript" else "forged-delivery-other"
        self.description = ("deliver the aggregator's own keys and seed, sealed to every "
                            "party, naming the " +
                            ("transcript's key holder" if holder == "transcript"
                             else "wrong key holder"))

    def deliveries(self, scene: KeySetupScene, agg: KeySetupAggregator,
                   ask: Callable[[bytes], bytes | None], request: bytes
                   ) -> dict[str, bytes]:
        raws = _request_hellos(request)
        spec = scene.spec
        hellos = [_parse_hello(r, scene.roster, spec.digest()) for r in raws]
        t = _transcript(scene.roster, spec.digest(), hellos)
        names = [h.name for h in hellos]
        holder = names[_holder_index(t, len(names))]
        if self.which != "transcript":
            holder = next(n for n in names if n != holder)
        ctx = CKKSContext.generate(spec.preset, rotations=spec.rotations,
                                   conjugate=spec.conjugate, allow_insecure=spec.allow_insecure)
        seed = secrets.token_bytes(SEED_BYTES)
        self.secrets.append(_secret_blob(ctx))
        self.seeds.append(seed)
        secret = wire.encode("keys/secret", {}, [ctx.secret_bytes(), seed])
        boxes = [b"" if h.name == holder else
                 seal_to(h.x25519, secret, context=_box_context(t, holder, h.name))
                 for h in hellos]
        public = ctx.public_bytes()
        header = wire.encode("keys/offer-header", {"holder": holder},
                             [t, hashlib.sha256(public).digest(),
                              *[hashlib.sha256(b).digest() for b in boxes]])
        sig = Identity("aggregator").sign("keys/offer", header)
        return {n: _deliver(request, header, sig, b) for n, b in zip(names, boxes,
                                                                      strict=True)}


class KeySubstitution(KeySetupAttack):
    """Swap one party's X25519 key in the request for the aggregator's own, so the holder
    would seal the secret key and seed to the aggregator; open the box, keep the key, and
    re-seal it to the victim's real key."""

    name = "key-substitution"
    description = "swap one party's X25519 key in the key request for the aggregator's"

    def __init__(self) -> None:
        super().__init__()
        self._x = X25519PrivateKey.generate()
        self.victim = ""
        self._real: dict[str, bytes] = {}

    def request(self, scene: KeySetupScene, agg: KeySetupAggregator, holder: str,
                request: bytes) -> tuple[str, bytes]:
        raws = _request_hellos(request)
        mine = public_key_bytes(self._x.public_key())
        # the substituted request has another transcript, hence perhaps another holder:
        # pick a victim that is not the holder of the forged transcript
        forged: list[bytes] = []
        for victim in (_hello_name(r) for r in raws):
            forged = [_with_x25519(r, mine) if _hello_name(r) == victim else r for r in raws]
            _, new_holder = _holder_of(scene, forged)
            if new_holder != victim:
                self.victim = victim
                self._real[victim] = next(_hello_x25519(r) for r in raws
                                          if _hello_name(r) == victim)
                return new_holder, wire.encode("keys/request", {}, forged)
        return holder, request

    def deliveries(self, scene: KeySetupScene, agg: KeySetupAggregator,
                   ask: Callable[[bytes], bytes | None], request: bytes
                   ) -> dict[str, bytes]:
        offer = ask(request)
        if offer is None or not self.victim:
            return {}
        # The holder sealed to our key: open, keep, re-seal to the victim.
        public, header, sig, boxes = _offer_parts(offer)
        raws = _request_hellos(request)
        t, holder = _holder_of(scene, raws)
        names = [_hello_name(r) for r in raws]
        i = names.index(self.victim)
        inner = wire.decode(open_sealed(self._x, boxes[i], context=_box_context(
            t, holder, self.victim)), expect="keys/secret")
        self.secrets.append(wire.decode(inner.blobs[0]).blobs[0])
        self.seeds.append(inner.blobs[1])
        boxes[i] = seal_to(self._real[self.victim], wire.encode("keys/secret", {},
                                                                list(inner.blobs)),
                           context=_box_context(t, holder, self.victim))
        return {n: _deliver(request, header, sig, b) for n, b in zip(names, boxes,
                                                                      strict=True)}


class EquivocateHellos(KeySetupAttack):
    """The key holder sees every hello; the last party is shown a request without
    another party's hello (its own transcript differs)."""

    name = "equivocate-hellos"
    description = "show one party a different set of hellos than the key holder"

    def deliveries(self, scene: KeySetupScene, agg: KeySetupAggregator,
                   ask: Callable[[bytes], bytes | None], request: bytes
                   ) -> dict[str, bytes]:
        out = super().deliveries(scene, agg, ask, request)
        if not out:
            return out
        raws = _request_hellos(request)
        last = agg.names[-1]
        fewer = [r for r in raws if _hello_name(r) not in (agg.names[0],)]
        msg = wire.decode(out[last])
        out[last] = _deliver(wire.encode("keys/request", {}, fewer), *msg.blobs[1:])
        return out


class EquivocateOffers(KeySetupAttack):
    """Ask the key holder twice (same request bytes): two signed offers with different
    keys. ``split="half"`` gives half of the parties each; ``split="holder"`` gives
    every party the first offer while the holder's own latest keys are the second's."""

    def __init__(self, split: str = "half") -> None:
        super().__init__()
        self.mode = split
        self.name = "equivocate-offers" if split == "half" else "equivocate-offers-holder"
        self.description = ("ask the key holder twice and give half of the parties each "
                            "offer" if split == "half" else
                            "ask the key holder twice; deliver the first offer to everyone")

    def deliveries(self, scene: KeySetupScene, agg: KeySetupAggregator,
                   ask: Callable[[bytes], bytes | None], request: bytes
                   ) -> dict[str, bytes]:
        first, second = ask(request), ask(request)
        if first is None or second is None:
            return {}
        da = dict(zip(agg.names, agg.accept(first), strict=True))
        if self.mode != "half":
            return da
        db = dict(zip(agg.names, agg.accept(second), strict=True))
        half = len(agg.names) // 2
        return {n: (da if i < half else db)[n] for i, n in enumerate(agg.names)}


class EquivocateConfirmed(KeySetupAttack):
    """Show the last party a bundle in which one confirmation is left out."""

    name = "equivocate-confirmed"
    description = "give one party a confirmation bundle that misses a participant"

    def confirmed(self, scene: KeySetupScene, agg: KeySetupAggregator,
                  confirms: dict[str, bytes]) -> dict[str, bytes]:
        out = super().confirmed(scene, agg, confirms)
        if out:
            names = list(confirms)
            out[names[-1]] = wire.encode("keys/confirmed", {},
                                         [confirms[n] for n in names[1:]])
        return out


class ReplaySession(KeySetupAttack):
    """Messages of an earlier, honest session among the same identities (valid
    signatures): ``step="request"`` replays the key request and the deliveries,
    ``"confirmed"`` only the old confirmation bundle."""

    def __init__(self, step: str = "request") -> None:
        super().__init__()
        self.step = step
        self.name = "replay-session" if step == "request" else "replay-confirmed"
        self.description = ("replay an earlier session's key request and deliveries"
                            if step == "request" else
                            "replay an earlier session's confirmation bundle")
        self.old: dict[str, Any] = {}

    def prepare(self, scene: KeySetupScene, identities: Sequence[Identity]) -> None:
        self.old = _honest_session(identities, scene.roster, scene.spec, scene.min_parties)

    def request(self, scene: KeySetupScene, agg: KeySetupAggregator, holder: str,
                request: bytes) -> tuple[str, bytes]:
        if self.step == "request":
            return holder, self.old["request"]
        return holder, request

    def deliveries(self, scene: KeySetupScene, agg: KeySetupAggregator,
                   ask: Callable[[bytes], bytes | None], request: bytes
                   ) -> dict[str, bytes]:
        if self.step == "request":
            ask(request)
            return dict(self.old["deliveries"])
        return super().deliveries(scene, agg, ask, request)

    def confirmed(self, scene: KeySetupScene, agg: KeySetupAggregator,
                  confirms: dict[str, bytes]) -> dict[str, bytes]:
        if self.step == "request":
            return super().confirmed(scene, agg, confirms)
        return {n: self.old["confirmed"] for n in confirms}


class Isolate(KeySetupAttack):
    """Run set-up with one party only (``with_replayed``: plus another party's hello
    from an earlier session, which verifies; finish then needs that party's
    confirmation of the new transcript, which only an old one exists for)."""

    def __init__(self, with_replayed: bool = False) -> None:
        super().__init__()
        self.replayed = with_replayed
        self.name = "isolate-replayed-hello" if with_replayed else "isolate"
        self.description = ("key set-up with one party and another's replayed hello"
                            if with_replayed else "key set-up with one party alone")
        self.old: list[dict[str, Any]] = []
        self.victim = ""
        self._order: list[str] = []
        self._session: dict[str, Any] = {}

    def prepare(self, scene: KeySetupScene, identities: Sequence[Identity]) -> None:
        if self.replayed:  # two earlier sessions: more pairs to pick a holder from
            self.old = [_honest_session(identities, scene.roster, scene.spec,
                                        scene.min_parties) for _ in range(2)]

    def request(self, scene: KeySetupScene, agg: KeySetupAggregator, holder: str,
                request: bytes) -> tuple[str, bytes]:
        raws = _request_hellos(request)
        names = [_hello_name(r) for r in raws]
        # the victim's fresh hello and another's old one, in roster order; the holder of
        # that transcript must be the victim (the aggregator tries pairs until it is)
        for old in self.old:
            for victim in names:
                for other in (n for n in names if n != victim):
                    pair = {victim: raws[names.index(victim)], other: old["hellos"][other]}
                    order = scene.roster.order(pair)
                    _, h = _holder_of(scene, [pair[n] for n in order])
                    if h == victim:
                        self.victim, self._order, self._session = victim, order, old
                        return victim, wire.encode("keys/request", {},
                                                   [pair[n] for n in order])
        self.victim = names[0]
        self._order = names[:1]
        return self.victim, wire.encode("keys/request", {}, raws[:1])

    def deliveries(self, scene: KeySetupScene, agg: KeySetupAggregator,
                   ask: Callable[[bytes], bytes | None], request: bytes
                   ) -> dict[str, bytes]:
        offer = ask(request)
        if offer is None:
            return {}
        public, header, sig, boxes = _offer_parts(offer)
        i = self._order.index(self.victim)
        return {self.victim: _deliver(request, header, sig, boxes[i])}

    def confirmed(self, scene: KeySetupScene, agg: KeySetupAggregator,
                  confirms: dict[str, bytes]) -> dict[str, bytes]:
        if self.victim not in confirms or len(self._order) < 2:
            return {}
        other = next(n for n in self._order if n != self.victim)
        bundle = {self.victim: confirms[self.victim],
                  other: self._session["confirms"][other]}
        return {self.victim: wire.encode("keys/confirmed", {},
                                         [bundle[n] for n in self._order])}


class DropParty(KeySetupAttack):
    """Leave the last party's hello out of the request (and send it nothing)."""

    name = "drop-party"
    description = "leave one party's hello out of the key set-up"

    def hellos(self, scene: KeySetupScene, hellos: list[bytes]) -> list[bytes]:
        return hellos[:-1]


class OversizedDelivery(KeySetupAttack):
    """A delivery above the party's size limit (64 MiB by default)."""

    name = "oversized-delivery"
    description = "a key delivery larger than the party's message limit"

    def deliveries(self, scene: KeySetupScene, agg: KeySetupAggregator,
                   ask: Callable[[bytes], bytes | None], request: bytes
                   ) -> dict[str, bytes]:
        out = super().deliveries(scene, agg, ask, request)
        big = b"\x00" * ((64 << 20) + 1)
        return {n: wire.encode("keys/deliver", {}, [*wire.decode(d).blobs[:3], big])
                for n, d in out.items()}


class RequestRotations(KeySetupAttack):
    """Ask for 200 extra rotations in the request's metadata (the holder's keys come from
    its own key spec; the request carries no key list it would read)."""

    name = "request-rotations"
    description = "a key request asking for 200 rotations"

    def request(self, scene: KeySetupScene, agg: KeySetupAggregator, holder: str,
                request: bytes) -> tuple[str, bytes]:
        msg = wire.decode(request)
        return holder, wire.encode(msg.kind, {"rotations": list(range(1, 201)),
                                              "conjugate": True}, msg.blobs)


#: name -> factory of a fresh attack object
KEYSETUP_ATTACKS: dict[str, Callable[[], KeySetupAttack]] = {
    "forged-delivery": lambda: ForgedDelivery("transcript"),
    "forged-delivery-other": lambda: ForgedDelivery("other"),
    "key-substitution": KeySubstitution,
    "equivocate-hellos": EquivocateHellos,
    "equivocate-offers": lambda: EquivocateOffers("half"),
    "equivocate-offers-holder": lambda: EquivocateOffers("holder"),
    "equivocate-confirmed": EquivocateConfirmed,
    "replay-session": lambda: ReplaySession("request"),
    "replay-confirmed": lambda: ReplaySession("confirmed"),
    "isolate": lambda: Isolate(False),
    "isolate-replayed-hello": lambda: Isolate(True),
    "drop-party": DropParty,
    "oversized-delivery": OversizedDelivery,
    "request-rotations": RequestRotations,
}


def run_attack(name: str, identities: Sequence[Identity], roster: Roster, spec: KeySpec, *,
               min_parties: int | None = None) -> tuple[KeySetupAttack, KeySetupOutcome]:
    """Play key-set-up attack ``name``; return the attack object and the outcome."""
    att = KEYSETUP_ATTACKS[name]()
    return att, play(identities, roster, spec, att, min_parties=min_parties)
