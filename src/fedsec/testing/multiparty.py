"""Two attacks on multiparty CKKS that the protocols must rule out.

**A rogue key share.** A party that sees the others' public-key shares before sending its
own sends ``p_own - sum of theirs``: the collective key is then ``(p_own, a)``, its own key,
and it decrypts everything alone (:func:`rogue_public_key_share`). Commitments sent before
any share (:func:`fedsec.crypto.multiparty.commit_share`) rule it out.

**A crafted ciphertext.** What a requester learns from a decryption share of a ciphertext
it crafted.

:meth:`fedsec.crypto.multiparty.KeyShare.decryption_share` returns ``c1 s_i + E_i`` with
smudging noise ``|E_i| <= 2^k``. If the requester chose ``c1 = C`` (a constant larger than
``2^(k+1)`` and below ``q/4``), the share is ``C s_i + E_i`` and rounding by ``C`` gives
every coefficient of the key share ``s_i`` exactly. Smudging hides noise, not a crafted
``c1``: this is why a protocol must check that a ciphertext is the agreed computation's
output before any party decrypts it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec.crypto import multiparty
from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.rawpoly import ciphertext_from_polys, ciphertext_polys

__all__ = ["crafted_ciphertext", "key_share_from_decryption_share", "rogue_public_key_share"]


def crafted_ciphertext(ctx: CKKSContext, constant: int) -> Any:
    """A level-0 size-2 ciphertext with ``c0 = 0`` and ``c1`` the constant ``constant``."""
    template = ctx.mod_switch(ctx.encrypt([0.0]), level=0)
    header, prefix, data = ciphertext_polys(template)
    data = np.zeros_like(data)
    data[1] = np.uint64(constant)  # a constant polynomial is constant in NTT form
    return ciphertext_from_polys(ctx, header, prefix, data)


def key_share_from_decryption_share(ctx: CKKSContext, share: bytes, constant: int
                                    ) -> NDArray[np.int64]:
    """The key share's coefficients, from one decryption share of
    :func:`crafted_ciphertext` ``(ctx, constant)``."""
    mp = multiparty._mp(ctx.params)
    (d,) = multiparty._unpack(mp, share, "mpckks/dec-share", 1, 1)
    coeffs = mp.to_coeffs(d)[0].astype(object)
    q = mp.primes[0]
    centred = [int(c) - q if int(c) > q // 2 else int(c) for c in coeffs]
    return np.array([round(c / constant) for c in centred], dtype=np.int64)


def rogue_public_key_share(params: Any, crs_seed: bytes, own: multiparty.KeyShare,
                           others: list[bytes]) -> bytes:
    """The share that makes the collective public key ``own``'s alone: its honest share
    minus every other party's (possible only for a party that sees them first)."""
    mp = multiparty._mp(params)
    mine = multiparty._unpack(mp, own.public_key_share(crs_seed), "mpckks/pk-share",
                              len(mp.primes), 1)[0]
    for share in others:
        theirs = multiparty._unpack(mp, share, "mpckks/pk-share", len(mp.primes), 1)[0]
        mine = mp.sub(mine, theirs)
    return multiparty._pack("mpckks/pk-share", {"preset": params.name}, [mine])


def aggregate_noise_bits(ctx: CKKSContext, shares: list[multiparty.KeyShare]) -> float:
    """``log2`` of the largest coefficient of the noise of secure AUC's aggregate ``Q`` on
    zero statistics - its *data-independent* noise (relinearisation, rotations, the
    encryption noise squared) - under collective keys: one encryption of zeros per share,
    added, squared and summed as the aggregator does, decrypted with the sum of every key
    share (which only a test holds). What threshold AUC's smudging must drown."""
    import math

    from fedsec.auc.fhauc import combine_sums

    mp = multiparty._mp(ctx.params)
    total = None
    for _ in shares:
        ct = ctx.encrypt(np.zeros(ctx.slots))
        total = ct if total is None else ctx.add(total, ct)
    q, _ = combine_sums(ctx, [total])
    c = multiparty._ct_data(mp, q)
    rows = c.shape[1]
    s = shares[0]._s[:rows]
    for k in shares[1:]:
        s = mp.add(s, k._s[:rows])
    m = mp.to_coeffs(mp.add(c[0], mp.mul(c[1], s))[:1])[0].astype(object)
    p = mp.primes[0]
    return math.log2(max(abs(int(v) - p if int(v) > p // 2 else int(v)) for v in m))
