"""Malicious Priv-PFL clients (:mod:`fedsec.pfl.secure`), for tests and benchmarks.

An honest :class:`~fedsec.pfl.secure.SecurePFLClient` clips its model and publishes its
true norm. The functions here build what a malicious client can send instead, through
the same padding and sealing code: an unclipped model with any published norm, a chosen
plaintext polynomial, or a message in the retired ciphertext format.
:data:`UnclippedClient` is a client role that always uploads unclipped (a session runs it
at the indices given to ``SecurePFLSession.create(..., clients=...)``);
:func:`relabel` rewrites a message's binding context (what a replaying or splicing relay
does; use it in a :meth:`fedsec.protocol.network.Network.intercept` interceptor).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec.crypto.rawpoly import plaintext_ntt
from fedsec.pfl.secure import UPLOAD_LEVEL, SecurePFLClient
from fedsec.pfl.secure.common import _n_chunks, _pack
from fedsec.pfl.secure_sim import unclipped_client
from fedsec.protocol import wire
from fedsec.protocol.binding import CTX, context_of

__all__ = ["unclipped_upload", "plaintext_upload", "ciphertext_upload",
           "upload_plaintexts", "relay_upload", "UnclippedClient", "relabel"]

#: A client that uploads its model unclipped and publishes ``min(||w||, B)`` as its norm
#: (the malicious client of ``run_secure_pfl(unclipped_attackers=True)``).
UnclippedClient = unclipped_client()


def relabel(data: bytes, **changes: Any) -> bytes:
    """``data`` with its binding context changed (``round=``, ``sender=``,
    ``recipient=``, ``index=``, ``session=``, ``step=``) and, for other keywords, its
    metadata fields: the same blobs in another place of the protocol."""
    msg = wire.decode(data)
    ctx_fields = {k: changes.pop(k) for k in list(changes)
                  if k in ("session", "protocol", "round", "step", "sender", "recipient",
                           "index")}
    meta = dict(msg.meta)
    if ctx_fields:
        meta[CTX] = context_of(meta).at(**ctx_fields).to_meta()
    meta.update(changes)
    return wire.encode(msg.kind, meta, msg.blobs)


def unclipped_upload(client: SecurePFLClient, model: NDArray[Any], *, norm_bound: float,
                     sigma: float, round_index: int, claimed_norm: float | None = None
                     ) -> bytes:
    """``model`` uploaded as is (not clipped), publishing ``claimed_norm`` (default: its
    true norm)."""
    w = np.asarray(model, dtype=np.float64)
    norm = float(np.linalg.norm(w)) if claimed_norm is None else float(claimed_norm)
    return client._masked_upload(w, norm, float(norm_bound), float(sigma), int(round_index))


def upload_plaintexts(client: SecurePFLClient, model: NDArray[Any], norm_bound: float
                      ) -> list[NDArray[np.uint64]]:
    """The plaintext residues (NTT form, upload level) an honest upload of ``model``
    would pad: a starting point for crafted ones."""
    ctx = client._ctx
    pid = ctx.parms_id_at_level(UPLOAD_LEVEL)
    w = np.asarray(model, dtype=np.float64)
    return [plaintext_ntt(ctx.encode(z, scale=client._enc.upload_scale, parms_id=pid))
            for z in _pack(w / float(norm_bound), client._enc.slots)]


def plaintext_upload(client: SecurePFLClient, plains: Sequence[NDArray[np.uint64]], *,
                     d: int, claimed_norm: float, norm_bound: float, sigma: float,
                     round_index: int, keep: NDArray[Any] | None = None) -> bytes:
    """An upload whose padded plaintexts are ``plains`` (any residues: all a client
    controls), correctly sealed and signed, publishing ``claimed_norm``."""
    if len(plains) != _n_chunks(d, client._enc.slots):
        raise ValueError("one plaintext per chunk")
    w = np.zeros(d) if keep is None else np.asarray(keep, dtype=np.float64)
    return client._pad_and_seal(list(plains), w, float(claimed_norm), float(norm_bound),
                                float(sigma), int(round_index))


def relay_upload(client: SecurePFLClient, xs: Sequence[bytes], *, d: int,
                 claimed_norm: float, norm_bound: float, sigma: float, round_index: int,
                 keep: NDArray[Any] | None = None) -> bytes:
    """An upload of the given padded plaintexts ``xs`` (e.g. another client's, copied),
    with fresh pad seeds of the client's own, sealed and signed by it: what a copier
    can send (its plaintext is then ``x - M`` for a pad it did not choose ``x`` for)."""
    w = np.zeros(d) if keep is None else np.asarray(keep, dtype=np.float64)
    seeds = [secrets.token_bytes(32) for _ in xs]
    return client._sign_upload(list(xs), seeds, w, float(claimed_norm), float(norm_bound),
                               float(sigma), int(round_index))


def ciphertext_upload(client: SecurePFLClient, model: NDArray[Any], *, norm_bound: float,
                      sigma: float, round_index: int) -> bytes:
    """An upload in the retired format (``pfl/upload``: ``Enc(w / B)`` under the public
    key), which the server must refuse."""
    ctx = client._ctx
    pid = ctx.parms_id_at_level(UPLOAD_LEVEL)
    w = np.asarray(model, dtype=np.float64)
    blobs = [ctx.serialize(ctx.encrypt(ctx.encode(
        z, scale=client._enc.upload_scale, parms_id=pid)))
        for z in _pack(w / float(norm_bound), client._enc.slots)]
    meta = client._bind.bind({"d": int(w.size), "norm": float(np.linalg.norm(w)),
                              "bound": float(norm_bound), "sigma": float(sigma)},
                             step="masked-upload", to="server", round=int(round_index))
    return wire.encode("pfl/upload", meta, blobs)
