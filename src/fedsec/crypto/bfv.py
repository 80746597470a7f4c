"""BFV over Microsoft SEAL (``tenseal.sealapi``): exact slot-wise arithmetic modulo ``t``.

Why BFV here (and not CKKS): SecSV (Zheng et al., Sec. 5) multiplies encrypted models by
*additively shared* test data. Additive shares are uniform residues modulo a sharing
modulus; if that modulus is BFV's plaintext modulus ``t`` (a batching prime ``≡ 1 mod 2N``),
the encrypted product of a model with each share is exact modulo ``t``, the two shares'
products add up to the product with the data exactly, and the decrypting client only
centres the residue. No float rounding, no wrap-around that reconstruction gets wrong (the
authors' code shares over 2^128 in ``float128``, see :mod:`fedsec.crypto.sharing`). Models
and data are fixed-point integers; the fixed-point budget is checked by the protocol.

Bytes another role chose: :meth:`BFVContext.deserialize` refuses anything but a
2-polynomial, non-transparent ciphertext of these parameters; a plaintext product whose
plaintexts are all zero (an all-zero data share, probability ``t^-m`` for an honest uniform
one) raises :class:`~fedsec.errors.ProtocolError` instead of SEAL's transparent-result
error, and so does any sum or product that cancels to a transparent ciphertext.

Keys: every client derives the *same* BFV keys from the 32-byte seed that the
authenticated key set-up (:mod:`fedsec.crypto.keysetup`) distributes to the clients only
(HKDF label ``fedsec/bfv/keygen``): SEAL's key generator runs on a Blake2xb generator seeded
from it. Encryption uses a second SEAL context with SEAL's default (OS-seeded) generator,
so ciphertexts are freshly randomised. Servers hold only the public parameters (they never
encrypt: SecSV's servers multiply ciphertexts by their own plaintext shares and add).
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import mmap
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import tenseal.sealapi as seal
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from numpy.typing import ArrayLike, NDArray

from fedsec.crypto.drbg import SEED_BYTES
from fedsec.crypto.sealio import (
    COMPR_NONE,
    COMPR_ZSTD,
    SEAL_HEADER,
    SEAL_MAGIC,
    TMPDIR,
    load,
    refuse_transparent,
    save,
    zstd,
)
from fedsec.errors import ProtocolError

__all__ = ["BFVParams", "BFVContext", "BFV_DEFAULT", "Ciphertext", "Plaintext"]

Ciphertext = Any  # ``tenseal.sealapi.Ciphertext``
Plaintext = Any  # ``tenseal.sealapi.Plaintext``
U64 = NDArray[np.uint64]


@dataclass(frozen=True)
class BFVParams:
    """A BFV parameter set: ring degree ``N`` (= slots) and plaintext-prime bits.

    The coefficient modulus has the total size of SEAL's 128-bit-secure default for ``N``
    (218 bits for ``N = 8192``, HomomorphicEncryption.org's table), split as three 60-bit
    data primes plus a 38-bit special prime: with no key switching needed, fewer and larger
    data primes make every operation ~25% cheaper than SEAL's five-prime default while
    leaving ~50 bits of noise budget after a full-range plaintext product and a sum of
    hundreds of terms. The plaintext modulus is the batching prime
    ``PlainModulus.Batching(N, bits)`` picks.
    """

    poly_modulus_degree: int = 8192
    plain_bits: int = 59

    def check(self) -> BFVParams:
        if self.poly_modulus_degree not in (8192, 16384, 32768):
            raise ValueError("The BFV ring degree must be 8192, 16384 or 32768 (products "
                             "of full-range plaintexts need the noise room). Got "
                             f"{self.poly_modulus_degree} instead.")
        if not 20 <= self.plain_bits <= 59:  # SEAL finds no 60-bit batching prime here
            raise ValueError(f"The BFV plaintext prime must have 20..59 bits. "
                             f"Got {self.plain_bits} instead.")
        return self

    def to_dict(self) -> dict[str, int]:
        return {"poly_modulus_degree": self.poly_modulus_degree, "plain_bits": self.plain_bits}

    @classmethod
    def from_dict(cls, d: Any) -> BFVParams:
        try:
            n, b = d["poly_modulus_degree"], d["plain_bits"]
        except (KeyError, TypeError):
            raise ProtocolError("malformed BFV parameters") from None
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (n, b)):
            raise ProtocolError("malformed BFV parameters")
        try:
            return cls(n, b).check()
        except ValueError as exc:
            raise ProtocolError(f"unacceptable BFV parameters: {exc}") from None


BFV_DEFAULT = BFVParams()
#: Coefficient-modulus primes (bits) per ring degree; totals equal SEAL's TC128 bounds.
_COEFF_BITS = {8192: [60, 60, 60, 38], 16384: [60, 60, 60, 60, 60, 60, 60, 18],
               32768: [60] * 14 + [41]}


@functools.lru_cache(maxsize=8)
def _moduli(params: BFVParams) -> tuple[Any, Any]:
    """The coefficient primes and the plaintext prime (SEAL's prime searches, ~9 ms: once
    per parameter set and process)."""
    return (seal.CoeffModulus.Create(params.poly_modulus_degree,
                                     _COEFF_BITS[params.poly_modulus_degree]),
            seal.PlainModulus.Batching(params.poly_modulus_degree, params.plain_bits))


def _parms(params: BFVParams) -> Any:
    coeff, plain = _moduli(params)
    p = seal.EncryptionParameters(seal.SCHEME_TYPE.BFV)
    p.set_poly_modulus_degree(params.poly_modulus_degree)
    p.set_coeff_modulus(coeff)
    p.set_plain_modulus(plain)
    return p


@functools.lru_cache(maxsize=8)
def _context(params: BFVParams) -> Any:
    ctx = seal.SEALContext(_parms(params), True, seal.SEC_LEVEL_TYPE.TC128)
    if ctx.parameters_error_message() != "valid":  # pragma: no cover - fixed parameters
        raise ValueError(f"SEAL rejects the BFV parameters: {ctx.parameters_error_message()}")
    return ctx


@functools.cache
def _scratch_dir() -> str:
    """A private (0700) directory for SEAL's file-only (de)serialization, reused by every
    ciphertext of this process instead of a fresh temporary file per call."""
    path = tempfile.mkdtemp(prefix="fedsec-bfv-", dir=TMPDIR)
    atexit.register(shutil.rmtree, path, True)
    return path


def _scratch() -> str:
    return os.path.join(_scratch_dir(), f"{os.getpid()}-{threading.get_ident()}")


def _save_ct(ct: Any) -> bytes:
    path = _scratch()
    ct.save(path)
    with open(path, "rb") as fh:
        return fh.read()


_PARMS_ID_BYTES = 32
#: A serialized plaintext's members before its coefficients: parms_id, coeff_count,
#: scale, and the nested coefficient array's SEAL header and size.
_PT_PREFIX_BYTES = _PARMS_ID_BYTES + 8 + 8 + 16 + 8


def _inflate(body: bytes, want: int) -> bytes | None:
    """A zstd frame that declares and inflates to exactly ``want`` bytes, else None."""
    lib = zstd()
    if want <= 0 or lib.ZSTD_getFrameContentSize(body, len(body)) != want:
        return None
    buf = ctypes.create_string_buffer(want)
    n = lib.ZSTD_decompress(buf, want, body, len(body))
    if lib.ZSTD_isError(n) or n != want:
        return None
    return buf.raw


def _expected_plain(data: bytes, prefix: bytes, size: int) -> bytes | None:
    """``data`` uncompressed (SEAL's zstd undone, bounded by ``size``) if it is exactly a
    ciphertext whose bytes before the coefficients equal ``prefix`` (so every header SEAL
    parses -- the object's, its members', the nested coefficient array's, all at fixed
    offsets -- is the one this context writes; the rest is raw coefficients, which SEAL
    copies without parsing), else None. Replaces the scan for nested compressed headers
    that arbitrary SEAL objects need."""
    if len(data) < SEAL_HEADER.size or len(data) > size + (1 << 12):
        return None
    magic, hsize, major, minor, compr, _rsvd, total = SEAL_HEADER.unpack_from(data)
    if magic != SEAL_MAGIC or hsize != SEAL_HEADER.size or total != len(data):
        return None
    if compr == COMPR_ZSTD:
        body = _inflate(data[SEAL_HEADER.size:], size - SEAL_HEADER.size)
        if body is None:
            return None
        data = SEAL_HEADER.pack(magic, hsize, major, minor, COMPR_NONE, 0, size) + body
    elif compr != COMPR_NONE:
        return None
    if len(data) != size or data[:len(prefix)] != prefix:
        return None
    return data


def _load_plain_ct(ctx: Any, data: bytes) -> Any:
    """SEAL-load bytes whose every parsed header the caller has checked (no scan)."""
    path = _scratch()
    with open(path, "wb") as fh:
        fh.write(data)
    ct = seal.Ciphertext()
    try:
        ct.load(ctx, path)
    except Exception as exc:  # pragma: no cover - framing was checked
        raise ProtocolError(f"invalid BFV ciphertext: {exc}") from None
    return ct


def _seed_words(seed: bytes, label: bytes) -> list[int]:
    key = HKDF(algorithm=hashes.SHA256(), length=64, salt=None,
               info=b"fedsec/bfv/keygen/" + label).derive(seed)
    return [int.from_bytes(key[8 * i:8 * i + 8], "little") for i in range(8)]


class BFVContext:
    """BFV parameters plus the keys this role holds (none for servers)."""

    def __init__(self, params: BFVParams = BFV_DEFAULT, *, secret_key: Any = None,
                 public_key: Any = None) -> None:
        self.params = params.check()
        self._ctx = _context(self.params)
        self._encoder = seal.BatchEncoder(self._ctx)
        self._evaluator = seal.Evaluator(self._ctx)
        self._pid = self._ctx.first_parms_id()
        parms = self._ctx.first_context_data().parms()
        self.t: int = int(parms.plain_modulus().value())
        self._primes = np.array([m.value() for m in parms.coeff_modulus()], dtype=np.uint64)
        self._pid_list = list(self._pid)
        nxt = self._ctx.first_context_data().next_context_data()
        self._pid_low = list(nxt.parms_id()) if nxt is not None else self._pid_list
        self.slots: int = int(self._encoder.slot_count())
        # Clients hold the secret key: symmetric encryption is ~1.5x faster than with the
        # public key and as secure (RLWE samples under the same key).
        self._enc = (seal.Encryptor(self._ctx, secret_key) if secret_key is not None else
                     seal.Encryptor(self._ctx, public_key) if public_key is not None else None)
        self._symmetric = secret_key is not None
        self._dec = seal.Decryptor(self._ctx, secret_key) if secret_key is not None else None
        self._pk_bytes = save(public_key) if public_key is not None else None
        self._prefixes: dict[tuple[bool, bool, int], tuple[bytes, int]] = {}
        self._perms: dict[int, NDArray[np.int64]] = {}  # row rotation -> NTT gather

    # ------------------------------------------------------------------ keys
    @classmethod
    def from_seed(cls, seed: bytes, *, params: BFVParams = BFV_DEFAULT,
                  label: bytes = b"") -> BFVContext:
        """Derive the (secret and public) keys deterministically from a shared seed."""
        if not isinstance(seed, bytes) or len(seed) != SEED_BYTES:
            raise ValueError(f"The 'seed' parameter must be {SEED_BYTES} bytes.")
        parms = _parms(params.check())
        parms.set_random_generator(seal.Blake2xbPRNGFactory(_seed_words(seed, label)))
        # Key level only (no modulus-switching chain): keys live at the key level, and
        # the chain's NTT tables would double the cost of this throw-away context.
        kctx = seal.SEALContext(parms, False, seal.SEC_LEVEL_TYPE.TC128)
        gen = seal.KeyGenerator(kctx)
        pk = seal.PublicKey()
        gen.create_public_key(pk)
        ctx = _context(params)
        # Move the keys into the context with OS-seeded randomness (fresh encryptions).
        sk = load(seal.SecretKey(), ctx, save(gen.secret_key()), "BFV secret key")
        pk2 = load(seal.PublicKey(), ctx, save(pk), "BFV public key")
        return cls(params, secret_key=sk, public_key=pk2)

    @property
    def has_secret_key(self) -> bool:
        return self._dec is not None

    def public_fingerprint(self) -> bytes:
        """SHA-256 of the public key: clients check they derived the same keys."""
        if self._pk_bytes is None:
            raise ValueError("this context holds no public key")
        h = hashes.Hash(hashes.SHA256())
        h.update(self._pk_bytes)
        return h.finalize()

    # ------------------------------------------------------------------ encode / encrypt
    def _vec(self, values: ArrayLike) -> list[int]:
        v = np.asarray(values, dtype=np.uint64).ravel()
        if v.size > self.slots:
            raise ValueError(f"at most {self.slots} slots; got {v.size}")
        if v.size and int(v.max()) >= self.t:
            raise ValueError("slot values must be residues in [0, t)")
        if v.size == self.slots:  # a full row (the servers' diagonals): no padding copy
            out: list[int] = v.tolist()
            return out
        full = np.zeros(self.slots, dtype=np.uint64)
        full[:v.size] = v
        padded: list[int] = full.tolist()
        return padded

    def encode(self, values: ArrayLike) -> Plaintext:
        pt = seal.Plaintext()
        self._encoder.encode(self._vec(values), pt)
        return pt

    def encode_ntt(self, values: ArrayLike) -> Plaintext:
        """Encode residues for :meth:`multiply_plain` on NTT-form ciphertexts."""
        pt = self.encode(values)
        self._evaluator.transform_to_ntt_inplace(pt, self._pid)
        return pt

    def _pt_coeffs(self, pt: Plaintext) -> tuple[bytes, NDArray[np.uint64]]:
        """An NTT-form data-level plaintext's serialized prefix (SEAL header with no
        compression, members, nested array header) and its coefficients
        (``primes × slots``). Our own plaintext: a mismatch is a bug (RuntimeError)."""
        raw = _save_ct(pt)  # SEAL's file-only serialization (any object with save)
        magic, hsize, major, minor, compr, _r, _total = SEAL_HEADER.unpack_from(raw)
        body = raw[SEAL_HEADER.size:]
        n_coeff = len(self._primes) * self.slots
        size = _PT_PREFIX_BYTES + 8 * n_coeff
        if compr == COMPR_ZSTD:
            body = _inflate(body, size) or b""
        if not pt.is_ntt_form() or len(body) != size or list(pt.parms_id()) != \
                self._pid_list:
            raise RuntimeError("not an NTT-form data-level plaintext of this context")
        head = SEAL_HEADER.pack(magic, hsize, major, minor, COMPR_NONE, 0,
                                 SEAL_HEADER.size + size) + body[:_PT_PREFIX_BYTES]
        coeffs = np.frombuffer(body, dtype="<u8", count=n_coeff, offset=_PT_PREFIX_BYTES)
        return head, coeffs.astype(np.uint64).reshape(len(self._primes), self.slots)

    def _row_perm(self, step: int) -> NDArray[np.int64]:
        """Gather indices (the same at every prime) taking an NTT plaintext's coefficients
        to those of its slots with each batching row rotated left by ``step`` (found once
        from a public probe and checked exactly at every prime; cached per context)."""
        cache = self._perms
        if step not in cache:
            half = self.slots // 2
            probe = (np.arange(self.slots, dtype=np.uint64) * np.uint64(2654435761)
                     + np.uint64(12345)) % np.uint64(self.t)
            rolled = np.roll(probe.reshape(2, half), -step, axis=1).ravel()
            _h, base = self._pt_coeffs(self.encode_ntt(probe))
            _h, want = self._pt_coeffs(self.encode_ntt(rolled))
            order = np.argsort(base[0], kind="stable")
            pos = np.minimum(np.searchsorted(base[0][order], want[0]), self.slots - 1)
            perm = order[pos]
            if len(np.unique(base[0])) != self.slots or not np.array_equal(base[:, perm],
                                                                           want):
                raise RuntimeError("row rotation is not a coefficient permutation here")
            cache[step] = np.ascontiguousarray(perm, dtype=np.intp)
        return cache[step]

    def dot_plain_rotations(self, cts: list[Ciphertext], bases: list[Plaintext],
                            steps: list[int]) -> Ciphertext:
        """``Σ_{a,b} cts[a·len(steps) + b] ⊙ rot_{steps[b]}(bases[a])`` (NTT forms in, NTT
        form out): :meth:`dot_plain` with the plaintexts of :meth:`rotations_ntt`, made
        one at a time (SEAL's memory pool reuses each plaintext's memory)."""
        if not cts or len(cts) != len(bases) * len(steps):
            raise ValueError("dot_plain_rotations needs len(bases)·len(steps) ciphertexts")
        acc: Ciphertext = None
        tmp = seal.Ciphertext()
        n = len(steps)
        with refuse_transparent():
            for a, base in enumerate(bases):
                if base.is_zero():  # so are its rotations: those terms are 0
                    continue
                for b, pt in enumerate(self._rotations(base, steps)):
                    if acc is None:
                        acc = seal.Ciphertext()
                        self._evaluator.multiply_plain(cts[a * n + b], pt, acc)
                    else:
                        self._evaluator.multiply_plain(cts[a * n + b], pt, tmp)
                        self._evaluator.add_inplace(acc, tmp)
        if acc is None:
            raise ProtocolError("degenerate plaintext operand: every plaintext is zero")
        return acc

    def rotations_ntt(self, pt: Plaintext, steps: list[int]) -> list[Plaintext]:
        """NTT plaintexts of ``pt``'s slots with each batching row rotated left by each of
        ``steps`` (``pt``: NTT form, from :meth:`encode_ntt`). A row rotation is a Galois
        automorphism ``X -> X^g``; SEAL's centred lift of plaintext coefficients commutes
        with it, so in NTT form it is a permutation of the coefficients at every prime:
        one gather and a load instead of an encoding and ``primes`` NTTs. Exactly the
        plaintexts :meth:`encode_ntt` makes of the rotated slots (tested)."""
        return list(self._rotations(pt, steps))

    def _rotations(self, pt: Plaintext, steps: list[int]) -> Iterator[Plaintext]:
        head, coeffs = self._pt_coeffs(pt)
        half = self.slots // 2
        perms = [self._row_perm(s % half) if s % half else None for s in steps]
        path = _scratch() + "-rot"
        size = len(head) + coeffs.nbytes
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:  # the gather writes the coefficients straight into the file's pages
            os.ftruncate(fd, size)
            with mmap.mmap(fd, size) as mm:
                mm[:len(head)] = head
                buf = np.frombuffer(mm, dtype=np.uint64, count=coeffs.size,
                                    offset=len(head)).reshape(coeffs.shape)
                try:
                    for perm in perms:
                        if perm is None:
                            yield pt
                            continue
                        np.take(coeffs, perm, axis=1, out=buf, mode="clip")
                        rot = seal.Plaintext()
                        rot.load(self._ctx, path)
                        yield rot
                finally:
                    del buf  # release the buffer before the map closes
        finally:
            os.close(fd)

    def encrypt(self, values: ArrayLike) -> Ciphertext:
        if self._enc is None:
            raise ValueError("this context holds no key to encrypt with")
        ct = seal.Ciphertext()
        if self._symmetric:
            self._enc.encrypt_symmetric(self.encode(values), ct)
        else:
            self._enc.encrypt(self.encode(values), ct)
        return ct

    def decrypt(self, ct: Ciphertext) -> U64:
        """Residues in ``[0, t)`` of every slot. (The noise budget is not checked here --
        that costs another decryption; protocols bound the noise by their parameters and
        check decrypted values against known bounds.)"""
        if self._dec is None:
            raise ValueError("this context holds no secret key")
        if ct.is_ntt_form():
            ct = self.from_ntt(ct)
        pt = seal.Plaintext()
        self._dec.decrypt(ct, pt)
        return np.asarray(self._encoder.decode_uint64(pt), dtype=np.uint64)

    def noise_budget(self, ct: Ciphertext) -> int:
        if self._dec is None:
            raise ValueError("this context holds no secret key")
        return int(self._dec.invariant_noise_budget(self.from_ntt(ct) if ct.is_ntt_form()
                                                     else ct))

    # ------------------------------------------------------------------ bytes
    def serialize(self, ct: Ciphertext, *, ntt: bool = False) -> bytes:
        """SEAL's serialization, in coefficient form (or NTT form with ``ntt=True``: what a
        receiver multiplies by NTT plaintexts without transforming it)."""
        if ct.is_ntt_form() and not ntt:
            ct = self.from_ntt(ct)
        elif ntt and not ct.is_ntt_form():
            ct = self.to_ntt(ct)
        return _save_ct(ct)

    def mod_switch_down(self, ct: Ciphertext) -> Ciphertext:
        """Drop the last data prime (coefficient form): 2/3 the bytes and decryption work
        for a ciphertext that only needs decrypting; the noise budget is unchanged at
        these parameters (one 60-bit prime less, tested)."""
        out = seal.Ciphertext()
        with refuse_transparent():
            self._evaluator.mod_switch_to_next(ct, out)
        return out

    def deserialize(self, data: bytes, *, ntt: bool = False, low: bool = False,
                    polys: int = 2) -> Ciphertext:
        """A data-level (or, with ``low=True``, next-level) ciphertext of ``polys``
        polynomials (2, or 3 for an unrelinearised :meth:`multiply` result) of these
        parameters in the expected form (coefficient, or NTT with ``ntt=True``), or
        ``ProtocolError`` (SEAL's framing is checked before SEAL parses anything)."""
        if polys not in (2, 3):
            raise ValueError("a BFV ciphertext here has 2 or 3 polynomials")
        if not isinstance(data, bytes | bytearray):
            raise ProtocolError("a BFV ciphertext must be bytes")
        limit = polys * 8 * len(self._primes) * self.slots + (1 << 12)
        if len(data) > limit:
            raise ProtocolError("BFV ciphertext exceeds the size limit")
        plain = _expected_plain(bytes(data), *self._prefix(ntt, low, polys))
        if plain is None:
            raise ProtocolError("invalid BFV ciphertext: wrong framing, size, form or "
                                "parameters")
        ct = _load_plain_ct(self._ctx, plain)
        want = self._pid_low if low else self._pid_list
        if (ct.size() != polys or ct.is_ntt_form() != ntt or list(ct.parms_id()) != want
                or not seal.is_valid_for(ct, self._ctx)):
            raise ProtocolError("invalid BFV ciphertext: wrong size, form or parameters")
        if ct.is_transparent():  # c1 = 0: not an encryption (and SEAL refuses results)
            raise ProtocolError("invalid BFV ciphertext: transparent")
        return ct

    def _prefix(self, ntt: bool, low: bool, polys: int = 2) -> tuple[bytes, int]:
        """The exact uncompressed bytes of a ``polys``-polynomial ciphertext of this form
        and level before its coefficients (SEAL header, members, nested array header),
        from SEAL's own save of a zero ciphertext, and the total uncompressed size."""
        key = (ntt, low, polys)
        if key not in self._prefixes:
            ct = seal.Ciphertext()
            ct.resize(self._ctx, self._pid_low if low else self._pid_list, polys)
            raw = _save_ct(ct)  # our own bytes (a zero ciphertext: zstd shrinks it a lot)
            header, body = raw[:SEAL_HEADER.size], raw[SEAL_HEADER.size:]
            if raw[5] == COMPR_ZSTD:
                size = int(zstd().ZSTD_getFrameContentSize(body, len(body)))
                body = _inflate(body, size) or b""
                header = SEAL_HEADER.pack(*SEAL_HEADER.unpack_from(raw)[:4], COMPR_NONE,
                                           0, SEAL_HEADER.size + len(body))
            n_coeff = polys * ct.coeff_modulus_size() * self.slots
            head = bytearray(header + body[:len(body) - 8 * n_coeff])
            head[SEAL_HEADER.size + _PARMS_ID_BYTES] = int(ntt)  # SEAL's is_ntt_form byte
            self._prefixes[key] = (bytes(head), len(header) + len(body))
        return self._prefixes[key]

    # ------------------------------------------------------------------ arithmetic
    # Every evaluation below refuses a transparent result with ProtocolError
    # (refuse_transparent): only operands another role crafted can cancel.
    def to_ntt(self, ct: Ciphertext) -> Ciphertext:
        out = seal.Ciphertext()
        with refuse_transparent():
            self._evaluator.transform_to_ntt(ct, out)
        return out

    def from_ntt(self, ct: Ciphertext) -> Ciphertext:
        out = seal.Ciphertext()
        with refuse_transparent():
            self._evaluator.transform_from_ntt(ct, out)
        return out

    def multiply(self, a: Ciphertext, b: Ciphertext) -> Ciphertext:
        """Slot-wise product of two coefficient-form ciphertexts modulo ``t``: a
        3-polynomial ciphertext, *not* relinearised (no key material leaves the key
        holders; SEAL decrypts any size, :meth:`deserialize` reads it with
        ``polys=3``). One product of fresh ciphertexts uses about ``log2(t) + 12`` bits
        of the noise budget (134 -> 81 for ``t`` of 41 bits at ``N = 8192``, measured)."""
        if a.is_ntt_form() or b.is_ntt_form():
            raise ValueError("multiply needs coefficient-form ciphertexts")
        out = seal.Ciphertext()
        with refuse_transparent():
            self._evaluator.multiply(a, b, out)
        return out

    def multiply_plain(self, ct: Ciphertext, pt: Plaintext) -> Ciphertext:
        """Slot-wise product modulo ``t`` (ciphertext and plaintext both in NTT form, as
        from :meth:`encode_ntt`, or both in coefficient form, as from :meth:`encode`);
        ``ProtocolError`` for a zero plaintext (the product would be transparent)."""
        if pt.is_zero():
            raise ProtocolError("degenerate plaintext operand: the plaintext is zero")
        out = seal.Ciphertext()
        with refuse_transparent():
            self._evaluator.multiply_plain(ct, pt, out)
        return out

    def dot_plain(self, cts: list[Ciphertext], pts: list[Plaintext]) -> Ciphertext:
        """``Σ_o ct_o ⊙ pt_o`` (NTT forms in, NTT form out). Zero plaintexts contribute
        nothing and are skipped (SEAL refuses their transparent products); if all are
        zero, ``ProtocolError``."""
        if not cts or len(cts) != len(pts):
            raise ValueError("dot_plain needs as many plaintexts as ciphertexts (>= 1)")
        terms = [(ct, pt) for ct, pt in zip(cts, pts, strict=True) if not pt.is_zero()]
        if not terms:
            raise ProtocolError("degenerate plaintext operand: every plaintext is zero")
        acc = self.multiply_plain(*terms[0])
        tmp = seal.Ciphertext()
        with refuse_transparent():
            for ct, pt in terms[1:]:
                self._evaluator.multiply_plain(ct, pt, tmp)
                self._evaluator.add_inplace(acc, tmp)
        return acc

    def add(self, a: Ciphertext, b: Ciphertext) -> Ciphertext:
        out = seal.Ciphertext()
        with refuse_transparent():
            self._evaluator.add(a, b, out)
        return out

    def add_many(self, cts: list[Ciphertext]) -> Ciphertext:
        if len(cts) == 1:
            return cts[0]
        out = seal.Ciphertext()
        with refuse_transparent():
            self._evaluator.add_many(cts, out)
        return out

    def add_inplace(self, a: Ciphertext, b: Ciphertext) -> None:
        with refuse_transparent():
            self._evaluator.add_inplace(a, b)

    def add_plain(self, ct: Ciphertext, values: ArrayLike) -> Ciphertext:
        """Add residues slot-wise (non-NTT ciphertext)."""
        out = seal.Ciphertext()
        with refuse_transparent():
            self._evaluator.add_plain(ct, self.encode(values), out)
        return out

    def scalar_ntt(self, value: int) -> Plaintext:
        """The constant ``value mod t`` as an NTT plaintext (for weighted sums)."""
        pt = seal.Plaintext()
        self._encoder.encode([int(value) % self.t] * self.slots, pt)
        self._evaluator.transform_to_ntt_inplace(pt, self._pid)
        return pt
