"""One entry point for Federated Shapley values: in the clear (NSSV) or secure (HESV,
SecSV, SecretSV; Zheng et al.).

::

    import fedsec
    res = fedsec.secure_shapley(record, test_sets, protocol="secsv")
    res.fsv          # one value per client, 0-based, in units of test accuracy

``record`` is a :class:`~fedsec.learning.record.TrainingRecord` (from
:func:`~fedsec.learning.fedavg.run_fedavg`, Flower's recording strategy, or your own
training: :meth:`~fedsec.learning.record.TrainingRecord.from_client_models`), and
``test_sets`` holds each client's own test data, the same shape for every protocol.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec.shapley.fsv import ShapleyResult
from fedsec.shapley.secure_common import (
    PROTOCOLS,
    SecureShapleyResult,
    check_protocol_args,
    check_test_sets,
)

__all__ = ["secure_shapley", "normalize_test_sets"]

WHERE = "secure_shapley"


def normalize_test_sets(test_sets: Any, n_clients: int, in_features: int, *,
                        where: str = WHERE
                        ) -> list[tuple[NDArray[np.float64], NDArray[np.int64]]]:
    """Per-client test sets as a list of ``(X_i, y_i)`` in client order.

    Accepts a sequence of ``(X_i, y_i)`` pairs (client ``i``'s own test data, one per
    client) or a mapping ``{i: (X_i, y_i)}`` with 0-based int client ids (a client left out
    has no test data). Anything else raises ``TypeError``/``ValueError`` naming the problem.
    """
    if isinstance(test_sets, Mapping):
        bad = [c for c in test_sets if isinstance(c, bool) or not isinstance(c, int | np.integer)
               or not 0 <= int(c) < n_clients]
        if bad:
            raise ValueError(f"The 'test_sets' parameter of {where} maps client ids 0.."
                             f"{n_clients - 1} (0-based) to (X, y) pairs. Got key {bad[0]!r}.")
        empty = (np.zeros((0, in_features)), np.zeros(0, dtype=np.int64))
        test_sets = [test_sets.get(i, empty) for i in range(n_clients)]
    elif isinstance(test_sets, tuple) and len(test_sets) == 2 and isinstance(
            test_sets[0], np.ndarray) and np.ndim(test_sets[0]) >= 2:
        raise TypeError(f"The 'test_sets' parameter of {where} must hold one (X, y) pair per "
                        f"client, not one pooled (X, y) pair: split it by owner, e.g. "
                        f"[(X[owner == i], y[owner == i]) for i in range({n_clients})].")
    return check_test_sets(test_sets, n_clients, in_features, where=where)


def protocol_function(protocol: str) -> Callable[..., Any]:
    """``protocol``'s own function (``federated_shapley`` for ``"nssv"``)."""
    if protocol == "hesv":
        from fedsec.shapley.hesv import hesv_shapley
        return hesv_shapley
    if protocol == "secsv":
        from fedsec.shapley.secsv import secsv_shapley
        return secsv_shapley
    if protocol == "secretsv":
        from fedsec.shapley.secretsv import secretsv_shapley
        return secretsv_shapley
    from fedsec.shapley.fsv import federated_shapley
    return federated_shapley


def _as_secure(res: ShapleyResult, protocol: str) -> SecureShapleyResult:
    if isinstance(res, SecureShapleyResult):
        return res
    return SecureShapleyResult(res.fsv, res.ssv, res.estimator, res.budget, res.sample_skip,
                               res.utilities, res.participants, res.models_tested,
                               res.samples_tested, res.seconds, res.skip, protocol=protocol)


def secure_shapley(record: Any, test_sets: Any, *, protocol: str = "secsv",
                   estimator: str = "exact", budget: int | None = None,
                   sample_skip: bool = False, seed: int = 0, schedule: str = "strict",
                   workers: int | None = None, progress: Callable[[str], None] | None = None,
                   **options: Any) -> SecureShapleyResult:
    """Federated Shapley values of the clients of ``record``, securely or in the clear.

    Parameters
    ----------
    record : TrainingRecord
        The rounds of federated training: ``θ^t``, ``I^t``, ``θ_i^t``, ``ω_i^t``.
    test_sets : sequence of (X_i, y_i), or dict {i: (X_i, y_i)}
        Client ``i``'s own test data (0-based client ids, one pair per client; a client
        missing from a dict has none). The utility is the accuracy on their union.
    protocol : {"secsv", "hesv", "secretsv", "nssv"}, default="secsv"
        ``"secsv"``: :func:`~fedsec.shapley.secsv.secsv_shapley` (BFV, exact on
        fixed-point models); ``"hesv"``: :func:`~fedsec.shapley.hesv.hesv_shapley` (CKKS,
        approximate: FSVs within about 1e-3 of NSSV unless a prediction is a near-tie);
        ``"secretsv"``: :func:`~fedsec.shapley.secretsv.secretsv_shapley` (additive secret
        sharing, exact on fixed-point models); ``"nssv"``: the plaintext reference
        :func:`~fedsec.shapley.fsv.federated_shapley` on the pooled test sets (every
        model and sample in one place: for checking, not for private data).
    estimator : {"exact", "ps", "gt", "ks", "gtg"}, default="exact"
        Exact per-round Shapley values, or one of the paper's estimators.
    budget : int, optional
        The estimator's per-round budget (:data:`fedsec.shapley.DEFAULT_BUDGETS`).
    sample_skip : bool, default=False
        SampleSkip (Zheng et al., Alg. 6-7); not offered by HESV.
    seed : int, default=0
        Seed of the estimators' coalition sampling (public randomness).
    schedule : {"strict", "paper"}, default="strict"
        Who may decrypt what in the secure protocols (ignored by ``"nssv"``):
        ``"strict"`` refuses, before any model is encrypted, a run in which a decrypting
        client could solve for another client's test data; ``"paper"`` follows the
        paper's Prop. 6.8 and warns (:class:`~fedsec.errors.PrivacyWarning`) about what
        leaks. See :func:`~fedsec.shapley.secsv.secsv_shapley`.
    workers : int, optional
        Evaluate the rounds in this many worker processes
        (:func:`fedsec.shapley.parallel.shapley_in_parallel`: every worker runs the
        protocol, key set-up included, on a slice of the rounds). Default: one pass in
        this process.
    progress : callable, optional
        Called with a short message after every round.
    **options
        Passed to the protocol's function, e.g. ``config=SecSVConfig(...)`` (SecSV),
        ``preset=...`` (HESV), ``linear_shortcut=``, ``network=``; a name the protocol
        does not take raises ``TypeError``.

    Returns
    -------
    SecureShapleyResult
        ``fsv`` (array of ``n_clients``): each client's Federated Shapley value, indexed by
        0-based client id, the sum over rounds of its per-round values; units are those of
        the utility, test accuracy on the union of the test sets (a client whose updates
        raised accuracy by 3 points in total has about 0.03). ``ssv`` (``(T, n_clients)``):
        per-round values (0 for a client not in ``I^t``); each row sums to
        ``v(θ^{t+1}_{I^t}) - v(θ^t)``. ``utilities``: with ``estimator="exact"``, each
        round's utility per coalition (indexed by a bit mask over the round's sorted
        participants). ``protocol``, ``participants``, ``models_tested``,
        ``samples_tested``, ``seconds``, ``skip`` (SampleSkip counts) and ``accounting``
        (bytes per message and time per role; empty for ``"nssv"``).

    Raises
    ------
    TypeError, ValueError
        For a wrong argument (the message names it).
    fedsec.shapley.views.UnsafeSchedule
        When ``schedule="strict"`` cannot schedule the decryptions of this run (e.g. every
        client in every round with too few clients); the message says why: try
        ``schedule="paper"`` knowingly.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"The 'protocol' parameter of {WHERE} must be one of {PROTOCOLS}. "
                         f"Got {protocol!r} instead.")
    check_protocol_args(record, estimator, budget, where=WHERE, sample_skip=sample_skip)
    if protocol == "hesv" and sample_skip:
        raise ValueError(f"The 'sample_skip' parameter of {WHERE} is not offered by HESV; use "
                         "protocol='secsv' or 'secretsv'.")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or workers < 1):
        raise ValueError(f"The 'workers' parameter of {WHERE} must be an int >= 1. "
                         f"Got {workers!r} instead.")
    sets = normalize_test_sets(test_sets, record.n_clients, record.spec.in_features)
    fn = protocol_function(protocol)
    accepted = set(inspect.signature(fn).parameters)
    unknown = sorted(set(options) - accepted)
    if unknown:
        own = sorted(accepted - {"record", "test_sets", "x_test", "y_test", "progress"})
        raise TypeError(f"{WHERE}(protocol={protocol!r}) takes no option {unknown[0]!r}; its "
                        f"options: {own}.")
    kwargs: dict[str, Any] = dict(options, estimator=estimator, budget=budget, seed=seed)
    if protocol != "hesv":
        kwargs["sample_skip"] = sample_skip
    if protocol != "nssv":
        kwargs["schedule"] = schedule
    if workers is not None and workers > 1 and record.n_rounds > 1:
        # worker processes: imported only when asked for
        from fedsec.shapley.parallel import shapley_in_parallel
        res = shapley_in_parallel(protocol, record, sets, workers=workers, progress=progress,
                                  **kwargs)
    elif protocol == "nssv":
        x = np.concatenate([x for x, _ in sets])
        y = np.concatenate([y for _, y in sets])
        res = fn(record, x, y, progress=progress, **kwargs)
    else:
        res = fn(record, sets, progress=progress, **kwargs)
    return _as_secure(res, protocol)

