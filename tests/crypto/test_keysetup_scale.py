"""Many simulated parties in one process: key set-up does linear work, the cache it
shares between the simulated parties of one run never outlives the run or accepts what a
party alone would refuse."""

from __future__ import annotations

import numpy as np
import pytest

from fedsec.auc.common import local_federation
from fedsec.auc.fhauc import FHAUCAggregator, FHAUCConfig, secure_auc
from fedsec.crypto.identity import Roster
from fedsec.crypto.keysetup import VerificationCache, party_role, run_key_setup
from fedsec.errors import ProtocolError, TamperingDetected
from fedsec.metrics import trapezoid_auc
from fedsec.protocol import wire
from fedsec.protocol.network import Envelope, Network

PRESET = "INSECURE_TEST_N4096_DEPTH1_S39"


@pytest.fixture
def verifications(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts every Ed25519 signature check made through a roster."""
    count = [0]
    original = Roster.verify

    def counting(self: Roster, *args: object, **kwargs: object) -> None:
        count[0] += 1
        original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Roster, "verify", counting)
    return count


def test_two_hundred_parties_give_the_pooled_auc_with_linear_verification(
        verifications: list[int]) -> None:
    n = 200
    g = np.random.default_rng(7)
    data = [(g.integers(0, 2, 20), g.random(20)) for _ in range(n)]
    res = secure_auc(data, decision_points=100, preset=PRESET, allow_insecure=True)
    y = np.concatenate([d[0] for d in data])
    s = np.concatenate([d[1] for d in data])
    ref = trapezoid_auc(y, s, 100)
    assert res.parties == n
    assert abs(res.auc - ref) <= 1e-9 * ref
    # hellos (aggregator, then once for all parties), the offer (each party), the
    # confirmations (aggregator, then once for all parties): about 5 per party; a party
    # checking everything alone would make n * (2n + 1) = 80,200 of them
    assert verifications[0] <= 6 * n


def test_the_cache_is_per_run(verifications: list[int]) -> None:
    names = [f"p{i}" for i in range(12)]
    ids, roster = local_federation(names)
    spec = FHAUCConfig.create(10, preset=PRESET, allow_insecure=True).key_spec()
    run_key_setup(ids, roster, spec)
    first = verifications[0]
    run_key_setup(ids, roster, spec)
    assert verifications[0] == 2 * first  # the second run checks everything again


def test_a_failed_check_is_not_remembered() -> None:
    cache = VerificationCache()
    calls = []

    def bad() -> None:
        calls.append(1)
        raise ProtocolError("no")

    for _ in range(2):
        with pytest.raises(ProtocolError):
            cache.check(("k", b"x"), bad)
    assert len(calls) == 2
    assert cache.check(("k", b"y"), lambda: 5) == 5
    assert cache.check(("k", b"y"), lambda: 6) == 5
    assert cache.check(("k", b"z"), lambda: 6) == 6  # other bytes: checked anew
    assert (cache.hits, cache.misses) == (1, 2)


def test_one_party_shown_a_forged_confirmation_still_refuses_it() -> None:
    """The other simulated parties have checked the genuine bundle; the one party whose
    bundle differs by one signature byte is not answered from the cache."""
    names = [f"p{i}" for i in range(8)]
    ids, roster = local_federation(names)
    spec = FHAUCConfig.create(10, preset=PRESET, allow_insecure=True).key_spec()
    net = Network()
    victim = party_role("p5")

    def forge(batch: list[Envelope]) -> list[Envelope] | None:
        if not batch or batch[0].kind != "keys/confirmed":
            return None
        out = []
        for env in batch:
            if env.recipient == victim:
                msg = wire.decode(env.payload)
                conf = list(msg.blobs)
                c = wire.decode(conf[0])
                sig = bytearray(c.blobs[1])
                sig[0] ^= 1
                conf[0] = wire.encode(c.kind, c.meta, [c.blobs[0], bytes(sig)])
                env = env.with_payload(wire.encode(msg.kind, msg.meta, conf))
            out.append(env)
        return out

    net.intercept(forge)
    with pytest.raises(TamperingDetected, match="does not verify"):
        run_key_setup(ids, roster, spec, network=net)


def test_many_parties_aggregate_as_they_arrive() -> None:
    names = [f"p{i}" for i in range(5)]
    ids, roster = local_federation(names)
    cfg = FHAUCConfig.create(10, preset=PRESET, allow_insecure=True)
    agg_ks, keys = run_key_setup(ids, roster, cfg.key_spec())
    from fedsec.auc.fhauc import FHAUCParty

    g = np.random.default_rng(3)
    data = [(g.integers(0, 2, 30), g.random(30)) for _ in names]
    parties = [FHAUCParty(y, s, keys=k, config=cfg) for (y, s), k in
               zip(data, keys, strict=True)]
    subs = [p.submit() for p in parties]
    assert agg_ks.context is not None
    agg = FHAUCAggregator(agg_ks.context, cfg, names=agg_ks.names, session=agg_ks.session)
    batch = agg.aggregate(subs)
    agg.begin()
    for raw in reversed(subs):
        agg.add(raw)
    with pytest.raises(ProtocolError, match="duplicate"):
        agg.add(subs[0])
    streamed = agg.finish()
    assert parties[0].finalize(batch) == pytest.approx(parties[1].finalize(streamed),
                                                       rel=1e-8)


def test_malicious_mode_verifies_each_commit_a_constant_number_of_times(
        verifications: list[int]) -> None:
    n = 60
    g = np.random.default_rng(11)
    data = [(g.integers(0, 2, 20), g.random(20)) for _ in range(n)]
    res = secure_auc(data, decision_points=20, security="malicious", splits=2,
                     min_bound_bits=0.0, preset="INSECURE_TEST_N4096_DEPTH1_S50",
                     allow_insecure=True)
    y = np.concatenate([d[0] for d in data])
    s = np.concatenate([d[1] for d in data])
    assert res.extra["verified"] is True
    assert abs(res.auc - trapezoid_auc(y, s, 20)) <= 1e-6
    # key set-up ~5 per party, the commits twice (aggregator, once for all parties); a
    # party checking every commit alone would add n * n = 3,600
    assert verifications[0] <= 8 * n
