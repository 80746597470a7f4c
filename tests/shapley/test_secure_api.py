"""``fedsec.secure_shapley``: models trained outside fedsec (a scikit-learn logistic
regression with FedAvg by hand, a PyTorch ``nn.Sequential``) valued by every secure
protocol equal NSSV within the protocol's bound; one test-data shape for all; the
tutorial's code runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
import typing
import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

import fedsec
from fedsec.errors import PrivacyWarning
from fedsec.learning import TrainingRecord, model_spec
from fedsec.shapley import SecureShapleyResult, federated_shapley
from fedsec.shapley.views import UnsafeSchedule

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "shapley-own-model.md"
#: The bound each protocol states against NSSV (HESV: CKKS noise; the others: exact).
BOUND = {"hesv": 1e-3, "secsv": 1e-12, "secretsv": 1e-12}


def _client_data(rng: np.random.Generator, w: np.ndarray, m: int, shift: float
                 ) -> tuple[np.ndarray, np.ndarray]:
    x = rng.normal(size=(m, len(w))) + shift
    y = (x @ w + (0.5 + shift) * rng.normal(size=m) > shift * w.sum()).astype(np.int64)
    return x, y


def _logistic(coef: np.ndarray, intercept: np.ndarray) -> LogisticRegression:
    model = LogisticRegression(C=1.0, warm_start=True, max_iter=3)
    model.classes_ = np.array([0, 1])
    model.coef_, model.intercept_ = coef.copy(), intercept.copy()
    return model


def sklearn_run(n: int, parts: list[tuple[int, ...]], m_test: int, seed: int = 7
                ) -> tuple[TrainingRecord, list[tuple[np.ndarray, np.ndarray]]]:
    """A user's own FedAvg of scikit-learn logistic regressions (a few L-BFGS steps per
    round from the global model), recorded with dicts {client: model}."""
    rng = np.random.default_rng(seed)
    w_true = rng.normal(size=6)
    train = [_client_data(rng, w_true, 60, 0.3 * i) for i in range(n)]
    test = [_client_data(rng, w_true, m_test, 0.3 * i) for i in range(n)]
    glob = _logistic(rng.normal(scale=0.1, size=(1, 6)), np.zeros(1))
    initial, rounds, weights = glob, [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for part in parts:
            local = {i: _logistic(glob.coef_, glob.intercept_).fit(*train[i]) for i in part}
            w = {i: float(len(train[i][1])) for i in part}
            tot = sum(w.values())
            glob = _logistic(sum(w[i] * m.coef_ for i, m in local.items()) / tot,
                             sum(w[i] * m.intercept_ for i, m in local.items()) / tot)
            rounds.append(local)
            weights.append(w)
    spec = model_spec(initial)
    rec = TrainingRecord.from_client_models(spec, rounds, weights=weights, initial=initial,
                                            n_clients=n)
    assert max(np.abs(p).max() for r in rec.rounds for m in r.local_params for p in m) < 5
    return rec, test


@pytest.fixture(scope="module")
def lr3() -> tuple[TrainingRecord, list[tuple[np.ndarray, np.ndarray]]]:
    rec, test = sklearn_run(3, [(0, 1, 2)] * 2, m_test=35)
    test = away_from_ties(rec, test)
    assert 80 <= sum(len(y) for _, y in test) < 105
    return rec, test


@pytest.fixture(scope="module")
def torch4() -> tuple[TrainingRecord, list[tuple[np.ndarray, np.ndarray]]]:
    pytest.importorskip("torch", reason="PyTorch models need fedsec[learning]")
    rec, test = torch_run()
    test = away_from_ties(rec, test)
    assert 60 <= sum(len(y) for _, y in test) < 120
    return rec, test


def torch_run(seed: int = 3) -> tuple[TrainingRecord, list[tuple[np.ndarray, np.ndarray]]]:
    """A user's own nn.Sequential (Linear, ReLU, Linear) trained by FedAvg over state dicts
    (4 clients, 2 rounds, 120 test samples)."""
    import torch

    nn = torch.nn
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    w_true = rng.normal(size=6)
    train = [_client_data(rng, w_true, 60, 0.3 * i) for i in range(4)]
    test = [_client_data(rng, w_true, 30, 0.3 * i) for i in range(4)]

    def make() -> typing.Any:
        return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))

    net = make()
    initial = {k: v.clone() for k, v in net.state_dict().items()}
    rounds = []
    for _ in range(2):
        states = []
        for x, y in train:
            local = make()
            local.load_state_dict(net.state_dict())
            opt = torch.optim.SGD(local.parameters(), lr=0.1, weight_decay=1e-3)
            xs, ys = torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y)
            for _ in range(20):
                opt.zero_grad()
                nn.functional.cross_entropy(local(xs), ys).backward()
                opt.step()
            states.append({k: v.clone() for k, v in local.state_dict().items()})
        w = [len(y) for _, y in train]
        net.load_state_dict({k: sum(wi * s[k] for wi, s in zip(w, states, strict=True))
                             / sum(w) for k in states[0]})
        rounds.append(states)
    spec = model_spec(net)
    rec = TrainingRecord.from_client_models(spec, rounds, weights=[[60] * 4] * 2,
                                            initial=initial)
    x = np.concatenate([a for a, _ in test])
    with torch.no_grad():  # the record's final model is the user's network
        ref = net(torch.as_tensor(x, dtype=torch.float32)).argmax(1).numpy()
    np.testing.assert_array_equal(fedsec.learning.predict(spec, rec.final_params, x), ref)
    return rec, test


def away_from_ties(rec: TrainingRecord, test: list, eps: float = 1e-2) -> list:
    """Each client's test samples whose top two scores differ by at least ``eps`` under
    every coalition's model of every round. HESV decrypts CKKS's approximate scores, so
    its stated bound (1e-3 from NSSV) holds away from near-ties; ties are handled (or
    reported) by HESV itself, not tested here."""
    out = []
    for x, y in test:
        keep = np.ones(len(y), dtype=bool)
        for rnd in rec.rounds:
            for mask in range(1 << len(rnd.participants)):
                s = np.sort(fedsec.learning.forward(rec.spec, rnd.model_of_mask(mask), x))
                keep &= s[:, -1] - s[:, -2] >= eps
        out.append((x[keep], y[keep]))
    return out


def _nssv(rec: TrainingRecord, test: list) -> np.ndarray:
    x = np.concatenate([a for a, _ in test])
    y = np.concatenate([b for _, b in test])
    return federated_shapley(rec, x, y).fsv


# ---------------------------------------------------------------------- every protocol
@pytest.mark.parametrize("protocol", ["hesv", "secsv", "secretsv"])
def test_sklearn_logistic_every_protocol_equals_nssv(lr3, protocol: str) -> None:
    rec, test = lr3
    ref = _nssv(rec, test)
    assert np.abs(ref).max() > 0.01  # the clients do contribute
    with pytest.warns(PrivacyWarning, match="Prop. 6.8"):
        res = fedsec.secure_shapley(rec, test, protocol=protocol, schedule="paper")
    assert isinstance(res, SecureShapleyResult) and res.protocol == protocol
    assert np.abs(res.fsv - ref).max() <= BOUND[protocol]
    assert res.ssv.shape == (2, 3) and res.accounting.total_bytes > 0


@pytest.mark.parametrize("protocol", ["hesv", "secsv", "secretsv"])
def test_torch_sequential_every_protocol_equals_nssv(torch4, protocol: str) -> None:
    rec, test = torch4
    assert [ly.activation for ly in rec.spec.layers] == ["relu", "identity"]
    ref = _nssv(rec, test)
    with pytest.warns(PrivacyWarning):
        res = fedsec.secure_shapley(rec, test, protocol=protocol, schedule="paper")
    assert np.abs(res.fsv - ref).max() <= BOUND[protocol]


def test_strict_schedule_with_partial_participation() -> None:
    """Eight clients, four per round: the strict rule schedules exact SSVs, no warning."""
    rec, test = sklearn_run(8, [(0, 1, 2, 3), (4, 5, 6, 7)], m_test=12, seed=11)
    ref = _nssv(rec, test)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyWarning)
        res = fedsec.secure_shapley(rec, dict(enumerate(test)), protocol="secretsv")
    assert np.abs(res.fsv - ref).max() <= BOUND["secretsv"]
    assert res.participants == [(0, 1, 2, 3), (4, 5, 6, 7)]


def test_strict_schedule_refuses_before_work_and_says_what_to_do(lr3) -> None:
    rec, test = lr3
    with pytest.raises(UnsafeSchedule, match="schedule='paper'"):
        fedsec.secure_shapley(rec, test, protocol="secsv")


@pytest.mark.slow  # two spawned worker processes: 5-8 s on a busy 2-core machine
def test_parallel_rounds_give_the_serial_values(lr3) -> None:
    rec, test = lr3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        serial = fedsec.secure_shapley(rec, test, protocol="secretsv", schedule="paper")
        par = fedsec.secure_shapley(rec, test, protocol="secretsv", schedule="paper",
                                    workers=2)
    np.testing.assert_array_equal(par.fsv, serial.fsv)
    assert par.protocol == "secretsv"


# ---------------------------------------------------------------------- inputs
def test_nssv_result_is_typed_and_test_sets_take_one_shape(lr3) -> None:
    rec, test = lr3
    res = fedsec.secure_shapley(rec, test, protocol="nssv")
    assert isinstance(res, SecureShapleyResult) and res.protocol == "nssv"
    np.testing.assert_array_equal(res.fsv, _nssv(rec, test))
    as_dict = fedsec.secure_shapley(rec, {2: test[2], 0: test[0], 1: test[1]},
                                    protocol="nssv")
    np.testing.assert_array_equal(as_dict.fsv, res.fsv)
    # a client missing from the dict has no test data: the utility is on the others'
    partial = fedsec.secure_shapley(rec, {0: test[0], 2: test[2]}, protocol="nssv")
    np.testing.assert_array_equal(partial.fsv, _nssv(rec, [test[0], test[2]]))
    lines: list[str] = []
    fedsec.secure_shapley(rec, test, protocol="nssv", progress=lines.append)
    assert len(lines) == rec.n_rounds


@pytest.mark.parametrize(("test_sets", "error", "match"), [
    ("POOLED", TypeError, "not one pooled"),
    ("x.csv", TypeError, "sequence of"),
    ("TWO", ValueError, r"one \(X, y\) pair per client \(3\)"),
    ({"a": None}, ValueError, "0-based"),
    ({3: None}, ValueError, "0-based"),
    ("BADX", ValueError, "6 features"),
])
def test_test_sets_refusals(lr3, test_sets, error, match) -> None:
    rec, test = lr3
    pooled = (np.concatenate([a for a, _ in test]), np.concatenate([b for _, b in test]))
    arg = {"POOLED": pooled, "TWO": test[:2],
           "BADX": [(a[:, :5], b) for a, b in test]}.get(test_sets, test_sets) \
        if not isinstance(test_sets, dict) else test_sets
    with pytest.raises(error, match=match):
        fedsec.secure_shapley(rec, arg, protocol="secsv")


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"protocol": "sv"}, ValueError, r"'protocol' parameter of secure_shapley must be one of"),
    ({"protocol": "hesv", "sample_skip": True}, ValueError, "not offered by HESV"),
    ({"protocol": "secsv", "preset": "x"}, TypeError, "takes no option 'preset'.*config"),
    ({"workers": 0}, ValueError, "'workers' parameter"),
    ({"estimator": "mc"}, ValueError, "'estimator' parameter of secure_shapley"),
    ({"sample_skip": 1}, TypeError, "'sample_skip' parameter of secure_shapley"),
])
def test_argument_refusals(lr3, kwargs, error, match) -> None:
    rec, test = lr3
    with pytest.raises(error, match=match):
        fedsec.secure_shapley(rec, test, **kwargs)
    with pytest.raises(TypeError, match="must be a TrainingRecord"):
        fedsec.secure_shapley(rec.to_bytes(), test)


# ---------------------------------------------------------------------- public names
def test_exports() -> None:
    from fedsec.learning import adapters
    from fedsec.shapley import api, hesv, secretsv, secsv

    assert fedsec.secure_shapley is api.secure_shapley
    assert fedsec.model_spec is adapters.model_spec
    assert fedsec.model_params is adapters.model_params
    assert fedsec.shapley.hesv_shapley is hesv.hesv_shapley
    assert fedsec.shapley.secsv_shapley is secsv.secsv_shapley
    assert fedsec.shapley.secretsv_shapley is secretsv.secretsv_shapley
    for name in ("secure_shapley", "model_spec", "model_params", "TrainingRecord",
                 "SecureShapleyResult"):
        assert name in fedsec.__all__
    for name in ("secure_shapley", "hesv_shapley", "secsv_shapley", "secretsv_shapley"):
        assert name in fedsec.shapley.__all__
    hints = typing.get_type_hints(fedsec.secure_shapley)
    assert hints["return"] is SecureShapleyResult
    assert "Parameters" in (fedsec.secure_shapley.__doc__ or "")


def test_shapley_package_imports_without_seal() -> None:
    code = ("import sys, fedsec.shapley, fedsec.learning; "
            "print(sorted(m for m in ('tenseal', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT / "src")}, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------------- the tutorial
def test_tutorial_code_runs_as_written() -> None:
    """Every ```python block of docs/shapley-own-model.md, in order, in one namespace (its
    own asserts compare each protocol with NSSV)."""
    pytest.importorskip("torch", reason="the tutorial's PyTorch part needs fedsec[learning]")
    blocks = re.findall(r"```python\n(.*?)```", TUTORIAL.read_text(), re.S)
    assert len(blocks) >= 5
    namespace: dict[str, typing.Any] = {}
    with warnings.catch_warnings():
        for k, block in enumerate(blocks):
            exec(compile(block, f"{TUTORIAL.name}[block {k}]", "exec"), namespace)
    assert namespace["protocol"] == "secretsv"  # the loop over protocols ran to its end
    assert namespace["record"].spec.layers[0].activation == "relu"
    assert np.abs(namespace["result"].fsv - namespace["reference"].fsv).max() <= 1e-9


@pytest.mark.parametrize("protocol", ["secsv", "secretsv"])
def test_gru_models_are_refused_before_any_key(protocol: str) -> None:
    """SecSV and SecretSV evaluate dense and conv2d layers: a GRU is refused with a
    ValueError up front, not a ProtocolError from inside the run."""
    from fedsec.learning.fedavg import run_fedavg
    from fedsec.learning.tasks import make_task

    task = make_task("gru", n_samples=300, n_test=45, seed=0)
    fed = task.federate(3, seed=0)
    record = run_fedavg(task, fed, rounds=1, seed=0)
    sets = [(c.x_test, c.y_test) for c in fed.clients]
    with pytest.raises(ValueError, match="gru"):
        fedsec.secure_shapley(record, sets, protocol=protocol)
