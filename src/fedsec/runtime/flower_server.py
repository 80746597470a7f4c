"""Flower ServerApp logic: the aggregator of secure FHAUC over the Message API (flwr 1.41).

The ServerApp plays the aggregator roles of :mod:`fedsec.crypto.keysetup`,
:mod:`fedsec.auc.fhauc` and :mod:`fedsec.auc.fhauc_malicious` and relays their byte
messages to the parties' ClientApps (:mod:`fedsec.runtime.flower_client`), one message
round per protocol step:

* signed key set-up: ``hello`` (all; carries the run's configuration, which each party
  checks against its own policy) -> ``offer`` (the key holder, fixed by the hash of the
  hellos, not chosen by the server) -> ``deliver`` (all; each party answers with a signed
  confirmation of the transcript, and in malicious mode with its signed fresh commit,
  bound to the session and carrying no data) -> ``confirmed`` (all; every confirmation
  relayed to every party, which detects equivocation, then submits in the same exchange:
  semi-honest one ciphertext; malicious, with the start message of every signed commit,
  its split, permuted ciphertexts) -> ``finalize``. Five exchanges in either mode; no
  party encrypts data before it has checked the confirmations;
* exact mode: ``confirmed`` (keys only) -> ``refine``/``marks`` per round -> ``submit``
  (semi-honest) or ``commit`` -> ``submit`` (malicious) -> ``finalize``; a malicious
  restart after a drop-out is a new ``commit`` -> ``submit``.

It sees identity public keys (the roster), X25519 public keys, the CKKS public keys,
sealed boxes, signatures and ciphertexts only. Parties decrypt the result; each finalize
reply carries whether the party accepted it and, if the party shares it (node config
``share-auc``; default on in malicious mode, off in semi-honest mode), its AUC. A
party's failure reply carries a check name only (``policy:quorum``,
``tampering:double-execution``...).

Who decides what
----------------
The run config (security mode, decision points, preset, tolerance, splits) is the
server's choice; every party checks it against its **own** policy (node config) and
refuses what its policy does not allow. The roster is agreed out of band; the server
needs it (run config ``roster-path``, a file on the SuperLink machine) to attribute
signed messages to parties. How few parties a result may cover is the parties' decision:
each announces its quorum in its hello reply (the roster's quorum, else the whole roster
in malicious mode and 2 in semi-honest mode, unless its node config says ``quorum``) and
enforces it; the server plans with the largest announced quorum (and its own
``min-parties`` floor) and stops early when it cannot be met.

Failures (a node that answers with a check, does not answer within ``step-timeout`` or
is offline):

* ``hello``: the party is left out if the others still meet the quorum;
* ``offer``: the key holder is left out and key set-up restarts over the others (the new
  transcript fixes a new key holder), at most ``max-restarts`` times;
* ``deliver``: key set-up restarts over the parties that confirmed (a confirmation round
  needs every participant);
* ``confirmed``: the party has no keys (and no submission) and is left out; in
  malicious mode its commit is in the start message, so the others' submissions are
  handled as a missing ``submit`` below;
* semi-honest ``submit`` (or ``confirmed``): aggregate the others if they meet every
  party's quorum and report who was left out;
* malicious ``submit`` (or ``confirmed``): the zero-sum masks of the started participants
  would not cancel, so no result is computed; if the survivors meet every party's
  quorum (a roster or node ``quorum`` below the whole roster), the commit round restarts
  over them with fresh nonces, at most ``max-restarts`` times; by default parties
  require the whole roster in malicious mode, so the run stops with a clear error;
* ``finalize``: the result stands for the parties that answered; the others are listed
  as ``unreported``; any party's refusal (``tampering:...``) fails the run.

The outcome goes to a JSON file (run config ``result-path``; written atomically at every
stage, so it can be polled): ``status`` (``done`` or ``failed``; intermediate stages
otherwise), ``auc`` (when at least one party shared it), ``security``, ``verified``,
``roster_fingerprint``, ``parties`` (``included``, ``left_out`` with step, reason and
check, ``unreported``), ``party_results``, ``quorum``, ``bytes``, ``timings``,
``restarts``, ``error``.

Run config keys (defaults in the example app's ``pyproject.toml``): ``security``
(``semi-honest`` | ``malicious``), ``decision-points`` (a number, or ``"exact"``: exact
mode's refinement rounds, steps ``refine`` and ``marks``, then the evaluation on the refined
grid; caps ``max-points``, 0 = the mode's default, and ``max-rounds``), ``masking`` (``single`` |
``pair``), ``splits`` (0 = smallest meeting ``min-bound-bits``), ``tolerance``, ``runs``,
``min-bound-bits``, ``preset``, ``roster-path``, ``num-nodes`` (how many connected nodes
to wait for, 0 = as many as the roster lists; then every connected node is asked and the
signed hellos say which are roster parties),
``min-parties`` (0 = the parties' quorum), ``step-timeout``, ``wait-nodes-timeout``,
``max-restarts``, ``result-path``, the simulation keys ``sim-identity-dir`` and
``sim-data-dir``, and test hooks ``pause-after`` (a step name) and ``pause-seconds``.
"""

from __future__ import annotations

import json
import logging
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

with warnings.catch_warnings():
    # flwr 1.41 -> typer -> click 8.5 warns on import; see fedsec.runtime.flower_io.
    warnings.simplefilter("ignore", DeprecationWarning)
    from flwr.app import Context
    from flwr.serverapp import Grid, ServerApp

from fedsec.auc.exact import (
    DEFAULT_MAX_POINTS_MALICIOUS,
    INITIAL_POINTS,
    MAX_REFINE_BINS,
    BinPairsAggregator,
    initial_grid,
    next_grid,
)
from fedsec.auc.exact_params import DEFAULT_MAX_ROUNDS
from fedsec.auc.fhauc import FHAUCAggregator, FHAUCConfig
from fedsec.auc.fhauc_malicious import (
    DEFAULT_RUNS,
    DEFAULT_TOLERANCE,
    MaliciousAggregator,
    MaliciousConfig,
)
from fedsec.auc.fhauc_threshold import ThresholdFHAUCAggregator, ThresholdMaliciousAggregator
from fedsec.auc.policy import DEFAULT_MAX_DECISION_POINTS
from fedsec.crypto.collective import CollectiveKeyAggregator
from fedsec.crypto.identity import Roster
from fedsec.crypto.keysetup import KeySetupAggregator, KeySpec
from fedsec.crypto.params import THRESHOLD_PRESET, default_preset
from fedsec.errors import ProtocolError
from fedsec.protocol import fields as readers
from fedsec.protocol import wire
from fedsec.runtime.flower_io import (
    BLOBS_KEY,
    StepResult,
    get_blobs,
    get_meta,
    make_content,
    run_step,
    wait_for_nodes,
)
from fedsec.runtime.safetext import printable

__all__ = ["RunFailed", "RunOptions", "ServerRun", "build_server_app", "main"]

logger = logging.getLogger("flwr")

SEMI_HONEST_AGREEMENT = 1e-9
#: Refusals at hello that mean a roster party's own input is broken (its identity is on
#: the roster, its file breaks a rule; not a policy choice, not a stranger's node): the run
#: stops on them unless the run config says ``allow-left-out = true``.
INPUT_CHECKS = frozenset({"input-invalid"})

STEPS = ("hello", "offer", "deliver", "confirmed", "refine", "marks", "commit", "submit",
         "finalize")


def _bool(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no", ""):
        return False
    raise ValueError(f"The '{key}' run config must be true or false. Got {value!r} instead.")


@dataclass(frozen=True)
class RunOptions:
    """Validated run config of the ServerApp."""

    security: str = "malicious"
    decision_points: int = 100
    exact: bool = False        # decision-points = "exact": refine the grid first
    max_points: int = 0        # exact mode's final grid cap; 0 = the mode's default
    max_rounds: int = DEFAULT_MAX_ROUNDS
    masking: str = "single"
    keys: str = "single"       # "threshold": no party holds the whole key
    splits: int = 0
    tolerance: float = DEFAULT_TOLERANCE
    runs: int = DEFAULT_RUNS
    min_bound_bits: float = 40.0
    preset: str = ""   # empty: the mode's own (fedsec.crypto.params.default_preset)
    roster_path: str = ""
    num_nodes: int = 0
    min_parties: int = 0
    step_timeout: float = 60.0
    wait_nodes_timeout: float = 60.0
    max_restarts: int = 2
    allow_left_out: bool = False
    result_path: str = ""
    pause_after: str = ""
    pause_seconds: float = 0.0
    sim_identity_dir: str = ""
    sim_data_dir: str = ""

    @classmethod
    def from_run_config(cls, cfg: Mapping[str, Any]) -> RunOptions:
        """Read and check the run config (unknown keys are ignored)."""
        d = cls()

        def get(key: str, default: Any) -> Any:
            return cfg.get(key, default)

        exact = str(cfg.get("decision-points", "")).strip().lower() == "exact"
        if exact:
            cfg = {**cfg, "decision-points": INITIAL_POINTS}
        try:
            opts = cls(
                security=str(get("security", d.security)),
                decision_points=int(get("decision-points", d.decision_points)),
                exact=exact,
                max_points=int(get("max-points", d.max_points)),
                max_rounds=int(get("max-rounds", d.max_rounds)),
                masking=str(get("masking", d.masking)),
                keys=str(get("keys", d.keys)),
                splits=int(get("splits", d.splits)),
                tolerance=float(get("tolerance", d.tolerance)),
                runs=int(get("runs", d.runs)),
                min_bound_bits=float(get("min-bound-bits", d.min_bound_bits)),
                preset=str(get("preset", d.preset)),
                roster_path=str(get("roster-path", d.roster_path)),
                num_nodes=int(get("num-nodes", d.num_nodes)),
                min_parties=int(get("min-parties", d.min_parties)),
                step_timeout=float(get("step-timeout", d.step_timeout)),
                wait_nodes_timeout=float(get("wait-nodes-timeout", d.wait_nodes_timeout)),
                max_restarts=int(get("max-restarts", d.max_restarts)),
                allow_left_out=_bool(get("allow-left-out", d.allow_left_out),
                                     "allow-left-out"),
                result_path=str(get("result-path", d.result_path)),
                pause_after=str(get("pause-after", d.pause_after)),
                pause_seconds=float(get("pause-seconds", d.pause_seconds)),
                sim_identity_dir=str(get("sim-identity-dir", d.sim_identity_dir)),
                sim_data_dir=str(get("sim-data-dir", d.sim_data_dir)),
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(f"invalid run config value: {exc}") from None
        if opts.security not in ("semi-honest", "malicious"):
            raise ValueError("The 'security' run config must be 'semi-honest' or 'malicious'. "
                             f"Got {opts.security!r} instead.")
        if opts.keys not in ("single", "threshold"):
            raise ValueError("The 'keys' run config must be 'single' or 'threshold'. "
                             f"Got {opts.keys!r} instead.")
        if opts.keys == "threshold" and opts.exact:
            raise ValueError("The 'keys' run config 'threshold' runs with fixed decision "
                             "points only (not 'exact').")
        if opts.num_nodes < 0:
            raise ValueError(f"The 'num-nodes' run config must be >= 0 (0 = every roster "
                             f"party). Got {opts.num_nodes} instead.")
        if opts.min_parties < 0 or (opts.num_nodes and opts.min_parties > opts.num_nodes):
            raise ValueError(f"The 'min-parties' run config must be in 0..num-nodes "
                             f"({opts.num_nodes}). Got {opts.min_parties} instead.")
        if opts.step_timeout <= 0 or opts.wait_nodes_timeout <= 0:
            raise ValueError("The 'step-timeout' and 'wait-nodes-timeout' run config values "
                             "must be > 0.")
        if opts.exact and not (opts.max_points == 0 or INITIAL_POINTS <= opts.max_points
                               <= 1 << 16):
            raise ValueError(f"The 'max-points' run config must be 0 (the mode's default) or "
                             f"in {INITIAL_POINTS}..65536. Got {opts.max_points} instead.")
        if opts.exact and not 0 <= opts.max_rounds <= 64:
            raise ValueError(f"The 'max-rounds' run config must be in 0..64. Got "
                             f"{opts.max_rounds} instead.")
        if opts.max_restarts < 0:
            raise ValueError(f"The 'max-restarts' run config must be >= 0. Got "
                             f"{opts.max_restarts} instead.")
        if opts.pause_after and opts.pause_after not in STEPS:
            raise ValueError(f"The 'pause-after' run config must be one of {list(STEPS)}. "
                             f"Got {opts.pause_after!r} instead.")
        return opts

    def roster_file(self) -> Path:
        """The roster on the SuperLink machine (``roster-path``; in a simulation,
        ``<sim-identity-dir>/roster.json`` by default)."""
        if self.roster_path:
            return Path(self.roster_path)
        if self.sim_identity_dir:
            return Path(self.sim_identity_dir) / "roster.json"
        raise ValueError("The 'roster-path' run config must name the federation's roster "
                         "(roster.json, made with 'fedsec roster create') on the SuperLink "
                         "machine.")

    def load_roster(self) -> Roster:
        path = self.roster_file()
        try:
            return Roster.load(path)
        except FileNotFoundError:
            raise ValueError(f"The 'roster-path' run config names {path}, which does not "
                             "exist on the SuperLink machine.") from None

    @property
    def preset_name(self) -> str:
        """The preset this run uses: the run config's, else the mode's default."""
        if not self.preset and self.keys == "threshold":
            return THRESHOLD_PRESET
        return self.preset or default_preset(self.security)

    def first_key_spec(self, cfg: FHAUCConfig | MaliciousConfig) -> KeySpec:
        """The signed key set-up's spec: the protocol's keys, or with threshold keys the
        result key only (the collective keys follow)."""
        if self.keys == "threshold":
            return KeySpec.create(cfg.preset, [], False)
        return cfg.key_spec()

    @property
    def exact_max_points(self) -> int:
        """Exact mode's final grid cap (its default depends on the mode)."""
        if self.max_points:
            return self.max_points
        return (DEFAULT_MAX_POINTS_MALICIOUS if self.security == "malicious"
                else DEFAULT_MAX_DECISION_POINTS)

    def protocol_config(self, points: np.ndarray | None = None
                        ) -> FHAUCConfig | MaliciousConfig:
        """The public protocol configuration (validated here, before any node is asked).
        Exact mode: the configuration of the grid ``points`` (default: the initial grid;
        its keys are those of every grid)."""
        n: Any = self.decision_points
        if self.exact:
            n = points if points is not None else initial_grid(INITIAL_POINTS)
        if self.security == "semi-honest":
            return FHAUCConfig.create(n, preset=self.preset_name, masking=self.masking)
        return MaliciousConfig.create(n, splits=self.splits or None,
                                      tolerance=self.tolerance, runs=self.runs,
                                      min_bound_bits=self.min_bound_bits,
                                      preset=self.preset_name)

    def protocol_meta(self, cfg: FHAUCConfig | MaliciousConfig) -> dict[str, Any]:
        """What every party needs to rebuild the same configuration (and digest)."""
        meta: dict[str, Any] = {"security": self.security,
                                "decision-points": self.decision_points,
                                "preset": self.preset_name}
        if self.exact:   # flat: a Flower ConfigRecord holds no nested dict
            meta.update({"exact": True, "exact-max-points": self.exact_max_points,
                         "exact-max-rounds": self.max_rounds})
        if self.keys != "single":   # absent for single keys: their meta is unchanged
            meta["keys"] = self.keys
        if isinstance(cfg, FHAUCConfig):
            meta["masking"] = cfg.masking
        else:
            meta.update({"splits": cfg.splits, "tolerance": cfg.tolerance, "runs": cfg.runs})
        return meta


class RunFailed(ProtocolError):
    """The run stopped without an accepted result (the reason is in the result JSON)."""


@dataclass
class _Replies:
    ok: dict[int, tuple[list[bytes], dict[str, Any]]] = field(default_factory=dict)
    refused: dict[int, str] = field(default_factory=dict)


@dataclass
class ServerRun:
    """One evaluation driven by the ServerApp: party bookkeeping, steps and the report."""

    grid: Grid
    opts: RunOptions
    run_id: int = 0
    names: dict[int, str] = field(default_factory=dict)
    doc: dict[str, Any] = field(default_factory=dict)
    required: int = 2
    #: node -> blobs of the step each party did with its confirmation (``first_kind``:
    #: ``submit`` or ``commit``); in malicious mode the aggregator and start message of
    #: the commits that rode with the deliveries
    first: dict[int, list[bytes]] = field(default_factory=dict)
    first_kind: str = ""
    first_agg: MaliciousAggregator | None = None
    first_start: bytes = b""
    first_started: list[int] = field(default_factory=list)
    _paused: bool = False
    _t0: float = field(default_factory=time.monotonic)

    # ----------------------------------------------------------------- reporting
    def __post_init__(self) -> None:
        self.doc = {
            "status": "starting", "run_id": self.run_id, "security": self.opts.security,
            "decision_points": self.opts.decision_points, "preset": self.opts.preset_name,
            "verified": False,
            "parties": {"included": [], "left_out": [], "unreported": []},
            "party_results": {}, "bytes": {}, "timings": {}, "restarts": [],
        }
        if self.opts.security == "semi-honest":
            self.doc["masking"] = self.opts.masking

    def write(self, status: str | None = None) -> None:
        """Atomically write the result JSON (if ``result-path`` is set)."""
        if status is not None:
            self.doc["status"] = status
        self.doc["timings"]["total_s"] = round(time.monotonic() - self._t0, 3)
        path = self.opts.result_path
        if not path:
            return
        p = Path(path)
        tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.doc, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, p)

    def label(self, node: int) -> str:
        return self.names.get(node, f"node-{node}")

    def leave_out(self, node: int, step: str, reason: str, check: str = "") -> None:
        entry = {"party": self.label(node), "node": node, "step": step, "reason": reason}
        if check:
            entry["check"] = check
        self.doc["parties"]["left_out"].append(entry)
        logger.warning("fedsec: party %s left out at %s: %s", printable(entry["party"]),
                       printable(step), printable(reason))

    def pause(self, step: str) -> None:
        """Test hook: sleep once after ``step`` (run config ``pause-after``)."""
        if self.opts.pause_after == step and not self._paused:
            self._paused = True
            self.write(f"paused-after-{step}")
            time.sleep(self.opts.pause_seconds)

    # --------------------------------------------------------------------- steps
    def step(self, name: str, contents: Mapping[int, tuple[Sequence[bytes], dict[str, Any]]],
             *, attempt: int = 0, expect_blobs: int | None = 1,
             leave_out_refused: bool = True) -> _Replies:
        """One message round. Returns the ``ok`` replies (blobs, meta) and the refusals
        (node -> check name); records bytes, timings and latencies, and leaves out every
        node that failed (and, unless told otherwise, every node that refused)."""
        self.write(name)
        msgs = {n: make_content(blobs, meta) for n, (blobs, meta) in contents.items()}
        sent = time.monotonic()
        latency: dict[str, float] = {}

        def on_reply(node: int, _msg: Any) -> None:
            latency[self.label(node)] = round(time.monotonic() - sent, 2)

        res = run_step(self.grid, msgs, f"query.{name}", group_id=f"{name}/{attempt}",
                       timeout=self.opts.step_timeout, on_reply=on_reply)
        key = name if attempt == 0 else f"{name}#{attempt}"
        down = sum(len(b) for blobs, _ in contents.values() for b in blobs)
        up = 0
        out = _Replies()
        for node, content in res.replies.items():
            arrays = content.array_records.get(BLOBS_KEY)
            if arrays is not None:
                up += sum(len(a.data) for a in arrays.values())
            try:
                meta = get_meta(content)
                blobs = get_blobs(content)
            except ProtocolError:
                self.leave_out(node, key, "malformed reply")
                continue
            if meta.get("ok") is not True:
                check = str(meta.get("check", "no-check"))[:64]
                out.refused[node] = check
                if leave_out_refused:
                    self.leave_out(node, key, f"refused: {check}", check)
                continue
            if expect_blobs is not None and len(blobs) != expect_blobs:
                self.leave_out(node, key, "malformed reply")
                continue
            out.ok[node] = (blobs, meta)
        self.doc["bytes"][key] = {"to_parties": down, "from_parties": up}
        self.doc["timings"][f"{key}_s"] = round(res.elapsed, 3)
        self.doc["timings"].setdefault("replies_s", {})[key] = latency
        for node, reason in _failure_reasons(res, self.opts.step_timeout).items():
            self.leave_out(node, key, reason)
        logger.info("fedsec: step %s: %d/%d ok replies in %.1fs", key, len(out.ok),
                    len(contents), res.elapsed)
        return out

    def require(self, nodes: Sequence[int], what: str) -> None:
        if len(nodes) < self.required:
            raise RunFailed(f"{what}: only {len(nodes)} parties remain; at least "
                            f"{self.required} are required ({self._quorum_source()})")

    def _quorum_source(self) -> str:
        src = self.doc.get("quorum", {})
        text = f"the parties' quorum {src.get('parties', '?')}"
        if src.get("whole_roster"):
            text += " (by default, in malicious mode, the whole roster)"
        return f"{text}; min-parties {self.opts.min_parties}"

    # ------------------------------------------------------------------ protocol
    def run(self) -> dict[str, Any]:
        """Run key set-up and the configured FHAUC variant; return the result doc."""
        cfg = self.opts.protocol_config()
        if isinstance(cfg, MaliciousConfig):
            self.doc.update(splits=cfg.splits, tolerance=cfg.tolerance, runs=cfg.runs,
                            cheat_bound_bits=round(cfg.cheat_bound_bits(), 2))
        roster = self.opts.load_roster()
        self.doc["roster_fingerprint"] = roster.fingerprint
        self.doc["roster"] = list(roster.names)
        count = self.opts.num_nodes or len(roster)
        if count > len(roster):
            raise ValueError(f"The 'num-nodes' run config ({count}) exceeds the roster's "
                             f"{len(roster)} parties.")
        self.write("waiting-for-nodes")
        wait_for_nodes(self.grid, count, self.opts.wait_nodes_timeout)
        # Every connected node is asked (a bounded number): the signed hellos, not the
        # order of connection, say who is a roster party. A stranger that connected
        # first must not crowd out a party.
        nodes = sorted(self.grid.get_node_ids())[:2 * len(roster) + 8]
        self.doc["nodes"] = nodes
        ks, keyed = self.key_setup(nodes, cfg, roster)
        assert ks.context is not None
        self.doc["bytes"]["public_key_material"] = ks.public_bytes_size
        self.require(keyed, "after key set-up")
        if self.opts.exact:
            cfg = self.refine(ks, keyed)
        if self.opts.keys == "threshold":
            self.threshold(cfg, ks, keyed, roster)
        elif isinstance(cfg, FHAUCConfig):
            self.semi_honest(cfg, ks, keyed)
        else:
            self.malicious(cfg, ks, keyed, roster)
        return self.doc

    def _hellos(self, nodes: list[int], cfg: FHAUCConfig | MaliciousConfig,
                roster: Roster) -> dict[int, bytes]:
        """hello: every party checks the configuration against its policy and answers
        with a signed hello and its quorum; sets :attr:`required`."""
        replies = self.step("hello", {n: ([], self.opts.protocol_meta(cfg)) for n in nodes})
        broken = {n: c for n, c in replies.refused.items() if c in INPUT_CHECKS}
        if broken and not self.opts.allow_left_out:
            raise RunFailed(
                "hello: " + ", ".join(f"{self.label(n)} refused with {c}" for n, c in
                                      sorted(broken.items())) +
                " (its own file or node config breaks a rule: the details are in that "
                "party's log); the run stops rather than leave a party out. Fix the file, "
                "or set run config allow-left-out=true to go on without it")
        hellos = {n: replies.ok[n][0][0] for n in nodes if n in replies.ok}
        quorums: dict[int, int] = {}
        for n in hellos:
            q = replies.ok[n][1].get("quorum")
            quorums[n] = q if isinstance(q, int) and not isinstance(q, bool) else 2
        if len(hellos) < 2:
            raise RunFailed(f"hello: only {len(hellos)} parties accepted the run; refusals: "
                            f"{sorted(set(replies.refused.values())) or 'none'} (see "
                            "parties.left_out)")
        probe = KeySetupAggregator(roster, self.opts.first_key_spec(cfg), min_parties=2)
        order = list(hellos)
        try:
            probe.request([hellos[n] for n in order])
        except ProtocolError as exc:
            for pos, reason in probe.rejected.items():
                self.leave_out(order[pos], "hello", f"hello rejected: {reason}")
            raise RunFailed(f"key set-up: {exc}") from None
        for pos, reason in probe.rejected.items():
            self.leave_out(order[pos], "hello", f"hello rejected: {reason}")
            del hellos[order[pos]]
        for n in hellos:
            self.names[n] = readers.text(wire.decode(hellos[n], expect="keys/hello").meta,
                                         "name")
        latency = self.doc["timings"]["replies_s"]["hello"]
        for n in nodes:  # the replies came before the names were known
            if f"node-{n}" in latency:
                latency[self.label(n)] = latency.pop(f"node-{n}")
        announced = max((quorums[n] for n in hellos), default=2)
        self.required = max(2, self.opts.min_parties, roster.quorum or 0, announced)
        self.doc["quorum"] = {"required": self.required, "parties": announced,
                              "roster": roster.quorum, "min_parties": self.opts.min_parties,
                              "whole_roster": self.opts.security == "malicious"
                              and announced == len(roster) and roster.quorum is None}
        self.require(list(hellos), "hello")
        self.pause("hello")
        return hellos

    def key_setup(self, nodes: list[int], cfg: FHAUCConfig | MaliciousConfig,
                  roster: Roster) -> tuple[KeySetupAggregator, list[int]]:
        """hello -> offer (key holder) -> deliver -> confirmed; a failed key holder or a
        missing confirmation restarts set-up over the remaining parties."""
        hellos = self._hellos(nodes, cfg, roster)
        active = list(hellos)
        node_of = {self.names[n]: n for n in active}
        spec = self.opts.first_key_spec(cfg)
        attempt = 0

        def restart(step: str, reason: str) -> None:
            nonlocal attempt
            attempt += 1
            self.doc["restarts"].append({"step": step, "attempt": attempt - 1,
                                         "reason": reason})
            self.require(active, f"key set-up restart after {step}")
            if attempt > self.opts.max_restarts:
                raise RunFailed(f"key set-up failed {attempt} times (max-restarts "
                                f"{self.opts.max_restarts}); last: {reason}")

        while True:
            ks = KeySetupAggregator(roster, spec, min_parties=self.required)
            holder_idx, request = ks.request([hellos[n] for n in active])
            order = [node_of[name] for name in ks.names]
            holder = order[holder_idx]
            self.doc["key_holder"] = self.names[holder]
            offer = self.step("offer", {holder: ([request], {})}, attempt=attempt)
            deliveries: list[bytes] | None = None
            if holder in offer.ok:
                try:
                    deliveries = ks.accept(offer.ok[holder][0][0])
                except ProtocolError as exc:
                    self.leave_out(holder, "offer", f"invalid key offer: {exc}")
            if deliveries is None:
                active.remove(holder)
                restart("offer", f"key holder {self.names[holder]} failed; the new "
                                 "transcript fixes another")
                continue
            self.pause("offer")
            # malicious mode: each party's signed commit rides with its confirmation
            early = isinstance(cfg, MaliciousConfig) and not self.opts.exact \
                and self.opts.keys == "single"
            confirms = self.step("deliver", {n: ([d], {"then": "commit"} if early else {})
                                             for n, d in zip(order, deliveries,
                                                             strict=True)},
                                 attempt=attempt, expect_blobs=2 if early else 1)
            missing = [n for n in order if n not in confirms.ok]
            if missing:
                active = [n for n in order if n in confirms.ok]
                restart("deliver", f"no confirmation from {[self.label(n) for n in missing]}"
                                   f"; key set-up again over {len(active)} parties")
                continue
            try:
                bundle = ks.confirm([confirms.ok[n][0][0] for n in order])
            except ProtocolError as exc:
                raise RunFailed(f"key set-up: a confirmation does not verify: {exc}") from None
            self.pause("deliver")
            blobs: dict[int, list[bytes]] = {n: [bundle] for n in order}
            then = "" if self.opts.exact else "submit"
            if self.opts.keys == "threshold":
                then = "mk-commit"   # the collective set-up's commits ride along
            if early:
                assert isinstance(cfg, MaliciousConfig) and ks.context is not None
                agg = MaliciousAggregator(ks.context, cfg, names=ks.names, session=ks.session,
                                          roster=roster, min_parties=self.required)
                start = agg.start([confirms.ok[n][0][1] for n in order])
                if agg.rejected:  # commit again in a step of its own, without the early one
                    for pos, reason in agg.rejected.items():
                        self.leave_out(order[pos], "deliver", f"commit rejected: {reason}")
                    then = "commit"
                else:
                    self.first_agg, self.first_start = agg, start
                    self.first_started = list(order)
                    blobs = {n: [bundle, start] for n in order}
            # the confirmation also carries the party's next step: its submission (after
            # checking the confirmations), or in malicious mode a new commit if an early
            # one was refused
            acks = self.step("confirmed", {n: (blobs[n], {"then": then}) for n in order},
                             attempt=attempt, expect_blobs=1 if then else 0)
            keyed = [n for n in order if n in acks.ok]
            self.first = {n: acks.ok[n][0] for n in keyed} if then else {}
            self.first_kind = then
            self.pause("confirmed")
            return ks, keyed

    def refine(self, ks: KeySetupAggregator, keyed: list[int]
               ) -> FHAUCConfig | MaliciousConfig:
        """Exact mode (:mod:`fedsec.auc.exact`): refinement rounds, each ``refine`` (every
        party's masked per-bin counts, over BFV keys derived from the set-up's seed) and
        ``marks`` (the masked pair counts back; each party checks the canaries and answers
        which bins hold a pair - public, like the next grid). Every party must take part;
        all must report the same marks. Returns the final grid's configuration."""
        points = initial_grid(INITIAL_POINTS)
        why = "capped" if self.opts.max_rounds == 0 else "rounds"
        rounds = []
        for r in range(self.opts.max_rounds):
            if points.size > MAX_REFINE_BINS:
                why = "capped"
                break
            subs = self.step("refine", {n: ([], {"round": r}) for n in keyed}, attempt=r)
            if any(n not in subs.ok for n in keyed):
                raise RunFailed("exact mode: a refinement round needs every party; "
                                f"missing {[self.label(n) for n in keyed if n not in subs.ok]}")
            agg = BinPairsAggregator(points=points, names=ks.names, session=ks.session,
                                     round_index=r)
            pairs = agg.aggregate([subs.ok[n][0][0] for n in keyed])
            reads = self.step("marks", {n: ([pairs], {"round": r}) for n in keyed},
                              attempt=r, expect_blobs=0)
            if any(n not in reads.ok for n in keyed):
                raise RunFailed("exact mode: a party did not accept refinement round "
                                f"{r + 1} (see parties.left_out)")
            marked = {tuple(reads.ok[n][1].get("marked", [])) for n in keyed}
            if len(marked) != 1:
                raise RunFailed("exact mode: the parties read different refinement marks")
            try:
                idx = np.asarray(next(iter(marked)), dtype=np.int64)
                marks = np.zeros(points.size, dtype=bool)
                marks[idx] = True
            except (TypeError, ValueError, IndexError):
                raise RunFailed("exact mode: malformed refinement marks") from None
            rounds.append({"points": int(points.size), "marked_bins": int(marks.sum())})
            points, why = next_grid(points, marks, self.opts.exact_max_points)
            if why != "refine":
                break
        self.doc["exact"] = {"rounds": rounds, "final_points": int(points.size),
                             "stopped": why, "bound_certified_zero": why == "no-pair-left"}
        cfg = self.opts.protocol_config(points)
        self.doc["decision_points"] = cfg.n_points
        return cfg

    def semi_honest(self, cfg: FHAUCConfig, ks: KeySetupAggregator, keyed: list[int]) -> None:
        """submit -> aggregate (those who submitted, if they meet the quorum) -> finalize."""
        assert ks.context is not None
        if self.first_kind == "submit":  # submitted with the confirmation
            subs = _Replies(ok={n: (b, {}) for n, b in self.first.items() if n in keyed})
        else:
            subs = self.step("submit", {n: ([], {}) for n in keyed})
        submitted = [n for n in keyed if n in subs.ok]
        self.require(submitted, "submit")
        self.pause("submit")
        self.write("aggregating")
        agg = FHAUCAggregator(ks.context, cfg, names=ks.names, session=ks.session,
                              min_parties=self.required)
        result = agg.aggregate([subs.ok[n][0][0] for n in submitted])
        self.doc["timings"]["aggregate_s"] = round(agg.timing["total_s"], 3)
        self.doc["parties"]["included"] = [self.names[n] for n in submitted]
        finals = self.step("finalize", {n: ([result], {}) for n in submitted},
                           expect_blobs=0, leave_out_refused=False)
        self.conclude(submitted, finals, SEMI_HONEST_AGREEMENT, verified_mode=False)

    def threshold(self, cfg: FHAUCConfig | MaliciousConfig, ks: KeySetupAggregator,
                  keyed: list[int], roster: Roster) -> None:
        """Threshold keys: the collective key set-up (its commits came with the
        confirmations) -> mk_reveal -> mk_relin -> mk_check -> mk_finish (with each
        party's submission; in malicious mode its signed commit, then start/submit) ->
        t_share -> finalize. A collective key needs every keyed party, and malicious mode
        every party that started: anyone missing stops the run."""
        order = list(keyed)

        def every(step: str, replies: _Replies, nodes: list[int] | None = None
                  ) -> list[bytes]:
            nodes = order if nodes is None else nodes
            missing = [n for n in nodes if n not in replies.ok]
            if missing:
                raise RunFailed(f"{step}: no reply from {[self.label(n) for n in missing]}; "
                                "threshold keys need every party of the key set-up")
            return [replies.ok[n][0][0] for n in nodes]

        self.doc["keys"] = "threshold"
        commits = every("mk-commit", _Replies(ok={n: (b, {}) for n, b in self.first.items()}))
        cagg = CollectiveKeyAggregator(roster, cfg.key_spec(), names=ks.names,
                                       result_session=ks.session)
        try:
            relayed = cagg.commits(commits)
            reveals = every("mk_reveal", self.step(
                "mk_reveal", {n: ([relayed], {}) for n in order}))
            sums = cagg.reveals(reveals)
            relin2 = every("mk_relin", self.step("mk_relin",
                                                 {n: ([sums], {}) for n in order}))
            keys = cagg.relin_keys(relin2)
            checks = every("mk_check", self.step("mk_check",
                                                 {n: ([keys], {}) for n in order}))
            done = cagg.confirm(checks)
        except ProtocolError as exc:
            raise RunFailed(f"collective key set-up: {exc}") from None
        assert cagg.context is not None
        if isinstance(cfg, MaliciousConfig):
            self._threshold_malicious(cfg, cagg, order, roster, every, done)
            return
        subs = self.step("mk_finish", {n: ([done], {"then": "submit"}) for n in order})
        submitted = [n for n in order if n in subs.ok]
        self.require(submitted, "mk_finish")
        self.write("aggregating")
        agg = ThresholdFHAUCAggregator(cagg.context, cfg, names=cagg.names,
                                       session=cagg.session, roster=roster,
                                       min_parties=self.required)
        agg.begin()
        for n in submitted:
            try:
                agg.add(subs.ok[n][0][0])
            except ProtocolError as exc:
                self.leave_out(n, "mk_finish", f"invalid submission: {exc}")
        included = [n for n in submitted if self.names[n] in
                    {cagg.names[i] for i in agg.included_indices}]
        try:
            request = agg.switch_request()
            shares = every("t_share", self.step("t_share",
                                                {n: ([request], {}) for n in included}),
                           included)
            result = agg.finish_shares(shares)
        except ProtocolError as exc:
            raise RunFailed(f"threshold key switch: {exc}") from None
        self.doc["timings"]["aggregate_s"] = round(agg.timing["total_s"], 3)
        self.doc["parties"]["included"] = [self.names[n] for n in included]
        finals = self.step("finalize", {n: ([result], {}) for n in included},
                           expect_blobs=0, leave_out_refused=False)
        self.conclude(included, finals, SEMI_HONEST_AGREEMENT, verified_mode=False)

    def _threshold_malicious(self, cfg: MaliciousConfig, cagg: CollectiveKeyAggregator,
                             order: list[int], roster: Roster, every: Any,
                             done: bytes) -> None:
        """Malicious mode over collective keys: mk_finish (each party's signed commit) ->
        submit (the start message) -> t_share -> finalize (the answer and the start)."""
        assert cagg.context is not None
        commits = every("mk_finish", self.step(
            "mk_finish", {n: ([done], {"then": "commit"}) for n in order}))
        agg = ThresholdMaliciousAggregator(cagg.context, cfg, names=cagg.names,
                                           session=cagg.session, roster=roster,
                                           min_parties=len(order))
        try:
            start = agg.start(commits)
            subs = every("submit", self.step("submit", {n: ([start], {}) for n in order}))
            self.write("aggregating")
            agg.begin()
            for sub in subs:
                agg.add(sub)
            request = agg.switch_request()
            shares = every("t_share", self.step(
                "t_share", {n: ([request, start], {}) for n in order}))
            result = agg.finish_shares(shares)
        except ProtocolError as exc:
            raise RunFailed(f"threshold malicious FHAUC: {exc}") from None
        self.doc["timings"]["aggregate_s"] = round(agg.timing["total_s"], 3)
        self.doc["parties"]["included"] = [self.names[n] for n in order]
        finals = self.step("finalize", {n: ([result, start], {}) for n in order},
                           expect_blobs=0, leave_out_refused=False)
        self.conclude(order, finals, cfg.tolerance, verified_mode=True)

    def malicious(self, cfg: MaliciousConfig, ks: KeySetupAggregator, keyed: list[int],
                  roster: Roster) -> None:
        """commit -> start -> submit -> aggregate -> finalize; a missing submission
        restarts the commit round over the survivors (fresh nonces) if they meet every
        party's quorum, else the run stops."""
        assert ks.context is not None
        survivors = list(keyed)
        for attempt in range(self.opts.max_restarts + 1):
            if attempt == 0 and self.first_kind == "submit" and self.first_agg is not None:
                # committed with the delivery, submitted with the confirmation
                agg, start = self.first_agg, self.first_start
                started = list(self.first_started)  # every party in the start message
                subs = _Replies(ok={n: (b, {}) for n, b in self.first.items()})
            else:
                if attempt == 0 and self.first_kind == "commit":
                    commits = _Replies(ok={n: (b, {}) for n, b in self.first.items()
                                           if n in survivors})
                else:
                    commits = self.step("commit", {n: ([], {}) for n in survivors},
                                        attempt=attempt)
                committed = [n for n in survivors if n in commits.ok]
                self.require(committed, "commit")
                agg = MaliciousAggregator(ks.context, cfg, names=ks.names,
                                          session=ks.session, roster=roster,
                                          min_parties=self.required)
                start = agg.start([commits.ok[n][0][0] for n in committed])
                for pos, reason in agg.rejected.items():
                    self.leave_out(committed[pos], "commit", f"commit rejected: {reason}")
                started = [n for i, n in enumerate(committed) if i not in agg.rejected]
                self.pause("commit")
                subs = self.step("submit", {n: ([start], {}) for n in started},
                                 attempt=attempt)
            submitted = [n for n in started if n in subs.ok]
            if len(submitted) != len(started):
                gone = [self.label(n) for n in started if n not in subs.ok]
                why = (f"no submission from {gone}: malicious FHAUC needs every party that "
                       "started (their zero-sum masks must cancel), so this round gives no "
                       "result")
                if not submitted:
                    raise RunFailed(f"{why}; no party submitted within step-timeout "
                                    f"({self.opts.step_timeout:g}s)")
                if len(submitted) < self.required:
                    raise RunFailed(f"{why}; the {len(submitted)} remaining parties are "
                                    f"fewer than the {self.required} required "
                                    f"({self._quorum_source()}); no result")
                if attempt == self.opts.max_restarts:
                    raise RunFailed(f"{why}; parties kept dropping out: gave up after "
                                    f"{self.opts.max_restarts} restarts (max-restarts)")
                self.doc["restarts"].append({
                    "step": "submit", "attempt": attempt,
                    "reason": f"{why}; new commit round with fresh nonces over the "
                              f"{len(submitted)} parties that submitted"})
                logger.warning("fedsec: malicious run restarts without %s",
                               printable(gone))
                survivors = submitted
                continue
            self.pause("submit")
            self.write("aggregating")
            result = agg.aggregate([subs.ok[n][0][0] for n in started])
            self.doc["timings"]["aggregate_s"] = round(agg.timing["total_s"], 3)
            self.doc["parties"]["included"] = [self.names[n] for n in started]
            finals = self.step("finalize", {n: ([result, start], {}) for n in started},
                               attempt=attempt, expect_blobs=0, leave_out_refused=False)
            self.conclude(started, finals, cfg.tolerance, verified_mode=True)
            return
        raise AssertionError("unreachable")  # pragma: no cover

    def conclude(self, included: list[int], finals: _Replies, agreement: float,
                 *, verified_mode: bool) -> None:
        """Read the finalize replies: accept only if every reporting party accepted (and,
        in malicious mode, verified) the result and the shared AUC values agree."""
        results: dict[str, dict[str, Any]] = {}
        for n in included:
            if n in finals.ok:
                meta = finals.ok[n][1]
                entry: dict[str, Any] = {"ok": True, "verified": meta.get("verified") is True,
                                         "shared": meta.get("shared") is True}
                auc = meta.get("auc")
                if isinstance(auc, float):
                    entry["auc"] = auc
                bound = meta.get("error_bound")
                if isinstance(bound, float):
                    entry["error_bound"] = bound
                results[self.names[n]] = entry
            elif n in finals.refused:
                results[self.names[n]] = {"ok": False, "check": finals.refused[n]}
            else:
                self.doc["parties"]["unreported"].append(self.names[n])
        self.doc["party_results"] = results
        if not results:
            raise RunFailed("no party reported the outcome of finalize")
        bad = {k: v["check"] for k, v in results.items() if not v["ok"]}
        if bad:
            raise RunFailed(f"parties rejected the result: {bad}")
        aucs = [float(v["auc"]) for v in results.values() if "auc" in v]
        if aucs and max(aucs) - min(aucs) > agreement:
            raise RunFailed(f"parties report different AUC values: {aucs}")
        self.doc["verified"] = verified_mode and all(v["verified"] for v in results.values())
        self.doc["auc_shared_by"] = sorted(k for k, v in results.items() if "auc" in v)
        if aucs:
            self.doc["auc"] = aucs[0]
            bounds = [float(v["error_bound"]) for v in results.values() if "error_bound" in v]
            if bounds:
                self.doc["error_bound"] = max(bounds)
        self.doc["status"] = "done"


def _failure_reasons(res: StepResult, timeout: float) -> dict[int, str]:
    out: dict[int, str] = {}
    for n, err in res.errors.items():
        out[n] = f"error reply (code {err.code}): {err.reason}"
    for n in res.missing:
        out[n] = f"no reply within {timeout:g}s"
    for n in res.undelivered:
        out[n] = "offline (the SuperLink refused the message)"
    return out


def main(grid: Grid, context: Context) -> None:
    """ServerApp entry point (``@app.main()``): run one evaluation, write the result JSON.

    Raises after writing ``status = "failed"`` if no result was accepted.
    """
    opts = RunOptions.from_run_config(context.run_config)
    run = ServerRun(grid, opts, run_id=int(context.run_id))
    try:
        run.run()
        logger.info("fedsec: %s FHAUC done: auc=%s verified=%s included=%s left out=%s",
                    opts.security, run.doc.get("auc", "(kept by the parties)"),
                    run.doc["verified"], printable(run.doc["parties"]["included"]),
                    printable([e["party"] for e in run.doc["parties"]["left_out"]]))
    except Exception as err:
        run.doc.update(status="failed", error=f"{type(err).__name__}: {err}")
        run.doc.pop("auc", None)
        run.doc["verified"] = False
        logger.error("fedsec: run failed: %s", printable(run.doc["error"]))
        raise
    finally:
        run.write()


def build_server_app() -> ServerApp:
    """A ``ServerApp`` whose main function is :func:`main`."""
    app = ServerApp()
    app.main()(main)
    return app
