"""Matrix Reducing (Zheng et al., Sec. 5.2, Alg. 5): ``A·B`` with slot-wise products only.

``A`` is ``d_out × d_in`` (a layer's weights), ``B`` is ``d_in × m`` (a batch of ``m``
samples as columns). The product is laid out as a ``d_out × W`` grid in the slots (row
``i`` of ``A·B`` at slots ``i·W … i·W + m − 1``; ``W = ⌊N / d_out⌋`` is the batch capacity),
and for each ``o ∈ [d_in]``

    Ã⁽ᵒ⁾[i, j] = A[i, (i + j + o) mod d_in],    B̃⁽ᵒ⁾[i, j] = B[(i + j + o) mod d_in, j],

so ``Σ_o Ã⁽ᵒ⁾ ⊙ B̃⁽ᵒ⁾ = A·B`` entrywise (as ``o`` runs over ``[d_in]``, ``(i + j + o) mod d_in``
runs over every inner index once). This is the paper's ``δ(Ā, B)``: ``ξ^o(σ(Ā))`` and
``ψ^o(τ(B))`` cut to ``d_out × m``, with ``Ā`` the horizontal copies of ``A`` (its column
index taken mod ``d_in``). ``d_in`` products and no rotation.

Padding: the paper pads ``A`` and ``B`` with zeros so that ``d_in`` divides the packed width
and ``d_out <= d_in``; written with indices modulo ``d_in`` as above the identity holds for
every shape, so the only padding left is the slot grid itself (columns ``m … W − 1`` and
slots past ``d_out·W`` are zero or ignored) — :func:`grid_width`.

Variants:

* **Half** (what SecSV uses): ``A`` encrypted, ``B`` in plaintext -- the ``B̃⁽ᵒ⁾`` are
  plaintexts. In BFV (:func:`reduce_half_bfv`) the product is exact modulo ``t``.
* **Rotation layout** (beyond the paper, :func:`rotation_period`): another bijection
  ``u ↦ k`` per slot, chosen so that the data plaintexts are a few bases and their BFV
  batching-row rotations -- which, in NTT form, are coefficient permutations
  (:meth:`fedsec.crypto.bfv.BFVContext.rotations_ntt`), far cheaper than encoding.
* **Full** (HESV-style, for Zheng et al.'s Table 4): both encrypted, in CKKS
  (:func:`reduce_full_ckks`); also :func:`reduce_half_ckks` for a like-for-like Half.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["grid_width", "model_diagonals", "data_diagonals", "bias_grid", "read_grid",
           "reduce_plain", "reduce_half_bfv", "reduce_half_ckks", "reduce_full_ckks",
           "rotation_period", "model_rows_rotated", "data_rows_rotated",
           "data_bases_rotated"]


def grid_width(d_out: int, slots: int) -> int:
    """Batch capacity ``W = ⌊slots / d_out⌋`` (the paper's ``m <= ⌊N/d_out⌋``)."""
    if d_out < 1 or d_out > slots:
        raise ValueError(f"d_out must lie in 1..{slots}. Got {d_out} instead.")
    return slots // d_out


@lru_cache(maxsize=32)
def _gather(d_out: int, d_in: int, width: int, side: str) -> NDArray[np.int64]:
    """Flat gather indices of the diagonals (computed once per shape, read-only).

    With ``k = (i + j + o) mod d_in`` over the ``(d_in, d_out, width)`` grid:
    ``side="model"`` indexes ``A`` (``d_out × d_in``, row-major) at ``i·d_in + k``,
    ``side="data"`` indexes the padded ``B`` (``d_in × width``) at ``k·width + j``.
    """
    i = np.arange(d_out)[None, :, None]
    j = np.arange(width)[None, None, :]
    o = np.arange(d_in)[:, None, None]
    k = (i + j + o) % d_in
    flat = i * d_in + k if side == "model" else k * width + j
    out: NDArray[np.int64] = np.ascontiguousarray(flat.reshape(d_in, d_out * width),
                                                  dtype=np.int64)
    out.setflags(write=False)
    return out


def model_diagonals(a: NDArray[Any], width: int) -> NDArray[Any]:
    """``Ã⁽ᵒ⁾`` for ``o = 0..d_in−1``: array ``(d_in, d_out·width)`` (row-major grids)."""
    a = np.asarray(a)
    d_out, d_in = a.shape
    return np.ravel(a)[_gather(d_out, d_in, width, "model")]


def data_diagonals(b: NDArray[Any], d_out: int, width: int) -> NDArray[Any]:
    """``B̃⁽ᵒ⁾`` for ``o = 0..d_in−1``: array ``(d_in, d_out·width)``; ``B`` is
    ``d_in × m`` with ``m <= width`` (columns past ``m`` are zero)."""
    d_in = np.asarray(b).shape[0]
    return _padded(b, width).ravel()[_gather(d_out, d_in, width, "data")]


def rotation_period(d_out: int, d_in: int, width: int, slots: int, fold: int) -> int:
    """``L`` of the rotation layout of a ``d_out × width`` grid folded ``fold`` times, or 0
    if it does not apply.

    BFV batching arranges the slots as two rows of ``slots/2``; a row rotation of a
    plaintext in NTT form is a permutation of its coefficients (a Galois automorphism;
    the centred lift commutes with it), so a rotated plaintext costs a gather instead of
    an encoding and an NTT per prime. In the rotation layout the data plaintext of
    ciphertext ``u = a·L + b`` is base ``a`` with both batching rows rotated left by
    ``b·width`` slots, so a batch needs ``n_ct / L`` encodings instead of ``n_ct``.
    With ``R = slots / (2·width)`` grid rows per batching row it applies when

    * ``fold = 1``: the grid fills both batching rows (``d_out = 2R``) and ``R | d_in``
      (``L = R``);
    * ``fold >= 2``: the ``fold`` segments fill the slots (``fold·d_out·width = slots``),
      ``d_out | R``, ``fold | d_in`` and ``d_out | d_in / fold`` (``L = d_out``). MNIST
      CNN's 256 -> 64 layer at width 32 (fold 4, 64 ciphertexts): ``L = 64``, one base.
    """
    if width < 1 or fold < 1 or slots % (2 * width):
        return 0
    r = slots // (2 * width)
    if fold == 1:
        return r if r >= 2 and d_out == 2 * r and d_in % r == 0 else 0
    if fold * d_out * width != slots or r % d_out or d_in % fold \
            or (d_in // fold) % d_out:
        return 0
    return d_out


@lru_cache(maxsize=32)
def _gather_rot(d_out: int, d_in: int, width: int, slots: int, fold: int, side: str
                ) -> NDArray[np.int64]:
    """Flat gather indices ``(n_ct, slots)`` of the rotation layout
    (:func:`rotation_period`). Slot ``s`` lies in batching row ``h``, grid row ``p`` of
    that batching row (of ``R``), column ``j``, and holds output row ``i = p mod d_out``
    (the segments of :func:`fold`-ed rows); ciphertext ``u = a·L + b`` uses the inner index
    ``k = (R·(c·a + h) + (p + b) mod R + j) mod d_in`` there (``c = 1`` unfolded, else 2).
    For each output cell the terms over ``u`` and its ``fold`` slots cover every ``k``
    exactly once, so ``Σ_u Ã⁽ᵘ⁾ ⊙ B̃⁽ᵘ⁾`` summed over segments is ``A·B``; and
    ``B̃⁽ᵃᴸ⁺ᵇ⁾`` is ``B̃⁽ᵃᴸ⁾`` with each batching row rotated left by ``b·width``."""
    period = rotation_period(d_out, d_in, width, slots, fold)
    if not period:
        raise ValueError("the rotation layout does not apply to this shape")
    r = slots // (2 * width)
    n_ct = -(-d_in // fold)
    sl = np.arange(slots)
    h = (sl // (slots // 2))[None, :]
    p = ((sl % (slots // 2)) // width)[None, :]
    j = (sl % width)[None, :]
    i = p % d_out if fold > 1 else (h * r + p)
    u = np.arange(n_ct)[:, None]
    a, b = u // period, u % period
    c = 1 if fold == 1 else 2
    k = (r * (c * a + h) + (p + b) % r + j) % d_in
    flat = i * d_in + k if side == "model" else k * width + j
    out: NDArray[np.int64] = np.ascontiguousarray(flat, dtype=np.int64)
    out.setflags(write=False)
    return out


def model_rows_rotated(a: NDArray[Any], width: int, slots: int, fold: int
                       ) -> NDArray[Any]:
    """The model's (already folded) ciphertext rows in the rotation layout:
    ``(n_ct, slots)``."""
    a = np.asarray(a)
    d_out, d_in = a.shape
    return np.ravel(a)[_gather_rot(d_out, d_in, width, slots, fold, "model")]


def _padded(b: NDArray[Any], width: int) -> NDArray[Any]:
    b = np.asarray(b)
    d_in, m = b.shape
    if m > width:
        raise ValueError(f"a batch of {m} samples exceeds the grid width {width}")
    padded = np.zeros((d_in, width), dtype=b.dtype)
    padded[:, :m] = b
    return padded


def data_rows_rotated(b: NDArray[Any], d_out: int, width: int, slots: int, fold: int
                      ) -> NDArray[Any]:
    """All data rows of the rotation layout, ``(n_ct, slots)`` (reference and tests)."""
    d_in = np.asarray(b).shape[0]
    return _padded(b, width).ravel()[_gather_rot(d_out, d_in, width, slots, fold, "data")]


def data_bases_rotated(b: NDArray[Any], d_out: int, width: int, slots: int, fold: int
                       ) -> NDArray[Any]:
    """The ``n_ct / L`` bases (rows ``a·L``) of :func:`data_rows_rotated`; row ``a·L + b``
    is base ``a`` rotated left by ``b·width`` in both batching rows."""
    d_in = np.asarray(b).shape[0]
    period = rotation_period(d_out, d_in, width, slots, fold)
    idx = _gather_rot(d_out, d_in, width, slots, fold, "data")[::period]
    return _padded(b, width).ravel()[idx]


def bias_grid(bias: NDArray[Any], width: int) -> NDArray[Any]:
    """The bias ``b`` (``d_out``) repeated along each grid row."""
    return np.repeat(np.asarray(bias), width)


def read_grid(slots: NDArray[Any], d_out: int, width: int, m: int) -> NDArray[Any]:
    """The ``d_out × m`` product from a decrypted slot vector."""
    return np.asarray(slots)[:d_out * width].reshape(d_out, width)[:, :m]


def reduce_plain(a: NDArray[Any], b: NDArray[Any]) -> NDArray[Any]:
    """Matrix Reducing in the clear (reference and test oracle): ``Σ_o Ã⁽ᵒ⁾ ⊙ B̃⁽ᵒ⁾``."""
    d_out = np.asarray(a).shape[0]
    m = np.asarray(b).shape[1]
    width = max(m, 1)
    prod = (model_diagonals(a, width) * data_diagonals(b, d_out, width)).sum(axis=0)
    return read_grid(prod, d_out, width, m)


def reduce_half_bfv(ctx: Any, enc_diagonals: list[Any], plain_diagonals: list[Any]) -> Any:
    """``[[A·B]]`` from encrypted ``Ã⁽ᵒ⁾`` (NTT form) and NTT-encoded ``B̃⁽ᵒ⁾`` residues
    (:class:`fedsec.crypto.bfv.BFVContext`): ``d_in`` plaintext products, exact mod ``t``."""
    return ctx.dot_plain(enc_diagonals, plain_diagonals)


def reduce_half_ckks(ctx: Any, enc_diagonals: list[Any], b_diagonals: NDArray[Any]) -> Any:
    """CKKS Half: ``Σ_o [[Ã⁽ᵒ⁾]] ⊙ B̃⁽ᵒ⁾`` with ``B̃`` plaintext (one rescale at the end)."""
    acc = None
    for ct, row in zip(enc_diagonals, b_diagonals, strict=True):
        term = ctx.multiply_plain(ct, row, rescale=False)
        acc = term if acc is None else ctx.add(acc, term)
    return ctx.rescale(acc)


def reduce_full_ckks(ctx: Any, enc_a: list[Any], enc_b: list[Any]) -> Any:
    """CKKS Full: ``Σ_o [[Ã⁽ᵒ⁾]] ⊙ [[B̃⁽ᵒ⁾]]`` — ``d_in`` ciphertext products; one
    relinearization and one rescale for the sum (lazy)."""
    import tenseal.sealapi as seal

    ev = ctx._evaluator
    acc = seal.Ciphertext()
    tmp = seal.Ciphertext()
    for k, (ca, cb) in enumerate(zip(enc_a, enc_b, strict=True)):
        if k == 0:
            ev.multiply(ca, cb, acc)
        else:
            ev.multiply(ca, cb, tmp)
            ev.add_inplace(acc, tmp)
    ev.relinearize_inplace(acc, ctx._need_relin())
    ev.rescale_to_next_inplace(acc)
    return acc
