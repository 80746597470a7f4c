"""``fedsec pfl``: personalised FL with BALANCE (Aghabagherloo et al.) under poisoning
attacks, in the clear or, with ``--secure``, with Priv-PFL's encrypted selection and
aggregation.

Trains a task of :mod:`fedsec.learning.tasks` over ``--clients`` clients (Dirichlet label
split) for ``--rounds`` rounds with a share ``--malicious`` of malicious clients running
``--attack`` (one or several, comma-separated, or ``all``), by BALANCE and/or the baselines
(``--method``: fedavg, local, trimmed-mean, krum, median). BALANCE runs server-assisted
(Priv-PFL's setting, ``--selection efficient`` = Algorithm 1 or ``brute``) or decentralised
over a graph (``--deployment complete|ring|erdos-renyi``).

Output: a table of benign clients' mean and worst accuracy (each on its own test data),
BALANCE's share of accepted malicious peers and Ineq. 1 checks per round; ``--json`` prints
every run's per-client accuracy per round, acceptance sets and checks per round;
``--plot DIR`` writes ``accuracy.png`` (benign accuracy per round under each attack) and
``acceptance.png`` (who accepts whom in one round of the first BALANCE run). Progress goes
to stderr. Exit status 2 on bad input (including a missing ``learning`` extra).

``--secure`` runs server-assisted BALANCE with Priv-PFL's encrypted selection and
aggregation (:func:`fedsec.pfl.secure_sim.run_secure_pfl`): CKKS with a 128-bit preset
(``--preset``; test-only presets are not reachable from the command line), the composite
sign of precision ``--sign-alpha`` (8, 10 or 12 bits), clients clipping to a public bound
``B_t = --norm-factor x median`` of the published norms (or ``--norm-bound``). Unless
``--no-compare``, every round is compared with the exact plaintext selection on the same
uploads (pairs decided differently, how many lie within ``2^-alpha`` of the boundary, Eq. 2's
CKKS noise) and a plaintext BALANCE run with the same seeds and clipping gives the final
accuracies to compare. Output adds the agreement table, time per step, bytes per client
and key set-up bytes. Exit status 2 on bad input, including options that do not apply to
``--secure`` (or apply to it only) and parameters the protocol refuses; 4 on a protocol
error. ``--clients`` is capped at 64; the protocol packs the ``K (K - 1)`` margins into as
many ciphertexts as they need, so no client count below that is refused for its size.

Threat model: without ``--secure``, a simulation in the clear -- Byzantine clients, honest
server; no secrets. With ``--secure``: as :mod:`fedsec.pfl.secure` (one process plays every
role; the server handles only one-time-padded plaintexts, ciphertexts and public keys).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fedsec._validation import check_int, check_real
from fedsec.api import MAX_PFL_CLIENTS
from fedsec.cli.common import arg_type, list_arg
from fedsec.cli.common import progress_printer as _progress
from fedsec.learning.attacks import ATTACKS
from fedsec.learning.tasks import TASKS, make_task

__all__ = ["register", "plot_accuracy", "plot_acceptance"]

_METHODS = ("balance", "fedavg", "local", "trimmed-mean", "krum", "median")
_DEPLOYMENTS = ("server", "complete", "ring", "erdos-renyi")
SIGN_ALPHAS = (8, 10, 12)
#: The deep 128-bit chain the composite sign needs (crypto.params).
PFL_PRESET = "CKKS_128_N32768_DEPTH19"


def _secure_presets() -> list[str]:
    """128-bit presets deep enough for the composite sign (test presets never listed)."""
    from fedsec.crypto.params import PRESETS

    return [k for k, v in PRESETS.items() if not v.insecure and v.depth >= 16]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "pfl", help="personalised FL with BALANCE under poisoning attacks (in the clear, or "
                    "encrypted with --secure: Priv-PFL)",
        description="Train personalised models with BALANCE (server-assisted with Priv-PFL's "
                    "Algorithm 1, or decentralised) and baselines, under poisoning attacks; "
                    "report benign clients' accuracy, acceptance sets and Ineq. 1 checks. In the "
                    "clear by default; --secure runs the selection and aggregation under "
                    "CKKS (Priv-PFL).")
    p.add_argument("--task", choices=TASKS, default="dnn",
                   help="data set and model (default dnn: MNIST subset, L-layer MLP)")
    p.add_argument("--layers", type=arg_type(check_int, "--layers", min_value=1, max_value=64),
                   default=2,
                   help="layers of the dnn task (default 2: 784-64-10)")
    p.add_argument("--samples", type=arg_type(check_int, "--samples", min_value=50), default=None,
                   help="use only this many samples of the task's data (train + test)")
    p.add_argument("--clients",
                   type=arg_type(check_int, "--clients", min_value=2, max_value=MAX_PFL_CLIENTS),
                   default=30,
                   help="number of clients K (default 30)")
    p.add_argument("--rounds", type=arg_type(check_int, "--rounds", min_value=1), default=10,
                   help="training rounds T (default 10)")
    p.add_argument("--alpha", type=arg_type(check_real, "--alpha", gt=0.0), default=0.5,
                   help="Dirichlet concentration of the label split (default 0.5; small = "
                        "more non-IID)")
    p.add_argument("--attack", type=list_arg("--attack", ("none", *ATTACKS), everything=True),
                   default=["none"], help="attack(s): none, " + ", ".join(ATTACKS)
                   + "; comma-separated or 'all' (default none)")
    p.add_argument("--malicious", type=arg_type(check_real, "--malicious", ge=0.0, lt=0.5),
                   default=0.2, help="share of malicious clients (default 0.2)")
    p.add_argument("--method", type=list_arg("--method", _METHODS), default=["balance"],
                   help="balance, fedavg, local, trimmed-mean, krum, median; comma-separated "
                        "(default balance)")
    p.add_argument("--deployment", choices=_DEPLOYMENTS, default="server",
                   help="BALANCE: server-assisted (default) or decentralised over a "
                        "complete, ring or Erdős–Rényi graph")
    p.add_argument("--graph-p", type=arg_type(check_real, "--graph-p", ge=0.0, le=1.0), default=0.5,
                   help="edge probability of the Erdős–Rényi graph (default 0.5)")
    p.add_argument("--selection", choices=("efficient", "brute"), default="efficient",
                   help="server-assisted BALANCE: Algorithm 1 (default) or brute force")
    p.add_argument("--gamma", type=arg_type(check_real, "--gamma", gt=0.0), default=0.3,
                   help="BALANCE acceptance threshold gamma (default 0.3)")
    p.add_argument("--gamma-uniform", type=arg_type(check_real, "--gamma-uniform", gt=0.0), nargs=2,
                   default=None, metavar=("LO", "HI"),
                   help="per-client thresholds gamma_i ~ U[LO, HI] (seeded; Aghabagherloo et al. "
                        "use 0.1 0.5) instead of one --gamma")
    p.add_argument("--kappa", type=arg_type(check_real, "--kappa", ge=0.0),
                   default=1.0, help="BALANCE threshold decay kappa (default 1)")
    p.add_argument("--balance-alpha", type=arg_type(check_real, "--balance-alpha", ge=0.0, le=1.0),
                   default=0.5,
                   help="weight of the own model in Eq. 2 (default 0.5)")
    p.add_argument("--seed", type=arg_type(check_int, "--seed", min_value=0), default=0,
                   help="data, training and attack seed")
    sec = p.add_argument_group(
        "encrypted BALANCE (--secure)",
        "Priv-PFL: selection and personalised aggregation under CKKS; server-assisted "
        "BALANCE with Algorithm 1 only")
    sec.add_argument("--secure", action="store_true",
                     help="run BALANCE with encrypted selection and aggregation")
    sec.add_argument("--sign-alpha", type=int, choices=SIGN_ALPHAS, default=None,
                     help="precision of the encrypted comparison in bits: pairs within "
                          "2^-alpha of the acceptance boundary may be decided either way "
                          "(default 8; 10 and 12 cost deeper polynomials)")
    sec.add_argument("--comparison", choices=("polynomial", "blinded"), default=None,
                     help="polynomial (default): the paper's homomorphic sign; blinded "
                          "(beyond the paper): the server multiplies each margin by a secret "
                          "positive factor 2^(16U) and the decryptor reads its sign -- no "
                          "sign polynomial and a 2^-14 band, but the decryptor learns each "
                          "compared margin's magnitude to within a factor 2^16")
    bound = sec.add_mutually_exclusive_group()
    bound.add_argument("--norm-factor", type=arg_type(check_real, "--norm-factor", gt=0.0),
                       default=None, help="public norm bound per round: this factor times "
                                          "the median of the published norms (default 1.25)")
    bound.add_argument("--norm-bound", type=arg_type(check_real, "--norm-bound", gt=0.0),
                       default=None, help="a fixed public norm bound for every round instead")
    sec.add_argument("--preset", choices=_secure_presets(), default=None,
                     help=f"CKKS parameter preset (128-bit; default {PFL_PRESET})")
    sec.add_argument("--unclipped-attackers", action="store_true",
                     help="malicious clients send unclipped models (they must come out "
                          "invalid: accepted by nobody)")
    sec.add_argument("--no-compare", action="store_true",
                     help="skip the plaintext reference (per-round agreement and the "
                          "plaintext run)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--plot", type=Path, default=None, metavar="DIR",
                   help="write accuracy.png and acceptance.png into DIR (needs "
                        "fedsec[plots])")
    p.add_argument("--graph-round", type=arg_type(check_int, "--graph-round", min_value=1),
                   default=None,
                   help="round drawn in acceptance.png (default: the last)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    try:
        import fedsec.learning.torch_net  # noqa: F401  (training needs PyTorch)
        from fedsec.pfl.robust import load_byzfl
        from fedsec.pfl.simulate import run_pfl
    except ModuleNotFoundError as exc:
        raise ValueError(f"fedsec pfl trains models with PyTorch and compares with byzfl; "
                         f"{exc.name} is missing: pip install 'fedsec[learning]'") from None
    from fedsec.pfl.balance import BalanceConfig

    _check_secure_options(args)
    if any(m in ("trimmed-mean", "krum", "median") for m in args.method):
        load_byzfl()
    if args.graph_round is not None and args.graph_round > args.rounds:
        raise ValueError(f"--graph-round must be <= --rounds ({args.rounds}); "
                         f"got {args.graph_round}")
    if args.plot is not None and args.plot.exists() and not args.plot.is_dir():
        raise ValueError(f"--plot must name a directory; {str(args.plot)!r} is a file")
    attacks = [None if a == "none" else a for a in args.attack]
    if any(a is not None for a in attacks) and round(args.malicious * args.clients) < 1:
        raise ValueError("an attack needs at least one malicious client: raise --malicious "
                         "or --clients")
    say = _progress(args.quiet or args.json)
    say(f"loading task {args.task}")
    task = make_task(args.task, n_samples=args.samples, layers=args.layers, seed=args.seed)
    fed = task.federate(args.clients, alpha=args.alpha, seed=args.seed)
    gammas = None
    if args.gamma_uniform is not None:
        lo, hi = args.gamma_uniform
        if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi):
            raise ValueError(f"--gamma-uniform needs 0 < LO <= HI; got {lo} {hi}")
        import numpy as np

        draw = np.random.default_rng(np.random.SeedSequence([args.seed, 0x6A77A]))
        gammas = tuple(float(g) for g in draw.uniform(lo, hi, size=args.clients))
    cfg = BalanceConfig(gamma=args.gamma, kappa=args.kappa, alpha=args.balance_alpha,
                        gammas=gammas)
    if args.secure:
        return _run_secure(args, task, fed, cfg, attacks, say)
    runs = []
    for attack in attacks:
        for method in args.method:
            say(f"{method} under {attack or 'no attack'}")
            runs.append(run_pfl(task, fed, method=method, rounds=args.rounds, attack=attack,
                                malicious=args.malicious, config=cfg,
                                deployment=args.deployment, selection=args.selection,
                                graph_p=args.graph_p, seed=args.seed,
                                progress=lambda m: say(f"  {m}")))
    doc: dict[str, Any] = {
        "task": args.task, "model": task.spec.description, "params": task.spec.n_params(),
        "data": task.data.description, "clients": args.clients, "rounds": args.rounds,
        "dirichlet_alpha": args.alpha, "malicious_share": args.malicious,
        "malicious": list(runs[0].malicious), "deployment": args.deployment,
        "selection": args.selection, "balance": cfg.to_dict(), "seed": args.seed,
        "test_samples": [len(c.y_test) for c in fed.clients],
        "runs": [r.to_dict() for r in runs],
    }
    _finish(args, doc)
    return 0


_SECURE_ONLY = ("sign_alpha", "comparison", "norm_factor", "norm_bound", "preset",
                "unclipped_attackers", "no_compare")


def _check_secure_options(args: argparse.Namespace) -> None:
    """Refuse options that do not apply to the chosen mode (plaintext or ``--secure``)."""
    if not args.secure:
        for name in _SECURE_ONLY:
            if getattr(args, name) not in (None, False):
                raise ValueError(f"--{name.replace('_', '-')} applies to --secure only")
        return
    if args.method != ["balance"]:
        raise ValueError(f"--secure runs BALANCE only; got --method {','.join(args.method)}")
    if args.deployment != "server":
        raise ValueError(f"--secure runs server-assisted BALANCE only; got --deployment "
                         f"{args.deployment}")
    if args.selection != "efficient":
        raise ValueError("--secure selects with Algorithm 1 (--selection efficient); got "
                         f"--selection {args.selection}")
    if args.comparison == "blinded" and args.sign_alpha is not None:
        raise ValueError("--sign-alpha sets the sign polynomial's precision; the blinded "
                         "comparison has none (drop one of --sign-alpha, --comparison blinded)")
    if args.unclipped_attackers and round(args.malicious * args.clients) < 1:
        raise ValueError("--unclipped-attackers needs malicious clients: raise --malicious "
                         "or --clients")


def _make_secure_config(args: argparse.Namespace) -> Any:
    """The protocol's configuration from the options (128-bit presets only)."""
    from fedsec.pfl.secure import SecurePFLConfig

    return SecurePFLConfig(preset=args.preset or PFL_PRESET,
                           sign_alpha=args.sign_alpha if args.sign_alpha is not None else 8,
                           comparison=args.comparison or "polynomial")


def _run_secure(args: argparse.Namespace, task: Any, fed: Any, cfg: Any,
                attacks: list[str | None], say: Callable[[str], None]) -> int:
    import time

    from fedsec.pfl.secure import SecurePFLSession
    from fedsec.pfl.secure_sim import SecurePFLRun, attacker_roles, run_secure_pfl

    scfg = _make_secure_config(args)
    say(f"key set-up for {args.clients} clients ({scfg.preset}, sign alpha "
        f"{scfg.sign_alpha})")
    t0 = time.perf_counter()
    session = SecurePFLSession.create(
        args.clients, scfg, clients=attacker_roles(
            args.clients, args.malicious, args.seed,
            unclipped_attackers=bool(args.unclipped_attackers)))
    setup_s = time.perf_counter() - t0
    say(f"key set-up done in {setup_s:.1f}s")
    results: list[SecurePFLRun] = []
    for attack in attacks:
        say(f"secure BALANCE under {attack or 'no attack'}")
        r = run_secure_pfl(task, fed, rounds=args.rounds, attack=attack,
                           malicious=args.malicious, balance=cfg, config=scfg,
                           norm_factor=args.norm_factor if args.norm_factor is not None
                           else 1.25, norm_bound=args.norm_bound,
                           unclipped_attackers=args.unclipped_attackers,
                           compare=not args.no_compare, seed=args.seed, session=session,
                           first_round=results[-1].next_round if results else 0,
                           progress=lambda m: say(f"  {m}"))
        r.key_setup_seconds = setup_s
        results.append(r)
    runs = []
    per_attack = []
    for r in results:
        d = r.to_dict()
        runs.append(d.pop("run"))
        plain = d.pop("plaintext")
        if plain is not None:
            runs.append(plain)
        d["attack"] = r.run.attack
        d.pop("secure")
        d.pop("key_setup_bytes")
        d.pop("key_setup_seconds")
        per_attack.append(d)
    doc: dict[str, Any] = {
        "task": args.task, "model": task.spec.description, "params": task.spec.n_params(),
        "data": task.data.description, "clients": args.clients, "rounds": args.rounds,
        "dirichlet_alpha": args.alpha, "malicious_share": args.malicious,
        "malicious": list(results[0].run.malicious), "deployment": "server",
        "selection": "efficient", "balance": cfg.to_dict(), "seed": args.seed,
        "test_samples": [len(c.y_test) for c in fed.clients], "runs": runs,
        "secure": {**results[0].secure, "norm_factor": results[0].clipping.factor,
                   "norm_bound": results[0].clipping.bound,
                   "norm_bound_public": True,
                   "unclipped_attackers": bool(args.unclipped_attackers),
                   "compare": not args.no_compare,
                   "key_setup_seconds": setup_s,
                   "key_setup_bytes": results[0].key_setup_bytes,
                   "attacks": per_attack},
    }
    _finish(args, doc)
    return 0


def _finish(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    if args.plot is not None:
        args.plot.mkdir(parents=True, exist_ok=True)
        acc_path = args.plot / "accuracy.png"
        plot_accuracy(doc["runs"], acc_path, title=f"{args.task}, K={args.clients}, "
                      f"{round(args.malicious * 100)} % malicious, Dirichlet({args.alpha})")
        doc["plots"] = [str(acc_path)]
        bal = [r for r in doc["runs"] if r["method"] in ("balance-secure", "balance")]
        if bal:
            t = (args.graph_round or args.rounds) - 1
            graph_path = args.plot / "acceptance.png"
            plot_acceptance(bal[0]["accepted"][t], bal[0]["malicious"], graph_path,
                            title=f"BALANCE, {bal[0]['attack']}: who accepts whom, "
                                  f"round {t + 1}")
            doc["plots"].append(str(graph_path))
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        _print_human(doc)
        if "secure" in doc:
            _print_secure(doc)


def _mb(v: float) -> str:
    return f"{v / 1e6:.2f} MB" if v == v else "-"


def _print_secure(doc: dict[str, Any]) -> None:
    sec = doc["secure"]
    print()
    bound = (f"fixed {sec['norm_bound']:g}" if sec["norm_bound"] is not None
             else f"{sec['norm_factor']:g} x median of the published norms")
    how = (f"blinded comparison (band 2^{sec.get('band_log2'):g})"
           if sec.get("comparison") == "blinded" else f"sign alpha {sec.get('sign_alpha')}")
    print(f"encrypted BALANCE: {sec.get('preset')}, {how}, "
          f"public norm bound {bound}"
          + ("; malicious clients send unclipped models" if sec["unclipped_attackers"]
             else ""))
    keys = sec["key_setup_bytes"]
    print(f"key set-up: {sec['key_setup_seconds']:.1f}s; "
          + ", ".join(f"{k} {v}" if "count" in k else f"{k} {_mb(float(v))}"
                      for k, v in keys.items()))
    if sec["compare"]:
        print()
        print(f"{'attack':>13} {'pairs':>7} {'differ':>7} {'in band':>8} {'outside':>8} "
              f"{'invalid':>8} {'valid≠rule':>10} {'Eq.2 noise':>11} {'secure acc':>13} "
              f"{'plain acc':>13}")
        for a in sec["attacks"]:
            ag, acc = a["agreement"], a["accuracy"]
            invalid = sorted({i for d in a["rounds_detail"] for i in d["invalid"]})
            print(f"{a['attack']:>13} {ag['pairs']:>7} {ag['differing']:>7} "
                  f"{ag['in_band']:>8} {ag['outside_band']:>8} "
                  f"{(','.join(map(str, invalid)) or '-'):>8} {ag['valid_mismatch']:>10} "
                  f"{ag['eq2_noise']:>11.1e} "
                  f"{_fmt(acc['secure_mean'])} / {_fmt(acc['secure_worst'])} "
                  f"{_fmt(acc['plaintext_mean'])} / {_fmt(acc['plaintext_worst'])}")
        print()
        print(f"pairs: ordered pairs compared over all rounds; differ: decided differently "
              f"from the exact plaintext selection on the same uploads; in band: of those, "
              f"|margin| < 2^{sec.get('band_log2'):g} of the comparison's scale (allowed); "
              f"outside: the others (must be 0); invalid: clients refused for their norm; "
              f"valid≠rule: validity differing from the norm rule; Eq.2 noise: largest "
              f"|decrypted - plaintext| personalised weight; acc: benign mean / worst after "
              f"the last round, encrypted vs plaintext BALANCE with the same seeds and "
              f"clipping")
    print()
    print(f"{'attack':>13} {'round s':>8} {'distances':>10} {'comparison':>11} "
          f"{'aggregation':>12} {'up/client':>10} {'down/client':>12} {'server in':>10}")
    for a in sec["attacks"]:
        sp, by = a["seconds_split"], a["bytes_per_client"]
        n = max(len(a["rounds_detail"]), 1)
        print(f"{a['attack']:>13} {sp.get('total', math.nan) / n:>8.1f} "
              f"{sp.get('distances', math.nan) / n:>10.1f} "
              f"{sp.get('comparison', math.nan) / n:>11.1f} "
              f"{sp.get('aggregation', math.nan) / n:>12.1f} {_mb(by['up']):>10} "
              f"{_mb(by['down']):>12} {_mb(by['server_in']):>10}")
    print("per round (mean over rounds); bytes: serialized messages a client sent / received "
          "per round, and all bytes the server received")


def _gamma_text(balance: dict[str, Any]) -> str:
    g = balance["gammas"]
    if g:
        return f"per client in [{min(g):.3f}, {max(g):.3f}]"
    return str(balance["gamma"])


def _fmt(v: float | None) -> str:
    return "-" if v is None or v != v else f"{v:.3f}"


def _print_human(doc: dict[str, Any]) -> None:
    print(f"task {doc['task']}: {doc['model']} ({doc['params']:,} parameters); "
          f"data: {doc['data']}")
    print(f"{doc['clients']} clients ({len(doc['malicious'])} malicious: "
          f"{doc['malicious']}), {doc['rounds']} rounds, Dirichlet({doc['dirichlet_alpha']}); "
          f"BALANCE gamma={_gamma_text(doc['balance'])}, kappa={doc['balance']['kappa']}, "
          f"alpha={doc['balance']['alpha']}, {doc['deployment']} deployment"
          + (f", {doc['selection']} selection" if doc["deployment"] == "server" else ""))
    print()
    print(f"{'attack':>13} {'method':>13} {'benign mean':>12} {'worst':>7} "
          f"{'mal. accepted':>14} {'checks/round':>13} {'time':>7}")
    for r in doc["runs"]:
        bad = "-"
        if r["method"] in ("balance", "balance-secure") and r["malicious"] and r["accepted"]:
            sets = r["accepted"][-1]
            benign = [i for i in range(r["n_clients"]) if i not in r["malicious"]]
            hits = sum(1 for i in benign for j in r["malicious"] if j in sets[i])
            bad = f"{100 * hits / (len(benign) * len(r['malicious'])):.0f} %"
        checks = "-"
        if r["checks"]:
            checks = f"{sum(r['checks']) / len(r['checks']):.0f}/{r['brute_checks'][0]}"
        print(f"{r['attack']:>13} {r['method']:>13} {_fmt(r['benign_mean'][-1]):>12} "
              f"{_fmt(r['benign_worst'][-1]):>7} {bad:>14} {checks:>13} "
              f"{r['seconds']:>6.1f}s")
    print()
    print("benign mean and worst accuracy: over the benign clients, each on its own test "
          "data, after the last round; mal. accepted: share of (benign, malicious) pairs "
          "BALANCE accepted in the last round; checks: Ineq. 1 evaluations per round "
          "(mean) / brute force")
    for path in doc.get("plots", []):
        print(f"plot: {path}")


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ModuleNotFoundError:
        raise ValueError("--plot needs matplotlib: pip install 'fedsec[plots]'") from None
    return plt


def plot_accuracy(runs: list[dict[str, Any]], path: Path, *, title: str = "") -> None:
    """Benign clients' mean accuracy per round (line) and worst (dotted), one panel per
    method, one colour per attack (PNG)."""
    plt = _pyplot()
    methods = list(dict.fromkeys(r["method"] for r in runs))
    attacks = list(dict.fromkeys(r["attack"] for r in runs))
    fig, axes = plt.subplots(1, len(methods), figsize=(4.2 * len(methods), 3.8), sharey=True,
                             squeeze=False)
    colours = plt.get_cmap("tab10")
    for ax, m in zip(axes[0], methods, strict=True):
        for r in runs:
            if r["method"] != m:
                continue
            c = colours(attacks.index(r["attack"]) % 10)
            xs = list(range(1, len(r["benign_mean"]) + 1))
            ax.plot(xs, r["benign_mean"], color=c, marker="o", ms=3, label=r["attack"])
            ax.plot(xs, r["benign_worst"], color=c, ls=":", lw=1)
        ax.set_title(m)
        ax.set_xlabel("round")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("benign accuracy (mean; dotted: worst)")
    axes[0][-1].legend(fontsize=7, loc="lower right")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_acceptance(accepted: list[list[int]], malicious: list[int], path: Path, *,
                    title: str = "") -> None:
    """Directed acceptance graph of one round: an arrow i -> j when i accepts j; clients on
    a circle, malicious in red (PNG)."""
    plt = _pyplot()
    n = len(accepted)
    ang = [2 * math.pi * i / n for i in range(n)]
    xy = [(math.cos(a), math.sin(a)) for a in ang]
    bad = set(malicious)
    fig, ax = plt.subplots(figsize=(6, 6))
    for i, s in enumerate(accepted):
        for j in s:
            colour = "tab:red" if j in bad else "tab:blue"
            ax.annotate("", xy=xy[j], xytext=xy[i],
                        arrowprops={"arrowstyle": "->", "color": colour, "alpha": 0.25,
                                    "lw": 0.7, "shrinkA": 7, "shrinkB": 7})
    for i, (x, y) in enumerate(xy):
        ax.scatter([x], [y], s=160, color="tab:red" if i in bad else "tab:blue", zorder=3)
        ax.text(x, y, str(i), ha="center", va="center", fontsize=7, color="white", zorder=4)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title((title + "\n" if title else "") + "blue: benign, red: malicious; "
                 "arrow i→j: i accepts j", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
