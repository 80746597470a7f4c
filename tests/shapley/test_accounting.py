import pytest

from fedsec.protocol.accounting import Accounting


def test_counts_real_bytes_per_role_and_message():
    acc = Accounting()
    acc.message("client:1", "server", "model", b"x" * 10)
    acc.message("client:2", "server", "model", b"y" * 5)
    acc.message("server", "client:1", "output", b"z" * 3)
    assert acc.total_bytes == 18
    roles = acc.bytes_by_role()
    assert roles["client"] == {"sent": 15, "received": 3}
    assert roles["server"] == {"sent": 3, "received": 15}
    assert acc.messages[("client:1", "server", "model")] == 1
    with pytest.raises(TypeError):
        acc.message("a", "b", "k", "not bytes")  # type: ignore[arg-type]


def test_split_and_merge():
    acc = Accounting()
    with acc.timed("encryption"):
        sum(range(1000))
    assert acc.seconds["encryption"] > 0
    with pytest.raises(ValueError):
        with acc.timed("nap"):
            pass
    acc.message("a", "b", "k", b"\0" * 125_000)  # 1 Mbit
    split = acc.split(bandwidth_mbps=1.0)
    assert split["communication"] == pytest.approx(1.0)
    assert split["total"] == pytest.approx(sum(v for k, v in split.items() if k != "total"))
    other = Accounting()
    other.message("a", "b", "k", b"\0" * 5)
    acc.merge(other)
    assert acc.total_bytes == 125_005 and acc.messages[("a", "b", "k")] == 2
    with pytest.raises(ValueError):
        acc.communication_seconds(0)


def test_secure_result_and_test_sets():
    import numpy as np

    from fedsec.shapley.secure_common import SecureShapleyResult, check_test_sets, pooled
    sets = [(np.ones((2, 3)), np.array([0, 1])), (np.zeros((1, 3)), np.array([1]))]
    checked = check_test_sets(sets, 2, 3, where="f")
    x, y, owner = pooled(checked)
    assert x.shape == (3, 3) and y.tolist() == [0, 1, 1] and owner.tolist() == [0, 0, 1]
    with pytest.raises(ValueError, match="one \\(X, y\\) pair per client"):
        check_test_sets(sets, 3, 3, where="f")
    with pytest.raises(ValueError, match="3 features"):
        check_test_sets([(np.ones((2, 4)), np.array([0, 1]))] * 2, 2, 3, where="f")
    acc = Accounting()
    acc.message("p", "a", "k", b"12")
    res = SecureShapleyResult(np.zeros(2), np.zeros((1, 2)), "exact", None, False, None,
                              [(0, 1)], 4, 12, 0.5, protocol="hesv", accounting=acc)
    d = res.to_dict()
    assert d["protocol"] == "hesv" and d["bytes_total"] == 2 and "time_split_seconds" in d
