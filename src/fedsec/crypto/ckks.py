"""The CKKS layer every fedsec protocol uses (over Microsoft SEAL via ``tenseal.sealapi``).

Protocols never import TenSEAL themselves. Two classes, one job each:

* :class:`~fedsec.crypto.ckks_keys.CKKSKeys` -- the key material a role holds, how it is
  made, sent and loaded (what may leave a party is stated there);
* :class:`CKKSContext` -- the encoder, encryptor, decryptor and evaluator over those keys:
  SIMD encoding of real or complex vectors, encryption (symmetric, hence seeded and half
  the bytes, when the role holds the secret key), addition, plaintext, constant and
  ciphertext products with relinearization and rescaling, slot rotations, complex
  conjugation, slot sums, polynomial evaluation, exact-scale operations for composite
  polynomials, and ciphertext serialization that checks what another role sent.

One name per operation: a plaintext operand is either an encoded plaintext or a vector
(encoded at the ciphertext's level), so ``add_plain``, ``sub_plain`` and ``multiply_plain``
take both; ``multiply`` relinearizes and rescales unless told not to; ``encrypt`` and
``encrypt_bytes`` take a vector or a plaintext at any level; ``mod_switch`` goes to a level
or a parameters id.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import tenseal.sealapi as seal
from numpy.typing import ArrayLike, NDArray

from fedsec.crypto.ckks_keys import CKKSKeys
from fedsec.crypto.params import CKKSParams
from fedsec.crypto.sealio import galois_element, load, refuse_transparent, save
from fedsec.errors import ProtocolError

__all__ = ["CKKSContext", "CKKSKeys", "Ciphertext", "Plaintext", "galois_element",
           "refuse_transparent"]

Ciphertext = Any  # a ``tenseal.sealapi.Ciphertext``; SEAL's bindings are untyped
Plaintext = Any  # a ``tenseal.sealapi.Plaintext``


def _is_plaintext(x: Any) -> bool:
    return isinstance(x, seal.Plaintext)


@functools.lru_cache(maxsize=16)
def _shared_encoder(ctx: Any) -> Any:
    """One CKKS encoder per SEAL context (its tables are read-only after construction;
    a simulation with many parties over one context holds one copy)."""
    return seal.CKKSEncoder(ctx)


@functools.lru_cache(maxsize=16)
def _shared_evaluator(ctx: Any) -> Any:
    """One evaluator per SEAL context (stateless)."""
    return seal.Evaluator(ctx)



class CKKSContext:
    """Encoding, encryption, decryption and evaluation over a role's :class:`CKKSKeys`.

    Create one with :meth:`generate` (the key holder) or load one with
    :meth:`from_public_bytes` (aggregators) or :meth:`from_secret_bytes` (parties); or
    wrap keys a role already holds: ``CKKSContext(keys)``.
    """

    def __init__(self, keys: CKKSKeys) -> None:
        self.keys = keys
        self.params = keys.params
        self._ctx = keys.seal_context
        # encoder and evaluator are immutable and shared by every context over one SEAL
        # context; encryptors and the decryptor each copy a key, so they are made when
        # first used (a simulated party that never decrypts holds no decryptor)
        self._encoder = _shared_encoder(self._ctx)
        self._evaluator = _shared_evaluator(self._ctx)

    @functools.cached_property
    def _sym(self) -> Any:
        keys = self.keys
        return seal.Encryptor(self._ctx, keys.secret_key) \
            if keys.secret_key is not None else None

    @functools.cached_property
    def _asym(self) -> Any:
        keys = self.keys
        return seal.Encryptor(self._ctx, keys.public_key) \
            if keys.public_key is not None else None

    @functools.cached_property
    def _dec(self) -> Any:
        keys = self.keys
        return seal.Decryptor(self._ctx, keys.secret_key) \
            if keys.secret_key is not None else None

    # ------------------------------------------------------------------ keys
    @classmethod
    def generate(cls, params: CKKSParams | str, *, rotations: Iterable[int] = (),
                 conjugate: bool = False, relin: bool = True,
                 allow_insecure: bool = False) -> CKKSContext:
        """Generate fresh keys (:meth:`CKKSKeys.generate`) and a context over them."""
        return cls(CKKSKeys.generate(params, rotations=rotations, conjugate=conjugate,
                                     relin=relin, allow_insecure=allow_insecure))

    @classmethod
    def from_public_bytes(cls, data: bytes, *, allow_insecure: bool = False) -> CKKSContext:
        """An aggregator's context (:meth:`CKKSKeys.from_public_bytes`)."""
        return cls(CKKSKeys.from_public_bytes(data, allow_insecure=allow_insecure))

    @classmethod
    def from_secret_bytes(cls, data: bytes, *, allow_insecure: bool = False) -> CKKSContext:
        """A party's context from (unsealed) secret key material."""
        return cls(CKKSKeys.from_secret_bytes(data, allow_insecure=allow_insecure))

    def public_bytes(self) -> bytes:
        """:meth:`CKKSKeys.public_bytes` (never the secret key)."""
        return self.keys.public_bytes()

    def public_key_bytes(self) -> bytes:
        """:meth:`CKKSKeys.public_key_bytes`."""
        return self.keys.public_key_bytes()

    def secret_bytes(self) -> bytes:
        """:meth:`CKKSKeys.secret_bytes` (to be sealed, never sent in the clear)."""
        return self.keys.secret_bytes()

    @property
    def rotations(self) -> tuple[int, ...]:
        return self.keys.rotations

    @property
    def conjugate_key(self) -> bool:
        return self.keys.conjugate

    @property
    def _sk(self) -> Any:
        return self.keys.secret_key

    @property
    def _rk(self) -> Any:
        return self.keys.relin_keys

    @property
    def _gk(self) -> Any:
        return self.keys.galois_keys

    # ------------------------------------------------------------------ properties
    @property
    def slots(self) -> int:
        return self.params.slots

    @property
    def scale(self) -> float:
        return float(2.0 ** self.params.scale_bits)

    @property
    def has_secret_key(self) -> bool:
        return self.keys.has_secret_key

    @property
    def has_relin_keys(self) -> bool:
        return self.keys.has_relin_keys

    @property
    def top_parms_id(self) -> Any:
        return self._ctx.first_parms_id()

    def level_of(self, ct: Ciphertext) -> int:
        """Remaining data primes of a ciphertext minus one (0 means no rescale left)."""
        return int(self._ctx.get_context_data(ct.parms_id()).chain_index())

    def level_primes(self, ct_or_parms_id: Any) -> tuple[int, ...]:
        """The data primes of a ciphertext's level (or of a ``parms_id``), in chain order:
        :meth:`rescale` divides by the last one."""
        pid = ct_or_parms_id.parms_id() if hasattr(ct_or_parms_id, "parms_id") \
            else ct_or_parms_id
        data = self._ctx.get_context_data(pid)
        if data is None:
            raise ValueError("parameters id does not belong to this context")
        return tuple(int(m.value()) for m in data.parms().coeff_modulus())

    def rescale_prime(self, ct: Ciphertext) -> int:
        """The prime the next :meth:`rescale` of ``ct`` divides by. A plaintext encoded at
        exactly this scale, multiplied and rescaled, leaves the ciphertext's scale unchanged."""
        primes = self.level_primes(ct)
        if len(primes) < 2:
            raise ValueError("the ciphertext is at the last level; it cannot be rescaled")
        return primes[-1]

    # ------------------------------------------------------------------ encoding
    def _vector(self, values: ArrayLike) -> list[complex] | list[float]:
        arr = np.asarray(values)
        if arr.ndim != 1:
            raise ValueError(f"values must be a 1-D vector; got shape {arr.shape}")
        if arr.size > self.slots:
            raise ValueError(f"{arr.size} values exceed the {self.slots} slots of "
                             f"{self.params.name}")
        if np.iscomplexobj(arr):
            out_c = np.zeros(self.slots, dtype=np.complex128)
            out_c[:arr.size] = arr
            if not np.all(np.isfinite(out_c)):
                raise ValueError("values must be finite")
            return out_c.tolist()  # same values, ~15x faster
        out = np.zeros(self.slots, dtype=np.float64)
        out[:arr.size] = arr.astype(np.float64)
        if not np.all(np.isfinite(out)):
            raise ValueError("values must be finite")
        return out.tolist()  # same values, ~15x faster

    def encode(self, values: ArrayLike, *, scale: float | None = None,
               parms_id: Any = None) -> Any:
        """Encode a vector (zero-padded to all slots) as a plaintext."""
        pt = seal.Plaintext()
        pid = parms_id if parms_id is not None else self.top_parms_id
        self._encoder.encode(self._vector(values), pid, scale or self.scale, pt)
        return pt

    def encode_constant(self, value: complex, *, scale: float, parms_id: Any) -> Any:
        """Encode the same value in every slot.

        A real constant encodes as the constant polynomial ``round(value * scale)``, so it
        is exact whenever ``value * scale`` is an integer.
        """
        pt = seal.Plaintext()
        if isinstance(value, complex) and value.imag != 0.0:
            self._encoder.encode(complex(value), parms_id, scale, pt)
        else:
            self._encoder.encode(float(value.real if isinstance(value, complex) else value),
                                 parms_id, scale, pt)
        return pt

    def decode(self, pt: Plaintext) -> NDArray[np.complex128]:
        """Decode a plaintext's slots as complex numbers (no key needed)."""
        return np.asarray(self._encoder.decode_complex(pt), dtype=np.complex128)

    def _plain(self, values: ArrayLike | Plaintext, scale: float | None,
               parms_id: Any) -> Plaintext:
        if _is_plaintext(values):
            if scale is not None or parms_id is not None:
                raise ValueError("a plaintext is already encoded: no scale or parms_id")
            return values
        return self.encode(values, scale=scale, parms_id=parms_id)

    # ------------------------------------------------------------------ encryption
    def encrypt(self, values: ArrayLike | Plaintext, *, scale: float | None = None,
                parms_id: Any = None) -> Ciphertext:
        """Encrypt a vector (encoded at ``scale`` and the level of ``parms_id``, by default
        the top) or an encoded plaintext at its own level: symmetrically if this role
        holds the secret key, else with the public key."""
        pt = self._plain(values, scale, parms_id)
        ct = seal.Ciphertext()
        if self._sym is not None:
            self._sym.encrypt_symmetric(pt, ct)
        elif self._asym is not None:
            self._asym.encrypt(pt, ct)
        else:
            raise ValueError("this context holds no key to encrypt with")
        return ct

    def encrypt_bytes(self, values: ArrayLike | Plaintext, *, scale: float | None = None,
                      parms_id: Any = None) -> bytes:
        """Encrypt as :meth:`encrypt` and serialize; with the secret key, as a seeded
        (half-size) ciphertext whose ``c1`` is this role's own randomness."""
        if self._sym is None:
            return self.serialize(self.encrypt(values, scale=scale, parms_id=parms_id))
        return save(self._sym.encrypt_symmetric(self._plain(values, scale, parms_id)))

    def decrypt_plaintext(self, ct: Ciphertext) -> Plaintext:
        """Decrypt to the plaintext polynomial (NTT form), without decoding."""
        if self._dec is None:
            raise ValueError("this context holds no secret key")
        pt = seal.Plaintext()
        self._dec.decrypt(ct, pt)
        return pt

    def decrypt(self, ct: Ciphertext) -> NDArray[np.complex128]:
        """Decrypt and decode all slots as complex numbers."""
        return self.decode(self.decrypt_plaintext(ct))

    # ------------------------------------------------------------------ serialization
    def serialize(self, ct: Ciphertext) -> bytes:
        return save(ct)

    def deserialize(self, data: bytes, *, at_top: bool = False,
                    scale: float | None = None) -> Ciphertext:
        """Load a ciphertext and check it belongs to these parameters.

        ``at_top`` requires a fresh, top-level ciphertext; ``scale`` its exact scale.
        """
        if not isinstance(data, (bytes, bytearray)) or len(data) == 0:
            raise ProtocolError("empty ciphertext")
        ct = load(seal.Ciphertext(), self._ctx, bytes(data), "ciphertext")
        if ct.size() != 2:
            raise ProtocolError(f"ciphertext has {ct.size()} polynomials; expected 2")
        if not ct.is_ntt_form():  # SEAL loads it, then every CKKS operation refuses it
            raise ProtocolError("ciphertext is not in NTT form")
        if ct.is_transparent():  # c1 = 0: no encryption at all, and SEAL refuses results
            raise ProtocolError("ciphertext is transparent (not an encryption)")
        bits = self._ctx.get_context_data(ct.parms_id()).total_coeff_modulus_bit_count()
        if not 0.0 < ct.scale < 2.0 ** bits:  # SEAL loads such scales but cannot decode them
            raise ProtocolError("ciphertext scale is out of bounds")
        if at_top and ct.parms_id() != self.top_parms_id:
            raise ProtocolError("ciphertext is not at the top modulus level")
        if scale is not None and ct.scale != scale:
            raise ProtocolError(f"ciphertext scale {ct.scale} differs from {scale}")
        return ct

    # ------------------------------------------------------------------ evaluation
    # Sums, differences and products refuse a transparent result with ProtocolError
    # (refuse_transparent): only operands another role crafted can cancel.
    def add(self, a: Ciphertext, b: Ciphertext) -> Ciphertext:
        out = seal.Ciphertext()
        with refuse_transparent():
            self._evaluator.add(a, b, out)
        return out

    def add_inplace(self, a: Ciphertext, b: Ciphertext) -> Ciphertext:
        """``a += b`` in place (no new ciphertext); returns ``a``. For running sums: an
        aggregator adds each submission as it arrives and drops it."""
        with refuse_transparent():
            self._evaluator.add_inplace(a, b)
        return a

    def add_many(self, cts: Sequence[Ciphertext]) -> Ciphertext:
        if not cts:
            raise ValueError("nothing to add")
        out = seal.Ciphertext()
        with refuse_transparent():
            if len(cts) == 1:
                self._evaluator.add_plain(cts[0], self._zero_plain(cts[0]), out)
                return out
            self._evaluator.add_many(list(cts), out)
        return out

    def _zero_plain(self, ct: Ciphertext) -> Any:
        return self.encode_constant(0.0, scale=ct.scale, parms_id=ct.parms_id())

    def sub(self, a: Ciphertext, b: Ciphertext) -> Ciphertext:
        out = seal.Ciphertext()
        with refuse_transparent():
            self._evaluator.sub(a, b, out)
        return out

    def sub_plain(self, a: Ciphertext, plain: ArrayLike | Plaintext) -> Ciphertext:
        """``a`` minus a plaintext (encoded, at ``a``'s level and scale; or a vector, encoded
        there)."""
        pt = plain if _is_plaintext(plain) else self.encode(plain, scale=a.scale,
                                                            parms_id=a.parms_id())
        out = seal.Ciphertext()
        self._evaluator.sub_plain(a, pt, out)
        return out

    def add_plain(self, a: Ciphertext, plain: ArrayLike | Plaintext) -> Ciphertext:
        """``a`` plus a plaintext (encoded, at ``a``'s level and scale; or a vector, encoded
        there)."""
        pt = plain if _is_plaintext(plain) else self.encode(plain, scale=a.scale,
                                                            parms_id=a.parms_id())
        out = seal.Ciphertext()
        self._evaluator.add_plain(a, pt, out)
        return out

    def negate(self, a: Ciphertext) -> Ciphertext:
        out = seal.Ciphertext()
        self._evaluator.negate(a, out)
        return out

    def _need_relin(self) -> Any:
        if self._rk is None:
            raise ValueError("this context has no relinearization keys")
        return self._rk

    def multiply(self, a: Ciphertext, b: Ciphertext, *, relinearize: bool = True,
                 rescale: bool = True) -> Ciphertext:
        """Ciphertext product (levels aligned first), relinearized and rescaled by default.

        ``relinearize=False, rescale=False`` leaves a size-3 ciphertext at scale
        ``a.scale * b.scale``: summing many such products before one relinearization and
        one rescale is what makes Matrix Squaring's "efficient form" cheap.
        """
        if rescale and not relinearize:
            raise ValueError("rescale a product after relinearizing it")
        a, b = self._align(a, b)
        out = seal.Ciphertext()
        with refuse_transparent():
            self._evaluator.multiply(a, b, out)
        if relinearize:
            self._evaluator.relinearize_inplace(out, self._need_relin())
        if rescale:
            self._evaluator.rescale_to_next_inplace(out)
        return out

    def square(self, a: Ciphertext, *, rescale: bool = True) -> Ciphertext:
        out = seal.Ciphertext()
        self._evaluator.square(a, out)
        self._evaluator.relinearize_inplace(out, self._need_relin())
        if rescale:
            self._evaluator.rescale_to_next_inplace(out)
        return out

    def multiply_plain(self, a: Ciphertext, plain: ArrayLike | Plaintext, *,
                       scale: float | None = None, rescale: bool) -> Ciphertext:
        """Slot-wise product with a plaintext: an encoded one, or a vector encoded at
        ``a``'s level and ``scale`` (default: the preset's); rescaled if ``rescale``."""
        pt = plain if _is_plaintext(plain) else self.encode(plain, scale=scale,
                                                            parms_id=a.parms_id())
        if _is_plaintext(plain) and scale is not None:
            raise ValueError("a plaintext is already encoded: no scale")
        out = seal.Ciphertext()
        with refuse_transparent():
            self._evaluator.multiply_plain(a, pt, out)
        if rescale:
            self._evaluator.rescale_to_next_inplace(out)
        return out

    def multiply_const(self, a: Ciphertext, value: complex, *, scale: float,
                       rescale: bool = False) -> Ciphertext:
        """Multiply every slot by ``value`` encoded at ``scale`` (exact for real
        ``value * scale`` integers); the result's scale is ``a.scale * scale``."""
        pt = self.encode_constant(value, scale=scale, parms_id=a.parms_id())
        out = seal.Ciphertext()
        with refuse_transparent():
            self._evaluator.multiply_plain(a, pt, out)
        if rescale:
            self._evaluator.rescale_to_next_inplace(out)
        return out

    def rescale(self, a: Ciphertext) -> Ciphertext:
        """Divide by the last prime of ``a``'s level and round (drops one level)."""
        self.rescale_prime(a)
        out = seal.Ciphertext()
        self._evaluator.rescale_to_next(a, out)
        return out

    def _galois(self) -> Any:
        if self._gk is None:
            raise ValueError("this context has no Galois keys")
        return self._gk

    def rotate(self, a: Ciphertext, step: int) -> Ciphertext:
        """Rotate slots left by ``step`` (slot ``j`` receives slot ``j + step``)."""
        s = int(step) % self.slots
        if s == 0:
            return self.add_many([a])
        if s not in self.rotations:
            raise ValueError(f"no Galois key for a rotation by {s}; keys exist for "
                             f"{list(self.rotations)}")
        out = seal.Ciphertext()
        self._evaluator.rotate_vector(a, s, self._galois(), out)
        return out

    def conjugate(self, a: Ciphertext) -> Ciphertext:
        """Complex-conjugate every slot."""
        if not self.conjugate_key:
            raise ValueError("no Galois key for complex conjugation")
        out = seal.Ciphertext()
        self._evaluator.complex_conjugate(a, self._galois(), out)
        return out

    @staticmethod
    def sum_rotations(slots: int, stride: int = 1) -> list[int]:
        """Rotation steps :meth:`sum_slots` uses for a given stride."""
        steps = []
        s = stride
        while s < slots:
            steps.append(s)
            s *= 2
        return steps

    def sum_slots(self, a: Ciphertext, *, stride: int = 1) -> Ciphertext:
        """Sum slots in the cosets of ``stride`` (a power of two).

        With ``stride=1`` every slot receives the sum of all slots. With ``stride=2`` even
        slots receive the sum of the even slots and odd slots that of the odd ones. No
        partial sums remain in any slot.
        """
        if stride < 1 or stride & (stride - 1):
            raise ValueError("stride must be a power of two")
        out = a
        for step in self.sum_rotations(self.slots, stride):
            out = self.add(out, self.rotate(out, step))
        if out is a:
            out = self.add_many([a])
        return out

    def _align(self, a: Ciphertext, b: Ciphertext) -> tuple[Ciphertext, Ciphertext]:
        """Bring two ciphertexts to the same level (mod switching) and scale."""
        la, lb = self.level_of(a), self.level_of(b)
        if la > lb:
            a2 = seal.Ciphertext()
            self._evaluator.mod_switch_to(a, b.parms_id(), a2)
            a = a2
        elif lb > la:
            b2 = seal.Ciphertext()
            self._evaluator.mod_switch_to(b, a.parms_id(), b2)
            b = b2
        return a, b

    def polyval(self, a: Ciphertext, coeffs: Sequence[float]) -> Ciphertext:
        """Evaluate ``sum(coeffs[k] * x**k)`` slot-wise.

        Powers are built by repeated squaring and products, so the multiplicative depth is
        ``ceil(log2(degree)) + 1``; the preset must provide it.
        """
        c = [float(x) for x in coeffs]
        while len(c) > 1 and c[-1] == 0.0:
            c.pop()
        deg = len(c) - 1
        if deg < 1:
            raise ValueError("polyval needs a polynomial of degree >= 1")
        need = int(np.ceil(np.log2(deg))) + 1 if deg > 1 else 1
        if need > self.level_of(a):
            raise ValueError(f"degree {deg} needs depth {need}; the ciphertext has "
                             f"{self.level_of(a)} levels left")
        powers: dict[int, Ciphertext] = {1: a}
        for k in range(2, deg + 1):
            hi = 1 << (k.bit_length() - 1)
            if hi == k:
                powers[k] = self.square(powers[k // 2])
            else:
                powers[k] = self.multiply(powers[hi], powers[k - hi])
        terms = []
        target_scale = None
        for k in range(1, deg + 1):
            if c[k] == 0.0:
                continue
            t = self.multiply_const(powers[k], c[k], scale=self.scale, rescale=True)
            terms.append(t)
        # bring every term to the lowest level and a common scale
        low = min(terms, key=self.level_of)
        target_scale = low.scale
        out = None
        for t in terms:
            t2, _ = self._align(t, low)
            t2.scale = target_scale  # scales differ by prime/2^k ratios ~ 1 + 2^-40
            out = t2 if out is None else self.add(out, t2)
        assert out is not None
        if c[0] != 0.0:
            pt = self.encode_constant(c[0], scale=out.scale, parms_id=out.parms_id())
            res = seal.Ciphertext()
            self._evaluator.add_plain(out, pt, res)
            out = res
        return out

    # ==================================================================================
    # Exact-scale evaluation (added for composite polynomials, fedsec.crypto.poly/sign).
    #
    # SEAL's primes are not powers of two: a rescale divides the scale by a prime q that
    # differs from 2^40 by ~2^-16 (ring 2^15), and repeated squaring doubles the relative
    # deviation at every level, so after ~16 levels an untracked scale is off by a factor
    # of order one. These methods never *assume* a scale: they read the ciphertext's exact
    # scale and the exact prime, and choose the encoding scale of plaintext constants so
    # that a result lands on a requested scale exactly.
    # ==================================================================================
    def parms_id_at_level(self, level: int) -> Any:
        """The parameters id of chain level ``level`` (0 is the last, rescale-free one)."""
        data = self._ctx.first_context_data()
        top = int(data.chain_index())
        if not 0 <= int(level) <= top:
            raise ValueError(f"The 'level' parameter of parms_id_at_level must be in "
                             f"[0, {top}]. Got {level} instead.")
        while int(data.chain_index()) > int(level):
            data = data.next_context_data()
        return data.parms_id()

    @property
    def top_level(self) -> int:
        """The level of a freshly encrypted ciphertext (rescalings available)."""
        return int(self._ctx.first_context_data().chain_index())

    def mod_switch(self, a: Ciphertext, *, level: int | None = None,
                   parms_id: Any = None) -> Ciphertext:
        """A copy of ``a`` at a lower ``level`` or at the level of ``parms_id`` (primes
        dropped without rescaling; scale and value kept; a copy if it is there already)."""
        if (level is None) == (parms_id is None):
            raise ValueError("give exactly one of level and parms_id")
        if level is not None:
            cur = self.level_of(a)
            if level > cur:
                raise ValueError(f"cannot raise a ciphertext from level {cur} to {level}")
            parms_id = a.parms_id() if level == cur else self.parms_id_at_level(level)
        out = seal.Ciphertext()
        if a.parms_id() == parms_id:
            self._evaluator.add_plain(a, self._zero_plain(a), out)
            return out
        self._evaluator.mod_switch_to(a, parms_id, out)
        return out

    def with_value_factor(self, a: Ciphertext, factor: float) -> Ciphertext:
        """A copy of ``a`` whose decrypted value is multiplied by ``factor`` > 0, for free.

        CKKS decodes ``m / scale``; dividing the recorded scale by ``factor`` multiplies
        the value without touching the ciphertext (no noise, no level). Keep ``factor``
        near 1: it moves the scale away from the primes.
        """
        if not (np.isfinite(factor) and factor > 0):
            raise ValueError(f"The 'factor' parameter of with_value_factor must be a finite "
                             f"float > 0. Got {factor!r} instead.")
        out = self.mod_switch(a, level=self.level_of(a))
        out.scale = float(a.scale) / float(factor)
        return out

    def add_constant(self, a: Ciphertext, value: float) -> Ciphertext:
        """Add the real ``value`` to every slot (no level used)."""
        pt = self.encode_constant(float(value), scale=a.scale, parms_id=a.parms_id())
        out = seal.Ciphertext()
        self._evaluator.add_plain(a, pt, out)
        return out

    def multiply_const_exact(self, a: Ciphertext, value: float, *, level: int,
                          scale: float) -> Ciphertext:
        """``value * a`` at chain ``level`` (below ``a``'s) with scale exactly ``scale``.

        ``a`` is switched down to ``level + 1``; the constant is encoded at
        ``scale * q / a.scale`` (``q`` the prime the rescale divides by), multiplied and
        rescaled. The constant's absolute precision is about ``a.scale / (scale * q)``.
        """
        if level >= self.level_of(a):
            raise ValueError(f"multiply_const_exact needs a target level below the "
                             f"ciphertext's ({self.level_of(a)}); got {level}")
        src = self.mod_switch(a, level=level + 1) if self.level_of(a) > level + 1 else a
        q = self.rescale_prime(src)
        pt_scale = float(scale) * q / float(src.scale)
        if not 1.0 <= pt_scale < 2.0 ** 60:
            raise ValueError(f"constant encoding scale {pt_scale:.3g} is out of range; the "
                             f"input scale {src.scale:.3g} is far from the target {scale:.3g}")
        pt = self.encode_constant(float(value), scale=pt_scale, parms_id=src.parms_id())
        out = seal.Ciphertext()
        self._evaluator.multiply_plain(src, pt, out)
        self._evaluator.rescale_to_next_inplace(out)
        self.snap_scale(out, scale)
        return out

    @staticmethod
    def snap_scale(a: Ciphertext, scale: float, *, rtol: float = 1e-9) -> None:
        """Set ``a``'s recorded scale to ``scale`` when they differ only by floating-point
        rounding (relative difference at most ``rtol``); raise otherwise."""
        if abs(float(a.scale) - float(scale)) > rtol * abs(float(scale)):
            raise ValueError(f"scale {a.scale!r} is not within rounding of {scale!r}")
        a.scale = float(scale)

    def relinearize(self, a: Ciphertext) -> Ciphertext:
        """Relinearize a size-3 ciphertext (a copy if it already has size 2)."""
        out = seal.Ciphertext()
        if a.size() == 2:
            self._evaluator.add_plain(a, self._zero_plain(a), out)
            return out
        self._evaluator.relinearize(a, self._need_relin(), out)
        return out

    @property
    def last_parms_id(self) -> Any:
        """The parameters id of the lowest level (one data prime)."""
        return self._ctx.last_parms_id()
