"""SEAL objects loaded from memory: the framing checks, threads, fork and sizes."""

from __future__ import annotations

import multiprocessing
import os
import struct
import threading

import numpy as np
import pytest

from fedsec.crypto import sealio
from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.sealio import SEAL_HEADER, plain_seal_bytes
from fedsec.errors import ProtocolError
from fedsec.testing.mutations import raw_ciphertext, zstd_close

PRESET = "INSECURE_TEST_N4096_DEPTH1"


@pytest.fixture(scope="module")
def ctx() -> CKKSContext:
    return CKKSContext.generate(PRESET, allow_insecure=True)


def _plain(data: bytes) -> bytearray:
    header, body = plain_seal_bytes(data, "ciphertext")
    return bytearray(header + body)


def test_seeded_ciphertext_round_trips_compressed_and_plain(ctx: CKKSContext) -> None:
    seeded = ctx.encrypt_bytes([1.5, -2.0])
    assert SEAL_HEADER.unpack_from(seeded)[4] == 2  # zstd, as SEAL writes it
    for data in (seeded, bytes(_plain(seeded))):
        got = ctx.decrypt(ctx.deserialize(data))
        assert got[:2].real == pytest.approx([1.5, -2.0], abs=1e-6)


def test_compressed_seed_header_inside_a_seeded_ciphertext_is_refused(ctx: CKKSContext
                                                                      ) -> None:
    raw = _plain(ctx.encrypt_bytes([1.0]))
    pos = 16 + 73
    size = SEAL_HEADER.unpack_from(raw, pos)[6]
    seed_at = pos + size
    assert SEAL_HEADER.unpack_from(raw, seed_at)[0] == 0xA15E  # the seed's own header
    for mode in (1, 2):
        bad = bytearray(raw)
        bad[seed_at + 5] = mode
        with pytest.raises(ProtocolError, match="nested"):
            ctx.deserialize(bytes(bad))
        with pytest.raises(ProtocolError, match="nested"):
            ctx.deserialize(zstd_close(bytes(bad)))


@pytest.mark.parametrize("minor", [0, 1, 2, 3, 255])
def test_nested_compression_where_seal_reads_is_refused_whatever_its_version_bytes(ctx: CKKSContext,
                                                                   minor: int) -> None:
    outer_minor = ctx.serialize(ctx.encrypt([1.0]))[4]
    raw = bytearray(raw_ciphertext(ctx.encrypt([1.0]), minor=outer_minor))
    raw[16 + 73 + 4] = minor
    raw[16 + 73 + 5] = 2
    with pytest.raises(ProtocolError, match="nested"):
        ctx.deserialize(bytes(raw))
    struct.pack_into("<Q", raw, 16 + 73 + 16, 7)  # and when the array's size is wrong
    with pytest.raises(ProtocolError, match="nested"):
        ctx.deserialize(bytes(raw))


def test_random_data_that_looks_like_a_header_with_another_version_is_not_refused(
        ctx: CKKSContext) -> None:
    """Only the outer header's exact version bytes mark a nested object in the scan, so
    honest random data (Galois keys are ~16 MB of it) is not refused by chance."""
    raw = bytearray(raw_ciphertext(ctx.encrypt([1.0]), minor=ctx.serialize(
        ctx.encrypt([1.0]))[4]))
    other = (raw[4] + 1) % 256
    # inside the data array, where SEAL parses nothing
    raw[16 + 73 + 24 + 800:16 + 73 + 24 + 806] = struct.pack("<HBBBB", 0xA15E, 16, 4,
                                                               other, 2)
    assert ctx.deserialize(bytes(raw)).size() == 2  # loaded (the value is garbage)


def test_a_layout_that_does_not_parse_falls_back_to_the_full_scan(ctx: CKKSContext) -> None:
    minor = ctx.serialize(ctx.encrypt([1.0]))[4]
    raw = bytearray(raw_ciphertext(ctx.encrypt([1.0]), minor=minor))
    # the data array's element count no longer matches its header: the layout check
    # gives up; a compressed header planted in the data is still found by the scan
    struct.pack_into("<Q", raw, 16 + 73 + 16, 7)
    plant = 16 + 73 + 24 + 800
    raw[plant:plant + 6] = struct.pack("<HBBBB", 0xA15E, 16, 4, minor, 2)
    with pytest.raises(ProtocolError, match="nested"):
        ctx.deserialize(bytes(raw))


def test_objects_of_changing_sizes_load_in_turn(ctx: CKKSContext) -> None:
    big = CKKSContext.generate("CKKS_128_N8192_DEPTH1")
    for c, value in ((ctx, 1.0), (big, 2.0), (ctx, 3.0), (big, 4.0)):
        blob = c.encrypt_bytes([value])
        assert c.decrypt(c.deserialize(blob))[0].real == pytest.approx(value, abs=1e-6)
    truncated = ctx.encrypt_bytes([5.0])
    with pytest.raises(ProtocolError):
        ctx.deserialize(truncated[:-100])
    # a failure leaves nothing behind for the next object
    assert ctx.decrypt(ctx.deserialize(truncated))[0].real == pytest.approx(5.0, abs=1e-6)
    keys = CKKSContext.from_public_bytes(ctx.public_bytes(), allow_insecure=True)
    assert not keys.has_secret_key


def test_threads_load_concurrently(ctx: CKKSContext) -> None:
    blobs = [ctx.encrypt_bytes([float(i)]) for i in range(8)]
    errors: list[BaseException] = []
    results: dict[int, float] = {}

    def work(i: int) -> None:
        try:
            for _ in range(10):
                results[i] = float(ctx.decrypt(ctx.deserialize(blobs[i]))[0].real)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results == pytest.approx({i: float(i) for i in range(8)}, abs=1e-6)


def _child(blob: bytes, secret: bytes, queue: multiprocessing.Queue) -> None:
    c = CKKSContext.from_secret_bytes(secret, allow_insecure=True)
    queue.put(round(float(c.decrypt(c.deserialize(blob))[0].real), 3))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_a_forked_child_uses_its_own_memory_file(ctx: CKKSContext) -> None:
    ctx.deserialize(ctx.encrypt_bytes([0.0]))  # the parent has made its files
    mp = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue = mp.Queue()
    proc = mp.Process(target=_child, args=(ctx.encrypt_bytes([7.0]), ctx.secret_bytes(), queue))
    proc.start()
    got = queue.get(timeout=60)
    proc.join(60)
    assert got == 7.0
    assert ctx.decrypt(ctx.deserialize(ctx.encrypt_bytes([9.0])))[0].real == \
        pytest.approx(9.0, abs=1e-6)


def test_serialize_round_trips_every_key_kind(ctx: CKKSContext) -> None:
    pub = CKKSContext.from_public_bytes(ctx.public_bytes(), allow_insecure=True)
    ct = pub.encrypt(np.arange(4.0))
    assert ctx.decrypt(ctx.deserialize(pub.serialize(ct)))[:4].real == \
        pytest.approx([0, 1, 2, 3], abs=1e-6)


@pytest.mark.skipif(sealio._scratch() is None, reason="no in-memory files here")
def test_large_objects_do_not_keep_their_memory() -> None:
    big = CKKSContext.generate("CKKS_128_N8192_DEPTH1", rotations=[1 << k for k in range(10)])
    public = big.public_bytes()
    assert len(public) > sealio._KEEP_BYTES  # Galois keys
    loaded = CKKSContext.from_public_bytes(public)
    assert loaded.rotations == big.rotations
    scratch = sealio._scratch()
    assert scratch is not None
    assert scratch.capacity <= sealio._KEEP_BYTES
    assert os.fstat(scratch.load_fd).st_size <= sealio._KEEP_BYTES
    assert os.fstat(scratch.save_fd).st_size <= sealio._KEEP_BYTES


def test_without_in_memory_files_temporary_files_do_the_same(
        ctx: CKKSContext, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sealio, "_MEMFD", False)
    assert sealio._scratch() is None
    blob = ctx.encrypt_bytes([2.5])
    assert ctx.decrypt(ctx.deserialize(blob))[0].real == pytest.approx(2.5, abs=1e-6)
    raw = _plain(blob)
    raw[16 + 73 + 5] = 2
    with pytest.raises(ProtocolError, match="nested"):
        ctx.deserialize(bytes(raw))
