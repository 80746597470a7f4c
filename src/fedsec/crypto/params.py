"""Named CKKS parameter presets and checked construction.

Each preset states its security level and what it supports. Security is checked against
SEAL's table of maximal coefficient-modulus sizes (HomomorphicEncryption.org standard,
ternary secrets): a preset claiming 128-bit security whose modulus exceeds the table is
rejected. Presets whose name starts with ``INSECURE_TEST_`` exist for fast tests only;
the command line never offers them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import tenseal.sealapi as seal

__all__ = ["CKKSParams", "PRESETS", "get_preset", "DEFAULT_PRESET", "MALICIOUS_PRESET",
           "THRESHOLD_PRESET", "default_preset"]


@dataclass(frozen=True)
class CKKSParams:
    """CKKS encryption parameters.

    Attributes
    ----------
    name : str
        Preset name, e.g. ``CKKS_128_N8192_DEPTH2_S49``: security bits, ring dimension,
        multiplicative depth (rescaled products the chain is sized for) and, where two
        presets would share a name, the fresh scale.
    poly_modulus_degree : int
        Ring dimension ``n``; a ciphertext packs ``n/2`` complex slots.
    coeff_mod_bit_sizes : tuple of int
        Bit sizes of the RNS primes; the last is SEAL's special (key-switching) prime.
    scale_bits : int
        ``log2`` of the default encoding scale.
    security_bits : int
        Claimed classical security (128), or 0 for test-only parameters.
    supports : str
        What the preset is sized for.
    """

    name: str
    poly_modulus_degree: int
    coeff_mod_bit_sizes: tuple[int, ...]
    scale_bits: int
    security_bits: int
    supports: str

    @property
    def slots(self) -> int:
        return self.poly_modulus_degree // 2

    @property
    def total_modulus_bits(self) -> int:
        return sum(self.coeff_mod_bit_sizes)

    @property
    def depth(self) -> int:
        """Number of rescalings available (data primes minus one)."""
        return len(self.coeff_mod_bit_sizes) - 2

    @property
    def insecure(self) -> bool:
        return self.security_bits < 128

    def primes(self) -> tuple[int, ...]:
        """The RNS primes SEAL picks for these bit sizes (data primes, then the special)."""
        return _primes(self.poly_modulus_degree, self.coeff_mod_bit_sizes)

    def check(self) -> CKKSParams:
        """Validate the parameters; return ``self`` or raise ``ValueError``."""
        n = self.poly_modulus_degree
        if n not in (1024, 2048, 4096, 8192, 16384, 32768):
            raise ValueError(f"{self.name}: poly_modulus_degree must be a power of two "
                             f"in 1024..32768; got {n}")
        if len(self.coeff_mod_bit_sizes) < 2:
            raise ValueError(f"{self.name}: need at least one data prime and a special prime")
        if any(not 20 <= b <= 60 for b in self.coeff_mod_bit_sizes):
            raise ValueError(f"{self.name}: every prime must have 20..60 bits")
        if self.security_bits >= 128:
            limit = seal.CoeffModulus.MaxBitCount(n, seal.SEC_LEVEL_TYPE.TC128)
            if self.total_modulus_bits > limit:
                raise ValueError(
                    f"{self.name}: {self.total_modulus_bits}-bit modulus exceeds the "
                    f"{limit}-bit limit for 128-bit security at n={n}")
            if self.name.startswith("INSECURE_TEST_"):
                raise ValueError(f"{self.name}: INSECURE_TEST_ presets cannot claim security")
        elif not self.name.startswith("INSECURE_TEST_"):
            raise ValueError(f"{self.name}: parameters below 128-bit security must be named "
                             "INSECURE_TEST_*")
        if not 20 <= self.scale_bits <= 60:
            raise ValueError(f"{self.name}: scale_bits must be in 20..60")
        return self


# FHAUC's chain (the default). Fresh ciphertexts at scale 2^49; the square (or product) is
# rescaled by the 37-bit prime (scale 2^98 / q ~ 2^61); the aggregator's real-valued masks are
# encoded at scale exactly the next prime (35 bits) and rescaled by it, which keeps the scale
# and destroys the divisibility an exact constant multiplication would leave in the decrypted
# polynomial. The last level (35 + 35 + 34 = 104 bits) holds raw values up to 3 * 2^40 at scale
# 2^61 (FHAUC's bound for 2^20 samples). The special prime is 42 bits: key switching rounds by
# it, and 5 bits above the largest data prime its own noise stays below the rounding noise,
# while the 18 bits saved over a 60-bit special prime pay for the mask's level.
FHAUC_CHAIN = (35, 35, 34, 35, 37, 42)
FHAUC_SCALE_BITS = 49

# FHAUC's masked chain (the default). A mask encoded at a prime ``q`` is ``K/q``
# for an integer ``K``: a party can test candidate denominators against that grid unless the
# values it reads carry noise above one grid step, ``denom/q``, which grows with the
# federation. So the grid must be fine (a large ``q``) and the noise proportional to the
# counts (parties add it to their own counts before the aggregator squares: it then scales
# with the pooled counts; see fedsec.auc.masking). Fresh scale 2^39; the product is NOT
# rescaled before masking (scale 2^78); the mask is encoded at the 48-bit top prime and
# rescaled by it, so the last level (41 + 41 + 40 = 122 bits) holds the masked result, values
# up to 6 * 2^40 at scale 2^78. Special prime 48 bits (= the largest data prime; rotations
# and relinearization happen at the top level). 218 bits: the 128-bit limit at n = 8192.
MASKED_CHAIN = (41, 41, 40, 48, 48)
MASKED_SCALE_BITS = 39

@functools.lru_cache(maxsize=32)
def _primes(n: int, bits: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(m.value()) for m in seal.CoeffModulus.Create(n, list(bits)))


_PRESETS = [
    CKKSParams(
        "CKKS_128_N8192_DEPTH1_S39", 8192, MASKED_CHAIN, MASKED_SCALE_BITS, 128,
        "4096 complex slots; fresh scale 2^39; one ciphertext product (not rescaled), then "
        "a real plaintext multiplication encoded at the 48-bit top prime and rescaled; the "
        "last level holds values up to 6*2^40 at scale 2^78. Used by FHAUC (default, both "
        "modes): its 48-bit mask grid is fine enough that the parties' count-proportional "
        "noise hides it up to 2^20 samples (fedsec.auc.masking).",
    ),
    CKKSParams(
        "CKKS_128_N16384_DEPTH1_S50", 16384, (48, 48, 48, 52, 60), 50, 128,
        "8192 complex slots; fresh scale 2^50; one ciphertext product (not rescaled), then "
        "a real plaintext multiplication encoded at the 52-bit top prime and rescaled. "
        "Malicious FHAUC's default: its shares and zero-sum masks make slots ~2^12 larger "
        "than the counts, and the runs must agree to the tolerance (1e-7) even for a "
        "single sample per class, which the 2^39 scale of the semi-honest chain does not "
        "allow.",
    ),
    CKKSParams(
        "CKKS_128_N16384_DEPTH1_S60", 16384, (60, 60, 60, 60, 60), 60, 128,
        "8192 complex slots; fresh scale 2^60; one ciphertext product (not rescaled, scale "
        "2^120), then a real plaintext multiplication encoded at the 60-bit top prime and "
        "rescaled. Threshold FHAUC's default: the collective key switch adds smudging "
        "noise of about 2^88 to the aggregate, which the 2^120 scale keeps below 2^-22 "
        "on the squared counts.",
    ),
    CKKSParams(
        "INSECURE_TEST_N4096_DEPTH1_S60", 4096, (60, 60, 60, 60, 60), 60, 0,
        "TESTS ONLY, NOT SECURE: threshold FHAUC's chain on a 4096 ring.",
    ),
    CKKSParams(
        "INSECURE_TEST_N4096_DEPTH1_S50", 4096, (48, 48, 48, 52, 60), 50, 0,
        "TESTS ONLY, NOT SECURE: malicious FHAUC's default chain on a 4096 ring.",
    ),
    CKKSParams(
        "CKKS_128_N32768_DEPTH1_S50", 32768, (48, 48, 48, 60, 60), 50, 128,
        "16384 complex slots; FHAUC's masked flow on ring 2^15 (fresh scale 2^50, mask at a "
        "60-bit prime): 4x the points per ciphertext, ~10x the key material of the "
        "default; for very many decision points.",
    ),
    CKKSParams(
        "INSECURE_TEST_N4096_DEPTH1_S39", 4096, MASKED_CHAIN, MASKED_SCALE_BITS, 0,
        "TESTS ONLY, NOT SECURE: FHAUC's default chain on a 4096 ring (2048 slots).",
    ),
    CKKSParams(
        "CKKS_128_N8192_DEPTH2_S49", 8192, FHAUC_CHAIN, FHAUC_SCALE_BITS, 128,
        "4096 complex slots; fresh scale 2^49; one ciphertext product rescaled by a 37-bit "
        "prime (scale ~2^61), then a real plaintext multiplication encoded at the next "
        "(35-bit) prime and rescaled. The last level holds values up to 3*2^40 at scale 2^61. "
        "FHAUC's earlier chain (kept for comparisons): its 35-bit mask grid "
        "let a party test candidate denominators, so FHAUC refuses it.",
    ),
    CKKSParams(
        "CKKS_128_N8192_DEPTH1", 8192, (54, 54, 50, 60), 50, 128,
        "4096 complex slots; one ciphertext multiplication with rescale, then an exact "
        "multiplication by a 16-bit-scale constant. FHAUC's earlier chain, kept for "
        "comparisons; it has no level for a rescaled mask, so FHAUC refuses it.",
    ),
    CKKSParams(
        "CKKS_128_N8192_DEPTH2", 8192, (60, 40, 40, 60), 40, 128,
        "4096 complex slots; two multiplications with rescale at a 40-bit scale "
        "(~1e-7 relative precision).",
    ),
    CKKSParams(
        "CKKS_128_N16384_DEPTH4", 16384, (60, 50, 50, 50, 50, 60), 50, 128,
        "8192 complex slots; four multiplications at a 50-bit scale. The FHAUC papers' "
        "configuration (ring 2^14, 50-bit scaling, depth 4); used as the baseline in "
        "benchmarks.",
    ),
    CKKSParams(
        "INSECURE_TEST_N4096_DEPTH2_S49", 4096, FHAUC_CHAIN, FHAUC_SCALE_BITS, 0,
        "TESTS ONLY, NOT SECURE: FHAUC's default chain on a 4096 ring (2048 slots).",
    ),
    CKKSParams(
        "INSECURE_TEST_N4096_DEPTH1", 4096, (54, 54, 50, 60), 50, 0,
        "TESTS ONLY, NOT SECURE: the earlier FHAUC prime chain on a 4096 ring (2048 slots).",
    ),
    CKKSParams(
        "INSECURE_TEST_N4096_DEPTH2", 4096, (60, 40, 40, 60), 40, 0,
        "TESTS ONLY, NOT SECURE: two multiplications on a 4096 ring (2048 slots).",
    ),
]

# ---------------------------------------------------------------------------------------
# Deep chains for composite polynomials (homomorphic comparison, fedsec.crypto.sign).
# Ring 2^15 admits 881 modulus bits at 128-bit security; [60, 40 x 19, 60] uses 880 of them:
# 19 rescalings at a 40-bit scale, enough for the minimax sign of precision alpha = 8, 10, 12
# (depth 11, 14, 16) with levels to spare for the differences fed into it. The first
# (60-bit) prime holds the result: values up to ~2^19 at scale 2^40.
SIGN_SCALE_BITS = 40
_PRESETS += [
    CKKSParams(
        "CKKS_128_N32768_DEPTH19", 32768, (60,) + (40,) * 19 + (60,), SIGN_SCALE_BITS, 128,
        "16384 complex slots; 19 rescalings at a 40-bit scale (880 of the 881 bits allowed "
        "at 128-bit security). Sized for the composite minimax sign (comparison) of "
        "precision alpha = 8 / 10 / 12, which uses depth 11 / 14 / 16.",
    ),
    CKKSParams(
        "INSECURE_TEST_N4096_DEPTH16", 4096, (60,) + (40,) * 16 + (60,), SIGN_SCALE_BITS, 0,
        "TESTS ONLY, NOT SECURE: 16 rescalings at a 40-bit scale on a 4096 ring (2048 "
        "slots), for fast tests of the composite sign evaluation (alpha up to 12).",
    ),
    CKKSParams(
        "INSECURE_TEST_N4096_DEPTH19", 4096, (60,) + (40,) * 19 + (60,), SIGN_SCALE_BITS, 0,
        "TESTS ONLY, NOT SECURE: CKKS_128_N32768_DEPTH19's chain on a 4096 ring (2048 "
        "slots), for fast tests of Priv-PFL (fedsec.pfl.secure).",
    ),
]

PRESETS: dict[str, CKKSParams] = {p.name: p.check() for p in _PRESETS}
DEFAULT_PRESET = "CKKS_128_N8192_DEPTH1_S39"
#: Malicious-aggregator FHAUC's default (ring 2^14; see the preset's description).
MALICIOUS_PRESET = "CKKS_128_N16384_DEPTH1_S50"
#: Threshold-key FHAUC's default (``fedsec.auc.fhauc_threshold``): the scale leaves room for
#: the collective key switch's smudging.
THRESHOLD_PRESET = "CKKS_128_N16384_DEPTH1_S60"


def default_preset(security: str) -> str:
    """FHAUC's default preset for ``security`` ("semi-honest" or "malicious")."""
    return MALICIOUS_PRESET if security == "malicious" else DEFAULT_PRESET

# ---------------------------------------------------------------- HESV (Zheng et al.) presets
# Added for fedsec.shapley.hesv; nothing above changes. Zheng et al. used ring 2^12
# with primes [31, 23, 23, 31] and scale 2^23 (108 bits). Ours keeps the ring and two
# rescales (plaintext weights and one ciphertext product, in either order) within SEAL's
# 109-bit limit for 128-bit security at n = 4096: fresh scale 2^24, two 24-bit rescale
# primes, a 34-bit last prime (decrypted values up to 2^9 in magnitude). The special prime
# is only 27 bits: HESV never rotates, and it relinearizes only products at scale 2^48,
# where the key-switching noise (~2^(34-27+8) = 2^15) is 2^-33 of the scale.
HESV_CHAIN = (34, 24, 24, 27)
#: 60 + 40 + 40 + 60 = 200 bits, within SEAL's 218-bit limit at n = 8192.
HESV_PRECISE_CHAIN = (60, 40, 40, 60)
_HESV_PRESETS = [
    CKKSParams(
        "CKKS_128_N4096_DEPTH2_S24", 4096, HESV_CHAIN, 24, 128,
        "2048 complex slots; fresh scale 2^24; two rescaled products (HESV: plaintext "
        "weights and one ciphertext product); decrypted values must stay below 2^9 in "
        "magnitude; ~1e-5 absolute precision on unit-size scores. Zheng et al.'s ring. "
        "Rotate only at scale ~2^48 (before a rescale): the special prime is small.",
    ),
    CKKSParams(
        "CKKS_128_N8192_DEPTH2_S40", 8192, HESV_PRECISE_CHAIN, 40, 128,
        "4096 complex slots; fresh scale 2^40; two rescaled products as HESV's ring-4096 "
        "preset; decrypted values up to 2^19 in magnitude; ~1e-9 absolute precision on "
        "unit-size scores. For multi-layer models, whose re-encrypted activations "
        "(squares of scores in the hundreds) need more than 2^24's precision.",
    ),
    CKKSParams(
        "INSECURE_TEST_N2048_DEPTH2_S24", 2048, HESV_CHAIN, 24, 0,
        "TESTS ONLY, NOT SECURE: HESV's chain on a 2048 ring (1024 slots).",
    ),
]
PRESETS.update({p.name: p.check() for p in _HESV_PRESETS})


def get_preset(name: str, *, allow_insecure: bool = False) -> CKKSParams:
    """Look up a preset by name; insecure test presets need ``allow_insecure=True``."""
    if not isinstance(name, str):
        raise TypeError(f"The 'preset' parameter must be a str. Got {type(name).__name__}.")
    try:
        p = PRESETS[name]
    except KeyError:
        secure = ", ".join(k for k in PRESETS if not k.startswith("INSECURE_"))
        raise ValueError(f"unknown CKKS preset {name!r}; choose one of: {secure}") from None
    if p.insecure and not allow_insecure:
        raise ValueError(f"{name} is an insecure test preset; pass allow_insecure=True "
                         "(tests only)")
    return p
