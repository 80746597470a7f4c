"""SecSV's auxiliary server A (Xia et al., Alg. 4 steps 4-6 and 12; Alg. 5 on A's share).

A holds the other additive share of the test data and labels and the same encrypted
models as P. Per evaluation that P announces (``secsv/eval``) it computes the encrypted
products of the coalition's model with its share of each layer's input (``secsv/product``
for P; with the linearity shortcut, one product per model and batch, ``lin/<key>``), takes
the decrypting client's re-share of every layer's output, and at the last layer answers
the zero test: from the client's ``(r, b'', g'')`` and P's ``f' = Y' − b'`` its share
``z'' = g'' − r·(Y − b)`` of ``r·(Ŷ − Y)`` (``secsv/label-diff``). A learns ciphertexts,
uniform shares, the multipliers ``r`` and ``Y − b`` (uniform to it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec.crypto import sharing as sh
from fedsec.crypto.bfv import BFVContext
from fedsec.errors import ProtocolError
from fedsec.learning.model import ModelSpec
from fedsec.protocol import fields, wire
from fedsec.protocol.binding import RE, ReplayRefused, context_of, request_id
from fedsec.protocol.roles import receives
from fedsec.shapley.secsv.common import ALL, EV, MAX_DERIVED, U64, SecSVConfig, parse_plan, u64
from fedsec.shapley.secsv.server import Evaluation, Merge, RoundInfo, ServerBase, rows_list

__all__ = ["AuxiliaryServer"]


class AuxiliaryServer(ServerBase):
    """Server A: computes its share's products and label differences for P.

    A takes its batches from P's announcement (:meth:`receive_batches`) and each
    evaluation from P's ``secsv/eval`` message (:meth:`open_eval`: this session and
    round, a fresh evaluation id, a batch it knows); it accepts one re-share per layer and
    then the label share of that evaluation only, and binds every product and label
    difference it sends P to the evaluation (:mod:`fedsec.protocol.binding`)."""

    name = "A"

    def __init__(self, bfv: BFVContext, spec: ModelSpec, n: int, config: SecSVConfig,
                 rounds: Sequence[RoundInfo], *, session: str,
                 linear_shortcut: bool = True) -> None:
        super().__init__(bfv, spec, n, config, rounds, session=session)
        self._shortcut = linear_shortcut
        self._batches: list[NDArray[np.int64]] = []
        self._evals_seen: set[str] = set()
        self._lin_sent: set[tuple[int, str, int]] = set()  # (round, model, batch)

    def end_round(self, t: int) -> None:
        super().end_round(t)
        self._lin_sent.clear()

    @receives("secsv/plan")
    def receive_plan(self, data: bytes) -> None:
        """P's plan (the same the clients get)."""
        msg = wire.decode(data, expect="secsv/plan", max_bytes=1 << 16)
        self._b.check(msg.meta, step="plan", sender="P", broadcast=True, what="plan")
        self._plan = parse_plan(msg.meta, self._spec, self._bfv.slots)

    @receives("secsv/batches")
    def receive_batches(self, data: bytes) -> None:
        """P's batch composition: sample ids per batch, every sample exactly once."""
        with self.clock("other"):
            self._receive_batches(data)

    def _receive_batches(self, data: bytes) -> None:
        msg = wire.decode(data, expect="secsv/batches", max_bytes=1 << 28)
        self._b.check(msg.meta, step="batches", sender="P", what="batch list")
        lists = msg.meta.get("batches")
        n_samples = len(self._y)
        if not isinstance(lists, list) or not 1 <= len(lists) <= n_samples:
            raise ProtocolError("malformed batch list")
        batches = [rows_list(b, n_samples, self.plan.width) for b in lists]
        every = np.concatenate(batches)
        if len(every) != n_samples or len(np.unique(every)) != n_samples:
            raise ProtocolError("the batches must hold every sample exactly once")
        self._batches = batches

    # ------------------------------------------------------------- Alg. 4, steps 4-6
    @receives("secsv/eval")
    def open_eval(self, data: bytes) -> None:
        """Start an evaluation P announces (its context and id; the rows of a re-packed
        batch under SampleSkip, a subset of one announced batch group)."""
        msg = wire.decode(data, expect="secsv/eval", max_bytes=1 << 24)
        got = context_of(msg.meta)
        ctx = self._b.check(msg.meta, step="eval", sender="P", round=self._round,
                            index=None, what="evaluation")
        if len(got.index) != 3 or got.index[2] != -1:
            raise ProtocolError("malformed evaluation: context")
        ev = request_id(msg.meta)
        if ev in self._evals_seen:
            raise ReplayRefused("evaluation id already used (a replayed evaluation)",
                                check="request-id")
        mask, batch = ctx.index[0], ctx.index[1]
        if ctx.round < 0 or mask < 0 or batch < 0:
            raise ProtocolError("malformed evaluation: context")
        nb = len(self._batches)
        rows_meta = msg.meta.get("rows")
        sources = msg.meta.get("sources")
        merge = None
        if batch < nb and rows_meta is None and sources is None:
            rows = self._batches[batch]
        elif batch >= nb and rows_meta is not None and sources is None:
            rows = rows_list(rows_meta, len(self._y), self.plan.width)
        elif batch >= nb and rows_meta is None and sources is not None and self._shortcut:
            merge = Merge.of(self._sources(sources), self._batches, batch)
            batch, rows = merge.sources[0][0], merge.fixed_rows[0]
        else:
            raise ProtocolError("malformed evaluation: batch")
        self._evals_seen.add(ev)
        self._eval = Evaluation(ctx.round, mask, batch, ev, rows, merge=merge)
        self._eval.x = self._x[rows].T.copy()  # A's share of the first layer's input

    def _sources(self, value: Any) -> list[tuple[int, NDArray[np.int64]]]:
        """A merged evaluation's fixed batches and their tested columns: two or more
        distinct fixed batches, each with distinct columns, at most a batch width of
        samples in all (``ProtocolError`` otherwise)."""
        nb, width = len(self._batches), self.plan.width
        if not isinstance(value, list) or not 2 <= len(value) <= width:
            raise ProtocolError("malformed evaluation: sources")
        out = []
        for item in value:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], int)
                    and not isinstance(item[0], bool) and 0 <= item[0] < nb):
                raise ProtocolError("malformed evaluation: sources")
            cols = rows_list(item[1], len(self._batches[item[0]]), width)
            out.append((item[0], cols))
        if len({bi for bi, _c in out}) != len(out) or sum(len(c) for _b, c in out) > width:
            raise ProtocolError("malformed evaluation: sources")
        return out

    def products(self) -> list[bytes]:
        """A's encrypted share products for the layer in flight, for P: the coalition's
        (aggregated) model times A's share of the layer's input; on the first layer with
        the linearity shortcut, one product per model of the coalition (every model of the
        round for a derived evaluation) that A has not sent for this batch yet."""
        ev = self._need_eval()
        layer, t = ev.layer, ev.round
        nb = len(self._batches)
        out = []
        with self.clock("arithmetic"):
            if layer == 0 and self._shortcut and ev.batch < nb:
                info = self._rounds[t]
                keys = (["global"] + [f"c{c}" for c in info.participants]
                        if ev.mask == ALL else info.keys_weights(ev.mask)[0])
                for k in keys:
                    if (t, k, ev.batch) in self._lin_sent:
                        continue
                    ct = self.product(self._models[(t, k)].layers[0], 0, ev.x,
                                      (0, ev.batch), False)
                    self._lin_sent.add((t, k, ev.batch))
                    out.append(self._product_message(ct, ev, f"lin/{k}"))
            else:
                keys, q, _owners = self._rounds[t].keys_weights(ev.mask)
                model = self.aggregated(t, keys, q, layer, ev.mask)
                ck = (0, ev.batch) if layer == 0 and ev.batch < nb else None
                ct = self.product(model, layer, ev.x, ck, False)
                out.append(self._product_message(ct, ev, "product"))
        return out

    def _product_message(self, ct: Any, ev: Evaluation, step: str) -> bytes:
        """An encrypted share product for P, bound to the evaluation and layer."""
        return wire.encode("secsv/product", self._b.bind(
            {}, step=step, to="P", round=ev.round, index=ev.index(ev.layer), re_=ev.ev),
            [self._bfv.serialize(ct, ntt=True)])

    # ------------------------------------------------------------- Alg. 4, steps 8-9
    def _share(self, data: bytes, kind: str, shape: tuple[int, ...], n_blobs: int = 1
               ) -> tuple[U64, wire.Message]:
        ev = self._need_eval()
        msg = wire.decode(data, expect=kind, max_bytes=1 << 28)
        got = context_of(msg.meta)  # A does not know who decrypts: a client, P's choice
        if not got.sender.startswith("client:"):
            raise ReplayRefused(f"{kind} from another sender", check="sender")
        self._b.check(msg.meta, step=kind.split("/", 1)[1], sender=got.sender,
                      round=ev.round, index=ev.index(ev.layer), what=kind)
        if request_id(msg.meta, EV) != ev.ev:
            raise ReplayRefused(f"{kind} of another evaluation", check="request-id")
        if got.index[2] != ev.layer:
            raise ReplayRefused(f"{kind} out of order (a duplicate or a replay)",
                                check="layer")
        if len(msg.blobs) != n_blobs or fields.integer(msg.meta, "m", 1, shape[-1]) \
                != shape[-1]:
            raise ProtocolError(f"malformed {kind}")
        x = u64(msg.blobs[0], shape, kind)
        if x.size and int(x.max()) >= self._bfv.t:
            raise ProtocolError("share out of range")
        ev.layer += 1
        return x, msg

    @receives("secsv/reshare")
    def receive_share(self, data: bytes) -> None:
        """The decrypting client's re-share of the layer's activated output: A's share
        of the next layer's input."""
        ev = self._need_eval()
        d = self.plan.layers[ev.layer].d_out if ev.layer < len(self.plan.layers) else 0
        x, msg = self._share(data, "secsv/reshare", (d, len(ev.rows)))
        if ev.merge is not None and ev.layer == 1:  # a merged evaluation's first layer
            ev.layer = 0
            ev.take_first_layer(x, fields.integer(msg.meta, "bound", 1, self._bfv.t // 2),
                                self._x)
            return
        ev.x = x

    # ------------------------------------------------------------- Alg. 4, step 12
    @receives("secsv/labels", "secsv/label-mask")
    def label_diff(self, data: bytes, mask_p: bytes) -> bytes:
        """Alg. 4, step 12, as a zero test (:func:`fedsec.crypto.sharing.zero_test_deal`):
        from the client's ``(r, b'', g'')`` and P's ``f' = Y' − b'``, A's share
        ``z'' = g'' − r·(Y − b)`` of ``r·(Ŷ − Y)`` for P -- never ``Ŷ'' − Y''``, which
        would give P the exact error (and, with it, the label)."""
        m = len(self._need_eval().rows)
        return self._zero_test(data, mask_p, "secsv/labels", (m,), "secsv/label-diff")

    @receives("secsv/labels-all")
    def label_diff_all(self, data: bytes, mask_p: bytes) -> bytes:
        """Derived evaluation: A's zero-test shares of ``r_S·(Ŷ_S − Y)`` for every
        coalition ``S`` of the round (the client's ``2^k × m`` table; ``k`` = this
        round's participants)."""
        ev = self._need_eval()
        if ev.mask != ALL:
            raise ProtocolError("all-coalition labels outside a derived evaluation")
        k = len(self._rounds[ev.round].participants)
        peek = wire.decode(data, expect="secsv/labels-all", max_bytes=1 << 28)
        if fields.integer(peek.meta, "coalitions", 1, 1 << MAX_DERIVED) != 1 << k:
            raise ProtocolError("malformed secsv/labels-all: coalitions")
        return self._zero_test(data, mask_p, "secsv/labels-all", (1 << k, len(ev.rows)),
                               "secsv/label-diff-all")

    def _zero_test(self, data: bytes, mask_p: bytes, kind: str, shape: tuple[int, ...],
                   out_kind: str) -> bytes:
        t, m = self._bfv.t, shape[-1]
        ev = self._need_eval()
        layer = ev.layer
        with self.clock("arithmetic"):
            r, msg = self._share(data, kind, shape, n_blobs=3)
            pm = wire.decode(mask_p, expect="secsv/label-mask", max_bytes=1 << 26)
            self._b.check(pm.meta, step="label-mask", sender="P", round=ev.round,
                          index=ev.index(layer), what="label mask")
            if request_id(pm.meta, RE) != ev.ev:
                raise ReplayRefused("label mask of another evaluation", check="request-id")
            if len(pm.blobs) != 1 or fields.integer(pm.meta, "m", 1, m) != m:
                raise ProtocolError("malformed secsv/label-mask message")
            f_p = u64(pm.blobs[0], (m,), "label mask")
            b_a = u64(msg.blobs[1], (m,), "label mask share")
            g_a = u64(msg.blobs[2], shape, "label share")
            if r.size and (int(r.min()) == 0 or max(int(f_p.max()), int(b_a.max()),
                                                    int(g_a.max())) >= t):
                raise ProtocolError("label shares out of range (or a zero multiplier)")
            z_a = sh.zero_test_respond(f_p, self._y[ev.rows], r, b_a, g_a, t)
            self._eval = None
        meta: dict[str, Any] = {"m": m} if len(shape) == 1 else {"m": m,
                                                                  "coalitions": shape[0]}
        return wire.encode(out_kind, self._b.bind(
            meta, step=out_kind.split("/", 1)[1], to="P", round=ev.round,
            index=ev.index(layer), re_=ev.ev), [z_a.tobytes()])
