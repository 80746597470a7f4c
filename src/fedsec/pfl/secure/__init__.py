"""Priv-PFL (Aghabagherloo et al.): BALANCE's selection and aggregation on encrypted models.

The server selects, for every client ``i``, the peers ``j`` whose models pass Ineq. 1 in
the squared form ``||w_i - w_j||^2 <= sigma_i^2 ||w_i||^2`` and returns each client its
Eq. 2 model ``alpha w_i + (1 - alpha) mean_{j in S_i} w_j`` -- without anyone but client
``i`` seeing a model or a result of client ``i``.

Roles (they exchange bytes only; one method per protocol step):

* :class:`SecurePFLClient` -- one per client: clips its model to the round's public norm
  bound ``B``, publishes ``||w_i||``, uploads its CKKS *plaintext* under a one-time pad
  (never a ciphertext) and decrypts only its own result.
* :class:`SecurePFLServer` -- never holds a secret key: Gram entries, the encrypted
  comparison, Algorithm 1 and Eq. 2 on ciphertexts.
* :class:`SecurePFLDecryptor` -- the paper's trusted party, the only holder of the CKKS
  secret key (the key set-up's holder, fixed by name): encrypts the pads, decrypts masked
  values and the comparison bits Algorithm 1 asks for.

Code layout: one module per role (:mod:`~fedsec.pfl.secure.client`,
:mod:`~fedsec.pfl.secure.server`, :mod:`~fedsec.pfl.secure.decryptor`); what they share
(configuration, encodings, signed payloads, names) is :mod:`~fedsec.pfl.secure.common`;
:mod:`~fedsec.pfl.secure.runner` plays all of them in one process over a
:class:`~fedsec.protocol.network.Network`. Every message carries the binding context of
:mod:`fedsec.protocol.binding` (protocol ``"pfl"``) and every field is read with
:mod:`fedsec.protocol.fields`.

The protocol step by step, the comparison's domain and the norm checks, why clients upload
no ciphertext (a departure from the paper), the blinded comparison, and who learns what:
``docs/protocols/priv-pfl.md`` (the documentation site's Priv-PFL page).
"""

from fedsec.pfl.secure.client import SecurePFLClient
from fedsec.pfl.secure.common import (
    BLINDED_BAND,
    COMPARISONS,
    DECRYPTOR,
    DECRYPTOR_NAME,
    PROTOCOL,
    SERVER,
    UPLOAD_LEVEL,
    SecurePFLConfig,
    client_name,
    client_role,
    clip_to_norm,
    margin_scale,
)
from fedsec.pfl.secure.decryptor import SecurePFLDecryptor
from fedsec.pfl.secure.runner import SecurePFLSession, SecureRound
from fedsec.pfl.secure.server import SecurePFLServer

__all__ = [
    "DECRYPTOR_NAME", "SecurePFLConfig", "SecurePFLClient", "SecurePFLServer",
    "SecurePFLDecryptor", "SecurePFLSession", "SecureRound", "clip_to_norm",
    "client_name", "client_role", "margin_scale", "COMPARISONS", "BLINDED_BAND",
    "UPLOAD_LEVEL", "SERVER", "DECRYPTOR", "PROTOCOL",
]
