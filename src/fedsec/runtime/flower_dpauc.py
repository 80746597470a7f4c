"""DPAUC (Sun et al.) on Flower's deployment engine: the aggregator is the ServerApp, each
party a SuperNode reading its own CSV.

The roles are those of :mod:`fedsec.auc.dpauc` (:class:`~fedsec.auc.dpauc.DPAUCClient`,
:class:`~fedsec.auc.dpauc.RRClient`, :class:`~fedsec.auc.dpauc.DPAUCServer`); this module
only carries their bytes, checks the run against each party's policy and signs what a
party sends with its roster identity. Two message rounds per run:

==================  ===========================================================  ==========
message type        party (SuperNode)                                            reply
==================  ===========================================================  ==========
``dpauc_hello``     check the requested mechanism, epsilon, delta, score noise  signed
                    and decision points against this node's policy; build the   hello
                    party's role from its CSV; ``role.hello("party:<name>")``
``dpauc_submit``    ``role.join(session)`` (its nonce must be in, the session    signed
                    must cover at least its quorum); charge the node's budget;  submission
                    ``role.submit()`` (fresh noise)
==================  ===========================================================  ==========

The ServerApp checks every signature against the roster (a hello or submission the relay
forged or moved to another party is refused and that party left out), opens the session
from the signed hellos (:meth:`DPAUCServer.open_session`) and aggregates the submissions
bound to it (:meth:`DPAUCServer.aggregate`: a submission replayed from another run is
refused). The parties' noisy statistics are what the paper's aggregator sees; nothing is
sealed because the aggregator is their intended reader (TLS protects them to the SuperLink).

Node config (besides ``data-path``, ``label-col``, ``score-col``, ``pos-label``,
``delimiter``, ``scores``, ``identity-path``, ``roster-path``, ``state-dir``, ``log-path``
and ``quorum`` of the AUC app, :mod:`fedsec.runtime.flower_client`):
``max-epsilon`` (largest epsilon one evaluation may spend, scores included; default 1.0),
``max-delta`` (default 1e-5), ``mechanisms`` (default ``laplace gaussian rr``),
``allow-score-histogram`` (``true`` lets DPAUC_RR run without score noise, which reveals
the party's score histogram; default ``false``), ``budget-epsilon`` (total epsilon this node
spends over all DPAUC runs, kept in ``<state-dir>/dpauc-budget.json``; default: no total).

Run config: ``protocol = "dpauc"``, ``dpauc-mechanism``, ``dpauc-epsilon``, ``dpauc-delta``
(Gaussian only), ``dpauc-score-epsilon`` (RR only, 0 = none), ``dpauc-clip``,
``decision-points``, ``roster-path``, ``num-nodes``, ``min-parties``, ``step-timeout``,
``wait-nodes-timeout``, ``result-path``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

with warnings.catch_warnings():
    # flwr 1.41 -> typer -> click 8.5 warns on import; see fedsec.runtime.flower_io.
    warnings.simplefilter("ignore", DeprecationWarning)
    from flwr.app import Context, RecordDict
    from flwr.serverapp import Grid

from fedsec.auc.dpauc import (
    _MAX_POINTS,
    _ROLE_RE,
    MECHANISMS,
    DPAUCClient,
    DPAUCServer,
    RRClient,
)
from fedsec.auc.policy import default_quorum
from fedsec.crypto.identity import Identity, Roster
from fedsec.errors import PolicyViolation, ProtocolError
from fedsec.protocol import fields as readers
from fedsec.protocol import wire
from fedsec.protocol.binding import context_of
from fedsec.runtime.flower_client import (
    NodeCheckFailed,
    NodeSetup,
    _flag,
    _node_logger,
    _number,
    load_node,
)
from fedsec.runtime.flower_io import wait_for_nodes
from fedsec.runtime.flower_server import RunFailed, RunOptions, ServerRun
from fedsec.runtime.node_host import RunState, hosted
from fedsec.runtime.safetext import printable

__all__ = ["DPAUCOptions", "DPAUCPolicy", "main", "handle_hello", "handle_submit",
           "sign", "verify"]

logger = logging.getLogger("flwr")

SIGNED_KIND = "flower-dpauc/signed"
_TAGS = {"hello": "fedsec/flower-dpauc/hello/v1", "submit": "fedsec/flower-dpauc/submit/v1"}
DEFAULT_MAX_EPSILON = 1.0
DEFAULT_MAX_DELTA = 1e-5
BUDGET_FILE = "dpauc-budget.json"


# ------------------------------------------------------------------ signed envelopes
def sign(identity: Identity, what: str, payload: bytes) -> bytes:
    """``payload`` signed by ``identity`` for step ``what`` (``hello`` or ``submit``)."""
    sig = identity.sign(_TAGS[what], payload)
    return wire.encode(SIGNED_KIND, {"signer": identity.name, "step": what}, [payload, sig])


def verify(roster: Roster, what: str, data: bytes, signer: str) -> bytes:
    """The payload of ``data`` if ``signer`` (a roster name) signed it for step ``what``;
    ``ProtocolError`` otherwise."""
    msg = wire.decode(data, expect=SIGNED_KIND, max_bytes=1 << 24)
    name = readers.text(msg.meta, "signer", max_length=256)
    step = readers.text(msg.meta, "step", choices=tuple(_TAGS))
    if name != signer or step != what:
        raise ProtocolError(f"a {what} signed as {printable(name, 64)!r}/{step} arrived from "
                            f"the node of {signer!r}")
    payload, sig = readers.blobs(msg.blobs, 2)
    roster.verify(signer, _TAGS[what], payload, sig)
    return payload


# -------------------------------------------------------------------- party policy
@dataclass(frozen=True)
class DPAUCPolicy:
    """This party's privacy policy for DPAUC, from its own node config."""

    max_epsilon: float = DEFAULT_MAX_EPSILON
    max_delta: float = DEFAULT_MAX_DELTA
    mechanisms: tuple[str, ...] = MECHANISMS
    allow_score_histogram: bool = False
    budget_epsilon: float | None = None

    @classmethod
    def from_node_config(cls, cfg: Mapping[str, Any]) -> DPAUCPolicy:
        """Read ``max-epsilon``, ``max-delta``, ``mechanisms``, ``allow-score-histogram``
        and ``budget-epsilon``; ``ValueError`` names a bad key."""
        max_eps = _number(cfg.get("max-epsilon", DEFAULT_MAX_EPSILON), "max-epsilon", float)
        max_delta = _number(cfg.get("max-delta", DEFAULT_MAX_DELTA), "max-delta", float)
        if max_eps <= 0:
            raise ValueError(f"node config 'max-epsilon' must be > 0; got {max_eps!r}")
        if not 0 <= max_delta < 1:
            raise ValueError(f"node config 'max-delta' must be in [0, 1); got {max_delta!r}")
        raw = str(cfg.get("mechanisms", "") or "").strip()
        mechs = tuple(m for m in re.split(r"[\s,]+", raw) if m) if raw else MECHANISMS
        bad = [m for m in mechs if m not in MECHANISMS]
        if bad or not mechs:
            raise ValueError(f"node config 'mechanisms' must list some of {list(MECHANISMS)}; "
                             f"got {printable(raw, 80)!r}")
        budget_raw = cfg.get("budget-epsilon")
        budget = None
        if budget_raw is not None and str(budget_raw).strip() != "":
            budget = _number(budget_raw, "budget-epsilon", float)
            if budget <= 0:
                raise ValueError(f"node config 'budget-epsilon' must be > 0; got {budget!r}")
        return cls(max_eps, max_delta, mechs,
                   _flag(cfg.get("allow-score-histogram", False), "allow-score-histogram"),
                   budget)


@dataclass(frozen=True)
class Request:
    """The privacy parameters a run asks of every party (the aggregator's choice)."""

    mechanism: str
    epsilon: float
    delta: float
    score_epsilon: float
    decision_points: int

    def meta(self) -> dict[str, Any]:
        return {"mechanism": self.mechanism, "epsilon": self.epsilon, "delta": self.delta,
                "score-epsilon": self.score_epsilon, "decision-points": self.decision_points}

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> Request:
        """Parse what the ServerApp sent (``ProtocolError`` if malformed)."""
        return cls(readers.text(meta, "mechanism", choices=MECHANISMS),
                   readers.real(meta, "epsilon", 0.0), readers.real(meta, "delta", 0.0, 1.0),
                   readers.real(meta, "score-epsilon", 0.0),
                   readers.integer(meta, "decision-points", 2, _MAX_POINTS))

    @property
    def total_epsilon(self) -> float:
        return self.epsilon + self.score_epsilon


def check_request(req: Request, policy: DPAUCPolicy, node: NodeSetup) -> None:
    """Refuse a run this party's policy does not allow (``PolicyViolation``)."""
    if req.mechanism not in policy.mechanisms:
        raise PolicyViolation(f"mechanism {req.mechanism!r} is not in this party's "
                              f"{list(policy.mechanisms)}", check="mechanism")
    if not req.epsilon > 0:
        raise PolicyViolation("epsilon must be > 0", check="epsilon")
    if req.total_epsilon > policy.max_epsilon:
        raise PolicyViolation(f"the run asks epsilon {req.total_epsilon:g} (scores "
                              f"included), above this party's max-epsilon "
                              f"{policy.max_epsilon:g}", check="epsilon")
    if req.mechanism == "gaussian":
        if not 0 < req.delta <= policy.max_delta:
            raise PolicyViolation(f"delta {req.delta:g} is not in (0, max-delta "
                                  f"{policy.max_delta:g}]", check="delta")
    elif req.delta != 0:
        raise PolicyViolation("delta applies only to the Gaussian mechanism", check="delta")
    if req.mechanism == "rr":
        if req.score_epsilon == 0 and not policy.allow_score_histogram:
            raise PolicyViolation("DPAUC_RR without score noise reveals this party's score "
                                  "histogram (node config allow-score-histogram)",
                                  check="score-noise")
    elif req.score_epsilon != 0:
        raise PolicyViolation("score noise applies only to DPAUC_RR", check="score-noise")
    n = req.decision_points
    if not node.policy.party.min_decision_points <= n <= node.policy.party.max_decision_points:
        raise PolicyViolation(f"{n} decision points are outside this party's "
                              f"{node.policy.party.min_decision_points}.."
                              f"{node.policy.party.max_decision_points}",
                              check="decision-points")


class Budget:
    """This node's total DPAUC spend over runs (``<state-dir>/dpauc-budget.json``)."""

    def __init__(self, node: NodeSetup) -> None:
        self.store = node.store
        self.path = node.store.directory / BUDGET_FILE

    def spent(self) -> float:
        try:
            doc = json.loads(self.path.read_text(encoding="utf-8"))
            total = float(sum(float(e["epsilon"]) for e in doc["spends"]))
        except FileNotFoundError:
            return 0.0
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise NodeCheckFailed("budget-invalid", f"budget ledger {self.path}: {exc}"
                                  ) from None
        if not math.isfinite(total) or total < 0:
            raise NodeCheckFailed("budget-invalid", f"budget ledger {self.path} is corrupt")
        return total

    def charge(self, epsilon: float, limit: float | None, run_id: int) -> None:
        """Record a spend before the noisy statistics leave the node (every run that
        submits is in the ledger, with or without a ``limit``); refuse one that would
        exceed ``limit``."""
        spent = self.spent()
        if limit is not None and spent + epsilon > limit + 1e-12:
            raise PolicyViolation(f"this run's epsilon {epsilon:g} would exceed the node's "
                                  f"budget-epsilon {limit:g} ({spent:g} spent)",
                                  check="budget")
        spends: list[dict[str, Any]] = []
        with contextlib.suppress(FileNotFoundError):
            spends = list(json.loads(self.path.read_text(encoding="utf-8"))["spends"])
        spends.append({"run": int(run_id), "epsilon": float(epsilon), "time": time.time()})
        self.store._write(self.path, (json.dumps({"spends": spends}, indent=1) + "\n"
                                      ).encode())


# -------------------------------------------------------------------- party steps
def _context(state: RunState) -> Context:
    return Context(run_id=state.run_id, node_id=state.node_id,
                   node_config=dict(state.node_config), state=RecordDict(),
                   run_config=dict(state.run_config))


def _hello(blobs: list[bytes], meta: dict[str, Any], state: RunState
           ) -> tuple[list[bytes], dict[str, Any]]:
    """Check the run against this party's policy, build its role, send a signed hello."""
    if state.data:
        raise NodeCheckFailed("out-of-order", "a second hello in this run")
    node = load_node(_context(state))
    try:
        policy = DPAUCPolicy.from_node_config(node.node_config)
    except (TypeError, ValueError) as exc:
        raise NodeCheckFailed("node-config", str(exc)) from None
    req = Request.from_meta(meta)
    check_request(req, policy, node)
    if policy.budget_epsilon is not None:  # refuse early if the total is already spent
        if Budget(node).spent() + req.total_epsilon > policy.budget_epsilon + 1e-12:
            raise PolicyViolation("this run would exceed the node's budget-epsilon",
                                  check="budget")
    role = f"party:{node.name}"
    if not re.fullmatch(_ROLE_RE, role):
        raise NodeCheckFailed("node-config", f"party name {node.name!r} cannot name a DPAUC "
                              "role (letters, digits and _.@+- only, at most 64)")
    log = _node_logger(node.node_config)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        party: DPAUCClient | RRClient
        if req.mechanism == "rr":
            party = RRClient(node.data.y_true, node.data.y_score, epsilon=req.epsilon,
                             decision_points=req.decision_points,
                             score_epsilon=req.score_epsilon or None)
        else:
            party = DPAUCClient(node.data.y_true, node.data.y_score, epsilon=req.epsilon,
                                decision_points=req.decision_points, mechanism=req.mechanism,
                                delta=req.delta if req.mechanism == "gaussian" else None)
    for w in caught:  # allowed by this node's policy: logged, not raised
        log.warning("privacy: %s", w.message)
    # the node's quorum, else the roster's, else the whole roster: an evaluation never
    # silently covers fewer parties than the federation agreed
    quorum = (max(2, node.policy.party.quorum) if node.policy.party.quorum is not None
              else default_quorum(len(node.roster), node.roster.quorum, None))
    hello = sign(node.identity, "hello", party.hello(role))
    state.data.update(node=node, party=party, policy=policy, request=req, quorum=quorum)
    log.info("run %d: DPAUC %s, epsilon %g (scores %g), delta %g, %d decision points; this "
             "party (%s, %d samples) accepts at least %d parties; roster fingerprint %s",
             state.run_id, req.mechanism, req.epsilon, req.score_epsilon, req.delta,
             req.decision_points, node.name, node.data.n_samples, quorum,
             node.roster.fingerprint)
    return [hello], {"name": node.name, "quorum": quorum}


def _submit(blobs: list[bytes], meta: dict[str, Any], state: RunState
            ) -> tuple[list[bytes], dict[str, Any]]:
    """Join the session (own nonce in, at least the party's quorum), charge the budget,
    send the signed noisy statistics. The run is over on this node afterwards."""
    if "party" not in state.data or state.data.get("submitted"):
        raise NodeCheckFailed("out-of-order", "submit without a hello on this node, or twice")
    node: NodeSetup = state.data["node"]
    party: DPAUCClient | RRClient = state.data["party"]
    policy: DPAUCPolicy = state.data["policy"]
    req: Request = state.data["request"]
    (session,) = readers.blobs(blobs, 1)
    party.join(session)  # ProtocolError unless this party's nonce is in the session
    parties = len(wire.decode(session, expect="dpauc/session", max_bytes=1 << 22).blobs) - 1
    if parties < state.data["quorum"]:
        raise PolicyViolation(f"the session covers {parties} parties; this party's policy "
                              f"requires at least {state.data['quorum']}", check="quorum")
    state.data["submitted"] = True
    Budget(node).charge(req.total_epsilon, policy.budget_epsilon, state.run_id)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # already logged at hello
        signed = sign(node.identity, "submit", party.submit())
    state.done = True
    node.store.save_result({"status": "submitted", "protocol": "dpauc", "party": node.name,
                            "mechanism": req.mechanism, "epsilon": req.epsilon,
                            "delta": req.delta, "score_epsilon": req.score_epsilon,
                            "decision_points": req.decision_points, "parties": parties})
    _node_logger(node.node_config).info(
        "run %d: submitted noisy statistics (%s, epsilon %g) to a session of %d parties",
        state.run_id, req.mechanism, req.total_epsilon, parties)
    return [signed], {}


handle_hello = hosted("dpauc_hello", "fedsec.runtime.flower_dpauc:_hello")
handle_submit = hosted("dpauc_submit", "fedsec.runtime.flower_dpauc:_submit")


# -------------------------------------------------------------------- server side
@dataclass(frozen=True)
class DPAUCOptions:
    """Validated run config of the DPAUC ServerApp."""

    mechanism: str = "laplace"
    epsilon: float = 1.0
    delta: float = 0.0
    score_epsilon: float = 0.0
    clip: bool = False
    decision_points: int = 100
    roster_path: str = ""
    num_nodes: int = 0
    min_parties: int = 0
    step_timeout: float = 60.0
    wait_nodes_timeout: float = 60.0
    result_path: str = ""

    @classmethod
    def from_run_config(cls, cfg: Mapping[str, Any]) -> DPAUCOptions:
        """Read and check the run config (unknown keys are ignored); ``ValueError`` says
        which key is wrong, in the style of the in-process ``dpauc``."""
        d = cls()
        try:
            clip = cfg.get("dpauc-clip", d.clip)
            opts = cls(
                mechanism=str(cfg.get("dpauc-mechanism", d.mechanism)),
                epsilon=float(cfg.get("dpauc-epsilon", d.epsilon)),
                delta=float(cfg.get("dpauc-delta", d.delta)),
                score_epsilon=float(cfg.get("dpauc-score-epsilon", d.score_epsilon)),
                clip=_flag(clip, "dpauc-clip"),
                decision_points=int(cfg.get("decision-points", d.decision_points)),
                roster_path=str(cfg.get("roster-path", d.roster_path)),
                num_nodes=int(cfg.get("num-nodes", d.num_nodes)),
                min_parties=int(cfg.get("min-parties", d.min_parties)),
                step_timeout=float(cfg.get("step-timeout", d.step_timeout)),
                wait_nodes_timeout=float(cfg.get("wait-nodes-timeout",
                                                 d.wait_nodes_timeout)),
                result_path=str(cfg.get("result-path", d.result_path)),
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(f"invalid run config value: {exc}") from None
        if opts.mechanism not in MECHANISMS:
            raise ValueError(f"The 'dpauc-mechanism' run config must be one of "
                             f"{list(MECHANISMS)}. Got {opts.mechanism!r} instead.")
        if not (math.isfinite(opts.epsilon) and opts.epsilon > 0):
            raise ValueError(f"The 'dpauc-epsilon' run config must be > 0. Got "
                             f"{opts.epsilon!r} instead.")
        if opts.mechanism == "gaussian" and not 0 < opts.delta < 1:
            raise ValueError(f"The 'dpauc-delta' run config must be in (0, 1) for "
                             f"mechanism 'gaussian'. Got {opts.delta!r} instead.")
        if opts.mechanism != "gaussian" and opts.delta != 0:
            raise ValueError("The 'dpauc-delta' run config applies only to mechanism "
                             f"'gaussian'. Got {opts.delta!r} instead.")
        if not (math.isfinite(opts.score_epsilon) and opts.score_epsilon >= 0):
            raise ValueError(f"The 'dpauc-score-epsilon' run config must be >= 0 (0 = no "
                             f"score noise). Got {opts.score_epsilon!r} instead.")
        if opts.score_epsilon and opts.mechanism != "rr":
            raise ValueError("The 'dpauc-score-epsilon' run config applies only to "
                             "mechanism 'rr'.")
        if not 2 <= opts.decision_points <= _MAX_POINTS:
            raise ValueError(f"The 'decision-points' run config must be in 2..{_MAX_POINTS}. "
                             f"Got {opts.decision_points} instead.")
        if opts.num_nodes < 0:
            raise ValueError(f"The 'num-nodes' run config must be >= 0 (0 = every roster "
                             f"party). Got {opts.num_nodes} instead.")
        if opts.min_parties < 0:
            raise ValueError(f"The 'min-parties' run config must be >= 0. Got "
                             f"{opts.min_parties} instead.")
        if opts.step_timeout <= 0 or opts.wait_nodes_timeout <= 0:
            raise ValueError("The 'step-timeout' and 'wait-nodes-timeout' run config values "
                             "must be > 0.")
        return opts

    def request(self) -> Request:
        return Request(self.mechanism, self.epsilon, self.delta, self.score_epsilon,
                       self.decision_points)

    def load_roster(self) -> Roster:
        if not self.roster_path:
            raise ValueError("The 'roster-path' run config must name the federation's roster "
                             "(roster.json, made with 'fedsec roster create') on the "
                             "SuperLink machine.")
        try:
            return Roster.load(Path(self.roster_path))
        except FileNotFoundError:
            raise ValueError(f"The 'roster-path' run config names {self.roster_path}, which "
                             "does not exist on the SuperLink machine.") from None


class DPAUCRun(ServerRun):
    """One DPAUC evaluation driven by the ServerApp (the AUC app's bookkeeping: steps,
    left-out parties, bytes, timings, the result JSON)."""

    dp: DPAUCOptions

    @classmethod
    def create(cls, grid: Grid, dp: DPAUCOptions, run_id: int) -> DPAUCRun:
        base = RunOptions(security="semi-honest", decision_points=dp.decision_points,
                          roster_path=dp.roster_path, num_nodes=dp.num_nodes,
                          min_parties=dp.min_parties, step_timeout=dp.step_timeout,
                          wait_nodes_timeout=dp.wait_nodes_timeout,
                          result_path=dp.result_path)
        run = cls(grid, base, run_id=run_id)
        run.dp = dp
        run.doc = {
            "status": "starting", "protocol": "dpauc", "run_id": run_id,
            "mechanism": dp.mechanism, "epsilon": dp.epsilon, "delta": dp.delta,
            "score_epsilon": dp.score_epsilon, "clip": dp.clip,
            "decision_points": dp.decision_points,
            "parties": {"included": [], "left_out": []}, "bytes": {}, "timings": {},
            "exchanges": 0,
        }
        return run

    def run(self) -> dict[str, Any]:
        """hello -> session + submit -> aggregate."""
        roster = self.dp.load_roster()
        self.doc["roster_fingerprint"] = roster.fingerprint
        count = self.dp.num_nodes or len(roster)
        if count > len(roster):
            raise ValueError(f"The 'num-nodes' run config ({count}) exceeds the roster's "
                             f"{len(roster)} parties.")
        self.write("waiting-for-nodes")
        wait_for_nodes(self.grid, count, self.dp.wait_nodes_timeout)
        nodes = sorted(self.grid.get_node_ids())[:2 * len(roster) + 8]
        self.doc["nodes"] = nodes
        # round 1: every node checks the request against its policy, answers a signed hello
        replies = self.step("dpauc_hello", {n: ([], self.dp.request().meta()) for n in nodes})
        self.doc["exchanges"] += 1
        hellos: dict[int, bytes] = {}
        quorums: dict[int, int] = {}
        for n in nodes:
            if n not in replies.ok:
                continue
            blobs, meta = replies.ok[n]
            name = meta.get("name")
            try:
                if not isinstance(name, str) or name not in roster:
                    raise ProtocolError("a hello from a name not on the roster")
                if name in self.names.values():
                    raise ProtocolError(f"a second hello for {name!r}")
                inner = verify(roster, "hello", blobs[0], name)
                role = readers.text(wire.decode(inner, expect="dpauc/hello",
                                                max_bytes=1 << 10).meta, "role")
                if role != f"party:{name}":
                    raise ProtocolError("the signed hello names another role")
            except ProtocolError as exc:
                self.leave_out(n, "dpauc_hello", f"hello rejected: {exc}")
                continue
            self.names[n] = name
            hellos[n] = inner
            q = meta.get("quorum")
            quorums[n] = q if isinstance(q, int) and not isinstance(q, bool) else 2
        announced = max(quorums.values(), default=2)
        self.required = max(2, self.dp.min_parties, roster.quorum or 0, announced)
        self.doc["quorum"] = {"required": self.required, "parties": announced,
                              "roster": roster.quorum, "min_parties": self.dp.min_parties}
        self.require(list(hellos), "dpauc_hello")
        # round 2: the session (every nonce) to every party; each answers its submission
        server = DPAUCServer()
        order = list(hellos)
        session = server.open_session([hellos[n] for n in order])
        subs = self.step("dpauc_submit", {n: ([session], {}) for n in order})
        self.doc["exchanges"] += 1
        submitted: list[int] = []
        bodies: list[bytes] = []
        for n in order:
            if n not in subs.ok:
                continue
            try:
                inner = verify(roster, "submit", subs.ok[n][0][0], self.names[n])
                sender = context_of(wire.decode(inner, expect="dpauc/submit",
                                                max_bytes=1 << 24).meta).sender
                if sender != f"party:{self.names[n]}":
                    raise ProtocolError("the signed submission names another party")
            except ProtocolError as exc:
                self.leave_out(n, "dpauc_submit", f"submission rejected: {exc}")
                continue
            submitted.append(n)
            bodies.append(inner)
        self.require(submitted, "dpauc_submit")
        self.write("aggregating")
        t0 = time.monotonic()
        try:
            result = server.aggregate(bodies, clip=self.dp.clip)
        except ProtocolError as exc:  # e.g. a genuine submission replayed from another run
            raise RunFailed(f"the aggregator refused a submission: {exc}") from None
        self.doc["timings"]["aggregate_s"] = round(time.monotonic() - t0, 4)
        self.doc["parties"]["included"] = [self.names[n] for n in submitted]
        self.doc.update(auc=result.auc, raw_auc=result.raw_auc, clipped=result.clipped,
                        noisy_auc=result.noisy_auc, n_parties=result.n_parties,
                        status="done")
        return self.doc


def main(grid: Grid, context: Context) -> None:
    """ServerApp entry point for ``protocol = "dpauc"``: one evaluation, the result JSON.

    Raises after writing ``status = "failed"`` if no result was computed.
    """
    opts = DPAUCOptions.from_run_config(context.run_config)
    run = DPAUCRun.create(grid, opts, int(context.run_id))
    try:
        run.run()
        logger.info("fedsec: DPAUC %s done: auc=%s over %s; left out %s", opts.mechanism,
                    run.doc["auc"], printable(run.doc["parties"]["included"]),
                    printable([e["party"] for e in run.doc["parties"]["left_out"]]))
    except Exception as err:
        run.doc.update(status="failed", error=f"{type(err).__name__}: {err}")
        run.doc.pop("auc", None)
        logger.error("fedsec: DPAUC run failed: %s", printable(run.doc["error"]))
        raise
    finally:
        run.write()
