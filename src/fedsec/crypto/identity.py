"""Long-term party identities (Ed25519) and the roster a federation agrees on out of band.

A party trusts two things and nothing that a server sends it:

* its own **identity** - an Ed25519 signing key made on its own machine
  (``fedsec identity init``) and never sent anywhere; and
* the **roster** - a small JSON file listing every party's name and identity public key
  (and, optionally, a quorum), agreed out of band. Each party compares the roster's
  fingerprints with its peers by a channel the aggregator does not control (a phone call,
  a signed e-mail).

Every protocol message that matters for security is signed with the identity key and
verified against the roster: key set-up hellos, the key holder's offer, transcript
confirmations and evaluation commits. Signatures are domain-separated by a purpose tag.

File formats
------------
Identity (private, mode 0600)::

    {"fedsec": "identity", "version": 1, "name": "hospital-a",
     "private_key": "<base64 of the 32-byte Ed25519 seed>"}

Roster (public)::

    {"fedsec": "roster", "version": 1, "quorum": 3,
     "parties": [{"name": "hospital-a", "public_key": "<base64, 32 bytes>"}, ...]}
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from fedsec.errors import ProtocolError

__all__ = ["Identity", "Roster", "RosterEntry", "fingerprint", "check_party_name",
           "MAX_NAME_CHARS", "MAX_ROSTER_PARTIES"]

MAX_NAME_CHARS = 64
MAX_ROSTER_PARTIES = 4096
_SIG_DOMAIN = b"fedsec/sig/v1|"
_RAW = serialization.Encoding.Raw


def check_party_name(name: Any) -> str:
    """A party name: 1..64 printable ASCII characters without ``|`` or whitespace."""
    if not isinstance(name, str):
        raise TypeError(f"a party name must be a str; got {type(name).__name__}")
    if not 0 < len(name) <= MAX_NAME_CHARS or not name.isascii() or not name.isprintable() \
            or any(c.isspace() or c == "|" for c in name):
        raise ValueError(f"a party name must be 1..{MAX_NAME_CHARS} printable ASCII "
                         f"characters without spaces or '|'; got {name!r}")
    return name


def fingerprint(public_key: bytes) -> str:
    """A human-comparable fingerprint: SHA-256 of the key, 16 groups of 4 hex digits."""
    h = hashlib.sha256(b"fedsec/identity/v1|" + public_key).hexdigest()
    return ":".join(h[i:i + 4] for i in range(0, 64, 4))


def _message(tag: str, payload: bytes) -> bytes:
    t = tag.encode("ascii")
    return _SIG_DOMAIN + len(t).to_bytes(2, "big") + t + payload


class Identity:
    """A party's long-term Ed25519 signing identity.

    Parameters
    ----------
    name : str
        The party's name as the roster lists it.
    private_key : Ed25519PrivateKey, optional
        Generated with the operating system's randomness when omitted.
    """

    def __init__(self, name: str, private_key: Ed25519PrivateKey | None = None) -> None:
        self.name = check_party_name(name)
        self._sk = private_key if private_key is not None else Ed25519PrivateKey.generate()

    @classmethod
    def generate(cls, name: str) -> Identity:
        return cls(name)

    @property
    def public_key(self) -> bytes:
        return self._sk.public_key().public_bytes(_RAW, serialization.PublicFormat.Raw)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.public_key)

    def sign(self, tag: str, payload: bytes) -> bytes:
        """Sign ``payload`` for the purpose ``tag`` (domain separation)."""
        return self._sk.sign(_message(tag, payload))

    def entry(self) -> RosterEntry:
        """This identity's public roster entry."""
        return RosterEntry(self.name, self.public_key)

    # ------------------------------------------------------------------ files
    def to_json(self) -> str:
        raw = self._sk.private_bytes(_RAW, serialization.PrivateFormat.Raw,
                                     serialization.NoEncryption())
        return json.dumps({"fedsec": "identity", "version": 1, "name": self.name,
                           "private_key": base64.b64encode(raw).decode()}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> Identity:
        try:
            obj = json.loads(text)
            if not isinstance(obj, dict) or obj.get("fedsec") != "identity" \
                    or obj.get("version") != 1:
                raise ValueError("not a fedsec identity file (version 1)")
            raw = base64.b64decode(obj["private_key"], validate=True)
            if len(raw) != 32:
                raise ValueError("the private key must be 32 bytes")
            return cls(obj["name"], Ed25519PrivateKey.from_private_bytes(raw))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"invalid identity file: {exc}") from None

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the identity to ``path`` with mode 0600; refuse to overwrite."""
        p = Path(path)
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(self.to_json() + "\n")
        return p

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Identity:
        """Read an identity file; refuse one that others can read."""
        p = Path(path)
        mode = p.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise PermissionError(f"{p} is readable by other users (mode "
                                  f"{stat.S_IMODE(mode):o}); run chmod 600 {p}")
        return cls.from_json(p.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class RosterEntry:
    """One party of the federation: its name and identity public key."""

    name: str
    public_key: bytes

    def __post_init__(self) -> None:
        check_party_name(self.name)
        if not isinstance(self.public_key, bytes) or len(self.public_key) != 32:
            raise ValueError(f"the public key of {self.name!r} must be 32 bytes")

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.public_key)

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "public_key": base64.b64encode(self.public_key).decode()}


class Roster:
    """The federation's parties as agreed out of band.

    Parameters
    ----------
    entries : sequence of RosterEntry
        At least two parties with distinct names and distinct keys.
    quorum : int, optional
        The fewest parties an evaluation may have (>= 2). Parties may demand more in their
        own policy; ``None`` leaves the default to each protocol.
    """

    def __init__(self, entries: Iterable[RosterEntry], *, quorum: int | None = None) -> None:
        self.entries: tuple[RosterEntry, ...] = tuple(entries)
        if not 2 <= len(self.entries) <= MAX_ROSTER_PARTIES:
            raise ValueError(f"a roster lists 2..{MAX_ROSTER_PARTIES} parties; got "
                             f"{len(self.entries)}")
        names = [e.name for e in self.entries]
        if len(set(names)) != len(names):
            raise ValueError("roster names must be unique")
        if len({e.public_key for e in self.entries}) != len(self.entries):
            raise ValueError("two roster entries share one public key")
        if quorum is not None:
            if isinstance(quorum, bool) or not isinstance(quorum, int) \
                    or not 2 <= quorum <= len(self.entries):
                raise ValueError(f"the roster quorum must be an int in 2..{len(self.entries)}; "
                                 f"got {quorum!r}")
        self.quorum = quorum
        self._index = {e.name: i for i, e in enumerate(self.entries)}
        self._keys = {e.name: Ed25519PublicKey.from_public_bytes(e.public_key)
                      for e in self.entries}
        self._digest = hashlib.sha256(b"fedsec/roster/v1|" + self._canonical()).digest()

    # ------------------------------------------------------------------ queries
    @property
    def names(self) -> tuple[str, ...]:
        return tuple(e.name for e in self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def index(self, name: str) -> int:
        try:
            return self._index[name]
        except (KeyError, TypeError):
            raise ProtocolError(f"{name!r} is not on the roster") from None

    def public_key(self, name: str) -> bytes:
        return self.entries[self.index(name)].public_key

    def order(self, names: Iterable[str]) -> list[str]:
        """``names`` in roster order (each must be on the roster)."""
        return sorted(names, key=self.index)

    def verify(self, name: str, tag: str, payload: bytes, signature: bytes) -> None:
        """Check ``name``'s signature; raise ``ProtocolError`` naming the party if bad."""
        key = self._keys.get(name) if isinstance(name, str) else None
        if key is None:
            raise ProtocolError(f"{name!r} is not on the roster")
        if not isinstance(signature, bytes) or len(signature) != 64:
            raise ProtocolError(f"the signature of {name!r} is malformed")
        try:
            key.verify(signature, _message(tag, payload))
        except InvalidSignature:
            raise ProtocolError(f"the signature of {name!r} does not verify") from None

    def digest(self) -> bytes:
        """SHA-256 over the canonical roster (names, keys, quorum); computed once."""
        return self._digest

    def _canonical(self) -> bytes:
        obj = {"parties": [e.to_json() for e in self.entries], "quorum": self.quorum}
        return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()

    @property
    def fingerprint(self) -> str:
        """Fingerprint of the whole roster: every party must see the same one."""
        h = self.digest().hex()
        return ":".join(h[i:i + 4] for i in range(0, 64, 4))

    # ------------------------------------------------------------------ files
    def to_json(self) -> str:
        obj: dict[str, Any] = {"fedsec": "roster", "version": 1,
                               "parties": [e.to_json() for e in self.entries]}
        if self.quorum is not None:
            obj["quorum"] = self.quorum
        return json.dumps(obj, indent=1)

    @classmethod
    def from_json(cls, text: str) -> Roster:
        try:
            obj = json.loads(text)
            if not isinstance(obj, dict) or obj.get("fedsec") != "roster" \
                    or obj.get("version") != 1:
                raise ValueError("not a fedsec roster file (version 1)")
            parties = obj["parties"]
            if not isinstance(parties, list):
                raise ValueError("'parties' must be a list")
            entries = []
            for p in parties:
                if not isinstance(p, dict):
                    raise ValueError("each party must be an object with name and public_key")
                entries.append(RosterEntry(p["name"],
                                           base64.b64decode(p["public_key"], validate=True)))
            return cls(entries, quorum=obj.get("quorum"))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"invalid roster: {exc}") from None

    def save(self, path: str | os.PathLike[str]) -> Path:
        p = Path(path)
        p.write_text(self.to_json() + "\n", encoding="utf-8")
        return p

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Roster:
        return cls.from_json(Path(path).read_text(encoding="utf-8"))

    @classmethod
    def of(cls, identities: Sequence[Identity], *, quorum: int | None = None) -> Roster:
        """The roster of some local identities (tests, simulations, the demo)."""
        return cls([i.entry() for i in identities], quorum=quorum)
