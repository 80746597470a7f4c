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

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from fedsec.cli import main as fedsec_main
from fedsec.runtime import local_deploy
from fedsec.runtime.local_deploy import (  # noqa: F401 - the tests' harness
    HOST,
    START_TIMEOUT,
    STOP_TIMEOUT,
    Deployment,
    free_ports,
    make_tls,
    toml_pairs,
    toml_value,
)


def exe(name: str) -> str:
    """A console script of this venv, or skip the test."""
    try:
        return local_deploy.exe(name)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))

REPO = Path(__file__).resolve().parents[2]


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
        from fedsec.runtime.node_host import inline_state

        inline_state().clear()  # node-side state of earlier in-process runs
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
