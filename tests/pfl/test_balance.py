"""BALANCE's thresholds, Eq. 2 and the two deployments agree."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedsec.learning.tasks import task_spec
from fedsec.pfl.balance import (
    BalanceConfig,
    BalancePeer,
    BalanceServer,
    flatten_params,
    graph_neighbours,
    personalise,
    unflatten_params,
)


def test_sigma_schedule() -> None:
    cfg = BalanceConfig(gamma=0.3, kappa=1.0)
    assert cfg.sigmas(0, 10, 3) == pytest.approx([0.3] * 3)
    assert cfg.sigmas(5, 10, 2)[0] == pytest.approx(0.3 * math.exp(-0.5))
    per = BalanceConfig(gammas=(0.1, 0.5), kappa=2.0)
    assert per.sigmas(10, 10, 2) == pytest.approx([0.1 * math.exp(-2), 0.5 * math.exp(-2)])
    with pytest.raises(ValueError, match="one value per client"):
        per.sigmas(0, 10, 3)


@pytest.mark.parametrize("kw", [{"gamma": 0.0}, {"kappa": -1.0}, {"alpha": 1.5},
                                {"gammas": (0.2, -0.1)}])
def test_config_validation(kw: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="BalanceConfig"):
        BalanceConfig(**kw)  # type: ignore[arg-type]


def test_personalise_is_eq2() -> None:
    own = np.array([1.0, 2.0])
    peers = [np.array([3.0, 2.0]), np.array([5.0, 8.0])]
    assert personalise(own, peers, 0.5) == pytest.approx([0.5 + 0.5 * 4.0, 1.0 + 0.5 * 5.0])
    assert personalise(own, [], 0.5) == pytest.approx(own)  # nobody accepted: keep own
    assert personalise(own, peers, 1.0) == pytest.approx(own)


def test_flatten_roundtrip() -> None:
    spec = task_spec("dnn", layers=2)
    params = spec.init_params(np.random.default_rng(0))
    v = flatten_params(params)
    assert v.shape == (spec.n_params(),)
    back = unflatten_params(spec, v)
    assert all(np.array_equal(a, b) for a, b in zip(params, back, strict=True))
    with pytest.raises(ValueError, match="flat model"):
        unflatten_params(spec, v[:-1])


def test_graphs() -> None:
    ring = graph_neighbours("ring", 5)
    assert ring[0] == {1, 4} and ring[2] == {1, 3}
    er = graph_neighbours("erdos-renyi", 20, p=0.3, rng=np.random.default_rng(1))
    assert all(i not in er[i] for i in range(20))
    assert all(i in er[j] for i in range(20) for j in er[i])
    edges = sum(len(s) for s in er) // 2
    assert 20 < edges < 100  # about 0.3 * 190 = 57
    with pytest.raises(ValueError, match="rng"):
        graph_neighbours("erdos-renyi", 4)
    with pytest.raises(ValueError, match="kind"):
        graph_neighbours("star", 4)


@pytest.mark.parametrize("selection", ["brute", "efficient"])
def test_server_equals_peers(selection: str) -> None:
    rng = np.random.default_rng(5)
    k, t_rounds = 8, 10
    w = rng.normal(size=40) + rng.normal(scale=0.1, size=(k, 40))
    w[0] = rng.normal(scale=3.0, size=40)  # an outlier
    cfg = BalanceConfig(gammas=tuple(rng.uniform(0.1, 0.5, k)))
    server = BalanceServer(k, cfg, t_rounds, selection=selection)
    sel = server.select(w, 3)
    out = server.aggregate(w, sel)
    nbs = graph_neighbours("complete", k)
    for i in range(k):
        peer = BalancePeer(i, cfg, t_rounds, k)
        received = {j: w[j] for j in nbs[i]}
        s = peer.select(w[i], received, 3)
        assert s == sel.accepted[i]
        assert peer.aggregate(w[i], received, s) == pytest.approx(out[i])
        assert peer.checks == k - 1
    assert 0 not in set().union(*sel.accepted[1:])  # nobody accepts the outlier
    assert sel.accepted[0] == frozenset()
    assert out[0] == pytest.approx(w[0])


def test_server_validates() -> None:
    with pytest.raises(ValueError, match="selection"):
        BalanceServer(3, BalanceConfig(), 5, selection="fast")
    server = BalanceServer(3, BalanceConfig(), 5)
    with pytest.raises(ValueError, match="expects 3 models"):
        server.select(np.ones((2, 4)), 0)
    with pytest.raises(ValueError, match="finite"):
        server.select(np.full((3, 2), np.inf), 0)
