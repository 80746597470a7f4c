"""BALANCE trained end to end with encrypted selection and aggregation (Priv-PFL,
Aghabagherloo et al.).

:func:`run_secure_pfl` is :func:`fedsec.pfl.simulate.run_pfl`'s server-assisted BALANCE --
same data split, malicious set, local training, attacks and seeds
(:class:`fedsec.pfl.simulate.ClientRounds`) -- with every round's selection (Algorithm 1 over
the encrypted Ineq. 1 comparison) and personalised aggregation (Eq. 2) run by
:class:`fedsec.pfl.secure.SecurePFLSession`. Each client continues from the personalised
model it decrypted.

Norm bound (public). The encrypted comparison needs the models in a bounded domain, so
clients clip what they send (:class:`fedsec.pfl.simulate.NormClipping`): in round ``t``
every client publishes ``||w_i^{t+1/2}||`` (one number, before clipping), the bound is
``B_t = norm_factor * median`` of those norms (robust to fewer than half of the clients
lying) or a fixed ``norm_bound`` given by the user; ``B_t`` is public and the same for all.
Clients clip to ``B_t`` and publish ``sigma_i ||w_i||`` of the clipped model for Algorithm 1's
order (as in Aghabagherloo et al.). What a curious party learns beyond the plaintext
protocol: the raw
norm of every client's local model in every round. With ``unclipped_attackers`` the
malicious clients send unclipped models; those above ``B_t`` must come out *invalid*
(accepted by nobody, accepting nobody, keeping their own model) -- the run records whether
they do. Such a client is :class:`UnclippedClient`, the session's role for the malicious
indices (it publishes ``min(||w||, B)`` as its norm).

Agreement (``compare=True``). Every round, on the *same* clipped uploads and thresholds, the
exact plaintext selection (:class:`fedsec.pfl.selection.PlaintextOracle`, Algorithm 1, which
equals the brute force) is computed with the same validity rule, and the run records for
every ordered pair ``(i, j)`` whose decision differs the margin
``m = sigma_i^2 ||w_i||^2 - ||w_i - w_j||^2`` relative to the session's scale ``M``
(:attr:`SecureRound.margin_scale`): the composite sign is exact only for
``|m| / M >= 2^-alpha``, so differing pairs inside that band are legitimate and counted;
differing pairs outside it are errors (split into pairs the encrypted oracle checked and
pairs Algorithm 1 inferred). It also records the largest difference between the
personalised model a client decrypted and Eq. 2 computed in the clear on the secure sets
(CKKS noise) and on the plaintext sets. After the encrypted run, the plaintext BALANCE with
the same clipping rule and seeds (:func:`fedsec.pfl.simulate.run_pfl`) gives the final
accuracies to compare.

Threat model: as :mod:`fedsec.pfl.secure` (honest-but-curious server and decryptor, Byzantine
clients). This module is a simulation driver: it holds every client's plaintext model (it
plays all clients) and computes the plaintext reference from them; only the session's roles
see protocol bytes. Randomness here is seeded simulation randomness (data, training,
attacks); the protocol's keys and masks come from the session.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from fedsec._validation import check_int, check_real
from fedsec.learning.attacks import Attack
from fedsec.learning.tasks import Federation, Task
from fedsec.pfl.balance import BalanceConfig, personalise
from fedsec.pfl.selection import (
    PlaintextOracle,
    SelectionResult,
    efficient_selection,
    ineq1_margin,
)
from fedsec.pfl.simulate import (
    ClientRounds,
    NormClipping,
    PFLRun,
    clip_models,
    run_pfl,
    valid_neighbours,
)

if TYPE_CHECKING:
    from fedsec.pfl.secure import SecurePFLConfig, SecurePFLSession, SecureRound
    from fedsec.pfl.secure.client import SecurePFLClient

__all__ = ["RoundAgreement", "SecurePFLRun", "SecureRoundRecord", "agreement",
           "decision_band", "run_secure_pfl", "unclipped_client", "attacker_roles"]

Progress = Callable[[str], None]
#: Differing pairs listed per round in :class:`RoundAgreement` (the counts cover all).
MAX_LISTED_PAIRS = 50


@dataclass(frozen=True)
class RoundAgreement:
    """One round's encrypted selection and Eq. 2 against the exact plaintext ones.

    Attributes
    ----------
    differing : int
        Ordered pairs ``(i, j)`` decided differently ("does ``i`` accept ``j``?").
    in_band : int
        Of those, pairs with ``|margin| / M < 2^-alpha`` (legitimate).
    outside_band_checked : int
        Differing pairs outside the band that the encrypted comparison evaluated (errors).
    outside_band_inferred : int
        Differing pairs outside the band that Algorithm 1 inferred (Theorems I-II) from the
        encrypted decisions.
    min_scaled_margin : float or None
        Smallest ``|margin| / M`` over the differing pairs, in units of ``2^-alpha``.
    pairs : list of (int, int, float)
        Up to :data:`MAX_LISTED_PAIRS` differing pairs with their ``margin / M``.
    valid_mismatch : list of int
        Clients whose validity differs from the rule (``B_t``, who clipped).
    eq2_noise : float
        ``max |personalised - Eq. 2 in the clear on the secure sets|`` (CKKS noise).
    eq2_vs_plaintext : float
        ``max |personalised - Eq. 2 in the clear on the plaintext sets|``.
    """

    differing: int
    in_band: int
    outside_band_checked: int
    outside_band_inferred: int
    min_scaled_margin: float | None
    pairs: list[tuple[int, int, float]]
    valid_mismatch: list[int]
    eq2_noise: float
    eq2_vs_plaintext: float

    @property
    def outside_band(self) -> int:
        return self.outside_band_checked + self.outside_band_inferred

    def to_dict(self) -> dict[str, Any]:
        return {"differing": self.differing, "in_band": self.in_band,
                "outside_band": self.outside_band,
                "outside_band_checked": self.outside_band_checked,
                "outside_band_inferred": self.outside_band_inferred,
                "min_scaled_margin": self.min_scaled_margin,
                "pairs": [list(p) for p in self.pairs],
                "valid_mismatch": self.valid_mismatch, "eq2_noise": self.eq2_noise,
                "eq2_vs_plaintext": self.eq2_vs_plaintext}


@dataclass(frozen=True)
class SecureRoundRecord:
    """What one encrypted round cost and decided."""

    round_index: int
    norm_bound: float
    invalid: list[int]
    checks: int
    pairs_checked: int
    sign_evaluations: int
    margin_scale: float
    seconds: dict[str, float]
    bytes_up: list[int]
    bytes_down: list[int]
    server_bytes_in: int
    agreement: RoundAgreement | None

    def to_dict(self) -> dict[str, Any]:
        return {"round": self.round_index, "norm_bound": self.norm_bound,
                "invalid": self.invalid, "checks": self.checks,
                "pairs_checked": self.pairs_checked,
                "sign_evaluations": self.sign_evaluations, "margin_scale": self.margin_scale,
                "seconds": self.seconds, "bytes_up": self.bytes_up,
                "bytes_down": self.bytes_down, "server_bytes_in": self.server_bytes_in,
                "agreement": None if self.agreement is None else self.agreement.to_dict()}


@dataclass
class SecurePFLRun:
    """The record of one encrypted BALANCE run (and its plaintext comparison)."""

    run: PFLRun
    secure: dict[str, Any]
    clipping: NormClipping
    details: list[SecureRoundRecord] = field(default_factory=list)
    key_setup_bytes: dict[str, int] = field(default_factory=dict)
    key_setup_seconds: float = 0.0
    plaintext: PFLRun | None = None
    #: The session round number after this run (``first_round`` of a next run).
    next_round: int = 0

    @property
    def sign_alpha(self) -> int:
        return int(self.secure["sign_alpha"])

    def agreement_totals(self) -> dict[str, Any] | None:
        """Agreement summed over the rounds (``None`` without ``compare``)."""
        ag = [d.agreement for d in self.details if d.agreement is not None]
        if not ag:
            return None
        mins = [a.min_scaled_margin for a in ag if a.min_scaled_margin is not None]
        k = self.run.n_clients
        return {"rounds": len(ag), "pairs": len(ag) * k * (k - 1),
                "differing": sum(a.differing for a in ag),
                "in_band": sum(a.in_band for a in ag),
                "outside_band": sum(a.outside_band for a in ag),
                "outside_band_checked": sum(a.outside_band_checked for a in ag),
                "outside_band_inferred": sum(a.outside_band_inferred for a in ag),
                "min_scaled_margin": min(mins) if mins else None,
                "valid_mismatch": sum(len(a.valid_mismatch) for a in ag),
                "eq2_noise": max(a.eq2_noise for a in ag),
                "eq2_vs_plaintext": max(a.eq2_vs_plaintext for a in ag)}

    def seconds_split(self) -> dict[str, float]:
        """Protocol seconds per step, summed over the rounds."""
        out: dict[str, float] = {}
        for d in self.details:
            for k, v in d.seconds.items():
                out[k] = out.get(k, 0.0) + float(v)
        return out

    def bytes_per_client(self) -> dict[str, float]:
        """Mean bytes a client sent and received per round (over clients and rounds)."""
        if not self.details:
            return {"up": math.nan, "down": math.nan, "server_in": math.nan}
        up = [float(np.mean(d.bytes_up)) for d in self.details]
        down = [float(np.mean(d.bytes_down)) for d in self.details]
        return {"up": float(np.mean(up)), "down": float(np.mean(down)),
                "server_in": float(np.mean([d.server_bytes_in for d in self.details]))}

    def accuracy_comparison(self) -> dict[str, float] | None:
        """Final benign mean and worst accuracy, encrypted vs plaintext."""
        if self.plaintext is None:
            return None
        s, p = self.run, self.plaintext
        return {"secure_mean": s.benign_mean(), "secure_worst": s.benign_worst(),
                "plaintext_mean": p.benign_mean(), "plaintext_worst": p.benign_worst(),
                "mean_diff": s.benign_mean() - p.benign_mean(),
                "worst_diff": s.benign_worst() - p.benign_worst(),
                "same_final_sets": s.accepted[-1] == p.accepted[-1]}

    def to_dict(self) -> dict[str, Any]:
        return {"secure": self.secure, "clipping": self.clipping.to_dict(),
                "run": self.run.to_dict(),
                "rounds_detail": [d.to_dict() for d in self.details],
                "agreement": self.agreement_totals(),
                "seconds_split": self.seconds_split(),
                "bytes_per_client": self.bytes_per_client(),
                "key_setup_bytes": self.key_setup_bytes,
                "key_setup_seconds": self.key_setup_seconds,
                "accuracy": self.accuracy_comparison(),
                "plaintext": None if self.plaintext is None else self.plaintext.to_dict()}


def _reference(uploads: NDArray[np.float64], sigmas: NDArray[np.float64],
               valid: NDArray[np.bool_]) -> SelectionResult:
    oracle = PlaintextOracle(uploads, sigmas)
    return efficient_selection(oracle.keys(), oracle, neighbours=valid_neighbours(valid))


def decision_band(config: SecurePFLConfig) -> float:
    """Relative margin ``|margin| / M`` below which the encrypted comparison may decide a
    pair either way: ``2^-sign_alpha`` for the sign polynomial, ``BLINDED_BAND`` for the
    blinded comparison."""
    if config.comparison == "blinded":
        from fedsec.pfl.secure import BLINDED_BAND

        return float(BLINDED_BAND)
    return 2.0 ** -int(config.sign_alpha)


def agreement(uploads: NDArray[np.float64], sigmas: NDArray[np.float64],
              valid: NDArray[np.bool_], secure: SelectionResult, secure_valid: NDArray[Any],
              personalised: NDArray[np.float64], *, alpha: float, margin_scale: float,
              sign_alpha: int, band: float | None = None) -> RoundAgreement:
    """Compare one round's encrypted selection and Eq. 2 with the exact plaintext ones.

    Parameters
    ----------
    uploads : array of shape (K, d)
        The models the clients sent (clipped by those who clip).
    sigmas : array of shape (K,)
    valid : array of bool
        Validity by the rule (clipped, or norm within the bound).
    secure : SelectionResult
        The encrypted run's selection.
    secure_valid : array of bool
        The encrypted run's validity flags.
    personalised : array of shape (K, d)
        Eq. 2 as every client decrypted it.
    alpha : float
        Eq. 2's weight of the own model.
    margin_scale : float
        ``M``: the comparison sees ``margin / M``.
    sign_alpha : int
        Precision of the sign: exact for ``|x| >= 2^-sign_alpha``.
    band : float, optional
        The comparison's band instead of ``2^-sign_alpha`` (:func:`decision_band`; the
        blinded comparison decides every ``|x| >= BLINDED_BAND`` exactly).
    """
    k = uploads.shape[0]
    ref = _reference(uploads, sigmas, valid)
    band = 2.0 ** -sign_alpha if band is None else float(band)
    checked = set(secure.checked)
    diff = [(i, j) for i in range(k) for j in range(k)
            if i != j and ((j in secure.accepted[i]) != (j in ref.accepted[i]))]
    in_band = out_checked = out_inferred = 0
    listed: list[tuple[int, int, float]] = []
    smallest: float | None = None
    for i, j in diff:
        x = ineq1_margin(uploads[i], uploads[j], float(sigmas[i])) / margin_scale
        if abs(x) < band:
            in_band += 1
        elif (i, j) in checked:
            out_checked += 1
        else:
            out_inferred += 1
        smallest = abs(x) / band if smallest is None else min(smallest, abs(x) / band)
        if len(listed) < MAX_LISTED_PAIRS:
            listed.append((i, j, x))
    sv = np.asarray(secure_valid, dtype=bool)
    mismatch = [i for i in range(k) if bool(sv[i]) != bool(valid[i])]
    same = np.vstack([personalise(uploads[i], [uploads[j] for j in sorted(secure.accepted[i])],
                                  alpha) for i in range(k)])
    plain = np.vstack([personalise(uploads[i], [uploads[j] for j in sorted(ref.accepted[i])],
                                   alpha) for i in range(k)])
    return RoundAgreement(len(diff), in_band, out_checked, out_inferred, smallest, listed,
                          mismatch, float(np.max(np.abs(personalised - same))),
                          float(np.max(np.abs(personalised - plain))))


def unclipped_client() -> type[SecurePFLClient]:
    """The simulation's malicious client of ``unclipped_attackers``: a
    :class:`~fedsec.pfl.secure.SecurePFLClient` that uploads its model unclipped and
    publishes the plausible norm ``min(||w||, B)`` (it must come out invalid when its
    model is longer than ``B``)."""
    return _unclipped_class()


def attacker_roles(n_clients: int, malicious: float, seed: int, *,
                   unclipped_attackers: bool) -> dict[int, type[SecurePFLClient]]:
    """The client roles of a session for :func:`run_secure_pfl` with these arguments:
    :func:`unclipped_client` at the malicious indices when ``unclipped_attackers``
    (``SecurePFLSession.create(..., clients=attacker_roles(...))``)."""
    from fedsec.pfl.simulate import malicious_clients

    if not unclipped_attackers:
        return {}
    cls = _unclipped_class()
    return {i: cls for i in malicious_clients(n_clients, malicious, seed)}


@functools.cache
def _unclipped_class() -> type[SecurePFLClient]:
    # defined on first use: fedsec.pfl.secure (CKKS) is imported only by encrypted runs
    from fedsec.pfl.secure import SecurePFLClient

    class UnclippedClient(SecurePFLClient):
        """Uploads its model unclipped, claiming the norm ``min(||w||, B)``."""

        def upload(self, model: NDArray[Any], *, norm_bound: float, sigma: float,
                   round_index: int) -> bytes:
            w = np.asarray(model, dtype=np.float64)
            b = float(norm_bound)
            return self._masked_upload(w, min(float(np.linalg.norm(w)), b), b,
                                       float(sigma), int(round_index))

    return UnclippedClient


def run_secure_pfl(task: Task, federation: Federation, *, rounds: int = 10,
                   attack: str | Attack | None = None, malicious: float = 0.2,
                   balance: BalanceConfig | None = None,
                   config: SecurePFLConfig | None = None, norm_factor: float = 1.25,
                   norm_bound: float | None = None, unclipped_attackers: bool = False,
                   compare: bool = True, seed: int = 0,
                   session: SecurePFLSession | None = None, first_round: int = 0,
                   progress: Progress | None = None) -> SecurePFLRun:
    """Train server-assisted BALANCE with encrypted selection and aggregation.

    Parameters
    ----------
    task : Task
    federation : Federation
    rounds : int, default=10
        ``T``.
    attack : str or Attack, optional
        As :func:`fedsec.pfl.simulate.run_pfl`.
    malicious : float, default=0.2
        Share of malicious clients, in ``[0, 0.5)``.
    balance : BalanceConfig, optional
        BALANCE's ``gamma, kappa, alpha`` (default ``0.3, 1, 0.5``).
    config : SecurePFLConfig, optional
        The encrypted protocol's parameters (preset, sign precision ``sign_alpha``).
    norm_factor : float, default=1.25
        ``B_t = norm_factor * median`` of the published norms.
    norm_bound : float, optional
        A fixed public bound instead.
    unclipped_attackers : bool, default=False
        Malicious clients skip clipping (they must come out invalid when above ``B_t``).
    compare : bool, default=True
        Per-round agreement with the exact plaintext selection on the same uploads, and a
        plaintext BALANCE run with the same clipping and seeds for the final accuracies.
    seed : int, default=0
    session : SecurePFLSession, optional
        A session made with the same number of clients and ``config`` (reuses its keys),
        whose client roles are :func:`attacker_roles` of this run's arguments; default: a
        new one.
    first_round : int, default=0
        The session's round number for this run's first round: round numbers must increase
        within a session, so a reused session needs the number of rounds it already ran
        (:attr:`SecurePFLRun.next_round` of the previous run).
    progress : callable, optional
        Called with a short message after the key set-up and after every round.

    Returns
    -------
    SecurePFLRun
    """
    from fedsec.pfl.secure import SecurePFLConfig, SecurePFLSession

    t_rounds = check_int(rounds, "rounds", "run_secure_pfl", min_value=1)
    first = check_int(first_round, "first_round", "run_secure_pfl", min_value=0)
    cfg = config if config is not None else SecurePFLConfig()
    if not isinstance(cfg, SecurePFLConfig):
        raise TypeError(f"The 'config' parameter of run_secure_pfl must be a SecurePFLConfig. "
                        f"Got {type(cfg).__name__} instead.")
    check_real(norm_factor, "norm_factor", "run_secure_pfl", gt=0.0)
    if norm_bound is not None:
        check_real(norm_bound, "norm_bound", "run_secure_pfl", gt=0.0)
    clipping = NormClipping(norm_factor, norm_bound, bool(unclipped_attackers))
    sim = ClientRounds(task, federation, rounds=t_rounds, attack=attack, malicious=malicious,
                       config=balance, seed=seed, owner="run_secure_pfl")
    n, bad, bal = sim.n_clients, sim.malicious, sim.config
    run = PFLRun("balance-secure", sim.attack.name if sim.attack is not None else "none",
                 t_rounds, n, bad, "server", "efficient", int(seed),
                 meta={"task": task.name, "model": task.spec.name,
                       "params": task.spec.n_params(), "balance": bal.to_dict(),
                       "malicious_share": malicious, "training": vars(task.training)})
    secure_meta = {k: v for k, v in vars(cfg).items() if isinstance(v, int | float | str | bool)}
    secure_meta["band_log2"] = math.log2(decision_band(cfg))
    out = SecurePFLRun(run, secure_meta, clipping)
    t0 = time.perf_counter()
    roles = attacker_roles(n, malicious, seed, unclipped_attackers=bool(unclipped_attackers))
    if session is None:
        session = SecurePFLSession.create(n, cfg, clients=roles)
        out.key_setup_seconds = time.perf_counter() - t0
        if progress is not None:
            progress(f"key set-up for {n} clients: {out.key_setup_seconds:.1f}s")
    elif session.n_clients != n or any(
            (type(c) is _unclipped_class()) != (i in roles)
            for i, c in enumerate(session.clients)):
        raise ValueError("The 'session' parameter of run_secure_pfl must have this run's "
                         "client roles: SecurePFLSession.create(n_clients, config, "
                         "clients=attacker_roles(n_clients, malicious, seed, "
                         "unclipped_attackers=...)).")
    clip_mask = clipping.clips(n, bad)
    models = sim.initial_models()
    start = time.perf_counter()
    for t in range(t_rounds):
        half, sigmas = sim.half_models(models, t)
        norms = np.linalg.norm(half, axis=1)
        bound = clipping.round_bound(norms)
        sr: SecureRound = session.run_round(half, sigmas, alpha=bal.alpha, norm_bound=bound,
                                            round_index=first + t)
        if not out.key_setup_bytes:
            out.key_setup_bytes = {k: int(v) for k, v in sr.key_setup_bytes.items()}
        valid_rule = np.array([clip_mask[i] or bool(norms[i] <= bound) for i in range(n)])
        ag = None
        if compare:
            uploads = clip_models(half, bound, clip_mask)
            ag = agreement(uploads, sigmas, valid_rule, sr.selection, sr.valid,
                           sr.personalised, alpha=bal.alpha, margin_scale=sr.margin_scale,
                           sign_alpha=int(cfg.sign_alpha), band=decision_band(cfg))
        sv = np.asarray(sr.valid, dtype=bool)
        out.details.append(SecureRoundRecord(
            t, bound, [i for i in range(n) if not sv[i]], sr.selection.checks,
            int(sr.pairs_checked), int(sr.sign_evaluations), float(sr.margin_scale),
            {k: float(v) for k, v in sr.seconds.items()},
            [int(b) for b in sr.bytes_up], [int(b) for b in sr.bytes_down],
            int(sr.server_bytes_in), ag))
        models = np.asarray(sr.personalised, dtype=np.float64)
        run.accepted.append(sr.selection.to_lists())
        run.checks.append(sr.selection.checks)
        run.brute_checks.append(n * (n - 1))
        run.accuracy.append(sim.evaluate(models))
        if progress is not None:
            sec = sr.seconds
            extra = ""
            if ag is not None:
                extra = (f"; vs plaintext: {ag.differing} pairs differ ({ag.in_band} within "
                         f"2^{math.log2(decision_band(cfg)):g}), Eq. 2 noise {ag.eq2_noise:.1e}")
            progress(f"secure/{run.attack} round {t + 1}/{t_rounds}: "
                     f"{sec.get('total', math.nan):.1f}s (distances "
                     f"{sec.get('distances', math.nan):.1f}, comparison "
                     f"{sec.get('comparison', math.nan):.1f}, aggregation "
                     f"{sec.get('aggregation', math.nan):.1f}), "
                     f"{np.mean(sr.bytes_up) / 1e6:.2f} MB up / "
                     f"{np.mean(sr.bytes_down) / 1e6:.2f} MB down per client; benign mean "
                     f"{run.benign_mean():.3f}, worst {run.benign_worst():.3f}{extra}")
    run.seconds = time.perf_counter() - start
    run.models = models
    out.next_round = first + t_rounds
    if compare:
        out.plaintext = run_pfl(task, federation, method="balance", rounds=t_rounds,
                                attack=attack, malicious=malicious, config=bal, seed=seed,
                                clipping=clipping)
        if progress is not None:
            acc = out.accuracy_comparison()
            assert acc is not None
            progress(f"plaintext BALANCE (same seeds, same clipping): benign mean "
                     f"{acc['plaintext_mean']:.3f}, worst {acc['plaintext_worst']:.3f}")
    return out
