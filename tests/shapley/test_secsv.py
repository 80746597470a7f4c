"""SecSV (seed 004, Alg. 3-7) against NSSV: exact FSV, SampleSkip, estimators, Prop. 6.8's
decryptor rules, the fixed-point budget and the decoders."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from fedsec.crypto.sharing import FixedPointOverflow
from fedsec.errors import PrivacyWarning, ProtocolError
from fedsec.learning.record import TrainingRecord
from fedsec.protocol import wire
from fedsec.shapley import federated_shapley
from fedsec.shapley.secsv import SecSVConfig, secsv_shapley
from fedsec.shapley.secure_game import (
    check_decryptor,
    decryptor_chain,
    integer_weights,
    plan_groups,
)

pytestmark = pytest.mark.filterwarnings(
    "ignore:.*schedule='paper'.*:fedsec.errors.PrivacyWarning")


def _one_round(t, rounds: int = 1) -> tuple[TrainingRecord, list]:
    rec = t.record
    short = TrainingRecord(rec.spec, rec.n_clients, rec.rounds[:rounds], rec.final_params)
    return short, [(c.x_test, c.y_test) for c in t.fed.clients]


@pytest.fixture(scope="module")
def logistic(agnews_small):
    rec, sets = _one_round(agnews_small, 2)
    return rec, sets, agnews_small.x, agnews_small.y


def test_exact_fsv_matches_nssv(logistic) -> None:
    rec, sets, x, y = logistic
    ref = federated_shapley(rec, x, y)
    got = secsv_shapley(rec, sets, schedule="paper")
    assert got.error_to(ref) <= 1e-3
    assert got.protocol == "secsv" and got.models_tested == ref.models_tested
    # utilities agree sample-exactly here (fixed point 2^-20 / 2^-18 does not flip any)
    for a, b in zip(got.utilities or [], ref.utilities or [], strict=True):
        np.testing.assert_array_equal(a, b)
    d = got.to_dict()
    roles = d["bytes_by_role"]
    assert roles["A"]["sent"] > 0 and roles["P"]["received"] > 0 and roles["client"]["sent"] > 0
    assert d["time_split_seconds"]["encryption"] > 0 and d["time_split_seconds"]["decryption"] > 0


def test_without_shortcut_and_with_sample_skip(agnews_small) -> None:
    rec, sets = _one_round(agnews_small, 1)
    x, y = agnews_small.x, agnews_small.y
    ref = federated_shapley(rec, x, y, sample_skip=True)
    for shortcut in (True, False):
        got = secsv_shapley(rec, sets, sample_skip=True, linear_shortcut=shortcut, schedule="paper")
        assert got.error_to(ref) <= 1e-3
        # SampleSkip at P mirrors the plaintext SampleSkip: same skips, same work
        assert got.samples_tested == ref.samples_tested
        assert got.skip.skipped == ref.skip.skipped > 0
        for a, b in zip(got.utilities or [], ref.utilities or [], strict=True):
            np.testing.assert_array_equal(a, b)


def test_estimators_over_secsv(logistic) -> None:
    """PS over the secure oracle equals PS in the clear with the same seed."""
    rec, sets, x, y = logistic
    ref = federated_shapley(rec, x, y, estimator="ps", budget=3, seed=4)
    got = secsv_shapley(rec, sets, estimator="ps", budget=3, seed=4, schedule="paper")
    np.testing.assert_allclose(got.fsv, ref.fsv, atol=1e-12)
    assert got.models_tested == ref.models_tested < 2 ** 5 * rec.n_rounds


def test_cnn_layer_by_layer(digits_small) -> None:
    """A 3-layer CNN with 4 clients: the chain cannot be all distinct -> PrivacyWarning."""
    rec, sets = _one_round(digits_small)
    sets = [(x[:12], y[:12]) for x, y in sets]  # a few samples per client: fast
    ref = federated_shapley(rec, np.concatenate([x for x, _ in sets]),
                            np.concatenate([y for _, y in sets]))
    with pytest.warns(PrivacyWarning, match="Prop. 6.8"):
        got = secsv_shapley(rec, sets, linear_shortcut=True, schedule="paper")
    assert got.error_to(ref) <= 1e-3


def test_overflow_is_refused_not_wrapped(logistic) -> None:
    rec, sets, _x, _y = logistic
    with pytest.raises(FixedPointOverflow):
        secsv_shapley(rec, sets, config=SecSVConfig(frac_bits_model=30, frac_bits_data=30),
                      schedule="paper")
    big = [(x * 1e9, y) for x, y in sets]  # |x| * 2^18 beyond t/2
    with pytest.raises(FixedPointOverflow):
        secsv_shapley(rec, big, config=SecSVConfig(frac_bits_model=20, frac_bits_data=18),
                      schedule="paper")
    huge = [(x * 1e15, y) for x, y in sets]  # no fixed point fits: P refuses up front
    with pytest.raises(FixedPointOverflow, match="refuses"):
        secsv_shapley(rec, huge, schedule="paper")



def test_prop_6_8_rules() -> None:
    groups, strong = plan_groups(5, 1)
    assert strong and all(len(g) <= 3 for g in groups)
    assert sorted(c for g in groups for c in g) == list(range(5))
    with pytest.raises(ValueError, match="at least 3 clients"):
        plan_groups(2, 1)
    groups, strong = plan_groups(4, 3)
    assert not strong
    with pytest.raises(ValueError):
        plan_groups(3, 3)
    for turn in range(6):
        for owners in ([0], [3], []):
            chain = decryptor_chain(5, 1, [0, 1, 2], owners, True, turn)
            assert chain[0] not in {0, 1, 2, *owners}
        chain = decryptor_chain(6, 3, [0, 1], [2], True, turn)
        assert len(set(chain)) == 3 and not set(chain) & {0, 1, 2}
        chain = decryptor_chain(5, 3, [0, 1], [2], False, turn)
        assert all(a != b for a, b in zip(chain, chain[1:], strict=False))
        assert not set(chain) & {0, 1, 2}
    with pytest.raises(ProtocolError, match="own the model"):
        check_decryptor(2, 0, 1, [0], [2], -1)
    with pytest.raises(ProtocolError, match="i_2 = i_1"):
        check_decryptor(0, 0, 2, [0], [], -1)
    with pytest.raises(ProtocolError, match="last layer"):
        check_decryptor(0, 1, 2, [0], [], 3)
    with pytest.raises(ProtocolError, match="consecutive"):
        check_decryptor(3, 1, 3, [0], [], 3)
    check_decryptor(3, 0, 1, [0, 1], [2], -1)


def test_integer_weights() -> None:
    np.testing.assert_array_equal(integer_weights(np.array([100.0, 300.0, 50.0])), [2, 6, 1])
    q = integer_weights(np.array([0.2, 0.5, 0.3]), 12)
    np.testing.assert_allclose(q / q.sum(), [0.2, 0.5, 0.3], atol=1e-3)


def test_client_refuses_bad_requests(logistic) -> None:
    from fedsec.shapley.secsv import _setup

    rec, sets, _x, _y = logistic
    from fedsec.shapley.secsv import SecSVConfig as Cfg

    run = _setup(rec, [(np.asarray(x, float), np.asarray(y)) for x, y in sets], Cfg().check(),
                 None, True)
    client = run.clients[0]
    bfv = client._bfv  # noqa: SLF001 - the client's keys, to forge a ciphertext
    from fedsec.protocol.binding import Binding, new_request_id

    p_side = Binding(client._b.session, "secsv", "P")  # noqa: SLF001

    def bound(meta: dict) -> dict:  # a request of this session, with fresh ids
        return {**p_side.bind(meta, step="decrypt", to="client:0", round=0,
                              index=(1, 0, meta["layer"]), rid=new_request_id()),
                "ev": new_request_id()}

    for bad in (b"", b"FSEC", wire.encode("secsv/decrypt", {"layer": 0}),
                wire.encode("secsv/decrypt", {"layer": 5, "m": 1}),
                wire.encode("secsv/plan", {})):
        with pytest.raises(ProtocolError):
            client.decrypt_layer(bad)
    req = wire.encode("secsv/decrypt", bound({
        "layer": 0, "m": 1, "batch_owners": [0], "model_owners": [], "previous": -1,
        "scale_bits": 38, "weight_sum": 1, "bound": 10}), [b"junk", b"\x80"])
    with pytest.raises(ProtocolError, match="i_2 = i_1"):
        client.decrypt_layer(req)
    req = wire.encode("secsv/decrypt", bound({
        "layer": 0, "m": 1, "batch_owners": [1], "model_owners": [], "previous": -1,
        "scale_bits": 38, "weight_sum": 1, "bound": 10}), [b"junk", b"\x80"])
    with pytest.raises(ProtocolError):
        client.decrypt_layer(req)
    # a value beyond the announced bound (e.g. a wrapped or tampered result) is refused
    ct = bfv.mod_switch_down(bfv.encrypt(np.full(bfv.slots, 11, dtype=np.uint64)))
    req = wire.encode("secsv/decrypt", bound({
        "layer": 0, "m": 1, "batch_owners": [1], "model_owners": [], "previous": -1,
        "scale_bits": 38, "weight_sum": 1, "bound": 10}), [bfv.serialize(ct), b"\x80"])
    with pytest.raises(ProtocolError, match="bound"):
        client.decrypt_layer(req)
    for bad in (b"", wire.encode("secsv/model", {"round": 0, "key": "x", "owner": 0,
                                                 "bounds": [[1, 1]]}, [b"x"])):
        with pytest.raises(ProtocolError):
            run.P.receive_model(bad)


def test_argument_validation(logistic) -> None:
    rec, sets, _x, _y = logistic
    with pytest.raises(ValueError, match="estimator"):
        secsv_shapley(rec, sets, estimator="nope", schedule="paper")
    with pytest.raises(ValueError, match="budget"):
        secsv_shapley(rec, sets, estimator="ps", budget=0, schedule="paper")
    with pytest.raises(TypeError, match="sample_skip"):
        secsv_shapley(rec, sets, sample_skip=1, schedule="paper")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="one \\(X, y\\) pair per"):
        secsv_shapley(rec, sets[:2], schedule="paper")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="frac_bits_model"):
            secsv_shapley(rec, sets, config=SecSVConfig(frac_bits_model=0), schedule="paper")


def test_decryptor_sees_only_the_product(logistic) -> None:
    """Folded ciphertexts: each slot segment the decrypting client gets is masked (uniform
    residues), only their sum -- the layer output -- is meaningful; and every request
    honours Prop. 6.8 (checked by the client itself, see above)."""
    from fedsec.crypto import sharing as sh
    from fedsec.shapley.secsv import SecSVConfig as Cfg
    from fedsec.shapley.secsv import _setup

    rec, sets, _x, _y = logistic
    run = _setup(rec, [(np.asarray(x, float), np.asarray(y)) for x, y in sets], Cfg().check(),
                 None, True)
    lp = run.P.plan.layers[0]
    assert lp.fold > 1  # small test sets: several diagonals share a ciphertext
    seen = []
    bfv = run.clients[0]._bfv  # noqa: SLF001 - what a decrypting client can decrypt

    def spy(envs: list) -> None:  # every decryption request on the network
        for env in envs:
            if env.kind == "secsv/decrypt":
                msg = wire.decode(env.payload)
                slots = bfv.decrypt(bfv.deserialize(msg.blobs[0], low=True))
                seen.append((slots, msg.meta["bound"]))

    run.net.intercept(spy)
    run.upload_round(0)
    run.evaluate(0, 0b11, None)
    assert seen
    seg = lp.d_out * run.P.plan.width
    for slots, bound in seen:
        parts = sh.centre(slots[:lp.fold * seg].reshape(lp.fold, seg), run.P._bfv.t)
        assert np.abs(parts[0]).max() > bound  # a single segment is noise
        total = slots[:seg].copy()
        for p in slots[seg:lp.fold * seg].reshape(lp.fold - 1, seg):
            total = sh.add_mod(total, p, run.P._bfv.t)
        assert np.abs(sh.centre(total, run.P._bfv.t)).max() <= bound  # the sum is the output
