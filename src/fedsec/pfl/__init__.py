"""Personalised federated learning that resists poisoning: BALANCE and Priv-PFL
(Aghabagherloo et al.).

* :mod:`fedsec.pfl.selection` -- Ineq. 1, the brute-force selection and Algorithm 1 with a
  pluggable check oracle that counts Ineq. 1 evaluations;
* :mod:`fedsec.pfl.balance` -- BALANCE's thresholds and Eq. 2, the server-assisted and the
  decentralised deployments;
* :mod:`fedsec.pfl.simulate` -- training runs with poisoning attacks and the baselines
  (FedAvg, local training only, robust aggregators from byzfl, :mod:`fedsec.pfl.robust`);
  needs the ``learning`` extra and is not imported here.

Plaintext reference code; the encrypted Priv-PFL protocol builds on it.
"""

from fedsec.pfl.balance import (
    GRAPHS,
    SELECTIONS,
    BalanceConfig,
    BalancePeer,
    BalanceServer,
    flatten_params,
    graph_neighbours,
    personalise,
    unflatten_params,
)
from fedsec.pfl.selection import (
    CertifiedKey,
    CheckOracle,
    PlaintextOracle,
    SelectionResult,
    brute_force_selection,
    complete_neighbours,
    efficient_selection,
)

__all__ = [
    "GRAPHS",
    "SELECTIONS",
    "BalanceConfig",
    "BalancePeer",
    "BalanceServer",
    "CertifiedKey",
    "CheckOracle",
    "PlaintextOracle",
    "SelectionResult",
    "brute_force_selection",
    "complete_neighbours",
    "efficient_selection",
    "flatten_params",
    "graph_neighbours",
    "personalise",
    "unflatten_params",
]
