"""The in-process network: carries bytes between named roles, counts them, and lets a test,
a benchmark or a demo intercept and rewrite them.

Every in-process runner moves every message through one :class:`Network`; it is the single
place where an adversary (a cheating aggregator, a replaying relay, a fuzzer) plugs in,
and where a run's communication is counted from the bytes that really crossed (one
:class:`~fedsec.protocol.accounting.Accounting` per network).

Role names are ``"<role>"`` or ``"<role>:<who>"`` (``"aggregator"``, ``"party:alice"``,
``"P"``, ``"client:3"``); the part before ``:`` is the role *kind* that a fuzz target or a
documentation table is keyed by.

An **interceptor** is a function of the list of :class:`Envelope` s of one delivery (one
message, the submissions a server gathers, a broadcast) that returns the list to deliver
instead (or ``None``: unchanged). It may rewrite, drop, duplicate, reorder or add
messages and answer different recipients differently (equivocation); it never sees or
touches a role's state.

>>> net = Network()
>>> from fedsec.protocol import wire
>>> net.send("P", "A", wire.encode("demo/hello")) == wire.encode("demo/hello")
True
>>> net.accounting.total_bytes
17
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from fedsec.errors import ProtocolError
from fedsec.protocol import wire
from fedsec.protocol.accounting import Accounting

__all__ = ["Envelope", "Interceptor", "Network", "role_kind"]

#: The kind recorded for bytes that are not a well-formed message.
UNFRAMED = "?"


def role_kind(name: str) -> str:
    """``"party:alice"`` -> ``"party"``."""
    return name.split(":", 1)[0]


@dataclass(frozen=True)
class Envelope:
    """One message in transit."""

    sender: str
    recipient: str
    payload: bytes

    @property
    def kind(self) -> str:
        """The message kind from its header (``"?"`` if it is not a framed message)."""
        try:
            return wire.peek_kind(self.payload)
        except ProtocolError:
            return UNFRAMED

    def with_payload(self, payload: bytes) -> Envelope:
        return replace(self, payload=bytes(payload))


Interceptor = Callable[[list[Envelope]], Sequence[Envelope] | None]


class Network:
    """Carries, counts and (for tests) intercepts the bytes between named roles.

    Parameters
    ----------
    record : bool
        Keep every delivered envelope in :attr:`transcript` (tests, fuzzers, docs).
    """

    def __init__(self, *, record: bool = False) -> None:
        self.accounting = Accounting()
        self.record = record
        self.transcript: list[Envelope] = []
        #: ``(recipient role kind, message kind)`` of every delivered message.
        self.pairs: set[tuple[str, str]] = set()
        self._interceptors: list[Interceptor] = []

    def intercept(self, interceptor: Interceptor) -> Callable[[], None]:
        """Add an interceptor (applied in the order added); returns a function that
        removes it."""
        self._interceptors.append(interceptor)

        def remove() -> None:
            if interceptor in self._interceptors:
                self._interceptors.remove(interceptor)

        return remove

    def deliver(self, envelopes: Sequence[Envelope]) -> list[Envelope]:
        """Pass one delivery through the interceptors, count and return what arrives."""
        batch = list(envelopes)
        for fn in list(self._interceptors):
            out = fn(list(batch))
            if out is not None:
                batch = list(out)
        for env in batch:
            if not isinstance(env, Envelope) or not isinstance(env.payload, bytes):
                raise TypeError("an interceptor must return Envelopes with bytes payloads")
            kind = env.kind
            self.accounting.message(env.sender, env.recipient, kind, env.payload)
            self.pairs.add((role_kind(env.recipient), kind))
            if self.record:
                self.transcript.append(env)
        return batch

    def send(self, sender: str, recipient: str, payload: bytes) -> bytes:
        """One message from ``sender`` to ``recipient``: the bytes that arrive.

        ``ProtocolError`` if nothing (or more than one message) reaches ``recipient``: in
        one process a role that gets no answer cannot wait for one.
        """
        out = [e for e in self.deliver([Envelope(sender, recipient, bytes(payload))])
               if e.recipient == recipient]
        if len(out) != 1:
            raise ProtocolError(f"no single message from {sender} reached {recipient}")
        return out[0].payload

    def gather(self, senders: Sequence[str], recipient: str,
               payloads: Sequence[bytes]) -> list[bytes]:
        """Messages from many senders to one recipient (submissions, uploads): the bytes
        that arrive, in the order they arrive (the network may drop, add or reorder)."""
        if len(senders) != len(payloads):
            raise ValueError("one sender per payload")
        envs = [Envelope(s, recipient, bytes(p)) for s, p in zip(senders, payloads,
                                                                  strict=True)]
        return [e.payload for e in self.deliver(envs) if e.recipient == recipient]

    def gather_from(self, senders: Sequence[str], recipient: str,
                    payloads: Sequence[bytes]) -> list[tuple[str, bytes]]:
        """As :meth:`gather`, with the sender the network names for each message (a
        relay's word, not an authenticated one)."""
        envs = [Envelope(s, recipient, bytes(p)) for s, p in zip(senders, payloads,
                                                                  strict=True)]
        return [(e.sender, e.payload) for e in self.deliver(envs) if e.recipient == recipient]

    def broadcast(self, sender: str, recipients: Sequence[str], payload: bytes
                  ) -> list[bytes]:
        """One message to many recipients: what each receives, in ``recipients``' order
        (``ProtocolError`` if one receives nothing or more than one message)."""
        return self.scatter(sender, recipients, [payload] * len(recipients))

    def scatter(self, sender: str, recipients: Sequence[str], payloads: Sequence[bytes]
                ) -> list[bytes]:
        """One message per recipient from one sender: what each receives, in order."""
        if len(recipients) != len(payloads):
            raise ValueError("one payload per recipient")
        arrived = self.deliver([Envelope(sender, r, bytes(p))
                                for r, p in zip(recipients, payloads, strict=True)])
        out = []
        for r in recipients:
            got = [e.payload for e in arrived if e.recipient == r]
            if len(got) != 1:
                raise ProtocolError(f"no single message from {sender} reached {r}")
            out.append(got[0])
        return out
