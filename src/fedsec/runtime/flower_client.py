"""Flower ClientApp handlers: one party of secure FHAUC on its own SuperNode (flwr 1.41).

Each handler plays exactly one protocol step of the in-process roles
(:mod:`fedsec.crypto.keysetup`, :mod:`fedsec.auc.fhauc`,
:mod:`fedsec.auc.fhauc_malicious`) on the bytes the ServerApp forwards and answers
with the bytes the role produces. No protocol step is reimplemented here.

===============  ========================================================  =========
message type     role method                                               reply
===============  ========================================================  =========
``query.hello``     ``KeySetupParty(name).hello()``                        hello
``query.offer``     ``KeySetupParty.offer(request)`` (key holder only)     offer
``query.deliver``   ``KeySetupParty.receive(delivery)`` -> ``PartyKeys``   ack
``query.commit``    ``MaliciousParty.commit()`` (fresh nonce)              commit
``query.submit``    ``FHAUCParty.submit()`` / ``MaliciousParty.submit``    submission
``query.finalize``  ``.finalize(result)``                                  AUC or error
===============  ========================================================  =========

Node-local state and secrets
----------------------------
Flower runs every message in a fresh ``flwr-clientapp`` process, so a party's state
between steps (its X25519 private key, then its CKKS **secret key** and shared seed,
then its malicious-mode nonce) is kept in a file on the party's own machine,
``<state-dir>/run-<run id>-node-<node id>.fedsec`` (directory mode 0700, file mode
0600), and deleted after ``finalize``. It never goes into the run config, into a reply
or into ``context.state`` (which travels between the SuperNode and the ClientApp
process over plain local HTTP unless the SuperNode is given TLS files).

Node config (``flower-supernode --node-config "k='v' ..."``)
-----------------------------------------------------------
``data-path``
    The party's CSV (``label,score``; :func:`fedsec.data.io.load_party_csv`). Required
    in the deployment engine.
``party-name``
    Name announced in key set-up (default: the CSV's file name without extension).
``state-dir``
    Directory for the node-local state file (default:
    ``<tmp>/fedsec-flower-<uid>``).
``require-malicious``
    ``true`` refuses to take part in semi-honest runs (the aggregator chooses the mode,
    so a party that does not trust it should insist on verification).
``min-bound-bits``
    Malicious mode: the weakest cheating bound (bits) this party accepts (default 40).
``share-auc``
    ``false`` keeps the decrypted AUC on this node: the finalize reply then reports
    only whether verification passed.

Simulation engine: nodes have no ``data-path``; party ``k`` (``partition-id``) reads
the ``k``-th CSV (sorted by name) of the run config's ``sim-data-dir``.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

with warnings.catch_warnings():
    # flwr 1.41 -> typer -> click 8.5 warns on import; see fedsec.runtime.flower_io.
    warnings.simplefilter("ignore", DeprecationWarning)
    from flwr.app import Context, Message
    from flwr.clientapp import ClientApp

from fedsec.auc.fhauc import FHAUCConfig, FHAUCParty
from fedsec.auc.fhauc_malicious import MaliciousConfig, MaliciousParty
from fedsec.crypto import wire
from fedsec.crypto.keysetup import KeySetupParty, PartyKeys
from fedsec.data.io import PartyData, load_party_csv
from fedsec.errors import FedsecError, ProtocolError
from fedsec.runtime.flower_io import get_blob, get_blobs, get_meta, make_content, reply

__all__ = [
    "NodeStore",
    "build_client_app",
    "handle_commit",
    "handle_deliver",
    "handle_finalize",
    "handle_hello",
    "handle_offer",
    "handle_submit",
    "protocol_config",
]

STATE_KIND = "flower/node-state"
DEFAULT_MIN_BOUND_BITS = 40.0


# ------------------------------------------------------------------- node-local state
class NodeStore:
    """The party's state between protocol steps, in one node-local file (mode 0600).

    Fields are named byte strings (``setup``, ``keys``, ``nonce``, ``submitted``) plus
    the party name. Writes are atomic (temporary file + ``os.replace``).
    """

    def __init__(self, directory: Path, run_id: int, node_id: int) -> None:
        self.directory = directory
        self.path = directory / f"run-{int(run_id)}-node-{int(node_id)}.fedsec"

    @classmethod
    def for_context(cls, context: Context) -> NodeStore:
        """The store of this node and run (``state-dir`` node config or a default)."""
        raw = context.node_config.get("state-dir")
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
        self._ensure_dir()
        names = sorted(fields)
        data = wire.encode(STATE_KIND, {"name": name, "fields": names},
                           [fields[k] for k in names])
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".fedsec")
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, self.path)
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


# ------------------------------------------------------------------------ node inputs
@dataclass(frozen=True)
class _Node:
    data: PartyData
    name: str
    store: NodeStore


def _data_path(context: Context) -> Path:
    if "data-path" in context.node_config:
        return Path(str(context.node_config["data-path"]))
    if "partition-id" in context.node_config:  # simulation engine
        directory = str(context.run_config.get("sim-data-dir", ""))
        if not directory:
            raise ValueError("simulation run: set the run config 'sim-data-dir'")
        files = sorted(Path(directory).glob("*.csv"))
        pid = int(context.node_config["partition-id"])
        if not 0 <= pid < len(files):
            raise ValueError(f"simulation partition {pid}: only {len(files)} CSV files in "
                             f"{directory}")
        return files[pid]
    raise ValueError("this SuperNode has no 'data-path' node config: start it with "
                     "--node-config \"data-path='/path/to/party.csv'\"")


def _node(context: Context) -> _Node:
    path = _data_path(context)
    data = load_party_csv(path)
    name = str(context.node_config.get("party-name", "")) or path.stem
    return _Node(data, name, NodeStore.for_context(context))


def _flag(context: Context, key: str, default: bool) -> bool:
    value = context.node_config.get(key, default)
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def protocol_config(meta: dict[str, Any], context: Context) -> FHAUCConfig | MaliciousConfig:
    """Rebuild the public protocol configuration the ServerApp announced in ``meta``,
    after checking it against this node's own policy (``require-malicious``,
    ``min-bound-bits``). Every role recomputes the same configuration digest, so a
    mismatch between parties is caught by the protocol itself."""
    security = str(meta.get("security", ""))
    points = int(meta["decision-points"])
    preset = str(meta["preset"])
    if security == "semi-honest":
        if _flag(context, "require-malicious", False):
            raise ProtocolError("this party requires malicious-aggregator security "
                                "(node config require-malicious) but the run is semi-honest")
        return FHAUCConfig.create(points, preset=preset, masking=str(meta["masking"]))
    if security == "malicious":
        floor = float(context.node_config.get("min-bound-bits", DEFAULT_MIN_BOUND_BITS))
        bits = float(meta["min-bound-bits"])
        if bits < floor:
            raise ProtocolError(f"the run asks for a 2^-{bits:g} cheating bound; this party "
                                f"requires at least 2^-{floor:g} (node config min-bound-bits)")
        splits = int(meta["splits"])
        return MaliciousConfig.create(points, splits=splits or None,
                                      tolerance=float(meta["tolerance"]),
                                      min_bound_bits=bits, preset=preset)
    raise ProtocolError(f"unknown security mode {security!r}")


def _keys(fields: dict[str, bytes]) -> PartyKeys:
    if "keys" not in fields:
        raise ProtocolError("this party has no keys for this run (key set-up incomplete)")
    return PartyKeys.from_bytes(fields["keys"])


# ---------------------------------------------------------------------------- handlers
def handle_hello(msg: Message, context: Context) -> Message:
    """Key set-up step 1: load and validate the CSV, make an X25519 identity, say hello."""
    node = _node(context)
    party = KeySetupParty(node.name)
    node.store.save(node.name, {"setup": party.to_bytes()})
    return reply(msg, make_content([party.hello()], meta={"name": node.name}))


def handle_offer(msg: Message, context: Context) -> Message:
    """Key set-up step 3 (the key holder): generate the CKKS keys and seal them."""
    store = NodeStore.for_context(context)
    name, fields = store.load()
    if "setup" not in fields:
        raise ProtocolError("offer before hello on this node")
    party = KeySetupParty.from_bytes(fields["setup"])
    offer = party.offer(get_blob(msg.content))
    store.save(name, {"setup": party.to_bytes()})
    return reply(msg, make_content([offer]))


def handle_deliver(msg: Message, context: Context) -> Message:
    """Key set-up step 4: open the sealed delivery; keep the keys, drop the identity."""
    store = NodeStore.for_context(context)
    name, fields = store.load()
    if "setup" not in fields:
        raise ProtocolError("delivery before hello on this node")
    keys = KeySetupParty.from_bytes(fields["setup"]).receive(get_blob(msg.content))
    store.save(name, {"keys": keys.to_bytes()})
    return reply(msg, make_content(meta={"session": keys.session, "index": keys.index}))


def handle_commit(msg: Message, context: Context) -> Message:
    """Malicious mode, round 1: a fresh nonce (a new commit for every restart)."""
    node = _node(context)
    cfg = protocol_config(get_meta(msg.content), context)
    if not isinstance(cfg, MaliciousConfig):
        raise ProtocolError("commit is a malicious-mode step")
    name, fields = node.store.load()
    party = MaliciousParty(node.data.y_true, node.data.y_score, keys=_keys(fields), config=cfg)
    node.store.save(name, {"keys": fields["keys"], "nonce": party.nonce})
    return reply(msg, make_content([party.commit()]))


def handle_submit(msg: Message, context: Context) -> Message:
    """Encrypted statistics: semi-honest ``FHAUCParty.submit()`` or malicious
    ``MaliciousParty.submit(start)`` (at most once per committed nonce)."""
    node = _node(context)
    cfg = protocol_config(get_meta(msg.content), context)
    name, fields = node.store.load()
    keys = _keys(fields)
    if isinstance(cfg, FHAUCConfig):
        sub = FHAUCParty(node.data.y_true, node.data.y_score, keys=keys, config=cfg).submit()
        return reply(msg, make_content([sub]))
    nonce = fields.get("nonce")
    if nonce is None:
        raise ProtocolError("submit before commit on this node")
    if fields.get("submitted") == nonce:
        raise ProtocolError("this party already submitted for its current nonce; a new "
                            "evaluation needs a new commit round")
    party = MaliciousParty(node.data.y_true, node.data.y_score, keys=keys, config=cfg,
                           nonce=nonce)
    sub = party.submit(get_blob(msg.content))
    node.store.save(name, {**fields, "submitted": nonce})
    return reply(msg, make_content([sub]))


def handle_finalize(msg: Message, context: Context) -> Message:
    """Decrypt (and in malicious mode verify) the result.

    The reply carries ``ok``, and either the AUC (unless node config ``share-auc`` is
    false) or the error type and message (``TamperingDetected``, ``ProtocolError``,
    ``UndefinedMetricError``). The node-local state file (secret key) is deleted.
    """
    node = _node(context)
    meta = get_meta(msg.content)
    try:
        cfg = protocol_config(meta, context)
        _, fields = node.store.load()
        keys = _keys(fields)
        blobs = get_blobs(msg.content)
        out: dict[str, Any] = {"ok": True, "verified": isinstance(cfg, MaliciousConfig)}
        if isinstance(cfg, FHAUCConfig):
            if len(blobs) != 1:
                raise ProtocolError("semi-honest finalize expects one result")
            sh = FHAUCParty(node.data.y_true, node.data.y_score, keys=keys, config=cfg)
            auc = sh.finalize(blobs[0])
            included = list(sh.included)
        else:
            if len(blobs) != 2 or "nonce" not in fields:
                raise ProtocolError("malicious finalize expects the result and the start "
                                    "message, after a commit")
            mp = MaliciousParty(node.data.y_true, node.data.y_score, keys=keys, config=cfg,
                                nonce=fields["nonce"])
            mp.restore(blobs[1])  # validates the start message and this party's nonce
            auc = mp.finalize(blobs[0])
            parties = wire.decode(blobs[1], expect="fhauc-m/start").meta["parties"]
            included = [keys.names[int(i)] for i in parties]
        out["included"] = included
        if _flag(context, "share-auc", True):
            out["auc"] = float(auc)
    except FedsecError as exc:
        out = {"ok": False, "verified": False, "error-type": type(exc).__name__,
               "error": str(exc), "check": str(getattr(exc, "check", ""))}
    finally:
        node.store.delete()
    return reply(msg, make_content(meta=out))


def build_client_app() -> ClientApp:
    """A ``ClientApp`` with one ``@app.query`` handler per protocol step."""
    app = ClientApp()
    app.query("hello")(handle_hello)
    app.query("offer")(handle_offer)
    app.query("deliver")(handle_deliver)
    app.query("commit")(handle_commit)
    app.query("submit")(handle_submit)
    app.query("finalize")(handle_finalize)
    return app
