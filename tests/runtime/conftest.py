"""Process harness for Flower tests: TLS material, SuperLink/SuperNode subprocesses.

Fixtures
--------
``tls``
    A throw-away CA and a server certificate for ``localhost``/``127.0.0.1`` (ECDSA
    P-256, made with ``cryptography``), once per session.
``flower``
    A factory ``flower(root) -> Deployment``; every deployment it made is torn down
    (all processes, including the SuperExec/ServerApp/ClientApp processes Flower starts
    in other sessions) when the test ends.
``federation``
    A factory ``federation(root, names, quorum=None) -> Federation``: each party's
    identity made with ``fedsec identity init``, the roster with ``fedsec roster
    create`` (the documented commands), a data directory for the parties' CSVs and each
    party's node config (``data-path``, ``identity-path``, ``roster-path``,
    ``state-dir``, ``log-path``).
``local_grid``
    A factory ``local_grid(federation, run_config, ...) -> LocalGrid``: an in-process
    stand-in for Flower's ``Grid`` that hands every message to the real ClientApp
    handlers with each node's own ``Context`` (no processes, no network): the protocol
    flow, drop-outs and error replies in seconds.

Tests marked ``slow`` are skipped unless selected with ``-m slow`` (or any ``-m``
expression naming ``slow``).

Every wait is bounded: ``START_TIMEOUT`` for readiness, ``STOP_TIMEOUT`` per shutdown
phase, and callers pass their own deadline to :meth:`Deployment.wait_result`.
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
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from fedsec.cli import main as fedsec_main

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
HOST = "127.0.0.1"

START_TIMEOUT = 20.0  # SuperLink / SuperNode readiness
STOP_TIMEOUT = 5.0
SUPERNODE_MAX_WAIT = 45.0  # a SuperNode gives up reconnecting after this long


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: long multi-process Flower runs, deselected unless -m slow"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "slow" in (config.getoption("markexpr", "") or ""):
        return
    skip = pytest.mark.skip(reason="slow Flower test: run with -m slow")
    here = Path(__file__).parent
    for item in items:
        if "slow" in item.keywords and here in Path(item.path).parents:
            item.add_marker(skip)


def exe(name: str) -> str:
    """A console script of this venv (Flower's processes must come from the same one)."""
    path = BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} not found next to {sys.executable} or on PATH")
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


def _children(pid: int) -> list[int]:
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


def _alive(pid: int) -> bool:
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
        for pid in [proc.pid, *_children(proc.pid)]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                groups.add(os.getpgid(pid))
        groups.discard(os.getpgrp())  # never our own group (pytest)
        for pgid in groups:  # we start each process in a new session; so does Flower
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)

    def close(self) -> None:
        everyone: list[int] = []
        for proc in self.procs.values():
            everyone += [proc.pid, *_children(proc.pid)]
        for name in reversed(list(self.procs)):  # SuperNodes first, SuperLink last
            if self.procs[name].poll() is None:
                self.kill(name, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        while time.monotonic() < deadline and any(_alive(p) for p in everyone):
            for proc in self.procs.values():
                proc.poll()  # reap
            time.sleep(0.1)
        for pid in everyone:
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=STOP_TIMEOUT)
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
            self._wait(
                f"{name} registration",
                lambda n=name: "SuperNode ID:" in self.log(n),
                START_TIMEOUT,
                watch=name,
            )
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


@pytest.fixture(scope="session")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """``(ca.crt, server.pem, server.key)`` for 127.0.0.1/localhost."""
    return make_tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def flower() -> Iterator[Callable[[Path], Deployment]]:
    """Factory of :class:`Deployment` objects, all torn down after the test."""
    made: list[Deployment] = []

    def make(root: Path) -> Deployment:
        dep = Deployment(root)
        made.append(dep)
        return dep

    try:
        yield make
    finally:
        for dep in made:
            dep.close()


# --------------------------------------------------------------------- a federation
class Federation:
    """Identities, roster, data and node configs of ``names`` under ``root``."""

    def __init__(self, root: Path, names: list[str], quorum: int | None = None) -> None:
        self.root = root
        self.names = list(names)
        self.identity_dir = root / "identities"
        self.data_dir = root / "data"
        self.identity_dir.mkdir(parents=True)
        self.data_dir.mkdir(parents=True)
        for name in self.names:  # what each party does on its own machine
            assert fedsec_main(["identity", "init", name, "--out",
                                str(self.identity_path(name))]) == 0
        self.roster_path = self.identity_dir / "roster.json"
        entries = [str(self.identity_dir / f"{n}.pub.json") for n in self.names]
        extra = [] if quorum is None else ["--quorum", str(quorum)]
        assert fedsec_main(["roster", "create", *entries, *extra, "--out",
                            str(self.roster_path)]) == 0

    def identity_path(self, name: str) -> Path:
        return self.identity_dir / f"{name}.identity.json"

    def data_path(self, name: str) -> Path:
        return self.data_dir / f"{name}.csv"

    def state_dir(self, name: str) -> Path:
        return self.root / "state" / name

    def log_path(self, name: str) -> Path:
        return self.root / f"{name}.node.log"

    def node_config(self, name: str, **extra: Any) -> dict[str, Any]:
        """What ``flower-supernode --node-config`` gets on ``name``'s machine."""
        return {"data-path": str(self.data_path(name)),
                "identity-path": str(self.identity_path(name)),
                "roster-path": str(self.roster_path),
                "state-dir": str(self.state_dir(name)),
                "log-path": str(self.log_path(name)), **extra}


@pytest.fixture
def federation() -> Callable[..., Federation]:
    return Federation


# ------------------------------------------------------------ in-process Flower grid
class LocalGrid:
    """Flower's ``Grid`` interface over the real ClientApp, in this process.

    ``node_configs`` maps node ids to node configs. ``before_step(grid, step, nodes)``
    runs before each message round to ``nodes`` is handled (e.g. ``grid.kill(node)``);
    ``edit(step, node,
    blobs)`` may rewrite what the server sends (a deviating aggregator). ``kill(node,
    how)``: ``"silent"`` (crashed: messages are accepted, never answered) or
    ``"offline"`` (shut down: the SuperLink refuses messages). Every reply is kept in
    :attr:`replies` for inspection.
    """

    def __init__(self, node_configs: Mapping[int, dict[str, Any]],
                 run_config: Mapping[str, Any], *, run_id: int = 11,
                 before_step: Callable[[LocalGrid, str, list[int]], None] | None = None,
                 edit: Callable[[str, int, list[bytes]], list[bytes]] | None = None) -> None:
        from flwr.supercore.task_identity import TaskIdentity

        from fedsec.runtime.flower_apps import build_client_app

        # Flower's Message() reads the task's run and node from this process-wide identity
        TaskIdentity.run_id = run_id
        TaskIdentity.node_id = 1
        TaskIdentity.task_id = 1
        self.app = build_client_app()
        self.node_configs = dict(node_configs)
        self.run_config = dict(run_config)
        self.run_id = run_id
        self.before_step = before_step
        self.edit = edit
        self.silent: set[int] = set()
        self.offline: set[int] = set()
        self.replies: list[tuple[str, int, Any]] = []
        self._pending: dict[str, Any] = {}
        self._states: dict[int, Any] = {}

    def kill(self, node: int, how: str = "silent") -> None:
        (self.silent if how == "silent" else self.offline).add(node)

    def get_node_ids(self) -> list[int]:
        return [n for n in self.node_configs if n not in self.offline]

    def push_messages(self, messages: Any) -> list[str]:
        import uuid

        from flwr.app import Context, RecordDict

        from fedsec.runtime import flower_io

        messages = list(messages)
        step = messages[0].metadata.message_type.split(".", 1)[1] if messages else ""
        if self.before_step is not None:
            self.before_step(self, step, [m.metadata.dst_node_id for m in messages])
        ids: list[str] = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            if node in self.offline or node not in self.node_configs:
                ids.append("")
                continue
            msg.metadata.__dict__["_message_id"] = uuid.uuid4().hex
            ids.append(msg.metadata.message_id)
            if node in self.silent:
                continue
            if self.edit is not None:
                blobs = self.edit(step, node, flower_io.get_blobs(msg.content))
                flower_io.put_blobs(msg.content, blobs)
            ctx = Context(run_id=self.run_id, node_id=node,
                          node_config=dict(self.node_configs[node]),
                          state=self._states.setdefault(node, RecordDict()),
                          run_config=dict(self.run_config))
            answer = self.app(msg, ctx)
            self.replies.append((step, node, answer))
            self._pending[msg.metadata.message_id] = answer
        return ids

    def pull_messages(self, message_ids: Any) -> list[Any]:
        return [self._pending.pop(i) for i in list(message_ids) if i in self._pending]


@pytest.fixture
def local_grid() -> Callable[..., LocalGrid]:
    return LocalGrid
