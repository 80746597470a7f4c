"""Secure aggregation of model updates with pairwise masks (after Bonawitz et al., CCS 2017,
the honest-but-curious variant without dropout recovery).

Each client ``i`` of a round's participant set ``S`` sends ``x_i = enc(v_i) + m_i``
(mod 2^64), where ``enc`` is fixed point with :data:`FRAC_BITS` fractional bits and

    m_i = sum_{j in S, j > i} PRG(k_ij) - sum_{j in S, j < i} PRG(k_ij),

with ``k_ij`` from X25519 between ``i``'s and ``j``'s run keys (:class:`~fedsec.crypto.
sealed.SealKey`, announced signed with the roster identities so that the server cannot
substitute its own) and a label naming the session, round, attempt and pair. The masks
cancel in ``sum_{i in S} x_i``, so the server learns the sum and nothing else about one
``v_i``; a client colluding with the server knows only its own pairwise keys. A client
that drops out leaves its masks uncancelled: the round is then re-run over the survivors
with a new ``attempt`` (fresh, independent masks).

What the sum reveals is what FedAvg reveals: with two participants, each learns the
other's update from the aggregate. Use at least three.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import NDArray

from fedsec.crypto.drbg import SeededRandomSource
from fedsec.crypto.sealed import SealKey
from fedsec.errors import ProtocolError

__all__ = ["FRAC_BITS", "encode_fixed", "decode_fixed", "pair_mask", "masked_update",
           "sum_updates"]

#: Fractional bits of the fixed-point encoding (2^-32 ~ 2.3e-10 resolution).
FRAC_BITS = 32
#: Largest magnitude a coordinate of one update may have (so that a sum of up to
#: 2^16 updates stays below 2^63 in fixed point).
MAX_ABS = float(2 ** (63 - FRAC_BITS - 16))

U64 = NDArray[np.uint64]


def encode_fixed(v: NDArray[np.float64], *, frac_bits: int = FRAC_BITS) -> U64:
    """``round(v * 2^frac_bits)`` as two's-complement ``uint64``; ``ValueError`` if a
    coordinate is not finite or exceeds :data:`MAX_ABS`."""
    v = np.asarray(v, dtype=np.float64).ravel()
    if not np.all(np.isfinite(v)) or (v.size and float(np.max(np.abs(v))) > MAX_ABS):
        raise ValueError(f"a model update must be finite with |coordinates| <= {MAX_ABS:g}")
    return np.rint(v * float(2 ** frac_bits)).astype(np.int64).view(np.uint64)


def decode_fixed(u: U64, *, frac_bits: int = FRAC_BITS) -> NDArray[np.float64]:
    """Inverse of :func:`encode_fixed` (for a sum of encodings, too)."""
    return np.asarray(u, dtype=np.uint64).view(np.int64).astype(np.float64) / float(
        2 ** frac_bits)


def _label(session: bytes, round_index: int, attempt: int, a: str, b: str) -> bytes:
    lo, hi = sorted((a, b))
    return b"|".join([b"fedsec/secagg/v1", session, str(round_index).encode(),
                      str(attempt).encode(), lo.encode(), hi.encode()])


def pair_mask(key: SealKey, peer_public: bytes, me: str, peer: str, *, session: bytes,
              round_index: int, attempt: int, length: int) -> U64:
    """``PRG(k_{me,peer})`` for one round and attempt (the same for both ends)."""
    if me == peer:
        raise ProtocolError("a client has no mask with itself")
    shared = key.agree(peer_public)
    src = SeededRandomSource(shared, _label(session, round_index, attempt, me, peer))
    return src.uint64(length)


def masked_update(v: NDArray[np.float64], key: SealKey, me: str,
                  peers: Mapping[str, bytes], participants: Sequence[str], *,
                  session: bytes, round_index: int, attempt: int) -> U64:
    """``enc(v) + m_me`` over ``participants`` (which must include ``me``; ``peers``
    holds every other participant's announced public key)."""
    if me not in participants or len(set(participants)) != len(participants):
        raise ProtocolError("the participant list must name this client once")
    if len(participants) < 2:
        raise ProtocolError("secure aggregation needs at least two participants")
    x = encode_fixed(v)
    with np.errstate(over="ignore"):
        for other in participants:
            if other == me:
                continue
            if other not in peers:
                raise ProtocolError("no announced key for a participant")
            m = pair_mask(key, peers[other], me, other, session=session,
                          round_index=round_index, attempt=attempt, length=x.size)
            x = x + m if me < other else x - m
    return x


def sum_updates(updates: Sequence[U64]) -> U64:
    """The sum (mod 2^64) of masked updates: every mask cancels when all participants'
    updates are in."""
    if not updates:
        raise ValueError("no update to sum")
    n = updates[0].size
    total = np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for u in updates:
            if u.dtype != np.uint64 or u.size != n:
                raise ProtocolError("masked updates differ in length or type")
            total = total + u
    return total
