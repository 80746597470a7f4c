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
import mmap
import os
import struct
import sys
import tempfile
import threading
import weakref
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
    """Serialize a SEAL object (or a SEAL ``Serializable``) to bytes (SEAL's compression).

    TenSEAL's bindings write to a path only: SEAL writes into this thread's in-memory
    file (:class:`_Scratch`), never a file in a directory."""
    scratch = _scratch()
    if scratch is None:
        return _save_via_tempfile(obj)
    return scratch.save(obj)


def _save_via_tempfile(obj: Any) -> bytes:
    fd, path = tempfile.mkstemp(prefix="fedsec-", dir=TMPDIR)
    os.close(fd)
    try:
        obj.save(path)
        with open(path, "rb") as fh:
            return fh.read()
    finally:
        os.unlink(path)


class _Scratch:
    """One thread's two in-memory files (``memfd``) through which SEAL, whose TenSEAL
    bindings read and write paths only, reads and writes serialized objects.

    The load file is mapped: zstd inflates another role's bytes straight into it, the
    nested-header check reads them there and SEAL opens it by its ``/proc/self/fd``
    path, so a loaded ciphertext is copied once on our side (by the inflation) and no
    file is created, named or unlinked per object. Per thread (each has its own files)
    and per process (a forked child makes new ones: a memfd is shared across fork).
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.load_fd = os.memfd_create("fedsec-seal-load", os.MFD_CLOEXEC)
        self.save_fd = os.memfd_create("fedsec-seal-save", os.MFD_CLOEXEC)
        self.load_path = f"/proc/self/fd/{self.load_fd}"
        self.save_path = f"/proc/self/fd/{self.save_fd}"
        self.capacity = 0
        self.size = 0
        self.map: mmap.mmap | None = None
        self._anchor: Any = None
        self.address = 0
        self.closed = False

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._anchor = None
        if self.map is not None:
            self.map.close()
            self.map = None
        for fd in (self.load_fd, self.save_fd):
            with contextlib.suppress(OSError):
                os.close(fd)

    def buffer(self, size: int) -> mmap.mmap:
        """The load file, resized to exactly ``size`` bytes and mapped (grown as
        needed; never shrunk below what is mapped)."""
        if size > self.capacity:
            self._anchor = None
            if self.map is not None:
                self.map.close()
            cap = max(size, 2 * self.capacity, 1 << 16)
            os.ftruncate(self.load_fd, cap)
            self.map = mmap.mmap(self.load_fd, cap)
            self._anchor = ctypes.c_char.from_buffer(self.map)
            self.address = ctypes.addressof(self._anchor)
            self.capacity = cap
            self.size = cap
        if size != self.size:
            # SEAL reads a file to its end where a size field is inconsistent: the file
            # is exactly the object, never an earlier object's tail.
            os.ftruncate(self.load_fd, size)
            self.size = size
        assert self.map is not None
        return self.map

    def release_if_large(self) -> None:
        """Give the load file's memory back after a large object (keys): only objects up
        to :data:`_KEEP_BYTES` (ciphertexts) keep their pages between loads."""
        if self.capacity > _KEEP_BYTES:
            self._anchor = None
            if self.map is not None:
                self.map.close()
                self.map = None
            os.ftruncate(self.load_fd, 0)
            self.capacity = self.size = 0
            self.address = 0

    def save(self, obj: Any) -> bytes:
        obj.save(self.save_path)   # SEAL opens it with truncation
        size = os.fstat(self.save_fd).st_size
        out = os.pread(self.save_fd, size, 0)
        if size > _KEEP_BYTES:
            os.ftruncate(self.save_fd, 0)
        return out


#: Objects up to this size keep the in-memory files' pages for the next one.
_KEEP_BYTES = 8 << 20


_LOCAL = threading.local()
_MEMFD = hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd")


def _scratch() -> _Scratch | None:
    """This thread's :class:`_Scratch` (``None`` where the platform has no memfd or its
    ``/proc/self/fd`` paths cannot be opened: then temporary files are used)."""
    global _MEMFD
    if not _MEMFD:
        return None
    s = getattr(_LOCAL, "scratch", None)
    if s is None or s.pid != os.getpid():
        if s is not None:  # inherited through fork: the parent's files, not ours
            s.close()
        fresh: _Scratch | None = None
        try:
            fresh = _Scratch()
            os.pwrite(fresh.save_fd, b"fedsec", 0)
            with open(fresh.save_path, "rb") as fh:  # SEAL opens files by this path
                ok = fh.read() == b"fedsec"
            os.ftruncate(fresh.save_fd, 0)
        except OSError:
            ok = False
        if fresh is None or not ok:
            if fresh is not None:
                fresh.close()
            _MEMFD = False
            return None
        _LOCAL.scratch = s = fresh
        weakref.finalize(threading.current_thread(), fresh.close)
    return s


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


def _zstd_handle(source: Any) -> Any:
    """A handle of its own on the zstd of the SEAL build TenSEAL ships (it exports the
    symbols SEAL itself uses), its sources typed as ``source``."""
    lib = ctypes.CDLL(sys.modules[seal.Ciphertext.__module__].__file__)
    lib.ZSTD_getFrameContentSize.restype = ctypes.c_ulonglong
    lib.ZSTD_getFrameContentSize.argtypes = [source, ctypes.c_size_t]
    lib.ZSTD_decompress.restype = ctypes.c_size_t
    lib.ZSTD_decompress.argtypes = [ctypes.c_void_p, ctypes.c_size_t, source, ctypes.c_size_t]
    lib.ZSTD_isError.restype = ctypes.c_uint
    lib.ZSTD_isError.argtypes = [ctypes.c_size_t]
    return lib


@functools.cache
def zstd() -> Any:
    """zstd from the SEAL build TenSEAL ships, called with ``bytes``."""
    return _zstd_handle(ctypes.c_char_p)


def _outer_header(data: bytes, what: str) -> tuple[int, int, int, int, int]:
    """Check a SEAL object's outer header: ``(hsize, major, minor, compr, body size)``."""
    if len(data) < SEAL_HEADER.size:
        raise ProtocolError(f"invalid {what}: truncated SEAL header")
    magic, hsize, major, minor, compr, _rsvd, size = SEAL_HEADER.unpack_from(data)
    if magic != SEAL_MAGIC or hsize != SEAL_HEADER.size or size != len(data):
        raise ProtocolError(f"invalid {what}: bad SEAL header")
    if (major, minor) != _seal_version():
        # SEAL reads any header it does not accept as a SEAL 3.4 one, whose compression
        # mode is byte 3 (our major): version 2.x would make SEAL inflate the body itself
        raise ProtocolError(f"invalid {what}: unsupported SEAL version {major}.{minor}")
    if compr not in (COMPR_NONE, COMPR_ZSTD):
        raise ProtocolError(f"invalid {what}: unsupported compression mode {compr}")
    return hsize, major, minor, compr, len(data) - SEAL_HEADER.size


@functools.cache
def _seal_version() -> tuple[int, int]:
    """The (major, minor) version this SEAL writes (and, exactly, the only one it reads)."""
    data = save(seal.EncryptionParameters(seal.SCHEME_TYPE.CKKS))
    return data[3], data[4]


def _inflated_size(data: bytes, what: str, max_expansion: int) -> int:
    """The declared size of the zstd frame after the header, bounded."""
    body_len = len(data) - SEAL_HEADER.size
    limit = max_expansion * body_len + (1 << 16)
    lib = _zstd_by_address()
    declared = lib.ZSTD_getFrameContentSize(_address(data) + SEAL_HEADER.size, body_len)
    if declared >= _ZSTD_CONTENTSIZE_ERROR or declared > limit:
        raise ProtocolError(f"invalid {what}: bad or oversized zstd frame")
    return int(declared)


def _inflate_into(dst: int, declared: int, data: bytes, what: str) -> None:
    lib = _zstd_by_address()
    body_len = len(data) - SEAL_HEADER.size
    n = lib.ZSTD_decompress(dst, declared, _address(data) + SEAL_HEADER.size, body_len)
    if lib.ZSTD_isError(n) or n != declared:
        raise ProtocolError(f"invalid {what}: corrupt zstd data")


def _address(data: bytes) -> int:
    """Address of a ``bytes`` object's buffer (valid while ``data`` is alive)."""
    addr = ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value
    assert addr is not None
    return addr


def _refuse_nested_compression(buf: Any, start: int, end: int, what: str) -> None:
    """Refuse a compressed SEAL header (same magic, size and version as the outer one,
    the only headers SEAL would parse) anywhere in ``buf[start:end]``. ``buf`` starts
    with the outer header."""
    nested = bytes(buf[0:5])
    at = buf.find(nested, start, end)
    while at >= 0:
        # never read past ``end``: ``buf`` may be the load file's mapping, longer than
        # the file; a page past the file's end raises SIGBUS (the process dies)
        if at + 6 <= end and buf[at + 5] in (1, 2):  # zlib, zstd
            raise ProtocolError(f"invalid {what}: compressed object nested inside")
        at = buf.find(nested, at + 1, end)


#: A ciphertext's members before its data array: parms_id (32), NTT flag (1), size,
#: ring degree, number of primes, scale and correction factor (8 each).
_CT_MEMBERS = 32 + 1 + 8 * 5


def _nested_header_at(buf: Any, pos: int, end: int, what: str) -> tuple[int, int] | None:
    """The (compression, size) of a SEAL header at ``pos``; ``ProtocolError`` if it claims
    compression, whatever its version bytes, or if SEAL would read it as a SEAL 3.4
    header; ``None`` if SEAL refuses what is there.

    SEAL 4.1 reads 16 bytes that are not a valid header of its own version as a SEAL 3.4
    header (``magic, 0, compression, uint32 size``) and accepts them if byte 3 is a
    compression mode it knows, magic or not: such a header could hide compression from
    the checks here and from the scan, and SEAL 4.1 never writes one."""
    if pos + SEAL_HEADER.size > end:
        return None
    magic, hsize, major, minor, compr, _r, size = SEAL_HEADER.unpack_from(buf, pos)
    ours = magic == SEAL_MAGIC and hsize == SEAL_HEADER.size
    if ours and compr in (1, 2):  # zlib, zstd
        raise ProtocolError(f"invalid {what}: compressed object nested inside")
    if ours and (major, minor) == _seal_version() and compr == COMPR_NONE:
        return compr, size
    if buf[pos + 3] in (0, 1, 2):  # SEAL would take it as a SEAL 3.4 header
        raise ProtocolError(f"invalid {what}: SEAL 3.4 header nested inside")
    return None  # SEAL refuses it


def _ciphertext_nested_headers(buf: Any, start: int, end: int, what: str) -> bool:
    """Check the nested headers of a ciphertext (its members in ``buf[start:end]``) where
    SEAL parses them - the data array's after the members and, after the array, a seeded
    ciphertext's seed - whatever their version bytes; ``ProtocolError`` if one claims
    compression. Return whether the layout is exactly that (members, one uncompressed
    array, optionally the seed, nothing else): then these are the only nested headers
    SEAL reads and the scan of every byte is not needed; otherwise the caller scans."""
    pos = start + _CT_MEMBERS
    array = _nested_header_at(buf, pos, end, what)
    if array is None or array[0] != COMPR_NONE or pos + SEAL_HEADER.size + 8 > end:
        return False
    (count,) = struct.unpack_from("<Q", buf, pos + SEAL_HEADER.size)
    if count > end or array[1] != SEAL_HEADER.size + 8 + 8 * count:
        return False  # SEAL refuses the array's size; nothing after it is parsed
    pos += array[1]
    if pos == end:
        return True
    seed = _nested_header_at(buf, pos, end, what)
    return seed is not None and seed[0] == COMPR_NONE and pos + seed[1] == end


def _plaintext_nested_headers(buf: Any, start: int, end: int, what: str) -> bool:
    """A plaintext's or secret key's one nested header (its data array after parms_id,
    coefficient count and scale), as :func:`_ciphertext_nested_headers` does."""
    pos = start + 32 + 8 + 8
    array = _nested_header_at(buf, pos, end, what)
    return array is not None and pos + array[1] == end


#: Key-switching keys hold one list per Galois element index (at most the ring degree,
#: 2^15 for SEAL's largest; relinearization keys one): a bound on the walk's steps.
_MAX_KEY_LISTS = 1 << 16


def _kswitch_nested_headers(buf: Any, start: int, end: int, what: str) -> None:
    """Walk relinearization or Galois keys (parms_id, then counted lists of public keys,
    each with its own header) and check every nested header SEAL parses; refuse any
    other layout (SEAL would refuse it too: honest keys always have this one)."""
    def bad() -> ProtocolError:
        return ProtocolError(f"invalid {what}: malformed key-switching keys")
    pos = start + 32
    if pos + 8 > end:
        raise bad()
    (dim1,) = struct.unpack_from("<Q", buf, pos)
    pos += 8
    if dim1 > min((end - pos) // 8, _MAX_KEY_LISTS):
        raise bad()
    for _ in range(dim1):
        if pos + 8 > end:
            raise bad()
        (dim2,) = struct.unpack_from("<Q", buf, pos)
        pos += 8
        if dim2 > (end - pos) // SEAL_HEADER.size:
            raise bad()
        for _ in range(dim2):
            key = _nested_header_at(buf, pos, end, what)
            if key is None or key[1] < SEAL_HEADER.size or pos + key[1] > end or \
                    not _ciphertext_nested_headers(buf, pos + SEAL_HEADER.size,
                                                   pos + key[1], what):
                raise bad()
            pos += key[1]
    if pos != end:
        raise bad()


def _check_nested(obj: Any, buf: Any, start: int, end: int, what: str) -> None:
    """Refuse compressed (or SEAL 3.4) headers wherever SEAL parses one inside an object
    of ``obj``'s type, ``buf[start:end]`` being its members; where the layout is not the
    one checked, SEAL refuses the object before any later header, and the full scan
    runs as well."""
    if isinstance(obj, (seal.RelinKeys, seal.GaloisKeys)):
        _kswitch_nested_headers(buf, start, end, what)
        return
    if isinstance(obj, (seal.Ciphertext, seal.PublicKey)):
        ok = _ciphertext_nested_headers(buf, start, end, what)
    elif isinstance(obj, (seal.Plaintext, seal.SecretKey)):
        ok = _plaintext_nested_headers(buf, start, end, what)
    else:
        ok = False
    if not ok:
        _refuse_nested_compression(buf, start, end, what)


@functools.cache
def _zstd_by_address() -> Any:
    """The same zstd, called with raw addresses (its own handle: :func:`zstd`'s
    prototypes take ``bytes``)."""
    return _zstd_handle(ctypes.c_void_p)


def plain_seal_bytes(data: bytes, what: str, *, max_expansion: int = _MAX_EXPANSION
                      ) -> tuple[bytes, bytes]:
    """Check a SEAL object's framing and return it uncompressed (header, members), or
    raise ProtocolError.

    SEAL 4.1 as TenSEAL 0.3.18 builds it aborts the whole process (``std::terminate``)
    on some corrupt *compressed* input: the inflating stream buffer's destructor throws
    while the parse error unwinds. So SEAL never inflates bytes another role chose: we
    inflate zstd here, bounded, refuse compressed objects nested inside (their headers
    are the only ones SEAL would parse) and hand SEAL the plain members.
    """
    hsize, major, minor, compr, body_len = _outer_header(data, what)
    if compr == COMPR_ZSTD:
        declared = _inflated_size(data, what, max_expansion)
        buf = ctypes.create_string_buffer(max(1, declared))
        _inflate_into(ctypes.addressof(buf), declared, data, what)
        body = buf.raw[:declared]
    else:
        body = bytes(data[SEAL_HEADER.size:])
    header = SEAL_HEADER.pack(SEAL_MAGIC, hsize, major, minor, COMPR_NONE, 0,
                               SEAL_HEADER.size + len(body))
    _refuse_nested_compression(header + body, SEAL_HEADER.size, SEAL_HEADER.size + len(body),
                               what)
    return header, body


def load(obj: Any, context: Any, data: bytes, what: str) -> Any:
    """Load another role's serialized SEAL object into ``obj``, or raise ProtocolError.

    The checks of :func:`plain_seal_bytes` (bounded zstd inflation done here, never by
    SEAL; no compressed object nested inside), then SEAL's own load and validity check.
    The object is inflated straight into this thread's in-memory file, which SEAL reads
    (TenSEAL's bindings load from a path only); no temporary file is created.
    """
    data = bytes(data)
    scratch = _scratch()
    if scratch is None:
        return _load_via_tempfile(obj, context, data, what)
    hsize, major, minor, compr, body_len = _outer_header(data, what)
    declared = _inflated_size(data, what, _MAX_EXPANSION) if compr == COMPR_ZSTD \
        else body_len
    total = SEAL_HEADER.size + declared
    try:
        buf = scratch.buffer(total)
        SEAL_HEADER.pack_into(buf, 0, SEAL_MAGIC, hsize, major, minor, COMPR_NONE, 0, total)
        if compr == COMPR_ZSTD:
            _inflate_into(scratch.address + SEAL_HEADER.size, declared, data, what)
        else:
            buf[SEAL_HEADER.size:total] = memoryview(data)[SEAL_HEADER.size:]
        _check_nested(obj, buf, SEAL_HEADER.size, total, what)
        try:
            obj.load(context, scratch.load_path)
        except Exception as exc:  # SEAL raises ValueError/RuntimeError on bad data
            raise ProtocolError(f"invalid {what}: {exc}") from None
        return obj
    finally:
        scratch.release_if_large()


def _load_via_tempfile(obj: Any, context: Any, data: bytes, what: str) -> Any:
    header, body = plain_seal_bytes(data, what)
    _check_nested(obj, header + body, SEAL_HEADER.size, SEAL_HEADER.size + len(body), what)
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
