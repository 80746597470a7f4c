"""The one-call entry points of :mod:`fedsec`, taking the data shapes users have.

Every AUC entry point accepts the parties as

* a list of :class:`~fedsec.data.io.PartyData` (what :func:`fedsec.load_party_csvs`
  returns; their names are kept),
* a list of ``(y_true, y_score)`` pairs,
* a list of data frames with named columns (pandas, polars or any object with
  ``columns`` and ``frame[name]``; the columns are ``label_col`` and ``score_col``),
* a ``{name: party}`` mapping of any of these (the names are kept).

:func:`as_parties` is the one normaliser they share. Each call plays every party, the key
holder and the aggregator in this process, for trying things out; a deployment runs one
party per machine (:mod:`fedsec.runtime`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec.auc.common import SecureAUCResult
from fedsec.auc.dpauc import DPAUCResult
from fedsec.data.io import PartyData
from fedsec.pfl.balance import BalanceConfig
from fedsec.pfl.secure.common import SecurePFLConfig
from fedsec.pfl.secure_sim import SecurePFLRun

__all__ = ["as_parties", "secure_auc", "secure_auc_malicious", "secure_roc_auc_score",
           "dpauc", "secure_pfl"]

Pair = tuple[NDArray[Any], NDArray[Any]]

#: Most clients :func:`secure_pfl` (and ``fedsec pfl``) take.
MAX_PFL_CLIENTS = 64

_SHAPES = ("(y_true, y_score) pairs, PartyData (fedsec.load_party_csvs) or data frames "
           "with a label and a score column")


def _column(frame: Any, col: str, what: str, param: str, where: str, owner: str
            ) -> NDArray[Any]:
    columns = [str(c) for c in (frame.columns if hasattr(frame, "columns") else frame.keys())]
    if col not in columns:
        folded = [c for c in columns if c.lower() == col.lower()]
        if len(folded) != 1:
            raise ValueError(f"The '{param}' parameter of {owner} names the {what} column "
                             f"{col!r}, which {where} does not have (columns: "
                             f"{', '.join(map(repr, columns)) or 'none'}); pass "
                             f"{param}='<column>'.")
        col = folded[0]
    values = np.asarray(frame[col])
    return values.astype(np.int64) if values.dtype == np.bool_ else values


def _is_frame(item: Any) -> bool:
    return (hasattr(item, "columns") and hasattr(item, "__getitem__")) or (
        isinstance(item, Mapping))


def _one(item: Any, where: str, owner: str, label_col: str, score_col: str
         ) -> tuple[Pair, str | None]:
    if isinstance(item, PartyData):
        return (item.y_true, item.y_score), item.name
    if _is_frame(item):
        return (_column(item, label_col, "label", "label_col", where, owner),
                _column(item, score_col, "score", "score_col", where, owner)), None
    if isinstance(item, tuple | list) and len(item) == 2 \
            and all(np.ndim(v) == 1 for v in item):
        return (np.asarray(item[0]), np.asarray(item[1])), None
    got = (f"a {type(item).__name__} of length {len(item)}"
           if isinstance(item, tuple | list) else type(item).__name__)
    raise TypeError(f"The 'parties' parameter of {owner} must hold {_SHAPES}. Got {got} "
                    f"for {where} instead.")


def as_parties(parties: Any, *, label_col: str = "label", score_col: str = "score",
               names: Sequence[str] | None = None, owner: str = "secure_auc"
               ) -> tuple[list[Pair], list[str] | None]:
    """Every party's ``(y_true, y_score)`` and names, from the shapes users have.

    Parameters
    ----------
    parties : sequence or mapping
        A list of :class:`~fedsec.data.io.PartyData`, of ``(y_true, y_score)`` pairs or of
        data frames (any object with ``columns`` and ``frame[column]``, or a mapping of
        column names to values), or a ``{name: party}`` mapping of any of these.
    label_col, score_col : str, default="label", "score"
        The columns of data frames that hold the labels and the scores (matched
        case-insensitively when the exact name is absent).
    names : sequence of str, optional
        The parties' names; default: the mapping's keys or the ``PartyData`` names, if
        any.
    owner : str
        The entry point named in error messages.

    Returns
    -------
    pairs : list of (ndarray, ndarray)
        One ``(y_true, y_score)`` per party; labels and scores are checked by the protocol.
    names : list of str or None
        The parties' names, when known.

    Raises
    ------
    TypeError
        ``parties`` is not a sequence or mapping, or a party is of no known shape.
    ValueError
        A data frame lacks a column, or ``names`` does not match the parties.
    """
    found: list[str | None]
    if isinstance(parties, Mapping) and not _looks_like_one_frame(parties, label_col):
        if not all(isinstance(k, str) for k in parties):
            raise TypeError(f"The 'parties' parameter of {owner}, a mapping, must have str "
                            "keys (the parties' names).")
        items = [_one(v, f"party {k!r}", owner, label_col, score_col)
                 for k, v in parties.items()]
        found = list(parties.keys())
    elif isinstance(parties, str | bytes) or not isinstance(parties, Sequence) \
            or _is_frame(parties):
        raise TypeError(f"The 'parties' parameter of {owner} must be a list of {_SHAPES}, "
                        f"or a {{name: party}} mapping. Got {type(parties).__name__} "
                        "instead.")
    else:
        items = [_one(p, f"party {i + 1}", owner, label_col, score_col)
                 for i, p in enumerate(parties)]
        found = [n for _, n in items]
    if len(items) == 0:
        raise ValueError(f"The 'parties' parameter of {owner} must not be empty.")
    pairs = [pair for pair, _ in items]
    if names is not None:
        if isinstance(names, str) or len(names) != len(pairs):
            raise ValueError(f"The 'names' parameter of {owner} must name each of the "
                             f"{len(pairs)} parties once.")
        return pairs, list(names)
    if all(n is not None for n in found):
        return pairs, [str(n) for n in found]
    return pairs, None


def _looks_like_one_frame(parties: Mapping[Any, Any], label_col: str) -> bool:
    """A single party's columns passed where the parties are expected."""
    return any(isinstance(k, str) and k.lower() == label_col.lower() for k in parties)


# ------------------------------------------------------------------ secure AUC
def secure_auc(parties: Any, *, decision_points: int | str | Sequence[float] = 100,
               security: str = "semi-honest", names: Sequence[str] | None = None,
               label_col: str = "label", score_col: str = "score",
               scores: str = "probability", preset: str | None = None,
               progress: Callable[[str], None] | None = None,
               **kwargs: Any) -> SecureAUCResult:
    """Secure federated ROC-AUC (FHAUC) over every party, run in this process.

    Parameters
    ----------
    parties : sequence or mapping
        The parties' data: a list of :class:`~fedsec.data.io.PartyData` (what
        :func:`fedsec.load_party_csvs` returns), of ``(y_true, y_score)`` pairs, or of data
        frames with a label and a score column, or a ``{name: party}`` mapping of any of
        these (see :func:`as_parties`).
    decision_points : int, sequence of float or "exact", default=100
        ``N`` uniform points, custom thresholds in [0, 1], or ``"exact"``: refine the
        points until the certified ``error_bound`` is at most ``target``.
    security : {"semi-honest", "malicious"}, default="semi-honest"
        Threat model of the aggregator. ``"malicious"``: the parties verify the result
        (``result.verified``, ``result.cheat_bound_bits``) and raise
        :class:`~fedsec.errors.TamperingDetected` instead of returning a wrong AUC.
    names : sequence of str, optional
        The parties' names (default: the mapping's keys or the ``PartyData`` names,
        else ``party-0``, ``party-1``, ...); the result lists them in ``included``.
    label_col, score_col : str, default="label", "score"
        The columns of data-frame parties.
    scores : {"probability", "logit", "range:LO:HI"}, default="probability"
        How to read the scores (a public increasing map into [0, 1]).
    preset : str, optional
        CKKS parameter preset (default: the mode's 128-bit preset).
    progress : callable, optional
        Receives one line per protocol step.
    **kwargs
        Further options of :func:`fedsec.auc.fhauc.secure_auc`: ``keys`` (``"single"``
        or ``"threshold"``: no party holds the whole key), ``masking``, ``target``,
        ``max_points``, ``max_rounds``, ``network``; in malicious mode ``splits``,
        ``tolerance``, ``runs``, ``min_bound_bits``, ``policy``.

    Returns
    -------
    SecureAUCResult
        ``auc``, its certified ``error_bound`` to the exact AUC, and the costs.

    Raises
    ------
    TypeError, ValueError
        Parties of no known shape, bad labels or scores, options out of range.
    fedsec.errors.UndefinedMetricError
        The federation holds one class only.

    See Also
    --------
    secure_roc_auc_score : the same, shaped as :func:`sklearn.metrics.roc_auc_score`.

    Examples
    --------
    >>> import fedsec  # doctest: +SKIP
    >>> fedsec.secure_auc(fedsec.load_party_csvs(["a.csv", "b.csv"])).auc  # doctest: +SKIP
    """
    from fedsec.auc.fhauc import secure_auc as run

    pairs, found = as_parties(parties, label_col=label_col, score_col=score_col,
                              names=names, owner="secure_auc")
    return run(pairs, decision_points=decision_points, security=security, names=found,
               scores=scores, preset=preset, progress=progress, **kwargs)


def secure_auc_malicious(parties: Any, **kwargs: Any) -> SecureAUCResult:
    """Deprecated: use ``secure_auc(parties, security="malicious", ...)``.

    Parameters
    ----------
    parties : sequence or mapping
        As :func:`secure_auc`.
    **kwargs
        As :func:`secure_auc` in malicious mode.

    Returns
    -------
    SecureAUCResult
        As ``secure_auc(parties, security="malicious", **kwargs)``.
    """
    warnings.warn("fedsec.secure_auc_malicious is deprecated; use "
                  "fedsec.secure_auc(parties, security='malicious', ...)",
                  DeprecationWarning, stacklevel=2)
    from fedsec.auc.fhauc_malicious import secure_auc_malicious as run

    label_col = kwargs.pop("label_col", "label")
    score_col = kwargs.pop("score_col", "score")
    pairs, found = as_parties(parties, label_col=label_col, score_col=score_col,
                              names=kwargs.pop("names", None), owner="secure_auc_malicious")
    return run(pairs, names=found, **kwargs)


def secure_roc_auc_score(y_true_per_party: Sequence[Any], y_score_per_party: Sequence[Any],
                         *, decision_points: int | str | Sequence[float] = "exact",
                         security: str = "semi-honest", **kwargs: Any) -> float:
    """The secure federated ROC-AUC, shaped as :func:`sklearn.metrics.roc_auc_score`.

    Equal to ``roc_auc_score(concatenate(y_true_per_party),
    concatenate(y_score_per_party))`` within the certified error bound (at most ``1e-6``
    with the default exact mode; ``2e-5`` in malicious mode), computed without pooling
    the data. For the bound and the costs, call :func:`secure_auc`, which returns the
    full :class:`~fedsec.auc.common.SecureAUCResult`.

    Parameters
    ----------
    y_true_per_party : sequence of array-like
        Each party's labels (0/1).
    y_score_per_party : sequence of array-like
        Each party's scores, in the same party order.
    decision_points : int, sequence of float or "exact", default="exact"
        As :func:`secure_auc`; ``"exact"`` refines the grid until the certified bound is
        met, as scikit-learn's exact AUC is approximated.
    security : {"semi-honest", "malicious"}, default="semi-honest"
        Threat model of the aggregator.
    **kwargs
        Further options of :func:`secure_auc`.

    Returns
    -------
    float
        The AUC.

    Raises
    ------
    TypeError, ValueError
        The two sequences are not sequences of arrays of one length each.
    """
    for name, value in (("y_true_per_party", y_true_per_party),
                        ("y_score_per_party", y_score_per_party)):
        if isinstance(value, str | bytes | np.ndarray) or not isinstance(value, Sequence):
            raise TypeError(f"The '{name}' parameter of secure_roc_auc_score must be a "
                            "sequence with one array per party. Got "
                            f"{type(value).__name__} instead.")
    if len(y_true_per_party) != len(y_score_per_party):
        raise ValueError("The 'y_true_per_party' and 'y_score_per_party' parameters of "
                         "secure_roc_auc_score must have one entry per party each. Got "
                         f"{len(y_true_per_party)} and {len(y_score_per_party)}.")
    pairs = [(np.asarray(y), np.asarray(s))
             for y, s in zip(y_true_per_party, y_score_per_party, strict=True)]
    return float(secure_auc(pairs, decision_points=decision_points, security=security,
                            **kwargs).auc)


# ------------------------------------------------------------------ DP AUC
def dpauc(parties: Any, *, epsilon: float, decision_points: Any = 100,
          mechanism: str = "laplace", delta: float | None = None,
          score_epsilon: float | None = None, clip: bool = False,
          label_col: str = "label", score_col: str = "score",
          network: Any = None) -> DPAUCResult:
    """One differentially private AUC evaluation (DPAUC, Sun et al.) over every party.

    The noise comes from the operating system's cryptographic generator and cannot be
    seeded: two calls give different estimates by design.

    Parameters
    ----------
    parties : sequence or mapping
        As :func:`secure_auc`: ``PartyData``, ``(y_true, y_score)`` pairs, data frames,
        or a ``{name: party}`` mapping.
    epsilon : float
        Per-party privacy budget of this evaluation (finite, > 0).
    decision_points : int or array-like, default=100
        Uniform thresholds, or the thresholds themselves.
    mechanism : {"laplace", "gaussian", "rr"}, default="laplace"
        Laplace or Gaussian noise on the statistics, or randomized response on labels.
    delta : float, optional
        For ``"gaussian"``.
    score_epsilon : float, optional
        For ``"rr"``: Laplace noise on the scores with this budget.
    clip : bool, default=False
        Clip the estimate into [0, 1] (post-processing).
    label_col, score_col : str, default="label", "score"
        The columns of data-frame parties.
    network : Network, optional
        The network the submissions cross (tests and benchmarks observe it).

    Returns
    -------
    DPAUCResult
        ``auc`` and how it was obtained.
    """
    from fedsec.auc.dpauc import dpauc as run

    pairs, _ = as_parties(parties, label_col=label_col, score_col=score_col, owner="dpauc")
    return run(pairs, epsilon=epsilon, decision_points=decision_points,
               mechanism=mechanism, delta=delta, score_epsilon=score_epsilon, clip=clip,
               network=network)


# ------------------------------------------------------------------ Priv-PFL
def secure_pfl(task: Any = "dnn", *, clients: int = 10, rounds: int = 5,
               malicious: float = 0.2, attack: str | None = None,
               dirichlet_alpha: float = 0.5, samples: int | None = None, layers: int = 2,
               federation: Any = None, balance: BalanceConfig | None = None,
               config: SecurePFLConfig | None = None, norm_factor: float = 1.25,
               norm_bound: float | None = None, compare: bool = False, seed: int = 0,
               progress: Callable[[str], None] | None = None) -> SecurePFLRun:
    """Personalised FL with BALANCE under encryption (Priv-PFL), every role in this process.

    Trains ``task`` over ``clients`` clients (a Dirichlet label split) for ``rounds``
    rounds; each round the server selects, for every client, the peers whose models pass
    BALANCE's test and aggregates them, under CKKS: it handles only ciphertexts,
    one-time-padded values and public keys. Needs PyTorch (``pip install -e
    ".[learning]"``) and about 3 GB of memory at the default 128-bit preset.

    Parameters
    ----------
    task : str or Task, default="dnn"
        A task of :mod:`fedsec.learning.tasks` by name (``"dnn"``, ``"bank"``, ...) or a
        :class:`~fedsec.learning.tasks.Task`.
    clients : int, default=10
        Number of clients ``K`` (2..64).
    rounds : int, default=5
        Training rounds ``T``.
    malicious : float, default=0.2
        Share of malicious clients, in [0, 0.5).
    attack : str, optional
        The malicious clients' poisoning attack (:data:`fedsec.learning.attacks.ATTACKS`);
        default: none.
    dirichlet_alpha : float, default=0.5
        Concentration of the label split (small = more non-IID).
    samples : int, optional
        Use only this many of the task's samples (train and test).
    layers : int, default=2
        Layers of the ``"dnn"`` task.
    federation : Federation, optional
        The clients' data (``task.federate(...)``); default: a split made here.
    balance : BalanceConfig, optional
        BALANCE's ``gamma``, ``kappa`` and ``alpha`` (default 0.3, 1, 0.5).
    config : SecurePFLConfig, optional
        The encrypted protocol's parameters (preset, sign precision, comparison).
    norm_factor : float, default=1.25
        Public norm bound per round: this factor times the median published norm.
    norm_bound : float, optional
        A fixed public norm bound instead.
    compare : bool, default=False
        Also compare every round with the exact plaintext selection and run plaintext
        BALANCE with the same seeds (``result.agreement``, ``result.plaintext``).
    seed : int, default=0
        Data, training and attack seed (the protocol's own randomness is never seeded).
    progress : callable, optional
        Called with a short message after the key set-up and every round.

    Returns
    -------
    SecurePFLRun
        ``run`` (per-client accuracy per round, acceptance sets), time per step, bytes per
        client and key set-up bytes.

    See Also
    --------
    fedsec.pfl.secure_sim.run_secure_pfl : the driver this calls.
    """
    from fedsec._validation import check_int, check_real
    from fedsec.learning.tasks import make_task
    from fedsec.pfl.secure_sim import run_secure_pfl

    check_int(clients, "clients", "secure_pfl", min_value=2, max_value=MAX_PFL_CLIENTS)
    check_real(dirichlet_alpha, "dirichlet_alpha", "secure_pfl", gt=0.0)
    if isinstance(task, str):
        task = make_task(task, n_samples=samples, layers=layers, seed=seed)
    elif samples is not None:
        raise ValueError("The 'samples' parameter of secure_pfl applies to a task given by "
                         "name only.")
    fed = federation if federation is not None else task.federate(
        clients, alpha=dirichlet_alpha, seed=seed)
    result: SecurePFLRun = run_secure_pfl(
        task, fed, rounds=rounds, attack=attack, malicious=malicious, balance=balance,
        config=config, norm_factor=norm_factor, norm_bound=norm_bound, compare=compare,
        seed=seed, progress=progress)
    return result
