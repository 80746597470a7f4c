"""Attacks on :mod:`fedsec.crypto.sealio` by a role that chooses the bytes another loads.

SEAL 4.1 must never inflate bytes another role chose (some corrupt compressed input
aborts the process). SEAL 4.1 also reads any 16 bytes that are not a valid header of its
own version as a SEAL 3.4 header (``magic, 0, compression, uint32 size``) - magic or not
- so a "header" the checks do not recognise can still make SEAL inflate. Cases that
could reach SEAL's inflater run in a child interpreter, so a regression shows as a
failed test rather than an aborted run.
"""

from __future__ import annotations

import ctypes
import json
import os
import struct
import subprocess
import sys
import threading
from typing import Any

import pytest
import tenseal.sealapi as seal

from fedsec.crypto import sealio
from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.sealio import SEAL_HEADER, plain_seal_bytes
from fedsec.errors import ProtocolError
from fedsec.testing.mutations import raw_ciphertext

PRESET = "INSECURE_TEST_N4096_DEPTH1"
_ARRAY_AT = 16 + 73  # a ciphertext's data-array header (after the outer header, members)


@pytest.fixture(scope="module")
def ctx() -> CKKSContext:
    return CKKSContext.generate(PRESET, allow_insecure=True, rotations=[1])


# ----------------------------------------------------------------------------- helpers
def _zlib() -> Any:
    lib = ctypes.CDLL(sys.modules[seal.Ciphertext.__module__].__file__)
    lib.ZSTD_compress.restype = ctypes.c_size_t
    lib.ZSTD_compress.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p,
                                  ctypes.c_size_t, ctypes.c_int]
    return lib


def _zframe(data: bytes) -> bytes:
    out = ctypes.create_string_buffer(len(data) + 4096)
    n = _zlib().ZSTD_compress(out, len(out), data, len(data), 1)
    return out.raw[:n]


def _legacy(compr: int, size: int, magic: bool = True) -> bytes:
    """A SEAL 3.4 header (SEAL 4.1 accepts it nested; with or without its magic)."""
    return struct.pack("<HBBIQ", 0xA15E if magic else 0x1234, 0, compr, size, 0)


def _outer(body: bytes, major: int = 4, minor: int | None = None, compr: int = 0) -> bytes:
    if minor is None:
        minor = sealio._seal_version()[1]
    return SEAL_HEADER.pack(0xA15E, 16, major, minor, compr, 0, 16 + len(body)) + body


def _plain(data: bytes) -> bytes:
    header, body = plain_seal_bytes(data, "x", max_expansion=1 << 16)
    return header + body


def _raw_ct(ctx: CKKSContext) -> bytes:
    return raw_ciphertext(ctx.encrypt([1.0]), minor=sealio._seal_version()[1])


def _nested_zstd(raw: bytes, at: int, *, magic: bool = True, major2: bool = False) -> bytes:
    """``raw`` (uncompressed) with the nested object at ``at`` (to the end) recompressed
    by the attacker behind a header SEAL 4.1 reads as a compressed one."""
    members = raw[at + 16:]
    frame = _zframe(members)
    if major2:  # our magic and size, version "2.x": SEAL's 3.4 reading sees zstd
        header = bytearray(SEAL_HEADER.pack(0xA15E, 16, 2, 0, 0, 0, 16 + len(frame)))
        struct.pack_into("<I", header, 4, 16 + len(frame))
        hdr = bytes(header)
    else:
        hdr = _legacy(2, 16 + len(frame), magic)
    return _outer(raw[16:at] + hdr + frame)


def _hostile_cases() -> dict[str, tuple[str, bytes]]:
    """Name -> (SEAL type, bytes) of objects that would make SEAL inflate attacker zstd."""
    ctx = CKKSContext.generate(PRESET, allow_insecure=True, rotations=[1])
    raw = _raw_ct(ctx)
    cases: dict[str, tuple[str, bytes]] = {
        "array legacy zstd": ("Ciphertext", _nested_zstd(raw, _ARRAY_AT)),
        "array legacy zstd, no magic": ("Ciphertext", _nested_zstd(raw, _ARRAY_AT,
                                                                   magic=False)),
        "array header version 2.x": ("Ciphertext", _nested_zstd(raw, _ARRAY_AT,
                                                                major2=True)),
    }
    # a seeded ciphertext (as SEAL writes fresh encryptions): the seed's header
    seeded = _plain(ctx.encrypt_bytes([1.0]))
    seed_at = _ARRAY_AT + SEAL_HEADER.unpack_from(seeded, _ARRAY_AT)[6]
    cases["seed legacy zstd"] = ("Ciphertext", _nested_zstd(seeded, seed_at))
    # the outer header: version 2.x with "minor" = the size of a tiny zstd frame
    tiny = _zframe(raw[16:_ARRAY_AT] + bytes(len(raw) - _ARRAY_AT))  # zeros: a few bytes
    assert 16 + len(tiny) < 256
    cases["outer version 2.x"] = ("Ciphertext", SEAL_HEADER.pack(
        0xA15E, 16, 2, 16 + len(tiny), 0, 0, 16 + len(tiny)) + tiny)
    # other types: public key (ciphertext layout), Galois keys (nested public keys),
    # plaintext (array after 48 bytes of members)
    keys = ctx.keys
    pk = _plain(sealio.save(keys.public_key))
    cases["public key array legacy zstd"] = ("PublicKey", _nested_zstd(pk, _ARRAY_AT,
                                                                      magic=False))
    gk = _plain(sealio.save(keys.galois_keys))
    # Galois keys: parms_id, a list (by Galois index; mostly empty) of lists of keys.
    # Keep the list up to its first key, that key's array recompressed by the attacker
    pos = 16 + 32 + 8
    slot = 0
    while struct.unpack_from("<Q", gk, pos)[0] == 0:
        pos += 8
        slot += 1
    key_at = pos + 8
    inner = gk[key_at:key_at + SEAL_HEADER.unpack_from(gk, key_at)[6]]
    frame = _zframe(inner[16 + 73 + 16:])
    key = inner[16:16 + 73] + _legacy(2, 16 + len(frame), magic=False) + frame
    key = SEAL_HEADER.pack(0xA15E, 16, *sealio._seal_version(), 0, 0, 16 + len(key)) + key
    lists = struct.pack("<Q", slot + 1) + bytes(8 * slot) + struct.pack("<Q", 1)
    cases["Galois keys nested array legacy zstd"] = (
        "GaloisKeys", _outer(gk[16:16 + 32] + lists + key))
    pt = _plain(sealio.save(ctx.encode([1.0])))
    cases["plaintext array legacy zstd"] = ("Plaintext", _nested_zstd(pt, 16 + 48,
                                                                      magic=False))
    return cases


def _run_hostile() -> dict[str, str]:
    ctx = CKKSContext.generate(PRESET, allow_insecure=True, rotations=[1])
    out = {}
    for name, (kind, data) in _hostile_cases().items():
        try:
            sealio.load(getattr(seal, kind)(), ctx.keys.seal_context, data, name)
            out[name] = "loaded"
        except ProtocolError:
            out[name] = "ProtocolError"
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            out[name] = f"{type(exc).__name__}: {exc}"
    return out


_CHILD = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("atk", sys.argv[1])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
print(json.dumps(m._run_hostile()))
"""


# ------------------------------------------------------------------ nested compression
def test_headers_seal_reads_as_compressed_are_refused_before_seal_parses_them() -> None:
    """SEAL 3.4-style headers (magic or not; or a "2.x" version whose byte 3 reads as
    zstd) where SEAL parses nested objects, in ciphertexts, seeded ciphertexts, the
    outer header, public keys, Galois keys and plaintexts: all refused by our checks
    (before the fix, each was inflated by SEAL itself)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run([sys.executable, "-c", _CHILD, __file__], capture_output=True,
                          text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got and set(got.values()) == {"ProtocolError"}, got


def test_hostile_cases_are_well_formed_apart_from_the_compression(ctx: CKKSContext) -> None:
    """The same objects with the nested object left uncompressed load (so the refusals
    above are about compression, not some other defect of the crafted bytes)."""
    raw = _raw_ct(ctx)
    assert ctx.deserialize(raw).size() == 2
    # a SEAL 3.4 header SEAL would accept uncompressed is refused too: SEAL 4.1 never
    # writes one, and the object after it would be located by its uint32 size
    frame_size = len(raw) - _ARRAY_AT
    bad = bytearray(raw)
    bad[_ARRAY_AT:_ARRAY_AT + 16] = _legacy(0, frame_size, magic=False)
    with pytest.raises(ProtocolError, match="3.4"):
        ctx.deserialize(bytes(bad))


@pytest.mark.parametrize("major,minor", [(2, 0), (3, 4), (3, 6), (4, 0), (4, 99), (5, 1),
                                         (0, 16), (1, 30)])
def test_other_versions_in_the_outer_header_are_refused(ctx: CKKSContext, major: int,
                                                         minor: int) -> None:
    raw = bytearray(_raw_ct(ctx))
    raw[3], raw[4] = major, minor
    with pytest.raises(ProtocolError, match="version"):
        ctx.deserialize(bytes(raw))


def test_member_counts_that_move_the_array_do_not_hide_a_nested_header(
        ctx: CKKSContext) -> None:
    """SEAL reads the members at fixed offsets whatever their values; sizes that disagree
    with the array (more polynomials, other degree) are refused and a compressed header
    planted where a longer member block would end is still found."""
    raw = bytearray(_raw_ct(ctx))
    for off, value in ((33, 3), (33, 1), (41, 8192), (49, 2), (49, 4)):
        bad = bytearray(raw)
        struct.pack_into("<Q", bad, 16 + off, value)
        with pytest.raises(ProtocolError):
            ctx.deserialize(bytes(bad))
    bad = bytearray(raw)
    struct.pack_into("<Q", bad, _ARRAY_AT + 16, 7)
    plant = _ARRAY_AT + 24 + 8
    bad[plant:plant + 16] = SEAL_HEADER.pack(0xA15E, 16, *sealio._seal_version(), 2, 0, 100)
    with pytest.raises(ProtocolError, match="nested"):
        ctx.deserialize(bytes(bad))


# ------------------------------------------------------------------------- zstd frames
def _compressed(ctx: CKKSContext) -> bytes:
    data = ctx.encrypt_bytes([1.0])
    assert data[5] == 2
    return data


def _fcs_frame(content: bytes, declared: int) -> bytes:
    """A zstd frame of ``content`` whose header declares ``declared`` bytes (8-byte FCS,
    single segment): zstd's own checks, not ours, are what could notice."""
    frame = bytearray(_zframe(content))
    desc = frame[4]
    fcs_flag, single, dict_flag = desc >> 6, (desc >> 5) & 1, desc & 3
    assert dict_flag == 0
    wd = 0 if single else 1
    fcs_len = {0: 1 if single else 0, 1: 2, 2: 4, 3: 8}[fcs_flag]
    at = 5 + wd
    old = int.from_bytes(frame[at:at + fcs_len], "little") + (256 if fcs_len == 2 else 0)
    assert old == len(content)
    if fcs_len == 2:
        declared -= 256
    frame[at:at + fcs_len] = declared.to_bytes(fcs_len, "little")
    return bytes(frame)


def test_lying_truncated_and_padded_zstd_frames_are_refused(ctx: CKKSContext) -> None:
    data = _compressed(ctx)
    body = _plain(data)[16:]
    minor = sealio._seal_version()[1]
    cases = {
        "truncated": data[:-50],
        "truncated to the frame header": _outer(data[16:30], minor=minor, compr=2),
        "declares more": _outer(_fcs_frame(body, len(body) + 8), minor=minor, compr=2),
        "declares less": _outer(_fcs_frame(body, len(body) - 8), minor=minor, compr=2),
        "junk after the frame": _outer(data[16:] + b"\x00" * 32, minor=minor, compr=2),
        "a second frame": _outer(data[16:] + _zframe(b"\x01" * 64), minor=minor, compr=2),
        "skippable frame first": _outer(struct.pack("<II", 0x184D2A50, 4) + b"abcd"
                                        + data[16:], minor=minor, compr=2),
        "expansion bomb": _outer(_zframe(bytes(1 << 22)), minor=minor, compr=2),
        "zlib": _outer(data[16:], minor=minor, compr=1),
        "no frame": _outer(b"", minor=minor, compr=2),
    }
    for name, bad in cases.items():
        with pytest.raises(ProtocolError):
            ctx.deserialize(bad)
            pytest.fail(name)
    # honest bytes still load after all of that
    assert ctx.decrypt(ctx.deserialize(data))[0].real == pytest.approx(1.0, abs=1e-6)


# ------------------------------------------------------------- the reused memory file
def test_a_shorter_object_never_reads_the_previous_objects_tail(ctx: CKKSContext) -> None:
    """After a longer object, a shorter one whose members promise more data (outer size
    consistent with what was sent) fails at its own end: the file is exactly it."""
    big = CKKSContext.generate("CKKS_128_N8192_DEPTH1")
    raw = _raw_ct(ctx)
    for short in (raw[:-8 * 100], raw[:-1], raw[:_ARRAY_AT + 24]):
        fixed = bytearray(short)
        struct.pack_into("<Q", fixed, 8, len(fixed))
        for owner, before in ((ctx, raw), (big, big.encrypt_bytes([3.0])),
                              (big, big.serialize(big.encrypt([2.0])))):
            owner.deserialize(before)
            with pytest.raises(ProtocolError):
                ctx.deserialize(bytes(fixed))
    # compressed after plain and back, same thread
    for data in (ctx.encrypt_bytes([4.0]), raw, ctx.encrypt_bytes([5.0])):
        ctx.deserialize(data)


def test_hostile_and_honest_loads_in_threads_do_not_mix(ctx: CKKSContext) -> None:
    honest = [ctx.encrypt_bytes([float(i)]) for i in range(4)]
    hostile = bytearray(_raw_ct(ctx))
    struct.pack_into("<Q", hostile, 8, len(hostile) - 800)
    hostile = hostile[:-800]
    errors: list[str] = []
    results: dict[int, list[float]] = {i: [] for i in range(4)}

    def good(i: int) -> None:
        for _ in range(6):
            results[i].append(float(ctx.decrypt(ctx.deserialize(honest[i]))[0].real))

    def bad() -> None:
        for _ in range(12):
            try:
                ctx.deserialize(bytes(hostile))
                errors.append("loaded")
            except ProtocolError:
                pass

    threads = [threading.Thread(target=good, args=(i,)) for i in range(4)] + \
        [threading.Thread(target=bad) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    for i, got in results.items():
        assert got == pytest.approx([float(i)] * 6, abs=1e-6)


def test_save_after_a_larger_save_holds_only_the_new_object(ctx: CKKSContext) -> None:
    big = CKKSContext.generate("CKKS_128_N8192_DEPTH1")
    large = sealio.save(big.keys.public_key)
    small = sealio.save(ctx.encrypt([6.0]))
    for data in (large, small):
        assert SEAL_HEADER.unpack_from(data)[6] == len(data)
    assert len(small) < len(large)
    assert ctx.decrypt(ctx.deserialize(small))[0].real == pytest.approx(6.0, abs=1e-6)
    # and in a fresh thread (its own files), a small save after a large one
    out: list[bytes] = []

    def work() -> None:
        out.append(sealio.save(big.keys.public_key))
        out.append(sealio.save(ctx.encrypt([7.0])))

    t = threading.Thread(target=work)
    t.start()
    t.join(60)
    assert SEAL_HEADER.unpack_from(out[1])[6] == len(out[1])
    assert ctx.decrypt(ctx.deserialize(out[1]))[0].real == pytest.approx(7.0, abs=1e-6)


# ---------------------------------------------------- objects of other types as others
def test_keys_and_plaintexts_sent_as_a_ciphertext_are_refused(ctx: CKKSContext) -> None:
    keys = ctx.keys
    for obj in (keys.public_key, keys.galois_keys, keys.relin_keys, keys.secret_key,
                ctx.encode([1.0])):
        data = sealio.save(obj)
        with pytest.raises(ProtocolError):
            ctx.deserialize(data)
        with pytest.raises(ProtocolError):
            ctx.deserialize(_plain(data))


def test_a_ciphertext_sent_as_keys_is_refused(ctx: CKKSContext) -> None:
    data = ctx.encrypt_bytes([1.0])
    for kind in (seal.GaloisKeys, seal.RelinKeys):
        with pytest.raises(ProtocolError):
            sealio.load(kind(), keys_context(ctx), data, "keys")


def keys_context(ctx: CKKSContext) -> Any:
    return ctx.keys.seal_context


def test_honest_keys_of_every_kind_load(ctx: CKKSContext) -> None:
    keys = ctx.keys
    for obj, kind in ((keys.public_key, seal.PublicKey), (keys.galois_keys, seal.GaloisKeys),
                      (keys.relin_keys, seal.RelinKeys), (keys.secret_key, seal.SecretKey),
                      (ctx.encode([1.0]), seal.Plaintext)):
        data = sealio.save(obj)
        sealio.load(kind(), keys.seal_context, data, "x")
        sealio.load(kind(), keys.seal_context, _plain(data), "x")


# ------------------------------------------------------------ reads past the object
def _run_page_end() -> dict[str, str]:
    """Objects ending exactly at a page boundary with the outer header's first 5 bytes
    as their last 5, loaded after a larger object (the load file's mapping is then longer
    than the file): the scan must not read the byte after the object (SIGBUS)."""
    ctx = CKKSContext.generate(PRESET, allow_insecure=True)
    out = {}
    for kind in ("Ciphertext", "PublicKey", "Plaintext", "SecretKey"):
        for total in (8192, 4096 * 20):
            ctx.deserialize(ctx.encrypt_bytes([1.0]))  # a larger object first
            hdr = SEAL_HEADER.pack(0xA15E, 16, *sealio._seal_version(), 0, 0, total)
            data = hdr + b"\xff" * (total - 16 - 5) + hdr[:5]
            try:
                sealio.load(getattr(seal, kind)(), ctx.keys.seal_context, data, kind)
                out[f"{kind} {total}"] = "loaded"
            except ProtocolError:
                out[f"{kind} {total}"] = "ProtocolError"
    return out


def test_an_object_ending_at_a_page_boundary_does_not_crash_the_process() -> None:
    """Before the fix, 8 KB of chosen bytes killed the receiving process with SIGBUS."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = _CHILD.replace("_run_hostile", "_run_page_end")
    proc = subprocess.run([sys.executable, "-c", child, __file__], capture_output=True,
                          text=True, timeout=120, env=env)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(got) == 8 and set(got.values()) == {"ProtocolError"}, got


def _forked_short(short: bytes, secret: bytes, queue: Any) -> None:
    c = CKKSContext.from_secret_bytes(secret, allow_insecure=True)
    try:
        c.deserialize(short)
        queue.put("loaded")
    except ProtocolError:
        queue.put("ProtocolError")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_a_forked_child_never_reads_the_parents_longer_object(ctx: CKKSContext) -> None:
    """The parent's load file holds a long object; a forked child loads a shorter one
    that promises more data: it fails at its own end (the child's own file), and the
    parent's next load is unaffected by the child's."""
    import multiprocessing

    raw = _raw_ct(ctx)
    ctx.deserialize(raw)
    short = bytearray(raw[:-800])
    struct.pack_into("<Q", short, 8, len(short))
    mp = multiprocessing.get_context("fork")
    queue = mp.Queue()
    proc = mp.Process(target=_forked_short, args=(bytes(short), ctx.secret_bytes(), queue))
    proc.start()
    assert queue.get(timeout=60) == "ProtocolError"
    proc.join(60)
    assert proc.exitcode == 0
    assert ctx.decrypt(ctx.deserialize(ctx.encrypt_bytes([8.0])))[0].real == \
        pytest.approx(8.0, abs=1e-6)
