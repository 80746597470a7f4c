"""Versioned message framing: round trips and defensive parsing."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsec.errors import ProtocolError
from fedsec.protocol import wire

SAMPLE = wire.encode("fhauc/submit", {"party": 3, "session": "abc", "x": [1.5, None]},
                     [b"\x00\x01\x02", b"", b"blob" * 50])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.text(max_size=20)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=10)


@settings(max_examples=200, deadline=None)
@given(kind=st.from_regex(r"\A[a-z][a-z0-9/_.:-]{0,39}\Z"),
       meta=st.dictionaries(st.text(max_size=10), json_values, max_size=5),
       blobs=st.lists(st.binary(max_size=300), max_size=6))
def test_round_trip(kind, meta, blobs):
    data = wire.encode(kind, meta, blobs)
    msg = wire.decode(data, expect=kind)
    assert msg.kind == kind
    assert msg.meta == meta
    assert msg.blobs == tuple(blobs)
    assert wire.decode(bytearray(data)) == msg
    assert wire.decode(memoryview(data)) == msg


def test_layout_is_documented_one():
    data = wire.encode("k", {}, [b"xy"])
    assert data == (b"FSEC" + struct.pack(">HB", wire.WIRE_VERSION, 1) + b"k"
                    + struct.pack(">I", 2) + b"{}" + struct.pack(">H", 1)
                    + struct.pack(">I", 2) + b"xy")


def test_encoding_is_canonical():
    a = wire.encode("k", {"b": 1, "a": 2})
    b = wire.encode("k", {"a": 2, "b": 1})
    assert a == b


def test_every_truncation_raises():
    for n in range(len(SAMPLE)):
        with pytest.raises(ProtocolError):
            wire.decode(SAMPLE[:n])


@pytest.mark.parametrize("extra", [b"\x00", b"FSEC", b"x" * 100])
def test_trailing_bytes_raise(extra):
    with pytest.raises(ProtocolError, match="trailing"):
        wire.decode(SAMPLE + extra)


def test_bad_magic_raises():
    with pytest.raises(ProtocolError, match="magic"):
        wire.decode(b"XSEC" + SAMPLE[4:])


def test_unknown_version_raises():
    bad = SAMPLE[:4] + struct.pack(">H", wire.WIRE_VERSION + 1) + SAMPLE[6:]
    with pytest.raises(ProtocolError, match="version"):
        wire.decode(bad)


def test_wrong_kind_raises():
    with pytest.raises(ProtocolError, match="expected a 'fhauc/result'"):
        wire.decode(SAMPLE, expect="fhauc/result")
    assert wire.decode(SAMPLE, expect="fhauc/submit").kind == "fhauc/submit"


def test_oversize_raises():
    with pytest.raises(ProtocolError, match="exceeds the limit"):
        wire.decode(SAMPLE, max_bytes=len(SAMPLE) - 1)
    wire.decode(SAMPLE, max_bytes=len(SAMPLE))


def test_lengths_pointing_past_the_end_raise():
    # a blob claiming 4 GiB - 1 bytes: no allocation, just a clean error
    head = wire.encode("k", {}, [])[:-2]
    with pytest.raises(ProtocolError, match="truncated"):
        wire.decode(head + struct.pack(">H", 1) + struct.pack(">I", 0xFFFFFFFF) + b"abc")
    with pytest.raises(ProtocolError, match="too large"):
        wire.decode(b"FSEC" + struct.pack(">HB", 1, 1) + b"k" + struct.pack(">I", 1 << 21))


@pytest.mark.parametrize("meta", [b"[1, 2]", b"not json", b"\xff\xfe", b'"str"'])
def test_bad_metadata_raises(meta):
    data = (b"FSEC" + struct.pack(">HB", 1, 1) + b"k" + struct.pack(">I", len(meta)) + meta
            + struct.pack(">H", 0))
    with pytest.raises(ProtocolError, match="metadata"):
        wire.decode(data)


def _with_meta(meta: bytes) -> bytes:
    return (b"FSEC" + struct.pack(">HB", 1, 1) + b"k" + struct.pack(">I", len(meta)) + meta
            + struct.pack(">H", 0))


def test_deeply_nested_metadata_raises_protocol_error():
    # json.loads raises RecursionError here; the parser must turn it into a ProtocolError
    with pytest.raises(ProtocolError, match="metadata"):
        wire.decode(_with_meta(b"[" * 100_000 + b"]" * 100_000))


def test_huge_integer_in_metadata_raises_protocol_error():
    # Python refuses int strings over 4300 digits with a plain ValueError
    with pytest.raises(ProtocolError, match="metadata"):
        wire.decode(_with_meta(b'{"party": ' + b"9" * 5000 + b"}"))


def test_non_ascii_kind_raises():
    data = b"FSEC" + struct.pack(">HB", 1, 2) + "é".encode() + struct.pack(">I", 2) + b"{}" \
        + struct.pack(">H", 0)
    with pytest.raises(ProtocolError, match="ASCII"):
        wire.decode(data)


@pytest.mark.parametrize("kind", [b"fhauc/submit\nresult: AUC 0.99 verified", b"A", b"x\x1b[2J",
                                  b"1abc", b"a b", b"x" * 65])
def test_kind_outside_the_alphabet_is_refused_before_it_is_quoted(kind):
    """A kind with control characters (log injection), upper case, a leading digit, a
    space or over 64 characters is refused, and the error does not quote it."""
    data = b"FSEC" + struct.pack(">HB", 1, len(kind)) + kind + struct.pack(">I", 2) + b"{}" \
        + struct.pack(">H", 0)
    with pytest.raises(ProtocolError) as err:
        wire.decode(data, expect="fhauc/submit")
    assert kind.decode() not in str(err.value)
    assert "\n" not in str(err.value)
    with pytest.raises(ProtocolError):
        wire.peek_kind(data)
    with pytest.raises(ValueError):
        wire.encode(kind.decode(), {})


def test_peek_kind_reads_the_header_only():
    data = wire.encode("secsv/plan", {"a": 1}, [b"x"])
    assert wire.peek_kind(data) == "secsv/plan"
    assert wire.peek_kind(data[:7 + len("secsv/plan")]) == "secsv/plan"
    with pytest.raises(ProtocolError):
        wire.peek_kind(data[:9])


@pytest.mark.parametrize("obj", [None, "FSEC", 12, [b"FSEC"]])
def test_non_bytes_raise_protocol_error(obj):
    with pytest.raises(ProtocolError, match="bytes"):
        wire.decode(obj)


def test_encode_validates():
    with pytest.raises(ValueError):
        wire.encode("", {})
    with pytest.raises(ValueError):
        wire.encode("x" * 256, {})
    with pytest.raises(ValueError):
        wire.encode("k", {"big": "x" * (1 << 20)})


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=200))
def test_fuzz_random_bytes_only_protocol_error(data):
    try:
        wire.decode(data)
    except ProtocolError:
        pass


@settings(max_examples=500, deadline=None)
@given(edits=st.lists(st.tuples(st.integers(0, len(SAMPLE) - 1), st.integers(0, 255)),
                      min_size=1, max_size=6),
       cut=st.integers(0, len(SAMPLE)))
def test_fuzz_mutated_messages_only_protocol_error(edits, cut):
    data = bytearray(SAMPLE)
    for pos, val in edits:
        data[pos] = val
    for candidate in (bytes(data), bytes(data[:cut]), bytes(data) + bytes(data[:cut])):
        try:
            msg = wire.decode(candidate)
        except ProtocolError:
            continue
        assert isinstance(msg.meta, dict)
        assert wire.decode(wire.encode(msg.kind, msg.meta, msg.blobs)) == msg
