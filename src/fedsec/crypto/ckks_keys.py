"""CKKS key material: what a role holds, makes, sends and loads.

:class:`CKKSKeys` is the parameters plus whichever of the secret key, public key,
relinearization keys and Galois keys a role holds, and their serialization. It computes
nothing: :class:`fedsec.crypto.ckks.CKKSContext` is the encoder, encryptor, decryptor and
evaluator over a :class:`CKKSKeys`.

What may leave a party
----------------------
* :meth:`CKKSKeys.public_bytes` carries the parameters, the public key, the
  relinearization keys and only the Galois keys that were asked for. It cannot carry the
  secret key: it is built from the public objects alone (a test checks the secret key's
  bytes never occur in it).
* :meth:`CKKSKeys.public_key_bytes` carries the public key alone (a party that only
  encrypts).
* :meth:`CKKSKeys.secret_bytes` carries the secret key; it is meant to be sealed to another
  party (see :mod:`fedsec.crypto.keys`), never sent in the clear.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import tenseal.sealapi as seal

from fedsec.crypto.params import CKKSParams, get_preset
from fedsec.crypto.sealio import build_seal_context, galois_element, load, save
from fedsec.errors import ProtocolError
from fedsec.protocol import wire

__all__ = ["CKKSKeys"]


class CKKSKeys:
    """CKKS parameters plus whatever keys this role holds (SEAL objects).

    Make one with :meth:`generate` (the key holder) or load one with
    :meth:`from_public_bytes` (aggregators) or :meth:`from_secret_bytes` (parties).
    """

    def __init__(self, params: CKKSParams, *, secret_key: Any = None, public_key: Any = None,
                 relin_keys: Any = None, galois_keys: Any = None,
                 rotations: Iterable[int] = (), conjugate: bool = False,
                 seal_context: Any = None) -> None:
        self.params = params
        self.seal_context = seal_context if seal_context is not None \
            else build_seal_context(params)
        self.secret_key = secret_key
        self.public_key = public_key
        self.relin_keys = relin_keys
        self.galois_keys = galois_keys
        self.rotations: tuple[int, ...] = tuple(sorted({int(r) % params.slots
                                                        for r in rotations} - {0}))
        self.conjugate = bool(conjugate)
        self._public_blobs: list[bytes] | None = None

    @classmethod
    def generate(cls, params: CKKSParams | str, *, rotations: Iterable[int] = (),
                 conjugate: bool = False, relin: bool = True,
                 allow_insecure: bool = False) -> CKKSKeys:
        """Generate a fresh key set.

        Parameters
        ----------
        params : CKKSParams or str
            A preset or its name.
        rotations : iterable of int
            Left-rotation steps to create Galois keys for. Only these rotations will be
            possible; Galois keys dominate the set-up traffic, so ask for what you use.
        conjugate : bool
            Also create the key for complex conjugation.
        relin : bool
            Create relinearization keys (needed for ciphertext multiplication).
        """
        if isinstance(params, str):
            params = get_preset(params, allow_insecure=allow_insecure)
        elif params.insecure and not allow_insecure:
            raise ValueError(f"{params.name} is insecure; pass allow_insecure=True (tests only)")
        ctx = build_seal_context(params.check())
        keygen = seal.KeyGenerator(ctx)
        sk = keygen.secret_key()
        pk = seal.PublicKey()
        keygen.create_public_key(pk)
        rk = rk_bytes = None
        if relin:
            # The seeded ("Serializable") form halves the bytes on the wire; load it back
            # for local use instead of generating the keys twice.
            rk_bytes = save(keygen.create_relin_keys())
            rk = load(seal.RelinKeys(), ctx, rk_bytes, "relinearization keys")
        steps = sorted({int(r) % params.slots for r in rotations} - {0})
        elts = [galois_element(s, params.poly_modulus_degree) for s in steps]
        if conjugate:
            elts.append(2 * params.poly_modulus_degree - 1)
        gk = gk_bytes = None
        if elts:
            gk_bytes = save(keygen.create_galois_keys(elts))
            gk = load(seal.GaloisKeys(), ctx, gk_bytes, "Galois keys")
        out = cls(params, secret_key=sk, public_key=pk, relin_keys=rk, galois_keys=gk,
                  rotations=steps, conjugate=conjugate, seal_context=ctx)
        out._public_blobs = [save(pk), rk_bytes or b"", gk_bytes or b""]
        return out

    # ------------------------------------------------------------------ what it holds
    @property
    def has_secret_key(self) -> bool:
        return self.secret_key is not None

    @property
    def has_relin_keys(self) -> bool:
        return self.relin_keys is not None

    # ------------------------------------------------------------------ serialization
    def _meta(self) -> dict[str, Any]:
        p = self.params
        return {"preset": p.name, "n": p.poly_modulus_degree,
                "primes": list(p.coeff_mod_bit_sizes), "scale_bits": p.scale_bits,
                "rotations": list(self.rotations), "conjugate": self.conjugate}

    def public_bytes(self) -> bytes:
        """Parameters and public keys for an aggregator. Never contains the secret key."""
        if self._public_blobs is not None:
            return wire.encode("ckks/public", self._meta(), self._public_blobs)
        blobs = [save(self.public_key) if self.public_key is not None else b"",
                 save(self.relin_keys) if self.relin_keys is not None else b"",
                 save(self.galois_keys) if self.galois_keys is not None else b""]
        return wire.encode("ckks/public", self._meta(), blobs)

    def public_key_bytes(self) -> bytes:
        """Parameters and the public key only: what a party that only encrypts needs (no
        relinearization or Galois keys, never the secret key)."""
        if self.public_key is None:
            raise ValueError("this context holds no public key")
        blob = self._public_blobs[0] if self._public_blobs is not None \
            else save(self.public_key)
        meta = {**self._meta(), "rotations": [], "conjugate": False}
        return wire.encode("ckks/public", meta, [blob, b"", b""])

    def secret_bytes(self) -> bytes:
        """The secret key with its parameters, to be *sealed* to another party."""
        if self.secret_key is None:
            raise ValueError("this context holds no secret key")
        return wire.encode("ckks/secret", self._meta(), [save(self.secret_key)])

    @staticmethod
    def _params_from_meta(meta: dict[str, Any], allow_insecure: bool) -> CKKSParams:
        try:
            params = get_preset(str(meta["preset"]), allow_insecure=allow_insecure)
        except (KeyError, ValueError) as exc:
            raise ProtocolError(f"key material names an unusable preset: {exc}") from None
        primes = meta.get("primes")
        if (meta.get("n") != params.poly_modulus_degree or not isinstance(primes, list)
                or tuple(primes) != params.coeff_mod_bit_sizes):
            raise ProtocolError("key material parameters do not match their preset")
        rot = meta.get("rotations", [])
        if not isinstance(rot, list) or not all(
                isinstance(r, int) and not isinstance(r, bool) for r in rot):
            raise ProtocolError("key material lists invalid rotations")
        return params

    @classmethod
    def from_public_bytes(cls, data: bytes, *, allow_insecure: bool = False) -> CKKSKeys:
        """Load an aggregator's keys (public key, relinearization and Galois keys)."""
        msg = wire.decode(data, expect="ckks/public")
        params = cls._params_from_meta(msg.meta, allow_insecure)
        if len(msg.blobs) != 3:
            raise ProtocolError("public key material must have 3 parts")
        ctx = build_seal_context(params)
        pk = load(seal.PublicKey(), ctx, msg.blobs[0], "public key") if msg.blobs[0] else None
        rk = load(seal.RelinKeys(), ctx, msg.blobs[1], "relinearization keys") \
            if msg.blobs[1] else None
        gk = load(seal.GaloisKeys(), ctx, msg.blobs[2], "Galois keys") if msg.blobs[2] else None
        rotations = [int(r) for r in msg.meta.get("rotations", [])]
        out = cls(params, public_key=pk, relin_keys=rk, galois_keys=gk, rotations=rotations,
                  conjugate=bool(msg.meta.get("conjugate")), seal_context=ctx)
        out._check_switching_keys()
        return out

    def _check_switching_keys(self) -> None:
        """Relinearization and Galois keys are both SEAL ``KSwitchKeys``: SEAL loads either
        as the other, or with missing parts, and then reads past their ends (segmentation
        fault). They must be exactly what the metadata announces, one part per data prime."""
        parts = len(self.params.coeff_mod_bit_sizes) - 1
        rk, gk = self.relin_keys, self.galois_keys
        if rk is not None and (rk.size() != 1 or len(rk.data()) != 1
                               or len(rk.key(2)) != parts):
            raise ProtocolError("relinearization keys have the wrong shape")
        n = self.params.poly_modulus_degree
        elts = {galois_element(r, n) for r in self.rotations}
        if self.conjugate:
            elts.add(2 * n - 1)
        if gk is None and elts:
            raise ProtocolError("key material announces rotations without Galois keys")
        if gk is not None and (gk.size() != len(elts) or any(
                not gk.has_key(e) or len(gk.key(e)) != parts for e in elts)):
            raise ProtocolError("Galois keys do not match the rotations they announce")

    @classmethod
    def from_secret_bytes(cls, data: bytes, *, allow_insecure: bool = False) -> CKKSKeys:
        """Load a party's keys from (unsealed) secret key material."""
        msg = wire.decode(data, expect="ckks/secret")
        params = cls._params_from_meta(msg.meta, allow_insecure)
        if len(msg.blobs) != 1:
            raise ProtocolError("secret key material must have 1 part")
        ctx = build_seal_context(params)
        sk = load(seal.SecretKey(), ctx, msg.blobs[0], "secret key")
        return cls(params, secret_key=sk, seal_context=ctx)
