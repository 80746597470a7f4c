"""One binding context for every protocol: replay, splice and misrouting protection.

Every message a role sends carries, in its wire metadata (:mod:`fedsec.protocol.wire`), the
**context** it belongs to::

    "ctx": [session, protocol, round, step, sender, recipient, [index...]]

* ``session`` -- the hash of the key set-up's confirmed transcript (every protocol with
  keys), or of a fresh nonce from every role (:func:`session_from_nonces`, for protocols
  without keys: each role checks that its own nonce is in, so nobody can put it into an
  old session);
* ``protocol`` -- ``"fhauc"``, ``"secsv"``, ``"pfl"``... (a message of one protocol is
  never accepted by another);
* ``round`` -- ``-1`` where it does not apply;
* ``step`` -- what the message is (usually its kind without the protocol prefix);
* ``sender`` and ``recipient`` -- role names (``"P"``, ``"A"``, ``"client:3"``, a roster
  name, ``"*"`` for a broadcast that every member of a group receives alike);
* ``index`` -- coordinates inside the round that a protocol needs (a Shapley coalition,
  batch and layer; a PFL chunk).

A **request** also carries ``"rid"``, a 128-bit id from :mod:`secrets`; its **answer**
echoes it as ``"re"``. The requester keeps the ids it issued (:class:`Requests`) and accepts
one answer per id; the responder keeps the ids it answered (:class:`Answered`) and answers
each once. A receiver checks every field against what *it* expects next
(:meth:`Binding.check`), so a message of another session, protocol, round, step, sender,
recipient or index -- a replay, a splice of two runs, a swapped, duplicated or reflected
message -- raises :class:`ReplayRefused`, a :class:`~fedsec.errors.ProtocolError` whose
``check`` names the field that differed (never any data).

What binding does not give: authenticity. The context is not signed; where a relay must
not be able to forge a message, the message is signed (key set-up, PFL registrations and
seed boxes) or sealed end to end. Binding stops the re-use of genuine bytes out of their
context, which is what a relaying role or a replaying network attacker can do without
breaking any cryptography.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from fedsec.errors import ProtocolError

__all__ = ["CTX", "RID", "RE", "BROADCAST", "Context", "ReplayRefused", "Binding", "Requests",
           "Answered", "new_request_id", "new_nonce", "session_from_nonces", "context_of",
           "request_id", "check_nonce"]

CTX = "ctx"
RID = "rid"
RE = "re"
#: The recipient of a message that every member of a group receives alike.
BROADCAST = "*"
_ID = re.compile(r"\A[0-9a-f]{32}\Z")
_SESSION = re.compile(r"\A[0-9a-f]{16,128}\Z")
_NAME = re.compile(r"\A[A-Za-z0-9_.:@*+-]{1,128}\Z")
_MAX_INT = 1 << 62
_MAX_INDEX = 8
_FIELDS = ("session", "protocol", "round", "step", "sender", "recipient", "index")
_WORDS = {"session": "another session", "protocol": "another protocol",
          "round": "another round", "step": "another step", "sender": "another sender",
          "recipient": "another recipient", "index": "another place in the round"}


class ReplayRefused(ProtocolError):
    """A message out of its context (another session, protocol, round, step, sender,
    recipient or index; an unknown, stale or already answered request id). ``check``
    names the field."""

    def __init__(self, message: str, *, check: str) -> None:
        super().__init__(message)
        self.check = check


def _int_ok(v: Any) -> bool:
    return type(v) is int and -1 <= v < _MAX_INT


@dataclass(frozen=True)
class Context:
    """Where a message belongs (see the module docstring); ``-1`` = not applicable."""

    session: str
    protocol: str
    round: int = -1
    step: str = ""
    sender: str = ""
    recipient: str = ""
    index: tuple[int, ...] = ()

    def at(self, **changes: Any) -> Context:
        """This context with some fields changed."""
        if "index" in changes:
            changes["index"] = tuple(changes["index"])
        return replace(self, **changes)

    def to_meta(self) -> list[Any]:
        return [self.session, self.protocol, self.round, self.step, self.sender,
                self.recipient, list(self.index)]

    @classmethod
    def from_meta(cls, value: Any) -> Context:
        """Parse the ``ctx`` field of a message (``ProtocolError`` if malformed)."""
        if not isinstance(value, list) or len(value) != 7:
            raise ProtocolError("malformed message: no context")
        session, protocol, rnd, step, sender, recipient, index = value
        if not (isinstance(session, str) and _SESSION.match(session)
                and isinstance(protocol, str) and 0 < len(protocol) <= 16
                and _int_ok(rnd)
                and isinstance(step, str) and len(step) <= 64
                and isinstance(sender, str) and _NAME.match(sender)
                and isinstance(recipient, str) and _NAME.match(recipient)
                and isinstance(index, list) and len(index) <= _MAX_INDEX
                and all(_int_ok(v) for v in index)):
            raise ProtocolError("malformed message: context")
        return cls(session, protocol, rnd, step, sender, recipient, tuple(index))


def context_of(meta: Mapping[str, Any]) -> Context:
    """The context a message's metadata carries (``ProtocolError`` if none or malformed)."""
    if not isinstance(meta, Mapping):
        raise ProtocolError("malformed message: no context")
    return Context.from_meta(meta.get(CTX))


def new_request_id() -> str:
    """A fresh 128-bit request id (hex), from :mod:`secrets`."""
    return secrets.token_hex(16)


def new_nonce() -> bytes:
    """A role's fresh 128-bit contribution to a session id."""
    return secrets.token_bytes(16)


def session_from_nonces(protocol: str, nonces: Iterable[bytes]) -> str:
    """A session id from every role's fresh nonce (for protocols without a key set-up):
    ``SHA-256(protocol ‖ sorted nonces)``."""
    ns = sorted(bytes(n) for n in nonces)
    if not ns or any(len(n) != 16 for n in ns) or len(set(ns)) != len(ns):
        raise ValueError("a session needs distinct 16-byte nonces, one per role")
    h = hashlib.sha256(b"fedsec/session/" + protocol.encode("ascii") + b"\x00")
    for n in ns:
        h.update(n)
    return h.hexdigest()


def check_nonce(own: bytes, nonces: Iterable[bytes]) -> None:
    """A role's check that its own nonce is among a session's (``ReplayRefused`` if not:
    someone is putting it into a session it did not help make)."""
    if bytes(own) not in {bytes(n) for n in nonces}:
        raise ReplayRefused("session without this role's nonce (an old or foreign session)",
                            check="session")


def request_id(meta: Mapping[str, Any], key: str = RID) -> str:
    """A well-formed 128-bit id from ``meta[key]`` (``ProtocolError`` otherwise)."""
    v = meta.get(key) if isinstance(meta, Mapping) else None
    if not isinstance(v, str) or not _ID.match(v):
        raise ProtocolError(f"malformed message: field {key!r}")
    return v


def _compare(got: Context, expected: Context, what: str) -> None:
    for name in _FIELDS:
        if getattr(got, name) != getattr(expected, name):
            raise ReplayRefused(f"{what} from {_WORDS[name]} (a replay or a splice)",
                                check=name)


class Binding:
    """One role's side of the binding: the session and protocol it is in, and its name.

    ``bind`` puts the context into the metadata of a message this role sends;
    ``check`` verifies that a message it received belongs exactly where this role expects
    it (``ReplayRefused`` otherwise) and returns the context.

    >>> b = Binding("ab" * 16, "demo", "P")
    >>> meta = b.bind({}, step="hello", to="A", round=0)
    >>> Binding("ab" * 16, "demo", "A").check(meta, step="hello", sender="P", round=0).step
    'hello'
    """

    def __init__(self, session: str, protocol: str, me: str) -> None:
        if not isinstance(session, str) or not _SESSION.match(session):
            raise ValueError("a session is 16-128 lowercase hex characters")
        if not isinstance(me, str) or not _NAME.match(me) or me == BROADCAST:
            raise ValueError(f"not a role name: {me!r}")
        self.session = session
        self.protocol = protocol
        self.me = me

    def context(self, *, step: str, sender: str, recipient: str, round: int = -1,
                index: Iterable[int] = ()) -> Context:
        return Context(self.session, self.protocol, round, step, sender, recipient,
                       tuple(index))

    def bind(self, meta: Mapping[str, Any], *, step: str, to: str, round: int = -1,
             index: Iterable[int] = (), rid: str | None = None,
             re_: str | None = None) -> dict[str, Any]:
        """``meta`` with this role's context for a message to ``to`` (and a request id,
        or the id of the request it answers)."""
        out = dict(meta)
        out[CTX] = self.context(step=step, sender=self.me, recipient=to, round=round,
                                index=index).to_meta()
        if rid is not None:
            out[RID] = rid
        if re_ is not None:
            out[RE] = re_
        return out

    def check(self, meta: Mapping[str, Any], *, step: str, sender: str, round: int = -1,
              index: Iterable[int] | None = (), broadcast: bool = False,
              what: str = "message") -> Context:
        """Raise :class:`ReplayRefused` unless ``meta``'s context is this session and
        protocol, ``round``, ``step``, from ``sender`` to this role (or to everyone, if
        ``broadcast``) at ``index`` (``None``: any index; the caller checks it)."""
        got = context_of(meta)
        recipient = got.recipient if broadcast and got.recipient == BROADCAST else self.me
        expected = Context(self.session, self.protocol, round, step, sender, recipient,
                           got.index if index is None else tuple(index))
        _compare(got, expected, what)
        return got


class Requests:
    """The ids a requester issued and has not yet seen answered, with their contexts."""

    def __init__(self) -> None:
        self._open: dict[str, Context] = {}

    def __len__(self) -> int:
        return len(self._open)

    def copy(self) -> Requests:
        out = Requests()
        out._open = dict(self._open)
        return out

    def issue(self, ctx: Context) -> str:
        rid = new_request_id()
        self._open[rid] = ctx
        return rid

    def peek(self, meta: Mapping[str, Any], *, what: str) -> tuple[str, Context]:
        """The open request an answer names (not consumed)."""
        rid = request_id(meta, RE)
        if rid not in self._open:
            raise ReplayRefused(f"{what} answers no open request (stale, duplicated or "
                                "foreign request id)", check="request-id")
        return rid, self._open[rid]

    def answer(self, meta: Mapping[str, Any], binding: Binding, *, step: str, sender: str,
               what: str = "answer") -> Context:
        """Check an answer: it echoes an open id, its context is the request's with the
        answer's ``step``, from ``sender`` to this role; the id is then closed (one answer
        each)."""
        rid, issued = self.peek(meta, what=what)
        got = binding.check(meta, step=step, sender=sender, round=issued.round,
                            index=issued.index, what=what)
        if issued.recipient != sender:
            raise ReplayRefused(f"{what} from a role that was not asked", check="sender")
        del self._open[rid]
        return got


class Answered:
    """The request ids a responder has answered: each is answered once."""

    def __init__(self) -> None:
        self._ids: set[str] = set()

    def copy(self) -> Answered:
        out = Answered()
        out._ids = set(self._ids)
        return out

    def __contains__(self, rid: object) -> bool:
        return rid in self._ids

    def once(self, meta_or_rid: Mapping[str, Any] | str, *, what: str = "request") -> str:
        """Record that the request is being answered (``ReplayRefused`` the second time);
        returns its id."""
        rid = meta_or_rid if isinstance(meta_or_rid, str) else request_id(meta_or_rid, RID)
        if rid in self._ids:
            raise ReplayRefused(f"{what} was already answered (a replayed request)",
                                check="request-id")
        self._ids.add(rid)
        return rid
