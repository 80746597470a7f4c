"""SecSV in one process: the roles (clients, P, A) exchanging bytes over a
:class:`~fedsec.protocol.network.Network` (roles ``"client:<i>"``, ``"P"``, ``"A"``).

The runner only carries messages from the role that produced them to the roles that read
them, in the order of Alg. 3-4; it never reads or writes a role's state. Bytes are counted
by the network, time by each role's :class:`~fedsec.protocol.accounting.Clock` (summed
into the network's :class:`~fedsec.protocol.accounting.Accounting` at the end).
"""

from __future__ import annotations

import secrets
import time
import warnings
from typing import Any

import numpy as np
from numpy.typing import NDArray
from threadpoolctl import threadpool_limits

from fedsec.crypto.bfv import BFVContext
from fedsec.errors import PrivacyWarning, ProtocolError
from fedsec.learning.model import Params
from fedsec.learning.record import TrainingRecord
from fedsec.protocol.accounting import Accounting, Clock
from fedsec.protocol.network import Envelope, Network
from fedsec.shapley.secsv.auxiliary import AuxiliaryServer
from fedsec.shapley.secsv.client import SecSVClient
from fedsec.shapley.secsv.common import BoolArray, Progress, SecSVConfig
from fedsec.shapley.secsv.principal import PrincipalServer
from fedsec.shapley.secsv.server import RoundInfo
from fedsec.shapley.secure_common import (
    SecureShapleyResult,
    TestSets,
    check_protocol_args,
    check_test_sets,
)
from fedsec.shapley.secure_game import integer_weights, plan_groups, run_rounds
from fedsec.shapley.views import ClientView, ModelSpace, check_schedule

__all__ = ["secsv_shapley", "round_infos"]


def round_infos(record: TrainingRecord, cfg: SecSVConfig) -> list[RoundInfo]:
    """The public part of every round: participants and integer aggregation weights."""
    return [RoundInfo(tuple(int(c) for c in r.participants),
                      tuple(int(q) for q in integer_weights(r.weights, cfg.weight_bits)))
            for r in record.rounds]


class _Run:
    """One SecSV run: the roles and the network between them."""

    def __init__(self, record: TrainingRecord, net: Network, clients: list[SecSVClient],
                 P: PrincipalServer, A: AuxiliaryServer, leader: int,  # noqa: N803
                 setup_clock: Clock | None = None) -> None:
        self.record, self.net = record, net
        self.clients, self.P, self.A, self.leader = clients, P, A, leader
        self._setup_clock = setup_clock or Clock()

    @property
    def acc(self) -> Accounting:
        """The network's accounting (SampleSkip's search is timed into it)."""
        return self.net.accounting

    @property
    def n_samples(self) -> int:
        return self.P.n_samples

    def roles(self) -> list[Any]:
        return [*self.clients, self.P, self.A]

    def close(self) -> Accounting:
        """Sum the roles' clocks into the network's accounting."""
        for role in self.roles():
            self.net.accounting.add_clock(role.clock.reset())
        self.net.accounting.add_clock(self._setup_clock.reset())
        return self.net.accounting

    # ------------------------------------------------------------- Alg. 3, step 3
    def upload_round(self, t: int) -> None:
        """Every model of round ``t`` (the global model by the leader) to P and A."""
        rnd = self.record.rounds[t]
        self.P.start_round(t)
        self.A.start_round(t)
        jobs: list[tuple[int, str, Params]] = [(self.leader, "global", rnd.global_params)]
        jobs += [(c, f"c{c}", p) for c, p in zip(rnd.participants, rnd.local_params,
                                                   strict=True)]
        for owner, key, params in jobs:
            blob = self.clients[owner].encrypt_model(t, key, params)
            to_p, to_a = self.net.broadcast(f"client:{owner}", ["P", "A"], blob)
            self.P.receive_model(to_p)
            self.A.receive_model(to_a)

    def end_round(self, t: int) -> None:
        self.P.end_round(t)
        self.A.end_round(t)

    # ------------------------------------------------------------- Alg. 4
    def evaluate(self, t: int, mask: int, rows: NDArray[np.int64] | None) -> BoolArray:
        """Test ``θ_S^t`` on the pooled samples ``rows`` (all if None); True = correct."""
        if self.P.start_derived(t, rows):
            while (opening := self.P.open_next()) is not None:
                self._derived_batch(opening)
        self.P.start_evaluation(t, mask, rows)
        while (opening := self.P.open_next()) is not None:
            self._batch(opening)
        return self.P.result()

    def _batch(self, opening: bytes) -> None:
        """Alg. 4 on one batch: per layer, A's product to P, P's masked sum to the
        decrypting client, its re-shares to P and A; then the zero test."""
        net, P, A = self.net, self.P, self.A  # noqa: N806
        A.open_eval(net.send("P", "A", opening))
        n_layers = len(self.record.spec.layers)
        while True:  # a merged evaluation repeats the first layer per fixed batch
            last = P.layer_in_flight() == n_layers - 1
            products = A.products()
            dec, request = P.decrypt_request(net.gather(["A"] * len(products), "P", products))
            client = self.clients[int(dec.split(":")[1])]
            to_p, to_a = client.decrypt_layer(net.send("P", dec, request))
            to_p, to_a = net.send(dec, "P", to_p), net.send(dec, "A", to_a)
            if not last:
                P.receive_share(to_p)
                A.receive_share(to_a)
            else:
                mask_p = net.send("P", "A", P.label_mask(to_p))
                P.compare(net.send("A", "P", A.label_diff(to_a, mask_p)))
                return

    def _derived_batch(self, opening: bytes) -> None:
        """Derived decryption of one batch: every coalition of the round at once."""
        net, P, A = self.net, self.P, self.A  # noqa: N806
        A.open_eval(net.send("P", "A", opening))
        products = A.products()
        dec, request = P.decrypt_all_request(net.gather(["A"] * len(products), "P", products))
        client = self.clients[int(dec.split(":")[1])]
        to_p, to_a = client.decrypt_all(net.send("P", dec, request))
        to_p, to_a = net.send(dec, "P", to_p), net.send(dec, "A", to_a)
        mask_p = net.send("P", "A", P.label_mask_all(to_p))
        P.compare_all(net.send("A", "P", A.label_diff_all(to_a, mask_p)))


# ====================================================================== set-up
def _key_setup(n: int, net: Network, cfg: SecSVConfig, clock: Clock
               ) -> tuple[list[BFVContext], str]:
    """Authenticated key set-up among the clients (P relays); BFV keys from its seed.

    The set-up is the project's CKKS one (:mod:`fedsec.crypto.keysetup`, smallest secure
    preset, no rotations); SecSV uses only its transcript-bound session and the 32-byte
    seed it delivers to the clients, from which every client derives the same BFV keys
    (the CKKS keys it also makes are unused). The relayed bytes are counted. Returns the
    clients' BFV contexts and the session id every later message is bound to.
    """
    from fedsec.auc.common import local_federation
    from fedsec.crypto.keysetup import KeySpec, run_key_setup

    names = [f"client-{i}" for i in range(n)]
    identities, roster = local_federation(names)
    spec = KeySpec.create("CKKS_128_N8192_DEPTH1", (), False)

    # what key set-up's aggregator (P) relays, counted on SecSV's network as before: the
    # hellos, the request, the deliveries and one copy of the confirmation bundle
    steps = {"keys/hello": "keys/hellos", "keys/request": "keys/request",
             "keys/deliver": "keys/deliveries", "keys/confirmed": "keys/confirmed"}

    def count(batch: list[Envelope]) -> None:
        step = steps.get(batch[0].kind) if batch else None
        if step is not None:
            for env in batch[:1] if step == "keys/confirmed" else batch:
                net.accounting.message("client" if step == "keys/hellos" else "P",
                                       "P" if step == "keys/hellos" else "client", step,
                                       env.payload)

    setup_net = Network()
    setup_net.intercept(count)
    with clock("other"):
        agg, keys = run_key_setup(identities, roster, spec, network=setup_net)
    ctxs = []
    with clock("encryption"):
        for k in keys:
            ctxs.append(BFVContext.from_seed(k.seed, params=cfg.bfv,
                                             label=k.session.encode()))
    fps = {c.public_fingerprint() for c in ctxs}
    if len(fps) != 1:  # pragma: no cover - deterministic derivation
        raise ProtocolError("clients derived different BFV keys")
    if any(k.session != agg.session for k in keys):  # pragma: no cover - set-up checks it
        raise ProtocolError("clients finished the key set-up in different sessions")
    return ctxs, agg.session


def _setup(record: TrainingRecord, sets: list[tuple[NDArray[np.float64], NDArray[np.int64]]],
           cfg: SecSVConfig, net: Network | None = None, linear_shortcut: bool = True,
           derived: bool = False, schedule: str = "paper", exact: bool = False) -> _Run:
    """Alg. 3: key set-up, bounds and plan, data shares, batches; the run's roles."""
    net = Network() if net is None else net
    n = record.n_clients
    n_layers = len(record.spec.layers)
    strict = schedule == "strict"
    if strict:  # one owner per batch: the owner evaluates the models it knows
        groups, strong = [[c] for c in range(n)], True
    else:
        groups, strong = plan_groups(n, n_layers)
    if not strong:
        warnings.warn(f"SecSV with {n} clients and a {n_layers}-layer model cannot keep "
                      f"all {n_layers + 2} parties of a decryption chain distinct (Zheng et al., "
                      "Prop. 6.8): two clients alternate, which leaves multi-layer "
                      "equation-solving attacks possible.", PrivacyWarning, stacklevel=3)
    clock = Clock()
    ctxs, session = _key_setup(n, net, cfg, clock)
    rounds = round_infos(record, cfg)
    leader = secrets.randbelow(n)
    space = ModelSpace.of_record(record)
    clients = [SecSVClient(i, n, ctxs[i], sets[i][0], sets[i][1], record.spec, cfg,
                           session=session, view=ClientView(space, i) if strict else None)
               for i in range(n)]
    P = PrincipalServer(BFVContext(cfg.bfv), record.spec, n, cfg, rounds,  # noqa: N806
                        session=session, groups=groups, strong=strong,
                        sizes=[len(y) for _, y in sets], linear_shortcut=linear_shortcut,
                        derived=derived, space=space if strict else None)
    A = AuxiliaryServer(BFVContext(cfg.bfv), record.spec, n, cfg, rounds,  # noqa: N806
                        session=session, linear_shortcut=linear_shortcut)
    names = [c.name for c in clients]
    # Alg. 3, steps 1-2: coarse bounds (exponents) from every model and data owner -> the plan
    owned: list[list[tuple[int, str, Params]]] = [[] for _ in range(n)]
    for t, rnd in enumerate(record.rounds):
        owned[leader].append((t, "global", rnd.global_params))
        for cid, params in zip(rnd.participants, rnd.local_params, strict=True):
            owned[cid].append((t, f"c{cid}", params))
    public = [(t, rnd.global_params) for t, rnd in enumerate(record.rounds)]
    plan = P.make_plan(net.gather(names, "P", [c.coarse_bounds(owned[c.index], public)
                                               for c in clients]))
    for c, data in zip(clients, net.broadcast("P", names, plan), strict=True):
        c.receive_plan(data)
    A.receive_plan(net.send("P", "A", plan))
    # Alg. 3, step 3: the clients' data shares
    to_p, to_a = zip(*(c.share_data() for c in clients), strict=True)
    P.receive_data(net.gather(names, "P", to_p))
    A.receive_data(net.gather(names, "A", to_a))
    A.receive_batches(net.send("P", "A", P.batches_message()))
    run = _Run(record, net, clients, P, A, leader, clock)
    if strict and exact:  # refuse before any model is encrypted
        P.plan_rounds(record.n_rounds)
    return run


# ====================================================================== entry point
def secsv_shapley(record: TrainingRecord, test_sets: TestSets, *, estimator: str = "exact",
                  budget: int | None = None, sample_skip: bool = False, seed: int = 0,
                  linear_shortcut: bool = True, derived_decryption: bool | None = None,
                  schedule: str = "strict", config: SecSVConfig | None = None,
                  progress: Progress | None = None, network: Network | None = None
                  ) -> SecureShapleyResult:
    """Federated Shapley values with SecSV (Zheng et al., Alg. 3-4; SampleSkip Alg. 6-7).

    Parameters
    ----------
    record : TrainingRecord
        The federated training run (local models, weights, global models per round).
    test_sets : sequence of (X_i, y_i)
        Each client's private test set, in client order.
    estimator : {"exact", "ps", "gt", "ks", "gtg"}, default="exact"
        Exact SSVs or one of the estimators of :mod:`fedsec.shapley.estimators` run over
        the secure utility oracle (Zheng et al., Table 3).
    budget : int, optional
        Per-round budget of the estimator.
    sample_skip : bool, default=False
        SampleSkip (Zheng et al., Alg. 6-7) at the principal server. Without derived
        decryption, P re-packs each coalition's samples left to test into fewer batches
        where that is cheaper than the round's fixed batches (see
        :meth:`~fedsec.shapley.secsv.principal.PrincipalServer.start_evaluation`).
    seed : int, default=0
        Seed of the estimators' sampling (public randomness).
    linear_shortcut : bool, default=True
        First layer by plaintext-weighted sums of the ``n + 1`` local products per round.
    derived_decryption : bool, optional
        One decryption request per batch and round instead of one per coalition: the
        decrypting client gets the global model's and the other participants' outputs
        (and one pair with its own model) and derives every coalition's output itself
        (see the module's threat model). Needs the linear shortcut, a one-layer model,
        exact SSVs and ``schedule='paper'``; default (None): on exactly then. With
        SampleSkip, P reads the coalitions' samples left to test from the derived table
        (the decrypting client sees the same request as without it). ``True`` where it
        does not apply raises ``ValueError``; ``False`` decrypts per coalition.
    schedule : {"strict", "paper"}, default="strict"
        Who may decrypt what. ``"strict"``: the decryption rule of
        :mod:`fedsec.shapley.views` -- no client ever holds outputs from which it can
        compute a model it knows (the global models, its own, their combinations) on
        another client's samples; batch owners evaluate the models they know; a run the
        rule cannot schedule is refused (:class:`~fedsec.shapley.views.UnsafeSchedule`)
        before any model is encrypted. ``"paper"``: Prop. 6.8 only, which lets a
        decrypting client solve for other clients' test data (a
        :class:`~fedsec.errors.PrivacyWarning` says so).
    config : SecSVConfig, optional
        Fixed-point and BFV parameters.
    progress : callable, optional
        Called with a short message after every round.
    network : Network, optional
        The :class:`~fedsec.protocol.network.Network` every message crosses (default: a
        fresh one). Pass your own to observe or intercept the traffic between the roles
        (tests, benchmarks, a demonstration of an attack).

    Returns
    -------
    SecureShapleyResult
    """
    where = "secsv_shapley"
    budget = check_protocol_args(record, estimator, budget, where=where,
                                 sample_skip=sample_skip, linear_shortcut=linear_shortcut)
    cfg = (config or SecSVConfig()).check()
    if any(ls.kind == "gru" for ls in record.spec.layers):  # before any key is made
        raise ValueError("SecSV evaluates dense and conv2d layers; a gru layer needs "
                         "per-step decryption and is not supported.")
    sets = check_test_sets(test_sets, record.n_clients, record.spec.in_features, where=where)
    derivable = linear_shortcut and len(record.spec.layers) == 1 and estimator == "exact"
    if derived_decryption is not None and not isinstance(derived_decryption, bool):
        raise TypeError(f"The 'derived_decryption' parameter of {where} must be a bool or "
                        f"None. Got {derived_decryption!r} instead.")
    if derived_decryption and not derivable:
        raise ValueError(f"The 'derived_decryption' parameter of {where} needs "
                         "linear_shortcut=True, a one-layer model and estimator='exact' "
                         "(otherwise the decrypting client would see outputs the protocol "
                         "does not show it).")
    check_schedule(schedule, where)
    if schedule == "strict":
        if derived_decryption:
            raise ValueError(f"The 'derived_decryption' parameter of {where} needs "
                             "schedule='paper': the decrypting client would hold the global "
                             "model's output on other clients' samples (it can solve for "
                             "them).")
        derivable = False
    derived = derivable if derived_decryption is None else derived_decryption
    net = Network() if network is None else network
    t0 = time.perf_counter()
    with threadpool_limits(limits=1, user_api="blas"):
        run = _setup(record, sets, cfg, net, linear_shortcut, derived, schedule,
                     exact=estimator == "exact" and (linear_shortcut or not sample_skip))
        result = run_rounds(run, estimator, budget or 0, sample_skip, seed, progress, "secsv")
    result.seconds = time.perf_counter() - t0
    result.accounting = run.close()
    if run.P.fixed_point is not None:
        result.fixed_point = run.P.fixed_point.summary(record.spec)
    return result

