"""One regression test per violation the decoder fuzzing found (issue 8), plus the
earlier reports it re-checked."""

from __future__ import annotations

import copy
import hashlib
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fuzz_mutations import parse_frame, raw_ciphertext, zstd_close, zstd_open
from fuzz_targets import (
    LOW_ORDER_X25519,
    NAMES,
    Case,
    Forge,
    Target,
    World,
    _encode_loose,
    execute,
    meta_cases,
)

from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.keysetup import KeySetupAggregator, _hello_payload
from fedsec.errors import ProtocolError, TamperingDetected, UndefinedMetricError
from fedsec.protocol import wire

TEST_PRESET = "INSECURE_TEST_N4096_DEPTH1_S39"
HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def ctx() -> CKKSContext:
    return CKKSContext.generate(TEST_PRESET, allow_insecure=True)


def _misaligned_seeded_ciphertext(ctx: CKKSContext, shift: int = 5) -> bytes:
    """A seeded (symmetric) ciphertext whose coefficients slipped by ``shift`` bytes,
    compressed again: what a bit of zstd corruption produces."""
    plain = zstd_open(ctx.encrypt_bytes([1.0]))
    assert plain is not None
    coeffs = 16 + 73 + 16 + 8  # header, members before the array, array header, length
    return zstd_close(plain[:coeffs] + b"\x00" * shift + plain[coeffs:len(plain) - shift])


# ------------------------------------------------------------ crypto/ckks.py: _load
def test_corrupt_compressed_ciphertext_raises_instead_of_aborting(ctx: CKKSContext) -> None:
    """SEAL (TenSEAL 0.3.18) called std::terminate on these inputs: one party's
    submission killed the aggregator's process. Run in a child so a regression cannot
    kill pytest."""
    bad = [_misaligned_seeded_ciphertext(ctx, shift) for shift in (5, 13, 29)]
    code = textwrap.dedent(f"""
        import struct, sys
        from fedsec.crypto.ckks import CKKSContext
        from fedsec.errors import ProtocolError
        ctx = CKKSContext.generate({TEST_PRESET!r}, allow_insecure=True)
        pub = CKKSContext.from_public_bytes(ctx.public_bytes(), allow_insecure=True)
        data = sys.stdin.buffer.read()
        while data:
            (n,) = struct.unpack(">I", data[:4])
            item, data = data[4:4 + n], data[4 + n:]
            for holder in (ctx, pub):
                try:
                    holder.deserialize(item)
                except ProtocolError:
                    print("ProtocolError", flush=True)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env,
                         input=b"".join(struct.pack(">I", len(b)) + b for b in bad),
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr.decode(errors="replace")[-500:]
    assert out.stdout.decode().split() == ["ProtocolError"] * 6


@pytest.mark.parametrize("shift", [1, 2, 3, 4, 6, 8, 12, 16])
def test_misaligned_ciphertexts_raise_protocol_error(ctx: CKKSContext, shift: int) -> None:
    with pytest.raises(ProtocolError):
        ctx.deserialize(_misaligned_seeded_ciphertext(ctx, shift))


def test_compressed_objects_nested_inside_are_refused(ctx: CKKSContext) -> None:
    raw = bytearray(raw_ciphertext(ctx.encrypt([1.0]), minor=ctx.serialize(
        ctx.encrypt([1.0]))[4]))
    assert ctx.decrypt(ctx.deserialize(bytes(raw)))[0].real == pytest.approx(1.0)
    for mode in (1, 2):  # zlib, zstd: the array inside the ciphertext claims compression
        raw[16 + 73 + 5] = mode
        with pytest.raises(ProtocolError, match="nested"):
            ctx.deserialize(bytes(raw))
        with pytest.raises(ProtocolError, match="nested"):
            ctx.deserialize(zstd_close(bytes(raw)))


def test_seal_framing_is_checked_before_seal_parses(ctx: CKKSContext) -> None:
    good = ctx.serialize(ctx.encrypt([1.0]))
    header = struct.Struct("<HBBBBHQ")
    magic, hsize, major, minor, compr, rsvd, size = header.unpack_from(good)
    cases = {
        "zlib": header.pack(magic, hsize, major, minor, 1, rsvd, size) + good[16:],
        "mode 3": header.pack(magic, hsize, major, minor, 3, rsvd, size) + good[16:],
        "size": header.pack(magic, hsize, major, minor, compr, rsvd, size + 1) + good[16:],
        "truncated": good[:-1],
        "trailing": good + b"\x00",
        "short": good[:15],
    }
    for what, data in cases.items():
        with pytest.raises(ProtocolError):
            ctx.deserialize(data)
        assert what


def test_zstd_bomb_is_refused_without_inflating(ctx: CKKSContext) -> None:
    good = ctx.serialize(ctx.encrypt([1.0]))
    # 32 MiB of zeros in a few kB: more than a few kB may inflate to
    bomb = zstd_close(good[:16] + bytes(32 << 20))
    assert len(bomb) < 1 << 16
    with pytest.raises(ProtocolError, match="oversized"):
        ctx.deserialize(bomb)


def test_honest_key_material_of_every_kind_still_loads(ctx: CKKSContext) -> None:
    full = CKKSContext.generate(TEST_PRESET, rotations=[1, 2], conjugate=True,
                                allow_insecure=True)
    pub = CKKSContext.from_public_bytes(full.public_bytes(), allow_insecure=True)
    sec = CKKSContext.from_secret_bytes(full.secret_bytes(), allow_insecure=True)
    assert pub.rotations == (1, 2) and pub.conjugate_key
    ct = pub.rotate(pub.deserialize(sec.encrypt_bytes([1.0, 2.0, 3.0])), 1)
    np.testing.assert_allclose(sec.decrypt(pub.deserialize(pub.serialize(ct))).real[:2],
                               [2.0, 3.0], atol=1e-6)


# ------------------------------------------------------------ auc/fhauc.py: finalize
def _fh_result(world: World, **meta: object) -> bytes:
    msg = wire.decode(world.a.fh_result)
    return _encode_loose("fhauc/result", {**msg.meta, **meta}, list(msg.blobs))


@pytest.mark.parametrize("ratio", [2**64, 10**300, -(10**300), float("nan"), float("inf"),
                                   -1.0, 2.5, 1e300])
def test_semi_honest_result_ratio_out_of_range_is_a_protocol_error(world: World,
                                                                   ratio: float) -> None:
    """``np.isfinite`` raised TypeError on integers beyond 64 bits."""
    party = world.a.fh_parties[0]
    with pytest.raises(ProtocolError, match="masking"):
        party.finalize(_fh_result(world, ratio=ratio))
    assert party.finalize(world.a.fh_result) == pytest.approx(world.a.fh_auc)


def test_forged_zero_result_is_a_protocol_error_for_a_party_with_both_classes(
        world: World) -> None:
    """An aggregator that encrypts zeros with the public key made a party that holds
    both classes report an undefined AUC (UndefinedMetricError): it cannot be genuine."""
    zeros = world.a.public.encrypt_bytes(np.zeros(world.a.public.slots))
    forged = _encode_loose("fhauc/result", dict(wire.decode(world.a.fh_result).meta),
                           [zeros])
    with pytest.raises(ProtocolError, match="denominator"):
        world.a.fh_parties[0].finalize(forged)
    # party c holds negatives only: for it this looks exactly like a federation without
    # positives (semi-honest mode trusts the aggregator)
    with pytest.raises(UndefinedMetricError):
        world.a.fh_parties[2].finalize(forged)


# ------------------------------------------------------------ runtime: NodeStore.load
@pytest.mark.parametrize("fields", [[[], "nonce"], ["keys", {"a": 1}], ["keys", "keys"],
                                    [None, 1]])
def test_node_state_with_odd_field_names_is_a_protocol_error(tmp_path: Path,
                                                             fields: list[object]) -> None:
    flower_client = pytest.importorskip("fedsec.runtime.flower_client")
    store = flower_client.NodeStore(tmp_path, 1, 1)
    store.save("hospital-a", {"keys": b"k", "nonce": b"n"})
    assert store.load() == ("hospital-a", {"keys": b"k", "nonce": b"n"})
    meta = {"name": "hospital-a", "fields": fields}
    store.path.write_bytes(_encode_loose(flower_client.STATE_KIND, meta, [b"k", b"n"]))
    with pytest.raises(ProtocolError, match="corrupt"):
        store.load()


# ------------------------------------------------------------ earlier reports, re-checked
@pytest.mark.parametrize("key", LOW_ORDER_X25519[:3])
def test_low_order_x25519_hello_is_left_out_alone(world: World, key: bytes) -> None:
    """A party that signs a hello with an all-zero (low-order) X25519 key used to break
    every key holder; now only that hello is rejected and the others go on."""
    forge = Forge(world)
    for i in range(3):
        f = parse_frame(world.a.hellos[i])
        assert f is not None
        f.blobs[0] = key
        bad = forge._resign(f, "keys/hello", 2, lambda m, b: _hello_payload(  # noqa: SLF001
            world.roster.digest(), world.spec.digest(), m["name"], b[0], b[1]),
            world.identities[i])
        agg = KeySetupAggregator(world.roster, world.spec)
        hellos = list(world.a.hellos)
        hellos[i] = bad
        agg.request(hellos)
        assert list(agg.rejected) == [i] and "X25519" in agg.rejected[i]
        assert agg.names == tuple(n for k, n in enumerate(NAMES) if k != i)


@pytest.mark.parametrize(("name", "value"), [
    ("CKKSContext.from_public_bytes", {"preset": "NO_SUCH_PRESET"}),
    ("CKKSContext.from_public_bytes", {"rotations": [float("inf")]}),
    ("CKKSContext.from_public_bytes", {"rotations": [10**300]}),
    ("CKKSContext.from_public_bytes", {"preset": ["unhashable"]}),
    ("PartyKeys.from_bytes", {"names": "not-a-list"}),
    ("PartyKeys.from_bytes", {"index": 10**300}),
])
def test_earlier_reports_raise_protocol_error(world: World, targets: dict[str, Target],
                                              name: str, value: dict[str, object]) -> None:
    valid, build, oracle = meta_cases(world)[name]
    outcome, bad, _ = execute(targets[name], Case(build({**valid, **value}), "report",
                                                  oracle))
    assert bad is None and outcome in ("ProtocolError", "ok"), (outcome, bad)


def test_one_class_party_cannot_tell_a_forged_zero_from_an_undefined_auc(
        world: World) -> None:
    """Reported, not fixed here: in malicious mode a party holding a single class gets
    UndefinedMetricError, not TamperingDetected, when the aggregator answers with
    encryptions of zero - a genuine single-class federation yields the same answer. A
    fix needs a protocol change (a non-zero check term every party can predict)."""
    pub = world.a.public
    msg = wire.decode(world.a.m_result)
    zeros = [pub.encrypt_bytes(np.zeros(pub.slots)) for _ in msg.blobs]
    forged = _encode_loose("fhauc-m/result", dict(msg.meta), zeros)
    with pytest.raises(TamperingDetected):
        copy.copy(world.a.m_after_submit[0]).finalize(forged)   # holds both classes
    with pytest.raises(UndefinedMetricError):
        copy.copy(world.a.m_after_submit[2]).finalize(forged)   # negatives only


# ------------------------------------------------------------ auc/dpauc.py
_DP_HEADER = struct.Struct(">4sBBIdd")


def _dp(sub: bytes, *, eps: float | None = None, value: float | None = None,
        at: int = 0) -> bytes:
    """``sub`` with another epsilon, or with statistic ``at`` (after the points) set."""
    magic, version, kind, n, e, d = _DP_HEADER.unpack_from(sub)
    body = bytearray(sub[_DP_HEADER.size:])
    if value is not None:
        struct.pack_into(">d", body, 8 * (n + at), value)
    return _DP_HEADER.pack(magic, version, kind, n, e if eps is None else eps, d) + body


@pytest.fixture(scope="module")
def dp_subs() -> dict[str, bytes]:
    import warnings

    from fedsec.auc.dpauc import DPAUCClient, RRClient
    y, s = np.array([0, 1, 0, 1, 1, 0, 1, 0]), np.linspace(0.0, 1.0, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # RR without score noise warns (PrivacyWarning)
        rr = RRClient(y, s, epsilon=1.0, decision_points=4).submit()
    return {"laplace": DPAUCClient(y, s, epsilon=1.0, decision_points=4).submit(), "rr": rr}


def test_dpauc_statistics_too_large_to_sum_are_a_protocol_error(
        dp_subs: dict[str, bytes]) -> None:
    """Two parties sending 1.7e308 overflowed the sum: RuntimeWarning, then a NaN AUC."""
    from fedsec.auc.dpauc import DPAUCServer, parse_submission
    huge = _dp(dp_subs["laplace"], value=1.7e308)
    with pytest.raises(ProtocolError, match="too large"):
        parse_submission(huge)
    with pytest.raises(ProtocolError, match="too large"):
        DPAUCServer().aggregate([huge, huge])
    assert np.isfinite(DPAUCServer().aggregate([dp_subs["laplace"]] * 2).auc)


def test_dpauc_rr_negative_counts_are_a_protocol_error(dp_subs: dict[str, bytes]) -> None:
    """Negative exact counts made the noisy prior negative: ValueError from the debiasing."""
    from fedsec.auc.dpauc import DPAUCServer
    with pytest.raises(ProtocolError, match="negative"):
        DPAUCServer().aggregate([_dp(dp_subs["rr"], value=-1e-307, at=4)])


def test_dpauc_rr_epsilon_too_small_to_debias_is_undefined(dp_subs: dict[str, bytes]) -> None:
    """epsilon = 1e-300 made the flip probability exactly 1/2: ZeroDivisionError."""
    from fedsec.auc.dpauc import DPAUCServer, debias_rr_auc
    for eps in (1e-300, 5e-324):
        with pytest.raises(UndefinedMetricError):
            DPAUCServer().aggregate([_dp(dp_subs["rr"], eps=eps)] * 2)
        with pytest.raises(UndefinedMetricError):
            debias_rr_auc(0.7, noisy_prior=0.4, epsilon=eps)


# ------------------------------------------------------------ crypto/keysetup.py: request
def test_a_replayed_hello_does_not_displace_the_genuine_one(world: World) -> None:
    """A sender that replays another party's hello from an earlier set-up used to win
    (first come): the genuine hello was rejected as 'a second hello', the set-up went on
    with a key the party no longer holds and broke at every party. Two different signed
    hellos for one name cannot be told apart: both positions are rejected, by name."""
    a, b = world.a, world.b
    agg = KeySetupAggregator(world.roster, world.spec, min_parties=1)
    with pytest.raises(ProtocolError, match="only 1 valid"):
        agg.request([b.hellos[1], a.hellos[1], a.hellos[2]])
    assert agg.rejected == {0: "two different hellos claim to come from 'hospital-b'",
                            1: "two different hellos claim to come from 'hospital-b'"}
    # an exact copy is harmless: one is kept
    agg = KeySetupAggregator(world.roster, world.spec)
    agg.request([a.hellos[0], a.hellos[1], a.hellos[1], a.hellos[2]])
    assert agg.names == NAMES and agg.rejected == {2: "a copy of the hello of 'hospital-b'"}


# ------------------------------------------------------------ auc/fhauc_malicious.py: start
def test_a_replayed_commit_does_not_displace_the_genuine_one(world: World) -> None:
    """Same as for hellos: a commit of hospital-b from an earlier evaluation (same keys
    and configuration, another nonce) sent first made the aggregator drop b's real
    commit; b then refused the start message and the evaluation broke at every party."""
    a = world.a
    earlier = copy.copy(a.m_after_commit[1])
    earlier._nonce = b"\x01" * 16  # noqa: SLF001 - b's commit of another evaluation
    replay = earlier.commit()
    agg = copy.copy(a.m_agg)
    agg._min_parties = 2  # noqa: SLF001 - a quorum of two, on a copy
    agg.start([replay, *a.commits])
    assert agg.rejected == {0: "two different commits claim to come from 'hospital-b'",
                            2: "two different commits claim to come from 'hospital-b'"}
    assert agg.participants == [0, 2]  # a and c go on (if their quorum allows)
    agg = copy.copy(a.m_agg)
    start = agg.start([*a.commits, a.commits[1]])
    assert agg.participants == [0, 1, 2] and agg.rejected == {
        3: "a copy of the commit of 'hospital-b'"}
    assert copy.copy(a.m_after_commit[1]).submit(start)


def test_ciphertext_scale_that_cannot_be_decoded_is_a_protocol_error(ctx: CKKSContext) -> None:
    """Found by the 50,000-execution run (MaliciousParty.finalize): SEAL loads a
    ciphertext whose scale is 2^(modulus bits) or more, NaN, infinite or negative, then decrypting
    it raised ValueError('scale out of bounds')."""
    ct = ctx.encrypt([1.0])
    raw = bytearray(raw_ciphertext(ct, minor=ctx.serialize(ct)[4]))
    for scale in (2.0**200, 2.0**1000, float("inf"), float("nan"), -1.0):
        struct.pack_into("<d", raw, 16 + 57, scale)  # the ciphertext's scale member
        for data in (bytes(raw), zstd_close(bytes(raw))):
            with pytest.raises(ProtocolError, match="scale"):
                ctx.deserialize(data)
    for scale in (2.0**157, 2.0**50, 0.5):  # decodable
        struct.pack_into("<d", raw, 16 + 57, scale)
        assert np.isfinite(ctx.decrypt(ctx.deserialize(bytes(raw)))[0])


def test_ciphertext_not_in_ntt_form_is_a_protocol_error(ctx: CKKSContext) -> None:
    """SEAL loads a CKKS ciphertext flagged as not in NTT form; squaring, rotating or
    decrypting it then raised ValueError (the aggregator's aggregate, a party's
    finalize)."""
    ct = ctx.encrypt([1.0])
    raw = bytearray(raw_ciphertext(ct, minor=ctx.serialize(ct)[4]))
    raw[16 + 32] = 0  # is_ntt_form
    for data in (bytes(raw), zstd_close(bytes(raw))):
        with pytest.raises(ProtocolError, match="NTT"):
            ctx.deserialize(data)


# ------------------------------------------------------------ crypto/ckks.py: from_public_bytes
def _public_with(world: World, blobs: dict[int, bytes]) -> bytes:
    msg = wire.decode(world.extra_public[1])  # test preset, rotation 1, relinearization
    parts = list(msg.blobs)
    for k, v in blobs.items():
        parts[k] = v
    return _encode_loose("ckks/public", dict(msg.meta), parts)


def test_switching_keys_of_the_wrong_kind_or_shape_are_refused(world: World) -> None:
    """Relinearization and Galois keys are both KSwitchKeys to SEAL: with the two swapped
    (a hostile key holder) it loaded them, and the aggregator's first relinearization
    crashed the process (segmentation fault). Checked in a child process."""
    pk, rk, gk = wire.decode(world.extra_public[1]).blobs
    cases = [_public_with(world, {1: gk, 2: rk}), _public_with(world, {1: gk}),
             _public_with(world, {2: rk}), _public_with(world, {2: b""})]
    code = textwrap.dedent("""
        import struct, sys
        from fedsec.crypto.ckks import CKKSContext
        from fedsec.errors import ProtocolError
        data = sys.stdin.buffer.read()
        while data:
            (n,) = struct.unpack(">I", data[:4])
            item, data = data[4:4 + n], data[4 + n:]
            try:
                ctx = CKKSContext.from_public_bytes(item, allow_insecure=True)
                ct = ctx.square(ctx.encrypt([1.0]), rescale=False)
                ctx.rotate(ct, 1)
                print("accepted", flush=True)
            except ProtocolError:
                print("ProtocolError", flush=True)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env,
                         input=b"".join(struct.pack(">I", len(b)) + b for b in cases),
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr.decode(errors="replace")[-500:]
    assert out.stdout.decode().split() == ["ProtocolError"] * len(cases)


def test_a_key_offer_without_relinearization_keys_is_refused(world: World) -> None:
    """The aggregator accepted public material without relinearization keys (they are
    optional in a context) and then failed with ValueError at its first product."""
    a = world.a
    offer = wire.decode(a.offer)
    public = wire.decode(offer.blobs[0])
    public_bytes = _encode_loose("ckks/public", dict(public.meta),
                                 [public.blobs[0], b"", public.blobs[2]])
    header = wire.decode(offer.blobs[1])
    boxes = list(offer.blobs[3:])
    hdr = _encode_loose("keys/offer-header", dict(header.meta), [
        header.blobs[0], hashlib.sha256(public_bytes).digest(),
        *[hashlib.sha256(b).digest() for b in boxes]])
    holder = world.identities[a.holder]
    forged = _encode_loose("keys/offer", dict(offer.meta), [
        public_bytes, hdr, holder.sign("keys/offer", hdr), *boxes])
    with pytest.raises(ProtocolError, match="other keys"):
        copy.copy(a.agg_after_request).accept(forged)


# ------------------------------------------------------------ Shapley: transparent results
def _blobs_zeroed(data: bytes) -> bytes:
    msg = wire.decode(data)
    return _encode_loose(msg.kind, dict(msg.meta), [bytes(len(b)) for b in msg.blobs])


@pytest.mark.parametrize("k", [0, 1])  # layer 1's re-share to P, then to A
def test_all_zero_reshare_is_a_protocol_error(shapley_world: Any, k: int) -> None:
    """Fuzzing SecSV in flight: an all-zero (in-range) re-share was accepted, then SEAL
    raised ``RuntimeError: result ciphertext is transparent`` in the server's plaintext
    product. Every data plaintext of that product is zero: refused as a degenerate
    operand (an honest uniform share is all zero with probability ``t^-m``)."""
    import fuzz_shapley as fs

    r = fs.clone_srun(shapley_world.s_run)
    rec = fs.recorder_of(r)
    rec.swap = ("share", k, _blobs_zeroed)
    with pytest.raises(ProtocolError, match="every plaintext is zero"):
        r.evaluate(0, fs.MASKS[0], None)
    assert rec.swapped is not None and not any(wire.decode(rec.swapped).blobs[0])


def test_partly_zero_plaintext_products_are_exact() -> None:
    """Zero plaintexts are skipped (their products would be transparent), so a share
    with zero diagonals still gives the exact product; all zero is refused."""
    from fedsec.crypto.bfv import BFVContext

    bfv = BFVContext.from_seed(bytes(range(32)))
    x, y = (bfv.to_ntt(bfv.encrypt(np.arange(a, a + 4))) for a in (1, 5))
    zero, three = bfv.encode_ntt(np.zeros(4)), bfv.encode_ntt(np.full(4, 3))
    got = bfv.decrypt(bfv.dot_plain([x, y], [zero, three]))[:4]
    np.testing.assert_array_equal(got, 3 * np.arange(5, 9))
    got = bfv.decrypt(bfv.dot_plain_rotations([x, y], [zero, three], [0]))[:4]
    np.testing.assert_array_equal(got, 3 * np.arange(5, 9))
    for call in (lambda: bfv.dot_plain([x, y], [zero, zero]),
                 lambda: bfv.dot_plain_rotations([x, y], [zero, zero], [0]),
                 lambda: bfv.multiply_plain(x, zero)):
        with pytest.raises(ProtocolError, match="degenerate"):
            call()
    # operands that cancel: SEAL's transparent-result error becomes a ProtocolError
    neg = bfv.multiply_plain(x, bfv.encode_ntt(np.full(bfv.slots, bfv.t - 1)))
    with pytest.raises(ProtocolError, match="transparent"):
        bfv.add(x, neg)


def test_transparent_ciphertexts_are_refused_when_decoded(shapley_world: Any) -> None:
    """A well-framed ciphertext with ``c1 = 0`` is no encryption: SecSV's and HESV's
    decoders refuse it (else SEAL raises on every result computed from it)."""
    import fuzz_shapley as fs
    from fuzz_mutations import transparent_ciphertext

    bfv = shapley_world.s_run.P._bfv  # noqa: SLF001
    model = wire.decode(shapley_world.s_models[0])
    bad = transparent_ciphertext(model.blobs[0])
    bfv.deserialize(model.blobs[0], ntt=True)  # the genuine one loads
    with pytest.raises(ProtocolError, match="transparent"):
        bfv.deserialize(bad, ntt=True)
    server = fs.clone_sserver(shapley_world.s_run.P)
    server._models = {}  # noqa: SLF001
    with pytest.raises(ProtocolError, match="transparent"):
        server.receive_model(_encode_loose(model.kind, dict(model.meta),
                                           [bad, *model.blobs[1:]]))
    data = wire.decode(shapley_world.h_data[1])
    hserver = fs.clone_hserver(shapley_world.h_server_empty)
    plain = raw_ciphertext(hserver._ctx.deserialize(data.blobs[0]))  # not seeded  # noqa: SLF001
    with pytest.raises(ProtocolError, match="transparent"):
        hserver.receive_data(1, _encode_loose(data.kind, dict(data.meta), [
            transparent_ciphertext(plain), *data.blobs[1:]]))


def test_secretsv_output_of_minus_two_to_the_63_is_out_of_bound(shapley_world: Any) -> None:
    """``np.abs`` of the int64 minimum is itself (negative), so output shares that sum
    to ``2^63`` slipped past the client's bound check. Both shares otherwise honest."""
    import fuzz_shapley as fs

    log = shapley_world.t_eval[fs.MASKS[0]][0]
    (_, to, from_p), (_, _, from_a) = log.of("output", sender="P")[0], \
        log.of("output", sender="A")[0]
    client = fs.clone_tclient(shapley_world.t_run.clients[int(to.split(":")[1])])
    p, a = wire.decode(from_p), wire.decode(from_a)
    ps, as_ = (np.frombuffer(m.blobs[0], dtype="<u8").copy() for m in (p, a))
    as_[0] = ((1 << 63) - int(ps[0])) % (1 << 64)  # the reconstructed entry is -2^63
    forged = _encode_loose(a.kind, dict(a.meta), [as_.tobytes()])
    with pytest.raises(ProtocolError, match="bound"):
        client.reconstruct(from_p, forged)


def test_hesv_predictions_equal_to_the_labels_are_a_protocol_error(shapley_world: Any) -> None:
    """``Y − Ŷ`` of two identical ciphertexts is transparent: a decrypting client that
    sends the batch's own label ciphertext back as its predictions gets a ProtocolError
    from the server, not SEAL's RuntimeError."""
    import fuzz_shapley as fs

    st = next(s for s in shapley_world.h_steps if s.kind == "hesv/predicted")
    server = fs.clone_hserver(st.server)
    meta = dict(wire.decode(st.reply).meta)
    where = fs._hmeta(st.reply)  # noqa: SLF001 - the round and index of its binding
    y = server._data[where["owner"]][where["batch"]].y  # noqa: SLF001
    labels = y if isinstance(y, list) else [y]  # one ciphertext per class pair
    forged = _encode_loose("hesv/predicted", meta,
                           [server._ctx.serialize(c) for c in labels])  # noqa: SLF001
    with pytest.raises(ProtocolError, match="transparent"):
        server.step(st.sender, forged)


def _raised_reshare_bound(protocol: str) -> None:
    """A decrypting client that announces a re-share bound no honest activation can reach
    (found by the Shapley campaigns: it pushed P's a-priori budget past the ring and P
    raised ``FixedPointOverflow``, a ``ValueError``): P and A refuse the re-share itself
    with ``ProtocolError``."""
    import fuzz_shapley as fs

    from fedsec.shapley import secretsv as ssv
    from fedsec.shapley import secsv as sv

    rec, sets = fs._tiny_record()  # noqa: SLF001 - two layers, x² hidden activation
    log = fs.Recorder()

    def raise_bound(payload: bytes) -> bytes:
        msg = wire.decode(payload)
        return wire.encode(msg.kind, {**msg.meta, "bound": msg.meta["bound"] << 20},
                           msg.blobs)

    if protocol == "secsv":
        run = sv._setup(rec, sets, sv.SecSVConfig().check(), fs.recorder_net(log),  # noqa: SLF001
                        True)
        run.upload_round(0)
        log.swap = ("share", 0, raise_bound)  # the layer-1 re-share to P
        with pytest.raises(ProtocolError, match="re-share bound"):
            run.evaluate(0, 3, None)
        return
    monkey = pytest.MonkeyPatch()
    try:
        net = fs.Network()
        net.intercept(log.intercept)  # SecretSV's roles talk over a network
        monkey.setattr(ssv, "Network", lambda: net)
        log.swap = ("share", 0, raise_bound)
        with pytest.raises(ProtocolError, match="re-share bound"):
            ssv.secretsv_shapley(rec, sets, schedule="paper")
    finally:
        monkey.undo()


@pytest.mark.filterwarnings("ignore::fedsec.errors.PrivacyWarning")
@pytest.mark.parametrize("protocol", ["secsv", "secretsv"])
def test_raised_reshare_bound_is_a_protocol_error(protocol: str) -> None:
    _raised_reshare_bound(protocol)
