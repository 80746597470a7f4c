"""Reproduce one paper's figures with one command.

Each of the five papers fedsec implements has one entry; an entry runs, one after the
other and as separate processes, the benchmark scripts that regenerate that paper's
tables next to ours, then says where the paper's numbers sit beside ours::

    python benchmarks/reproduce.py --list                 # what every entry runs
    python benchmarks/reproduce.py dpauc --quick          # minutes: small sizes
    python benchmarks/reproduce.py priv-pfl               # the sizes BENCHMARKS.md quotes
    python benchmarks/reproduce.py all --quick            # every paper, small sizes

``--quick`` picks each script's own small or smoke options and writes files (where a
script writes any) under a scratch folder, so that the measured results under
``benchmarks/results`` are left as they are. Without ``--quick`` the scripts run with the
options that produced the figures in BENCHMARKS.md and write into ``benchmarks/results``;
some of them run for an hour or more (the paper-size CNN of Zheng et al., the ten-attack
encrypted BALANCE run).

The scripts themselves are not changed by this runner: it only chooses their options.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"

ALL_ATTACKS = "none,gaussian,sign-flip,label-flip,alie,ipm,min-max,min-sum,trim,balance-edge"


@dataclass(frozen=True)
class Step:
    """One script run of an entry.

    ``full`` and ``quick`` are the script's arguments; ``{out}`` in them is replaced by the
    output folder of the run (``benchmarks/results`` for a full run, a scratch folder for a
    quick one, or ``--out``). ``beside`` says where the paper's numbers appear next to ours.
    """

    script: str
    full: tuple[str, ...]
    quick: tuple[str, ...]
    beside: str

    def argv(self, quick: bool, out: Path) -> list[str]:
        args = self.quick if quick else self.full
        return [f"benchmarks/{self.script}", *(a.replace("{out}", str(out)) for a in args)]


@dataclass(frozen=True)
class Paper:
    """A paper and the steps that regenerate its figures."""

    key: str
    title: str
    what: str
    steps: tuple[Step, ...] = field(default_factory=tuple)
    #: the paper's own headline figures, for entries whose scripts print ours only
    figures: str = ""


DPAUC_STEP = Step(
    "reproduce_dpauc.py", ("--out", "{out}"), ("--quick", "--out", "{out}"),
    "{out}/dpauc_report.md: every table with the paper's mean +- std beside ours "
    "(also printed above)")

PAPERS: dict[str, Paper] = {p.key: p for p in (
    Paper(
        "fhauc",
        "Baykara, Unal, Akgun: privacy-preserving model evaluation in FL via FHE "
        "(FHAUC, journal version)",
        "secure AUC, semi-honest and malicious aggregator; FHAUC against DPAUC (Tables I-II)",
        (
            Step("bench_fhauc.py", ("--reps", "5", "--json-out", "{out}/bench_fhauc.json"),
                 ("--quick", "--json-out", "{out}/bench_fhauc.json"),
                 "the printed table: ours against the papers' configuration rebuilt on "
                 "SEAL ('baseline' columns); BENCHMARKS.md, Secure AUC, quotes the paper's "
                 "own aggregator time and upload beside them"),
            Step("bench_malicious.py",
                 ("--parties", "100", "--decision-points", "100", "--reps", "3"),
                 ("--parties", "10", "--samples", "2000", "--reps", "1"),
                 "the printed ratio malicious / semi-honest; the paper's ratio is about "
                 "2.4x (BENCHMARKS.md, Secure AUC)"),
            Step("reproduce_fhauc_figures.py",
                 ("--reps", "3", "--out", "{out}/fhauc_figures.json"),
                 ("--quick", "--out", "{out}/fhauc_figures.json"),
                 "the printed Figs. 2-3 sweeps (both modes, S = 4) and Table III, each "
                 "beside the paper's numbers"),
            DPAUC_STEP,
        ),
        "100 parties, N = 100, OpenFHE on the authors' machine: aggregator 0.68 s "
        "(semi-honest) and 1.64 s (malicious); 6.81 MB (semi-honest) and 13.62 MB "
        "(malicious) of traffic per client (Table III)"),
    Paper(
        "fhauc-conference",
        "Baykara, Unal, Akgun: FHAUC (conference version)",
        "the (c, d) pair mask; the information leakage of DPAUC's counts (App. B.2, "
        "Table 2)",
        (
            Step("bench_precision.py",
                 ("--reps", "5", "--json-out", "{out}/bench_precision.json"),
                 ("--quick", "--json-out", "{out}/bench_precision.json"),
                 "the printed table: single mask against the (c, d) pair mask, relative "
                 "error against the plaintext trapezoid"),
            DPAUC_STEP,
        )),
    Paper(
        "dpauc",
        "Sun et al.: DPAUC",
        "DPAUC_Lap and DPAUC_RR, noisy scores, top-K label inference, non-IID splits "
        "(Tables 1-5)",
        (DPAUC_STEP,)),
    Paper(
        "zheng",
        "Zheng, Cao, Yoshikawa: Secure Shapley Value for Cross-Silo FL (PVLDB 2023)",
        "HESV, SecSV, SecretSV (Tables 2-4, Figs. 6-7), FSV estimators and SampleSkip in "
        "the clear (Table 3, Figs. 5 and 8)",
        (
            Step("reproduce_shapley.py",
                 ("--out", "{out}/reproduce_shapley"),
                 ("--quick", "--out", "{out}/reproduce_shapley"),
                 "{out}/reproduce_shapley.md: every table with the paper's figures in "
                 "each row (also printed above)"),
            Step("bench_shapley.py", ("--out", "{out}/bench_shapley.json"),
                 ("--quick", "--out", "{out}/bench_shapley.json"),
                 "{out}/bench_shapley.md: the estimators' errors with the paper's Table 3 "
                 "column"),
        )),
    Paper(
        "priv-pfl",
        "Aghabagherloo et al.: Priv-PFL",
        "BALANCE under attacks and Algorithm 1's checks (870 -> 298 at 30 clients), the "
        "CKKS sign, one encrypted round, encrypted BALANCE end to end",
        (
            Step("bench_pfl.py", ("--out", "{out}"), ("--quick",),
                 "the printed check counts: Algorithm 1's Ineq. 1 evaluations per round "
                 "against the brute force (paper: 870 -> 298 on average at 30 clients)"),
            Step("bench_sign.py",
                 ("--repeats", "3", "--naive", "--json", "{out}/bench_sign.json"),
                 ("--alphas", "8", "--repeats", "1"),
                 "the printed rows: depth, error and time of the composite sign "
                 "(the paper's App. A comparison)"),
            Step("bench_ppfl.py", ("--out", "{out}/bench_ppfl.json"), ("--quick",),
                 "the printed table: one encrypted selection + aggregation round per K "
                 "(the paper's setting: 30 clients)"),
            Step("bench_ppfl_e2e.py",
                 ("--task", "dnn", "--layers", "2", "--clients", "30", "--rounds", "10",
                  "--attacks", ALL_ATTACKS, "--out", "{out}"),
                 ("--quick",),
                 "the printed table: encrypted against plaintext BALANCE, pair by pair "
                 "(the paper reports no accuracies; see BENCHMARKS.md)"),
        ),
        "30 clients: Algorithm 1 needs 298 of the 870 brute-force comparisons on "
        "average; no accuracies and no timings of the encrypted protocol are reported"),
)}

CHOICES = [*PAPERS, "all"]


def _papers(name: str) -> list[Paper]:
    return list(PAPERS.values()) if name == "all" else [PAPERS[name]]


def _steps(papers: Sequence[Paper]) -> list[tuple[Paper, Step]]:
    """Steps in order, each script-and-arguments only once (``all`` shares DPAUC's run)."""
    seen: set[tuple[str, tuple[str, ...], tuple[str, ...]]] = set()
    out = []
    for paper in papers:
        for step in paper.steps:
            key = (step.script, step.full, step.quick)
            if key not in seen:
                seen.add(key)
                out.append((paper, step))
    return out


def _command(step: Step, quick: bool, out: Path) -> str:
    """The command line of one step as a user would type it from the repository root."""
    shown = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    return " ".join(["python", *step.argv(quick, shown)])


def listing(papers: Sequence[Paper], quick: bool, out: Path | None) -> str:
    """What each entry runs, as text (``--list``)."""
    lines = []
    for paper in papers:
        lines.append(f"{paper.key}: {paper.title}")
        lines.append(f"  reproduces: {paper.what}")
        for step in paper.steps:
            for mode in (("quick",) if quick else ("full", "quick")):
                folder = out or (_scratch(paper.key) if mode == "quick" else RESULTS)
                lines.append(f"  {mode + ':':7}{_command(step, mode == 'quick', folder)}")
            lines.append(f"         paper beside ours: "
                         f"{step.beside.replace('{out}', '<out>')}")
        if paper.figures:
            lines.append(f"  the paper's own figures: {paper.figures}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _scratch(key: str) -> Path:
    return Path(tempfile.gettempdir()) / "fedsec-reproduce" / key


def run(name: str, quick: bool, out: Path | None, dry_run: bool = False) -> int:
    """Run every step of the chosen entries; return 0 when all of them exited with 0."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])])
    results: list[tuple[Paper, Step, int, float, Path]] = []
    for paper, step in _steps(_papers(name)):
        folder = out or (_scratch(paper.key) if quick else RESULTS)
        argv = [sys.executable, *step.argv(quick, folder)]
        print(f"== {paper.key}: {_command(step, quick, folder)}", flush=True)
        if dry_run:
            continue
        folder.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        rc = subprocess.run(argv, cwd=ROOT, env=env, check=False).returncode
        took = time.perf_counter() - start
        results.append((paper, step, rc, took, folder))
        print(f"== {step.script}: exit {rc} after {took:.0f} s", flush=True)
    if dry_run:
        return 0
    print("\nWhere the papers' numbers sit beside ours:")
    for paper in _papers(name):
        if paper.figures:
            print(f"- {paper.key}, the paper's own figures: {paper.figures}")
    for paper, step, rc, took, folder in results:
        state = "ok" if rc == 0 else f"FAILED (exit {rc})"
        print(f"- {paper.key}, {step.script} [{state}, {took:.0f} s]: "
              f"{step.beside.replace('{out}', str(folder))}")
    return 0 if all(rc == 0 for _, _, rc, _, _ in results) else 1


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="reproduce.py",
        description="Run the benchmark scripts that regenerate one paper's figures, next "
                    "to the paper's own numbers.")
    ap.add_argument("paper", nargs="?", choices=CHOICES,
                    help="which paper: " + ", ".join(
                        f"{k} ({p.title.split(':')[0]})" for k, p in PAPERS.items())
                    + "; 'all' runs every one")
    ap.add_argument("--quick", action="store_true",
                    help="each script's small or smoke options (minutes per paper); files "
                         "go to a scratch folder, not benchmarks/results")
    ap.add_argument("--list", action="store_true",
                    help="print what each entry (or the one named) runs, and run nothing")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the commands in the order they would run, and run nothing")
    ap.add_argument("--out", type=Path, default=None,
                    help="folder for the scripts' output files (default: benchmarks/results "
                         "for a full run, a scratch folder under the system's temporary "
                         "folder with --quick)")
    args = ap.parse_args(argv)
    if args.list:
        papers = _papers(args.paper) if args.paper else list(PAPERS.values())
        sys.stdout.write(listing(papers, args.quick, args.out))
        return 0
    if args.paper is None:
        ap.error("name a paper (one of: " + ", ".join(CHOICES) + "), or use --list")
    return run(args.paper, args.quick, args.out, dry_run=args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
