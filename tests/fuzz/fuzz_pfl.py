"""Fuzz targets for secure Priv-PFL (:mod:`fedsec.pfl.secure`; test-side scaffold).

:func:`build_pfl_world` plays the fixed-holder key set-up (the decryptor holds the CKKS
secret key) and two honest rounds of a small federation step by step (4 clients, d = 20,
the insecure 4096-ring test preset; client 3 uploads an unclipped model and claims the
bound as its norm -- :func:`fedsec.testing.pfl.unclipped_upload` -- so it is invalid and
takes the "own model" path), keeping every message
and a snapshot of every role before each step it takes (about 5 s, with a second session
for foreign messages). :func:`make_pfl_targets` turns that into
:class:`~fuzz_targets.Target` objects, one per entry point where a role consumes another
role's bytes:

* **key set-up, fixed holder** -- the aggregator's ``request`` (hellos), ``accept`` (the
  decryptor's offer) and ``confirm``; the decryptor's ``offer``; ``receive`` at a client
  (public key only) and at the decryptor; ``finish``;
* **server** -- ``register``, ``receive`` (then the mask step, ``gram_request`` and the
  decryptor's ``refresh``: an upload is only really read when its plaintext is added to
  the decryptor's mask and multiplied), ``receive_masks``, ``compare``, ``read_bits``,
  ``deliver``;
* **decryptor** -- ``register``, ``mask_ciphertexts``, ``refresh``, ``reveal``,
  ``unmask_for_client``;
* **client** -- ``receive_decryptor_key``, ``finish``.

Producers: *outsider* (structure-aware mutations: truncation, bit flips, wire fields,
kinds, versions, metadata, blobs, SEAL headers), *meta* (metadata re-encoded with hostile
values: NaN, inf, huge ints, wrong types, other rounds/clients/sessions), *blob* (blobs
swapped with another message's, dropped, duplicated), *replay* (a valid message of the
other round, the other session, another client or another kind, or one already used).
Oracles say what an accepted hostile message must not do: make an honest client invalid,
reveal a pair twice or a pair of an invalid client, register another key for a client
than the one it signed (at the server or the decryptor), serve a mask for a seed box its
client did not sign, take a decryptor key the decryptor did not sign, give a client a
result other than its honest one (its boxes are sealed), or give a client of the
fixed-holder set-up a secret key.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from fuzz_mutations import Mutator, Pools
from fuzz_targets import Case, Target, _encode_loose

from fedsec.crypto.identity import Identity, Roster
from fedsec.crypto.keysetup import KeySetupAggregator, KeySetupParty
from fedsec.errors import ProtocolError, TamperingDetected
from fedsec.pfl.secure import (
    DECRYPTOR_NAME,
    SecurePFLClient,
    SecurePFLConfig,
    SecurePFLDecryptor,
    SecurePFLServer,
    client_name,
    client_role,
)
from fedsec.pfl.selection import SelectionResult, efficient_selection
from fedsec.protocol import wire
from fedsec.protocol.binding import Context, context_of
from fedsec.testing.pfl import unclipped_upload

__all__ = ["PFLWorld", "build_pfl_world", "make_pfl_targets", "pfl_meta_cases",
           "PFL_TARGETS", "PFL_PRESET"]

PFL_PRESET = "INSECURE_TEST_N4096_DEPTH19"
K, D, B, SIGMA, ALPHA = 4, 20, 10.0, 0.6, 0.5
INVALID = 3

PFL_TARGETS = (
    "pfl.KeySetupAggregator.request", "pfl.KeySetupParty.offer",
    "pfl.KeySetupAggregator.accept", "pfl.KeySetupParty.receive[client]",
    "pfl.KeySetupParty.receive[decryptor]", "pfl.KeySetupAggregator.confirm",
    "pfl.KeySetupParty.finish",
    "SecurePFLServer.register", "SecurePFLDecryptor.register",
    "SecurePFLClient.receive_decryptor_key", "SecurePFLServer.receive",
    "SecurePFLDecryptor.mask_ciphertexts", "SecurePFLServer.receive_masks",
    "SecurePFLDecryptor.refresh", "SecurePFLServer.compare", "SecurePFLDecryptor.reveal",
    "SecurePFLServer.read_bits", "SecurePFLDecryptor.unmask_for_client",
    "SecurePFLServer.deliver", "SecurePFLClient.finish",
)


# ---------------------------------------------------------------------- cloning roles
def clone_server(s: SecurePFLServer) -> SecurePFLServer:
    c = copy.copy(s)
    c._clients = dict(s._clients)  # noqa: SLF001
    c._uploads = {k: copy.copy(v) for k, v in s._uploads.items()}  # noqa: SLF001
    c._masks = dict(s._masks)  # noqa: SLF001
    c._cmp = list(s._cmp)  # noqa: SLF001
    c._valid = s._valid.copy()  # noqa: SLF001
    if hasattr(s, "_result_seeds"):
        c._result_seeds = {k: list(v) for k, v in s._result_seeds.items()}  # noqa: SLF001
    return c


def clone_decryptor(d: SecurePFLDecryptor) -> SecurePFLDecryptor:
    c = copy.copy(d)
    c._clients = dict(d._clients)  # noqa: SLF001
    c._revealed = set(d._revealed)  # noqa: SLF001
    c._results = set(d._results)  # noqa: SLF001
    c._batches = set(d._batches)  # noqa: SLF001
    c._valid = d._valid.copy()  # noqa: SLF001
    return c


# ---------------------------------------------------------------------- the world
@dataclass
class Round:
    """Every message of one round and the roles' snapshots before each step."""

    t: int
    uploads: list[bytes]
    srv_before_last: SecurePFLServer      # every upload but the last received
    mask_request: bytes
    srv_after_mask_request: SecurePFLServer
    dec_before_masks: SecurePFLDecryptor
    masks: bytes
    dec_before_refresh: SecurePFLDecryptor
    gram: bytes
    srv_after_gram: SecurePFLServer
    refreshed: bytes
    dec_after_refresh: SecurePFLDecryptor
    srv_after_compare: SecurePFLServer
    reveals: list[tuple[list[tuple[int, int]], bytes, bytes, int]]  # pairs, req, reply, batch
    selection: SelectionResult
    dec_before_results: SecurePFLDecryptor
    result_requests: list[bytes]
    srv_after_aggregate: SecurePFLServer
    boxes: list[bytes]
    results: list[bytes]
    clients_before_finish: list[SecurePFLClient]
    personalised: list[np.ndarray]
    valid: list[bool]


@dataclass
class KeySetupRecord:
    hellos: list[bytes]
    request: bytes
    holder: int
    offer: bytes
    deliveries: list[bytes]
    confirms: list[bytes]
    confirmed: bytes
    parties_after_hello: list[KeySetupParty]
    parties_after_receive: list[KeySetupParty]
    agg_after_request: KeySetupAggregator
    agg_after_accept: KeySetupAggregator
    agg_after_hello: KeySetupAggregator


@dataclass
class Federation:
    keysetup: KeySetupRecord
    announce: bytes
    fresh_clients: list[SecurePFLClient]
    registers: list[bytes]
    fresh_server: SecurePFLServer
    fresh_decryptor: SecurePFLDecryptor
    rounds: list[Round]
    session: str


@dataclass
class PFLWorld:
    config: SecurePFLConfig
    identities: list[Identity]
    roster: Roster
    a: Federation
    b: Federation          # another key set-up: foreign messages
    models: list[np.ndarray]
    pools: Pools = field(default_factory=Pools)
    build_seconds: float = 0.0


def _models(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = rng.normal(size=D)
    w = base + 0.3 * rng.normal(size=(K, D))
    w = w * (0.6 * B / np.linalg.norm(w, axis=1, keepdims=True))
    w[INVALID] *= 5.0  # unclipped, claims B: fails the decryptor's norm check
    return np.asarray(w)


def _keysetup(ids: list[Identity], roster: Roster, cfg: SecurePFLConfig) -> tuple[
        KeySetupRecord, dict[str, Any], KeySetupAggregator]:
    spec = cfg.key_spec()
    parties = [KeySetupParty(i, roster, spec, min_parties=K + 1) for i in ids]
    agg = KeySetupAggregator(roster, spec, min_parties=K + 1,
                             max_message_bytes=cfg.max_offer_bytes)
    agg_hello = copy.copy(agg)
    hellos = [p.hello() for p in parties]
    after_hello = [copy.copy(p) for p in parties]
    holder, request = agg.request(hellos)
    agg_req = copy.copy(agg)
    by_name = {p.name: p for p in parties}
    assert agg.names[holder] == DECRYPTOR_NAME
    offer = by_name[DECRYPTOR_NAME].offer(request)
    deliveries = agg.accept(offer)
    agg_acc = copy.copy(agg)
    confirms = [by_name[n].receive(d) for n, d in zip(agg.names, deliveries, strict=True)]
    after_receive = [copy.copy(by_name[n]) for n in agg.names]
    confirmed = agg.confirm(confirms)
    keys = {n: by_name[n].finish(confirmed) for n in agg.names}
    after_hello_ordered = [after_hello[[p.name for p in parties].index(n)]
                           for n in agg.names]
    rec = KeySetupRecord(hellos, request, holder, offer, deliveries, confirms, confirmed,
                         after_hello_ordered, after_receive, agg_req, agg_acc, agg_hello)
    return rec, keys, agg


def _round(t: int, clients: list[SecurePFLClient], server: SecurePFLServer,
           dec: SecurePFLDecryptor) -> Round:
    w = _models(100 + t)
    ups = [unclipped_upload(c, w[i], norm_bound=B, sigma=SIGMA, round_index=t,
                            claimed_norm=B) if i == INVALID
           else c.upload(w[i], norm_bound=B, sigma=SIGMA, round_index=t)
           for i, c in enumerate(clients)]
    for i, u in enumerate(ups[:-1]):
        server.receive(i, u, round_index=t, sigma=SIGMA, norm_bound=B, model_size=D)
    before_last = clone_server(server)
    server.receive(K - 1, ups[-1], round_index=t, sigma=SIGMA, norm_bound=B, model_size=D)
    mreq = server.mask_request()
    after_mreq = clone_server(server)
    dec_before_masks = clone_decryptor(dec)
    masks = dec.mask_ciphertexts(mreq)
    server.receive_masks(masks)
    gram = server.gram_request()
    after_gram = clone_server(server)
    dec_before = clone_decryptor(dec)
    refreshed = dec.refresh(gram)
    dec_after = clone_decryptor(dec)
    server.compare(refreshed)
    after_compare = clone_server(server)
    reveals: list[tuple[list[tuple[int, int]], bytes, bytes, int]] = []

    def oracle(pairs: Sequence[tuple[int, int]]) -> list[bool]:
        req = server.reveal_request(pairs)
        reply = dec.reveal(req)
        reveals.append(([tuple(p) for p in pairs], req, reply,  # type: ignore[misc]
                        server._batch))  # noqa: SLF001
        return server.read_bits(reply, pairs)

    sel = efficient_selection(server.keys(), oracle, neighbours=server.neighbours())
    dec_results = clone_decryptor(dec)
    reqs = server.aggregate(sel, ALPHA)
    after_agg = clone_server(server)
    boxes = [dec.unmask_for_client(r) for r in reqs]
    results = [server.deliver(i, b) for i, b in enumerate(boxes)]
    before_finish = [copy.copy(c) for c in clients]
    personalised = [c.finish(r) for c, r in zip(clients, results, strict=True)]
    return Round(t, ups, before_last, mreq, after_mreq, dec_before_masks, masks, dec_before,
                 gram, after_gram, refreshed, dec_after,
                 after_compare, reveals, sel, dec_results, reqs, after_agg, boxes, results,
                 before_finish, personalised, [bool(v) for v in server.validity()])


def _federation(ids: list[Identity], roster: Roster, cfg: SecurePFLConfig, rounds: int
                ) -> Federation:
    rec, keys, agg = _keysetup(ids, roster, cfg)
    assert agg.context is not None
    clients = [SecurePFLClient(i, keys[client_name(i)], ids[i], cfg, roster=roster)
               for i in range(K)]
    server = SecurePFLServer(agg.context, agg.session, K, cfg, roster=roster)
    dec = SecurePFLDecryptor(keys[DECRYPTOR_NAME], roster, cfg, identity=ids[-1])
    fresh_server, fresh_dec = clone_server(server), clone_decryptor(dec)
    fresh_clients = [copy.copy(c) for c in clients]
    announce = dec.announce()
    for c in clients:
        c.receive_decryptor_key(announce)
    regs = [c.register() for c in clients]
    for r in regs:
        server.register(r)
        dec.register(r)
    played = [_round(t, clients, server, dec) for t in range(rounds)]
    return Federation(rec, announce, fresh_clients, regs, fresh_server, fresh_dec, played,
                      agg.session)


def build_pfl_world() -> PFLWorld:
    """Two key set-ups; two honest rounds on the first, one on the second."""
    t0 = time.perf_counter()
    cfg = SecurePFLConfig(preset=PFL_PRESET, allow_insecure=True, sign_alpha=8)
    ids = [Identity(client_name(i)) for i in range(K)] + [Identity(DECRYPTOR_NAME)]
    roster = Roster.of(ids)
    a = _federation(ids, roster, cfg, 2)
    b = _federation(ids, roster, cfg, 1)
    for r in a.rounds:
        assert r.valid == [i != INVALID for i in range(K)]
    world = PFLWorld(cfg, ids, roster, a, b, [_models(100 + t) for t in range(2)])
    for fed in (a, b):
        ks = fed.keysetup
        for msg in [*ks.hellos, ks.request, ks.offer, *ks.deliveries, *ks.confirms,
                    ks.confirmed, fed.announce, *fed.registers]:
            world.pools.add_message(msg)
        for r in fed.rounds:
            for msg in [*r.uploads, r.mask_request, r.masks, r.gram, r.refreshed,
                        *[x[1] for x in r.reveals],
                        *[x[2] for x in r.reveals], *r.result_requests, *r.boxes,
                        *r.results]:
                world.pools.add_message(msg)
    world.build_seconds = time.perf_counter() - t0
    return world


# ---------------------------------------------------------------------- producers
def _meta_edit(m: Mutator, data: bytes) -> bytes:
    msg = wire.decode(data)
    return _encode_loose(msg.kind, m.meta(dict(msg.meta)), list(msg.blobs))


def _blob_edit(m: Mutator, data: bytes, others: Sequence[bytes]) -> bytes:
    msg = wire.decode(data)
    blobs = list(msg.blobs)
    rng = m.rng
    op = rng.randrange(6)
    pool = [b for o in others for b in wire.decode(o).blobs] or [b""]
    if op == 0 and blobs:
        blobs[rng.randrange(len(blobs))] = rng.choice(pool)
    elif op == 1 and blobs:
        del blobs[rng.randrange(len(blobs))]
    elif op == 2 and blobs:
        blobs.append(rng.choice(blobs))
    elif op == 3 and len(blobs) > 1:
        blobs.reverse()
    elif op == 4 and blobs:
        i = rng.randrange(len(blobs))
        blobs[i] = m.mutate_many(blobs[i])
    else:
        blobs = [rng.choice(pool) for _ in range(max(1, len(blobs)))]
    return _encode_loose(msg.kind, dict(msg.meta), blobs)


_CTX_FIELDS = ("session", "protocol", "round", "step", "sender", "recipient", "index")


def _relabel(m: Mutator, data: bytes, **fixed: Any) -> bytes:
    """A valid message of another round/client/session re-labelled to look like ours:
    binding-context fields (``session``, ``round``, ``sender``, ``recipient``,
    ``index``...) go into its ``ctx``, other keywords into its metadata."""
    msg = wire.decode(data)
    meta = dict(msg.meta)
    ctx = {k: fixed.pop(k) for k in list(fixed) if k in _CTX_FIELDS}
    if ctx:
        meta["ctx"] = context_of(meta).at(**ctx).to_meta()
    meta.update(fixed)
    return _encode_loose(msg.kind, meta, list(msg.blobs))


def _ctx(data: bytes) -> Context:
    return context_of(wire.decode(data).meta)


def _standard(honest: Callable[[Mutator], bytes], others: Callable[[], Sequence[bytes]],
              relabel: Callable[[Mutator, bytes], bytes] | None = None
              ) -> list[tuple[str, float, Callable[[Mutator], Any]]]:
    out: list[tuple[str, float, Callable[[Mutator], Any]]] = [
        ("outsider", 5, lambda m: m.mutate_many(honest(m))),
        ("meta", 3, lambda m: _meta_edit(m, honest(m))),
        ("blob", 2, lambda m: _blob_edit(m, honest(m), others())),
        ("replay", 2, lambda m: m.rng.choice(list(others()) or [b""])),
        ("foreign", 1, lambda m: m.rng.choice(m.pools.messages)),
    ]
    if relabel is not None:
        out.append(("relabelled", 2, lambda m: relabel(m, m.rng.choice(list(others())))))
    return out


def _with_oracle(producers: Sequence[tuple[str, float, Callable[[Mutator], Any]]],
                 oracle: Callable[[Any], str | None]
                 ) -> list[tuple[str, float, Callable[[Mutator], Any]]]:
    def wrap(name: str, fn: Callable[[Mutator], Any]) -> Callable[[Mutator], Case]:
        return lambda m: Case(fn(m), name, oracle)
    return [(n, wt, wrap(n, fn)) for n, wt, fn in producers]


# ---------------------------------------------------------------------- targets
def make_pfl_targets(w: PFLWorld) -> list[Target]:  # noqa: C901, PLR0915 - one place
    A, Bf = w.a, w.b
    r0, r1 = A.rounds
    rb = Bf.rounds[0]
    ks, kb = A.keysetup, Bf.keysetup
    targets: list[Target] = []
    names = ks.agg_after_request.names
    dec_pos = names.index(DECRYPTOR_NAME)
    client_pos = [p for p in range(K + 1) if p != dec_pos]

    # -- key set-up with the decryptor as fixed holder --------------------------------
    def request_call(hellos: Any) -> Any:
        return copy.copy(ks.agg_after_hello).request(hellos)

    targets.append(Target("pfl.KeySetupAggregator.request", request_call, [
        ("list", 6, lambda m: m.message_list(ks.hellos)),
        ("replay", 2, lambda m: Mutator(m.rng, Pools(messages=kb.hellos)).message_list(
            ks.hellos)),
    ], weight=0.5))

    def offer_call(req: Any) -> Any:
        return copy.copy(ks.parties_after_hello[dec_pos]).offer(req)

    targets.append(Target("pfl.KeySetupParty.offer", offer_call,
                          _standard(lambda m: ks.request, lambda: [kb.request]),
                          allowed=(ProtocolError, TamperingDetected), weight=0.5))

    def accept_call(offer: Any) -> Any:
        return copy.copy(ks.agg_after_request).accept(offer)

    targets.append(Target("pfl.KeySetupAggregator.accept", accept_call,
                          _standard(lambda m: ks.offer, lambda: [kb.offer]), weight=0.5))

    def no_secret(party: KeySetupParty) -> str | None:
        pending = party._pending  # noqa: SLF001
        if pending is not None and pending.context.has_secret_key:
            return "a client of the fixed-holder set-up received the secret key"
        return None

    def receive_client(x: tuple[int, Any]) -> Any:
        pos, delivery = x
        party = copy.copy(ks.parties_after_hello[pos])
        out = party.receive(delivery)
        bad = no_secret(party)
        if bad:
            raise AssertionError(bad)
        return out

    def client_delivery(fn: Callable[[Mutator, bytes], bytes]) -> Callable[[Mutator], Any]:
        def make(m: Mutator) -> tuple[int, bytes]:
            pos = m.rng.choice(client_pos)
            return pos, fn(m, ks.deliveries[pos])
        return make

    targets.append(Target("pfl.KeySetupParty.receive[client]", receive_client, [
        ("outsider", 5, client_delivery(lambda m, d: m.mutate_many(d))),
        ("blob", 2, client_delivery(lambda m, d: _blob_edit(m, d, ks.deliveries))),
        ("holder's delivery", 2, lambda m: (m.rng.choice(client_pos),
                                            ks.deliveries[dec_pos])),
        ("other client's", 2, lambda m: (client_pos[0], ks.deliveries[client_pos[1]])),
        ("foreign", 1, lambda m: (m.rng.choice(client_pos),
                                  m.rng.choice(kb.deliveries + m.pools.messages))),
    ], allowed=(ProtocolError, TamperingDetected)))

    def receive_dec(delivery: Any) -> Any:
        # the holder after its offer (the keys it generated in the honest run)
        party = copy.copy(ks.parties_after_hello[dec_pos])
        party._own = ks.parties_after_receive[dec_pos]._own  # noqa: SLF001
        return party.receive(delivery)

    targets.append(Target("pfl.KeySetupParty.receive[decryptor]", receive_dec,
                          _standard(lambda m: ks.deliveries[dec_pos],
                                    lambda: [kb.deliveries[dec_pos], *ks.deliveries]),
                          allowed=(ProtocolError, TamperingDetected), weight=0.5))

    def confirm_call(confirms: Any) -> Any:
        return copy.copy(ks.agg_after_accept).confirm(confirms)

    targets.append(Target("pfl.KeySetupAggregator.confirm", confirm_call, [
        ("list", 6, lambda m: m.message_list(ks.confirms)),
        ("replay", 2, lambda m: Mutator(m.rng, Pools(messages=kb.confirms)).message_list(
            ks.confirms)),
    ], weight=0.5))

    def finish_call(x: tuple[int, Any]) -> Any:
        pos, confirmed = x
        return copy.copy(ks.parties_after_receive[pos]).finish(confirmed)

    targets.append(Target("pfl.KeySetupParty.finish", finish_call, [
        ("outsider", 5, lambda m: (m.rng.randrange(K + 1), m.mutate_many(ks.confirmed))),
        ("foreign", 2, lambda m: (m.rng.randrange(K + 1), m.rng.choice(
            [kb.confirmed, *m.pools.messages]))),
    ], allowed=(ProtocolError, TamperingDetected), weight=0.5))

    # -- registration -------------------------------------------------------------------
    honest_keys = [wire.decode(r).blobs[0] for r in A.registers]

    def srv_register(reg: Any) -> Any:
        srv = clone_server(A.fresh_server)
        srv.register(A.registers[0])  # a registered victim: a second one is a hijack
        i = srv.register(reg)
        return i, srv._clients[i]  # noqa: SLF001

    reg_std = _standard(lambda m: m.rng.choice(A.registers), lambda: Bf.registers,
                        lambda m, d: _relabel(m, d, session=A.session))

    def dec_register(reg: Any) -> Any:
        dec = clone_decryptor(A.fresh_decryptor)
        i = dec.register(reg)
        return i, dec._clients[i]  # noqa: SLF001

    def register_oracle(out: Any) -> str | None:
        i, key = out
        return None if key == honest_keys[i] else f"client {i} registered another key"

    swapped = ("swapped", 2, lambda m: _relabel(m, A.registers[1], client=0,
                                                sender=client_role(0)))
    targets.append(Target("SecurePFLServer.register", srv_register, _with_oracle(
        [*reg_std, swapped], register_oracle), weight=0.5))
    targets.append(Target("SecurePFLDecryptor.register", dec_register, _with_oracle(
        [*reg_std, swapped], register_oracle), weight=0.5))

    honest_dec_key = wire.decode(A.announce).blobs[0]

    def dec_key_call(msg: Any) -> Any:
        c = copy.copy(A.fresh_clients[0])
        c.receive_decryptor_key(msg)
        return c._decryptor_x  # noqa: SLF001

    def dec_key_oracle(key: Any) -> str | None:
        return None if key == honest_dec_key else "a client took an unsigned decryptor key"

    targets.append(Target("SecurePFLClient.receive_decryptor_key", dec_key_call,
                          _with_oracle(_standard(
                              lambda m: A.announce, lambda: [Bf.announce],
                              lambda m, d: _relabel(m, d, session=A.session)),
                              dec_key_oracle), weight=0.5))

    # -- step 1: uploads, read when the Gram request and the refresh use them -----------
    last = K - 1

    def receive_call(upload: Any) -> Any:
        srv = clone_server(r1.srv_before_last)
        srv.receive(last, upload, round_index=r1.t, sigma=SIGMA, norm_bound=B, model_size=D)
        dec = clone_decryptor(r1.dec_before_masks)
        srv.receive_masks(dec.mask_ciphertexts(srv.mask_request()))
        refreshed = dec.refresh(srv.gram_request())
        present = wire.decode(refreshed)
        return dict(zip(srv._present, present.meta["valid"], strict=True))  # noqa: SLF001

    def honest_stay_valid(valid: Any) -> str | None:
        if not all(valid.get(i) for i in range(K) if i not in (INVALID, last)):
            return f"a hostile upload made an honest client invalid: {valid}"
        return None

    def up_case(fn: Callable[[Mutator], bytes], name: str) -> Callable[[Mutator], Case]:
        return lambda m: Case(fn(m), name, honest_stay_valid)

    up_others = [*r0.uploads, *r1.uploads[:-1], *rb.uploads]
    targets.append(Target("SecurePFLServer.receive", receive_call, [
        ("outsider", 5, up_case(lambda m: m.mutate_many(r1.uploads[last]), "outsider")),
        ("meta", 3, up_case(lambda m: _meta_edit(m, r1.uploads[last]), "meta")),
        ("blob", 2, up_case(lambda m: _blob_edit(m, r1.uploads[last], up_others), "blob")),
        ("replayed upload", 3, up_case(lambda m: _relabel(
            m, m.rng.choice(up_others), sender=client_role(last), round=r1.t,
            session=A.session),
            "replayed upload")),
        ("foreign", 1, up_case(lambda m: m.rng.choice(m.pools.messages), "foreign")),
    ], weight=1.5))

    # -- step 1b/1c: masks for the seed boxes, and the server reading them --------------
    honest_boxes = {i: wire.decode(r1.uploads[i]).blobs[1] for i in range(K)}

    def masks_call(req: Any) -> Any:
        dec = clone_decryptor(r1.dec_before_masks)
        reply = wire.decode(dec.mask_ciphertexts(req))
        msg = wire.decode(req)
        return msg.meta["clients"], msg.meta["chunks"], list(msg.blobs), reply

    def masks_oracle(out: Any) -> str | None:
        clients, chunks, blobs, reply = out
        for i in reply.meta["clients"]:
            a = clients.index(i)
            if blobs[3 * a * chunks] != honest_boxes[i]:
                return f"a mask served for client {i} on a box it did not sign"
        if len(reply.blobs) != chunks * len(reply.meta["clients"]):
            return "a mask reply of the wrong size"
        return None

    targets.append(Target("SecurePFLDecryptor.mask_ciphertexts", masks_call, _with_oracle(
        _standard(lambda m: r1.mask_request, lambda: [r0.mask_request, rb.mask_request],
                  lambda m, d: _relabel(m, d, session=A.session, round=r1.t)),
        masks_oracle)))

    def receive_masks_call(masks: Any) -> Any:
        srv = clone_server(r1.srv_after_mask_request)
        srv.receive_masks(masks)
        present = srv._present  # noqa: SLF001
        if not set(present) <= set(range(K)) or len(present) < 2:
            raise AssertionError(f"the server took masks for {present}")
        return present

    targets.append(Target("SecurePFLServer.receive_masks", receive_masks_call, _standard(
        lambda m: r1.masks, lambda: [r0.masks, rb.masks],
        lambda m, d: _relabel(m, d, session=A.session, round=r1.t)), weight=0.5))

    # -- step 3: the decryptor's refresh of the server's Gram request --------------------
    def refresh_call(gram: Any) -> Any:
        return clone_decryptor(r1.dec_before_refresh).refresh(gram)

    targets.append(Target("SecurePFLDecryptor.refresh", refresh_call, _standard(
        lambda m: r1.gram, lambda: [r0.gram, rb.gram],
        lambda m, d: _relabel(m, d, session=A.session, round=r1.t))))

    # -- step 4: the server reads the refresh (a sign evaluation when accepted) ----------
    def compare_call(refreshed: Any) -> Any:
        srv = clone_server(r1.srv_after_gram)
        srv.compare(refreshed)
        return srv.validity()

    targets.append(Target("SecurePFLServer.compare", compare_call, _standard(
        lambda m: r1.refreshed, lambda: [r0.refreshed, rb.refreshed],
        lambda m, d: _relabel(m, d, session=A.session, round=r1.t)), weight=0.5))

    # -- step 5: reveal requests and replies -----------------------------------------------
    valid1 = r1.valid

    def reveal_call(req: Any) -> Any:
        dec = clone_decryptor(r1.dec_after_refresh)
        before = dec.revealed_bits()
        reply = dec.reveal(req)
        asked = [tuple(p) for p in wire.decode(req).meta["pairs"]]
        return asked, wire.decode(reply).meta["bits"], dec.revealed_bits() - before

    def reveal_oracle(out: Any) -> str | None:
        asked, bits, n = out
        if len(bits) != len(asked) or n != len(asked) or len(set(asked)) != len(asked):
            return f"{len(bits)} bits for {len(asked)} pairs"
        if not all(valid1[i] and valid1[j] for i, j in asked):
            return "a bit of a pair with an invalid client"
        return None

    def pairs_request(m: Mutator) -> bytes:
        _, req, _, _ = m.rng.choice(r1.reveals)
        msg = wire.decode(req)
        pairs = [list(p) for p in msg.meta["pairs"]]
        op = m.rng.randrange(5)
        if op == 0:
            pairs = pairs + pairs[:1]
        elif op == 1:
            pairs = [[INVALID, 0]] + pairs
        elif op == 2:
            pairs = [[i, j] for i in range(K + 1) for j in range(K + 1) if i != j]
        elif op == 3:
            pairs = [[m.rng.choice((0, 1, -1, K, 2**63, 1.0, None)), 1]]
        else:
            pairs = pairs * 50
        return _encode_loose(msg.kind, {**msg.meta, "pairs": pairs}, list(msg.blobs))

    rev_std = _standard(lambda m: m.rng.choice(r1.reveals)[1],
                        lambda: [x[1] for x in r0.reveals + rb.reveals],
                        lambda m, d: _relabel(m, d, session=A.session, round=r1.t))
    targets.append(Target("SecurePFLDecryptor.reveal", reveal_call, _with_oracle(
        [*rev_std, ("pairs", 3, pairs_request)], reveal_oracle)))

    def read_bits_call(x: tuple[int, Any]) -> Any:
        k, reply = x
        pairs, _, _, batch = r1.reveals[k]
        srv = clone_server(r1.srv_after_compare)
        srv._batch = batch  # noqa: SLF001 - the state the server had when it asked
        bits = srv.read_bits(reply, pairs)
        if len(bits) != len(pairs) or not all(isinstance(b, bool) for b in bits):
            raise AssertionError(f"{len(bits)} bits for {len(pairs)} pairs")
        return bits

    def bits_prod(fn: Callable[[Mutator, bytes], bytes]) -> Callable[[Mutator], Any]:
        def make(m: Mutator) -> tuple[int, bytes]:
            k = m.rng.randrange(len(r1.reveals))
            return k, fn(m, r1.reveals[k][2])
        return make

    bit_others = [x[2] for x in r0.reveals + rb.reveals + r1.reveals]
    targets.append(Target("SecurePFLServer.read_bits", read_bits_call, [
        ("outsider", 5, bits_prod(lambda m, d: m.mutate_many(d))),
        ("meta", 3, bits_prod(_meta_edit)),
        ("replay", 2, bits_prod(lambda m, d: m.rng.choice(bit_others))),
        ("relabelled", 2, bits_prod(lambda m, d: _relabel(
            m, m.rng.choice(bit_others), session=A.session, round=r1.t))),
        ("foreign", 1, bits_prod(lambda m, d: m.rng.choice(m.pools.messages))),
    ], weight=1.5))

    # -- step 6: results ---------------------------------------------------------------
    def unmask_call(req: Any) -> Any:
        dec = clone_decryptor(r1.dec_before_results)
        box = dec.unmask_for_client(req)
        (i,) = _ctx(req).index
        return i, wire.decode(box).meta

    def unmask_oracle(out: Any) -> str | None:
        i, meta = out
        if context_of(meta).index != (i,):
            return "a box for another client than the request's"
        if (meta.get("own") is True) == valid1[i]:
            return "a decryption for an invalid client, or none for a valid one"
        return None

    res_std = _standard(lambda m: m.rng.choice(r1.result_requests),
                        lambda: [*r0.result_requests, *rb.result_requests],
                        lambda m, d: _relabel(m, d, session=A.session, round=r1.t))
    targets.append(Target("SecurePFLDecryptor.unmask_for_client", unmask_call, _with_oracle(
        [*res_std, ("other client", 2, lambda m: _relabel(
            m, r1.result_requests[m.rng.randrange(K)], index=[m.rng.randrange(K)]))],
        unmask_oracle)))

    def deliver_call(x: tuple[int, Any]) -> Any:
        i, box = x
        out = clone_server(r1.srv_after_aggregate).deliver(i, box)
        if _ctx(out).recipient != client_role(i):
            raise AssertionError("a result for another client")
        return out

    def deliver_prod(fn: Callable[[Mutator, bytes], bytes]) -> Callable[[Mutator], Any]:
        def make(m: Mutator) -> tuple[int, bytes]:
            i = m.rng.randrange(K)
            return i, fn(m, r1.boxes[i])
        return make

    box_others = [*r0.boxes, *rb.boxes, *r1.boxes]
    targets.append(Target("SecurePFLServer.deliver", deliver_call, [
        ("outsider", 5, deliver_prod(lambda m, d: m.mutate_many(d))),
        ("meta", 3, deliver_prod(_meta_edit)),
        ("blob", 2, deliver_prod(lambda m, d: _blob_edit(m, d, box_others))),
        ("replay", 3, deliver_prod(lambda m, d: _relabel(
            m, m.rng.choice(box_others), session=A.session, round=r1.t,
            index=_ctx(d).index))),
        ("foreign", 1, deliver_prod(lambda m, d: m.rng.choice(m.pools.messages))),
    ]))

    def finish_client(x: tuple[int, Any]) -> Any:
        i, result = x
        return i, copy.copy(r1.clients_before_finish[i]).finish(result)

    def finish_oracle(out: Any) -> str | None:
        i, model = out
        if not np.array_equal(model, r1.personalised[i]):
            return f"client {i} accepted a result other than its honest one"
        return None

    res_others = [*r0.results, *rb.results, *r1.results]

    def finish_prod(fn: Callable[[Mutator, bytes], bytes], name: str
                    ) -> Callable[[Mutator], Case]:
        def make(m: Mutator) -> Case:
            i = m.rng.randrange(K)
            return Case((i, fn(m, r1.results[i])), name, finish_oracle)
        return make

    targets.append(Target("SecurePFLClient.finish", finish_client, [
        ("outsider", 5, finish_prod(lambda m, d: m.mutate_many(d), "outsider")),
        ("meta", 3, finish_prod(_meta_edit, "meta")),
        ("blob", 2, finish_prod(lambda m, d: _blob_edit(m, d, res_others), "blob")),
        ("replay", 3, finish_prod(lambda m, d: _relabel(
            m, m.rng.choice(res_others), session=A.session, round=r1.t,
            recipient=_ctx(d).recipient), "replay")),
        ("own", 2, finish_prod(lambda m, d: _relabel(m, d, own=True), "own")),
        ("foreign", 1, finish_prod(lambda m, d: m.rng.choice(m.pools.messages), "foreign")),
    ], weight=1.5))
    assert [t.name for t in targets] == list(PFL_TARGETS)
    return targets


# ---------------------------------------------------------------------- metadata cases
PFLMetaCase = tuple[str, dict[str, Any], Callable[[dict[str, Any]], Case]]


def pfl_meta_cases(w: PFLWorld) -> dict[str, PFLMetaCase]:
    """For each Priv-PFL entry point: the metadata of one honest message it reads and a
    function that rebuilds the input around other metadata (blobs unchanged)."""
    r1 = w.a.rounds[1]

    def rebuild(data: bytes) -> Callable[[dict[str, Any]], bytes]:
        msg = wire.decode(data)
        return lambda meta: _encode_loose(msg.kind, meta, list(msg.blobs))

    def meta(data: bytes) -> dict[str, Any]:
        return dict(wire.decode(data).meta)

    def case(name: str, data: bytes, wrap: Callable[[bytes], Any] = lambda b: b,
             oracle: Callable[[Any], str | None] | None = None) -> PFLMetaCase:
        rb = rebuild(data)
        return name, meta(data), lambda m: Case(wrap(rb(m)), "sweep", oracle)

    def finish_oracle(out: Any) -> str | None:
        i, model = out
        ok = np.array_equal(model, r1.personalised[i])
        return None if ok else f"client {i} accepted a result other than its honest one"

    k = len(r1.reveals) - 1
    return {
        "SecurePFLServer.register": case("SecurePFLServer.register", w.a.registers[1]),
        "SecurePFLDecryptor.register": case("SecurePFLDecryptor.register",
                                            w.a.registers[1]),
        "SecurePFLClient.receive_decryptor_key": case(
            "SecurePFLClient.receive_decryptor_key", w.a.announce),
        "SecurePFLServer.receive": case("SecurePFLServer.receive", r1.uploads[-1]),
        "SecurePFLDecryptor.mask_ciphertexts": case("SecurePFLDecryptor.mask_ciphertexts",
                                                    r1.mask_request),
        "SecurePFLServer.receive_masks": case("SecurePFLServer.receive_masks", r1.masks),
        "SecurePFLDecryptor.refresh": case("SecurePFLDecryptor.refresh", r1.gram),
        "SecurePFLServer.compare": case("SecurePFLServer.compare", r1.refreshed),
        "SecurePFLDecryptor.reveal": case("SecurePFLDecryptor.reveal", r1.reveals[0][1]),
        "SecurePFLServer.read_bits": case("SecurePFLServer.read_bits", r1.reveals[k][2],
                                          lambda b: (k, b)),
        "SecurePFLDecryptor.unmask_for_client": case(
            "SecurePFLDecryptor.unmask_for_client", r1.result_requests[0]),
        "SecurePFLDecryptor.unmask_for_client[own]": case(
            "SecurePFLDecryptor.unmask_for_client", r1.result_requests[INVALID]),
        "SecurePFLServer.deliver": case("SecurePFLServer.deliver", r1.boxes[1],
                                        lambda b: (1, b)),
        "SecurePFLServer.deliver[own]": case("SecurePFLServer.deliver", r1.boxes[INVALID],
                                             lambda b: (INVALID, b)),
        "SecurePFLClient.finish": case("SecurePFLClient.finish", r1.results[2],
                                       lambda b: (2, b), finish_oracle),
        "SecurePFLClient.finish[own]": case("SecurePFLClient.finish", r1.results[INVALID],
                                            lambda b: (INVALID, b), finish_oracle),
    }
