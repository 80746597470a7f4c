"""Fuzz targets: every fedsec entry point that parses bytes another role chose.

:func:`build_world` plays two honest key set-ups and, on each, a semi-honest and a
malicious evaluation (plus DPAUC), keeping every message and every role's state between
steps. :func:`make_targets` turns that into :class:`Target` objects: one per decoder or
protocol step, each with weighted *producers* of hostile input -

* **outsider** - a valid message from this session, mutated (:mod:`fuzz_mutations`);
* **replay** - a message of another kind, party or session (the second set-up);
* **insider** - what a hostile roster member or aggregator can produce *with its own
  keys*: hellos, commits and confirmations mutated and then **re-signed**, key offers
  with hostile public material or hostile sealed secrets that the key holder hashes,
  signs and seals properly, results built from ciphertexts the aggregator encrypts with
  the public key (zeros, constants, swapped runs).

:func:`run` executes targets with one seed per execution and classifies every outcome:
an exception outside the target's ``allowed`` types, a warning, a call slower than the
time limit, a jump of the peak memory, or a success that an oracle rejects (a wrong AUC
in malicious mode, a good hello lost because of a bad one) is a **violation**.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import math
import os
import random
import resource
import signal
import struct
import tempfile
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fuzz_mutations import (
    Frame,
    Mutator,
    Pools,
    parse_frame,
    raw_ciphertext,
    zstd_close,
    zstd_open,
)

from fedsec.auc.dpauc import DPAUCClient, DPAUCServer, RRClient, parse_submission
from fedsec.auc.fhauc import FHAUCAggregator, FHAUCConfig, FHAUCParty
from fedsec.auc.fhauc_malicious import (
    MaliciousAggregator,
    MaliciousConfig,
    MaliciousParty,
    _commit_payload,
    parse_commit,
)
from fedsec.auc.policy import PartyPolicy
from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.identity import Identity, Roster
from fedsec.crypto.keys import seal_to
from fedsec.crypto.keysetup import (
    KeySetupAggregator,
    KeySetupParty,
    KeySpec,
    PartyKeys,
    _box_context,
    _confirm_payload,
    _hello_payload,
    _parse_hello,
)
from fedsec.errors import ProtocolError, TamperingDetected, UndefinedMetricError
from fedsec.protocol import wire

try:  # Flower is optional (fedsec[flower]): without it its two targets are left out
    from fedsec.runtime.flower_client import STATE_KIND, NodeStore
except ImportError:  # pragma: no cover
    STATE_KIND, NodeStore = "flower/node-state", None  # type: ignore[assignment,misc]

__all__ = ["World", "Session", "Target", "Case", "Report", "build_world", "make_targets",
           "run", "TEST_PRESET"]

TEST_PRESET = "INSECURE_TEST_N4096_DEPTH1_S39"
OTHER_PRESET = "INSECURE_TEST_N4096_DEPTH2"
NAMES = ("hospital-a", "hospital-b", "hospital-c")
N_POINTS = 8
TOLERANCE = 1e-6

# X25519 public keys of small order and their non-canonical encodings: with any of them
# every shared secret is zero.
LOW_ORDER_X25519 = tuple(bytes.fromhex(h) for h in (
    "00" * 32,
    "01" + "00" * 31,
    "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800",
    "5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157",
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    # the same points with the top bit set (RFC 7748 ignores it)
    "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b880",
    "0000000000000000000000000000000000000000000000000000000000000080",
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
))


# ---------------------------------------------------------------------- the corpus
@dataclass
class Session:
    """One honest key set-up and the evaluations run on its keys, step by step."""

    label: str
    hellos: list[bytes]
    holder: int
    request: bytes
    offer: bytes
    deliveries: list[bytes]
    confirms: list[bytes]
    confirmed: bytes
    keys: list[PartyKeys]
    party_after_hello: list[KeySetupParty]
    party_after_receive: list[KeySetupParty]
    agg_after_request: KeySetupAggregator
    agg_after_accept: KeySetupAggregator
    setup_states: list[bytes]
    secret_box_plain: bytes          # what the key holder sealed to every other party
    fh_cfg: FHAUCConfig
    fh_parties: list[FHAUCParty]
    fh_agg: FHAUCAggregator
    fh_subs: list[bytes]
    fh_result: bytes
    fh_auc: float
    m_cfg: MaliciousConfig
    m_after_commit: list[MaliciousParty]
    m_after_submit: list[MaliciousParty]
    m_agg: MaliciousAggregator
    m_agg_after_start: MaliciousAggregator
    commits: list[bytes]
    start: bytes
    m_subs: list[bytes]
    m_result: bytes
    m_auc: float

    @property
    def public(self) -> CKKSContext:
        assert self.agg_after_accept.context is not None
        return self.agg_after_accept.context

    @property
    def transcript(self) -> bytes:
        return self.agg_after_request._transcript  # noqa: SLF001


@dataclass
class World:
    identities: list[Identity]
    roster: Roster
    spec: KeySpec
    policy: PartyPolicy
    data: list[tuple[np.ndarray, np.ndarray]]
    a: Session
    b: Session
    other_ctx: CKKSContext           # another preset: foreign parameters
    extra_ciphertexts: list[bytes]   # top level, computed (lower level), raw, foreign
    extra_public: list[bytes]        # smaller public contexts (no Galois keys, one key)
    dp_subs: list[bytes]
    pools: Pools
    build_seconds: float = 0.0
    #: A DPAUC session (``dpauc/hello``, ``dpauc/session``, bound ``dpauc/submit``) and
    #: its roles right before they decode them.
    dp_session: dict[str, Any] = field(default_factory=dict)

    def by_name(self, name: str) -> Identity | None:
        for i in self.identities:
            if i.name == name:
                return i
        return None


def _data(seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Parties a and b hold both classes; party c holds negatives only (it cannot tell a
    federation without positives from a forged zero denominator)."""
    rng = np.random.default_rng(seed)
    out = []
    for n in (24, 18):
        y = rng.integers(0, 2, n)
        y[:2] = (0, 1)
        out.append((y, np.round(rng.random(n), 2)))
    out.append((np.zeros(6, dtype=int), np.round(rng.random(6), 2)))
    return out


def _session(label: str, identities: list[Identity], roster: Roster, spec: KeySpec,
             policy: PartyPolicy, data: list[tuple[np.ndarray, np.ndarray]],
             fh_cfg: FHAUCConfig, m_cfg: MaliciousConfig) -> Session:
    parties = [KeySetupParty(i, roster, spec) for i in identities]
    agg = KeySetupAggregator(roster, spec)
    hellos = [p.hello() for p in parties]
    after_hello = [copy.copy(p) for p in parties]
    holder, request = agg.request(hellos)
    agg_req = copy.copy(agg)
    states = [p.to_bytes() for p in parties]
    offer = parties[holder].offer(request)
    states.append(parties[holder].to_bytes())
    own_ctx, own_seed = parties[holder]._own[:2]  # noqa: SLF001
    secret_plain = wire.encode("keys/secret", {}, [own_ctx.secret_bytes(), own_seed])
    deliveries = agg.accept(offer)
    agg_acc = copy.copy(agg)
    confirms = [p.receive(d) for p, d in zip(parties, deliveries, strict=True)]
    after_receive = [copy.copy(p) for p in parties]
    states += [p.to_bytes() for p in parties]
    confirmed = agg.confirm(confirms)
    keys = [p.finish(confirmed) for p in parties]
    assert agg.context is not None

    fh_parties = [FHAUCParty(y, s, keys=k, config=fh_cfg, roster=roster)
                  for (y, s), k in zip(data, keys, strict=True)]
    fh_agg = FHAUCAggregator(agg.context, fh_cfg, names=agg.names, session=agg.session)
    fh_subs = [p.submit() for p in fh_parties]
    fh_result = fh_agg.aggregate(fh_subs)
    aucs = [p.finalize(fh_result) for p in fh_parties]

    m_parties = [MaliciousParty(y, s, keys=k, config=m_cfg, identity=i, roster=roster,
                                policy=policy)
                 for (y, s), k, i in zip(data, keys, identities, strict=True)]
    m_agg = MaliciousAggregator(agg.context, m_cfg, names=agg.names, session=agg.session,
                                roster=roster)
    commits = [p.commit() for p in m_parties]
    after_commit = [copy.copy(p) for p in m_parties]
    m_agg_fresh = copy.copy(m_agg)
    start = m_agg.start(commits)
    m_agg_start = copy.copy(m_agg)
    m_subs = [p.submit(start) for p in m_parties]
    after_submit = [copy.copy(p) for p in m_parties]
    m_result = m_agg.aggregate(m_subs)
    m_aucs = [p.finalize(m_result) for p in m_parties]
    assert max(m_aucs) - min(m_aucs) <= TOLERANCE and max(aucs) - min(aucs) <= 1e-9
    return Session(label, hellos, holder, request, offer, deliveries, confirms, confirmed,
                   keys, after_hello, after_receive, agg_req, agg_acc, states, secret_plain,
                   fh_cfg, fh_parties, fh_agg, fh_subs, fh_result, aucs[0], m_cfg,
                   after_commit, after_submit, m_agg_fresh, m_agg_start, commits, start,
                   m_subs, m_result, m_aucs[0])


def build_world(seed: int = 20240601) -> World:
    """Everything honest roles send each other, in two sessions (about 3 s)."""
    t0 = time.perf_counter()
    # fixed identity keys (Ed25519 signs deterministically); SEAL keys and encryptions
    # stay random, so the mutation schedule repeats exactly but the bytes do not
    identities = [Identity(n, Ed25519PrivateKey.from_private_bytes(
        hashlib.sha256(f"fedsec-fuzz|{seed}|{n}".encode()).digest())) for n in NAMES]
    roster = Roster.of(identities)
    fh_a = FHAUCConfig.create(N_POINTS, preset=TEST_PRESET, masking="pair",
                              allow_insecure=True)
    fh_b = FHAUCConfig.create(N_POINTS + 1, preset=TEST_PRESET, masking="single",
                              allow_insecure=True)
    m_a = MaliciousConfig.create(N_POINTS, splits=3, runs=2, tolerance=TOLERANCE,
                                 min_bound_bits=0.0, preset=TEST_PRESET, allow_insecure=True)
    m_b = MaliciousConfig.create(N_POINTS, splits=4, runs=2, tolerance=TOLERANCE,
                                 min_bound_bits=0.0, preset=TEST_PRESET, allow_insecure=True)
    # one key set-up serves both modes: the union of the Galois keys they need (semi-honest
    # sums every slot, malicious sums slot classes of its stride)
    rotations = sorted({*fh_a.rotations(), *fh_b.rotations(), *m_a.rotations(),
                        *m_b.rotations()})
    spec = KeySpec.create(TEST_PRESET, rotations, True, allow_insecure=True)
    policy = PartyPolicy(min_bound_bits=0.0, min_decision_points=2)
    data = _data(seed)
    a = _session("A", identities, roster, spec, policy, data, fh_a, m_a)
    b = _session("B", identities, roster, spec, policy, data, fh_b, m_b)

    other = CKKSContext.generate(OTHER_PRESET, rotations=[1], allow_insecure=True)
    holder_ctx = a.keys[0].context
    pub = a.public
    top = holder_ctx.encrypt(np.arange(8, dtype=np.float64))
    seal_minor = holder_ctx.serialize(top)[4]
    sub_cts = [pub.deserialize(wire.decode(x).blobs[0]) for x in a.fh_subs[:2]]
    low = pub.multiply(sub_cts[0], sub_cts[1])
    extra_ct = [pub.serialize(top), holder_ctx.encrypt_bytes([1.0, 2.0]),
                pub.serialize(low), raw_ciphertext(top, seal_minor),
                raw_ciphertext(low, seal_minor), other.encrypt_bytes([1.0]),
                other.serialize(other.encrypt([1.0]))]
    small = CKKSContext.generate(TEST_PRESET, relin=False, allow_insecure=True)
    one_rot = CKKSContext.generate(TEST_PRESET, rotations=[1], allow_insecure=True)
    extra_public = [small.public_bytes(), one_rot.public_bytes(), other.public_bytes()]

    y, s = data[0]
    dp = [DPAUCClient(y, s, epsilon=1.0, decision_points=N_POINTS).submit(),
          DPAUCClient(y, s, epsilon=1.0, decision_points=N_POINTS, mechanism="gaussian",
                      delta=1e-5).submit()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dp.append(RRClient(y, s, epsilon=1.0, decision_points=N_POINTS).submit())
    dp_server = DPAUCServer()
    dp_clients = [DPAUCClient(yy, ss, epsilon=1.0, decision_points=N_POINTS)
                  for yy, ss in data[:2]]
    dp_hellos = [c.hello(f"party:{n}") for c, n in zip(dp_clients, NAMES, strict=False)]
    dp_joining = copy.copy(dp_clients[0])
    dp_session_msg = dp_server.open_session(dp_hellos)
    for c in dp_clients:
        c.join(dp_session_msg)
    dp_bound = [c.submit() for c in dp_clients]
    dp_session = {"hellos": dp_hellos, "session": dp_session_msg, "bound": dp_bound,
                  "server": dp_server, "joining": dp_joining}
    dp_messages = [*dp_hellos, dp_session_msg, *dp_bound]

    pools = Pools()
    for sess in (a, b):
        for m in (sess.hellos + [sess.request, sess.offer] + sess.deliveries + sess.confirms
                  + [sess.confirmed] + sess.setup_states + [sess.secret_box_plain]
                  + sess.fh_subs + [sess.fh_result] + sess.commits + [sess.start]
                  + sess.m_subs + [sess.m_result] + [k.to_bytes() for k in sess.keys]):
            pools.add_message(m)
    for m in extra_ct + extra_public + dp + dp_messages:
        pools.add_message(m)
    world = World(identities, roster, spec, policy, data, a, b, other, extra_ct,
                  extra_public, dp, pools, dp_session=dp_session)
    world.build_seconds = time.perf_counter() - t0
    return world


# ---------------------------------------------------------------------- targets
@dataclass
class Case:
    """One hostile input, where it came from and, optionally, what success must mean."""

    value: Any
    producer: str
    oracle: Callable[[Any], str | None] | None = None
    #: Exceptions allowed but reported for this case only (see :attr:`Target.noted`).
    noted: tuple[type[BaseException], ...] = ()


Producer = Callable[[Mutator], Case]


@dataclass
class Target:
    name: str
    call: Callable[[Any], Any]
    producers: list[tuple[str, float, Callable[[Mutator], Any]]]
    allowed: tuple[type[BaseException], ...] = (ProtocolError,)
    #: Allowed but reported: outcomes the issue wants to hear about.
    noted: tuple[type[BaseException], ...] = ()
    #: Relative share of a run's executions (cheap targets get more).
    weight: float = 1.0

    def produce(self, m: Mutator) -> Case:
        name, _, fn = m.rng.choices(self.producers, weights=[w for _, w, _ in self.producers])[0]
        out = fn(m)
        return out if isinstance(out, Case) else Case(out, name)


def _frame(data: bytes) -> Frame:
    f = parse_frame(data)
    assert f is not None
    return f


def _encode_loose(kind: str, meta: dict[str, Any], blobs: Sequence[bytes]) -> bytes:
    """Like :func:`wire.encode` but lets hostile metadata through (NaN, huge, odd kinds)."""
    try:
        text = json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()
    except (ValueError, RecursionError, TypeError):
        text = b"{}"
    parts = [bytes(b) if isinstance(b, (bytes, bytearray, memoryview)) else str(b).encode()
             for b in blobs]
    return Frame(wire.MAGIC, wire.WIRE_VERSION, kind.encode("ascii", "replace")[:255],
                 text, parts).encode()


class Forge:
    """What hostile insiders can produce with their own keys (see module docstring)."""

    def __init__(self, world: World) -> None:
        self.w = world

    # ---------------------------------------------------------------- signed messages
    def _identity(self, name: Any, fallback: Identity) -> Identity:
        found = self.w.by_name(name) if isinstance(name, str) else None
        return found or fallback

    def hello(self, m: Mutator, sess: Session, i: int | None = None) -> bytes:
        """Party ``i`` (a roster member) signs a hello of its own making."""
        i = m.rng.randrange(len(sess.hellos)) if i is None else i
        f = _frame(sess.hellos[i])
        r = m.rng.random()
        if r < 0.3:
            f.blobs[0] = m.rng.choice(LOW_ORDER_X25519 + (m.rng.randbytes(32), b"",
                                                          b"\x00" * 31, b"\x00" * 33))
        elif r < 0.4:
            f.blobs[1] = m.rng.choice((b"", b"\x00" * 15, b"\x00" * 17, sess.hellos[i][:16]))
        else:
            data = m.message(f)
            f2 = parse_frame(data)
            if f2 is None:
                return data
            f = f2
        return self._resign(f, "keys/hello", 2, lambda meta, blobs: _hello_payload(
            self.w.roster.digest(), self.w.spec.digest(), meta["name"], blobs[0], blobs[1]),
            self.w.identities[i])

    def commit(self, m: Mutator, sess: Session, i: int | None = None) -> bytes:
        i = m.rng.randrange(len(sess.commits)) if i is None else i
        f = _frame(sess.commits[i])
        if m.rng.random() < 0.3:
            f.blobs[0] = m.rng.choice((b"", b"\x00" * 15, b"\x00" * 17, b"\x00" * 16,
                                       sess.commits[(i + 1) % 3][-80:-64]))
        else:
            f2 = parse_frame(m.message(f))
            if f2 is None:
                return f.encode()
            f = f2
        # the signature covers the key set-up session and the configuration (the message
        # carries them in its binding context): re-signed with this session's
        return self._resign(f, "fhauc-m/commit", 1, lambda meta, blobs: _commit_payload(
            sess.keys[0].session, sess.m_cfg.digest(), meta["name"], blobs[0]),
            self.w.identities[i])

    def confirm(self, m: Mutator, sess: Session, i: int | None = None) -> bytes:
        i = m.rng.randrange(len(sess.confirms)) if i is None else i
        f = _frame(sess.confirms[i])
        if m.rng.random() < 0.3:
            f.blobs[0] = m.rng.choice((b"", b"\x00" * 32, m.rng.randbytes(32),
                                       wire.decode(self.w.b.confirms[i]).blobs[0]))
        else:
            f2 = parse_frame(m.message(f))
            if f2 is None:
                return f.encode()
            f = f2
        return self._resign(f, "keys/confirm", 1, lambda meta, blobs: _confirm_payload(
            meta["name"], blobs[0]), self.w.identities[i])

    def _resign(self, f: Frame, tag: str, sig_at: int,
                payload: Callable[[dict[str, Any], list[bytes]], bytes],
                fallback: Identity) -> bytes:
        try:
            meta = json.loads(f.meta_text)
            ident = self._identity(meta.get("name"), fallback)
            sig = ident.sign(tag, payload(meta, f.blobs))
        except Exception:  # noqa: BLE001 - not signable: send it unsigned
            return f.encode()
        while len(f.blobs) <= sig_at:
            f.blobs.append(b"")
        f.blobs[sig_at] = sig
        return f.encode()

    # ---------------------------------------------------------------- the key holder
    def offer(self, m: Mutator, sess: Session) -> bytes:
        """A hostile key holder: hostile public material, boxes or header, hashed,
        signed and sealed properly."""
        w = self.w
        msg = wire.decode(sess.offer)
        public, header, _sig, *boxes = msg.blobs
        holder = w.identities[sess.holder]
        hdr = wire.decode(header)
        r = m.rng.random()
        rebuild = True
        if r < 0.35:
            public = m.mutate_many(public) if m.rng.random() < 0.7 else \
                m.rng.choice(w.extra_public + [sess.offer, b""])
        elif r < 0.7:
            j = m.rng.choice([k for k in range(len(boxes)) if k != sess.holder])
            boxes[j] = self.box(m, sess, j)
        elif r < 0.85:
            header = m.mutate_many(header)
            rebuild = False
        else:
            boxes = [b for b in m.message_list(boxes) if isinstance(b, bytes)]
        if rebuild:
            header = _encode_loose("keys/offer-header", dict(hdr.meta), [
                hdr.blobs[0], hashlib.sha256(public).digest(),
                *[hashlib.sha256(b).digest() for b in boxes]])
        sig = holder.sign("keys/offer", header)
        return _encode_loose("keys/offer", dict(msg.meta), [public, header, sig, *boxes])

    def box(self, m: Mutator, sess: Session, j: int) -> bytes:
        """A box the holder seals properly to party ``j`` around hostile key material."""
        inner = m.mutate_many(sess.secret_box_plain) if m.rng.random() < 0.85 else \
            m.rng.choice(self.w.pools.messages)
        x_pk = wire.decode(sess.hellos[j]).blobs[0]
        ctx = _box_context(sess.transcript, NAMES[sess.holder], NAMES[j])
        return seal_to(x_pk, inner, context=ctx)

    def deliveries(self, sess: Session, offer: bytes) -> list[bytes]:
        msg = wire.decode(offer)
        public, header, sig, *boxes = msg.blobs
        return [wire.encode("keys/deliver", {}, [sess.request, header, sig, b])
                for b in boxes]

    # ---------------------------------------------------------------- the aggregator
    def fh_result(self, m: Mutator, sess: Session) -> bytes:
        """A semi-honest result the aggregator encrypts itself."""
        pub = sess.public
        meta = wire.decode(sess.fh_result).meta
        blob = self._ciphertext(m, sess, pub)
        return _encode_loose("fhauc/result", dict(meta), [blob])

    def m_result(self, m: Mutator, sess: Session) -> bytes:
        pub = sess.public
        msg = wire.decode(sess.m_result)
        blobs = list(msg.blobs)
        r = m.rng.random()
        if r < 0.5:
            k = m.rng.randrange(len(blobs))
            blobs[k] = self._ciphertext(m, sess, pub)
        elif r < 0.7:
            blobs = [self._ciphertext(m, sess, pub) for _ in blobs]
        elif r < 0.85:
            blobs = m.rng.choice(([blobs[0]] * len(blobs), blobs[::-1],
                                  list(wire.decode(self.w.b.m_result).blobs)))
        else:
            k = m.rng.randrange(len(blobs))
            ct = pub.deserialize(blobs[k])
            op = m.rng.randrange(3)
            if op == 0:
                ct = pub.multiply_const(ct, m.rng.choice((2.0, 0.5, -1.0, 1.0 + 2**-10)),
                                        scale=2.0**16)
            elif op == 1:
                ct = pub.add_plain(ct, np.full(pub.slots, m.rng.choice((1e-3, 1.0, 1e3))))
            else:
                ct = pub.rotate(ct, m.rng.choice((1, 2, 1024)))
            blobs[k] = pub.serialize(ct)
        return _encode_loose("fhauc-m/result", dict(msg.meta), blobs)

    def _ciphertext(self, m: Mutator, sess: Session, pub: CKKSContext) -> bytes:
        r = m.rng.random()
        slots = pub.slots
        if r < 0.3:
            vec = np.zeros(slots)
        elif r < 0.55:
            x, y = m.rng.choice((0.0, 1.0, 1e-3, 0.5, 1e6, -1.0)), \
                m.rng.choice((0.0, 1.0, 1e-3, 2.0, -1.0))
            vec = np.empty(slots, dtype=np.complex128)
            vec[0::2] = 1j * x if m.rng.random() < 0.5 else x
            vec[1::2] = 1j * y if m.rng.random() < 0.5 else y
        elif r < 0.7:
            vec = np.full(slots, m.rng.choice((1e9, 1e12, 2.0**40)))
        elif r < 0.85:
            return m.rng.choice(self.w.extra_ciphertexts
                                + [wire.decode(x).blobs[0] for x in sess.fh_subs])
        else:
            vec = np.asarray([m.rng.uniform(-1, 1) for _ in range(slots)])
        return pub.encrypt_bytes(vec)

    def start(self, m: Mutator, sess: Session) -> bytes:
        meta = dict(wire.decode(sess.start).meta)
        commits = list(sess.commits)
        r = m.rng.random()
        if r < 0.4:
            k = m.rng.randrange(len(commits))
            commits[k] = self.commit(m, sess, k)
        elif r < 0.8:
            m2 = Mutator(m.rng, Pools(messages=sess.commits + self.w.b.commits
                                      + [self.commit(m, sess) for _ in range(2)]))
            commits = m2.message_list(commits, element=lambda c: self.commit(m, sess))
        else:
            meta = m.meta(meta)
        return _encode_loose("fhauc-m/start", meta, commits)


# ---------------------------------------------------------------------- oracles
def _keysetup_request_oracle(world: World, bad_pos: int) -> Callable[[Any], str | None]:
    """A bad hello is attributed to its position and the others go on."""
    def check(result: Any) -> str | None:
        agg, (holder, _req) = result
        others = [n for k, n in enumerate(NAMES) if k != bad_pos]
        if set(agg.rejected) - {bad_pos}:
            return f"good hellos rejected: {agg.rejected}"
        if bad_pos not in agg.rejected:
            return "the bad hello was accepted"
        if list(agg.names) != others:
            return f"participants {agg.names} instead of {others}"
        return None
    return check


def _auc_oracle(expected: float) -> Callable[[Any], str | None]:
    def check(result: Any) -> str | None:
        if not isinstance(result, float) or not abs(result - expected) <= 2 * TOLERANCE:
            return f"malicious mode returned a wrong AUC {result!r} (expected {expected})"
        return None
    return check


# ---------------------------------------------------------------------- DPAUC
_DP_HEADER = struct.Struct(">4sBBIdd")


def _dp_mutate(m: Mutator, data: bytes) -> bytes:
    rng = m.rng
    if rng.random() < 0.35:
        return m.mutate_many(data)
    magic, version, kind, n, eps, dlt = _DP_HEADER.unpack_from(data)
    body = bytearray(data[_DP_HEADER.size:])
    op = rng.randrange(6)
    if op == 0:
        n = rng.choice((0, 1, 2, n - 1, n + 1, 1 << 16, (1 << 32) - 1))
    elif op == 1:
        eps = rng.choice((0.0, -1.0, 1e-300, 5e-324, 1e300, math.inf, math.nan, 1e-9))
    elif op == 2:
        dlt = rng.choice((-1e-9, 1.0, 0.999999, math.nan, 1e-300))
    elif op == 3:
        kind, version = rng.choice(((0, version), (4, version), (kind, 2), (255, version)))
    else:
        count = len(body) // 8
        for _ in range(rng.choice((1, 1, 3, count))):
            k = rng.randrange(count)
            v = rng.choice((math.nan, math.inf, -math.inf, 1e308, -1e308, 1.7976931348623157e308,
                            -0.0, 0.0, 1e-308, 5e-324, -1e-300, 2.0**53, -(2.0**53), 1.0))
            body[8 * k:8 * k + 8] = struct.pack(">d", v)
    return _DP_HEADER.pack(magic, version, kind, n, eps, dlt) + bytes(body)


# ---------------------------------------------------------------------- Flower records
def _flower_record(m: Mutator, world: World) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict
    from fedsec.runtime import flower_io
    rng = m.rng
    blobs = [rng.choice(world.pools.blobs)[:4096] for _ in range(rng.randrange(4))]
    content = flower_io.make_content(blobs, meta={"step": 1})
    r = rng.random()
    if r < 0.6:
        arrays = {}
        n = rng.randrange(5)
        for i in range(n):
            key = rng.choice((str(i), str(i), str(i + 1), f"0{i}", "-1", "x", "", " 0"))
            data = rng.choice((b"", b"abc", rng.randbytes(rng.randrange(64))))
            shape = rng.choice(((len(data),), (len(data) + 1,), (), (1, len(data)),
                                (len(data), 0), (-1,)))
            dtype = rng.choice(("uint8", "uint8", "int8", "float64", ""))
            stype = rng.choice((flower_io.RAW_STYPE, flower_io.RAW_STYPE, "numpy.ndarray", ""))
            with contextlib.suppress(Exception):
                arrays[key] = Array(dtype=dtype, shape=shape, stype=stype, data=data)
        with contextlib.suppress(Exception):
            content[flower_io.BLOBS_KEY] = ArrayRecord(arrays, keep_input=True)
    elif r < 0.75:
        content = RecordDict()
    elif r < 0.9:
        content = RecordDict()
        with contextlib.suppress(Exception):
            content[flower_io.BLOBS_KEY] = ConfigRecord({"0": b"abc"})
    return content


# ---------------------------------------------------------------------- target table
def make_targets(world: World) -> list[Target]:
    """One :class:`Target` per decoder and per protocol step that reads another role's
    bytes."""
    w, A, B = world, world.a, world.b
    forge = Forge(world)
    pools = w.pools
    all_messages = pools.messages

    def outsider(*seeds: bytes) -> Callable[[Mutator], Any]:
        return lambda m: m.mutate_many(m.rng.choice(seeds))

    def foreign(m: Mutator) -> Any:
        return m.rng.choice(all_messages)

    def hostile_type(m: Mutator) -> Any:
        return m.rng.choice((None, "FSEC", 0, [b"FSEC"], bytearray(b"FSEC"), memoryview(b""),
                             b"", b"FSEC"))

    def copied(role: Any) -> Any:
        return copy.copy(role)

    targets: list[Target] = []

    # -- framing and key material ------------------------------------------------------
    every_message = (A.hellos + [A.request, A.deliveries[0], A.confirmed, A.start, A.fh_result]
                     + A.fh_subs[:1] + A.m_subs[:1] + A.commits[:1] + [A.m_result])
    targets.append(Target("wire.decode", lambda x: wire.decode(x), [
        ("outsider", 8, outsider(*every_message)),
        ("hostile-type", 1, hostile_type),
    ], weight=3.0))

    pubs = [w.extra_public[0], w.extra_public[1], w.extra_public[2]]

    def public_context(x: tuple[bytes, bool]) -> Any:
        """Load as the aggregator does, then use every key it holds once."""
        ctx = CKKSContext.from_public_bytes(x[0], allow_insecure=x[1])
        if ctx.keys.public_key is not None:
            ct = ctx.encrypt([1.0, 2.0])
            if ctx.has_relin_keys:
                ct = ctx.square(ct, rescale=False)
            for r in ctx.rotations:
                ct = ctx.rotate(ct, r)
            if ctx.conjugate_key:
                ct = ctx.conjugate(ct)
        return ctx

    def key_members(m: Mutator) -> tuple[bytes, bool]:
        """One member of one ciphertext inside a public, relinearization or Galois key."""
        msg = wire.decode(m.rng.choice(pubs))
        blobs = list(msg.blobs)
        if m.rng.random() < 0.3:  # keys of one kind where another belongs, or missing
            i, j = m.rng.sample(range(3), 2)
            blobs[i] = m.rng.choice((blobs[j], b""))
            return _encode_loose("ckks/public", dict(msg.meta), blobs), True
        k = m.rng.choice([i for i, b in enumerate(blobs) if b])
        plain = zstd_open(blobs[k])
        assert plain is not None
        out = m.nested_ciphertext_member(plain)
        blobs[k] = zstd_close(out) if m.rng.random() < 0.5 else out
        return _encode_loose("ckks/public", dict(msg.meta), blobs), True

    targets.append(Target(
        "CKKSContext.from_public_bytes", public_context, [
            ("outsider", 6, lambda m: (m.mutate_many(m.rng.choice(pubs)), True)),
            ("key-members", 2, key_members),
            ("outsider-full", 1, lambda m: (m.mutate(wire.decode(A.offer).blobs[0]), True)),
            ("secure-only", 1, lambda m: (m.rng.choice(pubs), False)),
            ("foreign", 1, lambda m: (foreign(m), True)),
        ], weight=0.6))

    secret = A.keys[0].context.secret_bytes()
    other_secret = w.other_ctx.secret_bytes()

    def secret_context(x: bytes) -> Any:
        """Load as a party does, then encrypt and decrypt once."""
        return _use_secret(CKKSContext.from_secret_bytes(x, allow_insecure=True))

    def secret_members(m: Mutator) -> bytes:
        msg = wire.decode(m.rng.choice((secret, other_secret)))
        plain = zstd_open(msg.blobs[0])
        assert plain is not None
        out = m.nested_ciphertext_member(plain) if m.rng.random() < 0.5 else \
            m.ciphertext_member(plain)
        return _encode_loose("ckks/secret", dict(msg.meta),
                             [zstd_close(out) if m.rng.random() < 0.5 else out])

    targets.append(Target(
        "CKKSContext.from_secret_bytes", secret_context, [
            ("outsider", 7, outsider(secret, other_secret)),
            ("key-members", 2, secret_members),
            ("foreign", 1, foreign),
        ]))

    holder_ctx = A.keys[0].context

    fresh = [w.extra_ciphertexts[k] for k in (0, 1, 2)]  # top level, seeded, lower level

    def members(m: Mutator) -> bytes:
        """One member of a well-formed ciphertext set to an extreme, maybe re-compressed."""
        plain = zstd_open(m.rng.choice(fresh))
        assert plain is not None
        out = m.ciphertext_member(plain)
        return zstd_close(out) if m.rng.random() < 0.5 else out

    def deserialize(x: tuple[bytes, bool, bool]) -> Any:
        """Load as the aggregator (public context), which then computes, or as a party,
        which then decrypts."""
        ctx = A.public if x[1] else holder_ctx
        ct = ctx.deserialize(x[0], at_top=x[2], scale=A.public.scale if x[2] else None)
        if not x[1]:
            return ctx.decrypt(ct)
        step = min(ctx.rotations)  # a rotation the protocol's key spec holds a key for
        return ctx.conjugate(ctx.rotate(ct, step))

    targets.append(Target(
        "CKKSContext.deserialize", deserialize, [
            ("outsider", 9, lambda m: (m.mutate_many(m.rng.choice(
                w.extra_ciphertexts)), m.rng.random() < 0.5,
                m.rng.random() < 0.5)),
            ("members", 3, lambda m: (members(m), m.rng.random() < 0.5,
                                      m.rng.random() < 0.5)),
            ("foreign", 1, lambda m: (m.rng.choice(pools.blobs), True, False)),
        ], weight=3.0))

    pk_bytes = [k.to_bytes() for k in A.keys]
    targets.append(Target(
        "PartyKeys.from_bytes", lambda x: PartyKeys.from_bytes(x, allow_insecure=True), [
            ("outsider", 9, outsider(*pk_bytes[:1])),
            ("foreign", 1, foreign),
        ]))

    def setup_from_bytes(x: tuple[int, bytes]) -> Any:
        i, data = x
        return KeySetupParty.from_bytes(data, identity=w.identities[i], roster=w.roster,
                                        spec=w.spec)
    states = list(enumerate(A.setup_states[:3])) + [(A.holder, A.setup_states[3])] + \
        [(k, A.setup_states[4 + k]) for k in range(3)]
    targets.append(Target("KeySetupParty.from_bytes", setup_from_bytes, [
        ("outsider", 9, lambda m: (lambda i, s: (i, m.mutate_many(s)))(*m.rng.choice(states))),
        ("foreign", 1, lambda m: (m.rng.randrange(3), foreign(m))),
    ]))

    # -- signed key set-up --------------------------------------------------------------
    def request_call(hellos: list[Any]) -> Any:
        agg = KeySetupAggregator(w.roster, w.spec)
        return agg, agg.request(hellos)

    def request_one_bad(m: Mutator) -> Case:
        i = m.rng.randrange(3)
        hellos = list(A.hellos)
        hellos[i] = m.mutate_many(hellos[i]) if m.rng.random() < 0.6 else \
            forge.hello(m, A, i)
        try:  # the oracle applies when the altered hello is bad on its own
            _parse_hello(hellos[i], w.roster, w.spec.digest())
            bad = False
        except Exception:  # noqa: BLE001
            bad = True
        return Case(hellos, "one-bad-hello", _keysetup_request_oracle(w, i) if bad else None)

    targets.append(Target("KeySetupAggregator.request", request_call, [
        ("one-bad-hello", 6, request_one_bad),
        ("list", 3, lambda m: Mutator(m.rng, Pools(
            messages=A.hellos + B.hellos + [forge.hello(m, A)], kinds=pools.kinds,
            blobs=pools.blobs, values=pools.values)).message_list(A.hellos)),
        ("all-zero-x25519", 1, lambda m: _zero_key_case(m, forge, w)),
    ]))

    holder_after_hello = A.party_after_hello[A.holder]

    def offer_call(req: Any) -> Any:
        return copied(holder_after_hello).offer(req)

    def hostile_request(m: Mutator) -> bytes:
        hellos = Mutator(m.rng, Pools(messages=A.hellos + B.hellos + [forge.hello(m, A)],
                                      kinds=pools.kinds)).message_list(A.hellos)
        return _encode_loose("keys/request", {}, hellos)

    targets.append(Target("KeySetupParty.offer", offer_call, [
        ("outsider", 6, outsider(A.request)),
        ("hostile-aggregator", 3, hostile_request),
        ("foreign", 1, foreign),
    ], allowed=(ProtocolError, TamperingDetected), weight=0.6))

    def accept_call(offer: Any) -> Any:
        agg = copied(A.agg_after_request)
        out = agg.accept(offer)
        ctx = agg.context  # the aggregator then uses every key once
        ct = ctx.deserialize(wire.decode(A.fh_subs[0]).blobs[0])
        ct = ctx.square(ct, rescale=False)
        for r in ctx.rotations:
            ct = ctx.rotate(ct, r)
        ctx.conjugate(ct)
        return out

    targets.append(Target("KeySetupAggregator.accept", accept_call, [
        ("outsider", 4, outsider(A.offer)),
        ("hostile-holder", 5, lambda m: forge.offer(m, A)),
        ("foreign", 1, lambda m: m.rng.choice([B.offer] + all_messages)),
    ], weight=0.5))

    non_holders = [k for k in range(3) if k != A.holder]

    def receive_call(x: tuple[int, Any]) -> Any:
        i, delivery = x
        party = copied(A.party_after_hello[i]) if i != A.holder else \
            copied(_holder_after_offer(A))
        out = party.receive(delivery)
        _use_secret(party._pending.context)  # noqa: SLF001 - the keys it will use
        return out

    def hostile_holder_delivery(m: Mutator) -> tuple[int, bytes]:
        i = m.rng.choice(non_holders + [A.holder])
        ds = forge.deliveries(A, forge.offer(m, A))
        return i, ds[i] if i < len(ds) else m.rng.choice(ds or A.deliveries)

    def hostile_request_delivery(m: Mutator) -> tuple[int, bytes]:
        i = m.rng.choice(non_holders)
        msg = wire.decode(A.deliveries[i])
        blobs = list(msg.blobs)
        blobs[0] = hostile_request(m)
        return i, _encode_loose("keys/deliver", {}, blobs)

    targets.append(Target("KeySetupParty.receive", receive_call, [
        ("outsider", 4, lambda m: (lambda i: (i, m.mutate_many(A.deliveries[i])))(
            m.rng.randrange(3))),
        ("hostile-holder", 4, hostile_holder_delivery),
        ("hostile-aggregator", 1, hostile_request_delivery),
        ("foreign", 1, lambda m: (m.rng.randrange(3), m.rng.choice(
            A.deliveries + B.deliveries + all_messages))),
    ], allowed=(ProtocolError, TamperingDetected)))

    def confirm_call(confirms: Any) -> Any:
        return copied(A.agg_after_accept).confirm(confirms)

    targets.append(Target("KeySetupAggregator.confirm", confirm_call, [
        ("outsider", 4, lambda m: m.message_list(A.confirms)),
        ("insider", 4, lambda m: (lambda k: A.confirms[:k] + [forge.confirm(m, A, k)]
                                  + A.confirms[k + 1:])(m.rng.randrange(3))),
        ("replay", 2, lambda m: Mutator(m.rng, Pools(messages=B.confirms)).message_list(
            A.confirms)),
    ]))

    def finish_call(x: tuple[int, Any]) -> Any:
        i, confirmed = x
        return copied(A.party_after_receive[i]).finish(confirmed)

    def insider_confirmed(m: Mutator) -> tuple[int, bytes]:
        confirms = list(A.confirms)
        k = m.rng.randrange(3)
        confirms[k] = forge.confirm(m, A, k)
        if m.rng.random() < 0.3:
            confirms = m.message_list(confirms)
        return m.rng.randrange(3), _encode_loose("keys/confirmed", {}, confirms)

    targets.append(Target("KeySetupParty.finish", finish_call, [
        ("outsider", 4, lambda m: (m.rng.randrange(3), m.mutate_many(A.confirmed))),
        ("insider", 4, insider_confirmed),
        ("foreign", 2, lambda m: (m.rng.randrange(3), m.rng.choice([B.confirmed]
                                                                    + all_messages))),
    ], allowed=(ProtocolError, TamperingDetected), weight=1.5))

    # -- semi-honest FHAUC --------------------------------------------------------------
    def fh_aggregate(subs: Any) -> Any:
        return copied(A.fh_agg).aggregate(subs)

    targets.append(Target("FHAUCAggregator.aggregate", fh_aggregate, [
        ("outsider", 7, lambda m: m.message_list(A.fh_subs)),
        ("replay", 2, lambda m: Mutator(m.rng, Pools(messages=B.fh_subs)).message_list(
            A.fh_subs)),
        ("foreign", 1, lambda m: [foreign(m), *A.fh_subs[1:]]),
    ], weight=0.5))

    def fh_finalize(x: tuple[int, Any]) -> Any:
        i, res = x
        return copied(A.fh_parties[i]).finalize(res)

    def one_class(i: int) -> tuple[type[BaseException], ...]:
        """Party c holds negatives only: for it a forged zero denominator looks exactly
        like a federation without positives (reported, not a violation)."""
        return (UndefinedMetricError,) if i == 2 else ()

    def fh_case(producer: Callable[[Mutator], bytes], name: str) -> Callable[[Mutator], Case]:
        def make(m: Mutator) -> Case:
            i = m.rng.randrange(3)
            return Case((i, producer(m)), name, noted=one_class(i))
        return make

    targets.append(Target("FHAUCParty.finalize", fh_finalize, [
        ("outsider", 6, fh_case(lambda m: m.mutate_many(A.fh_result), "outsider")),
        ("hostile-aggregator", 3, fh_case(lambda m: forge.fh_result(m, A),
                                          "hostile-aggregator")),
        ("foreign", 1, fh_case(lambda m: m.rng.choice([B.fh_result] + all_messages),
                               "foreign")),
    ]))

    # -- malicious FHAUC ----------------------------------------------------------------
    start_agg = copy.copy(A.m_agg)
    start_agg._min_parties = 2  # noqa: SLF001 - a quorum of two, on a copy

    def m_start(commits: Any) -> Any:
        agg = copied(start_agg)
        return agg, agg.start(commits)

    def start_one_bad(m: Mutator) -> Case:
        i = m.rng.randrange(3)
        commits = list(A.commits)
        commits[i] = m.mutate_many(commits[i]) if m.rng.random() < 0.5 else \
            forge.commit(m, A, i)
        try:
            parse_commit(commits[i], roster=w.roster, names=NAMES, session=A.keys[0].session,
                         config=A.m_cfg.digest())
            bad = False
        except Exception:  # noqa: BLE001
            bad = True

        def check(result: Any) -> str | None:
            agg, _ = result
            if set(agg.rejected) != {i} or agg.participants != [k for k in range(3) if k != i]:
                return f"rejected {agg.rejected}, participants {agg.participants}"
            return None
        return Case(commits, "one-bad-commit", check if bad else None)

    targets.append(Target("MaliciousAggregator.start", m_start, [
        ("one-bad-commit", 6, start_one_bad),
        ("list", 3, lambda m: Mutator(m.rng, Pools(messages=A.commits + B.commits,
                                                   kinds=pools.kinds)).message_list(A.commits)),
        ("foreign", 1, lambda m: [foreign(m)] + A.commits[1:]),
    ], weight=1.5))

    verifier = A.m_after_submit[0]

    def m_aggregate(subs: Any) -> Any:
        res = copied(A.m_agg_after_start).aggregate(subs)
        try:  # what an honest party makes of it: the right AUC or TamperingDetected
            return copied(verifier).finalize(res)
        except (ProtocolError, TamperingDetected):
            return A.m_auc

    targets.append(Target("MaliciousAggregator.aggregate", m_aggregate, [
        ("outsider", 7, lambda m: Case(m.message_list(A.m_subs), "outsider",
                                       _auc_oracle(A.m_auc))),
        ("replay", 2, lambda m: Case(Mutator(m.rng, Pools(messages=B.m_subs)).message_list(
            A.m_subs), "replay", _auc_oracle(A.m_auc))),
        ("foreign", 1, lambda m: [foreign(m), *A.m_subs[1:]]),
    ], weight=0.4))

    def m_submit(x: tuple[int, Any]) -> Any:
        i, start = x
        return copied(A.m_after_commit[i]).submit(start)

    targets.append(Target("MaliciousParty.submit", m_submit, [
        ("outsider", 4, lambda m: (m.rng.randrange(3), m.mutate_many(A.start))),
        ("hostile-aggregator", 5, lambda m: (m.rng.randrange(3), forge.start(m, A))),
        ("foreign", 1, lambda m: (m.rng.randrange(3), m.rng.choice([B.start]
                                                                    + all_messages))),
    ], allowed=(ProtocolError, TamperingDetected), weight=0.6))

    def m_finalize(x: tuple[int, Any]) -> Any:
        i, res = x
        return copied(A.m_after_submit[i]).finalize(res)

    def fin(producer: Callable[[Mutator], bytes], name: str) -> Callable[[Mutator], Case]:
        def make(m: Mutator) -> Case:
            i = m.rng.randrange(3)
            return Case((i, producer(m)), name, _auc_oracle(A.m_auc), noted=one_class(i))
        return make

    targets.append(Target("MaliciousParty.finalize", m_finalize, [
        ("outsider", 5, fin(lambda m: m.mutate_many(A.m_result), "outsider")),
        ("hostile-aggregator", 4, fin(lambda m: forge.m_result(m, A), "hostile-aggregator")),
        ("foreign", 1, fin(lambda m: m.rng.choice([B.m_result] + all_messages), "foreign")),
    ], allowed=(ProtocolError, TamperingDetected)))

    # -- DPAUC ----------------------------------------------------------------------------
    targets.append(Target("dpauc.parse_submission", parse_submission, [
        ("outsider", 9, lambda m: _dp_mutate(m, m.rng.choice(w.dp_subs))),
        ("foreign", 1, foreign),
    ], weight=2.0))

    def dp_aggregate(subs: Any) -> Any:
        res = DPAUCServer().aggregate(subs)
        if not math.isfinite(res.auc):
            raise AssertionError(f"non-finite AUC {res.auc!r}")
        return res

    def dp_same(m: Mutator) -> list[bytes]:
        """One hostile submission, alone or repeated (colluding or replaying parties)."""
        bad = _dp_mutate(m, m.rng.choice(w.dp_subs))
        return [bad] * m.rng.choice((1, 1, 2, 3))

    targets.append(Target("DPAUCServer.aggregate", dp_aggregate, [
        ("outsider", 5, lambda m: (lambda sub: m.message_list(
            [sub, sub], element=lambda s: _dp_mutate(m, s)))(m.rng.choice(w.dp_subs))),
        ("same", 4, dp_same),
        ("foreign", 1, lambda m: [foreign(m), w.dp_subs[0]]),
    ], noted=(UndefinedMetricError,)))

    # a DPAUC session: the nonces, and submissions bound to it
    dps = w.dp_session
    targets.append(Target("DPAUCServer.open_session",
                          lambda hellos: DPAUCServer().open_session(hellos), [
        ("outsider", 8, lambda m: m.message_list(list(dps["hellos"]),
                                                 element=m.mutate_many)),
        ("foreign", 2, lambda m: [foreign(m), dps["hellos"][1]]),
    ]))
    targets.append(Target("DPAUCClient.join",
                          lambda msg: copy.copy(dps["joining"]).join(msg), [
        ("outsider", 8, lambda m: m.mutate_many(dps["session"])),
        ("foreign", 2, foreign),
    ]))

    def dp_bound_aggregate(subs: Any) -> Any:
        res = copy.copy(dps["server"]).aggregate(subs)
        if not math.isfinite(res.auc):
            raise AssertionError(f"non-finite AUC {res.auc!r}")
        return res

    targets.append(Target("DPAUCServer.aggregate/session", dp_bound_aggregate, [
        ("outsider", 8, lambda m: m.message_list(list(dps["bound"]), element=m.mutate_many)),
        ("replay", 1, lambda m: [dps["bound"][0], dps["bound"][0]]),
        ("foreign", 1, lambda m: [foreign(m), dps["bound"][1]]),
    ], noted=(UndefinedMetricError,)))

    # -- Flower helpers and the node's state file ---------------------------------------
    if NodeStore is None:
        return targets
    from fedsec.runtime import flower_io
    targets.append(Target("flower_io.get_blobs", lambda c: (flower_io.get_blobs(c),
                                                            flower_io.get_meta(c)), [
        ("hostile-record", 1, lambda m: _flower_record(m, w)),
    ], weight=0.5))

    store_dir = tempfile.mkdtemp(prefix="fedsec-fuzz-", dir="/dev/shm"
                                 if os.access("/dev/shm", os.W_OK) else None)
    store = NodeStore(Path(store_dir), 1, 1)
    store.save("hospital-a", {"keys": pk_bytes[0], "nonce": b"\x00" * 16})
    valid_state = store.path.read_bytes()

    def store_load(data: bytes) -> Any:
        store.path.write_bytes(data)
        return store.load()

    targets.append(Target("NodeStore.load", store_load, [
        ("outsider", 9, outsider(valid_state)),
        ("foreign", 1, lambda m: _encode_loose(STATE_KIND, m.meta({"name": "hospital-a",
                                                                   "fields": ["a"]}),
                                               [b"x"])),
    ], weight=0.5))
    return targets


def _use_secret(ctx: CKKSContext) -> CKKSContext:
    """Encrypt (both ways) and decrypt once with a party's loaded secret context."""
    ctx.decrypt(ctx.deserialize(ctx.encrypt_bytes([1.0, 2.0])))
    ctx.decrypt(ctx.encrypt([1.0]))
    return ctx


def _holder_after_offer(sess: Session) -> KeySetupParty:
    p = copy.copy(sess.party_after_hello[sess.holder])
    p._own = (sess.party_after_receive[sess.holder]._own)  # noqa: SLF001
    return p


def _zero_key_case(m: Mutator, forge: Forge, w: World) -> Case:
    """Regression: one party signs a hello with a low-order X25519 key; it alone is left
    out and the others go on."""
    i = m.rng.randrange(3)
    f = _frame(w.a.hellos[i])
    f.blobs[0] = m.rng.choice(LOW_ORDER_X25519)
    bad = forge._resign(f, "keys/hello", 2, lambda meta, blobs: _hello_payload(  # noqa: SLF001
        w.roster.digest(), w.spec.digest(), meta["name"], blobs[0], blobs[1]),
        w.identities[i])
    hellos = list(w.a.hellos)
    hellos[i] = bad
    return Case(hellos, "all-zero-x25519", _keysetup_request_oracle(w, i))


# ---------------------------------------------------------------------- the runner
class FuzzTimeout(BaseException):  # noqa: N818 - not an Exception: code under test can't eat it
    """A call ran past the hard time limit (a hang)."""


@dataclass
class Violation:
    target: str
    producer: str
    seed: str
    kind: str          # "exception", "warning", "oracle", "slow", "memory"
    detail: str


@dataclass
class TargetStats:
    executions: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    producers: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    max_seconds: float = 0.0
    noted: list[str] = field(default_factory=list)
    producer_errors: list[str] = field(default_factory=list)


@dataclass
class Report:
    seed: int
    stats: dict[str, TargetStats]
    violations: list[Violation]
    seconds: float
    peak_rss_growth_mb: float

    @property
    def executions(self) -> int:
        return sum(s.executions for s in self.stats.values())

    def exceptions(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for s in self.stats.values():
            out.update({k: v for k, v in s.outcomes.items() if k != "ok"})
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed, "executions": self.executions, "seconds": self.seconds,
            "violations": [v.__dict__ for v in self.violations],
            "peak_rss_growth_mb": self.peak_rss_growth_mb,
            "exceptions": dict(self.exceptions()),
            "targets": {n: {"executions": s.executions, "outcomes": dict(s.outcomes),
                            "producers": dict(s.producers),
                            "mean_ms": 1000 * s.seconds / max(1, s.executions),
                            "max_ms": 1000 * s.max_seconds, "noted": s.noted[:5],
                            "noted_count": len(s.noted),
                            "producer_errors": s.producer_errors[:5]}
                        for n, s in self.stats.items()},
        }


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    def fire(_sig: int, _frame: Any) -> None:
        raise FuzzTimeout(f"call exceeded {seconds} s")
    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def execute(target: Target, case: Case, *, hard_limit: float = 60.0
            ) -> tuple[str, str | None, float]:
    """Run one case; return ``(outcome, violation detail or None, seconds)``."""
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with _deadline(hard_limit):
                result = target.call(case.value)
    except FuzzTimeout as exc:
        return "FuzzTimeout", f"hang: {exc}", time.perf_counter() - t0
    except target.allowed as exc:
        return type(exc).__name__, None, time.perf_counter() - t0
    except target.noted + case.noted as exc:
        return type(exc).__name__, None, time.perf_counter() - t0
    except Warning as exc:
        return type(exc).__name__, f"warning {type(exc).__name__}: {exc}", \
            time.perf_counter() - t0
    except BaseException as exc:  # noqa: BLE001 - that is the point
        tb = "".join(traceback.format_exception(exc, limit=-3)).strip()
        return type(exc).__name__, f"{type(exc).__name__}: {str(exc)[:300]}\n{tb[-1500:]}", \
            time.perf_counter() - t0
    dt = time.perf_counter() - t0
    if case.oracle is not None:
        bad = case.oracle(result)
        if bad:
            return "ok", f"oracle: {bad}", dt
    return "ok", None, dt


def run(world: World, targets: Sequence[Target], *, executions: int | dict[str, int],
        seed: int = 0, slow_seconds: float = 10.0, memory_jump_mb: float = 512.0,
        progress: Callable[[str], None] | None = None) -> Report:
    """Execute every target; ``executions`` is a total (split by weight, rounded up) or
    per target."""
    if isinstance(executions, int):
        total_w = sum(t.weight for t in targets)
        plan = {t.name: max(1, math.ceil(executions * t.weight / total_w)) for t in targets}
    else:
        plan = dict(executions)
    stats = {t.name: TargetStats() for t in targets}
    violations: list[Violation] = []
    rss0 = _maxrss_mb()
    t_start = time.perf_counter()
    for t in targets:
        st = stats[t.name]
        for i in range(plan.get(t.name, 0)):
            case_seed = f"{seed}/{t.name}/{i}"
            m = Mutator(random.Random(case_seed), world.pools)  # noqa: S311 - fuzzing
            try:
                case = t.produce(m)
            except Exception as exc:  # noqa: BLE001 - a scaffold bug, not a finding
                st.producer_errors.append(f"{case_seed}: {type(exc).__name__}: {exc}")
                continue
            before = _maxrss_mb()
            outcome, bad, dt = execute(t, case)
            jump = _maxrss_mb() - before
            st.executions += 1
            st.outcomes[outcome] += 1
            st.producers[case.producer] += 1
            st.seconds += dt
            st.max_seconds = max(st.max_seconds, dt)
            if outcome in {e.__name__ for e in t.noted + case.noted}:
                st.noted.append(f"{case.producer} ({case_seed})")
            if bad is None and dt > slow_seconds:
                bad = f"slow: {dt:.1f} s"
                outcome = "slow"
            if bad is None and jump > memory_jump_mb:
                bad = f"peak memory grew by {jump:.0f} MB"
                outcome = "memory"
            if bad is not None:
                kind = bad.split(":")[0] if bad.split(":")[0] in (
                    "oracle", "hang", "slow") else outcome
                violations.append(Violation(t.name, case.producer, case_seed, kind, bad))
        if progress:
            progress(f"{t.name}: {st.executions} executions, {dict(st.outcomes)}")
    return Report(seed, stats, violations, time.perf_counter() - t_start,
                  _maxrss_mb() - rss0)


def replay(world: World, targets: Sequence[Target], case_seed: str) -> tuple[Case, Any]:
    """Re-create the input of one execution (``seed/target/i``) and run it."""
    name = case_seed.split("/")[1]
    t = next(t for t in targets if t.name == name)
    case = t.produce(Mutator(random.Random(case_seed), world.pools))  # noqa: S311
    return case, execute(t, case)



# ---------------------------------------------------------------------- metadata cases
MetaCase = tuple[dict[str, Any], Callable[[dict[str, Any]], Any],
                 Callable[[Any], str | None] | None]


def meta_cases(world: World) -> dict[str, MetaCase]:
    """For each target: the metadata of one message it reads (from an honest run), and a
    function that rebuilds its input around other metadata - re-signed, re-hashed or
    re-sealed by the insider who could send it, so that the metadata checks themselves
    are reached - and the oracle that success must pass, if any."""
    w, A = world, world.a
    forge = Forge(world)

    def blobs(data: bytes) -> list[bytes]:
        return list(wire.decode(data).blobs)

    def meta(data: bytes) -> dict[str, Any]:
        return dict(wire.decode(data).meta)

    def signed(data: bytes, tag: str, sig_at: int,
               payload: Callable[[dict[str, Any], list[bytes]], bytes]
               ) -> Callable[[dict[str, Any]], bytes]:
        kind = wire.decode(data).kind

        def build(m: dict[str, Any]) -> bytes:
            f = _frame(_encode_loose(kind, m, blobs(data)))
            return forge._resign(f, tag, sig_at, payload, w.identities[0])  # noqa: SLF001
        return build

    hello0 = signed(A.hellos[0], "keys/hello", 2, lambda m, b: _hello_payload(
        w.roster.digest(), w.spec.digest(), m["name"], b[0], b[1]))
    commit0 = signed(A.commits[0], "fhauc-m/commit", 1, lambda m, b: _commit_payload(
        A.keys[0].session, A.m_cfg.digest(), m["name"], b[0]))
    confirm0 = signed(A.confirms[0], "keys/confirm", 1, lambda m, b: _confirm_payload(
        m["name"], b[0]))
    offer = wire.decode(A.offer)
    header = wire.decode(offer.blobs[1])
    holder = w.identities[A.holder]

    def accept_input(m: dict[str, Any]) -> bytes:
        hdr = _encode_loose("keys/offer-header", m, list(header.blobs))
        return _encode_loose("keys/offer", dict(offer.meta), [
            offer.blobs[0], hdr, holder.sign("keys/offer", hdr), *offer.blobs[3:]])

    recipient = next(k for k in range(3) if k != A.holder)
    inner = wire.decode(A.secret_box_plain)
    secret = wire.decode(inner.blobs[0])

    def receive_input(m: dict[str, Any]) -> tuple[int, bytes]:
        ckks = _encode_loose("ckks/secret", m, list(secret.blobs))
        plain = wire.encode("keys/secret", {}, [ckks, inner.blobs[1]])
        x_pk = wire.decode(A.hellos[recipient]).blobs[0]
        box = seal_to(x_pk, plain, context=_box_context(A.transcript, NAMES[A.holder],
                                                        NAMES[recipient]))
        boxes = list(offer.blobs[3:])
        boxes[recipient] = box
        hdr = _encode_loose("keys/offer-header", dict(header.meta), [
            header.blobs[0], header.blobs[1], *[hashlib.sha256(b).digest() for b in boxes]])
        return recipient, wire.encode("keys/deliver", {}, [
            A.request, hdr, holder.sign("keys/offer", hdr), box])

    small_public = w.extra_public[0]
    secret_bytes = A.keys[0].context.secret_bytes()
    pk_bytes = A.keys[0].to_bytes()
    state = A.setup_states[4]
    oracles = {"MaliciousParty.finalize": _auc_oracle(A.m_auc),
               "MaliciousAggregator.aggregate": _auc_oracle(A.m_auc)}
    cases: dict[str, tuple[dict[str, Any], Callable[[dict[str, Any]], Any]]] = {
        "FHAUCParty.finalize": (meta(A.fh_result), lambda m: (0, _encode_loose(
            "fhauc/result", m, blobs(A.fh_result)))),
        "FHAUCAggregator.aggregate": (meta(A.fh_subs[0]), lambda m: [_encode_loose(
            "fhauc/submit", m, blobs(A.fh_subs[0])), *A.fh_subs[1:]]),
        "MaliciousParty.finalize": (meta(A.m_result), lambda m: (0, _encode_loose(
            "fhauc-m/result", m, blobs(A.m_result)))),
        "MaliciousAggregator.aggregate": (meta(A.m_subs[0]), lambda m: [_encode_loose(
            "fhauc-m/submit", m, blobs(A.m_subs[0])), *A.m_subs[1:]]),
        "MaliciousAggregator.start": (meta(A.commits[0]), lambda m: [commit0(m),
                                                                     *A.commits[1:]]),
        "MaliciousParty.submit": (meta(A.start), lambda m: (1, _encode_loose(
            "fhauc-m/start", m, blobs(A.start)))),
        "KeySetupAggregator.request": (meta(A.hellos[0]), lambda m: [hello0(m),
                                                                     *A.hellos[1:]]),
        "KeySetupParty.offer": (meta(A.hellos[0]), lambda m: _encode_loose(
            "keys/request", {}, [hello0(m), *A.hellos[1:]])),
        "KeySetupAggregator.accept": (dict(header.meta), accept_input),
        "KeySetupParty.receive": (dict(secret.meta), receive_input),
        "KeySetupAggregator.confirm": (meta(A.confirms[0]), lambda m: [confirm0(m),
                                                                       *A.confirms[1:]]),
        "KeySetupParty.finish": (meta(A.confirms[0]), lambda m: (1, _encode_loose(
            "keys/confirmed", {}, [confirm0(m), *A.confirms[1:]]))),
        "CKKSContext.from_public_bytes": (meta(small_public), lambda m: (_encode_loose(
            "ckks/public", m, blobs(small_public)), True)),
        "CKKSContext.from_secret_bytes": (meta(secret_bytes), lambda m: _encode_loose(
            "ckks/secret", m, blobs(secret_bytes))),
        "PartyKeys.from_bytes": (meta(pk_bytes), lambda m: _encode_loose(
            "keys/party-state", m, blobs(pk_bytes))),
        "KeySetupParty.from_bytes": (meta(state), lambda m: (0, _encode_loose(
            "keys/setup-state", m, blobs(state)))),
    }
    if NodeStore is not None:
        cases["NodeStore.load"] = ({"name": NAMES[0], "fields": ["keys", "nonce"]},
                                   lambda m: _encode_loose(STATE_KIND, m,
                                                           [pk_bytes, b"\x00" * 16]))
    return {k: (v[0], v[1], oracles.get(k)) for k, v in cases.items()}
