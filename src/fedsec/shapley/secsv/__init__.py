"""SecSV (Zheng et al., PVLDB 2023, Sec. 5, Alg. 3-4, 6-7): two servers, BFV-encrypted models,
shared data.

Modules, by role: :mod:`~fedsec.shapley.secsv.client` (the clients),
:mod:`~fedsec.shapley.secsv.principal` (server P), :mod:`~fedsec.shapley.secsv.auxiliary`
(server A), :mod:`~fedsec.shapley.secsv.server` (what P and A share),
:mod:`~fedsec.shapley.secsv.common` (parameters and layout every role agrees on) and
:mod:`~fedsec.shapley.secsv.runner` (the in-process run: a loop over a
:class:`~fedsec.protocol.network.Network`, ``secsv_shapley``).

The clients share BFV keys from the signed key set-up, encrypt their models for both
servers and split their test data into additive shares modulo the plaintext prime, one
share to the principal server P, the other to the auxiliary server A. P and A evaluate
each layer on their shares; a decrypting client (placed by the decryption rule of
:mod:`fedsec.shapley.views`) decrypts, activates and re-shares the next layer's input, and
after the last layer deals a zero test of its predictions, from which P learns only which
samples are predicted right. P picks the fixed point per layer
(:mod:`fedsec.shapley.fixed_point`) and checks the budget before computing.

The protocol step by step and in detail -- the roles and messages, SampleSkip, exactness,
the linearity shortcut, derived decryption, folded Matrix Reducing, the rotation layout,
convolutions, the threat model, replays and splices: ``docs/protocols/secsv.md`` (the
documentation site's SecSV page).
"""

from __future__ import annotations

from fedsec.shapley.secsv.auxiliary import AuxiliaryServer
from fedsec.shapley.secsv.client import SecSVClient
from fedsec.shapley.secsv.common import ALL as ALL
from fedsec.shapley.secsv.common import SecSVConfig
from fedsec.shapley.secsv.common import grid_to_features as grid_to_features
from fedsec.shapley.secsv.common import im2col as im2col
from fedsec.shapley.secsv.principal import PrincipalServer
from fedsec.shapley.secsv.principal import pick_fixed_point as pick_fixed_point
from fedsec.shapley.secsv.runner import _setup as _setup
from fedsec.shapley.secsv.runner import round_infos as round_infos
from fedsec.shapley.secsv.runner import secsv_shapley

__all__ = ["SecSVConfig", "secsv_shapley", "SecSVClient", "PrincipalServer",
           "AuxiliaryServer"]
