"""Matrix Squaring (Jiang et al. + seed 004) against numpy: layouts in the clear on many
shapes, then under CKKS (Full = encrypted x encrypted, Half = encrypted x plaintext)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.matmul import (
    FoldedPlan,
    SquaringPlan,
    folded_product,
    matrix_product,
    plan_folded,
    plan_squaring,
    squaring_product,
    sum_steps,
)

PRESET = "INSECURE_TEST_N2048_DEPTH2_S24"
SLOTS = 1024
TOL = 2e-3  # scale 2^24, ring 2^11: ~1e-4 per product; sums of <= 100 terms


def _simulate(plan: SquaringPlan, a: np.ndarray, b: np.ndarray, per_block: bool = False
              ) -> np.ndarray:
    """The server's algorithm on plaintext vectors (np.roll for rotations)."""
    av = plan.encode_a(a)
    bv = plan.encode_b(b)
    stride = plan.rows * plan.block
    ops = sum_steps(plan.fold, stride)

    def ras(h: np.ndarray) -> np.ndarray:
        powers = {0: h}
        acc = np.zeros_like(h)
        for op, k, step in ops:
            if op == "double":
                powers[k + 1] = powers[k] + np.roll(powers[k], -step)
            else:
                acc = acc + np.roll(powers[k], -step)
        return acc

    outs = []
    for aj in av:
        if per_block:
            h = sum(ras(sum(aj[i] * bv[i] for i in range(k * plan.rows, (k + 1) * plan.rows)))
                    for k in range(plan.col_blocks))
        else:
            h = ras(sum(x * y for x, y in zip(aj, bv, strict=True)))
        outs.append(h)
    return plan.decode(outs, b.shape[1])


@pytest.mark.parametrize("r", range(1, 20))
def test_sum_steps_sums_r_blocks(r: int) -> None:
    stride, slots = 3, 64
    x = np.arange(slots, dtype=float) ** 1.5
    powers = {0: x}
    acc = np.zeros(slots)
    for op, k, step in sum_steps(r, stride):
        if op == "double":
            powers[k + 1] = powers[k] + np.roll(powers[k], -step)
        else:
            acc = acc + np.roll(powers[k], -step)
    want = sum(x[q * stride:(q + 1) * stride] for q in range(r))
    np.testing.assert_allclose(acc[:stride], want)


@settings(max_examples=60, deadline=None)
@given(d_out=st.integers(1, 70), d_in=st.integers(1, 90), block=st.integers(1, 32),
       tiled=st.booleans(), per_block=st.booleans(), data=st.data())
def test_layout_in_the_clear(d_out: int, d_in: int, block: int, tiled: bool,
                             per_block: bool, data: st.DataObject) -> None:
    plan = plan_squaring(d_out, d_in, SLOTS, block=block, tiled=tiled)
    m = data.draw(st.integers(1, plan.capacity))
    rng = np.random.default_rng(d_out * 1000 + d_in)
    a = rng.normal(size=(d_out, d_in))
    b = rng.normal(size=(d_in, m))
    np.testing.assert_allclose(_simulate(plan, a, b, per_block), a @ b, atol=1e-9)


def test_plan_shapes_and_validation() -> None:
    p = plan_squaring(2, 48, 2048, tiled=False)  # the paper's layout: one 45x45 square
    assert (p.block, p.rows, p.tiles, p.col_blocks, p.capacity) == (45, 3, 1, 2, 45)
    assert p.fold == 15 and p.rotations() == [135, 270, 540, 1080, 1620, 1890]
    q = plan_squaring(64, 256, 2048, tiled=False)
    assert (q.row_blocks, q.col_blocks, q.fold, q.rotations()) == (2, 6, 1, [])
    free = plan_squaring(4, 301, 2048, rotations=False)
    assert free.rows == free.block and free.rotations() == []
    assert plan_squaring(3, 10, 2048).cost() <= plan_squaring(3, 10, 2048, block=45).cost()
    with pytest.raises(ValueError, match="'block' parameter"):
        plan_squaring(2, 3, 2048, block=46)
    with pytest.raises(ValueError, match="'d_in' parameter"):
        plan_squaring(2, 0, 2048)
    with pytest.raises(ValueError, match="B must have shape"):
        p.encode_b(np.zeros((48, 46)))
    with pytest.raises(ValueError, match="A must have shape"):
        p.encode_a(np.zeros((3, 48)))
    with pytest.raises(ValueError):
        SquaringPlan(2, 2, 16, 5, 1, 1)


CASES = [  # (d_out, d_in, block, tiled, m): paper layout, tiles, padding, d_out > block
    (2, 48, None, False, 32),   # seed 004's layout: rotate-and-sum over 15 row blocks
    (4, 30, None, False, 1),    # one sample
    (3, 50, 6, True, 37),       # d_out does not divide the block: rows padded to 3
    (40, 33, 16, True, 20),     # d_out > block: three row blocks
    (1, 1, None, True, 5),      # scalars
    (5, 70, 4, True, 256),      # tiles full
]


@pytest.mark.parametrize(("d_out", "d_in", "block", "tiled", "m"), CASES)
def test_encrypted_products_match_numpy(d_out: int, d_in: int, block: int | None,
                                        tiled: bool, m: int) -> None:
    plan = plan_squaring(d_out, d_in, SLOTS, block=block, tiled=tiled)
    m = min(m, plan.capacity)
    ctx = CKKSContext.generate(PRESET, rotations=plan.rotations(), allow_insecure=True)
    rng = np.random.default_rng(7)
    a = rng.uniform(-1, 1, size=(d_out, d_in))
    b = rng.uniform(-1, 1, size=(d_in, m))
    enc_a = [[ctx.encrypt(v) for v in vs] for vs in plan.encode_a(a)]
    bv = plan.encode_b(b)
    enc_b = [ctx.encrypt(v) for v in bv]
    plain_b = [ctx.encode(v, scale=enc_a[0][0].scale, parms_id=enc_a[0][0].parms_id()) for v in bv]
    want = a @ b
    for per_block in (False, True):
        full = squaring_product(ctx, plan, enc_a, enc_b, per_block=per_block)
        half = squaring_product(ctx, plan, enc_a, plain_b, plain_b=True, per_block=per_block)
        assert len(full) == plan.row_blocks == len(half)
        for outs in (full, half):
            got = plan.decode([ctx.decrypt(o) for o in outs], m)
            assert got.shape == (d_out, m)
            assert np.abs(got - want).max() < TOL
    # one rescale: the output is one level below the inputs
    assert ctx.level_of(full[0]) == ctx.level_of(enc_a[0][0]) - 1


def test_efficient_form_rotates_once_per_row_block(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = plan_squaring(2, 100, SLOTS, tiled=False)  # K = 4 column blocks, r = 16
    assert plan.col_blocks == 4
    ctx = CKKSContext.generate(PRESET, rotations=plan.rotations(), allow_insecure=True)
    calls = {"n": 0}
    real = ctx.rotate

    def counting(ct: object, step: int) -> object:
        calls["n"] += 1
        return real(ct, step)

    monkeypatch.setattr(ctx, "rotate", counting)
    a = np.ones((2, 100))
    b = np.ones((100, 3))
    enc_a = [[ctx.encrypt(v) for v in vs] for vs in plan.encode_a(a)]
    enc_b = [ctx.encrypt(v) for v in plan.encode_b(b)]
    out = squaring_product(ctx, plan, enc_a, enc_b)
    once = calls["n"]
    calls["n"] = 0
    out2 = squaring_product(ctx, plan, enc_a, enc_b, per_block=True)
    assert once == math.log2(plan.fold) and calls["n"] == plan.col_blocks * once
    for o in (out, out2):
        assert np.abs(plan.decode([ctx.decrypt(o[0])], 3) - 100.0).max() < TOL * 10


def test_wrong_operand_counts_raise() -> None:
    plan = plan_squaring(2, 4, SLOTS, block=2)
    ctx = CKKSContext.generate(PRESET, allow_insecure=True)
    ct = ctx.encrypt([1.0])
    with pytest.raises(ValueError, match="a must hold"):
        squaring_product(ctx, plan, [[ct]], [ct, ct, ct, ct])
    with pytest.raises(ValueError, match="b must hold"):
        squaring_product(ctx, plan, [[ct] * plan.a_count], [ct])


@pytest.mark.parametrize(("d_out", "d_in", "block", "tiled", "m"),
                         [(2, 48, None, False, 45 // 2), (3, 7, 3, True, 50), (40, 33, 16, True, 9),
                          (4, 5, 4, True, 256)])
def test_complex_packing_halves_operands(d_out: int, d_in: int, block: int | None,
                                         tiled: bool, m: int) -> None:
    plain = plan_squaring(d_out, d_in, SLOTS, block=block, tiled=tiled)
    plan = plan_squaring(d_out, d_in, SLOTS, block=block, tiled=tiled, packed=True)
    assert plan.a_count == (plain.a_count + 1) // 2
    m = min(m, plan.capacity)
    ctx = CKKSContext.generate(PRESET, rotations=plan.rotations(), conjugate=True,
                               allow_insecure=True)
    rng = np.random.default_rng(11)
    a = rng.uniform(-1, 1, size=(d_out, d_in))
    b = rng.uniform(-1, 1, size=(d_in, m))
    enc_a = [[ctx.encrypt(v) for v in vs] for vs in plan.encode_a(a)]
    bv = plan.encode_b(b)
    full = squaring_product(ctx, plan, enc_a, [ctx.encrypt(v) for v in bv])
    like = enc_a[0][0]
    half = squaring_product(ctx, plan, enc_a,
                            [ctx.encode(v, scale=like.scale, parms_id=like.parms_id()) for v in bv],
                            plain_b=True)
    for outs in (full, half):
        vals = [ctx.decrypt(o) for o in outs]
        assert max(np.abs(v.imag).max() for v in vals) < TOL  # no cross terms left
        assert np.abs(plan.decode(vals, m) - a @ b).max() < TOL
    with pytest.raises(ValueError, match="per_block"):
        squaring_product(ctx, plan, enc_a, [ctx.encrypt(v) for v in bv], per_block=True)


# ---------------------------------------------------------------------- folded layout
def _simulate_folded(plan: FoldedPlan, a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
    """The server's algorithm on plaintext slot vectors: slot-wise products (complex
    packing: the real part), then the cyclic rotate-and-sum with np.roll."""
    outs = []
    bv = plan.encode_b(b)
    for aj in plan.encode_a(a):
        h = sum(x * y for x, y in zip(aj, bv, strict=True))
        h = np.real(h) if plan.packed else np.asarray(h)
        for step in plan.rotations():
            h = h + np.roll(h, -step)
        outs.append(h)
    return outs


def _groups_hold_copies(plan: FoldedPlan, outs: list[np.ndarray], want: np.ndarray,
                        tol: float) -> None:
    """Every group of every output holds the row block of ``A B`` (zero-padded rows and
    samples) and the slots no group uses are zero: a decryptor sees ``A B`` only."""
    rows, c, m = plan.rows, plan.capacity, want.shape[1]
    full = np.zeros((plan.row_blocks * rows, c))
    full[:plan.d_out, :m] = want
    for j, v in enumerate(outs):
        grid = np.real(np.asarray(v)).reshape(plan.groups, plan.stride)
        block = full[j * rows:(j + 1) * rows].ravel()
        assert np.abs(grid[:, :rows * c] - block[None, :]).max() < tol
        if rows * c < plan.stride:
            assert np.abs(grid[:, rows * c:]).max() < tol


@settings(max_examples=80, deadline=None)
@given(d_out=st.integers(1, 70), d_in=st.integers(1, 300), rows=st.integers(1, 70),
       log_groups=st.integers(0, 10), packed=st.booleans(), data=st.data())
def test_folded_layout_in_the_clear(d_out: int, d_in: int, rows: int, log_groups: int,
                                    packed: bool, data: st.DataObject) -> None:
    groups = 1 << log_groups
    if min(rows, d_out) * groups > SLOTS:
        with pytest.raises(ValueError, match="do not fit"):
            plan_folded(d_out, d_in, SLOTS, rows=rows, groups=groups, packed=packed)
        return
    plan = plan_folded(d_out, d_in, SLOTS, rows=rows, groups=groups, packed=packed)
    m = data.draw(st.integers(1, plan.capacity))
    rng = np.random.default_rng(d_out * 1000 + d_in)
    a = rng.normal(size=(d_out, d_in))
    b = rng.normal(size=(d_in, m))
    outs = _simulate_folded(plan, a, b)
    np.testing.assert_allclose(plan.decode(outs, m), a @ b, atol=1e-9)
    _groups_hold_copies(plan, outs, a @ b, 1e-9)
    assert len(plan.encode_b(b)) == plan.b_count == (
        (plan.terms + 1) // 2 if packed else plan.terms)
    assert plan.terms == math.ceil(d_in / groups)


def test_folded_plan_shapes_and_validation() -> None:
    p = plan_folded(64, 257, 2048, rows=4, groups=4, packed=True)
    assert (p.stride, p.capacity, p.row_blocks, p.terms, p.a_count) == (512, 128, 16, 65, 33)
    assert p.rotations() == [512, 1024]
    assert plan_folded(3, 5, 2048, rows=9, groups=1).rows == 3  # capped at d_out
    assert plan_folded(3, 5, 2048, rows=3, groups=1).rotations() == []
    assert p.to_dict()["layout"] == "folded"
    # B is replicated `rows` times, not `block` times: far fewer operands per sample than
    # the rotation-free square of the same output count (the HESV hidden-layer case)
    sq = plan_squaring(64, 257, 2048, block=43, rotations=False, packed=True)
    assert p.b_count / p.capacity < sq.b_count / sq.capacity / 5
    with pytest.raises(ValueError, match="power of two"):
        FoldedPlan(4, 4, 2048, 2, 3)
    with pytest.raises(ValueError, match="do not fit"):
        FoldedPlan(4, 4, 2048, 4, 1024)
    with pytest.raises(ValueError, match="matrix sizes"):
        FoldedPlan(0, 4, 2048, 1, 1)
    with pytest.raises(ValueError, match="B must have shape"):
        p.encode_b(np.zeros((257, 129)))
    with pytest.raises(ValueError, match="B must have shape"):
        p.encode_b(np.zeros((256, 3)))
    with pytest.raises(ValueError, match="A must have shape"):
        p.encode_a(np.zeros((64, 256)))
    with pytest.raises(ValueError, match="need 16 outputs"):
        p.decode([np.zeros(2048)] * 15, 3)
    with pytest.raises(ValueError, match="per-block"):
        p.cost(per_block=True)


FOLDED = [  # (d_out, d_in, rows, groups, packed, m)
    (64, 257, 4, 4, True, 64),   # the CNN's hidden layer (ring 2^11 here: 64 samples)
    (10, 65, 10, 8, False, 12),  # rows = d_out, eight groups, d_in not a multiple of 8
    (7, 3, 3, 2, True, 1),       # rows do not divide d_out, one sample, odd term count
    (1, 1, 1, 1024, True, 1),    # scalars in every group
    (5, 40, 2, 1, True, 512),    # no rotation, a full product
]


@pytest.mark.parametrize(("d_out", "d_in", "rows", "groups", "packed", "m"), FOLDED)
def test_folded_encrypted_products_match_numpy(d_out: int, d_in: int, rows: int,
                                               groups: int, packed: bool, m: int) -> None:
    plan = plan_folded(d_out, d_in, SLOTS, rows=rows, groups=groups, packed=packed)
    m = min(m, plan.capacity)
    ctx = CKKSContext.generate(PRESET, rotations=plan.rotations(), conjugate=packed,
                               allow_insecure=True)
    rng = np.random.default_rng(11)
    a = rng.uniform(-1, 1, size=(d_out, d_in))
    b = rng.uniform(-1, 1, size=(d_in, m))
    enc_a = [[ctx.encrypt(v) for v in vs] for vs in plan.encode_a(a)]
    bv = plan.encode_b(b)
    enc_b = [ctx.encrypt(v) for v in bv]
    plain_b = [ctx.encode(v, scale=enc_a[0][0].scale, parms_id=enc_a[0][0].parms_id()) for v in bv]
    want = a @ b
    full = folded_product(ctx, plan, enc_a, enc_b)
    half = matrix_product(ctx, plan, enc_a, plain_b, plain_b=True)
    for outs in (full, half):
        assert len(outs) == plan.row_blocks
        vals = [ctx.decrypt(o) for o in outs]
        got = plan.decode(vals, m)
        assert got.shape == (d_out, m)
        assert np.abs(got - want).max() < TOL
        _groups_hold_copies(plan, vals, want, TOL)
    assert ctx.level_of(full[0]) == ctx.level_of(enc_a[0][0]) - 1
    with pytest.raises(ValueError, match="b must hold"):
        folded_product(ctx, plan, enc_a, enc_b[:-1] if len(enc_b) > 1 else enc_b * 2)
    with pytest.raises(ValueError, match="a must hold"):
        folded_product(ctx, plan, enc_a[:-1] or enc_a * 2, enc_b)
