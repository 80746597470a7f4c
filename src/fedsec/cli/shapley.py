"""``fedsec shapley``: train a task by FedAvg and value each client's contribution.

Trains one of the tasks of :mod:`fedsec.learning.tasks` over ``--clients`` clients
(Dirichlet(0.5) label split) for ``--rounds`` rounds, recording every round, then computes
each client's Federated Shapley Value (Zheng et al.) in the clear -- exactly, or with an
estimator, with or without SampleSkip. When the result is not exact it also computes the
exact FSV (unless ``--no-exact``) and reports the error ``||φ̂ − φ||_2``.

Output: a table (or ``--json``) with per-client FSV, per-round SSV, the error, timings and
SampleSkip counts; ``--plot FILE.png`` draws per-round contributions. Progress goes to
stderr. Exit status 2 on bad input (including a missing ``learning`` extra).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fedsec._validation import check_int, check_real
from fedsec.cli.common import arg_type
from fedsec.cli.common import progress_printer as _progress
from fedsec.learning.model import accuracy
from fedsec.learning.tasks import TASKS, make_task
from fedsec.protocol.accounting import DEFAULT_BANDWIDTH_MBPS
from fedsec.shapley.fsv import DEFAULT_BUDGETS, ESTIMATORS, ShapleyResult, federated_shapley
from fedsec.shapley.secure_common import PROTOCOLS, SecureShapleyResult

__all__ = ["register", "plot_contributions"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "shapley", help="train by FedAvg and compute each client's Federated Shapley Value",
        description="Train a task by FedAvg with recorded rounds and value each client's "
                    "contribution by the Federated Shapley Value (Zheng et al.), exactly or with "
                    "an estimator, with or without SampleSkip.")
    p.add_argument("--task", choices=TASKS, default="bank",
                   help="bank and agnews: logistic classifiers on synthetic stand-ins; "
                        "mnist: Zheng et al.'s CNN on real MNIST; digits: small CNN; gru: "
                        "recurrent task on digit rows; dnn: L-layer DNN (default bank)")
    p.add_argument("--clients", type=arg_type(check_int, "--clients", min_value=1, max_value=16),
                   default=5,
                   help="number of clients n (default 5)")
    p.add_argument("--rounds", type=arg_type(check_int, "--rounds", min_value=1), default=10,
                   help="FedAvg rounds T (default 10)")
    p.add_argument("--participation", type=arg_type(check_real, "--participation", gt=0.0, le=1.0),
                   default=1.0,
                   help="share of clients in each round (default 1.0)")
    p.add_argument("--protocol", choices=PROTOCOLS, default="nssv",
                   help="nssv: in the clear (models and test data visible to the evaluator); "
                        "hesv: one server, CKKS models and test data (Zheng et al. Alg. 1-2); "
                        "secsv: two non-colluding servers, encrypted models and secret-shared "
                        "test data (Alg. 3-5); secretsv: two servers, everything secret-"
                        "shared (the paper's baseline). Default nssv")
    p.add_argument("--no-shortcut", action="store_true",
                   help="hesv/secsv: evaluate every coalition's first layer under HE as the "
                        "paper does, instead of deriving it from the n local products")
    p.add_argument("--per-coalition-decryption", action="store_true",
                   help="secsv: one decryption request per coalition and batch, with "
                        "rotating decryptors, instead of one per batch from which the "
                        "decrypting client derives every coalition's output (the default "
                        "for one-layer models with the shortcut, exact SSVs and no "
                        "SampleSkip; see the threat model in fedsec.shapley.secsv)")
    p.add_argument("--schedule", choices=("strict", "paper"), default="strict",
                   help="secure protocols: who may decrypt what. strict (default): no "
                        "client ever holds outputs it can combine into a model it knows "
                        "(the global models, its own) on another client's samples; runs "
                        "that cannot be scheduled so are refused (use an estimator with a "
                        "small budget, or --participation below 1). paper: the paper's "
                        "Prop. 6.8 only, which lets a decrypting client solve for other "
                        "clients' test data")
    p.add_argument("--frac-bits",
                   type=arg_type(check_int, "--frac-bits", min_value=1, max_value=30), default=None,

                   metavar="F",
                   help="secsv: pin the fixed point to F fractional bits for every layer's "
                        "weights and inputs (default: chosen per layer from the run's "
                        "models and data, the most that cannot overflow)")
    p.add_argument("--plain-bits",
                   type=arg_type(check_int, "--plain-bits", min_value=20, max_value=59),
                   default=None,
                   metavar="B",
                   help="secsv: bits of the BFV plaintext prime, the room for fixed point "
                        "(default 59, the most SEAL allows at this ring)")
    p.add_argument("--workers", type=arg_type(check_int, "--workers", min_value=1), default=None,
                   help="secure protocols: evaluate the rounds in up to this many parallel "
                        "workers (default: the cores available; 1 = in this process)")
    p.add_argument("--backend", choices=("process", "ray"), default="process",
                   help="secure protocols' workers: a local process pool (default) or Ray "
                        "(needs fedsec[flower-sim]; --ray-address for a running cluster)")
    p.add_argument("--ray-address", default=None, metavar="HOST:PORT",
                   help="with --backend ray: the address of a running Ray cluster")
    p.add_argument("--bandwidth", type=arg_type(check_real, "--bandwidth", gt=0.0),
                   default=DEFAULT_BANDWIDTH_MBPS, metavar="MBPS",
                   help="simulated link speed for the communication time of secure "
                        f"protocols (default {DEFAULT_BANDWIDTH_MBPS:g} Mbit/s)")
    p.add_argument("--estimator", choices=ESTIMATORS, default="exact",
                   help="exact, or ps (permutation sampling), gt (group testing), ks "
                        "(KernelSHAP), gtg (GTG-Shapley) (default exact)")
    p.add_argument("--budget", type=arg_type(check_int, "--budget", min_value=1), default=None,
                   help="per-round budget: permutations (ps, gtg) or sampled coalitions "
                        f"(gt, ks); defaults {DEFAULT_BUDGETS}")
    p.add_argument("--sample-skip", action="store_true",
                   help="skip test samples that two models both predict correctly "
                        "(SampleSkip, Zheng et al. Alg. 6-7)")
    p.add_argument("--audit", action="store_true",
                   help="with --sample-skip: also count wrongly skipped samples")
    p.add_argument("--no-exact", action="store_true",
                   help="do not compute the exact FSV to report the estimate's error")
    p.add_argument("--samples", type=arg_type(check_int, "--samples", min_value=50), default=None,
                   help="use only this many samples of the task's data (train + test)")
    p.add_argument("--layers", type=arg_type(check_int, "--layers", min_value=1, max_value=64),
                   default=3,
                   help="layers L of the dnn task (default 3)")
    p.add_argument("--alpha", type=arg_type(check_real, "--alpha", gt=0.0), default=0.5,
                   help="Dirichlet concentration of the label split (default 0.5)")
    p.add_argument("--seed", type=arg_type(check_int, "--seed", min_value=0), default=0,
                   help="data, training and sampling seed")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--plot", type=Path, default=None, metavar="FILE.png",
                   help="draw per-round contributions (needs fedsec[plots])")
    p.add_argument("--save-record", type=Path, default=None, metavar="FILE",
                   help="write the training record (bytes) for later evaluation")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from fedsec.learning.fedavg import run_fedavg

    try:
        import fedsec.learning.torch_net  # noqa: F401  (training needs PyTorch)
    except ModuleNotFoundError as exc:
        raise ValueError(f"fedsec shapley trains models with PyTorch, which is missing "
                         f"({exc.name}): pip install 'fedsec[learning]'") from None
    if (args.frac_bits is not None or args.plain_bits is not None) \
            and args.protocol != "secsv":  # before any training
        raise ValueError("--frac-bits and --plain-bits apply to --protocol secsv only "
                         "(secretsv chooses its fixed point in a 64-bit ring)")
    if args.plot is not None and args.plot.suffix.lower() != ".png":
        raise ValueError(f"--plot must name a .png file; got {str(args.plot)!r}")
    say = _progress(args.quiet or args.json)
    say(f"loading task {args.task}")
    task = make_task(args.task, n_samples=args.samples, layers=args.layers, seed=args.seed)
    fed = task.federate(args.clients, alpha=args.alpha, seed=args.seed)
    t0 = time.perf_counter()
    record = run_fedavg(task, fed, rounds=args.rounds, participation=args.participation,
                        seed=args.seed, progress=lambda m: say(f"training {m}"))
    train_s = time.perf_counter() - t0
    if args.save_record is not None:
        args.save_record.write_bytes(record.to_bytes())
    final_acc = accuracy(task.spec, record.final_params, fed.x_test, fed.y_test)
    label = args.estimator + (" + SampleSkip" if args.sample_skip else "")
    if args.protocol != "nssv":
        label = f"{args.protocol} {label}"
    result = _evaluate(args, record, fed, lambda m: say(f"{label}: {m}"))
    exact: ShapleyResult | None = None
    if args.estimator == "exact" and not args.sample_skip and args.protocol == "nssv":
        exact = result
    elif not args.no_exact:
        exact = federated_shapley(record, fed.x_test, fed.y_test,
                                  progress=lambda m: say(f"exact: {m}"))
    doc = _document(args, task.data.description, task.data.real, task.spec.description,
                    fed, final_acc, train_s, result, exact)
    if args.plot is not None:
        plot_contributions(result.ssv, args.plot,
                           title=f"{args.task}: per-round SSV ({label}), n={args.clients}")
        doc["plot"] = str(args.plot)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        _print_human(doc)
    return 0


def _evaluate(args: argparse.Namespace, record: Any, fed: Any,
              progress: Callable[[str], None]) -> ShapleyResult:
    """The FSV by the chosen protocol (nssv in the clear; the others secure)."""
    if args.protocol == "nssv":
        if args.no_shortcut:
            raise ValueError("--no-shortcut applies to --protocol hesv and secsv only")
        if args.per_coalition_decryption:
            raise ValueError("--per-coalition-decryption applies to --protocol secsv only")
        return federated_shapley(record, fed.x_test, fed.y_test, estimator=args.estimator,
                                 budget=args.budget, sample_skip=args.sample_skip,
                                 audit=args.audit, seed=args.seed, progress=progress)
    if args.audit:
        raise ValueError("--audit needs the plaintext models: use it with --protocol nssv")
    test_sets = [(c.x_test, c.y_test) for c in fed.clients]
    common: dict[str, Any] = {"estimator": args.estimator, "budget": args.budget,
                              "seed": args.seed, "schedule": args.schedule}
    if args.protocol == "hesv" and args.sample_skip:
        raise ValueError("--sample-skip needs plaintext test data at the servers "
                         "(Zheng et al., Sec. 5.3): use --protocol secsv, secretsv or nssv")
    if args.per_coalition_decryption:
        if args.protocol != "secsv":
            raise ValueError("--per-coalition-decryption applies to --protocol secsv only")
        common["derived_decryption"] = False
    if args.protocol in ("hesv", "secsv"):
        common["linear_shortcut"] = not args.no_shortcut
    elif args.no_shortcut:
        raise ValueError("--no-shortcut applies to --protocol hesv and secsv only")
    if args.protocol != "hesv":
        common["sample_skip"] = args.sample_skip
    if args.frac_bits is not None or args.plain_bits is not None:
        from fedsec.crypto.bfv import BFVParams
        from fedsec.shapley.secsv import SecSVConfig

        f = args.frac_bits
        common["config"] = SecSVConfig(frac_bits_model=f, frac_bits_data=f,
                                       frac_bits_hidden=f,
                                       bfv=BFVParams(plain_bits=args.plain_bits or 59))
    if args.ray_address is not None and args.backend != "ray":
        raise ValueError("--ray-address applies to --backend ray only")
    from fedsec.shapley.parallel import shapley_in_parallel
    from fedsec.shapley.views import UnsafeSchedule

    try:  # warnings print once each as "fedsec: (privacy) warning: ..." (fedsec.cli)
        result: SecureShapleyResult = shapley_in_parallel(
            args.protocol, record, test_sets, workers=args.workers, backend=args.backend,
            ray_address=args.ray_address, progress=progress, **common)
    except UnsafeSchedule as exc:  # speak of the command line's option
        raise ValueError(str(exc).replace("pass schedule='paper'", "pass --schedule paper")
                         .replace("(an estimator with a small budget)",
                                  "(--estimator with a small --budget)")
                         .replace("add clients that do not train in every round",
                                  "let clients sit out rounds (--participation below 1)"
                                  )) from None
    result.bandwidth_mbps = args.bandwidth
    return result


def _document(args: argparse.Namespace, data_desc: str, real: bool, model_desc: str,
              fed: Any, final_acc: float, train_s: float, result: ShapleyResult,
              exact: ShapleyResult | None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "task": args.task, "model": model_desc, "data": data_desc, "real_data": real,
        "clients": args.clients, "rounds": args.rounds, "participation": args.participation,
        "alpha": args.alpha, "seed": args.seed,
        "train_samples": [len(c.y_train) for c in fed.clients],
        "test_samples": [len(c.y_test) for c in fed.clients],
        "final_accuracy": final_acc,
        "estimator": result.estimator, "budget": result.budget,
        "sample_skip": result.sample_skip,
        "fsv": result.fsv.tolist(), "ssv": result.ssv.tolist(),
        "participants": [list(p) for p in result.participants],
        "models_tested": result.models_tested, "samples_tested": result.samples_tested,
        "sample_skip_stats": result.skip.to_dict() if result.sample_skip else None,
        "exact_fsv": exact.fsv.tolist() if exact is not None else None,
        "error": result.error_to(exact) if exact is not None else None,
        "timings": {"training_s": train_s, "evaluation_s": result.seconds,
                    "exact_s": exact.seconds if exact is not None else None},
        "protocol": args.protocol,
    }
    if isinstance(result, SecureShapleyResult):
        acc = result.accounting.to_dict(result.bandwidth_mbps)
        doc["bandwidth_mbps"] = result.bandwidth_mbps
        doc["time_split_seconds"] = acc["time_split_seconds"]
        doc["time_split_covers"] = (
            "seconds on each role's own clock by kind of work, summed over every role and "
            "parallel worker, plus communication simulated from the bytes at "
            "bandwidth_mbps; timings.evaluation_s is the wall-clock time of the whole "
            "evaluation")
        doc["bytes_total"] = acc["bytes_total"]
        doc["bytes_by_role"] = acc["bytes_by_role"]
        doc["messages"] = acc["messages"]
        doc["fixed_point"] = result.fixed_point
    return doc


def _print_human(doc: dict[str, Any]) -> None:
    kind = "real" if doc["real_data"] else "synthetic stand-in"
    print(f"task {doc['task']}: {doc['model']}; data: {doc['data']} ({kind})")
    print(f"{doc['clients']} clients, {doc['rounds']} rounds, Dirichlet({doc['alpha']}) "
          f"split; final model accuracy {doc['final_accuracy']:.4f}")
    est = doc["estimator"] + (f" (budget {doc['budget']}/round)" if doc["budget"] else "")
    print(f"protocol: {doc['protocol']}; estimator: {est}; "
          f"SampleSkip {'on' if doc['sample_skip'] else 'off'}")
    print()
    has_exact = doc["exact_fsv"] is not None and (doc["estimator"] != "exact"
                                                  or doc["sample_skip"]
                                                  or doc["protocol"] != "nssv")
    head = f"{'client':>6} {'train':>6} {'test':>6} {'FSV':>10}"
    print(head + (f" {'exact FSV':>10}" if has_exact else ""))
    for i, v in enumerate(doc["fsv"]):
        line = (f"{i:>6} {doc['train_samples'][i]:>6} {doc['test_samples'][i]:>6} "
                f"{v:>10.5f}")
        if has_exact:
            line += f" {doc['exact_fsv'][i]:>10.5f}"
        print(line)
    print(f"{'sum':>20} {sum(doc['fsv']):>10.5f}")
    print("FSV: a client's contribution to the global model's test accuracy, summed over "
          "the rounds\n(1.0 = 100 accuracy points); the sum is the accuracy the training "
          "gained over the initial model.")
    print()
    print("per-round SSV (rows: rounds; '-' = did not take part)")
    print("round " + " ".join(f"{'c' + str(i):>8}" for i in range(doc["clients"])))
    for t, row in enumerate(doc["ssv"]):
        cells = [f"{v:>8.4f}" if i in doc["participants"][t] else f"{'-':>8}"
                 for i, v in enumerate(row)]
        print(f"{t + 1:>5} " + " ".join(cells))
    print()
    if doc["error"] is not None and has_exact:
        print(f"error vs exact FSV (Euclidean): {doc['error']:.3e}")
    tm = doc["timings"]
    line = (f"time (wall-clock): training {tm['training_s']:.2f} s, evaluation "
            f"{tm['evaluation_s']:.2f} s "
            f"({doc['models_tested']} models, {doc['samples_tested']} predictions)")
    if has_exact and tm["exact_s"] is not None:
        line += f", exact {tm['exact_s']:.2f} s"
    print(line)
    if "time_split_seconds" in doc:
        sp = doc["time_split_seconds"]
        work = {k: v for k, v in sp.items() if k not in ("communication", "total")}
        print("role work by kind (s; each role's own clock, summed over every role and "
              "every parallel worker): " + ", ".join(f"{k} {v:.2f}" for k, v in work.items())
              + f"; sum {sum(work.values()):.2f}")
        print(f"  + communication {sp['communication']:.2f} s, simulated from the bytes at "
              f"{doc['bandwidth_mbps']:g} Mbit/s = {sp['total']:.2f} s in all. Not the "
              f"evaluation's {tm['evaluation_s']:.2f} s of wall-clock time: parallel "
              "workers make the summed work exceed it; worker start-up and any work outside "
              "the roles' clocks add to it.")
        print(f"bytes: {doc['bytes_total']:,} in all; " + ", ".join(
            f"{r} sent {v['sent']:,} / received {v['received']:,}"
            for r, v in sorted(doc["bytes_by_role"].items())))
    fixed = doc.get("fixed_point")
    if fixed:
        line = (f"fixed point: weights {fixed['frac_model']}, inputs {fixed['frac_inputs']} "
                "fractional bits per layer")
        if "score_error_bound" in fixed:
            line += f"; scores exact to within {fixed['score_error_bound']:.2g}"
        print(line)
    st = doc["sample_skip_stats"]
    if st is not None:
        msg = (f"SampleSkip: skipped {100 * st['skipped_share']:.2f} % of the aggregated "
               "models' test predictions")
        if st["wrongly_skipped_share"] is not None:
            msg += f"; wrongly skipped {100 * st['wrongly_skipped_share']:.4f} %"
        print(msg)
    if "plot" in doc:
        print(f"plot: {doc['plot']}")


def plot_contributions(ssv: np.ndarray, path: Path, *, title: str = "") -> None:
    """Grouped bars of each client's SSV per round and its running FSV (PNG)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ModuleNotFoundError:
        raise ValueError("--plot needs matplotlib: pip install 'fedsec[plots]'") from None
    t_rounds, n = ssv.shape
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 6.5), sharex=True)
    width = 0.8 / n
    rounds = np.arange(1, t_rounds + 1)
    for i in range(n):
        ax1.bar(rounds - 0.4 + width * (i + 0.5), ssv[:, i], width, label=f"client {i}")
        ax2.plot(rounds, np.cumsum(ssv[:, i]), marker="o", label=f"client {i}")
    ax1.axhline(0, color="black", lw=0.6)
    ax1.set_ylabel(r"single-round SV $\phi_i^t$")
    ax2.set_ylabel(r"running FSV $\sum_{s \leq t} \phi_i^s$")
    ax2.set_xlabel("round t")
    ax2.set_xticks(rounds)
    ax1.legend(fontsize=8, ncol=min(n, 5))
    if title:
        ax1.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
