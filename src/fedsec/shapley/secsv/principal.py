"""SecSV's principal server P (Xia et al., Alg. 3 steps 1-2, Alg. 4; SampleSkip, Alg. 6-7).

P plans (batch width, folds, fixed point from the clients' published bounds), forms the
batches, and for every evaluation of a coalition ``S`` on a batch (Alg. 4):

1. announces it to A (``secsv/eval``) and picks the decrypting clients (the decryption
   rule's :class:`~fedsec.shapley.views.Scheduler`, or Prop. 6.8's chain);
2. per layer, computes its own share's product with ``[[θ_S]]`` (Alg. 5, Matrix Reducing
   "Half"), adds A's encrypted product (``secsv/product``), switches the sum down one
   prime, masks what the decryptor must not see (the folded segments' sum-to-zero mask,
   uniform noise in columns SampleSkip leaves out) and sends it to the decrypting client
   (``secsv/decrypt``), then takes the client's re-share of the activated output
   (``secsv/reshare``: P's share of the next layer's input);
3. after the last layer, runs the zero test with A: from the client's ``(b', g')`` it
   sends A ``f' = Y' − b'`` (``secsv/label-mask``) and opens ``r·(Ŷ − Y)`` from A's
   answer (``secsv/label-diff``): True where the prediction is right.

With the linearity shortcut the first layer is the plaintext-weighted sum of ``n + 1``
cached products per round and batch (one ``lin/<model>`` product from A each); with
derived decryption one request per batch and round carries every term a decrypting client
needs to derive all coalitions (``secsv/decrypt-all``). See :mod:`fedsec.shapley.secsv`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec.crypto import sharing as sh
from fedsec.crypto.bfv import BFVContext
from fedsec.errors import ProtocolError
from fedsec.learning.model import LayerSpec, ModelSpec
from fedsec.protocol import fields, wire
from fedsec.protocol.binding import (
    BROADCAST,
    RE,
    Binding,
    Context,
    ReplayRefused,
    Requests,
    context_of,
    new_request_id,
    request_id,
)
from fedsec.protocol.roles import receives
from fedsec.shapley import fixed_point as fp
from fedsec.shapley.secsv.common import (
    ALL,
    EV,
    MAX_DERIVED,
    MAX_DERIVED_LABELS,
    PROTOCOL,
    U64,
    BoolArray,
    LayerPlan,
    Plan,
    SecSVConfig,
    geometry,
    layer_plan,
    u64,
)
from fedsec.shapley.secsv.server import Evaluation, Merge, RoundInfo, ServerBase
from fedsec.shapley.secure_game import decryptor_chain, reshare_cap, shuffle
from fedsec.shapley.views import ModelSpace, Scheduler

__all__ = ["PrincipalServer", "pick_fixed_point", "pick_width"]


@dataclass
class Batch:
    rows: NDArray[np.int64]  # pooled sample indices, in column order
    group: int


@dataclass
class Job:
    """What P decided for one evaluation on one batch."""

    rows: NDArray[np.int64]
    active: BoolArray  # the columns tested (SampleSkip voids the others)
    owners: list[int]  # the batch's owners
    chain: list[int]  # the decrypting client of every layer
    keys: list[str]
    q: list[int]
    model_owners: list[int]
    xb: int  # bound of the layer input
    previous: int = -1
    partner: int = -1  # derived: the partner of the decryptor's pair term


@dataclass
class Coalition:
    """P's state of one coalition under test (see :meth:`PrincipalServer.suspend_coalition`)."""

    asked: tuple[int, int, NDArray[np.int64] | None]
    work: list[Any]
    todo: BoolArray
    found: NDArray[np.bool_]
    from_table: BoolArray | None


class PrincipalServer(ServerBase):
    """Server P: plans, combines, masks, routes decryptions, keeps Φ (see module).

    P issues an id per evaluation (announced to A) and per decryption request, accepts
    each answer once and only in the evaluation and layer it belongs to, and takes A's
    products and label difference only for the evaluation in flight."""

    name = "P"

    def __init__(self, bfv: BFVContext, spec: ModelSpec, n: int, config: SecSVConfig,
                 rounds: Sequence[RoundInfo], *, session: str, groups: list[list[int]],
                 strong: bool, sizes: Sequence[int], linear_shortcut: bool = True,
                 derived: bool = False, space: ModelSpace | None = None) -> None:
        super().__init__(bfv, spec, n, config, rounds, session=session)
        self._requests = Requests()
        self._fixed_point: fp.FixedPointPlan | None = None
        self._groups, self._strong = groups, strong
        self._sizes = list(sizes)
        self._shortcut, self._derived = linear_shortcut, derived
        self._space = space  # the decryption rule (None: Prop. 6.8's schedule)
        self._sched: Scheduler | None = None
        self._batches: list[Batch] = []
        self._turn = 0
        self._lin_cache: dict[tuple[int, str, int], Any] = {}
        self._derived_correct: dict[int, NDArray[np.bool_]] = {}
        # the evaluation P is running: its jobs, and what it has found so far
        self._work: list[Any] = []
        self._todo: BoolArray = np.zeros(0, dtype=bool)
        self._found: NDArray[np.bool_] = np.zeros(0, dtype=bool)
        self._asked: tuple[int, int, NDArray[np.int64] | None] = (0, 0, None)
        self._repacked = 0
        self._from_table: BoolArray | None = None
        self._table: NDArray[np.bool_] = np.zeros((0, 0), dtype=bool)

    @property
    def n_samples(self) -> int:
        return len(self._y)

    @property
    def fixed_point(self) -> fp.FixedPointPlan | None:
        """The per-layer fractional bits P chose (:meth:`make_plan`)."""
        return self._fixed_point

    # ------------------------------------------------------------- Alg. 3: set-up
    @receives("secsv/bounds")
    def make_plan(self, bounds: Sequence[bytes]) -> bytes:
        """The plan from every client's published bounds: batch width, folds, fixed
        point (``secsv/plan``, for the clients and A alike)."""
        slots = self._bfv.slots
        per_group = [sum(self._sizes[c] for c in g) for g in self._groups]
        cap = min(slots // layer.out_features for layer in self._spec.layers)
        width = pick_width(self._rounds, self._spec, per_group, cap, slots, self._derived)
        lps = [layer_plan(ly, fold_of(ly, width, slots)) for ly in self._spec.layers]
        fixed = self._fixed_point = pick_fixed_point(bounds, self._rounds, self._cfg,
                                                     self._bfv.t, self._spec, binding=self._b)
        self._plan = Plan(width, tuple(lps), fixed.model, fixed.inputs)
        return wire.encode("secsv/plan", self._b.bind(self._plan.to_meta(), step="plan",
                                                      to=BROADCAST))

    def receive_data(self, blobs: Sequence[bytes]) -> None:
        super().receive_data(blobs)
        if self._space is not None:
            self._sched = Scheduler(self._space, self._n, self._owner)

    def batches_message(self) -> bytes:
        """P's batches (shuffled within each group, cryptographic randomness) for A."""
        width = self.plan.width
        self._batches = []
        for g, members in enumerate(self._groups):
            rows = shuffle(np.flatnonzero(np.isin(self._owner, members)))
            for k in range(0, len(rows), width):
                self._batches.append(Batch(rows[k:k + width], g))
        return wire.encode("secsv/batches", self._b.bind(
            {"batches": [b.rows.tolist() for b in self._batches]}, step="batches", to="A"))

    def plan_rounds(self, n_rounds: int) -> None:
        """Place every coalition of every round on every batch before any work (exact
        SSVs); raises :class:`~fedsec.shapley.views.UnsafeSchedule`."""
        assert self._sched is not None
        for t in range(n_rounds):
            masks = list(range(1 << len(self._rounds[t].participants)))
            for b in self._batches:
                self._sched.plan(t, masks, [int(v) for v in b.rows])

    def end_round(self, t: int) -> None:
        super().end_round(t)
        self._lin_cache.clear()
        self._derived_correct.pop(t, None)

    # ------------------------------------------------------------- Alg. 4: one coalition
    def start_evaluation(self, t: int, mask: int, rows: NDArray[np.int64] | None) -> None:
        """Test ``θ_S^t`` on the pooled samples ``rows`` (all if None): the batches to
        evaluate (:meth:`open_next` opens each).

        SampleSkip (``rows`` given): with derived decryption the round's table already
        holds every coalition (nothing to evaluate). Multi-layer models with the
        linearity shortcut: merged evaluations (:meth:`_merge`: the first layer on the
        fixed batches, the later layers on their tested samples packed). One-layer
        models: per batch group, the round's fixed batches (cacheable first-layer
        products; skipped columns masked) or the samples left to test re-packed into
        fewer batches, whichever :meth:`_repack_pays` prices lower. Always re-packed
        without the shortcut; always the fixed batches under the decryption rule (its
        placements are planned per fixed batch)."""
        self._asked = (t, mask, rows)
        self._from_table = None
        if self._derived and t in self._derived_correct:
            table = self._derived_correct[t][mask]
            self._from_table = (table if rows is None else table[rows]).copy()
            self._work = []
            return
        m_total = len(self._y)
        todo = np.zeros(m_total, dtype=bool)
        todo[np.arange(m_total) if rows is None else rows] = True
        self._todo, self._found = todo, np.zeros(m_total, dtype=bool)
        self._work = []
        width = self.plan.width
        to_merge: list[tuple[int, NDArray[np.int64], BoolArray]] = []
        for g in range(len(self._groups)):
            fixed = [(bi, b.rows, todo[b.rows]) for bi, b in enumerate(self._batches)
                     if b.group == g and todo[b.rows].any()]
            if rows is None or not fixed:
                self._work.extend(fixed)
                continue
            sel = np.concatenate([b.rows for b in self._batches if b.group == g])
            sel = sel[todo[sel]]
            packed = -(-len(sel) // width)
            if self._shortcut and self._sched is not None:
                self._work.extend(fixed)  # placements are planned per fixed batch
            elif self._shortcut and len(self.plan.layers) > 1:
                to_merge.extend(fixed)  # merged below, across groups where Prop. 6.8 allows
            elif self._shortcut and not self._repack_pays(len(fixed), packed):
                self._work.extend(fixed)  # the fixed batches, skipped columns masked
            else:
                for k in range(0, len(sel), width):  # re-pack the samples left to test
                    chunk = sel[k:k + width]
                    self._work.append((-1, chunk, np.ones(len(chunk), dtype=bool)))
        if to_merge:
            merged = self._merge(to_merge, mask)
            self._work.extend(merged if len(merged) < len(to_merge) else to_merge)
        self._repacked = len(self._batches)  # ids of re-packed batches follow the fixed ones

    def _merge(self, fixed: list[tuple[int, NDArray[np.int64], BoolArray]], mask: int
               ) -> list[Any]:
        """Fixed batches (first layer from the cached products) merged into as few
        packed batches as their tested samples fill (first fit, fullest first; a fixed
        batch is never split): ``(-2, sources)`` per packed batch of two or more fixed
        batches, the fixed batch itself otherwise. A packed batch may mix groups while
        Prop. 6.8's decryptor chain still finds enough clients outside its owners and the
        coalition's model owner (an aggregated model has none): with ``n = 5`` and a
        three-layer model, two single-client groups."""
        width = self.plan.width
        n_layers = len(self.plan.layers)
        need = n_layers if self._strong else min(n_layers, 2)
        room_owners = self._n - need - len(self._rounds[self._asked[0]].keys_weights(mask)[2])
        bins: list[list[Any]] = []  # [room, owners, [(bi, cols)], [(bi, rows, active)]]
        for item in sorted(fixed, key=lambda f: -int(f[2].sum())):
            n_active = int(item[2].sum())
            members = set(self._groups[self._batches[item[0]].group])
            for b in bins:
                if b[0] >= n_active and len(b[1] | members) <= max(room_owners,
                                                                   len(b[1])):
                    b[0] -= n_active
                    b[1] |= members
                    b[2].append((item[0], np.flatnonzero(item[2])))
                    b[3].append(item)
                    break
            else:
                bins.append([width - n_active, members,
                             [(item[0], np.flatnonzero(item[2]))], [item]])
        return [(-2, b[2], None) if len(b[2]) > 1 else b[3][0] for b in bins]

    def _repack_pays(self, fixed: int, packed: int) -> bool:
        """One-layer models with the linearity shortcut: whether ``packed`` re-packed
        batches cost less than ``fixed`` fixed batches holding the same samples. A
        batch costs one decryption round trip (~8 ms); a re-packed one also both
        servers' first-layer products, as its data are not the fixed batches' (~0.9 ms
        per model ciphertext and share: an encoding, its NTT and a product)."""
        if packed >= fixed:
            return False
        first = 2 * 0.9 * self.plan.layers[0].n_cts()
        return packed * (8.0 + first) < fixed * 8.0

    def open_next(self) -> bytes | None:
        """Open the next batch's evaluation: the ``secsv/eval`` message for A (None when
        every batch is done)."""
        if not self._work:
            return None
        t, mask, _rows = self._asked
        if mask == ALL:
            bi, d, partner = self._work.pop(0)
            b = self._batches[bi]
            parts = list(self._rounds[t].participants)
            job = Job(b.rows, np.ones(len(b.rows), dtype=bool), self._groups[b.group], [d],
                      [f"c{c}" for c in parts], list(self._rounds[t].weights), [],
                      max(self._xbound.get(c, 1) for c in self._groups[b.group]),
                      partner=partner)
            return self._open(ALL, bi, None, job)
        bi, brows, active = self._work.pop(0)
        merge = None
        if bi == -2:  # merged: the first layer per fixed batch, then one packed batch
            merge = Merge.of(brows, [b.rows for b in self._batches], self._repacked)
            self._repacked += 1
            bi, cols = brows[0]
            brows = self._batches[bi].rows
            active = np.zeros(len(brows), dtype=bool)
            active[cols] = True
        keys, q, mowners = self._rounds[t].keys_weights(mask)
        if merge is not None:  # the owners of every fixed batch it packs
            gowners = sorted({c for bj, _c in merge.sources
                              for c in self._groups[self._batches[bj].group]})
        else:
            group = int(self._owner[brows[0]])
            gowners = next(members for members in self._groups if group in members)
        n_layers = len(self.plan.layers)
        if self._sched is None:
            chain = decryptor_chain(self._n, n_layers, gowners, mowners, self._strong,
                                    self._turn)
        else:
            chain = self._sched.chain(t, mask, brows, n_layers, self._turn)
        self._turn += 1
        job = Job(brows, active, gowners, list(chain), keys, q, mowners,
                  max(self._xbound.get(c, 1) for c in gowners))
        if merge is not None:
            return self._open(mask, merge.packed_id, None, job, merge)
        if bi >= 0:
            return self._open(mask, bi, None, job)
        self._repacked += 1
        return self._open(mask, self._repacked - 1, brows, job)

    def _open(self, mask: int, batch: int, rows: NDArray[np.int64] | None, job: Job,
              merge: Merge | None = None) -> bytes:
        if self._eval is not None:  # an abandoned evaluation: its requests die with it
            self._requests = Requests()
        t = self._asked[0]
        ev = new_request_id()
        meta: dict[str, Any] = {"rows": None if rows is None else [int(r) for r in rows]}
        if merge is not None:  # A derives the packed rows from the fixed batches
            meta["sources"] = [[bi, [int(c) for c in cols]] for bi, cols in merge.sources]
        # a merged evaluation starts on its first fixed batch (its first layer)
        first = batch if merge is None else merge.sources[0][0]
        self._eval = Evaluation(t, mask, first, ev, job.rows, job=job, merge=merge)
        self._eval.x = self._x[job.rows].T.copy()  # P's share of the first layer's input
        return wire.encode("secsv/eval", self._b.bind(
            meta, step="eval", to="A", round=t, index=(mask, batch, -1), rid=ev))

    def suspend_coalition(self) -> Coalition:
        """Set the coalition under test aside (its batches left to open and what was
        found so far) so that the next can start; with :meth:`suspend` of each opened
        batch, a runtime keeps every coalition of a round in flight at once (the same
        messages, checks and ids as one at a time)."""
        if self._eval is not None:
            raise ProtocolError("P: suspend the batch in flight first")
        out = Coalition(self._asked, self._work, self._todo, self._found, self._from_table)
        self._work, self._from_table = [], None
        return out

    def resume_coalition(self, c: Coalition) -> None:
        """Make a coalition set aside by :meth:`suspend_coalition` the one under test."""
        if self._eval is not None or not isinstance(c, Coalition):
            raise ProtocolError("P: cannot resume this coalition now")
        self._asked, self._work, self._todo, self._found, self._from_table = (
            c.asked, c.work, c.todo, c.found, c.from_table)

    def layer_in_flight(self) -> int:
        """The layer of the evaluation in flight whose products come next (a merged
        evaluation runs layer 0 once per fixed batch before layer 1)."""
        return self._need_eval().layer

    def result(self) -> BoolArray:
        """The evaluation's answer: True where the prediction is right."""
        if self._from_table is not None:
            return self._from_table
        rows = self._asked[2]
        out: BoolArray = self._found[self._todo] if rows is not None else self._found
        return out

    # ------------------------------------------------------------- Alg. 4, steps 4-7
    def _bound(self, t: int, keys: Sequence[str], q: Sequence[int], layer: int,
               xbound: int) -> int:
        total = 0
        for k, qi in zip(keys, q, strict=True):
            beta, gamma = self._models[(t, k)].bounds[layer]
            total += qi * (beta * xbound + gamma)
        if total >= self._bfv.t // 2:
            raise sh.FixedPointOverflow(
                f"SecSV: layer {layer + 1} in round {t + 1}: the linear output may reach "
                f"{total:.3g} in fixed point, beyond t/2 = {self._bfv.t // 2:.3g} (a "
                f"coalition model's activations beyond what the clients observed); SecSV "
                f"refuses rather than wrap. Levers: {fp.LEVERS}")
        return total

    def _mask(self, lp: LayerPlan, m: int, active: BoolArray) -> U64 | None:
        """Segments summing to 0 (uniform in inactive columns) or None if not needed."""
        t = self._bfv.t
        hidden = not active.all()
        if lp.fold == 1 and not hidden:
            return None
        width = self.plan.width
        seg = lp.d_out * width
        out = np.zeros(self._bfv.slots, dtype=np.uint64)
        if lp.fold > 1:
            r = sh.uniform_mod(t, ((lp.fold - 1), seg))
            total = np.zeros(seg, dtype=np.uint64)
            for k in range(0, lp.fold - 1, 256):  # < 2^8 residues < 2^55 fit in uint64
                total = sh.add_mod(total, r[k:k + 256].sum(axis=0, dtype=np.uint64)
                                   % np.uint64(t), t)
            out[:(lp.fold - 1) * seg] = r.ravel()
            out[(lp.fold - 1) * seg:lp.fold * seg] = sh.sub_mod(np.zeros(seg, np.uint64),
                                                                total, t)
        if hidden:
            grid = np.zeros((lp.rows, lp.cols(width)), dtype=bool)
            grid[:, :m * lp.per] = np.repeat(~active, lp.per)[None, :]
            idx = (lp.fold - 1) * seg + np.flatnonzero(grid.ravel())
            out[idx] = sh.add_mod(out[idx], sh.uniform_mod(t, idx.size), t)
        return out

    def _products(self, data: Sequence[bytes], steps: Sequence[str]) -> list[Any]:
        """A's encrypted products for the layer in flight, one per expected step, in
        order (NTT form)."""
        ev = self._need_eval()
        if len(data) != len(steps):
            raise ProtocolError("malformed products: not one per expected product")
        out = []
        for blob, step in zip(data, steps, strict=True):
            msg = wire.decode(blob, expect="secsv/product", max_bytes=1 << 26)
            self._b.check(msg.meta, step=step, sender="A", round=ev.round,
                          index=ev.index(ev.layer), what="product")
            if request_id(msg.meta, RE) != ev.ev:
                raise ReplayRefused("product of another evaluation", check="request-id")
            if (ev.layer, step) in ev.products:
                raise ReplayRefused("product received twice", check="request-id")
            if len(msg.blobs) != 1:
                raise ProtocolError("malformed product: one blob expected")
            ev.products.add((ev.layer, step))
            out.append(self._bfv.deserialize(msg.blobs[0], ntt=True))
        return out

    def lin_steps(self) -> list[str]:
        """The ``lin/<model>`` products P still needs from A for the first layer of the
        evaluation in flight (the linearity shortcut; in A's order)."""
        ev = self._need_eval()
        info = self._rounds[ev.round]
        keys = (["global"] + [f"c{c}" for c in info.participants] if ev.mask == ALL
                else ev.job.keys)
        return [f"lin/{k}" for k in keys if (ev.round, k, ev.batch) not in self._lin_cache]

    def _lin_terms(self, products: Sequence[bytes]) -> None:
        """``q_i · lin(θ_i, X_b)`` of every model A sent a product for, cached per round,
        model and batch in decryption form."""
        ev = self._need_eval()
        steps = self.lin_steps()
        cts = self._products(products, steps)
        q_of = dict(zip([f"c{c}" for c in self._rounds[ev.round].participants],
                        self._rounds[ev.round].weights, strict=True))
        q_of["global"] = 1
        for step, a_ct in zip(steps, cts, strict=True):
            k = step[4:]
            ct = self.product(self._models[(ev.round, k)].layers[0], 0, ev.x,
                              (0, ev.batch), True)
            self._bfv.add_inplace(ct, a_ct)
            if q_of[k] != 1:
                ct = self._bfv.multiply_plain(ct, self.scalar(q_of[k]))
            # Cached in coefficient form one prime down (what a decryption request
            # carries): every subset's sum is then additions only -- no inverse NTT
            # and no modulus switch per subset and batch.
            self._lin_cache[(ev.round, k, ev.batch)] = self._bfv.mod_switch_down(
                self._bfv.from_ntt(ct))

    def _lin_sum(self, keys: Sequence[str]) -> Any:
        ev = self._need_eval()
        return self._bfv.add_many([self._lin_cache[(ev.round, k, ev.batch)] for k in keys])

    @receives("secsv/product")
    def decrypt_request(self, products: Sequence[bytes]) -> tuple[str, bytes]:
        """Alg. 4, steps 4-7: combine P's product with A's (``products``), mask, and ask
        the layer's decrypting client; ``(recipient, secsv/decrypt)``."""
        ev = self._need_eval()
        job: Job = ev.job
        t, layer = ev.round, ev.layer
        lp = self.plan.layers[layer]
        m = len(job.rows)
        bound = self._bound(t, job.keys, job.q, layer, job.xb)
        shortcut = layer == 0 and self._shortcut and ev.batch < len(self._batches)
        with self.clock("arithmetic"):
            if shortcut:
                self._lin_terms(products)
                ct = self._lin_sum(job.keys)  # low already
            else:
                nb = len(self._batches)
                ck = (0, ev.batch) if layer == 0 and ev.batch < nb else None
                model = self.aggregated(t, job.keys, job.q, layer, ev.mask)
                (a_ct,) = self._products(products, ["product"])
                ct = self.product(model, layer, ev.x, ck, True)
                self._bfv.add_inplace(ct, a_ct)
                ct = self._bfv.mod_switch_down(self._bfv.from_ntt(ct))
            rmask = self._mask(lp, m, job.active)
            if rmask is not None:
                ct = self._bfv.add_plain(ct, rmask)
            payload = self._bfv.serialize(ct)
        dec = job.chain[layer]
        meta: dict[str, Any] = {
            "layer": layer, "m": m, "batch_owners": job.owners,
            "model_owners": job.model_owners, "previous": job.previous,
            "scale_bits": self.plan.scale(layer),
            "weight_sum": int(sum(job.q)), "bound": bound}
        if self._sched is not None:  # the client checks its view per sample
            meta["samples"] = [int(v) for v in job.rows]
        if ev.merge is not None and layer > 0:  # the fixed batches of the first layer
            meta["sources"] = [int(bi) for bi, _c in ev.merge.sources]
        ev.announced[layer] = (bound, int(sum(job.q)), meta["scale_bits"])
        job.previous = dec
        to = f"client:{dec}"
        rid = self._requests.issue(Context(self._b.session, PROTOCOL, t, "decrypt", "P", to,
                                           ev.index(layer)))
        return to, wire.encode("secsv/decrypt", self._b.bind(
            {**meta, EV: ev.ev}, step="decrypt", to=to, round=t, index=ev.index(layer),
            rid=rid), [payload, np.packbits(job.active).tobytes()])

    def _answer(self, data: bytes, kind: str) -> wire.Message:
        """A decrypting client's answer to the request of the layer in flight."""
        ev = self._need_eval()
        msg = wire.decode(data, expect=kind, max_bytes=1 << 28)
        step = kind.split("/", 1)[1]
        sender = f"client:{ev.job.chain[ev.layer] if ev.mask != ALL else ev.job.chain[0]}"
        self._b.check(msg.meta, step=step, sender=sender, round=ev.round,
                      index=ev.index(ev.layer), what=kind)
        self._requests.answer(msg.meta, self._b, step=step, sender=sender, what=kind)
        return msg

    # ------------------------------------------------------------- Alg. 4, steps 8-9
    @receives("secsv/reshare")
    def receive_share(self, data: bytes) -> None:
        """The client's re-share of the layer's output: P's share of the next layer's
        input, and its bound."""
        ev = self._need_eval()
        layer = ev.layer
        d, m = self.plan.layers[layer].d_out, len(ev.rows)
        msg = self._answer(data, "secsv/reshare")
        if len(msg.blobs) != 1 or fields.integer(msg.meta, "m", 1, m) != m:
            raise ProtocolError("malformed re-share")
        b = fields.integer(msg.meta, "bound", 1, self._bfv.t // 2)
        cap = reshare_cap(ev.announced.get(layer), self._spec.layers[layer].activation,
                          self.plan.frac_inputs[layer + 1])
        if cap is not None and b > cap:  # a bound no honest activation reaches
            raise ProtocolError("re-share bound beyond what the layer's output allows")
        x = u64(msg.blobs[0], (d, m), "re-share")
        if x.size and int(x.max()) >= self._bfv.t:
            raise ProtocolError("share out of range")
        if ev.merge is not None and layer == 0:
            job: Job = ev.job
            done = ev.take_first_layer(x, b, self._x)
            job.rows = ev.rows
            job.active = np.ones(len(ev.rows), dtype=bool)
            if done:
                job.xb = ev.merge.bound
            else:  # the next fixed batch: its tested columns, a fresh first layer
                job.active[:] = False
                job.active[ev.merge.sources[ev.merge.pos][1]] = True
                job.previous = -1
            return
        ev.x, ev.job.xb = x, b
        ev.layer += 1

    # ------------------------------------------------------------- Alg. 4, steps 11-14
    @receives("secsv/labels")
    def label_mask(self, to_p: bytes) -> bytes:
        """Alg. 4, step 12, as a zero test: the client's ``(b', g')`` for P; P keeps
        ``g'`` and sends A ``f' = Y' − b'`` (uniform to A, which lacks ``b'``)."""
        m = len(self._need_eval().rows)
        return self._label_mask(to_p, "secsv/labels", (m,))

    @receives("secsv/labels-all")
    def label_mask_all(self, to_p: bytes) -> bytes:
        """Derived evaluation: :meth:`label_mask` for the ``2^k × m`` table."""
        ev = self._need_eval()
        n_masks = 1 << len(self._rounds[ev.round].participants)
        return self._label_mask(to_p, "secsv/labels-all", (n_masks, len(ev.rows)))

    def _label_mask(self, to_p: bytes, kind: str, shape: tuple[int, ...]) -> bytes:
        ev = self._need_eval()
        if ev.g is not None:
            raise ReplayRefused(f"{kind} received twice", check="step")
        t, m = self._bfv.t, shape[-1]
        with self.clock("arithmetic"):
            msg = self._answer(to_p, kind)
            if len(msg.blobs) != 2 or fields.integer(msg.meta, "m", 1, m) != m:
                raise ProtocolError(f"malformed {kind} message: two blobs expected")
            b_p = u64(msg.blobs[0], (m,), "label mask share")
            g_p = u64(msg.blobs[1], shape, "label share")
            if m and max(int(b_p.max()), int(g_p.max())) >= t:
                raise ProtocolError("share out of range")
            ev.g = g_p
            f_p = sh.zero_test_mask(self._y[ev.rows], b_p, t)
        return wire.encode("secsv/label-mask", self._b.bind(
            {"m": m}, step="label-mask", to="A", round=ev.round, index=ev.index(ev.layer),
            re_=ev.ev), [f_p.tobytes()])

    @receives("secsv/label-diff")
    def compare(self, diff_a: bytes) -> BoolArray:
        """Alg. 4, steps 13-14: A's zero-test share; True where ``r·(Ŷ − Y) = 0``, i.e.
        the prediction is right. P learns this bit and nothing else: for a wrong
        prediction ``r·(Ŷ − Y)`` is uniform over the non-zero residues."""
        ev = self._need_eval()
        job: Job = ev.job
        ok = self._correct(diff_a, "secsv/label-diff", (len(ev.rows),))
        self._found[job.rows[job.active]] = ok[job.active]
        return ok

    @receives("secsv/label-diff-all")
    def compare_all(self, diff_a: bytes) -> BoolArray:
        """Derived evaluation: whether ``Ŷ_S = Y`` for every coalition (``2^k × m``), by
        the zero test (:meth:`compare`)."""
        ev = self._need_eval()
        n_masks = 1 << len(self._rounds[ev.round].participants)
        rows = ev.rows
        ok = self._correct(diff_a, "secsv/label-diff-all", (n_masks, len(rows)))
        self._table[:, rows] = ok
        if not self._work:
            self._derived_correct[ev.round] = self._table
        return ok

    def _correct(self, diff_a: bytes, kind: str, shape: tuple[int, ...]) -> BoolArray:
        """Open the zero test (rows: coalitions, if any). Ends the evaluation."""
        ev = self._need_eval()
        with self.clock("arithmetic"):
            dm = wire.decode(diff_a, expect=kind, max_bytes=1 << 28)
            self._b.check(dm.meta, step=kind.split("/", 1)[1], sender="A", round=ev.round,
                          index=ev.index(ev.layer), what="label difference")
            if request_id(dm.meta, RE) != ev.ev:
                raise ReplayRefused("label difference of another evaluation",
                                    check="request-id")
            if ev.g is None:
                raise ProtocolError("a label difference before the labels")
            if len(dm.blobs) != 1:
                raise ProtocolError(f"malformed {kind} message: one blob expected")
            z_a = u64(dm.blobs[0], shape, "label difference")
            if z_a.size and int(z_a.max()) >= self._bfv.t:
                raise ProtocolError("share out of range")
            ok: BoolArray = sh.zero_test_open(ev.g, z_a, self._bfv.t)
        self._eval = None
        return ok

    # ------------------------------------------------------------- derived decryption
    def start_derived(self, t: int, rows: NDArray[np.int64] | None) -> bool:
        """Whether round ``t`` is evaluated by derived decryption now (every coalition on
        every batch, one request per batch; :meth:`open_next` opens each batch)."""
        if not self._derived or rows is not None or t in self._derived_correct:
            return False
        plan = self._derived_plan(t)
        if plan is None:
            return False
        self._asked = (t, ALL, None)
        self._work = [(bi, d, p) for bi, (d, p) in enumerate(plan)]
        self._table = np.zeros((1 << len(self._rounds[t].participants), len(self._y)),
                               dtype=bool)
        return True

    def _derived_plan(self, t: int) -> list[tuple[int, int]] | None:
        """Per batch, the decrypting client ``d`` (not a batch owner) and, if ``d``
        participates in round ``t``, the partner ``p`` of its pair term (else -1); None
        if some batch has no such client or the label table (``2^k`` coalitions × the
        widest batch) exceeds what a client accepts (the round then decrypts per
        coalition)."""
        parts = list(self._rounds[t].participants)
        widest = max((len(b.rows) for b in self._batches), default=0)
        if len(parts) > MAX_DERIVED or (1 << len(parts)) * widest > MAX_DERIVED_LABELS:
            return None  # the decrypting client would refuse the label table's size
        out = []
        for b in self._batches:
            owners = set(self._groups[b.group])
            eligible = [c for c in range(self._n) if c not in owners
                        and not (c in parts and len(parts) < 2)]
            if not eligible:
                return None
            d = eligible[self._turn % len(eligible)]
            others = [c for c in parts if c != d]  # ascending (RoundRecord)
            p = others[0] if d in parts else -1  # the partner the client expects
            self._turn += 1
            out.append((d, p))
        return out

    def decrypt_all_request(self, products: Sequence[bytes]) -> tuple[str, bytes]:
        """The derived evaluation's decryption request (``secsv/decrypt-all``): the global
        model's output, every other participant's and the decryptor's pair term."""
        ev = self._need_eval()
        if ev.mask != ALL:
            raise ProtocolError("a derived request outside a derived evaluation")
        job: Job = ev.job
        t = ev.round
        d, partner = job.chain[0], job.partner
        parts = list(self._rounds[t].participants)
        q = list(self._rounds[t].weights)
        m = len(job.rows)
        terms: list[tuple[list[int], list[str], list[int]]] = [([], ["global"], [1])]
        terms += [([c], [f"c{c}"], [q[j]]) for j, c in enumerate(parts) if c != d]
        if partner >= 0:
            terms.append(([d, partner], [f"c{d}", f"c{partner}"],
                          [q[parts.index(d)], q[parts.index(partner)]]))
        # every coalition's output stays below t/2 (the full one bounds them all)
        self._bound(t, [f"c{c}" for c in parts], q, 0, job.xb)
        blobs, bounds = [], []
        lp = self.plan.layers[0]
        with self.clock("arithmetic"):
            self._lin_terms(products)
            for _members, keys, qs in terms:
                bounds.append(self._bound(t, keys, qs, 0, job.xb))
                ct = self._lin_sum(keys)
                rmask = self._mask(lp, m, job.active)
                if rmask is not None:
                    ct = self._bfv.add_plain(ct, rmask)
                blobs.append(self._bfv.serialize(ct))
        meta = {"m": m, "batch_owners": job.owners, "participants": parts, "weights": q,
                "terms": [members for members, _k, _q in terms], "bounds": bounds,
                "scale_bits": self.plan.scale(0), EV: ev.ev}
        to = f"client:{d}"
        rid = self._requests.issue(Context(self._b.session, PROTOCOL, t, "decrypt-all", "P",
                                           to, ev.index(0)))
        return to, wire.encode("secsv/decrypt-all", self._b.bind(
            meta, step="decrypt-all", to=to, round=t, index=ev.index(0), rid=rid), blobs)


# ====================================================================== P's choices
def fold_of(ly: LayerSpec, width: int, slots: int) -> int:
    return max(1, min(geometry(ly)[1], slots // (ly.out_features * width)))


def pick_width(rounds: Sequence[RoundInfo], spec: ModelSpec, per_group: Sequence[int],
               cap: int, slots: int, derived: bool = False) -> int:
    """Batch width trading model ciphertexts (fewer with a narrow, more folded grid)
    against decryptions (more batches). Costs in units of one ciphertext's round trip
    (encrypt + two uploads) vs one decryption chain step, both measured ~10 ms : 8 ms;
    with derived decryption a batch costs ``k + 2`` ciphertext decryptions per round
    instead of ``2^k`` chain steps."""
    top = max(1, min(max(per_group), cap))
    models = sum(len(r.participants) + 1 for r in rounds)
    evals = sum(len(r.participants) + 2 if derived else 2 ** len(r.participants)
                for r in rounds)
    best, best_cost = top, math.inf
    for j in range(1, 17):
        w = max(1, -(-top // j))
        cts = sum(-(-geometry(ly)[1] // fold_of(ly, w, slots)) + 1 for ly in spec.layers)
        batches = sum(-(-g // w) for g in per_group if g)
        cost = 10.0 * models * cts + 8.0 * evals * batches * len(spec.layers)
        if cost < best_cost:
            best, best_cost = w, cost
    return best


def pick_fixed_point(messages: Sequence[bytes], rounds: Sequence[RoundInfo],
                     cfg: SecSVConfig, t: int, spec: ModelSpec, *,
                     binding: Binding) -> fp.FixedPointPlan:
    """P's choice of the fractional bits per layer from the clients' ``secsv/bounds``
    (:func:`fedsec.shapley.fixed_point.choose`, with 3 bits of margin under ``t/2`` for
    rounding); configured values are kept."""
    published = []
    for data in messages:
        msg = wire.decode(data, expect="secsv/bounds", max_bytes=1 << 24)
        sender = context_of(msg.meta).sender
        if not sender.startswith("client:"):
            raise ReplayRefused("bounds from another sender", check="sender")
        binding.check(msg.meta, step="bounds", sender=sender, what="bounds")
        published.append(msg.meta)
    keys = [[("global", 1)] + [(f"c{c}", int(qi)) for c, qi in zip(
        info.participants, info.weights, strict=True)] for info in rounds]
    per_round, ex, acts = fp.read(published, keys, len(spec.layers))
    return fp.choose(spec, per_round, ex, acts, math.log2(t / 8), protocol="SecSV",
                     frac_model=cfg.frac_bits_model, frac_data=cfg.frac_bits_data,
                     frac_hidden=cfg.frac_bits_hidden)
