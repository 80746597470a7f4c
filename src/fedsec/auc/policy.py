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
from fedsec.errors import PolicyViolation

__all__ = ["PartyPolicy", "DEFAULT_MAX_TOLERANCE", "DEFAULT_MIN_BOUND_BITS"]

#: Ceiling on the malicious-mode tolerance a party accepts (set from measured CKKS error).
DEFAULT_MAX_TOLERANCE = 1e-6
#: The weakest cheating bound (in bits) a party accepts, tolerance term included.
DEFAULT_MIN_BOUND_BITS = 40.0
DEFAULT_MAX_DECISION_POINTS = 8192


@dataclass(frozen=True)
class PartyPolicy:
    """Limits a party enforces on every evaluation it takes part in.

    Parameters
    ----------
    quorum : int, optional
        The fewest participants an evaluation may have (never below 2). Default: the
        roster's quorum if it states one, else the whole roster in malicious mode and 2 in
        semi-honest mode.
    max_tolerance : float
        Largest malicious-mode tolerance accepted (default 1e-6).
    min_bound_bits : float
        Smallest cheating bound accepted, in bits, including the tolerance term
        (default 40, i.e. at most 2^-40).
    max_decision_points : int
        Most decision points accepted (default 8192).
    presets : tuple of str, optional
        Presets accepted (default: every secure preset).
    max_message_bytes : int
        Largest message accepted from the aggregator (default 64 MiB).
    """

    quorum: int | None = None
    max_tolerance: float = DEFAULT_MAX_TOLERANCE
    min_bound_bits: float = DEFAULT_MIN_BOUND_BITS
    max_decision_points: int = DEFAULT_MAX_DECISION_POINTS
    presets: tuple[str, ...] | None = None
    max_message_bytes: int = PARTY_MAX_MESSAGE_BYTES

    def __post_init__(self) -> None:
        if self.quorum is not None:
            check_int(self.quorum, "quorum", "PartyPolicy", min_value=2)
        check_real(self.max_tolerance, "max_tolerance", "PartyPolicy", gt=0.0, lt=0.5)
        check_real(self.min_bound_bits, "min_bound_bits", "PartyPolicy", ge=0.0)
        check_int(self.max_decision_points, "max_decision_points", "PartyPolicy",
                  min_value=2)
        check_int(self.max_message_bytes, "max_message_bytes", "PartyPolicy",
                  min_value=1 << 16)

    def required_parties(self, security: str, n_roster: int,
                         roster: Roster | None = None) -> int:
        """The fewest participants this party accepts for ``security``."""
        if self.quorum is not None:
            q = self.quorum
        elif roster is not None and roster.quorum is not None:
            q = roster.quorum
        elif security == "malicious":
            q = n_roster
        else:
            q = 2
        return max(2, int(q))

    def check_participants(self, count: int, security: str, n_roster: int,
                           roster: Roster | None = None) -> None:
        need = self.required_parties(security, n_roster, roster)
        if count < need:
            raise PolicyViolation(f"the evaluation covers {count} parties; this party's "
                                  f"policy requires at least {need}", check="quorum")

    def check_config(self, config: Any) -> None:
        """Refuse a configuration outside this policy (``PolicyViolation``)."""
        n = int(config.n_points)
        if n > self.max_decision_points:
            raise PolicyViolation(f"{n} decision points exceed this party's limit of "
                                  f"{self.max_decision_points}", check="decision-points")
        if self.presets is not None and config.preset not in self.presets:
            raise PolicyViolation(f"preset {config.preset!r} is not allowed by this "
                                  "party's policy", check="preset")
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
