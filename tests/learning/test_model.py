"""The numpy layer abstraction against PyTorch: forward passes, matrix forms, aggregation."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from fedsec.learning.model import LayerSpec, ModelSpec, accuracy, aggregate, forward, predict
from fedsec.learning.tasks import TASKS, task_spec

torch = pytest.importorskip("torch", reason="training needs fedsec[learning] (torch)")
from fedsec.learning.torch_net import build_net, get_params, set_params  # noqa: E402

SPECS = [task_spec(name) for name in TASKS] + [task_spec("dnn", layers=1),
                                               task_spec("dnn", layers=6)]
EXTRA = ModelSpec("mixed", (
    LayerSpec.conv2d((2, 9, 7), 3, kernel=3, stride=2, activation="relu"),
    LayerSpec.dense(36, 12, "sigmoid"),
    LayerSpec.dense(12, 5, "tanh"),
    LayerSpec.dense(5, 3),
))


@pytest.mark.parametrize("spec", [*SPECS, EXTRA], ids=lambda s: s.name)
def test_numpy_forward_equals_torch(spec: ModelSpec) -> None:
    rng = np.random.default_rng(3)
    params = spec.init_params(rng)
    x = rng.normal(size=(17, spec.in_features))
    net = build_net(spec, params).double().eval()
    with torch.no_grad():
        ref = net(torch.as_tensor(x)).numpy()
    np.testing.assert_allclose(forward(spec, params, x), ref, rtol=0, atol=1e-12)
    # float32, PyTorch's training precision: same predictions
    net32 = build_net(spec, params).eval()
    with torch.no_grad():
        ref32 = net32(torch.as_tensor(x, dtype=torch.float32)).numpy()
    np.testing.assert_allclose(forward(spec, params, x), ref32, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("spec", [*SPECS, EXTRA], ids=lambda s: s.name)
def test_layers_as_matrices(spec: ModelSpec) -> None:
    """Every layer's linear part is an explicit (d_out, d_in) matrix plus bias."""
    rng = np.random.default_rng(4)
    params = spec.init_params(rng)
    h = rng.normal(size=(5, spec.in_features))
    for layer in spec.layers_of(params):
        w, b = layer.matrix()
        if layer.spec.kind == "gru":
            steps, d = layer.spec.in_shape
            assert w.shape == (6 * layer.spec.hidden, d + layer.spec.hidden)
        else:
            assert w.shape == (layer.spec.out_features, layer.spec.in_features)
            np.testing.assert_allclose(h @ w.T + b, layer.linear(h), atol=1e-12)
        assert b.shape == (w.shape[0],)
        h = layer.apply(h)


def test_mnist_cnn_has_the_papers_shapes() -> None:
    spec = task_spec("mnist")
    shapes = [layer.matrix()[0].shape for layer in spec.layers_of(spec.init_params(
        np.random.default_rng(0)))]
    assert shapes == [(256, 784), (64, 256), (10, 64)]
    assert [x.activation for x in spec.layers] == ["square", "square", "identity"]
    assert task_spec("bank").param_shapes() == [(2, 48), (2,)]
    assert task_spec("agnews").param_shapes() == [(4, 300), (4,)]


def test_params_roundtrip_through_torch_and_json() -> None:
    spec = task_spec("gru")
    params = spec.init_params(np.random.default_rng(1))
    net = build_net(spec)
    set_params(net, params)
    for a, b in zip(get_params(net), params, strict=True):
        np.testing.assert_array_equal(a, b)
    assert ModelSpec.from_json(spec.to_json()) == spec
    with pytest.raises(ValueError, match="shapes"):
        forward(spec, params[:-1], np.zeros((1, spec.in_features)))


def test_aggregate_is_weighted_average() -> None:
    a = [np.ones((2, 3)), np.zeros(2)]
    b = [np.full((2, 3), 4.0), np.ones(2)]
    out = aggregate([a, b], [1, 3])
    np.testing.assert_allclose(out[0], 3.25)
    np.testing.assert_allclose(out[1], 0.75)
    with pytest.raises(ValueError):
        aggregate([a, b], [0, 0])
    with pytest.raises(ValueError):
        aggregate([a, b], [1])


def test_accuracy_and_predict() -> None:
    spec = ModelSpec("id", (LayerSpec.dense(2, 2),))
    params = [np.eye(2), np.zeros(2)]
    x = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 1.0]])
    assert predict(spec, params, x).tolist() == [0, 1, 0]
    assert accuracy(spec, params, x, np.array([0, 1, 1])) == pytest.approx(2 / 3)


def test_bad_specs_are_refused() -> None:
    with pytest.raises(ValueError, match="chain"):
        ModelSpec("bad", (LayerSpec.dense(3, 4), LayerSpec.dense(5, 2)))
    with pytest.raises(ValueError, match="activation"):
        LayerSpec.dense(3, 4, "softplus")
    with pytest.raises(ValueError, match="Kernel"):
        LayerSpec.conv2d((1, 4, 4), 2, kernel=5)


def test_core_package_imports_without_torch() -> None:
    code = ("import sys; sys.modules['torch'] = None\n"
            "import fedsec, fedsec.auc, fedsec.metrics, fedsec.learning, fedsec.shapley\n"
            "import fedsec.learning.fedavg\n"
            "assert 'torch' not in [m for m, v in sys.modules.items() if v is not None]\n")
    subprocess.run([sys.executable, "-c", code], check=True)
