"""Malicious-aggregator FHAUC: honest runs verify and match the plaintext reference;
every result-changing forgery raises TamperingDetected."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fedsec.auc.common import local_federation
from fedsec.auc.fhauc import secure_auc
from fedsec.auc.fhauc_malicious import (
    MaliciousConfig,
    cheat_bound_bits,
    derive_run_randomness,
    permutation_bound_bits,
    smallest_splits,
)
from fedsec.errors import TamperingDetected, UndefinedMetricError
from fedsec.metrics import confusion_counts, trapezoid_auc_from_counts

TEST_PRESET = "INSECURE_TEST_N4096_DEPTH1_S50"


def _federation(rng: np.random.Generator, parties: int, max_n: int = 200,
                ties: bool = True) -> list[tuple[np.ndarray, np.ndarray]]:
    out = []
    for _ in range(parties):
        n = int(rng.integers(1, max_n))
        p = rng.uniform(0.05, 0.95)
        y = (rng.random(n) < p).astype(int)
        s = rng.random(n)
        if ties:
            s = np.round(s, 1)
        out.append((y, s))
    ys = np.concatenate([y for y, _ in out])
    if ys.min() == ys.max():  # make sure both classes exist
        out.append((np.array([0, 1]), np.array([0.2, 0.7])))
    return out


def _reference(parties: list[tuple[np.ndarray, np.ndarray]], points: int) -> float:
    y = np.concatenate([a for a, _ in parties])
    s = np.concatenate([b for _, b in parties])
    return trapezoid_auc_from_counts(*confusion_counts(y, s, points))


@pytest.mark.parametrize(("seed", "n_parties", "points", "splits"), [
    (1, 2, 2, 9), (2, 3, 25, 9), (3, 7, 100, 4), (4, 12, 257, 3), (5, 4, 1000, 2),
])
def test_honest_runs_verify_and_match_reference(seed: int, n_parties: int, points: int,
                                                splits: int) -> None:
    rng = np.random.default_rng(seed)
    parties = _federation(rng, n_parties)
    res = secure_auc(parties, decision_points=points, security="malicious", splits=splits,
                     min_bound_bits=0.0, preset=TEST_PRESET, allow_insecure=True)
    ref = _reference(parties, points)
    assert res.extra["verified"] is True
    assert abs(res.auc - ref) <= 1e-6
    runs = res.extra["auc_runs"]
    assert abs(runs[0] - runs[1]) <= 1e-6


def test_n4096_spans_several_ciphertexts() -> None:
    rng = np.random.default_rng(9)
    parties = _federation(rng, 3, max_n=400, ties=False)
    res = secure_auc(parties, decision_points=4096, security="malicious", splits=2,
                     min_bound_bits=0.0, preset=TEST_PRESET, allow_insecure=True)
    assert abs(res.auc - _reference(parties, 4096)) <= 1e-6
    # 2 * 4097 positions over 1024 even slots per ciphertext: 9 ciphertexts per run
    assert res.bytes_up_per_party > 9 * 2 * 40_000


def test_secure_default_preset_and_default_splits() -> None:
    rng = np.random.default_rng(11)
    parties = _federation(rng, 4)
    res = secure_auc(parties, decision_points=100, security="malicious")
    assert abs(res.auc - _reference(parties, 100)) <= 1e-6
    # eight runs (the default) reach 2^-40 with S=2; two runs need S=3
    assert res.extra["splits"] == smallest_splits(100, 40.0, runs=8) == 2
    assert smallest_splits(100, 40.0, runs=2) == 3
    assert res.extra["cheat_bound_bits"] >= 40.0


def test_single_class_federation_is_undefined() -> None:
    parties = [(np.array([1, 1]), np.array([0.2, 0.9])), (np.array([1]), np.array([0.4]))]
    with pytest.raises(UndefinedMetricError):
        secure_auc(parties, decision_points=10, security="malicious",
                   preset=TEST_PRESET, allow_insecure=True)


def test_cheat_bound_matches_paper_examples() -> None:
    # seed 000 Sec. VI-C quotes S*N positions: N=100,S=7 -> 2^-107; N=100,S=4 -> 2^-60;
    # N=25,S=9 -> 2^-103. With N-1 terms plus the totals entry (our N+1 groups for N+1
    # entries = the paper's N entries when our N is one less) the figures agree.
    for n, s, paper in ((99, 7, 107), (99, 4, 60), (24, 9, 103)):
        assert abs(permutation_bound_bits(n, s) - paper) < 1.0
    assert cheat_bound_bits(100, 2) < cheat_bound_bits(100, 3) < cheat_bound_bits(100, 9)


def test_weak_parameters_are_refused_with_a_suggestion() -> None:
    # four runs: N=10 with S=2 gives 2^-31.4
    with pytest.raises(ValueError, match=r"use --splits 3 or more"):
        MaliciousConfig.create(10, splits=2, runs=4, tolerance=5e-10)
    cfg = MaliciousConfig.create(10, splits=2, runs=4, tolerance=5e-10, min_bound_bits=20.0)
    # two runs: the blind-shift term of the default tolerance is too weak on its own
    with pytest.raises(ValueError, match=r"lower the tolerance or add runs"):
        MaliciousConfig.create(100, splits=9, runs=2)
    assert cfg.splits == 2
    with pytest.raises(ValueError):
        MaliciousConfig.create(100, splits=1, min_bound_bits=0.0)
    with pytest.raises(ValueError):
        MaliciousConfig.create(100, tolerance=0.0)


def test_run_randomness_is_shared_fresh_and_zero_sum() -> None:
    cfg = MaliciousConfig.create(20, splits=3, min_bound_bits=0.0)
    seed = bytes(range(32))
    nonces = [b"a" * 16, b"b" * 16, b"c" * 16]
    r0 = derive_run_randomness(seed, "s", cfg, nonces, 0)
    again = derive_run_randomness(seed, "s", cfg, nonces, 0)
    r1 = derive_run_randomness(seed, "s", cfg, nonces, 1)
    other = derive_run_randomness(seed, "s", cfg, [b"x" * 16, *nonces[1:]], 0)
    assert np.array_equal(r0.tr, again.tr) and np.array_equal(r0.perm, again.perm)
    assert not np.array_equal(r0.tr, r1.tr) and not np.array_equal(r0.perm, r1.perm)
    assert not np.array_equal(r0.tr, other.tr)
    assert np.allclose(r0.tr.sum(axis=0), 0.0, atol=1e-6)
    assert np.allclose(r0.fr.sum(axis=0), 0.0, atol=1e-6)
    assert np.all(np.abs(r0.tr[:-1]) > 0) and np.all((0.5 <= r0.r) & (r0.r < 1.0))
    assert sorted(r0.perm.tolist()) == list(range(cfg.n_positions))


# The tamper battery's attacks are tested in test_malicious_attacks.py.


def _tampered(fn: Any) -> Any:
    """A network whose aggregator rewrites what it relays with ``fn(step, value)``
    (an interceptor, :func:`fedsec.testing.auc.tamper_steps`)."""
    from fedsec.protocol.network import Network
    from fedsec.testing.auc import tamper_steps

    net = Network()
    net.intercept(tamper_steps(fn))
    return net


def test_failed_verification_raises_not_returns() -> None:
    rng = np.random.default_rng(6)
    parties = _federation(rng, 3)
    seen: dict[str, object] = {}

    def oracle(step: str, value: object) -> object:
        """Answer with a party's own submission (its first ciphertext)."""
        from fedsec.protocol import wire
        if step == "submissions":
            seen["subs"] = value
        if step == "result":
            msg = wire.decode(value)  # type: ignore[arg-type]
            sub = wire.decode(seen["subs"][0])  # type: ignore[index]
            return wire.encode(msg.kind, msg.meta, [sub.blobs[0]])
        return value

    with pytest.raises(TamperingDetected) as info:
        secure_auc(parties, decision_points=30, security="malicious", preset=TEST_PRESET,
                   allow_insecure=True, network=_tampered(oracle))
    assert info.value.check == "slot-consistency"


def test_tampered_start_message_is_detected() -> None:
    rng = np.random.default_rng(7)
    parties = _federation(rng, 3)

    def drop_nonce(step: str, value: object) -> object:
        if step == "start":
            from fedsec.protocol import wire
            msg = wire.decode(value)  # type: ignore[arg-type]
            return wire.encode(msg.kind, msg.meta, list(msg.blobs[1:]))
        return value

    with pytest.raises(TamperingDetected) as info:
        secure_auc(parties, decision_points=30, security="malicious", preset=TEST_PRESET,
                   allow_insecure=True, network=_tampered(drop_nonce))
    assert info.value.check == "nonce"


def test_no_byte_the_malicious_aggregator_receives_contains_the_secret_key() -> None:
    """Key set-up, commits and both runs' submissions searched for the secret key."""
    import importlib.util
    from pathlib import Path

    from fedsec.auc.fhauc_malicious import MaliciousAggregator, MaliciousParty
    from fedsec.crypto.keysetup import KeySetupAggregator, KeySetupParty

    spec = importlib.util.spec_from_file_location(
        "ckks_leak", Path(__file__).parents[1] / "crypto" / "test_ckks.py")
    assert spec is not None and spec.loader is not None
    leak = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(leak)

    names = ["a", "b", "c"]
    cfg = MaliciousConfig.create(40, splits=4, preset=TEST_PRESET, allow_insecure=True)
    identities, roster = local_federation(names)
    parties = [KeySetupParty(i, roster, cfg.key_spec()) for i in identities]
    ks = KeySetupAggregator(roster, cfg.key_spec())
    received: list[bytes] = [p.hello() for p in parties]
    holder, request = ks.request(received)
    offer = parties[holder].offer(request)
    received.append(offer)
    confirms = [p.receive(d) for p, d in zip(parties, ks.accept(offer), strict=True)]
    received += confirms
    bundle = ks.confirm(confirms)
    keys = [p.finish(bundle) for p in parties]
    rng = np.random.default_rng(4)
    roles = [MaliciousParty(rng.integers(0, 2, 30), rng.random(30), keys=k, config=cfg,
                            identity=i, roster=roster)
             for k, i in zip(keys, identities, strict=True)]
    assert ks.context is not None
    agg = MaliciousAggregator(ks.context, cfg, names=names, session=ks.session,
                              roster=roster)
    commits = [r.commit() for r in roles]
    start = agg.start(commits)
    subs = [r.submit(start) for r in roles]
    received += commits + subs
    assert 0.0 <= roles[0].finalize(agg.aggregate(subs)) <= 1.0
    leak._assert_no_secret(keys[0].context, *received)
    leak._assert_no_secret(keys[0].context, b"".join(received))
