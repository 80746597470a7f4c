import pytest

from fedsec.shapley.accounting import Accounting


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
