"""Flower ServerApp logic: the aggregator of secure FHAUC over the Message API (flwr 1.41).

The ServerApp plays the aggregator roles of :mod:`fedsec.crypto.keysetup`,
:mod:`fedsec.auc.fhauc` and :mod:`fedsec.auc.fhauc_malicious` and relays their byte
messages to the parties' ClientApps (:mod:`fedsec.runtime.flower_client`), one message
round per protocol step:

* key set-up: ``hello`` (all) -> ``offer`` (the randomly chosen key holder) ->
  ``deliver`` (all);
* semi-honest: ``submit`` -> ``finalize``;
* malicious: ``commit`` -> ``submit`` (with the start message) -> ``finalize``.

It sees public keys, sealed boxes and ciphertexts only. Parties decrypt the result; each
finalize reply carries the party's AUC (unless the party opted out with node config
``share-auc=false``) or the error it raised (``TamperingDetected``...).

Failures (a node that answers with an error, does not answer within ``step-timeout``,
or is offline):

* before the protocol proper (``hello``, ``deliver``): the party is left out, if at
  least ``min-parties`` remain; a failed key holder (``offer``) makes the aggregator
  choose a new one among the rest (bounded by ``max-restarts``);
* semi-honest ``submit``: aggregate the others if at least ``min-parties`` remain and
  report who was left out;
* malicious ``submit``: the zero-sum masks of the started participants would not
  cancel, so no result is computed; the commit round restarts with fresh nonces (fresh
  randomness) over the survivors, at most ``max-restarts`` times, else the run stops;
* ``finalize``: the result stands for the parties that answered; the others are listed
  as ``unreported``.

The outcome goes to a JSON file (run config ``result-path``; written atomically at every
stage, so it can be polled): ``status`` (``done`` or ``failed``; intermediate stages
otherwise), ``auc``, ``security``, ``verified``, ``parties`` (``included``,
``left_out`` with step and reason, ``unreported``), ``party_results``, ``bytes``,
``timings``, ``restarts``, ``error``.

Run config keys (defaults in the example app's ``pyproject.toml``): ``security``
(``semi-honest`` | ``malicious``), ``decision-points``, ``masking`` (``single`` |
``pair``), ``splits`` (0 = smallest meeting ``min-bound-bits``), ``tolerance``,
``min-bound-bits``, ``preset``, ``num-nodes``, ``min-parties`` (0 = all),
``step-timeout``, ``wait-nodes-timeout``, ``max-restarts``, ``result-path``, and test
hooks ``pause-after`` (a step name) and ``pause-seconds``.
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

with warnings.catch_warnings():
    # flwr 1.41 -> typer -> click 8.5 warns on import; see fedsec.runtime.flower_io.
    warnings.simplefilter("ignore", DeprecationWarning)
    from flwr.app import Context
    from flwr.serverapp import Grid, ServerApp

from fedsec.auc.fhauc import FHAUCAggregator, FHAUCConfig
from fedsec.auc.fhauc_malicious import (
    MaliciousAggregator,
    MaliciousConfig,
    cheat_bound_bits,
)
from fedsec.crypto.keysetup import KeySetupAggregator
from fedsec.crypto.params import DEFAULT_PRESET
from fedsec.errors import ProtocolError
from fedsec.runtime.flower_io import (
    BLOBS_KEY,
    StepResult,
    get_blob,
    get_meta,
    make_content,
    run_step,
    wait_for_nodes,
)

__all__ = ["RunOptions", "ServerRun", "build_server_app", "main"]

logger = logging.getLogger("flwr")

SEMI_HONEST_AGREEMENT = 1e-9


@dataclass(frozen=True)
class RunOptions:
    """Validated run config of the ServerApp."""

    security: str = "malicious"
    decision_points: int = 100
    masking: str = "single"
    splits: int = 0
    tolerance: float = 1e-5
    min_bound_bits: float = 40.0
    preset: str = DEFAULT_PRESET
    num_nodes: int = 3
    min_parties: int = 0
    step_timeout: float = 60.0
    wait_nodes_timeout: float = 60.0
    max_restarts: int = 2
    result_path: str = ""
    pause_after: str = ""
    pause_seconds: float = 0.0

    @classmethod
    def from_run_config(cls, cfg: Mapping[str, Any]) -> RunOptions:
        """Read and check the run config (unknown keys are ignored)."""
        d = cls()

        def get(key: str, default: Any) -> Any:
            return cfg.get(key, default)

        opts = cls(
            security=str(get("security", d.security)),
            decision_points=int(get("decision-points", d.decision_points)),
            masking=str(get("masking", d.masking)),
            splits=int(get("splits", d.splits)),
            tolerance=float(get("tolerance", d.tolerance)),
            min_bound_bits=float(get("min-bound-bits", d.min_bound_bits)),
            preset=str(get("preset", d.preset)),
            num_nodes=int(get("num-nodes", d.num_nodes)),
            min_parties=int(get("min-parties", d.min_parties)),
            step_timeout=float(get("step-timeout", d.step_timeout)),
            wait_nodes_timeout=float(get("wait-nodes-timeout", d.wait_nodes_timeout)),
            max_restarts=int(get("max-restarts", d.max_restarts)),
            result_path=str(get("result-path", d.result_path)),
            pause_after=str(get("pause-after", d.pause_after)),
            pause_seconds=float(get("pause-seconds", d.pause_seconds)),
        )
        if opts.security not in ("semi-honest", "malicious"):
            raise ValueError("The 'security' run config must be 'semi-honest' or 'malicious'. "
                             f"Got {opts.security!r} instead.")
        if opts.num_nodes < 1:
            raise ValueError(f"The 'num-nodes' run config must be >= 1. Got {opts.num_nodes} "
                             "instead.")
        if not 0 <= opts.min_parties <= opts.num_nodes:
            raise ValueError(f"The 'min-parties' run config must be in 0..num-nodes "
                             f"({opts.num_nodes}). Got {opts.min_parties} instead.")
        if opts.step_timeout <= 0 or opts.wait_nodes_timeout <= 0:
            raise ValueError("The 'step-timeout' and 'wait-nodes-timeout' run config values "
                             "must be > 0.")
        if opts.max_restarts < 0:
            raise ValueError(f"The 'max-restarts' run config must be >= 0. Got "
                             f"{opts.max_restarts} instead.")
        return opts

    @property
    def required(self) -> int:
        """Fewest parties a result may cover (``min-parties``; 0 means all)."""
        return self.min_parties or self.num_nodes

    def protocol_config(self) -> FHAUCConfig | MaliciousConfig:
        """The public protocol configuration (validated here, before any node is asked)."""
        if self.security == "semi-honest":
            return FHAUCConfig.create(self.decision_points, preset=self.preset,
                                      masking=self.masking)
        return MaliciousConfig.create(self.decision_points, splits=self.splits or None,
                                      tolerance=self.tolerance,
                                      min_bound_bits=self.min_bound_bits, preset=self.preset)

    def protocol_meta(self) -> dict[str, Any]:
        """What every party needs to rebuild the same configuration (and digest)."""
        meta: dict[str, Any] = {"security": self.security,
                                "decision-points": self.decision_points,
                                "preset": self.preset}
        if self.security == "semi-honest":
            meta["masking"] = self.masking
        else:
            meta.update({"splits": self.splits, "tolerance": self.tolerance,
                         "min-bound-bits": self.min_bound_bits})
        return meta


class RunFailed(ProtocolError):
    """The run stopped without an accepted result (the reason is in the result JSON)."""


@dataclass
class ServerRun:
    """One evaluation driven by the ServerApp: party bookkeeping, steps and the report."""

    grid: Grid
    opts: RunOptions
    run_id: int = 0
    names: dict[int, str] = field(default_factory=dict)
    doc: dict[str, Any] = field(default_factory=dict)
    _paused: bool = False
    _delivered: set[int] = field(default_factory=set)
    _t0: float = field(default_factory=time.monotonic)

    # ----------------------------------------------------------------- reporting
    def __post_init__(self) -> None:
        self.doc = {
            "status": "starting", "run_id": self.run_id, "security": self.opts.security,
            "decision_points": self.opts.decision_points, "preset": self.opts.preset,
            "min_parties": self.opts.required, "verified": False,
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

    def leave_out(self, node: int, step: str, reason: str) -> None:
        entry = {"party": self.label(node), "node": node, "step": step, "reason": reason}
        self.doc["parties"]["left_out"].append(entry)
        logger.warning("fedsec: party %s left out at %s: %s", entry["party"], step, reason)

    def pause(self, step: str) -> None:
        """Test hook: sleep once after ``step`` (run config ``pause-after``)."""
        if self.opts.pause_after == step and not self._paused:
            self._paused = True
            self.write(f"paused-after-{step}")
            time.sleep(self.opts.pause_seconds)

    # --------------------------------------------------------------------- steps
    def step(self, name: str, contents: Mapping[int, tuple[Sequence[bytes], dict[str, Any]]],
             *, attempt: int = 0) -> dict[int, Any]:
        """One message round; returns ``node -> reply content`` for the nodes that
        answered, records bytes, timings and the failed nodes (left out)."""
        self.write(name)
        msgs = {n: make_content(blobs, meta) for n, (blobs, meta) in contents.items()}
        res = run_step(self.grid, msgs, f"query.{name}", group_id=f"{name}/{attempt}",
                       timeout=self.opts.step_timeout)
        down = sum(len(b) for blobs, _ in contents.values() for b in blobs)
        up = 0
        for content in res.replies.values():
            arrays = content.array_records.get(BLOBS_KEY)
            if arrays is not None:
                up += sum(len(a.data) for a in arrays.values())
        key = name if attempt == 0 else f"{name}#{attempt}"
        self.doc["bytes"][key] = {"to_parties": down, "from_parties": up}
        self.doc["timings"][f"{key}_s"] = round(res.elapsed, 3)
        for node, reason in _failure_reasons(res, self.opts.step_timeout).items():
            self.leave_out(node, key, reason)
        logger.info("fedsec: step %s: %d/%d replies in %.1fs", key, len(res.replies),
                    len(contents), res.elapsed)
        return dict(res.replies)

    def require(self, nodes: Sequence[int], what: str) -> None:
        if len(nodes) < self.opts.required:
            raise RunFailed(f"{what}: only {len(nodes)} parties remain, at least "
                            f"{self.opts.required} required (min-parties)")

    # ------------------------------------------------------------------ protocol
    def run(self) -> dict[str, Any]:
        """Run key set-up and the configured FHAUC variant; return the result doc."""
        cfg = self.opts.protocol_config()
        if isinstance(cfg, MaliciousConfig):
            self.doc.update(splits=cfg.splits, tolerance=cfg.tolerance,
                            cheat_bound_bits=round(cheat_bound_bits(cfg.n_points,
                                                                    cfg.splits), 2))
        self.write("waiting-for-nodes")
        nodes = wait_for_nodes(self.grid, self.opts.num_nodes, self.opts.wait_nodes_timeout)
        self.doc["nodes"] = nodes
        order, ks = self.key_setup(nodes, cfg)
        names = [self.names[n] for n in order]
        assert ks.context is not None
        self.doc["key_holder"] = names[ks.holder or 0]
        self.doc["bytes"]["public_key_material"] = ks.public_bytes_size
        keyed = [n for n in order if n in self._delivered]
        self.require(keyed, "after key set-up")
        if isinstance(cfg, FHAUCConfig):
            self.semi_honest(cfg, ks, names, keyed)
        else:
            self.malicious(cfg, ks, names, keyed)
        return self.doc

    def key_setup(self, nodes: list[int], cfg: FHAUCConfig | MaliciousConfig
                  ) -> tuple[list[int], KeySetupAggregator]:
        """hello -> offer (key holder) -> deliver; a failed key holder is replaced."""
        replies = self.step("hello", {n: ([], {}) for n in nodes})
        hellos: dict[int, bytes] = {}
        for n in nodes:
            if n in replies:
                hellos[n] = get_blob(replies[n])
                self.names[n] = str(get_meta(replies[n]).get("name", ""))
        active = [n for n in nodes if n in hellos]
        self.require(active, "hello")
        dupes = sorted({x for x in (self.names[n] for n in active)
                        if [self.names[m] for m in active].count(x) > 1})
        if dupes:
            raise RunFailed(f"party names must be unique; duplicated: {dupes} (set node "
                            "config 'party-name')")
        self.pause("hello")
        for attempt in range(self.opts.max_restarts + 1):
            ks = KeySetupAggregator(preset=cfg.preset, rotations=cfg.rotations(),
                                    conjugate=True)
            holder_idx, request = ks.request([hellos[n] for n in active])
            holder = active[holder_idx]
            self.doc["key_holder"] = self.names[holder]
            offers = self.step("offer", {holder: ([request], {})}, attempt=attempt)
            if holder not in offers:
                self.doc["restarts"].append({"step": "offer", "attempt": attempt,
                                             "reason": f"key holder {self.names[holder]} "
                                                       "failed; choosing another"})
                active = [n for n in active if n != holder]
                self.require(active, "key set-up")
                continue
            deliveries = ks.accept(get_blob(offers[holder]))
            self.pause("offer")
            acks = self.step("deliver", {n: ([d], {}) for n, d in
                                         zip(active, deliveries, strict=True)},
                             attempt=attempt)
            self._delivered = set(acks)
            self.pause("deliver")
            return active, ks
        raise RunFailed(f"key set-up failed {self.opts.max_restarts + 1} times (max-restarts)")

    def semi_honest(self, cfg: FHAUCConfig, ks: KeySetupAggregator, names: list[str],
                    keyed: list[int]) -> None:
        """submit -> aggregate (those who submitted, if >= min-parties) -> finalize."""
        assert ks.context is not None
        meta = self.opts.protocol_meta()
        agg = FHAUCAggregator(ks.context, cfg, names=names, session=ks.session,
                              min_parties=self.opts.required)
        subs = self.step("submit", {n: ([], meta) for n in keyed})
        submitted = [n for n in keyed if n in subs]
        self.require(submitted, "submit")
        self.pause("submit")
        self.write("aggregating")
        result = agg.aggregate([get_blob(subs[n]) for n in submitted])
        self.doc["timings"]["aggregate_s"] = round(agg.timing["total_s"], 3)
        self.doc["parties"]["included"] = [self.names[n] for n in submitted]
        finals = self.step("finalize", {n: ([result], meta) for n in submitted})
        self.conclude(submitted, finals, SEMI_HONEST_AGREEMENT, verified_mode=False)

    def malicious(self, cfg: MaliciousConfig, ks: KeySetupAggregator, names: list[str],
                  keyed: list[int]) -> None:
        """commit -> start -> submit -> aggregate -> finalize; a missing submission
        restarts the commit round over the survivors (fresh nonces)."""
        assert ks.context is not None
        meta = self.opts.protocol_meta()
        survivors = list(keyed)
        for attempt in range(self.opts.max_restarts + 1):
            agg = MaliciousAggregator(ks.context, cfg, names=names, session=ks.session,
                                      min_parties=self.opts.required)
            commits = self.step("commit", {n: ([], meta) for n in survivors},
                                attempt=attempt)
            committed = [n for n in survivors if n in commits]
            self.require(committed, "commit")
            start = agg.start([get_blob(commits[n]) for n in committed])
            self.pause("commit")
            subs = self.step("submit", {n: ([start], meta) for n in committed},
                             attempt=attempt)
            submitted = [n for n in committed if n in subs]
            if len(submitted) != len(committed):
                gone = [self.names[n] for n in committed if n not in subs]
                self.doc["restarts"].append({
                    "step": "submit", "attempt": attempt,
                    "reason": f"no submission from {gone}: their zero-sum masks would not "
                              "cancel; new commit round with fresh randomness over "
                              f"{len(submitted)} survivors"})
                logger.warning("fedsec: malicious run restarts without %s", gone)
                survivors = submitted
                self.require(survivors, "malicious restart")
                continue
            self.pause("submit")
            self.write("aggregating")
            result = agg.aggregate([get_blob(subs[n]) for n in committed])
            self.doc["timings"]["aggregate_s"] = round(agg.timing["total_s"], 3)
            self.doc["parties"]["included"] = [self.names[n] for n in committed]
            finals = self.step("finalize", {n: ([result, start], meta) for n in committed},
                               attempt=attempt)
            self.conclude(committed, finals, cfg.tolerance, verified_mode=True)
            return
        raise RunFailed(f"malicious FHAUC: parties kept dropping out; gave up after "
                        f"{self.opts.max_restarts} restarts (max-restarts); no result")

    def conclude(self, included: list[int], finals: Mapping[int, Any], agreement: float,
                 *, verified_mode: bool) -> None:
        """Read the finalize replies: accept the AUC only if every reporting party
        succeeded (and, in malicious mode, verified) and all agree."""
        results: dict[str, dict[str, Any]] = {}
        for n in included:
            if n not in finals:
                self.doc["parties"]["unreported"].append(self.names[n])
                continue
            results[self.names[n]] = get_meta(finals[n])
        self.doc["party_results"] = results
        if not results:
            raise RunFailed("no party reported the outcome of finalize")
        bad = {k: f"{v.get('error-type')}: {v.get('error')}" for k, v in results.items()
               if not v.get("ok")}
        if bad:
            raise RunFailed(f"parties rejected the result: {bad}")
        aucs = [float(v["auc"]) for v in results.values() if "auc" in v]
        if aucs and max(aucs) - min(aucs) > agreement:
            raise RunFailed(f"parties decrypted different AUC values: {aucs}")
        self.doc["verified"] = verified_mode and all(v.get("verified") for v in
                                                     results.values())
        if aucs:
            self.doc["auc"] = aucs[0]
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
                    opts.security, run.doc.get("auc"), run.doc["verified"],
                    run.doc["parties"]["included"],
                    [e["party"] for e in run.doc["parties"]["left_out"]])
    except Exception as err:
        run.doc.update(status="failed", error=f"{type(err).__name__}: {err}")
        run.doc.pop("auc", None)
        run.doc["verified"] = False
        logger.error("fedsec: run failed: %s", run.doc["error"])
        raise
    finally:
        run.write()


def build_server_app() -> ServerApp:
    """A ``ServerApp`` whose main function is :func:`main`."""
    app = ServerApp()
    app.main()(main)
    return app
