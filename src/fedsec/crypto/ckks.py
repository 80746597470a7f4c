"""The CKKS layer every fedsec protocol uses (over Microsoft SEAL via ``tenseal.sealapi``).

Protocols never import TenSEAL themselves. :class:`CKKSContext` offers SIMD encryption of
real or complex vectors, addition, plaintext and constant multiplication, ciphertext
multiplication with relinearization and rescaling, slot rotations, complex conjugation,
slot sums, polynomial evaluation and serialization.

Key material and what may leave a party
---------------------------------------
* :meth:`CKKSContext.public_bytes` carries the parameters, the public key, the
  relinearization keys and only the Galois keys that were asked for. It cannot carry the
  secret key: it is built from the public objects alone (a test checks the secret key's
  bytes never occur in it).
* :meth:`CKKSContext.secret_bytes` carries the secret key; it is meant to be sealed to
  another party (see :mod:`fedsec.crypto.keys`), never sent in the clear.
* Parties that hold the secret key encrypt *symmetrically*. SEAL then replaces one of the
  two ciphertext polynomials by the seed that generated it, which roughly halves the
  upload (:meth:`CKKSContext.encrypt_to_bytes`).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import struct
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import tenseal.sealapi as seal
from numpy.typing import ArrayLike, NDArray

from fedsec.crypto.params import CKKSParams, get_preset
from fedsec.errors import ProtocolError
from fedsec.protocol import wire

__all__ = ["CKKSContext", "Ciphertext", "galois_element", "refuse_transparent"]

Ciphertext = Any  # a ``tenseal.sealapi.Ciphertext``; SEAL's bindings are untyped

_TMPDIR = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


def _save(obj: Any) -> bytes:
    """Serialize a SEAL object (or a SEAL ``Serializable``) to bytes (SEAL's compression)."""
    fd, path = tempfile.mkstemp(prefix="fedsec-", dir=_TMPDIR)
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
_SEAL_HEADER = struct.Struct("<HBBBBHQ")
_SEAL_MAGIC = 0xA15E
_COMPR_NONE, _COMPR_ZSTD = 0, 2
_MAX_EXPANSION = 4  # CKKS keys and ciphertexts are random data: zstd saves ~5% on them
_ZSTD_CONTENTSIZE_ERROR = (1 << 64) - 2


@functools.cache
def _zstd() -> Any:
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


def _plain_seal_bytes(data: bytes, what: str, *, max_expansion: int = _MAX_EXPANSION
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
    if len(data) < _SEAL_HEADER.size:
        raise ProtocolError(f"invalid {what}: truncated SEAL header")
    magic, hsize, major, minor, compr, _rsvd, size = _SEAL_HEADER.unpack_from(data)
    if magic != _SEAL_MAGIC or hsize != _SEAL_HEADER.size or size != len(data):
        raise ProtocolError(f"invalid {what}: bad SEAL header")
    body = data[_SEAL_HEADER.size:]
    if compr == _COMPR_ZSTD:
        lib = _zstd()
        limit = max_expansion * len(body) + (1 << 16)
        declared = lib.ZSTD_getFrameContentSize(body, len(body))
        if declared >= _ZSTD_CONTENTSIZE_ERROR or declared > limit:
            raise ProtocolError(f"invalid {what}: bad or oversized zstd frame")
        buf = ctypes.create_string_buffer(max(1, declared))
        n = lib.ZSTD_decompress(buf, declared, body, len(body))
        if lib.ZSTD_isError(n) or n != declared:
            raise ProtocolError(f"invalid {what}: corrupt zstd data")
        body = buf.raw[:n]
    elif compr != _COMPR_NONE:
        raise ProtocolError(f"invalid {what}: unsupported compression mode {compr}")
    nested = struct.pack("<HBBB", _SEAL_MAGIC, hsize, major, minor)
    at = body.find(nested)
    while at >= 0:
        if body[at + len(nested):at + len(nested) + 1] in (b"\x01", b"\x02"):  # zlib, zstd
            raise ProtocolError(f"invalid {what}: compressed object nested inside")
        at = body.find(nested, at + 1)
    header = _SEAL_HEADER.pack(magic, hsize, major, minor, _COMPR_NONE, 0,
                               _SEAL_HEADER.size + len(body))
    return header, body


def _load(obj: Any, context: Any, data: bytes, what: str) -> Any:
    header, body = _plain_seal_bytes(bytes(data), what)
    fd, path = tempfile.mkstemp(prefix="fedsec-", dir=_TMPDIR)
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
def _build_seal_context(params: CKKSParams) -> Any:
    """One SEAL context per parameter set, shared by every key set that uses it (SEAL
    contexts are immutable once built; building one finds the primes and NTT tables, which
    dominated set-up time for many parties in one process)."""
    return _new_seal_context(params)


def _new_seal_context(params: CKKSParams) -> Any:
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


class CKKSContext:
    """CKKS parameters plus whatever keys this role holds.

    Create one with :meth:`generate` (the key holder) or load one with
    :meth:`from_public_bytes` (aggregators) or :meth:`from_secret_bytes` (parties).
    """

    def __init__(self, params: CKKSParams, *, secret_key: Any = None, public_key: Any = None,
                 relin_keys: Any = None, galois_keys: Any = None,
                 rotations: Iterable[int] = (), conjugate: bool = False,
                 _seal_context: Any = None) -> None:
        self.params = params
        self._ctx = _seal_context if _seal_context is not None else _build_seal_context(params)
        self._encoder = seal.CKKSEncoder(self._ctx)
        self._evaluator = seal.Evaluator(self._ctx)
        self._sk = secret_key
        self._pk = public_key
        self._rk = relin_keys
        self._gk = galois_keys
        self.rotations: tuple[int, ...] = tuple(sorted({int(r) % params.slots
                                                        for r in rotations} - {0}))
        self.conjugate_key = bool(conjugate)
        self._sym = seal.Encryptor(self._ctx, secret_key) if secret_key is not None else None
        self._asym = seal.Encryptor(self._ctx, public_key) if public_key is not None else None
        self._dec = seal.Decryptor(self._ctx, secret_key) if secret_key is not None else None
        self._public_blobs: list[bytes] | None = None

    # ------------------------------------------------------------------ construction
    @classmethod
    def generate(cls, params: CKKSParams | str, *, rotations: Iterable[int] = (),
                 conjugate: bool = False, relin: bool = True,
                 allow_insecure: bool = False) -> CKKSContext:
        """Generate a fresh key set.

        Parameters
        ----------
        params : CKKSParams or str
            A preset or its name.
        rotations : iterable of int
            Left-rotation steps to create Galois keys for. Only these rotations will be
            possible; Galois keys dominate the set-up traffic, so ask for what you use.
        conjugate : bool
            Also create the key for complex conjugation.
        relin : bool
            Create relinearization keys (needed for ciphertext multiplication).
        """
        if isinstance(params, str):
            params = get_preset(params, allow_insecure=allow_insecure)
        elif params.insecure and not allow_insecure:
            raise ValueError(f"{params.name} is insecure; pass allow_insecure=True (tests only)")
        ctx = _build_seal_context(params.check())
        keygen = seal.KeyGenerator(ctx)
        sk = keygen.secret_key()
        pk = seal.PublicKey()
        keygen.create_public_key(pk)
        rk = rk_bytes = None
        if relin:
            # The seeded ("Serializable") form halves the bytes on the wire; load it back
            # for local use instead of generating the keys twice.
            rk_bytes = _save(keygen.create_relin_keys())
            rk = _load(seal.RelinKeys(), ctx, rk_bytes, "relinearization keys")
        steps = sorted({int(r) % params.slots for r in rotations} - {0})
        elts = [galois_element(s, params.poly_modulus_degree) for s in steps]
        if conjugate:
            elts.append(2 * params.poly_modulus_degree - 1)
        gk = gk_bytes = None
        if elts:
            gk_bytes = _save(keygen.create_galois_keys(elts))
            gk = _load(seal.GaloisKeys(), ctx, gk_bytes, "Galois keys")
        out = cls(params, secret_key=sk, public_key=pk, relin_keys=rk, galois_keys=gk,
                  rotations=steps, conjugate=conjugate, _seal_context=ctx)
        out._public_blobs = [_save(pk), rk_bytes or b"", gk_bytes or b""]
        return out

    def _meta(self) -> dict[str, Any]:
        p = self.params
        return {"preset": p.name, "n": p.poly_modulus_degree,
                "primes": list(p.coeff_mod_bit_sizes), "scale_bits": p.scale_bits,
                "rotations": list(self.rotations), "conjugate": self.conjugate_key}

    def public_bytes(self) -> bytes:
        """Parameters and public keys for an aggregator. Never contains the secret key."""
        if self._public_blobs is not None:
            return wire.encode("ckks/public", self._meta(), self._public_blobs)
        blobs = [_save(self._pk) if self._pk is not None else b"",
                 _save(self._rk) if self._rk is not None else b"",
                 _save(self._gk) if self._gk is not None else b""]
        return wire.encode("ckks/public", self._meta(), blobs)

    def public_key_bytes(self) -> bytes:
        """Parameters and the public key only: what a party that only encrypts needs (no
        relinearization or Galois keys, never the secret key)."""
        if self._pk is None:
            raise ValueError("this context holds no public key")
        blob = self._public_blobs[0] if self._public_blobs is not None else _save(self._pk)
        meta = {**self._meta(), "rotations": [], "conjugate": False}
        return wire.encode("ckks/public", meta, [blob, b"", b""])

    def secret_bytes(self) -> bytes:
        """The secret key with its parameters, to be *sealed* to another party."""
        if self._sk is None:
            raise ValueError("this context holds no secret key")
        return wire.encode("ckks/secret", self._meta(), [_save(self._sk)])

    @classmethod
    def _params_from_meta(cls, meta: dict[str, Any], allow_insecure: bool) -> CKKSParams:
        try:
            params = get_preset(str(meta["preset"]), allow_insecure=allow_insecure)
        except (KeyError, ValueError) as exc:
            raise ProtocolError(f"key material names an unusable preset: {exc}") from None
        primes = meta.get("primes")
        if (meta.get("n") != params.poly_modulus_degree or not isinstance(primes, list)
                or tuple(primes) != params.coeff_mod_bit_sizes):
            raise ProtocolError("key material parameters do not match their preset")
        rot = meta.get("rotations", [])
        if not isinstance(rot, list) or not all(
                isinstance(r, int) and not isinstance(r, bool) for r in rot):
            raise ProtocolError("key material lists invalid rotations")
        return params

    @classmethod
    def from_public_bytes(cls, data: bytes, *, allow_insecure: bool = False) -> CKKSContext:
        """Load an aggregator's context (public key, relinearization and Galois keys)."""
        msg = wire.decode(data, expect="ckks/public")
        params = cls._params_from_meta(msg.meta, allow_insecure)
        if len(msg.blobs) != 3:
            raise ProtocolError("public key material must have 3 parts")
        ctx = _build_seal_context(params)
        pk = _load(seal.PublicKey(), ctx, msg.blobs[0], "public key") if msg.blobs[0] else None
        rk = _load(seal.RelinKeys(), ctx, msg.blobs[1], "relinearization keys") \
            if msg.blobs[1] else None
        gk = _load(seal.GaloisKeys(), ctx, msg.blobs[2], "Galois keys") if msg.blobs[2] else None
        rotations = [int(r) for r in msg.meta.get("rotations", [])]
        out = cls(params, public_key=pk, relin_keys=rk, galois_keys=gk, rotations=rotations,
                  conjugate=bool(msg.meta.get("conjugate")), _seal_context=ctx)
        out._check_switching_keys()
        return out

    def _check_switching_keys(self) -> None:
        """Relinearization and Galois keys are both SEAL ``KSwitchKeys``: SEAL loads either
        as the other, or with missing parts, and then reads past their ends (segmentation
        fault). They must be exactly what the metadata announces, one part per data prime."""
        parts = len(self.params.coeff_mod_bit_sizes) - 1
        rk, gk = self._rk, self._gk
        if rk is not None and (rk.size() != 1 or len(rk.data()) != 1
                               or len(rk.key(2)) != parts):
            raise ProtocolError("relinearization keys have the wrong shape")
        n = self.params.poly_modulus_degree
        elts = {galois_element(r, n) for r in self.rotations}
        if self.conjugate_key:
            elts.add(2 * n - 1)
        if gk is None and elts:
            raise ProtocolError("key material announces rotations without Galois keys")
        if gk is not None and (gk.size() != len(elts) or any(
                not gk.has_key(e) or len(gk.key(e)) != parts for e in elts)):
            raise ProtocolError("Galois keys do not match the rotations they announce")

    @classmethod
    def from_secret_bytes(cls, data: bytes, *, allow_insecure: bool = False) -> CKKSContext:
        """Load a party's context from (unsealed) secret key material."""
        msg = wire.decode(data, expect="ckks/secret")
        params = cls._params_from_meta(msg.meta, allow_insecure)
        if len(msg.blobs) != 1:
            raise ProtocolError("secret key material must have 1 part")
        ctx = _build_seal_context(params)
        sk = _load(seal.SecretKey(), ctx, msg.blobs[0], "secret key")
        return cls(params, secret_key=sk, _seal_context=ctx)

    # ------------------------------------------------------------------ properties
    @property
    def slots(self) -> int:
        return self.params.slots

    @property
    def scale(self) -> float:
        return float(2.0 ** self.params.scale_bits)

    @property
    def has_secret_key(self) -> bool:
        return self._sk is not None

    @property
    def has_relin_keys(self) -> bool:
        return self._rk is not None

    @property
    def top_parms_id(self) -> Any:
        return self._ctx.first_parms_id()

    def level_of(self, ct: Ciphertext) -> int:
        """Remaining data primes of a ciphertext minus one (0 means no rescale left)."""
        return int(self._ctx.get_context_data(ct.parms_id()).chain_index())

    def level_primes(self, ct_or_parms_id: Any) -> tuple[int, ...]:
        """The data primes of a ciphertext's level (or of a ``parms_id``), in chain order:
        :meth:`rescale` divides by the last one."""
        pid = ct_or_parms_id.parms_id() if hasattr(ct_or_parms_id, "parms_id") \
            else ct_or_parms_id
        data = self._ctx.get_context_data(pid)
        if data is None:
            raise ValueError("parameters id does not belong to this context")
        return tuple(int(m.value()) for m in data.parms().coeff_modulus())

    def rescale_prime(self, ct: Ciphertext) -> int:
        """The prime the next :meth:`rescale` of ``ct`` divides by. A plaintext encoded at
        exactly this scale, multiplied and rescaled, leaves the ciphertext's scale unchanged."""
        primes = self.level_primes(ct)
        if len(primes) < 2:
            raise ValueError("the ciphertext is at the last level; it cannot be rescaled")
        return primes[-1]

    # ------------------------------------------------------------------ encoding
    def _vector(self, values: ArrayLike) -> list[complex] | list[float]:
        arr = np.asarray(values)
        if arr.ndim != 1:
            raise ValueError(f"values must be a 1-D vector; got shape {arr.shape}")
        if arr.size > self.slots:
            raise ValueError(f"{arr.size} values exceed the {self.slots} slots of "
                             f"{self.params.name}")
        if np.iscomplexobj(arr):
            out_c = np.zeros(self.slots, dtype=np.complex128)
            out_c[:arr.size] = arr
            if not np.all(np.isfinite(out_c)):
                raise ValueError("values must be finite")
            return out_c.tolist()  # same values, ~15x faster
        out = np.zeros(self.slots, dtype=np.float64)
        out[:arr.size] = arr.astype(np.float64)
        if not np.all(np.isfinite(out)):
            raise ValueError("values must be finite")
        return out.tolist()  # same values, ~15x faster

    def encode(self, values: ArrayLike, *, scale: float | None = None,
               parms_id: Any = None) -> Any:
        """Encode a vector (zero-padded to all slots) as a plaintext."""
        pt = seal.Plaintext()
        pid = parms_id if parms_id is not None else self.top_parms_id
        self._encoder.encode(self._vector(values), pid, scale or self.scale, pt)
        return pt

    def encode_constant(self, value: complex, *, scale: float, parms_id: Any) -> Any:
        """Encode the same value in every slot.

        A real constant encodes as the constant polynomial ``round(value * scale)``, so it
        is exact whenever ``value * scale`` is an integer.
        """
        pt = seal.Plaintext()
        if isinstance(value, complex) and value.imag != 0.0:
            self._encoder.encode(complex(value), parms_id, scale, pt)
        else:
            self._encoder.encode(float(value.real if isinstance(value, complex) else value),
                                 parms_id, scale, pt)
        return pt

    # ------------------------------------------------------------------ encryption
    def encrypt(self, values: ArrayLike, *, scale: float | None = None) -> Ciphertext:
        """Encrypt a vector: symmetrically if this context holds the secret key."""
        return self.encrypt_plaintext(self.encode(values, scale=scale))

    def encrypt_to_bytes(self, values: ArrayLike, *, scale: float | None = None) -> bytes:
        """Encrypt and serialize; with the secret key, as a seeded (half-size) ciphertext."""
        if self._sym is None:
            return self.serialize(self.encrypt(values, scale=scale))
        pt = self.encode(values, scale=scale)
        return _save(self._sym.encrypt_symmetric(pt))

    def encrypt_plaintext(self, pt: Any) -> Ciphertext:
        """Encrypt an encoded plaintext at its own level (symmetric with the secret key)."""
        ct = seal.Ciphertext()
        if self._sym is not None:
            self._sym.encrypt_symmetric(pt, ct)
        elif self._asym is not None:
            self._asym.encrypt(pt, ct)
        else:
            raise ValueError("this context holds no key to encrypt with")
        return ct

    def encrypt_plaintext_to_bytes(self, pt: Any) -> bytes:
        """Encrypt an encoded plaintext at its own level and serialize it; with the secret
        key, as a seeded (half-size) ciphertext whose ``c1`` is this party's randomness."""
        if self._sym is not None:
            return _save(self._sym.encrypt_symmetric(pt))
        return self.serialize(self.encrypt_plaintext(pt))

    def decrypt_plaintext(self, ct: Ciphertext) -> Any:
        """Decrypt to the plaintext polynomial (NTT form), without decoding."""
        if self._dec is None:
            raise ValueError("this context holds no secret key")
        pt = seal.Plaintext()
        self._dec.decrypt(ct, pt)
        return pt

    def decode_plaintext(self, pt: Any) -> NDArray[np.complex128]:
        """Decode a plaintext's slots as complex numbers (no key needed)."""
        return np.asarray(self._encoder.decode_complex(pt), dtype=np.complex128)

    def decrypt(self, ct: Ciphertext) -> NDArray[np.complex128]:
        """Decrypt and decode all slots as complex numbers."""
        if self._dec is None:
            raise ValueError("this context holds no secret key")
        pt = seal.Plaintext()
        self._dec.decrypt(ct, pt)
        return np.asarray(self._encoder.decode_complex(pt), dtype=np.complex128)

    # ------------------------------------------------------------------ serialization
    def serialize(self, ct: Ciphertext) -> bytes:
        return _save(ct)

    def deserialize(self, data: bytes, *, at_top: bool = False,
                    scale: float | None = None) -> Ciphertext:
        """Load a ciphertext and check it belongs to these parameters.

        ``at_top`` requires a fresh, top-level ciphertext; ``scale`` its exact scale.
        """
        if not isinstance(data, (bytes, bytearray)) or len(data) == 0:
            raise ProtocolError("empty ciphertext")
        ct = _load(seal.Ciphertext(), self._ctx, bytes(data), "ciphertext")
        if ct.size() != 2:
            raise ProtocolError(f"ciphertext has {ct.size()} polynomials; expected 2")
        if not ct.is_ntt_form():  # SEAL loads it, then every CKKS operation refuses it
            raise ProtocolError("ciphertext is not in NTT form")
        if ct.is_transparent():  # c1 = 0: no encryption at all, and SEAL refuses results
            raise ProtocolError("ciphertext is transparent (not an encryption)")
        bits = self._ctx.get_context_data(ct.parms_id()).total_coeff_modulus_bit_count()
        if not 0.0 < ct.scale < 2.0 ** bits:  # SEAL loads such scales but cannot decode them
            raise ProtocolError("ciphertext scale is out of bounds")
        if at_top and ct.parms_id() != self.top_parms_id:
            raise ProtocolError("ciphertext is not at the top modulus level")
        if scale is not None and ct.scale != scale:
            raise ProtocolError(f"ciphertext scale {ct.scale} differs from {scale}")
        return ct

    # ------------------------------------------------------------------ evaluation
    # Sums, differences and products refuse a transparent result with ProtocolError
    # (refuse_transparent): only operands another role crafted can cancel.
    def add(self, a: Ciphertext, b: Ciphertext) -> Ciphertext:
        out = seal.Ciphertext()
        with refuse_transparent():
            self._evaluator.add(a, b, out)
        return out

    def add_many(self, cts: Sequence[Ciphertext]) -> Ciphertext:
        if not cts:
            raise ValueError("nothing to add")
        out = seal.Ciphertext()
        with refuse_transparent():
            if len(cts) == 1:
                self._evaluator.add_plain(cts[0], self._zero_plain(cts[0]), out)
                return out
            self._evaluator.add_many(list(cts), out)
        return out

    def _zero_plain(self, ct: Ciphertext) -> Any:
        return self.encode_constant(0.0, scale=ct.scale, parms_id=ct.parms_id())

    def sub(self, a: Ciphertext, b: Ciphertext) -> Ciphertext:
        out = seal.Ciphertext()
        with refuse_transparent():
            self._evaluator.sub(a, b, out)
        return out

    def sub_plain(self, a: Ciphertext, pt: Any) -> Ciphertext:
        """``a`` minus an encoded plaintext (same level and scale)."""
        out = seal.Ciphertext()
        self._evaluator.sub_plain(a, pt, out)
        return out

    def add_plaintext(self, a: Ciphertext, pt: Any) -> Ciphertext:
        """``a`` plus an encoded plaintext (same level and scale)."""
        out = seal.Ciphertext()
        self._evaluator.add_plain(a, pt, out)
        return out

    def negate(self, a: Ciphertext) -> Ciphertext:
        out = seal.Ciphertext()
        self._evaluator.negate(a, out)
        return out

    def _need_relin(self) -> Any:
        if self._rk is None:
            raise ValueError("this context has no relinearization keys")
        return self._rk

    def multiply(self, a: Ciphertext, b: Ciphertext, *, rescale: bool = True) -> Ciphertext:
        """Ciphertext product, relinearized and (by default) rescaled."""
        a, b = self._align(a, b)
        out = seal.Ciphertext()
        with refuse_transparent():
            self._evaluator.multiply(a, b, out)
        self._evaluator.relinearize_inplace(out, self._need_relin())
        if rescale:
            self._evaluator.rescale_to_next_inplace(out)
        return out

    def square(self, a: Ciphertext, *, rescale: bool = True) -> Ciphertext:
        out = seal.Ciphertext()
        self._evaluator.square(a, out)
        self._evaluator.relinearize_inplace(out, self._need_relin())
        if rescale:
            self._evaluator.rescale_to_next_inplace(out)
        return out

    def multiply_plain(self, a: Ciphertext, values: ArrayLike, *, scale: float | None = None,
                       rescale: bool = True) -> Ciphertext:
        """Slot-wise product with a plaintext vector (one rescale by default)."""
        pt = self.encode(values, scale=scale, parms_id=a.parms_id())
        out = seal.Ciphertext()
        with refuse_transparent():
            self._evaluator.multiply_plain(a, pt, out)
        if rescale:
            self._evaluator.rescale_to_next_inplace(out)
        return out

    def multiply_const(self, a: Ciphertext, value: complex, *, scale: float,
                       rescale: bool = False) -> Ciphertext:
        """Multiply every slot by ``value`` encoded at ``scale`` (exact for real
        ``value * scale`` integers); the result's scale is ``a.scale * scale``."""
        pt = self.encode_constant(value, scale=scale, parms_id=a.parms_id())
        out = seal.Ciphertext()
        with refuse_transparent():
            self._evaluator.multiply_plain(a, pt, out)
        if rescale:
            self._evaluator.rescale_to_next_inplace(out)
        return out

    def multiply_plaintext(self, a: Ciphertext, pt: Any) -> Ciphertext:
        out = seal.Ciphertext()
        with refuse_transparent():
            self._evaluator.multiply_plain(a, pt, out)
        return out

    def rescale(self, a: Ciphertext) -> Ciphertext:
        """Divide by the last prime of ``a``'s level and round (drops one level)."""
        self.rescale_prime(a)
        out = seal.Ciphertext()
        self._evaluator.rescale_to_next(a, out)
        return out

    def add_plain(self, a: Ciphertext, values: ArrayLike) -> Ciphertext:
        pt = self.encode(values, scale=a.scale, parms_id=a.parms_id())
        out = seal.Ciphertext()
        self._evaluator.add_plain(a, pt, out)
        return out

    def _galois(self) -> Any:
        if self._gk is None:
            raise ValueError("this context has no Galois keys")
        return self._gk

    def rotate(self, a: Ciphertext, step: int) -> Ciphertext:
        """Rotate slots left by ``step`` (slot ``j`` receives slot ``j + step``)."""
        s = int(step) % self.slots
        if s == 0:
            return self.add_many([a])
        if s not in self.rotations:
            raise ValueError(f"no Galois key for a rotation by {s}; keys exist for "
                             f"{list(self.rotations)}")
        out = seal.Ciphertext()
        self._evaluator.rotate_vector(a, s, self._galois(), out)
        return out

    def conjugate(self, a: Ciphertext) -> Ciphertext:
        """Complex-conjugate every slot."""
        if not self.conjugate_key:
            raise ValueError("no Galois key for complex conjugation")
        out = seal.Ciphertext()
        self._evaluator.complex_conjugate(a, self._galois(), out)
        return out

    @staticmethod
    def sum_rotations(slots: int, stride: int = 1) -> list[int]:
        """Rotation steps :meth:`sum_slots` uses for a given stride."""
        steps = []
        s = stride
        while s < slots:
            steps.append(s)
            s *= 2
        return steps

    def sum_slots(self, a: Ciphertext, *, stride: int = 1) -> Ciphertext:
        """Sum slots in the cosets of ``stride`` (a power of two).

        With ``stride=1`` every slot receives the sum of all slots. With ``stride=2`` even
        slots receive the sum of the even slots and odd slots that of the odd ones. No
        partial sums remain in any slot.
        """
        if stride < 1 or stride & (stride - 1):
            raise ValueError("stride must be a power of two")
        out = a
        for step in self.sum_rotations(self.slots, stride):
            out = self.add(out, self.rotate(out, step))
        if out is a:
            out = self.add_many([a])
        return out

    def _align(self, a: Ciphertext, b: Ciphertext) -> tuple[Ciphertext, Ciphertext]:
        """Bring two ciphertexts to the same level (mod switching) and scale."""
        la, lb = self.level_of(a), self.level_of(b)
        if la > lb:
            a2 = seal.Ciphertext()
            self._evaluator.mod_switch_to(a, b.parms_id(), a2)
            a = a2
        elif lb > la:
            b2 = seal.Ciphertext()
            self._evaluator.mod_switch_to(b, a.parms_id(), b2)
            b = b2
        return a, b

    def polyval(self, a: Ciphertext, coeffs: Sequence[float]) -> Ciphertext:
        """Evaluate ``sum(coeffs[k] * x**k)`` slot-wise.

        Powers are built by repeated squaring and products, so the multiplicative depth is
        ``ceil(log2(degree)) + 1``; the preset must provide it.
        """
        c = [float(x) for x in coeffs]
        while len(c) > 1 and c[-1] == 0.0:
            c.pop()
        deg = len(c) - 1
        if deg < 1:
            raise ValueError("polyval needs a polynomial of degree >= 1")
        need = int(np.ceil(np.log2(deg))) + 1 if deg > 1 else 1
        if need > self.level_of(a):
            raise ValueError(f"degree {deg} needs depth {need}; the ciphertext has "
                             f"{self.level_of(a)} levels left")
        powers: dict[int, Ciphertext] = {1: a}
        for k in range(2, deg + 1):
            hi = 1 << (k.bit_length() - 1)
            if hi == k:
                powers[k] = self.square(powers[k // 2])
            else:
                powers[k] = self.multiply(powers[hi], powers[k - hi])
        terms = []
        target_scale = None
        for k in range(1, deg + 1):
            if c[k] == 0.0:
                continue
            t = self.multiply_const(powers[k], c[k], scale=self.scale, rescale=True)
            terms.append(t)
        # bring every term to the lowest level and a common scale
        low = min(terms, key=self.level_of)
        target_scale = low.scale
        out = None
        for t in terms:
            t2, _ = self._align(t, low)
            t2.scale = target_scale  # scales differ by prime/2^k ratios ~ 1 + 2^-40
            out = t2 if out is None else self.add(out, t2)
        assert out is not None
        if c[0] != 0.0:
            pt = self.encode_constant(c[0], scale=out.scale, parms_id=out.parms_id())
            res = seal.Ciphertext()
            self._evaluator.add_plain(out, pt, res)
            out = res
        return out

    # ==================================================================================
    # Exact-scale evaluation (added for composite polynomials, fedsec.crypto.poly/sign).
    #
    # SEAL's primes are not powers of two: a rescale divides the scale by a prime q that
    # differs from 2^40 by ~2^-16 (ring 2^15), and repeated squaring doubles the relative
    # deviation at every level, so after ~16 levels an untracked scale is off by a factor
    # of order one. These methods never *assume* a scale: they read the ciphertext's exact
    # scale and the exact prime, and choose the encoding scale of plaintext constants so
    # that a result lands on a requested scale exactly.
    # ==================================================================================
    def parms_id_at_level(self, level: int) -> Any:
        """The parameters id of chain level ``level`` (0 is the last, rescale-free one)."""
        data = self._ctx.first_context_data()
        top = int(data.chain_index())
        if not 0 <= int(level) <= top:
            raise ValueError(f"The 'level' parameter of parms_id_at_level must be in "
                             f"[0, {top}]. Got {level} instead.")
        while int(data.chain_index()) > int(level):
            data = data.next_context_data()
        return data.parms_id()

    @property
    def top_level(self) -> int:
        """The level of a freshly encrypted ciphertext (rescalings available)."""
        return int(self._ctx.first_context_data().chain_index())

    def mod_switch_to_level(self, a: Ciphertext, level: int) -> Ciphertext:
        """A copy of ``a`` at the lower ``level`` (primes dropped; scale and value kept)."""
        cur = self.level_of(a)
        if level > cur:
            raise ValueError(f"cannot raise a ciphertext from level {cur} to {level}")
        out = seal.Ciphertext()
        if level == cur:
            self._evaluator.add_plain(a, self._zero_plain(a), out)
            return out
        self._evaluator.mod_switch_to(a, self.parms_id_at_level(level), out)
        return out

    def with_value_factor(self, a: Ciphertext, factor: float) -> Ciphertext:
        """A copy of ``a`` whose decrypted value is multiplied by ``factor`` > 0, for free.

        CKKS decodes ``m / scale``; dividing the recorded scale by ``factor`` multiplies
        the value without touching the ciphertext (no noise, no level). Keep ``factor``
        near 1: it moves the scale away from the primes.
        """
        if not (np.isfinite(factor) and factor > 0):
            raise ValueError(f"The 'factor' parameter of with_value_factor must be a finite "
                             f"float > 0. Got {factor!r} instead.")
        out = self.mod_switch_to_level(a, self.level_of(a))
        out.scale = float(a.scale) / float(factor)
        return out

    def add_constant(self, a: Ciphertext, value: float) -> Ciphertext:
        """Add the real ``value`` to every slot (no level used)."""
        pt = self.encode_constant(float(value), scale=a.scale, parms_id=a.parms_id())
        out = seal.Ciphertext()
        self._evaluator.add_plain(a, pt, out)
        return out

    def multiply_const_to(self, a: Ciphertext, value: float, *, level: int,
                          scale: float) -> Ciphertext:
        """``value * a`` at chain ``level`` (below ``a``'s) with scale exactly ``scale``.

        ``a`` is switched down to ``level + 1``; the constant is encoded at
        ``scale * q / a.scale`` (``q`` the prime the rescale divides by), multiplied and
        rescaled. The constant's absolute precision is about ``a.scale / (scale * q)``.
        """
        if level >= self.level_of(a):
            raise ValueError(f"multiply_const_to needs a target level below the "
                             f"ciphertext's ({self.level_of(a)}); got {level}")
        src = self.mod_switch_to_level(a, level + 1) if self.level_of(a) > level + 1 else a
        q = self.rescale_prime(src)
        pt_scale = float(scale) * q / float(src.scale)
        if not 1.0 <= pt_scale < 2.0 ** 60:
            raise ValueError(f"constant encoding scale {pt_scale:.3g} is out of range; the "
                             f"input scale {src.scale:.3g} is far from the target {scale:.3g}")
        pt = self.encode_constant(float(value), scale=pt_scale, parms_id=src.parms_id())
        out = seal.Ciphertext()
        self._evaluator.multiply_plain(src, pt, out)
        self._evaluator.rescale_to_next_inplace(out)
        self.snap_scale(out, scale)
        return out

    @staticmethod
    def snap_scale(a: Ciphertext, scale: float, *, rtol: float = 1e-9) -> None:
        """Set ``a``'s recorded scale to ``scale`` when they differ only by floating-point
        rounding (relative difference at most ``rtol``); raise otherwise."""
        if abs(float(a.scale) - float(scale)) > rtol * abs(float(scale)):
            raise ValueError(f"scale {a.scale!r} is not within rounding of {scale!r}")
        a.scale = float(scale)

    # ------------------------------------------------------------------ lazy evaluation
    # (added for the homomorphic matrix products of fedsec.crypto.matmul; nothing above
    # changes.) Summing many products before one relinearization and one rescale is what
    # makes Matrix Squaring's "efficient form" cheap: SEAL adds size-3 ciphertexts.
    def multiply_lazy(self, a: Ciphertext, b: Ciphertext) -> Ciphertext:
        """Ciphertext product *without* relinearization or rescale (a size-3 ciphertext at
        scale ``a.scale * b.scale``); levels are aligned first."""
        a, b = self._align(a, b)
        out = seal.Ciphertext()
        self._evaluator.multiply(a, b, out)
        return out

    def relinearize(self, a: Ciphertext) -> Ciphertext:
        """Relinearize a size-3 ciphertext (a copy if it already has size 2)."""
        out = seal.Ciphertext()
        if a.size() == 2:
            self._evaluator.add_plain(a, self._zero_plain(a), out)
            return out
        self._evaluator.relinearize(a, self._need_relin(), out)
        return out

    def mod_switch_to(self, a: Ciphertext, parms_id: Any) -> Ciphertext:
        """Drop ``a`` to the level of ``parms_id`` without rescaling (no-op copy if equal)."""
        out = seal.Ciphertext()
        if a.parms_id() == parms_id:
            self._evaluator.add_plain(a, self._zero_plain(a), out)
            return out
        self._evaluator.mod_switch_to(a, parms_id, out)
        return out

    def encode_at(self, values: ArrayLike, like: Ciphertext) -> Any:
        """Encode ``values`` at the level and scale of ``like`` (for lazy plaintext
        products: the product's scale is then ``like.scale ** 2``)."""
        return self.encode(values, scale=like.scale, parms_id=like.parms_id())

    @property
    def last_parms_id(self) -> Any:
        """The parameters id of the lowest level (one data prime)."""
        return self._ctx.last_parms_id()

    def encrypt_to_bytes_at(self, values: ArrayLike, parms_id: Any) -> bytes:
        """Encrypt at the level of ``parms_id`` (e.g. :attr:`last_parms_id`: a third of
        the bytes at three data primes) and serialize; seeded with the secret key."""
        pt = self.encode(values, parms_id=parms_id)
        if self._sym is not None:
            return _save(self._sym.encrypt_symmetric(pt))
        if self._asym is None:
            raise ValueError("this context holds no key to encrypt with")
        ct = seal.Ciphertext()
        self._asym.encrypt(pt, ct)
        return self.serialize(ct)
