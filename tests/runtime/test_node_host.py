"""The node host keeps a run's node-side state across Flower's per-message ClientApp
processes, answers only through check names on failure, and leaves no process behind."""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    pytest.importorskip("flwr", reason="Flower is optional")
    from flwr.app import Context, Message, RecordDict
    from flwr.supercore.task_identity import TaskIdentity

from fedsec.runtime import flower_io  # noqa: E402
from fedsec.runtime.node_host import host_socket_path, hosted, inline_state  # noqa: E402


def _call(handler: Any, node_config: dict[str, Any], meta: dict[str, Any],
          blobs: list[bytes], run_id: int = 5) -> tuple[list[bytes], dict[str, Any]]:
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = run_id, 1, 1
    msg = Message(flower_io.make_content(blobs, meta), dst_node_id=3, message_type="query.x")
    msg.metadata.__dict__["_message_id"] = "m" * 32
    ctx = Context(run_id=run_id, node_id=3, node_config=node_config, state=RecordDict(),
                  run_config={"protocol": "demo"})
    out = handler(msg, ctx)
    return flower_io.get_blobs(out.content), flower_io.get_meta(out.content)


def _gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            # a host started by this test process stays a zombie until reaped: count it
            # as gone (under Flower its starter, the ClientApp process, exits at once)
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("mode", ["inline", "process"])
def test_state_survives_between_messages_and_ends_with_the_run(tmp_path: Path, mode: str):
    cfg = {"state-dir": str(tmp_path / "state"), "log-path": str(tmp_path / "node.log"),
           "role-host": mode}
    count = hosted("demo-count", "fedsec.testing.hostdemo:count")
    finish = hosted("demo-finish", "fedsec.testing.hostdemo:finish")
    blobs, meta = _call(count, cfg, {"add": 2}, [b"abc"])
    assert meta["ok"] and meta["n"] == 2 and blobs == [b"cba"]
    _, meta2 = _call(count, cfg, {"add": 5}, [])
    assert meta2["n"] == 7 and meta2["pid"] == meta["pid"]
    assert (meta["pid"] == os.getpid()) == (mode == "inline")
    _, end = _call(finish, cfg, {}, [])
    assert end == {"ok": True, "n": 7}
    assert (5, 3) not in inline_state()
    if mode == "process":
        assert _gone(meta["pid"], 5.0), "the node host outlived its only run"
        assert not host_socket_path(cfg, 3).exists()


def test_failure_answers_a_check_name_only_and_drops_the_run(tmp_path: Path):
    cfg = {"state-dir": str(tmp_path / "state"), "log-path": str(tmp_path / "node.log"),
           "role-host": "process"}
    count = hosted("demo-count", "fedsec.testing.hostdemo:count")
    fail = hosted("demo-fail", "fedsec.testing.hostdemo:fail")
    _, meta = _call(count, cfg, {"add": 1}, [], run_id=6)
    blobs, bad = _call(fail, cfg, {}, [], run_id=6)
    assert blobs == [] and bad == {"ok": False, "check": "protocol-error"}
    assert "secret detail 1234" in (tmp_path / "node.log").read_text()
    # the run's state is gone: counting starts again
    _, again = _call(count, cfg, {"add": 1}, [], run_id=6)
    assert again["n"] == 1
    _call(hosted("demo-finish", "fedsec.testing.hostdemo:finish"), cfg, {}, [], run_id=6)
    assert _gone(again["pid"], 5.0)


def test_host_exits_when_its_supernode_side_goes_away(tmp_path: Path):
    """The host watches the process that started it (the SuperExec under Flower)."""
    import subprocess
    import sys

    cfg = {"state-dir": str(tmp_path / "s"), "role-host": "process"}
    # a stand-in SuperExec: a child process that calls the handler, then exits
    code = (
        "import warnings; warnings.simplefilter('ignore')\n"
        "import sys, json\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_node_host import _call\n"
        "from fedsec.runtime.node_host import hosted\n"
        f"_, m = _call(hosted('demo-count', 'fedsec.testing.hostdemo:count'), {cfg!r}, {{}}, [])\n"
        "print(m['pid'])\n")
    parent = subprocess.run([sys.executable, "-c",
                             "import subprocess, sys; r = subprocess.run([sys.executable, "
                             f"'-c', {code!r}], capture_output=True, text=True); "
                             "print(r.stdout.strip() or r.stderr)"],
                            capture_output=True, text=True, timeout=60, check=True)
    pid = int(parent.stdout.strip().splitlines()[-1])
    assert _gone(pid, 5.0), "the node host outlived the process that started it"
