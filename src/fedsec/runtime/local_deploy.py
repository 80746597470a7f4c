"""Run a Flower deployment on this machine: TLS material, a SuperLink, SuperNodes and
``flwr run``, each as a subprocess in its own session, all stopped (children included).

This is what ``fedsec flower local`` and the deployment tests use to play every role of
a federation as separate processes on 127.0.0.1. A real deployment runs the same
commands on one machine per party (see docs/run-across-machines.md).

Every wait is bounded: ``START_TIMEOUT`` for readiness, ``STOP_TIMEOUT`` per shutdown
phase; callers pass their own deadline to :meth:`Deployment.wait_result`.
:meth:`Deployment.close` signals every process it started and every descendant (Flower
starts SuperExec and app processes in new sessions), then kills what is left.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fedsec.errors import ProtocolError

__all__ = ["Deployment", "LocalNode", "LocalRun", "run_local", "run_local_sequence",
           "write_app",
           "leftover_processes", "make_tls", "free_ports", "exe", "descendants", "alive",
           "toml_value", "toml_pairs", "HOST", "START_TIMEOUT", "STOP_TIMEOUT"]

BIN = Path(sys.executable).parent
HOST = "127.0.0.1"

START_TIMEOUT = 20.0  # SuperLink / SuperNode readiness
STOP_TIMEOUT = 5.0
SUPERNODE_MAX_WAIT = 45.0  # a SuperNode gives up reconnecting after this long
#: SuperExec's task poll interval (seconds) for the SuperNodes started here.
TASK_POLL_INTERVAL = 0.05


def exe(name: str) -> str:
    """A console script of this venv (Flower's processes must come from the same one)."""
    path = BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found next to {sys.executable} or on PATH: "
                                "install fedsec's Flower extra (pip install 'fedsec[flower]')")
    return found


def free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def make_tls(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for localhost/127.0.0.1 (ECDSA P-256)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fedsec test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(HOST))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_path, cert_path, key_path = (directory / n for n in ("ca.crt", "server.pem", "server.key"))
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    return ca_path, cert_path, key_path


def descendants(pid: int) -> list[int]:
    """All descendants of ``pid`` (Linux /proc), e.g. SuperExec and app processes,
    which Flower starts in new sessions, out of our process group."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        parent[int(entry.name)] = int(fields[1])
    out: list[int] = []
    frontier = [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out.extend(kids)
        frontier.extend(kids)
    return out


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def toml_value(v: Any) -> str:
    """A run-config / node-config value as TOML (strings single-quoted)."""
    if isinstance(v, str):
        return "'" + v + "'"
    if isinstance(v, bool):
        return "true" if v else "false"
    return json.dumps(v)


def toml_pairs(values: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={toml_value(v)}" for k, v in values.items())


class Deployment:
    """SuperLink + SuperNodes as subprocesses, each in its own session."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.logs = root / "logs"
        self.logs.mkdir(parents=True)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logfiles: list[Any] = []
        self.flwr_home = root / "flwr-home"
        self.flwr_home.mkdir()
        self.env = {
            **os.environ,
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "FLWR_HOME": str(self.flwr_home),
            "FLWR_TELEMETRY_ENABLED": "0",
            "FLWR_DISABLE_UPDATE_CHECK": "1",
            "PYTHONUNBUFFERED": "1",
            # SuperExec's pull interval for ClientApp tasks (default 1 s): a message
            # otherwise waits up to a second before its ClientApp process starts
            "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": os.environ.get(
                "FLWR_SUPEREXEC_TASK_POLL_INTERVAL", str(TASK_POLL_INTERVAL)),
        }
        self.port = 0
        self.ca: Path | None = None
        self.node_ids: dict[str, int] = {}
        self.startup_s = 0.0

    # -- processes
    def start(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = (self.logs / f"{name}.log").open("wb")
        self._logfiles.append(log)
        proc = subprocess.Popen(
            argv,
            env=self.env,
            cwd=self.root,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL) -> None:
        """Signal a process and every descendant, once each (Flower's handler treats
        a second SIGTERM as "die now", skipping the graceful node deactivation)."""
        proc = self.procs[name]
        groups: set[int] = set()
        for pid in [proc.pid, *descendants(proc.pid)]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                groups.add(os.getpgid(pid))
        groups.discard(os.getpgrp())  # never our own group (pytest)
        for pgid in groups:  # we start each process in a new session; so does Flower
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)

    def close(self) -> None:
        everyone: list[int] = []
        for proc in self.procs.values():
            everyone += [proc.pid, *descendants(proc.pid)]
        for name in reversed(list(self.procs)):  # SuperNodes first, SuperLink last
            if self.procs[name].poll() is None:
                self.kill(name, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        while time.monotonic() < deadline and any(alive(p) for p in everyone):
            for proc in self.procs.values():
                proc.poll()  # reap
            time.sleep(0.1)
        for pid in everyone:
            if alive(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=STOP_TIMEOUT)
        # processes that left the tree (a node host detaches from the ClientApp that
        # started it) still carry this deployment's FLWR_HOME: they end with their
        # SuperNode within a second; whatever is left after that is stopped here
        marker = str(self.flwr_home)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and leftover_processes(marker):
            time.sleep(0.1)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in leftover_processes(marker):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            stop = time.monotonic() + STOP_TIMEOUT
            while time.monotonic() < stop and leftover_processes(marker):
                time.sleep(0.1)
        for f in self._logfiles:
            f.close()

    def _wait(
        self, what: str, cond: Callable[[], bool], timeout: float, watch: str | None = None
    ) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if watch is not None and self.procs[watch].poll() is not None:
                raise RuntimeError(
                    f"{watch} exited while waiting for {what}:\n" + self.log(watch)[-3000:]
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
            time.sleep(0.1)

    # -- deployment engine
    def start_superlink_tls(self, ca: Path, cert: Path, key: Path) -> None:
        self.ca = ca
        (self.port,) = free_ports(1)
        self.start(
            "superlink",
            [
                exe("flower-superlink"),
                "--ssl-ca-certfile",
                str(ca),
                "--ssl-certfile",
                str(cert),
                "--ssl-keyfile",
                str(key),
                "--host",
                HOST,
                "--port",
                str(self.port),
                "--disable-runtime-dependency-installation",
            ],
        )
        ctx = ssl.create_default_context(cafile=str(ca))

        def tls_up() -> bool:
            try:
                with (
                    socket.create_connection((HOST, self.port), timeout=0.5) as s,
                    ctx.wrap_socket(s, server_hostname=HOST),
                ):
                    return True
            except (OSError, ssl.SSLError):
                return False

        self._wait("SuperLink TLS port", tls_up, START_TIMEOUT, watch="superlink")
        (self.flwr_home / "config.toml").write_text(
            "[superlink]\n"
            'default = "fedsec-tls"\n\n'
            "[superlink.fedsec-tls]\n"
            f'address = "{HOST}:{self.port}"\n'
            f'root-certificates = "{ca}"\n',
            encoding="utf-8",
        )

    def start_supernode(self, name: str, node_config: Mapping[str, Any]) -> None:
        """A SuperNode over TLS with ``--node-config`` built from ``node_config``."""
        assert self.ca is not None
        (runtime_port,) = free_ports(1)
        self.start(
            name,
            [
                exe("flower-supernode"),
                "--superlink",
                f"{HOST}:{self.port}",
                "--root-certificates",
                str(self.ca),
                "--node-config",
                toml_pairs(node_config),
                "--host",
                HOST,
                "--port",
                str(runtime_port),  # local Runtime API (SuperExec)
                "--max-wait-time",
                str(SUPERNODE_MAX_WAIT),
            ],
        )

    def wait_supernodes(self, names: list[str]) -> dict[str, int]:
        ids: dict[str, int] = {}
        for name in names:
            def registered(n: str = name) -> bool:
                return "SuperNode ID:" in self.log(n)

            self._wait(f"{name} registration", registered, START_TIMEOUT, watch=name)
            line = next(x for x in self.log(name).splitlines() if "SuperNode ID:" in x)
            ids[name] = int(line.rsplit(":", 1)[1])
        self.node_ids.update(ids)
        return ids

    # -- simulation engine
    def start_superlink_simulation(self) -> None:
        (self.port,) = free_ports(1)
        self.start(
            "superlink",
            [
                exe("flower-superlink"),
                "--insecure",
                "--simulation",
                "--host",
                HOST,
                "--port",
                str(self.port),
                "--disable-runtime-dependency-installation",
            ],
        )

        def http_up() -> bool:
            try:
                with socket.create_connection((HOST, self.port), timeout=0.5):
                    return True
            except OSError:
                return False

        self._wait("simulation SuperLink port", http_up, START_TIMEOUT, watch="superlink")
        (self.flwr_home / "config.toml").write_text(
            "[superlink]\n"
            'default = "fedsec-sim"\n\n'
            "[superlink.fedsec-sim]\n"
            f'address = "{HOST}:{self.port}"\n'
            "insecure = true\n",
            encoding="utf-8",
        )

    # -- runs
    def flwr_run(
        self,
        app_dir: Path,
        connection: str,
        run_config: Mapping[str, Any],
        extra: tuple[str, ...] = (),
    ) -> int:
        """``flwr run <app_dir> <connection> --run-config ...``; returns the run id."""
        res = subprocess.run(
            [
                exe("flwr"),
                "run",
                str(app_dir),
                connection,
                "--run-config",
                toml_pairs(run_config),
                "--format",
                "json",
                *extra,
            ],
            env=self.env,
            cwd=self.root,
            capture_output=True,
            timeout=START_TIMEOUT,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        out = res.stdout.decode(errors="replace")
        try:
            doc = json.loads(out[out.index("{") :])
        except ValueError:
            doc = {}
        if res.returncode != 0 or not doc.get("success"):
            raise RuntimeError(
                f"flwr run failed ({res.returncode}): {out}\n{res.stderr.decode(errors='replace')}"
            )
        return int(doc["run-id"])

    def wait_result(self, path: Path, statuses: set[str], timeout: float) -> dict[str, Any]:
        """Poll the ServerApp's result JSON until its status is one of ``statuses``."""
        found: dict[str, Any] = {}

        def ready() -> bool:
            nonlocal found
            try:
                found = json.loads(path.read_text())
            except (OSError, ValueError):
                return False
            return found.get("status") in statuses

        try:
            self._wait(f"result status in {sorted(statuses)}", ready, timeout, watch="superlink")
        except TimeoutError as err:
            raise TimeoutError(
                f"{err}; last result: {found}\nSuperLink log tail:\n"
                + self.log("superlink")[-3000:]
            ) from None
        return found


# ====================================================================== one command
_APP_PYPROJECT = """[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "fedsec-local"
version = "0.1.0"
description = "fedsec protocols on Flower (generated by fedsec flower local)"
license = { file = "LICENSE" }
dependencies = ["flwr>=1.41.0,<1.42", "fedsec"]

[tool.hatch.build.targets.wheel]
packages = ["fedsec_local"]

[tool.flwr.app]
publisher = "fedsec"
fab-format-version = 1
flwr-version-target = "1.41.0"
fab-include = ["fedsec_local/**/*.py", "LICENSE"]

[tool.flwr.app.components]
serverapp = "fedsec_local.server_app:app"
clientapp = "fedsec_local.client_app:app"

[tool.flwr.app.config]
"""


_LICENSE = """Copyright fedsec contributors.

Licensed under the Apache License, Version 2.0 (the "License"); you may not use
this file except in compliance with the License. You may obtain a copy of the
License at http://www.apache.org/licenses/LICENSE-2.0
"""


def write_app(directory: Path, run_config: Mapping[str, Any]) -> Path:
    """A minimal Flower app project (FAB source) whose ServerApp and ClientApp are
    fedsec's (:mod:`fedsec.runtime.flower_apps`), declaring ``run_config`` (Flower
    accepts only declared run-config keys); every SuperNode and the SuperLink machine
    need fedsec installed."""
    pkg = directory / "fedsec_local"
    pkg.mkdir(parents=True, exist_ok=True)
    config = "".join(f"{k} = {toml_value(v).replace(chr(39), chr(34))}\n"
                     for k, v in run_config.items())
    (directory / "pyproject.toml").write_text(_APP_PYPROJECT + config, encoding="utf-8")
    (directory / "LICENSE").write_text(_LICENSE, encoding="utf-8")
    (pkg / "__init__.py").write_text('"""fedsec on Flower."""\n', encoding="utf-8")
    (pkg / "server_app.py").write_text(
        "from fedsec.runtime.flower_apps import build_server_app\n\n"
        "app = build_server_app()\n", encoding="utf-8")
    (pkg / "client_app.py").write_text(
        "from fedsec.runtime.flower_apps import build_client_app\n\n"
        "app = build_client_app()\n", encoding="utf-8")
    return directory


@dataclass
class LocalNode:
    """One SuperNode of a local deployment: a name and its node config (paths on this
    machine, policy, role)."""

    name: str
    node_config: dict[str, Any]


@dataclass
class LocalRun:
    """What a local deployment run produced: the ServerApp's result document, each
    node's own result files (``state-dir``), the wall time and where it ran."""

    doc: dict[str, Any]
    node_results: dict[str, list[dict[str, Any]]]
    seconds: float
    workdir: Path
    leftover: list[int] = field(default_factory=list)


def leftover_processes(marker: str) -> list[int]:
    """Processes of this user whose environment contains ``marker`` (the deployment's
    ``FLWR_HOME``): what :meth:`Deployment.close` must leave none of."""
    found: list[int] = []
    needle = marker.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes() and alive(int(entry.name)):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def run_local(nodes: list[LocalNode], run_config: Mapping[str, Any], *, workdir: Path,
              timeout: float, say: Callable[[str], None] | None = None) -> LocalRun:
    """Start a SuperLink (TLS, certificates made in ``workdir``), one SuperNode per node
    and ``flwr run`` the fedsec app with ``run_config``; wait (at most ``timeout``
    seconds) for the ServerApp's result; stop every process (children included) and
    check that none is left. ``result-path`` is set here."""
    return run_local_sequence(nodes, [run_config], workdir=workdir, timeout=timeout,
                              say=say)[0]


def run_local_sequence(nodes: list[LocalNode], run_configs: Sequence[Mapping[str, Any]], *,
                       workdir: Path, timeout: float,
                       say: Callable[[str], None] | None = None) -> list[LocalRun]:
    """As :func:`run_local`, with several runs one after the other on the same SuperLink
    and SuperNodes (e.g. secure training, then contribution evaluation); a run that does
    not end ``done`` stops the sequence. Each run gets ``timeout`` seconds."""
    from fedsec.runtime.flower_client import NodeStore  # noqa: F401 - fail early if flwr missing

    def note(text: str) -> None:
        if say is not None:
            say(text)

    workdir.mkdir(parents=True, exist_ok=True)
    ca, cert, key = make_tls(workdir / "tls")
    keys: dict[str, Any] = {}
    for rc in run_configs:
        keys.update(rc)
    app = write_app(workdir / "app", {**keys, "result-path": ""})
    dep = Deployment(workdir / "flower")
    t0 = time.monotonic()
    docs: list[tuple[dict[str, Any], float]] = []
    try:
        note("starting a SuperLink (TLS, 127.0.0.1)")
        dep.start_superlink_tls(ca, cert, key)
        note(f"starting {len(nodes)} SuperNodes: {', '.join(n.name for n in nodes)}")
        for n in nodes:
            dep.start_supernode(n.name, n.node_config)
        dep.wait_supernodes([n.name for n in nodes])
        for i, rc in enumerate(run_configs):
            result = workdir / f"result-{i}.json"
            note(f"flwr run ({rc.get('protocol', 'auc')})")
            t1 = time.monotonic()
            dep.flwr_run(app, "fedsec-tls", {**rc, "result-path": str(result)})
            doc = dep.wait_result(result, {"done", "failed"}, timeout)
            docs.append((doc, time.monotonic() - t1))
            if doc.get("status") != "done":
                break
    except (RuntimeError, TimeoutError) as exc:
        raise ProtocolError(f"local Flower deployment: {exc}") from None
    finally:
        note("stopping every process")
        dep.close()
    seconds = time.monotonic() - t0
    node_results: dict[str, list[dict[str, Any]]] = {}
    for n in nodes:
        state = n.node_config.get("state-dir")
        found = []
        if state:
            for p in sorted(Path(str(state)).glob("run-*-node-*.result.json")):
                with contextlib.suppress(OSError, ValueError):
                    found.append(json.loads(p.read_text(encoding="utf-8")))
        node_results[n.name] = found
    left = leftover_processes(str(dep.flwr_home))
    out = [LocalRun(doc, node_results, secs, workdir, left) for doc, secs in docs]
    if out:
        out[0].seconds = seconds if len(out) == 1 else out[0].seconds
    return out
