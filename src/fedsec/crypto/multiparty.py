"""Multiparty (N-out-of-N) CKKS on SEAL's ring: collective keys and collective decryption.

After Mouchet, Troncoso-Pastoriza, Bossuat and Hubaux, *Multiparty Homomorphic Encryption
from Ring-Learning-With-Errors* (PETS 2021). Each party holds a secret share ``s_i``; the
collective secret ``s = sum_i s_i`` exists nowhere. From public *shares* the parties build
SEAL's own key objects for ``s`` -- a :class:`PublicKey`, :class:`GaloisKeys` and
:class:`RelinKeys` -- so SEAL's encryptor and evaluator work unchanged, and a ciphertext
is decrypted only when **every** party contributes a decryption share.

Protocols (one function per round; every share is bytes another role may have crafted, and
every aggregator of shares raises :class:`~fedsec.errors.ProtocolError` on malformed ones):

* public key (CKG): from a common random polynomial ``a`` (expanded from a seed the parties
  agree on), party ``i`` sends ``p_i = -a s_i + e_i``; the key is ``(sum p_i, a)``;
* Galois keys (RTG), per Galois element ``g`` and per RNS decomposition index ``j``
  (SEAL's key-switching layout): ``-a_j s_i + e_ij + [P]_{q_j} s_i(X^g)`` in the ``j``-th
  prime only (SEAL keys switch from ``s(X^g)`` to ``s``);
* relinearisation key (RKG), two rounds with an ephemeral secret ``u_i``: round 1
  ``(-u_i a_j + [P]_{q_j} s_i + e, s_i a_j + e')``; round 2, on the sums ``(h0, h1)``,
  ``(s_i h0_j + e'', (u_i - s_i) h1_j + e''')``. The key is ``(sum + sum, h1)``;
* decryption (to a public result): party ``i`` sends ``c1 s_i + E_i`` with smudging noise
  ``E_i`` uniform in ``[-2^k, 2^k]``; ``c0 + sum_i (c1 s_i + E_i)`` is the plaintext plus
  noise.

What a share reveals. Key shares are RLWE samples under ``s_i`` with SEAL's noise (centred
binomial, sigma 3.2), as secure as a SEAL public key. A decryption share of a ciphertext
whose ``c1`` the requester chose reveals ``s_i`` outright (``c1 = 1`` gives ``s_i + E_i``,
and ``E_i`` is far smaller than ``q``): a party must contribute a share **only for a
ciphertext it can check is the agreed computation's output** -- that check belongs to the
protocol that calls :meth:`KeyShare.decryption_share`, never to this module. Smudging
hides the ciphertext's own noise (which depends on every party's data and keys) with
statistical distance at most ``n * B / 2^k`` per coefficient vector, ``B`` the noise bound
the protocol admits; :func:`smudging_bits` sizes ``k``.

The collective secret is a sum of ternary shares: coefficients in ``[-N, N]``, variance
``2N/3``. That is no weaker an RLWE secret than a ternary one; it makes key-switching and
rescaling noise grow by about ``sqrt(N)``.

Representation: polynomials are ``uint64`` arrays of residues, one row per prime, in SEAL's
NTT form (the form of SEAL's keys and CKKS ciphertexts), at the key level (every prime,
the special one last) for keys and at a ciphertext's own primes for decryption.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import math
import os
import struct
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tenseal.sealapi as seal
from numpy.typing import NDArray

from fedsec.crypto.drbg import SeededRandomSource
from fedsec.crypto.params import CKKSParams
from fedsec.crypto.sealio import SEAL_HEADER, build_seal_context, load, plain_seal_bytes, save
from fedsec.errors import ProtocolError
from fedsec.protocol import wire

__all__ = ["MultipartyParams", "KeyShare", "RelinRound1", "aggregate_public_key",
           "aggregate_galois_keys", "aggregate_relin_round1", "aggregate_relin_key",
           "combine_decryption", "combine_switch", "smudging_bits", "crs_seed_bytes",
           "aggregate_key_sums", "aggregate_compact_keys", "keys_from_compact",
           "deal_threshold_shares",
           "ThresholdKeyShare", "MAX_PARTIES", "commit_share", "open_commitments",
           "known_answer_ciphertext", "known_answer_share", "check_known_answer",
           "refresh_share", "combine_refresh"]

#: Largest party identifier of the t-out-of-N mode (Shamir points 1..MAX_PARTIES).
MAX_PARTIES = 1 << 16

U64 = NDArray[np.uint64]
CRS_SEED_BYTES = 32
_CBD_ETA = 21  # centred binomial: variance eta/2 = 10.5, sigma 3.24 (SEAL's noise)


def crs_seed_bytes() -> int:
    """Length of the common-random-polynomial seed the parties agree on."""
    return CRS_SEED_BYTES


def _util() -> Any:
    return sys.modules[seal.Ciphertext.__module__].util


# ----------------------------------------------------------------------------- parameters
class MultipartyParams:
    """Public ring data of a CKKS parameter set: primes, NTT tables, key-switching layout.

    Parameters
    ----------
    params : CKKSParams
        A fedsec CKKS preset (:func:`fedsec.crypto.params.get_preset`).
    """

    def __init__(self, params: CKKSParams) -> None:
        self.params = params
        self.seal_context = build_seal_context(params)
        key = self.seal_context.key_context_data()
        self.key_parms_id = key.parms_id()
        self.n: int = int(params.poly_modulus_degree)
        self.log_n = self.n.bit_length() - 1
        self.primes: tuple[int, ...] = tuple(int(m.value()) for m in key.parms().coeff_modulus())
        #: decomposition count of SEAL's switching keys: every prime but the special one
        self.decomp = len(self.primes) - 1
        self._q = np.asarray(self.primes, dtype=np.uint64)[:, None]
        self._q_obj = np.asarray(self.primes, dtype=object)[:, None]
        u = _util()
        self._tables_owner = [u.CreateNTTTables(self.log_n, [seal.Modulus(q)])
                              for q in self.primes]
        self._tables = [p.get() for p in self._tables_owner]

    # arithmetic on (rows, n) residue arrays over the first `rows` primes
    def q(self, rows: int) -> U64:
        return self._q[:rows]

    def add(self, a: U64, b: U64) -> U64:
        s = a + b  # both < 2^61
        q = self._q[:a.shape[0]]
        return np.where(s >= q, s - q, s)

    def sub(self, a: U64, b: U64) -> U64:
        q = self._q[:a.shape[0]]
        return np.where(a >= b, a - b, a + (q - b))

    def neg(self, a: U64) -> U64:
        q = self._q[:a.shape[0]]
        return np.where(a == 0, a, q - a)

    def mul(self, a: U64, b: U64) -> U64:
        """Coefficient-wise product (NTT domain: the ring product) mod each prime."""
        q = self._q_obj[:a.shape[0]]
        out: U64 = (a.astype(object) * b.astype(object) % q).astype(np.uint64)
        return out

    def mul_scalar_row(self, a: U64, row: int, c: int) -> U64:
        """``c * a`` in prime ``row`` only, zero in the other primes."""
        out = np.zeros_like(a)
        q = self.primes[row]
        out[row] = (a[row].astype(object) * (c % q) % q).astype(np.uint64)
        return out

    def from_signed(self, coeffs: NDArray[np.int64], rows: int | None = None) -> U64:
        """Small signed coefficients (|c| < 2^62) to NTT-form residues in ``rows`` primes."""
        rows = len(self.primes) if rows is None else rows
        c = np.asarray(coeffs, dtype=np.int64)
        out = np.empty((rows, self.n), dtype=np.uint64)
        u = _util()
        for r in range(rows):
            q = self.primes[r]  # < 2^61: np.mod of int64 by it is exact and >= 0
            res = np.mod(c, np.int64(q)).astype(np.uint64)
            ntt = u.ntt_negacyclic_harvey(res.tolist(), self._tables[r])
            out[r] = np.asarray(ntt, dtype=np.uint64) % np.uint64(q)
        return out

    def to_coeffs(self, a: U64) -> U64:
        """Inverse NTT, row by row (residues in ``[0, q)``)."""
        u = _util()
        out = np.empty_like(a)
        for r in range(a.shape[0]):
            inv = u.inverse_ntt_negacyclic_harvey(a[r].tolist(), self._tables[r])
            out[r] = np.asarray(inv, dtype=np.uint64) % np.uint64(self.primes[r])
        return out

    def crs(self, seed: bytes, label: str) -> U64:
        """A common random polynomial at the key level from the agreed ``seed``.

        Uniform residues in NTT form (uniform in either form), from a ChaCha20 stream with
        domain separation by ``label``.
        """
        if not isinstance(seed, bytes) or len(seed) != CRS_SEED_BYTES:
            raise ValueError(f"The 'seed' parameter must be {CRS_SEED_BYTES} bytes.")
        src = SeededRandomSource(seed, f"fedsec/multiparty/crs/{label}".encode())
        return np.stack([_uniform(src, q, self.n) for q in self.primes])

    def check_residues(self, a: Any, rows: int, what: str) -> U64:
        """``a`` as a (rows, n) residue array, or ProtocolError."""
        arr = np.asarray(a)
        if arr.dtype != np.uint64 or arr.shape != (rows, self.n):
            raise ProtocolError(f"invalid {what}: expected {rows} x {self.n} residues")
        if np.any(arr >= self._q[:rows]):
            raise ProtocolError(f"invalid {what}: residues out of range")
        return arr


@functools.lru_cache(maxsize=8)
def _mp(params: CKKSParams) -> MultipartyParams:
    return MultipartyParams(params)


def _uniform(src: Any, q: int, n: int) -> U64:
    bits = int(q - 1).bit_length()
    mask = np.uint64((1 << bits) - 1)
    out = np.empty(0, dtype=np.uint64)
    while out.size < n:
        cand = np.frombuffer(src.random_bytes(8 * max(16, 2 * (n - out.size))),
                             dtype="<u8").astype(np.uint64) & mask
        out = np.concatenate((out, cand[cand < np.uint64(q)]))
    return out[:n]


# ----------------------------------------------------------------------------- samplers
def _ternary(n: int) -> NDArray[np.int64]:
    """Uniform {-1, 0, 1} coefficients from the OS CSPRNG (rejection: no bias)."""
    out = np.empty(0, dtype=np.int64)
    while out.size < n:
        b = np.frombuffer(os.urandom(2 * (n - out.size) + 16), dtype=np.uint8)
        b = b[b < 255]
        out = np.concatenate((out, (b % 3).astype(np.int64) - 1))
    return out[:n]


def _cbd(n: int, eta: int = _CBD_ETA) -> NDArray[np.int64]:
    """Centred binomial noise (sum of eta bits minus eta bits), from the OS CSPRNG."""
    raw = np.unpackbits(np.frombuffer(os.urandom((2 * eta * n + 7) // 8), dtype=np.uint8))
    bits = raw[:2 * eta * n].reshape(n, 2, eta).astype(np.int64)
    out: NDArray[np.int64] = bits[:, 0].sum(axis=1) - bits[:, 1].sum(axis=1)
    return out


def _uniform_signed(n: int, k: int) -> NDArray[np.int64]:
    """Uniform integers in ``[-2^k, 2^k]`` from the OS CSPRNG (``k <= 60``)."""
    if not 0 <= k <= 60:
        raise ValueError(f"smudging needs 0 <= bits <= 60; got {k}")
    span = (1 << (k + 1)) + 1
    bits = span.bit_length()
    mask = np.uint64((1 << bits) - 1)
    out = np.empty(0, dtype=np.int64)
    while out.size < n:
        cand = np.frombuffer(os.urandom(8 * (2 * (n - out.size) + 8)), dtype="<u8") & mask
        cand = cand[cand < np.uint64(span)]
        out = np.concatenate((out, cand.astype(np.int64) - (1 << k)))
    return out[:n]


def smudging_bits(noise_bound_bits: float, *, n: int, security_bits: int = 40) -> int:
    """Bits ``k`` of uniform smudging noise that hides a ciphertext noise below
    ``2^noise_bound_bits`` to statistical distance ``2^-security_bits`` over the ``n``
    coefficients of one decryption share (``n * 2^B / 2^k <= 2^-security_bits``)."""
    return int(math.ceil(noise_bound_bits + math.log2(n) + security_bits))


# ----------------------------------------------------------------------------- share bytes
def _pack(kind: str, meta: dict[str, Any], arrays: Sequence[U64]) -> bytes:
    return wire.encode(kind, meta, [np.ascontiguousarray(a, dtype="<u8").tobytes()
                                    for a in arrays])


def _unpack(mp: MultipartyParams, data: bytes, kind: str, rows: int, count: int,
            meta_keys: Mapping[str, Any] | None = None,
            metas: list[dict[str, Any]] | None = None) -> list[U64]:
    if not isinstance(data, (bytes, bytearray)):
        raise ProtocolError(f"invalid {kind}: not bytes")
    msg = wire.decode(bytes(data), expect=kind)
    for key, want in (meta_keys or {}).items():
        if msg.meta.get(key) != want:
            raise ProtocolError(f"invalid {kind}: {key} does not match")
    if len(msg.blobs) != count:
        raise ProtocolError(f"invalid {kind}: expected {count} polynomials")
    if metas is not None:
        metas.append(dict(msg.meta))
    out = []
    for b in msg.blobs:
        if len(b) != 8 * rows * mp.n:
            raise ProtocolError(f"invalid {kind}: wrong polynomial size")
        arr = np.frombuffer(b, dtype="<u8").astype(np.uint64).reshape(rows, mp.n)
        out.append(mp.check_residues(arr, rows, kind))
    return out


# ----------------------------------------------------------------------------- a party
@dataclass
class RelinRound1:
    """A party's state between the two rounds of the relinearisation-key protocol
    (its ephemeral secret; kept by the party, never sent)."""

    u: U64 = field(repr=False)


class KeyShare:
    """One party's share ``s_i`` of the collective secret key. It never leaves the party.

    Parameters
    ----------
    params : CKKSParams
        The preset every party uses.
    """

    def __init__(self, params: CKKSParams, *, _coeffs: NDArray[np.int64] | None = None
                 ) -> None:
        self.mp = _mp(params)
        c = _ternary(self.mp.n) if _coeffs is None else np.asarray(_coeffs, dtype=np.int64)
        self._s = self.mp.from_signed(c)

    @property
    def params(self) -> CKKSParams:
        return self.mp.params

    def secret_bytes(self) -> bytes:
        """This share for the party's own disk (between the steps of a stateless runtime).
        Contains the SECRET key share."""
        c = self.mp.to_coeffs(self._s[:1])[0]
        q0 = np.uint64(self.mp.primes[0])
        signed = np.where(c > q0 // np.uint64(2), c.astype(np.int64) - np.int64(q0),
                          c.astype(np.int64))
        return wire.encode("mpckks/key-share", {"preset": self.mp.params.name},
                           [signed.astype("<i8").tobytes()])

    @classmethod
    def from_secret_bytes(cls, params: CKKSParams, data: bytes) -> KeyShare:
        """Load :meth:`secret_bytes` (``ProtocolError`` if malformed or for another
        preset)."""
        msg = wire.decode(data, expect="mpckks/key-share")
        n = params.poly_modulus_degree
        if msg.meta.get("preset") != params.name or len(msg.blobs) != 1 or \
                len(msg.blobs[0]) != 8 * n:
            raise ProtocolError("malformed key share")
        coeffs = np.frombuffer(msg.blobs[0], dtype="<i8").astype(np.int64)
        if np.any(np.abs(coeffs) > 1):
            raise ProtocolError("malformed key share: not ternary")
        return cls(params, _coeffs=coeffs)

    def _noise(self, rows: int | None = None) -> U64:
        return self.mp.from_signed(_cbd(self.mp.n), rows)

    def public_key_share(self, crs_seed: bytes) -> bytes:
        """``-a s_i + e_i`` for the common polynomial ``a`` of ``crs_seed``."""
        mp = self.mp
        a = mp.crs(crs_seed, "pk")
        p = mp.add(mp.neg(mp.mul(a, self._s)), self._noise())
        return _pack("mpckks/pk-share", {"preset": mp.params.name}, [p])

    def _switch_share(self, new_key: U64, crs: Sequence[U64]) -> list[U64]:
        """Shares of SEAL's switching key from ``new_key`` to ``s``: one per prime j."""
        mp = self.mp
        p_special = mp.primes[-1]
        out = []
        for j in range(mp.decomp):
            h = mp.add(mp.neg(mp.mul(crs[j], self._s)), self._noise())
            h = mp.add(h, mp.mul_scalar_row(new_key, j, p_special))
            out.append(h)
        return out

    def galois_key_share(self, crs_seed: bytes, galois_elt: int) -> bytes:
        """This party's share of the key for the automorphism ``X -> X^galois_elt``."""
        mp = self.mp
        g = _check_galois(galois_elt, mp.n)
        crs = [mp.crs(crs_seed, f"galois/{g}/{j}") for j in range(mp.decomp)]
        s_g = self._automorphism(g)
        return _pack("mpckks/galois-share", {"preset": mp.params.name, "galois": g},
                     self._switch_share(s_g, crs))

    def _automorphism(self, g: int) -> U64:
        """``s_i(X^g)`` in NTT form (from the coefficients: exact)."""
        mp = self.mp
        coeffs = mp.to_coeffs(self._s[:1])[0].astype(object)
        q0 = mp.primes[0]
        signed = np.where(coeffs > q0 // 2, coeffs - q0, coeffs).astype(np.int64)
        out = np.zeros(mp.n, dtype=np.int64)
        idx = (np.arange(mp.n, dtype=np.int64) * g) % (2 * mp.n)
        neg = idx >= mp.n
        out[idx % mp.n] = np.where(neg, -signed, signed)
        return mp.from_signed(out)

    def relin_round1(self, crs_seed: bytes) -> tuple[RelinRound1, bytes]:
        """Round 1 of the relinearisation-key protocol: the state to keep and the share."""
        mp = self.mp
        crs = [mp.crs(crs_seed, f"relin/{j}") for j in range(mp.decomp)]
        u = mp.from_signed(_ternary(mp.n))
        h0, h1 = [], []
        for j in range(mp.decomp):
            a = mp.add(mp.neg(mp.mul(crs[j], u)), self._noise())
            h0.append(mp.add(a, mp.mul_scalar_row(self._s, j, mp.primes[-1])))
            h1.append(mp.add(mp.mul(crs[j], self._s), self._noise()))
        return RelinRound1(u), _pack("mpckks/relin-share1",
                                          {"preset": mp.params.name}, h0 + h1)

    def relin_round2(self, state: RelinRound1, round1_sum: bytes) -> bytes:
        """Round 2, on the aggregated round-1 shares (:func:`aggregate_relin_round1`)."""
        mp = self.mp
        polys = _unpack(mp, round1_sum, "mpckks/relin-sum1", len(mp.primes), 2 * mp.decomp,
                        {"preset": mp.params.name})
        h0, h1 = polys[:mp.decomp], polys[mp.decomp:]
        u_minus_s = mp.sub(state.u, self._s)
        out0 = [mp.add(mp.mul(h0[j], self._s), self._noise()) for j in range(mp.decomp)]
        out1 = [mp.add(mp.mul(h1[j], u_minus_s), self._noise()) for j in range(mp.decomp)]
        return _pack("mpckks/relin-share2", {"preset": mp.params.name}, out0 + out1)

    def decryption_share(self, ciphertext: Any, *, smudging: int) -> bytes:
        """``c1 s_i + E_i`` for a size-2 SEAL ciphertext, ``E_i`` uniform in
        ``[-2^smudging, 2^smudging]``.

        Only for a ciphertext the caller has checked is the agreed computation's output:
        a share of a crafted ciphertext reveals this party's key share (see the module).
        """
        mp = self.mp
        c = _ct_data(mp, ciphertext)
        rows = c.shape[1]
        d = mp.add(mp.mul(c[1], self._s[:rows]), _smudging_noise(mp, smudging, rows))
        return _pack("mpckks/dec-share", {"preset": mp.params.name, "rows": rows}, [d])

    def switch_share(self, ciphertext: Any, target: KeyShare | None, *, smudging: int
                     ) -> bytes:
        """This party's share of the switch of ``ciphertext`` from the collective key to a
        key ``t`` every party knows (collective key switching): ``c1 (s_i - t) + E_i`` for
        the one party that passes ``target = t``, ``c1 s_i + E_i`` for the others.

        ``(c0 + sum of shares, c1)`` then decrypts under ``t`` to what the ciphertext
        decrypts to under the collective key, plus the smudging. Whoever adds the shares up
        without ``t`` sees the result only as a ciphertext. The same rule as for
        :meth:`decryption_share` holds: only for a ciphertext the caller has checked is
        the agreed computation's output.
        """
        mp = self.mp
        c = _ct_data(mp, ciphertext)
        rows = c.shape[1]
        key = self._s[:rows] if target is None else mp.sub(self._s[:rows], target._s[:rows])
        d = mp.add(mp.mul(c[1], key), _smudging_noise(mp, smudging, rows))
        return _pack("mpckks/switch-share", {"preset": mp.params.name, "rows": rows}, [d])


# ----------------------------------------------------------------------------- t-out-of-N
def _check_ids(ids: Sequence[int], what: str) -> list[int]:
    out = [int(i) for i in ids]
    if any(isinstance(i, bool) or not isinstance(i, (int, np.integer)) for i in ids) or \
            any(not 1 <= i <= MAX_PARTIES for i in out) or len(set(out)) != len(out):
        raise ValueError(f"The {what!r} parameter must hold distinct party ids in "
                         f"[1, {MAX_PARTIES}]. Got {list(ids)!r} instead.")
    return out


def deal_threshold_shares(share: KeyShare, threshold: int, ids: Sequence[int]
                          ) -> dict[int, bytes]:
    """Shamir shares of this party's key share ``s_i`` for every party of ``ids``.

    ``s_i + r_1 x + ... + r_{t-1} x^{t-1}`` at ``x = id``, with uniform ring elements
    ``r_k`` (per RNS prime: Shamir over each ``Z_q``). Any ``threshold`` of them give
    ``s_i``; fewer give nothing. Each is meant for one recipient only: seal it to that party
    (never send it in the clear). Every party deals; party ``j`` adds what it received into
    its :class:`ThresholdKeyShare`.
    """
    mp = share.mp
    ids = _check_ids(ids, "ids")
    if isinstance(threshold, bool) or not isinstance(threshold, int) or \
            not 1 <= threshold <= len(ids):
        raise ValueError(f"The 'threshold' parameter must be an int in [1, {len(ids)}]. "
                         f"Got {threshold!r} instead.")
    src = _SystemSource()
    coeffs = [np.stack([_uniform(src, q, mp.n) for q in mp.primes])
              for _ in range(threshold - 1)]
    out = {}
    for x in ids:
        acc = share._s.copy()
        power = np.ones((len(mp.primes), 1), dtype=object)
        for r in coeffs:  # Horner would need x^k per prime anyway: powers mod q
            power = power * x % mp._q_obj
            acc = mp.add(acc, (r.astype(object) * power % mp._q_obj).astype(np.uint64))
        out[x] = _pack("mpckks/shamir", {"preset": mp.params.name, "to": x,
                                         "threshold": threshold}, [acc])
    return out


class _SystemSource:
    def random_bytes(self, n: int) -> bytes:
        return os.urandom(n)


def _lagrange_at_zero(i: int, participants: Sequence[int], q: int) -> int:
    num, den = 1, 1
    for j in participants:
        if j != i:
            num = num * j % q
            den = den * (j - i) % q
    return num * pow(den, -1, q) % q


class ThresholdKeyShare:
    """Party ``my_id``'s Shamir share of the collective secret ``s`` (t-out-of-N).

    Built from what every party dealt to it (:func:`deal_threshold_shares`), its own deal
    included. Any ``threshold`` parties decrypt together; fewer learn nothing of ``s``.
    The collective keys are made by the N-out-of-N protocols before the deal.

    Parameters
    ----------
    params : CKKSParams
        The preset every party uses.
    my_id : int
        This party's Shamir point.
    threshold : int
        Parties needed to decrypt.
    received : iterable of bytes
        One dealt share from every party (each addressed to ``my_id``).
    """

    def __init__(self, params: CKKSParams, my_id: int, threshold: int,
                 received: Iterable[bytes]) -> None:
        self.mp = _mp(params)
        (self.my_id,) = _check_ids([my_id], "my_id")
        self.threshold = int(threshold)
        (self._sh,) = _accumulate(self.mp, received, "mpckks/shamir", len(self.mp.primes), 1,
                                  {"preset": params.name, "to": self.my_id,
                                   "threshold": self.threshold})

    def decryption_share(self, ciphertext: Any, *, smudging: int,
                         participants: Sequence[int]) -> bytes:
        """``c1 * lambda_i * sh_i + E_i`` for the ``participants`` who decrypt together
        (exactly ``threshold`` of them, this party among them).

        Only for a ciphertext the caller has checked is the agreed computation's output (a
        crafted ``c1`` reveals ``lambda_i * sh_i``, hence this party's Shamir share).
        """
        mp = self.mp
        ids = sorted(_check_ids(participants, "participants"))
        if self.my_id not in ids or len(ids) != self.threshold:
            raise ValueError(f"The 'participants' parameter must hold exactly "
                             f"{self.threshold} party ids, {self.my_id} among them. Got "
                             f"{list(participants)!r} instead.")
        c = _ct_data(mp, ciphertext)
        rows = c.shape[1]
        lam = np.asarray([_lagrange_at_zero(self.my_id, ids, mp.primes[r])
                          for r in range(rows)], dtype=object)[:, None]
        key = (self._sh[:rows].astype(object) * lam % mp._q_obj[:rows]).astype(np.uint64)
        e = mp.from_signed(_uniform_signed(mp.n, smudging), rows)
        d = mp.add(mp.mul(c[1], key), e)
        return _pack("mpckks/dec-share", {"preset": mp.params.name, "rows": rows,
                                          "participants": ids, "from": self.my_id}, [d])


def _check_galois(g: int, n: int) -> int:
    if isinstance(g, bool) or not isinstance(g, (int, np.integer)) or not 1 < int(g) < 2 * n \
            or int(g) % 2 == 0:
        raise ValueError(f"a Galois element must be odd and in (1, {2 * n}); got {g!r}")
    return int(g)


# ----------------------------------------------------------------------------- SEAL objects
def _ct_data(mp: MultipartyParams, ct: Any) -> U64:
    """A size-2 NTT-form ciphertext's residues, shape (2, primes, n)."""
    if ct.size() != 2 or not ct.is_ntt_form():
        raise ValueError("collective decryption needs a size-2 CKKS ciphertext (relinearise "
                         "first)")
    header, body = plain_seal_bytes(save(ct), "ciphertext", max_expansion=1 << 16)
    k = int(ct.coeff_modulus_size())
    count = 2 * k * mp.n
    arr = np.frombuffer(body[len(body) - 8 * count:], dtype="<u8").astype(np.uint64)
    return arr.reshape(2, k, mp.n)


def _replace_trailing(blob: bytes, data: U64) -> bytes:
    """A SEAL object's uncompressed bytes with its trailing array replaced by ``data``
    (same length: the template's numbers are overwritten, nothing of them survives)."""
    raw = np.ascontiguousarray(data, dtype="<u8").tobytes()
    (count,) = struct.unpack_from("<Q", blob, len(blob) - len(raw) - 8)
    if 8 * count != len(raw):
        raise RuntimeError("SEAL object layout not as expected")
    return blob[:len(blob) - len(raw)] + raw


def _public_key(mp: MultipartyParams, p0: U64, a: U64) -> Any:
    gen = seal.KeyGenerator(mp.seal_context)
    tmpl = seal.PublicKey()
    gen.create_public_key(tmpl)
    header, body = plain_seal_bytes(save(tmpl), "public key", max_expansion=1 << 16)
    body = _replace_trailing(body, np.stack([p0, a]))
    hdr = SEAL_HEADER.pack(*SEAL_HEADER.unpack(header)[:6], SEAL_HEADER.size + len(body))
    return load(seal.PublicKey(), mp.seal_context, hdr + body, "collective public key")


def _switching_keys(mp: MultipartyParams, template: Any,
                    keys: Sequence[Sequence[Sequence[U64]]],
                    obj: Any, what: str) -> Any:
    """Fill a template KSwitchKeys' nested keys, in order, with ``keys`` (each a list of
    ``(c0, c1)`` at the key level, one per decomposition index)."""
    header, body = plain_seal_bytes(save(template), what, max_expansion=1 << 16)
    flat = [pair for per in keys for pair in per]
    out = bytearray(body[:40])  # parms_id, outer count
    (outer,) = struct.unpack_from("<Q", body, 32)
    pos, used = 40, 0
    for _ in range(outer):
        (inner,) = struct.unpack_from("<Q", body, pos)
        out += body[pos:pos + 8]
        pos += 8
        for _ in range(inner):
            size = SEAL_HEADER.unpack_from(body, pos)[6]
            key_blob = body[pos:pos + size]
            if used >= len(flat):
                raise RuntimeError("more switching keys in the template than shares")
            out += _replace_trailing(key_blob, np.stack(list(flat[used])))
            used += 1
            pos += size
    if used != len(flat) or pos != len(body):
        raise RuntimeError("switching-key template and shares do not match")
    hdr = SEAL_HEADER.pack(*SEAL_HEADER.unpack(header)[:6], SEAL_HEADER.size + len(out))
    return load(obj, mp.seal_context, hdr + bytes(out), what)


# ----------------------------------------------------------------------------- aggregation
def _accumulate(mp: MultipartyParams, shares: Iterable[bytes], kind: str, rows: int,
                count: int, meta: Mapping[str, Any],
                metas: list[dict[str, Any]] | None = None) -> list[U64]:
    """The sums of ``count`` polynomials over every share, decoded and added one share at a
    time (memory independent of the number of parties)."""
    acc: list[U64] | None = None
    for share in shares:
        polys = _unpack(mp, share, kind, rows, count, meta, metas)
        acc = polys if acc is None else [mp.add(a, b) for a, b in zip(acc, polys,
                                                                       strict=True)]
    if acc is None:
        raise ValueError(f"no {kind} shares")
    return acc


def commit_share(share: bytes, *, sender: str, session: bytes) -> bytes:
    """A binding commitment to a key share: ``SHA-256(session, sender, share)``.

    Key shares are sent in two rounds: every party's commitment first, the shares once
    every commitment is in. Without that order a party that sees the others' shares first
    can choose its own as a function of them: ``p_i = p_own - sum of the others`` makes the
    collective public key its own key, which it alone can decrypt (the rogue-key attack,
    :mod:`fedsec.testing.multiparty`). The share itself hides ``s_i`` (an RLWE sample); the
    commitment only fixes it before the others are seen.
    """
    if not isinstance(sender, str) or not sender:
        raise ValueError("The 'sender' parameter of commit_share must be a non-empty str.")
    h = hashlib.sha256()
    for part in (b"fedsec/multiparty/commit", bytes(session), sender.encode("utf-8"),
                 bytes(share)):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.digest()


def open_commitments(shares: Mapping[str, bytes], commitments: Mapping[str, bytes], *,
                     session: bytes) -> list[bytes]:
    """The shares, in sender order, once each matches the commitment its sender made
    before any share was revealed; ``ProtocolError`` otherwise (a missing, extra or changed
    share)."""
    if set(shares) != set(commitments):
        raise ProtocolError("the revealed shares and the commitments name different parties")
    out = []
    for sender in sorted(shares):
        want = commitments[sender]
        got = commit_share(shares[sender], sender=sender, session=session)
        if not isinstance(want, (bytes, bytearray)) or not hmac.compare_digest(got, bytes(want)):
            raise ProtocolError(f"the key share of {sender!r} is not the one it committed to")
        out.append(shares[sender])
    return out


def aggregate_key_sums(params: CKKSParams, galois_elts: Sequence[int],
                       pk_shares: Iterable[bytes],
                       galois_shares: Mapping[int, Iterable[bytes]]) -> bytes:
    """The data halves of the public and Galois keys (``sum p_i`` and every Galois key's
    sums), packed; shares are added as they stream in."""
    mp = _mp(params)
    rows = len(mp.primes)
    meta = {"preset": params.name}
    elts = [_check_galois(g, mp.n) for g in galois_elts]
    if sorted(set(elts)) != elts or set(elts) != set(galois_shares):
        raise ValueError("the Galois elements must be sorted, distinct and match the shares")
    polys = _accumulate(mp, pk_shares, "mpckks/pk-share", rows, 1, meta)
    for g in elts:
        polys += _accumulate(mp, galois_shares[g], "mpckks/galois-share", rows, mp.decomp,
                             {**meta, "galois": g})
    return _pack("mpckks/key-sums", {**meta, "galois": elts}, polys)


def aggregate_compact_keys(params: CKKSParams, key_sums: bytes,
                           relin_shares: Iterable[bytes]) -> bytes:
    """The collective keys as their data halves only, one message: ``key_sums``
    (:func:`aggregate_key_sums`) and the relinearisation key's first halves.

    The other halves are public already - the common random polynomials of the seed and
    the round-1 relinearisation sums every party received - so a party rebuilds SEAL's key
    objects from this message (:func:`keys_from_compact`) at half the bytes of sending
    them, and the random half of every key is one it derived itself.
    """
    mp = _mp(params)
    rows = len(mp.primes)
    msg = wire.decode(key_sums, expect="mpckks/key-sums")
    elts = msg.meta.get("galois")
    if not isinstance(elts, list):
        raise ProtocolError("invalid mpckks/key-sums: galois")
    polys = _unpack(mp, key_sums, "mpckks/key-sums", rows, 1 + mp.decomp * len(elts),
                    {"preset": params.name})
    sums = _accumulate(mp, relin_shares, "mpckks/relin-share2", rows, 2 * mp.decomp,
                       {"preset": params.name})
    polys += [mp.add(sums[j], sums[mp.decomp + j]) for j in range(mp.decomp)]
    return _pack("mpckks/compact-keys", {"preset": params.name, "galois": elts}, polys)


def keys_from_compact(params: CKKSParams, crs_seed: bytes, round1_sum: bytes,
                      galois_elts: Sequence[int], compact: bytes) -> tuple[Any, Any, Any]:
    """SEAL's ``(PublicKey, GaloisKeys, RelinKeys)`` from :func:`aggregate_compact_keys`'s
    message, with the random halves rebuilt from ``crs_seed`` and ``round1_sum``.

    Raises
    ------
    ProtocolError
        If the message is malformed or for other Galois elements.
    """
    mp = _mp(params)
    elts = [_check_galois(g, mp.n) for g in galois_elts]
    rows = len(mp.primes)
    count = 1 + mp.decomp * len(elts) + mp.decomp
    polys = _unpack(mp, compact, "mpckks/compact-keys", rows, count,
                    {"preset": params.name, "galois": elts})
    h = _unpack(mp, round1_sum, "mpckks/relin-sum1", rows, 2 * mp.decomp,
                {"preset": params.name})
    pk = _public_key(mp, polys[0], mp.crs(crs_seed, "pk"))
    per_elt = []
    for k, g in enumerate(elts):
        base = 1 + k * mp.decomp
        per_elt.append([[polys[base + j], mp.crs(crs_seed, f"galois/{g}/{j}")]
                        for j in range(mp.decomp)])
    gen = seal.KeyGenerator(mp.seal_context)
    gtmpl = seal.GaloisKeys()
    gen.create_galois_keys(elts, gtmpl)
    gk = _switching_keys(mp, gtmpl, per_elt, seal.GaloisKeys(), "collective Galois keys")
    base = 1 + mp.decomp * len(elts)
    rkeys = [[polys[base + j], h[mp.decomp + j]] for j in range(mp.decomp)]
    rtmpl = seal.RelinKeys()
    gen.create_relin_keys(rtmpl)
    rk = _switching_keys(mp, rtmpl, [rkeys], seal.RelinKeys(),
                         "collective relinearisation keys")
    return pk, gk, rk


def aggregate_public_key(params: CKKSParams, crs_seed: bytes, shares: Iterable[bytes]) -> Any:
    """The collective SEAL ``PublicKey`` from every party's :meth:`KeyShare.public_key_share`.

    ``shares`` may be any iterable (a generator keeps one share in memory at a time).

    Raises
    ------
    ProtocolError
        If a share is malformed.
    """
    mp = _mp(params)
    (p0,) = _accumulate(mp, shares, "mpckks/pk-share", len(mp.primes), 1,
                        {"preset": params.name})
    return _public_key(mp, p0, mp.crs(crs_seed, "pk"))


def aggregate_galois_keys(params: CKKSParams, crs_seed: bytes,
                          shares: Mapping[int, Iterable[bytes]]) -> Any:
    """SEAL ``GaloisKeys`` for the Galois elements of ``shares`` (element -> every party's
    :meth:`KeyShare.galois_key_share`)."""
    mp = _mp(params)
    elts = sorted(_check_galois(g, mp.n) for g in shares)
    if not elts:
        raise ValueError("no Galois elements")
    per_elt = []
    for g in elts:
        sums = _accumulate(mp, shares[g], "mpckks/galois-share", len(mp.primes), mp.decomp,
                           {"preset": params.name, "galois": g})
        per_elt.append([[sums[j], mp.crs(crs_seed, f"galois/{g}/{j}")]
                        for j in range(mp.decomp)])
    gen = seal.KeyGenerator(mp.seal_context)
    tmpl = seal.GaloisKeys()
    gen.create_galois_keys(elts, tmpl)
    return _switching_keys(mp, tmpl, per_elt, seal.GaloisKeys(), "collective Galois keys")


def aggregate_relin_round1(params: CKKSParams, shares: Iterable[bytes]) -> bytes:
    """The sums of the round-1 relinearisation shares, sent back to every party."""
    mp = _mp(params)
    sums = _accumulate(mp, shares, "mpckks/relin-share1", len(mp.primes), 2 * mp.decomp,
                       {"preset": params.name})
    return _pack("mpckks/relin-sum1", {"preset": params.name}, sums)


def aggregate_relin_key(params: CKKSParams, round1_sum: bytes, shares: Iterable[bytes]
                        ) -> Any:
    """The collective SEAL ``RelinKeys`` from the round-1 sums and every round-2 share."""
    mp = _mp(params)
    h = _unpack(mp, round1_sum, "mpckks/relin-sum1", len(mp.primes), 2 * mp.decomp,
                {"preset": params.name})
    sums = _accumulate(mp, shares, "mpckks/relin-share2", len(mp.primes), 2 * mp.decomp,
                       {"preset": params.name})
    keys = [[mp.add(sums[j], sums[mp.decomp + j]), h[mp.decomp + j]]
            for j in range(mp.decomp)]
    gen = seal.KeyGenerator(mp.seal_context)
    tmpl = seal.RelinKeys()
    gen.create_relin_keys(tmpl)
    return _switching_keys(mp, tmpl, [keys], seal.RelinKeys(), "collective relinearisation keys")


def combine_decryption(ctx: Any, ciphertext: Any, shares: Iterable[bytes], *,
                       participants: Sequence[int] | None = None) -> NDArray[np.complex128]:
    """Decode ``c0 + sum of shares``: the ciphertext's slot values.

    Parameters
    ----------
    ctx : fedsec.crypto.ckks.CKKSContext
        A context over the collective public keys (for the encoder).
    ciphertext : SEAL ciphertext
        Size 2, as every party's decryption share saw it.
    shares : iterable of bytes
        N-out-of-N: one :meth:`KeyShare.decryption_share` per party (all of them).
        t-out-of-N: one :meth:`ThresholdKeyShare.decryption_share` from each of
        ``participants``.
    participants : sequence of int, optional
        The t-out-of-N mode's decrypting parties; every share must be for exactly this set
        and come from a different one of them.

    Raises
    ------
    ProtocolError
        If a share is malformed, or (t-out-of-N) for another set or from a party twice.
    """
    mp = _mp(ctx.params)
    c = _ct_data(mp, ciphertext)
    rows = c.shape[1]
    want: dict[str, Any] = {"preset": ctx.params.name, "rows": rows}
    ids: list[int] = []
    if participants is not None:
        ids = sorted(_check_ids(participants, "participants"))
        want["participants"] = ids
    metas: list[dict[str, Any]] = []
    (d,) = _accumulate(mp, shares, "mpckks/dec-share", rows, 1, want, metas)
    senders = [m.get("from") for m in metas]
    if participants is not None and (
            not all(isinstance(x, int) and not isinstance(x, bool) for x in senders)
            or sorted(int(x) for x in senders if isinstance(x, int)) != ids):
        raise ProtocolError("decryption shares do not come from the participants, one each")
    if participants is None and any("participants" in m for m in metas):
        raise ProtocolError("a t-out-of-N decryption share where N-out-of-N ones were "
                            "expected")
    m = mp.add(c[0], d)
    from fedsec.crypto.rawpoly import plaintext_from_ntt

    level = ctx.level_of(ciphertext)
    pt = plaintext_from_ntt(ctx, m.reshape(-1), level=level, scale=ciphertext.scale)
    out: NDArray[np.complex128] = ctx.decode(pt)
    return out


def combine_switch(ctx: Any, ciphertext: Any, shares: Iterable[bytes]) -> Any:
    """The ciphertext under the target key of :meth:`KeyShare.switch_share`: ``(c0 + sum of
    every party's share, c1)``, a SEAL ciphertext at the same level and scale.

    Raises
    ------
    ProtocolError
        If a share is malformed or for another level.
    """
    mp = _mp(ctx.params)
    c = _ct_data(mp, ciphertext)
    rows = c.shape[1]
    (d,) = _accumulate(mp, shares, "mpckks/switch-share", rows, 1,
                       {"preset": ctx.params.name, "rows": rows})
    from fedsec.crypto.rawpoly import ciphertext_from_polys, ciphertext_polys

    header, prefix, _ = ciphertext_polys(ciphertext)
    data = np.stack([mp.add(c[0], d), c[1]])
    return ciphertext_from_polys(ctx, header, prefix, data)


# ----------------------------------------------------------------------------- known answer
def _known_vector(seed: bytes, slots: int) -> NDArray[np.float64]:
    src = SeededRandomSource(seed, b"fedsec/multiparty/known-answer/values")
    raw = np.frombuffer(src.random_bytes(8 * slots), dtype="<u8").astype(np.float64)
    out: NDArray[np.float64] = raw / float(1 << 64) * 2.0 - 1.0
    return out


def known_answer_ciphertext(ctx: Any, seed: bytes, *, multiply: bool = True
                            ) -> tuple[Any, NDArray[np.float64]]:
    """A ciphertext every party computes identically, and the values it must decrypt to.

    SEAL checks a key's structure, not its correctness: a wrong share gives a "valid" wrong
    key. This ciphertext exercises all of them: a public vector ``v`` (from ``seed``)
    encrypted under the collective public key with randomness expanded from ``seed`` (so
    every party gets the same bytes, and none is a ciphertext somebody crafted), then
    every rotation and the conjugation of ``ctx``'s keys added, then multiplied by ``v``'s
    encryption (relinearisation) where ``ctx`` has relinearisation keys. The expected
    values are ``(v + sum_r roll(v, -r) [+ v]) * v``.

    ``multiply=False`` leaves the product out. Use it when the keys' data halves came from
    a role that may lie: the product's ``c1`` depends on the ciphertexts' ``c0``, which a
    chosen public-key data half controls, so a decryption share of it could be of a ``c1``
    the liar chose. Without it, ``c1`` depends only on the seed and the keys' random halves.
    """
    if not isinstance(seed, bytes) or len(seed) != CRS_SEED_BYTES:
        raise ValueError(f"The 'seed' parameter must be {CRS_SEED_BYTES} bytes.")
    params = ctx.params
    parms = seal.EncryptionParameters(seal.SCHEME_TYPE.CKKS)
    parms.set_poly_modulus_degree(params.poly_modulus_degree)
    parms.set_coeff_modulus(seal.CoeffModulus.Create(params.poly_modulus_degree,
                                                     list(params.coeff_mod_bit_sizes)))
    words = [int.from_bytes(hashlib.sha256(seed + bytes([i])).digest()[:8], "little")
             for i in range(8)]
    parms.set_random_generator(seal.Blake2xbPRNGFactory(words))
    level = seal.SEC_LEVEL_TYPE.TC128 if params.security_bits >= 128 else \
        seal.SEC_LEVEL_TYPE.NONE
    seeded = seal.SEALContext(parms, True, level)
    if ctx.keys.public_key is None:
        raise ValueError("the known-answer test needs the collective public key")
    encryptor = seal.Encryptor(seeded, ctx.keys.public_key)
    v = _known_vector(seed, ctx.slots)
    ct = seal.Ciphertext()
    encryptor.encrypt(ctx.encode(v), ct)
    acc, want = ct, v.copy()
    for r in ctx.rotations:
        acc = ctx.add(acc, ctx.rotate(ct, r))
        want = want + np.roll(v, -r)
    if ctx.conjugate_key:
        acc = ctx.add(acc, ctx.conjugate(ct))
        want = want + v
    if multiply and ctx.has_relin_keys:
        acc = ctx.multiply(acc, ct)
        want = want * v
    return acc, want


def known_answer_share(share: KeyShare, ctx: Any, seed: bytes, *, smudging: int,
                       multiply: bool = True) -> bytes:
    """This party's decryption share of :func:`known_answer_ciphertext`, which it computes
    itself (it never decrypts a ciphertext it was sent)."""
    ct, _ = known_answer_ciphertext(ctx, seed, multiply=multiply)
    return share.decryption_share(ct, smudging=smudging)


def check_known_answer(ctx: Any, seed: bytes, shares: Iterable[bytes], *,
                       tolerance: float, multiply: bool = True) -> float:
    """Combine every party's :func:`known_answer_share` and compare with the known
    values; the largest error, or ``ProtocolError`` above ``tolerance`` (a wrong key
    share, Galois or relinearisation share makes the error of the order of the values'
    modulus, not of the noise)."""
    ct, want = known_answer_ciphertext(ctx, seed, multiply=multiply)
    got = combine_decryption(ctx, ct, shares).real
    err = float(np.max(np.abs(got - want)))
    if not err <= tolerance:
        # no decrypted value or error size in the message: it may travel to other roles
        raise ProtocolError("the collective keys fail the known-answer test: a key share "
                            "is wrong")
    return err


# ----------------------------------------------------------------------------- refresh
def _smudging_noise(mp: MultipartyParams, bits: int, rows: int) -> U64:
    """Uniform smudging in ``[-2^bits, 2^bits]`` as NTT residues over ``rows`` primes."""
    if not isinstance(bits, int) or isinstance(bits, bool) or not 0 <= bits <= 1000:
        raise ValueError(f"smudging needs 0 <= bits <= 1000; got {bits!r}")
    if bits <= 60:
        return mp.from_signed(_uniform_signed(mp.n, bits), rows)
    return _from_big(mp, _uniform_big(mp.n, bits), rows)


def _uniform_big(n: int, bits: int) -> list[int]:
    """``n`` uniform integers in ``[-2^bits, 2^bits]`` from the OS CSPRNG (any ``bits``)."""
    span = (1 << (bits + 1)) + 1
    nbytes = (span.bit_length() + 7) // 8
    top = 1 << (8 * nbytes)
    limit = top - top % span  # rejection: no bias
    out: list[int] = []
    while len(out) < n:
        raw = os.urandom(nbytes * (n - len(out)) * 2)
        for i in range(0, len(raw), nbytes):
            v = int.from_bytes(raw[i:i + nbytes], "little")
            if v < limit:
                out.append(v % span - (1 << bits))
                if len(out) == n:
                    break
    return out


def _from_big(mp: MultipartyParams, coeffs: Sequence[int], rows: int) -> U64:
    """Signed integers of any size to NTT-form residues in the first ``rows`` primes."""
    u = _util()
    out = np.empty((rows, mp.n), dtype=np.uint64)
    for r in range(rows):
        q = mp.primes[r]
        res = [c % q for c in coeffs]
        out[r] = np.asarray(u.ntt_negacyclic_harvey(res, mp._tables[r]), dtype=np.uint64) \
            % np.uint64(q)
    return out


def _top_rows(mp: MultipartyParams) -> int:
    return len(mp.primes) - 1  # a fresh ciphertext's primes: all but the special one


def refresh_share(share: KeyShare, ciphertext: Any, crs_seed: bytes, *, mask_bits: int,
                  smudging: int) -> bytes:
    """This party's share of the collective refresh of ``ciphertext`` (a size-2 CKKS
    ciphertext at any level) into a fresh one at the top level, decrypted by nobody.

    ``(c1 s_i + M_i + e0, -a s_i - M_i + e1)``: the first at the ciphertext's primes, the
    second at the top level with the common polynomial ``a`` of ``crs_seed``; ``M_i`` is
    uniform in ``[-2^mask_bits, 2^mask_bits]``, which hides the message (to about
    ``2^-(mask_bits - log2 |m|)`` per coefficient) as long as the sum of the parties' masks
    stays below half the ciphertext's modulus (:func:`combine_refresh` checks what it can).
    As for decryption, only for a ciphertext the caller has checked is the agreed
    computation's output: a crafted ``c1`` of large norm reveals ``s_i`` through the mask.
    """
    mp = share.mp
    c = _ct_data(mp, ciphertext)
    rows, top = c.shape[1], _top_rows(mp)
    room = math.prod(mp.primes[:rows]).bit_length() - 3  # masks + message below Q/4
    if isinstance(mask_bits, bool) or not isinstance(mask_bits, int) or \
            not 1 <= mask_bits < room:
        raise ValueError(f"The 'mask_bits' parameter must be an int in [1, {room}) for a "
                         f"ciphertext with {rows} prime(s) (masks must not wrap its "
                         f"modulus). Got {mask_bits!r} instead.")
    m = _uniform_big(mp.n, mask_bits)
    a = mp.crs(crs_seed, "refresh")[:top]
    h0 = mp.add(mp.add(mp.mul(c[1], share._s[:rows]), _from_big(mp, m, rows)),
                mp.from_signed(_uniform_signed(mp.n, smudging), rows))
    h1 = mp.add(mp.sub(mp.neg(mp.mul(a, share._s[:top])), _from_big(mp, m, top)),
                mp.from_signed(_cbd(mp.n), top))
    return _pack("mpckks/refresh-share", {"preset": mp.params.name, "rows": rows,
                                          "mask_bits": mask_bits}, [h0, h1])


def combine_refresh(ctx: Any, ciphertext: Any, crs_seed: bytes, shares: Iterable[bytes]
                    ) -> Any:
    """The fresh top-level ciphertext from every party's :func:`refresh_share`.

    ``c0 + sum h0`` is the masked plaintext ``m + sum M_i`` at the old primes; lifted to
    integers (centred) and then to the top level, plus ``sum h1`` and with ``c1 = a``, it
    encrypts ``m`` under the collective key at the old scale with every level back.

    Raises
    ------
    ProtocolError
        If a share is malformed.
    """
    mp = _mp(ctx.params)
    c = _ct_data(mp, ciphertext)
    rows, top = c.shape[1], _top_rows(mp)
    metas: list[dict[str, Any]] = []
    # h0 at `rows` primes and h1 at `top` primes travel in one message: decode by hand
    sums: list[U64] | None = None
    for blob in shares:
        if not isinstance(blob, (bytes, bytearray)):
            raise ProtocolError("invalid mpckks/refresh-share: not bytes")
        msg = wire.decode(bytes(blob), expect="mpckks/refresh-share")
        if msg.meta.get("preset") != ctx.params.name or msg.meta.get("rows") != rows:
            raise ProtocolError("invalid mpckks/refresh-share: for another ciphertext")
        if len(msg.blobs) != 2 or len(msg.blobs[0]) != 8 * rows * mp.n \
                or len(msg.blobs[1]) != 8 * top * mp.n:
            raise ProtocolError("invalid mpckks/refresh-share: wrong sizes")
        h = [mp.check_residues(np.frombuffer(b, dtype="<u8").astype(np.uint64)
                               .reshape(k, mp.n), k, "mpckks/refresh-share")
             for b, k in zip(msg.blobs, (rows, top), strict=True)]
        sums = h if sums is None else [mp.add(x, y) for x, y in zip(sums, h, strict=True)]
        metas.append(dict(msg.meta))
    if sums is None:
        raise ValueError("no refresh shares")
    bits: list[int] = []
    for m_ in metas:
        b = m_.get("mask_bits")
        if not isinstance(b, int) or isinstance(b, bool) or not 1 <= b <= 4096:
            raise ProtocolError("invalid mpckks/refresh-share: mask_bits")
        bits.append(b)
    # the masks' sum must stay below a quarter of the old modulus, or the lift wraps
    total = sum(1 << b for b in bits)
    if 4 * total >= math.prod(mp.primes[:rows]):
        raise ProtocolError("the parties' refresh masks could wrap the ciphertext's modulus; "
                            "use fewer mask bits or refresh from a higher level")
    masked = mp.to_coeffs(mp.add(c[0], sums[0]))  # m + sum M_i + noise, mod Q_old
    primes = mp.primes[:rows]
    big_q = math.prod(primes)
    acc = [0] * mp.n
    for r, q in enumerate(primes):  # CRT, then centre
        qi = big_q // q
        factor = qi * pow(qi, -1, q)
        col = masked[r].tolist()
        acc = [(x + int(v) * factor) % big_q for x, v in zip(acc, col, strict=True)]
    centred = [x - big_q if x > big_q // 2 else x for x in acc]
    c0 = mp.add(_from_big(mp, centred, top), sums[1])
    a = mp.crs(crs_seed, "refresh")[:top]
    from fedsec.crypto.rawpoly import ciphertext_from_polys, ciphertext_polys

    template = ctx.encrypt([0.0], scale=ciphertext.scale)
    header, prefix, layout = ciphertext_polys(template)
    if layout.shape != (2, top, mp.n):  # pragma: no cover - a fresh ciphertext is at the top
        raise RuntimeError("unexpected fresh ciphertext layout")
    return ciphertext_from_polys(ctx, header, prefix, np.stack([c0, a]))
