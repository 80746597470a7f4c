"""ClientApp of the stand-in protocol: one handler per protocol step."""

from __future__ import annotations

import csv
from pathlib import Path

from flwr.app import ConfigRecord, Context, Message
from flwr.clientapp import ClientApp

from fedsec.runtime.flower_io import get_blobs, get_meta, make_content, reply

from .protocol import StandinParty

app = ClientApp()

_STATE_KEY = "standin"


def _data_path(context: Context) -> Path:
    """Deployment: ``--node-config "data-path='...'"``; simulation: one file per
    partition in the run config's ``sim-data-dir``."""
    if "data-path" in context.node_config:
        return Path(str(context.node_config["data-path"]))
    pid = int(context.node_config["partition-id"])
    return Path(str(context.run_config["sim-data-dir"])) / f"node_{pid}.csv"


def _read_secret(path: Path) -> int:
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if len(rows) != 1 or "value" not in rows[0]:
        raise ValueError(f"{path}: expected a 'value' column with one row")
    return int(rows[0]["value"])


@app.query("hello")
def hello(msg: Message, context: Context) -> Message:
    pad = int(get_meta(msg.content).get("pad", 0))
    party = StandinParty(_read_secret(_data_path(context)), pad=pad)
    # Per-run node-local state: kept by the SuperNode between messages, never sent.
    context.state[_STATE_KEY] = ConfigRecord({"nonce": party.nonce})
    return reply(msg, make_content([party.hello()]))


@app.query("respond")
def respond(msg: Message, context: Context) -> Message:
    if _STATE_KEY not in context.state.config_records:
        raise RuntimeError("respond before hello: no node state for this run")
    nonce = context.state.config_records[_STATE_KEY]["nonce"]
    assert isinstance(nonce, bytes)
    party = StandinParty(_read_secret(_data_path(context)), nonce=nonce)
    return reply(msg, make_content([party.respond(get_blobs(msg.content))]))
