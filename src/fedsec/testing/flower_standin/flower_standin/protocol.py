"""A toy two-step bytes protocol standing in for fedsec's secure-AUC roles.

It has the same shape as the real protocols (roles exchanging opaque ``bytes``)
but NO security: the pairwise masks are derived from public "hello" nonces, so
the aggregator could remove them. It only exists to exercise transport.

Step 1: every party sends ``hello()`` (a random nonce plus ``pad`` filler bytes).
Step 2: every party receives all hellos and sends ``respond(hellos)``: its secret
        plus a mask, modulo 2**64, and a digest of the hellos it saw.
Combine: the masks cancel, the aggregator sums the responses to the sum of the
        secrets and checks that every party saw the same hellos.
"""

from __future__ import annotations

import hashlib
import secrets
import struct

MOD = 2**64
NONCE_LEN = 32


def _pair_mask(a: bytes, b: bytes) -> int:
    lo, hi = sorted((a, b))
    return int.from_bytes(hashlib.sha256(b"mask" + lo + hi).digest()[:8], "big")


def _digest(hellos: list[bytes]) -> bytes:
    h = hashlib.sha256()
    for x in hellos:
        h.update(struct.pack(">Q", len(x)))
        h.update(x)
    return h.digest()


class StandinParty:
    """One node's role. ``secret`` never leaves the node in clear."""

    def __init__(self, secret: int, pad: int = 0, nonce: bytes | None = None) -> None:
        self.secret = int(secret)
        self.pad = int(pad)
        self.nonce = nonce if nonce is not None else secrets.token_bytes(NONCE_LEN)

    def hello(self) -> bytes:
        return self.nonce + secrets.token_bytes(self.pad)

    def respond(self, hellos: list[bytes]) -> bytes:
        mine = [h[:NONCE_LEN] for h in hellos]
        if mine.count(self.nonce) != 1:
            raise ValueError("own hello missing from the hello list")
        mask = 0
        for other in mine:
            if other == self.nonce:
                continue
            m = _pair_mask(self.nonce, other)
            mask += m if self.nonce < other else -m
        value = (self.secret + mask) % MOD
        return struct.pack(">Q", value) + _digest(hellos)


class StandinAggregator:
    """The server's role."""

    def combine(self, hellos: list[bytes], responses: list[bytes]) -> int:
        expected = _digest(hellos)
        total = 0
        for r in responses:
            if len(r) != 8 + 32 or r[8:] != expected:
                raise ValueError("a party saw a different hello list")
            total += struct.unpack(">Q", r[:8])[0]
        total %= MOD
        return total - MOD if total >= MOD // 2 else total
