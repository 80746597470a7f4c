"""SecretSV (seed 004's pure secret-sharing baseline) against NSSV; Beaver triples."""

from __future__ import annotations

import numpy as np
import pytest

from fedsec.crypto import sharing as sh
from fedsec.errors import PrivacyWarning, ProtocolError
from fedsec.learning.record import TrainingRecord
from fedsec.protocol.network import Network
from fedsec.shapley import federated_shapley
from fedsec.shapley.secretsv import (
    Dealer,
    SecretSVAuxiliary,
    SecretSVClient,
    SecretSVPrincipal,
    secretsv_shapley,
)

pytestmark = pytest.mark.filterwarnings(
    "ignore:.*schedule='paper'.*:fedsec.errors.PrivacyWarning")


def _short(t, rounds: int) -> tuple[TrainingRecord, list]:
    rec = t.record
    return (TrainingRecord(rec.spec, rec.n_clients, rec.rounds[:rounds], rec.final_params),
            [(c.x_test, c.y_test) for c in t.fed.clients])


def test_fsv_matches_nssv_with_and_without_sample_skip(agnews_small) -> None:
    rec, sets = _short(agnews_small, 2)
    for skip in (False, True):
        ref = federated_shapley(rec, agnews_small.x, agnews_small.y, sample_skip=skip)
        got = secretsv_shapley(rec, sets, sample_skip=skip, schedule="paper")
        assert got.error_to(ref) <= 1e-3
        assert got.samples_tested == ref.samples_tested
        for a, b in zip(got.utilities or [], ref.utilities or [], strict=True):
            np.testing.assert_array_equal(a, b)
    roles = got.to_dict()["bytes_by_role"]
    assert roles["dealer"]["sent"] > 0 and roles["A"]["sent"] > 0
    assert roles["dealer"]["received"] > 0 and roles["client"]["received"] > 0
    assert got.protocol == "secretsv"
    # bytes by the network (real message kinds), time by every role's clock
    acc = got.accounting
    assert acc is not None
    kinds = {k for _, _, k in acc.bytes_by_message}
    assert {"secretsv/hello", "secretsv/session", "secretsv/data", "secretsv/model",
            "secretsv/batches", "secretsv/eval", "secretsv/triple-request", "secretsv/triple",
            "secretsv/open", "secretsv/output", "secretsv/labels", "secretsv/label-mask",
            "secretsv/label-diff"} <= kinds
    split = acc.split()
    assert split["share_generation"] > 0 and split["arithmetic"] > 0
    assert split["decryption"] > 0  # the clients' reconstructions


def test_cnn(digits_small) -> None:
    rec, sets = _short(digits_small, 1)
    ref = federated_shapley(rec, digits_small.x, digits_small.y)
    with pytest.warns(PrivacyWarning):
        got = secretsv_shapley(rec, sets, schedule="paper")
    assert got.error_to(ref) <= 1e-3


def test_beaver_product_exact_with_wrapping_shares() -> None:
    """Shares of W and X wrap modulo 2^64 almost surely; the product comes back exact."""
    from fedsec.learning.model import LayerSpec, ModelSpec

    rng = np.random.default_rng(0)
    w = rng.integers(-2**30, 2**30, (3, 5))
    x = rng.integers(-2**30, 2**30, (5, 7))
    b = rng.integers(-2**20, 2**20, 3)
    spec = ModelSpec("l", (LayerSpec.dense(5, 3),))
    from fedsec.protocol import wire
    from fedsec.shapley.secretsv import _Eval

    srv_p, srv_a, dealer = SecretSVPrincipal(spec), SecretSVAuxiliary(spec), Dealer()
    offer = srv_p.gather([srv_a.hello(), dealer.hello()])
    for role in (srv_p, srv_a, dealer):
        role.join(offer)
    w1, w2 = sh.share(sh.to_residues(w, sh.RING64), sh.RING64)
    x1, x2 = sh.share(sh.to_residues(x, sh.RING64), sh.RING64)
    b1, b2 = sh.share(sh.to_residues(b, sh.RING64), sh.RING64)
    for srv, ws, xs, bs in ((srv_p, w1, x1, b1), (srv_a, w2, x2, b2)):
        # both servers in the same evaluation (first layer), the model of one client
        srv._round = 0  # noqa: SLF001
        srv._models[(0, "c0")] = [(ws, bs)]  # noqa: SLF001
        srv._bounds[(0, "c0")] = [(1, 1)]  # noqa: SLF001
        srv._eval = _Eval(0, 1, 0, "ab" * 16, np.arange(7), [1], [0], [0], ["c0"], [1],  # noqa: SLF001
                          xs, 1)
    tp, ta = dealer.triple(srv_p.triple_request())
    op, oa = srv_p.open_share(tp), srv_a.open_share(ta)
    _, out_p = srv_p.beaver(oa)
    _, out_a = srv_a.beaver(op)
    zp, za = (np.frombuffer(wire.decode(o).blobs[0], "<u8").reshape(3, 7)
              for o in (out_p, out_a))
    np.testing.assert_array_equal(sh.reconstruct(zp, za, sh.RING64), w @ x + b[:, None])
    srv_p._eval.opened = False  # noqa: SLF001
    srv_p._triples_used.clear()  # noqa: SLF001
    srv_p._eval.x = x1[:, :3]  # noqa: SLF001
    with pytest.raises(ProtocolError, match="does not fit"):
        srv_p.open_share(tp)  # triple of another shape


def test_validation(agnews_small) -> None:
    rec, sets = _short(agnews_small, 1)
    with pytest.raises(ValueError, match="estimator"):
        secretsv_shapley(rec, sets, estimator="x", schedule="paper")
    with pytest.raises(TypeError, match="sample_skip"):
        secretsv_shapley(rec, sets, sample_skip="yes", schedule="paper")  # type: ignore[arg-type]
    with pytest.raises(sh.FixedPointOverflow):
        secretsv_shapley(rec, [(x * 1e16, y) for x, y in sets], schedule="paper")


# ---------------------------------------------------------------- session nonces
def _roles(n: int = 3) -> tuple[list, SecretSVPrincipal, SecretSVAuxiliary, Dealer]:
    from fedsec.learning.model import LayerSpec, ModelSpec

    spec = ModelSpec("l", (LayerSpec.dense(2, 2),))
    rng = np.random.default_rng(0)
    clients = [SecretSVClient(i, n, spec, rng.normal(size=(2, 2)), np.array([0, 1]))
               for i in range(n)]
    rounds = [(tuple(range(n)), np.ones(n))]
    return (clients, SecretSVPrincipal(spec, rounds, n_clients=n),
            SecretSVAuxiliary(spec, rounds, n_clients=n), Dealer())


def _record(clients: list) -> TrainingRecord:
    """One round in which every client of :func:`_roles` takes part (for the bounds in
    the clients' hellos, from which P picks the fixed point)."""
    from fedsec.learning.record import RoundRecord

    spec, n = clients[0]._spec, len(clients)  # noqa: SLF001
    g = spec.init_params(np.random.default_rng(1))
    return TrainingRecord(spec, n, (RoundRecord(g, tuple(range(n)), tuple([g] * n),
                                                np.ones(n)),), g)


def _hello(c: SecretSVClient) -> bytes:
    rnd = _record([c] * c._n).rounds[0]  # noqa: SLF001
    return c.hello([(0, "global", rnd.global_params), (0, f"c{c.index}", rnd.global_params)])


def _session(role: object) -> str:
    b = role._binding  # type: ignore[attr-defined]  # noqa: SLF001
    return "" if b is None else b.session


def _offer(clients: list, p: SecretSVPrincipal, a: SecretSVAuxiliary, dealer: Dealer
           ) -> bytes:
    return p.gather([_hello(c) for c in clients] + [a.hello(), dealer.hello()])


def test_every_role_draws_its_own_nonce_and_derives_the_session() -> None:
    from fedsec.protocol.binding import session_from_nonces
    from fedsec.shapley.secretsv import open_session

    clients, p, a, dealer = _roles()
    roles = [*clients, p, a, dealer]
    nonces = [r._nonce for r in roles]  # noqa: SLF001
    assert len(set(nonces)) == len(roles) and all(len(v) == 16 for v in nonces)
    assert {r._nonce for r in _roles()[0]}.isdisjoint(nonces)  # fresh per role  # noqa: SLF001
    with pytest.raises(ProtocolError, match="no session"):  # nobody acts unjoined
        clients[0].share_data()
    with pytest.raises(ProtocolError, match="no session"):
        dealer.triple(b"")
    open_session(Network(), clients, p, a, dealer, _record(clients))
    assert {_session(r) for r in roles} == {session_from_nonces("secretsv", nonces)}
    with pytest.raises(ProtocolError, match="already"):  # a session is joined once
        a.join(_offer(*_roles()))


def test_a_role_refuses_a_session_without_its_nonce() -> None:
    from fedsec.protocol import wire
    from fedsec.protocol.binding import ReplayRefused, new_nonce

    clients, p, a, dealer = _roles()
    roles = [*clients, p, a, dealer]
    for role in roles:  # its nonce replaced by another: same size, well formed
        others = sorted([r._nonce for r in roles if r is not role] + [new_nonce()])  # noqa: SLF001
        with pytest.raises(ReplayRefused) as err:
            role.join(wire.encode("secretsv/session", {}, others))
        assert err.value.check == "session" and _session(role) == ""
    nonces = [r._nonce for r in roles]  # noqa: SLF001
    for bad in (nonces[:-1],  # a role left out
                nonces + [nonces[0]]):  # one twice
        with pytest.raises(ProtocolError, match="malformed session"):
            clients[0].join(wire.encode("secretsv/session", {}, bad))
    with pytest.raises(ProtocolError, match="every role"):  # P: one hello missing
        p.gather([_hello(c) for c in clients] + [a.hello()])


def test_a_previous_sessions_messages_are_refused_in_a_new_one() -> None:
    from fedsec.protocol.binding import ReplayRefused

    old = _roles()
    old_offer = _offer(*old)
    for role in [*old[0], *old[1:]]:
        role.join(old_offer)
    new = _roles()
    for role in [*new[0], *new[1:]]:  # the old announcement replayed to a new run
        with pytest.raises(ReplayRefused):
            role.join(old_offer)
    new_offer = _offer(*new)
    for role in [*new[0], *new[1:]]:
        role.join(new_offer)
    clients, p, a, _ = new
    assert _session(p) != _session(old[1])
    to_p, to_a = zip(*(c.share_data() for c in old[0]), strict=True)
    with pytest.raises(ReplayRefused) as err:
        p.receive_data(list(to_p))
    assert err.value.check == "session"
    model_p, _ = old[0][0].share_model(0, "c0", [np.ones((2, 2)), np.ones(2)])
    p.start_round(0)
    with pytest.raises(ReplayRefused) as err:
        p.receive_model(model_p)
    assert err.value.check == "session"
    # the new session's own messages are accepted
    fresh = [c.share_data() for c in clients]
    p.receive_data([f[0] for f in fresh])
    a.receive_data([f[1] for f in fresh])
    assert sorted(p._xbound) == [0, 1, 2]  # noqa: SLF001
