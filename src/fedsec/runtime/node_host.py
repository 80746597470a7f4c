"""Keep a protocol's node-side roles alive across Flower's per-message ClientApp processes.

Flower 1.41's SuperNode starts a fresh ``flwr-clientapp`` process for every message, so a
role object (a SecSV client with its BFV keys and plan, a PFL decryptor, an auxiliary
server holding encrypted models) cannot live in the ClientApp. Writing every role's full
state to disk and reading it back on every message would be slow (keys, ciphertexts) and
would put secrets in files. Instead each SuperNode gets one **node host**: a small process
of its own that holds, per run, a :class:`RunState` (the protocol's objects) in memory and
runs the protocol's step functions on it. The ClientApp process only forwards the
message's bytes to the host over a Unix socket and returns the host's answer.

* The socket lives in a directory of this user only (mode 0700) and the host refuses a
  peer with another uid (``SO_PEERCRED``); nothing listens on the network.
* The host ends when the run's last step says so (:attr:`RunState.done` for every run it
  holds), after ``host-idle-timeout`` seconds (node config, default 900) without a
  message, or within a second of the SuperNode's SuperExec (the ClientApp's parent,
  which itself exits with its SuperNode) going away. So a killed SuperNode leaves no host
  behind.
* Under Flower's simulation engine, in-process test grids, or with node config
  ``role-host = "inline"``, step functions run in the calling process on a module-level
  table (same code path otherwise).

A protocol registers step functions (``(blobs, meta, state) -> (blobs, meta)``) with
:func:`hosted`; a raised exception becomes an ``ok=False`` reply carrying only a check
name (:func:`fedsec.runtime.flower_client.check_name`), the details go to the node's log,
and the run's state on this node is dropped (as the AUC app deletes its state file after
any failure).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import logging
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedsec.errors import ProtocolError
from fedsec.protocol import wire

__all__ = ["RunState", "Step", "hosted", "host_socket_path", "HostUnavailable",
           "inline_state", "DEFAULT_IDLE_TIMEOUT"]

#: Seconds a node host waits for the next message before it exits.
DEFAULT_IDLE_TIMEOUT = 900.0
_CALL = "host/call"
_ANSWER = "host/answer"
_LEN = struct.Struct(">Q")
_MAX_FRAME = wire.DEFAULT_MAX_BYTES + (1 << 20)
_START_TIMEOUT = 30.0


@dataclass
class RunState:
    """One run's node-side state: the protocol keeps its role objects in :attr:`data`.

    ``node_config`` is this node's own (files, policy, role); ``run_config`` is the
    server's choice and must be checked against the node's policy before it is used.
    A step sets :attr:`done` when the run is over on this node (the state is then dropped
    after its reply).
    """

    run_id: int
    node_id: int
    node_config: dict[str, Any]
    run_config: dict[str, Any]
    data: dict[str, Any] = field(default_factory=dict)
    done: bool = False


#: A node-side protocol step: the message's blobs and metadata, this run's state ->
#: the reply's blobs and metadata (``ok`` is added by the runtime).
Step = Callable[[list[bytes], dict[str, Any], RunState], tuple[list[bytes], dict[str, Any]]]


class HostUnavailable(ProtocolError):
    """The node host could not be started or reached."""


# ---------------------------------------------------------------- the step table
_RUNS: dict[tuple[int, int], RunState] = {}
_LOCK = threading.Lock()


def inline_state() -> dict[tuple[int, int], RunState]:
    """The in-process table of run states (tests inspect it)."""
    return _RUNS


def _resolve(ref: str) -> Step:
    module, _, attr = ref.partition(":")
    if not module or not attr:
        raise ProtocolError("bad step reference")
    fn: Step = getattr(importlib.import_module(module), attr)
    return fn


def _logger(node_config: Mapping[str, Any]) -> logging.Logger:
    from fedsec.runtime.flower_client import _node_logger

    return _node_logger(node_config)


def _run_step(ref: str, step: str, run_id: int, node_id: int, node_config: dict[str, Any],
              run_config: dict[str, Any], blobs: list[bytes], meta: dict[str, Any]
              ) -> tuple[list[bytes], dict[str, Any]]:
    """Run one step on this process's table; never raises (failures -> check names)."""
    from fedsec.runtime.flower_client import check_name

    key = (int(run_id), int(node_id))
    with _LOCK:
        state = _RUNS.get(key)
        if state is None:
            state = RunState(int(run_id), int(node_id), dict(node_config), dict(run_config))
            _RUNS[key] = state
    try:
        out_blobs, out_meta = _resolve(ref)(blobs, meta, state)
        if "ok" in out_meta:
            raise ProtocolError("a step may not set 'ok'")
        if state.done:
            _RUNS.pop(key, None)
        return list(out_blobs), {"ok": True, **out_meta}
    except Exception as exc:  # noqa: BLE001 - every failure becomes a check name
        check = check_name(exc)
        _logger(node_config).error(
            "step %s failed, check %s (only the check name goes to the server): %s: %s",
            step, check, type(exc).__name__, exc, exc_info=check == "internal-error")
        _RUNS.pop(key, None)
        return [], {"ok": False, "check": check}


# ---------------------------------------------------------------- the socket
def _runtime_dir() -> Path:
    d = Path(tempfile.gettempdir()) / f"fedsec-host-{os.getuid()}"
    d.mkdir(mode=0o700, exist_ok=True)
    st = d.stat()
    if st.st_uid != os.getuid():
        raise HostUnavailable(f"{d} belongs to another user")
    if st.st_mode & 0o077:
        os.chmod(d, 0o700)
    return d


def host_socket_path(node_config: Mapping[str, Any], node_id: int) -> Path:
    """The node host's socket for this node (short: Unix socket paths are limited)."""
    tag = hashlib.sha256(f"{node_config.get('state-dir', '')}|{int(node_id)}".encode()
                         ).hexdigest()[:20]
    return _runtime_dir() / f"{tag}.sock"


def _send_frame(sock: socket.socket, data: bytes) -> None:
    sock.sendall(_LEN.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ProtocolError("node host connection closed")
        buf += chunk
    return bytes(buf)


def _recv_frame(sock: socket.socket) -> bytes:
    (n,) = _LEN.unpack(_recv_exact(sock, _LEN.size))
    if n > _MAX_FRAME:
        raise ProtocolError("node host frame too large")
    return _recv_exact(sock, n)


def _connect(path: Path, timeout: float) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(str(path))
    except OSError:
        s.close()
        raise
    return s


def _start_host(path: Path, node_config: Mapping[str, Any]) -> None:
    idle = float(node_config.get("host-idle-timeout", DEFAULT_IDLE_TIMEOUT))
    log_path = node_config.get("log-path")
    out: Any = subprocess.DEVNULL
    if log_path:
        fd = os.open(str(log_path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        out = os.fdopen(fd, "ab")
    try:
        # the launcher forks the host and exits at once (the host is nobody's child)
        subprocess.run(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "fedsec.runtime.node_host", "--socket", str(path),
             "--watch", str(os.getppid()), "--idle", repr(idle), "--detach"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
            close_fds=True, timeout=_START_TIMEOUT, check=False)
    finally:
        if out is not subprocess.DEVNULL:
            out.close()
    deadline = time.monotonic() + _START_TIMEOUT
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            _connect(path, 1.0).close()
            return
        time.sleep(0.05)
    raise HostUnavailable("the node host did not start")


def _call_host(ref: str, step: str, run_id: int, node_id: int,
               node_config: dict[str, Any], run_config: dict[str, Any], blobs: list[bytes],
               meta: dict[str, Any], timeout: float) -> tuple[list[bytes], dict[str, Any]]:
    path = host_socket_path(node_config, node_id)
    frame = wire.encode(_CALL, {
        "ref": ref, "step": step, "run": int(run_id), "node": int(node_id),
        "node_config": node_config, "run_config": run_config, "meta": meta}, blobs)
    for attempt in (0, 1):
        try:
            sock = _connect(path, timeout)
        except OSError:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            _start_host(path, node_config)
            sock = _connect(path, timeout)
        try:
            with sock:
                _send_frame(sock, frame)
                data = _recv_frame(sock)
            break
        except (ConnectionResetError, BrokenPipeError, ProtocolError):
            # a host that was closing (its last run had ended) when we connected: it
            # never ran the step; start a new one and try once more
            if attempt:
                raise
            time.sleep(0.2)
    ans = wire.decode(data, expect=_ANSWER, max_bytes=_MAX_FRAME)
    meta_out = ans.meta.get("meta")
    if not isinstance(meta_out, dict):
        raise ProtocolError("malformed node host answer")
    return list(ans.blobs), meta_out


def _plain(cfg: Mapping[str, Any]) -> dict[str, Any]:
    return {str(k): v for k, v in dict(cfg).items()}


def _mode(node_config: Mapping[str, Any]) -> str:
    from fedsec.runtime.flower_client import in_simulation_engine

    mode = str(node_config.get("role-host", "") or "process")
    if mode not in ("process", "inline"):
        raise ValueError("node config 'role-host' must be 'process' or 'inline'")
    return "inline" if in_simulation_engine() else mode


def hosted(step: str, ref: str, *, timeout: float = 3600.0) -> Callable[[Any, Any], Any]:
    """A ClientApp handler that runs the step function ``ref`` (``"module:function"``)
    on this node's run state, in the node host (or inline, see the module docs)."""

    def handler(msg: Any, context: Any) -> Any:
        from fedsec.runtime.flower_io import get_blobs, get_meta, make_content, reply

        node_config = _plain(context.node_config)
        run_config = _plain(context.run_config)
        try:
            blobs, meta = get_blobs(msg.content), get_meta(msg.content)
            if _mode(node_config) == "inline":
                out = _run_step(ref, step, context.run_id, context.node_id, node_config,
                                run_config, blobs, meta)
            else:
                out = _call_host(ref, step, context.run_id, context.node_id, node_config,
                                 run_config, blobs, meta, timeout)
        except Exception as exc:  # noqa: BLE001 - a handler never raises to Flower
            from fedsec.runtime.flower_client import check_name

            with contextlib.suppress(Exception):
                _logger(node_config).error("step %s failed before the protocol: %s: %s",
                                           step, type(exc).__name__, exc)
            out = ([], {"ok": False, "check": check_name(exc)})
        return reply(msg, make_content(*out))

    handler.__name__ = f"handle_{step.replace('-', '_')}"
    return handler


# ---------------------------------------------------------------- the host process
def _peer_ok(conn: socket.socket) -> bool:
    try:
        cred = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                               struct.calcsize("3i"))
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return True
    uid = int(struct.unpack("3i", cred)[1])
    return uid == os.getuid()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover
        return True
    return True


def serve(path: Path, watch: int, idle: float) -> None:
    """The node host's loop (one connection at a time: a SuperNode runs one message at
    a time)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        srv.bind(str(path))
    finally:
        os.umask(old)
    srv.listen(4)
    srv.settimeout(1.0)
    last = time.monotonic()
    served = 0
    try:
        while True:
            if watch > 1 and not _alive(watch):
                return
            if time.monotonic() - last > idle:
                return
            if served and not _RUNS:
                return  # every run it held is over
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            with conn:
                if not _peer_ok(conn):
                    continue
                conn.settimeout(None)
                try:
                    call = wire.decode(_recv_frame(conn), expect=_CALL, max_bytes=_MAX_FRAME)
                    m = call.meta
                    out_blobs, out_meta = _run_step(
                        str(m["ref"]), str(m["step"]), int(m["run"]), int(m["node"]),
                        dict(m["node_config"]), dict(m["run_config"]), list(call.blobs),
                        dict(m["meta"]))
                    _send_frame(conn, wire.encode(_ANSWER, {"meta": out_meta}, out_blobs))
                except (ProtocolError, KeyError, TypeError, ValueError, OSError):
                    continue
            served += 1
            last = time.monotonic()
    finally:
        srv.close()
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m fedsec.runtime.node_host")
    ap.add_argument("--socket", required=True)
    ap.add_argument("--watch", type=int, default=0)
    ap.add_argument("--idle", type=float, default=DEFAULT_IDLE_TIMEOUT)
    ap.add_argument("--detach", action="store_true")
    args = ap.parse_args(argv)
    if args.detach and os.fork() > 0:
        os._exit(0)
    serve(Path(args.socket), args.watch, args.idle)


if __name__ == "__main__":
    main()
