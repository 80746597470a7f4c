"""``fedsec flower local PROTOCOL ...``: try a protocol as separate processes on this machine.

Starts a SuperLink (TLS, certificates and identities made in a temporary folder), one
SuperNode per party and the ServerApp, all on 127.0.0.1, runs the protocol, stops every
process it started (children included) and prints the result as the in-process command
prints it. A real deployment runs the same pieces on one machine per party
(docs/run-across-machines.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fedsec._validation import check_int, check_real
from fedsec.cli.common import (
    add_party_file_options,
    arg_type,
    load_party_files,
    points_arg,
    scores_arg,
)
from fedsec.errors import ProtocolError

__all__ = ["register"]


def _say(quiet: bool) -> Any:
    def say(text: str) -> None:
        if not quiet:
            print(f"[flower local] {text}", file=sys.stderr, flush=True)
    return say


def _workdir(args: argparse.Namespace) -> tuple[Path, bool]:
    if args.workdir:
        path = Path(args.workdir)
        if path.exists() and any(path.iterdir()):
            raise ValueError(f"--workdir {path} is not empty")
        path.mkdir(parents=True, exist_ok=True)
        return path, True
    return Path(tempfile.mkdtemp(prefix="fedsec-flower-local-")), False


@contextlib.contextmanager
def _workspace(args: argparse.Namespace) -> Iterator[Path]:
    """The run's folder: removed afterwards unless it was named (--workdir) or --keep."""
    workdir, named = _workdir(args)
    try:
        yield workdir
    finally:
        if named or args.keep:
            print(f"[flower local] kept {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def _checked(run: Any, what: str, workdir: Path) -> dict[str, Any]:
    """The run's result document; ``ProtocolError`` if a process outlived the run or the
    run did not end ``done``."""
    if run.leftover:
        raise ProtocolError(f"processes left behind after the run: {run.leftover}")
    doc: dict[str, Any] = run.doc
    if doc.get("status") != "done":
        raise ProtocolError(f"{what} on Flower failed: {doc.get('error', doc.get('status'))} "
                            f"(logs in {workdir}; pass --keep to keep them)")
    return doc


def _federation(workdir: Path, names: list[str]) -> tuple[Path, dict[str, Path]]:
    """Each party's identity and the roster, as each party would make them itself."""
    from fedsec.crypto.identity import Identity, Roster, check_party_name

    for n in names:
        try:
            check_party_name(n)
        except ValueError as exc:
            raise ValueError(f"party name {n!r}: {exc}; pass --name NAME per file") from None
    ids = {n: Identity.generate(n) for n in names}
    d = workdir / "identities"
    d.mkdir(mode=0o700)
    paths = {n: ids[n].save(d / f"{n}.identity.json") for n in names}
    roster = Roster.of(list(ids.values())).save(d / "roster.json")
    return roster, paths


def _party_nodes(args: argparse.Namespace, names: list[str], workdir: Path,
                 extra: dict[str, Any]) -> tuple[list[Any], Path]:
    """One SuperNode per party file: its node config as the party would write it."""
    from fedsec.runtime.local_deploy import LocalNode

    roster, ident = _federation(workdir, names)
    nodes = []
    for name, path in zip(names, args.files, strict=True):
        cfg: dict[str, Any] = {
            "data-path": str(Path(path).resolve()), "identity-path": str(ident[name]),
            "roster-path": str(roster), "state-dir": str(workdir / "state" / name),
            "log-path": str(workdir / "logs" / f"{name}.log"),
            "label-col": str(args.label_col), "score-col": str(args.score_col),
            "scores": getattr(args, "scores", "probability"), **extra}
        if args.pos_label is not None:
            cfg["pos-label"] = args.pos_label
        if args.delimiter:
            cfg["delimiter"] = args.delimiter
        nodes.append(LocalNode(name, cfg))
    (workdir / "logs").mkdir(exist_ok=True)
    return nodes, roster


def _exchanges(doc: dict[str, Any]) -> dict[str, float]:
    skip = {"aggregate_s", "total_s"}
    return {k[:-2]: v for k, v in doc.get("timings", {}).items()
            if k.endswith("_s") and k not in skip and isinstance(v, (int, float))}


def _cmd_local_auc(args: argparse.Namespace) -> int:
    from fedsec.runtime.local_deploy import run_local

    if len(args.files) < 2:
        raise ValueError(f"a federation needs at least 2 parties; got {len(args.files)} "
                         "party file")
    parties = load_party_files(args, any_finite=args.scores != "probability")  # checks
    names = [p.name for p in parties]
    say = _say(args.quiet or args.json)
    with _workspace(args) as workdir:
        nodes, roster = _party_nodes(args, names, workdir, {"security": args.security})
        run_cfg: dict[str, Any] = {
            "protocol": "auc", "security": args.security, "roster-path": str(roster),
            "decision-points": str(args.decision_points) if args.decision_points == "exact"
            else int(args.decision_points), "step-timeout": float(args.step_timeout),
            "keys": args.keys}
        run = run_local(nodes, run_cfg, workdir=workdir, timeout=args.timeout, say=say)
        doc = _checked(run, "the run", workdir)
        mine = [r for rs in run.node_results.values() for r in rs if r.get("status") == "ok"]
        if len(mine) != len(names):
            raise ProtocolError("not every party reported a result")
        aucs = {r["party"]: r["auc"] for r in mine}
        first = mine[0]
        out = {
            "auc": first["auc"], "error_bound": max(r["error_bound"] for r in mine),
            "security": args.security, "verified": all(r["verified"] for r in mine),
            "parties": len(first["included"]), "included": first["included"],
            "decision_points": doc.get("decision_points"), "preset": doc.get("preset"),
            "party_aucs": aucs,
            "flower": {"exchanges": len(_exchanges(doc)), "steps_s": _exchanges(doc),
                       "server_seconds": doc.get("timings", {}).get("total_s"),
                       "wall_seconds": round(run.seconds, 2),
                       "aggregator_seconds": doc.get("timings", {}).get("aggregate_s")},
        }
        if args.json:
            print(json.dumps(out, indent=2))
        else:
            print(f"secure AUC ({args.security} aggregator, on Flower): {out['auc']:.10f}")
            print(f"  parties: {out['parties']} ({', '.join(out['included'])})   "
                  f"decision points: {out['decision_points']}   preset: {out['preset']}")
            if args.security == "malicious":
                print(f"  verified: {out['verified']}")
            print(f"  certified |AUC - exact ROC-AUC| <= {out['error_bound']:.3g}")
            fl = out["flower"]
            print(f"  Flower: {fl['exchanges']} message exchanges, ServerApp "
                  f"{fl['server_seconds']} s, whole local deployment {fl['wall_seconds']} s "
                  f"(aggregator computation {fl['aggregator_seconds']} s)")
        return 0


def _cmd_local_dpauc(args: argparse.Namespace) -> int:
    from fedsec.runtime.local_deploy import run_local

    mech: str = args.mechanism
    if args.score_epsilon is not None and mech != "rr":
        raise ValueError("--score-epsilon applies only to --mechanism rr")
    if args.delta is not None and mech != "gaussian":
        raise ValueError("--delta applies only to --mechanism gaussian")
    if len(args.files) < 2:
        raise ValueError("a federation needs at least 2 parties")
    parties = load_party_files(args)
    names = [p.name for p in parties]
    spend = args.epsilon + (args.score_epsilon or 0.0)
    with _workspace(args) as workdir:
        # each party's policy allows exactly this run's spend (its own choice, here yours)
        policy: dict[str, Any] = {"max-epsilon": spend, "mechanisms": mech}
        if mech == "gaussian":
            policy["max-delta"] = args.delta if args.delta is not None else 1e-5
        if mech == "rr" and args.score_epsilon is None:
            policy["allow-score-histogram"] = "true"
        nodes, roster = _party_nodes(args, names, workdir, policy)
        run_cfg: dict[str, Any] = {
            "protocol": "dpauc", "roster-path": str(roster), "dpauc-mechanism": mech,
            "dpauc-epsilon": float(args.epsilon), "decision-points": int(args.decision_points),
            "dpauc-clip": bool(args.clip), "step-timeout": float(args.step_timeout)}
        if mech == "gaussian":
            run_cfg["dpauc-delta"] = float(policy["max-delta"])
        if args.score_epsilon is not None:
            run_cfg["dpauc-score-epsilon"] = float(args.score_epsilon)
        run = run_local(nodes, run_cfg, workdir=workdir, timeout=args.timeout,
                        say=_say(args.quiet or args.json))
        doc = _checked(run, "the run", workdir)
        out = {"mechanism": mech, "epsilon": args.epsilon,
               "delta": run_cfg.get("dpauc-delta", 0.0),
               "decision_points": args.decision_points, "parties": len(names),
               "samples": sum(p.n_samples for p in parties), "clip": args.clip,
               "auc": doc["auc"], "epsilon_spent_per_party": spend,
               "included": doc.get("parties", {}).get("included", names),
               "flower": {"exchanges": len(_exchanges(doc)),
                          "server_seconds": doc.get("timings", {}).get("total_s"),
                          "wall_seconds": round(run.seconds, 2)}}
        if args.json:
            print(json.dumps(out, indent=2))
        else:
            print(f"DPAUC ({mech}, epsilon={args.epsilon}, N={args.decision_points}, "
                  f"{len(names)} parties, {out['samples']} samples"
                  f"{', clipped to [0, 1]' if args.clip else ''}, on Flower)")
            print(f"AUC = {out['auc']:.6f} (one run; each party spent epsilon {spend:g})")
            fl = out["flower"]
            print(f"  Flower: {fl['exchanges']} message exchanges, ServerApp "
                  f"{fl['server_seconds']} s, whole local deployment {fl['wall_seconds']} s")
        return 0


def _cmd_local_shapley(args: argparse.Namespace) -> int:
    if args.protocol in ("secsv", "secretsv"):
        return _local_two_servers(args)
    return _local_hesv(args)


def _local_two_servers(args: argparse.Namespace) -> int:
    """SecSV or SecretSV as separate processes: P the ServerApp; A, every client (and
    SecretSV's dealer) SuperNodes. The training record is made in this process first
    (plaintext FedAvg, as ``fedsec shapley`` does); each client's SuperNode gets only its
    own part of it."""
    from fedsec.learning.fedavg import run_fedavg
    from fedsec.learning.tasks import make_task
    from fedsec.runtime.flower_secsv import public_rounds, save_test_set, split_record
    from fedsec.runtime.local_deploy import LocalNode, run_local

    task = make_task(args.task, n_samples=args.samples, seed=args.seed)
    fed = task.federate(args.clients, alpha=args.alpha, seed=args.seed)
    record = run_fedavg(task, fed, rounds=args.rounds, participation=args.participation,
                        seed=args.seed)
    names = [f"client-{i}" for i in range(args.clients)]
    aux, dealer = "aux-server", "dealer"
    secret = args.protocol == "secretsv"
    servers = [aux, dealer] if secret else [aux]
    with _workspace(args) as workdir:
        roster, ident = _federation(workdir, [*names, *servers])
        (workdir / "logs").mkdir(exist_ok=True)
        files = workdir / "files"
        files.mkdir(mode=0o700)
        nodes = []
        for i, part in enumerate(split_record(record)):
            name = names[i]
            rec, data = files / f"{name}.record.npz", files / f"{name}.test.npz"
            part.save(rec)
            save_test_set(data, fed.clients[i].x_test, fed.clients[i].y_test)
            nodes.append(LocalNode(name, {
                "role": "client", "auxiliary": aux, "record-path": str(rec),
                "data-path": str(data), "identity-path": str(ident[name]),
                "roster-path": str(roster), "state-dir": str(workdir / "state" / name),
                "log-path": str(workdir / "logs" / f"{name}.log")}))
        for who, role, peer in ((aux, "auxiliary", {"dealer": dealer} if secret else {}),
                                (dealer, "dealer", {"auxiliary": aux})):
            if who in servers:
                nodes.append(LocalNode(who, {
                    "role": role, **peer, "identity-path": str(ident[who]),
                    "roster-path": str(roster), "state-dir": str(workdir / "state" / who),
                    "log-path": str(workdir / "logs" / f"{who}.log")}))
        rounds = files / "rounds.json"
        rounds.write_text(json.dumps(public_rounds(record)), encoding="utf-8")
        run = run_local(nodes, {"protocol": args.protocol, "roster-path": str(roster),
                                f"{args.protocol}-rounds-path": str(rounds),
                                "step-timeout": float(args.step_timeout)},
                        workdir=workdir, timeout=args.timeout,
                        say=_say(args.quiet or args.json))
        _checked(run, args.protocol, workdir)
        out = {"task": args.task, "clients": args.clients, "rounds": args.rounds,
               "protocol": args.protocol, "fsv": run.doc["fsv"],
               "flower": {"evaluation_exchanges": run.doc.get("exchanges"),
                          "evaluation_seconds": round(run.seconds, 2)}}
        if args.json:
            print(json.dumps(out, indent=2))
        else:
            print(f"federated Shapley values ({args.task}, {args.clients} clients, "
                  f"{args.rounds} rounds; {args.protocol} on Flower: P the ServerApp, "
                  f"{' and '.join(servers)} and each client a SuperNode):")
            for i, v in enumerate(run.doc["fsv"]):
                print(f"  client {i}: {v:+.6f}")
            print(f"  Flower: {out['flower']['evaluation_exchanges']} exchanges in "
                  f"{out['flower']['evaluation_seconds']} s (the training ran in this "
                  "process first; each client's SuperNode got only its own part of it)")
        return 0


def _local_hesv(args: argparse.Namespace) -> int:
    """Secure FedAvg on Flower, then HESV on the same SuperNodes over the record parts the
    clients kept: the Shapley flow with no plaintext model at the server."""
    from fedsec.runtime.local_deploy import LocalNode, run_local_sequence

    names = [f"client-{i}" for i in range(args.clients)]
    with _workspace(args) as workdir:
        roster, ident = _federation(workdir, names)
        (workdir / "logs").mkdir(exist_ok=True)
        nodes = []
        for i, name in enumerate(names):
            state = workdir / "state" / name
            nodes.append(LocalNode(name, {
                "client-id": i, "identity-path": str(ident[name]), "roster-path": str(roster),
                "state-dir": str(state), "log-path": str(workdir / "logs" / f"{name}.log"),
                "hesv-record-path": str(state / "record-part.npz"),
                "hesv-test-path": str(state / "test-set.npz")}))
        train = {"protocol": "fedavg", "task": args.task, "samples": args.samples or 0,
                 "clients": args.clients, "rounds": args.rounds, "alpha": args.alpha,
                 "seed": args.seed, "fraction-train": args.participation,
                 "roster-path": str(roster), "step-timeout": float(args.step_timeout)}
        evaluate = {"protocol": "hesv", "roster-path": str(roster),
                    "hesv-batch-hint": _largest_test_set(args),
                    "step-timeout": float(args.step_timeout)}
        runs = run_local_sequence(nodes, [train, evaluate], workdir=workdir,
                                  timeout=args.timeout, say=_say(args.quiet or args.json))
        for what, run in zip(("secure training", "HESV"), runs, strict=False):
            _checked(run, what, workdir)
        if len(runs) != 2:
            raise ProtocolError("the evaluation did not run")
        doc = runs[1].doc
        out = {"task": args.task, "clients": args.clients, "rounds": args.rounds,
               "protocol": "hesv", "fsv": doc["fsv"],
               "flower": {"training_exchanges": len(_exchanges(runs[0].doc)),
                          "training_seconds": round(runs[0].seconds, 2),
                          "evaluation_exchanges": doc.get("exchanges"),
                          "evaluation_seconds": round(runs[1].seconds, 2)}}
        if args.json:
            print(json.dumps(out, indent=2))
        else:
            print(f"federated Shapley values ({args.task}, {args.clients} clients, "
                  f"{args.rounds} rounds; secure aggregation, then HESV, on Flower):")
            for i, v in enumerate(doc["fsv"]):
                print(f"  client {i}: {v:+.6f}")
            fl = out["flower"]
            print(f"  Flower: training {fl['training_exchanges']} exchanges in "
                  f"{fl['training_seconds']} s; evaluation {fl['evaluation_exchanges']} "
                  f"exchanges in {fl['evaluation_seconds']} s. The server never held a "
                  "client's local model or test sample.")
        return 0


def _largest_test_set(args: argparse.Namespace) -> int:
    """The largest client test split of the task (public: HESV's batch size)."""
    from fedsec.learning.tasks import make_task

    task = make_task(args.task, n_samples=args.samples, seed=args.seed)
    fed = task.federate(args.clients, alpha=args.alpha, seed=args.seed)
    return max(1, max(len(c.y_test) for c in fed.clients))


def _cmd_local_ping(args: argparse.Namespace) -> int:
    from fedsec.runtime.local_deploy import LocalNode, run_local

    with _workspace(args) as workdir:
        nodes = [LocalNode(f"node-{i}", {"state-dir": str(workdir / "state" / str(i))})
                 for i in range(args.nodes)]
        run = run_local(nodes, {"protocol": "ping", "ping-rounds": args.rounds,
                                "num-nodes": args.nodes},
                        workdir=workdir, timeout=args.timeout,
                        say=_say(args.quiet or args.json))
        doc = _checked(run, "the ping run", workdir)
        out = {"nodes": args.nodes, "rounds_s": doc["rounds_s"],
               "median_round_s": doc["median_round_s"], "wall_seconds": round(run.seconds, 2)}
        if args.json:
            print(json.dumps(out, indent=2))
        else:
            print(f"{args.nodes} SuperNodes answered {args.rounds} empty exchanges; per "
                  f"exchange: {', '.join(f'{s:.2f}' for s in doc['rounds_s'])} s (median "
                  f"{doc['median_round_s']:.2f} s): Flower's floor for one protocol step")
        return 0


def _common(p: argparse.ArgumentParser, timeout: float) -> None:
    p.add_argument("--timeout", type=arg_type(check_real, "--timeout", gt=0.0), default=timeout,
                   help=f"seconds the whole run may take (default {timeout:g})")
    p.add_argument("--workdir", default=None,
                   help="folder for the certificates, identities, logs and state (must be "
                        "empty; kept); default: a temporary folder, removed afterwards")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")


def register(sub: Any) -> None:
    """Add the ``flower`` sub-command (``fedsec flower local PROTOCOL``)."""
    f = sub.add_parser(
        "flower", help="run a protocol on Flower's deployment engine (separate processes)",
        description="Flower deployment helpers.")
    fsub = f.add_subparsers(dest="flower_command", metavar="ACTION", required=True)
    local = fsub.add_parser(
        "local", help="try a protocol as separate processes on this machine",
        description="Start a SuperLink (TLS), one SuperNode per party and the ServerApp on "
                    "127.0.0.1 (identities, roster and certificates made in a temporary "
                    "folder), run the protocol, stop every process it started and print "
                    "the result as the in-process command does. A real deployment runs "
                    "the same pieces on one machine per party: see "
                    "docs/run-across-machines.md.")
    psub = local.add_subparsers(dest="protocol", metavar="PROTOCOL", required=True)
    a = psub.add_parser("auc", help="secure federated ROC-AUC (as 'fedsec auc')",
                        description="Secure federated ROC-AUC with one SuperNode per party "
                                    "file.")
    add_party_file_options(a)
    a.add_argument("--security", choices=["semi-honest", "malicious"], default="semi-honest",
                   help="threat model of the aggregator (default semi-honest); each party's "
                        "node config requires it")
    a.add_argument("--decision-points", "-N", type=points_arg, default=100,
                   metavar="N|exact", help="uniform decision points (default 100) or 'exact' "
                                           "(refinement rounds first)")
    a.add_argument("--keys", choices=["single", "threshold"], default="single",
                   help="who holds the decryption key: every party (single, default) or "
                        "each party a share (threshold; fixed decision points)")
    a.add_argument("--scores", type=scores_arg, default="probability",
                   metavar="probability|logit|range:LO:HI",
                   help="how each party reads its scores (as 'fedsec auc --scores')")
    a.add_argument("--step-timeout", type=arg_type(check_real, "--step-timeout", gt=0.0),
                   default=60.0,
                   help="seconds a protocol step waits for the parties (default 60)")
    _common(a, 300.0)
    a.set_defaults(func=_cmd_local_auc)
    d = psub.add_parser("dpauc", help="differentially private AUC (as 'fedsec dpauc')",
                        description="DPAUC (Sun et al.) with one SuperNode per party file; "
                                    "each party's policy allows exactly this run's epsilon.")
    add_party_file_options(d)
    d.add_argument("--epsilon", required=True, type=arg_type(check_real, "--epsilon", gt=0.0),
                   help="privacy budget of this evaluation (each party's policy allows it)")
    d.add_argument("--decision-points", "-N",
                   type=arg_type(check_int, "--decision-points", min_value=2, max_value=65536),
                   default=100, help="decision points (default 100)")
    d.add_argument("--mechanism", choices=["laplace", "gaussian", "rr"], default="laplace",
                   help="DP mechanism (default laplace)")
    d.add_argument("--delta", type=arg_type(check_real, "--delta", gt=0.0, lt=1.0), default=None,
                   help="gaussian only: delta (default 1e-5)")
    d.add_argument("--score-epsilon", type=arg_type(check_real, "--score-epsilon", gt=0.0),
                   default=None,
                   help="rr only: Laplace noise on scores with this epsilon")
    d.add_argument("--clip", action="store_true", help="clip the estimate into [0, 1]")
    d.add_argument("--step-timeout", type=arg_type(check_real, "--step-timeout", gt=0.0),
                   default=60.0,
                   help="seconds a protocol step waits for the parties (default 60)")
    _common(d, 240.0)
    d.set_defaults(func=_cmd_local_dpauc)
    sh = psub.add_parser(
        "shapley", help="secure training, then HESV contribution evaluation, on Flower",
        description="The Shapley flow with no plaintext model at the server: FedAvg with "
                    "secure aggregation (each client keeps its own local models), then "
                    "HESV (Zheng et al.) on the same SuperNodes over what each client "
                    "kept. One SuperNode per client; each trains its share of a bundled "
                    "task. --protocol secsv runs SecSV instead (the training in this "
                    "process; P, A and the clients as separate processes). Needs PyTorch.")
    sh.add_argument("--protocol", choices=["hesv", "secsv", "secretsv"], default="hesv",
                    help="hesv (default): FedAvg with secure aggregation on Flower, then "
                         "HESV over what each client kept; secsv / secretsv: FedAvg in this "
                         "process, then SecSV / SecretSV (P the ServerApp; A, the clients "
                         "and SecretSV's dealer SuperNodes)")
    sh.add_argument("--task", default="bank", choices=["bank", "digits", "mnist", "agnews"],
                    help="bundled task whose data the clients split (default bank)")
    sh.add_argument("--clients", type=arg_type(check_int, "--clients", min_value=3, max_value=16),
                    default=6,
                    help="clients, one SuperNode each (default 6)")
    sh.add_argument("--rounds", type=arg_type(check_int, "--rounds", min_value=1, max_value=50),
                    default=2,
                    help="FedAvg rounds (default 2)")
    sh.add_argument("--participation", type=arg_type(check_real, "--participation", gt=0.0, le=1.0),
                    default=0.5,
                    help="share of clients that train each round (at least 3 must; "
                         "default 0.5)")
    sh.add_argument("--samples", type=arg_type(check_int, "--samples", min_value=50), default=360,
                    help="samples of the task in all (default 360)")
    sh.add_argument("--alpha", type=arg_type(check_real, "--alpha", gt=0.0), default=0.5,
                    help="Dirichlet concentration of the split (default 0.5)")
    sh.add_argument("--seed", type=arg_type(check_int, "--seed", min_value=0), default=0,
                    help="data, split and training seed")
    sh.add_argument("--step-timeout", type=arg_type(check_real, "--step-timeout", gt=0.0),
                    default=120.0,
                    help="seconds a protocol step waits (default 120)")
    _common(sh, 900.0)
    sh.set_defaults(func=_cmd_local_shapley)
    pg = psub.add_parser("ping", help="measure Flower's per-exchange floor",
                         description="Empty message exchanges with N SuperNodes: the cost of "
                                     "one protocol step that does no work.")
    pg.add_argument("--nodes", type=arg_type(check_int, "--nodes", min_value=1, max_value=32),
                    default=3,
                    help="SuperNodes to start (default 3)")
    pg.add_argument("--rounds", type=arg_type(check_int, "--rounds", min_value=1, max_value=100),
                    default=5,
                    help="empty exchanges (default 5)")
    _common(pg, 180.0)
    pg.set_defaults(func=_cmd_local_ping)
