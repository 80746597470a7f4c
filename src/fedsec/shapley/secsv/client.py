"""SecSV's client (Xia et al., Alg. 3 step 3; Alg. 4 steps 7-11): encrypts its models,
shares its test data between P and A, and decrypts, checks, activates and re-shares a
layer's output when P asks it (or deals the zero test of its predicted labels after the
last layer). It keeps its own memory of what it decrypted and refuses a request that
breaks the decryption rule (:mod:`fedsec.shapley.views`) or, under ``schedule="paper"``,
Prop. 6.8 (see :mod:`fedsec.shapley.secsv`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec.crypto import reducing as rd
from fedsec.crypto import sharing as sh
from fedsec.crypto.bfv import BFVContext
from fedsec.crypto.drbg import SystemRandomSource
from fedsec.errors import PolicyViolation, ProtocolError
from fedsec.learning.model import ModelSpec, Params, activate
from fedsec.protocol import fields, wire
from fedsec.protocol.accounting import Clock
from fedsec.protocol.binding import (
    BROADCAST,
    RID,
    Answered,
    Binding,
    Context,
    ReplayRefused,
    context_of,
    request_id,
)
from fedsec.protocol.roles import receives
from fedsec.shapley import fixed_point as fp
from fedsec.shapley.secsv.common import (
    ALL,
    DERIVED_BLOCK,
    EV,
    MAX_DERIVED,
    MAX_DERIVED_LABELS,
    PROTOCOL,
    U64,
    LayerPlan,
    Plan,
    SecSVConfig,
    grid_to_features,
    model_layers,
    model_rows,
    parse_plan,
    pow2_ceil,
)
from fedsec.shapley.secure_game import check_decryptor
from fedsec.shapley.views import ClientView

__all__ = ["SecSVClient"]


class SecSVClient:
    """Client ``index`` (role ``client:<index>``): holds the BFV keys, its test set and
    its local models; its state is its own (private)."""

    def __init__(self, index: int, n: int, bfv: BFVContext, x: NDArray[np.float64],
                 y: NDArray[np.int64], spec: ModelSpec, config: SecSVConfig, *,
                 session: str, view: ClientView | None = None) -> None:
        self._index, self._n = index, n
        self._name = f"client:{index}"
        #: this client's own time by kind of work
        self.clock = Clock()
        #: this client's own view of the run under the decryption rule
        #: (:mod:`fedsec.shapley.views`); None under the paper's Prop. 6.8 schedule
        self._view = view
        self._bfv = bfv
        self._x, self._y = x, y
        self._spec = spec
        self._cfg = config
        self._b = Binding(session, PROTOCOL, self._name)
        self._plan: Plan | None = None
        self._rng = SystemRandomSource()
        self._answered = Answered()  # decryption request ids answered (once each)
        self._seen: dict[tuple[int, int, int], set[int]] = {}  # layers decrypted per eval
        self._round = 0  # the newest round served: rounds are evaluated in order

    @property
    def index(self) -> int:
        return self._index

    @property
    def name(self) -> str:
        """The client's role name, ``client:<index>``."""
        return self._name

    @receives("secsv/plan")
    def receive_plan(self, data: bytes) -> None:
        """P's plan: batch width, per-layer folds, fixed point (checked against the
        model and the ring)."""
        msg = wire.decode(data, expect="secsv/plan", max_bytes=1 << 16)
        self._b.check(msg.meta, step="plan", sender="P", broadcast=True, what="plan")
        self._plan = parse_plan(msg.meta, self._spec, self._bfv.slots)

    def _need_plan(self) -> Plan:
        if self._plan is None:
            raise ProtocolError("no plan received")
        return self._plan

    def coarse_bounds(self, models: Sequence[tuple[int, str, Params]],
                      known: Sequence[tuple[int, Params]] = ()) -> bytes:
        """Powers of two bounding ``|X_i|``, each model's ``‖W‖_∞`` (max row ℓ1) and
        ``‖b‖_∞`` per layer, and the largest input of each hidden layer when the models it
        holds (``models``, plus ``known``: ``(round, params)`` of models it may run but does
        not upload, e.g. the public global models) run on its own test data (exponents
        only), from which P picks the fixed point (:mod:`fedsec.shapley.fixed_point`)."""
        pub = fp.publish(self._spec, models, known, self._x)
        return wire.encode("secsv/bounds", self._b.bind(
            {"client": self._index, **pub},
            step="bounds", to="P"))

    # ------------------------------------------------------------- Alg. 3, step 3
    def encrypt_model(self, round_: int, key: str, params: Params) -> bytes:
        """Encrypt one model (every layer: folded diagonals and bias) with its bounds, for
        both servers alike."""
        plan = self._need_plan()
        bfv = self._bfv
        t = bfv.t
        blobs: list[bytes] = []
        bounds = []
        for (w, b, _act), lp, fm, fx in zip(model_layers(self._spec, params), plan.layers,
                                            plan.frac_models, plan.frac_inputs, strict=True):
            wq = np.rint(np.ldexp(w, fm)).astype(np.int64)
            bq = np.rint(np.ldexp(b, fm + fx)).astype(np.int64)
            beta = int(np.abs(wq).sum(axis=1).max())
            gamma = int(np.abs(bq).max()) if bq.size else 0
            if max(beta, gamma) >= t // 2:
                raise sh.FixedPointOverflow("model weights exceed the fixed-point budget")
            bounds.append([pow2_ceil(beta), pow2_ceil(gamma)])
            cols = lp.cols(plan.width)
            rows = model_rows(sh.to_residues(wq, t), lp, plan.width, bfv.slots)
            bias = np.zeros(bfv.slots, dtype=np.uint64)
            bias[:lp.rows * cols] = rd.bias_grid(sh.to_residues(bq, t), cols)
            with self.clock("encryption"):
                blobs.extend(bfv.serialize(bfv.encrypt(r), ntt=True) for r in rows)
                blobs.append(bfv.serialize(bfv.encrypt(bias), ntt=True))
        return wire.encode("secsv/model", self._b.bind(
            {"round": round_, "key": key, "owner": self._index, "bounds": bounds},
            step="model", to=BROADCAST, round=round_), blobs)

    def share_data(self) -> tuple[bytes, bytes]:
        """Alg. 3, step 3: shares of ``(X_i, y_i)`` for P and A, with a power-of-two bound
        on ``|X_i|``."""
        t, fx = self._bfv.t, self._need_plan().frac_inputs[0]
        xq = sh.encode_fixed(self._x, fx, t)
        bound = pow2_ceil(float(np.abs(sh.centre(xq, t)).max())) if self._x.size else 1
        with self.clock("share_generation"):
            x1, x2 = sh.share(xq, t, self._rng)
            y1, y2 = sh.share(self._y.astype(np.uint64), t, self._rng)
        meta = {"client": self._index, "rows": int(self._x.shape[0]),
                "cols": int(self._x.shape[1]), "bound": bound}
        return (wire.encode("secsv/data", self._b.bind(meta, step="data", to="P"),
                            [x1.tobytes(), y1.tobytes()]),
                wire.encode("secsv/data", self._b.bind(meta, step="data", to="A"),
                            [x2.tobytes(), y2.tobytes()]))

    def _answer(self, kind: str, meta: dict[str, Any], ctx: Context, rid: str,
                blobs_p: Sequence[bytes], blobs_a: Sequence[bytes]) -> tuple[bytes, bytes]:
        """The answer to P's request ``ctx``: P's copy and A's copy."""
        step = kind.split("/", 1)[1]

        def copy(to: str, blobs: Sequence[bytes]) -> bytes:
            return wire.encode(kind, self._b.bind(meta, step=step, to=to, round=ctx.round,
                                                  index=ctx.index, re_=rid), blobs)

        return copy("P", blobs_p), copy("A", blobs_a)

    def _request(self, meta: Mapping[str, Any], step: str, what: str) -> Context:
        """The context of P's request: this session, from P to this client, at a
        ``(coalition, batch, layer)`` index with non-negative round, coalition and
        batch."""
        ctx = self._b.check(meta, step=step, sender="P", round=context_of(meta).round,
                            index=None, what=what)
        if len(ctx.index) != 3 or min(ctx.round, ctx.index[0], ctx.index[1]) < 0:
            raise ProtocolError(f"malformed {what}: context")
        return ctx

    def _fresh(self, meta: dict[str, Any], ctx: Context) -> tuple[str, str]:
        """The request and evaluation ids of a decryption request this client may still
        answer: not of a round earlier than one it served, not answered before."""
        rid, ev = request_id(meta, RID), request_id(meta, EV)
        if ctx.round < self._round:
            raise ReplayRefused("decryption request of an earlier round (a replay)",
                                check="round")
        if rid in self._answered:
            raise ReplayRefused("decryption request was already answered (a replay)",
                                check="request-id")
        return rid, ev

    def _features(self, ct: Any, lp: LayerPlan, width: int, m: int) -> NDArray[np.int64]:
        """Decrypt a layer's product: the folded segments summed mod ``t``, the grid read
        back as the layer's ``d_out × m`` output, centred."""
        with self.clock("decryption"):
            slots = self._bfv.decrypt(ct)
        with self.clock("other"):
            t = self._bfv.t
            seg = lp.d_out * width
            parts = slots[:lp.fold * seg].reshape(lp.fold, seg)
            total = parts[0].copy()
            for p in parts[1:]:
                total = sh.add_mod(total, p, t)
            grid = rd.read_grid(total, lp.rows, lp.cols(width), lp.per * m)
            return sh.centre(grid_to_features(grid, lp, m), t)

    # ------------------------------------------------------------- Alg. 4, steps 7-11
    def _owner_local(self, meta: dict[str, Any], t: int, mask: int) -> bool:
        """A model this client knows on its own samples only (it learns nothing)."""
        if self._view is None:
            return False
        return meta.get("batch_owners") == [self._index] and self._view.knows(
            self._view.requested(t, mask))

    @staticmethod
    def _sources(meta: Mapping[str, Any], layer: int) -> list[int]:
        """The fixed batches a merged evaluation's later layer packs (none otherwise)."""
        value = meta.get("sources")
        if value is None:
            return []
        if layer == 0 or not (isinstance(value, list) and 2 <= len(value) <= 1 << 20
                              and all(isinstance(v, int) and not isinstance(v, bool)
                                      and 0 <= v < 1 << 40 for v in value)):
            raise ProtocolError("malformed decryption request: sources")
        return [int(v) for v in value]

    @receives("secsv/decrypt")
    def decrypt_layer(self, data: bytes) -> tuple[bytes, bytes]:
        """Decrypt a layer's output, check, activate and re-share (or share labels).

        The request must be of this session, for the layer it names, with a fresh request
        id (each is answered once); this client refuses a layer of an evaluation (round,
        coalition, batch) of which it decrypted the same or an adjacent layer, from its
        own memory -- not from P's ``previous`` claim alone -- and a request of a round
        earlier than one it served (rounds are evaluated in order within a session)."""
        plan = self._need_plan()
        msg = wire.decode(data, expect="secsv/decrypt", max_bytes=1 << 24)
        meta = msg.meta
        n_layers = len(plan.layers)
        layer = fields.integer(meta, "layer", 0, n_layers - 1)
        ctx = self._request(meta, "decrypt", "decryption request")
        mask, batch = ctx.index[0], ctx.index[1]
        if ctx.index[2] != layer:
            raise ReplayRefused("decryption request of another layer (a replay or a splice)",
                                check="index")
        rid, ev = self._fresh(meta, ctx)
        key = (ctx.round, mask, batch)
        seen = self._seen.get(key, set())
        if layer in seen:
            raise ReplayRefused("this layer of the evaluation was already decrypted here "
                                "(a replay)", check="layer")
        if {layer - 1, layer + 1} & seen and not self._owner_local(meta, ctx.round, mask):
            raise ProtocolError("refusing to decrypt two consecutive layers (i_{l+1} = i_l; "
                                "this client decrypted an adjacent layer)")
        sources = self._sources(meta, layer)
        for src in sources:  # a merged evaluation: its first layer's fixed batches
            if {layer - 1, layer, layer + 1} & self._seen.get((ctx.round, mask, src), set()):
                raise ProtocolError("refusing to decrypt a layer adjacent to one this client "
                                    "decrypted on the same samples (a merged batch)")
        lp = plan.layers[layer]
        m = fields.integer(meta, "m", 1, plan.width)
        owners = meta.get("batch_owners")
        mowners = meta.get("model_owners")
        if not (isinstance(owners, list) and isinstance(mowners, list)
                and all(isinstance(v, int) for v in owners + mowners)):
            raise ProtocolError("malformed decryption request: owners")
        previous = fields.integer(meta, "previous", -1, self._n - 1)
        if self._view is None:
            check_decryptor(self._index, layer, n_layers, owners, mowners, previous)
        else:
            self._view.check_request(ctx.round, mask, meta.get("samples"), owners, m,
                                     first_layer=layer == 0)
        divisor_log2 = fields.integer(meta, "scale_bits", 0, 62)
        weight_sum = fields.integer(meta, "weight_sum", 1, 1 << 40)
        bound = fields.integer(meta, "bound", 1, (self._bfv.t - 1) // 2)
        if len(msg.blobs) != 2 or len(msg.blobs[1]) != (m + 7) // 8:  # one bit per column
            raise ProtocolError("malformed decryption request: blobs")
        active_bits = np.unpackbits(np.frombuffer(msg.blobs[1], dtype=np.uint8))
        active = active_bits[:m].astype(bool)
        ct = self._bfv.deserialize(msg.blobs[0], low=True)
        t = self._bfv.t
        self._answered.once(rid, what="decryption request")
        self._round = ctx.round
        self._seen.setdefault(key, set()).add(layer)  # from here on it knows this output
        for src in sources:
            self._seen.setdefault((ctx.round, mask, src), set()).add(layer)
        features = self._features(ct, lp, plan.width, m)
        with self.clock("other"):
            vals = features[:, active]
            if vals.size and int(np.abs(vals).max()) > bound:
                raise ProtocolError("decrypted values exceed the announced bound")
            if divisor_log2 != plan.scale(layer):  # the plan fixes it
                raise ProtocolError("malformed decryption request: scale_bits")
            real = vals.astype(np.float64) / (float(weight_sum) * 2.0 ** divisor_log2)
            act = self._spec.layers[layer].activation
            out = activate(act, real)
        if layer < n_layers - 1:
            full = np.zeros((lp.d_out, m))
            full[:, active] = out
            xq = sh.encode_fixed(full, plan.frac_inputs[layer + 1], t)
            xb = pow2_ceil(float(np.abs(sh.centre(xq, t)).max())) if xq.size else 1
            with self.clock("share_generation"):
                s1, s2 = sh.share(xq, t, self._rng)
            meta2 = {"layer": layer + 1, "m": m, "bound": xb, "from": self._index, EV: ev}
            return self._answer("secsv/reshare", meta2, ctx, rid, [s1.tobytes()],
                                [s2.tobytes()])
        labels = np.zeros(m, dtype=np.uint64)
        labels[active] = np.argmax(out, axis=0).astype(np.uint64)
        with self.clock("share_generation"):  # the zero test's correlated randomness
            to_p, to_a = sh.zero_test_deal(labels, t, self._rng, void=~active)
        meta3 = {"m": m, "from": self._index, EV: ev}
        return self._answer("secsv/labels", meta3, ctx, rid, [v.tobytes() for v in to_p],
                            [v.tobytes() for v in to_a])


    # ------------------------------------------------------------- derived decryption
    def _derived_request(self, meta: dict[str, Any]) -> tuple[Context, str, str]:
        ctx = self._request(meta, "decrypt-all", "derived decryption request")
        if ctx.index[0] != ALL or ctx.index[2] != 0:
            raise ReplayRefused("derived decryption request of another place in the round",
                                check="index")
        rid, ev = self._fresh(meta, ctx)
        if 0 in self._seen.get((ctx.round, ALL, ctx.index[1]), set()):
            raise ReplayRefused("this batch's outputs were already decrypted here "
                                "(a replay)", check="layer")
        return ctx, rid, ev

    def _derived_terms(self, meta: dict[str, Any]) -> tuple[list[int], list[int], int]:
        """Check the request's participants, weights and term list; ``(participants,
        weights, partner)`` (``partner`` -1 when this client does not participate).

        The term list is fixed by the participants (ascending ids, as in the round's
        record) and this client: the global model, every other participant's singleton
        in order, and, if this client participates, the pair with the first other
        participant. P's metadata alone therefore cannot relabel a ciphertext (a
        reordered list or another partner is refused); the ciphertexts themselves are
        not authenticated (see the module's threat model)."""
        parts, weights, terms = (meta.get("participants"), meta.get("weights"),
                                 meta.get("terms"))
        if not (isinstance(parts, list) and isinstance(weights, list)
                and isinstance(terms, list) and 1 <= len(parts) <= MAX_DERIVED
                and len(weights) == len(parts)
                and all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c < self._n
                        for c in parts)
                and len(set(parts)) == len(parts) and parts == sorted(parts)
                and all(isinstance(w, int) and not isinstance(w, bool) and 1 <= w <= 1 << 40
                        for w in weights)):
            raise ProtocolError("malformed derived decryption request: participants")
        me = self._index
        want: list[list[int]] = [[]] + [[c] for c in parts if c != me]
        partner = -1
        if me in parts:
            if len(parts) < 2 or len(terms) != len(want) + 1:
                raise ProtocolError("refusing derived decryption: without a pair term "
                                    "I would decrypt my own model's output")
            pair = terms[-1]
            # the partner is fixed (the first other participant): a relabelled partner
            # would derive this client's coalitions from the wrong singleton, silently
            if not (isinstance(pair, list) and len(pair) == 2 and pair[0] == me
                    and pair[1] == want[1][0]):
                raise ProtocolError("malformed derived decryption request: pair term")
            partner = want[1][0]
            terms = terms[:-1]
        if terms != want:  # never the singleton of my own model (Prop. 6.8)
            raise ProtocolError("refusing derived decryption: the terms must be the global "
                                "model and every other participant's singleton")
        return [int(c) for c in parts], [int(w) for w in weights], partner

    @receives("secsv/decrypt-all")
    def decrypt_all(self, data: bytes) -> tuple[bytes, bytes]:
        """Derived decryption of a batch (one-layer models, linear shortcut, exact SSVs).

        The request holds the global model's output on the batch, the weighted output
        ``q_i·lin(θ_i, X_b)`` of every *other* participant's model and, if this client
        participates, one pair ``q_me·lin(θ_me, X_b) + q_p·lin(θ_p, X_b)``. From these the
        client derives the exact output of every coalition of the round, predicts, and
        shares the predicted labels of all ``2^k`` coalitions with P and A. It refuses its
        own samples (it must not be a batch owner) and its own model's singleton; it
        checks every decrypted value and every derived sum against P's bounds."""
        plan = self._need_plan()
        if self._view is not None:  # it would hold the global model's output on the batch
            raise PolicyViolation("refusing derived decryption under the decryption rule",
                                  check="view")
        if len(plan.layers) != 1:
            raise ProtocolError("derived decryption is for one-layer models only")
        msg = wire.decode(data, expect="secsv/decrypt-all", max_bytes=1 << 28)
        meta = msg.meta
        ctx, rid, ev = self._derived_request(meta)
        lp = plan.layers[0]
        m = fields.integer(meta, "m", 1, plan.width)
        owners = meta.get("batch_owners")
        if not (isinstance(owners, list) and owners
                and all(isinstance(v, int) and not isinstance(v, bool) for v in owners)):
            raise ProtocolError("malformed derived decryption request: owners")
        if self._index in owners:
            raise ProtocolError("refusing to decrypt the last layer of my own samples")
        parts, weights, partner = self._derived_terms(meta)
        if (1 << len(parts)) * m > MAX_DERIVED_LABELS:
            raise ProtocolError(f"refusing derived decryption: {1 << len(parts)} coalitions "
                                f"x {m} samples exceed {MAX_DERIVED_LABELS} labels")
        n_terms = len(parts) + 1  # global, k - 1 or k singletons, the pair if any
        t = self._bfv.t
        bounds = meta.get("bounds")
        if not (isinstance(bounds, list) and len(bounds) == n_terms and all(
                isinstance(b, int) and not isinstance(b, bool) and 1 <= b <= (t - 1) // 2
                for b in bounds)):
            raise ProtocolError("malformed derived decryption request: bounds")
        if fields.integer(meta, "scale_bits", 0, 62) != plan.scale(0):
            raise ProtocolError("malformed derived decryption request: scale_bits")
        if len(msg.blobs) != n_terms:
            raise ProtocolError("malformed derived decryption request: blobs")
        cts = [self._bfv.deserialize(b, low=True) for b in msg.blobs]
        self._answered.once(rid, what="decryption request")
        self._round = ctx.round
        self._seen.setdefault((ctx.round, ALL, ctx.index[1]), set()).add(0)
        values = np.zeros((n_terms, lp.d_out * m), dtype=np.int64)
        for j, ct in enumerate(cts):
            vals = self._features(ct, lp, plan.width, m)
            with self.clock("other"):
                if vals.size and int(np.abs(vals).max()) > bounds[j]:
                    raise ProtocolError("decrypted values exceed the announced bound")
                values[j] = vals.ravel()
        with self.clock("other"):
            labels = self._derive_labels(values, parts, weights, partner, lp.d_out, m,
                                         plan.scale(0))
        with self.clock("share_generation"):  # the zero test's correlated randomness
            to_p, to_a = sh.zero_test_deal(labels, t, self._rng)
        meta2 = {"m": m, "coalitions": int(labels.shape[0]), "from": self._index, EV: ev}
        return self._answer("secsv/labels-all", meta2, ctx, rid,
                            [v.tobytes() for v in to_p], [v.tobytes() for v in to_a])

    def _derive_labels(self, values: NDArray[np.int64], parts: list[int],
                       weights: list[int], partner: int, d_out: int, m: int,
                       scale_bits: int) -> U64:
        """Every coalition's predicted labels (``2^k × m``) from the decrypted terms:
        term 0 is the global model (coalition 0), then the other participants'
        singletons in order, then the pair ``{me, partner}`` if present."""
        k = len(parts)
        me = self._index
        idx = {c: 1 + j for j, c in enumerate(c for c in parts if c != me)}
        coef = np.zeros((1 << k, values.shape[0]), dtype=np.int64)
        coef[0, 0] = 1
        qsum = np.zeros(1 << k, dtype=np.int64)
        qsum[0] = 1
        masks = np.arange(1 << k)
        for j, c in enumerate(parts):
            has = (masks >> j & 1).astype(bool)
            qsum[has] += weights[j]
            if c == me:  # q_me·Y_me = pair - q_p·Y_p
                coef[has, values.shape[0] - 1] += 1
                coef[has, idx[partner]] -= 1
            else:
                coef[has, idx[c]] += 1
        act = self._spec.layers[0].activation
        labels = np.zeros((1 << k, m), dtype=np.uint64)
        block = max(1, DERIVED_BLOCK // max(1, values.shape[1]))  # bounded int64 sums
        for lo in range(0, 1 << k, block):
            # exact: |each term| <= its bound < t/2, at most k + 2 terms
            sums = coef[lo:lo + block] @ values
            if sums.size and int(np.abs(sums).max()) >= self._bfv.t // 2:
                raise ProtocolError("a derived coalition output exceeds t/2")
            for j in range(sums.shape[0]):
                s = lo + j
                real = sums[j].reshape(d_out, m).astype(np.float64) / (
                    float(qsum[s]) * 2.0 ** scale_bits)
                labels[s] = np.argmax(activate(act, real), axis=0).astype(np.uint64)
        return labels



