"""BFV ciphertext bytes: the fast, fixed-layout deserializer accepts exactly what the
context writes and raises ProtocolError on anything else."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from fedsec.crypto.bfv import BFVContext, _inflate
from fedsec.crypto.sealio import SEAL_HEADER as _SEAL_HEADER
from fedsec.errors import ProtocolError


@pytest.fixture(scope="module")
def bfv() -> BFVContext:
    return BFVContext.from_seed(os.urandom(32))


def _forms(bfv: BFVContext) -> list[tuple[bytes, dict[str, bool]]]:
    ct = bfv.encrypt(np.arange(10, dtype=np.uint64))
    return [(bfv.serialize(ct), {}),
            (bfv.serialize(bfv.mod_switch_down(ct)), {"low": True}),
            (bfv.serialize(ct, ntt=True), {"ntt": True})]


def _plain(data: bytes) -> bytes:
    """The same ciphertext, uncompressed (SEAL's zstd undone)."""
    magic, hs, ma, mi, compr, _r, _s = _SEAL_HEADER.unpack_from(data)
    body = data[_SEAL_HEADER.size:]
    if compr == 2:
        from fedsec.crypto.sealio import zstd as _zstd
        size = int(_zstd().ZSTD_getFrameContentSize(body, len(body)))
        body = _inflate(body, size) or b""
    return _SEAL_HEADER.pack(magic, hs, ma, mi, 0, 0, _SEAL_HEADER.size + len(body)) + body


def test_round_trip_every_form(bfv: BFVContext) -> None:
    for data, kw in _forms(bfv):
        out = bfv.decrypt(bfv.deserialize(data, **kw))
        assert out[:10].tolist() == list(range(10))
        plain = _plain(data)  # an uncompressed sender is accepted too
        assert bfv.decrypt(bfv.deserialize(plain, **kw))[:10].tolist() == list(range(10))


def test_rejects_malformed(bfv: BFVContext) -> None:
    for data, kw in _forms(bfv):
        plain = _plain(data)
        bad = [data[:-1], data + b"\0", data[:_SEAL_HEADER.size], b"",
               plain[:-8], plain + bytes(8)]
        # every parsed header byte (object header, members, nested array header)
        prefix = bfv._prefix(kw.get("ntt", False), kw.get("low", False))[0]
        for i in range(len(prefix)):
            flipped = bytearray(plain)
            flipped[i] ^= 0x01
            bad.append(bytes(flipped))
        # a coefficient out of range of its prime
        over = bytearray(plain)
        over[len(prefix):len(prefix) + 8] = struct.pack("<Q", (1 << 64) - 1)
        bad.append(bytes(over))
        for b in bad:
            with pytest.raises(ProtocolError):
                bfv.deserialize(b, **kw)
    low, _ = _forms(bfv)[1]
    full, _ = _forms(bfv)[0]
    with pytest.raises(ProtocolError):
        bfv.deserialize(low)  # wrong level
    with pytest.raises(ProtocolError):
        bfv.deserialize(full, ntt=True)  # wrong form
