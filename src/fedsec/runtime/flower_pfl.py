"""Priv-PFL (Aghabagherloo et al.; :mod:`fedsec.pfl.secure`) on Flower's deployment engine.

Placement: the PFL **server** is the ServerApp; the **decryptor** is a SuperNode with node
config ``role="decryptor"``; each **client** is a SuperNode with ``role="client"`` holding
its own per-round local models (node config ``data-path``: an ``.npz`` whose ``models``
array has shape ``(rounds, d)``). Roster names are the protocol's: ``client-0`` ...
``client-<K-1>`` and ``decryptor``. Node-side role objects (key set-up state, the
:class:`~fedsec.pfl.secure.SecurePFLClient` with its X25519 result key, the
:class:`~fedsec.pfl.secure.SecurePFLDecryptor` with the CKKS secret key) live in the
node's host process (:mod:`fedsec.runtime.node_host`) for the run, never in a file.

Message rounds (one Flower message per node per step; ``query.<action>``):

=================  ===========  ==========================================================
action             nodes        what the node does
=================  ===========  ==========================================================
``pfl_hello``      all          load its files, check the run's configuration against its
                                own policy, signed key set-up hello
``pfl_offer``      decryptor    the key holder (fixed by name): makes and seals the keys
``pfl_deliver``    all          checks the transcript, opens its box, signed confirmation
``pfl_confirmed``  all          keys; a client answers its signed result-key
                                registration, the decryptor its signed seed key
``pfl_round``      clients      (round t > 0: the sealed result of round t - 1, checked
                                against the decryptor's signature, kept on the node) the
                                one-time-padded upload of round t; the last one only
                                delivers the last result
``pfl_decrypt``    decryptor    every request of one server step, in order, dispatched by
                                message kind: relayed registrations, mask request, Gram
                                request, one reveal batch, or every client's result
                                request (answered with the sealed result boxes, each
                                signed by the decryptor for its client)
=================  ===========  ==========================================================

A run of ``R`` rounds takes ``4 + R (4 + b) + 1`` exchanges, ``b`` the round's reveal
batches (Algorithm 1 asks one batch per client it processes; at most ``K``).

What passes through the server and who can read or forge it: the key set-up messages are
signed and sealed (:mod:`fedsec.crypto.keysetup`); registrations, the decryptor's seed key
and the clients' seed boxes are signed by their roster identity, bound to the session,
and the seeds sealed to the decryptor; the decryptor's result boxes are sealed to the
client's registered key **and** signed by the decryptor over (session, round, client,
boxes), which the client checks before it opens them (the in-process protocol seals them
but does not sign them, so a relaying server could otherwise substitute a box of its own).

Failures: every node is needed for the key set-up (a node that refuses or is silent stops
the run, attributed to it). A client that fails or is silent in a round is invalid in that
round (as the protocol says: accepted by nobody; the round goes on for the others if two
remain) and is left out of the rest of the run. A failing or silent decryptor stops the
run. Each message round waits at most ``step-timeout`` seconds.

The server's report (run config ``result-path``, JSON): ``status``, ``roster_fingerprint``,
``clients``, ``rounds`` (per round: valid clients, acceptance sets, pairs checked, reveal
batches), ``exchanges``, ``parties.left_out``, ``bytes``, ``timings``, ``error``. Each
client's personalised models stay on its node (``state-dir``:
``run-<run>-node-<node>.pfl.npz``, mode 0600, and ``...result.json``).
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from flwr.app import Context
    from flwr.serverapp import Grid

from fedsec.crypto.identity import Identity, Roster
from fedsec.crypto.keysetup import KeySetupAggregator, KeySetupParty
from fedsec.crypto.params import PRESETS
from fedsec.errors import PolicyViolation, ProtocolError
from fedsec.pfl.secure import (
    DECRYPTOR_NAME,
    SecurePFLClient,
    SecurePFLConfig,
    SecurePFLDecryptor,
    SecurePFLServer,
    client_name,
)
from fedsec.pfl.secure.common import _fresh_level
from fedsec.protocol import fields as readers
from fedsec.protocol import wire
from fedsec.runtime.flower_client import NodeCheckFailed, NodeStore, _node_logger
from fedsec.runtime.flower_io import wait_for_nodes
from fedsec.runtime.flower_server import RunFailed, RunOptions, ServerRun
from fedsec.runtime.node_host import RunState, hosted
from fedsec.runtime.safetext import printable

__all__ = ["PFLOptions", "PFLRun", "main", "handle_hello", "handle_offer",
           "handle_deliver", "handle_confirmed", "handle_round", "handle_decrypt"]

logger = logging.getLogger("flwr")

DEFAULT_PRESET = "CKKS_128_N32768_DEPTH19"
_RESULT_TAG = "pfl/result-auth"
_MAX_ROUNDS = 1000


# ------------------------------------------------------------------ configuration
@dataclass(frozen=True)
class PFLOptions:
    """The validated run config of a Priv-PFL run (the server's choice; every node checks
    the protocol part against its own policy at ``pfl_hello``)."""

    rounds: int = 1
    model_size: int = 0
    alpha: float = 0.5
    norm_bound: float = 10.0
    gamma: float = 0.3
    kappa: float = 1.0
    preset: str = ""
    sign_alpha: int = 8
    comparison: str = "polynomial"
    roster_path: str = ""
    result_path: str = ""
    step_timeout: float = 60.0
    wait_nodes_timeout: float = 60.0

    @classmethod
    def from_run_config(cls, cfg: Mapping[str, Any]) -> PFLOptions:
        """Read and check the ``pfl-*`` keys (and the shared ``roster-path``,
        ``result-path``, ``step-timeout``, ``wait-nodes-timeout``); ``ValueError`` names
        the key."""
        d = cls()
        try:
            opts = cls(
                rounds=int(cfg.get("pfl-rounds", d.rounds)),
                model_size=int(cfg.get("pfl-model-size", d.model_size)),
                alpha=float(cfg.get("pfl-alpha", d.alpha)),
                norm_bound=float(cfg.get("pfl-norm-bound", d.norm_bound)),
                gamma=float(cfg.get("pfl-gamma", d.gamma)),
                kappa=float(cfg.get("pfl-kappa", d.kappa)),
                preset=str(cfg.get("pfl-preset", d.preset)),
                sign_alpha=int(cfg.get("pfl-sign-alpha", d.sign_alpha)),
                comparison=str(cfg.get("pfl-comparison", d.comparison)),
                roster_path=str(cfg.get("roster-path", d.roster_path)),
                result_path=str(cfg.get("result-path", d.result_path)),
                step_timeout=float(cfg.get("step-timeout", d.step_timeout)),
                wait_nodes_timeout=float(cfg.get("wait-nodes-timeout",
                                                 d.wait_nodes_timeout)),
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(f"invalid run config value: {exc}") from None
        if not 1 <= opts.rounds <= _MAX_ROUNDS:
            raise ValueError(f"The 'pfl-rounds' run config must be in 1..{_MAX_ROUNDS}. "
                             f"Got {opts.rounds} instead.")
        if opts.model_size < 1:
            raise ValueError(f"The 'pfl-model-size' run config must be the clients' model "
                             f"size d >= 1. Got {opts.model_size} instead.")
        if not 0.0 <= opts.alpha <= 1.0:
            raise ValueError(f"The 'pfl-alpha' run config must be in [0, 1]. Got "
                             f"{opts.alpha} instead.")
        for key, value, low in (("pfl-norm-bound", opts.norm_bound, 0.0),
                                ("pfl-gamma", opts.gamma, 0.0)):
            if not (math.isfinite(value) and value > low):
                raise ValueError(f"The '{key}' run config must be finite and > 0. Got "
                                 f"{value} instead.")
        if not (math.isfinite(opts.kappa) and opts.kappa >= 0):
            raise ValueError(f"The 'pfl-kappa' run config must be finite and >= 0. Got "
                             f"{opts.kappa} instead.")
        if opts.step_timeout <= 0 or opts.wait_nodes_timeout <= 0:
            raise ValueError("The 'step-timeout' and 'wait-nodes-timeout' run config values "
                             "must be > 0.")
        opts.protocol_config()  # preset, sign-alpha, comparison, model size
        return opts

    @property
    def preset_name(self) -> str:
        return self.preset or DEFAULT_PRESET

    def protocol_config(self, norm_tolerance: float | None = None) -> SecurePFLConfig:
        """The protocol's configuration (``ValueError`` with the run config's key names)."""
        if self.preset_name not in PRESETS:
            raise ValueError(f"The 'pfl-preset' run config must be one of "
                             f"{sorted(PRESETS)}. Got {self.preset_name!r} instead.")
        try:
            cfg = SecurePFLConfig(preset=self.preset_name, sign_alpha=self.sign_alpha,
                                  comparison=self.comparison,
                                  allow_insecure=self.preset_name.startswith("INSECURE_"))
            if norm_tolerance is not None:
                cfg = replace(cfg, norm_tolerance=norm_tolerance)
        except ValueError as exc:
            raise ValueError(f"invalid Priv-PFL run config (pfl-preset, pfl-sign-alpha, "
                             f"pfl-comparison): {exc}") from None
        slots = cfg.params.poly_modulus_degree // 2
        if self.model_size > 2 * slots * 64:
            raise ValueError(f"The 'pfl-model-size' run config must be at most "
                             f"{2 * slots * 64} at this preset. Got {self.model_size} "
                             "instead.")
        return cfg

    def sigma(self, t: int) -> float:
        """BALANCE's threshold ``sigma(t) = gamma exp(-kappa t / T)`` (every client)."""
        return float(self.gamma * math.exp(-self.kappa * t / self.rounds))

    def meta(self) -> dict[str, Any]:
        """What every node needs to rebuild and check the same configuration."""
        return {"pfl-rounds": self.rounds, "pfl-model-size": self.model_size,
                "pfl-alpha": self.alpha, "pfl-norm-bound": self.norm_bound,
                "pfl-gamma": self.gamma, "pfl-kappa": self.kappa,
                "pfl-preset": self.preset_name, "pfl-sign-alpha": self.sign_alpha,
                "pfl-comparison": self.comparison}


def client_index(name: str, k: int) -> int | None:
    """``i`` of the roster name ``client-<i>`` (``None`` for any other name)."""
    m = re.fullmatch(r"client-(0|[1-9][0-9]*)", name)
    if m is None or int(m.group(1)) >= k:
        return None
    return int(m.group(1))


def check_roster(roster: Roster) -> int:
    """The number of clients ``K``: the roster must be ``decryptor`` and ``client-0`` ...
    ``client-<K-1>``, ``K >= 2``."""
    k = len(roster) - 1
    want = {DECRYPTOR_NAME, *(client_name(i) for i in range(k))}
    if k < 2 or set(roster.names) != want:
        raise ValueError("a Priv-PFL roster must list 'decryptor' and 'client-0' ... "
                         f"'client-<K-1>' (K >= 2); got {printable(list(roster.names))}")
    return k


def _result_payload(session: str, round_index: int, client: int,
                    boxes: Sequence[bytes]) -> bytes:
    h = hashlib.sha256()
    for b in boxes:
        h.update(len(b).to_bytes(8, "big"))
        h.update(b)
    return b"|".join([session.encode(), str(round_index).encode(), str(client).encode(),
                      h.digest()])


# ------------------------------------------------------------------- the server side
class PFLRun(ServerRun):
    """One Priv-PFL run driven by the ServerApp (the PFL server role)."""

    pfl: PFLOptions

    def __post_init__(self) -> None:
        self.doc = {"status": "starting", "protocol": "pfl", "run_id": self.run_id,
                    "parties": {"left_out": []}, "bytes": {}, "timings": {},
                    "rounds": [], "exchanges": 0}
        self.exchanges = 0
        self._what = ""

    def step(self, name: str, contents: Mapping[int, tuple[Sequence[bytes], dict[str, Any]]],
             *, attempt: int = 0, expect_blobs: int | None = 1,
             leave_out_refused: bool = True) -> Any:
        self.exchanges += 1
        self.doc["exchanges"] = self.exchanges
        out = super().step(name, contents, attempt=attempt, expect_blobs=expect_blobs,
                           leave_out_refused=leave_out_refused)
        key = name if attempt == 0 else f"{name}#{attempt}"
        self.doc.setdefault("exchange_log", []).append(
            {"step": name, "what": self._what or name, "nodes": len(contents),
             "s": self.doc["timings"].get(f"{key}_s")})
        self._what = ""
        return out

    def _one(self, name: str, node: int, blobs: Sequence[bytes], meta: dict[str, Any],
             *, attempt: int = 0, what: str = "") -> list[bytes]:
        """A step with one node that must answer (the decryptor, the key holder)."""
        self._what = what
        got = self.step(name, {node: (list(blobs), meta)}, attempt=attempt,
                        expect_blobs=None)
        if node not in got.ok:
            why = got.refused.get(node, "no reply / error")
            raise RunFailed(f"{name}: {self.label(node)} did not answer ({why}); the run "
                            "needs it")
        out: list[bytes] = got.ok[node][0]
        return out

    def run_pfl(self) -> dict[str, Any]:
        opts = self.pfl
        cfg = opts.protocol_config()
        roster = Roster.load(Path(opts.roster_path)) if opts.roster_path else None
        if roster is None:
            raise ValueError("The 'roster-path' run config must name the federation's "
                             "roster (roster.json) on the SuperLink machine.")
        k = check_roster(roster)
        self.doc.update(roster_fingerprint=roster.fingerprint, clients=k,
                        preset=opts.preset_name, config=opts.meta(),
                        insecure_preset=opts.preset_name.startswith("INSECURE_"))
        self.write("waiting-for-nodes")
        wait_for_nodes(self.grid, len(roster), opts.wait_nodes_timeout)
        nodes = sorted(self.grid.get_node_ids())[:2 * len(roster) + 8]
        # ---- key set-up: every roster party (the decryptor is the holder by name)
        hello = self.step("pfl_hello", {n: ([], opts.meta()) for n in nodes})
        hellos: dict[int, bytes] = {}
        for n, (blobs, _meta) in hello.ok.items():
            try:
                name = readers.text(wire.decode(blobs[0], expect="keys/hello").meta, "name")
            except ProtocolError:
                self.leave_out(n, "pfl_hello", "malformed hello")
                continue
            self.names[n] = name
            hellos[n] = blobs[0]
        # a node that refuses may be a stranger (another federation's SuperNode on this
        # SuperLink): the signed hellos say whether every roster party is here
        refused = {self.label(n): c for n, c in hello.refused.items()}
        spec = cfg.key_spec()
        ks = KeySetupAggregator(roster, spec, min_parties=len(roster),
                                max_message_bytes=cfg.max_offer_bytes)
        order = list(hellos)
        try:
            if len(hellos) < len(roster):
                raise ProtocolError(f"{len(hellos)} of the roster's {len(roster)} parties "
                                    "said hello")
            holder_pos, request = ks.request([hellos[n] for n in order])
        except ProtocolError as exc:
            for pos, reason in ks.rejected.items():
                self.leave_out(order[pos], "pfl_hello", f"hello rejected: {reason}")
            raise RunFailed(f"key set-up needs every roster party: {exc}; nodes that "
                            f"refused the run: {refused or 'none'} (details in their "
                            "logs; see parties.left_out)") from None
        for pos, reason in ks.rejected.items():
            self.leave_out(order[pos], "pfl_hello", f"hello rejected: {reason}")
        node_of = {self.names[n]: n for n in order}
        parties = [node_of[nm] for nm in ks.names]
        holder = parties[holder_pos]
        offer = self._one("pfl_offer", holder, [request], {})
        try:
            deliveries = ks.accept(offer[0])
        except (ProtocolError, IndexError) as exc:
            raise RunFailed(f"pfl_offer: invalid key offer from {self.label(holder)}: "
                            f"{exc}") from None
        confirms = self.step("pfl_deliver", {n: ([d], {}) for n, d in
                                             zip(parties, deliveries, strict=True)})
        missing = [self.label(n) for n in parties if n not in confirms.ok]
        if missing:
            raise RunFailed(f"pfl_deliver: no confirmation from {missing}")
        try:
            bundle = ks.confirm([confirms.ok[n][0][0] for n in parties])
        except ProtocolError as exc:
            raise RunFailed(f"key set-up: a confirmation does not verify: {exc}") from None
        acks = self.step("pfl_confirmed", {n: ([bundle], {}) for n in parties})
        missing = [self.label(n) for n in parties if n not in acks.ok]
        if missing:
            raise RunFailed(f"pfl_confirmed: no keys on {missing}")
        assert ks.context is not None
        self.doc["bytes"]["public_key_material"] = len(offer[0])
        self.doc["timings"]["key_setup_s"] = round(sum(
            v for key, v in self.doc["timings"].items()
            if key.startswith(("pfl_hello", "pfl_offer", "pfl_deliver", "pfl_confirmed"))
            and isinstance(v, float)), 3)
        dec = node_of[DECRYPTOR_NAME]
        clients = {node_of[client_name(i)]: i for i in range(k)}
        server = SecurePFLServer(ks.context, ks.session, k, cfg, roster=roster)
        registrations = []
        for n, i in clients.items():
            reg = acks.ok[n][0][0]
            try:
                if server.register(reg) != i:
                    raise ProtocolError("a registration for another client")
            except ProtocolError as exc:
                raise RunFailed(f"pfl_confirmed: the registration of {self.label(n)} "
                                f"does not verify: {exc}") from None
            registrations.append(reg)
        announce = acks.ok[dec][0][0]
        active = dict(clients)   # node -> client index, still in the run
        pending: dict[int, list[bytes]] = {}  # node -> [result, decryptor's signature]
        self.write("rounds")
        for t in range(opts.rounds):
            t_round = time.monotonic()
            sigma = opts.sigma(t)
            contents: dict[int, tuple[list[bytes], dict[str, Any]]] = {}
            for n in active:
                blobs = ([announce] if t == 0 else []) + pending.pop(n, [])
                contents[n] = (blobs, {"round": t, "upload": True, "sigma": sigma,
                                       "bound": opts.norm_bound, "key": t == 0,
                                       "result": t > 0})
            ups = self.step("pfl_round", contents, attempt=t)
            refused_uploads: list[str] = []
            for n in list(active):
                if n not in ups.ok:
                    del active[n]
                    continue
                try:
                    server.receive(active[n], ups.ok[n][0][0], round_index=t, sigma=sigma,
                                   norm_bound=opts.norm_bound, model_size=opts.model_size)
                except ProtocolError as exc:
                    refused_uploads.append(self.label(n))
                    self.leave_out(n, f"pfl_round#{t}", f"upload refused: {exc}")
                    del active[n]
            # ---- the decryptor: (registrations,) masks, Gram, reveals, results
            try:
                mask_request = server.mask_request()
            except ProtocolError as exc:
                raise RunFailed(f"round {t}: {exc}") from None
            first = registrations if t == 0 else []
            masks = self._one("pfl_decrypt", dec, [*first, mask_request],
                              {"round": t, "last": False}, attempt=self.exchanges,
                              what=f"round {t}: masks")
            server.receive_masks(masks[-1])
            refreshed = self._one("pfl_decrypt", dec, [server.gram_request()],
                                  {"round": t, "last": False}, attempt=self.exchanges,
                                  what=f"round {t}: Gram refresh")
            server.compare(refreshed[0])
            batches = 0

            def ask(request: bytes, t: int = t) -> bytes:
                nonlocal batches
                batches += 1
                return self._one("pfl_decrypt", dec, [request], {"round": t, "last": False},
                                 attempt=self.exchanges,
                                 what=f"round {t}: reveal batch {batches}")[0]

            selection = server.select(ask)
            requests = server.aggregate(selection, opts.alpha)
            last = t == opts.rounds - 1
            boxes = self._one("pfl_decrypt", dec, requests, {"round": t, "last": last},
                              attempt=self.exchanges, what=f"round {t}: results")
            if len(boxes) != 2 * k:
                raise RunFailed(f"round {t}: malformed result boxes from the decryptor")
            for n, i in active.items():
                pending[n] = [server.deliver(i, boxes[i]), boxes[k + i]]
            valid = server.validity()
            name_of = {i: client_name(i) for i in range(k)}
            self.doc["rounds"].append({
                "round": t, "sigma": sigma,
                "valid": [name_of[i] for i in range(k) if valid[i]],
                "refused_uploads": refused_uploads,
                "accepted": {name_of[i]: sorted(name_of[j] for j in selection.accepted[i])
                             for i in range(k)},
                "pairs_checked": int(selection.checks), "reveal_batches": batches,
                "seconds": round(time.monotonic() - t_round, 3)})
            self.write("rounds")
        # ---- the last round's results
        final = self.step("pfl_round", {n: (pending.pop(n, []),
                                            {"round": opts.rounds, "upload": False,
                                             "key": False, "result": True})
                                        for n in active}, attempt=opts.rounds,
                          expect_blobs=0)
        self.doc["delivered"] = sorted(self.label(n) for n in active if n in final.ok)
        self.doc["status"] = "done"
        return self.doc


def main(grid: Grid, context: Context) -> None:
    """ServerApp entry point for ``protocol = "pfl"``: run, write the result JSON."""
    pfl = PFLOptions.from_run_config(context.run_config)
    opts = RunOptions(step_timeout=pfl.step_timeout, result_path=pfl.result_path,
                      wait_nodes_timeout=pfl.wait_nodes_timeout)
    run = PFLRun(grid, opts, run_id=int(context.run_id))
    run.pfl = pfl
    try:
        run.run_pfl()
        logger.info("fedsec: Priv-PFL done: %d rounds, %d exchanges", pfl.rounds,
                    run.exchanges)
    except Exception as err:
        run.doc.update(status="failed", error=f"{type(err).__name__}: {err}")
        logger.error("fedsec: Priv-PFL run failed: %s", printable(run.doc["error"]))
        raise
    finally:
        run.write()


# --------------------------------------------------------------------- the node side
@dataclass
class _Node:
    """What a node brings and keeps for the run (in its host's memory)."""

    role: str
    identity: Identity
    roster: Roster
    config: SecurePFLConfig
    opts: PFLOptions
    models: np.ndarray | None = None  # a client's (rounds, d) local models
    party: KeySetupParty | None = None
    client: SecurePFLClient | None = None
    decryptor: SecurePFLDecryptor | None = None
    session: str = ""
    results: list[np.ndarray] = field(default_factory=list)
    valid: list[bool] = field(default_factory=list)


def _node(state: RunState) -> _Node:
    node = state.data.get("pfl")
    if not isinstance(node, _Node):
        raise NodeCheckFailed("out-of-order", "a Priv-PFL step before pfl_hello on this "
                                              "node (or after a failure dropped its state)")
    return node


def _required(cfg: Mapping[str, Any], key: str) -> Path:
    raw = cfg.get(key)
    if not raw:
        raise NodeCheckFailed("node-config", f"this SuperNode has no '{key}' node config: "
                              f"start it with --node-config \"{key}='/absolute/path'\"")
    return Path(str(raw))


def _policy_presets(cfg: Mapping[str, Any]) -> set[str]:
    raw = str(cfg.get("presets", "") or "").strip()
    if raw:
        return {p for p in re.split(r"[\s,]+", raw) if p}
    return {p for p in PRESETS if not p.startswith("INSECURE_")}


def _load_node(state: RunState, meta: dict[str, Any]) -> _Node:
    """Load and check this node's files and the run's configuration (node policy)."""
    cfg = state.node_config
    role = str(cfg.get("role", "") or "")
    if role not in ("client", "decryptor"):
        raise NodeCheckFailed("node-config", "node config 'role' must be 'client' or "
                              f"'decryptor'; got {printable(role, 40)!r}")
    ident_path = _required(cfg, "identity-path")
    roster_path = _required(cfg, "roster-path")
    try:
        identity = Identity.load(ident_path)
    except (OSError, ValueError) as exc:
        raise NodeCheckFailed("identity-invalid", f"identity file {ident_path}: "
                              f"{exc}") from None
    try:
        roster = Roster.load(roster_path)
        check_roster(roster)
    except (OSError, ValueError) as exc:
        raise NodeCheckFailed("roster-invalid", f"roster {roster_path}: {exc}") from None
    if identity.name not in roster or roster.public_key(identity.name) != identity.public_key:
        raise NodeCheckFailed("identity-not-on-roster", f"the identity {identity.name!r} is "
                              f"not on the roster {roster_path} with this public key")
    if (identity.name == DECRYPTOR_NAME) != (role == "decryptor"):
        raise NodeCheckFailed("node-config", f"node config role={role!r} does not match "
                              f"the identity {identity.name!r}")
    try:
        opts = PFLOptions.from_run_config({**meta, "step-timeout": 1.0})
        tol_raw = cfg.get("norm-tolerance")
        tol = None if tol_raw in (None, "") else float(tol_raw)
        config = opts.protocol_config(tol if role == "decryptor" else None)
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"the run's configuration is invalid: {exc}") from None
    if config.preset not in _policy_presets(cfg):
        raise PolicyViolation(f"preset {config.preset} is not allowed by this node "
                              "(node config 'presets')", check="preset")
    blinded_ok = str(cfg.get("allow-blinded", "false")).strip().lower() in ("1", "true",
                                                                          "yes")
    if config.comparison == "blinded" and not blinded_ok:
        raise PolicyViolation("the blinded comparison is off unless node config "
                              "allow-blinded=true", check="comparison")
    _ = _fresh_level(config.sign_alpha, config.comparison)
    node = _Node(role, identity, roster, config, opts)
    if role == "client":
        data_path = _required(cfg, "data-path")
        try:
            with np.load(data_path, allow_pickle=False) as f:
                models = np.asarray(f["models"], dtype=np.float64)
        except (OSError, ValueError, KeyError) as exc:
            raise NodeCheckFailed("input-invalid", f"client models {data_path}: "
                                  f"{type(exc).__name__}: {exc}") from None
        if models.ndim != 2 or models.shape[1] != opts.model_size or \
                models.shape[0] < opts.rounds or not np.all(np.isfinite(models)):
            raise NodeCheckFailed("input-invalid", f"client models {data_path}: need a "
                                  f"finite 'models' array of shape (>= {opts.rounds}, "
                                  f"{opts.model_size}); got {models.shape}")
        node.models = models
    return node


def _hello(blobs: list[bytes], meta: dict[str, Any], state: RunState
           ) -> tuple[list[bytes], dict[str, Any]]:
    node = _load_node(state, meta)
    node.party = KeySetupParty(node.identity, node.roster, node.config.key_spec(),
                               min_parties=len(node.roster))
    state.data["pfl"] = node
    _node_logger(state.node_config).info(
        "Priv-PFL run: %s (%s), %d rounds, preset %s; roster fingerprint %s",
        node.identity.name, node.role, node.opts.rounds, node.config.preset,
        node.roster.fingerprint)
    return [node.party.hello()], {"name": node.identity.name, "role": node.role}


def _party(state: RunState) -> tuple[_Node, KeySetupParty]:
    node = _node(state)
    if node.party is None:
        raise NodeCheckFailed("out-of-order", "key set-up is over on this node")
    return node, node.party


def _offer(blobs: list[bytes], meta: dict[str, Any], state: RunState
           ) -> tuple[list[bytes], dict[str, Any]]:
    node, party = _party(state)
    if node.role != "decryptor":
        raise NodeCheckFailed("out-of-order", "only the decryptor holds the keys")
    (request,) = readers.blobs(blobs, 1, what="offer request")
    return [party.offer(request)], {}


def _deliver(blobs: list[bytes], meta: dict[str, Any], state: RunState
             ) -> tuple[list[bytes], dict[str, Any]]:
    _, party = _party(state)
    (delivery,) = readers.blobs(blobs, 1, what="delivery")
    return [party.receive(delivery)], {}


def _confirmed(blobs: list[bytes], meta: dict[str, Any], state: RunState
               ) -> tuple[list[bytes], dict[str, Any]]:
    node, party = _party(state)
    (bundle,) = readers.blobs(blobs, 1, what="confirmations")
    keys = party.finish(bundle)
    node.party = None
    node.session = keys.session
    if node.role == "decryptor":
        node.decryptor = SecurePFLDecryptor(keys, node.roster, node.config,
                                            identity=node.identity)
        return [node.decryptor.announce()], {}
    i = client_index(node.identity.name, len(node.roster) - 1)
    assert i is not None  # check_roster and the identity check above
    node.client = SecurePFLClient(i, keys, node.identity, node.config, roster=node.roster)
    return [node.client.register()], {}


def _save_results(state: RunState, node: _Node) -> None:
    directory = Path(str(state.node_config.get("state-dir", "") or "")) \
        if state.node_config.get("state-dir") else None
    from fedsec.runtime.flower_client import default_state_dir

    store = NodeStore(directory or default_state_dir(), state.run_id, state.node_id)
    store._ensure_dir()
    models_path = store.directory / f"run-{state.run_id}-node-{state.node_id}.pfl.npz"
    fd = os.open(models_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        np.savez(fh, personalised=np.asarray(node.results), valid=np.asarray(node.valid))
    done = len(node.results) == node.opts.rounds
    store.save_result({"status": "ok" if done else "partial", "protocol": "pfl",
                       "name": node.identity.name, "rounds": len(node.results),
                       "of_rounds": node.opts.rounds, "valid": node.valid,
                       "models_path": str(models_path)})


def _round(blobs: list[bytes], meta: dict[str, Any], state: RunState
           ) -> tuple[list[bytes], dict[str, Any]]:
    """Open the last round's result (if any), then upload this round's model (if asked)."""
    node = _node(state)
    client = node.client
    if client is None or node.models is None:
        raise NodeCheckFailed("out-of-order", "pfl_round on a node that is not a keyed "
                                              "client")
    t = readers.integer(meta, "round", 0, _MAX_ROUNDS)
    upload = readers.flag(meta, "upload")
    want = int(readers.flag(meta, "key")) + 2 * int(readers.flag(meta, "result"))
    parts = readers.blobs(blobs, want, what="round message")
    if readers.flag(meta, "key"):
        if t != 0:
            raise ProtocolError("the decryptor's key comes with round 0 only")
        client.receive_decryptor_key(parts[0])
        parts = parts[1:]
    if readers.flag(meta, "result"):
        result, sig = parts
        if t != len(node.results) + 1:
            raise ProtocolError("a result out of order")
        msg = wire.decode(result, expect="pfl/result", max_bytes=64 << 20)
        own = bool(msg.meta.get("own", False))
        boxes = list(msg.blobs) if own else list(msg.blobs[0::2])
        node.roster.verify(DECRYPTOR_NAME, _RESULT_TAG,
                           _result_payload(node.session, t - 1, client.index, boxes), sig)
        node.results.append(client.finish(result))
        node.valid.append(not own)
        _save_results(state, node)  # kept at once: a later failure does not lose it
    if upload:
        if t != len(node.results) or t >= node.opts.rounds:
            raise ProtocolError("an upload request out of order")
        up = client.upload(node.models[t], norm_bound=readers.real(meta, "bound"),
                           sigma=readers.real(meta, "sigma"), round_index=t)
        return [up], {}
    if len(node.results) != node.opts.rounds:
        raise ProtocolError("the run ended before its last round")
    _node_logger(state.node_config).info("Priv-PFL result: %d personalised models kept "
                                         "on this node", len(node.results))
    state.done = True
    return [], {}


def _decrypt(blobs: list[bytes], meta: dict[str, Any], state: RunState
             ) -> tuple[list[bytes], dict[str, Any]]:
    """Every decryptor request of one server step, dispatched by message kind."""
    node = _node(state)
    dec = node.decryptor
    if dec is None:
        raise NodeCheckFailed("out-of-order", "pfl_decrypt on a node that is not the keyed "
                                              "decryptor")
    if not blobs or len(blobs) > 2 * 1024:
        raise ProtocolError("malformed decryptor request")
    out: list[bytes] = []
    sigs: list[bytes] = []
    for blob in blobs:
        kind = wire.peek_kind(blob)
        if kind == "pfl/register":
            dec.register(blob)
        elif kind == "pfl/mask-request":
            out.append(dec.mask_ciphertexts(blob))
        elif kind == "pfl/gram":
            out.append(dec.refresh(blob))
        elif kind == "pfl/reveal":
            out.append(dec.reveal(blob))
        elif kind == "pfl/result-request":
            box = dec.unmask_for_client(blob)
            msg = wire.decode(box, expect="pfl/result-box")
            i, t = _index_of(msg.meta), _round_of(msg.meta)
            sigs.append(node.identity.sign(_RESULT_TAG, _result_payload(
                node.session, t, i, list(msg.blobs))))
            out.append(box)
        else:
            raise ProtocolError(f"the decryptor does not answer {printable(kind, 40)!r}")
    if readers.flag(meta, "last"):
        state.done = True
    return out + sigs, {}


def _index_of(meta: Mapping[str, Any]) -> int:
    from fedsec.protocol.binding import context_of

    got = context_of(dict(meta)).index
    if len(got) != 1:
        raise ProtocolError("malformed result box")
    return int(got[0])


def _round_of(meta: Mapping[str, Any]) -> int:
    from fedsec.protocol.binding import context_of

    return int(context_of(dict(meta)).round)


handle_hello = hosted("pfl_hello", "fedsec.runtime.flower_pfl:_hello")
handle_offer = hosted("pfl_offer", "fedsec.runtime.flower_pfl:_offer")
handle_deliver = hosted("pfl_deliver", "fedsec.runtime.flower_pfl:_deliver")
handle_confirmed = hosted("pfl_confirmed", "fedsec.runtime.flower_pfl:_confirmed")
handle_round = hosted("pfl_round", "fedsec.runtime.flower_pfl:_round")
handle_decrypt = hosted("pfl_decrypt", "fedsec.runtime.flower_pfl:_decrypt")
