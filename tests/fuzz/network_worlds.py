"""Every protocol as a :class:`~fedsec.testing.netfuzz.Fuzzable`: a whole run on tiny,
insecure test parameters over a given network (test scaffold for
``tests/fuzz/test_fuzz_network.py`` and ``benchmarks/fuzz_decoders.py --part network``).

Nothing here is written per message kind: the fuzz targets are the ``(role, kind)`` pairs
each honest run delivers, checked against the roles' ``@receives`` marks.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from fedsec.auc.common import local_federation
from fedsec.auc.dpauc import DPAUCClient, DPAUCServer, RRClient, dpauc
from fedsec.auc.exact import BinPairsAggregator, BinPairsParty
from fedsec.auc.fhauc import FHAUCAggregator, FHAUCParty, secure_auc
from fedsec.auc.fhauc_malicious import MaliciousAggregator, MaliciousParty
from fedsec.auc.fhauc_threshold import (
    ThresholdFHAUCAggregator,
    ThresholdFHAUCParty,
    ThresholdMaliciousAggregator,
    ThresholdMaliciousParty,
)
from fedsec.crypto.collective import CollectiveKeyAggregator, CollectiveKeyParty
from fedsec.crypto.keysetup import KeySetupAggregator, KeySetupParty, KeySpec, run_key_setup
from fedsec.errors import PrivacyWarning
from fedsec.learning.model import LayerSpec, ModelSpec
from fedsec.learning.record import RoundRecord, TrainingRecord
from fedsec.metrics.roc import exact_auc
from fedsec.pfl.secure import (
    SecurePFLClient,
    SecurePFLConfig,
    SecurePFLDecryptor,
    SecurePFLServer,
    SecurePFLSession,
)
from fedsec.protocol.network import Network
from fedsec.shapley.hesv import HESVClient, HESVServer, hesv_shapley
from fedsec.shapley.secretsv import (
    Dealer,
    SecretSVAuxiliary,
    SecretSVClient,
    SecretSVPrincipal,
    secretsv_shapley,
)
from fedsec.shapley.secsv import AuxiliaryServer, PrincipalServer, SecSVClient, secsv_shapley
from fedsec.testing.netfuzz import Fuzzable

AUC_PRESET = "INSECURE_TEST_N4096_DEPTH1_S39"
THRESHOLD_TEST_PRESET = "INSECURE_TEST_N4096_DEPTH1_S60"
HESV_PRESET = "INSECURE_TEST_N2048_DEPTH2_S24"
PFL_PRESET = "INSECURE_TEST_N4096_DEPTH19"


def _auc_data() -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(3)
    out = []
    for n in (12, 9, 10):
        y = np.array([0, 1] * (n // 2) + [1] * (n % 2))
        out.append((y, np.round(np.clip(0.4 * y + 0.6 * rng.random(n), 0, 1), 2)))
    return out


def _auc_oracle(tol: float) -> Any:
    data = _auc_data()
    exact = exact_auc(np.concatenate([y for y, _ in data]), np.concatenate([s for _, s in data]))

    def oracle(result: Any) -> str | None:
        if not math.isfinite(result.auc) or abs(result.auc - exact) > result.error_bound + tol:
            return f"AUC {result.auc} outside {exact} +- {result.error_bound}"
        return None

    return oracle


def _shapley_record() -> tuple[TrainingRecord, list[tuple[np.ndarray, np.ndarray]]]:
    rng = np.random.default_rng(11)
    spec = ModelSpec("tiny2", (LayerSpec.dense(3, 4, "square"), LayerSpec.dense(4, 2)))
    n = 4
    params = [spec.init_params(rng) for _ in range(n + 1)]
    rnd = RoundRecord(params[0], tuple(range(n)), tuple(params[1:]),
                      np.arange(1.0, n + 1.0))
    record = TrainingRecord(spec, n, (rnd,), params[0])
    sets = [(rng.normal(size=(3, 3)), rng.integers(0, 2, 3).astype(np.int64))
            for _ in range(n)]
    return record, sets


def _paper(fn: Any) -> Any:
    """Run under the paper's schedule: its PrivacyWarning is expected, not a finding."""
    def run(net: Network) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrivacyWarning)
            return fn(net)
    return run


def key_setup() -> Fuzzable:
    spec = KeySpec.create(AUC_PRESET, (), False, allow_insecure=True)

    def run(net: Network) -> Any:
        identities, roster = local_federation(["a", "b", "c"])
        return run_key_setup(identities, roster, spec, network=net)

    return Fuzzable("keys", run, {"party": KeySetupParty, "aggregator": KeySetupAggregator})


def fhauc() -> Fuzzable:
    def run(net: Network) -> Any:
        return secure_auc(_auc_data(), decision_points=8, preset=AUC_PRESET,
                          allow_insecure=True, network=net)

    return Fuzzable("fhauc", run, {"party": (KeySetupParty, FHAUCParty),
                                   "aggregator": (KeySetupAggregator, FHAUCAggregator)},
                    oracle=_auc_oracle(1e-6))


def fhauc_threshold() -> Fuzzable:
    def run(net: Network) -> Any:
        return secure_auc(_auc_data(), decision_points=8, keys="threshold",
                          preset=THRESHOLD_TEST_PRESET, allow_insecure=True, network=net)

    return Fuzzable("fhauc-t", run,
                    {"party": (KeySetupParty, CollectiveKeyParty, ThresholdFHAUCParty),
                     "aggregator": (KeySetupAggregator, CollectiveKeyAggregator,
                                    ThresholdFHAUCAggregator)},
                    oracle=_auc_oracle(1e-6))


def fhauc_threshold_malicious() -> Fuzzable:
    def run(net: Network) -> Any:
        return secure_auc(_auc_data(), decision_points=8, keys="threshold",
                          security="malicious", preset=THRESHOLD_TEST_PRESET,
                          allow_insecure=True, network=net)

    return Fuzzable("fhauc-mt", run,
                    {"party": (KeySetupParty, CollectiveKeyParty, ThresholdMaliciousParty),
                     "aggregator": (KeySetupAggregator, CollectiveKeyAggregator,
                                    ThresholdMaliciousAggregator)},
                    oracle=_auc_oracle(1e-3))


def fhauc_malicious() -> Fuzzable:
    def run(net: Network) -> Any:
        return secure_auc(_auc_data(), decision_points=8, security="malicious",
                          preset=AUC_PRESET, allow_insecure=True, network=net)

    return Fuzzable("fhauc-m", run, {"party": (KeySetupParty, MaliciousParty),
                                     "aggregator": (KeySetupAggregator, MaliciousAggregator)},
                    oracle=_auc_oracle(1e-3))


def fhauc_exact() -> Fuzzable:
    def run(net: Network) -> Any:
        return secure_auc(_auc_data(), decision_points="exact", preset=AUC_PRESET,
                          allow_insecure=True, max_rounds=2, target=0.1, network=net)

    return Fuzzable("fhauc-exact", run,
                    {"party": (KeySetupParty, BinPairsParty, FHAUCParty),
                     "aggregator": (KeySetupAggregator, BinPairsAggregator, FHAUCAggregator)},
                    oracle=_auc_oracle(1e-6))


def dp_auc() -> Fuzzable:
    def run(net: Network) -> Any:
        return dpauc(_auc_data(), epsilon=1.0, decision_points=8, network=net)

    return Fuzzable("dpauc", run, {"party": (DPAUCClient, RRClient), "aggregator": DPAUCServer})


def hesv() -> Fuzzable:
    record, sets = _shapley_record()

    def run(net: Network) -> Any:
        return hesv_shapley(record, sets, preset=HESV_PRESET, allow_insecure=True,
                            schedule="paper", network=net)

    return Fuzzable("hesv", _paper(run), {"client": (KeySetupParty, HESVClient),
                                          "server": (KeySetupAggregator, HESVServer)})


def secsv() -> Fuzzable:
    record, sets = _shapley_record()

    def run(net: Network) -> Any:
        return secsv_shapley(record, sets, schedule="paper", network=net)

    return Fuzzable("secsv", _paper(run), {"client": SecSVClient, "P": PrincipalServer,
                                           "A": AuxiliaryServer})


def secsv_derived() -> Fuzzable:
    """SecSV's derived decryption (the paper's schedule): one-layer model, a round whose
    participants leave one client out."""
    rng = np.random.default_rng(13)
    _, sets = _shapley_record()
    spec = ModelSpec("tiny1", (LayerSpec.dense(3, 2),))
    parts = (0, 1, 3)
    glob = spec.init_params(rng)
    rnd = RoundRecord(glob, parts, tuple(spec.init_params(rng) for _ in parts),
                      np.arange(1.0, len(parts) + 1.0))
    record = TrainingRecord(spec, 4, (rnd,), spec.init_params(rng))

    def run(net: Network) -> Any:
        return secsv_shapley(record, sets, schedule="paper", derived_decryption=True,
                             network=net)

    return Fuzzable("secsv-derived", _paper(run), {"client": SecSVClient, "P": PrincipalServer,
                                                   "A": AuxiliaryServer})


def secretsv() -> Fuzzable:
    record, sets = _shapley_record()

    def run(net: Network) -> Any:
        return secretsv_shapley(record, sets, schedule="paper", network=net)

    return Fuzzable("secretsv", _paper(run), {"client": SecretSVClient, "P": SecretSVPrincipal,
                                              "A": SecretSVAuxiliary, "dealer": Dealer},
                    local=frozenset({("P", "secretsv/session")}))


def pfl() -> Fuzzable:
    rng = np.random.default_rng(5)
    k, d = 4, 12
    w = rng.normal(size=d) + 0.3 * rng.normal(size=(k, d))
    sig = np.full(k, 0.5)
    bound = float(np.max(np.linalg.norm(w, axis=1)))
    cfg = SecurePFLConfig(preset=PFL_PRESET, allow_insecure=True, sign_alpha=8)

    def run(net: Network) -> Any:
        session = SecurePFLSession.create(k, cfg, network=net)
        return session.run_round(w, sig, alpha=0.5, norm_bound=bound, round_index=0)

    return Fuzzable("pfl", run, {"client": (KeySetupParty, SecurePFLClient),
                                 "server": (KeySetupAggregator, SecurePFLServer),
                                 "decryptor": (KeySetupParty, SecurePFLDecryptor)},
                    unread=frozenset({("server", "pfl/decryptor-key")}))


def all_protocols() -> list[Fuzzable]:
    return [key_setup(), fhauc(), fhauc_threshold(), fhauc_threshold_malicious(),
            fhauc_malicious(), fhauc_exact(), dp_auc(), hesv(), secsv(),
            secsv_derived(), secretsv(), pfl()]
