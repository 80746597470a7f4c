"""A deviating aggregator for exact mode's refinement rounds (:mod:`fedsec.auc.exact`).

:class:`RefinementForger` is a network interceptor: it records each round's submissions
(``fhauc-exact/bins``) and replaces the aggregator's answer (``fhauc-exact/pairs``) of the
chosen rounds by another function of the submissions, under the honest answer's header
(so only the ciphertexts differ). It holds what the aggregator holds -- the submissions'
bytes and the public BFV parameters -- and nothing else. The forgeries:

* ``one-party``: the victim's positives times its negatives (the oracle a review found: the
  next grid would show which bins hold the victim's pairs);
* ``one-party-pos``: the victim's positives squared ("which bins hold its positives");
* ``pos-only`` / ``neg-only``: the pooled positives (negatives) squared;
* ``subset``: the honest function over every party but the victim;
* ``swap-chunks``: the honest answer with its first two ciphertexts swapped;
* ``replay``: the previous round's honest answer under this round's header.

Each forged answer is masked slot-wise by fresh non-zero residues like the honest one and
switched to the answer's level, so it is well formed; ``forged`` keeps its ciphertexts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedsec.auc.exact import EXACT_BFV
from fedsec.crypto.bfv import BFVContext
from fedsec.crypto.drbg import SystemRandomSource
from fedsec.protocol import wire
from fedsec.protocol.network import Envelope

__all__ = ["FORGERIES", "RefinementForger"]

FORGERIES = ("one-party", "one-party-pos", "pos-only", "neg-only", "subset", "swap-chunks",
             "replay")


class RefinementForger:
    """Answer refinement rounds ``rounds`` (0-based) with the forgery ``how`` (one of
    :data:`FORGERIES`) aimed at party ``victim``; other rounds pass unchanged."""

    def __init__(self, how: str, *, victim: int = 0, rounds: Sequence[int] = (0,)) -> None:
        if how not in FORGERIES:
            raise ValueError(f"unknown forgery {how!r}")
        self.how = how
        self.victim = victim
        self.rounds = tuple(rounds)
        self.forged: list[list[bytes]] = []
        self._bfv = BFVContext(EXACT_BFV)
        self._subs: dict[int, list[bytes]] = {}
        self._prev: list[bytes] | None = None
        self._round = -1

    def __call__(self, envs: list[Envelope]) -> list[Envelope] | None:
        if not envs:
            return None
        kind = envs[0].kind
        if kind == "fhauc-exact/bins":
            self._subs = {}
            for e in envs:
                msg = wire.decode(e.payload)
                self._subs[int(msg.meta["party"])] = list(msg.blobs)
            return None
        if kind != "fhauc-exact/pairs":
            return None
        msg = wire.decode(envs[0].payload)
        self._round += 1
        honest = list(msg.blobs)
        if self._round not in self.rounds:
            self._prev = honest
            return None
        blobs = self._forge(honest)
        self._prev = honest
        self.forged.append(blobs)
        payload = wire.encode("fhauc-exact/pairs", msg.meta, blobs)
        return [e.with_payload(payload) for e in envs]

    # ------------------------------------------------------------------ forgeries
    def _cts(self, party: int, c: int) -> tuple[Any, Any]:
        b = self._subs[party]
        return self._bfv.deserialize(b[2 * c]), self._bfv.deserialize(b[2 * c + 1])

    def _sum(self, parties: Sequence[int], c: int) -> tuple[Any, Any]:
        pairs = [self._cts(m, c) for m in parties]
        return (self._bfv.add_many([p for p, _ in pairs]),
                self._bfv.add_many([n for _, n in pairs]))

    def _finish(self, prod: Any) -> bytes:
        bfv = self._bfv
        r = SystemRandomSource().integers(1, bfv.t, bfv.slots).astype(np.uint64)
        return bfv.serialize(bfv.mod_switch_down(bfv.multiply_plain(prod, bfv.encode(r))))

    def _forge(self, honest: list[bytes]) -> list[bytes]:
        if self.how == "swap-chunks":
            if len(honest) < 2:
                raise ValueError("swap-chunks needs a round of two or more ciphertexts")
            return [honest[1], honest[0], *honest[2:]]
        if self.how == "replay":
            if self._prev is None:
                raise ValueError("replay needs an earlier round")
            return list(self._prev)
        bfv, out = self._bfv, []
        everyone = sorted(self._subs)
        for c in range(len(honest)):
            if self.how == "one-party":
                p, n = self._cts(self.victim, c)
            elif self.how == "one-party-pos":
                p, _ = self._cts(self.victim, c)
                n = p
            elif self.how == "subset":
                p, n = self._sum([m for m in everyone if m != self.victim], c)
            else:
                p, n = self._sum(everyone, c)
                if self.how == "pos-only":
                    n = p
                else:  # neg-only
                    p = n
            out.append(self._finish(bfv.multiply(p, n)))
        return out
