"""The stand-in bytes protocol on Flower 1.41: records, simulation and deployment.

The deployment tests start a real SuperLink and three SuperNodes on 127.0.0.1 with
TLS (a throw-away CA made here with ``cryptography``), submit the app in
``examples/flower_standin`` with ``flwr run``, and read the JSON the ServerApp
writes to the ``result-path`` run-config value. Every wait is bounded and every
process started (and each one they spawn: SuperExec, ServerApp, ClientApp) is
killed at teardown.
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
import warnings
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():
    # flwr -> typer -> click 8.5 warns on import (DeprecationWarning); see flower_io.
    warnings.simplefilter("ignore", DeprecationWarning)
    pytest.importorskip(
        "flwr", reason="Flower is optional: pip install 'flwr==1.41.0' (fedsec[flower])"
    )

from fedsec.runtime import flower_io  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
APP_DIR = REPO / "examples" / "flower_standin"
BIN = Path(sys.executable).parent
HOST = "127.0.0.1"

SECRETS = [7, -1234567, 2**40 + 3]
PAD_BYTES = 200_000  # each hello carries ~200 KB, like a CKKS ciphertext

START_TIMEOUT = 20.0  # SuperLink / SuperNode readiness
RUN_TIMEOUT = 45.0  # one `flwr run` to a final result
STOP_TIMEOUT = 5.0


def _exe(name: str) -> str:
    path = BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} not found next to {sys.executable} or on PATH")
    return found


# ----------------------------------------------------------------- records (no I/O)
def test_blob_records_roundtrip_in_order() -> None:
    blobs = [b"", b"\x00" * 3, os.urandom(200_000), os.urandom(6 * 1024 * 1024)]
    content = flower_io.make_content(blobs, meta={"step": 2, "tag": "x", "raw": b"\x01"})
    assert flower_io.get_blobs(content) == blobs
    assert flower_io.get_meta(content) == {"step": 2, "tag": "x", "raw": b"\x01"}
    # the >5 MiB blob is split into Flower ArrayChunks, the rest are single objects
    arr = content.array_records[flower_io.BLOBS_KEY]["3"]
    assert len(arr.slice_array()) == 2


def test_blob_records_reject_malformed() -> None:
    from flwr.app import Array, ArrayRecord, RecordDict

    with pytest.raises(flower_io.ProtocolError):
        flower_io.get_blobs(RecordDict())
    rd = RecordDict(
        {
            flower_io.BLOBS_KEY: ArrayRecord(
                {"1": Array(dtype="uint8", shape=(1,), stype=flower_io.RAW_STYPE, data=b"x")}
            )
        }
    )
    with pytest.raises(flower_io.ProtocolError):
        flower_io.get_blobs(rd)
    with pytest.raises(flower_io.ProtocolError):
        flower_io.get_blob(flower_io.make_content([b"a", b"b"]))
    with pytest.raises(TypeError):
        flower_io.make_content(["text"])  # type: ignore[list-item]


# ------------------------------------------------------------------- process harness
def _free_ports(n: int) -> list[int]:
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


def _make_tls(directory: Path) -> tuple[Path, Path, Path]:
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
        (self.port,) = _free_ports(1)
        self.start(
            "superlink",
            [
                _exe("flower-superlink"),
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

    def start_supernode(self, i: int, data_path: Path) -> None:
        assert self.ca is not None
        (runtime_port,) = _free_ports(1)
        self.start(
            f"supernode-{i}",
            [
                _exe("flower-supernode"),
                "--superlink",
                f"{HOST}:{self.port}",
                "--root-certificates",
                str(self.ca),
                "--node-config",
                f"data-path='{data_path}'",
                "--host",
                HOST,
                "--port",
                str(runtime_port),  # local Runtime API (SuperExec)
                "--max-wait-time",
                str(RUN_TIMEOUT),
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
        return ids

    # -- simulation engine
    def start_superlink_simulation(self) -> None:
        (self.port,) = _free_ports(1)
        self.start(
            "superlink",
            [
                _exe("flower-superlink"),
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
        self, connection: str, run_config: dict[str, Any], extra: tuple[str, ...] = ()
    ) -> int:
        overrides = " ".join(f"{k}={_toml(v)}" for k, v in run_config.items())
        res = subprocess.run(
            [
                _exe("flwr"),
                "run",
                str(APP_DIR),
                connection,
                "--run-config",
                overrides,
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


def _toml(v: Any) -> str:
    if isinstance(v, str):
        return "'" + v + "'"
    return json.dumps(v)


def _write_secrets(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, s in enumerate(SECRETS):
        p = directory / f"node_{i}.csv"
        p.write_text(f"value\n{s}\n", encoding="utf-8")
        paths.append(p)
    return paths


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return _make_tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def deployment(tmp_path: Path, tls: tuple[Path, Path, Path]) -> Iterator[Deployment]:
    """SuperLink (TLS) + 3 SuperNodes, each reading its secret from its own CSV."""
    dep = Deployment(tmp_path)
    try:
        t0 = time.monotonic()
        dep.start_superlink_tls(*tls)
        for i, path in enumerate(_write_secrets(tmp_path / "data")):
            dep.start_supernode(i, path)
        dep.node_ids = dep.wait_supernodes([f"supernode-{i}" for i in range(3)])
        dep.startup_s = time.monotonic() - t0
        yield dep
    finally:
        dep.close()


# ----------------------------------------------------------------------- deployment
def test_standin_deployment_tls(deployment: Deployment, tmp_path: Path) -> None:
    result = tmp_path / "result.json"
    t0 = time.monotonic()
    deployment.flwr_run("fedsec-tls", {"result-path": str(result), "pad-bytes": PAD_BYTES})
    doc = deployment.wait_result(result, {"done", "failed"}, RUN_TIMEOUT)
    elapsed = time.monotonic() - t0
    assert doc["status"] == "done", doc
    assert doc["sum"] == sum(SECRETS)
    assert sorted(doc["nodes"]) == sorted(deployment.node_ids.values())
    assert doc["hello_bytes"] == [32 + PAD_BYTES] * 3
    print(
        f"startup {deployment.startup_s:.1f}s, run {elapsed:.1f}s, "
        f"step1 {doc['step1']['elapsed']}s, step2 {doc['step2']['elapsed']}s"
    )


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["crash", "shutdown"])
def test_standin_deployment_node_failure(
    deployment: Deployment, tmp_path: Path, sig: signal.Signals
) -> None:
    """A SuperNode dies between step 1 and step 2; the ServerApp must fail closed
    within the step timeout instead of waiting for a reply forever."""
    result = tmp_path / "result.json"
    step_timeout = 8.0
    deployment.flwr_run(
        "fedsec-tls",
        {
            "result-path": str(result),
            "pad-bytes": 1000,
            "step-timeout": step_timeout,
            "pause-after-hello": 2.0,
        },
    )
    deployment.wait_result(result, {"hello-done"}, RUN_TIMEOUT)
    victim = deployment.node_ids["supernode-2"]
    deployment.kill("supernode-2", sig)
    t_kill = time.monotonic()
    doc = deployment.wait_result(result, {"done", "failed"}, step_timeout + 20)
    detected = time.monotonic() - t_kill
    print(f"{sig.name}: failure reported {detected:.1f}s after the kill: {json.dumps(doc)}")
    assert doc["status"] == "failed", doc
    assert "sum" not in doc
    step2 = doc["step2"]
    if sig == signal.SIGKILL:
        # The SuperLink still believes the node is online (2 missed 30 s heartbeats
        # are needed), accepts the instruction, and nobody replies: timeout.
        assert step2["missing"] == [victim], doc
        assert step2["undelivered"] == [] and step2["errors"] == {}
        assert step_timeout - 0.5 <= step2["elapsed"] <= step_timeout + 5
    else:
        # A clean SuperNode shutdown deactivates the node: the SuperLink refuses the
        # instruction at push time ("Invalid destination node ID"), no waiting.
        assert step2["undelivered"] == [victim], doc
        assert step2["missing"] == [] and step2["errors"] == {}
        assert step2["elapsed"] < step_timeout
    assert detected < step_timeout + 20


# ----------------------------------------------------------------------- simulation
def test_standin_simulation(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pytest.importorskip("ray", reason="simulation engine needs flwr[simulation] (Ray)")
    data = tmp_path / "data"
    _write_secrets(data)
    result = tmp_path / "result.json"
    dep = Deployment(tmp_path / "sim")
    try:
        dep.start_superlink_simulation()
        t0 = time.monotonic()
        dep.flwr_run(
            "fedsec-sim",
            {"result-path": str(result), "sim-data-dir": str(data), "pad-bytes": PAD_BYTES},
            extra=("--federation-config", "num-supernodes=3"),
        )
        doc = dep.wait_result(result, {"done", "failed"}, 60.0)
        print(f"simulation run {time.monotonic() - t0:.1f}s: {doc}")
        assert doc["status"] == "done", doc
        assert doc["sum"] == sum(SECRETS)
    finally:
        dep.close()
