"""``protocol = "ping"``: check a deployment and measure Flower's own floor.

The ServerApp sends ``rounds`` (run config ``ping-rounds``, default 3) message rounds of
an empty message to every connected SuperNode; each answers with its party name (from
its identity file, if its node config names one) and nothing else. The result JSON
(``result-path``) lists the nodes that answered, and each round's wall time: the cost of
one exchange that carries no protocol work (the SuperNode's idle poll, the ClientApp
process start and Flower's own hops). Every protocol's loopback time is compared with
``exchanges x`` this floor in BENCHMARKS.md.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from fedsec.runtime.flower_io import make_content, run_step, wait_for_nodes

__all__ = ["main", "handle_ping"]


def main(grid: Any, context: Any) -> None:
    """ServerApp side: ``ping-rounds`` empty exchanges with every node."""
    cfg = context.run_config
    rounds = int(cfg.get("ping-rounds", 3))
    nodes_wanted = int(cfg.get("num-nodes", 0) or 1)
    timeout = float(cfg.get("step-timeout", 60.0))
    if not 1 <= rounds <= 100:
        raise ValueError(f"The 'ping-rounds' run config must be in 1..100. Got {rounds} "
                         "instead.")
    wait_for_nodes(grid, nodes_wanted, float(cfg.get("wait-nodes-timeout", 60.0)))
    nodes = sorted(grid.get_node_ids())
    doc: dict[str, Any] = {"protocol": "ping", "status": "running", "nodes": nodes,
                           "rounds_s": [], "names": {}}
    t0 = time.monotonic()
    for r in range(rounds):
        res = run_step(grid, {n: make_content([], {"round": r}) for n in nodes},
                       "query.ping", group_id=f"ping/{r}", timeout=timeout)
        doc["rounds_s"].append(round(res.elapsed, 3))
        for n, content in res.replies.items():
            from fedsec.runtime.flower_io import get_meta

            name = get_meta(content).get("name")
            doc["names"][str(n)] = name if isinstance(name, str) else ""
        doc.setdefault("missing", {})[str(r)] = list(res.missing)
    doc["total_s"] = round(time.monotonic() - t0, 3)
    doc["median_round_s"] = round(statistics.median(doc["rounds_s"]), 3)
    doc["status"] = "done"
    path = str(cfg.get("result-path", "") or "")
    if path:
        p = Path(path)
        tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(doc, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, p)


def handle_ping(msg: Any, context: Any) -> Any:
    """ClientApp side: answer with this node's party name (or ``""``)."""
    from fedsec.runtime.flower_io import reply

    name = ""
    ident = context.node_config.get("identity-path")
    if ident:
        try:
            name = json.loads(Path(str(ident)).read_text(encoding="utf-8")).get("name", "")
        except (OSError, ValueError, AttributeError):
            name = ""
    return reply(msg, make_content([], {"ok": True, "name": str(name)[:64]}))
