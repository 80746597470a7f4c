"""The context-binding primitives of the secure Shapley roles (fedsec.shapley.binding)."""

from __future__ import annotations

import pytest

from fedsec.errors import ProtocolError
from fedsec.shapley.binding import (
    Answered,
    Context,
    ReplayRefused,
    Requests,
    bind,
    check_context,
    context_of,
    new_nonce,
    new_request_id,
    session_from_nonces,
)

S = "ab" * 32


def test_context_round_trip_and_every_field_checked() -> None:
    ctx = Context(S, "secsv", 2, 0b101, 7, 1, "reshare/P")
    meta = bind({"m": 3}, ctx, rid=new_request_id())
    assert context_of(meta) == ctx and meta["m"] == 3
    check_context(meta, ctx)
    for field, value in (("session", "cd" * 32), ("protocol", "secretsv"), ("round", 3),
                         ("mask", 0b110), ("batch", 6), ("layer", 2), ("step", "reshare/A")):
        with pytest.raises(ReplayRefused) as e:
            check_context(meta, ctx.at(**{field: value}))
        assert e.value.check == field and isinstance(e.value, ProtocolError)


@pytest.mark.parametrize("bad", [None, [], "x", [S, "secsv", 0, 0, 0, 0], [S, "secsv", 0, 0, 0,
                                 0, "s", 1], ["nothex", "secsv", 0, 0, 0, 0, ""],
                                 [S, "secsv", True, 0, 0, 0, ""], [S, "secsv", -2, 0, 0, 0, ""],
                                 [S, "secsv", 2**62, 0, 0, 0, ""], [S, "secsv", 0, 0, 0, 0.5, ""],
                                 [S, "x" * 17, 0, 0, 0, 0, ""], [S, "secsv", 0, 0, 0, 0, 5]])
def test_malformed_contexts_raise_protocol_error(bad: object) -> None:
    with pytest.raises(ProtocolError):
        context_of({"ctx": bad})


def test_request_ids_are_answered_once() -> None:
    reqs = Requests()
    ctx = Context(S, "secsv", 0, 3, 0, 1, "decrypt")
    rid = reqs.issue(ctx)
    assert len(rid) == 32 and rid != new_request_id() and len(reqs) == 1
    answer = bind({}, ctx.at(step="reshare/P"), re_=rid)
    with pytest.raises(ReplayRefused, match="another layer"):  # the context first
        reqs.answer(answer, ctx.at(layer=2, step="reshare/P"), what="re-share")
    other = reqs.issue(ctx.at(batch=1))  # an open id of another batch does not fit
    with pytest.raises(ReplayRefused) as e:
        reqs.answer(bind({}, ctx.at(step="reshare/P"), re_=other), ctx.at(step="reshare/P"),
                    what="re-share")
    assert e.value.check == "request-id"
    assert reqs.answer(answer, ctx.at(step="reshare/P"), what="re-share").layer == 1
    with pytest.raises(ReplayRefused) as e:  # a duplicate
        reqs.answer(answer, ctx.at(step="reshare/P"), what="re-share")
    assert e.value.check == "request-id"
    with pytest.raises(ProtocolError):  # no id, a malformed id
        reqs.answer(bind({}, ctx.at(step="reshare/P")), ctx.at(step="reshare/P"), what="x")
    with pytest.raises(ProtocolError):
        reqs.answer(bind({}, ctx.at(step="reshare/P"), re_="ABC"), ctx.at(step="reshare/P"),
                    what="x")
    done = Answered()
    done.once(rid, what="request")
    with pytest.raises(ReplayRefused):
        done.once(rid, what="request")
    assert rid in done and rid in done.copy() and rid not in Answered()


def test_sessions_from_nonces() -> None:
    a, b, c = new_nonce(), new_nonce(), new_nonce()
    s1 = session_from_nonces("secretsv", [a, b, c])
    assert s1 == session_from_nonces("secretsv", [c, a, b])  # order-free
    assert s1 != session_from_nonces("secretsv", [a, b, new_nonce()])
    assert s1 != session_from_nonces("secsv", [a, b, c])  # domain-separated per protocol
    for bad in ([], [a, a], [a, b"short"]):
        with pytest.raises(ValueError):
            session_from_nonces("secretsv", bad)
