"""ServerApp of the stand-in protocol: one message round per protocol step.

Run config (pyproject ``[tool.flwr.app.config]``, override with ``flwr run -c``):
``num-nodes``, ``pad-bytes``, ``step-timeout``, ``wait-nodes-timeout``,
``pause-after-hello`` (seconds, for failure tests), ``result-path`` (JSON written
at each stage; "" = don't write), ``sim-data-dir`` (simulation only).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedsec.runtime.flower_io import (
    StepResult,
    get_blob,
    make_content,
    run_step,
    wait_for_nodes,
)

from .protocol import StandinAggregator

app = ServerApp()


def _write(path: str, doc: dict[str, Any]) -> None:
    if not path:
        return
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(doc, sort_keys=True), encoding="utf-8")
    os.replace(tmp, p)


def _failures(res: StepResult) -> dict[str, Any]:
    return {
        "errors": {str(n): {"code": e.code, "reason": e.reason} for n, e in res.errors.items()},
        "missing": res.missing,
        "undelivered": res.undelivered,
        "elapsed": round(res.elapsed, 3),
    }


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    out = str(cfg.get("result-path", ""))
    n = int(cfg["num-nodes"])
    timeout = float(cfg["step-timeout"])
    t0 = time.monotonic()
    doc: dict[str, Any] = {"status": "waiting-for-nodes", "run_id": context.run_id}
    _write(out, doc)
    try:
        nodes = wait_for_nodes(grid, n, timeout=float(cfg["wait-nodes-timeout"]))
        doc.update(status="hello", nodes=nodes)
        _write(out, doc)

        # Step 1: ask every node for its hello.
        pad = int(cfg["pad-bytes"])
        step1 = run_step(
            grid,
            {nid: make_content(meta={"pad": pad}) for nid in nodes},
            "query.hello",
            group_id="standin/1",
            timeout=timeout,
        )
        doc["step1"] = _failures(step1)
        step1.raise_for_failures("hello")
        hellos = [get_blob(step1.replies[nid]) for nid in nodes]
        doc.update(status="hello-done", hello_bytes=[len(h) for h in hellos])
        _write(out, doc)
        time.sleep(float(cfg["pause-after-hello"]))

        # Step 2: send all hellos to every node, collect responses.
        step2 = run_step(
            grid,
            {nid: make_content(hellos) for nid in nodes},
            "query.respond",
            group_id="standin/2",
            timeout=timeout,
        )
        doc["step2"] = _failures(step2)
        step2.raise_for_failures("respond")
        responses = [get_blob(step2.replies[nid]) for nid in nodes]
        total = StandinAggregator().combine(hellos, responses)
        doc.update(status="done", sum=total)
    except Exception as err:  # recorded for the caller, then re-raised
        doc.update(status="failed", error=f"{type(err).__name__}: {err}")
        raise
    finally:
        doc["elapsed"] = round(time.monotonic() - t0, 3)
        _write(out, doc)
