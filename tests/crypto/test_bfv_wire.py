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
    prod = bfv.multiply(ct, bfv.encrypt(np.ones(bfv.slots, dtype=np.uint64)))
    return [(bfv.serialize(ct), {}),
            (bfv.serialize(bfv.mod_switch_down(ct)), {"low": True}),
            (bfv.serialize(ct, ntt=True), {"ntt": True}),
            (bfv.serialize(bfv.mod_switch_down(prod)), {"low": True, "polys": 3})]


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
        prefix = bfv._prefix(kw.get("ntt", False), kw.get("low", False),
                             kw.get("polys", 2))[0]
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


def test_ciphertext_product_is_exact_mod_t_and_keeps_its_size(bfv: BFVContext) -> None:
    """``multiply`` (no relinearisation) then a full-range plaintext product and one
    modulus switch: exact modulo ``t`` for full-range residues at the 41-bit prime exact
    mode uses; a 3-polynomial result is read only with ``polys=3``."""
    from fedsec.auc.exact import EXACT_BFV
    from fedsec.crypto.drbg import SystemRandomSource

    ctx = BFVContext.from_seed(os.urandom(32), params=EXACT_BFV)
    rnd = SystemRandomSource()
    a, b, r = (rnd.integers(0, ctx.t, ctx.slots).astype(np.uint64) for _ in range(3))
    prod = ctx.multiply(ctx.encrypt(a), ctx.encrypt(b))
    out = ctx.mod_switch_down(ctx.multiply_plain(prod, ctx.encode(r)))
    assert ctx.noise_budget(out) >= 20
    data = ctx.serialize(out)
    got = ctx.decrypt(ctx.deserialize(data, low=True, polys=3))
    want = [int(x) * int(y) * int(z) % ctx.t for x, y, z in zip(a, b, r, strict=True)]
    assert got.tolist() == want
    with pytest.raises(ProtocolError):
        ctx.deserialize(data, low=True)  # 3 polynomials where 2 are expected
    with pytest.raises(ProtocolError):
        ctx.deserialize(ctx.serialize(ctx.mod_switch_down(ctx.encrypt(a))), low=True,
                        polys=3)
