"""The principal server's label-recovery attack, on the bytes P receives (SecSV, SecretSV).

P sees, per evaluated batch, what the decrypting client sends it at the last layer and what
A returns, and from the set-up its share of every label and the batch order it chose.
Before the zero test, P reconstructed ``Ŷ − Y`` exactly (Alg. 4, steps 12-14 as the paper
writes them): any non-zero difference ``δ`` confines the label to ``{y : 0 <= y + δ < C}``
-- for two classes it *is* the label -- and intersecting over the coalitions and rounds
pins most labels. Since the zero test P opens ``r·(Ŷ − Y)`` with a fresh uniform non-zero
``r`` unknown to it: 0 where the prediction is right, uniform over the non-zero residues
otherwise.

:class:`Tap` is an :class:`~fedsec.protocol.accounting.Accounting` that keeps the messages
(SecSV's: as an interceptor on its network, :func:`tap_network`);
:func:`p_opened` replays P's arithmetic on them (both message formats: one blob per label
message before, ``(b', g')`` after), :func:`pin_labels` intersects what the values allow.
Used by ``test_attacks_labels.py`` and ``benchmarks/attack_labels.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec.crypto import sharing as sh
from fedsec.protocol import wire
from fedsec.protocol.accounting import Accounting
from fedsec.protocol.binding import context_of
from fedsec.protocol.network import Envelope, Network

#: SecSV's and SecretSV's message kinds under the names of the attack's log
_SHORT = {"secsv/decrypt-all": "decrypt", "secsv/reshare": "share", "secsv/labels": "share",
          "secsv/labels-all": "share", "secsv/label-diff-all": "label-diff",
          "secretsv/reshare": "share", "secretsv/labels": "share"}


class Tap(Accounting):
    """Accounting that keeps every message (sender, receiver, kind, payload) in order."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[str, str, str, bytes]] = []

    def message(self, sender: str, receiver: str, kind: str, payload: bytes) -> bytes:
        self.log.append((sender, receiver, kind, bytes(payload)))
        return super().message(sender, receiver, kind, payload)

    def __call__(self, envs: list[Envelope]) -> None:
        """As a network interceptor: log every message (unchanged)."""
        for e in envs:
            self.message(e.sender, e.recipient, _SHORT.get(e.kind, e.kind.split("/", 1)[-1]),
                         e.payload)

    def network(self) -> Network:
        """A network whose every message this tap keeps (patch a runner's ``Network``)."""
        return tap_network(self)


def tap_network(tap: Tap) -> Network:
    """A network whose every message ``tap`` keeps."""
    net = Network()
    net.intercept(tap)
    return net


def _where(meta: dict[str, Any]) -> tuple[int, int, int]:
    """``(round, coalition, batch)`` of a message's binding context (index =
    ``(coalition, batch, layer)``)."""
    ctx = context_of(meta)
    return ctx.round, ctx.index[0], ctx.index[1]


@dataclass
class Opened:
    """What P opened for one evaluated batch: ``values`` (coalitions × m, centred) on
    ``rows`` (P's sample ids)."""

    rows: NDArray[np.int64]
    values: NDArray[np.int64]
    round: int = -1
    mask: int = -1
    extra: dict[str, Any] = field(default_factory=dict)


def u64(blob: bytes) -> NDArray[np.uint64]:
    return np.frombuffer(blob, dtype="<u8").astype(np.uint64)


def p_opened(log: list[tuple[str, str, str, bytes]], protocol: str, t: int | None = None
             ) -> list[Opened]:
    """Every value P opens at the label step, from the bytes it received (and sent A).

    ``t`` is SecSV's plaintext prime (public); SecretSV's modulus follows from the format
    (``2^64`` before the zero test, the label prime after)."""
    y_p: list[NDArray[np.uint64]] = []
    groups: list[NDArray[np.int64]] = []
    pending: wire.Message | None = None
    active: NDArray[np.bool_] | None = None  # SecSV: the columns P asked to decrypt
    out: list[Opened] = []
    for snd, rcv, kind, payload in log:
        if snd == "P" and kind == "decrypt":
            req = wire.decode(payload)
            if req.kind == "secsv/decrypt" and len(req.blobs) == 2:
                bits = np.unpackbits(np.frombuffer(req.blobs[1], dtype=np.uint8))
                active = bits[:int(req.meta["m"])].astype(bool)
        elif rcv == "P" and kind == "data":
            y_p.append(u64(wire.decode(payload).blobs[1]))
        elif snd == "P" and rcv == "A" and kind == "batches":
            meta = wire.decode(payload).meta
            groups = [np.asarray(b, np.int64) for b in meta.get("batches", meta.get("order"))]
        elif rcv == "P" and kind == "share":
            msg = wire.decode(payload)
            if msg.kind.endswith(("/labels", "/labels-all")):
                pending = msg
        elif rcv == "P" and kind == "label-diff":
            assert pending is not None
            diff = wire.decode(payload)
            rnd, mask, batch = _where(pending.meta)
            rows = groups[batch]
            m = len(rows)
            y = np.concatenate(y_p)[rows]
            if len(pending.blobs) == 1:  # before: P's label share and A's Ŷ'' − Y''
                q = t if protocol == "secsv" else sh.RING64
                assert q is not None
                mine = sh.sub_mod(u64(pending.blobs[0]).reshape(-1, m), y[None, :], q)
            else:  # the zero test: g' + z'' = r·(Ŷ − Y)
                q = t if protocol == "secsv" else sh.LABEL_PRIME
                assert q is not None
                mine = u64(pending.blobs[1]).reshape(-1, m)
            v = sh.add_mod(mine, u64(diff.blobs[0]).reshape(-1, m), q)
            out.append(Opened(rows, sh.centre(v, q), rnd, mask,
                              {"active": active if active is not None and len(active) == m
                               else np.ones(m, dtype=bool)}))
            pending = active = None
    return out


def pin_labels(opened: list[Opened], n_samples: int, n_classes: int,
               y_true: NDArray[np.int64]) -> dict[str, Any]:
    """Intersect, per sample, the labels every opened value allows (``δ = ŷ − y`` with
    ``|δ| < C`` confines ``y`` to ``[max(0, −δ), min(C, C − δ))``; a value outside
    ``(−C, C)`` allows every label). Returns counts of samples pinned to one label (and
    how many of those are right), narrowed (fewer than ``C`` candidates) and the values
    P saw for wrong and right predictions."""
    lo = np.zeros(n_samples, dtype=np.int64)
    hi = np.full(n_samples, n_classes, dtype=np.int64)
    zeros = nonzero = small = 0
    for o in opened:
        for row in o.values:
            d = row.astype(np.int64)
            inside = (np.abs(d) < n_classes) & (d != 0)
            r = o.rows[inside]
            lo[r] = np.maximum(lo[r], -d[inside])
            hi[r] = np.minimum(hi[r], n_classes - d[inside])
            zeros += int((row == 0).sum())
            nonzero += int((row != 0).sum())
            small += int(inside.sum())
    width = hi - lo
    pinned = width == 1
    return {"samples": n_samples, "classes": n_classes, "evaluated_values": zeros + nonzero,
            "zero_values": zeros, "nonzero_values": nonzero,
            "values_inside_class_range": small, "pinned": int(pinned.sum()),
            "pinned_right": int((pinned & (lo == y_true)).sum()),
            "narrowed": int(((width < n_classes) & ~pinned).sum())}


# ---------------------------------------------------------------------- HESV
def curious_hesv_client(base: type, seen: list[tuple[int, int, int, NDArray[Any]]]
                        ) -> type:
    """A subclass of ``HESVClient`` that, before answering a correctness request, keeps
    what it decrypts: ``(owner, batch, batch size, values)`` (an honest-but-curious
    decryptor ``i_{L+2}``)."""

    class Curious(base):  # type: ignore[misc, valid-type]
        def count(self, request: bytes) -> bytes:
            out = super().count(request)  # the client's own checks first
            msg = wire.decode(request)
            m = int(msg.meta["m"])
            _mask, owner, batch, _layer = context_of(msg.meta).index
            ctx = self._ctx  # its own key: a subclass of the role
            vals = ctx.decrypt(ctx.deserialize(msg.blobs[0]))[:m]  # complex
            seen.append((owner, batch, self._batch, np.asarray(vals)))
            return out

    return Curious


def hesv_opened(seen: list[tuple[int, int, int, NDArray[Any]]],
                sizes: list[int], bits: bool) -> list[Opened]:
    """The decryptor's values as P-style :class:`Opened` rows on the pooled sample ids.
    Before the change the values are ``Y − Ŷ`` (kept, negated to ``Ŷ − Y``); since, they
    are correctness bits, which allow every label (kept as 0 -- nothing to intersect)."""
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    out = []
    for owner, batch, width, vals in seen:
        rows = offsets[owner] + batch * width + np.arange(len(vals))
        v = np.rint(vals.real).astype(np.int64)
        out.append(Opened(rows, (np.zeros_like(v) if bits else -v)[None, :],
                          extra={"raw": vals}))
    return out
