"""Raw RNS polynomials of SEAL ciphertexts and plaintexts (added for Priv-PFL).

``tenseal.sealapi`` offers no bulk access to a ciphertext's or plaintext's coefficients.
These helpers read and write them through SEAL's own (uncompressed) serialization, whose
layout is fixed for SEAL 4.1:

* ciphertext: ``parms_id`` (32 bytes), NTT flag (1), size, ring degree, number of primes
  (8 each), scale (double), correction factor (8), then the data array (a nested SEAL
  header of 16 bytes, a count of 8, and ``size * primes * n`` little-endian ``uint64``,
  polynomial by polynomial, prime by prime);
* plaintext: ``parms_id`` (32), coefficient count (8), scale (8), then the data array.

What Priv-PFL does with them (:mod:`fedsec.pfl.secure`):

* :func:`constant_term_samples` turns level-0 product ciphertexts into the "LWE samples"
  ``(c0[0], c1)`` of their constant coefficient: only that coefficient can be decrypted from
  them. For CKKS slot encoding the constant coefficient of ``m`` is ``2 Re(sum of slots) / n``
  (times the scale): a slot sum without a single rotation.
* :func:`decrypt_constant_terms` is the key holder's side (ternary secret key, exact mod q).
* :func:`add_to_first_poly` adds an NTT-domain polynomial (a mask) to ``c0``.
* :func:`plaintext_ntt` / :func:`plaintext_from_ntt` move decrypted plaintexts as exact
  residues (no decoding, no floating point).
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import tenseal.sealapi as seal
from numpy.typing import NDArray

from fedsec.crypto.ckks import Ciphertext, CKKSContext
from fedsec.crypto.drbg import RandomSource
from fedsec.crypto.sealio import load, plain_seal_bytes, save
from fedsec.errors import ProtocolError

__all__ = ["ciphertext_polys", "ciphertext_from_polys", "plaintext_ntt", "plaintext_from_ntt",
           "secret_key_coeffs", "constant_term_samples", "decrypt_constant_terms",
           "uniform_residues", "add_to_first_poly", "U64"]

U64 = NDArray[np.uint64]
_CT_MEMBERS = 32 + 1 + 8 * 5
_PT_MEMBERS = 32 + 8 + 8
_ARRAY = 16 + 8  # nested SEAL header of the data array, then its element count


def _split(data: bytes, members: int, what: str) -> tuple[bytes, bytes, U64]:
    # our own objects only (never another role's bytes): SEAL's zstd may compress
    # structured polynomials (a ternary key, constants) far beyond the bound for
    # received data
    header, body = plain_seal_bytes(data, what, max_expansion=1 << 16)
    if len(body) < members + _ARRAY:
        raise ProtocolError(f"invalid {what}: truncated")
    (count,) = struct.unpack_from("<Q", body, members + 16)
    if len(body) != members + _ARRAY + 8 * count:
        raise ProtocolError(f"invalid {what}: data size mismatch")
    arr = np.frombuffer(body, dtype="<u8", offset=members + _ARRAY).astype(np.uint64)
    return header, body[:members + _ARRAY], arr


def ciphertext_polys(ct: Ciphertext) -> tuple[bytes, bytes, U64]:
    """``(seal header, members, data)`` of a ciphertext; ``data`` has shape
    ``(size, primes, n)`` (a copy)."""
    header, prefix, arr = _split(save(ct), _CT_MEMBERS, "ciphertext")
    size, n, k = struct.unpack_from("<QQQ", prefix, 33)
    return header, prefix, arr.reshape(int(size), int(k), int(n))


def ciphertext_from_polys(ctx: CKKSContext, header: bytes, prefix: bytes, data: U64
                          ) -> Ciphertext:
    """Rebuild a ciphertext from :func:`ciphertext_polys`'s parts with new data."""
    body = prefix + np.ascontiguousarray(data, dtype="<u8").tobytes()
    magic, hsize, major, minor, compr, rsvd, _size = struct.unpack("<HBBBBHQ", header)
    hdr = struct.pack("<HBBBBHQ", magic, hsize, major, minor, compr, rsvd, 16 + len(body))
    return load(seal.Ciphertext(), ctx._ctx, hdr + body, "ciphertext")


def plaintext_ntt(pt: Any) -> U64:
    """The residues of a plaintext (NTT form for CKKS), shape ``(primes * n,)``."""
    return _split(save(pt), _PT_MEMBERS, "plaintext")[2]


def plaintext_from_ntt(ctx: CKKSContext, residues: U64, *, level: int, scale: float) -> Any:
    """A CKKS plaintext at ``level`` with ``scale`` and the given NTT-form residues."""
    template = ctx.encode_constant(0.0, scale=scale, parms_id=ctx.parms_id_at_level(level))
    header, prefix, arr = _split(save(template), _PT_MEMBERS, "plaintext")
    r = np.asarray(residues, dtype=np.uint64)
    if r.shape != arr.shape:
        raise ProtocolError(f"a plaintext at level {level} has {arr.size} residues; got "
                            f"{r.size}")
    primes = ctx.level_primes(ctx.parms_id_at_level(level))
    if np.any(r.reshape(len(primes), -1) >= np.asarray(primes, dtype=np.uint64)[:, None]):
        raise ProtocolError("plaintext residues out of range")
    body = prefix + r.astype("<u8").tobytes()
    return load(seal.Plaintext(), ctx._ctx, header[:8] + struct.pack("<Q", 16 + len(body))
                 + body, "plaintext")


def secret_key_coeffs(ctx: CKKSContext) -> NDArray[np.int64]:
    """The secret key's coefficients in ``{-1, 0, 1}`` (the key holder only)."""
    if ctx._sk is None:
        raise ValueError("this context holds no secret key")
    n = ctx.params.poly_modulus_degree
    q0 = ctx.level_primes(ctx.parms_id_at_level(0))[0]
    sk_ntt = _split(save(ctx._sk), _PT_MEMBERS, "secret key")[2][:n]  # residues mod q0
    tmpl = ctx.mod_switch(ctx.encrypt([0.0], scale=2.0 ** 20), level=0)  # any chain
    header, prefix, data = ciphertext_polys(tmpl)
    data = np.ones_like(data)  # c1 = 1 (SEAL refuses a transparent ciphertext)
    data[0, 0] = sk_ntt
    ct = ciphertext_from_polys(ctx, header, prefix, data)
    ctx._evaluator.transform_from_ntt_inplace(ct)
    s = ciphertext_polys(ct)[2][0, 0]
    out = np.zeros(n, dtype=np.int64)
    out[s == np.uint64(1)] = 1
    out[s == np.uint64(q0 - 1)] = -1
    if np.count_nonzero(out) != np.count_nonzero(s):
        raise RuntimeError("the secret key is not ternary")
    return out


def constant_term_samples(ctx: CKKSContext, cts: list[Ciphertext]) -> tuple[U64, U64]:
    """``(c0[0] for each, c1 rows)`` of size-2 level-0 ciphertexts, in coefficient form.

    Together they decrypt to the constant coefficient of each plaintext and to nothing
    else (the other coefficients need the rest of ``c0``).
    """
    n = ctx.params.poly_modulus_degree
    first = np.zeros(len(cts), dtype=np.uint64)
    rows = np.zeros((len(cts), n), dtype=np.uint64)
    for k, ct in enumerate(cts):
        if ct.size() != 2 or ctx.level_of(ct) != 0:
            raise ValueError("constant_term_samples needs size-2 ciphertexts at level 0")
        c = seal.Ciphertext()
        ctx._evaluator.transform_from_ntt(ct, c)
        data = ciphertext_polys(c)[2]
        first[k] = data[0, 0, 0]
        rows[k] = data[1, 0]
    return first, rows


def decrypt_constant_terms(s: NDArray[np.int64], q: int, first: U64, rows: U64
                           ) -> list[int]:
    """Constant coefficients ``c0[0] + (c1 * s)[0] mod q``, centred (exact)."""
    n = s.shape[0]
    if rows.ndim != 2 or rows.shape[1] != n or first.shape != (rows.shape[0],):
        raise ProtocolError("malformed constant-term samples")
    if np.any(rows >= np.uint64(q)) or np.any(first >= np.uint64(q)):
        raise ProtocolError("constant-term samples out of range")
    # (c1 s)[0] = c1[0] s[0] - sum_{k>=1} c1[k] s[n-k]  (negacyclic)
    st = np.empty(n, dtype=np.int64)
    st[0] = s[0]
    st[1:] = -s[:0:-1]
    lo = (rows & np.uint64((1 << 30) - 1)).astype(np.int64)
    hi = (rows >> np.uint64(30)).astype(np.int64)
    lo_sum = lo @ st  # |.| <= n 2^30 < 2^63
    hi_sum = hi @ st
    out = []
    for f, a, b in zip(first.tolist(), lo_sum.tolist(), hi_sum.tolist(), strict=True):
        v = (int(f) + int(a) + (int(b) << 30)) % q
        out.append(v - q if v > q // 2 else v)
    return out


def uniform_residues(source: RandomSource, q: int, n: int) -> U64:
    """``n`` uniform residues mod ``q`` (rejection sampling: no bias)."""
    bits = int(q - 1).bit_length()
    mask = np.uint64((1 << bits) - 1)
    out = np.empty(0, dtype=np.uint64)
    while out.size < n:
        cand = source.uint64(max(16, 2 * (n - out.size))) & mask
        out = np.concatenate((out, cand[cand < np.uint64(q)]))
    return out[:n]


def add_to_first_poly(ctx: CKKSContext, ct: Ciphertext, residues: U64) -> Ciphertext:
    """``ct`` with ``residues`` (NTT form, one row per prime) added to ``c0``: decrypts to
    the plaintext plus that polynomial."""
    header, prefix, data = ciphertext_polys(ct)
    primes = np.asarray(ctx.level_primes(ct), dtype=np.uint64)
    r = np.asarray(residues, dtype=np.uint64).reshape(data.shape[1], data.shape[2])
    s = data[0] + r  # both < 2^61: no overflow
    s = np.where(s >= primes[:, None], s - primes[:, None], s)
    data = data.copy()
    data[0] = s
    return ciphertext_from_polys(ctx, header, prefix, data)
