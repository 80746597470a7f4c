"""Collective key set-up as roles: honest runs give working keys that only every share
together decrypts; a changed commitment, a share that is not the committed one, a public
key off the common polynomial, keys shown differently to one party and a wrong key share
are each refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from fedsec.auc.common import local_federation
from fedsec.crypto import multiparty as mpc
from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.ckks_keys import CKKSKeys
from fedsec.crypto.collective import (
    CollectiveKeyAggregator,
    CollectiveKeyParty,
    run_collective_key_setup,
)
from fedsec.crypto.keysetup import KeySpec, run_key_setup
from fedsec.crypto.params import get_preset
from fedsec.errors import ProtocolError, TamperingDetected
from fedsec.protocol import wire

PRESET = "INSECURE_TEST_N4096_DEPTH1_S39"
NAMES = ["a", "b", "c"]
SPEC = KeySpec.create(PRESET, [1, 2], True, allow_insecure=True)
SPEC_PARAMS = get_preset(PRESET, allow_insecure=True)


@pytest.fixture(scope="module")
def first():  # type: ignore[no-untyped-def]
    ids, roster = local_federation(NAMES)
    _, result = run_key_setup(ids, roster, KeySpec.create(PRESET, [], False,
                                                          allow_insecure=True))
    return ids, roster, result


@pytest.fixture(scope="module")
def honest(first):  # type: ignore[no-untyped-def]
    ids, roster, result = first
    return run_collective_key_setup(ids, roster, SPEC, result)


Hook = Callable[[str, list[bytes]], list[bytes]]


def _play(first, hook: Hook | None = None,  # type: ignore[no-untyped-def]
          party_hook: Callable[[list[CollectiveKeyParty]], None] | None = None) -> Any:
    """The rounds by hand; ``hook(step, messages)`` may rewrite any delivery."""
    ids, roster, result = first
    hook = hook or (lambda _step, msgs: msgs)
    parties = [CollectiveKeyParty(i, roster, SPEC, k) for i, k in zip(ids, result,
                                                                       strict=True)]
    agg = CollectiveKeyAggregator(roster, SPEC, names=result[0].names,
                                  result_session=result[0].session)
    commits = hook("commit", [p.commit() for p in parties])
    if party_hook is not None:
        party_hook(parties)
    relayed = hook("commits", [agg.commits(commits)] * len(parties))
    reveals = hook("reveal", [p.reveal(r) for p, r in zip(parties, relayed, strict=True)])
    sums = hook("relin", [agg.reveals(reveals)] * len(parties))
    relin2 = hook("relin2", [p.relin(s) for p, s in zip(parties, sums, strict=True)])
    keys = hook("keys", [agg.relin_keys(relin2)] * len(parties))
    checks = hook("check", [p.check(k) for p, k in zip(parties, keys, strict=True)])
    done = hook("confirmed", [agg.confirm(checks)] * len(parties))
    return agg, [p.finish(d) for p, d in zip(parties, done, strict=True)]


def test_collective_keys_work_and_need_every_share(honest) -> None:  # type: ignore[no-untyped-def]
    agg, keys = honest
    ctx = agg.context
    assert not ctx.has_secret_key
    assert all(k.context.public_bytes() == ctx.public_bytes() for k in keys)
    x = np.linspace(-1, 1, ctx.slots)
    ct = ctx.multiply(ctx.rotate(ctx.encrypt(x), 1), ctx.encrypt(x))
    want = np.roll(x, -1) * x
    shares = [k.share.decryption_share(ct, smudging=20) for k in keys]
    # the product sits at scale 2^30: 2^20 smudging is ~0.1 there
    assert np.max(np.abs(mpc.combine_decryption(ctx, ct, shares).real - want)) < 0.5
    partial = mpc.combine_decryption(ctx, ct, shares[:2]).real
    assert np.max(np.abs(partial - want)) > 1e3


def test_a_changed_commitment_is_refused(first) -> None:  # type: ignore[no-untyped-def]
    def hook(step: str, msgs: list[bytes]) -> list[bytes]:
        if step != "commits":
            return msgs
        msg = wire.decode(msgs[0])
        inner = wire.decode(msg.blobs[1])
        digest = bytearray(inner.blobs[0])
        digest[0] ^= 1
        blobs = list(msg.blobs)
        blobs[1] = wire.encode("mpkeys/commit", inner.meta, [bytes(digest), inner.blobs[1]])
        return [wire.encode("mpkeys/commits", msg.meta, blobs)] * len(msgs)

    with pytest.raises(ProtocolError, match="signature"):
        _play(first, hook)


def test_a_share_other_than_the_committed_one_is_refused(first) -> None:  # type: ignore[no-untyped-def]
    """The rogue-key order: a party that changes its shares after the commitments (e.g.
    to cancel the others' public-key shares) is refused by the aggregator."""
    def hook(step: str, msgs: list[bytes]) -> list[bytes]:
        if step != "reveal":
            return msgs
        msg = wire.decode(msgs[1])
        params = mpc.KeyShare(SPEC_PARAMS)
        blobs = [params.public_key_share(b"\0" * 32), *msg.blobs[1:]]
        return [msgs[0], wire.encode("mpkeys/reveal", msg.meta, blobs), *msgs[2:]]

    with pytest.raises(ProtocolError, match="committed"):
        _play(first, hook)


def test_a_public_key_of_the_aggregators_choosing_fails(first) -> None:  # type: ignore[no-untyped-def]
    """Only the keys' data halves travel; the aggregator replaces the public key's with one
    of its own choosing. Each party rebuilds the random half itself (so ``(0, 0)`` or a
    key pair of the aggregator's cannot be sent at all) and the known answer fails."""
    mp = mpc._mp(SPEC_PARAMS)

    def hook(step: str, msgs: list[bytes]) -> list[bytes]:
        if step != "keys":
            return msgs
        outer = wire.decode(msgs[0])
        inner = wire.decode(outer.blobs[0])
        fake = mp.crs(bytes(range(32)), "pk")   # any polynomial: uniform residues
        blobs = [np.ascontiguousarray(fake, dtype="<u8").tobytes(), *inner.blobs[1:]]
        compact = wire.encode("mpckks/compact-keys", inner.meta, blobs)
        return [wire.encode("mpkeys/keys", outer.meta, [compact])] * len(msgs)

    with pytest.raises(ProtocolError, match="known-answer"):
        _play(first, hook)


def test_keys_shown_differently_to_one_party_are_caught(first) -> None:  # type: ignore[no-untyped-def]
    """Equivocation: party 0 receives keys whose data halves differ from the others'
    (another polynomial in the public key's place)."""
    mp = mpc._mp(SPEC_PARAMS)

    def hook(step: str, msgs: list[bytes]) -> list[bytes]:
        if step != "keys":
            return msgs
        outer = wire.decode(msgs[0])
        inner = wire.decode(outer.blobs[0])
        fake = mp.crs(bytes(range(32)), "pk")
        blobs = [np.ascontiguousarray(fake, dtype="<u8").tobytes(), *inner.blobs[1:]]
        compact = wire.encode("mpckks/compact-keys", inner.meta, blobs)
        return [wire.encode("mpkeys/keys", outer.meta, [compact]), *msgs[1:]]

    with pytest.raises((TamperingDetected, ProtocolError)):
        _play(first, hook)


def test_a_wrong_key_share_fails_the_known_answer(first) -> None:  # type: ignore[no-untyped-def]
    """A party commits to (and reveals) a Galois share of another secret: SEAL takes the
    key, the known-answer test does not."""
    def party_hook(parties: list[CollectiveKeyParty]) -> None:
        p = parties[2]
        stranger = mpc.KeyShare(p._params)
        seed = __import__("fedsec.crypto.collective", fromlist=["_crs_seed"])._crs_seed(
            p.session)
        p._blobs[1] = stranger.galois_key_share(seed, p._elts[0])

    def hook(step: str, msgs: list[bytes]) -> list[bytes]:
        return msgs

    # the commitment covers the replaced share only if made after it: redo the commit
    ids, roster, result = first
    parties = [CollectiveKeyParty(i, roster, SPEC, k) for i, k in zip(ids, result,
                                                                       strict=True)]
    for p in parties:
        p.commit()
    party_hook(parties)
    from fedsec.crypto.collective import _shares_digest  # the honest commit of that share

    agg = CollectiveKeyAggregator(roster, SPEC, names=result[0].names,
                                  result_session=result[0].session)
    commits = []
    for p in parties:
        digest = _shares_digest(p._blobs)
        sig = p._id.sign("fedsec/mpkeys/commit", p.session.encode() + p.name.encode()
                         + digest)
        meta = p._binding.bind({"party": p._index}, step="commit", to="aggregator")
        commits.append(wire.encode("mpkeys/commit", meta, [digest, sig]))
    relayed = agg.commits(commits)
    reveals = [p.reveal(relayed) for p in parties]
    sums = agg.reveals(reveals)
    keys = agg.relin_keys([p.relin(sums) for p in parties])
    checks = [p.check(keys) for p in parties]
    with pytest.raises(ProtocolError, match="known-answer"):
        agg.confirm(checks)


def test_every_participant_must_commit(first) -> None:  # type: ignore[no-untyped-def]
    def hook(step: str, msgs: list[bytes]) -> list[bytes]:
        return msgs[:2] if step == "commit" else msgs

    with pytest.raises(ProtocolError, match="every participant"):
        _play(first, hook)


def test_a_party_resumed_from_disk_between_every_round(first) -> None:  # type: ignore[no-untyped-def]
    """A stateless runtime saves each party after every round and loads it for the next:
    the keys come out the same as in one object, and the saved keys round-trip."""
    from fedsec.crypto.collective import CollectiveKeys

    ids, roster, result = first

    def resume(p: CollectiveKeyParty) -> CollectiveKeyParty:
        i = [x.name for x in ids].index(p.name)
        return CollectiveKeyParty.from_bytes(p.to_bytes(), ids[i], roster, SPEC, result[i])

    parties = [CollectiveKeyParty(i, roster, SPEC, k) for i, k in zip(ids, result,
                                                                       strict=True)]
    agg = CollectiveKeyAggregator(roster, SPEC, names=result[0].names,
                                  result_session=result[0].session)
    commits = [p.commit() for p in parties]
    parties = [resume(p) for p in parties]
    relayed = agg.commits(commits)
    reveals = [p.reveal(relayed) for p in parties]
    parties = [resume(p) for p in parties]
    sums = agg.reveals(reveals)
    relin2 = [p.relin(sums) for p in parties]
    parties = [resume(p) for p in parties]
    keys = agg.relin_keys(relin2)
    checks = [p.check(keys) for p in parties]
    parties = [resume(p) for p in parties]
    done = agg.confirm(checks)
    out = [CollectiveKeys.from_bytes(p.finish(done).to_bytes(), allow_insecure=True)
           for p in parties]
    ctx = agg.context
    x = np.linspace(-1, 1, ctx.slots)
    ct = ctx.encrypt(x)
    shares = [k.share.decryption_share(ct, smudging=20) for k in out]
    assert np.max(np.abs(mpc.combine_decryption(ctx, ct, shares).real - x)) < 1e-2
    with pytest.raises(ProtocolError):
        CollectiveKeyParty.from_bytes(b"junk", ids[0], roster, SPEC, result[0])


def test_relinearisation_sums_of_the_aggregators_choosing_are_refused(first) -> None:  # type: ignore[no-untyped-def]
    """The round-2 relinearisation share multiplies the key share by the round-1 sums: a
    constant sum would make it ``s_i`` plus small noise (control below). So parties get the
    committed round-1 shares, not a sum, and one that is not its sender's is refused."""
    mp = mpc._mp(SPEC_PARAMS)
    rows = len(mp.primes)
    crafted = mpc._pack("mpckks/relin-share1", {"preset": SPEC_PARAMS.name},
                        [mp.from_signed(np.ones(mp.n, dtype=np.int64), rows)] * (2 * mp.decomp))

    def hook(step: str, msgs: list[bytes]) -> list[bytes]:
        if step != "relin":
            return msgs
        outer = wire.decode(msgs[0])
        blobs = list(outer.blobs)
        blobs[3] = crafted   # party 1's round-1 share replaced
        return [wire.encode("mpkeys/relin", outer.meta, blobs)] * len(msgs)

    with pytest.raises(TamperingDetected, match="committed"):
        _play(first, hook)
    # control: a round-2 share on a constant "sum" gives the key share by rounding
    share = mpc.KeyShare(SPEC_PARAMS)
    state, _ = share.relin_round1(bytes(32))
    unit = np.zeros(mp.n, dtype=np.int64)
    unit[0] = 1   # the constant polynomial 1
    one = mp.from_signed(unit, rows)
    sum1 = mpc._pack("mpckks/relin-sum1", {"preset": SPEC_PARAMS.name},
                     [one] * (2 * mp.decomp))
    out0 = mpc._unpack(mp, share.relin_round2(state, sum1), "mpckks/relin-share2", rows,
                       2 * mp.decomp)[0]
    got = mp.to_coeffs(out0[:1])[0].astype(object)
    q = mp.primes[0]
    noisy = np.array([int(v) - q if int(v) > q // 2 else int(v) for v in got])
    truth = mp.to_coeffs(share._s[:1])[0].astype(object)
    s_i = np.array([int(v) - q if int(v) > q // 2 else int(v) for v in truth])
    assert np.max(np.abs(noisy - s_i)) <= 21   # s_i plus CBD noise: the key share leaks


def test_known_answer_c1_does_not_depend_on_the_keys_data_halves(honest) -> None:  # type: ignore[no-untyped-def]
    """The known-answer ciphertext each party decrypts must have a ``c1`` nobody chose:
    with the product left out it depends only on the seed and the random halves; with the
    product it moves with the public key's data half (which the aggregator sends)."""
    agg, keys = honest
    ctx = agg.context
    mp = mpc._mp(ctx.params)
    other = CKKSContext(CKKSKeys(ctx.params, public_key=mpc._public_key(
        mp, mp.crs(bytes(range(32)), "pk"), _pk_random_half(ctx)),
        relin_keys=ctx.keys.relin_keys, galois_keys=ctx.keys.galois_keys,
        rotations=ctx.rotations, conjugate=ctx.conjugate_key))
    seed = bytes(range(1, 33))

    def c1(c: CKKSContext, multiply: bool) -> np.ndarray:
        ct, _ = mpc.known_answer_ciphertext(c, seed, multiply=multiply)
        return mpc._ct_data(mp, ct)[1]

    assert np.array_equal(c1(ctx, False), c1(other, False))
    assert not np.array_equal(c1(ctx, True), c1(other, True))


def _pk_random_half(ctx: CKKSContext) -> np.ndarray:
    from fedsec.crypto.sealio import plain_seal_bytes, save

    mp = mpc._mp(ctx.params)
    _, body = plain_seal_bytes(save(ctx.keys.public_key), "public key", max_expansion=1 << 16)
    count = 2 * len(mp.primes) * mp.n
    return np.frombuffer(body[len(body) - 8 * count:], dtype="<u8").reshape(
        2, -1, mp.n)[1].astype(np.uint64)
