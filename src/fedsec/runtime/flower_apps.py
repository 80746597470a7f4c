"""One Flower app for every fedsec protocol: the ServerApp picks the protocol from the run
config, the ClientApp routes each message to the protocol module that handles it.

A deployment installs one FAB (``examples/fedsec-flower``) on the SuperLink and every
SuperNode; which protocol runs is the run config's ``protocol`` key (default ``"auc"``),
and which part a SuperNode plays (a party, an auxiliary server, a decryptor) is its own
node config, never the server's word.

Registry
--------
:data:`PROTOCOLS` maps a protocol name to the module of its ServerApp side (which has
``main(grid, context)``); :data:`CLIENT_STEPS` maps every ClientApp message action
(``query.<action>``) to ``"module:function"``. Handlers are imported when their first
message arrives, so a ClientApp process (Flower starts one per message) imports only the
protocol it serves. An action belongs to exactly one protocol: new protocols prefix
their actions (``dpauc_submit``; Flower wants Python identifiers); the AUC steps keep
their historical names.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any

with warnings.catch_warnings():
    # flwr 1.41 -> typer -> click 8.5 warns on import; see fedsec.runtime.flower_io.
    warnings.simplefilter("ignore", DeprecationWarning)
    from flwr.app import Context, Message
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp

__all__ = ["PROTOCOLS", "CLIENT_STEPS", "protocol_of", "build_server_app",
           "build_client_app"]

#: protocol name -> module with the ServerApp's ``main(grid, context)``.
PROTOCOLS: dict[str, str] = {
    "auc": "fedsec.runtime.flower_server",
    "ping": "fedsec.runtime.flower_ping",
    "fedavg": "fedsec.runtime.flower_fedavg",
    "pfl": "fedsec.runtime.flower_pfl",
    "dpauc": "fedsec.runtime.flower_dpauc",
    "hesv": "fedsec.runtime.flower_hesv",
    "secsv": "fedsec.runtime.flower_secsv",
    "secretsv": "fedsec.runtime.flower_secretsv",
}

_AUC = "fedsec.runtime.flower_client"
#: ClientApp action -> ``"module:function"`` (a ``(Message, Context) -> Message``).
CLIENT_STEPS: dict[str, str] = {
    **{step: f"{_AUC}:handle_{step}" for step in (
        "hello", "offer", "deliver", "confirmed", "refine", "marks", "commit", "submit",
        "mk_reveal", "mk_relin", "mk_check", "mk_finish", "t_share", "finalize")},
    "ping": "fedsec.runtime.flower_ping:handle_ping",
    **{f"fedavg_{s}": f"fedsec.runtime.flower_fedavg:handle_{s}"
       for s in ("keys", "train", "end")},
    **{f"pfl_{step}": f"fedsec.runtime.flower_pfl:handle_{step}" for step in (
        "hello", "offer", "deliver", "confirmed", "round", "decrypt")},
    "dpauc_hello": "fedsec.runtime.flower_dpauc:handle_hello",
    "dpauc_submit": "fedsec.runtime.flower_dpauc:handle_submit",
    **{f"hesv_{step}": f"fedsec.runtime.flower_hesv:handle_{step}" for step in (
        "hello", "offer", "deliver", "confirmed", "models", "eval", "finish")},
    **{f"secsv_{step}": f"fedsec.runtime.flower_secsv:handle_{step}" for step in (
        "hello", "offer", "deliver", "confirmed", "plan", "upload", "aux_round", "decrypt",
        "aux_reshare", "aux_labels")},
    **{f"secretsv_{step}": f"fedsec.runtime.flower_secretsv:handle_{step}" for step in (
        "hello", "session", "aux", "reconstruct")},
}


def protocol_of(run_config: Any) -> str:
    """The run config's ``protocol`` (default ``"auc"``); ``ValueError`` names the choices."""
    name = run_config.get("protocol", "auc") if hasattr(run_config, "get") else "auc"
    if not isinstance(name, str) or name not in PROTOCOLS:
        raise ValueError(f"The 'protocol' run config must be one of {sorted(PROTOCOLS)}. "
                         f"Got {name!r} instead.")
    return name


def _resolve(ref: str) -> Callable[..., Any]:
    module, _, attr = ref.partition(":")
    fn: Callable[..., Any] = getattr(importlib.import_module(module), attr)
    return fn


def server_main(grid: Grid, context: Context) -> None:
    """ServerApp entry point: run the protocol the run config names.

    If the ServerApp is stopped from outside (its SuperLink stopped or restarted, a
    signal), a result file left at an intermediate stage is marked ``failed`` with the
    reason, so that nobody waits on it forever."""
    name = protocol_of(context.run_config)
    try:
        _resolve(f"{PROTOCOLS[name]}:main")(grid, context)
    except BaseException as exc:
        _mark_interrupted(str(context.run_config.get("result-path", "") or ""), exc)
        raise


def _mark_interrupted(path: str, exc: BaseException) -> None:
    import json
    import os
    from pathlib import Path

    if not path:
        return
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8")) if p.exists() else {}
    except (OSError, ValueError):
        doc = {}
    if not isinstance(doc, dict) or doc.get("status") in ("done", "failed"):
        return
    stage = doc.get("status", "starting")
    reason = ("the ServerApp was stopped from outside (SuperLink stopped or restarted, or "
              "a signal)" if isinstance(exc, (KeyboardInterrupt, SystemExit))
              else f"{type(exc).__name__}: {exc}")
    doc.update(status="failed", error=f"{reason}, at stage {stage!r}")
    doc.pop("auc", None)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.interrupted")
    try:
        tmp.write_text(json.dumps(doc, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, p)
    except OSError:
        pass


def build_server_app() -> ServerApp:
    """A ``ServerApp`` that runs the run config's ``protocol``."""
    app = ServerApp()
    app.main()(server_main)
    return app


def _lazy(action: str, ref: str) -> Callable[[Message, Context], Message]:
    def handler(msg: Message, context: Context) -> Message:
        out: Message = _resolve(ref)(msg, context)
        return out

    handler.__name__ = f"handle_{action.replace('-', '_')}"
    return handler


def build_client_app() -> ClientApp:
    """A ``ClientApp`` with one ``@app.query`` handler per registered action."""
    app = ClientApp()
    for action, ref in CLIENT_STEPS.items():
        app.query(action)(_lazy(action, ref))
    return app
