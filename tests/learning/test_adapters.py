"""Bring your own model: specs and parameters read from PyTorch and scikit-learn models give
the model's own predictions; the record builders give the rounds the user trained."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression, SGDClassifier
from sklearn.neural_network import MLPClassifier
from sklearn.tree import DecisionTreeClassifier

from fedsec.learning import TrainingRecord, model_params, model_spec, predict
from fedsec.learning.adapters import as_params
from fedsec.learning.model import LayerSpec, ModelSpec, forward


def _xy(seed: int, m: int = 150, d: int = 5, k: int = 2) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(m, d))
    scores = x @ rng.normal(size=(d, k)) + 0.3 * rng.normal(size=(m, k))
    return x, np.argmax(scores, axis=1).astype(np.int64)


# ---------------------------------------------------------------------- scikit-learn
@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_logistic_regression_predictions_match(k: int, fit_intercept: bool) -> None:
    x, y = _xy(k, k=k)
    clf = LogisticRegression(C=0.5, fit_intercept=fit_intercept).fit(x, y)
    spec = model_spec(clf)
    assert spec.layers == (LayerSpec.dense(5, k),)  # binary: two scores [0, z]
    params = model_params(clf)
    xt, _ = _xy(10 + k, m=400, k=k)
    np.testing.assert_array_equal(predict(spec, params, xt), clf.predict(xt))
    if k == 2:  # the class-1 score is sklearn's decision function, class 0's is 0
        scores = forward(spec, params, xt)
        np.testing.assert_array_equal(scores[:, 0], 0.0)
        np.testing.assert_allclose(scores[:, 1], clf.decision_function(xt), atol=1e-12)


def test_binary_tie_goes_to_class_zero_as_in_sklearn() -> None:
    """z == 0 exactly: sklearn predicts classes_[0]; so does the arg-max of [0, 0]."""
    x, y = _xy(0)
    clf = LogisticRegression().fit(x, y)
    clf.coef_[:] = 0.0
    clf.intercept_[:] = 0.0
    assert (clf.predict(x) == 0).all()
    np.testing.assert_array_equal(predict(model_spec(clf), model_params(clf), x), 0)


def test_sgd_classifier_predictions_match() -> None:
    x, y = _xy(4, k=3)
    clf = SGDClassifier(loss="log_loss", random_state=0, max_iter=50, tol=None).fit(x, y)
    np.testing.assert_array_equal(predict(model_spec(clf), model_params(clf), x),
                                  clf.predict(x))


@pytest.mark.parametrize("activation", ["relu", "tanh", "logistic", "identity"])
@pytest.mark.parametrize("k", [2, 3])
def test_mlp_classifier_predictions_match(activation: str, k: int) -> None:
    x, y = _xy(20 + k, k=k)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf = MLPClassifier((7, 4), activation=activation, max_iter=80, random_state=0,
                            alpha=1e-3).fit(x, y)
    spec = model_spec(clf)
    act = {"logistic": "sigmoid"}.get(activation, activation)
    assert [ly.activation for ly in spec.layers] == [act, act, "identity"]
    assert [ly.out_features for ly in spec.layers] == [7, 4, k]
    xt, _ = _xy(30 + k, m=500, k=k)
    np.testing.assert_array_equal(predict(spec, model_params(clf), xt), clf.predict(xt))


def test_sklearn_refusals_name_the_problem() -> None:
    x, y = _xy(1)
    with pytest.raises(TypeError, match="DecisionTreeClassifier is not supported.*"
                                        "LogisticRegression.*MLPClassifier"):
        model_spec(DecisionTreeClassifier().fit(x, y))
    with pytest.raises(ValueError, match="not fitted"):
        model_spec(LogisticRegression())
    with pytest.raises(ValueError, match=r"classes_ must be 0..K-1.*searchsorted"):
        model_spec(LogisticRegression().fit(x, y + 1))
    with pytest.raises(ValueError, match="in_shape"):
        model_spec(LogisticRegression().fit(x, y), in_shape=(4,))
    with pytest.raises(TypeError, match="must be a PyTorch nn.Sequential.*Got list"):
        model_spec([1, 2])


def test_model_spec_classmethods_dispatch() -> None:
    x, y = _xy(2)
    clf = LogisticRegression().fit(x, y)
    assert ModelSpec.from_sklearn(clf) == model_spec(clf)
    with pytest.raises(TypeError, match="from_torch must be a PyTorch nn.Sequential"):
        ModelSpec.from_torch(clf)


# ---------------------------------------------------------------------- PyTorch
try:
    import torch
    from torch import nn
except ImportError:  # pragma: no cover - torch is the learning extra
    torch = nn = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch models need fedsec[learning]")


def _torch_agrees(net, x: np.ndarray, in_shape=None) -> ModelSpec:
    net = net.double().eval()
    spec = model_spec(net, in_shape=in_shape)
    params = model_params(net)
    with torch.no_grad():
        xt = torch.as_tensor(x if in_shape is None else x.reshape(len(x), *in_shape))
        ref = net(xt).numpy()
    np.testing.assert_array_equal(predict(spec, params, x), ref.argmax(axis=1))
    return spec


@needs_torch
def test_sequential_mlp_with_activations_folded() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Dropout(0.2),
                        nn.Sequential(nn.Linear(10, 8), nn.Tanh()),
                        nn.Linear(8, 5, bias=False), nn.Sigmoid(), nn.Linear(5, 3),
                        nn.Softmax(dim=1))
    x = np.random.default_rng(0).normal(size=(300, 6))
    spec = _torch_agrees(net, x)
    assert [(ly.kind, ly.out_features, ly.activation) for ly in spec.layers] == [
        ("dense", 10, "relu"), ("dense", 8, "tanh"), ("dense", 5, "sigmoid"),
        ("dense", 3, "identity")]
    params = model_params(net)
    np.testing.assert_array_equal(params[5], 0.0)  # the missing bias is a zero bias
    with torch.no_grad():  # the scores too, not only the arg-max (soft-max dropped)
        logits = net[:-1](torch.as_tensor(x)).numpy()
    np.testing.assert_allclose(forward(spec, params, x), logits, atol=1e-12)


@needs_torch
def test_sequential_cnn() -> None:
    torch.manual_seed(1)
    net = nn.Sequential(nn.Conv2d(2, 4, 3, stride=2), nn.ReLU(), nn.Conv2d(4, 3, 2),
                        nn.Flatten(), nn.Linear(3 * 3 * 3, 5), nn.Tanh(), nn.Linear(5, 4))
    x = np.random.default_rng(1).normal(size=(120, 2 * 9 * 9))
    spec = _torch_agrees(net, x, in_shape=(2, 9, 9))
    assert [ly.kind for ly in spec.layers] == ["conv2d", "conv2d", "dense", "dense"]
    assert spec.layers[0].activation == "relu" and spec.layers[1].activation == "identity"
    assert ModelSpec.from_torch(net, in_shape=(2, 9, 9)).layers == spec.layers
    with pytest.raises(TypeError, match="from_sklearn must be a fitted scikit-learn"):
        ModelSpec.from_sklearn(net)


@needs_torch
def test_unflatten_then_convolution() -> None:
    torch.manual_seed(2)
    net = nn.Sequential(nn.Linear(10, 32), nn.Unflatten(1, (2, 4, 4)), nn.Conv2d(2, 3, 3),
                        nn.Flatten(), nn.Linear(12, 2))
    _torch_agrees(net, np.random.default_rng(2).normal(size=(80, 10)))


@needs_torch
def test_fedsec_specnet_is_read_back() -> None:
    from fedsec.learning.tasks import task_spec
    from fedsec.learning.torch_net import build_net

    spec = task_spec("mnist")
    params = spec.init_params(np.random.default_rng(0))
    net = build_net(spec, params)
    assert model_spec(net) == spec
    for a, b in zip(model_params(net), params, strict=True):
        np.testing.assert_array_equal(a, b)


@needs_torch
@pytest.mark.parametrize(("net", "kwargs", "error", "match"), [
    (lambda: nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)), {}, TypeError,
     r"layer 1 \(BatchNorm1d\) is not supported.*Linear, Conv2d, ReLU"),
    (lambda: nn.Sequential(nn.Linear(4, 3), nn.GELU()), {}, TypeError, "GELU"),
    (lambda: nn.Sequential(nn.Conv2d(1, 2, 3, padding=1)), {"in_shape": (1, 5, 5)},
     ValueError, "padding"),
    (lambda: nn.Sequential(nn.Conv2d(1, 2, (3, 2))), {"in_shape": (1, 5, 5)}, ValueError,
     "square"),
    (lambda: nn.Sequential(nn.Conv2d(1, 2, 3)), {}, ValueError, r"in_shape=\(C, H, W\)"),
    (lambda: nn.Sequential(nn.ReLU(), nn.Linear(4, 2)), {}, ValueError,
     "must follow a linear layer"),
    (lambda: nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Tanh()), {}, ValueError,
     "two activations"),
    (lambda: nn.Sequential(nn.Conv2d(1, 2, 3), nn.Linear(18, 2)), {"in_shape": (1, 5, 5)},
     ValueError, "nn.Flatten"),
    (lambda: nn.Sequential(nn.Linear(4, 3), nn.Linear(5, 2)), {}, ValueError,
     "takes 5 features but its input has 3"),
    (lambda: nn.Sequential(nn.Softmax(dim=1), nn.Linear(4, 2)), {}, ValueError,
     "only as the last module"),
    (lambda: nn.Linear(4, 2), {}, TypeError, "custom forward"),
])
def test_torch_refusals_name_the_layer(net, kwargs, error, match) -> None:
    with pytest.raises(error, match=match):
        model_spec(net(), **kwargs)


@needs_torch
def test_model_params_refuses_what_model_spec_refuses() -> None:
    with pytest.raises(TypeError, match=r"BatchNorm1d\) is not supported"):
        model_params(nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)))
    with pytest.raises(TypeError, match="model_params must be"):
        model_params(object())


# ---------------------------------------------------------------------- records
def _lr(coef: np.ndarray, intercept: np.ndarray) -> LogisticRegression:
    m = LogisticRegression()
    m.classes_, m.coef_, m.intercept_ = np.array([0, 1]), coef.copy(), intercept.copy()
    return m


def test_record_from_client_models_computes_fedavg_globals() -> None:
    rng = np.random.default_rng(5)
    init = _lr(rng.normal(size=(1, 4)), np.zeros(1))
    spec = model_spec(init)
    rounds = [[_lr(rng.normal(size=(1, 4)), rng.normal(size=1)) for _ in range(3)]
              for _ in range(2)]
    w = [[10, 20, 30], [5, 5, 10]]
    rec = TrainingRecord.from_client_models(spec, rounds, weights=w, initial=init)
    assert rec.n_clients == 3 and rec.n_rounds == 2 and rec.meta["global_models"] == "fedavg"
    np.testing.assert_array_equal(rec.rounds[0].global_params[0], model_params(init)[0])
    for t in range(2):
        avg = sum(wi * m.coef_ for wi, m in zip(w[t], rounds[t], strict=True)) / sum(w[t])
        nxt = rec.rounds[1].global_params if t == 0 else rec.final_params
        np.testing.assert_allclose(nxt[0][1], avg[0], atol=1e-12)
    assert TrainingRecord.from_bytes(rec.to_bytes()).n_rounds == 2


def test_record_from_mappings_partial_participation_and_given_globals() -> None:
    rng = np.random.default_rng(6)
    spec = ModelSpec("m", (LayerSpec.dense(3, 2),))

    def model() -> list[np.ndarray]:
        return spec.init_params(rng)

    globals_ = [model() for _ in range(3)]  # θ^1, θ^2 and the final θ^3
    local = [{2: model(), 0: model()}, {1: model(), 3: model()}]
    rec = TrainingRecord.from_client_models(
        spec, local, weights=[{0: 1.0, 2: 3.0}, None], global_models=globals_, n_clients=5)
    assert rec.n_clients == 5 and rec.meta["global_models"] == "given"
    assert [r.participants for r in rec.rounds] == [(0, 2), (1, 3)]
    np.testing.assert_array_equal(rec.rounds[0].weights, [1.0, 3.0])  # sorted by client
    np.testing.assert_array_equal(rec.rounds[0].local_params[1][0], local[0][2][0])
    np.testing.assert_array_equal(rec.rounds[1].weights, [1.0, 1.0])  # equal by default
    np.testing.assert_array_equal(rec.final_params[0], globals_[2][0])


@needs_torch
def test_record_from_state_dicts_matches_the_networks() -> None:
    torch.manual_seed(3)
    nets = [nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)) for _ in range(3)]
    spec = model_spec(nets[0])
    rec = TrainingRecord.from_client_models(
        spec, [[n.state_dict() for n in nets[1:]]], participants=[[2, 0]],
        initial=nets[0].state_dict())
    assert rec.rounds[0].participants == (0, 2)
    got = rec.rounds[0].local_params[0]  # participants [2, 0]: client 0 is nets[2]
    for a, b in zip(got, model_params(nets[2]), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"local_models": []}, TypeError, "non-empty sequence"),
    ({"local_models": [[None]], "initial": None}, TypeError, "list of parameter arrays"),
    ({"local_models": "LOCAL", "initial": None}, ValueError, "needs 'global_models'"),
    ({"local_models": "LOCAL", "initial": "INIT", "weights": [[1.0]]}, ValueError,
     "one weight per participant"),
    ({"local_models": "LOCAL", "initial": "INIT", "weights": [[1.0, -1.0]]}, ValueError,
     ">= 0"),
    ({"local_models": "LOCAL", "initial": "INIT", "participants": [[0, 0]]}, ValueError,
     "twice"),
    ({"local_models": "LOCAL", "initial": "INIT", "n_clients": 1}, ValueError, ">= 2"),
    ({"local_models": "LOCAL", "initial": "BAD"}, ValueError, "must have shapes"),
])
def test_record_builder_refusals(kwargs, error, match) -> None:
    spec = ModelSpec("m", (LayerSpec.dense(3, 2),))
    good = spec.init_params(np.random.default_rng(0))
    subst = {"LOCAL": [[good, good]], "INIT": good, "BAD": good[:1]}
    args = {k: subst.get(v, v) if isinstance(v, str) else v for k, v in kwargs.items()}
    args.setdefault("initial", good)
    if "local_models" in kwargs and kwargs["local_models"] == [[None]]:
        args["initial"] = good
    with pytest.raises(error, match=match):
        TrainingRecord.from_client_models(spec, **args)


def test_as_params_keeps_shapes_honest() -> None:
    spec = ModelSpec("m", (LayerSpec.dense(3, 2),))
    with pytest.raises(ValueError, match="finite"):
        as_params([np.full((2, 3), np.nan), np.zeros(2)], spec)
    out = as_params([np.ones((2, 3), dtype=np.int64), np.zeros(2, dtype=np.int64)], spec)
    assert all(p.dtype == np.float64 for p in out)


def test_record_from_flower_strategy_is_the_strategys_record() -> None:
    pytest.importorskip("flwr", reason="Flower is optional: fedsec[flower]")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from fedsec.runtime.flower_shapley import RecordingFedAvg

    spec = ModelSpec("m", (LayerSpec.dense(3, 2),))
    rng = np.random.default_rng(1)
    strategy = RecordingFedAvg(spec, 3)
    glob = spec.init_params(rng)
    for _ in range(2):  # what aggregate_train does with the replies of one round
        glob = strategy.server.aggregate(glob, {0: (spec.init_params(rng), 10.0),
                                                2: (spec.init_params(rng), 30.0)})
    rec = TrainingRecord.from_flower(strategy)
    assert rec.n_rounds == 2 and rec.meta["setting"] == "trusted-server"
    assert [r.participants for r in rec.rounds] == [(0, 2), (0, 2)]
    np.testing.assert_allclose(rec.final_params[0], glob[0])
    with pytest.raises(TypeError, match="RecordingFedAvg"):
        TrainingRecord.from_flower(object())
