"""SEAL objects to and from bytes, safely, and the SEAL contexts fedsec builds.

Shared by the CKKS (:mod:`fedsec.crypto.ckks`, :mod:`fedsec.crypto.ckks_keys`) and BFV
(:mod:`fedsec.crypto.bfv`) layers: serialization through SEAL's file interface, bounded
zstd inflation before SEAL parses another role's bytes, the refusal of transparent
results, Galois elements and cached SEAL contexts per parameter set.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import struct
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import tenseal.sealapi as seal

from fedsec.crypto.params import CKKSParams
from fedsec.errors import ProtocolError

__all__ = ["TMPDIR", "SEAL_HEADER", "SEAL_MAGIC", "COMPR_NONE", "COMPR_ZSTD", "save", "load",
           "plain_seal_bytes", "zstd", "refuse_transparent", "galois_element",
           "build_seal_context", "new_seal_context"]

TMPDIR = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


def save(obj: Any) -> bytes:
    """Serialize a SEAL object (or a SEAL ``Serializable``) to bytes (SEAL's compression)."""
    fd, path = tempfile.mkstemp(prefix="fedsec-", dir=TMPDIR)
    os.close(fd)
    try:
        obj.save(path)
        with open(path, "rb") as fh:
            return fh.read()
    finally:
        os.unlink(path)


#: What SEAL (built with ``SEAL_THROW_ON_TRANSPARENT_CIPHERTEXT``, as TenSEAL builds it)
#: raises when an operation's result has ``c1 = 0``.
_TRANSPARENT = "result ciphertext is transparent"


@contextlib.contextmanager
def refuse_transparent() -> Iterator[None]:
    """Turn SEAL's refusal of a *transparent* result into :class:`ProtocolError`.

    A result whose ``c1`` vanishes (a product with a zero plaintext, or operands that
    cancel) cannot arise from honest operands but for negligible probability: fresh
    encryptions have uniform ``c1`` and :meth:`CKKSContext.deserialize` refuses
    transparent ones. Where the operands include bytes another role chose and no check
    at decode time can exclude a cancellation (a crafted pair of ciphertexts), the role
    wraps its arithmetic in this. Only that one SEAL error is translated; any other
    error is a bug and propagates unchanged.

    Raises
    ------
    ProtocolError
        If SEAL refuses a transparent result inside the block.
    """
    try:
        yield
    except RuntimeError as exc:
        if str(exc) != _TRANSPARENT:
            raise
        raise ProtocolError("degenerate operands: a product or sum of ciphertexts "
                            "would be transparent") from None


# SEAL's serialization header: magic, header size, version major and minor, compression
# mode, reserved, total size (little endian).
SEAL_HEADER = struct.Struct("<HBBBBHQ")
SEAL_MAGIC = 0xA15E
COMPR_NONE, COMPR_ZSTD = 0, 2
_MAX_EXPANSION = 4  # CKKS keys and ciphertexts are random data: zstd saves ~5% on them
_ZSTD_CONTENTSIZE_ERROR = (1 << 64) - 2


@functools.cache
def zstd() -> Any:
    """zstd from the SEAL build TenSEAL ships (it exports the symbols SEAL itself uses)."""
    lib = ctypes.CDLL(sys.modules[seal.Ciphertext.__module__].__file__)
    lib.ZSTD_getFrameContentSize.restype = ctypes.c_ulonglong
    lib.ZSTD_getFrameContentSize.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.ZSTD_decompress.restype = ctypes.c_size_t
    lib.ZSTD_decompress.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p,
                                    ctypes.c_size_t]
    lib.ZSTD_isError.restype = ctypes.c_uint
    lib.ZSTD_isError.argtypes = [ctypes.c_size_t]
    return lib


def plain_seal_bytes(data: bytes, what: str, *, max_expansion: int = _MAX_EXPANSION
                      ) -> tuple[bytes, bytes]:
    """Check a SEAL object's framing and return it uncompressed (header, members), or
    raise ProtocolError.

    SEAL 4.1 as TenSEAL 0.3.18 builds it aborts the whole process (``std::terminate``)
    on some corrupt *compressed* input: the inflating stream buffer's destructor throws
    while the parse error unwinds. So SEAL never inflates bytes another role chose: we
    inflate zstd here, bounded, refuse compressed objects nested inside (their headers
    are the only ones SEAL would parse: same magic, size and version), and hand SEAL the
    plain members.
    """
    if len(data) < SEAL_HEADER.size:
        raise ProtocolError(f"invalid {what}: truncated SEAL header")
    magic, hsize, major, minor, compr, _rsvd, size = SEAL_HEADER.unpack_from(data)
    if magic != SEAL_MAGIC or hsize != SEAL_HEADER.size or size != len(data):
        raise ProtocolError(f"invalid {what}: bad SEAL header")
    body = data[SEAL_HEADER.size:]
    if compr == COMPR_ZSTD:
        lib = zstd()
        limit = max_expansion * len(body) + (1 << 16)
        declared = lib.ZSTD_getFrameContentSize(body, len(body))
        if declared >= _ZSTD_CONTENTSIZE_ERROR or declared > limit:
            raise ProtocolError(f"invalid {what}: bad or oversized zstd frame")
        buf = ctypes.create_string_buffer(max(1, declared))
        n = lib.ZSTD_decompress(buf, declared, body, len(body))
        if lib.ZSTD_isError(n) or n != declared:
            raise ProtocolError(f"invalid {what}: corrupt zstd data")
        body = buf.raw[:n]
    elif compr != COMPR_NONE:
        raise ProtocolError(f"invalid {what}: unsupported compression mode {compr}")
    nested = struct.pack("<HBBB", SEAL_MAGIC, hsize, major, minor)
    at = body.find(nested)
    while at >= 0:
        if body[at + len(nested):at + len(nested) + 1] in (b"\x01", b"\x02"):  # zlib, zstd
            raise ProtocolError(f"invalid {what}: compressed object nested inside")
        at = body.find(nested, at + 1)
    header = SEAL_HEADER.pack(magic, hsize, major, minor, COMPR_NONE, 0,
                               SEAL_HEADER.size + len(body))
    return header, body


def load(obj: Any, context: Any, data: bytes, what: str) -> Any:
    header, body = plain_seal_bytes(bytes(data), what)
    fd, path = tempfile.mkstemp(prefix="fedsec-", dir=TMPDIR)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(header)
            fh.write(body)
        try:
            obj.load(context, path)
        except Exception as exc:  # SEAL raises ValueError/RuntimeError on bad data
            raise ProtocolError(f"invalid {what}: {exc}") from None
        return obj
    finally:
        os.unlink(path)


def galois_element(step: int, poly_modulus_degree: int) -> int:
    """SEAL's Galois element for a left rotation by ``step`` slots (generator 3)."""
    slots = poly_modulus_degree // 2
    step %= slots
    if step == 0:
        raise ValueError("rotation by 0 slots needs no key")
    return pow(3, step, 2 * poly_modulus_degree)


@functools.lru_cache(maxsize=16)
def build_seal_context(params: CKKSParams) -> Any:
    """One SEAL context per parameter set, shared by every key set that uses it (SEAL
    contexts are immutable once built; building one finds the primes and NTT tables, which
    dominated set-up time for many parties in one process)."""
    return new_seal_context(params)


def new_seal_context(params: CKKSParams) -> Any:
    p = seal.EncryptionParameters(seal.SCHEME_TYPE.CKKS)
    p.set_poly_modulus_degree(params.poly_modulus_degree)
    p.set_coeff_modulus(seal.CoeffModulus.Create(params.poly_modulus_degree,
                                                 list(params.coeff_mod_bit_sizes)))
    level = seal.SEC_LEVEL_TYPE.TC128 if params.security_bits >= 128 else \
        seal.SEC_LEVEL_TYPE.NONE
    ctx = seal.SEALContext(p, True, level)
    if ctx.parameters_error_message() != "valid":
        raise ValueError(f"{params.name}: SEAL rejects the parameters: "
                         f"{ctx.parameters_error_message()}")
    return ctx
