"""Context binding for the secure Shapley roles (replay and splicing protection).

Every message a Shapley role sends carries, in its wire metadata (:mod:`fedsec.protocol.wire`),
the **context** it belongs to::

    "ctx": [session, protocol, round, mask, batch, layer, step]

* ``session`` -- the hash of the key set-up's confirmed transcript (HESV, SecSV), or of
  fresh nonces from every role (SecretSV, which has no keys: :func:`session_from_nonces`);
* ``protocol`` -- ``"hesv"``, ``"secsv"`` or ``"secretsv"``;
* ``round``, ``mask`` (the coalition), ``batch`` and ``layer`` -- ``-1`` where they do not
  apply (set-up messages);
* ``step`` -- what the message is (``"decrypt"``, ``"reshare"``, ``"triple/P"``...), with
  the recipient where two roles get different bytes (``"data/P"`` vs ``"data/A"``: a share
  meant for one server is refused by the other).

A **request** also carries ``"rid"``, a 128-bit id from :mod:`secrets`; the **answer**
echoes it as ``"re"``. The requester keeps the ids it issued (:class:`Requests`) and
accepts one answer per id; a responder keeps the ids it answered (:class:`Answered`) and
answers each once. A receiver checks every field of the context against what *it*
expects next, so a message of another session, protocol, round, coalition, batch, layer
or step -- a replay, a splice of two runs, a swapped or duplicated answer, a reflected
message -- raises :class:`ReplayRefused`, a :class:`~fedsec.errors.ProtocolError` whose
``check`` names the field that differed (never any data).

Why ``ProtocolError`` and not :class:`~fedsec.errors.TamperingDetected`: a stale or
misrouted message is what the project calls "out of order" (a network fault or an
attacker on the wire looks the same to the receiver), every Shapley decoder's contract
(fuzzed in ``tests/fuzz/fuzz_shapley.py``) is that only ``ProtocolError`` leaves it, and
these protocols are semi-honest: nothing here *verifies* a server's computation.

What binding does not give: authenticity. The context is not signed or MACed (no
per-pair keys exist in seed 004's setting), so an attacker who can *forge* metadata can
also rewrite it; binding stops re-use of genuine bytes out of their context, which is
what a relaying role or a passive-turned-replaying network attacker can do without
breaking any cryptography.

Cost (measured on a 5-client, 3-layer, 2-round toy record, exact SSV): about 150-180 bytes
of metadata per message (SecSV 585.2 -> 586.0 MB in total, +0.13 %; SecretSV, whose shares
are tiny there, 1.74 -> 2.98 MB) plus one small ``eval`` message per evaluated batch; FSVs
bit-identical to the unbound protocols.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from typing import Any

from fedsec.errors import ProtocolError

__all__ = ["CTX", "RID", "RE", "Context", "ReplayRefused", "Requests", "Answered",
           "open_evaluation", "new_request_id", "bind", "context_of", "check_context", "request_id",
           "session_from_nonces", "new_nonce"]

CTX = "ctx"
RID = "rid"
RE = "re"
_ID = re.compile(r"\A[0-9a-f]{32}\Z")
_SESSION = re.compile(r"\A[0-9a-f]{16,128}\Z")
_MAX_INT = 1 << 62


class ReplayRefused(ProtocolError):
    """A message out of its context (another session, round, coalition, batch, layer or
    step; an unknown, stale or already answered request id). ``check`` names the field."""

    def __init__(self, message: str, *, check: str) -> None:
        super().__init__(message)
        self.check = check


@dataclass(frozen=True)
class Context:
    """Where a message belongs (see the module docstring); ``-1`` = not applicable."""

    session: str
    protocol: str
    round: int = -1
    mask: int = -1
    batch: int = -1
    layer: int = -1
    step: str = ""

    def at(self, **changes: Any) -> Context:
        """This context with some fields changed."""
        return replace(self, **changes)

    def to_meta(self) -> list[Any]:
        return [self.session, self.protocol, self.round, self.mask, self.batch, self.layer,
                self.step]

    @classmethod
    def from_meta(cls, value: Any) -> Context:
        """Parse the ``ctx`` field of a message (``ProtocolError`` if malformed)."""
        if not isinstance(value, list) or len(value) != 7:
            raise ProtocolError("malformed message: no context")
        session, protocol, rnd, mask, batch, layer, step = value
        if not (isinstance(session, str) and _SESSION.match(session)
                and isinstance(protocol, str) and len(protocol) <= 16
                and isinstance(step, str) and len(step) <= 64
                and all(isinstance(v, int) and not isinstance(v, bool)
                        and -1 <= v < _MAX_INT for v in (rnd, mask, batch, layer))):
            raise ProtocolError("malformed message: context")
        return cls(session, protocol, rnd, mask, batch, layer, step)


_FIELD_WORDS = {"session": "another session", "protocol": "another protocol",
                "round": "another round", "mask": "another coalition",
                "batch": "another batch", "layer": "another layer",
                "step": "another step"}


def new_request_id() -> str:
    """A fresh 128-bit request id (hex), from :mod:`secrets`."""
    return secrets.token_hex(16)


def new_nonce() -> bytes:
    """A role's fresh 128-bit contribution to a session id."""
    return secrets.token_bytes(16)


def session_from_nonces(protocol: str, nonces: Iterable[bytes]) -> str:
    """A session id from every role's fresh nonce (for protocols without a key set-up):
    ``SHA-256(protocol ‖ sorted nonces)``. A role that checks its own nonce is among them
    cannot be put into an old session."""
    ns = sorted(bytes(n) for n in nonces)
    if not ns or any(len(n) != 16 for n in ns) or len(set(ns)) != len(ns):
        raise ValueError("a session needs distinct 16-byte nonces, one per role")
    h = hashlib.sha256(b"fedsec/shapley/session/" + protocol.encode("ascii") + b"\x00")
    for n in ns:
        h.update(n)
    return h.hexdigest()


def bind(meta: dict[str, Any], ctx: Context, *, rid: str | None = None,
         re_: str | None = None) -> dict[str, Any]:
    """``meta`` with the context (and a request id, or the id of the request answered)."""
    out = dict(meta)
    out[CTX] = ctx.to_meta()
    if rid is not None:
        out[RID] = rid
    if re_ is not None:
        out[RE] = re_
    return out


def context_of(meta: dict[str, Any]) -> Context:
    """The context a message's metadata carries (``ProtocolError`` if none or malformed)."""
    return Context.from_meta(meta.get(CTX))


def check_context(meta: dict[str, Any], expected: Context, *, what: str = "message"
                  ) -> Context:
    """Raise :class:`ReplayRefused` unless the message's context is ``expected``."""
    got = context_of(meta)
    for f in fields(Context):
        if getattr(got, f.name) != getattr(expected, f.name):
            raise ReplayRefused(f"{what} from {_FIELD_WORDS[f.name]} (a replay or a splice)",
                                check=f.name)
    return got


def request_id(meta: dict[str, Any], key: str = RID) -> str:
    """A well-formed 128-bit id from ``meta[key]`` (``ProtocolError`` otherwise)."""
    v = meta.get(key)
    if not isinstance(v, str) or not _ID.match(v):
        raise ProtocolError(f"malformed message: field {key!r}")
    return v


def open_evaluation(meta: dict[str, Any], base: Context, seen: set[str]) -> tuple[Context, str]:
    """Check an evaluation announcement (P to A): the context is ``base`` (session,
    protocol, round; step ``"eval"``) with the coalition and batch it announces (both
    ``>= 0``), and its id is fresh (not in ``seen``; the caller adds it once it accepts).
    ``ReplayRefused`` for a replay or splice, ``ProtocolError`` for a malformed one."""
    got = context_of(meta)
    ctx = check_context(meta, replace(base, mask=got.mask, batch=got.batch, step="eval"),
                        what="evaluation")
    ev = request_id(meta, RID)
    if ev in seen:
        raise ReplayRefused("evaluation id already used (a replayed evaluation)",
                            check="request-id")
    if ctx.round < 0 or ctx.mask < 0 or ctx.batch < 0:
        raise ProtocolError("malformed evaluation: context")
    return ctx, ev


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

    def peek(self, meta: dict[str, Any], *, what: str) -> tuple[str, Context]:
        """The open request an answer names (not consumed)."""
        rid = request_id(meta, RE)
        if rid not in self._open:
            raise ReplayRefused(f"{what} answers no open request (stale, duplicated or "
                                "foreign request id)", check="request-id")
        return rid, self._open[rid]

    def answer(self, meta: dict[str, Any], expected: Context, *, what: str) -> Context:
        """Check an answer: its context is ``expected`` and it echoes an open id issued
        for the same context (bar the step); the id is then closed (one answer each)."""
        got = check_context(meta, expected, what=what)
        rid, issued = self.peek(meta, what=what)
        if issued.at(step=expected.step) != expected:
            raise ReplayRefused(f"{what} answers a request of another evaluation",
                                check="request-id")
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

    def once(self, rid: str, *, what: str) -> None:
        if rid in self._ids:
            raise ReplayRefused(f"{what} was already answered (a replayed request)",
                                check="request-id")
        self._ids.add(rid)
