"""Party-side policy: what a party accepts, whatever the run configuration says.

The run configuration (decision points, preset, tolerance, splits) is chosen by whoever
starts an evaluation - in a deployment, the aggregator. A party must not let that choice
weaken its own protection, so every party role takes a :class:`PartyPolicy` and checks the
configuration and every participant set against it before it uses its data or keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedsec._validation import check_int, check_real
from fedsec.crypto.identity import Roster
from fedsec.crypto.keysetup import PARTY_MAX_MESSAGE_BYTES
from fedsec.crypto.params import DEFAULT_PRESET, MALICIOUS_PRESET, THRESHOLD_PRESET, get_preset
from fedsec.errors import PolicyViolation

__all__ = ["PartyPolicy", "DEFAULT_MAX_TOLERANCE", "DEFAULT_MIN_BOUND_BITS",
           "DEFAULT_MAX_DECISION_POINTS", "DEFAULT_MIN_DECISION_POINTS",
           "DEFAULT_MAX_KEY_BYTES", "IN_PROCESS_MAX_KEY_BYTES", "default_quorum",
           "estimated_key_bytes"]

#: Ceiling on the malicious-mode tolerance a party accepts (set from measured CKKS error).
DEFAULT_MAX_TOLERANCE = 1e-6
#: The weakest cheating bound (in bits) a party accepts, tolerance term included.
DEFAULT_MIN_BOUND_BITS = 40.0
#: Most decision points a party accepts by default (node config ``max-decision-points``).
DEFAULT_MAX_DECISION_POINTS = 8192
#: Fewest decision points a party accepts from a server by default: with very few points
#: the trapezoid AUC and its bound are a handful of pooled confusion counts (measured: at
#: N = 3 a server read the pooled Pos, Neg, TP and FP at 0.5).
DEFAULT_MIN_DECISION_POINTS = 10
#: Cap on the key material (estimated in-memory bytes, :func:`estimated_key_bytes`) a
#: party builds for one run: FHAUC's keys on the default ring 2^13 are ~50 MiB, on the
#: papers' ring 2^14 ~105 MiB; ring 2^15 (``CKKS_128_N32768_DEPTH19``) would be 2-3 GiB
#: (measured: relinearisation plus one rotation key took 22 s and 1.5 GB), so it is
#: refused unless a party raises this cap on purpose.
DEFAULT_MAX_KEY_BYTES = 256 << 20
#: The cap of a policy made by an in-process runner: there the caller chose the preset for
#: every party and builds the keys on its own machine anyway (1 TiB: no cap).
IN_PROCESS_MAX_KEY_BYTES = 1 << 40


def default_quorum(n_roster: int, roster_quorum: int | None = None,
                   security: str | None = None) -> int:
    """The one default quorum rule: the fewest parties a run may cover.

    The roster's quorum if it states one; otherwise the whole roster, except a
    semi-honest evaluation, which may go on over any 2 (its threat model trusts the
    aggregator to follow the protocol; a party that wants more says so with a quorum).
    Key set-up on its own (``security=None``: the mode is not known yet) takes the
    strict branch, so a party that was not told otherwise never builds keys with fewer
    than the whole roster. A party's own ``quorum`` (policy / node config) overrides it.
    Never below 2.
    """
    if roster_quorum is not None:
        q = int(roster_quorum)
    elif security == "semi-honest":
        q = 2
    else:
        q = int(n_roster)
    return max(2, q)


def estimated_key_bytes(preset: str, n_keys: int, *, allow_insecure: bool = False) -> int:
    """Estimated in-memory size of ``n_keys`` key-switching keys (relinearisation,
    Galois) on ``preset``: each is ``k - 1`` ciphertexts of 2 polynomials over the ``k``
    primes of the chain, 8 bytes a coefficient (SEAL's layout before compression)."""
    params = get_preset(preset, allow_insecure=allow_insecure)
    k = len(params.coeff_mod_bit_sizes)
    return int(n_keys) * (k - 1) * 2 * int(params.poly_modulus_degree) * k * 8


@dataclass(frozen=True)
class PartyPolicy:
    """Limits a party enforces on every evaluation it takes part in.

    Parameters
    ----------
    quorum : int, optional
        The fewest participants an evaluation may have (never below 2). Default:
        :func:`default_quorum` (the roster's quorum if it states one, else the whole
        roster, except 2 in semi-honest mode).
    max_tolerance : float
        Largest malicious-mode tolerance accepted (default 1e-6).
    min_bound_bits : float
        Smallest cheating bound accepted, in bits, including the tolerance term
        (default 40, i.e. at most 2^-40).
    max_decision_points : int
        Most decision points accepted (default 8192).
    min_decision_points : int
        Fewest decision points accepted (default 10; see
        :data:`DEFAULT_MIN_DECISION_POINTS`).
    presets : tuple of str, optional
        Presets accepted. Default: only the protocols' own default presets
        (``CKKS_128_N8192_DEPTH1_S39`` semi-honest, ``CKKS_128_N16384_DEPTH1_S50``
        malicious), plus the ``INSECURE_TEST_*`` presets for a
        configuration built with ``allow_insecure=True`` (tests; never reachable from the
        CLI or the Flower app). A server cannot make a party build other keys unless the
        party lists them here.
    max_key_bytes : int
        Most key material (estimated bytes, :func:`estimated_key_bytes`) a party builds
        for one run, checked before any key is made, whatever ``presets`` allows
        (default 256 MiB: refuses ring 2^15).
    max_message_bytes : int
        Largest message accepted from the aggregator (default 64 MiB).
    """

    quorum: int | None = None
    max_tolerance: float = DEFAULT_MAX_TOLERANCE
    min_bound_bits: float = DEFAULT_MIN_BOUND_BITS
    max_decision_points: int = DEFAULT_MAX_DECISION_POINTS
    min_decision_points: int = DEFAULT_MIN_DECISION_POINTS
    presets: tuple[str, ...] | None = None
    max_message_bytes: int = PARTY_MAX_MESSAGE_BYTES
    max_key_bytes: int = DEFAULT_MAX_KEY_BYTES

    def __post_init__(self) -> None:
        if self.quorum is not None:
            check_int(self.quorum, "quorum", "PartyPolicy", min_value=2)
        check_real(self.max_tolerance, "max_tolerance", "PartyPolicy", gt=0.0, lt=0.5)
        check_real(self.min_bound_bits, "min_bound_bits", "PartyPolicy", ge=0.0)
        check_int(self.max_decision_points, "max_decision_points", "PartyPolicy",
                  min_value=2)
        check_int(self.min_decision_points, "min_decision_points", "PartyPolicy",
                  min_value=1, max_value=self.max_decision_points)
        check_int(self.max_message_bytes, "max_message_bytes", "PartyPolicy",
                  min_value=1 << 16)
        check_int(self.max_key_bytes, "max_key_bytes", "PartyPolicy", min_value=1)
        if self.presets is not None:
            if isinstance(self.presets, str) or not all(
                    isinstance(p, str) for p in self.presets):
                raise TypeError("The 'presets' parameter of PartyPolicy must be a tuple of "
                                f"preset names. Got {self.presets!r} instead.")
            object.__setattr__(self, "presets", tuple(self.presets))

    def required_parties(self, security: str, n_roster: int,
                         roster: Roster | None = None) -> int:
        """The fewest participants this party accepts for ``security``."""
        if self.quorum is not None:
            return max(2, int(self.quorum))
        return default_quorum(n_roster, roster.quorum if roster is not None else None,
                              security)

    def check_participants(self, count: int, security: str, n_roster: int,
                           roster: Roster | None = None) -> None:
        need = self.required_parties(security, n_roster, roster)
        if count < need:
            raise PolicyViolation(f"the evaluation covers {count} parties; this party's "
                                  f"policy requires at least {need}", check="quorum")

    def check_config(self, config: Any) -> None:
        """Refuse a configuration outside this policy (``PolicyViolation``)."""
        n = int(config.n_points)
        if n < self.min_decision_points:
            raise PolicyViolation(f"{n} decision points are below this party's minimum of "
                                  f"{self.min_decision_points}", check="decision-points")
        if n > self.max_decision_points:
            raise PolicyViolation(f"{n} decision points exceed this party's limit of "
                                  f"{self.max_decision_points}", check="decision-points")
        self.check_preset(config)
        tol = getattr(config, "tolerance", None)
        if tol is not None:
            if tol > self.max_tolerance:
                raise PolicyViolation(f"tolerance {tol:g} exceeds this party's ceiling of "
                                      f"{self.max_tolerance:g}", check="tolerance")
            bits = float(config.cheat_bound_bits())
            if bits < self.min_bound_bits:
                raise PolicyViolation(
                    f"the configuration's cheating bound 2^-{bits:.1f} is weaker than this "
                    f"party's minimum 2^-{self.min_bound_bits:g}", check="cheat-bound")

    def allowed_presets(self, allow_insecure: bool = False) -> tuple[str, ...]:
        """The presets this party builds keys for (see ``presets``)."""
        if self.presets is not None:
            return self.presets
        if allow_insecure:
            from fedsec.crypto.params import PRESETS
            return (DEFAULT_PRESET, MALICIOUS_PRESET, THRESHOLD_PRESET,
                    *sorted(p for p in PRESETS if p.startswith("INSECURE_")))
        return (DEFAULT_PRESET, MALICIOUS_PRESET, THRESHOLD_PRESET)

    def check_preset(self, config: Any) -> None:
        """Refuse a preset this party did not allow, or key material above its cap,
        before any key is built (``PolicyViolation``, checks ``preset`` / ``key-size``)."""
        insecure = bool(getattr(config, "allow_insecure", False))
        preset = str(config.preset)
        if preset not in self.allowed_presets(insecure):
            raise PolicyViolation(f"preset {preset!r} is not allowed by this party's "
                                  "policy (it builds keys for "
                                  f"{', '.join(self.allowed_presets(insecure))} only)",
                                  check="preset")
        spec = config.key_spec()
        n_keys = 1 + len(spec.rotations) + (1 if spec.conjugate else 0)
        need = estimated_key_bytes(preset, n_keys, allow_insecure=insecure)
        if need > self.max_key_bytes:
            raise PolicyViolation(f"the run's keys ({n_keys} key-switching keys on {preset}, "
                                  f"~{need / 2**20:.0f} MiB) exceed this party's cap of "
                                  f"{self.max_key_bytes / 2**20:.0f} MiB", check="key-size")
