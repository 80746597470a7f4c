"""The AUC runners are loops over a :class:`~fedsec.protocol.network.Network`: every byte
between ``"aggregator"`` and ``"party:<name>"`` crosses it (key set-up included), the
result's byte fields are its counts, and an interceptor sees and may rewrite all of it."""

from __future__ import annotations

import numpy as np
import pytest

from fedsec import dpauc, secure_auc
from fedsec.errors import ProtocolError, TamperingDetected
from fedsec.protocol import wire
from fedsec.protocol.network import Envelope, Network
from fedsec.protocol.roles import handlers

TEST_PRESET = "INSECURE_TEST_N4096_DEPTH1_S39"


def _parties(n: int = 3, seed: int = 1) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        y = rng.integers(0, 2, 60)
        y[:2] = [0, 1]
        out.append((y, np.clip(0.3 * y + 0.7 * rng.random(60), 0.0, 1.0)))
    return out


@pytest.mark.parametrize("security", ["semi-honest", "malicious"])
def test_every_message_crosses_the_network(security: str) -> None:
    net = Network(record=True)
    res = secure_auc(_parties(), decision_points=20, security=security, preset=TEST_PRESET,
                     allow_insecure=True, names=["a", "b", "c"], network=net)
    prefix = "fhauc-m/" if security == "malicious" else "fhauc/"
    roles = {e.sender for e in net.transcript} | {e.recipient for e in net.transcript}
    assert roles == {"aggregator", "party:a", "party:b", "party:c"}
    kinds = {e.kind for e in net.transcript}
    assert {"keys/hello", "keys/request", "keys/offer", "keys/deliver", "keys/confirm",
            "keys/confirmed", prefix + "submit", prefix + "result"} <= kinds
    up = {s: 0 for s in ("party:a", "party:b", "party:c")}
    for e in net.transcript:
        if e.recipient == "aggregator" and e.kind.startswith(prefix):
            up[e.sender] += len(e.payload)
    assert res.bytes_up_per_party == max(up.values())
    # every result is one broadcast, bound to every party alike
    results = [e for e in net.transcript if e.kind == prefix + "result"]
    assert len(results) == 3 and len({e.payload for e in results}) == 1
    assert wire.decode(results[0].payload).meta["ctx"][5] == "*"
    assert net.accounting.seconds["arithmetic"] > 0.0


def test_an_interceptor_that_rewrites_the_answer_is_caught() -> None:
    """The network is where a cheating aggregator plugs in: an answer replaced by a
    party's own submission (an oracle query) fails verification."""
    seen: dict[str, bytes] = {}

    def cheat(batch: list[Envelope]) -> list[Envelope] | None:
        if batch and batch[0].kind == "fhauc-m/submit":
            seen["sub"] = batch[0].payload
        if batch and batch[0].kind == "fhauc-m/result":
            msg = wire.decode(batch[0].payload)
            forged = wire.encode(msg.kind, msg.meta, [wire.decode(seen["sub"]).blobs[0]])
            return [e.with_payload(forged) for e in batch]
        return None

    net = Network()
    net.intercept(cheat)
    with pytest.raises(TamperingDetected):
        secure_auc(_parties(), decision_points=20, security="malicious", preset=TEST_PRESET,
                   allow_insecure=True, network=net)


def test_a_message_of_another_step_is_refused_by_its_binding() -> None:
    """A result stripped of its binding context is refused before any decryption."""
    def reflect(batch: list[Envelope]) -> list[Envelope] | None:
        if batch and batch[0].kind == "fhauc/result":
            return [e.with_payload(wire.encode("fhauc/result",
                                               wire.decode(e.payload).meta | {"ctx": None},
                                               list(wire.decode(e.payload).blobs)))
                    for e in batch]
        return None

    net = Network()
    net.intercept(reflect)
    with pytest.raises(ProtocolError, match="context"):
        secure_auc(_parties(), decision_points=20, preset=TEST_PRESET, allow_insecure=True,
                   network=net)


def test_dpauc_parties_and_aggregator_exchange_bytes_over_the_network() -> None:
    net = Network(record=True)
    res = dpauc(_parties(), epsilon=8.0, decision_points=10, network=net)
    assert np.isfinite(res.auc)
    parties = [f"party:party-{i}" for i in range(3)]
    assert [(e.sender, e.recipient, e.kind) for e in net.transcript] == [
        *((p, "aggregator", "dpauc/hello") for p in parties),
        *(("aggregator", p, "dpauc/session") for p in parties),
        *((p, "aggregator", "dpauc/submit") for p in parties)]


def test_dpauc_submissions_are_bound_to_their_session() -> None:
    """A submission replayed from another evaluation, or sent twice, is refused."""
    from fedsec.auc.dpauc import DPAUCClient, DPAUCServer
    from fedsec.protocol.binding import ReplayRefused

    (y0, s0), (y1, s1) = _parties(2)

    def session() -> tuple[DPAUCServer, list[bytes]]:
        server = DPAUCServer()
        clients = [DPAUCClient(y, s, epsilon=8.0, decision_points=10)
                   for y, s in ((y0, s0), (y1, s1))]
        hellos = [c.hello(f"party:{i}") for i, c in enumerate(clients)]
        msg = server.open_session(hellos)
        for c in clients:
            c.join(msg)
        return server, [c.submit() for c in clients]

    server, subs = session()
    _, old = session()
    assert np.isfinite(server.aggregate(subs).auc)
    with pytest.raises(ReplayRefused):
        server.aggregate([subs[0], old[1]])
    with pytest.raises(ProtocolError, match="repeated"):
        server.aggregate([subs[0], subs[0]])
    # a party refuses a session without its own nonce
    outsider = DPAUCClient(y0, s0, epsilon=8.0, decision_points=10)
    outsider.hello("party:x")
    with pytest.raises(ReplayRefused):
        outsider.join(DPAUCServer().open_session([DPAUCClient(
            y1, s1, epsilon=8.0, decision_points=10).hello("party:y")]))


def test_every_auc_role_marks_what_it_receives() -> None:
    from fedsec.auc.exact import BinPairsAggregator, BinPairsParty
    from fedsec.auc.fhauc import FHAUCAggregator, FHAUCParty
    from fedsec.auc.fhauc_malicious import MaliciousAggregator, MaliciousParty
    from fedsec.crypto.keysetup import KeySetupAggregator, KeySetupParty

    assert handlers(FHAUCParty) == {"fhauc/result": "finalize"}
    assert handlers(FHAUCAggregator) == {"fhauc/submit": "aggregate"}
    assert handlers(MaliciousParty) == {"fhauc-m/start": "submit",
                                        "fhauc-m/result": "finalize"}
    assert handlers(MaliciousAggregator) == {"fhauc-m/commit": "start",
                                             "fhauc-m/submit": "aggregate"}
    assert handlers(BinPairsParty) == {"fhauc-exact/pairs": "read"}
    assert handlers(BinPairsAggregator) == {"fhauc-exact/bins": "aggregate"}
    assert handlers(KeySetupParty) == {"keys/request": "offer", "keys/deliver": "receive",
                                       "keys/confirmed": "finish"}
    assert handlers(KeySetupAggregator) == {"keys/hello": "request", "keys/offer": "accept",
                                            "keys/confirm": "confirm"}
    from fedsec.auc.dpauc import DPAUCClient, DPAUCServer, RRClient

    assert handlers(DPAUCClient) == handlers(RRClient) == {"dpauc/session": "join"}
    assert handlers(DPAUCServer) == {"dpauc/hello": "open_session",
                                     "dpauc/submit": "aggregate"}
