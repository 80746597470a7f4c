"""SecSV's conv layer as kernel × im2col patches: the product against a direct numpy
convolution on edge shapes (stride, channels, kernel = input), and SecSV's FSV on tiny
CNNs equal to NSSV's."""

from __future__ import annotations

import numpy as np
import pytest

from fedsec.crypto import reducing as rd
from fedsec.crypto import sharing as sh
from fedsec.crypto.bfv import BFVContext
from fedsec.crypto.drbg import SystemRandomSource
from fedsec.learning.model import LayerSpec, ModelSpec, aggregate, predict
from fedsec.learning.record import RoundRecord, TrainingRecord
from fedsec.shapley import federated_shapley
from fedsec.shapley.secsv import (
    SecSVConfig,
    grid_to_features,
    im2col,
    secsv_shapley,
)
from fedsec.shapley.secsv import runner as secsv_runner
from fedsec.shapley.secsv.common import fold_diagonals as _fold
from fedsec.shapley.secsv.common import layer_plan as _layer_plan
from fedsec.shapley.secsv.common import row_period
from fedsec.shapley.secsv.server import ServerBase

# (in_shape (C, H, W), out_channels, kernel, stride)
EDGE = [((1, 6, 6), 2, 3, 1),    # one channel, stride 1
        ((2, 7, 5), 3, 3, 2),    # several channels, stride 2, non-square input
        ((3, 4, 4), 2, 4, 1),    # kernel = input: one output position (per = 1)
        ((2, 5, 5), 1, 2, 3)]    # stride larger than the kernel (skipped pixels)


pytestmark = pytest.mark.filterwarnings(
    "ignore:.*schedule='paper'.*:fedsec.errors.PrivacyWarning")


def _direct_conv(x: np.ndarray, w: np.ndarray, stride: int) -> np.ndarray:
    """Cross-correlation by explicit loops: x (m, C, H, W), w (O, C, k, k)."""
    m, _, h, wd = x.shape
    o, _, k, _ = w.shape
    ho, wo = (h - k) // stride + 1, (wd - k) // stride + 1
    out = np.zeros((m, o, ho, wo), dtype=x.dtype)
    for a in range(ho):
        for b in range(wo):
            patch = x[:, :, a * stride:a * stride + k, b * stride:b * stride + k]
            out[:, :, a, b] = np.einsum("mcij,ocij->mo", patch, w)
    return out.reshape(m, -1)


@pytest.mark.parametrize("shape", EDGE)
def test_kernel_times_patches_is_the_convolution(shape) -> None:
    in_shape, o, k, s = shape
    ls = LayerSpec.conv2d(in_shape, o, k, stride=s)
    rng = np.random.default_rng(1)
    m = 3
    x = rng.integers(-50, 50, size=(m, *in_shape))
    w = rng.integers(-9, 9, size=(o, in_shape[0], k, k))
    want = _direct_conv(x, w, s)  # (m, d_out), channel-major
    lp = _layer_plan(ls, 1)
    patches = im2col(x.reshape(m, -1).T, ls)
    assert patches.shape == (lp.inner, m * lp.per)
    grid = rd.reduce_plain(w.reshape(o, -1), patches)
    assert np.array_equal(grid_to_features(grid, lp, m).T, want)


@pytest.mark.parametrize("shape", EDGE)
def test_bfv_product_on_shares_is_the_convolution(shape) -> None:
    """What P and A do: im2col of each additive share, folded Matrix Reducing with the
    encrypted kernel diagonals, the two products added -> the convolution, exact mod t."""
    in_shape, o, k, s = shape
    ls = LayerSpec.conv2d(in_shape, o, k, stride=s)
    bfv = BFVContext.from_seed(bytes(32))
    t = bfv.t
    rng = np.random.default_rng(2)
    m, width = 2, 3
    x = rng.integers(-1000, 1000, size=(m, *in_shape))
    w = rng.integers(-99, 99, size=(o, in_shape[0], k, k))
    fold = max(1, min(ls.in_shape[0] * k * k, bfv.slots // (ls.out_features * width)))
    lp = _layer_plan(ls, fold)
    cols = lp.cols(width)
    enc = [bfv.to_ntt(bfv.encrypt(r)) for r in _fold(rd.model_diagonals(
        sh.to_residues(w.reshape(o, -1), t), cols), lp.fold, bfv.slots)]
    xs = sh.to_residues(x.reshape(m, -1).T, t)
    x1, x2 = sh.share(xs, t, SystemRandomSource())
    total = None
    for share in (x1, x2):
        pts = [bfv.encode_ntt(r) for r in _fold(rd.data_diagonals(
            im2col(share, ls), lp.rows, cols), lp.fold, bfv.slots)]
        ct = rd.reduce_half_bfv(bfv, enc, pts)
        total = ct if total is None else bfv.add(total, ct)
    slots = bfv.decrypt(bfv.from_ntt(total))
    seg = lp.rows * cols
    acc = np.zeros(seg, dtype=np.uint64)
    for p in slots[:lp.fold * seg].reshape(lp.fold, seg):
        acc = sh.add_mod(acc, p, t)
    grid = rd.read_grid(acc, lp.rows, cols, lp.per * m)
    got = sh.centre(grid_to_features(grid, lp, m), t).T
    assert np.array_equal(got, _direct_conv(x, w, s))


def _record(spec: ModelSpec, n: int, seed: int) -> TrainingRecord:
    rng = np.random.default_rng(seed)  # test models only (not key material)
    g = spec.init_params(rng)
    locs = tuple([p + 0.3 * rng.standard_normal(p.shape) for p in g] for _ in range(n))
    wts = rng.uniform(1.0, 3.0, size=n)
    rnd = RoundRecord(g, tuple(range(n)), locs, wts)
    return TrainingRecord(spec, n, (rnd,), aggregate(list(locs), wts))


@pytest.mark.parametrize("conv", [((1, 6, 6), 2, 3, 1), ((2, 7, 5), 3, 3, 2),
                                  ((2, 4, 4), 3, 4, 1)])
def test_tiny_cnn_fsv_equals_nssv(conv) -> None:
    in_shape, o, k, s = conv
    c1 = LayerSpec.conv2d(in_shape, o, k, stride=s, activation="square")
    spec = ModelSpec("tiny-cnn", (c1, LayerSpec.dense(c1.out_features, 3)))
    n = 4
    rec = _record(spec, n, seed=3)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((40, spec.in_features))
    y = predict(spec, rec.final_params, x)
    y[::5] = (y[::5] + 1) % 3  # some samples wrong for the final model
    sets = [(x[i::n], y[i::n]) for i in range(n)]
    ref = federated_shapley(rec, np.concatenate([a for a, _ in sets]),
                            np.concatenate([b for _, b in sets]))
    for shortcut in (True, False):
        got = secsv_shapley(rec, sets, linear_shortcut=shortcut,
                            schedule="paper")  # fixed point chosen per layer
        assert np.abs(ref.fsv).max() > 0  # a non-trivial game
        assert got.error_to(ref) <= 1e-12


def test_tiny_cnn_sample_skip_masks_whole_samples() -> None:
    """SampleSkip on a conv grid: a skipped sample's ``per`` columns are noise, the kept
    ones exact -- same skips and utilities as the plaintext SampleSkip."""
    c1 = LayerSpec.conv2d((2, 6, 6), 2, 3, stride=1, activation="square")
    spec = ModelSpec("tiny-cnn", (c1, LayerSpec.dense(c1.out_features, 3)))
    n = 4
    rec = _record(spec, n, seed=5)
    rng = np.random.default_rng(6)
    x = rng.standard_normal((48, spec.in_features))
    y = predict(spec, rec.final_params, x)
    y[::4] = (y[::4] + 1) % 3
    sets = [(x[i::n], y[i::n]) for i in range(n)]
    ref = federated_shapley(rec, np.concatenate([a for a, _ in sets]),
                            np.concatenate([b for _, b in sets]), sample_skip=True)
    for shortcut in (True, False):
        got = secsv_shapley(rec, sets, sample_skip=True, linear_shortcut=shortcut,
                            schedule="paper")  # fixed point chosen per layer
        assert got.error_to(ref) <= 1e-12
        assert got.skip.skipped == ref.skip.skipped > 0
        for a, b in zip(got.utilities or [], ref.utilities or [], strict=True):
            np.testing.assert_array_equal(a, b)


def test_mlp_hidden_layer_in_rotation_layout_fsv_equals_nssv() -> None:
    """A 16 -> 256 -> 64 -> 3 model (x^2) at batch width 32: the 256 -> 64 hidden layer is
    in Matrix Reducing's rotation layout (fold 4, one encoded base per share and batch,
    the other 63 plaintexts by coefficient permutation) -- FSV equal to NSSV's."""

    spec = ModelSpec("mlp", (LayerSpec.dense(16, 256, activation="square"),
                             LayerSpec.dense(256, 64, activation="square"),
                             LayerSpec.dense(64, 3)))
    n = 5
    rng = np.random.default_rng(3)  # test models only (not key material)
    g = [0.3 * p for p in spec.init_params(rng)]
    locs = tuple([p + 0.05 * rng.standard_normal(p.shape) for p in g] for _ in range(n))
    wts = rng.uniform(1.0, 3.0, size=n)
    rec = TrainingRecord(spec, n, (RoundRecord(g, tuple(range(n)), locs, wts),),
                         aggregate(list(locs), wts))
    x = np.random.default_rng(4).standard_normal((160, 16))
    y = predict(spec, rec.final_params, x)
    y[::5] = (y[::5] + 1) % 3
    sets = [(x[i::n], y[i::n]) for i in range(n)]
    ref = federated_shapley(rec, x[np.argsort(np.arange(160) % n, kind="stable")],
                            np.concatenate([b for _, b in sets]))
    periods: list[list[int]] = []
    setup = secsv_runner._setup

    def spy(*a: object, **kw: object) -> object:
        run = setup(*a, **kw)  # type: ignore[arg-type]
        plan = run.P.plan
        periods.append([row_period(lp, plan.width, BFVContext(SecSVConfig().bfv).slots)
                        for lp in plan.layers])
        return run

    secsv_runner._setup = spy  # type: ignore[assignment]
    try:
        got = secsv_shapley(rec, sets, config=SecSVConfig(frac_bits_hidden=14), schedule="paper")
    finally:
        secsv_runner._setup = setup
    assert periods == [[0, 64, 0]]  # the hidden layer did use the rotation layout
    assert np.abs(ref.fsv).max() > 0
    assert got.error_to(ref) <= 1e-12


def test_incremental_coalition_models_equal_the_full_sums() -> None:
    """P's and A's ``aggregated`` build a coalition's model from the cached subset without
    its first member plus one scaled model; every such ciphertext decrypts to the same
    slots as the plain ``Σ q_i [[θ_i]]`` of all members, and the path is taken."""

    c1 = LayerSpec.conv2d((1, 6, 6), 2, 3, stride=1, activation="square")
    spec = ModelSpec("tiny-cnn", (c1, LayerSpec.dense(c1.out_features, 3)))
    n = 4
    rec = _record(spec, n, seed=7)
    x = np.random.default_rng(8).standard_normal((24, spec.in_features))
    y = predict(spec, rec.final_params, x)
    sets = [(x[i::n], y[i::n]) for i in range(n)]
    runs: list[object] = []
    checked: list[int] = []
    setup, agg = secsv_runner._setup, ServerBase.aggregated

    def spy_setup(*a: object, **kw: object) -> object:
        runs.append(setup(*a, **kw))  # type: ignore[arg-type]
        return runs[-1]

    def spy_agg(self: ServerBase, round_: int, keys: list[str], q: list[int], layer: int,
                mask: int) -> object:
        incremental = (round_, mask & (mask - 1), layer) in self._agg_cache \
            and len(keys) > 1 and (round_, mask, layer) not in self._agg_cache
        out = agg(self, round_, keys, q, layer, mask)
        if incremental:
            dec = runs[-1].clients[0]._bfv  # type: ignore[attr-defined]
            parts = [self.scaled(round_, k, qi, layer) for k, qi in zip(keys, q, strict=True)]
            for u, ct in enumerate(out[0]):
                full = self._bfv.add_many([p[0][u] for p in parts])
                np.testing.assert_array_equal(dec.decrypt(ct), dec.decrypt(full))
            checked.append(mask)
        return out

    secsv_runner._setup, ServerBase.aggregated = spy_setup, spy_agg  # type: ignore[assignment]
    try:
        got = secsv_shapley(rec, sets, linear_shortcut=False,
                            schedule="paper")  # fixed point chosen per layer
    finally:
        secsv_runner._setup, ServerBase.aggregated = setup, agg  # type: ignore[assignment]
    ref = federated_shapley(rec, np.concatenate([a for a, _ in sets]),
                            np.concatenate([b for _, b in sets]))
    assert len(set(checked)) == 2 ** n - 1 - n  # every subset of two or more members
    assert got.error_to(ref) <= 1e-12
