"""Homomorphic matrix products: Jiang et al. (2018) and Zheng et al.'s Matrix Squaring.

We compute ``A B`` for a ``d_out x d_in`` matrix ``A`` (a model layer, encrypted) and a
``d_in x m`` matrix ``B`` (a batch of ``m`` samples as columns, encrypted -- "Full" -- or
plaintext -- "Half").

Jiang et al. (CCS 2018, Zheng et al.'s [24])
----------------------------------------
For square ``d x d`` matrices packed row-major (slot ``i*d + j``),

    A B = sum_{o<d} xi^o(sigma(A)) * psi^o(tau(B))          (slot-wise products)

with ``sigma(A)[i,j] = A[i, i+j]``, ``tau(B)[i,j] = B[i+j, j]``, the column shift
``xi^o(X)[i,j] = X[i, j+o]`` and the row shift ``psi^o(X)[i,j] = X[i+o, j]`` (indices mod
``d``). For a ``rows x d`` matrix with ``rows | d``, stack ``r = d/rows`` copies of it
(``A-bar``): ``rows`` products give ``H`` whose ``r`` row blocks sum to ``A B``; the sum
is a *rotate-and-sum* over ``r`` blocks of ``rows*d`` slots (``log2 r`` rotations when ``r``
is a power of two). ``B`` is padded with zero columns to ``d x d`` (``m <= d``).

The linear transforms ``sigma, tau, xi, psi`` are applied **in the clear by whoever holds
the matrix** before encryption (the model owner for ``A``, the data holder for ``B``), as
Zheng et al. does: the server then only multiplies, adds, relinearizes, rotates and rescales.

Matrix Squaring (Zheng et al., Sec. 4.2.2)
--------------------------------------
A ciphertext has ``N`` slots, so a square must have order ``d <= floor(sqrt(N))``. For
``d_in > d`` split ``A`` into ``K = ceil(d_in/d)`` column blocks and ``B`` into ``K`` row
blocks (zero padding), ``A B = sum_k A_k B_k``; for ``d_out > d`` split ``A`` into
``J = ceil(d_out/d)`` row blocks, each giving its own output ciphertext.

*Efficient form* (``per_block=False``, the default): rotate-and-sum is linear, so all
``K * rows`` products of a row block are added as unrelinearized (size-3) ciphertexts, then
relinearized once, rotated-and-summed once and rescaled once. The authors' code rotates
(and relinearizes) each column block separately -- ``K`` times the rotations;
``per_block=True`` reproduces that for benchmarks.

Tiling and the block order
--------------------------
Zheng et al. fixes ``d = floor(sqrt(N))`` and one square per ciphertext (batch ``m = d``). A
smaller ``d`` lets ``t = floor(N/d^2)`` squares share a ciphertext (SIMD over tiles: every
rotation stays inside its tile, the ``A`` side is replicated per tile), so one ciphertext
carries ``t*d`` samples. With ``d = rows`` (``r = 1``) no rotation is needed at all and the
output holds exactly ``A B`` -- no partial sums in other slots. :func:`plan_squaring`
chooses ``d`` by a cost model unless ``block`` is given; ``tiled=False`` gives the paper's
single-square layout.

Folded layout (beyond the papers; :class:`FoldedPlan`)
----------------------------------------------------
A layout for the case where ``B`` is re-encrypted per product (HESV's hidden layers) and
its encryption dominates. The ``N`` slots are cut into ``g`` groups of ``N/g`` slots
(``g`` a power of two); in each group, slot ``i*c + s`` stands for output row ``i`` of a
row block (``rows`` rows) and sample ``s`` (``c = floor(N/(g*rows))`` samples per product).
Term ``k`` puts inner index ``k*g + q`` in group ``q``: ``A[i, k*g + q]`` (replicated over
the samples) and ``B[k*g + q, s]`` (replicated over the rows). The ``ceil(d_in/g)``
slot-wise products add up to ``g`` partial sums, and a *cyclic* rotate-and-sum over the
whole ring (``log2 g`` rotations by ``N/g * 2^i``) leaves in **every** slot the complete
``(A B)[i, s]``: each group holds the same copy, no slot holds a partial sum, so a
decryptor sees exactly ``A B`` (unlike the tiled squares' rotate-and-sum). ``B`` is
replicated ``rows`` times instead of the squares' ``block`` times, so the client
encrypts ``~d_in*rows/N`` ciphertexts per sample; ``g`` trades those against output
ciphertexts and rotations. With complex packing two terms share a ciphertext as above.

Output layout: row block ``j``'s ciphertext holds, in tile ``beta``, the ``rows x d``
matrix ``(A B)[j*rows : (j+1)*rows, beta*d : (beta+1)*d]`` row-major in its first
``rows*d`` slots. With ``r > 1`` the other slots of a tile hold partial sums; decrypting
parties then see more than ``A B`` (mask them before decryption if that matters).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedsec.crypto.ckks import Ciphertext, CKKSContext

__all__ = ["SquaringPlan", "FoldedPlan", "plan_squaring", "squaring_product",
           "folded_product", "matrix_product", "plan_folded", "sum_steps", "DEFAULT_COSTS"]

FloatArray = NDArray[np.float64]

#: Costs (ms, one loaded core, n = 4096, three primes) the planner uses: lazy product,
#: relinearization, rotation, rescale, encryption of one ciphertext; an optional "out" is
#: charged per output ciphertext (e.g. sending and decrypting it).
DEFAULT_COSTS: dict[str, float] = {"mul": 0.25, "relin": 1.8, "rot": 2.1, "rescale": 0.5,
                                   "enc": 1.8}


def sum_steps(r: int, stride: int) -> list[tuple[str, int, int]]:
    """Rotate-and-sum of ``r`` blocks of ``stride`` slots, as ``(op, k, step)`` lines.

    ``("double", i, step)``: ``P_{2^(i+1)} = P_{2^i} + rot(P_{2^i}, step)``;
    ``("add", b, step)``: ``acc += rot(P_{2^b}, step)`` (``step`` 0: no rotation).
    Slot ``p < stride`` of the result holds ``sum_{q<r} x[p + q*stride]``.
    """
    if r < 1:
        raise ValueError("r must be >= 1")
    ops: list[tuple[str, int, int]] = []
    top = r.bit_length() - 1
    for i in range(top):
        ops.append(("double", i, (1 << i) * stride))
    offset = 0
    for b in range(top, -1, -1):
        if r >> b & 1:
            ops.append(("add", b, offset * stride))
            offset += 1 << b
    return ops


def _rotation_count(r: int) -> int:
    return sum(1 for op, _, step in sum_steps(r, 1) if step != 0)


@dataclass(frozen=True)
class SquaringPlan:
    """How ``A (d_out x d_in) @ B (d_in x m)`` is laid out in ciphertexts.

    Attributes
    ----------
    d_out, d_in : int
        Shape of ``A``.
    slots : int
        Slots per ciphertext.
    block : int
        Order ``d`` of the squares (``d*d <= slots``).
    rows : int
        Rows of ``A`` per square (a divisor of ``block``; ``d_out`` padded up when
        ``d_out <= block``, else ``block``).
    tiles : int
        Squares per ciphertext.
    packed : bool
        Complex packing: two product terms per ciphertext (see :func:`plan_squaring`).
    """

    d_out: int
    d_in: int
    slots: int
    block: int
    rows: int
    tiles: int
    packed: bool = False

    def __post_init__(self) -> None:
        d = self.block
        if d < 1 or d * d * self.tiles > self.slots or self.tiles < 1:
            raise ValueError(f"{self.tiles} squares of order {d} do not fit {self.slots} slots")
        if self.rows < 1 or d % self.rows:
            raise ValueError("rows must divide the block order")
        if self.d_out < 1 or self.d_in < 1:
            raise ValueError("matrix sizes must be >= 1")

    # ---------------------------------------------------------------- shape facts
    @property
    def row_blocks(self) -> int:
        """``J``: output ciphertexts per product."""
        return math.ceil(self.d_out / self.rows)

    @property
    def col_blocks(self) -> int:
        """``K``: column blocks of ``A`` (row blocks of ``B``)."""
        return math.ceil(self.d_in / self.block)

    @property
    def fold(self) -> int:
        """``r = block / rows``: row blocks of ``H`` summed by rotations."""
        return self.block // self.rows

    @property
    def capacity(self) -> int:
        """Columns of ``B`` (samples) one product handles."""
        return self.tiles * self.block

    @property
    def terms(self) -> int:
        """Slot-wise products per row block (``K * rows``)."""
        return self.col_blocks * self.rows

    @property
    def a_count(self) -> int:
        """Ciphertexts of ``A`` per row block."""
        return (self.terms + 1) // 2 if self.packed else self.terms

    @property
    def b_count(self) -> int:
        """Ciphertexts (or plaintexts) of ``B`` per batch."""
        return self.a_count

    def rotations(self) -> list[int]:
        """Left-rotation steps the rotate-and-sum needs (Galois keys)."""
        stride = self.rows * self.block
        return sorted({s for _, _, s in sum_steps(self.fold, stride) if s})

    def cost(self, costs: dict[str, float] | None = None, *, per_block: bool = False,
             encrypt_b: bool = False) -> float:
        """Modelled server time per sample (ms), optionally with encrypting ``B``."""
        c = DEFAULT_COSTS if costs is None else costs
        rots = _rotation_count(self.fold) * (self.col_blocks if per_block else 1)
        relins = self.col_blocks if per_block else 1
        rots += 1 if self.packed else 0  # the conjugation
        per_ct = self.row_blocks * (self.a_count * c["mul"] + relins * c["relin"]
                                    + rots * c["rot"] + c["rescale"])
        if encrypt_b:
            per_ct += self.b_count * c["enc"]
        per_ct += self.row_blocks * c.get("out", 0.0)  # e.g. sending and decrypting outputs
        return per_ct / self.capacity

    def to_dict(self) -> dict[str, int]:
        return {"d_out": self.d_out, "d_in": self.d_in, "slots": self.slots,
                "block": self.block, "rows": self.rows, "tiles": self.tiles,
                "packed": self.packed}

    def _pack(self, vecs: list[FloatArray], sign: float) -> list[Any]:
        if not self.packed:
            return list(vecs)
        out = []
        for p in range(0, len(vecs), 2):
            im = vecs[p + 1] if p + 1 < len(vecs) else np.zeros(self.slots)
            out.append(vecs[p] + sign * 1j * im)
        return out

    # ---------------------------------------------------------------- encodings
    def _square_index(self, o: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        d = self.block
        i = np.arange(d)[:, None]
        j = np.arange(d)[None, :]
        return i, (i + j + o) % d

    def encode_a(self, a: ArrayLike) -> list[list[Any]]:
        """Plaintext vectors ``xi^o(sigma(A-bar_{j,k}))`` for each row block ``j`` (in
        ``k``-major, ``o``-minor order), replicated over the tiles."""
        mat = np.asarray(a, dtype=np.float64)
        if mat.shape != (self.d_out, self.d_in):
            raise ValueError(f"A must have shape {(self.d_out, self.d_in)}. "
                             f"Got {mat.shape} instead.")
        d, rows = self.block, self.rows
        pad = np.zeros((self.row_blocks * rows, self.col_blocks * d))
        pad[:self.d_out, :self.d_in] = mat
        out: list[list[FloatArray]] = []
        for j in range(self.row_blocks):
            vecs = []
            for k in range(self.col_blocks):
                sub = pad[j * rows:(j + 1) * rows, k * d:(k + 1) * d]
                bar = np.tile(sub, (self.fold, 1))  # r stacked copies: d x d
                for o in range(rows):
                    i, idx = self._square_index(o)
                    sq = bar[i, idx]  # sq[i, j] = bar[i, i + j + o]
                    vecs.append(self._fill(np.tile(sq.ravel(), self.tiles)))
            out.append(self._pack(vecs, 1.0))
        return out

    def encode_b(self, b: ArrayLike) -> list[Any]:
        """Plaintext vectors ``psi^o(tau(B_k))`` (``k``-major), tile ``beta`` holding
        columns ``beta*d .. beta*d + d - 1`` of ``B``."""
        mat = np.asarray(b, dtype=np.float64)
        if mat.ndim != 2 or mat.shape[0] != self.d_in or not 1 <= mat.shape[1] <= self.capacity:
            raise ValueError(f"B must have shape ({self.d_in}, m) with 1 <= m <= "
                             f"{self.capacity}. Got {mat.shape} instead.")
        d, t = self.block, self.tiles
        pad = np.zeros((self.col_blocks * d, t * d))
        pad[:self.d_in, :mat.shape[1]] = mat
        out = []
        for k in range(self.col_blocks):
            tiles = pad[k * d:(k + 1) * d].reshape(d, t, d).transpose(1, 0, 2)  # (t, d, d)
            for o in range(self.rows):
                i, idx = self._square_index(o)
                # psi^o(tau(X))[i, j] = X[i + j + o, j]
                sq = tiles[:, idx, np.broadcast_to(np.arange(d)[None, :], (d, d))]
                out.append(self._fill(sq.reshape(-1)))
        return self._pack(out, -1.0)

    def _fill(self, v: FloatArray) -> FloatArray:
        out = np.zeros(self.slots)
        out[:v.size] = v
        return out

    def decode(self, outputs: Sequence[ArrayLike], m: int) -> FloatArray:
        """``A B`` (``d_out x m``) from the decrypted outputs (one vector per row block)."""
        if len(outputs) != self.row_blocks or not 1 <= m <= self.capacity:
            raise ValueError(f"need {self.row_blocks} outputs and 1 <= m <= {self.capacity}")
        d, rows, t = self.block, self.rows, self.tiles
        res = np.zeros((self.row_blocks * rows, t * d))
        for j, vec in enumerate(outputs):
            v = np.real(np.asarray(vec))[: t * d * d].reshape(t, d, d)[:, :rows, :]
            res[j * rows:(j + 1) * rows] = v.transpose(1, 0, 2).reshape(rows, t * d)
        return res[:self.d_out, :m]


def _rows_for(d_out: int, d: int) -> int:
    if d_out >= d:
        return d
    return next(r for r in range(d_out, d + 1) if d % r == 0)


def plan_squaring(d_out: int, d_in: int, slots: int, *, block: int | None = None,
                  tiled: bool = True, rotations: bool = True, encrypt_b: bool = False,
                  packed: bool = False, costs: dict[str, float] | None = None
                  ) -> SquaringPlan:
    """Choose a layout for ``A (d_out x d_in) @ B``.

    Parameters
    ----------
    d_out, d_in : int
        Shape of ``A``.
    slots : int
        Slots per ciphertext.
    block : int, optional
        Square order ``d``; default: the cheapest by the cost model (``DEFAULT_COSTS``).
    tiled : bool, default=True
        Several squares per ciphertext; ``False`` is Zheng et al.'s layout (one square,
        ``d = floor(sqrt(slots))`` unless ``block`` is given).
    rotations : bool, default=True
        Allow ``rows < block`` (a rotate-and-sum); ``False`` keeps only rotation-free
        layouts, whose outputs hold exactly ``A B``.
    encrypt_b : bool, default=False
        Count encrypting ``B`` in the cost (when ``B`` is re-encrypted per product).
    packed : bool, default=False
        Complex packing (beyond the papers): the operands of terms ``2p`` and ``2p+1``
        share a ciphertext as ``a_2p + i a_2p+1`` and ``b_2p - i b_2p+1``, whose product's
        real part is ``a_2p b_2p + a_2p+1 b_2p+1``. Half the ciphertexts, encryptions and
        products; one conjugation per output (``x + conj(x)``, the conjugation key)
        removes the cross terms from the imaginary parts.
    """
    for name, v in (("d_out", d_out), ("d_in", d_in), ("slots", slots)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"The '{name}' parameter of plan_squaring must be an int >= 1. "
                             f"Got {v!r} instead.")
    top = math.isqrt(slots)
    if block is not None:
        if isinstance(block, bool) or not isinstance(block, int) or not 1 <= block <= top:
            raise ValueError(f"The 'block' parameter of plan_squaring must be an int in "
                             f"1..{top}. Got {block!r} instead.")
        candidates = [block]
    elif not tiled:
        candidates = [top]
    else:
        candidates = list(range(1, top + 1))
    best: SquaringPlan | None = None
    best_cost = math.inf
    for d in candidates:
        rows = _rows_for(d_out, d)
        if not rotations and rows != d:
            continue
        plan = SquaringPlan(d_out, d_in, slots, d, rows, slots // (d * d) if tiled else 1,
                            packed)
        c = plan.cost(costs, encrypt_b=encrypt_b)
        if c <= best_cost * (1 + 1e-9):  # ties: the larger block (fewer outputs)
            best, best_cost = plan, c
    if best is None:
        raise ValueError(f"no rotation-free layout with block {block} for d_out={d_out}")
    return best


def squaring_product(ctx: CKKSContext, plan: SquaringPlan, a: Sequence[Sequence[Ciphertext]],
                     b: Sequence[Any], *, plain_b: bool = False, per_block: bool = False,
                     rescale: bool = True) -> list[Ciphertext]:
    """``[[A B]]`` by Matrix Squaring: one ciphertext per row block of ``A``.

    Parameters
    ----------
    ctx : CKKSContext
        Needs relinearization keys (Full), Galois keys for :meth:`SquaringPlan.rotations`
        and, for packed plans, the conjugation key.
    plan : SquaringPlan
    a : list of lists of Ciphertext
        ``a[j]`` are the encrypted vectors of :meth:`SquaringPlan.encode_a` for row block
        ``j``.
    b : list
        Encrypted vectors of :meth:`SquaringPlan.encode_b` (Full), or with ``plain_b``
        plaintexts encoded at the level and scale of ``a[0][0]`` (Half).
    per_block : bool, default=False
        Rotate-and-sum each column block separately (the authors' form, ``K`` times the
        rotations); the default adds all blocks first.
    rescale : bool, default=True
        Rescale the result once (the output scale is ``a.scale * b.scale / q``).
    """
    if len(a) != plan.row_blocks or any(len(v) != plan.a_count for v in a):
        raise ValueError(f"a must hold {plan.row_blocks} lists of {plan.a_count} ciphertexts")
    if len(b) != plan.b_count:
        raise ValueError(f"b must hold {plan.b_count} operands")
    if plan.packed and per_block:
        raise ValueError("per_block needs an unpacked plan")
    stride = plan.rows * plan.block
    ops = sum_steps(plan.fold, stride)
    outs = []
    for aj in a:
        groups = ([list(range(k * plan.rows, (k + 1) * plan.rows))
                   for k in range(plan.col_blocks)] if per_block
                  else [list(range(plan.a_count))])
        acc = None
        for idx in groups:
            if plain_b:
                terms = [ctx.multiply_plain(aj[i], b[i], rescale=False) for i in idx]
                h = ctx.add_many(terms) if len(terms) > 1 else terms[0]
            else:
                h = ctx.relinearize(_dot_lazy(ctx, [aj[i] for i in idx], [b[i] for i in idx]))
            h = _rotate_and_sum(ctx, h, ops)
            acc = h if acc is None else ctx.add(acc, h)
        assert acc is not None
        if plan.packed:  # 2 Re(x) at scale s, read as Re(x) at scale 2 s
            acc = ctx.add(acc, ctx.conjugate(acc))
            acc.scale = 2.0 * acc.scale
        outs.append(ctx.rescale(acc) if rescale else acc)
    return outs


@dataclass(frozen=True)
class FoldedPlan:
    """``A (d_out x d_in) @ B (d_in x m)`` in the folded layout (see the module docstring).

    Attributes
    ----------
    d_out, d_in : int
        Shape of ``A``.
    slots : int
        Slots per ciphertext.
    rows : int
        Output rows per ciphertext (``A`` is cut into ``ceil(d_out/rows)`` row blocks).
    groups : int
        ``g``, a power of two dividing ``slots``: partial sums added by rotations.
    packed : bool
        Complex packing: two terms per ciphertext.
    """

    d_out: int
    d_in: int
    slots: int
    rows: int
    groups: int
    packed: bool = False

    def __post_init__(self) -> None:
        g = self.groups
        if g < 1 or g & (g - 1) or self.slots % g:
            raise ValueError("groups must be a power of two dividing the slot count")
        if self.rows < 1 or self.rows * g > self.slots:
            raise ValueError(f"{self.rows} rows in {g} groups do not fit {self.slots} slots")
        if self.d_out < 1 or self.d_in < 1:
            raise ValueError("matrix sizes must be >= 1")

    @property
    def stride(self) -> int:
        """Slots per group."""
        return self.slots // self.groups

    @property
    def capacity(self) -> int:
        """Columns of ``B`` (samples) one product handles."""
        return self.stride // self.rows

    @property
    def row_blocks(self) -> int:
        """Output ciphertexts per product."""
        return math.ceil(self.d_out / self.rows)

    @property
    def terms(self) -> int:
        """Slot-wise products per row block (``ceil(d_in/groups)``)."""
        return math.ceil(self.d_in / self.groups)

    @property
    def a_count(self) -> int:
        """Ciphertexts of ``A`` per row block."""
        return (self.terms + 1) // 2 if self.packed else self.terms

    @property
    def b_count(self) -> int:
        """Ciphertexts (or plaintexts) of ``B`` per product."""
        return self.a_count

    def rotations(self) -> list[int]:
        """Left-rotation steps of the cyclic rotate-and-sum (Galois keys)."""
        return [self.stride << i for i in range(self.groups.bit_length() - 1)]

    def cost(self, costs: dict[str, float] | None = None, *, encrypt_b: bool = False,
             per_block: bool = False) -> float:
        """Modelled server time per sample (ms), optionally with encrypting ``B``."""
        if per_block:
            raise ValueError("the folded layout has no per-block form")
        c = DEFAULT_COSTS if costs is None else costs
        rots = len(self.rotations()) + (1 if self.packed else 0)
        per_ct = self.row_blocks * (self.a_count * c["mul"] + c["relin"] + rots * c["rot"]
                                    + c["rescale"] + c.get("out", 0.0))
        if encrypt_b:
            per_ct += self.b_count * c["enc"]
        return per_ct / self.capacity

    def to_dict(self) -> dict[str, Any]:
        return {"layout": "folded", "d_out": self.d_out, "d_in": self.d_in,
                "slots": self.slots, "rows": self.rows, "groups": self.groups,
                "packed": self.packed}

    def _pack(self, vecs: list[FloatArray], sign: float) -> list[Any]:
        if not self.packed:
            return list(vecs)
        out = []
        for p in range(0, len(vecs), 2):
            im = vecs[p + 1] if p + 1 < len(vecs) else np.zeros(self.slots)
            out.append(vecs[p] + sign * 1j * im)
        return out

    def _grid(self, cells: FloatArray) -> FloatArray:
        """A slot vector from ``cells[q, i, s]`` (group, row, sample)."""
        out = np.zeros(self.slots)
        view = out.reshape(self.groups, self.stride)[:, :self.rows * self.capacity]
        view[...] = cells.reshape(self.groups, self.rows * self.capacity)
        return out

    def encode_a(self, a: ArrayLike) -> list[list[Any]]:
        """Per row block ``j``, term ``k``: ``A[j*rows + i, k*g + q]`` at every sample's
        slot of row ``i`` in group ``q``."""
        mat = np.asarray(a, dtype=np.float64)
        if mat.shape != (self.d_out, self.d_in):
            raise ValueError(f"A must have shape {(self.d_out, self.d_in)}. "
                             f"Got {mat.shape} instead.")
        g, rows, c = self.groups, self.rows, self.capacity
        pad = np.zeros((self.row_blocks * rows, self.terms * g))
        pad[:self.d_out, :self.d_in] = mat
        out = []
        for j in range(self.row_blocks):
            vecs = []
            for k in range(self.terms):
                sub = pad[j * rows:(j + 1) * rows, k * g:(k + 1) * g]  # (rows, g)
                cells = np.broadcast_to(sub.T[:, :, None], (g, rows, c))
                vecs.append(self._grid(cells))
            out.append(self._pack(vecs, 1.0))
        return out

    def encode_b(self, b: ArrayLike) -> list[Any]:
        """Per term ``k``: ``B[k*g + q, s]`` at sample ``s``'s slot of every row in group
        ``q`` (columns past ``m`` are zero)."""
        mat = np.asarray(b, dtype=np.float64)
        if mat.ndim != 2 or mat.shape[0] != self.d_in or not 1 <= mat.shape[1] <= self.capacity:
            raise ValueError(f"B must have shape ({self.d_in}, m) with 1 <= m <= "
                             f"{self.capacity}. Got {mat.shape} instead.")
        g, rows, c = self.groups, self.rows, self.capacity
        pad = np.zeros((self.terms * g, c))
        pad[:self.d_in, :mat.shape[1]] = mat
        vecs = [self._grid(np.broadcast_to(pad[k * g:(k + 1) * g, None, :], (g, rows, c)))
                for k in range(self.terms)]
        return self._pack(vecs, -1.0)

    def decode(self, outputs: Sequence[ArrayLike], m: int) -> FloatArray:
        """``A B`` (``d_out x m``) from the decrypted outputs (one vector per row block;
        group 0's copy)."""
        if len(outputs) != self.row_blocks or not 1 <= m <= self.capacity:
            raise ValueError(f"need {self.row_blocks} outputs and 1 <= m <= {self.capacity}")
        rows, c = self.rows, self.capacity
        res = np.vstack([np.real(np.asarray(v))[:rows * c].reshape(rows, c)
                         for v in outputs])
        return res[:self.d_out, :m]


def plan_folded(d_out: int, d_in: int, slots: int, *, rows: int, groups: int,
                packed: bool = False) -> FoldedPlan:
    """A :class:`FoldedPlan` (``rows`` is capped at ``d_out``)."""
    return FoldedPlan(d_out, d_in, slots, min(rows, d_out), groups, packed)


def folded_product(ctx: CKKSContext, plan: FoldedPlan, a: Sequence[Sequence[Ciphertext]],
                   b: Sequence[Any], *, plain_b: bool = False, rescale: bool = True
                   ) -> list[Ciphertext]:
    """``[[A B]]`` in the folded layout: one ciphertext per row block, every group holding
    the whole ``A B`` block (no partial sums anywhere).

    Operands as for :func:`squaring_product` (:meth:`FoldedPlan.encode_a` /
    :meth:`FoldedPlan.encode_b`); needs Galois keys for :meth:`FoldedPlan.rotations` and,
    packed, the conjugation key.
    """
    if len(a) != plan.row_blocks or any(len(v) != plan.a_count for v in a):
        raise ValueError(f"a must hold {plan.row_blocks} lists of {plan.a_count} ciphertexts")
    if len(b) != plan.b_count:
        raise ValueError(f"b must hold {plan.b_count} operands")
    steps = plan.rotations()
    outs = []
    for aj in a:
        if plain_b:
            terms = [ctx.multiply_plain(x, y, rescale=False) for x, y in zip(aj, b, strict=True)]
            h = ctx.add_many(terms) if len(terms) > 1 else terms[0]
        else:
            h = ctx.relinearize(_dot_lazy(ctx, aj, b))
        for step in steps:  # cyclic: after log2(g) doublings every slot has the full sum
            h = ctx.add(h, ctx.rotate(h, step))
        if plan.packed:  # 2 Re(x) at scale s, read as Re(x) at scale 2 s
            h = ctx.add(h, ctx.conjugate(h))
            h.scale = 2.0 * h.scale
        outs.append(ctx.rescale(h) if rescale else h)
    return outs


def _dot_lazy(ctx: CKKSContext, xs: Sequence[Ciphertext], ys: Sequence[Any]
              ) -> Ciphertext:
    """``sum_i xs[i] * ys[i]`` unrelinearized (size 3), accumulated in place into one
    ciphertext (one temporary instead of a list of products: ~15% faster for 33 terms)."""
    import tenseal.sealapi as seal

    ev = ctx._evaluator
    acc = seal.Ciphertext()
    tmp = seal.Ciphertext()
    for k, (x, y) in enumerate(zip(xs, ys, strict=True)):
        if x.parms_id() != y.parms_id():
            x, y = ctx._align(x, y)
        if k == 0:
            ev.multiply(x, y, acc)
        else:
            ev.multiply(x, y, tmp)
            ev.add_inplace(acc, tmp)
    return acc


def matrix_product(ctx: CKKSContext, plan: SquaringPlan | FoldedPlan,
                   a: Sequence[Sequence[Ciphertext]], b: Sequence[Any], *,
                   plain_b: bool = False, rescale: bool = True) -> list[Ciphertext]:
    """:func:`squaring_product` or :func:`folded_product`, by the plan's layout."""
    if isinstance(plan, FoldedPlan):
        return folded_product(ctx, plan, a, b, plain_b=plain_b, rescale=rescale)
    return squaring_product(ctx, plan, a, b, plain_b=plain_b, rescale=rescale)


def _rotate_and_sum(ctx: CKKSContext, h: Ciphertext, ops: list[tuple[str, int, int]]
                    ) -> Ciphertext:
    if len(ops) == 1 and ops[0][2] == 0:
        return h
    powers = {0: h}
    acc = None
    for op, k, step in ops:
        if op == "double":
            powers[k + 1] = ctx.add(powers[k], ctx.rotate(powers[k], step))
        else:
            term = powers[k] if step == 0 else ctx.rotate(powers[k], step)
            acc = term if acc is None else ctx.add(acc, term)
    assert acc is not None
    return acc
