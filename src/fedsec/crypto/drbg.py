"""Cryptographic randomness: local (``os.urandom``) and shared-seed (ChaCha20 DRBG).

Security-relevant values (masks, permutations, random bits, multipliers, noise) come from
these sources only, never from ``random`` or ``numpy.random``.

:class:`SystemRandomSource` draws from the operating system. :class:`SeededRandomSource`
expands a 32-byte shared seed with HKDF-SHA256 into a ChaCha20 key per *label*, so that
every party holding the seed derives the same stream for the same label and independent
streams for different labels (e.g. ``b"fhauc/run-0/masks"``).
"""

from __future__ import annotations

import math
import os

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from numpy.typing import NDArray

__all__ = ["RandomSource", "SystemRandomSource", "SeededRandomSource", "SEED_BYTES"]

SEED_BYTES = 32


class RandomSource:
    """Unbiased integers, floats, bits and permutations from a byte source."""

    def random_bytes(self, n: int) -> bytes:  # pragma: no cover - abstract
        raise NotImplementedError

    def uint64(self, n: int) -> NDArray[np.uint64]:
        """``n`` independent uniform 64-bit unsigned integers."""
        return np.frombuffer(self.random_bytes(8 * n), dtype="<u8").astype(np.uint64)

    def integers(self, low: int, high: int, n: int) -> NDArray[np.int64]:
        """``n`` uniform integers in ``[low, high)`` by rejection sampling (no modulo bias)."""
        span = high - low
        if span <= 0 or span > 1 << 62:
            raise ValueError(f"need 0 < high - low <= 2**62; got [{low}, {high})")
        bits = max(1, math.ceil(math.log2(span)))
        mask = np.uint64((1 << bits) - 1)
        out = np.empty(0, dtype=np.int64)
        while out.size < n:
            need = max(16, 2 * (n - out.size))
            cand = self.uint64(need) & mask
            cand = cand[cand < np.uint64(span)].astype(np.int64)
            out = np.concatenate((out, cand))
        return out[:n] + low

    def integer(self, low: int, high: int) -> int:
        return int(self.integers(low, high, 1)[0])

    def uniform(self, n: int) -> NDArray[np.float64]:
        """``n`` uniform doubles in ``[0, 1)`` with 53 random bits each."""
        return (self.uint64(n) >> np.uint64(11)).astype(np.float64) * (2.0 ** -53)

    def bits(self, n: int) -> NDArray[np.int64]:
        """``n`` uniform random bits as 0/1 integers."""
        raw = np.frombuffer(self.random_bytes((n + 7) // 8), dtype=np.uint8)
        return np.unpackbits(raw, bitorder="little")[:n].astype(np.int64)

    def permutation(self, n: int) -> NDArray[np.int64]:
        """A uniform random permutation of ``range(n)`` (Fisher-Yates)."""
        perm = np.arange(n, dtype=np.int64)
        for i in range(n - 1, 0, -1):
            j = self.integer(0, i + 1)
            perm[i], perm[j] = perm[j], perm[i]
        return perm


class SystemRandomSource(RandomSource):
    """Randomness from the operating system's CSPRNG (``os.urandom``)."""

    def random_bytes(self, n: int) -> bytes:
        return os.urandom(n)


class SeededRandomSource(RandomSource):
    """A deterministic stream derived from a shared seed and a label (ChaCha20).

    Parameters
    ----------
    seed : bytes
        At least 32 bytes of secret shared randomness.
    label : bytes
        Domain separation: different labels give independent streams.
    """

    def __init__(self, seed: bytes, label: bytes) -> None:
        if not isinstance(seed, (bytes, bytearray)) or len(seed) < SEED_BYTES:
            raise ValueError(f"a shared seed must be at least {SEED_BYTES} bytes")
        key = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"fedsec/drbg/v1",
                   info=bytes(label)).derive(bytes(seed))
        self._enc = Cipher(algorithms.ChaCha20(key, b"\x00" * 16), mode=None).encryptor()

    def random_bytes(self, n: int) -> bytes:
        return self._enc.update(b"\x00" * n)
