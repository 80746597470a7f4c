"""Versioned byte messages.

Every message that crosses a role boundary is framed the same way::

    magic  b"FSEC"          4 bytes
    format version          u16 (big endian)
    kind length, kind       u8, 1-64 of ``[a-z0-9/_.:-]``, starting with a letter
                            (e.g. b"fhauc/submit")
    meta length, meta       u32, canonical JSON object (sorted keys, UTF-8)
    blob count              u16
    each blob: length, data u32, bytes

Parsing is defensive: truncation, trailing bytes, oversize, a foreign magic, another kind
or an unknown version raise :class:`~fedsec.errors.ProtocolError` with a clear message.
A kind outside the alphabet above is refused before anything quotes it, so an error text
or a log line never carries another role's control characters.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fedsec.errors import ProtocolError

__all__ = ["MAGIC", "WIRE_VERSION", "DEFAULT_MAX_BYTES", "Message", "encode", "decode",
           "peek_kind", "valid_kind"]

MAGIC = b"FSEC"
WIRE_VERSION = 1
DEFAULT_MAX_BYTES = 1 << 30  # 1 GiB: Galois keys of large presets are tens of MB
_MAX_META = 1 << 20
_KIND = re.compile(r"\A[a-z][a-z0-9/_.:-]{0,63}\Z")


def valid_kind(kind: object) -> bool:
    """``kind`` is a well-formed message kind (safe to print)."""
    return isinstance(kind, str) and _KIND.match(kind) is not None


@dataclass(frozen=True)
class Message:
    """A decoded message: its kind, JSON metadata and binary blobs."""

    kind: str
    meta: dict[str, Any] = field(default_factory=dict)
    blobs: tuple[bytes, ...] = ()


def encode(kind: str, meta: dict[str, Any] | None = None, blobs: Sequence[bytes] = ()) -> bytes:
    """Frame ``kind``, ``meta`` and ``blobs`` as bytes."""
    if not valid_kind(kind):
        raise ValueError(f"message kind must be 1-64 of [a-z0-9/_.:-], starting with a "
                         f"letter; got {kind!r}")
    k = kind.encode("ascii")
    m = json.dumps(meta or {}, sort_keys=True, separators=(",", ":")).encode("utf-8")
    if len(m) > _MAX_META:
        raise ValueError("message metadata is too large")
    if len(blobs) > 0xFFFF:
        raise ValueError("too many blobs in one message")
    parts = [MAGIC, struct.pack(">HB", WIRE_VERSION, len(k)), k, struct.pack(">I", len(m)), m,
             struct.pack(">H", len(blobs))]
    for b in blobs:
        bb = bytes(b)
        parts.append(struct.pack(">I", len(bb)))
        parts.append(bb)
    return b"".join(parts)


def decode(data: bytes, *, expect: str | None = None,
           max_bytes: int = DEFAULT_MAX_BYTES) -> Message:
    """Parse a framed message; ``expect`` checks its kind."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ProtocolError(f"a message must be bytes; got {type(data).__name__}")
    buf = memoryview(bytes(data))
    n = len(buf)
    if n > max_bytes:
        raise ProtocolError(f"message of {n} bytes exceeds the limit of {max_bytes} bytes")
    pos = 0

    def take(size: int, what: str) -> memoryview:
        nonlocal pos
        if size < 0 or pos + size > n:
            raise ProtocolError(f"truncated message: cannot read {what}")
        out = buf[pos:pos + size]
        pos += size
        return out

    if bytes(take(4, "magic")) != MAGIC:
        raise ProtocolError("not a fedsec message (bad magic)")
    version, klen = struct.unpack(">HB", take(3, "header"))
    if version != WIRE_VERSION:
        raise ProtocolError(f"unsupported message format version {version}")
    try:
        kind = bytes(take(klen, "kind")).decode("ascii")
    except UnicodeDecodeError:
        raise ProtocolError("message kind is not ASCII") from None
    if not valid_kind(kind):
        raise ProtocolError("malformed message kind")
    if expect is not None and kind != expect:
        raise ProtocolError(f"expected a '{expect}' message; got '{kind}'")
    (mlen,) = struct.unpack(">I", take(4, "metadata length"))
    if mlen > _MAX_META:
        raise ProtocolError("message metadata is too large")
    try:
        meta = json.loads(bytes(take(mlen, "metadata")).decode("utf-8"))
    except (ValueError, RecursionError):  # bad UTF-8/JSON, >4300-digit ints, deep nesting
        raise ProtocolError("message metadata is not valid JSON") from None
    if not isinstance(meta, dict):
        raise ProtocolError("message metadata must be a JSON object")
    (count,) = struct.unpack(">H", take(2, "blob count"))
    blobs = []
    for i in range(count):
        (blen,) = struct.unpack(">I", take(4, f"length of blob {i}"))
        blobs.append(bytes(take(blen, f"blob {i}")))
    if pos != n:
        raise ProtocolError(f"{n - pos} unexpected trailing bytes after the message")
    return Message(kind=kind, meta=meta, blobs=tuple(blobs))


def peek_kind(data: bytes) -> str:
    """The kind of a framed message, read from its header only (``ProtocolError`` if the
    header is malformed). For routing and accounting; a receiver still decodes in full."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ProtocolError(f"a message must be bytes; got {type(data).__name__}")
    head = bytes(data[:7])
    if len(head) < 7 or head[:4] != MAGIC:
        raise ProtocolError("not a fedsec message (bad magic)")
    version, klen = struct.unpack(">HB", head[4:7])
    if version != WIRE_VERSION:
        raise ProtocolError(f"unsupported message format version {version}")
    raw = bytes(data[7:7 + klen])
    try:
        kind = raw.decode("ascii")
    except UnicodeDecodeError:
        raise ProtocolError("message kind is not ASCII") from None
    if len(raw) != klen or not valid_kind(kind):
        raise ProtocolError("malformed message kind")
    return kind
