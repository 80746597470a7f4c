"""Flower ClientApp handlers: one party of secure FHAUC on its own SuperNode (flwr 1.41).

Each handler plays exactly one protocol step of the in-process roles
(:mod:`fedsec.crypto.keysetup`, :mod:`fedsec.auc.fhauc`,
:mod:`fedsec.auc.fhauc_malicious`) on the bytes the ServerApp forwards and answers
with the bytes the role produces. No protocol step is reimplemented here.

=====================  ==========================================================  ==========
message type           role method                                                 reply
=====================  ==========================================================  ==========
``query.hello``        check the CSV, identity, roster and the announced            signed
                       configuration against this party's policy;                   hello
                       ``KeySetupParty(identity, roster, config.key_spec()).hello()``
``query.offer``        ``KeySetupParty.offer(request)`` (the transcript's key holder) offer
``query.deliver``      ``KeySetupParty.receive(delivery)``                          confirmation
``query.confirmed``    ``KeySetupParty.finish(confirmed)`` -> ``PartyKeys``; then   submission
                       the step the message's ``then`` names (``submit``            / commit
                       semi-honest, ``commit`` malicious, none in exact mode)       / ok
``query.commit``       ``MaliciousParty.commit()`` (signed, fresh nonce)            commit
``query.submit``       ``FHAUCParty.submit()`` / ``MaliciousParty.submit(start)``   submission
``query.finalize``     ``.finalize(result)``                                        ok / check
=====================  ==========================================================  ==========

Every reply's metadata has ``ok``. On any failure the reply is ``ok=False`` with a
**check name** only (``input-invalid``, ``identity-invalid``, ``roster-invalid``,
``identity-not-on-roster``, ``node-config``, ``policy:<rule>``, ``tampering:<check>``,
``undefined-metric``, ``protocol-error``, ``out-of-order``, ``internal-error``): never a
file path, row number, score, decrypted value or exception text. The details go to this
node's own log (node config ``log-path``, else the ClientApp's standard error, which the
SuperNode prints). A handler never raises: Flower would send the exception text to the
server.

Between steps a party's secrets (the key set-up state, then its CKKS secret key and shared
seed, then its malicious-mode nonce) live in one file on its own machine,
``<state-dir>/run-<run id>-node-<node id>.fedsec`` (directory 0700, file 0600), deleted
after ``finalize`` and after any failure; never in the run config, a reply or
``context.state``. Its trust roots (identity file, roster) and its policy come from its
node config only; the run's configuration is checked against that policy at ``hello``.

The node config keys, the state and result files, the threat model and the simulation
engine (:func:`in_simulation_engine`): ``docs/run-across-machines.md`` (the documentation
site's deployment page).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import stat
import sys
import tempfile
import types
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

with warnings.catch_warnings():
    # flwr 1.41 -> typer -> click 8.5 warns on import; see fedsec.runtime.flower_io.
    warnings.simplefilter("ignore", DeprecationWarning)
    from flwr.app import Context, Message
    from flwr.clientapp import ClientApp

import numpy as np

from fedsec.auc.common import (
    DEFAULT_MAX_TOTAL_SAMPLES,
    SHARED_AUC_DIGITS,
    SHARED_BOUND_DIGITS,
    check_party_inputs,
    shared_result,
)
from fedsec.auc.exact import (
    INITIAL_POINTS,
    MAX_REFINE_BINS,
    BinPairsParty,
    initial_grid,
    next_grid,
)
from fedsec.auc.fhauc import FHAUCConfig, FHAUCParty
from fedsec.auc.fhauc_malicious import MaliciousConfig, MaliciousParty
from fedsec.auc.fhauc_threshold import ThresholdFHAUCParty, ThresholdMaliciousParty
from fedsec.auc.policy import (
    DEFAULT_MAX_DECISION_POINTS,
    DEFAULT_MAX_KEY_BYTES,
    DEFAULT_MAX_TOLERANCE,
    DEFAULT_MIN_BOUND_BITS,
    DEFAULT_MIN_DECISION_POINTS,
    PartyPolicy,
)
from fedsec.crypto.collective import CollectiveKeyParty, CollectiveKeys
from fedsec.crypto.identity import Identity, Roster
from fedsec.crypto.keysetup import KeySetupParty, KeySpec, PartyKeys
from fedsec.data.io import PartyData, load_party_csv
from fedsec.errors import (
    PolicyViolation,
    ProtocolError,
    TamperingDetected,
    UndefinedMetricError,
)
from fedsec.metrics.roc import transform_scores
from fedsec.protocol import fields as readers
from fedsec.protocol import wire
from fedsec.runtime.flower_io import get_blob, get_blobs, get_meta, make_content, reply
from fedsec.runtime.safetext import EscapingFilter, EscapingFormatter, printable

__all__ = [
    "NodeCheckFailed",
    "NodePolicy",
    "NodeSetup",
    "NodeStore",
    "build_client_app",
    "check_name",
    "handle_commit",
    "handle_confirmed",
    "handle_deliver",
    "handle_finalize",
    "handle_hello",
    "handle_offer",
    "handle_submit",
    "in_simulation_engine",
    "load_node",
    "protocol_config",
]

STATE_KIND = "flower/node-state"
LOGGER_NAME = "fedsec.node"
_CHECK_RE = re.compile(r"^[a-z0-9][a-z0-9:_-]{0,63}$")
#: Bounds of the integers a configuration message may carry (the configuration checks
#: the real limits, with its own messages).
_BIG = 1 << 62


# ------------------------------------------------------------------- node-local state
class NodeStore:
    """The party's state between protocol steps, in one node-local file (mode 0600).

    Fields are named byte strings (``config``, ``setup``, ``keys``, ``nonce``,
    ``submitted``) plus the party name. Writes are atomic (temporary file +
    ``os.replace``).
    """

    def __init__(self, directory: Path, run_id: int, node_id: int) -> None:
        self.directory = directory
        self.path = directory / f"run-{int(run_id)}-node-{int(node_id)}.fedsec"
        self.result_path = directory / f"run-{int(run_id)}-node-{int(node_id)}.result.json"

    @classmethod
    def for_context(cls, context: Context, node_config: Mapping[str, Any] | None = None
                    ) -> NodeStore:
        """The store of this node and run (``state-dir`` node config or a default)."""
        cfg = context.node_config if node_config is None else node_config
        raw = cfg.get("state-dir")
        directory = Path(str(raw)) if raw else default_state_dir()
        return cls(directory, context.run_id, context.node_id)

    def _ensure_dir(self) -> None:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = self.directory.stat()
        if st.st_uid != os.getuid():
            raise PermissionError(f"state directory {self.directory} belongs to another user")
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.chmod(self.directory, 0o700)

    def load(self) -> tuple[str, dict[str, bytes]]:
        """Return ``(party name, fields)``; raise ``ProtocolError`` if there is no state."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            raise ProtocolError(
                f"no fedsec state for this run on this node ({self.path}): a step arrived "
                "out of order, or the node restarted"
            ) from None
        msg = wire.decode(data, expect=STATE_KIND)
        names = msg.meta.get("fields")
        if not isinstance(names, list) or len(names) != len(msg.blobs) or not all(
                isinstance(n, str) for n in names) or len(set(names)) != len(names):
            raise ProtocolError(f"corrupt node state file {self.path}")
        return str(msg.meta.get("name", "")), dict(zip(names, msg.blobs, strict=True))

    def save(self, name: str, fields: dict[str, bytes]) -> None:
        """Replace the state with ``fields`` (atomic, mode 0600)."""
        self._write(self.path, wire.encode(STATE_KIND, {"name": name,
                                                        "fields": sorted(fields)},
                                           [fields[k] for k in sorted(fields)]))

    def save_result(self, doc: Mapping[str, Any]) -> None:
        """Write this party's outcome of the run (atomic, mode 0600)."""
        self._write(self.result_path, (json.dumps(dict(doc), indent=1, sort_keys=True)
                                       + "\n").encode())

    def _write(self, path: Path, data: bytes) -> None:
        self._ensure_dir()
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".fedsec")
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def delete(self) -> None:
        """Remove the state file (it holds the CKKS secret key)."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def default_state_dir() -> Path:
    """``<system temp dir>/fedsec-flower-<uid>``: used when ``state-dir`` is not set."""
    return Path(tempfile.gettempdir()) / f"fedsec-flower-{os.getuid()}"


# ------------------------------------------------------------------- errors and checks
class NodeCheckFailed(Exception):
    """A node-side check failed before the protocol: ``check`` goes to the server, the
    message (paths, rows, values) stays in this node's log."""

    def __init__(self, check: str, detail: str) -> None:
        super().__init__(detail)
        self.check = check


def check_name(exc: BaseException) -> str:
    """The only thing a party tells the server about a failure: a fixed check name."""
    if isinstance(exc, NodeCheckFailed):
        name = exc.check
    elif isinstance(exc, PolicyViolation):
        name = f"policy:{exc.check}"
    elif isinstance(exc, TamperingDetected):
        name = f"tampering:{exc.check}"
    elif isinstance(exc, UndefinedMetricError):
        name = "undefined-metric"
    elif isinstance(exc, ProtocolError):
        name = "protocol-error"
    else:
        name = "internal-error"
    return name if _CHECK_RE.match(name) else "internal-error"


_LOGGERS: dict[str, logging.Logger] = {}


def _node_logger(node_config: Mapping[str, Any]) -> logging.Logger:
    """This node's logger: appends to ``log-path`` (created 0600) or writes to standard
    error (which the SuperNode prints). It propagates to the root logger as usual; Flower
    does not forward a ClientApp's log to the server."""
    path = str(node_config.get("log-path", "") or "")
    key = path or "<stderr>"
    found = _LOGGERS.get(key)
    if found is not None:
        return found
    log = logging.getLogger(f"{LOGGER_NAME}.{len(_LOGGERS)}")
    log.setLevel(logging.INFO)
    handler: logging.Handler
    try:
        if not path:
            raise OSError("no log-path")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        handler = logging.StreamHandler(os.fdopen(fd, "a", encoding="utf-8"))
    except OSError:
        handler = logging.StreamHandler(sys.stderr)
    # every record one line, hostile bytes escaped (names, roster entries, error texts
    # quoting what a server sent): see fedsec.runtime.safetext
    handler.setFormatter(EscapingFormatter("%(asctime)s fedsec-node %(levelname)s: "
                                           "%(message)s"))
    log.addHandler(handler)
    log.addFilter(EscapingFilter())  # also for handlers above it (propagation)
    _LOGGERS[key] = log
    return log


# ------------------------------------------------------------------------ node policy
def _flag(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("0", "false", "no", "off"):
        return False
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ValueError(f"node config '{key}' must be true or false; got {value!r}")


def _number(value: Any, key: str, kind: type) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"node config '{key}' must be a number; got {value!r}")
    try:
        out = kind(value)
    except (TypeError, ValueError):
        raise ValueError(f"node config '{key}' must be a number; got {value!r}") from None
    if kind is int and float(value) != out:
        raise ValueError(f"node config '{key}' must be an integer; got {value!r}")
    if kind is float and not math.isfinite(out):
        raise ValueError(f"node config '{key}' must be finite; got {value!r}")
    return out


@dataclass(frozen=True)
class NodePolicy:
    """This party's policy, from its own node config (never from the run config).

    ``share_auc=None`` means the mode's default: shared in malicious mode (the verified
    AUC), kept on the node in semi-honest mode (see the module notes).
    """

    party: PartyPolicy = PartyPolicy()
    require_malicious: bool = False
    share_auc: bool | None = None

    @classmethod
    def from_node_config(cls, cfg: Mapping[str, Any]) -> NodePolicy:
        """Read ``security``, ``quorum``, ``max-tolerance``, ``min-bound-bits``,
        ``max-decision-points``, ``min-decision-points``, ``presets``, ``max-key-bytes``,
        ``require-malicious``
        and ``share-auc``; ``ValueError`` names a bad key.

        ``require-malicious`` defaults to ``true`` when the node config says
        ``security='malicious'`` (a node that says it runs malicious mode refuses a
        semi-honest run unless it also says ``require-malicious=false``), else ``false``.
        """
        quorum = _number(cfg.get("quorum", 0), "quorum", int)
        security = str(cfg.get("security", "") or "").strip().lower()
        if security not in ("", "malicious", "semi-honest"):
            raise ValueError("node config 'security' must be 'malicious' or 'semi-honest'; "
                             f"got {printable(cfg.get('security'), 80)!r}")
        raw_presets = cfg.get("presets")
        presets: tuple[str, ...] | None = None
        if raw_presets is not None and str(raw_presets).strip():
            presets = tuple(p for p in re.split(r"[\s,]+", str(raw_presets).strip()) if p)
        party = PartyPolicy(
            quorum=quorum or None,
            max_tolerance=_number(cfg.get("max-tolerance", DEFAULT_MAX_TOLERANCE),
                                  "max-tolerance", float),
            min_bound_bits=_number(cfg.get("min-bound-bits", DEFAULT_MIN_BOUND_BITS),
                                   "min-bound-bits", float),
            max_decision_points=_number(cfg.get("max-decision-points",
                                                DEFAULT_MAX_DECISION_POINTS),
                                        "max-decision-points", int),
            min_decision_points=_number(cfg.get("min-decision-points",
                                                DEFAULT_MIN_DECISION_POINTS),
                                        "min-decision-points", int),
            presets=presets,
            max_key_bytes=_number(cfg.get("max-key-bytes", DEFAULT_MAX_KEY_BYTES),
                                  "max-key-bytes", int))
        share = cfg.get("share-auc")
        require = cfg.get("require-malicious")
        return cls(party,
                   security == "malicious" if require is None or require == ""
                   else _flag(require, "require-malicious"),
                   None if share is None or share == "" else _flag(share, "share-auc"))

    def shares_auc(self, security: str) -> bool:
        return self.share_auc if self.share_auc is not None else security == "malicious"

    def min_parties(self, security: str, roster: Roster) -> int:
        return self.party.required_parties(security, len(roster), roster)


def exact_plan(meta: Mapping[str, Any]) -> tuple[int, int]:
    """Exact mode's ``(max-points, max-rounds)`` from the announced configuration."""
    if meta.get("exact") is not True:
        raise ProtocolError("malformed message: field 'exact'")
    return (readers.integer(meta, "exact-max-points", INITIAL_POINTS, 1 << 16),
            readers.integer(meta, "exact-max-rounds", 0, 64))


def protocol_config(meta: Mapping[str, Any], policy: NodePolicy,
                    grid_points: np.ndarray | None = None) -> FHAUCConfig | MaliciousConfig:
    """Rebuild the public protocol configuration the ServerApp announced in ``meta`` and
    check it against this party's ``policy``.

    Raises ``PolicyViolation`` (the policy refuses it) or ``ProtocolError`` (``meta`` is
    not a valid configuration). Every role recomputes the same configuration digest, so
    a mismatch between parties is caught by the protocol itself. Exact mode (``meta``
    has ``exact``): the configuration of ``grid_points`` (default: the initial grid).
    """
    security = meta.get("security")
    try:
        mode = key_mode(meta)
        if mode == "threshold" and "exact" in meta:
            raise ValueError("threshold keys run with fixed decision points")
        try:
            points = readers.integer(meta, "decision-points", -_BIG, _BIG)
            preset = readers.text(meta, "preset")
        except ProtocolError as exc:
            raise TypeError(str(exc)) from None
        if points > policy.party.max_decision_points:  # before allocating anything
            raise PolicyViolation(f"{points} decision points exceed this party's limit of "
                                  f"{policy.party.max_decision_points}",
                                  check="decision-points")
        grid: Any = points
        if "exact" in meta:
            max_points, _rounds = exact_plan(meta)
            if max_points > policy.party.max_decision_points:
                raise PolicyViolation(f"exact mode's grid may grow to {max_points} points, "
                                      "more than this party's limit of "
                                      f"{policy.party.max_decision_points}",
                                      check="decision-points")
            grid = grid_points if grid_points is not None else initial_grid(INITIAL_POINTS)
        cfg: FHAUCConfig | MaliciousConfig
        if security == "semi-honest":
            if policy.require_malicious:
                raise PolicyViolation("this party requires malicious-aggregator security "
                                      "(node config require-malicious) but the run is "
                                      "semi-honest", check="require-malicious")
            try:
                masking = readers.text(meta, "masking") if "masking" in meta else "single"
            except ProtocolError:
                raise TypeError("bad masking") from None
            cfg = FHAUCConfig.create(grid, preset=preset, masking=masking)
        elif security == "malicious":
            try:
                splits = readers.integer(meta, "splits", -_BIG, _BIG)
                runs = readers.integer(meta, "runs", -_BIG, _BIG)
                tol = readers.real(meta, "tolerance")
            except ProtocolError as exc:
                raise TypeError(str(exc)) from None
            # min_bound_bits=0: validity only; the party's own floor is checked below.
            cfg = MaliciousConfig.create(grid, splits=splits, tolerance=float(tol),
                                         runs=runs, min_bound_bits=0.0, preset=preset)
        else:
            raise ProtocolError("unknown security mode")
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"the run's protocol configuration is invalid: {exc}") from None
    policy.party.check_config(cfg)
    return cfg


def key_mode(meta: Mapping[str, Any]) -> str:
    """The announced key mode: ``"single"`` (default) or ``"threshold"``."""
    mode = meta.get("keys", "single")
    if mode not in ("single", "threshold"):
        raise ValueError(f"unknown key mode {str(mode)[:32]!r}")
    return str(mode)


def first_key_spec(cfg: FHAUCConfig | MaliciousConfig, meta: Mapping[str, Any]) -> KeySpec:
    """The first (signed) key set-up's spec: the protocol's keys, or with threshold keys
    only the result key (the collective keys come after)."""
    if key_mode(meta) == "threshold":
        return KeySpec.create(cfg.preset, [], False)
    return cfg.key_spec()


# ------------------------------------------------------------------------ node inputs
@dataclass(frozen=True)
class NodeSetup:
    """What this node brings to a run: its data, identity, roster, policy and store."""

    data: PartyData
    identity: Identity
    roster: Roster
    policy: NodePolicy
    store: NodeStore
    node_config: Mapping[str, Any]

    @property
    def name(self) -> str:
        return self.identity.name


def _sim_paths(context: Context) -> dict[str, Any]:
    """Simulation engine: this virtual node's files from the run config's directories."""
    ident_dir = str(context.run_config.get("sim-identity-dir", "") or "")
    data_dir = str(context.run_config.get("sim-data-dir", "") or "")
    if not ident_dir or not data_dir:
        raise NodeCheckFailed("node-config", "simulation run: set the run config keys "
                              "'sim-identity-dir' and 'sim-data-dir'")
    files = sorted(Path(ident_dir).glob("*.identity.json"))
    try:
        pid = int(context.node_config["partition-id"])
    except (KeyError, TypeError, ValueError):
        raise NodeCheckFailed("node-config", "simulation run without a partition-id") from None
    if not 0 <= pid < len(files):
        raise NodeCheckFailed("node-config", f"simulation partition {pid}: only "
                              f"{len(files)} identity files in {ident_dir}")
    identity = files[pid]
    name = identity.name[:-len(".identity.json")]
    out: dict[str, Any] = {}
    extra = Path(ident_dir) / f"{name}.node.json"
    if extra.exists():
        try:
            loaded = json.loads(extra.read_text(encoding="utf-8"))
            if not isinstance(loaded, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as exc:
            raise NodeCheckFailed("node-config", f"{extra}: {exc}") from None
        out.update(loaded)
    out.update({"identity-path": str(identity), "roster-path": str(Path(ident_dir) /
                                                                  "roster.json"),
                "data-path": str(Path(data_dir) / f"{name}.csv")})
    return out


def in_simulation_engine() -> bool:
    """Whether this ClientApp call runs inside Flower's simulation engine.

    flwr 1.41's engine calls the ClientApp from
    ``flwr.simulation.ray_transport.ray_actor.VirtualClientEngineActor.run`` in a Ray
    actor of the simulation process; a SuperNode never does. The check looks for that
    method's code on this thread's call stack, so neither the run config (the server's)
    nor a node config key (``partition-id`` and ``num-partitions`` are Flower's usual
    deployment keys too) can fake it.
    """
    mod = sys.modules.get("flwr.simulation.ray_transport.ray_actor")
    actor = getattr(mod, "VirtualClientEngineActor", None) if mod is not None else None
    code = getattr(getattr(actor, "run", None), "__code__", None)
    if code is None:
        return False
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def _sim_node(cfg: Mapping[str, Any]) -> bool:
    """Whether this node takes its files from the run config's ``sim-*`` directories:
    only under the simulation engine, or when its own node config says
    ``simulation=true`` (its operator also runs the server: tests, demos)."""
    if "partition-id" not in cfg:
        return False
    try:
        explicit = _flag(cfg.get("simulation", False), "simulation")
    except ValueError as exc:
        raise NodeCheckFailed("node-config", str(exc)) from None
    return explicit or in_simulation_engine()


def node_config_of(context: Context) -> dict[str, Any]:
    """The node config, with a simulation's virtual node's files filled in.

    A node without ``data-path`` gets its files from the run config's ``sim-*`` keys
    only under the simulation engine or with node config ``simulation=true``
    (:func:`_sim_node`); otherwise :func:`load_node` refuses to start it."""
    cfg = dict(context.node_config)
    if "data-path" not in cfg and _sim_node(cfg):
        cfg.update(_sim_paths(context))
    return cfg


def _required_path(cfg: Mapping[str, Any], key: str) -> Path:
    raw = cfg.get(key)
    if not raw:
        raise NodeCheckFailed("node-config", f"this SuperNode has no '{key}' node config: "
                              f"start it with --node-config \"{key}='/absolute/path'\"")
    return Path(str(raw))


_DELIMITERS = {"comma": ",", "semicolon": ";", "tab": "\t"}


@dataclass(frozen=True)
class FileOptions:
    """How this node reads its party file (node config; ``fedsec auc``'s options)."""

    label_col: str | int = "label"
    score_col: str | int = "score"
    pos_label: str | None = None
    delimiter: str | None = None
    scores: str = "probability"


def _column(value: Any, key: str) -> str | int:
    text = str(value).strip()
    if not text:
        raise ValueError(f"node config '{key}' is empty")
    return int(text) if text.isdigit() else text


def _file_options(cfg: Mapping[str, Any]) -> FileOptions:
    """Read ``label-col``, ``score-col``, ``pos-label``, ``delimiter`` and ``scores``
    (``ValueError`` naming the key and what it accepts)."""
    from fedsec.metrics.roc import _parse_scores

    delim = str(cfg.get("delimiter", "") or "").strip().lower()
    if delim and delim not in _DELIMITERS:
        raise ValueError(f"node config 'delimiter' must be one of "
                         f"{', '.join(sorted(_DELIMITERS))}; got {printable(delim, 40)!r}")
    scores = str(cfg.get("scores", "") or "probability").strip()
    try:
        _parse_scores(scores)
    except ValueError as exc:
        raise ValueError(f"node config 'scores': {exc}") from None
    pos = cfg.get("pos-label")
    return FileOptions(
        label_col=_column(cfg.get("label-col", "label"), "label-col"),
        score_col=_column(cfg.get("score-col", "score"), "score-col"),
        pos_label=None if pos is None or str(pos) == "" else str(pos),
        delimiter=_DELIMITERS[delim] if delim else None, scores=scores)


def load_node(context: Context) -> NodeSetup:
    """Load and check everything this node brings, before any protocol step.

    Raises :class:`NodeCheckFailed` with a check name for the server and the details
    (file, row, rule) for this node's log.
    """
    cfg = node_config_of(context)
    if not cfg.get("data-path"):
        raise NodeCheckFailed(
            "node-config", "this SuperNode has no 'data-path' node config. A deployed node "
            "takes its data, identity, roster and policy files from its own node config "
            "only, never from the server's run config (the run config's 'sim-identity-dir' "
            "and 'sim-data-dir' are honoured only under Flower's simulation engine, or on a "
            "node started with node config simulation=true): start it with --node-config "
            "\"data-path='/absolute/path.csv' identity-path='...' roster-path='...'\"")
    try:
        policy = NodePolicy.from_node_config(cfg)
    except (TypeError, ValueError) as exc:
        raise NodeCheckFailed("node-config", str(exc)) from None
    ident_path = _required_path(cfg, "identity-path")
    roster_path = _required_path(cfg, "roster-path")
    data_path = _required_path(cfg, "data-path")
    try:
        identity = Identity.load(ident_path)
    except (OSError, ValueError) as exc:
        raise NodeCheckFailed("identity-invalid", f"identity file {ident_path}: "
                              f"{exc}") from None
    try:
        roster = Roster.load(roster_path)
    except (OSError, ValueError) as exc:
        raise NodeCheckFailed("roster-invalid", f"roster {roster_path}: {exc}") from None
    if identity.name not in roster or roster.public_key(identity.name) != identity.public_key:
        raise NodeCheckFailed("identity-not-on-roster",
                              f"the identity {identity.name!r} ({ident_path}) is not on the "
                              f"roster {roster_path} with this public key")
    if policy.party.quorum is not None and policy.party.quorum > len(roster):
        raise NodeCheckFailed("node-config", f"node config quorum={policy.party.quorum} "
                              f"exceeds the roster's {len(roster)} parties")
    try:
        read = _file_options(cfg)
    except ValueError as exc:
        raise NodeCheckFailed("node-config", str(exc)) from None
    try:
        data = load_party_csv(data_path, label_col=read.label_col, score_col=read.score_col,
                              pos_label=read.pos_label, delimiter=read.delimiter,
                              score_range=(0.0, 1.0) if read.scores == "probability"
                              else None)
        if read.scores != "probability":
            data = replace(data, y_score=transform_scores(data.y_score, read.scores))
        check_party_inputs(data.y_true, data.y_score, DEFAULT_MAX_TOTAL_SAMPLES)
    except (OSError, ValueError) as exc:
        raise NodeCheckFailed("input-invalid", f"party data {data_path}: {exc}") from None
    return NodeSetup(data, identity, roster, policy, NodeStore.for_context(context, cfg), cfg)


# ----------------------------------------------------------------- resuming a run
_Reply = tuple[list[bytes], dict[str, Any]]


def _meta_bytes(meta: Mapping[str, Any]) -> bytes:
    return json.dumps(dict(meta), sort_keys=True).encode()


def _resume(node: NodeSetup, *need: str
            ) -> tuple[FHAUCConfig | MaliciousConfig, dict[str, bytes]]:
    """This run's pinned configuration and state fields (each of ``need`` present)."""
    try:
        name, fields = node.store.load()
    except ProtocolError as exc:
        raise NodeCheckFailed("out-of-order", str(exc)) from None
    missing = [k for k in ("config", *need) if k not in fields]
    if name != node.name or missing:
        raise NodeCheckFailed("out-of-order", f"this step needs {missing} from earlier steps "
                              f"of this run (state {node.store.path}, party {name!r})")
    try:
        meta = json.loads(fields["config"])
    except ValueError:
        raise NodeCheckFailed("out-of-order", "corrupt pinned configuration") from None
    grid = None
    if "points" in fields:   # exact mode: this party's own refined grid
        grid = np.frombuffer(fields["points"], dtype=np.float64).copy()
    return protocol_config(meta, node.policy, grid), fields


def _setup_party(node: NodeSetup, cfg: FHAUCConfig | MaliciousConfig,
                 fields: dict[str, bytes]) -> KeySetupParty:
    spec = first_key_spec(cfg, json.loads(fields["config"]))
    return KeySetupParty.from_bytes(fields["setup"], identity=node.identity,
                                    roster=node.roster, spec=spec,
                                    min_parties=node.policy.min_parties(_security(cfg),
                                                                        node.roster))


def _security(cfg: FHAUCConfig | MaliciousConfig) -> str:
    return "malicious" if isinstance(cfg, MaliciousConfig) else "semi-honest"


def _keys(fields: dict[str, bytes]) -> PartyKeys:
    return PartyKeys.from_bytes(fields["keys"])


# ---------------------------------------------------------------------------- steps
def _hello(msg: Message, node: NodeSetup) -> _Reply:
    """Key set-up round 1: check the announced configuration, pin it, say hello."""
    meta = get_meta(msg.content)
    cfg = protocol_config(meta, node.policy)
    min_parties = node.policy.min_parties(_security(cfg), node.roster)
    party = KeySetupParty(node.identity, node.roster, first_key_spec(cfg, meta),
                          min_parties=min_parties)
    hello = party.hello()
    node.store.save(node.name, {"config": _meta_bytes(meta), "setup": party.to_bytes()})
    node_log = _node_logger(node.node_config)
    node_log.info("run: %s FHAUC, %d decision points; this party (%s, %d samples) accepts "
                  "at least %d parties; roster fingerprint %s", _security(cfg), cfg.n_points,
                  node.name, node.data.n_samples, min_parties, node.roster.fingerprint)
    return [hello], {"name": node.name, "quorum": min_parties}


def _offer(msg: Message, node: NodeSetup) -> _Reply:
    """Key set-up round 3 (the transcript's key holder): generate and seal the keys."""
    cfg, fields = _resume(node, "setup")
    party = _setup_party(node, cfg, fields)
    offer = party.offer(get_blob(msg.content))
    node.store.save(node.name, {**fields, "setup": party.to_bytes()})
    return [offer], {}


def _deliver(msg: Message, node: NodeSetup) -> _Reply:
    """Key set-up round 4: check the transcript, open this party's box, confirm; in
    malicious mode (``then="commit"``) also the signed fresh commit, bound to the
    session the confirmation names (it carries no data and is void if the confirmations
    disagree; no data is encrypted before they are checked)."""
    cfg, fields = _resume(node, "setup")
    then = get_meta(msg.content).get("then", "")
    exact = "exact" in json.loads(fields["config"])
    if then not in ("", "commit") or (then == "commit" and (
            exact or not isinstance(cfg, MaliciousConfig))):
        raise ProtocolError("the delivery announces a next step this run does not have")
    party = _setup_party(node, cfg, fields)
    confirm = party.receive(get_blob(msg.content))
    out = {**fields, "setup": party.to_bytes()}
    if then != "commit":
        node.store.save(node.name, out)
        return [confirm], {}
    assert isinstance(cfg, MaliciousConfig)
    mp = MaliciousParty(node.data.y_true, node.data.y_score, keys=party.unconfirmed_keys(),
                        config=cfg, identity=node.identity, roster=node.roster,
                        policy=node.policy.party)
    node.store.save(node.name, {**out, "nonce": mp.nonce})
    return [confirm, mp.commit()], {}


def _confirmed(msg: Message, node: NodeSetup) -> _Reply:
    """Key set-up round 5: every participant confirmed the same transcript -> keys; then,
    in the same exchange, the party's next step (``then``: ``submit`` in semi-honest
    mode, ``commit`` in malicious mode, none in exact mode, whose refinement comes
    first; anything else is refused)."""
    cfg, fields = _resume(node, "setup")
    then = get_meta(msg.content).get("then", "")
    exact = "exact" in json.loads(fields["config"])
    malicious = isinstance(cfg, MaliciousConfig)
    threshold = key_mode(json.loads(fields["config"])) == "threshold"
    allowed = {""} if exact else ({"commit", "submit"} if malicious else {"submit"})
    if threshold:
        allowed = {"mk-commit"}
    committed = "nonce" in fields
    if then not in allowed or (malicious and then == "submit") != committed:
        raise ProtocolError("the confirmation announces a next step this run does not have")
    blobs = get_blobs(msg.content)
    if len(blobs) != (2 if malicious and then == "submit" else 1):
        raise ProtocolError("malformed confirmation message")
    keys = _setup_party(node, cfg, fields).finish(blobs[0])
    kept = {"config": fields["config"], "keys": keys.to_bytes()}
    if committed:
        kept["nonce"] = fields["nonce"]
    if then == "mk-commit":   # threshold keys: the collective set-up's first round
        mk = CollectiveKeyParty(node.identity, node.roster, cfg.key_spec(), keys)
        commit = mk.commit()
        node.store.save(node.name, {**kept, "mk": mk.to_bytes()})
        return [commit], {}
    node.store.save(node.name, kept)
    if then == "commit":
        return _commit(msg, node)
    if then == "submit":
        return _submit_step(node, blobs[1] if malicious else None)
    return [], {"parties": len(keys.names)}


def _exact_round(msg: Message, node: NodeSetup
                 ) -> tuple[FHAUCConfig | MaliciousConfig, dict[str, bytes], BinPairsParty]:
    """Exact mode: this party's side of the announced refinement round (the round must be
    the next one, on this party's own grid, before its grid is final)."""
    cfg, fields = _resume(node, "keys")
    meta = get_meta(msg.content)
    if "exact" not in json.loads(fields["config"]):
        raise ProtocolError("refinement is an exact-mode step")
    r = readers.integer(meta, "round", 0, 63)
    if fields.get("final") == b"1" or r != int(fields.get("round", b"0")):
        raise NodeCheckFailed("out-of-order", f"refinement round {r} is not this party's "
                              "next round")
    party = BinPairsParty(node.data.y_true, node.data.y_score, keys=_keys(fields),
                          points=np.asarray(cfg.points), round_index=r)
    return cfg, fields, party


def _refine(msg: Message, node: NodeSetup) -> _Reply:
    """Exact mode, refinement round: this party's masked per-bin counts."""
    _cfg, _fields, party = _exact_round(msg, node)
    return [party.submit()], {}


def _marks(msg: Message, node: NodeSetup) -> _Reply:
    """Exact mode: read the round's answer (canaries checked: ``TamperingDetected``
    otherwise), refine this party's own grid from the marks, and answer which bins hold
    a pair (public: the next grid shows it)."""
    cfg, fields, party = _exact_round(msg, node)
    marks = party.read(get_blob(msg.content))
    max_points, max_rounds = exact_plan(json.loads(fields["config"]))
    points, why = next_grid(np.asarray(cfg.points), marks, max_points)
    r = int(fields.get("round", b"0")) + 1
    final = why != "refine" or r >= max_rounds or points.size > MAX_REFINE_BINS
    out = {**fields, "points": np.asarray(points, dtype=np.float64).tobytes(),
           "round": str(r).encode()}
    if final:
        out["final"] = b"1"
        if why == "no-pair-left":
            out["bound-zero"] = b"1"
    node.store.save(node.name, out)
    return [], {"marked": [int(i) for i in np.flatnonzero(marks)]}


def _commit(msg: Message, node: NodeSetup) -> _Reply:
    """Malicious mode, round 1: a signed fresh nonce (a new one for every restart)."""
    cfg, fields = _resume(node, "keys")
    if not isinstance(cfg, MaliciousConfig):
        raise ProtocolError("commit is a malicious-mode step")
    party = MaliciousParty(node.data.y_true, node.data.y_score, keys=_keys(fields),
                           config=cfg, identity=node.identity, roster=node.roster,
                           policy=node.policy.party)
    node.store.save(node.name, {**{k: v for k, v in fields.items()
                                   if k in ("config", "keys", "points", "round", "final",
                                            "bound-zero")},
                                "nonce": party.nonce})
    return [party.commit()], {}


def _submit(msg: Message, node: NodeSetup) -> _Reply:
    """Encrypted statistics: semi-honest ``FHAUCParty.submit()`` or malicious
    ``MaliciousParty.submit(start)`` (at most once per committed nonce)."""
    blobs = get_blobs(msg.content)
    return _submit_step(node, blobs[0] if len(blobs) == 1 else None)


def _submit_step(node: NodeSetup, start: bytes | None) -> _Reply:
    cfg, fields = _resume(node, "keys")
    if "ckeys" in fields:
        return _threshold_submit(node, cfg, fields, start)
    keys = _keys(fields)
    if isinstance(cfg, FHAUCConfig):
        sub = FHAUCParty(node.data.y_true, node.data.y_score, keys=keys, config=cfg,
                         policy=node.policy.party, roster=node.roster).submit()
        return [sub], {}
    nonce = fields.get("nonce")
    if nonce is None:
        raise NodeCheckFailed("out-of-order", "submit before commit on this node")
    if fields.get("submitted") == nonce:
        raise NodeCheckFailed("already-submitted", "this party already submitted for its "
                              "current nonce; a new evaluation needs a new commit round")
    if start is None:
        raise ProtocolError("malicious submit needs the start message")
    party = MaliciousParty(node.data.y_true, node.data.y_score, keys=keys, config=cfg,
                           identity=node.identity, roster=node.roster,
                           policy=node.policy.party, nonce=nonce)
    sub = party.submit(start)
    node.store.save(node.name, {**fields, "submitted": nonce})
    return [sub], {}


def _mk_party(node: NodeSetup, cfg: FHAUCConfig | MaliciousConfig,
              fields: dict[str, bytes]) -> CollectiveKeyParty:
    return CollectiveKeyParty.from_bytes(fields["mk"], node.identity, node.roster,
                                         cfg.key_spec(), _keys(fields))


def _mk_round(name: str) -> _Step:
    """One round of the collective key set-up (threshold keys): ``reveal``, ``relin`` or
    ``check``, on the server's one blob; the party's state is saved for the next."""
    def step(msg: Message, node: NodeSetup) -> _Reply:
        cfg, fields = _resume(node, "keys", "mk")
        party = _mk_party(node, cfg, fields)
        out = getattr(party, name)(get_blob(msg.content))
        node.store.save(node.name, {**fields, "mk": party.to_bytes()})
        return [out], {}

    step.__doc__ = f"Collective key set-up (threshold keys): CollectiveKeyParty.{name}."
    return step


def _mk_finish(msg: Message, node: NodeSetup) -> _Reply:
    """Collective key set-up, last round: every party signed the same keys and the known
    answer decrypts -> this party's key share; then its submission (``then="submit"``),
    encrypted under the collective key and signed."""
    cfg, fields = _resume(node, "keys", "mk")
    then = get_meta(msg.content).get("then", "")
    if then != ("commit" if isinstance(cfg, MaliciousConfig) else "submit"):
        raise ProtocolError("the confirmation announces a next step this run does not have")
    ckeys = _mk_party(node, cfg, fields).finish(get_blob(msg.content))
    if isinstance(cfg, MaliciousConfig):
        mp = ThresholdMaliciousParty(node.data.y_true, node.data.y_score, keys=ckeys,
                                     config=cfg, identity=node.identity, roster=node.roster,
                                     policy=node.policy.party)
        node.store.save(node.name, {"config": fields["config"], "keys": fields["keys"],
                                    "ckeys": ckeys.to_bytes(), "nonce": mp.nonce})
        return [mp.commit()], {}
    party = ThresholdFHAUCParty(node.data.y_true, node.data.y_score, keys=ckeys,
                                identity=node.identity, config=cfg, roster=node.roster,
                                policy=node.policy.party)
    sub = party.submit()
    node.store.save(node.name, {"config": fields["config"], "keys": fields["keys"],
                                "ckeys": ckeys.to_bytes(), "own": sub})
    return [sub], {}


def _threshold_malicious(node: NodeSetup, cfg: MaliciousConfig, fields: dict[str, bytes],
                         start: bytes) -> ThresholdMaliciousParty:
    if "nonce" not in fields:
        raise NodeCheckFailed("out-of-order", "a threshold malicious step before the commit")
    party = ThresholdMaliciousParty(node.data.y_true, node.data.y_score,
                                    keys=CollectiveKeys.from_bytes(fields["ckeys"]),
                                    config=cfg, identity=node.identity, roster=node.roster,
                                    policy=node.policy.party, nonce=fields["nonce"])
    party.restore(start)   # checks the start message, this party's nonce and the quorum
    if "own" in fields:
        party.restore_switch(fields["own"], "switched" in fields)
    return party


def _threshold_submit(node: NodeSetup, cfg: FHAUCConfig | MaliciousConfig,
                      fields: dict[str, bytes], start: bytes | None) -> _Reply:
    """Threshold keys, malicious mode: every run under the collective key, signed (once
    per committed nonce)."""
    if not isinstance(cfg, MaliciousConfig) or start is None:
        raise ProtocolError("a threshold submit is malicious mode's, with the start message")
    if "own" in fields:
        raise NodeCheckFailed("already-submitted", "this party already submitted for its "
                              "current nonce")
    party = _threshold_malicious(node, cfg, fields, start)
    sub = party.submit(start)
    node.store.save(node.name, {**fields, "own": sub})
    return [sub], {}


def _threshold_party(node: NodeSetup, cfg: FHAUCConfig, fields: dict[str, bytes]
                     ) -> ThresholdFHAUCParty:
    party = ThresholdFHAUCParty(node.data.y_true, node.data.y_score,
                                keys=CollectiveKeys.from_bytes(fields["ckeys"]),
                                identity=node.identity, config=cfg, roster=node.roster,
                                policy=node.policy.party)
    switched = fields.get("switched")
    party.restore(fields["own"], None if switched is None else json.loads(switched))
    return party


def _t_share(msg: Message, node: NodeSetup) -> _Reply:
    """Threshold keys: check every relayed submission, recompute the aggregate and send
    this party's key-switch shares (once per evaluation: the refusal of a second request
    survives on disk)."""
    cfg, fields = _resume(node, "ckeys", "own")
    if "switched" in fields:
        raise NodeCheckFailed("already-switched", "this party already sent its key-switch "
                              "shares for this evaluation")
    blobs = get_blobs(msg.content)
    if isinstance(cfg, MaliciousConfig):
        if len(blobs) != 2:
            raise ProtocolError("a threshold malicious key switch needs the request and the "
                                "start message")
        mparty = _threshold_malicious(node, cfg, fields, blobs[1])
        out = mparty.share(blobs[0])
        node.store.save(node.name, {**fields, "switched": b"1"})
        return [out], {}
    if len(blobs) != 1:
        raise ProtocolError("a key-switch request is one message")
    party = _threshold_party(node, cfg, fields)
    out = party.share(blobs[0])
    node.store.save(node.name, {**fields,
                                "switched": json.dumps(party.switched).encode()})
    return [out], {}


def _finalize(msg: Message, node: NodeSetup) -> _Reply:
    """Decrypt (and in malicious mode verify) the result; keep the outcome locally.

    The reply carries ``verified``, the names the result covers and the AUC only if
    this party shares it (node config ``share-auc``)."""
    cfg, fields = _resume(node, "keys")
    keys = _keys(fields)
    blobs = get_blobs(msg.content)
    security = _security(cfg)
    if "ckeys" in fields and isinstance(cfg, MaliciousConfig):   # threshold, malicious
        if len(blobs) != 2 or "switched" not in fields:
            raise ProtocolError("threshold malicious finalize expects the answer and the "
                                "start message, after the key switch")
        tm = _threshold_malicious(node, cfg, fields, blobs[1])
        auc = tm.finalize(blobs[0])
        bound = tm.error_bound
        parties = readers.integers(wire.decode(blobs[0], expect="fhauc-mt/result").meta,
                                   "parties", 0, keys.n_parties - 1)
        included = [keys.names[i] for i in parties]
    elif "ckeys" in fields:   # threshold keys, semi-honest
        if len(blobs) != 1 or "switched" not in fields or not isinstance(cfg, FHAUCConfig):
            raise ProtocolError("threshold finalize expects one result, after the key "
                                "switch")
        th = _threshold_party(node, cfg, fields)
        auc = th.finalize(blobs[0])
        included = list(th.included)
        bound = th.error_bound
    elif isinstance(cfg, FHAUCConfig):
        if len(blobs) != 1:
            raise ProtocolError("semi-honest finalize expects one result")
        sh = FHAUCParty(node.data.y_true, node.data.y_score, keys=keys, config=cfg,
                        policy=node.policy.party, roster=node.roster)
        auc = sh.finalize(blobs[0])
        included = list(sh.included)
        bound = sh.error_bound
    else:
        if len(blobs) != 2 or "nonce" not in fields:
            raise ProtocolError("malicious finalize expects the result and the start "
                                "message, after a commit")
        mp = MaliciousParty(node.data.y_true, node.data.y_score, keys=keys, config=cfg,
                            identity=node.identity, roster=node.roster,
                            policy=node.policy.party, nonce=fields["nonce"])
        mp.restore(blobs[1])  # validates the start message, this party's nonce, quorum
        auc = mp.finalize(blobs[0])  # checks the result covers exactly the participants
        bound = mp.error_bound
        parties = readers.integers(wire.decode(blobs[0], expect="fhauc-m/result").meta,
                                  "parties", 0, keys.n_parties - 1)
        included = [keys.names[i] for i in parties]
    if fields.get("bound-zero") == b"1":
        # exact mode: this party read, in the verified last refinement round, that no
        # bin of the final grid holding a pair holds more than one float (fedsec.auc.exact)
        bound = 0.0
    shared = node.policy.shares_auc(security)
    verified = security == "malicious"
    node.store.save_result({"status": "ok", "party": node.name, "security": security,
                            "auc": float(auc), "error_bound": float(bound),
                            "verified": verified, "included": included,
                            "auc_shared_with_aggregator": shared})
    _node_logger(node.node_config).info(
        "result: AUC %.10f (certified |AUC - exact AUC| <= %.3g; %s, %s) over %d parties %s;"
        " shared with the aggregator: %s", auc, bound, security,
        "verified" if verified else "not verifiable in semi-honest mode",
        len(included), included, shared)
    out: dict[str, Any] = {"verified": verified, "included": included, "shared": shared}
    if shared:
        # what leaves the node is rounded (the AUC to 6 significant digits, the bound up to
        # 2): at full precision the pair pins the federation's class counts
        out["auc"], out["error_bound"] = shared_result(float(auc), float(bound))
        out["auc_digits"], out["bound_digits"] = SHARED_AUC_DIGITS, SHARED_BOUND_DIGITS
    return [], out


# ------------------------------------------------------------------------- handlers
_Step = Callable[[Message, NodeSetup], _Reply]


def _guarded(step: str, fn: _Step) -> Callable[[Message, Context], Message]:
    """Wrap one step: load and check the node, run the step, and turn every failure into
    an ``ok=False`` reply carrying a check name (details to the node's log only). The
    node-local state is deleted after ``finalize`` and after any failure."""

    def handler(msg: Message, context: Context) -> Message:
        node: NodeSetup | None = None
        try:
            node = load_node(context)
            blobs, meta = fn(msg, node)
            if step == "finalize":
                node.store.delete()
            return reply(msg, make_content(blobs, {"ok": True, **meta}))
        except Exception as exc:  # noqa: BLE001 - every failure becomes a check name
            check = check_name(exc)
            cfg: Mapping[str, Any] = node.node_config if node is not None else {}
            if not cfg:
                with contextlib.suppress(Exception):
                    cfg = node_config_of(context)
            log = _node_logger(cfg)
            log.error("step %s failed, check %s (only the check name goes to the "
                      "server): %s: %s", step, check, type(exc).__name__, exc,
                      exc_info=check == "internal-error")
            with contextlib.suppress(Exception):
                store = node.store if node is not None else NodeStore.for_context(context,
                                                                                  cfg)
                store.delete()
                if step == "finalize" or node is not None:
                    store.save_result({"status": "failed", "step": step, "check": check,
                                       "party": node.name if node is not None else ""})
            return reply(msg, make_content([], {"ok": False, "check": check}))

    handler.__name__ = f"handle_{step}"
    handler.__doc__ = fn.__doc__
    return handler


handle_hello = _guarded("hello", _hello)
handle_offer = _guarded("offer", _offer)
handle_deliver = _guarded("deliver", _deliver)
handle_confirmed = _guarded("confirmed", _confirmed)
handle_commit = _guarded("commit", _commit)
handle_submit = _guarded("submit", _submit)
handle_refine = _guarded("refine", _refine)
handle_marks = _guarded("marks", _marks)
handle_finalize = _guarded("finalize", _finalize)
handle_mk_reveal = _guarded("mk_reveal", _mk_round("reveal"))
handle_mk_relin = _guarded("mk_relin", _mk_round("relin"))
handle_mk_check = _guarded("mk_check", _mk_round("check"))
handle_mk_finish = _guarded("mk_finish", _mk_finish)
handle_t_share = _guarded("t_share", _t_share)

STEPS: dict[str, Callable[[Message, Context], Message]] = {
    "hello": handle_hello, "offer": handle_offer, "deliver": handle_deliver,
    "confirmed": handle_confirmed, "refine": handle_refine, "marks": handle_marks,
    "commit": handle_commit, "submit": handle_submit,
    "mk_reveal": handle_mk_reveal, "mk_relin": handle_mk_relin, "mk_check": handle_mk_check,
    "mk_finish": handle_mk_finish, "t_share": handle_t_share,
    "finalize": handle_finalize,
}


def build_client_app() -> ClientApp:
    """A ``ClientApp`` with one ``@app.query`` handler per protocol step."""
    app = ClientApp()
    for name, handler in STEPS.items():
        app.query(name)(handler)
    return app
