"""Priv-PFL's client: registers its result key, uploads its one-time-padded model, opens
its own result (steps 0, 1 and 6 of :mod:`fedsec.pfl.secure`)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from numpy.typing import NDArray

from fedsec._validation import check_int, check_real
from fedsec.crypto.drbg import SEED_BYTES, SystemRandomSource
from fedsec.crypto.identity import Identity, Roster
from fedsec.crypto.keys import check_x25519, open_sealed, public_key_bytes, seal_to
from fedsec.crypto.keysetup import PartyKeys
from fedsec.crypto.rawpoly import plaintext_from_ntt, plaintext_ntt
from fedsec.errors import ProtocolError
from fedsec.pfl.secure.common import (
    _MAX_CLIENTS,
    _OWN,
    CLIENT_MAX_MESSAGE_BYTES,
    DECRYPTOR,
    DECRYPTOR_NAME,
    PROTOCOL,
    SERVER,
    UPLOAD_LEVEL,
    FloatArray,
    SecurePFLConfig,
    _box_context,
    _claims_bytes,
    _decryptor_key_payload,
    _Encoding,
    _mod_add,
    _n_chunks,
    _pack,
    _register_payload,
    _result_mask,
    _seed_payload,
    _u64_blob,
    _u64_from,
    _unpack,
    _upload_mask,
    client_role,
    clip_to_norm,
)
from fedsec.protocol import fields, wire
from fedsec.protocol.accounting import Clock
from fedsec.protocol.binding import BROADCAST, Binding
from fedsec.protocol.roles import receives

__all__ = ["SecurePFLClient"]


class SecurePFLClient:
    """Client ``index``: uploads its one-time-padded model and decrypts its own result.

    Parameters
    ----------
    index : int
        Position among the clients (``client_name(index)`` on the roster,
        ``client_role(index)`` on the network).
    keys : PartyKeys
        From the key set-up: the public key (no secret key) and the session.
    identity : Identity
        This client's identity (signs its X25519 result key and its mask seeds).
    config : SecurePFLConfig
    roster : Roster
        To verify the decryptor's signed X25519 key (:meth:`receive_decryptor_key`).
    """

    def __init__(self, index: int, keys: PartyKeys, identity: Identity,
                 config: SecurePFLConfig, *, roster: Roster) -> None:
        self._index = check_int(index, "index", "SecurePFLClient", min_value=0,
                                max_value=_MAX_CLIENTS - 1)
        if keys.context.has_secret_key:
            raise ValueError("a Priv-PFL client must not hold the CKKS secret key")
        self._keys = keys
        self._identity = identity
        self._roster = roster
        self._config = config
        self._ctx = keys.context
        self._enc = _Encoding.of(self._ctx, config.mask_bits)
        self._bind = Binding(keys.session, PROTOCOL, client_role(self._index))
        self._x = X25519PrivateKey.generate()
        self._rand = SystemRandomSource()
        self._decryptor_x: bytes | None = None
        self._pending: tuple[int, int, float, FloatArray] | None = None  # round, d, B, w
        #: This role's seconds by kind of work.
        self.clock = Clock()

    @property
    def index(self) -> int:
        return self._index

    @property
    def name(self) -> str:
        """Its name on the network (``"client:3"``)."""
        return client_role(self._index)

    @property
    def session(self) -> str:
        return self._keys.session

    def register(self) -> bytes:
        """Step 0 (once per session): this client's X25519 key for its results, signed;
        addressed to the server and the decryptor alike (the server relays it)."""
        x_pk = public_key_bytes(self._x.public_key())
        sig = self._identity.sign("pfl/register",
                                  _register_payload(self.session, self._identity.name, x_pk))
        meta = self._bind.bind({"client": self._index, "name": self._identity.name},
                               step="register", to=BROADCAST)
        return wire.encode("pfl/register", meta, [x_pk, sig])

    @receives("pfl/decryptor-key")
    def receive_decryptor_key(self, message: bytes) -> None:
        """Step 0 (once per session): the decryptor's X25519 key for the mask seeds,
        signed by the decryptor's roster identity and bound to the session."""
        msg = wire.decode(message, expect="pfl/decryptor-key", max_bytes=1 << 12)
        self._bind.check(msg.meta, step="decryptor-key", sender=DECRYPTOR, broadcast=True,
                         what="decryptor key")
        if DECRYPTOR_NAME not in self._roster:
            raise ProtocolError("malformed decryptor key")
        x_pk, sig = fields.blobs(msg.blobs, 2, what="decryptor key")
        check_x25519(x_pk, who=DECRYPTOR_NAME)
        self._roster.verify(DECRYPTOR_NAME, "pfl/decryptor-key",
                            _decryptor_key_payload(self.session, x_pk), sig)
        self._decryptor_x = bytes(x_pk)

    def upload(self, model: NDArray[Any], *, norm_bound: float, sigma: float,
               round_index: int) -> bytes:
        """Step 1: the plaintext of ``w / B`` one-time padded, and the pad's sealed seed.

        The model is clipped to ``norm_bound`` and its norm published.
        """
        t = check_int(round_index, "round_index", "SecurePFLClient.upload", min_value=0)
        b = check_real(norm_bound, "norm_bound", "SecurePFLClient.upload", gt=0.0)
        s = check_real(sigma, "sigma", "SecurePFLClient.upload", gt=0.0)
        w = np.asarray(model, dtype=np.float64)
        if w.ndim != 1 or w.size < 1 or not np.all(np.isfinite(w)):
            raise ValueError("The 'model' parameter of SecurePFLClient.upload must be a "
                             "finite, non-empty 1-D array.")
        w = clip_to_norm(w, b)
        return self._masked_upload(w, float(np.linalg.norm(w)), b, s, t)

    def _masked_upload(self, w: FloatArray, norm: float, b: float, s: float, t: int
                       ) -> bytes:
        """The upload of ``w`` (as given: clipping is the caller's) publishing ``norm``."""
        with self.clock("encryption"):
            pid = self._ctx.parms_id_at_level(UPLOAD_LEVEL)
            plains = [plaintext_ntt(self._ctx.encode(z, scale=self._enc.upload_scale,
                                                     parms_id=pid))
                      for z in _pack(w / b, self._enc.slots)]
        return self._pad_and_seal(plains, w, norm, b, s, t)

    def _pad_and_seal(self, plains: Sequence[NDArray[np.uint64]], w: FloatArray,
                      norm: float, b: float, s: float, t: int) -> bytes:
        """Pad each chunk's plaintext residues with a fresh one-time pad; seal and sign
        the pads' seeds to the decryptor. ``w`` is what the client keeps."""
        with self.clock("encryption"):
            primes = self._ctx.level_primes(self._ctx.parms_id_at_level(UPLOAD_LEVEL))
            n = self._enc.n
            seeds = [self._rand.random_bytes(SEED_BYTES) for _ in plains]
            xs = [_u64_blob(_mod_add(p, _upload_mask(seed, primes, n, self.session, t,
                                                     self._index, c), primes, n))
                  for c, (p, seed) in enumerate(zip(plains, seeds, strict=True))]
        return self._sign_upload(xs, seeds, w, norm, b, s, t)

    def _sign_upload(self, xs: Sequence[bytes], seeds: Sequence[bytes], w: FloatArray,
                     norm: float, b: float, s: float, t: int) -> bytes:
        """The upload message: padded plaintexts ``xs``, their pads' ``seeds`` sealed to
        the decryptor, each chunk signed with the published values."""
        if self._decryptor_x is None:
            raise ProtocolError("no decryptor key received for this session")
        with self.clock("encryption"):
            claims = _claims_bytes(w.size, norm, b, s)
            boxes: list[bytes] = []
            for c, (x, seed) in enumerate(zip(xs, seeds, strict=True)):
                box = seal_to(self._decryptor_x, seed, context=_box_context(
                    b"seed", self.session, t, self._index, c))
                sig = self._identity.sign("pfl/seed", _seed_payload(
                    self.session, t, self._index, c, box, hashlib.sha256(x).digest(),
                    claims))
                boxes += [box, sig]
            self._pending = (t, w.size, b, w.copy())
            meta = self._bind.bind({"d": int(w.size), "norm": norm, "bound": b, "sigma": s},
                                   step="masked-upload", to=SERVER, round=t)
            return wire.encode("pfl/masked-upload", meta, [*xs, *boxes])

    @receives("pfl/result")
    def finish(self, result: bytes) -> FloatArray:
        """Step 6: open the decryptor's sealed plaintext and the server's mask; decode."""
        if self._pending is None:
            raise ProtocolError("a result arrived before this client uploaded")
        t, d, b, own = self._pending
        msg = wire.decode(result, expect="pfl/result", max_bytes=CLIENT_MAX_MESSAGE_BYTES)
        self._bind.check(msg.meta, step="result", sender=SERVER, round=t, what="result")
        if fields.optional(msg.meta, "own") and fields.flag(msg.meta, "own"):
            # invalid this round (the decryptor says so, sealed): the result is the own
            # model, which nobody decrypts
            (notice,) = fields.blobs(msg.blobs, 1, what="result")
            if open_sealed(self._x, notice, context=_box_context(
                    b"own", self.session, t, self._index, 0)) != _OWN:
                raise ProtocolError("malformed result")
            self._pending = None
            return own.copy()
        chunks = _n_chunks(d, self._enc.slots)
        fields.blobs(msg.blobs, 2 * chunks, what="result")
        n = self._enc.n
        q0 = self._enc.q0
        out = []
        with self.clock("decryption"):
            for c in range(chunks):
                poly = open_sealed(self._x, msg.blobs[2 * c], context=_box_context(
                    b"result", self.session, t, self._index, c))
                seed = open_sealed(self._x, msg.blobs[2 * c + 1], context=_box_context(
                    b"mask", self.session, t, self._index, c))
                if len(seed) != SEED_BYTES:
                    raise ProtocolError("malformed result mask")
                p = _u64_from(poly, n, "result", below=q0)
                mask = _result_mask(seed, q0, n)
                diff = np.where(p >= mask, p - mask, p + (np.uint64(q0) - mask))
                pt = plaintext_from_ntt(self._ctx, diff, level=0,
                                        scale=self._enc.upload_scale)
                out.append(self._ctx.decode(pt)[:self._enc.slots])
        self._pending = None
        return _unpack(out, d) * b
