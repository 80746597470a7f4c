"""Pairwise-masked secure aggregation: masks cancel in the sum only, and one masked update
alone looks uniform."""

from __future__ import annotations

import numpy as np
import pytest

from fedsec.crypto.sealed import SealKey
from fedsec.crypto.secagg import decode_fixed, encode_fixed, masked_update, pair_mask, sum_updates
from fedsec.errors import ProtocolError


def _setup(names):
    keys = {n: SealKey.generate() for n in names}
    pubs = {n: k.public for n, k in keys.items()}
    return keys, pubs


def test_masks_cancel_in_the_sum_and_only_there():
    rng = np.random.default_rng(0)
    names = ["a", "b", "c", "d"]
    keys, pubs = _setup(names)
    vs = {n: rng.normal(size=50) * 3 for n in names}
    xs = {n: masked_update(vs[n], keys[n], n, pubs, names, session=b"s", round_index=2,
                           attempt=0) for n in names}
    total = decode_fixed(sum_updates(list(xs.values())))
    assert np.allclose(total, sum(vs.values()), atol=4 * 2.0 ** -32)
    # without one participant the masks do not cancel: the partial sum is garbage
    partial = decode_fixed(sum_updates([xs[n] for n in names[:3]]))
    assert np.max(np.abs(partial - sum(vs[n] for n in names[:3]))) > 1e6
    # one masked update is far from its value (uniform mod 2^64)
    assert np.max(np.abs(decode_fixed(xs["a"]) - vs["a"])) > 1e6


def test_pair_masks_agree_and_depend_on_round_attempt_and_pair():
    keys, pubs = _setup(["a", "b", "c"])
    ab = pair_mask(keys["a"], pubs["b"], "a", "b", session=b"s", round_index=0, attempt=0,
                   length=8)
    ba = pair_mask(keys["b"], pubs["a"], "b", "a", session=b"s", round_index=0, attempt=0,
                   length=8)
    assert np.array_equal(ab, ba)
    for kw in ({"round_index": 1}, {"attempt": 1}, {"session": b"t"}):
        args = {"session": b"s", "round_index": 0, "attempt": 0, **kw}
        other = pair_mask(keys["a"], pubs["b"], "a", "b", length=8, **args)
        assert not np.array_equal(ab, other)
    ac = pair_mask(keys["a"], pubs["c"], "a", "c", session=b"s", round_index=0, attempt=0,
                   length=8)
    assert not np.array_equal(ab, ac)


def test_bad_inputs_are_refused():
    keys, pubs = _setup(["a", "b"])
    with pytest.raises(ValueError):
        encode_fixed(np.array([np.nan]))
    with pytest.raises(ValueError):
        encode_fixed(np.array([1e30]))
    with pytest.raises(ProtocolError):
        masked_update(np.zeros(3), keys["a"], "a", pubs, ["a"], session=b"s",
                      round_index=0, attempt=0)
    with pytest.raises(ProtocolError):
        masked_update(np.zeros(3), keys["a"], "a", {}, ["a", "b"], session=b"s",
                      round_index=0, attempt=0)
    with pytest.raises(ProtocolError):
        pair_mask(keys["a"], b"\x00" * 32, "a", "b", session=b"s", round_index=0,
                  attempt=0, length=4)
