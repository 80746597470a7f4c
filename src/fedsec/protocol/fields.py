"""Typed readers for the fields of a message another role sent.

Every protocol reads message metadata and blobs through these functions, so a missing,
mistyped, out-of-range or oversized field raises :class:`~fedsec.errors.ProtocolError`
(``malformed message: field 'round'``) in one way everywhere, and the error names the field,
never its value. JSON ``true`` is never an integer, a float is never an integer, and a
non-finite number is never a real.

>>> from fedsec.protocol import fields
>>> fields.integer({"round": 3}, "round", 0, 9)
3
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec.errors import ProtocolError

__all__ = ["malformed", "integer", "integers", "real", "reals", "text", "flag", "hexid",
           "blobs", "array", "optional"]

_HEX = re.compile(r"\A[0-9a-f]+\Z")


def malformed(key: str, what: str = "message") -> ProtocolError:
    """The one error of a field that is missing or wrong."""
    return ProtocolError(f"malformed {what}: field {key!r}")


def _is_int(v: Any) -> bool:
    return type(v) is int


def integer(meta: Mapping[str, Any], key: str, lo: int, hi: int, *,
            what: str = "message") -> int:
    """``meta[key]``, an integer in ``[lo, hi]``."""
    v: Any = meta.get(key) if isinstance(meta, Mapping) else None
    if not _is_int(v) or not lo <= v <= hi:
        raise malformed(key, what)
    return int(v)


def integers(meta: Mapping[str, Any], key: str, lo: int, hi: int, *,
             length: int | None = None, min_length: int = 0, max_length: int = 1 << 20,
             distinct: bool = False, what: str = "message") -> tuple[int, ...]:
    """``meta[key]``, a list of integers in ``[lo, hi]`` (of exactly ``length`` items, or
    of ``min_length`` to ``max_length``; pairwise different if ``distinct``)."""
    v = meta.get(key) if isinstance(meta, Mapping) else None
    if not isinstance(v, list):
        raise malformed(key, what)
    n = len(v)
    if (length is not None and n != length) or not min_length <= n <= max_length:
        raise malformed(key, what)
    if not all(_is_int(x) and lo <= x <= hi for x in v):
        raise malformed(key, what)
    if distinct and len(set(v)) != n:
        raise malformed(key, what)
    return tuple(int(x) for x in v)


def real(meta: Mapping[str, Any], key: str, lo: float = -math.inf, hi: float = math.inf, *,
         what: str = "message") -> float:
    """``meta[key]``, a finite number in ``[lo, hi]`` (an integer is accepted as a real)."""
    v: Any = meta.get(key) if isinstance(meta, Mapping) else None
    if type(v) not in (int, float):
        raise malformed(key, what)
    try:
        f = float(v)
    except OverflowError:
        raise malformed(key, what) from None
    if not math.isfinite(f) or not lo <= f <= hi:
        raise malformed(key, what)
    return f


def reals(meta: Mapping[str, Any], key: str, lo: float = -math.inf, hi: float = math.inf, *,
          length: int | None = None, max_length: int = 1 << 20,
          what: str = "message") -> tuple[float, ...]:
    """``meta[key]``, a list of finite numbers in ``[lo, hi]``."""
    v = meta.get(key) if isinstance(meta, Mapping) else None
    if not isinstance(v, list) or (length is not None and len(v) != length) \
            or len(v) > max_length:
        raise malformed(key, what)
    return tuple(real({key: x}, key, lo, hi, what=what) for x in v)


def text(meta: Mapping[str, Any], key: str, *, max_length: int = 256,
         pattern: str | re.Pattern[str] | None = None, choices: Sequence[str] | None = None,
         what: str = "message") -> str:
    """``meta[key]``, a string of at most ``max_length`` characters (matching ``pattern``
    in full, or one of ``choices``)."""
    v = meta.get(key) if isinstance(meta, Mapping) else None
    if not isinstance(v, str) or len(v) > max_length:
        raise malformed(key, what)
    if choices is not None and v not in choices:
        raise malformed(key, what)
    if pattern is not None and re.fullmatch(pattern, v) is None:
        raise malformed(key, what)
    return v


def flag(meta: Mapping[str, Any], key: str, *, what: str = "message") -> bool:
    """``meta[key]``, a JSON boolean."""
    v = meta.get(key) if isinstance(meta, Mapping) else None
    if not isinstance(v, bool):
        raise malformed(key, what)
    return v


def hexid(meta: Mapping[str, Any], key: str, *, min_length: int = 32, max_length: int = 128,
          what: str = "message") -> str:
    """``meta[key]``, a lowercase hexadecimal string (an id, a digest, a session)."""
    v = meta.get(key) if isinstance(meta, Mapping) else None
    if not isinstance(v, str) or not min_length <= len(v) <= max_length or not _HEX.match(v):
        raise malformed(key, what)
    return v


def optional(meta: Mapping[str, Any], key: str) -> bool:
    """Whether ``meta`` carries ``key`` with a non-null value (for optional fields)."""
    return isinstance(meta, Mapping) and meta.get(key) is not None


def blobs(items: Sequence[bytes], count: int | None = None, *, least: int = 0,
          most: int = 0xFFFF, what: str = "message") -> tuple[bytes, ...]:
    """A message's blobs, exactly ``count`` of them (or ``least`` to ``most``)."""
    n = len(items)
    if (count is not None and n != count) or not least <= n <= most:
        raise ProtocolError(f"malformed {what}: {n} blobs")
    return tuple(items)


def array(data: bytes, dtype: Any, shape: tuple[int, ...], *, what: str = "array",
          lo: int | float | None = None, hi: int | float | None = None) -> NDArray[Any]:
    """``data`` read as a little-endian array of ``dtype`` and exactly ``shape``, with every
    entry in ``[lo, hi]`` where given (finite, for floating types). A copy: writable."""
    dt = np.dtype(dtype).newbyteorder("<")
    expected = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    if not isinstance(data, (bytes, bytearray, memoryview)) or len(data) != expected:
        raise ProtocolError(f"malformed {what}: wrong size")
    out = np.frombuffer(bytes(data), dtype=dt).astype(np.dtype(dtype), copy=True)
    out = out.reshape(shape)
    if out.dtype.kind == "f" and not np.all(np.isfinite(out)):
        raise ProtocolError(f"malformed {what}: not finite")
    if lo is not None and out.size and out.min() < lo:
        raise ProtocolError(f"malformed {what}: out of range")
    if hi is not None and out.size and out.max() > hi:
        raise ProtocolError(f"malformed {what}: out of range")
    return out
