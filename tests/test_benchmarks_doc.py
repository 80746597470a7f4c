"""BENCHMARKS.md stays a user document, and benchmarks/reproduce.py lists what it runs.

The document must carry no internal labels (issue numbers, seed numbers, commit ids,
branch names) and every table in it must be preceded, within its section, by a line naming
the command that regenerates it. The reproduction runner is checked through ``--list``,
``--dry-run`` and its argument errors only: nothing heavy runs here.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "BENCHMARKS.md"
RUNNER = ROOT / "benchmarks" / "reproduce.py"

#: A commit id as git prints it: 7 to 40 lowercase hex characters with at least one digit
#: and one letter (so that neither plain numbers nor words such as "defaced" count), not
#: part of a longer word, path, option or number.
COMMIT_ID = re.compile(
    r"(?<![\w./#@:-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w/@-])")
#: A line that names a command: a benchmark script, the fedsec command line, or pytest.
COMMAND = re.compile(r"python\S* (?:-m \S+ )?\S*benchmarks/\w+\.py|`fedsec [a-z]|pytest ")
HEADING = re.compile(r"#{1,6} ")
#: The section headings other pages link to; renaming one breaks their links.
STABLE_HEADINGS = (
    "## Quick answers", "## Reproducing the papers", "## Secure AUC", "## DPAUC",
    "## Shapley values in the clear", "## Secure Shapley values", "## BALANCE",
    "## Secure Priv-PFL", "## CKKS sign", "## Flower deployment", "## Security checks",
)


def prose(text: str) -> str:
    """The text without fenced code blocks and inline code spans."""
    text = re.sub(r"^```.*?^```[^\n]*$", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def tables_without_command(text: str) -> list[str]:
    """The first line of every table not preceded in its section by a command line."""
    missing = []
    since_heading: list[str] = []
    fence = in_table = False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and HEADING.match(line):
            since_heading = []
        starts_table = not fence and line.startswith("|") and not in_table
        if starts_table and not any(COMMAND.search(x) for x in since_heading):
            missing.append(line)
        in_table = not fence and line.startswith("|")
        since_heading.append(line)
    return missing


def slug(heading: str) -> str:
    """The anchor GitHub and mkdocs give a heading (for the plain headings used here)."""
    words = re.sub(r"[^\w\- ]", "", heading.lstrip("#").strip().lower())
    return words.replace(" ", "-")


@pytest.fixture(scope="module")
def doc() -> str:
    return DOC.read_text(encoding="utf-8")


# -- the checks themselves must catch what they are for ---------------------------------

def test_commit_id_pattern_finds_ids_and_spares_numbers_and_words() -> None:
    assert COMMIT_ID.findall("old = main at 539392a, new at c7ce1d2.") == ["539392a", "c7ce1d2"]
    assert COMMIT_ID.findall("a full id 0f9cc58f78f10291482b19ee55f7288236409128 here")
    spared = ("1,980 samples, 4.58e+05, 2.3e-06, 1e300, 2^20, x86_64, defaced, 1234567, "
              "CKKS_128_N8192_DEPTH1_S39, results/ab12cd3.json, #a1b2c3d4")
    assert COMMIT_ID.findall(spared) == []
    assert COMMIT_ID.findall(prose("run `git archive 98c6c52 | tar -x` first")) == []
    assert COMMIT_ID.findall(prose("```\ngit worktree add /tmp/x 231b2c0\n```\n")) == []


def test_table_check_needs_a_command_in_the_same_section() -> None:
    good = "## A\n\nCommand: `python benchmarks/bench_x.py --quick`\n\n| a |\n|---|\n| 1 |\n"
    assert tables_without_command(good) == []
    elsewhere = good + "\n## B\n\n| b |\n|---|\n| 2 |\n"
    assert tables_without_command(elsewhere) == ["| b |"]
    fenced = "## C\n\n```\npython benchmarks/bench_y.py\n```\n\n| c |\n|---|\n"
    assert tables_without_command(fenced) == []
    assert tables_without_command("## D\n\nNo command.\n\n| d |\n|---|\n") == ["| d |"]


# -- BENCHMARKS.md ---------------------------------------------------------------------

def test_no_issue_seed_or_branch_labels(doc: str) -> None:
    assert re.findall(r"\bissues? #?\d+", doc, flags=re.I) == []
    assert re.findall(r"\bseed 00\d", doc, flags=re.I) == []
    assert "branch" not in doc.lower()


def test_no_commit_ids_in_prose(doc: str) -> None:
    assert COMMIT_ID.findall(prose(doc)) == []


def test_every_table_names_the_command_that_regenerates_it(doc: str) -> None:
    assert doc.count("\n|---") + doc.count("\n| ---") >= 20  # the tables are still there
    assert tables_without_command(doc) == []


def test_every_table_row_has_the_header_s_number_of_cells(doc: str) -> None:
    tables: list[list[str]] = [[]]
    fence = False
    for line in doc.splitlines():
        if line.startswith("```"):
            fence = not fence
        if not fence and line.startswith("|"):
            tables[-1].append(line)
        elif tables[-1]:
            tables.append([])
    for table in filter(None, tables):
        cells = {len(re.findall(r"(?<!\\)\|", row)) for row in table}
        assert len(cells) == 1, table[0]


def test_stable_sections_and_their_contents_links(doc: str) -> None:
    lines = doc.splitlines()
    for heading in STABLE_HEADINGS:
        assert heading in lines, heading
    anchors = {slug(line) for line in lines if HEADING.match(line)}
    links = re.findall(r"\]\(#([^)]+)\)", doc)
    assert len(links) >= len(STABLE_HEADINGS)
    assert sorted(set(links) - anchors) == []


def test_relative_file_links_exist(doc: str) -> None:
    for target in re.findall(r"\]\((?!#|https?:)([^)#]+)", doc):
        assert (ROOT / target).exists(), target


def test_quick_run_times_are_filled_in(doc: str) -> None:
    assert re.findall(r"QUICK_[A-Z_]+", doc) == []


# -- benchmarks/reproduce.py -----------------------------------------------------------

@pytest.fixture(scope="module")
def runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fedsec_bench_reproduce", RUNNER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


PAPERS = {
    "fhauc": {"bench_fhauc.py", "bench_malicious.py", "reproduce_fhauc_figures.py",
              "reproduce_dpauc.py"},
    "fhauc-conference": {"bench_precision.py", "reproduce_dpauc.py"},
    "dpauc": {"reproduce_dpauc.py"},
    "zheng": {"reproduce_shapley.py", "bench_shapley.py"},
    "priv-pfl": {"bench_pfl.py", "bench_sign.py", "bench_ppfl.py", "bench_ppfl_e2e.py"},
}


def test_list_shows_every_paper_with_its_scripts(runner: ModuleType,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert runner.main(["--list"]) == 0
    out = capsys.readouterr().out
    blocks = dict(block.split(":", 1) for block in out.strip().split("\n\n"))
    assert set(blocks) == set(PAPERS)
    for key, scripts in PAPERS.items():
        named = set(re.findall(r"benchmarks/(\w+\.py)", blocks[key]))
        assert named == scripts, key
        assert blocks[key].count("  full:  python benchmarks/") == len(scripts)
        assert blocks[key].count("  quick: python benchmarks/") == len(scripts)
        assert blocks[key].count("paper beside ours:") == len(scripts)


def test_list_of_one_paper_and_quick_only(runner: ModuleType,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert runner.main(["priv-pfl", "--list", "--quick"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("priv-pfl: ") and "zheng" not in out
    assert "full:" not in out and out.count("quick: python benchmarks/") == 4
    assert "bench_ppfl_e2e.py --quick" in out


def test_quick_runs_leave_the_measured_results_alone(runner: ModuleType) -> None:
    for paper in runner.PAPERS.values():
        for step in paper.steps:
            quick = " ".join(step.argv(True, runner._scratch(paper.key)))
            assert "benchmarks/results" not in quick
            assert str(runner._scratch(paper.key)) in quick or "{out}" not in " ".join(
                step.quick)


def test_every_option_is_one_the_script_defines(runner: ModuleType) -> None:
    for paper in runner.PAPERS.values():
        for step in paper.steps:
            source = (ROOT / "benchmarks" / step.script).read_text(encoding="utf-8")
            for option in {a for a in (*step.full, *step.quick) if a.startswith("--")}:
                assert f'"{option}"' in source, (step.script, option)


def test_dry_run_prints_the_commands_once_each(runner: ModuleType,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert runner.main(["all", "--quick", "--dry-run"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("== ")]
    assert sum("reproduce_dpauc.py" in x for x in lines) == 1  # shared by three papers
    assert len(lines) == len(set().union(*PAPERS.values())) == 11
    assert all(" --quick" in x or "bench_sign.py --alphas 8" in x
               or "bench_malicious.py --parties 10" in x for x in lines)


@pytest.mark.parametrize(("argv", "message"), [
    ([], "name a paper"),
    (["nope"], "invalid choice: 'nope'"),
    (["dpauc", "--frobnicate"], "unrecognized arguments: --frobnicate"),
])
def test_argument_errors(runner: ModuleType, capsys: pytest.CaptureFixture[str],
                         argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as exc:
        runner.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_every_option_has_help(runner: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        runner.main(["--help"])
    out = capsys.readouterr().out
    flat = " ".join(out.split())
    for option, words in (("--quick", "small or smoke options"), ("--list", "run nothing"),
                          ("--dry-run", "print the commands"), ("--out", "output files")):
        assert option in flat and words in flat, option
    assert "Zheng" in out and "Sun et al." in out


def test_command_line_entry_point() -> None:
    done = subprocess.run([sys.executable, str(RUNNER), "dpauc", "--list"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("dpauc: Sun et al.: DPAUC")


def test_benchmarks_readme_names_every_script() -> None:
    readme = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
    scripts = {p.name for p in (ROOT / "benchmarks").glob("*.py")}
    unlisted = sorted(s for s in scripts if s not in readme)
    assert scripts and unlisted == [], f"add {unlisted} to the table in benchmarks/README.md"
