"""SecretSV (seed 004's pure secret-sharing baseline) against NSSV; Beaver triples."""

from __future__ import annotations

import numpy as np
import pytest

from fedsec.crypto import sharing as sh
from fedsec.errors import PrivacyWarning, ProtocolError
from fedsec.learning.record import TrainingRecord
from fedsec.shapley import federated_shapley
from fedsec.shapley.accounting import Accounting
from fedsec.shapley.secretsv import Dealer, _Server, secretsv_shapley

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
    assert got.protocol == "secretsv"


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
    from fedsec.shapley.binding import Context, new_request_id
    from fedsec.shapley.secretsv import _Eval

    session = "ab" * 32
    srv_p, srv_a = _Server("P", spec, session=session), _Server("A", spec, session=session)
    ctx, ev = Context(session, "secretsv", 0, 1, 0), new_request_id()
    for srv in (srv_p, srv_a):  # both servers in the same evaluation (first layer)
        srv.eval = _Eval(ctx, ev, np.arange(7))
    w1, w2 = sh.share(sh.to_residues(w, sh.RING64), sh.RING64)
    x1, x2 = sh.share(sh.to_residues(x, sh.RING64), sh.RING64)
    b1, b2 = sh.share(sh.to_residues(b, sh.RING64), sh.RING64)
    tp, ta = Dealer(session=session).triple(3, 5, 7, Accounting(), ctx.at(layer=0))
    op, uvc_p = srv_p.open_share(w1, x1, tp)
    oa, uvc_a = srv_a.open_share(w2, x2, ta)
    zp = srv_p.beaver(op, oa, uvc_p, b1, True)
    za = srv_a.beaver(oa, op, uvc_a, b2, False)
    np.testing.assert_array_equal(sh.reconstruct(zp, za, sh.RING64), w @ x + b[:, None])
    srv_p.eval.opened = False
    srv_p.triples_used.clear()
    with pytest.raises(ProtocolError, match="does not fit"):
        srv_p.open_share(w1, x1[:, :3], tp)  # triple of another shape


def test_validation(agnews_small) -> None:
    rec, sets = _short(agnews_small, 1)
    with pytest.raises(ValueError, match="estimator"):
        secretsv_shapley(rec, sets, estimator="x", schedule="paper")
    with pytest.raises(TypeError, match="sample_skip"):
        secretsv_shapley(rec, sets, sample_skip="yes", schedule="paper")  # type: ignore[arg-type]
    with pytest.raises(sh.FixedPointOverflow):
        secretsv_shapley(rec, [(x * 1e12, y) for x, y in sets], schedule="paper")
