"""The protocol layer: binding, field readers, the network and role marks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedsec.errors import ProtocolError
from fedsec.protocol import Binding, Envelope, Network, fields, handlers, receives, wire
from fedsec.protocol.binding import (
    Answered,
    ReplayRefused,
    Requests,
    check_nonce,
    new_nonce,
    session_from_nonces,
)

S = "ab" * 16


def test_binding_round_trip_and_every_field_is_checked():
    p, a = Binding(S, "demo", "P"), Binding(S, "demo", "A")
    meta = p.bind({"x": 1}, step="product", to="A", round=2, index=(5, 0, 1))
    ctx = a.check(meta, step="product", sender="P", round=2, index=(5, 0, 1))
    assert (ctx.round, ctx.index, ctx.sender, ctx.recipient) == (2, (5, 0, 1), "P", "A")
    wrong = {
        "session": Binding("cd" * 16, "demo", "A"),
        "protocol": Binding(S, "other", "A"),
        "recipient": Binding(S, "demo", "B"),
    }
    for check, b in wrong.items():
        with pytest.raises(ReplayRefused) as err:
            b.check(meta, step="product", sender="P", round=2, index=(5, 0, 1))
        assert err.value.check == check
    for check, kw in {"round": {"round": 3}, "step": {"step": "reshare"},
                      "sender": {"sender": "client:1"}, "index": {"index": (5, 0, 2)}}.items():
        args = {"step": "product", "sender": "P", "round": 2, "index": (5, 0, 1)} | kw
        with pytest.raises(ReplayRefused) as err:
            a.check(meta, **args)
        assert err.value.check == check


def test_broadcast_is_accepted_only_where_the_receiver_allows_it():
    agg, party = Binding(S, "demo", "aggregator"), Binding(S, "demo", "party:alice")
    meta = agg.bind({}, step="result", to="*")
    assert party.check(meta, step="result", sender="aggregator", broadcast=True).recipient == "*"
    with pytest.raises(ReplayRefused):
        party.check(meta, step="result", sender="aggregator")


@pytest.mark.parametrize("ctx", [None, [], "x", [S, "demo", -1, "s", "P", "A"],
                                 [S, "demo", True, "s", "P", "A", []],
                                 [S, "demo", -2, "s", "P", "A", []],
                                 [S, "demo", 0, "s", "P\n", "A", []],
                                 [S, "demo", 0, "s", "P", "A", [1.5]],
                                 [S, "demo", 0, "s", "P", "A", [0] * 9],
                                 ["XY" * 16, "demo", 0, "s", "P", "A", []]])
def test_malformed_context_is_a_protocol_error(ctx):
    with pytest.raises(ProtocolError):
        Binding(S, "demo", "A").check({"ctx": ctx}, step="s", sender="P", round=0)


def test_requests_are_answered_once_by_the_role_asked():
    p, a = Binding(S, "demo", "P"), Binding(S, "demo", "A")
    asked, answered = Requests(), Answered()
    rid = asked.issue(p.context(step="ask", sender="P", recipient="A", round=1, index=(3,)))
    req = p.bind({}, step="ask", to="A", round=1, index=(3,), rid=rid)
    a.check(req, step="ask", sender="P", round=1, index=(3,))
    assert answered.once(req) == rid
    with pytest.raises(ReplayRefused):
        answered.once(req)
    ans = a.bind({}, step="answer", to="P", round=1, index=(3,), re_=rid)
    stale = a.bind({}, step="answer", to="P", round=1, index=(3,), re_="0" * 32)
    with pytest.raises(ReplayRefused):
        asked.answer(stale, p, step="answer", sender="A")
    with pytest.raises(ReplayRefused):  # the answer of another place in the round
        asked.answer(a.bind({}, step="answer", to="P", round=1, index=(4,), re_=rid), p,
                     step="answer", sender="A")
    assert asked.answer(ans, p, step="answer", sender="A").index == (3,)
    with pytest.raises(ReplayRefused):
        asked.answer(ans, p, step="answer", sender="A")


def test_session_from_nonces_and_own_nonce_check():
    mine, other = new_nonce(), new_nonce()
    assert session_from_nonces("x", [mine, other]) == session_from_nonces("x", [other, mine])
    assert session_from_nonces("x", [mine, other]) != session_from_nonces("y", [mine, other])
    check_nonce(mine, [other, mine])
    with pytest.raises(ReplayRefused):
        check_nonce(mine, [other, new_nonce()])
    with pytest.raises(ValueError):
        session_from_nonces("x", [mine, mine])


def test_field_readers():
    meta = {"i": 3, "b": True, "f": 2.5, "big": 10**30, "nan": math.nan, "l": [1, 2, 2],
            "s": "abc", "h": "0f" * 16, "fl": [0.5, 1]}
    assert fields.integer(meta, "i", 0, 3) == 3
    assert fields.real(meta, "f", 0, 3) == 2.5 and fields.real(meta, "i") == 3.0
    assert fields.integers(meta, "l", 0, 9, length=3) == (1, 2, 2)
    assert fields.reals(meta, "fl", 0, 1) == (0.5, 1.0)
    assert fields.flag(meta, "b") is True
    assert fields.text(meta, "s", choices=("abc",)) == "abc"
    assert fields.hexid(meta, "h") == "0f" * 16
    bad = [lambda: fields.integer(meta, "b", 0, 9), lambda: fields.integer(meta, "f", 0, 9),
           lambda: fields.integer(meta, "i", 4, 9), lambda: fields.integer(meta, "no", 0, 9),
           lambda: fields.real(meta, "nan"), lambda: fields.real(meta, "big", 0, 1),
           lambda: fields.real(meta, "b"), lambda: fields.integers(meta, "l", 0, 9, distinct=True),
           lambda: fields.integers(meta, "l", 0, 1), lambda: fields.flag(meta, "i"),
           lambda: fields.text(meta, "s", max_length=2), lambda: fields.hexid(meta, "s"),
           lambda: fields.text(meta, "s", pattern=r"[0-9]+"), lambda: fields.integer([], "i", 0, 1),
           lambda: fields.blobs([b"", b""], 3)]
    for call in bad:
        with pytest.raises(ProtocolError, match="malformed"):
            call()


def test_array_reader():
    a = np.arange(6, dtype=np.uint64).reshape(2, 3)
    got = fields.array(a.astype("<u8").tobytes(), np.uint64, (2, 3), hi=5)
    np.testing.assert_array_equal(got, a)
    got[0, 0] = 9  # a writable copy
    for data, kw in [(b"x" * 47, {}), (a.tobytes(), {"hi": 4}),
                     (np.array([np.nan]).tobytes(), {"shape": (1,), "dtype": np.float64})]:
        args = {"dtype": np.uint64, "shape": (2, 3)} | kw
        with pytest.raises(ProtocolError):
            fields.array(data, args.pop("dtype"), args.pop("shape"), **args)


def test_network_counts_intercepts_and_records():
    net = Network(record=True)
    msg = wire.encode("demo/submit", {"a": 1})
    assert net.gather(["party:a", "party:b"], "aggregator", [msg, msg]) == [msg, msg]
    assert ("aggregator", "demo/submit") in net.pairs
    assert net.accounting.bytes_by_role()["party"]["sent"] == 2 * len(msg)

    def drop_b(batch: list[Envelope]) -> list[Envelope]:
        return [e for e in batch if e.sender != "party:b"]

    remove = net.intercept(drop_b)
    assert net.gather(["party:a", "party:b"], "aggregator", [msg, msg]) == [msg]
    with pytest.raises(ProtocolError, match="reached"):
        net.send("party:b", "aggregator", msg)
    remove()

    def equivocate(batch: list[Envelope]) -> list[Envelope]:
        return [e.with_payload(wire.encode("demo/result", {"to": e.recipient})) for e in batch]

    net.intercept(equivocate)
    got = net.broadcast("aggregator", ["party:a", "party:b"], wire.encode("demo/result"))
    assert [wire.decode(g).meta["to"] for g in got] == ["party:a", "party:b"]
    assert len(net.transcript) == 2 + 1 + 2
    assert Envelope("x", "y", b"junk").kind == "?"


def test_receives_marks_and_handlers():
    class Base:
        @receives("demo/a")
        def a(self, data: bytes) -> None: ...

    class Role(Base):
        @receives("demo/b", "demo/c")
        def b(self, data: bytes) -> None: ...

    assert handlers(Role) == {"demo/a": "a", "demo/b": "b", "demo/c": "b"}
    with pytest.raises(ValueError):
        receives("Bad Kind")
