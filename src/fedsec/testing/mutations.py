"""A structure-aware mutation engine for fedsec's byte messages (testing only).

It starts from *valid* bytes that honest roles produced and rewrites them the way a
hostile peer or a broken link would:

* **raw bytes** - bit flips, interesting bytes, truncation, extension, deleted,
  duplicated or inserted slices;
* **wire framing** (:mod:`fedsec.protocol.wire`) - magic, version, kind, metadata and blob
  lengths, blob counts, trailing bytes; re-framed without the encoder's checks;
* **metadata** - values replaced by hostile JSON (wrong types, huge ints, ``1e300``,
  ``NaN``/``Infinity``, unhashable lists and dicts, deep nesting, long strings, lone
  surrogates), keys dropped or added, strings and numbers nudged, values replayed from
  other messages, JSON text rewritten (duplicate keys, ``1e999``, whitespace);
* **blobs** - dropped, duplicated, reordered, emptied, swapped with blobs of other
  messages, resized, and mutated *recursively* when they are themselves wire messages
  (a delivery holds a request that holds hellos...) or SEAL objects;
* **SEAL objects** - header fields (magic, version, compression mode, declared size) and,
  for uncompressed ciphertexts, every member (parms id, NTT flag, size, degree, modulus
  count, scale, correction factor, array length, coefficients). Compressed objects are
  also opened (zstd, from the SEAL build TenSEAL ships), mutated inside and compressed
  again, so mutations reach what SEAL parses rather than dying in the zstd checks.

Everything is driven by one ``random.Random`` so a seed replays a run exactly.
"""

from __future__ import annotations

import ctypes
import functools
import json
import math
import random
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fedsec.protocol import wire

__all__ = ["Pools", "Mutator", "Frame", "parse_frame", "HOSTILE_JSON", "HOSTILE_KINDS",
           "SWEEP_VALUES", "SEAL_MAGIC", "zstd_open", "zstd_close",
           "raw_ciphertext", "transparent_ciphertext"]

SEAL_MAGIC = b"\x5e\xa1"
_SEAL_HEADER = struct.Struct("<HBBBBHQ")  # magic, header size, major, minor, compr, rsvd, size

_DEEP: Any = 0  # a list nested 600 deep
for _ in range(600):
    _DEEP = [_DEEP]

#: Values a hostile peer may put anywhere in the metadata, by kind (a kind is picked
#: first, so every kind of type confusion is tried about equally often).
HOSTILE_KINDS: dict[str, tuple[Any, ...]] = {
    "null-bool": (None, True, False),
    "small-int": (0, 1, -1, 2, 3, 255, 256, 65535, 65536, 2**31 - 1, 2**31, 2**32),
    "huge-int": (2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63), 10**300, -(10**300),
                 10**4000),
    "float": (0.0, -0.0, 0.5, 1.5, -1.5, 1e-300, 5e-324, 1e300, -1e300,
              1.7976931348623157e308, math.nan, math.inf, -math.inf),
    "string": ("", "0", "1", "-1", "x", "NaN", "Infinity", "null", "true", "[]", "{}",
               "a" * 70, "a" * 100_000, "\u0000", "caf\u00e9", "\ud800", "../../etc/passwd",
               "|", "a|b", " hospital-a", "INSECURE_TEST_N4096_DEPTH1",
               "CKKS_128_N8192_DEPTH1", "0" * 64, "f" * 32),
    "list": ([], [None], [0], [1], [-1], [0, 0], [1, 0], [0, 1, 2], [2**64], [10**300],
             [1e300], [math.nan], [math.inf], ["a"], [True], [[]], [{}], list(range(5000)),
             [0] * 70_000),
    "dict": ({}, {"a": 1}, {"": None}, {"0": 0}),
    "deep": (_DEEP,),
}
HOSTILE_JSON: tuple[Any, ...] = tuple(v for vs in HOSTILE_KINDS.values() for v in vs)
#: One or two values of every kind, for exhaustive one-key-at-a-time sweeps.
SWEEP_VALUES: tuple[Any, ...] = (
    None, True, 0, -1, 2**64, 10**300, -(10**300), 1e300, -1e300, math.nan, math.inf,
    -math.inf, "", "x", "\ud800", "a" * 100_000, [], [None], [2**64], [math.nan], [[]],
    list(range(5000)), {}, {"a": 1}, _DEEP)


@dataclass
class Pools:
    """Material to splice in: every message, blob and metadata value seen in valid runs
    (both sessions, every kind), so replays and cross-kind swaps come for free."""

    messages: list[bytes] = field(default_factory=list)
    blobs: list[bytes] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)

    def add_message(self, data: bytes, depth: int = 0) -> None:
        """Record ``data`` and, recursively, its nested messages, blobs and values."""
        self.messages.append(data)
        try:
            msg = wire.decode(data)
        except Exception:  # noqa: BLE001 - the pool also holds non-wire material
            return
        if msg.kind not in self.kinds:
            self.kinds.append(msg.kind)
        for v in msg.meta.values():
            self._add_value(v)
        for b in msg.blobs:
            if len(b) <= 1 << 20:
                self.blobs.append(b)
            if depth < 4 and b[:4] == wire.MAGIC:
                self.add_message(b, depth + 1)

    def _add_value(self, v: Any) -> None:
        if isinstance(v, list):
            for x in v[:20]:
                self._add_value(x)
        if len(self.values) < 4000 and (not isinstance(v, (list, dict)) or len(v) < 64):
            self.values.append(v)


@dataclass
class Frame:
    """A wire message split into its fields, re-framed without the encoder's checks."""

    magic: bytes
    version: int
    kind: bytes
    meta_text: bytes
    blobs: list[bytes]
    trailer: bytes = b""

    def encode(self) -> bytes:
        parts = [self.magic, struct.pack(">H", self.version & 0xFFFF),
                 struct.pack(">B", len(self.kind) & 0xFF), self.kind,
                 struct.pack(">I", len(self.meta_text)), self.meta_text,
                 struct.pack(">H", len(self.blobs) & 0xFFFF)]
        for b in self.blobs:
            parts.append(struct.pack(">I", len(b)))
            parts.append(b)
        parts.append(self.trailer)
        return b"".join(parts)


def parse_frame(data: bytes) -> Frame | None:
    """Split valid framing into a :class:`Frame` (``None`` if ``data`` is no message)."""
    try:
        msg = wire.decode(data)
    except Exception:  # noqa: BLE001
        return None
    meta = json.dumps(msg.meta, sort_keys=True, separators=(",", ":")).encode()
    return Frame(wire.MAGIC, wire.WIRE_VERSION, msg.kind.encode("ascii"), meta,
                 list(msg.blobs))


def raw_ciphertext(ct: Any, minor: int = 3) -> bytes:
    """Serialize a SEAL ciphertext *without compression* (SEAL 4.1+ member layout), so
    that byte-level mutations hit its fields rather than a zstd stream."""
    data = ct.dyn_array()
    n = data.size()
    coeffs = struct.pack(f"<{n}Q", *(data[i] for i in range(n)))
    arr_members = struct.pack("<Q", n) + coeffs
    arr = _SEAL_HEADER.pack(0xA15E, 16, 4, minor, 0, 0, 16 + len(arr_members)) + arr_members
    members = (struct.pack("<4Q", *ct.parms_id()) + bytes([1 if ct.is_ntt_form() else 0])
               + struct.pack("<QQQdQ", ct.size(), ct.poly_modulus_degree(),
                             ct.coeff_modulus_size(), ct.scale, 1) + arr)
    return _SEAL_HEADER.pack(0xA15E, 16, 4, minor, 0, 0, 16 + len(members)) + members


@functools.cache
def _zstd() -> Any:
    """zstd from the SEAL build inside TenSEAL (it exports the symbols)."""
    import _sealapi_cpp

    lib = ctypes.CDLL(_sealapi_cpp.__file__)
    lib.ZSTD_getFrameContentSize.restype = ctypes.c_ulonglong
    lib.ZSTD_getFrameContentSize.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    for fn in (lib.ZSTD_decompress, lib.ZSTD_compress):
        fn.restype = ctypes.c_size_t
    lib.ZSTD_decompress.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p,
                                    ctypes.c_size_t]
    lib.ZSTD_compress.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p,
                                  ctypes.c_size_t, ctypes.c_int]
    lib.ZSTD_isError.restype = ctypes.c_uint
    lib.ZSTD_isError.argtypes = [ctypes.c_size_t]
    return lib


def zstd_open(data: bytes) -> bytes | None:
    """A zstd-compressed SEAL object as the same object uncompressed (``None`` if it is
    not one)."""
    if len(data) < 16 or data[5] != 2:
        return None
    lib, body = _zstd(), data[16:]
    size = lib.ZSTD_getFrameContentSize(body, len(body))
    if size > 1 << 28:
        return None
    buf = ctypes.create_string_buffer(max(1, size))
    n = lib.ZSTD_decompress(buf, size, body, len(body))
    if lib.ZSTD_isError(n):
        return None
    out = bytearray(data[:16]) + buf.raw[:n]
    out[5] = 0
    struct.pack_into("<Q", out, 8, len(out))
    return bytes(out)


def zstd_close(plain: bytes) -> bytes:
    """Compress an uncompressed SEAL object the way SEAL does (header says zstd)."""
    lib, body = _zstd(), plain[16:]
    cap = len(body) + len(body) // 8 + 1024
    buf = ctypes.create_string_buffer(cap)
    n = lib.ZSTD_compress(buf, cap, body, len(body), 1)
    head = bytearray(plain[:16])
    head[5] = 2
    struct.pack_into("<Q", head, 8, 16 + n)
    return bytes(head) + buf.raw[:n]


def transparent_ciphertext(data: bytes) -> bytes:
    """A serialized 2-polynomial SEAL ciphertext (compressed or not) with its ``c1``
    zeroed, uncompressed: well framed, every member valid, but *transparent* -- no
    encryption at all; SEAL refuses any result computed from it."""
    plain = zstd_open(data) if len(data) > 5 and data[5] == 2 else data
    assert plain is not None
    head = 16 + 73 + 24  # header, members before the array, array header and length
    half = (len(plain) - head) // 2
    return plain[:len(plain) - half] + bytes(half)


# Offsets of an uncompressed ciphertext's members (after its 16-byte header).
_CT_FIELDS: tuple[tuple[str, int, str], ...] = (
    ("parms_id", 16, "<4Q"), ("is_ntt_form", 48, "<B"), ("size", 49, "<Q"),
    ("poly_modulus_degree", 57, "<Q"), ("coeff_modulus_size", 65, "<Q"),
    ("scale", 73, "<d"), ("correction_factor", 81, "<Q"),
    ("array_compr_mode", 94, "<B"), ("array_total_size", 97, "<Q"), ("array_size", 105, "<Q"),
)
_INTERESTING_U64 = (0, 1, 2, 3, 4, 15, 16, 17, 255, 4096, 8192, 1 << 20, 1 << 31, 1 << 32,
                    (1 << 63) - 1, 1 << 63, (1 << 64) - 1)
_INTERESTING_F64 = (0.0, -0.0, 1.0, -1.0, 2.0**40, 2.0**50, 2.0**60, 2.0**100, 2.0**1000,
                    1e-300, math.inf, -math.inf, math.nan)


class Mutator:
    """Structure-aware mutations of fedsec messages; see the module docstring."""

    def __init__(self, rng: random.Random, pools: Pools) -> None:
        self.rng = rng
        self.pools = pools

    # ------------------------------------------------------------------ entry points
    def mutate(self, data: bytes, *, depth: int = 0) -> bytes:
        """One mutation of ``data``, picked according to what ``data`` looks like."""
        r = self.rng.random()
        if data[:4] == wire.MAGIC and r < 0.85:
            frame = parse_frame(data)
            if frame is not None:
                return self.message(frame, depth=depth)
        if data[:2] == SEAL_MAGIC and r < 0.8:
            return self.seal(data)
        return self.raw(data)

    def mutate_many(self, data: bytes, rounds: int | None = None) -> bytes:
        """Stack 1..3 mutations (most runs use one, so checks are hit one at a time)."""
        n = rounds if rounds is not None else self.rng.choice((1, 1, 1, 1, 2, 3))
        for _ in range(n):
            data = self.mutate(data)
        return data

    # ------------------------------------------------------------------ raw bytes
    def raw(self, data: bytes) -> bytes:
        rng = self.rng
        b = bytearray(data)
        op = rng.randrange(9)
        if op == 0 and b:  # bit flips
            for _ in range(rng.choice((1, 1, 2, 8))):
                i = rng.randrange(len(b))
                b[i] ^= 1 << rng.randrange(8)
        elif op == 1 and b:  # interesting bytes
            i = rng.randrange(len(b))
            b[i] = rng.choice((0x00, 0x01, 0x7F, 0x80, 0xFF))
        elif op == 2:  # truncate
            return bytes(b[:rng.randrange(len(b) + 1)])
        elif op == 3:  # extend
            tail = rng.choice((b"\x00", b"\xff" * rng.randrange(1, 64),
                               rng.randbytes(rng.randrange(1, 256)), bytes(b[:64])))
            return bytes(b) + tail
        elif op == 4 and b:  # delete a slice
            i = rng.randrange(len(b))
            j = min(len(b), i + rng.choice((1, 2, 3, 4, 5, 6, 7, 8, 9, 64, 1024)))
            del b[i:j]
        elif op == 5 and b:  # duplicate a slice
            i = rng.randrange(len(b))
            j = min(len(b), i + rng.choice((1, 2, 3, 4, 5, 6, 7, 16, 256)))
            b[i:i] = b[i:j]
        elif op == 6:  # insert random bytes
            i = rng.randrange(len(b) + 1)
            b[i:i] = rng.randbytes(rng.choice((1, 2, 3, 4, 5, 6, 7, 8, 32)))
        elif op == 7 and len(b) >= 8:  # overwrite a 4- or 8-byte word with an extreme
            w = rng.choice((4, 8))
            i = rng.randrange(max(1, len(b) - w))
            v = rng.choice((0, 1, 0x7FFFFFFF, 0xFFFFFFFF, (1 << 63), (1 << 64) - 1))
            b[i:i + w] = (v & ((1 << (8 * w)) - 1)).to_bytes(w, rng.choice(("big", "little")))
        else:  # random bytes of the same length
            return rng.randbytes(len(b))
        return bytes(b)

    # ------------------------------------------------------------------ wire messages
    def message(self, f: Frame, *, depth: int = 0) -> bytes:
        rng = self.rng
        op = rng.randrange(100)
        if op < 30:
            f.meta_text = self.meta_text(f.meta_text)
        elif op < 62 and f.blobs:
            self.blob_op(f, depth)
        elif op < 70:
            self.blob_list_op(f)
        elif op < 76:
            f.kind = rng.choice([k.encode() for k in self.pools.kinds] or [b"x"]) \
                if rng.random() < 0.7 else self.raw(f.kind)
        elif op < 80:
            f.version = rng.choice((0, 2, 0xFFFF))
        elif op < 83:
            f.magic = rng.choice((b"FSEc", b"\x00\x00\x00\x00", b"FDPA", b"^\xa1\x10\x04"))
        elif op < 88:
            f.trailer = rng.choice((b"\x00", rng.randbytes(rng.randrange(1, 16)),
                                    struct.pack(">I", 5) + b"extra"))
        elif op < 94:
            return self.length_fields(f)
        else:
            return self.raw(f.encode())
        return f.encode()

    def length_fields(self, f: Frame) -> bytes:
        """Encode ``f`` with one length or count field lying about what follows."""
        data = bytearray(f.encode())
        rng = self.rng
        kpos = 6
        mpos = 7 + len(f.kind)
        cpos = mpos + 4 + len(f.meta_text)
        field_pos = [(kpos, 1), (mpos, 4), (cpos, 2)]
        pos = cpos + 2
        for b in f.blobs:
            field_pos.append((pos, 4))
            pos += 4 + len(b)
        at, width = rng.choice(field_pos)
        old = int.from_bytes(data[at:at + width], "big")
        new = rng.choice((0, 1, old - 1, old + 1, old * 2, (1 << (8 * width)) - 1,
                          1 << (8 * width - 1)))
        data[at:at + width] = (new % (1 << (8 * width))).to_bytes(width, "big")
        return bytes(data)

    # ------------------------------------------------------------------ metadata
    def meta_text(self, text: bytes) -> bytes:
        rng = self.rng
        try:
            meta = json.loads(text)
        except ValueError:
            return self.raw(text)
        if not isinstance(meta, dict):
            return self.raw(text)
        op = rng.randrange(100)
        if op < 70:
            meta = self.meta(meta)
            try:
                return json.dumps(meta, sort_keys=rng.random() < 0.8,
                                  separators=(",", ":")).encode()
            except (ValueError, RecursionError):
                return text
        if op < 78:  # duplicate a key with another value (json keeps the last one)
            if meta:
                k = rng.choice(sorted(meta))
                dup = json.dumps({k: self.hostile()}, separators=(",", ":")).encode()[1:-1]
                return text[:-1] + b"," + dup + b"}" if len(text) > 2 else text
            return text
        if op < 84:  # JSON tokens Python accepts: 1e999 -> inf, NaN, -0
            if meta:
                k = rng.choice(sorted(meta))
                tok = rng.choice((b"1e999", b"-1e999", b"NaN", b"-0", b"1E400", b"-Infinity",
                                  b"0.1e-400", b"9" * 5000))
                meta[k] = "\x00PLACEHOLDER\x00"
                enc = json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()
                return enc.replace(b'"\\u0000PLACEHOLDER\\u0000"', tok)
            return text
        if op < 88:  # not an object / not JSON / whitespace and escapes
            return rng.choice((b"[]", b"null", b"1", b'"x"', b"", b"{", b"{}}", b"\xff\xfe",
                               b" " + text + b"\n", text.replace(b'"', b"'"),
                               b"[" * 100_000 + b"]" * 100_000))
        if op < 94:  # another message's metadata (replay)
            other = parse_frame(rng.choice(self.pools.messages)) if self.pools.messages \
                else None
            return other.meta_text if other is not None else b"{}"
        return self.raw(text)

    def meta(self, meta: dict[str, Any]) -> dict[str, Any]:
        rng = self.rng
        meta = dict(meta)
        op = rng.randrange(100)
        if meta and op < 60:
            k = rng.choice(sorted(meta))
            meta[k] = self.value(meta[k])
        elif meta and op < 72:
            del meta[rng.choice(sorted(meta))]
        elif op < 84:
            k = rng.choice(sorted(meta)) + "_" if meta and rng.random() < 0.3 else \
                rng.choice(("x", "parties", "ratio", "party", "name", "session", "config",
                            "holder", "chunks", "rotations", "preset", "index", "fields",
                            "__proto__", ""))
            meta[k] = self.hostile()
        elif op < 90:
            meta = {}
        else:
            for k in list(meta)[:3]:
                meta[k] = self.value(meta[k])
        return meta

    def hostile(self) -> Any:
        if self.pools.values and self.rng.random() < 0.2:
            return self.rng.choice(self.pools.values)
        return self.rng.choice(HOSTILE_KINDS[self.rng.choice(sorted(HOSTILE_KINDS))])

    def value(self, v: Any) -> Any:
        """A plausible-but-wrong or plainly hostile replacement of ``v``."""
        rng = self.rng
        if rng.random() < 0.45:
            return self.hostile()
        if isinstance(v, bool):
            return rng.choice((not v, int(v), str(v).lower(), None))
        if isinstance(v, int):
            return rng.choice((v + 1, v - 1, -v, v * 2, v + 2**32, float(min(v, 2**1000)),
                               str(v)[:4000], [v], v ^ (1 << rng.randrange(64))))
        if isinstance(v, float):
            return rng.choice((v * (1 + 1e-9), v + 1e-12, -v, v * 2, 0.0, math.nan, math.inf,
                               -math.inf, str(v), int(v) if math.isfinite(v) else 0, 1e300))
        if isinstance(v, str):
            if not v:
                return rng.choice(("x", None, 0))
            i = rng.randrange(len(v))
            return rng.choice((v + "x", v[:-1], v.upper(), v[:i] + chr(ord(v[i]) ^ 1) + v[i + 1:],
                               v * 2, v[::-1], " " + v, v + "\n", [v], {"v": v}))
        if isinstance(v, list):
            w = list(v)
            op = rng.randrange(8)
            if op == 0 and w:
                del w[rng.randrange(len(w))]
            elif op == 1 and w:
                w.insert(rng.randrange(len(w) + 1), rng.choice(w))
            elif op == 2:
                w.insert(rng.randrange(len(w) + 1), self.hostile())
            elif op == 3 and w:
                i = rng.randrange(len(w))
                w[i] = self.value(w[i])
            elif op == 4:
                w.reverse()
            elif op == 5:
                w = w * rng.choice((2, 100))
            elif op == 6:
                w = []
            else:
                w = [self.value(x) for x in w[:8]] + w[8:]
            return w
        if isinstance(v, dict):
            return self.meta(v)
        return self.hostile()

    # ------------------------------------------------------------------ blobs
    def blob_op(self, f: Frame, depth: int) -> None:
        rng = self.rng
        i = rng.randrange(len(f.blobs))
        b = f.blobs[i]
        op = rng.randrange(100)
        if op < 45:
            f.blobs[i] = self.mutate(b, depth=depth + 1) if depth < 4 else self.raw(b)
        elif op < 55:
            f.blobs[i] = b""
        elif op < 70 and self.pools.blobs:
            same = [x for x in self.pools.blobs if len(x) == len(b) and x != b]
            f.blobs[i] = rng.choice(same) if same and rng.random() < 0.6 else \
                rng.choice(self.pools.blobs)
        elif op < 78 and self.pools.messages:
            f.blobs[i] = rng.choice(self.pools.messages)
        elif op < 88:
            f.blobs[i] = rng.randbytes(len(b)) if rng.random() < 0.5 else \
                rng.randbytes(rng.choice((1, 16, 31, 32, 33, 64, 65, 1000)))
        else:
            f.blobs[i] = self.raw(b)

    def blob_list_op(self, f: Frame) -> None:
        rng = self.rng
        op = rng.randrange(7)
        if op == 0 and f.blobs:
            del f.blobs[rng.randrange(len(f.blobs))]
        elif op == 1 and f.blobs:
            f.blobs.insert(rng.randrange(len(f.blobs) + 1), rng.choice(f.blobs))
        elif op == 2 and len(f.blobs) > 1:
            i, j = rng.sample(range(len(f.blobs)), 2)
            f.blobs[i], f.blobs[j] = f.blobs[j], f.blobs[i]
        elif op == 3:
            f.blobs.append(rng.choice(self.pools.blobs) if self.pools.blobs else b"")
        elif op == 4:
            f.blobs = []
        elif op == 5:
            f.blobs = f.blobs + [b""] * rng.choice((1, 10, 1000, 65535 - len(f.blobs)))
        else:
            rng.shuffle(f.blobs)

    # ------------------------------------------------------------------ SEAL objects
    def seal(self, data: bytes) -> bytes:
        rng = self.rng
        if len(data) < 16:
            return self.raw(data)
        if data[5] == 2 and rng.random() < 0.4:
            inside = zstd_open(data)  # mutate what SEAL will parse, then compress again
            if inside is not None:
                return zstd_close(self.seal(inside) if rng.random() < 0.6 else
                                  data[:16] + self.raw(inside[16:]))
        b = bytearray(data)
        op = rng.randrange(100)
        if b[5] == 0 and len(b) > 32 and rng.random() < 0.2:
            # misalign: k bytes in, k bytes off the end (every later member shifts)
            k = rng.randrange(1, 32)
            i = rng.randrange(16, len(b))
            b[i:i] = rng.choice((b"\x00" * k, rng.randbytes(k)))
            return bytes(b[:len(data)])
        if op < 35 and b[5] == 0 and len(b) >= 113:  # uncompressed ciphertext members
            return self.ciphertext_member(bytes(b))
        if op < 50 and b[5] == 0 and len(b) >= 113:  # a coefficient
            n = (len(b) - 113) // 8
            if n:
                k = 113 + 8 * rng.randrange(n)
                b[k:k + 8] = struct.pack("<Q", rng.choice(_INTERESTING_U64
                                                          + (rng.getrandbits(64),)))
            return bytes(b)
        if op < 80:  # header fields
            magic, hsize, major, minor, compr, rsvd, size = _SEAL_HEADER.unpack_from(b)
            which = rng.randrange(6)
            if which == 0:
                compr = rng.choice((0, 1, 2, 3, 255))
            elif which == 1:
                size = rng.choice((0, 15, 16, 17, len(b) - 1, len(b) + 1, 1 << 32, 1 << 40,
                                   (1 << 63) - 1, (1 << 64) - 1))
            elif which == 2:
                major, minor = rng.choice(((3, 0), (3, 7), (4, 0), (4, 9), (5, 0), (255, 255)))
            elif which == 3:
                hsize = rng.choice((0, 15, 17, 255))
            elif which == 4:
                rsvd = rng.choice((1, 0xFFFF))
            else:
                magic = rng.choice((0, 0xA15F, 0x5EA1))
            _SEAL_HEADER.pack_into(b, 0, magic, hsize, major, minor, compr, rsvd, size)
            return bytes(b)
        return self.raw(data)

    def nested_ciphertext_member(self, data: bytes) -> bytes:
        """In an uncompressed key (its ciphertexts are nested SEAL objects), set one
        member of one nested ciphertext to an extreme value."""
        heads: list[int] = []
        at = data.find(data[:5], 16)
        while at >= 0 and len(heads) < 4096:
            heads.append(at)
            at = data.find(data[:5], at + 1)
        if not heads:
            return self.ciphertext_member(data)
        at = self.rng.choice(heads)
        return data[:at] + self.ciphertext_member(data[at:])

    def ciphertext_member(self, data: bytes) -> bytes:
        """Set one member of an uncompressed ciphertext to an extreme value."""
        rng = self.rng
        b = bytearray(data)
        name, at, fmt = rng.choice(_CT_FIELDS)
        size = struct.calcsize(fmt)
        if name == "scale":
            b[at:at + size] = struct.pack(fmt, rng.choice(_INTERESTING_F64))
        elif fmt == "<B":
            b[at] = rng.choice((0, 1, 2, 3, 255))
        elif name == "parms_id":
            word = rng.randrange(4)
            b[at + 8 * word:at + 8 * word + 8] = struct.pack(
                "<Q", rng.choice(_INTERESTING_U64 + (rng.getrandbits(64),)))
        else:
            b[at:at + size] = struct.pack(fmt, rng.choice(_INTERESTING_U64))
        return bytes(b)

    # ------------------------------------------------------------------ lists of messages
    def message_list(self, items: Sequence[bytes],
                     element: Callable[[bytes], bytes] | None = None) -> list[Any]:
        """Mutate a list of messages (what an aggregator receives, or relays); may hold
        non-bytes items (a hostile relay's list)."""
        rng = self.rng
        out: list[Any] = list(items)
        op = rng.randrange(100)
        if op < 45 and out:
            i = rng.randrange(len(out))
            out[i] = (element or self.mutate_many)(out[i])
        elif op < 55 and out:
            del out[rng.randrange(len(out))]
        elif op < 63 and out:
            out.insert(rng.randrange(len(out) + 1), rng.choice(out))
        elif op < 70 and len(out) > 1:
            rng.shuffle(out)
        elif op < 82 and self.pools.messages:
            i = rng.randrange(len(out) + 1)
            pick = rng.choice(self.pools.messages)
            if i < len(out) and rng.random() < 0.6:
                out[i] = pick
            else:
                out.insert(i, pick)
        elif op < 86:
            out = []
        elif op < 90:
            out = out * rng.choice((2, 50))
        elif op < 95:
            out.append(rng.choice((b"", b"FSEC", bytearray(b"FSEC"), "FSEC", None, 0, [b""])))
        else:
            for i in range(len(out)):
                if rng.random() < 0.5:
                    out[i] = self.mutate(out[i])
        return out
