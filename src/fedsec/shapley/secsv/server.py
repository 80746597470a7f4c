"""What SecSV's two servers share (Alg. 3 step 3, Alg. 5): their share of the test data,
the encrypted models, and the Matrix Reducing "Half" products of a model with their share.

:class:`ServerBase` is the common part of :class:`~fedsec.shapley.secsv.principal.
PrincipalServer` (P) and :class:`~fedsec.shapley.secsv.auxiliary.AuxiliaryServer` (A);
each server's state is its own (private) and is changed only by the messages it receives.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec.crypto import reducing as rd
from fedsec.crypto.bfv import BFVContext
from fedsec.errors import ProtocolError
from fedsec.learning.model import ModelSpec
from fedsec.protocol import fields, wire
from fedsec.protocol.accounting import Clock
from fedsec.protocol.binding import Binding, ReplayRefused
from fedsec.protocol.roles import receives
from fedsec.shapley.secsv.common import (
    MAX_SAMPLES,
    PROTOCOL,
    U64,
    Plan,
    SecSVConfig,
    fold_diagonals,
    im2col,
    row_period,
    u64,
)

__all__ = ["ServerBase", "RoundInfo", "Merge"]


@dataclass(frozen=True)
class RoundInfo:
    """What both servers know of a round: its participants (ascending) and their integer
    aggregation weights ``q_i`` (public: FedAvg's weights)."""

    participants: tuple[int, ...]
    weights: tuple[int, ...]

    def keys_weights(self, mask: int) -> tuple[list[str], list[int], list[int]]:
        """The model keys, weights and (for a singleton) the model owner of coalition
        ``mask`` (``0``: the global model)."""
        if mask == 0:
            return ["global"], [1], []
        sel = [j for j in range(len(self.participants)) if mask >> j & 1]
        keys = [f"c{self.participants[j]}" for j in sel]
        owners = [self.participants[sel[0]]] if len(sel) == 1 else []
        return keys, [int(self.weights[j]) for j in sel], owners


@dataclass
class Model:
    owner: int
    bounds: list[tuple[int, int]]
    layers: list[tuple[list[Any], Any]]  # per layer: NTT diagonal cts, NTT bias ct


@dataclass
class Evaluation:
    """One (round, coalition, batch) evaluation in flight at a server."""

    round: int
    mask: int
    batch: int
    ev: str  # P's evaluation id
    rows: NDArray[np.int64]
    layer: int = 0  # the next layer whose share this server expects
    x: Any = None  # this server's share of the next layer's input (d × m)
    products: set[tuple[int, str]] = field(default_factory=set)  # (P) received from A
    g: U64 | None = None  # (P) its share of r·(Ŷ − b) from the labels, until A answers
    #: (P) per layer, the (bound, weight sum, scale bits) its decryption request announced
    announced: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    #: (P) the job: which columns are tested, who decrypts, the coalition's models
    job: Any = None
    #: a merged evaluation (SampleSkip): the first layer on several fixed batches, the
    #: later layers on their tested samples packed into one batch (:class:`Merge`)
    merge: Any = None

    def index(self, layer: int) -> tuple[int, int, int]:
        return (self.mask, self.batch, layer)

    def take_first_layer(self, x: Any, bound: int, share: U64) -> bool:
        """A merged evaluation: keep the tested columns of the first layer's re-share
        ``x`` of the current fixed batch and move to the next one (``share``: this
        server's data); after the last, the packed batch's input. Returns whether the
        first layer is done (False: no merge, or more fixed batches to go)."""
        mg: Merge | None = self.merge
        if mg is None or self.layer != 0:
            return False
        bi, cols = mg.sources[mg.pos]
        mg.parts.append(np.asarray(x)[:, cols])
        mg.bound = max(mg.bound, bound)
        mg.pos += 1
        if mg.pos < len(mg.sources):
            nbi, _ncols = mg.sources[mg.pos]
            self.batch, self.rows = nbi, mg.fixed_rows[mg.pos]
            self.x = share[self.rows].T.copy()
            self.products = set()
            return False
        self.x = np.concatenate(mg.parts, axis=1)
        self.batch, self.rows = mg.packed_id, mg.packed_rows
        self.layer = 1
        return True


@dataclass
class Merge:
    """A merged evaluation's plan: ``sources`` (fixed batch, tested columns) in order,
    their rows, and the packed batch (id, rows) the later layers run on."""

    sources: list[tuple[int, NDArray[np.int64]]]
    fixed_rows: list[NDArray[np.int64]]
    packed_id: int
    packed_rows: NDArray[np.int64]
    pos: int = 0
    parts: list[Any] = field(default_factory=list)
    bound: int = 1

    @classmethod
    def of(cls, sources: Sequence[tuple[int, NDArray[np.int64]]],
           batches: Sequence[NDArray[np.int64]], packed_id: int) -> Merge:
        fixed = [batches[bi] for bi, _c in sources]
        packed = np.concatenate([rows[cols] for rows, (_b, cols) in zip(fixed, sources,
                                                                         strict=True)])
        return cls(list(sources), fixed, packed_id, packed)


class ServerBase:
    """What P and A share: data shares, encrypted models, products on their share."""

    name = "server"

    def __init__(self, bfv: BFVContext, spec: ModelSpec, n: int, config: SecSVConfig,
                 rounds: Sequence[RoundInfo], *, session: str) -> None:
        self._bfv, self._spec, self._n, self._cfg = bfv, spec, n, config
        self._rounds = tuple(rounds)
        self._b = Binding(session, PROTOCOL, self.name)
        #: this server's own time by kind of work
        self.clock = Clock()
        self._plan: Plan | None = None
        self._round = -1  # the round whose models this server accepts
        self._eval: Evaluation | None = None  # the evaluation in flight
        self._x: U64 = np.zeros((0, spec.in_features), dtype=np.uint64)
        self._y: U64 = np.zeros(0, dtype=np.uint64)
        self._owner: NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._xbound: dict[int, int] = {}
        self._models: dict[tuple[int, str], Model] = {}
        self._plain_cache: dict[tuple[int, ...], list[Any]] = {}
        # (round, mask, layer) -> (diagonal cts, bias ct, (keys, weights) summed)
        self._agg_cache: dict[tuple[int, int, int], tuple[list[Any], Any, tuple[
            tuple[str, ...], tuple[int, ...]]]] = {}
        self._scaled: dict[tuple[int, str, int], tuple[list[Any], Any]] = {}
        self._scalars: dict[int, Any] = {}

    @property
    def plan(self) -> Plan:
        """The plan (public): batch width, layers, fixed point."""
        if self._plan is None:
            raise ProtocolError(f"{self.name}: no plan yet")
        return self._plan

    def scalar(self, q: int) -> Any:
        if q not in self._scalars:
            self._scalars[q] = self._bfv.scalar_ntt(q)
        return self._scalars[q]

    def scaled(self, round_: int, key: str, q: int, layer: int) -> tuple[list[Any], Any]:
        """``q·[[θ^{(l)}]]`` (``q`` is fixed per client and round: cached)."""
        ck = (round_, key, layer)
        if ck not in self._scaled:
            cts, bias = self._models[(round_, key)].layers[layer]
            if q != 1:
                s = self.scalar(q)
                cts = [self._bfv.multiply_plain(c, s) for c in cts]
                bias = self._bfv.multiply_plain(bias, s)
            self._scaled[ck] = (cts, bias)
        return self._scaled[ck]

    def start_round(self, t: int) -> None:
        """Accept models (and evaluations) of round ``t`` from now on."""
        self._round = t

    def end_round(self, t: int) -> None:
        """Forget round ``t``'s encrypted models and sums (memory)."""
        self._agg_cache.clear()
        self._scaled.clear()
        self._eval = None
        for key in [k for k in self._models if k[0] == t]:
            del self._models[key]

    def suspend(self) -> Evaluation:
        """Set the evaluation in flight aside (its state travels with it) so that another
        can start: a runtime that carries the messages of many evaluations in one
        exchange (Flower) keeps several in flight, one active at a time. Every check a
        message of that evaluation meets is unchanged once it is :meth:`resume` d."""
        ev = self._need_eval()
        self._eval = None
        return ev

    def resume(self, ev: Evaluation) -> None:
        """Make an evaluation set aside by :meth:`suspend` the one in flight."""
        if self._eval is not None:
            raise ProtocolError(f"{self.name}: another evaluation is in flight")
        if not isinstance(ev, Evaluation) or ev.round != self._round:
            raise ProtocolError(f"{self.name}: not an evaluation of this round")
        self._eval = ev

    def _need_eval(self) -> Evaluation:
        if self._eval is None:
            raise ProtocolError(f"{self.name}: no evaluation in flight")
        return self._eval

    @receives("secsv/data")
    def receive_data(self, blobs: Sequence[bytes]) -> None:
        """Alg. 3, step 3: every client's share of its test data and labels."""
        with self.clock("other"):
            self._receive_data(blobs)

    def _receive_data(self, blobs: Sequence[bytes]) -> None:
        xs, ys, owners = [], [], []
        for data in blobs:
            msg = wire.decode(data, expect="secsv/data", max_bytes=8 * MAX_SAMPLES * 4096)
            c = fields.integer(msg.meta, "client", 0, self._n - 1)
            self._b.check(msg.meta, step="data", sender=f"client:{c}", what="data share")
            rows = fields.integer(msg.meta, "rows", 0, MAX_SAMPLES)
            cols = fields.integer(msg.meta, "cols", 1, 1 << 16)
            if cols != self._spec.in_features or len(msg.blobs) != 2 or c in self._xbound:
                raise ProtocolError("malformed data share")
            self._xbound[c] = fields.integer(msg.meta, "bound", 1, self._bfv.t // 2)
            x = u64(msg.blobs[0], (rows, cols), "data share")
            y = u64(msg.blobs[1], (rows,), "label share")
            if rows and (int(x.max()) >= self._bfv.t or int(y.max()) >= self._bfv.t):
                raise ProtocolError("share out of range")
            xs.append(x)
            ys.append(y)
            owners.append(np.full(rows, c, dtype=np.int64))
        if sorted(self._xbound) != list(range(self._n)):
            raise ProtocolError("data shares must come from every client, once each")
        self._x, self._y = np.concatenate(xs), np.concatenate(ys)
        self._owner = np.concatenate(owners)

    @receives("secsv/model")
    def receive_model(self, data: bytes) -> tuple[int, str]:
        """Alg. 3, step 3: an encrypted model of the current round (from its owner; the
        global model from the leader)."""
        with self.clock("other"):
            return self._receive_model(data)

    def _receive_model(self, data: bytes) -> tuple[int, str]:
        msg = wire.decode(data, expect="secsv/model", max_bytes=1 << 31)
        owner = fields.integer(msg.meta, "owner", 0, self._n - 1)
        self._b.check(msg.meta, step="model", sender=f"client:{owner}", round=self._round,
                      broadcast=True, what="model")
        rnd = fields.integer(msg.meta, "round", 0, 1 << 20)
        if rnd != self._round:
            raise ReplayRefused("model of another round", check="round")
        key = msg.meta.get("key")
        bounds = msg.meta.get("bounds")
        plan = self.plan
        if not isinstance(key, str) or not isinstance(bounds, list) or len(bounds) != len(
                plan.layers) or key not in ("global", f"c{owner}"):
            raise ProtocolError("malformed model message")
        need = sum(lp.n_cts() + 1 for lp in plan.layers)
        if len(msg.blobs) != need:
            raise ProtocolError("model message has the wrong number of ciphertexts")
        layers, at, bl = [], 0, []
        for lp, bd in zip(plan.layers, bounds, strict=True):
            if not (isinstance(bd, list) and len(bd) == 2 and all(
                    isinstance(v, int) and 1 <= v < self._bfv.t for v in bd)):
                raise ProtocolError("malformed model bounds")
            bl.append((bd[0], bd[1]))
            cts = [self._bfv.deserialize(b, ntt=True) for b in msg.blobs[at:at + lp.n_cts()]]
            bias = self._bfv.deserialize(msg.blobs[at + lp.n_cts()], ntt=True)
            at += lp.n_cts() + 1
            layers.append((cts, bias))
        self._models[(rnd, key)] = Model(owner, bl, layers)
        return rnd, key

    # ------------------------------------------------------------- products
    def _plains(self, layer: int, x: U64, key: tuple[int, ...] | None) -> list[Any]:
        """NTT plaintexts of the folded data diagonals of a share ``x`` (d_in × m)."""
        if key is not None and key in self._plain_cache:
            return self._plain_cache[key]
        period, steps, bases = self._bases(layer, x)
        if period:
            pts = [p for b in bases for p in self._bfv.rotations_ntt(b, steps)]
        else:
            pts = bases
        if key is not None:
            self._plain_cache[key] = pts
        return pts

    def _bases(self, layer: int, x: U64) -> tuple[int, list[int], list[Any]]:
        """``(L, steps, plaintexts)``: every data plaintext (``L = 0``, classic
        diagonals), or the ``d_in / L`` bases of the rotation layout, whose row rotations
        by ``steps`` are the others (one encoding and NTT per ``L`` plaintexts)."""
        lp = self.plan.layers[layer]
        if lp.per > 1:  # a conv layer: this share's im2col patches (local, exact mod t)
            x = im2col(x, self._spec.layers[layer])
        cols = lp.cols(self.plan.width)
        period = row_period(lp, self.plan.width, self._bfv.slots)
        if period:
            rows = rd.data_bases_rotated(x, lp.rows, cols, self._bfv.slots, lp.fold)
            return period, [b * cols for b in range(period)], [
                self._bfv.encode_ntt(r) for r in rows]
        rows = fold_diagonals(rd.data_diagonals(x, lp.rows, cols), lp.fold, self._bfv.slots)
        return 0, [], [self._bfv.encode_ntt(r) for r in rows]

    def product(self, model: tuple[list[Any], Any], layer: int, x: U64,
                cache_key: tuple[int, ...] | None, with_bias: bool) -> Any:
        if cache_key is None and row_period(self.plan.layers[layer], self.plan.width,
                                             self._bfv.slots):
            _p, steps, bases = self._bases(layer, x)  # one plaintext at a time
            out = self._bfv.dot_plain_rotations(model[0], bases, steps)
        else:
            out = rd.reduce_half_bfv(self._bfv, model[0], self._plains(layer, x, cache_key))
        if with_bias:
            self._bfv.add_inplace(out, model[1])
        return out

    def aggregated(self, round_: int, keys: Sequence[str], q: Sequence[int], layer: int,
                   mask: int) -> tuple[list[Any], Any]:
        """``Σ q_i [[θ_i^{(l)}]]`` (cached per round, subset and layer, with its terms)."""
        ck = (round_, mask, layer)
        terms = (tuple(keys), tuple(q))
        if ck in self._agg_cache:
            return self._agg_cache[ck][:2]
        done = self._agg_cache.get((round_, mask & (mask - 1), layer))
        if len(keys) > 1 and done is not None and done[2] == (terms[0][1:], terms[1][1:]):
            # incremental: θ_S = θ_{S \ {first}} + q_first·θ_first, one addition per
            # ciphertext instead of |S| - 1 (the cached entry's terms are checked)
            first = self.scaled(round_, keys[0], q[0], layer)
            out = ([self._bfv.add(a, b) for a, b in zip(done[0], first[0], strict=True)],
                   self._bfv.add(done[1], first[1]))
        else:
            parts = [self.scaled(round_, k, qi, layer) for k, qi in zip(keys, q, strict=True)]
            if len(parts) == 1:
                out = parts[0]
            else:
                cts = [self._bfv.add_many([p[0][u] for p in parts])
                       for u in range(len(parts[0][0]))]
                out = (cts, self._bfv.add_many([p[1] for p in parts]))
        # Drop sums no later subset builds on, in the order exact SSVs evaluate subsets
        # (by size, then by mask; utility.ascending_table): X is the subset-without-first
        # of X + 2^k for 2^k < lowbit(X) only. Their ciphertexts return to SEAL's memory
        # pool, so the next sums reuse warm memory instead of page-faulting fresh pages
        # (an addition into fresh memory measured ~5x one into reused memory). Another
        # order only loses the shortcut (the full sum is computed again), never exactness.
        now = _subset_order(mask)
        for old in [k for k in self._agg_cache if k[0] == round_ and k[1] != mask
                    and _subset_order(k[1] + ((k[1] & -k[1]) >> 1)) < now]:
            del self._agg_cache[old]
        self._agg_cache[ck] = (out[0], out[1], terms)
        return out


def _subset_order(mask: int) -> tuple[int, int]:
    """Position of a subset in :func:`fedsec.shapley.utility.ascending_table`'s order."""
    return bin(mask).count("1"), mask


def rows_list(value: Any, n_samples: int, width: int) -> NDArray[np.int64]:
    if not isinstance(value, list) or not 1 <= len(value) <= width or not all(
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v < n_samples
            for v in value) or len(set(value)) != len(value):
        raise ProtocolError("malformed batch: sample ids")
    return np.asarray(value, dtype=np.int64)
