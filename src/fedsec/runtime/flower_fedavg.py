"""``protocol = "fedavg"``: FedAvg on Flower with secure aggregation; the server sees only
the aggregate, and each client keeps its own part of the training record.

This is the training half of the Shapley flow without plaintext models at the server
(Zheng et al.'s setting): the server learns ``θ^{t+1}`` (which every client receives
anyway), the participants and their weights (the public ``ω_i^t``), never a client's
local model ``θ_i^t``. Each client keeps ``θ^t`` and its own ``θ_i^t`` for every round on
its own disk (:func:`client_record_path`), which is what a secure contribution
evaluation needs from it. :class:`~fedsec.runtime.flower_shapley.RecordingFedAvg`, which
records every local model at the server, remains for a trusted server only.

Steps (one Flower exchange each; ``T + 2`` in all):

* ``fedavg_keys``: each client makes a fresh X25519 key for the run and announces it,
  signed with its roster identity (:func:`fedsec.crypto.sealed.announce`), with its
  client id and weight (training samples);
* ``fedavg_train`` (round ``t``): the server sends ``θ^t``, the round's participants and
  (first round) every announcement; the client checks every announcement against the
  roster (the server cannot substitute a key), trains ``θ_i^t`` from ``θ^t``, keeps both,
  and answers ``enc(ω_i θ_i) + m_i`` (:func:`fedsec.crypto.secagg.masked_update`): the
  pairwise masks cancel only in the sum of all participants. A participant that does not
  answer makes the round re-run over the others with fresh masks (``attempt``);
* ``fedavg_end``: the final ``θ^{T+1}``; each client writes its record part.

Node config: ``client-id`` (the client's index in the task's split; see
:mod:`fedsec.runtime.flower_shapley`), ``identity-path``, ``roster-path``, ``state-dir``,
``log-path``; ``hesv-record-path`` and ``hesv-test-path``, if set, name where the client
writes its record part and test split (so that a HESV run on the same node reads them);
otherwise they go to ``state-dir`` (:func:`client_record_path`). Run config: ``task``,
``samples``, ``clients``, ``rounds``, ``alpha``, ``seed``, ``fraction-train``,
``roster-path``, ``step-timeout``, ``result-path``. Training data here comes from
the task's federated split (a demonstration, as the plaintext example); the secure part
does not depend on where it comes from.
"""

from __future__ import annotations

import io
import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec.crypto.identity import Identity, Roster
from fedsec.crypto.sealed import SealKey, announce, read_announcement
from fedsec.crypto.secagg import decode_fixed, masked_update, sum_updates
from fedsec.errors import ProtocolError
from fedsec.protocol import fields as readers
from fedsec.runtime.node_host import RunState, hosted

__all__ = ["main", "client_record_path", "client_test_path", "load_client_record", "handle_keys",
           "handle_train", "handle_end"]

_ANN_CONTEXT = b"fedsec/fedavg-secagg/v1|run="
_MAX_CLIENTS = 1024


def _session(run_id: int, roster: Roster) -> bytes:
    return _ANN_CONTEXT + str(int(run_id)).encode() + b"|roster=" + roster.digest()


def _flatten(params: Sequence[NDArray[Any]]) -> NDArray[np.float64]:
    return np.concatenate([np.asarray(p, dtype=np.float64).ravel() for p in params])


def _unflatten(v: NDArray[np.float64], like: Sequence[NDArray[Any]]) -> list[NDArray[Any]]:
    out, pos = [], 0
    for p in like:
        n = int(np.asarray(p).size)
        out.append(v[pos:pos + n].reshape(np.asarray(p).shape).astype(np.float32))
        pos += n
    if pos != v.size:
        raise ProtocolError("model size mismatch")
    return out


def _params_blobs(params: Sequence[NDArray[Any]]) -> list[bytes]:
    return [np.ascontiguousarray(p, dtype=np.float32).tobytes() for p in params]


def _params_from(blobs: Sequence[bytes], like: Sequence[NDArray[Any]]) -> list[NDArray[Any]]:
    if len(blobs) != len(like):
        raise ProtocolError("the model has the wrong number of tensors")
    out = []
    for b, p in zip(blobs, like, strict=True):
        arr = np.frombuffer(b, dtype=np.float32)
        if arr.size != np.asarray(p).size or not np.all(np.isfinite(arr)):
            raise ProtocolError("a model tensor has the wrong size or is not finite")
        out.append(arr.reshape(np.asarray(p).shape).copy())
    return out


def client_record_path(state_dir: str | os.PathLike[str], run_id: int, client_id: int
                       ) -> Path:
    """Where a client keeps its part of a run's training record (the record-part format
    of :func:`fedsec.runtime.flower_hesv.load_record_part`, so that the same SuperNode can
    then evaluate contributions with ``hesv-record-path`` pointing at it)."""
    return Path(state_dir) / f"fedavg-run-{int(run_id)}-client-{int(client_id)}.npz"


def client_test_path(state_dir: str | os.PathLike[str], run_id: int, client_id: int
                     ) -> Path:
    """Where a client keeps its test split of the task (``x``, ``y``; ``hesv-test-path``)."""
    return Path(state_dir) / f"fedavg-run-{int(run_id)}-client-{int(client_id)}.test.npz"


def load_client_record(path: str | os.PathLike[str]) -> Any:
    """A client's record part (:class:`fedsec.runtime.flower_hesv.RecordPart`)."""
    from fedsec.runtime.flower_hesv import load_record_part

    return load_record_part(Path(path).read_bytes())


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


# ================================================================== client side
def _client(state: RunState) -> dict[str, Any]:
    from fedsec.learning.fedavg import FedAvgClient
    from fedsec.runtime.flower_shapley import _task_from

    d = state.data
    if "client" not in d:
        cfg = state.node_config
        ident = cfg.get("identity-path")
        roster = cfg.get("roster-path")
        if not ident or not roster:
            raise ProtocolError("node config needs 'identity-path' and 'roster-path'")
        identity = Identity.load(str(ident))
        ros = Roster.load(str(roster))
        if identity.name not in ros or ros.public_key(identity.name) != identity.public_key:
            raise ProtocolError("this node's identity is not on its roster")
        task, n, alpha, seed = _task_from(state.run_config)
        cid = int(cfg.get("client-id", -1))
        if not 0 <= cid < n:
            raise ProtocolError("node config 'client-id' is outside the run's clients")
        fed = task.federate(n, alpha=alpha, seed=seed)
        d.update(client=FedAvgClient(cid, task.spec, fed.clients[cid], task.training, seed),
                 identity=identity, roster=ros, key=SealKey.generate(), rounds=[],
                 peers=None, session=_session(state.run_id, ros))
    return d


def _keys(blobs: list[bytes], meta: dict[str, Any], state: RunState
          ) -> tuple[list[bytes], dict[str, Any]]:
    d = _client(state)
    c = d["client"]
    return [announce(d["identity"], d["key"], context=d["session"])], {
        "client": c.client_id, "weight": c.n_examples, "name": d["identity"].name}


def _train(blobs: list[bytes], meta: dict[str, Any], state: RunState
           ) -> tuple[list[bytes], dict[str, Any]]:
    from fedsec.learning.fedavg import initial_params

    d = _client(state)
    c = d["client"]
    like = initial_params(c.spec, 0)
    t = readers.integer(meta, "round", 0, 10_000)
    attempt = readers.integer(meta, "attempt", 0, 1000)
    names = meta.get("participants")
    weights = meta.get("weights")
    ids = meta.get("ids")
    if not (isinstance(names, list) and isinstance(weights, list) and isinstance(ids, list)
            and len(names) == len(weights) == len(ids) <= _MAX_CLIENTS):
        raise ProtocolError("malformed participant list")
    n_ann = readers.integer(meta, "announcements", 0, _MAX_CLIENTS)
    if d["peers"] is None:
        if n_ann == 0:
            raise ProtocolError("the first round must carry the announcements")
        peers = {}
        for name, ann in zip(meta.get("announcers", []), blobs[:n_ann], strict=True):
            peers[str(name)] = read_announcement(d["roster"], str(name), ann,
                                                 context=d["session"])
        if peers.get(d["identity"].name) != d["key"].public:
            raise ProtocolError("the announcements do not carry this client's own key")
        d["peers"] = peers
    model_blobs = blobs[n_ann:]
    glob = _params_from(model_blobs, like)
    if len(set(names)) != len(names) or len(set(ids)) != len(ids):
        raise ProtocolError("the round lists a participant twice")
    if len(names) < 3:
        raise ProtocolError("secure aggregation here needs at least 3 participants (with "
                            "2, each learns the other's model from the aggregate)")
    rounds = d["rounds"]
    if rounds and rounds[-1]["round"] not in (t, t - 1) or not rounds and t != 0:
        raise ProtocolError("a round out of order")
    taking_part = d["identity"].name in names
    local = None
    if taking_part:
        local, weight = c.train(glob, t)
        me = names.index(d["identity"].name)
        if int(weights[me]) != int(weight) or int(ids[me]) != c.client_id:
            raise ProtocolError("the round lists another weight or id for this client")
    elif c.client_id in [int(i) for i in ids]:
        raise ProtocolError("the round lists this client's id under another name")
    entry = {"participants": [int(i) for i in ids], "weights": [int(w) for w in weights],
             "global": glob, "local": local}
    if rounds and rounds[-1]["round"] == t:
        rounds[-1] = {"round": t, **entry}  # a re-run of the round
    else:
        rounds.append({"round": t, **entry})
    if not taking_part:
        return [], {"trained": False}
    assert local is not None
    v = _flatten(local) * float(weight)
    x = masked_update(v, d["key"], d["identity"].name, d["peers"], [str(n) for n in names],
                      session=d["session"], round_index=t, attempt=attempt)
    return [x.tobytes()], {}


def _end(blobs: list[bytes], meta: dict[str, Any], state: RunState
         ) -> tuple[list[bytes], dict[str, Any]]:
    from fedsec.learning.fedavg import initial_params

    d = _client(state)
    c = d["client"]
    like = initial_params(c.spec, 0)
    final = _params_from(blobs, like)
    from fedsec.runtime.flower_hesv import PART_FORMAT

    n = int(state.run_config.get("clients", 0))
    header = {"format": PART_FORMAT, "spec": c.spec.to_json(), "n_clients": n,
              "client": c.client_id,
              "rounds": [{"participants": r["participants"],
                          "weights": [float(w) for w in r["weights"]]} for r in d["rounds"]]}
    arrays: dict[str, NDArray[Any]] = {
        "header": np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)}
    for t, r in enumerate(d["rounds"]):
        for k, p in enumerate(r["global"]):
            arrays[f"r{t}/global/{k}"] = np.asarray(p, dtype=np.float32)
        if c.client_id in r["participants"]:
            for k, p in enumerate(r["local"]):
                arrays[f"r{t}/local/{k}"] = np.asarray(p, dtype=np.float32)
    state_dir = state.node_config.get("state-dir")
    if not state_dir:
        raise ProtocolError("node config needs 'state-dir' for the record")
    buf = io.BytesIO()
    np.savez(buf, allow_pickle=False, **arrays)
    # the node decides where its files go: node config 'hesv-record-path' and
    # 'hesv-test-path' (then an evaluation on the same node reads them), else state-dir
    rec_path = state.node_config.get("hesv-record-path") or client_record_path(
        str(state_dir), state.run_id, c.client_id)
    test_path = state.node_config.get("hesv-test-path") or client_test_path(
        str(state_dir), state.run_id, c.client_id)
    _write_private(Path(str(rec_path)), buf.getvalue())
    test = io.BytesIO()
    np.savez(test, allow_pickle=False, x=np.asarray(c.data.x_test),
             y=np.asarray(c.data.y_test))
    _write_private(Path(str(test_path)), test.getvalue())
    del final
    state.done = True
    return [], {"rounds": len(d["rounds"])}


handle_keys = hosted("fedavg_keys", "fedsec.runtime.flower_fedavg:_keys")
handle_train = hosted("fedavg_train", "fedsec.runtime.flower_fedavg:_train")
handle_end = hosted("fedavg_end", "fedsec.runtime.flower_fedavg:_end")


# ================================================================== server side
def _write(path: str, doc: Mapping[str, Any]) -> None:
    if not path:
        return
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(dict(doc), indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, p)


def main(grid: Any, context: Any) -> None:
    """ServerApp: FedAvg with secure aggregation over the connected clients."""
    from fedsec.learning.fedavg import FedAvgServer, initial_params
    from fedsec.runtime.flower_io import get_blobs, get_meta, make_content, run_step, wait_for_nodes
    from fedsec.runtime.flower_shapley import _task_from

    cfg = context.run_config
    result_path = str(cfg.get("result-path", "") or "")
    doc: dict[str, Any] = {"protocol": "fedavg", "status": "starting", "rounds": [],
                           "left_out": [], "timings": {}}
    t0 = time.monotonic()
    try:
        task, n, _alpha, seed = _task_from(cfg)
        rounds = int(cfg.get("rounds", 3))
        timeout = float(cfg.get("step-timeout", 120.0))
        roster = Roster.load(str(cfg.get("roster-path", "")))
        if not 1 <= rounds <= 1000 or not 3 <= n <= _MAX_CLIENTS:
            raise ValueError("The 'rounds' run config must be in 1..1000 and 'clients' in "
                             f"3..{_MAX_CLIENTS}.")
        wait_for_nodes(grid, n, float(cfg.get("wait-nodes-timeout", 60.0)))
        nodes = sorted(grid.get_node_ids())
        res = run_step(grid, {k: make_content([], {}) for k in nodes}, "query.fedavg_keys",
                       group_id="fedavg-keys", timeout=timeout)
        doc["timings"]["keys_s"] = round(res.elapsed, 3)
        info: dict[int, tuple[str, int, int, bytes]] = {}
        for k, content in res.replies.items():
            meta, blobs = get_meta(content), get_blobs(content)
            if meta.get("ok") is not True or len(blobs) != 1:
                doc["left_out"].append({"node": k, "step": "keys",
                                        "check": str(meta.get("check", "malformed"))[:64]})
                continue
            name = str(meta.get("name", ""))
            try:
                read_announcement(roster, name, blobs[0], context=_session(context.run_id,
                                                                           roster))
            except ProtocolError:
                doc["left_out"].append({"node": k, "step": "keys", "check": "announcement"})
                continue
            info[k] = (name, int(meta["client"]), int(meta["weight"]), blobs[0])
        ids = sorted(i[1] for i in info.values())
        if len(set(ids)) != len(ids):
            raise ProtocolError("two nodes claim the same client id")
        announcers = [info[k][0] for k in sorted(info)]
        anns = [info[k][3] for k in sorted(info)]
        params = initial_params(task.spec, seed)
        alive = sorted(info, key=lambda k: info[k][1])
        participation = float(cfg.get("fraction-train", 1.0))
        if not 0.0 < participation <= 1.0:
            raise ValueError("The 'fraction-train' run config must be in (0, 1].")
        chooser = FedAvgServer(task.spec, n, participation, seed)
        for t in range(rounds):
            chosen = set(chooser.select(t))
            active = [k for k in alive if info[k][1] in chosen]
            for attempt in range(3):
                if len(active) < 3:
                    raise ProtocolError(f"round {t}: fewer than 3 participants remain")
                meta = {"round": t, "attempt": attempt,
                        "participants": [info[k][0] for k in active],
                        "ids": [info[k][1] for k in active],
                        "weights": [info[k][2] for k in active]}
                first = t == 0 and attempt == 0
                # every client gets θ^t (FedAvg's broadcast); participants also train
                msgs = {k: make_content((anns if first else []) + _params_blobs(params),
                                        {**meta, "announcements": len(anns) if first else 0,
                                         "announcers": announcers if first else []})
                        for k in alive}
                res = run_step(grid, msgs, "query.fedavg_train", group_id=f"t{t}/{attempt}",
                               timeout=timeout)
                doc["timings"][f"round{t}.{attempt}_s"] = round(res.elapsed, 3)
                got: dict[int, bytes] = {}
                for k, content in res.replies.items():
                    m, b = get_meta(content), get_blobs(content)
                    if m.get("ok") is True and len(b) == (1 if k in active else 0):
                        if k in active:
                            got[k] = b[0]
                    else:
                        doc["left_out"].append({"node": k, "step": f"train {t}",
                                                "check": str(m.get("check", "?"))[:64]})
                gone = [k for k in alive if k not in res.replies]
                doc["left_out"] += [{"node": k, "step": f"train {t}", "check": "no reply"}
                                    for k in gone]
                alive = [k for k in alive if k in got or (k not in active
                                                          and k in res.replies)]
                if len(got) == len(active):
                    break
                active = [k for k in active if k in got]
            else:
                raise ProtocolError(f"round {t}: clients kept dropping out")
            size = sum(int(np.asarray(p).size) for p in params)
            xs = []
            for k in active:
                x = np.frombuffer(got[k], dtype=np.uint64)
                if x.size != size:
                    raise ProtocolError("a masked update has the wrong size")
                xs.append(x)
            total = decode_fixed(sum_updates(xs)) / float(sum(info[k][2] for k in active))
            params = _unflatten(total, params)
            doc["rounds"].append({"participants": [info[k][1] for k in active],
                                  "weights": [info[k][2] for k in active]})
            _write(result_path, {**doc, "status": f"round {t + 1}/{rounds}"})
        res = run_step(grid, {k: make_content(_params_blobs(params), {}) for k in alive},
                       "query.fedavg_end", group_id="fedavg-end", timeout=timeout)
        doc["timings"]["end_s"] = round(res.elapsed, 3)
        doc["clients_with_record"] = sorted(
            info[k][1] for k, c in res.replies.items() if get_meta(c).get("ok") is True)
        doc["final"] = [np.asarray(p).tolist() for p in params]
        doc["status"] = "done"
    except Exception as exc:
        doc.update(status="failed", error=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        doc["timings"]["total_s"] = round(time.monotonic() - t0, 3)
        _write(result_path, doc)
