"""Priv-PFL's decryptor (the paper's trusted party, the only holder of the CKKS secret key):
announces its seed key, makes the pads' encryptions (step 1b), refreshes the masked Gram
entries into comparison inputs (step 3), reveals requested comparison bits (step 5) and
decrypts each client's masked result into a box sealed to that client (step 6). See
:mod:`fedsec.pfl.secure` for the protocol and what the decryptor learns."""

from __future__ import annotations

from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from numpy.typing import NDArray

from fedsec.crypto.drbg import SEED_BYTES
from fedsec.crypto.identity import Identity, Roster
from fedsec.crypto.keys import open_sealed, public_key_bytes, seal_to
from fedsec.crypto.keysetup import PartyKeys
from fedsec.crypto.rawpoly import (
    decrypt_constant_terms,
    plaintext_from_ntt,
    plaintext_ntt,
    secret_key_coeffs,
)
from fedsec.errors import ProtocolError
from fedsec.pfl.secure.common import (
    _MAX_CLIENTS,
    _OWN,
    DECRYPTOR,
    DECRYPTOR_MAX_MESSAGE_BYTES,
    DECRYPTOR_NAME,
    MASK_REQUEST_MAX_BYTES,
    PROTOCOL,
    SERVER,
    SERVER_MAX_MESSAGE_BYTES,
    UPLOAD_LEVEL,
    FloatArray,
    SecurePFLConfig,
    _box_context,
    _claims_bytes,
    _client_list,
    _decryptor_key_payload,
    _Encoding,
    _fresh_level,
    _gram_entries,
    _mod_neg,
    _pairs,
    _pairs_of,
    _read_claims,
    _register,
    _seed_payload,
    _u64_blob,
    _u64_from,
    _upload_mask,
    client_name,
    margin_scale,
)
from fedsec.protocol import fields, wire
from fedsec.protocol.accounting import Clock
from fedsec.protocol.binding import BROADCAST, Binding, context_of
from fedsec.protocol.roles import receives

__all__ = ["SecurePFLDecryptor"]


class SecurePFLDecryptor:
    """The trusted party: the only holder of the CKKS secret key.

    Parameters
    ----------
    keys : PartyKeys
        The key set-up's holder keys (secret key).
    roster : Roster
        To verify the clients' signed result keys and mask seeds.
    config : SecurePFLConfig
        Its own policy: norm tolerance, precision, mask size.
    identity : Identity
        The decryptor's identity (``DECRYPTOR_NAME`` on the roster): signs its X25519 key
        for the clients' mask seeds.
    """

    def __init__(self, keys: PartyKeys, roster: Roster, config: SecurePFLConfig, *,
                 identity: Identity) -> None:
        if not keys.context.has_secret_key:
            raise ValueError("the decryptor needs the CKKS secret key")
        if identity.name != DECRYPTOR_NAME or DECRYPTOR_NAME not in roster:
            raise ValueError(f"The 'identity' parameter of SecurePFLDecryptor must be "
                             f"{DECRYPTOR_NAME!r} on the roster. Got {identity.name!r} "
                             f"instead.")
        self._keys = keys
        self._roster = roster
        self._identity = identity
        self._x = X25519PrivateKey.generate()
        self._config = config
        self._ctx = keys.context
        self._enc = _Encoding.of(self._ctx, config.mask_bits)
        self._bind = Binding(keys.session, PROTOCOL, DECRYPTOR)
        #: This role's seconds by kind of work.
        self.clock = Clock()
        self._s = secret_key_coeffs(self._ctx)
        self._clients: dict[int, bytes] = {}
        self._last_round = -1
        self._round: int | None = None
        self._k = 0
        self._chunks = 0
        self._valid: NDArray[np.bool_] = np.zeros(0, dtype=bool)
        self._revealed: set[tuple[int, int]] = set()
        self._norm_errors: FloatArray = np.zeros(0)
        self._results: set[int] = set()
        self._batches: set[int] = set()
        self._masked: tuple[int, tuple[int, ...], int] | None = None  # round, clients, chunks
        self._claims: dict[int, tuple[int, float, float, float]] = {}  # signed d, n, B, sigma
        self._present: tuple[int, ...] = ()
        self._revealed_bits = 0

    @property
    def session(self) -> str:
        return self._keys.session

    def announce(self) -> bytes:
        """Step 0 (once per session): the decryptor's X25519 key for the clients' mask
        seeds, signed by its identity and bound to the session (relayed by the server)."""
        x_pk = public_key_bytes(self._x.public_key())
        sig = self._identity.sign("pfl/decryptor-key",
                                 _decryptor_key_payload(self.session, x_pk))
        meta = self._bind.bind({}, step="decryptor-key", to=BROADCAST)
        return wire.encode("pfl/decryptor-key", meta, [x_pk, sig])

    @receives("pfl/register")
    def register(self, message: bytes) -> int:
        """Record a client's signed X25519 result key (relayed by the server)."""
        return _register(self._bind, message, self._roster, _MAX_CLIENTS, self._clients)

    def revealed_bits(self) -> int:
        """Comparison bits revealed so far in this session."""
        return self._revealed_bits

    def norm_errors(self) -> FloatArray:
        """``| decrypted ||u_i||^2 - published n_i^2 / B^2 |`` of the last round's
        clients (diagnostics of the norm check)."""
        return self._norm_errors.copy()

    def _round_of(self, meta: dict[str, Any], step: str, what: str) -> int:
        """The round a request of the server names, checked to be this session's."""
        t = context_of(meta).round
        self._bind.check(meta, step=step, sender=SERVER, round=t, what=what)
        if t < 0:
            raise fields.malformed("ctx")
        return t

    @receives("pfl/mask-request")
    def mask_ciphertexts(self, request: bytes) -> bytes:
        """Step 1b: for every client's sealed, signed seed, a fresh encryption of ``-M_i``
        under the secret key (seeded: half size), made by the decryptor itself.

        A seed box that does not open or whose signature (the client's roster identity,
        bound to session, round, client and chunk) does not verify refuses *that* client
        (listed in the reply's ``refused``; the server marks it invalid); a request that is
        malformed as a whole raises ``ProtocolError``.
        """
        msg = wire.decode(request, expect="pfl/mask-request",
                          max_bytes=MASK_REQUEST_MAX_BYTES)
        t = self._round_of(msg.meta, "mask-request", "mask request")
        if t <= self._last_round or (self._masked is not None and t <= self._masked[0]):
            raise ProtocolError("a mask request of a past round (replay)")
        chunks = fields.integer(msg.meta, "chunks", 1, 64)
        clients = _client_list(msg.meta, "clients", 1)
        claims = _read_claims(msg.meta, len(clients))
        if len(msg.blobs) != 3 * chunks * len(clients) or any(
                len(msg.blobs[3 * k + 2]) != 32 for k in range(chunks * len(clients))):
            raise ProtocolError("malformed mask request")
        pid = self._ctx.parms_id_at_level(UPLOAD_LEVEL)
        primes = self._ctx.level_primes(pid)
        n = self._enc.n
        ok: list[int] = []
        refused: list[int] = []
        blobs: list[bytes] = []
        for a, i in enumerate(clients):
            try:
                if i not in self._clients:
                    raise ProtocolError("a mask for a client that did not register")
                out = []
                for c in range(chunks):
                    box, sig, x_digest = msg.blobs[3 * (a * chunks + c):
                                                   3 * (a * chunks + c) + 3]
                    self._roster.verify(client_name(i), "pfl/seed", _seed_payload(
                        self.session, t, i, c, box, x_digest, _claims_bytes(*claims[a])),
                        sig)
                    seed = open_sealed(self._x, box, context=_box_context(
                        b"seed", self.session, t, i, c))
                    if len(seed) != SEED_BYTES:
                        raise ProtocolError("malformed mask seed")
                    neg = _mod_neg(_upload_mask(seed, primes, n, self.session, t, i, c),
                                   primes, n)
                    with self.clock("encryption"):
                        pt = plaintext_from_ntt(self._ctx, neg, level=UPLOAD_LEVEL,
                                                scale=self._enc.upload_scale)
                        out.append(self._ctx.encrypt_bytes(pt))
            except ProtocolError:
                refused.append(i)
                continue
            ok.append(i)
            blobs += out
        self._masked = (t, tuple(ok), chunks)
        self._claims = {i: claims[a] for a, i in enumerate(clients) if i in ok}
        meta = self._bind.bind({"clients": ok, "refused": refused}, step="masks", to=SERVER,
                               round=t)
        return wire.encode("pfl/masks", meta, blobs)

    @receives("pfl/gram")
    def refresh(self, request: bytes) -> bytes:
        """Step 3: decrypt the constant terms, check the norms, return the masked margins
        encrypted fresh at level ``sign_depth + 2`` and the validity bits."""
        msg = wire.decode(request, expect="pfl/gram", max_bytes=DECRYPTOR_MAX_MESSAGE_BYTES)
        t = self._round_of(msg.meta, "gram", "Gram request")
        if t <= self._last_round:
            raise ProtocolError("a Gram request of a past round (replay)")
        if self._masked is None or self._masked[0] != t:
            raise ProtocolError("a Gram request of a round without masks")
        present = _client_list(msg.meta, "clients", 2)
        _, masked, chunks = self._masked
        if fields.integer(msg.meta, "chunks", 1, 64) != chunks:
            raise ProtocolError("a Gram request of another model size")
        if not set(present) <= set(masked):
            raise ProtocolError("the round names clients that got no mask")
        k = len(present)
        sigmas = np.asarray(fields.reals(msg.meta, "sigmas", 1e-12, 1e6, length=k))
        nu = np.asarray(fields.reals(msg.meta, "norms_sq", 0.0, 1e300, length=k))
        signed = [self._claims[i] for i in present]
        if len({c[0] for c in signed}) != 1 or len({c[2] for c in signed}) != 1 or \
                list(sigmas) != [c[3] for c in signed] or \
                list(nu) != [min(c[1] / c[2], 1e150) ** 2 for c in signed]:
            raise ProtocolError("a Gram request with other values than the clients signed")
        entries = _gram_entries(k)
        n = self._enc.n
        first_blob, rows_blob = fields.blobs(msg.blobs, 2, what="Gram request")
        first = _u64_from(first_blob, len(entries), "Gram request")
        rows: NDArray[np.uint64] = fields.array(rows_blob, np.uint64, (len(entries), n),
                                                what="Gram request")
        with self.clock("decryption"):
            vals = decrypt_constant_terms(self._s, self._enc.q0, first, rows)
        g = np.zeros((k, k))
        for (i, j), v in zip(entries, vals, strict=True):
            g[i, j] = g[j, i] = v / self._enc.unit
        diag = np.diag(g).copy()
        tol = self._config.norm_tolerance
        #: |decrypted ||u_i||^2 - published n_i^2 / B^2| of the last round (diagnostics)
        self._norm_errors = np.abs(diag - nu)
        valid = (nu <= 1.0) & (self._norm_errors <= tol)
        m = margin_scale(sigmas)
        x = np.array([((sigmas[i] ** 2 - 1.0) * diag[i] - diag[j] + 2.0 * g[i, j]) / m
                      for i, j in _pairs(k)])
        pid = self._ctx.parms_id_at_level(_fresh_level(self._config.sign_alpha,
                                                      self._config.comparison))
        with self.clock("encryption"):
            blobs = [self._ctx.encrypt_bytes(x[a:a + self._enc.slots], parms_id=pid)
                     for a in range(0, len(x), self._enc.slots)]
        self._round, self._last_round, self._k, self._chunks = t, t, k, chunks
        self._present = present
        self._valid = np.zeros(_MAX_CLIENTS, dtype=bool)
        self._valid[list(present)] = valid
        self._revealed, self._results, self._batches = set(), set(), set()
        meta = self._bind.bind({"valid": [bool(v) for v in valid]}, step="refreshed",
                               to=SERVER, round=t)
        return wire.encode("pfl/refreshed", meta, blobs)

    @receives("pfl/reveal")
    def reveal(self, request: bytes) -> bytes:
        """Step 5: the rounded comparison bits of the pairs asked for, only those."""
        msg = wire.decode(request, expect="pfl/reveal", max_bytes=SERVER_MAX_MESSAGE_BYTES)
        if self._round is None:
            raise ProtocolError("a reveal request before the round's refresh")
        got = self._bind.check(msg.meta, step="reveal", sender=SERVER, round=self._round,
                               index=None, what="reveal request")
        if len(got.index) != 1 or not 0 <= got.index[0] <= 1 << 20:
            raise fields.malformed("ctx")
        batch = got.index[0]
        if batch in self._batches:
            raise ProtocolError("a reveal request replayed")
        k = self._k
        present = set(self._present)
        raw = msg.meta.get("pairs")
        if not isinstance(raw, list) or not raw or len(raw) > k * (k - 1):
            raise fields.malformed("pairs")
        pairs: list[tuple[int, int]] = []
        for p in raw:
            i, j = fields.integers({"pairs": p}, "pairs", 0, _MAX_CLIENTS - 1, length=2,
                                   distinct=True)
            if i not in present or j not in present:
                raise fields.malformed("pairs")
            if not (self._valid[i] and self._valid[j]):
                raise ProtocolError("a reveal request names an invalid client")
            if (i, j) in self._revealed or (i, j) in pairs:
                raise ProtocolError("a pair was asked for twice")
            pairs.append((i, j))
        slots = self._enc.slots
        index = {p: a for a, p in enumerate(_pairs_of(self._present))}
        cts_needed = sorted({index[p] // slots for p in pairs})
        if len(msg.blobs) != len(cts_needed):
            raise ProtocolError("malformed reveal request")
        values: dict[int, NDArray[np.complex128]] = {}
        for c, blob in zip(cts_needed, msg.blobs, strict=True):
            ct = self._ctx.deserialize(blob)
            if self._ctx.level_of(ct) != 0:  # what the comparison and the zeroing leave
                raise ProtocolError("a comparison ciphertext must be at level 0")
            with self.clock("decryption"):
                values[c] = self._ctx.decrypt(ct)
        cut = 0.0 if self._config.comparison == "blinded" else 0.5
        bits = [int(values[index[p] // slots][index[p] % slots].real > cut) for p in pairs]
        self._revealed.update(pairs)
        self._batches.add(batch)
        self._revealed_bits += len(bits)
        meta = self._bind.bind({"bits": bits}, step="bits", to=SERVER, round=self._round,
                               index=(batch,))
        return wire.encode("pfl/bits", meta)

    @receives("pfl/result-request")
    def unmask_for_client(self, request: bytes) -> bytes:
        """Step 6: decrypt a masked Eq. 2 result to its plaintext polynomial and seal it
        to the client's registered key."""
        msg = wire.decode(request, expect="pfl/result-request",
                          max_bytes=SERVER_MAX_MESSAGE_BYTES)
        if self._round is None:
            raise ProtocolError("a result request before the round's refresh")
        got = self._bind.check(msg.meta, step="result-request", sender=SERVER,
                               round=self._round, index=None, what="result request")
        if len(got.index) != 1 or not 0 <= got.index[0] < _MAX_CLIENTS:
            raise fields.malformed("ctx")
        i = got.index[0]
        if i not in self._clients:
            raise ProtocolError("a result for a client that did not register")
        if i in self._results:
            raise ProtocolError("a result request replayed")
        if not self._valid[i]:
            # an invalid client's result is its own model, which it holds: decrypting its
            # upload would hand a client that replayed someone else's ciphertext (and
            # failed the norm check on purpose) that client's model
            if msg.blobs:
                raise ProtocolError("no decryption for a client that failed the checks")
            self._results.add(i)
            notice = seal_to(self._clients[i], _OWN, context=_box_context(
                b"own", self.session, self._round, i, 0))
            meta = self._bind.bind({"own": True}, step="result-box", to=SERVER,
                                   round=self._round, index=(i,))
            return wire.encode("pfl/result-box", meta, [notice])
        if len(msg.blobs) != self._chunks:
            raise ProtocolError("malformed result request")
        boxes = []
        for c, blob in enumerate(msg.blobs):
            ct = self._ctx.deserialize(blob)
            if self._ctx.level_of(ct) != 0:
                raise ProtocolError("a result ciphertext must be at level 0")
            # re-randomised before decryption: what leaves is c0 + c1 s + e' for a fresh
            # encryption noise e', so a client and the server pooling what they hold get an
            # RLWE sample (c1, c1 s + e'), not the linear equation c1 s = p - c0 that an
            # exact decryption would give them (Li-Micciancio key recovery)
            with self.clock("decryption"):
                zero = self._ctx.encrypt(self._ctx.encode_constant(
                    0.0, scale=float(ct.scale), parms_id=ct.parms_id()))
                pt = self._ctx.decrypt_plaintext(self._ctx.add(ct, zero))
            boxes.append(seal_to(self._clients[i], _u64_blob(plaintext_ntt(pt)),
                                 context=_box_context(b"result", self.session, self._round,
                                                      i, c)))
        self._results.add(i)
        meta = self._bind.bind({}, step="result-box", to=SERVER, round=self._round,
                               index=(i,))
        return wire.encode("pfl/result-box", meta, boxes)
