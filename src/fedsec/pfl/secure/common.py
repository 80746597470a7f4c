"""What every Priv-PFL role shares: configuration, encodings, names, signed payloads.

The protocol is described in :mod:`fedsec.pfl.secure`; this module holds what the client,
the server and the decryptor all derive from the parameters (never from a message): the
configuration, the CKKS encoding of the models, the packing, the role names, the payloads
that clients and the decryptor sign, the one-time pads and the sealed-box contexts.
"""

from __future__ import annotations

import functools
import hashlib
import math
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from fedsec._validation import check_int, check_real
from fedsec.crypto.ckks import CKKSContext
from fedsec.crypto.drbg import SeededRandomSource
from fedsec.crypto.identity import Roster
from fedsec.crypto.keys import check_x25519
from fedsec.crypto.keysetup import AGGREGATOR_MAX_MESSAGE_BYTES, KeySpec
from fedsec.crypto.params import CKKSParams, get_preset
from fedsec.crypto.rawpoly import uniform_residues
from fedsec.crypto.sign import SUPPORTED_ALPHAS, sign_depth
from fedsec.errors import ProtocolError
from fedsec.protocol import fields, wire
from fedsec.protocol.binding import Binding

__all__ = ["DECRYPTOR_NAME", "SERVER", "DECRYPTOR", "PROTOCOL", "UPLOAD_LEVEL",
           "MARGIN_SLACK", "COMPARISONS", "BLINDED_BAND", "SecurePFLConfig", "client_name",
           "client_role", "clip_to_norm", "margin_scale"]

FloatArray = NDArray[np.float64]
#: The decryptor's party name in the signed key set-up.
DECRYPTOR_NAME = "decryptor"
#: Chain level of the clients' uploads: one product (the Gram entries) or one plaintext
#: product (Eq. 2) takes them to level 0.
UPLOAD_LEVEL = 1
#: Relative slack of the margin scale over ``max(sigma_max^2, 4)``.
MARGIN_SLACK = 2.0 ** -14
#: Largest message each role accepts from another (a round at ring 2^15 and K = 30 sends
#: the decryptor K (K + 1) / 2 constant-term samples of 256 KiB each).
CLIENT_MAX_MESSAGE_BYTES = 64 << 20
SERVER_MAX_MESSAGE_BYTES = 256 << 20
DECRYPTOR_MAX_MESSAGE_BYTES = 1 << 30
#: A mask request carries per client and chunk a sealed seed, a signature and a digest
#: (~190 bytes): 64 MiB covers 1,024 clients with 64 chunks each.
MASK_REQUEST_MAX_BYTES = 64 << 20
_MAX_CLIENTS = 1024
_SEAL_OVERHEAD = 32 + 12 + 16  # ephemeral key, nonce, tag of a sealed box
_OWN = b"fedsec/pfl/own-model"  # the decryptor's notice to an invalid client


def client_name(i: int) -> str:
    """The roster name of client ``i`` in :meth:`SecurePFLSession.create`."""
    return f"client-{i}"


def clip_to_norm(model: NDArray[Any], bound: float) -> FloatArray:
    """``model`` scaled down to Euclidean norm at most ``bound`` (a copy).

    The result's norm, computed in float64, never exceeds ``bound`` (the scaling leaves a
    relative margin of ``2^-40``).
    """
    w = np.asarray(model, dtype=np.float64)
    b = check_real(bound, "bound", "clip_to_norm", gt=0.0)
    if w.ndim != 1 or not np.all(np.isfinite(w)):
        raise ValueError(f"The 'model' parameter of clip_to_norm must be a finite 1-D "
                         f"array. Got shape {w.shape} instead.")
    n = float(np.linalg.norm(w))
    if n <= b:
        return w.copy()
    out: FloatArray = w * (b / n * (1.0 - 2.0 ** -40))
    while float(np.linalg.norm(out)) > b:  # pragma: no cover - float64 safety net
        out *= 1.0 - 2.0 ** -40
    return out


def margin_scale(sigmas: Sequence[float] | NDArray[Any]) -> float:
    """``M / B^2 = max(sigma_max^2, 4) (1 + 2^-14)``: margins of valid clients divided by
    ``M`` lie in the comparison's domain."""
    s = np.asarray(sigmas, dtype=np.float64)
    return float(max(float(np.max(s)) ** 2, 4.0) * (1.0 + MARGIN_SLACK))


def _pack(u: FloatArray, slots: int) -> list[NDArray[np.complex128]]:
    """Two reals per complex slot, split into chunks of ``slots``."""
    v = u if u.size % 2 == 0 else np.append(u, 0.0)
    z = np.asarray(v[0::2] + 1j * v[1::2], dtype=np.complex128)
    out: list[NDArray[np.complex128]] = [z[a:a + slots]
                                         for a in range(0, max(1, z.size), slots)]
    return out


def _unpack(chunks: Sequence[NDArray[np.complex128]], d: int) -> FloatArray:
    z = np.concatenate(list(chunks))
    out = np.empty(2 * z.size)
    out[0::2] = z.real
    out[1::2] = z.imag
    return out[:d]


def _n_chunks(d: int, slots: int) -> int:
    return max(1, math.ceil(math.ceil(d / 2) / slots))


def _pairs(k: int) -> list[tuple[int, int]]:
    """Ordered pairs ``(i, j)``, ``i != j``, in slot order."""
    return [(i, j) for i in range(k) for j in range(k) if i != j]


#: How margins are compared: the sign polynomial (Priv-PFL) or blinding factors.
COMPARISONS: tuple[str, ...] = ("polynomial", "blinded")
#: The blinded mode decides every margin with ``|margin| >= BLINDED_BAND * M`` exactly
#: (the polynomial mode: beyond the ``2^-alpha M`` band). What limits it: the decryptor
#: re-encodes masked margins of magnitude ~2^31 in float64, an error of ~2^-19 on
#: ``margin / M`` (measured: tests/pfl/test_secure.py, BENCHMARKS.md).
BLINDED_BAND = 2.0 ** -14


def _fresh_level(alpha: int, comparison: str = "polynomial") -> int:
    """Level of the refreshed margins. Polynomial mode: one plaintext product zeroes the
    pairs of invalid clients, the comparison takes ``sign_depth``, one more product zeroes
    unrequested slots. Blinded mode: one product applies the blinding factors (0 for
    invalid pairs), one zeroes unrequested slots."""
    return 2 if comparison == "blinded" else sign_depth(alpha) + 2


def _pairs_of(clients: Sequence[int]) -> list[tuple[int, int]]:
    """Ordered pairs of the round's clients (global indices), in slot order."""
    return [(i, j) for i in clients for j in clients if i != j]



def _gram_entries(k: int) -> list[tuple[int, int]]:
    return [(i, j) for i in range(k) for j in range(i, k)]


# ---------------------------------------------------------------------- configuration
@dataclass(frozen=True)
class SecurePFLConfig:
    """Parameters of secure Priv-PFL every role derives from its own configuration.

    Parameters
    ----------
    preset : str, default="CKKS_128_N32768_DEPTH19"
        CKKS preset; needs ``sign_depth(sign_alpha) + 2`` levels.
    sign_alpha : int, default=8
        Precision of the comparison (8, 10 or 12: depth 11, 14, 16); pairs whose margin
        is within ``2^-alpha M`` of the boundary may be decided either way.
    allow_insecure : bool, default=False
        Permit ``INSECURE_TEST_*`` presets (tests only).
    norm_tolerance : float, default=2^-14
        The decryptor's tolerance on ``| ||w_i||^2 - n_i^2 | / B^2``. Honest clients'
        norms decrypt within ``2^-17`` (measured at ring 2^12 and 2^15; the noise of the
        relinearized product's constant term); a liar gains at most this much, which moves
        margins by at most ``tol / 4`` of ``M`` (below every comparison band). At most
        ``2^-11`` (the margin scale's slack keeps the domain).
    mask_bits : int, default=32
        Gram entries of two clients reach the decryptor masked by uniform integers of
        ``mask_bits`` bits above the value's bound.
    max_offer_bytes : int, default=512 MiB
        Largest key offer (public key, relinearization and Galois keys) the server accepts.
    comparison : {"polynomial", "blinded"}, default="polynomial"
        ``"polynomial"``: the paper's homomorphic comparison (composite minimax sign).
        ``"blinded"`` (beyond the paper, **off by default**): no sign polynomial; the
        server multiplies every margin by a fresh secret factor ``2^(U * blind_bits)``,
        ``U`` uniform on [0, 1], and the decryptor reads the sign of the product -- it
        then sees each requested margin's magnitude up to that factor (see the module
        docstring, "Blinded comparison").
    blind_bits : int, default=16
        Spread (in bits) of the blinding factors of the blinded mode.
    """

    preset: str = "CKKS_128_N32768_DEPTH19"
    sign_alpha: int = 8
    allow_insecure: bool = False
    norm_tolerance: float = 2.0 ** -14
    mask_bits: int = 32
    max_offer_bytes: int = AGGREGATOR_MAX_MESSAGE_BYTES
    comparison: str = "polynomial"
    blind_bits: int = 16

    def __post_init__(self) -> None:
        alpha = check_int(self.sign_alpha, "sign_alpha", "SecurePFLConfig")
        if alpha not in SUPPORTED_ALPHAS:
            raise ValueError(f"The 'sign_alpha' parameter of SecurePFLConfig must be one of "
                             f"{list(SUPPORTED_ALPHAS)}. Got {alpha} instead.")
        if self.comparison not in COMPARISONS:
            raise ValueError(f"The 'comparison' parameter of SecurePFLConfig must be one of "
                             f"{COMPARISONS}. Got {self.comparison!r} instead.")
        check_int(self.blind_bits, "blind_bits", "SecurePFLConfig", min_value=1,
                  max_value=16)
        params = get_preset(self.preset, allow_insecure=self.allow_insecure)
        need = _fresh_level(alpha, self.comparison)
        if params.depth < need:
            raise ValueError(f"The 'preset' parameter of SecurePFLConfig must offer "
                             f"{need} levels for sign_alpha={alpha}. Got {self.preset} "
                             f"with {params.depth} instead.")
        check_real(self.norm_tolerance, "norm_tolerance", "SecurePFLConfig", gt=0.0,
                   le=2.0 ** -11)
        check_int(self.mask_bits, "mask_bits", "SecurePFLConfig", min_value=16, max_value=40)
        check_int(self.max_offer_bytes, "max_offer_bytes", "SecurePFLConfig",
                  min_value=1 << 20)

    @property
    def params(self) -> CKKSParams:
        return get_preset(self.preset, allow_insecure=self.allow_insecure)

    def key_spec(self) -> KeySpec:
        """Public key, relinearization keys and the conjugation key; the decryptor holds
        the secret key alone."""
        return KeySpec.create(self.preset, (), True, allow_insecure=self.allow_insecure,
                              holder=DECRYPTOR_NAME)


@dataclass(frozen=True)
class _Encoding:
    """Scales every role derives from the parameters (never from a message)."""

    n: int
    slots: int
    q0: int
    upload_scale: float   # scale of the clients' ciphertexts (a power of two)
    unit: float           # integer value of the constant term for G = 1
    mask_range: int       # masks are uniform integers in [-mask_range, mask_range]

    @classmethod
    def of(cls, ctx: CKKSContext, mask_bits: int) -> _Encoding:
        n = ctx.params.poly_modulus_degree
        q0 = ctx.level_primes(ctx.parms_id_at_level(0))[0]
        q1 = ctx.level_primes(ctx.parms_id_at_level(UPLOAD_LEVEL))[-1]
        # constant term of a level-0 product: (2 / n) * upload_scale^2 / q1 per unit of G;
        # |G| <= 2 plus a mask of mask_bits bits above must stay below q0 / 2.
        unit_max = q0 / 2 / (2.0 ** (mask_bits + 2))
        e = math.floor((math.log2(unit_max * n / 2) + math.log2(q1)) / 2)
        e = min(e, ctx.params.scale_bits)
        scale = 2.0 ** e
        unit = scale * scale / q1 * 2.0 / n
        if unit < 2.0 ** 20:
            raise ValueError(f"{ctx.params.name} leaves too little precision for Priv-PFL")
        return cls(n, ctx.slots, q0, scale, unit, int(unit * 2.0 ** mask_bits))



def _register_payload(session: str, name: str, x_pk: bytes) -> bytes:
    return hashlib.sha256(b"fedsec/pfl/register/v1|" + session.encode() + b"|"
                          + name.encode() + b"|" + x_pk).digest()


def _register(binding: Binding, message: bytes, roster: Roster, n_clients: int,
              clients: dict[int, bytes]) -> int:
    """A client's registration, verified against the roster, recorded once (the server's
    and the decryptor's check): returns the client's index. Registrations are addressed to
    every role (``"*"``): the server relays them to the decryptor unchanged."""
    msg = wire.decode(message, expect="pfl/register", max_bytes=1 << 12)
    i = fields.integer(msg.meta, "client", 0, n_clients - 1)
    binding.check(msg.meta, step="register", sender=client_role(i), broadcast=True,
                  what="registration")
    name = fields.text(msg.meta, "name", choices=(client_name(i),))
    if name not in roster:
        raise ProtocolError("malformed client registration")
    x_pk, sig = fields.blobs(msg.blobs, 2, what="client registration")
    check_x25519(x_pk, who=client_name(i))
    roster.verify(client_name(i), "pfl/register", _register_payload(binding.session,
                                                                     client_name(i), x_pk),
                  sig)
    if i in clients:
        raise ProtocolError("a second registration for a client")
    clients[i] = x_pk
    return i


def _decryptor_key_payload(session: str, x_pk: bytes) -> bytes:
    return hashlib.sha256(b"fedsec/pfl/decryptor-key/v1|" + session.encode() + b"|"
                          + DECRYPTOR_NAME.encode() + b"|" + x_pk).digest()


def _claims_bytes(d: int, norm: float, bound: float, sigma: float) -> bytes:
    return struct.pack("<Qddd", d, norm, bound, sigma)


def _seed_payload(session: str, round_index: int, client: int, chunk: int, box: bytes,
                  x_digest: bytes, claims: bytes) -> bytes:
    """What a client signs for each chunk: its sealed pad seed, the digest of its padded
    plaintext and its published values (d, norm, B, sigma), bound to the session, round,
    client and chunk -- so nobody can substitute, reuse or relabel any of them."""
    return hashlib.sha256(_box_context(b"seed-sig", session, round_index, client, chunk)
                          + b"|" + hashlib.sha256(box).digest() + x_digest
                          + claims).digest()


def _read_claims(meta: Mapping[str, Any], count: int) -> list[tuple[int, float, float, float]]:
    """The ``claims`` field: per client ``[d, norm, B, sigma]`` as relayed to the decryptor
    (bounds of the decryptor's own)."""
    raw = meta.get("claims") if isinstance(meta, Mapping) else None
    if not isinstance(raw, list) or len(raw) != count:
        raise fields.malformed("claims")
    out = []
    for v in raw:
        if not isinstance(v, list) or len(v) != 4:
            raise fields.malformed("claims")
        item = dict(zip(("d", "norm", "bound", "sigma"), v, strict=True))
        out.append((fields.integer(item, "d", 1, 1 << 24),
                    fields.real(item, "norm", 0.0, 1e300),
                    fields.real(item, "bound", 1e-300, 1e300),
                    fields.real(item, "sigma", 1e-12, 1e6)))
    return out


def _client_list(meta: Mapping[str, Any], key: str, least: int) -> tuple[int, ...]:
    """``meta[key]``: at least ``least`` client indices, strictly increasing."""
    v = fields.integers(meta, key, 0, _MAX_CLIENTS - 1, min_length=least,
                        max_length=_MAX_CLIENTS, distinct=True)
    if list(v) != sorted(v):
        raise fields.malformed(key)
    return v


def _upload_mask(seed: bytes, primes: Sequence[int], n: int, session: str,
                 round_index: int, client: int, chunk: int) -> NDArray[np.uint64]:
    """The one-time pad ``M`` of one upload chunk: uniform residues mod each prime of the
    upload level (uniform mod their product), expanded from the client's fresh seed."""
    src = SeededRandomSource(seed, _box_context(b"upload-mask", session, round_index,
                                                client, chunk))
    return np.concatenate([uniform_residues(src, q, n) for q in primes])


def _mod_add(a: NDArray[np.uint64], b: NDArray[np.uint64], primes: Sequence[int], n: int
             ) -> NDArray[np.uint64]:
    """``a + b`` residue-wise mod each prime (both reduced; no overflow below 2^63)."""
    q = np.repeat(np.asarray(primes, dtype=np.uint64), n)
    t = a + b
    out: NDArray[np.uint64] = np.where(t >= q, t - q, t)
    return out


def _mod_neg(a: NDArray[np.uint64], primes: Sequence[int], n: int) -> NDArray[np.uint64]:
    q = np.repeat(np.asarray(primes, dtype=np.uint64), n)
    out: NDArray[np.uint64] = np.where(a == 0, a, q - a)
    return out


def _box_context(kind: bytes, session: str, round_index: int, client: int, chunk: int
                 ) -> bytes:
    return (b"fedsec/pfl/" + kind + b"|" + session.encode() + b"|"
            + str(round_index).encode() + b"|" + str(client).encode() + b"|"
            + str(chunk).encode())


def _u64_blob(a: NDArray[np.uint64]) -> bytes:
    return np.ascontiguousarray(a, dtype="<u8").tobytes()


def _u64_from(blob: bytes, count: int, what: str, below: int | None = None
              ) -> NDArray[np.uint64]:
    """``count`` little-endian 64-bit residues (each ``< below`` where given)."""
    out: NDArray[np.uint64] = fields.array(blob, np.uint64, (count,), what=what,
                                           hi=None if below is None else below - 1)
    return out


def client_role(i: int) -> str:
    """The network name of client ``i`` (``"client:3"``); its roster name is
    :func:`client_name`."""
    return f"client:{i}"


#: Network name of the server.
SERVER = "server"
#: Network name of the decryptor.
DECRYPTOR = "decryptor"
#: The binding context's protocol name.
PROTOCOL = "pfl"


def _result_mask(seed: bytes, q: int, n: int) -> NDArray[np.uint64]:
    """The server's mask on a client's result, expanded from its seed."""
    return uniform_residues(SeededRandomSource(seed, b"fedsec/pfl/result-mask"), q, n)


_F = TypeVar("_F", bound=Callable[..., Any])


def _timed(kind: str) -> Callable[[_F], _F]:
    """Count a role method's seconds on the role's own :class:`Clock` (``self.clock``)."""
    def deco(fn: _F) -> _F:
        @functools.wraps(fn)
        def inner(self: Any, *args: Any, **kwargs: Any) -> Any:
            with self.clock(kind):
                return fn(self, *args, **kwargs)

        return inner  # type: ignore[return-value]

    return deco
