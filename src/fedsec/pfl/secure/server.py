"""Priv-PFL's server (never holds a secret key): verifies uploads (step 1), turns them into
ciphertexts with the decryptor's encryptions of the pads (1b-1c), computes the masked Gram
entries (2), removes the masks and evaluates the comparisons (4), runs Algorithm 1 with
the decryptor's bits (5) and Eq. 2 (6). See :mod:`fedsec.pfl.secure` for the protocol
and what the server learns."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from fedsec._validation import check_int, check_real
from fedsec.crypto.ckks import Ciphertext, CKKSContext
from fedsec.crypto.drbg import SEED_BYTES, SystemRandomSource
from fedsec.crypto.identity import Roster
from fedsec.crypto.keys import seal_to
from fedsec.crypto.rawpoly import add_to_first_poly, constant_term_samples, plaintext_from_ntt
from fedsec.crypto.sign import step_encrypted
from fedsec.errors import ProtocolError
from fedsec.pfl.secure.common import (
    _MAX_CLIENTS,
    _OWN,
    _SEAL_OVERHEAD,
    DECRYPTOR,
    PROTOCOL,
    SERVER,
    SERVER_MAX_MESSAGE_BYTES,
    UPLOAD_LEVEL,
    SecurePFLConfig,
    _box_context,
    _claims_bytes,
    _Encoding,
    _fresh_level,
    _gram_entries,
    _n_chunks,
    _pairs_of,
    _register,
    _result_mask,
    _seed_payload,
    _timed,
    _u64_blob,
    _u64_from,
    client_name,
    client_role,
    margin_scale,
)
from fedsec.pfl.selection import SelectionResult, efficient_selection
from fedsec.protocol import fields, wire
from fedsec.protocol.accounting import Clock
from fedsec.protocol.binding import Binding
from fedsec.protocol.roles import receives

__all__ = ["SecurePFLServer"]


@dataclass
class _Upload:
    xs: list[NDArray[np.uint64]]  # the padded plaintexts p_i + M_i (residues, NTT form)
    boxes: list[bytes]  # per chunk: sealed seed, signature, digest of the padded plaintext
    d: int
    norm: float
    bound: float
    sigma: float
    size: int
    cts: list[Ciphertext] = field(default_factory=list)  # Enc(p_i) once unmasked


class SecurePFLServer:
    """The server: Gram matrix, comparisons, Algorithm 1 and Eq. 2 on ciphertexts.

    Parameters
    ----------
    context : CKKSContext
        Public material from the key set-up (public, relinearization, conjugation keys).
    session : str
        The key set-up's session id.
    n_clients : int
    config : SecurePFLConfig
    roster : Roster
        To verify the clients' signed registrations and mask seeds.
    """

    def __init__(self, context: CKKSContext, session: str, n_clients: int,
                 config: SecurePFLConfig, *, roster: Roster) -> None:
        if context.has_secret_key:
            raise ValueError("the server must not hold the CKKS secret key")
        self._ctx = context
        self._session = session
        self._roster = roster
        self._k = check_int(n_clients, "n_clients", "SecurePFLServer", min_value=2,
                            max_value=_MAX_CLIENTS)
        self._config = config
        self._enc = _Encoding.of(context, config.mask_bits)
        self._bind = Binding(session, PROTOCOL, SERVER)
        #: This role's seconds by kind of work.
        self.clock = Clock()
        self._rand = SystemRandomSource()
        self._clients: dict[int, bytes] = {}
        self._round = -1
        self._uploads: dict[int, _Upload] = {}  # this round's accepted uploads
        self._present: tuple[int, ...] = ()  # clients of the round being computed
        self._closed = -1  # the last round whose uploads were closed
        self._pending_masks: tuple[int, ...] | None = None
        self._masks: dict[tuple[int, int], int] = {}
        self._cmp: list[Ciphertext] = []
        self._valid: NDArray[np.bool_] = np.zeros(0, dtype=bool)
        self._batch = 0
        self._sign_evaluations = 0

    @property
    def session(self) -> str:
        return self._session

    @property
    def n_clients(self) -> int:
        return self._k

    @receives("pfl/register")
    def register(self, message: bytes) -> int:
        """Record a client's signed X25519 result key (the runner relays it to the
        decryptor unchanged)."""
        return _register(self._bind, message, self._roster, self._k, self._clients)

    def validity(self) -> NDArray[np.bool_]:
        """Which clients are valid this round (after :meth:`compare`)."""
        return self._valid.copy()

    def sign_evaluations(self) -> int:
        """Homomorphic sign evaluations so far in this session."""
        return self._sign_evaluations

    # -------------------------------------------------------------- step 1
    @receives("pfl/masked-upload")
    @_timed("other")
    def receive(self, sender: int, upload: bytes, *, round_index: int,
                sigma: float, norm_bound: float, model_size: int) -> None:
        """Accept client ``sender``'s upload for round ``round_index``, or raise.

        ``sigma``, ``norm_bound`` and ``model_size`` are the round's public
        ``sigma_sender(t)``, ``B`` and ``d`` as the server knows them (required); an
        upload that claims other values, is malformed, or whose seed boxes are not signed
        by ``sender`` for this session, round and chunk is refused (``ProtocolError``) and
        the client is then invalid this round (as one that did not upload): the round
        goes on for the others. Were the client's sigma taken, a malicious client
        claiming a huge ``sigma`` would inflate ``M`` (the margin scale) and push every
        honest margin into the comparison's ``2^-alpha`` band, so honest clients would
        accept it by CKKS noise (tests/pfl/test_secure_attacks.py).
        """
        d_round = check_int(model_size, "model_size", "SecurePFLServer.receive",
                            min_value=1, max_value=2 * self._enc.slots * 64)
        msg = wire.decode(upload, expect="pfl/masked-upload",
                          max_bytes=SERVER_MAX_MESSAGE_BYTES)
        self._bind.check(msg.meta, step="masked-upload", sender=client_role(sender),
                         round=round_index, what="upload")
        if round_index < self._round or round_index == self._closed:
            raise ProtocolError("an upload of a past round")
        if round_index > self._round:
            self._round, self._uploads, self._present = round_index, {}, ()
        if sender in self._uploads:
            raise ProtocolError("an upload from a client that already uploaded (twice)")
        if sender not in self._clients:
            raise ProtocolError("an upload from a client that did not register")
        d = fields.integer(msg.meta, "d", 1, 2 * self._enc.slots * 64)
        if d != d_round:
            raise ProtocolError("an upload claims another model size than the round's")
        chunks = _n_chunks(d, self._enc.slots)
        if len(msg.blobs) != 3 * chunks:
            raise ProtocolError("an upload with the wrong number of parts")
        norm = fields.real(msg.meta, "norm", 0.0, 1e300)
        bound = fields.real(msg.meta, "bound", 1e-300, 1e300)
        claimed_sigma = fields.real(msg.meta, "sigma", 1e-12, 1e6)
        if claimed_sigma != float(sigma):
            raise ProtocolError("an upload claims another sigma than the round's")
        if bound != float(norm_bound):
            raise ProtocolError("an upload claims another norm bound than the round's")
        pid = self._ctx.parms_id_at_level(UPLOAD_LEVEL)
        primes = self._ctx.level_primes(pid)
        n = self._enc.n
        q = np.repeat(np.asarray(primes, dtype=np.uint64), n)
        xs = []
        for blob in msg.blobs[:chunks]:
            x = _u64_from(blob, len(primes) * n, "masked upload")
            if np.any(x >= q):
                raise ProtocolError("masked upload residues out of range")
            xs.append(x)
        claims = _claims_bytes(d, norm, bound, claimed_sigma)
        boxes: list[bytes] = []
        for c in range(chunks):
            box, sig = msg.blobs[chunks + 2 * c], msg.blobs[chunks + 2 * c + 1]
            if len(box) != SEED_BYTES + _SEAL_OVERHEAD:
                raise ProtocolError("malformed seed box")
            x_digest = hashlib.sha256(msg.blobs[c]).digest()
            self._roster.verify(client_name(sender), "pfl/seed", _seed_payload(
                self._session, round_index, sender, c, box, x_digest, claims), sig)
            boxes += [box, sig, x_digest]
        self._uploads[sender] = _Upload(xs, boxes, d, norm, bound, claimed_sigma,
                                        len(upload))

    @_timed("other")
    def mask_request(self) -> bytes:
        """Step 1b: close the round's uploads; relay every accepted client's sealed seeds
        to the decryptor. Clients without an accepted upload are invalid this round."""
        present = sorted(self._uploads)
        if self._closed == self._round or len(present) < 2:
            raise ProtocolError("fewer than two clients' uploads were accepted this round")
        self._closed = self._round
        chunks = {len(self._uploads[i].xs) for i in present}
        if len(chunks) != 1:  # pragma: no cover - receive checks d against the round's
            raise ProtocolError("the clients disagree on the model size")
        blobs = [b for i in present for b in self._uploads[i].boxes]
        self._pending_masks = tuple(present)
        claims = [[u.d, u.norm, u.bound, u.sigma] for u in (self._uploads[i] for i in present)]
        meta = self._bind.bind({"clients": present, "chunks": chunks.pop(),
                                "claims": claims}, step="mask-request", to=DECRYPTOR,
                               round=self._round)
        return wire.encode("pfl/mask-request", meta, blobs)

    @receives("pfl/masks")
    @_timed("arithmetic")
    def receive_masks(self, reply: bytes) -> None:
        """Step 1c: add each padded plaintext ``x_i = p_i + M_i`` to the decryptor's
        ``Enc(-M_i)``: ``Enc(p_i)``. Clients the decryptor refused are invalid."""
        msg = wire.decode(reply, expect="pfl/masks", max_bytes=SERVER_MAX_MESSAGE_BYTES)
        self._bind.check(msg.meta, step="masks", sender=DECRYPTOR, round=self._round,
                         what="masks")
        asked = self._pending_masks
        if asked is None:
            raise ProtocolError("masks without a pending mask request")
        ok = list(fields.integers(msg.meta, "clients", 0, _MAX_CLIENTS - 1))
        refused = list(fields.integers(msg.meta, "refused", 0, _MAX_CLIENTS - 1))
        if ok != sorted(ok) or sorted(ok + refused) != list(asked):
            raise ProtocolError("malformed masks")
        chunks = len(self._uploads[asked[0]].xs)
        if len(msg.blobs) != chunks * len(ok):
            raise ProtocolError("malformed masks")
        if len(ok) < 2:
            raise ProtocolError("fewer than two clients' uploads were accepted this round")
        pid = self._ctx.parms_id_at_level(UPLOAD_LEVEL)
        scale = self._enc.upload_scale
        for a, i in enumerate(ok):
            up = self._uploads[i]
            cts = []
            for c in range(chunks):
                neg = self._ctx.deserialize(msg.blobs[a * chunks + c], scale=scale)
                if neg.parms_id() != pid:
                    raise ProtocolError(f"a mask must be at level {UPLOAD_LEVEL}")
                x = plaintext_from_ntt(self._ctx, up.xs[c], level=UPLOAD_LEVEL, scale=scale)
                cts.append(self._ctx.add_plain(neg, x))
            up.cts = cts
        self._pending_masks = None
        self._present = tuple(int(i) for i in ok)

    # -------------------------------------------------------------- step 2
    @_timed("arithmetic")
    def gram_request(self) -> bytes:
        """The constant-term samples of every Gram entry (masked off the diagonal)."""
        present = self._present
        if len(present) < 2 or any(not self._uploads[i].cts for i in present):
            raise ProtocolError("the round's uploads are not unmasked")
        k = len(present)
        ups = [self._uploads[i] for i in present]
        if len({(u.d, u.bound) for u in ups}) != 1:  # pragma: no cover - receive checks
            raise ProtocolError("the clients disagree on the model size or the norm bound")
        b = ups[0].bound
        ctx = self._ctx
        conj = [[ctx.conjugate(c) for c in u.cts] for u in ups]
        prods = []
        for i, j in _gram_entries(k):
            acc = None
            for a, bb in zip(ups[i].cts, conj[j], strict=True):
                p = ctx.multiply(a, bb, relinearize=False, rescale=False)
                acc = p if acc is None else ctx.add(acc, p)
            assert acc is not None
            prods.append(ctx.rescale(ctx.relinearize(acc)))
        first, rows = constant_term_samples(ctx, prods)
        q0 = self._enc.q0
        self._masks = {}
        for idx, (i, j) in enumerate(_gram_entries(k)):
            if i == j:
                continue
            r = self._rand.integer(-self._enc.mask_range, self._enc.mask_range + 1)
            self._masks[(present[i], present[j])] = r
            first[idx] = np.uint64((int(first[idx]) + r) % q0)
        meta = self._bind.bind({"clients": list(present), "chunks": len(ups[0].cts),
                                "sigmas": [u.sigma for u in ups],
                                "norms_sq": [min(u.norm / b, 1e150) ** 2 for u in ups]},
                               step="gram", to=DECRYPTOR, round=self._round)
        return wire.encode("pfl/gram", meta, [_u64_blob(first), _u64_blob(rows)])

    # -------------------------------------------------------------- step 4
    @receives("pfl/refreshed")
    @_timed("arithmetic")
    def compare(self, refreshed: bytes) -> None:
        """Remove the masks and evaluate every comparison (one SIMD sign per ``slots``)."""
        msg = wire.decode(refreshed, expect="pfl/refreshed",
                          max_bytes=SERVER_MAX_MESSAGE_BYTES)
        self._bind.check(msg.meta, step="refreshed", sender=DECRYPTOR, round=self._round,
                         what="refresh")
        present = self._present
        if not present:
            raise ProtocolError("a refresh without a pending Gram request")
        valid = msg.meta.get("valid")
        if not isinstance(valid, list) or len(valid) != len(present) or \
                not all(isinstance(v, bool) for v in valid):
            raise fields.malformed("valid")
        ups = [self._uploads[i] for i in present]
        published_ok = np.array([u.norm <= u.bound for u in ups])
        self._valid = np.zeros(self._k, dtype=bool)  # absent or refused clients: invalid
        self._valid[list(present)] = np.asarray(valid, dtype=bool) & published_ok
        sigmas = np.array([u.sigma for u in ups])
        m = margin_scale(sigmas)
        pairs = _pairs_of(present)
        rho = np.array([2.0 * self._masks[(min(i, j), max(i, j))] / self._enc.unit / m
                        for i, j in pairs])
        slots = self._enc.slots
        if len(msg.blobs) != math.ceil(len(pairs) / slots):
            raise ProtocolError("malformed refresh")
        level = _fresh_level(self._config.sign_alpha, self._config.comparison)
        blinded = self._config.comparison == "blinded"
        self._cmp = []
        self._margins: list[Ciphertext] = []  # x = m / M, encrypted (kept for tests)
        for c, blob in enumerate(msg.blobs):
            ct = self._ctx.deserialize(blob, scale=self._ctx.scale)
            if self._ctx.level_of(ct) != level:
                raise ProtocolError(f"a refreshed ciphertext must be at level {level}")
            pt = self._ctx.encode(rho[c * slots:(c + 1) * slots], scale=ct.scale,
                                 parms_id=ct.parms_id())
            x = self._ctx.sub_plain(ct, pt)
            self._margins.append(x)
            # zero every pair with an invalid client: its margin may be far outside the
            # domain, where the polynomial overflows and corrupts every slot
            keep = np.array([float(self._valid[i] and self._valid[j])
                             for i, j in pairs[c * slots:(c + 1) * slots]])
            if blinded:  # secret positive factors 2^(U * blind_bits), fresh per slot
                keep = keep * 2.0 ** (self._rand.uniform(keep.size)
                                      * self._config.blind_bits)
            q = self._ctx.rescale_prime(x)
            keep_pt = self._ctx.encode(keep, scale=float(q), parms_id=x.parms_id())
            x = self._ctx.rescale(self._ctx.multiply_plain(x, keep_pt, rescale=False))
            CKKSContext.snap_scale(x, self._ctx.scale, rtol=1e-6)
            if blinded:
                self._cmp.append(x)
                continue
            self._cmp.append(step_encrypted(self._ctx, x, self._config.sign_alpha,
                                            keep_levels=1))
            self._sign_evaluations += 1
        self._batch = 0

    # -------------------------------------------------------------- step 5
    @_timed("arithmetic")
    def reveal_request(self, pairs: Sequence[tuple[int, int]]) -> bytes:
        """Ask the decryptor for the comparison bits of ``pairs`` (all other slots are
        zeroed before they leave the server)."""
        slots = self._enc.slots
        index = {p: a for a, p in enumerate(_pairs_of(self._present))}
        by_ct: dict[int, list[int]] = {}
        for p in pairs:
            a = index[(int(p[0]), int(p[1]))]
            by_ct.setdefault(a // slots, []).append(a % slots)
        blobs = []
        for c in sorted(by_ct):
            sel = np.zeros(slots)
            sel[by_ct[c]] = 1.0
            ct = self._cmp[c]
            q = self._ctx.rescale_prime(ct)
            pt = self._ctx.encode(sel, scale=float(q), parms_id=ct.parms_id())
            z = self._ctx.rescale(self._ctx.multiply_plain(ct, pt, rescale=False))
            blobs.append(self._ctx.serialize(z))
        self._batch += 1
        meta = self._bind.bind({"pairs": [[int(i), int(j)] for i, j in pairs]},
                               step="reveal", to=DECRYPTOR, round=self._round,
                               index=(self._batch,))
        return wire.encode("pfl/reveal", meta, blobs)

    @receives("pfl/bits")
    def read_bits(self, reply: bytes, pairs: Sequence[tuple[int, int]]) -> list[bool]:
        """The decryptor's bits for ``pairs`` (the last reveal request's)."""
        msg = wire.decode(reply, expect="pfl/bits", max_bytes=1 << 20)
        self._bind.check(msg.meta, step="bits", sender=DECRYPTOR, round=self._round,
                         index=(self._batch,), what="comparison bits")
        bits = fields.integers(msg.meta, "bits", 0, 1, length=len(pairs))
        return [bool(v) for v in bits]

    def select(self, ask: Callable[[bytes], bytes]) -> SelectionResult:
        """Step 5: Algorithm 1 on the valid clients; ``ask`` carries each reveal request
        to the decryptor and returns its reply."""
        def oracle(pairs: Sequence[tuple[int, int]]) -> list[bool]:
            return self.read_bits(ask(self.reveal_request(pairs)), pairs)

        return efficient_selection(self.keys(), oracle, neighbours=self.neighbours())

    def keys(self) -> list[float]:
        """Algorithm 1's keys ``sigma_i^2 n_i^2`` (published values)."""
        return [u.sigma ** 2 * u.norm ** 2 if (u := self._uploads.get(i)) is not None
                and self._valid[i] else 0.0 for i in range(self._k)]

    def neighbours(self) -> list[frozenset[int]]:
        """Valid clients see every other valid client; invalid ones nobody."""
        ok = [i for i in range(self._k) if self._valid[i]]
        return [frozenset(j for j in ok if j != i) if self._valid[i] else frozenset()
                for i in range(self._k)]

    # -------------------------------------------------------------- step 6
    @_timed("arithmetic")
    def aggregate(self, selection: SelectionResult, alpha: float) -> list[bytes]:
        """Eq. 2 for every client, masked by a uniform polynomial; one request per client
        for the decryptor (in client order)."""
        a = check_real(alpha, "alpha", "SecurePFLServer.aggregate", ge=0.0, le=1.0)
        self._result_seeds: dict[int, list[bytes]] = {}
        out = []
        for i in range(self._k):
            if not self._valid[i]:  # its own model, which it holds: nothing to decrypt
                self._result_seeds[i] = []
                meta = self._bind.bind({"own": True}, step="result-request", to=DECRYPTOR,
                                       round=self._round, index=(i,))
                out.append(wire.encode("pfl/result-request", meta, []))
                continue
            s_i = sorted(selection.accepted[i])
            own = self._uploads[i].cts
            blobs = []
            seeds = []
            for c, ct_i in enumerate(own):
                q = self._ctx.rescale_prime(ct_i)
                if s_i:
                    acc = self._ctx.add_many([self._uploads[j].cts[c] for j in s_i])
                    t1 = self._ctx.multiply_plain(ct_i, self._ctx.encode_constant(
                        a, scale=float(q), parms_id=ct_i.parms_id()), rescale=False)
                    t2 = self._ctx.multiply_plain(acc, self._ctx.encode_constant(
                        (1.0 - a) / len(s_i), scale=float(q), parms_id=acc.parms_id()),
                        rescale=False)
                    res = self._ctx.rescale(self._ctx.add(t1, t2))
                else:
                    one = self._ctx.encode_constant(1.0, scale=float(q),
                                                    parms_id=ct_i.parms_id())
                    res = self._ctx.rescale(self._ctx.multiply_plain(ct_i, one, rescale=False))
                CKKSContext.snap_scale(res, self._enc.upload_scale)
                seed = self._rand.random_bytes(SEED_BYTES)
                mask = _result_mask(seed, self._enc.q0, self._enc.n)
                blobs.append(self._ctx.serialize(add_to_first_poly(self._ctx, res, mask)))
                seeds.append(seed)
            self._result_seeds[i] = seeds
            meta = self._bind.bind({}, step="result-request", to=DECRYPTOR,
                                   round=self._round, index=(i,))
            out.append(wire.encode("pfl/result-request", meta, blobs))
        return out

    @receives("pfl/result-box")
    @_timed("other")
    def deliver(self, i: int, box: bytes) -> bytes:
        """Forward the decryptor's sealed result with the sealed mask seed to client i."""
        msg = wire.decode(box, expect="pfl/result-box", max_bytes=SERVER_MAX_MESSAGE_BYTES)
        got = self._bind.check(msg.meta, step="result-box", sender=DECRYPTOR,
                               round=self._round, index=None, what="result box")
        if got.index != (i,) or i not in self._clients:
            raise ProtocolError("a result box for another client")
        seeds = self._result_seeds.get(i)
        own = fields.optional(msg.meta, "own") and fields.flag(msg.meta, "own")
        if seeds is None or own != (not self._valid[i]):
            raise ProtocolError("a result box without a pending result")
        size = len(_OWN) if own else 8 * self._enc.n
        if len(msg.blobs) != (1 if own else len(seeds)) or any(
                len(b) != size + _SEAL_OVERHEAD for b in msg.blobs):
            raise ProtocolError("malformed result box")
        del self._result_seeds[i]
        blobs: list[bytes] = list(msg.blobs) if own else []
        for c, (sealed, seed) in enumerate(zip([] if own else msg.blobs, seeds, strict=True)):
            blobs += [sealed, seal_to(self._clients[i], seed, context=_box_context(
                b"mask", self._session, self._round, i, c))]
        meta = self._bind.bind({"own": True} if own else {}, step="result",
                               to=client_role(i), round=self._round)
        return wire.encode("pfl/result", meta, blobs)
